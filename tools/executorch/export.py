"""
A checkpoint -> an ExecuTorch program (.pte, XNNPACK delegate) with two methods over a static KV cache, and its
tokenizer beside it:

    python -m tools.executorch.export --out_dir=out --pte=model.pte              # fp32
    python -m tools.executorch.export --out_dir=out --pte=model8.pte --quantize=8da8w
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
every Linear, activations quantized to int8 per token at run time. Embeddings, a tied head and cgpt's Conv1d stay
fp32.
"""
import hashlib
import json
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from configurator import UserError, run_command

DEFAULTS = dict(
    out_dir="",             # directory with ckpt.pt / last.pt, or a checkpoint file; "" = the newest out*/ folder
    data_dir="",            # dataset folder whose meta.json gives the tokenizer; "" = the one the checkpoint records
    pte="model.pte",        # the program to write; the tokenizer goes beside it as <name>.tokenizer.json
    quantize="none",        # none | 8da8w (8-bit weights and dynamically quantized activations)
    keep_heaviest_branch=False,  # pgpt: export only the heaviest branch (paper 004's inference)
    num_threads=0,          # CPU threads for torch while exporting; 0 = torch's default
)
BOOL_FLAGS = ("keep_heaviest_branch",)
QUANTIZE = ("none", "8da8w")


# --- the static cache, as module buffers --------------------------------------------------------------------
# model.py's cache interface (KVCache's docstring), as tools/fast_sample.py's StaticCache implements it:
# buffers of max_len positions written at the new positions, attention over all of them with a mask.
# torch.export needs the state it mutates to be buffers of the exported module, and a runner is simpler
# when it passes the position: here every tensor is a registered buffer, `start` an input of each method.

class ExportCache(nn.Module):
    """Keys/values of every attention application and cgpt's conv windows, buffers of fixed size. A buffer is
    registered the first time a slot is used (a warm-up call before export), so exactly the slots the model
    reads exist: one per (branch, layer) application, shared layers included."""
    length = 0   # model.py's block_size check sees only the new tokens; the runner keeps the window

    def __init__(self, max_len):
        super().__init__()
        self.max_len = max_len
        self.start = None         # the position of this call's first token (a (1,) tensor), set by Prefill / Decode
        self.new_sequence = True  # prefill: cgpt's window starts from zeros (nothing before position 0)
        self.new_positions = None  # of the current call, and its mask: positions() sets them
        self.mask = None

    def positions(self, length, device):
        """The positions of this call's tokens, and its (T, max_len) mask: the query at position p
        sees the slots <= p (later ones: an older, longer sequence's)."""
        self.new_positions = self.start + torch.arange(length, device=device)
        self.mask = torch.arange(self.max_len, device=device) <= self.new_positions[:, None]
        return self.new_positions

    def attend(self, slot, q, k, v):
        """Write k, v (B, H_kv, T, D) at the new positions of the slot's two buffers and attend over
        all max_len positions, the mask hiding those after the newest (an older sequence's, or empty)."""
        name = f"kv_{'_'.join(map(str, slot))}"
        if not hasattr(self, f"{name}_k"):
            shape = (k.size(0), k.size(1), self.max_len, k.size(3))
            self.register_buffer(f"{name}_k", k.new_zeros(shape))
            self.register_buffer(f"{name}_v", v.new_zeros(shape))
        keys, values = getattr(self, f"{name}_k"), getattr(self, f"{name}_v")
        keys.index_copy_(2, self.new_positions, k)
        values.index_copy_(2, self.new_positions, v)
        return F.scaled_dot_product_attention(q, keys, values, attn_mask=self.mask,
                                              enable_gqa=q.size(1) != k.size(1))

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
        self.cache.start, self.cache.new_sequence = torch.zeros(1, dtype=torch.long), True
        return self.model(tokens, cache=self.cache, all_logits=True)[0]


class Decode(nn.Module):
    """Method `decode`: one more token at position `pos` (a (1,) tensor); its logits (1, 1, V)."""

    def __init__(self, model, cache):
        super().__init__()
        self.model, self.cache = model, cache

    def forward(self, token, pos):
        self.cache.start, self.cache.new_sequence = pos, False
        return self.model(token, cache=self.cache)[0]


def refuse_unsupported(config):
    """A one-line UserError for what a static-cache program cannot compute."""
    if config.think_steps:
        raise UserError("Deep Thinking (think_steps > 0) is not exported: every token's test pass reads a memory "
                        "built over think_steps passes of the whole prefix, which a static cache does not hold "
                        "(fix: sample it with sample.py)")


def quantize_linears(model):
    """8da8w: torchao's int8 weights per output channel with int8 activations per token, for every Linear, in place."""
    from torchao.quantization import Int8DynamicActivationIntxWeightConfig, quantize_
    from torchao.quantization.granularity import PerAxis
    quantize_(model, Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int8, weight_granularity=PerAxis(0)))


def program_bytes(model, quantize="none", eot_token=None, tokenizer_id=None):
    """The .pte of `model` (eval mode, fp32, on the CPU): its two methods lowered to XNNPACK, buffers shared.
    tokenizer_id (vocabulary_id of its tokenizer) becomes a constant the runner checks its tokenizer with."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower
    from executorch.exir.passes import MemoryPlanningPass
    from torch.export import Dim, export
    refuse_unsupported(model.config)
    if quantize == "8da8w":
        quantize_linears(model)
    block_size = model.config.block_size
    cache = ExportCache(block_size)
    prefill, decode = Prefill(model, cache).eval(), Decode(model, cache).eval()
    with torch.no_grad():
        prefill(torch.zeros(1, 2, dtype=torch.long))   # registers every cache buffer the model uses
        length = Dim("T", min=1, max=block_size)
        programs = {"prefill": export(prefill, (torch.zeros(1, 2, dtype=torch.long),), dynamic_shapes=({1: length},)),
                    "decode": export(decode, (torch.zeros(1, 1, dtype=torch.long), torch.ones(1, dtype=torch.long)))}
    constants = {"max_len": block_size, "vocab_size": model.config.vocab_size,
                 "eot_token": -1 if eot_token is None else eot_token}
    if tokenizer_id is not None:
        constants["tokenizer_id"] = tokenizer_id
    edge = to_edge_transform_and_lower(programs, partitioner=[XnnpackPartitioner()], constant_methods=constants)
    planning = MemoryPlanningPass(alloc_graph_input=False, share_mutable_buffers=True)
    return edge.to_executorch(ExecutorchBackendConfig(memory_planning_pass=planning)).buffer


def vocabulary_id(tokenizer):
    """A 60-bit number of a tokenizer's vocabulary (every token and its id): the export stores it in the program as
    the constant tokenizer_id, and the runner compares it with the tokenizer it is given."""
    pairs = sorted((i, token) for token, i in tokenizer.get_vocab(with_added_tokens=True).items())
    return int(hashlib.sha256(json.dumps(pairs).encode("utf-8")).hexdigest()[:15], 16)


def tokenizer_path(pte):
    """model.pte -> model.tokenizer.json: the runner finds the tokenizer beside the program."""
    return os.path.splitext(pte)[0] + ".tokenizer.json"


def run(cfg):
    from tokenizers import Tokenizer
    from checkpoint import atomic_path, check_num_threads, check_out_dir, keep_heaviest_branch, load_model
    if cfg["quantize"] not in QUANTIZE:
        raise UserError(f"--quantize must be one of {'|'.join(QUANTIZE)}, got {cfg['quantize']!r} "
                        f"(fix: e.g. --quantize=8da8w for 8-bit weights)")
    if not cfg["pte"].endswith(".pte"):
        raise UserError(f"--pte must name a .pte file, got {cfg['pte']!r} (fix: e.g. --pte=model.pte)")
    check_num_threads(cfg["num_threads"])
    if cfg["num_threads"]:
        torch.set_num_threads(cfg["num_threads"])
    check_out_dir(os.path.dirname(os.path.abspath(cfg["pte"])), key="pte")
    model, ckpt = load_model(cfg["out_dir"], "cpu")
    refuse_unsupported(model.config)
    tokenizer, eot = tokenizer_json(ckpt, cfg["data_dir"], model.config)
    note = keep_heaviest_branch(model, cfg["keep_heaviest_branch"])
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
    return run_command(run, DEFAULTS, argv, BOOL_FLAGS)


if __name__ == "__main__":
    main(sys.argv[1:])
