"""
Speed and memory of model variants, side by side in one process.

    python -m tools.bench --variants=gpt,lgpt,cgpt,pgpt --seq_lens=64,128,256 --device=cpu
    python -m tools.bench config/gpt_shakespeare.py config/lgpt_shakespeare.py --measure=train
    python -m tools.bench --mode=paper001 --scale=0.5 --vocab_size=8000      # paper 001 Tables 3-6 layout
    python -m tools.bench --mode=paper004                                     # paper 004: lgpt/cgpt vs gpt
    python -m tools.bench --variants=gpt --measure=sample --gen_tokens=500    # KV cache vs plain sampling
    python -m tools.bench --mode=decode --device=cpu --num_threads=1          # decode vs its linear layers alone

Models come from --variants (variants/<name>.py presets) and from config files given as positional
arguments (each file is one model, read as train.py reads it, so its variant and model keys apply and
its batch_size is used unless --batch_size is given). Every GPTConfig field can be overridden for all
models, e.g. --n_layer=4 --vocab_size=8000. --scale=s shrinks every model's width (n_embd, mlp_hidden,
embd_factor_dim) and depth (n_layer, n_attn_layers, n_top_attn_layers, share_from_layer, shrink_every) by s,
rounding to the nearest valid configuration (--depth_scale to scale depth differently); the output prints the
resulting sizes.

Measurements (--measure, comma list):
  train   one training step on random tokens: forward + backward + AdamW step (--optimizer_step=False:
          forward + backward only, as paper 001's tables), batch --batch_size x seq; ms/iter, tokens/s
  memory  peak memory of a training step and of an inference prefill (see below)
  infer   batch --infer_batch: prefill ms of seq tokens into an empty KV cache sized seq, decode
          ms/token (seq - decode_steps tokens cached, then decode_steps single-token steps, median), and
          the KV-cache bytes of seq tokens (measure.cache_bytes: keys + values of every attention
          application; GQA stores only n_kv_head heads)
  sample  model.generate from one token: --gen_tokens new tokens with the KV cache and without (the plain
          path re-runs the whole window every token); tokens/s of each and the speed-up
  decode  batch-1 sampling speed against its linear layers alone, both timed in alternating rounds:
          the linears (one eager F.linear per weight matrix, bias included, on a preallocated 1-token
          input: every weight read once, nothing else; n passes in a row; on a CPU MKL's GEMV, which
          other kernels beat, so a reference and not a bound) and cached decoding (model.generate of
          n = min(--gen_tokens, block_size - 1) tokens from one token, temperature 0.8, top_k 200, the
          defaults of sample.py; the window is never re-primed); ms per pass/token, tokens/s, GB/s (the
          weights' MB x tokens/s) and the ratio (the median of each round's decode time over that
          round's linears, so that what other jobs do to the machine in one round cancels out). Timed
          in CPU time of the process on a CPU with one thread
          (--num_threads=1; equal to the wall time of an idle machine, and not inflated by other jobs),
          else in wall time. With --compile also the compiled static-cache step (tools/fast_sample.py,
          its default --compile_mode=frozen).
Warm-up iterations (--warmup) are not timed; each figure is the median of --repeats timed runs (sample:
one warm-up, then --sample_repeats runs). Sequence lengths above a model's block_size are skipped; on
CUDA an out-of-memory length is reported as OOM; on CPU longer lengths are skipped once one train step
takes more than --max_step_seconds. A key no chosen --measure reads is refused (READ_BY).

Peak memory is tensor memory only (no Python objects, allocator caching or process RSS): on CUDA
torch.cuda.max_memory_allocated(); on a CPU the tensors alive when the step starts plus the highest running
sum of allocations minus frees during it, from torch.profiler (tools/benchmarks/measure.py: peak_bytes).
"""

import math
import os
import sys

import torch

import variants
from model import GPT, GPTConfig
from tools import fast_sample
from tools.benchmarks.entries import file_entry, variant_entry
from tools.benchmarks.measure import describe, run_entry
from tools.benchmarks.report import render, write_out
from safety_net.build import gpt_config_defaults
from safety_net.configurator import UserError, load_config, run_command
from safety_net.fileio import check_out_file
from safety_net.runtime import busy_machine, check_cpu_compiler, check_num_threads, check_seed, resolve_device
from safety_net.runtime import resolve_dtype

BENCH_DEFAULTS = dict(
    variants=[],            # variants/<name>.py presets (a comma list on the command line)
    mode="",                # "" | "paper001" (Tables 3-6 layout) | "paper004" (lgpt/cgpt/pgpt vs gpt) | "decode"
    measure=[],             # of train,memory,infer,sample,decode; [] = the mode's default
    seq_lens=[64, 128, 256, 512, 1024, 2048],
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
    compile=False,          # torch.compile the training step's model (--measure=decode: tools.fast_sample's step)
    num_threads=0,          # torch.set_num_threads, as in train.py; 0 = torch's default
    seed=0,
    out="",                 # also write the results: .csv (one row per measurement) or .md (the tables);
                            # an existing file bench did not write is refused, not replaced
    dry_run=False,          # print the models (sizes after --scale and overrides) and exit
    config_files=[],        # the positional arguments: train.py config files, one model each
)
MODES = {
    "": dict(measure=["train", "memory", "infer", "sample"]),
    "paper001": dict(variants=["mobilellm_125m", "shishulm_125"], measure=["train", "memory", "infer"],
                     optimizer_step=False),
    "paper004": dict(variants=["gpt", "lgpt", "cgpt", "pgpt"], measure=["train", "memory", "infer", "sample"],
                     seq_lens=[256]),
    "decode": dict(variants=["gpt"], measure=["decode"], repeats=7),
}
MEASURES = ("train", "memory", "infer", "sample", "decode")
# the measures that read each of these keys: given for none of them, a key changed nothing (a hunt)
READ_BY = {
    "compile": ("train", "memory", "decode"),
    "optimizer_step": ("train", "memory"),
    "batch_size": ("train", "memory"),
    "seq_lens": ("train", "memory", "infer"),
    "max_step_seconds": ("train", "memory"),   # a train step's time decides (infer took it; a hunt)
    "warmup": ("train", "memory", "infer", "decode"),   # sample: one warm-up, sample_repeats runs (a hunt)
    "repeats": ("train", "memory", "infer", "decode"),
    "infer_batch": ("infer", "memory"),
    "decode_steps": ("infer", "memory"),
    "gen_tokens": ("sample", "decode"),
    "sample_repeats": ("sample",),
    "keep_heaviest_branch": ("infer", "memory", "sample", "decode"),
}


def defaults():
    cfg = dict(BENCH_DEFAULTS)
    for key, value in gpt_config_defaults().items():
        cfg.setdefault(key, value)
    return cfg


# --- command line -------------------------------------------------------------------------------

def parse(argv):
    """(config, model entries) from the command line; bad input raises UserError."""
    cfg, explicit = load_config(defaults(), list(argv), positional="config_files")
    return check(cfg, explicit)


def check(cfg, explicit):
    files = cfg["config_files"]
    if cfg["mode"] not in MODES:
        raise UserError(f"unknown --mode={cfg['mode']} (fix: use paper001, paper004, decode or leave it out)")
    for key, value in MODES[cfg["mode"]].items():
        if key not in explicit:
            cfg[key] = value
    for path in files:   # a preset's name: train.py's config files say --variant, which bench does not take
        if not os.path.isfile(path) and path in variants.available():
            raise UserError(f"config file '{path}' not found (fix: the preset variants/{path}.py is "
                            f"--variants={path})")
    if not cfg["variants"] and not files:
        cfg["variants"] = ["gpt"] if not cfg["mode"] else MODES[cfg["mode"]]["variants"]
    if not cfg["measure"]:   # it said "unknown measure []" (a hunt)
        raise UserError(f"--measure chose no measure (fix: a comma list of {','.join(MEASURES)}, or leave it out)")
    bad = [m for m in cfg["measure"] if m not in MEASURES]
    if bad:
        raise UserError(f"unknown measure {bad} (fix: --measure is a comma list of {','.join(MEASURES)})")
    unread = [key for key in sorted(explicit) if key in READ_BY and not set(READ_BY[key]) & set(cfg["measure"])]
    if unread:
        key = unread[0]
        raise UserError(f"--{key} changes nothing in --measure={','.join(cfg['measure'])} (fix: drop it, or "
                        f"measure one of {','.join(READ_BY[key])})")
    if not cfg["seq_lens"] or not all(type(s) is int and s >= 1 for s in cfg["seq_lens"]):
        raise UserError(f"--seq_lens needs lengths >= 1, got {cfg['seq_lens']} (fix: a comma list of integers, "
                        f"e.g. --seq_lens=64,128,256)")
    if cfg["warmup"] < 0 or cfg["repeats"] < 1 or cfg["batch_size"] < 1 or cfg["infer_batch"] < 1:
        raise UserError("--warmup >= 0, --repeats >= 1, --batch_size >= 1, --infer_batch >= 1 required "
                        "(fix: e.g. --warmup=2 --repeats=5 --batch_size=8 --infer_batch=1)")
    for key in ("gen_tokens", "sample_repeats", "decode_steps"):
        if cfg[key] < 1:
            raise UserError(f"--{key}={cfg[key]} must be >= 1 (fix: e.g. --gen_tokens=500 --sample_repeats=1 "
                            f"--decode_steps=16)")
    if not 0 < cfg["scale"] < math.inf or not 0 <= cfg["depth_scale"] < math.inf:   # inf: no model has that size
        raise UserError("--scale must be > 0 and --depth_scale >= 0, both finite (fix: e.g. --scale=0.5, "
                        "--depth_scale=0 to follow it)")
    model_keys = set(gpt_config_defaults())
    cli_model = {k: cfg[k] for k in explicit if k in model_keys}
    entries = [variant_entry(name, cfg, cli_model) for name in cfg["variants"]]
    entries += [file_entry(path, cfg, cli_model, "batch_size" in explicit) for path in files]
    if cfg["keep_heaviest_branch"] and not any(e["args"].get("n_branches", 1) > 1 for e in entries):
        # as tools.technique_lines refuses it; it changed nothing here without a word (a hunt)
        raise UserError("--keep_heaviest_branch: no model here has branches (pgpt), so it changes nothing "
                        "(fix: drop it, or measure pgpt)")
    if cfg["compile"] and "decode" in cfg["measure"]:   # refused after the models before it were measured (a hunt)
        for entry in entries:
            try:
                fast_sample.refuse_unsupported(GPTConfig(**entry["args"]))
            except UserError as e:
                problem = str(e).rsplit(" (fix: ", 1)[0]
                raise UserError(f"{entry['name']}: --compile measures tools.fast_sample's compiled decode step: "
                                f"{problem} (fix: drop --compile, or drop {entry['name']})") from None
    return cfg, entries


def header(cfg, entries, device, dtype):
    load = "n/a"
    if hasattr(os, "getloadavg"):
        load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    lines = [f"bench: torch {torch.__version__}, device {device}"
             + (f" ({torch.cuda.get_device_name()})" if device.startswith("cuda") else "")
             + f", {str(dtype).replace('torch.', '')}, {torch.get_num_threads()} threads, "
               f"{os.cpu_count()} CPUs, load average {load}"]
    if busy_machine(device):
        lines.append(f"warning: timings can be inflated many times: {busy_machine(device)}")
    if cfg["scale"] != 1 or cfg["depth_scale"] not in (0, 1):
        lines.append(f"scaled: width x{cfg['scale']:g}, depth x{(cfg['depth_scale'] or cfg['scale']):g} "
                     f"(nearest valid sizes; explicit --key=value overrides applied after scaling)")
    for e in entries:
        with torch.device("meta"):  # sizes without allocating or initialising any weights
            n = GPT(GPTConfig(**e["args"])).get_num_params(non_embedding=False)
        lines.append(f"  {e['name']}: {n / 1e6:.2f}M params, {describe(e['args'])}")
    return "\n".join(lines)


def out_marker(path):
    """What a file bench wrote starts with: a .csv its columns, a .md the header line; --out names an existing
    file without it (README.md, notes.csv) only to be refused, not replaced."""
    return "model,params," if path.endswith(".csv") else "bench: torch "


def main(argv=None):
    """The command line (configurator.run_command: bad input is one line `error: ...`, Ctrl-C exit code 130)."""
    return run_command(run, defaults(), argv, positional="config_files", with_explicit=True)


def run(cfg, explicit):
    cfg, entries = check(cfg, explicit)
    if cfg["out"]:   # before any measurement
        example = "bench.csv" if cfg["out"].endswith(".csv") else "bench.md"
        check_out_file(cfg["out"], example, marker=out_marker(cfg["out"]))
        if not cfg["out"].endswith((".csv", ".md")):   # anything else got the tables under its name
            stem = os.path.splitext(cfg["out"])[0]
            raise UserError(f"--out={cfg['out']}: bench writes a .csv (one row per measurement) or a .md (the "
                            f"tables) (fix: --out={stem}.md or --out={stem}.csv)")
    check_num_threads(cfg["num_threads"])
    check_seed(cfg["seed"])
    if cfg["num_threads"]:
        torch.set_num_threads(cfg["num_threads"])
    device = str(resolve_device(cfg["device"]))
    dtype = getattr(torch, resolve_dtype(cfg["dtype"], device))
    if cfg["compile"]:
        check_cpu_compiler(device)
    head = header(cfg, entries, device, dtype)
    print(head, flush=True)
    if cfg["dry_run"]:
        if cfg["out"]:   # checked, then silently not written (a hunt)
            print(f"--dry_run: nothing measured, {cfg['out']} not written", flush=True)
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
