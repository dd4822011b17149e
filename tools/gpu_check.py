"""
One prepared command that proves and measures the GPU path on one GPU in 5 minutes (docs/gpu.md).

    python -m tools.gpu_check --out_dir=$OUT --work_dir=/tmp/gpu_check   # one GPU: <= --budget_s
    python -m tools.gpu_check --dry_run           # a CPU: the plan, every part at a toy size
    python -m tools.gpu_check --parts=throughput,decode --budget_s=470 --tag=b  # a second call

The parts run in order of value, each as a subprocess of a real command with a deadline. A part's
unused time goes to the next ones. A part cut by the budget keeps what it measured (pytest's lines,
train.py's evaluations, the workers' records), and the report is rewritten after each part:
  1. correctness  pytest -m gpu tests/test_gpu.py: every preset's CUDA logits against the CPU's,
                  bf16 autocast against fp32, inductor against eager without recompiling, KV cache
                  against the full forward, causality under flash and memory-efficient attention,
                  a CUDA checkpoint on the CPU, tools.fast_sample on CUDA
  2. quickstart   python train.py config/gpt_shakespeare.py, nanoGPT's GPU recipe: val loss against
                  nanoGPT's 1.4697, ms/iter, wall time. In full when train.py's own ETA fits the
                  budget, else stopped by SIGTERM (train.py keeps last.pt): its first iterations
  3. throughput   training steps (bf16 autocast, torch.compile) on random tokens at the largest
                  power-of-two batch whose eager step fits in FILL of the card's memory: tokens/s,
                  MFU against the card's dense bf16 peak (PEAKS), peak memory
  4. decode       batch 1, sample.py's settings: model.generate (sample.py's eager KV cache) and
                  tools.fast_sample's compiled step; and sample.py itself on the quickstart;
                  where eager decoding's time goes (variants, a profile)
Files in --out_dir, named <date>-<device>[-tag]: .md and .json (every figure, the plan, the
environment), -log.txt (every command's output), -quickstart.csv (train.py's log.csv).
The times below were measured on one H200 (results/gpu/), where they say so. The dry run hides CUDA from every command it runs, uses toy sizes and leaves out
inductor: it proves the plumbing and the report, not the GPU (tests/test_gpu.py runs it).
"""

import contextlib
import datetime
import functools
import json
import os
import platform
import queue
import re
import runpy
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from types import SimpleNamespace

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from model import GPT, GPTConfig, sample_next
from tools import fast_sample
from tools.benchmarks.measure import describe, synchronize, timed
from tools.flops import flops_per_token
import variants
from safety_net.checkpoint import load_model
from safety_net.configurator import UserError, run_command
from safety_net.fileio import atomic_open
from safety_net.runtime import autocast

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PARTS = ("correctness", "quickstart", "throughput", "decode")

DEFAULTS = dict(
    out_dir="results/gpu",  # the report's folder (on a lent machine: $OUT, which comes back)
    budget_s=300.0,         # the whole command's wall time: two calls fit a lent machine's 15 min
    parts=",".join(PARTS),  # which parts (comma-separated); they run in the order of PARTS
    tag="",                 # added to the file names: a second call's files beside the first's
    dry_run=False,          # CUDA hidden: the plan, then every part at a toy size on the CPU
    work_dir="",            # data, checkpoints, records ("" = a new temporary folder); a second
                            # call with the same one samples from the first call's quickstart
    worker="",              # internal: the measuring subprocess of a part (throughput | decode)
    record="",              # worker: the file it appends one JSON line per item to
    deadline=0.0,           # worker: the time.time() by which it has stopped
    ckpt_dir="",            # decode worker: the quickstart's out_dir
)

# What a part needs in full on one H200, measured there on 2026-11-29 (results/gpu/: the JSON's
# wall_s and item_s) where measured: correctness 94 of its 95 tests in 110 s, + ~30 s for the last
# inductor compile (cut); quickstart 4692 of 5000 iterations in 132 s (evaluations included);
# throughput and decode: the sums of their items' figures below and the worker's start (17-19 s,
# its wall_s less its items' item_s). The budget is shared in these proportions, so a call whose
# budget covers its parts' sum runs them in full (docs/gpu.md).
FULL_S = dict(correctness=140, quickstart=140, throughput=215, decode=255)
QUICKSTART_RESERVE_S = 40   # the quickstart runs on in full only if this much is left after it
WRITE_RESERVE_S = 5         # kept at the end of the budget for the last report
MIN_PART_S = 10             # a part with less time left than this is skipped
STOP_GRACE_S = 15           # from SIGTERM (train.py saves last.pt at the next iteration) to SIGKILL

QUICKSTART = "config/gpt_shakespeare.py"
NANOGPT_VAL_LOSS = 1.4697   # nanoGPT's README: this recipe's best val loss (one A100, ~3 min)
DRY_QUICKSTART = ["--device=cpu", "--dtype=float32", "--num_threads=1", "--n_layer=1",
                  "--n_head=2", "--n_embd=32", "--block_size=32", "--batch_size=4",
                  "--max_iters=20", "--lr_decay_iters=20", "--warmup_iters=2",
                  "--eval_interval=10", "--eval_iters=2", "--log_interval=5"]

# Dense bf16 tensor-core peaks in TFLOP/s: half of NVIDIA's datasheet figures, which are given
# with 2:4 sparsity (H100 SXM 1,979, PCIe 1,513, NVL 1,671; H200 SXM 1,979, NVL 1,671); A100 312.
# The first name found in the device's name wins; "NVIDIA H100 80GB HBM3" is the SXM card.
PEAKS = (
    ("H200 NVL", "H200 NVL", 835.5),
    ("H200", "H200 SXM", 989.5),
    ("H100 NVL", "H100 NVL", 835.5),
    ("H100 PCIe", "H100 PCIe", 756.5),
    ("H100 80GB HBM3", "H100 SXM", 989.5),
    ("H100 SXM", "H100 SXM", 989.5),
    ("A100", "A100", 312.0),
)

# Each item with the seconds it took on one H200 (its item_s, results/gpu/2026-11-29-*; cgpt, the
# compiled mobilellm_125m and the diagnosis are ESTIMATES: they did not run), in the order they run;
# an item that no longer fits before the deadline is skipped.
THROUGHPUT_ITEMS = {"matmul": 1, "gpt2_124m": 34, "mobilellm_125m": 69, "gpt": 22, "pgpt": 20,
                    "lgpt": 23, "cgpt": 25}
THROUGHPUT_MODELS = tuple(name for name in THROUGHPUT_ITEMS if name != "matmul")
FILL = 0.6                  # of the card's memory, for the eager step (a compiled one needs less)
MAX_TOKENS_PER_STEP = 2 ** 19
TIMED_STEP_S = 3.0          # the timed steps take about this long (3 to 20 steps)
DECODE_ITEMS = {"eager quickstart": 20, "diagnose quickstart": 45, "compiled quickstart": 15,
                "sample.py quickstart": 31, "eager mobilellm_125m": 43,
                "compiled mobilellm_125m": 80}   # "path model"
DECODE_TOKENS = 500         # sample.py's --max_new_tokens
DRY_ITEM_S = 1              # what an item of the dry run needs


def main(argv=None):
    return run_command(run, DEFAULTS, argv)


def run(cfg):
    if cfg["worker"]:
        return run_worker(cfg)
    parts = check_options(cfg)
    if not cfg["dry_run"] and not torch.cuda.is_available():
        raise UserError("no CUDA device here (fix: --dry_run on a CPU; a GPU machine: docs/gpu.md)")
    t_start = time.time()
    env = environment(use_cuda=not cfg["dry_run"])
    report = dict(tool="tools.gpu_check", dry_run=cfg["dry_run"], command=command_line(cfg),
                  started=datetime.datetime.now().isoformat(timespec="seconds"),
                  budget_s=cfg["budget_s"], environment=env, peak=peak_for(env["device"]),
                  plan=plan(parts, cfg["budget_s"]),
                  parts={name: dict(status="not selected") for name in PARTS})
    paths = report_paths(cfg, env)
    write_report(report, paths)   # an out_dir that cannot be written fails here, before any part
    work_dir = cfg["work_dir"] or tempfile.mkdtemp(prefix="gpu_check-")
    os.makedirs(work_dir, exist_ok=True)
    ctx = SimpleNamespace(
        dry_run=cfg["dry_run"], end=t_start + cfg["budget_s"], work_dir=work_dir,
        log_path=paths["log"],
        # the dry run hides CUDA from every command: what a CPU machine does, also on a GPU
        child_env=dict(CUDA_VISIBLE_DEVICES="") if cfg["dry_run"] else {},
        # part 2 trains here; part 4 samples from it (also from an earlier call's run)
        quickstart_dir=os.path.join(work_dir, "out-shakespeare-char"))
    print_plan(report, work_dir)
    boundary = t_start
    for name in parts:
        boundary += report["plan"][name]["share_s"]   # what earlier parts left goes to this one
        deadline = min(boundary, ctx.end - WRITE_RESERVE_S)
        if deadline - time.time() < MIN_PART_S:   # the quickstart ran on to finish
            left = max(0.0, deadline - time.time())
            report["parts"][name] = dict(status="skipped", wall_s=0.0, reason=f"{left:.0f} s left")
            continue
        report["parts"][name] = dict(status="running")
        write_report(report, paths)
        print(f"[{time.time() - t_start:4.0f} s] {name}: until {deadline - t_start:.0f} s",
              flush=True)
        report["parts"][name] = run_part(name, ctx, deadline, paths)
        write_report(report, paths)
        print(f"[{time.time() - t_start:4.0f} s] {name}: {report['parts'][name]['status']}",
              flush=True)
    report["wall_s"] = round(time.time() - t_start, 1)
    write_report(report, paths)
    print()
    print(render_markdown(report))
    print(f"wrote {paths['md']}, {paths['json']}, {paths['log']}")


def run_part(name, ctx, deadline, paths):
    t0 = time.time()
    try:
        return PART_RUNNERS[name](ctx, deadline, paths)
    except Exception as e:   # a bug here must not cost the parts after it: GPU time is scarce
        traceback.print_exc()
        return dict(status="error", wall_s=round(time.time() - t0, 1),
                    reason=f"{type(e).__name__}: {e}")


def command_line(cfg):
    """This call as typed: the options that differ from the defaults."""
    options = [f"--{key}={value}" for key, value in cfg.items() if value != DEFAULTS[key]]
    return " ".join(["python -m tools.gpu_check"] + options)


def check_options(cfg):
    """The parts asked for, in PARTS order. A bad option is one line before anything is written."""
    parts = [p.strip() for p in cfg["parts"].split(",") if p.strip()]
    unknown = [p for p in parts if p not in PARTS] or ([] if parts else ["(none)"])
    if unknown:
        raise UserError(f"--parts={cfg['parts']}: unknown part {unknown[0]} "
                        f"(fix: a comma-separated list of {','.join(PARTS)})")
    if cfg["budget_s"] < 30:
        raise UserError(f"--budget_s={cfg['budget_s']:g} is too short to run anything "
                        f"(fix: 30 or more)")
    if not re.fullmatch(r"[A-Za-z0-9_-]*", cfg["tag"]):
        raise UserError(f"--tag={cfg['tag']} must be letters, digits, '-' and '_' (fix: --tag=b)")
    if os.path.exists(cfg["out_dir"]) and not os.path.isdir(cfg["out_dir"]):
        raise UserError(f"--out_dir={cfg['out_dir']} is a file (fix: name a folder)")
    if cfg["work_dir"] and os.path.exists(cfg["work_dir"]) and not os.path.isdir(cfg["work_dir"]):
        raise UserError(f"--work_dir={cfg['work_dir']} is a file (fix: name a folder, or leave it out)")
    return [p for p in PARTS if p in parts]


def plan(parts, budget_s):
    """Each chosen part's share of the budget and its estimated time in full."""
    total = sum(FULL_S[p] for p in parts)
    return {p: dict(share_s=round(budget_s * FULL_S[p] / total, 1),
                    full_estimate_s=FULL_S[p]) for p in parts}


def print_plan(report, work_dir):
    env, peak = report["environment"], report["peak"]
    where = "dry run: toy sizes on the CPU (CUDA hidden)" if report["dry_run"] else env["device"]
    print(f"tools.gpu_check on {where}; budget {report['budget_s']:.0f} s; work dir {work_dir}")
    if peak["tflops"]:
        print(f"MFU peak: {peak['label']}, {peak['tflops']} TFLOP/s dense bf16")
    else:
        print(f"MFU peak: none ({peak['label']})")
    cuts = dict(correctness="the tests not yet run (the inductor compiles run last)",
                quickstart="the iterations after its last evaluation (runs on if its ETA fits)",
                throughput="the models not yet measured: " + ", ".join(THROUGHPUT_MODELS),
                decode="the items not yet measured: " + ", ".join(DECODE_ITEMS))
    print("part         share   in full   when its time runs out, it loses")
    for name, part in report["plan"].items():
        share, full = part["share_s"], part["full_estimate_s"]
        print(f"{name:<12} {share:4.0f} s  ~{full:4.0f} s   {cuts[name]}")
    print("in full: as measured on one H200 (results/gpu/; cgpt's throughput, the compiled "
          "mobilellm_125m and the diagnosis estimated); a part's unused time goes to the next ones",
          flush=True)


# --- running a real command with a deadline ------------------------------------------------------

def pump(stream, lines):
    """Copy a subprocess's output lines into a queue (a thread: readline blocks), then None."""
    for line in stream:
        lines.put(line)
    lines.put(None)


def run_until(cmd, deadline, log_path, watch=None, env=None):
    """Run cmd from the repository root, its output appended to log_path. At the deadline its
    process group gets SIGTERM (train.py stops at the end of an iteration, keeping last.pt), then
    SIGKILL STOP_GRACE_S later. watch.see(line, deadline) may move the deadline (train.py's ETA).
    Returns returncode, lines, cut (stopped at the deadline) and wall_s."""
    t0 = time.time()
    lines, seen, cut, kill_at = queue.Queue(), [], False, None
    with open(log_path, "a") as log:
        log.write(f"\n=== {datetime.datetime.now().isoformat(timespec='seconds')} "
                  f"$ {' '.join(cmd)}\n")
        log.flush()
        # its own process group, so that pytest's and the workers' subprocesses stop with it
        env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, env=env, start_new_session=True)
        threading.Thread(target=pump, args=(proc.stdout, lines), daemon=True).start()
        try:
            while True:
                now = time.time()
                if kill_at is None and now >= deadline:
                    cut, kill_at = True, now + STOP_GRACE_S
                    log.write(f"=== the budget ran out: SIGTERM after {now - t0:.0f} s\n")
                    signal_group(proc, signal.SIGTERM)
                elif kill_at is not None and now >= kill_at:
                    signal_group(proc, signal.SIGKILL)
                try:
                    line = lines.get(timeout=0.5)
                except queue.Empty:
                    continue
                if line is None:
                    break
                log.write(line)
                seen.append(line.rstrip("\n"))
                if watch is not None:
                    deadline = watch.see(seen[-1], deadline)
        finally:
            signal_group(proc, signal.SIGKILL)   # nothing of it outlives this call
            returncode = proc.wait()
        log.write(f"=== exit code {returncode} after {time.time() - t0:.0f} s\n")
    return SimpleNamespace(returncode=returncode, lines=seen, cut=cut,
                           wall_s=round(time.time() - t0, 1))


def signal_group(proc, sig):
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:   # it exited in between
            pass


def fresh_record(work_dir, part):
    """The path of a part's record in work_dir, emptied (an earlier call's items are not ours)."""
    path = os.path.join(work_dir, f"{part}.jsonl")
    if os.path.exists(path):
        os.remove(path)
    return path


def read_records(path):
    """The JSON lines a worker or tests/test_gpu.py appended (none if it wrote nothing)."""
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def write_record(path, item):
    """Append one measured item: what a part keeps when the budget stops it."""
    with open(path, "a") as f:
        f.write(json.dumps(item) + "\n")
    print(json.dumps(item), flush=True)


# --- part 1: correctness -------------------------------------------------------------------------

TEST_LINE = re.compile(r"^(tests/test_gpu\.py::\S+) (PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS)\b")
SUMMARY_LINE = re.compile(r"^=+ .*\b(passed|failed|skipped|error|errors|deselected)\b.* in ")


def run_correctness(ctx, deadline, paths):
    record = fresh_record(ctx.work_dir, "correctness")
    cmd = [sys.executable, "-m", "pytest", "-m", "gpu", "tests/test_gpu.py", "-v", "-rfEs",
           "-p", "no:cacheprovider"]
    # no third-party pytest plugins: the tests need none, and loading them took seconds here
    env = dict(ctx.child_env, GPU_CHECK_RECORD=record, PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
    result = run_until(cmd, deadline, ctx.log_path, env=env)
    outcomes = {}
    for line in result.lines:
        match = TEST_LINE.match(line)
        if match:
            outcomes[match.group(1)] = match.group(2)
    counts = {k: list(outcomes.values()).count(k) for k in ("PASSED", "FAILED", "ERROR", "SKIPPED")}
    if result.cut:
        status = "cut"
    elif result.returncode == 0 and outcomes:
        status = "ok"
    else:
        status = "failed"
    problems = [line for line in result.lines if line.startswith(("FAILED ", "ERROR "))]
    skipped = [line.split(": ", 1)[-1] for line in result.lines if line.startswith("SKIPPED ")]
    summary = [line.strip("= ") for line in result.lines if SUMMARY_LINE.match(line)]
    return dict(status=status, command=" ".join(cmd[1:]), returncode=result.returncode,
                wall_s=result.wall_s, counts=counts, tests=outcomes, problems=problems[:30],
                skip_reasons=sorted(set(skipped))[:10], summary=summary[-1] if summary else "",
                figures=read_records(record))


# --- part 2: the quickstart ----------------------------------------------------------------------

ITER_LINE = re.compile(r"^iter (\d+): loss [\d.]+, lr \S+, ([\d.]+) ms/iter, ([\d,]+) tok/s, "
                       r"eta (\d+):(\d+):(\d+)")
EVAL_LINE = re.compile(r"^step (\d+): train loss ([\d.]+), val loss ([\d.]+)")
COUNT_LINE = re.compile(r"^done: .*, (\d+) iterations in |^interrupted at iteration (\d+)")


class TrainWatch:
    """Reads train.py's lines as they come: its evaluations, its ms/iter, and its ETA, which moves
    the deadline out to `limit` at most, to let the run finish."""

    def __init__(self, base_deadline, limit):
        self.base_deadline, self.limit = base_deadline, limit
        self.evals, self.ms, self.tok_s, self.last_iter, self.t_first_iter = [], [], [], None, None
        self.ran_on = False

    def see(self, line, deadline):
        match = EVAL_LINE.match(line)
        if match:
            self.evals.append(dict(iter=int(match.group(1)), train_loss=float(match.group(2)),
                                   val_loss=float(match.group(3)), at=time.time()))
        match = ITER_LINE.match(line)
        if not match:
            return deadline
        self.t_first_iter = self.t_first_iter or time.time()
        self.last_iter = int(match.group(1))
        self.ms.append(float(match.group(2)))
        self.tok_s.append(float(match.group(3).replace(",", "")))
        h, m, s = (int(g) for g in match.group(4, 5, 6))
        finish = time.time() + 3600 * h + 60 * m + s + 10   # + the last evaluation's save, the exit
        if finish > self.limit:
            return self.base_deadline
        self.ran_on = self.ran_on or finish > self.base_deadline
        return max(self.base_deadline, finish)


def run_quickstart(ctx, deadline, paths):
    data_dir = os.path.join(ctx.work_dir, "data", "shakespeare_char")
    cmd = [sys.executable, "train.py", QUICKSTART, f"--out_dir={ctx.quickstart_dir}",
           f"--data_dir={data_dir}"] + (DRY_QUICKSTART if ctx.dry_run else [])
    max_iters = 20 if ctx.dry_run else runpy.run_path(os.path.join(ROOT, QUICKSTART))["max_iters"]
    watch = TrainWatch(deadline, ctx.end - QUICKSTART_RESERVE_S)
    t0 = time.time()
    result = run_until(cmd, deadline, ctx.log_path, watch=watch, env=ctx.child_env)
    evals = [dict(e, at_s=round(e.pop("at") - t0, 1)) for e in watch.evals]
    last = evals[-1] if evals else {}
    full = last.get("iter") == max_iters and result.returncode == 0
    if full:
        status = "ok"
    elif result.cut:
        status = "cut"
    else:
        status = "failed"
    csv_path = os.path.join(ctx.quickstart_dir, "log.csv")
    if os.path.exists(csv_path):
        with open(csv_path) as f, atomic_open(paths["csv"], "w") as out:
            out.write(f.read())
    return dict(status=status, command=" ".join(cmd[1:]), returncode=result.returncode,
                wall_s=result.wall_s, full=full, iterations=iterations_done(result.lines, watch),
                max_iters=max_iters, evals=evals, final_val_loss=last.get("val_loss"),
                best_val_loss=min((e["val_loss"] for e in evals), default=None),
                nanogpt_val_loss=NANOGPT_VAL_LOSS,
                ms_per_iter=steady_median(watch.ms), tokens_per_s=steady_median(watch.tok_s),
                startup_s=round(watch.t_first_iter - t0, 1) if watch.t_first_iter else None,
                ran_on_past_share=watch.ran_on,
                last_lines=result.lines[-5:] if status == "failed" else [])


def steady_median(values):
    """The median of train.py's log windows after the first (which holds the warm-up), as train.py's
    own summary; None without any."""
    steady = values[1:] or values
    return statistics.median(steady) if steady else None


def iterations_done(lines, watch):
    """train.py's own count ("done: ..., N iterations in", "interrupted at iteration N" after a
    SIGTERM), else the last iteration it logged."""
    for line in reversed(lines):
        match = COUNT_LINE.match(line)
        if match:
            return int(match.group(1) or match.group(2))
    return watch.last_iter + 1 if watch.last_iter is not None else 0


# --- parts 3 and 4: the measuring workers (python -m tools.gpu_check --worker=...) -------------

def run_measuring_worker(name, ctx, deadline):
    record = fresh_record(ctx.work_dir, name)
    cmd = [sys.executable, "-m", "tools.gpu_check", f"--worker={name}", f"--record={record}",
           f"--deadline={deadline - 3}", f"--dry_run={ctx.dry_run}",
           f"--ckpt_dir={ctx.quickstart_dir}"]
    result = run_until(cmd, deadline, ctx.log_path, env=ctx.child_env)
    items = read_records(record)
    if result.cut:
        status = "cut"
    elif result.returncode != 0 or any(i["status"] == "error" for i in items):
        status = "failed"
    elif any(i["status"] == "skipped" for i in items):
        status = "partial"
    else:
        status = "ok"
    return dict(status=status, command=" ".join(cmd[1:]), returncode=result.returncode,
                wall_s=result.wall_s, items=items,
                last_lines=result.lines[-5:] if result.returncode != 0 else [])


def run_throughput(ctx, deadline, paths):
    return run_measuring_worker("throughput", ctx, deadline)


def run_decode(ctx, deadline, paths):
    return run_measuring_worker("decode", ctx, deadline)


PART_RUNNERS = dict(correctness=run_correctness, quickstart=run_quickstart,
                    throughput=run_throughput, decode=run_decode)


def run_worker(cfg):
    if cfg["worker"] not in ("throughput", "decode") or not cfg["record"]:
        raise UserError(f"--worker={cfg['worker']} is internal to tools.gpu_check "
                        f"(fix: run python -m tools.gpu_check without --worker)")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cpu":
        torch.set_num_threads(1)   # toy sizes: one thread is as fast, and the machine is shared
    if cfg["worker"] == "throughput":
        measure = functools.partial(measure_throughput, device=device, dry_run=cfg["dry_run"],
                                    peak=peak_for(device_name(device)))
        measure_items(cfg, THROUGHPUT_ITEMS, measure)
    else:
        measure = functools.partial(measure_decode, device=device, cfg=cfg, models={})
        measure_items(cfg, DECODE_ITEMS, measure)


class NotMeasured(Exception):
    """An item this run cannot measure (the message says why): recorded as skipped."""


def measure_items(cfg, items, measure_one):
    """measure_one(item) for each of items ({item: the seconds it needs}) that still fits before
    the deadline; one record per item: ok with its figures, skipped and why, or the error."""
    for item, need_s in items.items():
        need_s = DRY_ITEM_S if cfg["dry_run"] else need_s
        left = cfg["deadline"] - time.time()
        if left < need_s:
            reason = f"budget: needs ~{need_s} s (estimate), {max(0, left):.0f} s left"
            write_record(cfg["record"], dict(item=item, status="skipped", reason=reason))
            continue
        t0 = time.time()
        try:
            figures = measure_one(item)
        except NotMeasured as e:
            write_record(cfg["record"], dict(item=item, status="skipped", reason=str(e)))
        except Exception as e:   # one model's failure (OOM, a compile error) must not lose the rest
            traceback.print_exc()
            first_line = (str(e).splitlines() or [""])[0][:300]
            write_record(cfg["record"], dict(item=item, status="error",
                                             error=f"{type(e).__name__}: {first_line}"))
        else:
            write_record(cfg["record"], dict(item=item, status="ok",
                                             item_s=round(time.time() - t0, 1), **figures))
        finally:
            if torch.cuda.is_available():
                torch._dynamo.reset()   # as train.py: each model compiles afresh
                torch.cuda.empty_cache()


def device_name(device):
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


# --- part 3: training throughput -----------------------------------------------------------------

def throughput_config(name, dry_run):
    """GPTConfig fields of a throughput model: GPT-2 124M (GPTConfig's defaults: 12 x 768, vocab
    50304, context 1024) or a preset, paper 004's four with their recipe's char vocabulary; dropout
    0. The dry run: toy sizes with the same flags."""
    cfg = {} if name == "gpt2_124m" else variants.load(name)
    if name in ("gpt", "pgpt", "lgpt", "cgpt"):
        cfg["vocab_size"] = 65   # config/*_shakespeare.py: shakespeare_char
    cfg["dropout"] = 0.0
    if dry_run:
        cfg.update(vocab_size=64, block_size=32, n_embd=32, n_head=2)
        if not (cfg.get("shrink_every") or cfg.get("n_branches")):   # those keep their 6 layers
            cfg["n_layer"] = 2
        if cfg.get("n_kv_head"):
            cfg.update(n_head=4, n_kv_head=2)
        if cfg.get("mlp_hidden"):
            cfg["mlp_hidden"] = 64
    return cfg


def random_batch(batch, block_size, vocab_size, device):
    data = torch.randint(vocab_size, (batch, block_size + 1), generator=torch.Generator())
    data = data.to(device)
    return data[:, :-1], data[:, 1:]


def train_step(model, optimizer, x, y, device_type):
    """One step as train.py takes it: bf16 autocast forward, backward, clipping, AdamW."""
    with torch.autocast(device_type, dtype=torch.bfloat16):
        loss = model(x, y)[1]
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss


def eager_peak_bytes(model, batch, device):
    """Peak CUDA memory of an eager training step (weights, gradients, AdamW state included)."""
    optimizer = model.configure_optimizers(0.1, 6e-4, (0.9, 0.95), device.type)
    x, y = random_batch(batch, model.config.block_size, model.config.vocab_size, device)
    torch.cuda.reset_peak_memory_stats(device)
    train_step(model, optimizer, x, y, device.type)
    torch.cuda.synchronize(device)
    return torch.cuda.max_memory_allocated(device)


def fill_batch(model, device):
    """The largest power-of-two batch whose eager step is estimated (from the peaks at batch 1 and
    2, linear in the batch) to use at most FILL of the card's memory and MAX_TOKENS_PER_STEP."""
    one, two = eager_peak_bytes(model, 1, device), eager_peak_bytes(model, 2, device)
    per_sequence = max(two - one, 1)
    fixed = one - per_sequence
    total = torch.cuda.get_device_properties(device).total_memory
    batch = 1
    while (fixed + 2 * batch * per_sequence <= FILL * total
           and 2 * batch * model.config.block_size <= MAX_TOKENS_PER_STEP):
        batch *= 2
    return batch, dict(per_sequence_gib=per_sequence / 2 ** 30, fixed_gib=fixed / 2 ** 30)


def measure_throughput(name, device, dry_run, peak):
    if name == "matmul":
        return matmul_tflops(device, dry_run)
    torch.manual_seed(0)
    model = GPT(GPTConfig(**throughput_config(name, dry_run))).to(device).train()
    batch, probe = fill_batch(model, device) if device.type == "cuda" else (2, {})
    block = model.config.block_size
    optimizer = model.configure_optimizers(0.1, 6e-4, (0.9, 0.95), device.type)
    x, y = random_batch(batch, block, model.config.vocab_size, device)
    # the dry run leaves compiling out: even dynamo's capture alone takes seconds per model there
    runner = model if dry_run else torch.compile(model)
    step = functools.partial(train_step, runner, optimizer, x, y, device.type)
    first_s = timed(step, str(device))   # compiles the forward and the backward
    n = 3 if dry_run else max(3, min(20, int(TIMED_STEP_S / timed(step, str(device)))))
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    losses = []
    seconds = timed(functools.partial(repeat_steps, step, n, losses), str(device))
    tokens_per_s = n * batch * block / seconds
    tflops = tokens_per_s * flops_per_token(model, block) / 1e12
    return dict(shape=describe(vars(model.config)), params=model.get_num_params(False),
                batch=batch, block_size=block, tokens_per_step=batch * block,
                compiled=not dry_run, first_step_s=round(first_s, 2), timed_steps=n,
                step_ms=1000 * seconds / n, tokens_per_s=tokens_per_s,
                flops_per_token=flops_per_token(model, block), tflops=tflops,
                mfu=tflops / peak["tflops"] if peak["tflops"] else None,
                peak_memory_gib=peak_memory_gib(device), loss=losses[-1],
                loss_finite=bool(torch.isfinite(torch.tensor(losses)).all()), memory_probe=probe)


def repeat_steps(step, n, losses):
    for _ in range(n):
        loss = step()
    losses.append(loss.item())


def peak_memory_gib(device):
    return torch.cuda.max_memory_allocated(device) / 2 ** 30 if device.type == "cuda" else None


def matmul_tflops(device, dry_run):
    """What the card's bf16 matmuls reach here (8192^3, 10 timed after 3), beside the datasheet."""
    size, dtype = (256, torch.float32) if dry_run else (8192, torch.bfloat16)
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    repeat_matmul(a, b, 3)
    seconds = timed(functools.partial(repeat_matmul, a, b, 10), str(device))
    return dict(size=size, dtype=str(dtype).replace("torch.", ""),
                tflops=10 * 2 * size ** 3 / seconds / 1e12)


def repeat_matmul(a, b, n):
    for _ in range(n):
        a @ b


# --- part 4: decoding at batch 1 -----------------------------------------------------------------

def measure_decode(item, device, cfg, models):
    path, name = item.split(" ")
    n = 40 if cfg["dry_run"] else DECODE_TOKENS
    if path == "sample.py":
        return run_sample_py(cfg, n)
    if name not in models:
        models[name] = decode_model(name, device, cfg["ckpt_dir"], cfg["dry_run"])
    model, weights = models[name]
    if path == "diagnose":
        return dict(weights=weights, shape=describe(vars(model.config)),
                    **diagnose_decode(model, device, 40 if cfg["dry_run"] else DIAGNOSE_TOKENS,
                                      cfg["deadline"]))
    if path == "compiled":
        generate = fast_sample.generate
        if cfg["dry_run"]:   # dynamo's capture alone (inductor takes minutes on a CPU): generate
            fast_sample.compiled_decode_step(model, backend="eager")   # reuses this step
    else:
        generate = eager_generate
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32   # sample.py's dtype=auto
    t0 = time.perf_counter()
    generate_tokens(generate, model, 20, device, dtype)   # compiles (the compiled path), warms up
    first_s = time.perf_counter() - t0
    generate_tokens(generate, model, 20, device, dtype)   # reduce-overhead has its CUDA graphs now
    seconds = timed(functools.partial(generate_tokens, generate, model, n, device, dtype),
                    str(device))
    return dict(weights=weights, shape=describe(vars(model.config)),
                params=model.get_num_params(False), dtype=str(dtype).replace("torch.", ""),
                tokens=n, seconds=round(seconds, 3), tokens_per_s=n / seconds,
                first_call_s=round(first_s, 2))


def decode_model(name, device, ckpt_dir, dry_run):
    """The trained quickstart (the checkpoint part 2 left in this work_dir, in this call or an
    earlier one; else the recipe's shape, random weights) or mobilellm_125m with random weights:
    decoding speed does not depend on the weights' values."""
    if name == "quickstart" and has_checkpoint(ckpt_dir):
        model, ckpt = load_model(ckpt_dir, str(device))
        return model, f"trained, iteration {ckpt.get('iter_num')}"
    preset = "gpt" if name == "quickstart" else name
    torch.manual_seed(0)
    model = GPT(GPTConfig(**throughput_config(preset, dry_run)))
    return model.to(device).eval(), "random weights"


def has_checkpoint(ckpt_dir):
    names = ("ckpt.pt", "last.pt")
    return bool(ckpt_dir) and any(os.path.exists(os.path.join(ckpt_dir, f)) for f in names)


def eager_generate(model, idx, max_new_tokens, **options):
    """sample.py's path: model.generate with the KV cache."""
    return model.generate(idx, max_new_tokens, **options)


DIAGNOSE_TOKENS = 100


def diagnose_decode(model, device, n, deadline):
    """Where eager decoding's time goes (the first H200 run: 25-33 tokens/s on the quickstart, slower
    than a 2-core CPU): ms per token of model.generate with sample.py's settings and of variants that
    each change one thing, the time the CPU takes to issue them, and a profile's busiest ops. Each
    variant's failure is its own record; those past the deadline are skipped."""
    bf16 = torch.bfloat16 if device.type == "cuda" else torch.float32
    variants_ms = {}
    for label, dtype, backend, options in DIAGNOSE_VARIANTS:
        if time.time() > deadline - DIAGNOSE_RESERVE_S:
            variants_ms[label] = dict(error="skipped: budget")
            continue
        kernels = contextlib.nullcontext() if backend is None else sdpa_kernel(backend)
        try:
            with kernels:
                issue_s, total_s = time_generate(model, device, dtype or bf16, n, options)
        except Exception as e:   # a kernel that cannot run this model here: the other variants still run
            variants_ms[label] = dict(error=f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:200]}")
            continue
        variants_ms[label] = dict(ms_per_token=1000 * total_s / n, issue_ms_per_token=1000 * issue_s / n)
    logits = torch.randn(1, model.config.vocab_size, device=device)
    generator = torch.Generator(device=device).manual_seed(1337)
    sample_s = timed(functools.partial(repeat_sample, logits, generator, n), str(device))
    variants_ms["sample_next alone (temperature 0.8, top_k 200)"] = dict(ms_per_token=1000 * sample_s / n)
    try:
        profile = profile_decode(model, device, bf16)
    except Exception as e:   # the timings above are kept
        traceback.print_exc()
        profile = dict(error=f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:200]}")
    return dict(tokens=n, variants=variants_ms, profile=profile)


DIAGNOSE_RESERVE_S = 15   # a variant starts only with this much of the decode part left (~5 s each)
# label, dtype (None: bf16 on CUDA, as sample.py), SDPA backend (None: PyTorch's choice), options;
# cuDNN last: no test has run it on these models
DIAGNOSE_VARIANTS = (
    ("model.generate, sample.py's settings (bf16 autocast, temperature 0.8, top_k 200)", None, None, {}),
    ("float32, no autocast", torch.float32, None, {}),
    ("greedy (temperature 0: argmax; no top-k, softmax or torch.multinomial)", None, None,
     dict(temperature=0)),
    ("no KV cache (nanoGPT's way: the whole window each token)", None, None,
     dict(use_kv_cache=False)),
    ("SDPA: flash only", None, SDPBackend.FLASH_ATTENTION, {}),
    ("SDPA: memory-efficient only", None, SDPBackend.EFFICIENT_ATTENTION, {}),
    ("SDPA: math only", None, SDPBackend.MATH, {}),
    ("SDPA: cuDNN only", None, SDPBackend.CUDNN_ATTENTION, {}),
)


def time_generate(model, device, dtype, n, options):
    """(seconds until generate returns, seconds until the device is done) for n tokens, after 20."""
    prompt = torch.zeros((1, 1), dtype=torch.long, device=device)
    generator = torch.Generator(device=device).manual_seed(1337)
    options = dict(dict(temperature=0.8, top_k=200, generator=generator), **options)
    with torch.no_grad(), autocast(device, dtype):
        model.generate(prompt, 20, **options)
        synchronize(str(device))
        t0 = time.perf_counter()
        model.generate(prompt, n, **options)
        issued = time.perf_counter() - t0
        synchronize(str(device))
    return issued, time.perf_counter() - t0


def repeat_sample(logits, generator, n):
    for _ in range(n):
        sample_next(logits, 0.8, 200, generator)


def profile_decode(model, device, dtype, n=10):
    """torch.profiler over n tokens of model.generate: the ops with the most device time and the most
    CPU time (per token), and the kernel launches, synchronizations and copies per token."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    prompt = torch.zeros((1, 1), dtype=torch.long, device=device)
    with torch.no_grad(), autocast(device, dtype):
        model.generate(prompt, n, top_k=200)
        with torch.profiler.profile(activities=activities) as prof:
            model.generate(prompt, n, top_k=200)
    events = prof.key_averages()

    def per_token(e, field):
        return dict(op=e.key[:80], calls=e.count / n, us=getattr(e, field) / n)

    device_field = "self_device_time_total"
    busiest = sorted(events, key=lambda e: getattr(e, device_field), reverse=True)[:10]
    cpu = sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)[:10]
    runtime = {e.key: e.count / n for e in events
               if re.search(r"Launch|Synchronize|Memcpy|cudaMalloc", e.key)}
    return dict(device_ops=[per_token(e, device_field) for e in busiest if getattr(e, device_field)],
                cpu_ops=[per_token(e, "self_cpu_time_total") for e in cpu],
                runtime_calls_per_token=runtime)


def generate_tokens(generate, model, n, device, dtype):
    """n tokens after one, sampled as sample.py samples (temperature 0.8, top_k 200, autocast)."""
    prompt = torch.zeros((1, 1), dtype=torch.long, device=device)
    generator = torch.Generator(device=device).manual_seed(1337)
    with torch.no_grad(), autocast(device, dtype):
        return generate(model, prompt, n, temperature=0.8, top_k=200, generator=generator)


def run_sample_py(cfg, n):
    """sample.py itself on the quickstart's checkpoint: the tokens/s it prints (its first call's
    warm-up included) and the start of its text."""
    if not has_checkpoint(cfg["ckpt_dir"]):
        raise NotMeasured("no quickstart checkpoint (part 2 did not run or wrote none)")
    cmd = [sys.executable, "sample.py", f"--out_dir={cfg['ckpt_dir']}", "--num_samples=1",
           f"--max_new_tokens={n}", "--seed=1337"]
    if cfg["dry_run"]:
        cmd += ["--device=cpu", "--num_threads=1"]
    timeout = max(5.0, cfg["deadline"] - time.time())
    result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    match = re.search(r"(\d+) tokens in ([\d.]+)s \(([\d.]+) tokens/s\)", result.stderr)
    if result.returncode != 0 or not match:
        tail = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"{' '.join(cmd[1:])} exited {result.returncode}: {tail}")
    return dict(command=" ".join(cmd[1:]), tokens=int(match.group(1)),
                seconds=float(match.group(2)), tokens_per_s=float(match.group(3)),
                text_start=result.stdout[:240])


# --- the environment and the card's peak ---------------------------------------------------------

def peak_for(name):
    """The card's dense bf16 peak from its name: label, tflops (None for a card not in PEAKS)."""
    for part, label, tflops in PEAKS:
        if part in name:
            return dict(label=label, tflops=tflops,
                        source="NVIDIA's datasheet, dense: half its figure with sparsity")
    return dict(label=f"no peak known for '{name}'", tflops=None, source=None)


def environment(use_cuda):
    env = dict(python=platform.python_version(), torch=torch.__version__, cuda=torch.version.cuda,
               platform=platform.platform(), cpu_count=os.cpu_count(), git_commit=git_commit(),
               device="cpu")
    if use_cuda:
        props = torch.cuda.get_device_properties(0)
        driver = command_output(["nvidia-smi", "--query-gpu=driver_version",
                                 "--format=csv,noheader"])
        env.update(device=torch.cuda.get_device_name(0), capability=f"{props.major}.{props.minor}",
                   memory_gib=round(props.total_memory / 2 ** 30, 1),
                   multiprocessors=props.multi_processor_count,
                   cudnn=torch.backends.cudnn.version(), driver=driver)
    return env


def command_output(cmd):
    """A command's first output line; None where it is missing or fails (git, nvidia-smi)."""
    try:
        result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = result.stdout.strip().splitlines()
    return lines[0] if result.returncode == 0 and lines else None


def git_commit():
    """The commit measured, and whether tracked files differ from it (None without .git, as on a
    lent machine: its copy of the checkout has none)."""
    commit = command_output(["git", "rev-parse", "--short=12", "HEAD"])
    if commit is None:
        return None
    changed = command_output(["git", "status", "--porcelain", "--untracked-files=no"])
    return commit + (" (with uncommitted changes)" if changed else "")


# --- the report ----------------------------------------------------------------------------------

def report_paths(cfg, env):
    """Names a lent machine sends back from $OUT: letters, digits, '.', '_' and '-'."""
    device = re.sub(r"[^a-z0-9]+", "-", env["device"].lower()).strip("-")
    stem = f"{datetime.date.today().isoformat()}-{device}"
    stem += "-dry-run" if cfg["dry_run"] else ""
    stem += f"-{cfg['tag']}" if cfg["tag"] else ""
    base = os.path.join(cfg["out_dir"], stem)
    return dict(md=base + ".md", json=base + ".json", log=base + "-log.txt",
                csv=base + "-quickstart.csv")


def write_report(report, paths):
    with atomic_open(paths["json"], "w") as f:
        json.dump(report, f, indent=1)
    with atomic_open(paths["md"], "w") as f:
        f.write(render_markdown(report))


def fmt(value, spec=".1f"):
    return "-" if value is None else format(value, spec)


def render_markdown(report):
    env, peak = report["environment"], report["peak"]
    title = "dry run on the CPU (toy sizes)" if report["dry_run"] else env["device"]
    took = f"{report['wall_s']:.0f} s in all" if "wall_s" in report else "still running"
    lines = [f"# GPU check: {title}, {report['started'][:10]}", "",
             f"`{report['command']}`: budget {report['budget_s']:.0f} s, {took}; commit "
             f"{env['git_commit'] or 'not known (no .git here)'}.", "",
             f"torch {env['torch']}, CUDA {env['cuda']}, Python {env['python']}, "
             f"{env['cpu_count']} CPUs."]
    if "capability" in env:
        lines[-1] += (f" {env['device']}: {env['memory_gib']} GiB, {env['multiprocessors']} SMs, "
                      f"capability {env['capability']}, driver {env['driver']}, "
                      f"cuDNN {env['cudnn']}.")
    if peak["tflops"]:
        lines += ["", f"MFU peak: {peak['label']}, {peak['tflops']} TFLOP/s dense bf16 "
                      f"({peak['source']})."]
    else:
        lines += ["", f"MFU peak: {peak['label']}."]
    lines += ["", "| part | status | seconds | its share of the budget |", "|---|---|---|---|"]
    for name in PARTS:
        part = report["parts"][name]
        status = part["status"] + (f" ({part['reason']})" if "reason" in part else "")
        share = report["plan"].get(name, {}).get("share_s")
        lines.append(f"| {name} | {status} | {fmt(part.get('wall_s'), '.0f')} | "
                     f"{fmt(share, '.0f')} |")
    renderers = dict(correctness=markdown_correctness, quickstart=markdown_quickstart,
                     throughput=markdown_throughput, decode=markdown_decode)
    for name in PARTS:
        part = report["parts"][name]
        if "command" in part:   # it ran
            lines += [""] + renderers[name](part, report)
    return "\n".join(lines) + "\n"


def markdown_correctness(part, report):
    c = part["counts"]
    lines = ["## 1. Correctness on CUDA", "",
             f"`{part['command']}`: {c['PASSED']} passed, {c['FAILED']} failed, {c['ERROR']} "
             f"errors, {c['SKIPPED']} skipped (pytest: {part['summary'] or 'cut, no summary'})."]
    lines += [""] if part["problems"] or part["skip_reasons"] else []
    lines += [f"- {line}" for line in part["problems"]]
    lines += [f"- skipped: {reason}" for reason in part["skip_reasons"]]
    worst = {}   # the worst measured error of each check of tests/test_gpu.py
    for f in part["figures"]:
        if f["check"] not in worst or f["error"] > worst[f["check"]]["error"]:
            worst[f["check"]] = f
    if worst:
        lines += ["", "| check | worst measured | tolerance | where |", "|---|---|---|---|"]
        lines += [f"| {check} | {f['error']:.2e} | {f['tolerance']:.0e} | {f['case']} |"
                  for check, f in sorted(worst.items())]
    return lines


def markdown_quickstart(part, report):
    if part["full"]:
        state = "in full"
    else:
        state = (f"its first {part['iterations']} of {part['max_iters']} iterations: its val loss "
                 f"is not comparable with nanoGPT's (the learning-rate schedule had not ended)")
    lines = ["## 2. GPU quickstart (nanoGPT's recipe)", "", f"`{part['command']}`: {state}.", "",
             "| best val loss | nanoGPT's | last eval's | iterations | ms/iter | tokens/s | "
             "to the first iter | wall |", "|---|---|---|---|---|---|---|---|",
             f"| {fmt(part['best_val_loss'], '.4f')} | {NANOGPT_VAL_LOSS} | "
             f"{fmt(part['final_val_loss'], '.4f')} | {part['iterations']} | "
             f"{fmt(part['ms_per_iter'], '.2f')} | {fmt(part['tokens_per_s'], ',.0f')} | "
             f"{fmt(part['startup_s'], '.0f')} s | {part['wall_s']:.0f} s |"]
    return lines + [f"- {line}" for line in part["last_lines"]]


def markdown_throughput(part, report):
    peak = report["peak"]
    if peak["tflops"]:
        text = f"MFU against the {peak['label']}'s {peak['tflops']} TFLOP/s."
    else:
        text = f"MFU: {peak['label']}."
    for i in part["items"]:
        if i["item"] == "matmul" and i["status"] == "ok":
            text += f" A {i['size']}^3 {i['dtype']} matmul reaches {i['tflops']:.0f} TFLOP/s here."
    compiled = "torch.compile" if not report["dry_run"] else "not compiled in the dry run"
    lines = [f"## 3. Training throughput (bf16 autocast, {compiled}, random tokens)", "",
             text, "",
             "| model | shape | params | batch x ctx | tokens/s | ms/step | TFLOP/s | MFU | "
             "peak GiB | first step s |", "|---|---|---|---|---|---|---|---|---|---|"]
    for i in part["items"]:
        if i["item"] == "matmul":
            continue
        if i["status"] != "ok":
            lines.append(f"| {i['item']} | {i['status']}: {i.get('reason') or i.get('error')} |")
            continue
        mfu = "-" if i["mfu"] is None else f"{100 * i['mfu']:.1f}%"
        lines.append(f"| {i['item']} | {i['shape']} | {i['params'] / 1e6:.1f}M | "
                     f"{i['batch']} x {i['block_size']} | {i['tokens_per_s']:,.0f} | "
                     f"{i['step_ms']:.1f} | {i['tflops']:.1f} | {mfu} | "
                     f"{fmt(i['peak_memory_gib'])} | {i['first_step_s']:.1f} |")
    return lines + [f"- {line}" for line in part["last_lines"]]


def markdown_decode(part, report):
    lines = ["## 4. Decoding, batch 1 (sample.py's settings: temperature 0.8, top_k 200)", "",
             "| path | model | weights | tokens | tokens/s | first call s |",
             "|---|---|---|---|---|---|"]
    text = []
    diagnosis = []
    for i in part["items"]:
        path, name = i["item"].split(" ")
        if path == "diagnose" and i["status"] == "ok":
            diagnosis = markdown_diagnosis(i)
        elif i["status"] != "ok":
            why = i.get("reason") or i.get("error")
            lines.append(f"| {path} | {name} | {i['status']}: {why} |")
        elif path == "sample.py":
            lines.append(f"| sample.py (its own line) | {name} | trained | {i['tokens']} | "
                         f"{i['tokens_per_s']:,.1f} | in its time |")
            text = ["", f"`python {i['command']}` begins:", "", "```", i["text_start"].rstrip(),
                    "```"]
        else:
            lines.append(f"| {path} | {name} ({i['shape']}) | {i['weights']} | {i['tokens']} | "
                         f"{i['tokens_per_s']:,.1f} | {i['first_call_s']:.1f} |")
    return lines + text + diagnosis + [f"- {line}" for line in part["last_lines"]]


def markdown_diagnosis(item):
    lines = ["", f"Where eager decoding's time goes: the quickstart ({item['shape']}, {item['weights']}), "
             f"{item['tokens']} tokens after 20, batch 1.", "",
             "| variant | ms/token | the CPU's issue of it, ms/token |", "|---|---|---|"]
    for label, v in item["variants"].items():
        if "error" in v:
            lines.append(f"| {label} | {v['error']} | |")
        else:
            lines.append(f"| {label} | {v['ms_per_token']:.2f} | {fmt(v.get('issue_ms_per_token'), '.2f')} |")
    profile = item["profile"]
    if "error" in profile:
        return lines + ["", f"The profile failed: {profile['error']}."]
    for title, ops in (("device time", profile["device_ops"]), ("CPU time", profile["cpu_ops"])):
        if not ops:   # the CPU's dry run: no device
            continue
        lines += ["", f"The ops with the most {title}, per token (torch.profiler, 10 tokens):", "",
                  "| op | calls | us |", "|---|---|---|"]
        lines += [f"| `{op['op']}` | {op['calls']:.1f} | {op['us']:.0f} |" for op in ops]
    calls = ", ".join(f"{k} {v:.1f}" for k, v in profile["runtime_calls_per_token"].items())
    return lines + ["", f"Runtime calls per token: {calls or 'none recorded'}."]


if __name__ == "__main__":
    main(sys.argv[1:])
