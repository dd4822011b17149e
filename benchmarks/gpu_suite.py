"""
Everything a GPU has to show, in one command (issue 13). Run it the moment a GPU is there:

    python bench.py --mode=gpu                        # one GPU, at most --budget_minutes=20: results/gpu/
    python bench.py --mode=gpu --parts=paper004       # paper 004's full recipe (compare.py): ~20 min of its own
    python bench.py --mode=gpu --smoke                # the same code paths on the CPU at toy sizes (< 3 min)

Parts, in run order (--parts picks some, or single jobs such as train:gpt2_124m; the default is all but paper004):
  checks    model correctness on the device for every preset in variants/, float32 and bfloat16 autocast:
            causality (changing the tokens after position i leaves the logits up to i unchanged, and does
            change the later ones), KV-cache decoding equals the full forward (prefill, then one token at a
            time), save/load round trip. Errors are max |difference| / max |logit|; tolerances in TOLERANCE.
  train     training throughput at sequence 1024, the batch of config/<model>_wikitext103.py (--gpu_batch
            overrides; an OOM is reported as such), bf16 autocast, torch.compile, fused
            AdamW and gradient clipping as train.py, on random tokens: ms/iter, tokens/s, MFU (the model's
            flops_per_token over the device's peak bf16 FLOP/s) and peak memory, for gpt2_124m, mobilellm_125m,
            shishulm_125, layer_sharing, enhanced_residual, deep_thinking, and the plain GPT-2 of
            benchmarks/plain_gpt_speed.py at gpt2_124m's size as the reference (ratio).
  paper001  paper 001 Tables 3-6 at full size: bench.py --mode=paper001 (MobileLLM-125M vs ShishuLM-125,
            forward+backward and prefill latency, peak memory) at lengths 64-4096, batch 1, bf16.
  decode    batch-1 sampling: eager KV-cache decoding vs the compiled static-cache step (sample.py --compile),
            tokens/s, for the 6x384 gpt and gpt2_124m (bench.py --measure=decode --compile).
  tests     pytest -m slow tests/test_compile.py: every architecture family compiled with inductor on the GPU
            (loss equal to eager, no recompilation), and the compiled decode step.
  paper004  python compare.py config/compare_shakespeare.py: paper 004's Table 1 / Figure 6 at the paper's
            recipe (6x384, ctx 256, batch 64, 5000 iterations; gpt, pgpt, lgpt, cgpt), with its duration.

Each job runs in its own process with a time limit (a stuck compile cannot take the rest down), and what a
job measured is saved as it goes, so a crash or a timeout keeps everything before it. Results go to
--results_dir (results/gpu; results/gpu_smoke with --smoke): README.md (all tables), measurements.csv
(one row per measurement), throughput.png, paper001.png, decode.png, raw/<job>.json, logs/<job>.log.
A later run with --parts=... replaces only those jobs' results and rewrites the report.

--smoke: device cpu, every model shrunk to a toy size (bench.py's --scale), compile backend aot_eager
(dynamo and AOTAutograd, no C++ code generation), short runs; it proves the command works, measures nothing.
"""

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import time

import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

import variants  # noqa: E402
from benchmarks.entries import file_entry, scale_args, variant_entry  # noqa: E402
from benchmarks.measure import bench_decode, median_ms, peak_flops, run_entry, timed  # noqa: E402
from benchmarks.report import paper001_tables, short, write_csv  # noqa: E402
from configurator import UserError, autocast, gpt_config_defaults, resolve_device  # noqa: E402
from model import GPT, GPTConfig  # noqa: E402
from decoding.generate import compiled_decode_step, static_cache  # noqa: E402

DEFAULT_PARTS = ("checks", "train", "paper001", "decode", "tests")
PARTS = DEFAULT_PARTS + ("paper004",)
TRAIN_MODELS = ("gpt2_124m", "mobilellm_125m", "shishulm_125", "layer_sharing", "enhanced_residual", "deep_thinking")
GPT2_CONFIG = os.path.join(REPO, "config", "gpt2_124m_wikitext103.py")   # GPT-2 124M is a config, not a preset
# max |difference| / max |logit| allowed per check and dtype (bf16: 8 mantissa bits, and the cached and the
# full path run different kernels, so rounding differs; causality and save/load must hold exactly)
TOLERANCE = {
    "float32": dict(causal=1e-5, cache=1e-4, save_load=1e-6),
    "bfloat16": dict(causal=1e-3, cache=5e-2, save_load=1e-6),
}
SMOKE = dict(scale=0.1, layers=3, vocab_size=512, seq=64, batch=2, paper001_seqs=[32, 64], block_size=64, decode_tokens=24)
MFU_TARGET = 0.45


# --- the orchestrator ------------------------------------------------------------------------------

def plan(parts):
    """[(job, part, time limit in s)] in run order: what matters most first, the slowest compile last. `parts`
    names parts ("train") or single jobs ("train:gpt2_124m")."""
    jobs = [("checks", "checks", 300), ("train:plain_gpt2", "train", 180)]
    jobs += [(f"train:{m}", "train", 180) for m in TRAIN_MODELS if m != "deep_thinking"]
    jobs += [("paper001", "paper001", 300), ("decode", "decode", 300), ("train:deep_thinking", "train", 420),
             ("tests", "tests", 600), ("paper004", "paper004", 3600)]
    return [j for j in jobs if j[0] in parts or j[1] in parts]


def main(cfg, argv):
    if cfg["job"]:
        return run_job(cfg)
    parts = [p.strip() for p in (cfg["parts"] or ",".join(DEFAULT_PARTS + (("paper004",) if cfg["smoke"] else ())))
             .split(",") if p.strip()]
    bad = [p for p in parts if not plan([p])]
    if bad:
        raise UserError(f"unknown --parts {bad} (fix: a comma list of {','.join(PARTS)}, or of jobs such as "
                        f"train:gpt2_124m)")
    device = job_device(cfg)
    out = results_dir(cfg)
    for sub in ("raw", "logs"):
        os.makedirs(os.path.join(out, sub), exist_ok=True)
    print(f"bench --mode=gpu{' --smoke' if cfg['smoke'] else ''}: {device_name(device)}, torch {torch.__version__}; "
          f"parts {','.join(parts)}; budget {cfg['budget_minutes']:g} min (paper004 has its own); -> {out}", flush=True)
    t_start = time.time()
    deadline = t_start + 60 * cfg["budget_minutes"]
    status = load_json(os.path.join(out, "raw", "_status.json"), {})
    for job, part, limit in plan(parts):
        left = deadline - time.time()
        if part != "paper004" and left < 20:
            status[job] = dict(status="not run: the time budget was spent", seconds=0, when=now())
            print(f"  {job}: not run (budget spent)", flush=True)
            continue
        limit = limit if part == "paper004" else min(limit, left)
        t0 = time.time()
        result = launch(job, argv, out, limit)
        status[job] = dict(status=result, seconds=round(time.time() - t0, 1), when=now())
        print(f"  [{time.time() - t_start:6.0f}s] {job}: {result} ({time.time() - t0:.0f}s)", flush=True)
        save_json(os.path.join(out, "raw", "_status.json"), status)
    report(out, status, dict(command="python bench.py " + " ".join(argv), device=device_name(device),
                             torch=torch.__version__, seconds=round(time.time() - t_start), smoke=cfg["smoke"]))
    print(f"wrote {os.path.join(out, 'README.md')} (+ measurements.csv, *.png, raw/, logs/)", flush=True)
    return 1 if any(status[job]["status"] != "ok" for job, _, _ in plan(parts)) else 0


def launch(job, argv, out, limit):
    """Run one job in a child process (its own process group, killed as a whole on timeout)."""
    cmd = [sys.executable, os.path.join(REPO, "bench.py")] + list(argv) + [f"--results_dir={out}", f"--job={job}"]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    with open(os.path.join(out, "logs", job.replace(":", "_") + ".log"), "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=REPO, env=env, start_new_session=True)
        try:
            rc = proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return f"timeout after {limit:.0f}s (partial results kept)"
    return "ok" if rc == 0 else f"failed: exit {rc} (logs/{job.replace(':', '_')}.log)"


def job_device(cfg):
    if cfg["smoke"]:
        return "cpu"
    device = str(resolve_device(cfg["device"]))
    if not device.startswith("cuda"):
        raise UserError("--mode=gpu needs a CUDA GPU (fix: run it on a GPU machine, or add --smoke for "
                        "the CPU dry run at toy sizes)")
    return device


def device_name(device):
    return torch.cuda.get_device_name(device) if device.startswith("cuda") else f"cpu ({os.cpu_count()} cores)"


def results_dir(cfg):
    d = cfg["results_dir"] or os.path.join(REPO, "results", "gpu_smoke" if cfg["smoke"] else "gpu")
    return os.path.abspath(d)


def now():
    return time.strftime("%Y-%m-%d %H:%M:%S")


def load_json(path, default):
    if not os.path.isfile(path):
        return default
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def save_json(path, obj):
    """Write via a temporary file and a rename: a job killed mid-write leaves the previous version (no
    fsync: these are small, re-creatable files, and fsync can take seconds on a busy disk)."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1, default=str)
    os.replace(tmp, path)


# --- one job, in its own process ----------------------------------------------------------------------

class Rows:
    """A job's measurements, rewritten to raw/<job>.json after each one (a later timeout keeps them)."""

    def __init__(self, out, job):
        self.path = os.path.join(out, "raw", job.replace(":", "_") + ".json")
        self.rows = []
        save_json(self.path, self.rows)

    def add(self, row):
        self.rows.append(row)
        save_json(self.path, self.rows)
        print("  " + ", ".join(f"{k}={short(v)}" for k, v in row.items()), flush=True)


def run_job(cfg):
    job = cfg["job"]
    part, _, item = job.partition(":")
    device = job_device(cfg)
    if cfg["num_threads"] or cfg["smoke"]:   # toy models: one thread is fastest, and robust on a busy CPU
        torch.set_num_threads(cfg["num_threads"] or 1)
    if device.startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = True   # as train.py; the checks switch it off for themselves
        torch.backends.cudnn.allow_tf32 = True
    rows = Rows(results_dir(cfg), job)
    {"checks": job_checks, "train": job_train, "paper001": job_paper001, "decode": job_decode,
     "tests": job_tests, "paper004": job_paper004}[part](cfg, item, device, rows)


def preset_args(name, cfg):
    """GPTConfig kwargs of a variants/ preset (gpt2_124m: its config file); toy-sized with --smoke."""
    if name == "gpt2_124m":
        args = file_entry(GPT2_CONFIG, cfg, {}, True)["args"]
    else:
        args = dict(gpt_config_defaults(), **variants.load(name))
    return smoke_size(args) if cfg["smoke"] else args


def smoke_size(args):
    """About 3 layers, a tenth of the width: each family keeps its structure (GQA, sharing, branches, ...)."""
    args = scale_args(args, SMOKE["scale"], min(1.0, SMOKE["layers"] / args["n_layer"]))
    return dict(args, vocab_size=SMOKE["vocab_size"], block_size=SMOKE["block_size"])


def wikitext_config(name, cfg):
    """(GPTConfig kwargs, batch_size) of config/<name>_wikitext103.py, the model as train.py would build it
    (full size: bench's --scale does not apply)."""
    unscaled = dict(cfg, scale=1.0, depth_scale=0.0)
    entry = file_entry(os.path.join(REPO, "config", f"{name}_wikitext103.py"), unscaled, {}, False)
    return entry["args"], entry["batch_size"]


def build(args, device, seed=0):
    torch.manual_seed(seed)
    with torch.device(device):   # initialise on the device: a 600M model is slow to initialise on a CPU
        return GPT(GPTConfig(**args))


def free(device):
    if device.startswith("cuda"):
        torch.cuda.empty_cache()


# checks

def job_checks(cfg, item, device, rows):
    for name in variants.available():
        for dtype in ("float32", "bfloat16"):
            row = dict(part="checks", model=name, dtype=dtype)
            try:
                row.update(check_model(preset_args(name, cfg), device, getattr(torch, dtype)))
                tol = TOLERANCE[dtype]
                row["ok"] = bool(row["causal_err"] <= tol["causal"] and row["later_changed"] > 0
                                 and row["cache_err"] <= tol["cache"] and row["save_load_err"] <= tol["save_load"])
            except Exception as e:   # one broken model must not hide the others
                row.update(ok=False, error=f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
            rows.add(row)
            free(device)


@torch.inference_mode()
def check_model(args, device, dtype):
    """Relative errors (max |difference| / max |logit|) of the three correctness checks of tests/test_model.py."""
    if device.startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = False   # float32 means float32 here
        torch.backends.cudnn.allow_tf32 = False
    model = build(args, device)
    with torch.no_grad():   # as tests/test_model.py: give zero-initialised biases, alphas, branch logits a value
        for p in model.parameters():
            if p.dim() < 2:
                p.add_(0.3 * torch.randn_like(p))
    model.eval()
    vocab, T = model.config.vocab_size, min(48, model.config.block_size)
    gen = torch.Generator().manual_seed(1)
    idx = torch.randint(vocab, (2, T), generator=gen).to(device)

    def logits(m, x, **kw):
        with autocast(device, dtype):
            return m(x, **kw)[0].float()

    full = logits(model, idx, all_logits=True)
    scale = full.abs().max().item()
    rel = lambda a, b: (a - b).abs().max().item() / scale  # noqa: E731
    i = T // 2
    changed = idx.clone()
    changed[:, i + 1:] = (changed[:, i + 1:] + 7) % vocab
    after = logits(model, changed, all_logits=True)
    out = dict(params=model.get_num_params(False), seq=T, causal_err=rel(after[:, :i + 1], full[:, :i + 1]),
               later_changed=rel(after[:, i + 1:], full[:, i + 1:]))
    cache, prefill = model.new_cache(), T // 3
    errs = [rel(logits(model, idx[:, :prefill], cache=cache, all_logits=True), full[:, :prefill])]
    for t in range(prefill, T):
        errs.append(rel(logits(model, idx[:, t:t + 1], cache=cache)[:, -1], full[:, t]))
    out["cache_err"] = max(errs)
    buf = io.BytesIO()
    torch.save({"model": model.state_dict(), "model_args": args}, buf)
    buf.seek(0)
    ckpt = torch.load(buf, map_location=device, weights_only=True)
    clone = build(ckpt["model_args"], device, seed=1)
    clone.load_state_dict(ckpt["model"])
    out["save_load_err"] = rel(logits(clone.eval(), idx, all_logits=True), full)
    return out


# train

def job_train(cfg, item, device, rows):
    """One model of the throughput table, at its WikiText-103 config's batch (--gpu_batch overrides)."""
    smoke = cfg["smoke"]
    args, batch = wikitext_config("gpt2_124m" if item == "plain_gpt2" else item, cfg)
    seq, batch = (SMOKE["seq"], SMOKE["batch"]) if smoke else (1024, cfg["gpu_batch"] or batch)
    args = smoke_size(args) if smoke else args
    args["block_size"] = max(args["block_size"], seq)
    if item == "plain_gpt2":
        from benchmarks.plain_gpt_speed import PlainGPT
        torch.manual_seed(0)
        with torch.device(device):
            model = PlainGPT(args["vocab_size"], seq, args["n_layer"], args["n_head"], args["n_embd"])
        opt = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1,
                                fused=device.startswith("cuda"))
    else:
        model = build(args, device)
        opt = model.configure_optimizers(0.1, 6e-4, (0.9, 0.95), device.split(":")[0])
    with torch.device("meta"):   # PlainGPT does what our GPT does at this config: the same FLOPs
        flops = GPT(GPTConfig(**args)).flops_per_token(seq)
    params = sum(p.numel() for p in model.parameters())
    row = dict(part="train", model=item, params=params, batch=batch, seq=seq, dtype="bfloat16",
               compile=cfg["compile_backend"], flops_per_token=flops)
    try:
        row.update(time_training(model, opt, cfg, device, seq, batch, warmup=1 if smoke else 3,
                                 repeats=2 if smoke else 10))
    except getattr(torch, "OutOfMemoryError", MemoryError) as e:
        row["note"] = f"OOM at batch {batch}: {str(e).splitlines()[0][:120]}"
        rows.add(row)
        return
    peak = peak_flops(device)
    row["mfu"] = flops * row["tok_s"] / peak if peak else None
    rows.add(row)


def time_training(model, opt, cfg, device, seq, batch, warmup, repeats):
    """train.py's step on random tokens (bf16 autocast, compiled model, clip 1.0, AdamW); the first step
    (compilation) timed on its own, then warm-up, then the median of `repeats` steps and their peak memory."""
    vocab = model.tok.num_embeddings if hasattr(model, "tok") else model.config.vocab_size
    gen = torch.Generator().manual_seed(0)
    data = torch.randint(vocab, (batch, seq + 1), generator=gen).to(device)
    x, y = data[:, :-1].contiguous(), data[:, 1:].contiguous()   # as train.py's batches
    runner = torch.compile(model, backend=cfg["compile_backend"])
    model.train()

    def step():
        with autocast(device, torch.bfloat16):
            _, loss = runner(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    out = dict(first_step_s=timed(step, device))
    for _ in range(warmup):
        timed(step, device)
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    times = [timed(step, device) for _ in range(repeats)]
    ms = median_ms(times)
    out.update(ms_iter=ms, tok_s=batch * seq / (ms / 1000))
    out["peak_gb"] = torch.cuda.max_memory_allocated() / 2**30 if device.startswith("cuda") else None
    return out


# paper 001

def job_paper001(cfg, item, device, rows):
    smoke = cfg["smoke"]
    seqs = SMOKE["paper001_seqs"] if smoke else [64, 128, 256, 512, 1024, 2048, 4096]
    bcfg = dict(cfg, mode="paper001", measure=["train", "memory", "infer"], optimizer_step=False, compile=False,
                seq_lens=seqs, batch_size=1, infer_batch=1, warmup=1 if smoke else 2, repeats=2 if smoke else 5,
                decode_steps=4 if smoke else 16)
    over = dict(block_size=max(seqs))    # 4096 > the presets' 2048: RoPE tables sized to the longest length
    if smoke:
        bcfg.update(scale=SMOKE["scale"], depth_scale=SMOKE["layers"] / 30)
        over["vocab_size"] = SMOKE["vocab_size"]
    dtype = torch.float32 if smoke else torch.bfloat16
    for name in ("mobilellm_125m", "shishulm_125"):
        entry = variant_entry(name, bcfg, over)
        per_seq, _ = run_entry(entry, bcfg, device, dtype)
        for r in per_seq:
            rows.add(dict(part="paper001", dtype=str(dtype).replace("torch.", ""), **r))


# decode

def job_decode(cfg, item, device, rows):
    smoke = cfg["smoke"]
    for name in ("gpt", "gpt2_124m"):
        args = preset_args(name, cfg)
        model = build(args, device).eval()
        n = SMOKE["decode_tokens"] if smoke else min(500, model.config.block_size - 1)
        dtype = torch.float32 if smoke else torch.bfloat16
        t0 = time.time()
        compiled_decode_step(model, cfg["compile_backend"])
        with autocast(device, dtype):
            model.generate(torch.zeros((1, 1), dtype=torch.long, device=device), 4, compile=True)
        compile_s = time.time() - t0
        bcfg = dict(cfg, gen_tokens=n, compile=True, warmup=1, repeats=2 if smoke else 3)
        r = bench_decode(model, bcfg, device, dtype)
        with autocast(device, dtype):
            tokens = model.generate(torch.zeros((1, 1), dtype=torch.long, device=device), n, temperature=0.0)
        agree, logit_err = compiled_agreement(model, tokens, device, dtype, cfg["compile_backend"])
        rows.add(dict(part="decode", model=name, params=model.get_num_params(False), dtype=str(dtype).replace("torch.", ""),
                      tokens=n, eager_ms_token=r["decode_ms_token"], compiled_ms_token=r["compiled_ms_token"],
                      eager_tok_s=1000 / r["decode_ms_token"], compiled_tok_s=1000 / r["compiled_ms_token"],
                      speedup=r["decode_ms_token"] / r["compiled_ms_token"], compile_s=compile_s,
                      floor_ms=r["floor_ms"], argmax_agree=agree, logit_err=logit_err))
        del model
        free(device)


@torch.inference_mode()
def compiled_agreement(model, tokens, device, dtype, backend):
    """The eager cached step and the compiled static-cache step fed the same tokens (teacher forcing: two
    free-running greedy decodings are no check, since one near-tie flips a token and all later ones differ):
    the share of steps whose argmax agrees, and the max |logit difference| / max |logit|."""
    step, eager_cache, agree, err = compiled_decode_step(model, backend), model.new_cache(), [], []
    with autocast(device, dtype):
        static = static_cache(model, 1)   # under autocast: the cache of bench_decode's compiled runs (same graph)
        static.reset()
        a, b = model(tokens[:, :1], cache=eager_cache)[0], model(tokens[:, :1], cache=static)[0]   # the prime
        for t in range(1, tokens.size(1)):
            a, b = a[:, -1].float(), b[:, -1].float()
            agree.append((a.argmax(-1) == b.argmax(-1)).float().mean().item())
            err.append(((a - b).abs().max() / a.abs().max()).item())
            a, b = model.decode_step(tokens[:, t:t + 1], eager_cache), step(tokens[:, t:t + 1], static)
    return sum(agree) / len(agree), max(err)


# tests

def job_tests(cfg, item, device, rows):
    select = ["-k", "refuses_deep_thinking"] if cfg["smoke"] else ["-m", "slow"]   # smoke: the path, not the proofs
    cmd = [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "tests/test_compile.py"] + select
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    for line in proc.stdout:   # into the job's log as it comes: a timeout still shows which tests passed
        print(line, end="", flush=True)
        lines.append(line.strip())
    proc.wait()
    lines = [ln for ln in lines if ln]
    rows.add(dict(part="tests", command=" ".join(["pytest"] + cmd[3:]), exit=proc.returncode,
                  summary=lines[-1].strip("= ") if lines else "", ok=proc.returncode == 0))


# paper 004

def job_paper004(cfg, item, device, rows):
    out = results_dir(cfg)
    compare_dir = "out-gpu-paper004-smoke" if cfg["smoke"] else "out-gpu-paper004"   # checkpoints: not in results/
    cmd = [sys.executable, "compare.py", "config/compare_shakespeare.py", f"--compare_dir={compare_dir}"]
    if cfg["data_dir"]:
        cmd.append(f"--data_dir={cfg['data_dir']}")
    if cfg["smoke"]:
        cmd += ["--device=cpu", "--dtype=float32", "--compile=False", "--n_layer=2", "--n_head=2", "--n_embd=16",
                "--block_size=16", "--batch_size=2", "--max_iters=3", "--eval_interval=3", "--eval_iters=1",
                "--lr_decay_iters=3", "--warmup_iters=1", "--sample_tokens=4", "--bench_iters=1", "--log_interval=1"]
    t0 = time.time()
    proc = subprocess.run(cmd, cwd=REPO)
    seconds = time.time() - t0
    copied = []
    for name in ("results.md", "results.csv", "loss_curves.png", "samples.md"):
        src = os.path.join(REPO, compare_dir, name)
        if os.path.isfile(src):   # results.md/.csv/loss_curves.png are git-ignored names: keep them prefixed
            dst = os.path.join(out, "paper004_" + name)
            with open(src, "rb") as f, open(dst, "wb") as g:
                g.write(f.read())
            copied.append(os.path.basename(dst))
    rows.add(dict(part="paper004", command=" ".join(["python"] + cmd[1:]),
                  exit=proc.returncode, seconds=seconds, files=" ".join(copied), ok=proc.returncode == 0))


# --- the report -----------------------------------------------------------------------------------------

def load_rows(out, jobs):
    """All saved measurements, in run order (jobs), then any other job files found."""
    raw = os.path.join(out, "raw")
    files = [job.replace(":", "_") + ".json" for job in jobs]
    files += sorted(n for n in os.listdir(raw) if n.endswith(".json") and not n.startswith("_") and n not in files)
    rows = []
    for name in files:
        rows += load_json(os.path.join(raw, name), [])
    return rows


def fmt(v, spec=".3g"):
    return "n/a" if v is None else format(v, spec)


def report(out, status, meta):
    rows = load_rows(out, [job for job, _, _ in plan(PARTS)])
    by = {}
    for r in rows:
        by.setdefault(r["part"], []).append(r)
    md = ["# GPU measurements (`python bench.py --mode=gpu`)" + (" -- SMOKE RUN: toy sizes on the CPU, not "
                                                                   "measurements" if meta["smoke"] else ""),
          f"Last run: `{meta['command']}` on {meta['device']}, torch {meta['torch']}, {meta['seconds']} s, "
          f"finished {now()}.", "", "| job | status | seconds | when |", "|---|---|---:|---|"]
    md += [f"| {job} | {s['status']} | {s['seconds']} | {s['when']} |" for job, s in status.items()]
    md += section_checks(by.get("checks", []))
    md += section_tests(by.get("tests", []))
    md += section_train(by.get("train", []))
    md += section_paper004(by.get("paper004", []))
    md += section_paper001(by.get("paper001", []))
    md += section_decode(by.get("decode", []))
    with open(os.path.join(out, "README.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(md) + "\n")
    write_csv(os.path.join(out, "measurements.csv"), rows)
    plot(out, by)


def section_checks(rows):
    if not rows:
        return []
    tol = "; ".join(f"{d}: causality {t['causal']:g}, cache {t['cache']:g}, save/load {t['save_load']:g}"
                    for d, t in TOLERANCE.items())
    md = ["", "## Model checks on the device (issue 13, 2.1)", "",
          "Errors are max |difference| / max |logit| over 2 random sequences of 48 tokens (block_size if "
          "smaller). Causality: tokens after position 24 changed, logits up to 24 must not move (and later ones "
          f"must). Cache: 16-token prefill, then one token at a time, vs the full forward. Tolerances: {tol}.",
          "", "| preset | dtype | params | causality | later changed | cache vs full | save/load | ok |",
          "|---|---|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        if "error" in r:
            md.append(f"| {r['model']} | {r['dtype']} | | | | | | FAIL: {r['error']} |")
            continue
        md.append(f"| {r['model']} | {r['dtype']} | {r['params'] / 1e6:.1f}M | {r['causal_err']:.1e} | "
                  f"{r['later_changed']:.2f} | {r['cache_err']:.1e} | {r['save_load_err']:.1e} | "
                  f"{'ok' if r['ok'] else 'FAIL'} |")
    return md


def section_train(rows):
    if not rows:
        return []
    ref = next((r for r in rows if r["model"] == "plain_gpt2" and "tok_s" in r), None)
    r0 = rows[0]
    md = ["", "## Training throughput (2.2)", "",
          f"Sequence {r0['seq']}, batch {r0['batch']}, random tokens, bf16 autocast, torch.compile "
          f"(backend {r0['compile']}), fused AdamW + clip 1.0 (train.py's step). First step = compilation. "
          f"MFU = flops_per_token x tokens/s / peak bf16 FLOP/s (benchmarks/measure.py: PEAK_FLOPS); target for gpt2_124m on an "
          f"H100: >= {MFU_TARGET:.0%}. Peak memory: torch.cuda.max_memory_allocated over the timed steps. "
          "plain_gpt2 = benchmarks/plain_gpt_speed.py's PlainGPT at gpt2_124m's size (the reference).", "",
          "| model | params | ms/iter | tokens/s | MFU | peak GiB | tokens/s vs plain GPT-2 | first step s |",
          "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if "tok_s" not in r:
            md.append(f"| {r['model']} | {r['params'] / 1e6:.1f}M | {r.get('note', 'n/a')} | | | | | |")
            continue
        ratio = f"{r['tok_s'] / ref['tok_s']:.2f}x" if ref else "n/a"
        md.append(f"| {r['model']} | {r['params'] / 1e6:.1f}M | {r['ms_iter']:.1f} | {r['tok_s']:,.0f} | "
                  f"{fmt(None if r['mfu'] is None else 100 * r['mfu'], '.1f')}{'%' if r['mfu'] else ''} | "
                  f"{fmt(r['peak_gb'], '.2f')} | {ratio} | {r['first_step_s']:.1f} |")
    return md


def section_paper001(rows):
    if not rows:
        return []
    models = list(dict.fromkeys(r["model"] for r in rows))
    md = ["", "## Paper 001 Tables 3-6 at full size (2.4)", "",
          f"bench.py --mode=paper001 at lengths {', '.join(str(s) for s in sorted({r['seq'] for r in rows}))}, "
          f"batch 1, {rows[0]['dtype']} (block_size raised to the longest length), eager.", ""]
    if len(models) >= 2:
        md.append("\n\n".join(paper001_tables(models[0], models[1], rows, ["train", "infer", "memory"])))
    return md


def section_decode(rows):
    if not rows:
        return []
    md = ["", "## Sampling: eager KV cache vs the compiled static-cache step, sample.py --compile (3)", "",
          "Batch 1, model.generate from one token, temperature 0.8, top_k 200, median of rounds after a warm-up; "
          "compiled = torch.compile(decode_step, mode='reduce-overhead', fullgraph=True) over a static cache "
          "(CUDA graphs on CUDA). Agreement: both steps fed the eager greedy tokens; 'argmax same' = share of steps "
          "whose argmax agrees, 'logit err' = max |difference| / max |logit| (random weights: near-ties are common).", "",
          "| model | dtype | tokens | eager ms/token | eager tokens/s | compiled ms/token | compiled tokens/s | "
          "speed-up | compile s | argmax same | logit err |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        md.append(f"| {r['model']} | {r['dtype']} | {r['tokens']} | {r['eager_ms_token']:.2f} | {r['eager_tok_s']:.0f} | "
                  f"{r['compiled_ms_token']:.2f} | {r['compiled_tok_s']:.0f} | {r['speedup']:.2f}x | "
                  f"{r['compile_s']:.0f} | {r['argmax_agree']:.1%} | {r['logit_err']:.1e} |")
    return md


def section_tests(rows):
    md = ["", "## Compile proofs on the device: pytest (1)", ""] if rows else []
    return md + [f"`{r['command']}`: {r['summary']} (exit {r['exit']})" for r in rows]


def section_paper004(rows):
    md = ["", "## Paper 004 at the paper's recipe: compare.py (2.3)", ""] if rows else []
    return md + [f"`{r['command']}`: exit {r['exit']} in {r['seconds'] / 60:.1f} min; its outputs: "
                 f"{', '.join(f'[{f}]({f})' for f in r['files'].split()) or 'none'}" for r in rows]


def plot(out, by):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    train = [r for r in by.get("train", []) if "tok_s" in r]
    if train:
        fig, ax = plt.subplots(figsize=(8, 4))
        names = [r["model"] for r in train]
        ax.barh(names, [r["tok_s"] for r in train], color="tab:blue")
        for i, r in enumerate(train):
            label = f" {r['tok_s']:,.0f}" + (f"  MFU {100 * r['mfu']:.1f}%" if r.get("mfu") else "")
            ax.text(r["tok_s"], i, label, va="center", fontsize=8)
        ax.set_xlabel(f"training tokens/s (seq {train[0]['seq']}, batch {train[0]['batch']}, bf16, compile)")
        ax.invert_yaxis()
        fig.tight_layout()
        fig.savefig(os.path.join(out, "throughput.png"), dpi=120)
        plt.close(fig)
    p1 = by.get("paper001", [])
    if p1:
        fig, axes = plt.subplots(1, 3, figsize=(13, 4))
        for model in dict.fromkeys(r["model"] for r in p1):
            rs = sorted((r for r in p1 if r["model"] == model and "train_ms" in r), key=lambda r: r["seq"])
            seqs = [r["seq"] for r in rs]
            axes[0].plot(seqs, [r["train_ms"] for r in rs], "o-", label=model)
            axes[1].plot(seqs, [r.get("prefill_ms") for r in rs], "o-", label=model)
            axes[2].plot(seqs, [(r.get("train_peak_bytes") or 0) / 2**30 for r in rs], "o-", label=f"{model} train")
            axes[2].plot(seqs, [(r.get("infer_peak_bytes") or 0) / 2**30 for r in rs], "s--", label=f"{model} prefill")
        for ax, title in zip(axes, ("training ms (fwd+bwd)", "prefill ms", "peak GiB")):
            ax.set_xscale("log", base=2)
            ax.set_xlabel("sequence length")
            ax.set_title(title)
            ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(os.path.join(out, "paper001.png"), dpi=120)
        plt.close(fig)
    dec = by.get("decode", [])
    if dec:
        fig, ax = plt.subplots(figsize=(6, 3))
        xs = range(len(dec))
        ax.bar([x - 0.2 for x in xs], [r["eager_tok_s"] for r in dec], 0.4, label="eager KV cache")
        ax.bar([x + 0.2 for x in xs], [r["compiled_tok_s"] for r in dec], 0.4, label="compiled static cache")
        ax.set_xticks(list(xs), [r["model"] for r in dec])
        ax.set_ylabel("tokens/s (batch 1)")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(out, "decode.png"), dpi=120)
        plt.close(fig)
