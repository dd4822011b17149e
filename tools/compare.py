"""
Train several model variants with one recipe and compare them from our own measurements: paper 004's
Table 1 and Figure 6 (gpt, pgpt, lgpt, cgpt) and paper 000's Figure 7 (enhanced-residual alphas).

    python -m tools.compare config/compare_shakespeare_cpu.py                  # 4 small models, ~15-20 min, 2 CPU cores
    python -m tools.compare config/compare_shakespeare.py                      # paper 004's recipe and sizes, one GPU
    python -m tools.compare config/compare_000_wikitext103.py                  # paper 000's four 135M models, GPU, hours
    python -m tools.compare config/compare_shakespeare_cpu.py --variants=gpt,lgpt --max_iters=500
    python -m tools.compare config/compare_000_wikitext103.py --dry_run=True   # print the plan and exit

Keys: every train.py key (config files and --key=value exactly as for train.py; they apply to every
model, but a custom variant's own keys win over them: --max_iters does not shorten a custom variant that sets its
own max_iters, nor --batch_size change its batch) plus
    variants             the variants/<name>.py presets to train, a list (or --variants=gpt,lgpt)
    compare_dir          output folder; <compare_dir>/<variant>/ is that model's train.py out_dir
    prompts              sample prompts, a list (paper 004: "Oh God, ", "Her affability ", "War is ")
    samples_per_prompt, sample_tokens, sample_temperature, sample_top_k (0 = no top-k)
    bench_iters          timed training steps per model for ms/iter, tokens/s and peak memory
                         (0: take ms/iter and tokens/s from the training loop; no peak memory)
    dry_run              print the models, their sizes and what is already done, then exit
    seeds                train every variant once per seed: --seeds=3 (seed, seed+1, seed+2) or
                         --seeds=1,2,3; the tables then show mean +- std over the seeds. Not set: one
                         run per variant with `seed`, as before
    custom_variants      named variants made of a preset plus keys for that variant only (config files):
                         custom_variants = {"cgpt_k3": dict(variant="cgpt", shrink_kernel=3)}; list the
                         name in `variants`. Model keys and training keys (lr, batch_size, init_from=<ckpt>,
                         data_segments, ...) may be set, not out_dir or seed
Model sizes: GPTConfig defaults <- the variant's preset <- model keys set in the config or on the command
line. A compare config that sets n_layer/n_embd/n_head/block_size gives every model that size while each
keeps its own technique flags (pgpt's branches, lgpt/cgpt's halving layers, ...); leave them out to get
the papers' sizes.

Written to compare_dir: results.md and results.csv (Table 1 layout plus training figures and the
equal-compute table), loss_curves.png (Figure 6), loss_vs_compute.png (val loss against training FLOPs),
samples.md (pgpt samples with its heaviest branch only, as the paper), alphas.png (models with
enhanced_residual: alpha_1/alpha_2 per layer, Figure 7), branch_weights.png (pgpt: the branch weights over
training) and status.json. With --seeds, every run trains into <compare_dir>/<variant>/seed<S>/,
results.csv holds the means and standard deviations and results_per_seed.csv every run; samples and the
alpha/branch-weight figures come from each variant's first seed.

Equal compute: the training FLOPs of a run are flops_per_token(model) (tools/flops.py) x tokens per iteration x
iterations. The cheapest variant's full run sets the budget; every model's val loss at that budget is read
off its logged eval curve (linear interpolation between the two evaluations around it).
Noise: with several seeds, a difference from the first row is called better/worse only when Welch's
statistic |mean_b - mean_a| / sqrt(std_a^2/n_a + std_b^2/n_b) exceeds 2 (`noise_verdict`), else
"within noise"; "n/a (another dataset)" for a model of another dataset than the first row's, and at equal
compute "n/a (starts trained)" for a model started from a trained checkpoint (its start's training uncounted).

Data: a run's dataset that is not prepared yet is prepared before it trains: prepare.py's by train.py, the
tools' (shakespeare_vK, wikitext103, wikitext103_vK) here, by tools.pangu.compact_vocab or tools.wikitext103.

Resumable: status.json records the finished runs (variant, seed) with their training summaries.
Re-running the same command skips them and resumes an interrupted run from its last.pt; Ctrl-C stops
cleanly (train.py finishes the iteration and saves last.pt). Changing a training key of a finished or
interrupted run is an error (use another --compare_dir); changing only the sampling/timing keys (prompts,
samples_per_prompt, sample_*, bench_iters, compile) re-measures without retraining (num_threads neither retrains
nor re-measures); seed, device and dtype decide the training too, so a change is that error.
"""

import contextlib
import csv
import dataclasses
import json
import math
import os
import time

import torch

from tools import plots
from tools.benchmarks.measure import bench_train, describe
from tools.benchmarks.entries import starting_args
from tools.flops import flops_per_token
from tools.layers import layer_sets
from tools.plots import read_log
from tools.spread import NOISE_T, add_equal_compute, mean_std, noise_verdict
import train
from safety_net.build import check_optional_types, gpt_config_defaults
from safety_net.build import model_args as resolve_model_args
from safety_net.checkpoint import CKPT_NAME, LAST_NAME, load_checkpoint, load_model
from safety_net.configurator import UserError, load_config, out_of_memory, run_command
from safety_net.dataset import dataset_vocab_size, default_data_dir, is_prepared, load_meta, load_tokenizer
from safety_net.dataset import resolve_data_dir
from safety_net.fileio import atomic_open, check_out_dir, lock_dir
from safety_net.run_log import format_duration
from safety_net.runtime import (MAX_SEED, autocast, check_cpu_compiler, launched_by_torchrun, resolve_device,
                                resolve_dtype)
from safety_net.sampling import check_temperature
from safety_net.text_dataset import dataset_and_tokenizer, tool_command
from safety_net.tokenizers import encode_start, render
from safety_net.train_config import check_settings


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
    seeds=None,            # None: one run per variant with `seed`; N: seed .. seed+N-1; or a list of seeds
    custom_variants={},    # name -> dict(variant=<preset>, key=value, ...): keys for that variant only
)
# keys that never change what a model learns: a finished model is reused when only these differ
# (init_from does: "scratch" or a custom variant's checkpoint; a resume is decided per run, not by it)
# (W&B's keys and DDP's backend too: a resume with them changed was refused as "trained with other settings"; a hunt)
NOT_TRAINING_KEYS = ("out_dir", "variant", "log_interval", "compile", "num_threads", "wandb_log", "wandb_project",
                     "wandb_run_name", "backend")
# the settings that produced a model's measurements (sizes, samples, timing): change one, re-measure (seed, device
# and dtype are training keys as well: check_finished refuses a change of one first)
REPORT_KEYS = ("prompts", "samples_per_prompt", "sample_tokens", "sample_temperature", "sample_top_k",
               "bench_iters", "seed", "device", "dtype", "compile")
# keys a custom variant may not set: compare.py decides them per run
NOT_CUSTOM_KEYS = ("out_dir", "seed", "eval_only")
STATUS_NAME = "status.json"
MB = 1e6   # decimal megabytes, as paper 004's Table 1 (10.77M parameters x 12 bytes = 129.3 MB)
BENCH_WARMUP = 2
# per-run metrics that get a mean and a standard deviation over the seeds; other columns are the same
# for every seed (sizes, FLOPs) and come from the first seed's run
SEED_METRICS = ("best_val_loss", "best_val_ppl", "val_loss_weaker_branch_dropped", "val_loss_equal_compute",
                "final_train_loss", "best_iter", "ms_per_iter", "tokens_per_s", "peak_memory_mb", "train_time_s",
                "train_ms_per_iter", "train_tokens_per_s")


def defaults():
    return {**train.DEFAULTS, **COMPARE_DEFAULTS}


# -----------------------------------------------------------------------------------------------
# command line

ONE_ITEM = ("prompts",)   # --prompts=TEXT is one prompt (it may hold commas); --variants=gpt,lgpt a comma list


def parse(argv):
    """(config, explicit) from config files and overrides; bad input raises UserError."""
    config, explicit = load_config(defaults(), list(argv), one_item=ONE_ITEM)
    check(config, explicit)
    return config, explicit


def resolve_seeds(seeds, seed):
    """`seeds` as given (None, a count N, or a list) -> None or the list of seeds to train with, each in train.py's
    range [0, MAX_SEED) (checked before the list is made: --seeds=10**12 used to fill the memory making it)."""
    if seeds is None:
        return None
    if isinstance(seeds, int) and not isinstance(seeds, bool):
        if not 1 <= seeds <= MAX_SEED - seed:
            raise UserError(f"seeds must be >= 1 and at most {MAX_SEED - seed} (seed .. seed + seeds - 1 must be "
                            f"below {MAX_SEED}), got {seeds} (fix: --seeds=3)")
        return [seed + k for k in range(seeds)]
    if (isinstance(seeds, (list, tuple)) and seeds
            and all(isinstance(s, int) and not isinstance(s, bool) and 0 <= s < MAX_SEED for s in seeds)):
        if len(set(seeds)) != len(seeds):
            raise UserError(f"seeds lists a seed twice: {list(seeds)} (fix: name each seed once)")
        return list(seeds)
    raise UserError(f"seeds must be a count or a list of seeds in [0, {MAX_SEED - 1}], got {seeds!r} "
                     f"(fix: --seeds=3 or --seeds=1,2,3)")


def check_custom_variants(custom):
    def need(ok, msg):
        if not ok:
            raise UserError(f"{msg}")

    need(isinstance(custom, dict) and all(isinstance(k, str) and isinstance(v, dict) for k, v in custom.items()),
         f"custom_variants must be a dict {{name: dict(variant='cgpt', shrink_kernel=3)}}, got {custom!r} "
         f"(fix: set it in a config file)")
    for name, keys in custom.items():
        bad = sorted(k for k in keys if k != "variant" and (k not in train.DEFAULTS or k in NOT_CUSTOM_KEYS))
        need(not bad, f"custom_variants['{name}'] sets {', '.join(bad)}, which is not a key a variant can set "
                      f"(fix: model or training keys only; compare.py sets {', '.join(NOT_CUSTOM_KEYS)} itself)")
        need(keys.get("init_from", "scratch") != "resume", f"custom_variants['{name}'] sets init_from='resume' "
             f"(fix: leave it out: compare.py resumes interrupted runs itself; a checkpoint path is fine)")


def check(config, explicit):
    def need(ok, msg):
        if not ok:
            raise UserError(f"{msg}")

    v = config["variants"]
    need(isinstance(v, (list, tuple)) and v and all(isinstance(x, str) and x for x in v),
         f"variants must be a non-empty list of names, got {v!r} (fix: --variants=gpt,lgpt)")
    config["variants"] = list(v)
    dup = sorted({x for x in v if v.count(x) > 1})
    need(not dup, f"variants lists {', '.join(dup)} twice (fix: name each variant once)")
    # each variant trains into <compare_dir>/<name>: a name like ../../x would write outside compare_dir
    paths = [x for x in v if os.path.basename(x) != x or x in (".", "..")]
    need(not paths, f"variant names are folder names inside compare_dir, got {', '.join(map(repr, paths))} "
                    f"(fix: name the variant without '/' or '..')")
    p = config["prompts"]
    need(isinstance(p, (list, tuple)) and all(isinstance(x, str) for x in p),
         f"prompts must be a list of strings, got {p!r} (fix: --prompts=\"['War is ']\")")
    config["prompts"] = list(p)
    need("" not in p, "prompts holds an empty prompt, which has no token to start from (fix: drop it from "
                      "--prompts)")
    for key in ("samples_per_prompt",):
        need(config[key] >= 1, f"{key} must be >= 1 (fix: --{key}=1)")
    for key in ("sample_tokens", "sample_temperature", "sample_top_k", "bench_iters"):
        need(config[key] >= 0, f"{key} must be >= 0 (fix: --{key}=0)")
    # sample.py's rule: a tiny, infinite or NaN temperature samples garbage (NaN probabilities) after all the training
    check_temperature(config["sample_temperature"], "sample_temperature")
    need(config["compare_dir"] != "", "compare_dir is empty (fix: --compare_dir=out-compare)")
    # "scratch" is what compare.py sets: nanoGPT's config files (config/nanogpt.py) set it too
    need("init_from" not in explicit or config["init_from"] == "scratch", "compare.py sets init_from itself: "
         "scratch, or resume for a model whose last.pt exists (fix: drop init_from; a custom variant may start "
         "from a checkpoint path)")
    need(not config["eval_only"], "eval_only does not train (fix: drop --eval_only; use eval.py on the out_dirs)")
    need(not launched_by_torchrun(), "compare.py runs in one process (fix: run it with python, not torchrun)")
    need(not isinstance(config["seeds"], (list, tuple)) or "seed" not in explicit,
         "seed is not used when seeds lists the seeds (it was ignored without a word) (fix: drop seed, or "
         "--seeds=N for seed .. seed + N - 1)")
    config["seeds"] = resolve_seeds(config["seeds"], config["seed"])
    check_custom_variants(config["custom_variants"])
    unlisted = [name for name in config["custom_variants"] if name not in config["variants"]]
    if unlisted:   # defined, then left out without a word (a hunt); --variants may choose a subset
        print(f"note: custom variants not in variants, not run: {', '.join(unlisted)}", flush=True)
    for key in ("out_dir", "variant"):
        if key in explicit:
            print(f"note: {key} is ignored by compare.py: each variant of `variants` trains into "
                  f"{config['compare_dir']}/<variant>", flush=True)


# -----------------------------------------------------------------------------------------------
# the runs: one per variant, or one per (variant, seed) with --seeds

@dataclasses.dataclass
class Run:
    name: str        # the variant: a variants/<name>.py preset or a custom_variants entry
    seed: int
    key: str         # its key in status.json and its folder under compare_dir: name, or name/seed<S>
    out_dir: str
    config: dict     # the train.py config of this run (shared keys <- the custom variant's keys)
    explicit: set    # the train.py keys set explicitly for this run
    args: dict       # the model, resolved as train.py will
    first: bool      # the variant's first seed: its samples and alpha/branch-weight figures are shown

    @property
    def label(self):
        return self.name if self.key == self.name else f"{self.name} seed {self.seed}"

    def cost_per_iter(self, flops_per_token):
        """Training FLOPs of one iteration: every token of the global batch, forward and backward."""
        return (flops_per_token * self.config["batch_size"] * self.config["gradient_accumulation_steps"]
                * self.args["block_size"])


def variant_config(config, explicit, name):
    """(train.py config, explicit keys) of variant `name`: the shared keys, then the custom variant's own."""
    custom = dict(config["custom_variants"].get(name, {}))
    base = custom.pop("variant", name)
    tcfg = {k: config[k] for k in train.DEFAULTS}
    tcfg.update(custom, variant=base)
    texplicit = ({k for k in explicit if k in train.DEFAULTS} | set(custom)) - {"variant", "out_dir", "init_from"}
    return tcfg, texplicit


def plan(config, explicit):
    """[Run] for every variant (and seed), the model resolved as train.py will: GPTConfig defaults <- the checkpoint
    a custom variant starts from <- preset <- explicit model keys, vocabulary from the dataset (when prepared).
    Invalid combinations fail here, before training."""
    from model import GPTConfig
    fields = gpt_config_defaults()
    seeds = config["seeds"] or [config["seed"]]
    out = []
    for name in config["variants"]:
        tcfg, texplicit = variant_config(config, explicit, name)
        model_explicit = {k for k in texplicit if k in fields}
        vocab = None if "vocab_size" in model_explicit else dataset_vocab_size(tcfg)
        try:
            args = resolve_model_args(tcfg, model_explicit, base=starting_model(tcfg), vocab_size=vocab)
        except UserError as e:   # the variant named, where the message does not name it (mlp_ratio's)
            raise UserError(str(e) if f"'{name}'" in str(e) else f"{name}: {e}") from None
        check_optional_types(args)
        try:
            GPTConfig(**args)
        except (ValueError, TypeError) as e:
            set_keys = ", ".join(sorted(model_explicit)) or "none"
            raise UserError(f"variant {name} with this config: {e} (the config's model keys ({set_keys}) "
                             f"apply to every variant) (fix: adjust them, or drop them to keep the preset's sizes)")
        for k, seed in enumerate(seeds):
            key = name if config["seeds"] is None else f"{name}/seed{seed}"
            out.append(Run(name=name, seed=seed, key=key, out_dir=os.path.join(config["compare_dir"], key),
                           config=dict(tcfg, seed=seed), explicit=set(texplicit), args=dict(args), first=k == 0))
    return out


def starting_model(tcfg):
    """The model_args of the checkpoint a custom variant's init_from names, which train.py's model starts from
    (defaults <- it <- the variant <- the keys): the plan showed the variant's model, and a run train.py refused
    began after the others had trained (a hunt of the user tools). None from scratch, or while that checkpoint is
    not written yet (a dry run before an earlier stage; a real run is refused in check_run_settings)."""
    if not os.path.exists(tcfg["init_from"]):   # "scratch", or a checkpoint an earlier stage writes
        return None
    return starting_args(tcfg, tcfg["init_from"])


def model_info(args):
    """(parameters, training FLOPs per token) without allocating any weights."""
    from model import GPT, GPTConfig
    with torch.device("meta"):
        m = GPT(GPTConfig(**args))
    return m.get_num_params(non_embedding=False), flops_per_token(m)


def resume_iter(out_dir):
    """The iteration an interrupted model resumes at (its last.pt), 0 when it starts from scratch."""
    path = os.path.join(out_dir, LAST_NAME)
    if not os.path.isfile(path):
        return 0
    try:
        # the validated loader; mmap: reads the header and one integer, not the weights and optimizer state
        return int(load_checkpoint(path, mmap=True).get("iter_num", 0))
    except UserError:  # an unreadable last.pt is train.py's to report; here it is only a progress figure
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
        # {"models": {key: {state, settings, summary, ...}}}: another shape is a foreign or damaged file
        if not isinstance(status["models"], dict) or not all(isinstance(e, dict) for e in status["models"].values()):
            raise TypeError("'models' is not a dict of runs")
    except (ValueError, OSError, KeyError, TypeError) as e:
        raise UserError(f"cannot read {path}: {type(e).__name__} {e} (fix: another --compare_dir: the settings "
                         f"its runs trained with are recorded there only)")
    return status


def runs_status(config, runs):
    """load_status, less the runs whose folder holds no checkpoint any more: deleted, as the refusals' fixes say
    ("delete <out_dir> to start it over"), they train again from scratch. A finished one went on being reported
    with its old numbers, and an interrupted one's train time was added to the new run's (hunts)."""
    status = load_status(config)
    for run in runs:
        saved = any(os.path.exists(os.path.join(run.out_dir, name)) for name in (LAST_NAME, CKPT_NAME))
        if run.key in status["models"] and not saved:
            del status["models"][run.key]
    return status


def save_status(config, status):
    status["updated"] = time.strftime("%Y-%m-%d %H:%M:%S")
    with atomic_open(status_path(config), "w") as f:
        json.dump(status, f, indent=1, sort_keys=True)


def jsonable(x):
    return json.loads(json.dumps(x))


def training_settings(run):
    """What decides a run's training: the train.py keys and the resolved model (vocab aside: it comes
    from the dataset, which is a key here)."""
    fields = gpt_config_defaults()   # model keys count through the resolved model_args
    keys = {k: run.config[k] for k in train.DEFAULTS if k not in NOT_TRAINING_KEYS and k not in fields}
    return jsonable({"train": keys, "model_args": {k: v for k, v in run.args.items() if k != "vocab_size"}})


def report_settings(config, run):
    settings = {k: run.config.get(k, config[k]) for k in REPORT_KEYS}
    settings["samples"] = run.first    # only a variant's first seed is sampled
    return jsonable(settings)


def differences(old, new):
    out = []
    for part in ("model_args", "train"):
        a, b = old.get(part, {}), new.get(part, {})
        if part == "model_args":   # a field added since: the old model had its default (the technique off)
            a = {**gpt_config_defaults(), **a}
        # train keys known to both only: a key added to train.py later must not invalidate finished models
        out += [f"{k}: {a[k]!r} -> {b[k]!r}" for k in sorted(set(a) & set(b)) if a[k] != b[k]]
    return out


def check_finished(config, status, runs):
    """A finished run must have been trained with today's settings, else its row would be wrong; an interrupted
    one too, since it resumes."""
    for run in runs:
        entry = status["models"].get(run.key)
        if not entry or "settings" not in entry:
            # status.json is saved with a run's settings before it trains: a run without them lost its record,
            # and was continued under any settings and reported as of them (a hunt)
            if os.path.exists(os.path.join(run.out_dir, LAST_NAME)):
                raise UserError(f"{run.out_dir} holds a run that {status_path(config)} does not record, so the "
                                f"settings it trained with are unknown (fix: delete {run.out_dir} to train it again, "
                                f"or use another --compare_dir)")
            continue
        now = training_settings(run)
        diff = differences(entry["settings"], now)
        model_diff = differences({"model_args": entry["settings"].get("model_args", {})},
                                 {"model_args": now["model_args"]})
        if entry.get("state") == "finished" and diff:
            raise UserError(f"{run.label} in {config['compare_dir']} was trained with other settings "
                             f"({'; '.join(diff[:4])}{'; ...' if len(diff) > 4 else ''}) (fix: use another "
                             f"--compare_dir, or the old values)")
        if model_diff and os.path.exists(os.path.join(run.out_dir, LAST_NAME)):
            raise UserError(f"{run.label} in {config['compare_dir']} was started with another model "
                             f"({'; '.join(model_diff[:4])}) (fix: use another --compare_dir, or delete "
                             f"{run.out_dir} to start it over)")
        if diff and os.path.exists(os.path.join(run.out_dir, LAST_NAME)):
            # an interrupted run resumes from its last.pt: other values now would mix two recipes in one run
            # (its log, and results.md that reports the new values for all of it)
            raise UserError(f"{run.label} in {config['compare_dir']} was interrupted after training with other "
                             f"settings ({'; '.join(diff[:4])}{'; ...' if len(diff) > 4 else ''}) (fix: resume it "
                             f"with the old values, use another --compare_dir, or delete {run.out_dir} to start it "
                             f"over)")


# -----------------------------------------------------------------------------------------------
# progress

def format_eta(seconds):
    return "?" if seconds is None else format_duration(seconds)


class Progress:
    """train.py callback printing an overall ETA over all runs. Seconds per iteration are measured on
    the run being trained (evaluations included) and carried over to the other runs in proportion
    to their training FLOPs per iteration, so a model with 4x the FLOPs is expected to take 4x as long."""

    def __init__(self, runs, cost, remaining, print_every_s=60.0):
        self.runs = runs
        self.cost, self.remaining = cost, dict(remaining)   # by run key
        self.print_every_s = print_every_s
        self.rate = None   # seconds per training FLOP
        self.index = self.current = None

    def start(self, index, run, iter_num):
        self.index, self.current = index, run
        self.t0, self.start_iter, self.last_print = time.time(), iter_num, time.time()

    def finish(self, run):
        self.remaining[run.key] = 0

    def eta(self):
        if self.rate is None:
            return None
        return sum(self.remaining[r.key] * self.cost[r.key] * self.rate for r in self.runs)

    def line(self, it):
        return (f"[compare {self.index}/{len(self.runs)} {self.current.label}] iteration {it}/"
                f"{self.current.config['max_iters']}; all runs: ETA {format_eta(self.eta())}")

    def __call__(self, event, info):
        if info.get("rank", 0) != 0 or event == "end":
            return
        it, run = info["iter_num"], self.current
        now = time.time()
        self.remaining[run.key] = max(0, run.config["max_iters"] - it)
        if it > self.start_iter:
            self.rate = (now - self.t0) / (it - self.start_iter) / self.cost[run.key]
        if event == "eval" or now - self.last_print >= self.print_every_s:
            print(self.line(it), flush=True)
            self.last_print = now


# -----------------------------------------------------------------------------------------------
# training one run

def dataset_name(config):
    """The dataset the runs train on, as the reports name it: --data_dir's meta.json names it, as train.py takes it
    (the config's dataset named shakespeare_char for any --data_dir; a hunt), else its folder."""
    if not config["data_dir"]:
        return config["dataset"]
    try:
        return load_meta(config["data_dir"]).get("dataset") or config["data_dir"]
    except UserError:   # not prepared yet
        return config["data_dir"]


def datasets_of(config, runs):
    """What a figure's title names: the runs' dataset, or each when they differ (a tokenizer ablation's figures were
    titled with the config's one dataset; a hunt)."""
    names = list(dict.fromkeys(dataset_name(run.config) for run in runs)) or [dataset_name(config)]
    return names[0] if len(names) == 1 else f"{len(names)} datasets ({', '.join(names)})"


def prepare_with_a_tool(config):
    """Prepare a run's dataset with its tool (shakespeare_vK, wikitext103, wikitext103_vK: text_dataset.tool_command)
    when its folder is not complete yet. train.py prepares the tinyshakespeare datasets itself and only points to
    the tool for these."""
    dataset, data_dir = config["dataset"], default_data_dir(config)
    if tool_command(dataset) is None or dataset_vocab_size(config) is not None:   # meta.json: a complete folder
        return
    print(f"dataset '{dataset}' is not prepared in {data_dir}: running {tool_command(dataset)}", flush=True)
    from tools import wikitext103
    from tools.pangu import compact_vocab
    tool = wikitext103 if dataset.startswith("wikitext103") else compact_vocab
    try:
        tool.prepare(dataset, out_dir=data_dir)
    except UserError as e:
        raise UserError(f"preparing dataset '{dataset}' failed: {e}") from None


def train_model(run, progress):
    resume = os.path.isfile(os.path.join(run.out_dir, LAST_NAME))
    tcfg = dict(run.config, out_dir=run.out_dir, init_from="resume" if resume else run.config["init_from"])
    texplicit = run.explicit | {"variant", "out_dir", "init_from"}
    try:
        prepare_with_a_tool(tcfg)
        return train.train(tcfg, texplicit, callback=progress)
    except UserError as e:
        raise UserError(f"{run.label}: {e}")
    except (MemoryError, RuntimeError) as e:   # a GPU's, or a CPU allocation that failed (a traceback before)
        if not out_of_memory(e):
            raise
        raise UserError(f"{run.label}: out of memory (fix: lower --batch_size and raise "
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
    rows = plots.residual_alphas(model)
    stack = model.branches[0]
    pairs = [(a, m) for a, m, _ in layer_sets(stack)]
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
                # n_tokens: the tokenizer's ids only, not a padded vocab_size's (as sample.py; a hunt)
                y = model.generate(x, config["sample_tokens"], temperature=config["sample_temperature"],
                                   top_k=top_k, generator=gen, n_tokens=tok.vocab_size)
            out.append(dict(prompt=prompt, text=render(tok, prompt, ids, y[0].tolist())))
    return out


def bench_model(args, config, device, dtype):
    """bench.py's training-step measurement (tools/benchmarks/measure.py) on a fresh model of the same shape (random
    tokens, batch batch_size x block_size): median ms of bench_iters steps after BENCH_WARMUP, and peak memory."""
    if config["bench_iters"] <= 0:
        return {}
    from model import GPT, GPTConfig
    torch.manual_seed(config["seed"])
    model = GPT(GPTConfig(**args)).to(device)
    cfg = dict(seed=config["seed"], compile=config["compile"], optimizer_step=True, warmup=BENCH_WARMUP,
               repeats=config["bench_iters"], max_step_seconds=float("inf"))
    try:
        r = bench_train(model, cfg, device, dtype, args["block_size"], config["batch_size"], True)
        return dict(bench_ms=r["train_ms"], bench_tok_s=r["train_tok_s"], peak_bytes=r.get("train_peak_bytes"))
    except torch.OutOfMemoryError:
        return dict(bench_note="out of memory")
    finally:
        del model
        if device.startswith("cuda"):
            torch.cuda.empty_cache()


def measure(config, run, device, dtype):
    """Everything results.md / samples.md / the figures need from a trained run (its ckpt.pt). Samples
    only for a variant's first seed (samples.md shows one model per variant)."""
    cfg = {**config, **run.config}   # the run's seed, batch size, ...
    model, ckpt = load_model(run.out_dir, device)
    rep = dict(ckpt=os.path.relpath(ckpt["path"], config["compare_dir"]), ckpt_iter=int(ckpt.get("iter_num", 0)),
               params=model.get_num_params(non_embedding=False), weights_fp32_bytes=fp32_weights_bytes(model),
               ckpt_bytes=os.path.getsize(ckpt["path"]))
    if getattr(model.config, "enhanced_residual", False):
        rep["alphas"] = unique_alphas(model)
    if model.config.n_branches > 1:
        rep["branch_weights"] = [float(w) for w in model.branch_weights().tolist()]
        rep["heaviest_branch"] = model.heaviest_branch()
        model.keep_branch = rep["heaviest_branch"]   # paper 004 samples pgpt with one branch
    if run.first and cfg["prompts"] and cfg["sample_tokens"] > 0:
        rep["samples"] = generate_samples(model, ckpt, cfg, device, dtype)
    args = dict(ckpt["model_args"])
    del model, ckpt
    rep.update(bench_model(args, cfg, device, dtype))
    return rep


# -----------------------------------------------------------------------------------------------
# equal compute, seed statistics, noise

def tokens_per_iter(cfg, block_size):
    """Tokens of one training iteration (compare.py runs in one process: no DDP ranks)."""
    return cfg["batch_size"] * cfg["gradient_accumulation_steps"] * block_size


def aggregate(rows):
    """One row per variant from its per-seed rows: the mean of each SEED_METRICS column and its standard
    deviation as <column>_std; the other columns (sizes, FLOPs, ...) from the first seed."""
    out = []
    for name in dict.fromkeys(r["name"] for r in rows):
        group = [r for r in rows if r["name"] == name]
        agg = {k: v for k, v in group[0].items() if k != "seed"}
        agg.update(n_seeds=len(group), seeds=" ".join(str(r["seed"]) for r in group))
        for key in SEED_METRICS:
            agg[key], agg[key + "_std"] = mean_std([r[key] for r in group])
        out.append(agg)
    return out


def verdict_text(rows, i, key):
    if i == 0:
        return "(reference)"
    if rows[i].get("dataset") != rows[0].get("dataset"):   # per token of another tokenizer or text (a hunt)
        return "n/a (another dataset)"
    if key == "val_loss_equal_compute" and (started_trained(rows[0]) or started_trained(rows[i])):
        return "n/a (starts trained)"   # the training that made its starting point is not counted (a hunt)
    v = noise_verdict(rows[0], rows[i], key)
    return "n/a" if v is None else f"{v[0]} ({v[1]:+.4f})"


def started_trained(row):
    """Whether the run started from a trained checkpoint (a custom variant's init_from)."""
    return row.get("init_from", "scratch") != "scratch"


# -----------------------------------------------------------------------------------------------
# results.md / results.csv / samples.md / figures

def fmt(v, spec):
    return "n/a" if v is None else format(v, spec)


def fmt_si(v):
    """12345678 -> '12.3M' (FLOPs)."""
    for scale, unit in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= scale:
            return f"{v / scale:.3g}{unit}"
    return f"{v:.3g}"


def fmt_iter(it):
    """A fractional iteration: whole above 10, two digits below."""
    return f"{it:,.0f}" if it >= 10 else f"{it:.2g}"


def cell(row, key, spec, seeds):
    """A table cell; with seeds, a SEED_METRICS column is 'mean ± std'. spec: a format spec or a function."""
    text = (lambda v: "n/a" if v is None else (spec(v) if callable(spec) else format(v, spec)))
    if seeds and key in SEED_METRICS and row.get(key) is not None:
        return f"{text(row[key])} ± {text(row.get(key + '_std'))}"
    return text(row.get(key))


def best_eval(log):
    """The eval row with the lowest val loss after iteration 0 (the state saved as ckpt.pt, its best_val_loss:
    train.py neither saves nor counts iteration 0's); iteration 0's only in a run of no other. An untrained
    iteration 0 lower than every later one was named as the best (a hunt)."""
    rows = [r for r in log["eval"] if r["val_loss"] is not None]
    rows = [r for r in rows if r["iter"] > 0] or rows
    return min(rows, key=lambda r: r["val_loss"]) if rows else {}


def run_row(run, entry, log):
    s, r = entry["summary"], entry["report"]
    best = best_eval(log)
    bench_ok = "bench_ms" in r
    bvl = s.get("best_val_loss")
    flops = model_info(s["model_args"])[1]
    per_iter = flops * tokens_per_iter(run.config, s["model_args"]["block_size"])
    return dict(
        name=run.name, params=r["params"], params_m=r["params"] / 1e6,
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
        block_size=s["model_args"]["block_size"], dropout=s["model_args"]["dropout"], **own_settings(run.config),
        flops_per_token=flops, flops_per_iter=per_iter, train_flops=per_iter * s["iter_num"],
        seed=run.seed, init_from=run.config["init_from"],
    )


def result_rows(runs, status, logs):
    """(per-run rows, equal-compute budget, the cheapest run's row) of the finished and measured runs."""
    done = [run for run in runs if status["models"].get(run.key, {}).get("state") == "finished"
            and "report" in status["models"][run.key]]
    rows = [run_row(run, status["models"][run.key], logs[run.key]) for run in done]
    if not rows:
        return rows, None, None
    curves = [[(e["iter"], e["val_loss"]) for e in logs[run.key]["eval"]] for run in done]
    budget, cheapest = add_equal_compute(rows, curves)
    return rows, budget, cheapest


def md_table(header, body, left=1):
    """A markdown table; the first `left` columns (names) left-aligned, the numbers right-aligned."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" if i < left else "---:" for i in range(len(header))) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in body]
    return "\n".join(lines)


# the run settings results.md states, each run's own (a custom variant's batch, a preset's block_size; its lr,
# schedule and dataset were stated as the config's for every model: hunts)
OWN_SETTINGS = ("max_iters", "batch_size", "gradient_accumulation_steps", "eval_interval", "eval_iters",
                "learning_rate", "warmup_iters", "min_lr", "lr_decay_iters", "weight_decay")


def own_settings(run_config):
    """One run's OWN_SETTINGS, its schedule filled as train.py fills it, and its dataset."""
    settings = dict(run_config)
    train.fill_schedule(settings)
    return dict({k: settings[k] for k in OWN_SETTINGS}, dataset=dataset_name(run_config))


def each(rows, key):
    """A setting as results.md states it: its value when every model used the same, else each model's, as
    "(gpt: 256; tiny: 16)". It stated the config's for all: 1024 tokens where the presets used 256, a custom
    variant's own batches and evaluations as the others' (a hunt)."""
    values = {r["name"]: format(r[key], "g") if isinstance(r[key], float) else r[key] for r in rows}
    if len(set(values.values())) == 1:
        return str(next(iter(values.values())))
    return "(" + "; ".join(f"{name}: {value}" for name, value in values.items()) + ")"


def setup_line(config, rows, device, dtype):
    seeds = config["seeds"]
    accum = each(rows, "gradient_accumulation_steps")
    line = (f"Dataset `{each(rows, 'dataset')}`; every model: {each(rows, 'max_iters')} iterations of "
            f"{each(rows, 'batch_size')} x {each(rows, 'block_size')} tokens"
            + (f" x {accum} accumulation steps" if accum != "1" else "")
            + f", AdamW lr {each(rows, 'learning_rate')} (warmup {each(rows, 'warmup_iters')}, cosine to "
            f"{each(rows, 'min_lr')} at iteration {each(rows, 'lr_decay_iters')}), "
            f"weight decay {each(rows, 'weight_decay')}, dropout {each(rows, 'dropout')}, "
            + (f"seeds {', '.join(map(str, seeds))}" if seeds else f"seed {config['seed']}") + "; "
            f"evaluation every {each(rows, 'eval_interval')} iterations on {each(rows, 'eval_iters')} fixed "
            f"batches; device {device}, dtype {dtype}, torch {torch.__version__}.")
    custom = {n: k for n, k in config["custom_variants"].items() if n in config["variants"]}
    if custom:
        line += " Custom variants (these keys for that model only): " + "; ".join(
            custom_text(name, keys) for name, keys in custom.items()) + "."
    return line


def custom_text(name, keys):
    """'none = efficio', 'bs12 = gpt with max_iters=1600, ...': a custom variant as results.md names it (one with no
    keys of its own read "none = efficio with ;")."""
    own = ", ".join(f"{key}={value!r}" for key, value in keys.items() if key != "variant")
    return f"{name} = {keys.get('variant', name)}" + (f" with {own}" if own else "")


def seeds_note(config, rows):
    seeds = config["seeds"]
    return (f"**Seeds.** Every variant was trained once per seed ({', '.join(map(str, seeds))}). The seed sets the "
            f"initial weights, the training batches, the dropout masks and the fixed evaluation batches (train.py "
            f"draws all of them from it), so within one seed every model sees the same data. Numbers are **mean ± "
            f"std over {len(seeds)} seeds** (sample standard deviation, n-1); every run: results_per_seed.csv. "
            f"\"vs {rows[0]['name']}\": **better** or **worse** when Welch's statistic |mean difference| / "
            f"sqrt(std_a²/n_a + std_b²/n_b) exceeds {NOISE_T:g} (about two standard errors of the difference), "
            f"otherwise **within noise**; the signed number is the difference of the means (negative: lower loss)"
            + (f"; **n/a (another dataset)** for a model trained on another dataset than {rows[0]['name']}: a loss "
               f"per token of another tokenizer or text is not comparable (bits per byte are: `python -m tools.eval`)"
               if any(r.get("dataset") != rows[0].get("dataset") for r in rows) else "") + ".")


def write_csv(path, rows):
    with atomic_open(path, "w") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["name"], lineterminator="\n")
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})   # None: an empty cell


def equal_compute_lines(config, rows, budget, cheapest, seeds):
    ref = rows[0]
    header = ["Name", "Train FLOPs/token", f"x {ref['name']}", "Train FLOPs, full run", "Iteration at equal compute",
              "Val loss at equal compute"] + ([f"vs {ref['name']}"] if seeds else []) + ["Train time, full run"]
    body = [[r["name"], fmt_si(r["flops_per_token"]), f"{r['flops_per_token'] / ref['flops_per_token']:.2f}x",
             fmt_si(r["train_flops"]), f"{fmt_iter(r['equal_compute_iter'])} of {r['iters']}",
             cell(r, "val_loss_equal_compute", ".4f", seeds)]
            + ([verdict_text(rows, i, "val_loss_equal_compute")] if seeds else [])
            + [cell(r, "train_time_s", format_eta, seeds)] for i, r in enumerate(rows)]
    return ["## Equal compute", "", md_table(header, body), "",
            "- **Train FLOPs/token**: `flops_per_token(model)` (tools/flops.py), forward + backward: 6 per weight per "
            "token plus the attention scores and values, counting every application of a shared layer, every Deep Thinking "
            "pass and both pgpt branches. Evaluations are not counted.",
            f"- **Val loss at equal compute**: the budget is the cheapest full run, {cheapest['name']}'s "
            f"{fmt_si(budget)} FLOPs ({cheapest['iters']} iterations). Every model's val loss when its own training "
            f"had spent that many FLOPs, read off its eval curve (an evaluation every {each(rows, 'eval_interval')} "
            f"iterations) by linear interpolation between the two evaluations around that iteration; n/a when the "
            f"first evaluation after iteration 0 comes later. Every model ran the learning-rate schedule of its full "
            f"run, so a costlier model is read mid-schedule, before its learning rate has decayed: this view favours "
            f"the cheaper models a little (a schedule that ends at the budget would do better)."
            + (" A model started from a trained checkpoint (its init_from) has only its own training counted, not "
               "the training that made its starting point: it is not compared here (n/a (starts trained))."
               if any(started_trained(r) for r in rows) else ""),
            "- **Train time**: wall time of the whole run, evaluations included; noisy on a shared machine.", ""]


def write_results(config, rows, per_run, budget, cheapest, figures, samples):
    d = config["compare_dir"]
    seeds = config["seeds"]
    device = resolve_device(config["device"])
    dtype = resolve_dtype(config["dtype"], device)
    table1 = md_table(
        ["Name", "Params (M)", "Size (MB), fp32 weights", "ms/iter", "tokens/s", "Peak memory (MB)",
         "Best val loss", "Val loss, weaker branch dropped"] + ([f"Best val loss vs {rows[0]['name']}"] if seeds else []),
        [[r["name"], f"{r['params_m']:.2f}", f"{r['size_mb_fp32_weights']:.2f}", cell(r, "ms_per_iter", ".1f", seeds),
          cell(r, "tokens_per_s", ",.0f", seeds), cell(r, "peak_memory_mb", ".1f", seeds),
          cell(r, "best_val_loss", ".4f", seeds), cell(r, "val_loss_weaker_branch_dropped", ".4f", seeds)]
         + ([verdict_text(rows, i, "best_val_loss")] if seeds else []) for i, r in enumerate(rows)])
    training = md_table(
        ["Name", "Model", "Iterations", "Train time", "Loop ms/iter", "Final train loss", "Best val ppl",
         "Best at iter", "ckpt.pt (MB)"],
        [[r["name"], r["model"], r["iters"], cell(r, "train_time_s", format_eta, seeds),
          cell(r, "train_ms_per_iter", ".1f", seeds), cell(r, "final_train_loss", ".4f", seeds),
          cell(r, "best_val_ppl", ".2f", seeds), cell(r, "best_iter", ".0f", seeds), f"{r['ckpt_mb']:.2f}"]
         for r in rows], left=2)
    timing = {r["timing"] for r in rows}
    if timing == {"bench"}:
        timing_note = (f"one training step (forward + backward + AdamW update) of {each(rows, 'batch_size')} x "
                       f"{each(rows, 'block_size')} random tokens on a fresh model, median of {config['bench_iters']} "
                       f"steps after {BENCH_WARMUP} warm-up (`tools/benchmarks/measure.py`'s `bench_train`, run right after that model "
                       f"trained). Peak memory: the highest total of live tensors during such a step (weights, "
                       f"gradients, AdamW state, activations; CUDA: max_memory_allocated, CPU: tensor allocations "
                       f"recorded by the profiler)")
        if each(rows, "gradient_accumulation_steps") != "1":
            timing_note += f"; one training iteration is {each(rows, 'gradient_accumulation_steps')} such steps"
    else:
        timing_note = ("the training loop's median over its log windows (evaluations excluded); bench_iters=0, "
                       "so no peak memory")
    pgpt = [r for r in rows if r["heaviest_branch"] is not None]
    lines = [f"# Model comparison: {', '.join(r['name'] for r in rows)}", "", setup_line(config, rows, device, dtype),
             ""]
    if seeds:
        lines += [seeds_note(config, rows), ""]
    lines += ["Layout of paper 004's Table 1, from our own runs.", "", table1, "",
              "- **Params**: every parameter, a shared layer counted once (`get_num_params(non_embedding=False)`).",
              "- **Size**: bytes of `torch.save(state_dict)` of the best checkpoint's weights in fp32: the model "
              "weights only, no optimizer state. The ckpt.pt files, which also hold the two AdamW moments per "
              "weight (about 12 bytes per parameter), are listed below; paper 004's sizes (129.3 MB for 10.7M "
              "parameters) match such full checkpoints, not the weights alone.",
              f"- **ms/iter, tokens/s**: {timing_note}. Timings on a shared machine are noisy.",
              f"- **Best val loss**: mean cross-entropy over {each(rows, 'eval_iters')} fixed validation batches, the "
              f"lowest over the evaluations after iteration 0 (the ckpt.pt state)."]
    if pgpt:
        lines.append("- **Val loss, weaker branch dropped**: pgpt at that same checkpoint with only its heaviest "
                     "branch running (paper 004's inference): " + "; ".join(
                         f"{r['name']} keeps branch {r['heaviest_branch']} (weights {r['branch_weights']}"
                         + (", first seed" if seeds else "") + ")" for r in pgpt) + ". n/a for single-branch models.")
    lines += [""] + equal_compute_lines(config, rows, budget, cheapest, seeds)
    lines += ["## Training", "", training, "",
              "Loop ms/iter: the training loop's own median (data loading included, evaluations excluded). "
              "Best val ppl = exp(best val loss), per token of the dataset's tokenizer.", ""]
    titles = {"loss_curves.png": "Loss curves (paper 004 Figure 6)",
              "loss_vs_compute.png": "Val loss against training compute",
              "branch_weights.png": "pgpt branch weights during training",
              "alphas.png": "Enhanced-residual alphas per layer (paper 000 Figure 7)"}
    for fig in figures:
        lines += [f"## {titles.get(fig, fig)}", "", f"![{fig}]({fig})", ""]
    if samples:   # none without prompts
        lines += ["Samples: [samples.md](samples.md).", ""]
    with atomic_open(os.path.join(d, "results.md"), "w") as f:
        f.write("\n".join(lines))
    if seeds:
        for i, r in enumerate(rows):
            for key in ("best_val_loss", "val_loss_equal_compute"):
                r[f"{key}_vs_first"] = verdict_text(rows, i, key)
        write_csv(os.path.join(d, "results_per_seed.csv"), per_run)
    write_csv(os.path.join(d, "results.csv"), rows)


def write_samples(config, status, runs):
    firsts = [run for run in runs if run.first and "samples" in status["models"].get(run.key, {}).get("report", {})]
    if not firsts:
        return None
    reports = {run.key: status["models"][run.key]["report"] for run in firsts}
    top_k = f"top-k {config['sample_top_k']}" if config["sample_top_k"] else "no top-k"
    lines = ["# Samples", "",
             f"Temperature {config['sample_temperature']:g}, {config['sample_tokens']} new tokens, {top_k}, "
             f"seed {firsts[0].seed}; {config['samples_per_prompt']} sample(s) per prompt from each model's ckpt.pt "
             f"(the best validation loss; its iteration is given after the model's name)"
             + (", the run of each model's first seed." if config["seeds"] else ".")]
    for run in firsts:
        rep = reports[run.key]
        if "heaviest_branch" in rep:
            w = ", ".join(f"{x:.3f}" for x in rep["branch_weights"])
            lines.append(f"{run.name} is sampled with only its heaviest branch (branch {rep['heaviest_branch']}, "
                         f"weights {w}), the weaker one dropped, as paper 004 does.")
    for prompt in config["prompts"]:
        lines += ["", f"## Prompt {prompt!r}"]
        for run in firsts:
            rep = reports[run.key]
            for k, s in enumerate(x for x in rep["samples"] if x["prompt"] == prompt):
                label = f"{run.label} (iter {rep['ckpt_iter']})" + (f", sample {k + 1}" if config["samples_per_prompt"] > 1 else "")
                lines += ["", f"### {label}", ""]
                if "error" in s:
                    lines.append(f"(no sample: {s['error']})")
                else:
                    lines += ["````text", s["text"], "````"]
    path = os.path.join(config["compare_dir"], "samples.md")
    with atomic_open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


def write_figures(config, status, runs, logs, per_run, budget):
    """The figures from the finished runs: with seeds, loss curves show every seed faintly and the mean;
    the branch-weight and alpha figures show each variant's first seed."""
    d = config["compare_dir"]
    done = [run for run in runs if status["models"].get(run.key, {}).get("state") == "finished"]
    names = list(dict.fromkeys(run.name for run in done))
    if config["seeds"]:
        curves = {n: [logs[run.key] for run in done if run.name == n] for n in names}
    else:
        curves = {run.name: logs[run.key] for run in done}
    firsts = [run for run in done if run.first]
    on = datasets_of(config, done)
    written = []
    if plots.plot_loss_curves(curves, os.path.join(d, "loss_curves.png"), title=f"Loss comparison on {on}"):
        written.append("loss_curves.png")
    flops_per_iter = {r["name"]: r["flops_per_iter"] for r in per_run}
    if flops_per_iter and plots.plot_loss_vs_compute({n: c for n, c in curves.items() if n in flops_per_iter},
                                                     flops_per_iter, os.path.join(d, "loss_vs_compute.png"),
                                                     budget=budget,
                                                     title=f"Val loss against training compute on {on}"):
        written.append("loss_vs_compute.png")
    if plots.plot_branch_weights({run.name: logs[run.key] for run in firsts}, os.path.join(d, "branch_weights.png")):
        written.append("branch_weights.png")
    alphas = {run.name: status["models"][run.key].get("report", {}).get("alphas") for run in firsts}
    if plots.plot_alphas(alphas, os.path.join(d, "alphas.png")):
        written.append("alphas.png")
    return written


def write_report(config, status, runs):
    logs = {run.key: read_log(run.out_dir) for run in runs}
    per_run, budget, cheapest = result_rows(runs, status, logs)
    rows = aggregate(per_run) if config["seeds"] else per_run
    figures = write_figures(config, status, runs, logs, per_run, budget)
    samples = write_samples(config, status, runs)
    if rows:
        write_results(config, rows, per_run, budget, cheapest, figures, samples)
    # outputs of an earlier run that this one has nothing for (e.g. no pgpt in the list any more)
    stale = {"loss_curves.png", "loss_vs_compute.png", "branch_weights.png", "alphas.png", "samples.md",
             "results_per_seed.csv"} - set(figures)
    if samples:
        stale.discard("samples.md")
    if config["seeds"] and rows:
        stale.discard("results_per_seed.csv")
    for name in stale:
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(config["compare_dir"], name))
    return rows, figures


# -----------------------------------------------------------------------------------------------
# main

def equal_compute_plan(runs, infos):
    """{variant: (iteration at the equal-compute budget, evaluations at or before it)} from the plan, and
    the name of the cheapest variant: what the equal-compute column will be read from."""
    firsts = [run for run in runs if run.first]
    cost = {run.name: run.cost_per_iter(infos[run.name][1]) * run.config["max_iters"] for run in firsts}
    cheapest = min(cost, key=cost.get)
    out = {}
    for run in firsts:
        it = cost[cheapest] / (cost[run.name] / run.config["max_iters"])
        out[run.name] = (it, int(it // run.config["eval_interval"]))
    return out, cheapest


def print_plan(config, status, runs, infos):
    firsts = [run for run in runs if run.first]
    n_seeds = len(config["seeds"] or [None])
    iters = {run.config["max_iters"] for run in firsts}
    print(f"compare: {len(firsts)} models on {dataset_name(config)}, "
          + (f"{config['max_iters']} iterations each" if iters == {config["max_iters"]} else "iterations per model below")
          + (f", {n_seeds} seeds each ({len(runs)} runs)" if config["seeds"] else "")
          + f" -> {config['compare_dir']}", flush=True)
    unprepared = sorted({run.config["dataset"] for run in firsts if dataset_vocab_size(run.config) is None})
    if unprepared:
        print(f"  ({', '.join(unprepared)} not prepared yet: sizes and FLOPs below use the presets' vocabulary; "
              f"training prepares the data and uses its own)", flush=True)
    ref = firsts[0].cost_per_iter(infos[firsts[0].name][1])
    equal, cheapest = equal_compute_plan(runs, infos)
    for i, first in enumerate(firsts, 1):
        params, flops = infos[first.name]
        states = []
        for run in (r for r in runs if r.name == first.name):
            if status["models"].get(run.key, {}).get("state") == "finished":
                state = "finished"
            elif os.path.isfile(os.path.join(run.out_dir, LAST_NAME)):
                state = f"resumes at iteration {resume_iter(run.out_dir)}"
            else:
                state = "to train"
            states.append(state if not config["seeds"] else f"seed {run.seed} {state}")
        it, n_evals = equal[first.name]
        own_iters = "" if iters == {config["max_iters"]} else f"{first.config['max_iters']} iterations, "
        print(f"  [{i}/{len(firsts)}] {first.name}: {own_iters}{params / 1e6:.2f}M params, "
              f"{first.cost_per_iter(flops) / ref:.2f}x the training FLOPs per iteration of {firsts[0].name}, "
              f"{describe(first.args)}; equal compute ({cheapest}'s full run) at iteration {fmt_iter(it)}; "
              f"{', '.join(states)}", flush=True)
        if n_evals < 3:
            print(f"  note: {first.name} spends {cheapest}'s budget by iteration {fmt_iter(it)}, with {n_evals} evaluation(s) "
                  f"before it: its equal-compute loss will be coarse or n/a (fix: a smaller --eval_interval)", flush=True)


def check_run_settings(runs, dry_run):
    """Every run's training values, as train.py checks them, and at least one iteration (the equal-compute plan
    divides by it), also for --dry_run: it printed a plan for values the run refuses, or a ZeroDivisionError
    traceback (a hunt). A dry run's init_from may be a checkpoint an earlier stage writes (the pangu ablations).
    A dataset that is neither prepared nor one that train.py or a tool prepares: refused here, not when its run
    begins, after compare_dir and status.json were written (a hunt)."""
    for run in runs:
        settings = dict(train.DEFAULTS, **run.config)
        if dry_run:
            settings["init_from"] = "scratch"
        try:
            check_settings(settings)
            dataset = settings["dataset"]
            if not is_prepared(default_data_dir(settings)) and tool_command(dataset) is None:
                dataset_and_tokenizer(dataset, "", "", 0.1, train.prepare.DATASETS, None)   # unknown: one line
        except UserError as e:
            raise UserError(f"{run.label}: {e}") from None
        if run.config["max_iters"] < 1:
            raise UserError(f"{run.label}: max_iters={run.config['max_iters']}: a comparison trains every model "
                            f"(fix: --max_iters=1 or more)")


def check_runs(config, status, runs):
    """compare_dir and the last.pt each run resumes from, before anything is written."""
    check_out_dir(config["compare_dir"], key="compare_dir")
    for run in runs:
        try:
            if status["models"].get(run.key, {}).get("state") != "finished" and \
                    os.path.isfile(os.path.join(run.out_dir, LAST_NAME)):
                # read lazily (mmap): a damaged file, or one whose pickle would run code, is refused here, not after
                # status.json already says the run is running
                load_checkpoint(run.out_dir, prefer=(LAST_NAME,), mmap=True)
        except UserError as e:
            raise UserError(f"{run.label}: {e}") from None


def run(config, explicit):
    runs = plan(config, explicit)
    infos = {run.name: model_info(run.args) for run in runs if run.first}
    status = runs_status(config, runs)
    check_finished(config, status, runs)
    check_run_settings(runs, config["dry_run"])   # before the plan is printed: bad input is one line
    if not config["dry_run"]:
        check_runs(config, status, runs)
    print_plan(config, status, runs, infos)
    if config["dry_run"]:
        return None
    # one writer per compare_dir: a second compare.py would train the same runs over this one's
    with lock_dir(config["compare_dir"], key="compare_dir"):
        status = runs_status(config, runs)   # again: another compare.py may have changed it meanwhile
        check_finished(config, status, runs)
        return train_and_report(config, runs, infos, status)


def train_and_report(config, runs, infos, status):
    """run()'s work once every input is checked and compare_dir is locked: train, measure, write the report."""
    os.makedirs(config["compare_dir"], exist_ok=True)
    status["variants"] = config["variants"]
    if config["seeds"]:
        status["seeds"] = config["seeds"]
    remaining = {run.key: 0 if status["models"].get(run.key, {}).get("state") == "finished"
                 else max(0, run.config["max_iters"] - resume_iter(run.out_dir)) for run in runs}
    cost = {run.key: run.cost_per_iter(infos[run.name][1]) for run in runs}
    progress = Progress(runs, cost, remaining)
    device = str(resolve_device(config["device"]))
    dtype = getattr(torch, resolve_dtype(config["dtype"], device))
    if config["compile"]:
        check_cpu_compiler(device)

    for i, run_ in enumerate(runs, 1):
        entry = status["models"].setdefault(run_.key, {})
        if entry.get("state") == "finished":
            print(f"=== [{i}/{len(runs)}] {run_.label}: finished earlier (best val loss "
                  f"{entry['summary']['best_val_loss']:.4f}), skipped ===", flush=True)
        else:
            start = resume_iter(run_.out_dir)
            begin = "from scratch"
            if run_.config["init_from"] != "scratch":
                begin = f"from {run_.config['init_from']}"
            print(f"\n=== [{i}/{len(runs)}] {run_.label}: {infos[run_.name][0] / 1e6:.2f}M params, "
                  f"{describe(run_.args)}; " + (f"resuming at iteration {start}" if start else begin)
                  + f" -> {run_.out_dir}; all runs: ETA {format_eta(progress.eta())} ===", flush=True)
            entry.update(state="running", settings=training_settings(run_))
            entry.pop("report", None)
            save_status(config, status)
            progress.start(i, run_, start)
            summary = train_model(run_, progress)
            summary = {k: v for k, v in summary.items() if k != "evals"}
            # train_time_s covers this session only; earlier sessions of an interrupted run add up
            summary["train_time_total_s"] = summary["train_time_s"] + entry.pop("train_time_before_s", 0.0)
            if summary["interrupted"]:
                entry.update(state="interrupted", summary=jsonable(summary),
                             train_time_before_s=summary["train_time_total_s"])
                save_status(config, status)
                print(f"\ncompare: stopped during {run_.label} (iteration {summary['iter_num']}); run the same "
                      f"command again to resume it", flush=True)
                raise SystemExit(130)
            entry.update(state="finished", summary=jsonable(summary))
            progress.finish(run_)
            save_status(config, status)
            if device.startswith("cuda"):
                torch.cuda.empty_cache()
        rsettings = report_settings(config, run_)
        if entry.get("report_settings") != rsettings or "report" not in entry:
            sampling = run_.first and config["prompts"] and config["sample_tokens"] > 0
            print(f"[compare {i}/{len(runs)} {run_.label}] measuring: sizes"
                  + (f", {config['bench_iters']} timed steps" if config["bench_iters"] else "")
                  + (f", {len(config['prompts']) * config['samples_per_prompt']} samples" if sampling else ""),
                  flush=True)
            entry.update(report=jsonable(measure(config, run_, device, dtype)), report_settings=rsettings)
            save_status(config, status)

    rows, figures = write_report(config, status, runs)
    d = config["compare_dir"]
    written = (["results.md", "results.csv"] + (["results_per_seed.csv"] if config["seeds"] else [])
               + (["samples.md"] if os.path.exists(os.path.join(d, "samples.md")) else []))
    print(f"\ncompare: done. {', '.join(os.path.join(d, f) for f in written + figures)}")
    seeds = config["seeds"]
    for r in rows:
        print(f"  {r['name']:<20} {r['params_m']:7.2f}M  best val {cell(r, 'best_val_loss', '.4f', seeds)}"
              + (f"  (weaker branch dropped: {cell(r, 'val_loss_weaker_branch_dropped', '.4f', seeds)})"
                 if r["val_loss_weaker_branch_dropped"] is not None else "")
              + f"  at equal compute {cell(r, 'val_loss_equal_compute', '.4f', seeds)}"
              + f"  {cell(r, 'ms_per_iter', '.1f', seeds)} ms/iter")
    return rows


def main(argv=None):
    return run_command(checked_run, defaults(), argv, one_item=ONE_ITEM, with_explicit=True)


def checked_run(config, explicit):
    """run() after the checks of parse(). Ctrl-C outside train.py's own handling (e.g. while sampling) says how
    to continue: finished runs are already recorded."""
    check(config, explicit)
    try:
        return run(config, explicit)
    except KeyboardInterrupt:
        print("\ncompare: interrupted; run the same command again to continue", flush=True)
        raise


if __name__ == "__main__":
    main()
