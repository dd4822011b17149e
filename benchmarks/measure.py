"""
Speed and memory measurements shared by bench.py, compare.py, train.py (MFU) and the GPU suite: timing
with device synchronization, peak tensor memory, one training step's speed, and a model's short description.

Peak memory, what peak_bytes measures:
  CUDA: torch.cuda.max_memory_allocated() over the call (reset before it): every live tensor (weights,
        gradients, AdamW state, activations, KV cache), without the caching allocator's reserve.
  CPU:  the same quantity, computed: the bytes of the tensors alive when the call starts (weights,
        buffers, AdamW state, gradients, inputs) plus the highest point of the running sum of tensor
        allocations minus frees during the call, recorded by torch.profiler(profile_memory=True).
        It is tensor memory only: no Python objects, no allocator caching, no process RSS. (RSS is not
        used because glibc keeps freed memory mapped, so RSS deltas mostly measure allocator history.)
"""

import contextlib
import os
import statistics
import sys
import time

import torch

from configurator import autocast

PEAK_FLOPS = {"H100": 989e12, "H200": 989e12, "A100": 312e12}   # dense bf16 FLOP/s, for MFU


def peak_flops(device):
    """The dense bf16 peak FLOP/s of a CUDA device named in PEAK_FLOPS, else None (no MFU)."""
    device = torch.device(device)
    if device.type != "cuda":
        return None
    return next((f for name, f in PEAK_FLOPS.items() if name in torch.cuda.get_device_name(device)), None)


def describe(args):
    """A model's shape in one line, e.g. '6L d384 6h vocab 65 block 256'."""
    a = args
    parts = [f"{a['n_layer']}L", f"d{a['n_embd']}", f"{a['n_head']}h"]
    if a.get("n_kv_head"):
        parts.append(f"kv{a['n_kv_head']}")
    if a.get("mlp_hidden"):
        parts.append(f"ffn{a['mlp_hidden']}")
    if a.get("n_attn_layers") is not None:
        parts.append(f"attn in {a['n_attn_layers']}")
    if a.get("share_group_size", 1) > 1:
        parts.append(f"share {a['share_group_size']} from {a.get('share_from_layer', 0)}")
    if a.get("n_branches", 1) > 1:
        parts.append(f"{a['n_branches']} branches")
    if a.get("shrink_every"):
        parts.append(f"halve/{a['shrink_every']} {a.get('shrink_layer')}")
    if a.get("think_steps"):
        parts.append(f"think {a['think_steps']}")
    parts += [f"vocab {a['vocab_size']}", f"block {a['block_size']}"]
    return " ".join(parts)


# --- timing and memory ---------------------------------------------------------------------------

def synchronize(device):
    """Wait for the device's queued work (CUDA and MPS run asynchronously)."""
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    elif device == "mps":
        torch.mps.synchronize()


def timed(fn, device):
    """Seconds of fn(), the device's work included."""
    synchronize(device)
    t0 = time.perf_counter()
    fn()
    synchronize(device)
    return time.perf_counter() - t0


def storage_bytes(tensors):
    """Bytes of the distinct storages behind `tensors` (views and shared weights counted once)."""
    seen = {}
    for t in tensors:
        if t is not None and t.device.type == "cpu":
            s = t.untyped_storage()
            seen[s.data_ptr()] = s.nbytes()
    return sum(seen.values())


def live_tensors(model, optimizer=None, extra=()):
    """The tensors a training step keeps alive: weights, buffers, gradients, optimizer state, `extra`."""
    out = list(model.parameters()) + list(model.buffers()) + [p.grad for p in model.parameters()] + list(extra)
    if optimizer is not None:
        for state in optimizer.state.values():
            out += [v for v in state.values() if torch.is_tensor(v)]
    return out


def peak_bytes(fn, device, live):
    """Peak bytes of live tensors while fn() runs (see the module docstring). None if unavailable."""
    if device.startswith("cuda"):
        synchronize(device)
        torch.cuda.reset_peak_memory_stats()
        fn()
        synchronize(device)
        return torch.cuda.max_memory_allocated()
    if device != "cpu":
        return None
    before = storage_bytes(live())
    from torch.profiler import ProfilerActivity, profile
    with quiet_stderr(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    try:
        events = []
        stack = list(prof.profiler.kineto_results.experimental_event_tree())
        while stack:
            node = stack.pop()
            fields = node.extra_fields
            if type(fields).__name__ == "_ExtraFields_Allocation" and str(fields.device) == "cpu":
                events.append((node.start_time_ns, fields.alloc_size))
            stack.extend(node.children)
    except AttributeError:
        return None  # this torch's profiler has no event tree: report n/a rather than guess
    running = peak = 0
    for _, size in sorted(events, key=lambda e: e[0]):
        running += size
        peak = max(peak, running)
    return before + peak


@contextlib.contextmanager
def quiet_stderr():
    """Silence the profiler backend's start/stop lines, which C++ writes straight to file descriptor 2."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def median_ms(times):
    return 1000 * statistics.median(times)


class TooSlow(Exception):
    """A CPU step took so long that the longer sequences are skipped (args[0]: its seconds)."""


# --- one training step ---------------------------------------------------------------------------

def bench_train(model, cfg, device, dtype, seq, batch, measure_memory):
    """One training step on random tokens (batch x seq): forward + backward (+ AdamW when
    cfg["optimizer_step"]). Median ms and tokens/s of cfg["repeats"] steps after cfg["warmup"]; with
    measure_memory also the peak bytes of a step. Raises TooSlow when a CPU step is far over
    cfg["max_step_seconds"]."""
    vocab = model.config.vocab_size
    gen = torch.Generator(device="cpu").manual_seed(cfg["seed"])
    data = torch.randint(vocab, (batch, seq + 1), generator=gen).to(device)
    x, y = data[:, :-1], data[:, 1:]
    opt = model.configure_optimizers(0.1, 6e-4, (0.9, 0.95), device.split(":")[0])
    scaler = torch.amp.GradScaler(device.split(":")[0], enabled=dtype == torch.float16)
    runner = torch.compile(model) if cfg["compile"] else model
    model.train()

    def step():
        with autocast(device, dtype):
            _, loss = runner(x, y)
        scaler.scale(loss).backward()
        if cfg["optimizer_step"]:
            scaler.step(opt)
            scaler.update()
        opt.zero_grad(set_to_none=True)

    for i in range(cfg["warmup"]):
        dt = timed(step, device)
        if i == 0 and device == "cpu" and dt > 3 * cfg["max_step_seconds"]:
            raise TooSlow(dt)
    times = [timed(step, device) for _ in range(cfg["repeats"])]
    out = dict(train_ms=median_ms(times), train_tok_s=batch * seq / statistics.median(times))
    if measure_memory:
        out["train_peak_bytes"] = peak_bytes(step, device, lambda: live_tensors(model, opt, (data,)))
    return out
