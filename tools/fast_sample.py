"""
Sampling with a compiled decode step over a static KV cache (gpt-fast style): sample.py's options and output.

    python -m tools.fast_sample --out_dir=out --start="ROMEO:" --max_new_tokens=2000

model.py's cache grows with the sequence, so each decode step has other shapes and a compiled step would
recompile. The static cache keeps every buffer at max_len and the position in a tensor: every step has the
same shapes and no Python number changes, and torch.compile (CUDA graphs on a GPU, inductor's C++ wrapper on a
CPU) reuses one graph. Compiling takes ~20 s to a minute, so it pays off on long runs only. With the same
--seed it prints the text of `python sample.py` (tests/test_compile.py: the text with aot_eager, the greedy tokens
with inductor under -m slow). Deep Thinking (its memory is not in the static cache) and --no_kv_cache (nothing to
compile) are refused: use sample.py for them.
tools.bench --mode=decode --compile=True times it (tools/benchmarks/measure.py).
"""
import sys

import torch
import torch.nn.functional as F

import sample
from configurator import UserError, run_command


def generate(model, idx, max_new_tokens, temperature=1.0, top_k=None, use_kv_cache=True, generator=None,
             on_token=None):
    """model.generate whose single-token steps run compiled_decode_step over the model's static cache."""
    if not use_kv_cache:
        raise UserError("--no_kv_cache has no decode step to compile (fix: python sample.py --no_kv_cache)")
    if model.config.think_steps:
        raise UserError("the static cache does not hold Deep Thinking's memory (fix: python sample.py)")
    return model.generate(idx, max_new_tokens, temperature, top_k, True, generator,
                          cache=static_cache(model, idx.size(0)), step=compiled_decode_step(model),
                          on_token=on_token)


class StaticCache:
    """model.py's cache interface (KVCache's docstring) over buffers of fixed size, updated in place,
    with the position in a tensor (`position`, made on the model's device at the first forward).
    `length` stays 0: the model's block_size check sees only the new tokens, and generate keeps the
    window inside block_size. `fresh` is True after a reset: the next compiled step checks dynamo's
    guards. Deep Thinking is refused (its memory is not kept here)."""
    length = 0

    def __init__(self, config):
        if config.think_steps:
            raise ValueError("a static cache does not support Deep Thinking (fix: use model.new_cache())")
        self.max_len = config.block_size
        self.kv, self.conv_tail = {}, {}
        self.position, self.fresh = None, True
        self.new_positions = None   # of the current forward, and its mask: positions() sets them
        self.mask = None

    def positions(self, length, device):
        """Positions of the next `length` tokens as a tensor (the position buffer is made on first
        use), and this forward's (length, max_len) mask: the query at position p sees the slots <= p
        (later ones are not written yet)."""
        if self.position is None:
            self.position = torch.zeros(1, dtype=torch.long, device=device)
            _mark_static(self.position)
        self.new_positions = self.position + torch.arange(length, device=device)
        self.mask = torch.arange(self.max_len, device=device) <= self.new_positions[:, None]
        return self.new_positions

    def attend(self, slot, q, k, v):
        """Write k, v at the new positions and attend over the whole buffers, the mask hiding the
        slots not written yet. No shape and no Python number changes from one decode step to the next."""
        if slot not in self.kv:
            shape = (k.size(0), k.size(1), self.max_len, k.size(3))
            self.kv[slot] = (k.new_zeros(shape), v.new_zeros(shape))
            _mark_static(*self.kv[slot])
        keys, values = self.kv[slot]
        keys.index_copy_(2, self.new_positions, k)
        values.index_copy_(2, self.new_positions, v)
        return F.scaled_dot_product_attention(q, keys, values, attn_mask=self.mask,
                                              enable_gqa=q.size(1) != k.size(1))

    def conv_window(self, slot, x, n_past):
        """cgpt's causal Conv1d: x preceded by the last n_past inputs, kept in place (zeros before position 0)."""
        past = self.conv_tail.get(slot)
        if past is None:
            past = self.conv_tail[slot] = x.new_zeros(x.size(0), n_past, x.size(2))
            _mark_static(past)
        window = torch.cat([past, x], dim=1)
        past.copy_(window[:, window.size(1) - n_past:])
        return window

    def advance(self, n):
        self.position.add_(n)   # in place, inside the compiled step

    def reset(self):
        """Start a new sequence, keeping the buffers (the compiled step keeps its graph)."""
        self.fresh = True
        if self.position is not None:
            self.position.zero_()
            for tail in self.conv_tail.values():
                tail.zero_()   # cgpt's conv window: zeros before position 0


def _mark_static(*tensors):
    """Tell torch.compile (CUDA graphs) that these buffers keep their address from call to call."""
    for t in tensors:
        torch._dynamo.mark_static_address(t)


def static_cache(model, batch_size):
    """The model's reusable static cache (same buffers -> the compiled step is reused across generate calls
    without recompiling or re-recording). Kept on the model as `_static_cache`."""
    device = model.tok_emb.wte.weight.device
    autocast_dtype = torch.get_autocast_dtype(device.type) if torch.is_autocast_enabled(device.type) else None
    key = (batch_size, device, autocast_dtype)   # the buffers take the dtype of the keys: autocast's
    kept = getattr(model, "_static_cache", None)
    if kept is None or kept[0] != key:
        kept = model._static_cache = (key, StaticCache(model.config))
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


def run(cfg):
    if cfg["no_kv_cache"]:   # before loading anything
        raise UserError("--no_kv_cache has no decode step to compile (fix: python sample.py --no_kv_cache)")
    sample.run(cfg, generate=generate)


def main(argv=None):
    return run_command(run, sample.DEFAULTS, argv, sample.BOOL_FLAGS)


if __name__ == "__main__":
    main(sys.argv[1:])
