"""
Train several model variants with one recipe and compare them from our own measurements: paper 004's
Table 1 and Figure 6 (gpt, pgpt, lgpt, cgpt) and paper 000's Figure 7 (enhanced-residual alphas).

    python compare.py config/compare_shakespeare_cpu.py                  # 4 small models, ~15-20 min, 2 CPU cores
    python compare.py config/compare_shakespeare.py                      # paper 004's recipe and sizes, one GPU
    python compare.py config/compare_000_wikitext103.py                  # paper 000's four 135M models, GPU, hours
    python compare.py config/compare_shakespeare_cpu.py --variants=gpt,lgpt --max_iters=500
    python compare.py config/compare_000_wikitext103.py --dry_run=True   # print the plan and exit

Keys: every train.py key (config files and --key=value exactly as for train.py; they apply to every
model) plus
    variants             the variants/<name>.py presets to train, a list (or --variants=gpt,lgpt)
    compare_dir          output folder; <compare_dir>/<variant>/ is that model's train.py out_dir
    prompts              sample prompts, a list (paper 004: "Oh God, ", "Her affability ", "War is ")
    samples_per_prompt, sample_tokens, sample_temperature, sample_top_k (0 = no top-k)
    bench_iters          timed training steps per model for ms/iter, tokens/s and peak memory
                         (0: take ms/iter and tokens/s from the training loop; no peak memory)
    dry_run              print the models, their sizes and what is already done, then exit
Model sizes: GPTConfig defaults <- the variant's preset <- model keys set in the config or on the command
line. A compare config that sets n_layer/n_embd/n_head/block_size gives every model that size while each
keeps its own technique flags (pgpt's branches, lgpt/cgpt's halving layers, ...); leave them out to get
the papers' sizes.

Written to compare_dir: results.md and results.csv (Table 1 layout plus training figures),
loss_curves.png (Figure 6), samples.md (pgpt samples with its heaviest branch only, as the paper),
alphas.png (models with enhanced_residual: alpha_1/alpha_2 per layer, Figure 7), branch_weights.png
(pgpt: the branch weights over training) and status.json.

Resumable: status.json records the finished models with their training summaries. Re-running the same
command skips them and resumes an interrupted model from its last.pt; Ctrl-C stops cleanly (train.py
finishes the iteration and saves last.pt). Changing a training key of a finished model is an error
(use another --compare_dir); changing only the sampling/timing keys re-measures without retraining.
"""

import contextlib
import csv
import json
import math
import os
import sys
import time

import torch

import train
from configurator import UserError, autocast, gpt_config_defaults, load_config, resolve_device, resolve_dtype
from configurator import model_args as resolve_model_args
from runfiles import plots
from runfiles.checkpoint import LAST_NAME, atomic_open, load_model
from runfiles.dataset import dataset_vocab_size, resolve_data_dir
from runfiles.runlog import format_duration, read_log
from runfiles.tokenizer import encode_start, load_tokenizer, render

COMPARE_DEFAULTS = dict(
    variants=["gpt", "pgpt", "lgpt", "cgpt"],
    compare_dir="out-compare",
    prompts=["Oh God, ", "Her affability ", "War is "],
    samples_per_prompt=1,
    sample_tokens=300,
    sample_temperature=0.3,
    sample_top_k=0,
    bench_iters=10,
    dry_run=False,
)
# keys that never change what a model learns: a finished model is reused when only these differ
NOT_TRAINING_KEYS = ("out_dir", "init_from", "variant", "log_interval", "compile")
# the settings that produced a model's measurements (sizes, samples, timing): change one, re-measure
REPORT_KEYS = ("prompts", "samples_per_prompt", "sample_tokens", "sample_temperature", "sample_top_k",
               "bench_iters", "seed", "device", "dtype", "compile")
STATUS_NAME = "status.json"
MB = 1e6   # decimal megabytes, as paper 004's Table 1 (10.77M parameters x 12 bytes = 129.3 MB)
BENCH_WARMUP = 2


def defaults():
    return {**train.DEFAULTS, **COMPARE_DEFAULTS}


# -----------------------------------------------------------------------------------------------
# command line

def normalize_argv(argv):
    """--variants=gpt,lgpt -> --variants=['gpt', 'lgpt']; --prompts=TEXT -> --prompts=['TEXT'] (one
    prompt: prompts often contain commas). A python list literal passes through unchanged."""
    out, i = [], 0
    while i < len(argv):
        arg = argv[i]
        key = arg[2:].split("=", 1)[0].replace("-", "_") if arg.startswith("--") else None
        if key in ("variants", "prompts"):
            text = None
            if "=" in arg:
                text = arg.split("=", 1)[1]
            elif i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                i += 1
                text = argv[i]
            if text is not None:
                if not text.strip().startswith(("[", "(")):
                    items = [t.strip() for t in text.split(",") if t.strip()] if key == "variants" else [text]
                    text = repr(items)
                arg = f"--{key}={text}"
        out.append(arg)
        i += 1
    return out


def parse(argv):
    """(config, explicit) from config files and overrides; bad input -> one-line SystemExit."""
    try:
        config, explicit = load_config(defaults(), normalize_argv(list(argv)))
    except UserError as e:
        raise SystemExit(f"error: {e}")
    check(config, explicit)
    return config, explicit


def check(config, explicit):
    def need(ok, msg):
        if not ok:
            raise SystemExit(f"error: {msg}")

    v = config["variants"]
    need(isinstance(v, (list, tuple)) and v and all(isinstance(x, str) and x for x in v),
         f"variants must be a non-empty list of names, got {v!r} (fix: --variants=gpt,lgpt)")
    config["variants"] = list(v)
    dup = sorted({x for x in v if v.count(x) > 1})
    need(not dup, f"variants lists {', '.join(dup)} twice (fix: name each variant once)")
    p = config["prompts"]
    need(isinstance(p, (list, tuple)) and all(isinstance(x, str) for x in p),
         f"prompts must be a list of strings, got {p!r} (fix: --prompts=\"['War is ']\")")
    config["prompts"] = list(p)
    for key in ("samples_per_prompt",):
        need(config[key] >= 1, f"{key} must be >= 1 (fix: --{key}=1)")
    for key in ("sample_tokens", "sample_temperature", "sample_top_k", "bench_iters"):
        need(config[key] >= 0, f"{key} must be >= 0 (fix: --{key}=0)")
    need(config["compare_dir"] != "", "compare_dir is empty (fix: --compare_dir=out-compare)")
    need("init_from" not in explicit, "compare.py sets init_from itself: scratch, or resume for a model whose "
         "last.pt exists (fix: drop init_from)")
    need(not config["eval_only"], "eval_only does not train (fix: drop --eval_only; use eval.py on the out_dirs)")
    need(train.distributed_env() is None, "compare.py runs in one process (fix: run it with python, not torchrun)")
    for key in ("out_dir", "variant"):
        if key in explicit:
            print(f"note: {key} is ignored by compare.py: each variant of `variants` trains into "
                  f"{config['compare_dir']}/<variant>", flush=True)


# -----------------------------------------------------------------------------------------------
# the models to train

def plan(config, explicit):
    """[(variant, model_args)] resolved as train.py will: GPTConfig defaults <- preset <- explicit model
    keys, vocabulary from the dataset (when prepared). Invalid combinations fail here, before training."""
    from model import GPTConfig
    fields = gpt_config_defaults()
    model_explicit = {k for k in explicit if k in fields}
    vocab = None if "vocab_size" in model_explicit else dataset_vocab_size(config)
    out = []
    for name in config["variants"]:
        try:
            args = resolve_model_args({**config, "variant": name}, model_explicit, vocab_size=vocab)
        except UserError as e:
            raise SystemExit(f"error: {e}")
        try:
            GPTConfig(**args)
        except ValueError as e:
            set_keys = ", ".join(sorted(model_explicit)) or "none"
            raise SystemExit(f"error: variant {name} with this config: {e} (the config's model keys ({set_keys}) "
                             f"apply to every variant; fix: adjust them, or drop them to keep the preset's sizes)")
        out.append((name, args))
    return out


def model_info(args):
    """(parameters, training FLOPs per token) without allocating any weights."""
    from model import GPT, GPTConfig
    with torch.device("meta"):
        m = GPT(GPTConfig(**args))
    return m.get_num_params(non_embedding=False), m.flops_per_token()


def describe(args):
    import bench
    return bench.describe(args)


def model_dir(config, name):
    return os.path.join(config["compare_dir"], name)


def resume_iter(out_dir):
    """The iteration an interrupted model resumes at (its last.pt), 0 when it starts from scratch."""
    path = os.path.join(out_dir, LAST_NAME)
    if not os.path.isfile(path):
        return 0
    try:
        # mmap: reads the header and one integer, not the weights and optimizer state
        return int(torch.load(path, map_location="cpu", mmap=True, weights_only=True)["iter_num"])
    except Exception:  # an unreadable last.pt is train.py's to report; here it is only a progress figure
        return 0


# -----------------------------------------------------------------------------------------------
# status.json

def status_path(config):
    return os.path.join(config["compare_dir"], STATUS_NAME)


def load_status(config):
    path = status_path(config)
    if not os.path.exists(path):
        return {"models": {}}
    try:
        with open(path, encoding="utf-8") as f:
            status = json.load(f)
        status["models"]  # noqa: B018 - a KeyError means a foreign file
    except (ValueError, OSError, KeyError, TypeError) as e:
        raise SystemExit(f"error: cannot read {path}: {type(e).__name__} {e} (fix: delete it; the next run then "
                         f"resumes every model from its last.pt)")
    return status


def save_status(config, status):
    status["updated"] = time.strftime("%Y-%m-%d %H:%M:%S")
    with atomic_open(status_path(config), "w") as f:
        json.dump(status, f, indent=1, sort_keys=True)


def jsonable(x):
    return json.loads(json.dumps(x))


def training_settings(config, args):
    """What decides a model's training: the train.py keys and the resolved model (vocab aside: it comes
    from the dataset, which is a key here)."""
    fields = gpt_config_defaults()   # model keys count through the resolved model_args
    keys = {k: config[k] for k in train.DEFAULTS if k not in NOT_TRAINING_KEYS and k not in fields}
    return jsonable({"train": keys, "model_args": {k: v for k, v in args.items() if k != "vocab_size"}})


def report_settings(config):
    return jsonable({k: config[k] for k in REPORT_KEYS})


def differences(old, new):
    out = []
    for part in ("model_args", "train"):
        a, b = old.get(part, {}), new.get(part, {})
        # keys known to both only: a key added to train.py later must not invalidate finished models
        out += [f"{k}: {a[k]!r} -> {b[k]!r}" for k in sorted(set(a) & set(b)) if a[k] != b[k]]
    return out


def check_finished(config, status, models):
    """A finished model must have been trained with today's settings, else its row would be wrong."""
    for name, args in models:
        entry = status["models"].get(name)
        if not entry or "settings" not in entry:
            continue
        diff = differences(entry["settings"], training_settings(config, args))
        model_diff = differences({"model_args": entry["settings"].get("model_args", {})},
                                 {"model_args": training_settings(config, args)["model_args"]})
        if entry.get("state") == "finished" and diff:
            raise SystemExit(f"error: {name} in {config['compare_dir']} was trained with other settings "
                             f"({'; '.join(diff[:4])}{'; ...' if len(diff) > 4 else ''}) (fix: use another "
                             f"--compare_dir, or the old values)")
        if model_diff and os.path.exists(os.path.join(model_dir(config, name), LAST_NAME)):
            raise SystemExit(f"error: {name} in {config['compare_dir']} was started with another model "
                             f"({'; '.join(model_diff[:4])}) (fix: use another --compare_dir, or delete "
                             f"{model_dir(config, name)} to start it over)")


# -----------------------------------------------------------------------------------------------
# progress

def format_eta(seconds):
    return "?" if seconds is None else format_duration(seconds)


class Progress:
    """train.py callback printing an overall ETA over all models. Seconds per iteration are measured on
    the model being trained (evaluations included) and carried over to the other models in proportion
    to their training FLOPs per token, so a model with 4x the FLOPs is expected to take 4x as long."""

    def __init__(self, names, flops, remaining, max_iters, print_every_s=60.0):
        self.names, self.flops, self.remaining = names, flops, dict(remaining)
        self.max_iters, self.print_every_s = max_iters, print_every_s
        self.rate = None   # seconds per iteration per FLOP/token
        self.index = self.current = None

    def start(self, index, name, iter_num):
        self.index, self.current = index, name
        self.t0, self.start_iter, self.last_print = time.time(), iter_num, time.time()

    def finish(self, name):
        self.remaining[name] = 0

    def eta(self):
        if self.rate is None:
            return None
        return sum(self.remaining[n] * self.flops[n] * self.rate for n in self.names)

    def line(self, it):
        return (f"[compare {self.index}/{len(self.names)} {self.current}] iteration {it}/{self.max_iters}; "
                f"all models: ETA {format_eta(self.eta())}")

    def __call__(self, event, info):
        if info.get("rank", 0) != 0 or event == "end":
            return
        it = info["iter_num"]
        now = time.time()
        self.remaining[self.current] = max(0, self.max_iters - it)
        if it > self.start_iter:
            self.rate = (now - self.t0) / (it - self.start_iter) / self.flops[self.current]
        if event == "eval" or now - self.last_print >= self.print_every_s:
            print(self.line(it), flush=True)
            self.last_print = now


# -----------------------------------------------------------------------------------------------
# training one model

def train_model(config, explicit, name, progress):
    out_dir = model_dir(config, name)
    resume = os.path.isfile(os.path.join(out_dir, LAST_NAME))
    tcfg = {k: config[k] for k in train.DEFAULTS}
    tcfg.update(variant=name, out_dir=out_dir, init_from="resume" if resume else "scratch")
    texplicit = {k for k in explicit if k in train.DEFAULTS} | {"variant", "out_dir", "init_from"}
    try:
        return train.train(tcfg, texplicit, callback=progress)
    except UserError as e:
        raise SystemExit(f"error: {name}: {e}")
    except torch.OutOfMemoryError:
        raise SystemExit(f"error: {name}: out of memory (fix: lower --batch_size and raise "
                         f"--gradient_accumulation_steps, or lower --block_size)") from None


# -----------------------------------------------------------------------------------------------
# measurements of a trained model: sizes, samples, timing, alphas, branch weights

class ByteCounter:
    """A write-only file that only counts: the size torch.save would write, without writing it."""

    def __init__(self):
        self.n = 0

    def write(self, b):
        self.n += len(b)
        return len(b)

    def flush(self):
        pass


def fp32_weights_bytes(model):
    """File size of torch.save(state_dict) with every floating tensor in fp32: weights only, no
    optimizer state (tied weights share storage, so they are stored once)."""
    state = {k: (v.float() if v.is_floating_point() else v) for k, v in model.state_dict().items()}
    counter = ByteCounter()
    torch.save(state, counter)
    return counter.n


def unique_alphas(model):
    """Enhanced-residual (alpha_1, alpha_2) per distinct block: a shared block applied several times
    appears once, so the x axis is paper 000's 30 layers, not the 60 applications."""
    rows = model.residual_alphas()
    stack = model.branches[0]
    pairs = list(zip(getattr(stack, "attn_index", []), getattr(stack, "mlp_index", [])))
    if len(pairs) != len(rows):
        return [list(r) for r in rows]
    seen, out = set(), []
    for pair, row in zip(pairs, rows):
        if pair not in seen:
            seen.add(pair)
            out.append(list(row))
    return out


@torch.no_grad()
def generate_samples(model, ckpt, config, device, dtype):
    tok = load_tokenizer(resolve_data_dir(ckpt))
    dataset = ckpt.get("dataset") or config["dataset"]
    gen = torch.Generator(device=device).manual_seed(config["seed"])
    top_k = config["sample_top_k"] or None
    out = []
    for prompt in config["prompts"]:
        try:
            ids = encode_start(tok, prompt, dataset)
        except UserError as e:   # e.g. a character the char vocabulary lacks: report it, keep going
            out.append(dict(prompt=prompt, error=str(e)))
            continue
        x = torch.tensor(ids, dtype=torch.long, device=device)[None, :]
        for _ in range(config["samples_per_prompt"]):
            with autocast(device, dtype):
                y = model.generate(x, config["sample_tokens"], temperature=config["sample_temperature"],
                                   top_k=top_k, generator=gen)
            out.append(dict(prompt=prompt, text=render(tok, prompt, ids, y[0].tolist())))
    return out


def bench_model(args, config, device, dtype):
    """bench.py's training-step measurement on a fresh model of the same shape (random tokens, batch
    batch_size x block_size): median ms of bench_iters steps after BENCH_WARMUP, and peak memory."""
    if config["bench_iters"] <= 0:
        return {}
    import bench
    from model import GPT, GPTConfig
    torch.manual_seed(config["seed"])
    model = GPT(GPTConfig(**args)).to(device)
    cfg = dict(seed=config["seed"], compile=config["compile"], optimizer_step=True, warmup=BENCH_WARMUP,
               repeats=config["bench_iters"], max_step_seconds=float("inf"))
    try:
        r = bench.bench_train(model, cfg, device, dtype, args["block_size"], config["batch_size"], True)
        return dict(bench_ms=r["train_ms"], bench_tok_s=r["train_tok_s"], peak_bytes=r.get("train_peak_bytes"))
    except torch.OutOfMemoryError:
        return dict(bench_note="out of memory")
    finally:
        del model
        if device.startswith("cuda"):
            torch.cuda.empty_cache()


def measure(config, name, device, dtype):
    """Everything results.md / samples.md / the figures need from a trained model (its ckpt.pt)."""
    out_dir = model_dir(config, name)
    model, ckpt = load_model(out_dir, device)
    rep = dict(ckpt=os.path.relpath(ckpt["path"], config["compare_dir"]), ckpt_iter=int(ckpt.get("iter_num", 0)),
               params=model.get_num_params(non_embedding=False), weights_fp32_bytes=fp32_weights_bytes(model),
               ckpt_bytes=os.path.getsize(ckpt["path"]))
    if getattr(model.config, "enhanced_residual", False):
        rep["alphas"] = unique_alphas(model)
    if model.config.n_branches > 1:
        rep["branch_weights"] = [float(w) for w in model.branch_weights().tolist()]
        rep["heaviest_branch"] = model.heaviest_branch()
        model.keep_branch = rep["heaviest_branch"]   # paper 004 samples pgpt with one branch
    if config["prompts"] and config["sample_tokens"] > 0:
        rep["samples"] = generate_samples(model, ckpt, config, device, dtype)
    args = dict(ckpt["model_args"])
    del model, ckpt
    rep.update(bench_model(args, config, device, dtype))
    return rep


# -----------------------------------------------------------------------------------------------
# results.md / results.csv / samples.md / figures

def fmt(v, spec):
    return "n/a" if v is None else format(v, spec)


def best_eval(out_dir):
    """The eval row with the lowest val loss (the state saved as ckpt.pt)."""
    rows = [r for r in read_log(out_dir)["eval"] if r["val_loss"] is not None]
    return min(rows, key=lambda r: r["val_loss"]) if rows else {}


def result_rows(config, status):
    rows = []
    for name in config["variants"]:
        entry = status["models"].get(name, {})
        if entry.get("state") != "finished" or "report" not in entry:
            continue
        s, r = entry["summary"], entry["report"]
        best = best_eval(model_dir(config, name))
        bench_ok = "bench_ms" in r
        bvl = s.get("best_val_loss")
        rows.append(dict(
            name=name, params=r["params"], params_m=r["params"] / 1e6,
            size_mb_fp32_weights=r["weights_fp32_bytes"] / MB, ckpt_mb=r["ckpt_bytes"] / MB,
            ms_per_iter=r["bench_ms"] if bench_ok else s.get("ms_per_iter"),
            tokens_per_s=r["bench_tok_s"] if bench_ok else s.get("tokens_per_s"),
            peak_memory_mb=r["peak_bytes"] / MB if r.get("peak_bytes") is not None else None,
            timing="bench" if bench_ok else "training loop",
            best_val_loss=bvl, best_val_ppl=math.exp(bvl) if bvl is not None and bvl < 50 else None,
            val_loss_weaker_branch_dropped=best.get("val_loss_heaviest") if "heaviest_branch" in r else None,
            heaviest_branch=r.get("heaviest_branch"),
            branch_weights=" ".join(f"{w:.4f}" for w in r["branch_weights"]) if "branch_weights" in r else None,
            best_iter=best.get("iter"), iters=s.get("iter_num"), train_time_s=s.get("train_time_total_s", s.get("train_time_s")),
            train_ms_per_iter=s.get("ms_per_iter"), train_tokens_per_s=s.get("tokens_per_s"),
            final_train_loss=s.get("final_train_loss"), model=describe(s["model_args"]),
        ))
    return rows


def md_table(header, body, left=1):
    """A markdown table; the first `left` columns (names) left-aligned, the numbers right-aligned."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" if i < left else "---:" for i in range(len(header))) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in body]
    return "\n".join(lines)


def setup_line(config, device, dtype):
    accum = config["gradient_accumulation_steps"]
    return (f"Dataset `{config['dataset']}`; every model: {config['max_iters']} iterations of "
            f"{config['batch_size']} x {config['block_size']} tokens" + (f" x {accum} accumulation steps" if accum > 1 else "")
            + f", AdamW lr {config['learning_rate']:g} (warmup {config['warmup_iters']}, cosine to "
            f"{config['min_lr'] if config['min_lr'] is not None else config['learning_rate'] / 10:g}), "
            f"weight decay {config['weight_decay']:g}, dropout {config['dropout']:g}, seed {config['seed']}; "
            f"evaluation every {config['eval_interval']} iterations on {config['eval_iters']} fixed batches; "
            f"device {device}, dtype {dtype}, torch {torch.__version__}.")


def write_results(config, status, rows, figures):
    d = config["compare_dir"]
    device = resolve_device(config["device"])
    dtype = resolve_dtype(config["dtype"], device)
    table1 = md_table(
        ["Name", "Params (M)", "Size (MB), fp32 weights", "ms/iter", "tokens/s", "Peak memory (MB)",
         "Best val loss", "Val loss, weaker branch dropped"],
        [[r["name"], f"{r['params_m']:.2f}", f"{r['size_mb_fp32_weights']:.2f}", fmt(r["ms_per_iter"], ".1f"),
          fmt(r["tokens_per_s"], ",.0f"), fmt(r["peak_memory_mb"], ".1f"), fmt(r["best_val_loss"], ".4f"),
          fmt(r["val_loss_weaker_branch_dropped"], ".4f")] for r in rows])
    training = md_table(
        ["Name", "Model", "Iterations", "Train time", "Loop ms/iter", "Final train loss", "Best val ppl",
         "Best at iter", "ckpt.pt (MB)"],
        [[r["name"], r["model"], r["iters"], format_eta(r["train_time_s"]), fmt(r["train_ms_per_iter"], ".1f"),
          fmt(r["final_train_loss"], ".4f"), fmt(r["best_val_ppl"], ".2f"), r["best_iter"], f"{r['ckpt_mb']:.2f}"]
         for r in rows], left=2)
    timing = {r["timing"] for r in rows}
    if timing == {"bench"}:
        timing_note = (f"one training step (forward + backward + AdamW update) of {config['batch_size']} x "
                       f"{config['block_size']} random tokens on a fresh model, median of {config['bench_iters']} "
                       f"steps after {BENCH_WARMUP} warm-up (bench.py's `bench_train`, run right after that model "
                       f"trained). Peak memory: the highest total of live tensors during such a step (weights, "
                       f"gradients, AdamW state, activations; CUDA: max_memory_allocated, CPU: tensor allocations "
                       f"recorded by the profiler)")
        if config["gradient_accumulation_steps"] > 1:
            timing_note += f"; one training iteration is {config['gradient_accumulation_steps']} such steps"
    else:
        timing_note = ("the training loop's median over its log windows (evaluations excluded); bench_iters=0, "
                       "so no peak memory")
    pgpt = [r for r in rows if r["heaviest_branch"] is not None]
    lines = [f"# Model comparison: {', '.join(r['name'] for r in rows)}", "", setup_line(config, device, dtype), "",
             "Layout of paper 004's Table 1, from our own runs.", "", table1, "",
             "- **Params**: every parameter, a shared layer counted once (`get_num_params(non_embedding=False)`).",
             "- **Size**: bytes of `torch.save(state_dict)` of the best checkpoint's weights in fp32: the model "
             "weights only, no optimizer state. The ckpt.pt files, which also hold the two AdamW moments per "
             "weight (about 12 bytes per parameter), are listed below; paper 004's sizes (129.3 MB for 10.7M "
             "parameters) match such full checkpoints, not the weights alone.",
             f"- **ms/iter, tokens/s**: {timing_note}. Timings on a shared machine are noisy.",
             f"- **Best val loss**: mean cross-entropy over {config['eval_iters']} fixed validation batches, the "
             f"lowest over all evaluations (the ckpt.pt state)."]
    if pgpt:
        lines.append("- **Val loss, weaker branch dropped**: pgpt at that same checkpoint with only its heaviest "
                     "branch running (paper 004's inference): " + "; ".join(
                         f"{r['name']} keeps branch {r['heaviest_branch']} (weights {r['branch_weights']})"
                         for r in pgpt) + ". n/a for single-branch models.")
    lines += ["", "## Training", "", training, "",
              "Loop ms/iter: the training loop's own median (data loading included, evaluations excluded). "
              "Best val ppl = exp(best val loss), per token of the dataset's tokenizer.", ""]
    titles = {"loss_curves.png": "Loss curves (paper 004 Figure 6)",
              "branch_weights.png": "pgpt branch weights during training",
              "alphas.png": "Enhanced-residual alphas per layer (paper 000 Figure 7)"}
    for fig in figures:
        lines += [f"## {titles.get(fig, fig)}", "", f"![{fig}]({fig})", ""]
    lines += ["Samples: [samples.md](samples.md).", ""]
    with atomic_open(os.path.join(d, "results.md"), "w") as f:
        f.write("\n".join(lines))
    with atomic_open(os.path.join(d, "results.csv"), "w") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["name"], lineterminator="\n")
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else ("" if v is None else v)) for k, v in r.items()})


def write_samples(config, status):
    names = [n for n in config["variants"] if "samples" in status["models"].get(n, {}).get("report", {})]
    if not names:
        return None
    reports = {n: status["models"][n]["report"] for n in names}
    top_k = f"top-k {config['sample_top_k']}" if config["sample_top_k"] else "no top-k"
    lines = ["# Samples", "",
             f"Temperature {config['sample_temperature']:g}, {config['sample_tokens']} new tokens, {top_k}, "
             f"seed {config['seed']}; {config['samples_per_prompt']} sample(s) per prompt from each model's ckpt.pt "
             f"(the best validation loss; its iteration is given after the model's name)."]
    for n in names:
        if "heaviest_branch" in reports[n]:
            w = ", ".join(f"{x:.3f}" for x in reports[n]["branch_weights"])
            lines.append(f"{n} is sampled with only its heaviest branch (branch {reports[n]['heaviest_branch']}, "
                         f"weights {w}), the weaker one dropped, as paper 004 does.")
    for prompt in config["prompts"]:
        lines += ["", f"## Prompt {prompt!r}"]
        for n in names:
            for k, s in enumerate(x for x in reports[n]["samples"] if x["prompt"] == prompt):
                label = f"{n} (iter {reports[n]['ckpt_iter']})" + (f", sample {k + 1}" if config["samples_per_prompt"] > 1 else "")
                lines += ["", f"### {label}", ""]
                if "error" in s:
                    lines.append(f"(no sample: {s['error']})")
                else:
                    lines += ["````text", s["text"], "````"]
    path = os.path.join(config["compare_dir"], "samples.md")
    with atomic_open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


def write_figures(config, status):
    d = config["compare_dir"]
    done = [n for n in config["variants"] if status["models"].get(n, {}).get("state") == "finished"]
    logs = {n: read_log(model_dir(config, n)) for n in done}
    written = []
    if plots.plot_loss_curves(logs, os.path.join(d, "loss_curves.png"),
                              title=f"Loss comparison on {config['dataset']}"):
        written.append("loss_curves.png")
    if plots.plot_branch_weights(logs, os.path.join(d, "branch_weights.png")):
        written.append("branch_weights.png")
    alphas = {n: status["models"][n].get("report", {}).get("alphas") for n in done}
    if plots.plot_alphas(alphas, os.path.join(d, "alphas.png")):
        written.append("alphas.png")
    return written


def write_report(config, status):
    figures = write_figures(config, status)
    rows = result_rows(config, status)
    write_results(config, status, rows, figures)
    samples = write_samples(config, status)
    # outputs of an earlier run that this one has nothing for (e.g. no pgpt in the list any more)
    stale = {"loss_curves.png", "branch_weights.png", "alphas.png", "samples.md"} - set(figures)
    if samples:
        stale.discard("samples.md")
    for name in stale:
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(config["compare_dir"], name))
    return rows, figures


# -----------------------------------------------------------------------------------------------
# main

def print_plan(config, status, models, infos):
    print(f"compare: {len(models)} models on {config['dataset']}, {config['max_iters']} iterations each -> "
          f"{config['compare_dir']}", flush=True)
    ref = infos[models[0][0]][1]
    for i, (name, args) in enumerate(models, 1):
        params, flops = infos[name]
        entry = status["models"].get(name, {})
        if entry.get("state") == "finished":
            state = "finished"
        elif os.path.isfile(os.path.join(model_dir(config, name), LAST_NAME)):
            state = f"resumes at iteration {resume_iter(model_dir(config, name))}"
        else:
            state = "to train"
        print(f"  [{i}/{len(models)}] {name}: {params / 1e6:.2f}M params, {flops / ref:.2f}x the training FLOPs "
              f"of {models[0][0]}, {describe(args)}; {state}", flush=True)


def run(config, explicit):
    models = plan(config, explicit)
    infos = {name: model_info(args) for name, args in models}
    status = load_status(config)
    check_finished(config, status, models)
    print_plan(config, status, models, infos)
    if config["dry_run"]:
        return None
    os.makedirs(config["compare_dir"], exist_ok=True)
    status["variants"] = config["variants"]
    names = [n for n, _ in models]
    remaining = {n: 0 if status["models"].get(n, {}).get("state") == "finished"
                 else max(0, config["max_iters"] - resume_iter(model_dir(config, n))) for n in names}
    progress = Progress(names, {n: infos[n][1] for n in names}, remaining, config["max_iters"])
    device = str(resolve_device(config["device"]))
    dtype = getattr(torch, resolve_dtype(config["dtype"], device))
    rsettings = report_settings(config)

    for i, (name, args) in enumerate(models, 1):
        entry = status["models"].setdefault(name, {})
        if entry.get("state") == "finished":
            print(f"=== [{i}/{len(models)}] {name}: finished earlier (best val loss "
                  f"{entry['summary']['best_val_loss']:.4f}), skipped ===", flush=True)
        else:
            out_dir = model_dir(config, name)
            start = resume_iter(out_dir)
            print(f"\n=== [{i}/{len(models)}] {name}: {infos[name][0] / 1e6:.2f}M params, {describe(args)}; "
                  + (f"resuming at iteration {start}" if start else "from scratch")
                  + f" -> {out_dir}; all models: ETA {format_eta(progress.eta())} ===", flush=True)
            entry.update(state="running", settings=training_settings(config, args))
            entry.pop("report", None)
            save_status(config, status)
            progress.start(i, name, start)
            summary = train_model(config, explicit, name, progress)
            summary = {k: v for k, v in summary.items() if k != "evals"}
            # train_time_s covers this session only; earlier sessions of an interrupted model add up
            summary["train_time_total_s"] = summary["train_time_s"] + entry.pop("train_time_before_s", 0.0)
            if summary["interrupted"]:
                entry.update(state="interrupted", summary=jsonable(summary),
                             train_time_before_s=summary["train_time_total_s"])
                save_status(config, status)
                print(f"\ncompare: stopped during {name} (iteration {summary['iter_num']}); run the same command "
                      f"again to resume it", flush=True)
                raise SystemExit(130)
            entry.update(state="finished", summary=jsonable(summary))
            progress.finish(name)
            save_status(config, status)
            if device.startswith("cuda"):
                torch.cuda.empty_cache()
        if entry.get("report_settings") != rsettings or "report" not in entry:
            print(f"[compare {i}/{len(models)} {name}] measuring: sizes, "
                  + (f"{config['bench_iters']} timed steps, " if config["bench_iters"] else "")
                  + f"{len(config['prompts']) * config['samples_per_prompt']} samples", flush=True)
            entry.update(report=jsonable(measure(config, name, device, dtype)), report_settings=rsettings)
            save_status(config, status)

    rows, figures = write_report(config, status)
    d = config["compare_dir"]
    written = ["results.md", "results.csv"] + (["samples.md"] if os.path.exists(os.path.join(d, "samples.md")) else [])
    print(f"\ncompare: done. {', '.join(os.path.join(d, f) for f in written + figures)}")
    for r in rows:
        print(f"  {r['name']:<20} {r['params_m']:7.2f}M  best val {fmt(r['best_val_loss'], '.4f')}"
              + (f"  (weaker branch dropped: {r['val_loss_weaker_branch_dropped']:.4f})"
                 if r["val_loss_weaker_branch_dropped"] is not None else "")
              + f"  {fmt(r['ms_per_iter'], '.1f')} ms/iter")
    return rows


def main(argv=None):
    config, explicit = parse(sys.argv[1:] if argv is None else argv)
    try:
        return run(config, explicit)
    except KeyboardInterrupt:
        # outside train.py's own handling (e.g. while sampling): finished models are already recorded
        print("\ncompare: interrupted; run the same command again to continue", flush=True)
        raise SystemExit(130) from None


if __name__ == "__main__":
    main()
