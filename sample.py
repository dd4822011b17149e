"""
Sample text from a trained checkpoint.

    python sample.py                            # the checkpoint train.py just wrote
    python sample.py --out_dir=out-shakespeare-char
    python sample.py --out_dir=out --start="ROMEO:" --num_samples=3 --max_new_tokens=200
    python sample.py --start=FILE:prompt.txt --temperature=0.7 --top_k=50 --seed=42
    python sample.py --no_kv_cache              # plain path: re-run the whole window every token
    python sample.py --keep_heaviest_branch     # pgpt: run only the branch with the largest weight
    python sample.py --compile                  # compiled decode step over a static KV cache (for long runs)
    python -m tools.huggingface.sample --init_from=DIR   # a Hugging Face model instead

Loads out_dir/ckpt.pt (the best validation loss; falls back to last.pt) or the .pt file given as
--out_dir, encodes --start with the tokenizer of the dataset the model was trained on, and prints
--num_samples samples, each beginning with the start text, separated by '---------------'.
The samples go to stdout; one line about what was loaded goes to stderr.

With the same --seed the KV-cache path and --no_kv_cache print the same text: model.generate feeds
both paths the same window and they draw from the same seeded torch.Generator.
"""

import gc
import math
import os
import sys
import time

import torch

from checkpoint import (autocast, busy_machine, check_num_threads, check_seed, keep_heaviest_branch, load_model, resolve_device,
                        resolve_dtype)
from configurator import UserError, run_command
from dataset import encode_start, load_tokenizer, render, resolve_data_dir
from model import InferenceCache, KVCache

DEFAULTS = dict(
    out_dir="",             # directory with ckpt.pt / last.pt, or a checkpoint file; "" = the out*/ folder
                            # with the newest checkpoint (the run train.py just finished)
    data_dir="",            # dataset folder with meta.json; "" = the one recorded in the checkpoint
    start="\n",             # prompt text, or FILE:path to read it from a file
    num_samples=10,
    max_new_tokens=500,
    temperature=0.8,        # 0 = greedy (argmax); < 1 sharper, > 1 more random
    top_k=200,              # sample among the k most likely tokens; 0 = the whole vocabulary
    seed=1337,
    device="auto",          # auto = cuda > mps > cpu
    dtype="auto",           # auto = bfloat16 on cuda if supported (else float16), float32 elsewhere
    num_threads=0,          # CPU threads for torch; 0 = torch's default. 1 when other jobs share the cores
    no_kv_cache=False,      # True: the plain path that re-runs the whole window for every token
    keep_heaviest_branch=False,  # pgpt: run only the heaviest branch (paper 004's inference)
    compile=False,          # compiled single-token step over a static KV cache (gpt-fast style: CUDA graphs on a
                            # GPU, inductor's C++ wrapper on a CPU); compiling takes ~20 s to a minute, so it pays
                            # off on long runs only (Deep Thinking: ignored)
)

# Boolean keys that may be given as a bare flag (`--no_kv_cache` means `--no_kv_cache=True`).
BOOL_FLAGS = ("no_kv_cache", "keep_heaviest_branch", "compile")
SEPARATOR = "---------------"
MIN_TEMPERATURE = 1e-6   # float32 logits / 1e-6 stay finite (|logit| < 1e32); float32 rounds 1e-300 itself to 0


def read_start(start):
    if start.startswith("FILE:"):
        path = start[len("FILE:"):]
        try:
            with open(path, encoding="utf-8") as f:
                return f.read()
        except (OSError, UnicodeDecodeError) as e:
            raise UserError(f"cannot read the start file '{path}': {e.strerror if isinstance(e, OSError) else e} "
                            f"(fix: --start=FILE:path must name a readable utf-8 text file)") from None
    return start


def check_temperature(temperature, key="temperature"):
    """UserError unless the sampling temperature is 0 (greedy) or a finite number >= MIN_TEMPERATURE: below it
    logits / temperature overflows to inf, and NaN or inf (a config file's float("nan"), or 1e999) made every
    probability NaN or equal, sampling garbage without a word. compare.py checks its sample_temperature here too."""
    if temperature < 0:
        raise UserError(f"--{key} must be >= 0, got {temperature:g} (fix: 0 means greedy)")
    if not math.isfinite(temperature):
        raise UserError(f"--{key}={temperature} is not a finite number (fix: e.g. --{key}=0.8, or 0 for greedy "
                        f"decoding)")
    if 0 < temperature < MIN_TEMPERATURE:   # logits / temperature would overflow to inf: NaN probabilities
        raise UserError(f"--{key}={temperature:g} is too small to divide the logits by (fix: --{key}=0 for greedy "
                        f"decoding, or {MIN_TEMPERATURE:g} or more)")


def check_options(cfg):
    """The sampling options, before anything is loaded; returns the device and the start text."""
    if cfg["num_samples"] < 1 or cfg["max_new_tokens"] < 0:
        raise UserError("--num_samples must be >= 1 and --max_new_tokens >= 0 (fix: e.g. --num_samples=1)")
    if cfg["temperature"] < 0 or cfg["top_k"] < 0:
        raise UserError("--temperature and --top_k must be >= 0 (fix: 0 means greedy / no top-k)")
    check_temperature(cfg["temperature"])
    check_seed(cfg["seed"])
    check_num_threads(cfg["num_threads"])
    if cfg["num_threads"] > 0:
        torch.set_num_threads(cfg["num_threads"])
    return str(resolve_device(cfg["device"])), read_start(cfg["start"])  # a bad prompt file fails before loading


def main(argv=None):
    return run_command(run, DEFAULTS, argv, BOOL_FLAGS)


def run(cfg):
    device, start_text = check_options(cfg)
    model, ckpt = load_model(cfg["out_dir"], device)
    data_dir = resolve_data_dir(ckpt, cfg["data_dir"])
    dataset = ckpt.get("dataset") or os.path.basename(os.path.normpath(data_dir))
    write_samples(model, load_tokenizer(data_dir, ckpt), start_text, cfg, device,
                  f"{ckpt['path']} (iter {ckpt.get('iter_num', '?')}", dataset)


def write_samples(model, tok, start_text, cfg, device, source, dataset):
    """Print cfg["num_samples"] samples of `model` after start_text (tools/huggingface/sample.py calls it too)."""
    dtype = getattr(torch, resolve_dtype(cfg["dtype"], device))
    start_ids = encode_start(tok, start_text, dataset)
    if max(start_ids) >= model.config.vocab_size:
        raise UserError(f"the prompt encodes to token id {max(start_ids)}, beyond the model's vocabulary of "
                        f"{model.config.vocab_size} (fix: use the tokenizer the model was trained with)")
    notes = [keep_heaviest_branch(model, cfg["keep_heaviest_branch"])]
    use_cache = not cfg["no_kv_cache"]
    compile_step = cfg["compile"] and use_cache and not model.config.think_steps
    if cfg["compile"] and not compile_step:
        notes.append("--compile ignored (it compiles the cached decode step; Deep Thinking and --no_kv_cache "
                     "decode without it)")
    notes.append(busy_machine(device))
    params = model.get_num_params(non_embedding=False)
    info = (f"sampling from {source}, {params / 1e6:.2f}M params) on {device}, "
            f"{str(dtype).replace('torch.', '')}, KV cache {'on' if use_cache else 'off'}")
    print("; ".join([info] + [n for n in notes if n]), file=sys.stderr)

    torch.manual_seed(cfg["seed"])
    generator = torch.Generator(device=device).manual_seed(cfg["seed"])
    x = torch.tensor(start_ids, dtype=torch.long, device=device)[None, :]
    top_k = cfg["top_k"] or None
    t0, n_new = time.perf_counter(), 0
    with torch.no_grad(), autocast(device, dtype):
        for _ in range(cfg["num_samples"]):
            y = generate(model, x, cfg["max_new_tokens"], temperature=cfg["temperature"], top_k=top_k,
                         use_kv_cache=use_cache, generator=generator, compile=compile_step)
            n_new += y.size(1) - x.size(1)
            print(render(tok, start_text, start_ids, y[0].tolist()))
            print(SEPARATOR, flush=True)
    dt = time.perf_counter() - t0
    print(f"{n_new} tokens in {dt:.2f}s ({n_new / max(dt, 1e-9):.1f} tokens/s)", file=sys.stderr)


# --- --compile: a static KV cache and a compiled decode step (gpt-fast style) -----------------------------
# model.py's cache grows with the sequence, so each decode step has other shapes and a compiled step would
# recompile. The static cache keeps every buffer at max_len and the position in a tensor: every step has the
# same shapes and no Python number changes, and torch.compile (with CUDA graphs on a GPU) reuses one graph.

def generate(model, idx, max_new_tokens, temperature=1.0, top_k=None, use_kv_cache=True, generator=None,
             compile=False):
    """model.generate, with compile=True: the single-token steps run compiled_decode_step over a static cache."""
    if not compile or not use_kv_cache:
        return model.generate(idx, max_new_tokens, temperature, top_k, use_kv_cache, generator)
    return model.generate(idx, max_new_tokens, temperature, top_k, True, generator,
                          cache=static_cache(model, idx.size(0)), step=compiled_decode_step(model))


class StaticKVCache(KVCache):
    """A KVCache written at the positions of a tensor; attention reads the whole buffer with a mask."""

    def allocate(self, k, v):
        super().allocate(k, v)
        _mark_static(self.k, self.v)

    def write(self, k, v, positions):
        """Write k, v at `positions` (a tensor) and return the whole buffers; the caller masks the slots not
        written yet. No shape and no Python number changes from one decode step to the next."""
        if self.k is None:
            self.allocate(k, v)
        self.k.index_copy_(2, positions, k)
        self.v.index_copy_(2, positions, v)
        return self.k, self.v


def _mark_static(*tensors):
    """Tell torch.compile (CUDA graphs) that these buffers keep their address from call to call."""
    for t in tensors:
        torch._dynamo.mark_static_address(t)


class StaticCache(InferenceCache):
    """InferenceCache with the position in a tensor (`position`, made on the model's device at the first
    forward) and buffers of fixed size, updated in place. `length` is not kept. Deep Thinking is not supported.
    `fresh` is True after a reset: the next compiled step checks dynamo's guards."""
    static = True

    def __init__(self, max_len):
        super().__init__(max_len)
        self.position, self.fresh = None, True

    def get(self, table, slot):
        if slot not in table:
            table[slot] = StaticKVCache(self.max_len)
        return table[slot]

    def conv_window(self, slot, x, n_past, start):
        """cgpt's causal Conv1d: x preceded by the last n_past inputs, kept in place (zeros before position 0)."""
        past = self.conv_tail.get(slot)
        if past is None:
            past = self.conv_tail[slot] = x.new_zeros(x.size(0), n_past, x.size(2))
            _mark_static(past)
        window = torch.cat([past, x], dim=1)
        past.copy_(window[:, window.size(1) - n_past:])
        return window

    def start_positions(self, length, device):
        """Positions of the next `length` tokens as a tensor (the position buffer is made on first use)."""
        if self.position is None:
            self.position = torch.zeros(1, dtype=torch.long, device=device)
            _mark_static(self.position)
        return self.position + torch.arange(length, device=device)

    def advance(self, n):
        self.position.add_(n)   # in place, inside the compiled step

    def reset(self):
        """Start a new sequence, keeping the buffers (the compiled step keeps its graph)."""
        self.fresh = True
        if self.position is not None:
            self.position.zero_()
            for tail in self.conv_tail.values():
                tail.zero_()   # cgpt's conv window: zeros before position 0


def static_cache(model, batch_size):
    """The model's reusable static cache (same buffers -> the compiled step is reused across generate calls
    without recompiling or re-recording). Kept on the model as `_static_cache`."""
    device = model.tok_emb.wte.weight.device
    autocast_dtype = torch.get_autocast_dtype(device.type) if torch.is_autocast_enabled(device.type) else None
    key = (batch_size, device, autocast_dtype)   # the buffers take the dtype of the keys: autocast's
    kept = getattr(model, "_static_cache", None)
    if kept is None or kept[0] != key:
        kept = model._static_cache = (key, StaticCache(model.config.block_size))
    return kept[1]


def compiled_decode_step(model, backend="inductor"):
    """model.decode_step through torch.compile, made once per model and kept on it as `_compiled_decode_step`.
    On a GPU inductor's "reduce-overhead" replays it as a CUDA graph. On the CPU its cpp_wrapper calls the
    kernels from C++ instead of a Python wrapper, and the per-call check of every input's size is left out
    (size_asserts: ~90 inputs, ~0.15 ms a step; dynamo's guards checked them on the first step).
    After the first step that follows each prime, dynamo's guards are skipped: the next steps are the same call
    on the same buffers, and checking again costs ~0.2 ms a step on a CPU."""
    if getattr(model, "_compiled_decode_step", None) is None:
        options = {}
        if backend == "inductor":
            cpu_options = {"cpp_wrapper": True, "size_asserts": False}
            options = dict(mode="reduce-overhead") if model.tok_emb.wte.weight.is_cuda else dict(options=cpu_options)
        step = torch.compile(model.decode_step, backend=backend, fullgraph=True, **options)

        def guarded_once(idx, cache):
            if cache.fresh:
                cache.fresh = False
                return step(idx, cache)
            with torch.compiler.set_stance(skip_guard_eval_unsafe=True):
                return step(idx, cache)
        model._compiled_decode_step = guarded_once
    return model._compiled_decode_step


if __name__ == "__main__":
    main(sys.argv[1:])
    # everything is written and closed: spare the exit its garbage collection over all of torch's objects, which
    # takes most of a second (results/README.md, "The whole process against nanoGPT")
    gc.freeze()
