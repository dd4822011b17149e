"""
Speed and memory of model variants, side by side in one process.

    python bench.py --variants=gpt,lgpt,cgpt,pgpt --seq_lens=64,128,256 --device=cpu
    python bench.py config/gpt_shakespeare.py config/lgpt_shakespeare.py --measure=train
    python bench.py --mode=paper001 --scale=0.5 --vocab_size=8000      # paper 001 Tables 3-6 layout
    python bench.py --mode=paper004                                     # paper 004: lgpt/cgpt vs gpt
    python bench.py --variants=gpt --measure=sample --gen_tokens=500    # KV cache vs plain sampling
    python bench.py --mode=decode --device=cpu --num_threads=1          # decode vs the weight-streaming floor
    python bench.py --mode=gpu                                          # everything on one GPU: results/gpu/

Models come from --variants (variants/<name>.py presets) and from config files given as positional
arguments (each file is one model, read as train.py reads it, so its variant and model keys apply and
its batch_size is used unless --batch_size is given). Every GPTConfig field can be overridden for all
models, e.g. --n_layer=4 --vocab_size=8000. --scale=s shrinks every model's width (n_embd, mlp_hidden,
embd_factor_dim) and depth (n_layer, n_attn_layers, share_from_layer) by s, rounding to the nearest
valid configuration (--depth_scale to scale depth differently); the output prints the resulting sizes.

Measurements (--measure, comma list):
  train   one training step on random tokens: forward + backward + AdamW step (--optimizer_step=False:
          forward + backward only, as paper 001's tables), batch --batch_size x seq; ms/iter, tokens/s
  memory  peak memory of a training step and of an inference prefill (see below)
  infer   batch --infer_batch: prefill ms of seq tokens into an empty KV cache sized seq, decode
          ms/token (seq - decode_steps tokens cached, then decode_steps single-token steps, median), and
          the KV-cache bytes of seq tokens (InferenceCache.nbytes(): keys + values of every attention
          application; GQA stores only n_kv_head heads)
  sample  model.generate from one token: --gen_tokens new tokens with the KV cache and without (the plain
          path re-runs the whole window every token); tokens/s of each and the speed-up
  decode  batch-1 sampling speed against its lower bound, both timed in alternating rounds: the
          weight-streaming floor (one F.linear per weight matrix, bias included, on a preallocated
          1-token input: every weight read once, nothing else; n passes in a row) and cached decoding
          (model.generate of n = min(--gen_tokens, block_size - 1) tokens from one token, temperature
          0.8, top_k 200, the defaults of sample.py; the window is never re-primed); ms per pass/token,
          tokens/s and the ratio. The floor leaves out what decoding must also read: the KV cache.
          Timed in CPU time of the process on a CPU with one thread (--num_threads=1; equal to the wall
          time of an idle machine, and not inflated by other jobs), else in wall time.
          With --compile also the compiled static-cache step (generate(compile=True), for GPUs).
Warm-up iterations (--warmup) are not timed; each figure is the median of --repeats timed runs.
Sequence lengths above a model's block_size are skipped; on CUDA an out-of-memory length is reported
as OOM; on CPU longer lengths are skipped once one step takes more than --max_step_seconds.

Peak memory is tensor memory only (no Python objects, allocator caching or process RSS): on CUDA
torch.cuda.max_memory_allocated(); on a CPU the tensors alive when the step starts plus the highest running
sum of allocations minus frees during it, from torch.profiler (benchmarks/measure.py: peak_bytes).
"""

import os
import statistics
import sys
import time

import torch

from benchmarks.measure import TooSlow, bench_train, describe, live_tensors, median_ms, peak_bytes, synchronize, timed
from configurator import (UserError, autocast, expand_bool_flags, gpt_config_defaults, load_config, load_variant,
                          model_args, resolve_device, resolve_dtype)
from decoding.cache import InferenceCache
from model import GPT, GPTConfig
from runfiles.dataset import dataset_vocab_size

BENCH_DEFAULTS = dict(
    variants="",            # comma list of variants/<name>.py presets
    mode="",                # "" | "paper001" (Tables 3-6 layout) | "paper004" (lgpt/cgpt/pgpt vs gpt)
    measure="",             # comma list of train,memory,infer,sample,decode; "" = the mode's default
    seq_lens="64,128,256,512,1024,2048",
    batch_size=8,           # training batch (sequences per step)
    infer_batch=1,          # sequences per prefill / decode step
    optimizer_step=True,    # training step includes AdamW's update (paper001 mode: False)
    warmup=2,
    repeats=5,
    gen_tokens=500,         # sampling: new tokens per generate() call
    sample_repeats=1,
    decode_steps=16,
    scale=1.0,              # shrink width and depth of every model (CPU-sized versions of big presets)
    depth_scale=0.0,        # 0 = same as scale
    max_step_seconds=20.0,  # CPU: skip longer sequences of a model once a step takes longer than this
    device="auto",
    dtype="auto",
    keep_heaviest_branch=False,  # pgpt: inference and sampling with only the heaviest branch
    compile=False,          # torch.compile the training step's model
    num_threads=0,          # torch.set_num_threads, as in train.py; 0 = torch's default
    seed=0,
    out="",                 # also write the results: .csv (one row per measurement) or .md (the tables)
    dry_run=False,          # print the models (sizes after --scale and overrides) and exit
    # --mode=gpu (benchmarks/gpu_suite.py)
    smoke=False,            # the GPU command's code paths on the CPU at toy sizes
    parts="",               # comma list of checks,train,paper001,decode,tests,paper004; "" = all but paper004
    results_dir="",         # "" = results/gpu (results/gpu_smoke with --smoke)
    budget_minutes=20.0,    # time for all parts but paper004; jobs that do not fit are reported as not run
    gpu_batch=0,            # training-throughput batch; 0 = each model's WikiText-103 config batch
    compile_backend="inductor",  # torch.compile backend of the GPU suite (--smoke: aot_eager)
    data_dir="",            # paper004: dataset folder for compare.py ("" = shakespeare_char, prepared if missing)
    job="",                 # internal: the one job a child process of the GPU suite runs
)
BOOL_FLAGS = ("optimizer_step", "keep_heaviest_branch", "compile", "dry_run", "smoke")
MODES = {
    "": dict(measure="train,memory,infer,sample"),
    "paper001": dict(variants="mobilellm_125m,shishulm_125", measure="train,memory,infer", optimizer_step=False),
    "paper004": dict(variants="gpt,lgpt,cgpt,pgpt", measure="train,memory,infer,sample", seq_lens="256"),
    "decode": dict(variants="gpt", measure="decode", repeats=7),
    "gpu": dict(),   # benchmarks/gpu_suite.py: its own plan (see there)
}
MEASURES = ("train", "memory", "infer", "sample", "decode")


def defaults():
    cfg = dict(BENCH_DEFAULTS)
    for key, value in gpt_config_defaults().items():
        cfg.setdefault(key, value)
    return cfg


# --- command line -------------------------------------------------------------------------------

def split_files(argv):
    """Config files (positional) and override arguments, as configurator splits them."""
    files, rest, i = [], [], 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("--") and "=" not in arg and i + 1 < len(argv):
            rest += [arg, argv[i + 1]]
            i += 2
            continue
        (rest if arg.startswith("-") else files).append(arg)
        i += 1
    return files, rest


def parse(argv):
    files, rest = split_files(expand_bool_flags(list(argv), BOOL_FLAGS))
    cfg, explicit = load_config(defaults(), rest)
    if cfg["mode"] not in MODES:
        raise UserError(f"unknown --mode={cfg['mode']} (fix: use paper001, paper004, decode, gpu or leave it out)")
    if cfg["mode"] == "gpu":   # benchmarks/gpu_suite.py has its own plan
        if cfg["smoke"] and "compile_backend" not in explicit:
            cfg["compile_backend"] = "aot_eager"
        return cfg, []
    for key, value in MODES[cfg["mode"]].items():
        if key not in explicit:
            cfg[key] = value
    if not cfg["variants"] and not files:
        cfg["variants"] = "gpt" if not cfg["mode"] else MODES[cfg["mode"]]["variants"]
    measures = [m.strip() for m in cfg["measure"].split(",") if m.strip()]
    bad = [m for m in measures if m not in MEASURES]
    if bad or not measures:
        raise UserError(f"unknown measure {bad} (fix: --measure is a comma list of {','.join(MEASURES)})")
    cfg["measure"] = measures
    try:
        cfg["seq_lens"] = [int(s) for s in str(cfg["seq_lens"]).strip("()[] ").split(",") if s.strip()]
    except ValueError:
        raise UserError(f"--seq_lens={cfg['seq_lens']} (fix: a comma list of integers, e.g. 64,128,256)")
    if not cfg["seq_lens"] or min(cfg["seq_lens"]) < 1:
        raise UserError(f"--seq_lens needs lengths >= 1, got {cfg['seq_lens']} (fix: e.g. --seq_lens=64,128,256)")
    if cfg["warmup"] < 0 or cfg["repeats"] < 1 or cfg["batch_size"] < 1 or cfg["infer_batch"] < 1:
        raise UserError("--warmup >= 0, --repeats >= 1, --batch_size >= 1, --infer_batch >= 1 required "
                        "(fix: e.g. --warmup=2 --repeats=5 --batch_size=8 --infer_batch=1)")
    if not cfg["scale"] > 0 or cfg["depth_scale"] < 0:
        raise UserError("--scale must be > 0 and --depth_scale >= 0 (fix: e.g. --scale=0.5, --depth_scale=0 to follow it)")
    model_keys = set(gpt_config_defaults())
    cli_model = {k: cfg[k] for k in explicit if k in model_keys}
    entries = [variant_entry(name.strip(), cfg, cli_model) for name in cfg["variants"].split(",") if name.strip()]
    entries += [file_entry(path, cfg, cli_model, "batch_size" in explicit) for path in files]
    return cfg, entries


def variant_entry(name, cfg, cli_model):
    args = gpt_config_defaults()
    args.update(load_variant(name))
    return finish_entry(name, args, cfg, cli_model, None)


def file_entry(path, cfg, cli_model, batch_explicit):
    """One model from a train.py config file: train.py's defaults <- the file; vocab from the dataset."""
    import train
    tcfg, texplicit = load_config(train.DEFAULTS, [path])
    args = model_args(tcfg, texplicit, vocab_size=dataset_vocab_size(tcfg))   # as train.py: the dataset's vocab
    batch = None if batch_explicit else tcfg.get("batch_size")
    return finish_entry(os.path.splitext(os.path.basename(path))[0], args, cfg, cli_model, batch)


def finish_entry(name, args, cfg, cli_model, batch):
    if cfg["scale"] != 1 or cfg["depth_scale"] not in (0, 1):
        args = scale_args(args, cfg["scale"], cfg["depth_scale"] or cfg["scale"])
    args.update(cli_model)  # explicit overrides win over presets and scaling
    try:
        GPTConfig(**args)
    except ValueError as e:
        raise UserError(f"{name}: {e} (fix: correct the model keys)") from None
    return dict(name=name, args=args, batch_size=batch or cfg["batch_size"])


# --- scaling big presets down to CPU size --------------------------------------------------------

def scale_args(args, width_scale, depth_scale):
    """Shrink width by width_scale and depth by depth_scale, keeping the preset's structure (heads,
    GQA ratio, ShishuLM's attention/MLP-only split, sharing groups, lgpt halvings); the nearest valid
    configuration is taken."""
    args = dict(depth_args(args, depth_scale))
    return width_args(args, width_scale)


def _valid(args):
    try:
        GPTConfig(**args)
        return True
    except ValueError:
        return False


def _nearest(target, lo=1, span=4096):
    """Integers >= lo ordered by distance to target (ties: the smaller first)."""
    base = int(round(target))
    return sorted(range(max(lo, base - span), base + span + 1), key=lambda x: (abs(x - target), x))


def depth_args(args, s):
    """n_layer * s, and for ShishuLM-like presets n_attn_layers (and share_from_layer) in proportion;
    the attention split gives way first, so models compared side by side keep the same depth."""
    if s == 1:
        return args
    n0, a0 = args["n_layer"], args.get("n_attn_layers")
    same_start = a0 is not None and args.get("share_from_layer") == a0
    for n in _nearest(n0 * s, lo=args.get("n_branches", 1), span=n0):
        attn_options = [None] if a0 is None else _nearest(a0 * n / n0, lo=0, span=n)
        for a in attn_options:
            if a is not None and a > n:
                continue
            cand = dict(args, n_layer=n, n_attn_layers=a)
            if same_start:
                cand["share_from_layer"] = a
            elif args.get("share_from_layer"):
                cand["share_from_layer"] = round(args["share_from_layer"] * n / n0)
            if _valid(cand):
                return cand
    raise UserError(f"no valid depth near {n0 * s:.1f} layers (fix: pass --n_layer explicitly)")


def width_args(args, s):
    if s == 1:
        return args
    w0, head = args["n_embd"], args["n_head"]
    for mult in _nearest(w0 * s / head, span=w0):
        w = mult * head
        cand = dict(args, n_embd=w)
        for key in ("mlp_hidden", "embd_factor_dim"):
            if args.get(key):
                cand[key] = max(1, round(args[key] * w / w0))
        if _valid(cand):
            return cand
    raise UserError(f"no valid width near {w0 * s:.0f} (fix: pass --n_embd explicitly)")


# --- the measurements ----------------------------------------------------------------------------

@torch.no_grad()
def bench_infer(model, cfg, device, dtype, seq, measure_memory):
    model.eval()
    vocab, batch = model.config.vocab_size, cfg["infer_batch"]
    gen = torch.Generator(device="cpu").manual_seed(cfg["seed"])
    idx = torch.randint(vocab, (batch, seq), generator=gen).to(device)
    holder = {}

    def prefill():
        cache = InferenceCache(seq)
        with autocast(device, dtype):
            model(idx, cache=cache)
        holder["cache"] = cache

    for _ in range(cfg["warmup"]):
        timed(prefill, device)
    prefill_times = [timed(prefill, device) for _ in range(cfg["repeats"])]
    out = dict(prefill_ms=median_ms(prefill_times), kv_bytes=holder["cache"].nbytes())
    holder.clear()

    d = max(1, min(cfg["decode_steps"], seq - 1)) if seq > 1 else 0
    if d:
        step_times = []
        for r in range(cfg["warmup"] + cfg["repeats"]):
            cache = InferenceCache(seq)
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
    cache = model.new_cache()
    with autocast(device, dtype):
        model(start, cache=cache)
    out["kv_block_bytes"] = cache.nbytes()
    return out


def weight_matrices(model):
    """(weight, bias) of every matrix a decode step multiplies the new token by, each once: the Linears,
    cgpt's Conv1d as an (out, in * kernel) matrix, and the output head (the token embedding when tied)."""
    mats = [(m.weight.flatten(1), m.bias) for m in model.modules() if isinstance(m, (torch.nn.Linear, torch.nn.Conv1d))]
    if model.config.tie_embeddings:
        mats.append((model.tok_emb.wte.weight, None))
    return mats


@torch.inference_mode()
def bench_decode(model, cfg, device, dtype):
    """Cached decoding vs the weight-streaming floor, in alternating rounds (see --measure=decode)."""
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
            model.generate(start, n_tokens, temperature=0.8, top_k=200, generator=gen, compile=compile)

    def floor_run():   # as many weight passes as decode steps, timed the same way
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
    floor, times = [], {p: [] for p in paths}
    for r in range(cfg["warmup"] + cfg["repeats"]):
        f = measure(floor_run)
        t = {p: measure(lambda: decode(p)) for p in paths}
        if r >= cfg["warmup"]:
            floor.append(f)
            for p in paths:
                times[p].append(t[p])
    out = dict(decode_tokens=n_tokens, clock="cpu time" if cpu_clock else "wall", floor_ms=median_ms(floor), floor_mb=sum(
        w.numel() * w.element_size() + (0 if b is None else b.numel() * b.element_size()) for w, b in mats) / 1e6,
        decode_ms_token=median_ms(times[False]))
    out["decode_vs_floor"] = out["decode_ms_token"] / out["floor_ms"]
    if cfg["compile"]:
        out["compiled_ms_token"] = median_ms(times[True])
    print(f"  {model_label(model)} decode: {out['decode_ms_token']:.3f} ms/token, floor {out['floor_ms']:.3f} ms "
          f"({out['decode_vs_floor']:.2f}x)", file=sys.stderr, flush=True)
    return out


def model_label(model):
    c = model.config
    return f"{c.n_layer}L d{c.n_embd} ctx{c.block_size}"


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
        except getattr(torch, "OutOfMemoryError", MemoryError):
            row["note"] = "OOM"
            torch.cuda.empty_cache()
        rows.append(row)
        print(f"  {name} seq {seq}: " + ", ".join(f"{k}={_short(v)}" for k, v in row.items()
                                                   if k not in base and k not in ("seq", "infer_model")), file=sys.stderr, flush=True)
    for seq in skipped:
        rows.append(dict(base, seq=seq, note=f"skipped: > block_size {block}"))
    sample = None
    if "sample" in measures or "decode" in measures:
        keep = set_branch(model, cfg["keep_heaviest_branch"])
        sample = dict(base, infer_model=branch_label(model, name))
        if "sample" in measures:
            sample.update(gen_tokens=cfg["gen_tokens"], **bench_sample(model, cfg, device, dtype))
            print(f"  {name} sampling: {_short(sample['sample_tok_s_cache'])} tok/s cached, "
                  f"{_short(sample['sample_tok_s_plain'])} plain", file=sys.stderr, flush=True)
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


def _short(v):
    return f"{v:.4g}" if isinstance(v, float) else str(v)


# --- tables ----------------------------------------------------------------------------------------

def mb(v):
    if v is None:
        return "n/a"
    v = v / 2**20
    return f"{v:.1f}" if v >= 10 else f"{v:.3g}"


def num(v, spec):
    return "n/a" if v is None else format(v, spec)


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" if i == 0 else "---:" for i in range(len(header))) + "|"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def ratio_vs(rows, ref_model, key, row, higher_is_better=False):
    """row[key] relative to ref_model's at the same seq and batch: > 1 means row is faster (ms) / larger."""
    ref = next((r.get(key) for r in rows if r["model"] == ref_model and r["seq"] == row["seq"]
                and r["batch"] == row["batch"]), None)
    value = row.get(key)
    if ref is None or value is None:
        return "n/a"
    return f"{(value / ref if higher_is_better else ref / value):.2f}x"


def render(cfg, entries, rows, samples, device, dtype):
    out = []
    m = cfg["measure"]
    first = entries[0]["name"]
    if "train" in m or "memory" in m:
        what = "forward + backward + AdamW step" if cfg["optimizer_step"] else "forward + backward (no optimizer step)"
        out.append(f"### Training: {what}, random tokens, median of {cfg['repeats']} after {cfg['warmup']} warm-up")
        body = []
        for r in rows:
            if "train_ms" not in r:
                body.append([r["model"], f"{r['params'] / 1e6:.2f}M", r["seq"], r["batch"], r.get("note", "n/a"), "", "", ""])
                continue
            body.append([r["model"], f"{r['params'] / 1e6:.2f}M", r["seq"], r["batch"], f"{r['train_ms']:.1f}",
                         f"{r['train_tok_s']:,.0f}", ratio_vs(rows, first, "train_ms", r),
                         mb(r.get("train_peak_bytes")) if "memory" in m else "-"])
        out.append(table(["model", "params", "seq", "batch", "ms/iter", "tokens/s", f"speed vs {first}",
                          "peak MB"], body))
    if "infer" in m or "memory" in m:
        out.append(f"### Inference: batch {cfg['infer_batch']}, prefill into an empty KV cache, then "
                   f"{cfg['decode_steps']} single-token decode steps (median)")
        body = []
        for r in rows:
            if "prefill_ms" not in r:
                continue
            body.append([r["infer_model"], r["seq"], f"{r['prefill_ms']:.2f}", num(r.get("decode_ms"), ".2f"),
                         ratio_vs(rows, first, "decode_ms", r), mb(r["kv_bytes"]),
                         mb(r.get("infer_peak_bytes")) if "memory" in m else "-"])
        out.append(table(["model", "seq", "prefill ms", "decode ms/token", f"decode speed vs {first}",
                          "KV cache MB", "peak MB (prefill)"], body))
    sampled = [s for s in samples if "sample_tok_s_cache" in s]
    decoded = [s for s in samples if "decode_ms_token" in s]
    if sampled:
        out.append(f"### Sampling: {cfg['gen_tokens']} new tokens from one token, batch 1, "
                   f"temperature 1, with and without the KV cache")
        body = [[s["infer_model"], s["gen_tokens"], f"{s['sample_tok_s_cache']:.1f}", f"{s['sample_tok_s_plain']:.1f}",
                 f"{s['sample_tok_s_cache'] / s['sample_tok_s_plain']:.1f}x", mb(s["kv_block_bytes"])] for s in sampled]
        out.append(table(["model", "new tokens", "tokens/s (KV cache)", "tokens/s (no cache)", "speed-up",
                          "KV cache MB (block_size)"], body))
    if decoded:
        out.append(f"### Decoding vs the weight-streaming floor: batch 1, median of {cfg['repeats']} alternating "
                   f"rounds after {cfg['warmup']} warm-up, {decoded[0]['clock']} (floor: one F.linear per weight "
                   f"matrix on a 1-token input)")
        compiled = "compiled_ms_token" in decoded[0]
        body = [[s["infer_model"], s["decode_tokens"], f"{s['floor_mb']:.1f}", f"{s['floor_ms']:.3f}",
                 f"{s['decode_ms_token']:.3f}", f"{1000 / s['decode_ms_token']:.0f}", f"{s['decode_vs_floor']:.2f}x"]
                + ([f"{s['compiled_ms_token']:.3f}", f"{1000 / s['compiled_ms_token']:.0f}"] if compiled else [])
                for s in decoded]
        out.append(table(["model", "tokens", "weights MB", "floor ms", "decode ms/token", "tokens/s",
                          "decode / floor"] + (["compiled ms/token", "compiled tokens/s"] if compiled else []), body))
    if cfg["mode"] == "paper001" and len(entries) >= 2:
        out += paper001_tables(entries[0]["name"], entries[1]["name"], rows, m)
    return "\n\n".join(out)


def paper001_tables(a, b, rows, m):
    """Paper 001 Tables 3-6 layout: per length, A and B for training and inference, % reduction of B vs A."""
    by = {(r["model"], r["seq"]): r for r in rows}
    seqs = sorted({r["seq"] for r in rows if (a, r["seq"]) in by and (b, r["seq"]) in by})

    def red(x, y):
        return "n/a" if x is None or y is None or x == 0 else f"{100 * (x - y) / x:.2f}"

    def block(title, train_key, infer_key, fmt):
        body = []
        for s in seqs:
            ra, rb = by[(a, s)], by[(b, s)]
            ta, tb, ia, ib = ra.get(train_key), rb.get(train_key), ra.get(infer_key), rb.get(infer_key)
            if ta is None and ia is None:
                continue
            body.append([s, fmt(ta), fmt(tb), red(ta, tb), fmt(ia), fmt(ib), red(ia, ib)])
        hdr = ["Length", f"Training {a}", f"Training {b}", "(% reduction)", f"Inference {a}", f"Inference {b}",
               "(% reduction)"]
        return f"### {title}\n" + table(hdr, body)

    out = []
    ms = lambda v: num(v, ".2f")
    if "train" in m or "infer" in m:
        out.append(block(f"Paper 001 Tables 3/4 layout: latency (ms) of {a} and {b} (training = forward + backward "
                         f"per step; inference = prefill forward)", "train_ms", "prefill_ms", ms))
    if "memory" in m:
        gb = lambda v: "n/a" if v is None else f"{v / 2**30:.4f}"
        out.append(block(f"Paper 001 Tables 5/6 layout: peak memory (GiB) of {a} and {b}",
                         "train_peak_bytes", "infer_peak_bytes", gb))
    return out


def write_csv(path, records):
    """One CSV row per record; the columns are every key that appears, in order of first appearance."""
    import csv
    keys = []
    for r in records:
        keys += [k for k in r if k not in keys]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(records)


def write_out(path, text, rows, samples):
    if path.endswith(".csv"):
        write_csv(path, rows + [dict(s, seq="sample" if "sample_tok_s_cache" in s else "decode") for s in samples])
    else:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text + "\n")


def header(cfg, entries, device, dtype):
    load = "n/a"
    if hasattr(os, "getloadavg"):
        load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    lines = [f"bench: torch {torch.__version__}, device {device}"
             + (f" ({torch.cuda.get_device_name()})" if device.startswith("cuda") else "")
             + f", {str(dtype).replace('torch.', '')}, {torch.get_num_threads()} threads, "
               f"{os.cpu_count()} CPUs, load average {load}"]
    if device == "cpu" and hasattr(os, "getloadavg") and torch.get_num_threads() > 1 \
            and os.getloadavg()[0] > (os.cpu_count() or 1) - torch.get_num_threads() + 0.5:
        lines.append(f"warning: the machine is busy (load {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs): "
                     f"{torch.get_num_threads()} torch threads wait on each other, timings can be inflated many "
                     f"times (fix: --num_threads=1)")
    if cfg["scale"] != 1 or cfg["depth_scale"] not in (0, 1):
        lines.append(f"scaled: width x{cfg['scale']:g}, depth x{(cfg['depth_scale'] or cfg['scale']):g} "
                     f"(nearest valid sizes; explicit --key=value overrides applied after scaling)")
    for e in entries:
        with torch.device("meta"):  # sizes without allocating or initialising any weights
            n = GPT(GPTConfig(**e["args"])).get_num_params(non_embedding=False)
        lines.append(f"  {e['name']}: {n / 1e6:.2f}M params, {describe(e['args'])}")
    return "\n".join(lines)


def check_out_file(path):
    """--out is checked before any measurement: its folder must exist and be writable."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
        raise UserError(f"--out={path}: the folder {folder} does not exist or is not writable "
                        f"(fix: create it, or write elsewhere)")


def main(argv):
    """The command line. Bad input (UserError, from here or the GPU suite) ends here as one line `error: ...`
    and exit code 1, nowhere else."""
    try:
        run(argv)
    except UserError as e:
        raise SystemExit(f"error: {e}") from None


def run(argv):
    cfg, entries = parse(argv)
    if cfg["out"]:
        check_out_file(cfg["out"])
    if cfg["mode"] == "gpu":
        from benchmarks import gpu_suite
        sys.exit(gpu_suite.main(cfg, argv))
    if cfg["num_threads"]:
        torch.set_num_threads(cfg["num_threads"])
    device = str(resolve_device(cfg["device"]))
    dtype = getattr(torch, resolve_dtype(cfg["dtype"], device))
    head = header(cfg, entries, device, dtype)
    print(head, flush=True)
    if cfg["dry_run"]:
        return
    rows, samples = [], []
    for entry in entries:
        r, s = run_entry(entry, cfg, device, dtype)
        rows += r
        if s:
            samples.append(s)
    text = render(cfg, entries, rows, samples, device, dtype)
    print()
    print(text)
    if cfg["out"]:
        write_out(cfg["out"], head + "\n\n" + text, rows, samples)
        print(f"\nwrote {cfg['out']}")


if __name__ == "__main__":
    main(sys.argv[1:])
