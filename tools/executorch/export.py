"""
A checkpoint -> an ExecuTorch program (.pte, XNNPACK delegate) with two methods over a static KV cache, and its
tokenizer beside it:

    python -m tools.executorch.export --out_dir=out --pte=model.pte              # fp32
    python -m tools.executorch.export --out_dir=out --pte=model8.pte --quantize=8da8w     # or 8da4w
    python -m tools.executorch.run --pte=model.pte --start="War is "             # generate with the runtime only

  prefill(tokens (1, T))            -> logits (1, T, V)   a new sequence at positions 0..T-1 (T = 1..block_size)
  decode(token (1, 1), pos (1,))    -> logits (1, 1, V)   one more token at position pos
  max_len(), vocab_size(), eot_token()                    constants the runner reads (eot -1: none)

The cache (keys/values of every attention application, cgpt's convolution window) is a set of buffers that both
methods share (ExecuTorch's share_mutable_buffers): prefill fills it, decode reads and extends it. Every technique
of model.py goes through: pgpt (all branches, or --keep_heaviest_branch), lgpt, cgpt with any kernel (its last
kernel-1 inputs are cache state), layer sharing, ShishuLM, enhanced residual, factorized embeddings, GQA. Deep
Thinking is refused (see refuse_unsupported). ExportCache implements model.py's cache interface.

--quantize=8da8w (torchao, lowered to XNNPACK's dynamically quantized kernels): int8 weights per output channel for
every Linear, activations quantized to int8 per token at run time. --quantize=8da4w: int4 weights in groups of 32
inputs (bfloat16 scales, XNNPACK's blockwise format), the same activations. Embeddings (a factorized one's
projection too), a tied head and cgpt's Conv1d stay fp32. Where the time of a decode step goes: python -m tools.executorch.profile (results/device/profile.md).
"""
import json
import os
import struct
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from tools.fast_sample import Slot
from tools.executorch.run import EXTENDED_HEADER_END, tokenizer_path, vocabulary_id   # the pair's rules, the runner's
from tools.support import refuse_undeclared
from safety_net.configurator import UserError, run_command

DEFAULTS = dict(
    out_dir="",             # directory with ckpt.pt / last.pt, or a checkpoint file; "" = the newest out*/ folder
    data_dir="",            # dataset folder whose meta.json gives the tokenizer; "" = the one the checkpoint records
    pte="model.pte",        # the program to write; the tokenizer goes beside it as <name>.tokenizer.json
    quantize="none",        # none | 8da8w | 8da4w (8- or 4-bit weights, dynamically quantized int8 activations)
    keep_heaviest_branch=False,  # pgpt: export only the heaviest branch (paper 004's inference)
    num_threads=0,          # CPU threads for torch while exporting; 0 = torch's default
)
QUANTIZE = ("none", "8da8w", "8da4w")
GROUP_SIZE = 32   # 8da4w: inputs per int4 scale, as MobileLLM-Pro's CPU checkpoints (int4 weights in groups of 32,
                  # int8 dynamic activations: its Hugging Face model card, facebook/MobileLLM-Pro)


# --- the static cache, as module buffers, with ExecuTorch's LLM attention ------------------------------------
# model.py's cache interface (KVCache's docstring): attend(slot, q, k, v) stores this call's keys and values and
# returns the attention, so the cache chooses how attention reads it. Here that is ExecuTorch's own pair for LLM
# decoding (extension/llm/custom_ops, the kernels its llama export uses): llama::update_cache writes k, v into the
# slot's buffers in place, llama::custom_sdpa attends over the filled positions only (0 .. start+T-1, causal),
# both on (B, T, H, D) tensors, sequence before heads, and GQA. torch.export needs the state it mutates to be
# buffers of the exported module, and a runner is simpler when it passes the position: every tensor is a
# registered buffer, the position an input of each method.

class ExportCache(nn.Module):
    """Keys/values of every attention application and cgpt's conv windows, buffers of fixed size. A buffer is
    registered the first time a slot is used (a warm-up call before export), so exactly the slots the model
    reads exist: one per (branch, layer) application, shared layers included."""
    length = 0   # model.py's block_size check sees only the new tokens; the runner keeps the window

    def __init__(self, max_len):
        super().__init__()
        import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401  (registers torch.ops.llama)
        self.max_len = max_len
        self.start = None         # the position of this call's first token: a (1,) tensor and an int (start_pos),
        self.start_pos = 0        # set by Prefill / Decode (ExecuTorch's cache ops take the int)
        self.new_sequence = True  # prefill: cgpt's window starts from zeros (nothing before position 0)

    def __getitem__(self, key):
        return Slot(self, key)

    def positions(self, length, device):
        return self.start + torch.arange(length, device=device)

    def attend(self, slot, q, k, v):
        """Write k, v (B, H_kv, T, D) at positions start.. of the slot's buffers (B, max_len, H_kv, D) and return
        the attention (B, H, T, D) of q over positions 0 .. start+T-1, causal among the new ones."""
        name = f"kv_{'_'.join(map(str, slot))}"
        if not hasattr(self, f"{name}_k"):
            shape = (k.size(0), self.max_len, k.size(1), k.size(3))
            self.register_buffer(f"{name}_k", k.new_zeros(shape))
            self.register_buffer(f"{name}_v", v.new_zeros(shape))
        keys, values = getattr(self, f"{name}_k"), getattr(self, f"{name}_v")
        torch.ops.llama.update_cache(k.transpose(1, 2), keys, self.start_pos)
        torch.ops.llama.update_cache(v.transpose(1, 2), values, self.start_pos)
        y = torch.ops.llama.custom_sdpa(q.transpose(1, 2), keys, values, self.start_pos, None, 0.0, True)
        return y.transpose(1, 2)

    def conv_window(self, slot, x, n_past):
        """cgpt's causal Conv1d: x preceded by the last n_past inputs (zeros for a new sequence); keeps its last
        n_past inputs for the next call, in place."""
        name = f"conv_{'_'.join(map(str, slot))}"
        if not hasattr(self, name):
            self.register_buffer(name, x.new_zeros(x.size(0), n_past, x.size(2)))
        past = getattr(self, name)
        window = torch.cat([torch.zeros_like(past) if self.new_sequence else past, x], dim=1)
        past.copy_(window[:, window.size(1) - n_past:])
        return window

    def advance(self, n):
        pass   # the runner keeps the position (and starts a new sequence with prefill: no reset)


class Prefill(nn.Module):
    """Method `prefill`: a new sequence of T tokens at positions 0..T-1; logits at every position."""

    def __init__(self, model, cache):
        super().__init__()
        self.model, self.cache = model, cache

    def forward(self, tokens):
        self.cache.start = torch.zeros(1, dtype=torch.long)
        self.cache.start_pos = 0
        self.cache.new_sequence = True
        return self.model(tokens, cache=self.cache, all_logits=True)[0]


class Decode(nn.Module):
    """Method `decode`: one more token at position `pos` (a (1,) tensor); its logits (1, 1, V)."""

    def __init__(self, model, cache):
        super().__init__()
        self.model, self.cache = model, cache

    def forward(self, token, pos):
        start = pos[0].item()   # a symbolic int in the program, bounded so the cache ops' writes stay inside
        torch._check(start >= 0)
        torch._check(start < self.cache.max_len)
        self.cache.start = pos
        self.cache.start_pos = start
        self.cache.new_sequence = False
        return self.model(token, cache=self.cache)[0]


# --- the same model in the operators XNNPACK takes --------------------------------------------------------------
# A norm or a tied head that XNNPACK does not take runs as an ExecuTorch kernel between two delegate calls, and
# every such break costs a call. XNNPACK's mean reduces only the two innermost dims of a 4-D tensor, so RMSNorm's and
# LayerNorm's mean over C is taken over (1, C); the tied head `h @ W.t()` (model.py) is a matmul with a transposed
# table, which XNNPACK transposes in full every step and then leaves to a slow generic kernel ("Expected weight
# to be a static param"), while F.linear(h, W) is one delegated fully-connected layer; a split between two delegated
# operators is taken as slices (SPLITS_AS_SLICES, applied to the exported programs). Same arithmetic.

class XnnpackNorm(nn.Module):
    """nn.RMSNorm or nn.LayerNorm over the last dim, with the same weight, bias and eps."""

    def __init__(self, norm):
        super().__init__()
        self.rms = isinstance(norm, nn.RMSNorm)
        self.eps = norm.eps
        self.weight = norm.weight
        self.bias = None if self.rms else norm.bias

    def forward(self, x):
        x4 = x.reshape(*x.shape[:-1], 1, x.size(-1))   # (..., 1, C): XNNPACK's mean over (1, C)
        if not self.rms:
            x4 = x4 - x4.mean((-2, -1), keepdim=True)
        y = x4 * torch.rsqrt((x4 * x4).mean((-2, -1), keepdim=True) + self.eps)
        y = y.reshape(x.shape)
        if self.weight is not None:
            y = y * self.weight
        return y if self.bias is None else y + self.bias


class XnnpackEmbedding(nn.Module):
    """model.py's TokenEmbedding (kept inside: the same weights and forward) whose tied head is F.linear on the
    table instead of h @ W.t()."""

    def __init__(self, embedding):
        super().__init__()
        self.embedding = embedding

    def forward(self, idx):
        return self.embedding(idx)

    def tied_logits(self, h):
        if self.embedding.proj is not None:
            h = h @ self.embedding.proj.weight
        return F.linear(h, self.embedding.wte.weight)


def slices(x, sizes, dim=0):
    """aten.split_with_sizes as slice copies. XNNPACK takes slices, not split, and a split between two delegated
    operators (q, k, v out of one projection; RoPE's two halves) cuts the delegate call there in two."""
    out = []
    start = 0
    for n in sizes:
        out.append(torch.ops.aten.slice_copy.Tensor(x, dim, start, start + n))
        start += n
    return out


def even_slices(x, size, dim=0):
    """aten.split.Tensor (pieces of `size`, e.g. chunk's) as slice copies."""
    n = x.size(dim)
    return slices(x, [min(size, n - start) for start in range(0, n, size)], dim)


SPLITS_AS_SLICES = {torch.ops.aten.split_with_sizes.default: slices, torch.ops.aten.split.Tensor: even_slices}


def for_xnnpack(model):
    """`model` with its norms and token embedding replaced, in place, by the modules above (the same weights)."""
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, (nn.RMSNorm, nn.LayerNorm)) and len(child.normalized_shape) == 1:
                setattr(parent, name, XnnpackNorm(child))
    model.tok_emb = XnnpackEmbedding(model.tok_emb)
    return model


def refuse_unsupported(config):
    """A one-line UserError for what a static-cache program cannot compute, or a field it does not know."""
    refuse_undeclared(config, "executorch")
    if config.think_steps:
        raise UserError("Deep Thinking (think_steps > 0) is not exported: every token's test pass reads a memory "
                        "built over think_steps passes of the whole prefix, which a static cache does not hold "
                        "(fix: sample it with sample.py)")
    if config.block_size < 2:   # a traceback (a hunt)
        raise UserError("block_size=1 is not exported: the prefill method takes prompts of 1 to block_size tokens, "
                        "a dynamic length that torch.export traces with a prompt of 2 (fix: sample it with "
                        "sample.py or tools.fast_sample)")


def quantize_linears(model, quantize):
    """Every Linear of `model` but the token embedding's, in place, as torchao's dynamically quantized Linear (int8
    activations per token): 8da8w: int8 weights per output channel; 8da4w: int4 weights in groups of GROUP_SIZE
    inputs, one scale each, and int8 per channel for a Linear whose inputs do not split into such groups (named on
    stderr). A factorized embedding's projection stays fp32 with the table: the tied head multiplies by its weight
    as a matrix (h @ P), which a quantized weight does not support."""
    from torchao.quantization import Int8DynamicActivationIntxWeightConfig, quantize_
    from torchao.quantization.granularity import PerAxis, PerGroup
    per_channel = Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int8, weight_granularity=PerAxis(0))
    linears = {name: m for name, m in model.named_modules()
               if isinstance(m, nn.Linear) and not name.startswith("tok_emb.")}
    if quantize == "8da8w":
        quantize_(model, per_channel, filter_fn=NamedLinears(set(linears)))
        return
    grouped = {name for name, m in linears.items() if m.in_features % GROUP_SIZE == 0}
    rest = sorted(set(linears) - grouped)
    int4 = Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4, weight_granularity=PerGroup(GROUP_SIZE),
                                                 weight_scale_dtype=torch.bfloat16)
    quantize_(model, int4, filter_fn=NamedLinears(grouped))
    if rest:
        print(f"8da4w: {len(rest)} Linear(s) with inputs not a multiple of {GROUP_SIZE} stay 8-bit per channel: "
              f"{', '.join(rest)}", file=sys.stderr)
        quantize_(model, per_channel, filter_fn=NamedLinears(set(rest)))


class NamedLinears:
    """A quantize_ filter: the modules whose names are in `names`."""

    def __init__(self, names):
        self.names = names

    def __call__(self, module, name):
        return name in self.names


def program_bytes(model, quantize="none", eot_token=None, tokenizer_id=None):
    """The .pte of `model` (eval mode, fp32, on the CPU; changed in place: for_xnnpack, quantize_linears): its two
    methods lowered to XNNPACK, buffers shared. tokenizer_id (vocabulary_id of its tokenizer) becomes a constant
    the runner checks its tokenizer with."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower
    from executorch.exir.passes import MemoryPlanningPass
    from torch.export import Dim, export
    refuse_unsupported(model.config)
    for_xnnpack(model)
    if quantize != "none":
        quantize_linears(model, quantize)
    block_size = model.config.block_size
    cache = ExportCache(block_size)
    prefill, decode = Prefill(model, cache).eval(), Decode(model, cache).eval()
    with torch.no_grad():
        prefill(torch.zeros(1, 2, dtype=torch.long))   # registers every cache buffer the model uses
        length = Dim("T", min=1, max=block_size)
        programs = {"prefill": export(prefill, (torch.zeros(1, 2, dtype=torch.long),), dynamic_shapes=({1: length},)),
                    "decode": export(decode, (torch.zeros(1, 1, dtype=torch.long), torch.ones(1, dtype=torch.long)))}
    programs = {name: program.run_decompositions(SPLITS_AS_SLICES) for name, program in programs.items()}
    constants = {"max_len": block_size, "vocab_size": model.config.vocab_size,
                 "eot_token": -1 if eot_token is None else eot_token}
    if tokenizer_id is not None:
        constants["tokenizer_id"] = tokenizer_id
    edge = to_edge_transform_and_lower(programs, partitioner=[XnnpackPartitioner()], constant_methods=constants)
    planning = MemoryPlanningPass(alloc_graph_input=False, share_mutable_buffers=True)
    return edge.to_executorch(ExecutorchBackendConfig(memory_planning_pass=planning)).buffer


def run(cfg):
    from tokenizers import Tokenizer
    from safety_net.checkpoint import load_model
    from safety_net.fileio import atomic_path, check_not_a_folder, check_out_dir, check_own_file, unused_name
    from safety_net.runtime import check_num_threads
    if cfg["quantize"] not in QUANTIZE:
        raise UserError(f"--quantize must be one of {'|'.join(QUANTIZE)}, got {cfg['quantize']!r} "
                        f"(fix: e.g. --quantize=8da8w for 8-bit weights)")
    if not cfg["pte"].endswith(".pte"):
        raise UserError(f"--pte must name a .pte file, got {cfg['pte']!r} (fix: e.g. --pte=model.pte)")
    check_num_threads(cfg["num_threads"])
    if cfg["num_threads"]:
        torch.set_num_threads(cfg["num_threads"])
    check_not_a_folder(cfg["pte"], "model.pte", key="pte")
    check_out_dir(os.path.dirname(os.path.abspath(cfg["pte"])), key="pte")
    # the fix's example: a name whose tokenizer and program are both new
    example = unused_name(cfg["pte"].removesuffix(".pte"), ".pte", beside=".tokenizer.json")
    check_own_file(cfg["pte"], written_here, example, key="pte")
    check_own_file(tokenizer_path(cfg["pte"]), tokenizer_written_here, example, key="pte", beside=cfg["pte"])
    model, ckpt = load_model(cfg["out_dir"], "cpu")
    refuse_unsupported(model.config)
    tokenizer, eot = tokenizer_json(ckpt, cfg["data_dir"], model.config)
    note = model.keep_heaviest_branch() if cfg["keep_heaviest_branch"] else ""   # pgpt: a note for the user
    t0 = time.perf_counter()
    text = json.dumps(tokenizer, ensure_ascii=False)
    data = program_bytes(model, cfg["quantize"], eot, vocabulary_id(Tokenizer.from_str(text)))
    # the pair is replaced together or not at all: both files are written whole before either replaces its old
    # version (a kill between the two replaces leaves a pair the runner refuses: the tokenizer_id differs)
    with atomic_path(tokenizer_path(cfg["pte"])) as tokenizer_tmp, atomic_path(cfg["pte"]) as pte_tmp:
        with open(tokenizer_tmp, "w", encoding="utf-8") as f:
            f.write(text)
        with open(pte_tmp, "wb") as f:
            f.write(data)
    print(f"wrote {cfg['pte']} ({len(data) / 1e6:.2f} MB, {cfg['quantize']}, {time.perf_counter() - t0:.0f} s) "
          f"and {tokenizer_path(cfg['pte'])}" + (f"; {note}" if note else ""), file=sys.stderr)


def written_here(path):
    """Whether `path` is a program of this export, which --pte may replace (a damaged one too: the runner's fix is to
    export it again): an ExecuTorch program (ET.. at byte 4, the eh00 header) whose flatbuffer names our methods
    max_len and eot_token. Read, not loaded: the runtime aborts the process on some damaged files."""
    with open(path, "rb") as f:
        head = f.read(EXTENDED_HEADER_END)
        if len(head) < EXTENDED_HEADER_END or head[4:6] != b"ET" or head[8:12] != b"eh00":
            return False
        names = f.read(struct.unpack_from("<Q", head, 16)[0])   # the flatbuffer (its size), not the weights after it
    return b"max_len" in names and b"eot_token" in names


def tokenizer_written_here(path):
    """Whether `path`, a tokenizer beside a .pte, is this export's: the one of a program of this export (the pair)."""
    pte = path.removesuffix(".tokenizer.json") + ".pte"
    return os.path.isfile(pte) and written_here(pte)


def tokenizer_json(ckpt, data_dir, config):
    """(tokenizer.json object, eot id or None) of the dataset the checkpoint was trained on."""
    from tools.huggingface.convert import checkpoint_meta
    from tools.huggingface.tokenizer import tokenizer_files
    meta, source = checkpoint_meta(ckpt, data_dir)
    if meta is None:
        raise UserError(f"{ckpt['path']} records no dataset, so its tokenizer is unknown "
                        f"(fix: --data_dir=<the dataset folder it was trained on>)")
    files, eot = tokenizer_files(meta, config.vocab_size, config.block_size, source)   # one-line errors
    return files["tokenizer.json"], eot


def main(argv=None):
    return run_command(run, DEFAULTS, argv)


if __name__ == "__main__":
    main(sys.argv[1:])
