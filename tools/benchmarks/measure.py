"""
Speed and memory measurements shared by tools/bench.py and tools/compare.py: timing
with device synchronization, peak tensor memory, one training step's speed, a model's short description,
inference (prefill, decode step, KV-cache bytes), sampling, decoding against its linear layers alone,
and run_entry: every measurement of one model (an entry of tools/benchmarks/entries.py).

Peak memory, what peak_bytes measures:
  CUDA: torch.cuda.max_memory_allocated() over the call (reset before it): every live tensor (weights,
        gradients, AdamW state, activations, KV cache), without the caching allocator's reserve.
  CPU:  the same quantity, computed: the bytes of the tensors alive when the call starts (weights,
        buffers, AdamW state, gradients, inputs) plus the highest point of the running sum of tensor
        allocations minus frees during the call, recorded by torch.profiler(profile_memory=True).
        It is tensor memory only: no Python objects, no allocator caching, no process RSS. (RSS is not
        used because glibc keeps freed memory mapped, so RSS deltas mostly measure allocator history.)
"""

import dataclasses
import statistics
import sys
import time

import torch

from model import GPT, GPTConfig, KVCache
from tools.benchmarks.report import short
from tools.fast_sample import generate as fast_generate
from safety_net.configurator import out_of_memory
from safety_net.runtime import autocast, quiet_stderr

# the fields describe() shows in its shape words; every other field it shows as name=value where not the default
SHAPE_WORDS = ("n_layer", "n_embd", "n_head", "n_kv_head", "mlp_hidden", "n_attn_layers", "n_top_attn_layers",
               "share_group_size", "share_from_layer", "n_branches", "shrink_every", "shrink_layer", "think_steps",
               "vocab_size", "block_size")


def describe(args):
    """A model's shape in one line, e.g. '6L d384 6h vocab 65 block 256', then the other fields that differ from
    GPTConfig's defaults (a new field shows without a change here): '... block 2048 norm=rmsnorm'."""
    a = args
    parts = [f"{a['n_layer']}L", f"d{a['n_embd']}", f"{a['n_head']}h"]
    if a.get("n_kv_head"):
        parts.append(f"kv{a['n_kv_head']}")
    if a.get("mlp_hidden"):
        parts.append(f"ffn{a['mlp_hidden']}")
    if a.get("n_attn_layers") is not None:
        top = a.get("n_top_attn_layers", 0)
        parts.append(f"attn in {a['n_attn_layers']}" + (f" + top {top}" if top else ""))
    if a.get("share_group_size", 1) > 1:
        parts.append(f"share {a['share_group_size']} from {a.get('share_from_layer', 0)}")
    if a.get("n_branches", 1) > 1:
        parts.append(f"{a['n_branches']} branches")
    if a.get("shrink_every"):
        parts.append(f"halve/{a['shrink_every']} {a.get('shrink_layer')}")
    if a.get("think_steps"):
        parts.append(f"think {a['think_steps']}")
    parts += [f"vocab {a['vocab_size']}", f"block {a['block_size']}"]
    for field in dataclasses.fields(GPTConfig):
        value = a.get(field.name, field.default)
        if field.name not in SHAPE_WORDS and value != field.default:
            parts.append(f"{field.name}={value}")
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


def cache_bytes(cache):
    """Bytes of a KVCache's keys and values: every attention application's KV cache and Deep
    Thinking's memory (GQA stores only n_kv_head heads)."""
    tensors = [t for entry in cache.entries.values() if entry.keys is not None for t in (entry.keys, entry.values)]
    return sum(t.numel() * t.element_size() for t in tensors)


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
    if cfg["compile"]:
        torch._dynamo.reset()   # as train.py: each model compiles afresh (dynamo keeps 8 graphs per function)
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


# --- inference, sampling and decoding ------------------------------------------------------------

@torch.no_grad()
def bench_infer(model, cfg, device, dtype, seq, measure_memory):
    model.eval()
    vocab, batch = model.config.vocab_size, cfg["infer_batch"]
    gen = torch.Generator(device="cpu").manual_seed(cfg["seed"])
    idx = torch.randint(vocab, (batch, seq), generator=gen).to(device)
    holder = {}

    def prefill():
        cache = KVCache(seq)
        with autocast(device, dtype):
            model(idx, cache=cache)
        holder["cache"] = cache

    for _ in range(cfg["warmup"]):
        timed(prefill, device)
    prefill_times = [timed(prefill, device) for _ in range(cfg["repeats"])]
    out = dict(prefill_ms=median_ms(prefill_times), kv_bytes=cache_bytes(holder["cache"]))
    holder.clear()

    d = max(1, min(cfg["decode_steps"], seq - 1)) if seq > 1 else 0
    if d:
        step_times = []
        for r in range(cfg["warmup"] + cfg["repeats"]):
            cache = KVCache(seq)
            with autocast(device, dtype):
                model(idx[:, :seq - d], cache=cache)
                for i in range(seq - d, seq):
                    dt = timed(lambda: model(idx[:, i:i + 1], cache=cache), device)
                    if r >= cfg["warmup"]:
                        step_times.append(dt)
        out["decode_ms"] = median_ms(step_times)
    if measure_memory:
        out["infer_peak_bytes"] = peak_bytes(prefill, device, lambda: live_tensors(model, None, (idx,)))
        holder.clear()
    return out


@torch.no_grad()
def bench_sample(model, cfg, device, dtype):
    model.eval()
    start = torch.zeros((1, 1), dtype=torch.long, device=device)
    out = {}
    for use_cache in (True, False):
        def run(n):
            gen = torch.Generator(device=device).manual_seed(cfg["seed"])
            with autocast(device, dtype):
                model.generate(start, n, temperature=1.0, top_k=None, use_kv_cache=use_cache, generator=gen)
        run(min(8, cfg["gen_tokens"]))  # warm-up
        times = [timed(lambda: run(cfg["gen_tokens"]), device) for _ in range(cfg["sample_repeats"])]
        out["sample_tok_s_cache" if use_cache else "sample_tok_s_plain"] = cfg["gen_tokens"] / statistics.median(times)
    cache = KVCache(model.config.block_size)
    with autocast(device, dtype):
        model(start, cache=cache)
    out["kv_block_bytes"] = cache_bytes(cache)
    return out


def weight_matrices(model):
    """(weight, bias) of every matrix a decode step multiplies the new token by, each once: the Linears,
    cgpt's Conv1d as an (out, in * kernel) matrix, and the output head (the token embedding when tied). pgpt with
    keep_branch set (--keep_heaviest_branch): the other branches' are left out, as they do not run (they were
    counted: twice the weights MB and GB/s, half the decode / linears ratio; a hunt)."""
    idle = set()
    for i, stack in enumerate(model.branches):
        if model.keep_branch not in (None, i):
            idle.update(id(m) for m in stack.modules())
    mats = [(m.weight.flatten(1), m.bias) for m in model.modules()
            if isinstance(m, (torch.nn.Linear, torch.nn.Conv1d)) and id(m) not in idle]
    if model.config.tie_embeddings:
        mats.append((model.tok_emb.wte.weight, None))
    return mats


@torch.inference_mode()
def bench_decode(model, cfg, device, dtype):
    """Cached decoding vs its linear layers alone (eager), in alternating rounds (see --measure=decode)."""
    from torch.nn import functional as F
    model.eval()
    mats = weight_matrices(model)
    inputs = [torch.zeros(1, 1, w.size(1), device=device, dtype=w.dtype) for w, _ in mats]
    n_tokens = max(1, min(cfg["gen_tokens"], model.config.block_size - 1))
    start = torch.zeros((1, 1), dtype=torch.long, device=device)

    def stream_weights():
        for x, (w, b) in zip(inputs, mats):
            F.linear(x, w, b)

    def decode(compile):
        gen = torch.Generator(device=device).manual_seed(cfg["seed"])
        with autocast(device, dtype):
            if compile:
                fast_generate(model, start, n_tokens, temperature=0.8, top_k=200, generator=gen)
            else:
                model.generate(start, n_tokens, temperature=0.8, top_k=200, generator=gen)

    def linears_run():   # as many weight passes as decode steps, timed the same way
        for _ in range(n_tokens):
            stream_weights()

    # one CPU thread: the process's CPU time (the wall time of an idle machine; other jobs on a shared
    # machine do not inflate it); otherwise wall time
    cpu_clock = device == "cpu" and torch.get_num_threads() == 1
    clock = time.process_time if cpu_clock else time.perf_counter

    def measure(fn):
        synchronize(device)
        t0 = clock()
        fn()
        synchronize(device)
        return (clock() - t0) / n_tokens

    paths = [False, True] if cfg["compile"] else [False]
    linears, times, ratios = [], {p: [] for p in paths}, {p: [] for p in paths}
    for r in range(cfg["warmup"] + cfg["repeats"]):
        f = measure(linears_run)
        t = {p: measure(lambda: decode(p)) for p in paths}
        if r >= cfg["warmup"]:
            linears.append(f)
            for p in paths:
                times[p].append(t[p])
                ratios[p].append(t[p] / f)   # paired with the linears of its own round: what others on the
                                             # machine do to both at that moment cancels out
    out = dict(decode_tokens=n_tokens, clock="cpu time" if cpu_clock else "wall", linears_ms=median_ms(linears),
               weights_mb=sum(w.numel() * w.element_size() + (0 if b is None else b.numel() * b.element_size())
                              for w, b in mats) / 1e6,
               decode_ms_token=median_ms(times[False]), decode_vs_linears=statistics.median(ratios[False]))
    if cfg["compile"]:
        out["compiled_ms_token"] = median_ms(times[True])
        out["compiled_vs_linears"] = statistics.median(ratios[True])
    print(f"  {model_label(model)} decode: {out['decode_ms_token']:.3f} ms/token, linears alone {out['linears_ms']:.3f} "
          f"ms ({out['decode_vs_linears']:.2f}x)" + (f", compiled {out['compiled_ms_token']:.3f} ms "
          f"({out['compiled_vs_linears']:.2f}x)" if cfg["compile"] else ""), file=sys.stderr, flush=True)
    return out


def model_label(model):
    c = model.config
    return f"{c.n_layer}L d{c.n_embd} ctx{c.block_size}"


# --- every measurement of one model -------------------------------------------------------------

def run_entry(entry, cfg, device, dtype):
    """All measurements of one model. Returns (per-seq rows, per-model row (sample, decode) or None)."""
    torch.manual_seed(cfg["seed"])
    model = GPT(GPTConfig(**entry["args"])).to(device)
    params = model.get_num_params(non_embedding=False)
    name, block = entry["name"], model.config.block_size
    rows, measures = [], cfg["measure"]
    per_seq = {"train", "memory", "infer"} & set(measures)
    seqs = [s for s in cfg["seq_lens"] if s <= block] if per_seq else []
    skipped = [s for s in cfg["seq_lens"] if s > block] if per_seq else []
    base = dict(model=name, params=params, batch=entry["batch_size"])
    last = None
    for seq in seqs:
        row = dict(base, seq=seq)
        if last and device == "cpu" and last[1] * seq / last[0] > cfg["max_step_seconds"]:
            row["note"] = f"skipped: a step would take > {cfg['max_step_seconds']:g}s (--max_step_seconds)"
            rows.append(row)
            continue
        try:
            if "train" in measures or "memory" in measures:
                row.update(bench_train(model, cfg, device, dtype, seq, entry["batch_size"], "memory" in measures))
                last = (seq, row["train_ms"] / 1000)
            if "infer" in measures or "memory" in measures:
                keep = set_branch(model, cfg["keep_heaviest_branch"])
                row["infer_model"] = branch_label(model, name)
                row.update(bench_infer(model, cfg, device, dtype, seq, "memory" in measures))
                model.keep_branch = keep
        except TooSlow as e:
            row["note"] = f"skipped: one step took {e.args[0]:.0f}s"
            last = (seq, e.args[0])
        except (MemoryError, RuntimeError) as e:   # on a CPU too (e.g. --batch_size=10**12): a traceback before
            if not out_of_memory(e):
                raise
            row["note"] = "OOM"
            torch.cuda.empty_cache()
        rows.append(row)
        print(f"  {name} seq {seq}: " + ", ".join(f"{k}={short(v)}" for k, v in row.items()
                                                   if k not in base and k not in ("seq", "infer_model")), file=sys.stderr, flush=True)
    for seq in skipped:
        rows.append(dict(base, seq=seq, note=f"skipped: > block_size {block}"))
    sample = None
    if "sample" in measures or "decode" in measures:
        keep = set_branch(model, cfg["keep_heaviest_branch"])
        sample = dict(base, infer_model=branch_label(model, name))
        if "sample" in measures:
            sample.update(gen_tokens=cfg["gen_tokens"], **bench_sample(model, cfg, device, dtype))
            print(f"  {name} sampling: {short(sample['sample_tok_s_cache'])} tok/s cached, "
                  f"{short(sample['sample_tok_s_plain'])} plain", file=sys.stderr, flush=True)
        if "decode" in measures:
            sample.update(bench_decode(model, cfg, device, dtype))
        model.keep_branch = keep
    del model
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return rows, sample


def set_branch(model, enabled):
    """pgpt: keep only the heaviest branch (fresh weights are equal: branch 0). Returns the old setting."""
    old = model.keep_branch
    if enabled and model.config.n_branches > 1:
        model.keep_branch = model.heaviest_branch()
    return old


def branch_label(model, name):
    if model.keep_branch is None:
        return name
    return f"{name} (branch {model.keep_branch} of {model.config.n_branches} only)"


if __name__ == "__main__":   # run as a command, it would do nothing
    raise SystemExit("error: tools.benchmarks.measure is a library, not a command (fix: the commands are in docs/reference.md)")
