"""
Sampling with a compiled decode step over a static KV cache (gpt-fast style): sample.py's options and output.

    python -m tools.fast_sample --out_dir=out --start="ROMEO:" --max_new_tokens=2000
    python -m tools.fast_sample --compile_mode=quick    # the settings before issue 49: MKL's matmuls, ~1.65x slower

model.py's cache grows with the sequence, so each decode step has other shapes and a compiled step would
recompile. The static cache keeps every buffer at max_len and the position in a tensor: every step has the
same shapes and no Python number changes, and torch.compile (CUDA graphs on a GPU, inductor's C++ wrapper on a
CPU) reuses one graph. On a CPU, --compile_mode=frozen (the default) also freezes the weights into that graph,
so that inductor multiplies by them with GEMM kernels of its own (CPU_MODES below), and moves them into huge
pages (to_huge_pages); --compile_mode=quick leaves them to MKL. The key is the CPU's: on a GPU the step is a CUDA
graph, and quick is refused. On a CPU the step attends over the slots written
so far only, their number a dynamic size of the one graph (StaticCache.window). Compiling takes ~30 s to 2
minutes, so it pays off on long runs only. With the same
--seed it prints the text of `python sample.py` (tests/test_compile.py: the text with aot_eager, the greedy tokens
with inductor under -m slow). Deep Thinking (its memory is not in the static cache) and --no_kv_cache (nothing to
compile) are refused: use sample.py for them.
tools.bench --mode=decode --compile=True and tools.executorch.bench time it.
"""
import ctypes
import functools
import sys
import time

import torch
import torch.nn.functional as F

from model import sample_next
import sample
from tools.support import refuse_undeclared
from tools.torch_internals import inductor_config, inductor_loaded_modules
from safety_net.checkpoint import load_model
from safety_net.configurator import UserError, run_command
from safety_net.dataset import tokenizer_of
from safety_net.runtime import autocast, check_cpu_compiler
from safety_net.sampling import setup_sampling


DEFAULTS = dict(sample.DEFAULTS, compile_mode="frozen")   # or quick: see CPU_MODES

# inductor's settings for the CPU step, by --compile_mode. They are inductor's global config, patched only
# around the calls that may compile (compiled_decode_step): dynamo reads `freezing` when it traces, before
# torch.compile's options= reach inductor, so freezing given there changed nothing.
CPU_MODES = {
    # the kernels called from C++ (cpp_wrapper), without checking every input's size (size_asserts:
    # ~90 inputs, ~0.15 ms a step; dynamo's guards checked them); each weight is an input, multiplied by
    # MKL's sgemm
    "quick": {"cpp_wrapper": True, "size_asserts": False},
}
# and each weight a constant of the graph (freezing; dynamo then guards each weight's identity), so that
# inductor prepacks it and multiplies by it with its own C++ GEMM template (max_autotune) instead of MKL:
# ~1.65x the tokens/s of quick on llama_10m, one thread (results/device/README.md). Its autotuner chose
# the template over MKL for every matrix there, 2-8x faster, so MKL is not offered (its benchmarking added
# 30-80 s to compiling on a loaded 2-core machine).
CPU_MODES["frozen"] = dict(CPU_MODES["quick"], freezing=True, max_autotune=True,
                           max_autotune_gemm_backends="CPP")


def check_compile_mode(mode):
    if mode not in CPU_MODES:
        raise UserError(f"--compile_mode must be one of {', '.join(CPU_MODES)}, got {mode!r} "
                        f"(fix: --compile_mode=frozen)")


def generate(model, idx, max_new_tokens, temperature=1.0, top_k=None, use_kv_cache=True, generator=None,
             compile_mode="frozen", on_token=None, n_tokens=None):
    """model.generate's loop (model.py) over the model's static cache, its single-token steps through
    compiled_decode_step: the same windows and the same sample_next, so the same tokens."""
    if not use_kv_cache:
        raise UserError("--no_kv_cache has no decode step to compile (fix: python sample.py --no_kv_cache)")
    step = compiled_decode_step(model, mode=compile_mode)
    cache = static_cache(model, idx.size(0))
    block_size = model.config.block_size
    was_training = model.training
    model.eval()
    window_start = 0   # the window is idx[:, window_start:]
    primed = False     # whether the cache holds the window but its last token
    idx_next = None    # the token sampled last
    with torch.inference_mode():
        for _ in range(max_new_tokens):
            if idx.size(1) - window_start > block_size:   # a full window: go on from its recent half
                window_start = idx.size(1) - max(1, block_size // 2)
                primed = False
            if primed:
                logits = step(idx_next, cache)
            else:   # a plain forward fills the static cache with the window
                cache.reset()
                logits, _ = model(idx[:, window_start:], cache=cache)
                primed = True
            idx_next = sample_next(logits[:, -1, :n_tokens], temperature, top_k, generator)
            idx = torch.cat((idx, idx_next), dim=1)
            if on_token is not None:
                on_token(idx_next[0, 0])
    model.train(was_training)
    return idx


class Slot:
    """One layer application's entry of a static cache (model.py's cache interface, KVCache's docstring): the
    cache's own methods for that key."""

    def __init__(self, cache, key):
        self.cache = cache
        self.key = key if isinstance(key, tuple) else (key,)

    def attend(self, q, k, v):
        return self.cache.attend(self.key, q, k, v)

    def conv_window(self, x, n_past):
        return self.cache.conv_window(self.key, x, n_past)

    def positions(self, length, device):
        return self.cache.positions(length, device)


class StaticCache:
    """model.py's cache interface (KVCache's docstring) over buffers of fixed size, updated in place,
    with the position in a tensor (`position`, made on the model's device at the first forward).
    `length` stays 0: the model's block_size check sees only the new tokens, and generate keeps the
    window inside block_size. `fresh` is True after a reset: the next compiled step checks dynamo's
    guards. Deep Thinking is refused (its memory is not kept here)."""
    length = 0

    def __init__(self, config):
        if config.think_steps:
            raise ValueError("a static cache does not support Deep Thinking (fix: use model.py's KVCache)")
        self.max_len = config.block_size
        self.kv, self.conv_tail = {}, {}
        self.position, self.fresh = None, True
        self.new_positions = None   # of the current forward, and its mask: positions() sets them
        self.mask = None
        # in a compiled decode step on the CPU: a view of `slots` as long as the slots written after the
        # step (window()); attend then reads only those
        self.slots = None
        self.written = None

    def __getitem__(self, key):
        return Slot(self, key)

    def positions(self, length, device):
        """Positions of the next `length` tokens as a tensor (the position buffer is made on first
        use), and this forward's (length, max_len) mask: the query at position p sees the slots <= p
        (later ones are not written yet)."""
        if self.position is None:
            self.position = torch.zeros(1, dtype=torch.long, device=device)
            _mark_static(self.position)
        self.new_positions = self.position + torch.arange(length, device=device)
        if self.written is None:
            self.mask = torch.arange(self.max_len + 1, device=device) <= self.new_positions[:, None]
        return self.new_positions

    def attend(self, slot, q, k, v):
        """Write k, v at the new positions and attend over the whole buffers, the mask hiding the
        slots not written yet; in a compiled step on the CPU over the slots written so far (window()). No
        Python number changes from one decode step to the next."""
        if slot not in self.kv:
            # one slot more than max_len, never written: a view of the written slots is then never the whole
            # buffer (a whole buffer is contiguous, its view of 256 slots not: dynamo made another graph for it)
            shape = (k.size(0), k.size(1), self.max_len + 1, k.size(3))
            self.kv[slot] = (k.new_zeros(shape), v.new_zeros(shape))
            _mark_static(*self.kv[slot])
        keys, values = self.kv[slot]
        keys.index_copy_(2, self.new_positions, k)
        values.index_copy_(2, self.new_positions, v)
        gqa = q.size(1) != k.size(1)
        if self.written is not None:   # one new token: every slot written so far, no mask
            n = self.written.size(0)
            return F.scaled_dot_product_attention(q, keys[:, :, :n], values[:, :, :n], enable_gqa=gqa)
        return F.scaled_dot_product_attention(q, keys, values, attn_mask=self.mask, enable_gqa=gqa)

    def window(self):
        """Before a compiled decode step on the CPU: `written`, a view of as many slots as will be written
        after it (the position + 1), its length a dynamic size of the graph (one graph for every length).
        Reading only those instead of all max_len slots: the keys and values are ~10% of a step's bytes on
        llama_10m, and on average 161 of the 256 slots are written in 500 tokens. Measured on llama_10m, one
        thread, AMD EPYC, both with the weights in huge pages, side by side in one process (each order
        once, medians of 5 rounds of 240 steps): a step 0.93x and 0.86x the time of attending over all
        slots with the mask; generating 500 tokens 0.98x and 0.84x."""
        if self.slots is None:
            self.slots = torch.arange(self.max_len, device=self.position.device)
        self.written = self.slots[:int(self.position) + 1]
        if self.fresh:   # dynamo reads the mark when it compiles; later steps skip its guards
            torch._dynamo.mark_dynamic(self.written, 0)

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
    """Tell torch.compile (CUDA graphs) that these buffers keep their address from call to call. Not on the
    CPU: there freezing would make them constants of the graph, and a new cache would write to the old one."""
    for t in tensors:
        if t.is_cuda:
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


def refuse_unsupported(config):
    """One line for a model the compiled decoder cannot run (run() and tools.bench ask before they print anything)."""
    refuse_undeclared(config, "compiled_decoder")
    if config.think_steps:   # SUPPORT: the compiled decoder refuses think_steps
        raise UserError("the static cache does not hold Deep Thinking's memory (fix: python sample.py)")


def compiled_decode_step(model, backend="inductor", mode="frozen"):
    """The model's forward over one new token a sequence (logits (B, 1, V) of idx (B, 1)) through torch.compile, made once per model (in the mode of that first call) and kept on
    it as `_compiled_decode_step`. On a GPU inductor's "reduce-overhead" replays it as a CUDA graph. On the CPU
    CPU_MODES[mode] is inductor's config while it may compile: on the first step that follows each prime.
    After that step dynamo's guards are skipped: the next steps are the same call on the same buffers, and
    checking again costs ~0.2 ms a step on a CPU. A frozen step keeps the weights it compiled with: after
    changing them in place (training), call torch._dynamo.reset()."""
    check_compile_mode(mode)
    refuse_unsupported(model.config)
    if getattr(model, "_compiled_decode_step", None) is None:
        on_gpu = model.tok_emb.wte.weight.is_cuda
        settings = {} if on_gpu else CPU_MODES[mode]
        options = {}
        if backend == "inductor":
            # the CPU's settings given as options too: dynamo reuses a graph only for the same options, so a
            # frozen step never runs another model's quick graph (nor the other way round)
            options = dict(mode="reduce-overhead") if on_gpu else dict(options=settings)
        step = torch.compile(model.forward, backend=backend, fullgraph=True, **options)

        def guarded_once(idx, cache):
            if not on_gpu:   # (CUDA graphs need the same shapes every step)
                cache.window()
            try:
                if cache.fresh:
                    cache.fresh = False
                    modules = inductor_loaded_modules()
                    loaded = len(modules)
                    with inductor_config().patch(settings):
                        logits = step(idx, cache=cache)[0]
                    if settings.get("freezing"):
                        to_huge_pages(modules[loaded:])   # the graph compiled now, if any
                    return logits
                with torch.compiler.set_stance(skip_guard_eval_unsafe=True):
                    return step(idx, cache=cache)[0]
            finally:
                cache.written = None   # the prime (a plain forward) masks all max_len slots
        model._compiled_decode_step = guarded_once
    return model._compiled_decode_step


def to_huge_pages(modules):
    """Move the tensors that inductor's compiled modules keep (the frozen weights, prepacked for its GEMM
    template) into one buffer of 2 MB pages (Linux's transparent huge pages, asked for with madvise), in place.
    Each weight of llama_10m is under 2 MB, so each got 4 KB pages of its own: one thread streamed them ~13%
    slower (a step 3.26 ms against 2.82 ms, median of 9 rounds, AMD EPYC; the same 43 MB packed into one
    buffer of 4 KB pages: 3.73 ms), and which of those pages a weight got made a compiled step 10-15% faster
    or slower from one compile to the next. Nothing moves on other systems, and nothing is gained where the
    kernel gives no huge pages (/sys/kernel/mm/transparent_hugepage/enabled: never)."""
    tensors = {id(v): v for module in modules for v in vars(module).values()
               if isinstance(v, torch.Tensor) and v.device.type == "cpu" and v.is_contiguous()}
    tensors = list(tensors.values())
    if not tensors or sys.platform != "linux":
        return
    madvise = ctypes.CDLL(None).madvise
    huge_page = 2 ** 21
    sizes = [(t.nbytes + 63) // 64 * 64 for t in tensors]   # each at a 64-byte (cache line) boundary
    buffer = torch.empty(sum(sizes) + huge_page, dtype=torch.uint8)
    start = -buffer.data_ptr() % huge_page
    MADV_HUGEPAGE = 14
    madvise(ctypes.c_void_p(buffer.data_ptr() + start), ctypes.c_size_t(sum(sizes)), MADV_HUGEPAGE)
    with torch.no_grad():   # (set_ on a parameter)
        for t, size in zip(tensors, sizes):
            moved = buffer[start:start + t.nbytes].view(t.dtype).view(t.shape)
            moved.copy_(t)
            t.set_(moved)
            start += size


def run(cfg):
    """sample.py's steps (load_model: its safe load, model and checked weights), then its write_samples with
    the compiled decode step."""
    cfg = dict(cfg)
    mode = cfg.pop("compile_mode")
    check_compile_mode(mode)   # before loading anything
    if cfg["no_kv_cache"]:
        raise UserError("--no_kv_cache has no decode step to compile (fix: python sample.py --no_kv_cache)")
    device, dtype, start_text, notes = setup_sampling(cfg)
    check_cpu_compiler(device, fix="python sample.py, which does not compile")
    if device.type == "cuda" and mode != DEFAULTS["compile_mode"]:   # it was ignored there (a hunt)
        raise UserError(f"--compile_mode={mode} chooses inductor's settings on a CPU; on a GPU the step is a CUDA "
                        f"graph (fix: leave --compile_mode out, or --device=cpu)")
    model, ckpt = load_model(cfg["out_dir"], device)
    refuse_unsupported(model.config)   # before the header and the prompt are printed
    tok, start_ids = tokenizer_of(ckpt, cfg["data_dir"], start_text)
    source = f"{ckpt['path']} (iter {ckpt.get('iter_num', '?')})"
    if cfg["keep_heaviest_branch"]:   # pgpt: before the compile (write_samples' note keeps the same branch);
        model.keep_heaviest_branch()   # kept after it, the step compiled again inside the timed loop (a hunt)
    if cfg["max_new_tokens"] >= 2:   # (one token is the prime's: no step to compile)
        compile_before_timing(model, start_ids, device, dtype, mode)
    compiled = functools.partial(generate, compile_mode=mode)
    sample.write_samples(model, tok, start_text, start_ids, cfg, device, dtype, source, compiled, notes)


def compile_before_timing(model, start_ids, device, dtype, mode):
    """Compile the decode step before write_samples starts its clock, under the autocast and grad mode it samples
    in: its tokens/s included the compile (1.3 tokens/s where the step runs 300; a hunt). Greedy, so the seeded
    sampling draws nothing here; the time it took goes to stderr."""
    t0 = time.perf_counter()
    x = torch.tensor(start_ids, dtype=torch.long, device=device)[None, :]
    with torch.no_grad(), autocast(device, dtype):
        generate(model, x, 2, temperature=0, compile_mode=mode)   # a prime, then one compiled step
    print(f"compiled the decode step in {time.perf_counter() - t0:.1f}s (not in the tokens/s below)", file=sys.stderr)


def main(argv=None):
    return run_command(run, DEFAULTS, argv)


if __name__ == "__main__":
    main(sys.argv[1:])
