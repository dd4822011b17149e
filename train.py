"""
Train a GPT variant on a tokenized dataset (nanoGPT-style, single process or DDP).

    python train.py config/gpt_shakespeare_cpu.py                 # the CPU quickstart (about 1 minute)
    python train.py config/lgpt_shakespeare.py                    # paper 004's recipe, for a GPU
    python train.py config/gpt_shakespeare_cpu.py --init_from=resume --max_iters=3000
    torchrun --standalone --nproc_per_node=8 train.py config/gpt_shakespeare.py

Read it top to bottom: the settings (DEFAULTS) and their checks, the model's arguments, the data (get_batch),
the helpers the loop calls (evaluation, checkpoints, the log), then `train`: setup (data, model, optimizer),
prepare_loop (out_dir, compile, DDP, the RNG), run_training (the loop), finish (loss.png, the summary).
Every key of DEFAULTS (and every GPTConfig field, e.g. --n_layer=4) can be set in a config file or on the
command line; `python train.py --help` lists them.

out_dir receives ckpt.pt (best val loss), last.pt (latest, resumable), log.csv (every logged value) and
loss.png. Ctrl-C, or SIGTERM from a cluster scheduler, finishes the current iteration, saves last.pt and
exits; --init_from=resume then continues exactly as if never stopped (same batches, same dropout masks,
same weights). A second Ctrl-C stops at once; caught mid-step, it keeps the last.pt saved before.

Training batches are a function of (seed, iteration, micro-step) only, and evaluation uses the same fixed
batches every time (get_batch), so val losses of different runs are compared on identical data.
train(config) is importable: tools/compare.py calls it in-process and reads the summary dict it returns.
"""

import contextlib
import csv
import dataclasses
import gc
import json
import math
import os
import random
import signal
import sys
import tempfile
import threading
import time
from types import SimpleNamespace

import numpy as np
import torch

from checkpoint import (CKPT_NAME, LAST_NAME, atomic_copy, atomic_open, atomic_save, autocast, build_model, busy_machine,
                        check_finite, check_num_threads, check_out_dir, check_seed, clean_state_dict, load_checkpoint,
                        load_init_checkpoint, load_own_weights, lock_dir, remove_stale_temp_files, resolve_device,
                        resolve_dtype)
from configurator import UserError, load_config, out_of_memory
from dataset import default_data_dir, is_prepared, load_meta, split_path, tokenizer_id
from nanogpt import GPT2_NAMES, WandbLog, ddp_backend, is_hf_source
from model import GPTConfig

TRAIN_DEFAULTS = dict(
    # I/O
    out_dir="out",
    eval_interval=250,
    log_interval=10,
    eval_iters=200,
    eval_only=False,              # evaluate once and exit
    always_save_checkpoint=False,  # write ckpt.pt at every eval, not only when val loss improves
    init_from="scratch",          # 'scratch' | 'resume' (out_dir/last.pt) | a checkpoint file (ours or nanoGPT's;
                                  # weights only) | 'gpt2'..'gpt2-xl' or a Hugging Face folder (imported)
    wandb_log=False,              # nanoGPT's Weights & Biases logging of each eval (pip install wandb)
    wandb_project="compact-gpt",
    wandb_run_name="",            # '' = W&B's own name
    allow_partial_init=False,     # init_from=<path>: also when only some tensors fit (the rest starts fresh)
    cpu_twin="",                  # GPU recipes: the config to run on a CPU instead (named when run on one)
    # data
    dataset="shakespeare_char",
    data_dir="",                  # '' = data/<dataset>
    data_segments="",             # refine.npy (paper 003 data refining): train windows start only there
    gradient_accumulation_steps=1,  # global: divided over DDP ranks
    batch_size=12,                # per micro-step, per rank
    # model
    variant="",                   # variants/<name>.py; explicitly-set model keys still win
    # AdamW
    learning_rate=1e-3,
    max_iters=5000,
    weight_decay=0.1,
    beta1=0.9,
    beta2=0.95,
    grad_clip=1.0,                # 0 disables clipping
    # learning-rate schedule: linear warmup, then cosine decay to min_lr
    decay_lr=True,
    warmup_iters=None,            # None = min(100, lr_decay_iters // 10): a short run gets a short warmup
    lr_decay_iters=None,          # None = max_iters
    min_lr=None,                  # None = learning_rate / 10
    # system
    device="auto",                # 'auto' (cuda > mps > cpu) | 'cpu' | 'cuda' | 'cuda:1' | 'mps'
    dtype="auto",                 # 'auto' (bf16 if supported, else fp16 on cuda; fp32 elsewhere) | float32 | bfloat16 | float16
    compile=False,                # torch.compile the model
    num_threads=0,                # CPU threads for torch; 0 = torch's default (all cores). 1 is much faster
                                  # when other jobs share the cores (busy threads wait on each other)
    seed=1337,
    backend="nccl",               # DDP backend on GPUs: nccl | gloo (CPUs: gloo)
)


def gpt_config_defaults():
    """{field: default} for every GPTConfig field."""
    return {f.name: f.default for f in dataclasses.fields(GPTConfig)}


DEFAULTS = {**TRAIN_DEFAULTS, **{k: v for k, v in gpt_config_defaults().items() if k not in TRAIN_DEFAULTS}}
PROGRESS_EVERY_S = 15   # a long evaluation prints a progress line this often


# --- settings: checks, the model's arguments ---------------------------------------------------------

def check_train_config(c, world=1):
    """train.py's keys: fill the schedule's None defaults and refuse values that make no sense, naming the
    key. world: the number of DDP ranks. Runs before anything is read or written."""
    def need(ok, key, rule, fix):
        if not ok:
            raise UserError(f"{key} must be {rule}, got {c[key]!r} (fix: {fix})")

    def integer(v):
        return isinstance(v, int) and not isinstance(v, bool)

    def number(v):
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)

    for key in ("batch_size", "eval_interval", "log_interval", "eval_iters", "gradient_accumulation_steps"):
        need(integer(c[key]) and c[key] >= 1, key, "an integer >= 1", f"--{key}=1 or more")
    need(integer(c["max_iters"]) and c["max_iters"] >= 0, "max_iters", "an integer >= 0", "--max_iters=0 or more")
    check_num_threads(c["num_threads"])
    check_seed(c["seed"])
    need(number(c["learning_rate"]) and c["learning_rate"] > 0, "learning_rate", "> 0", "--learning_rate=1e-3")
    need(number(c["weight_decay"]) and c["weight_decay"] >= 0, "weight_decay", ">= 0", "--weight_decay=0.1")
    for key, usual in (("beta1", 0.9), ("beta2", 0.95)):
        need(number(c[key]) and 0 <= c[key] < 1, key, "in [0, 1)", f"--{key}={usual}")
    need(number(c["grad_clip"]) and c["grad_clip"] >= 0, "grad_clip", ">= 0 (0 = off)", "--grad_clip=1.0")
    c["lr_decay_iters"] = c["max_iters"] if c["lr_decay_iters"] is None else c["lr_decay_iters"]
    need(number(c["lr_decay_iters"]) and c["lr_decay_iters"] >= 0, "lr_decay_iters", "a number >= 0",
         f"--lr_decay_iters={c['max_iters']}")
    c["min_lr"] = c["learning_rate"] / 10 if c["min_lr"] is None else c["min_lr"]
    need(number(c["min_lr"]) and 0 <= c["min_lr"] <= c["learning_rate"], "min_lr",
         f"in [0, learning_rate={c['learning_rate']:g}]", f"--min_lr={c['learning_rate'] / 10:g}")
    c["warmup_iters"] = min(100, int(c["lr_decay_iters"]) // 10) if c["warmup_iters"] is None else c["warmup_iters"]
    need(integer(c["warmup_iters"]) and 0 <= c["warmup_iters"] <= (c["lr_decay_iters"] if c["decay_lr"] else math.inf),
         "warmup_iters", f"an integer in [0, lr_decay_iters={c['lr_decay_iters']}]",
         f"--warmup_iters={int(c['lr_decay_iters']) // 10}, or leave it out: it defaults to min(100, lr_decay_iters // 10)")
    accum = c["gradient_accumulation_steps"]
    if accum % world:
        raise UserError(f"gradient_accumulation_steps={accum} must be divisible by the {world} DDP ranks; each "
                        f"rank runs gradient_accumulation_steps/{world} micro-steps "
                        f"(fix: --gradient_accumulation_steps={max(world, accum // world * world)})")
    need(c["dataset"] != "", "dataset", "a dataset name", "--dataset=shakespeare_char")
    need(c["out_dir"] != "", "out_dir", "a folder", "--out_dir=out")
    if c["init_from"] not in ("scratch", "resume", *GPT2_NAMES) and not os.path.exists(c["init_from"]):
        raise UserError(f"init_from '{c['init_from']}' does not exist (fix: write it first, e.g. with train.py or "
                        f"pangu.inherit as its config says, or --init_from=scratch)")
    need(c["init_from"] in ("scratch", "resume") or os.path.isfile(c["init_from"]) or is_hf_source(c["init_from"]),
         "init_from", "'scratch', 'resume', a checkpoint file, gpt2* or a Hugging Face folder",
         "--init_from=scratch|resume|path/to/ckpt.pt|gpt2")


def distributed_env():
    """(rank, local_rank, world_size) from torchrun's environment, or None when not launched by it."""
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        return None
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    return rank, int(os.environ.get("LOCAL_RANK", rank)), world


def model_args(config, explicit, base=None, vocab_size=None):
    """GPTConfig keyword arguments: base (default: GPTConfig defaults) <- variant <- explicitly-set keys.
    base lets train.py start from a checkpoint's model_args (init_from=<path>); vocab_size (the dataset's,
    from meta.json) replaces the preset's unless the user set vocab_size."""
    fields = gpt_config_defaults()
    args = dict(fields)
    if base:
        args.update({k: v for k, v in base.items() if k in fields})
    name = config.get("variant", "")
    if name:
        args.update(load_variant(name, fields))
    if vocab_size is not None:
        args["vocab_size"] = vocab_size
    args.update({k: config[k] for k in explicit if k in fields})
    return args


def train_model_args(config, explicit, meta, device, say):
    """train.py's model: (model_args, checkpoint or None) for init_from = scratch | resume | <path>. Refuses
    a checkpoint of another tokenizer, with non-finite weights, or (resume) of another architecture."""
    init_from, ckpt = config["init_from"], None
    if init_from == "scratch":
        args = model_args(config, explicit, vocab_size=meta["vocab_size"])
    elif init_from == "resume":
        out_dir = config["out_dir"]
        if not any(os.path.isfile(os.path.join(out_dir, n)) for n in (LAST_NAME, CKPT_NAME)):
            raise UserError(f"nothing to resume: no {LAST_NAME} or {CKPT_NAME} in '{out_dir}' (fix: pass the "
                            f"out_dir of an earlier run, or start one with --init_from=scratch)")
        ckpt = load_checkpoint(out_dir, device, prefer=(LAST_NAME, CKPT_NAME))
        if ckpt.get("optimizer") is None:
            raise UserError(f"{ckpt['path']} has weights only (e.g. from pangu.inherit), nothing to resume "
                            f"(fix: --init_from={ckpt['path']} to start a new run from it)")
        say(f"resuming from {ckpt['path']} at iteration {ckpt['iter_num']}")
        args = dict(ckpt["model_args"])
        # dropout may change between sessions; anything else changes the architecture. vocab_size came
        # from meta.json, not the variant's preset, unless the user set it
        wanted = model_args(config, explicit, base=args)
        wanted["vocab_size"] = wanted["vocab_size"] if "vocab_size" in explicit else args["vocab_size"]
        for key in sorted(k for k in wanted if k != "dropout" and wanted[k] != args.get(k)):
            raise UserError(f"resume: {key}={wanted[key]!r} differs from the checkpoint's {key}={args.get(key)!r} "
                            f"(fix: drop that override, or start a new run from its weights: --init_from={ckpt['path']} "
                            f"--allow_partial_init=True)")
        args["dropout"] = wanted["dropout"]
    else:
        ckpt = load_init_checkpoint(init_from, device)
        # model_args() keeps only the keys GPTConfig knows: dropping the others would train another model
        unknown = sorted(set(ckpt["model_args"]) - set(gpt_config_defaults()))
        if unknown:
            raise UserError(f"{ckpt['path']} has model_args this model.py does not know: {', '.join(unknown)} (a "
                            f"checkpoint of another code version) (fix: use the code version that wrote it, or "
                            f"--init_from=scratch)")
        args = model_args(config, explicit, base=ckpt["model_args"], vocab_size=meta["vocab_size"])
    if ckpt is not None:   # first: another tokenizer's data also shows up as a vocab_size mismatch below
        check_finite(ckpt["model"], ckpt["path"])
        if ckpt.get("tokenizer_id") not in (None, tokenizer_id(meta)):   # older checkpoints record none
            raise UserError(f"{ckpt['path']} was trained with another tokenizer than {config['data_dir']}'s (its "
                            f"dataset: {ckpt.get('dataset')}) (fix: --dataset/--data_dir of that run, or --init_from=scratch)")
    if args["vocab_size"] < meta["vocab_size"]:
        raise UserError(f"vocab_size {args['vocab_size']} is smaller than the dataset's {meta['vocab_size']} tokens "
                        f"(fix: drop --vocab_size, it is read from meta.json)")
    return args, ckpt

def load_variant(name, fields=None):
    """variants.load(name) as a dict of GPTConfig fields, with one-line errors."""
    import variants
    names = variants.available()
    listing = ", ".join(names) if names else "none found"
    if name not in names:
        raise UserError(f"unknown variant '{name}' (fix: use one of: {listing})")
    try:
        cfg = dict(variants.load(name))
    except (KeyError, ValueError, ImportError) as e:
        raise UserError(f"unknown variant '{name}': {e} (fix: use one of: {listing})") from None
    if fields is None:
        fields = gpt_config_defaults()
    bad = sorted(k for k in cfg if k not in fields)
    if bad:
        raise UserError(f"variant '{name}' sets unknown model keys {bad} (fix: edit variants/{name}.py)")
    return cfg

def plain_values(obj):
    """obj with numpy scalars (e.g. from a config file that computes a value with numpy) turned into Python
    numbers, through dicts, lists and tuples, so the safe loader reads the checkpoint it goes into."""
    if isinstance(obj, dict):
        return {k: plain_values(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(plain_values(v) for v in obj)
    if isinstance(obj, np.generic):
        return obj.item()
    return obj


def dataset_vocab_size(config):
    """vocab_size of a train.py config's dataset (what train.py will use), or None before it is prepared."""
    path = os.path.join(default_data_dir(config), "meta.json")
    return load_meta(default_data_dir(config))["vocab_size"] if os.path.isfile(path) else None


def ensure_prepared(dataset, data_dir):
    """Run prepare.prepare(dataset) into data_dir when it has not been prepared yet (train.py's first run)."""
    if is_prepared(data_dir):
        return
    print(f"dataset '{dataset}' is not prepared in {data_dir}: running prepare.prepare('{dataset}')", flush=True)
    import prepare
    try:
        prepare.prepare(dataset, out_dir=data_dir)
    except UserError as e:
        raise UserError(f"preparing dataset '{dataset}' failed: {e}") from None


def load_matching_weights(model, state_dict, source, allow_partial):
    """Initialize `model` from another checkpoint: every tensor whose name and shape match is copied. Nothing
    matching is an error; a partial match (either side has tensors the other lacks) needs allow_partial."""
    own, theirs = model.state_dict(), clean_state_dict(state_dict)
    matched = {k: v for k, v in theirs.items() if k in own and own[k].shape == v.shape}
    fresh, unused = [k for k in own if k not in matched], [k for k in theirs if k not in matched]
    if not matched:
        raise UserError(f"--init_from={source}: none of its {len(theirs)} tensors fits this model (names or shapes "
                        f"differ) (fix: drop the model overrides that change its shape, or --init_from=scratch)")
    if (fresh or unused) and not allow_partial:
        def listed(names):
            return ", ".join(names[:3]) + (f", ... ({len(names)} in all)" if len(names) > 3 else "")
        detail = (f"; starting fresh: {listed(fresh)}" if fresh else "") + \
            (f"; unused from the checkpoint: {listed(unused)}" if unused else "")
        raise UserError(f"--init_from={source} fits {len(matched)} of this model's {len(own)} tensors{detail} "
                        f"(fix: --allow_partial_init=True to go on, or match the checkpoint's shape)")
    model.load_state_dict(matched, strict=False)
    return len(matched), len(own)


def load_optimizer_state(optimizer, ckpt):
    """optimizer.load_state_dict(the checkpoint's), with a one-line error when it does not fit the model
    (e.g. a checkpoint of a code version that grouped the parameters differently)."""
    try:
        optimizer.load_state_dict(ckpt["optimizer"])
    except (ValueError, KeyError, TypeError) as e:
        raise UserError(f"the optimizer state in '{ckpt['path']}' does not fit the model ({e}) (fix: start a new "
                        f"run from its weights: --init_from={ckpt['path']})") from None


# --- data: the token files and their batches ------------------------------------------------------------
# Batches are a pure function of (seed, split, iteration, micro-step): the generator is re-seeded with
# batch_seed(...) for every batch, so training data does not depend on how often we evaluate, resuming
# needs no sampler state, and a DDP rank sees exactly the batches a single process would see.

SPLIT_CODES = {"train": 0, "val": 1, "test": 2}
TOKEN_DTYPE = np.uint16   # prepare.py's token files: flat uint16 ids, read with np.memmap



def split_tokens(data_dir, split, vocab_size, block_size=None):
    """Number of tokens of a split, after checking the file: present, whole uint16 ids, ids below
    vocab_size, and longer than one training window (block_size None: at least one prediction, 2 tokens)."""
    path = split_path(data_dir, split)
    fix = "(fix: re-run `python prepare.py` for this dataset, or pass the right --data_dir)"
    if not os.path.isfile(path):
        raise UserError(f"{path} not found {fix}")
    size = os.path.getsize(path)
    if size % np.dtype(TOKEN_DTYPE).itemsize:
        raise UserError(f"{path} has an odd number of bytes ({size}): not uint16 token ids {fix}")
    n = size // np.dtype(TOKEN_DTYPE).itemsize
    if block_size is None and n < 2:
        raise UserError(f"{split} split of {data_dir} has {n} token(s), nothing to score {fix}")
    if block_size is not None and n <= block_size:
        raise UserError(f"{split} split of {data_dir} has {n} tokens, not enough for block_size={block_size} "
                        f"(fix: --block_size={max(1, n // 2)} or a bigger dataset)")
    top = int(np.memmap(path, dtype=TOKEN_DTYPE, mode="r").max())
    if top >= vocab_size:
        raise UserError(f"{path} holds token id {top}, but meta.json's vocab_size is {vocab_size} {fix}")
    return n


def check_splits(data_dir, vocab_size, block_size, segments_path=""):
    """train.py's data check: the train and val token files fit the model (split_tokens). Returns the window
    starts of segments_path (data_segments, checked against the train split), or None: every position."""
    n_train = split_tokens(data_dir, "train", vocab_size, block_size)
    split_tokens(data_dir, "val", vocab_size, block_size)
    return load_segments(segments_path, n_train, block_size) if segments_path else None


def batch_seed(*parts):
    """Mix integers into one 63-bit seed (splitmix64), so nearby (iter, micro-step) pairs give unrelated
    generator states."""
    mask = (1 << 64) - 1
    x = 0
    for p in parts:
        x = (x + 0x9E3779B97F4A7C15 + (int(p) & mask)) & mask
        x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & mask
        x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & mask
        x ^= x >> 31
    return x >> 1


def get_batch(path, batch_size, block_size, generator, device=torch.device("cpu"), segments=None):
    """(x, y) of shape (batch_size, block_size): random windows of the token file `path`, y = x shifted by
    one. The memmap is reopened every call: a long-lived one keeps growing resident memory.
    segments: optional array of allowed window starts (data refining, paper 003 4.2: see tools/pangu/refine.py)."""
    data = np.memmap(path, dtype=TOKEN_DTYPE, mode="r")
    if segments is None:
        starts = torch.randint(len(data) - block_size, (batch_size,), generator=generator).numpy()
    else:
        starts = segments[torch.randint(len(segments), (batch_size,), generator=generator).numpy()]
    windows = torch.from_numpy(data[starts[:, None] + np.arange(block_size + 1)].astype(np.int64))
    x, y = windows[:, :-1].contiguous(), windows[:, 1:].contiguous()
    if device.type == "cuda":
        # pinned host memory lets the copy run asynchronously with the GPU work already queued
        return x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
    return x.to(device), y.to(device)


def segments_info_path(path):
    """refine.json for refine.npy: what the window starts were made for (tools/pangu/refine.py writes it)."""
    return os.path.splitext(path)[0] + ".json"


def load_segments(path, n_tokens, block_size):
    """The window starts saved by refine (an int .npy), checked against the train split (and, when refine.json
    is beside it, against the length of the train split they were made for: another dataset's are refused)."""
    try:
        starts = np.load(path)
    except (OSError, ValueError) as e:
        raise UserError(f"cannot read data_segments '{path}': {e} (fix: write it with `python -m tools.pangu.refine` first)") from None
    if starts.ndim != 1 or len(starts) == 0 or starts.dtype.kind not in "iu":
        raise UserError(f"data_segments '{path}' is not a non-empty 1-D integer array (fix: write it with `python -m tools.pangu.refine`)")
    if np.any(starts % (block_size + 1)):   # refine scores whole windows: segment i starts at i * (block_size + 1)
        raise UserError(f"data_segments '{path}' was made for another block_size than {block_size} (fix: refine "
                        f"again with a model of this block_size, or train with the block_size it was made for)")
    info = {}
    with contextlib.suppress(OSError, ValueError):
        with open(segments_info_path(path), encoding="utf-8") as f:
            info = json.load(f)
    made_for = info.get("train_tokens") if isinstance(info, dict) else None
    if made_for is not None and made_for != n_tokens:
        raise UserError(f"data_segments '{path}' was made for a train split of {made_for:,} tokens "
                        f"({info.get('data_dir')}), this run's has {n_tokens:,} (fix: train on the dataset it was "
                        f"refined on, or refine again with a model of this dataset)")
    if starts.min() < 0 or starts.max() + block_size >= n_tokens:
        raise UserError(f"data_segments '{path}' has window starts outside the train split for block_size="
                        f"{block_size} (fix: refine with a model of this dataset and block_size)")
    return starts.astype(np.int64)


# --- the learning rate, and notes before a long run ---------------------------------------------------

def get_lr(it, learning_rate, min_lr, warmup_iters, lr_decay_iters, decay_lr=True):
    """Linear warmup over warmup_iters (starting at lr/(warmup+1), never 0), cosine decay from
    learning_rate at it=warmup_iters to min_lr at it=lr_decay_iters, then min_lr."""
    if not decay_lr:
        return learning_rate
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    if it >= lr_decay_iters:
        return min_lr
    ratio = (it - warmup_iters) / max(1, lr_decay_iters - warmup_iters)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (learning_rate - min_lr)


def note_cpu_time(config, model, x, y, dtype, micro_steps, say):
    """On a CPU: time a forward+backward of one sequence (the second call: the first pays one-time costs),
    scale it to the run and, when that is over half an hour, say so in one line (naming a CPU twin)."""
    with torch.random.fork_rng(devices=[]):   # the probe must not move the dropout RNG
        for _ in range(2):
            t0 = time.time()
            with autocast("cpu", dtype):
                loss = model(x[:1], y[:1])[1]
            loss.backward()
            step_s = (time.time() - t0) * len(x)
    model.zero_grad(set_to_none=True)
    evals = config["max_iters"] // config["eval_interval"] + 1
    total_s = step_s * (micro_steps * config["max_iters"] + evals * 2 * config["eval_iters"] / 3)
    if total_s < 1800:
        return
    fix = (f"this is a GPU recipe; its CPU twin is `python train.py {config['cpu_twin']}`" if config["cpu_twin"]
           else "a GPU, or a smaller model / fewer --max_iters")
    say(f"note: this run needs about {format_duration(total_s)} on this CPU (~{step_s:.1f} s per micro-step, "
        f"{config['max_iters']} iterations) (fix: {fix})")


# --- stopping where a checkpoint resumes exactly, and the RNG state that makes it exact ------------------

class StopRequest:
    """Ctrl-C (SIGINT) or SIGTERM asks train.py's loop to stop at the next iteration boundary, where the state saved
    to last.pt is exactly resumable; a second signal raises KeyboardInterrupt at once. Installed only in the
    main thread and over the default handlers (a caller's own handlers are left alone)."""

    DEFAULT_HANDLERS = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: signal.SIG_DFL}

    def __init__(self, say):
        self.requested, self.say, self.previous = False, say, {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig, default in self.DEFAULT_HANDLERS.items():
                if signal.getsignal(sig) == default:
                    self.previous[sig] = signal.signal(sig, self.handle)
        return self

    def handle(self, signum, frame):
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        self.say(f"\n{signal.Signals(signum).name}: stopping after this iteration to save last.pt "
                 f"(Ctrl-C again to stop at once)")

    def __exit__(self, *exc):
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)


def rng_state(device):
    np_state = np.random.get_state()
    return {
        "python": random.getstate(),
        # numpy's state as tensors/ints, so checkpoints load with torch.load(weights_only=True)
        "numpy": {"name": np_state[0], "keys": torch.from_numpy(np_state[1].astype(np.int64)),
                  "pos": int(np_state[2]), "has_gauss": int(np_state[3]), "cached_gaussian": float(np_state[4])},
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state(device) if device.type == "cuda" else None,
    }


def restore_rng(state, device):
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    n = state["numpy"]
    np.random.set_state((n["name"], n["keys"].cpu().numpy().astype(np.uint32), n["pos"], n["has_gauss"],
                         n["cached_gaussian"]))
    torch.set_rng_state(state["torch"].cpu())
    if device.type == "cuda" and state.get("cuda") is not None:
        torch.cuda.set_rng_state(state["cuda"].cpu(), device)


# --- out_dir/log.csv and loss.png ----------------------------------------------------------------------

COLUMNS = ["iter", "kind", "loss", "val_loss", "val_loss_heaviest", "lr", "ms_per_iter", "tokens_per_s",
           "elapsed_s", "branch_weights"]


class CsvLog:
    """Appends rows to `path` and keeps them for loss.png. keep_before=k keeps the existing rows of iterations < k
    (a run resumed at iteration k logs iteration k and later again, its eval at k included); None starts empty.
    pending=True: a new run into a folder whose log.csv goes with an earlier run's checkpoints; its rows go to a
    temporary file beside `path` until commit() (its first checkpoint is written) moves it onto `path`, and
    discard() (it never saved one) deletes it, so that log.csv always belongs to the checkpoints beside it."""

    def __init__(self, path, keep_before=None, pending=False):
        self.path, self.tmp = path, None
        self.rows = [] if keep_before is None else [r for r in read_rows(path) if int(r["iter"]) < keep_before]
        if pending:   # the temporary name is one remove_stale_temp_files cleans up after a kill -9
            fd, self.tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp",
                                            dir=os.path.dirname(os.path.abspath(path)))
            self.file = os.fdopen(fd, "w", newline="", encoding="utf-8")
        else:
            with atomic_open(path, "w") as f:
                writer = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
                writer.writeheader()
                writer.writerows(self.rows)
            self.file = open(path, "a", newline="", encoding="utf-8")
        self.writer = csv.DictWriter(self.file, fieldnames=COLUMNS, extrasaction="ignore")
        if pending:
            self.writer.writeheader()

    def commit(self):
        """Pending rows: move them onto `path` (later rows follow them there: the open file moves with them)."""
        if self.tmp is None:
            return
        self.file.flush()
        umask = os.umask(0)   # mkstemp made it 0600; give it the usual permissions, as atomic_open does
        os.umask(umask)
        os.chmod(self.tmp, 0o666 & ~umask)
        os.replace(self.tmp, self.path)
        self.tmp = None

    def discard(self):
        """Pending rows never committed: delete them, leaving `path` as it was. True when there were any."""
        if self.tmp is None:
            return False
        self.file.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.tmp)
        self.tmp = None
        return True

    def write(self, **row):
        row = {k: _text(v) for k, v in row.items()}
        self.rows.append(row)
        try:
            self.writer.writerow(row)
            self.file.flush()
        except OSError as e:   # a full disk mid-run: one line, not a traceback
            with contextlib.suppress(OSError):
                self.file.close()   # now, so that the unwritten row does not fail again at exit
            raise UserError(f"cannot write {self.path}: {e.strerror or e} (fix: free disk space; "
                            f"--init_from=resume continues from the last saved last.pt)") from None

    def close(self):
        self.file.close()


def read_rows(path):
    """The rows of a log.csv (dicts of text) whose values are what train.py writes: an iteration number, a kind,
    numbers (or nothing). Other rows (an edited file) are left out with a note, so that loss.png, drawn after
    the run, never meets text where it reads a number. [] when there is no file."""
    if not os.path.exists(path):
        return []
    try:
        with open(path, newline="", encoding="utf-8") as f:
            rows = [(n, row) for n, row in enumerate(csv.DictReader(f), 2) if (row.get("iter") or "").isdigit()]
    except (UnicodeDecodeError, csv.Error) as e:   # e.g. overwritten by another program: one line, not a traceback
        raise UserError(f"{path} is damaged ({e}) (fix: delete it: a resumed run then logs from where it "
                        f"resumes, and loss.png shows only that part)") from None
    bad = sorted(n for n, row in rows if not log_row_ok(row))
    if bad:
        print(f"note: {path}: left out {len(bad)} row(s) whose values are not numbers (line {bad[0]} first)",
              flush=True)
    return [row for n, row in rows if n not in set(bad)]


def log_row_ok(row):
    """True when a log.csv row holds what train.py writes: a kind, and numbers or nothing in the other columns."""
    def number(text):
        try:
            float(text)
            return True
        except ValueError:
            return False
    numbers = [row.get(k) or "" for k in COLUMNS if k not in ("iter", "kind", "branch_weights")]
    numbers += (row.get("branch_weights") or "").split()
    return row.get("kind") in ("train", "eval") and all(number(v) for v in numbers if v != "")


def _text(v):
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, (list, tuple)):
        return " ".join(_text(x) for x in v)
    return v


def format_duration(seconds):
    """h:mm:ss"""
    seconds = int(max(0, seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}"


def plot_run(rows, path, title):
    """loss.png: per-iteration train loss, eval train/val losses and, for pgpt, the val loss of the heaviest branch
    alone, from the log's rows. A plot that cannot be drawn or written is a note, never a lost run."""
    def points(kind, key):
        return [(int(r["iter"]), float(r[key])) for r in rows if r["kind"] == kind and r.get(key)]
    curves = [(points("train", "loss"), "-", "tab:blue", "train (batch)"),
              (points("eval", "loss"), "o-", "tab:blue", "train (eval)"),
              (points("eval", "val_loss"), "o-", "tab:orange", "val"),
              (points("eval", "val_loss_heaviest"), "s--", "tab:green", "val (heaviest branch)")]
    if not any(c[0] for c in curves):
        return
    try:
        from matplotlib.figure import Figure   # not pyplot: no GUI backend to import, files only
        fig = Figure(figsize=(8, 5))
        ax = fig.add_subplot()
        for i, (xy, style, color, label) in enumerate(curves):
            if xy:
                ax.plot(*zip(*xy), style, color=color, markersize=3, label=label,
                        **(dict(alpha=0.3, linewidth=0.8) if i == 0 else {}))
        ax.set(xlabel="iteration", ylabel="loss", title=title)
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        with atomic_open(path, "wb") as f:
            fig.savefig(f, format="png", dpi=110)
    except (ImportError, OSError) as e:
        print(f"note: {path} not written ({e})", flush=True)


# --- the run's helpers: batches, evaluation, checkpoints --------------------------------------------------

def say(run, message):
    if run.master:
        print(message, flush=True)


def next_batch(run, it, micro):
    """Training batch of micro-step `micro` of iteration `it`. The global micro-step index makes rank r of W see
    what one process sees at micro-step r*accum+micro."""
    run.train_gen.manual_seed(batch_seed(run.config["seed"], SPLIT_CODES["train"], it, run.rank * run.accum + micro))
    return get_batch(split_path(run.data_dir, "train"), run.batch_size, run.block_size, run.train_gen, run.device,
                     run.segments)


@torch.no_grad()
def evaluate(run, splits, stop):
    """Mean loss over eval_iters fixed batches per split (the same batches at every call). Under DDP each
    rank evaluates every world-th batch and the sums are all-reduced. Ctrl-C / SIGTERM cut it short
    (single process only: DDP ranks all finish it); evaluating changes no state, so the loop saves at once."""
    n, gen, out = run.config["eval_iters"], torch.Generator(), {}
    t0 = shown = time.time()
    run.model.eval()
    try:
        for split in splits:
            losses = torch.zeros(n, device=run.device)
            for k in range(run.rank, n, run.world):
                gen.manual_seed(batch_seed(run.config["seed"], 1000 + SPLIT_CODES.get(split, 9), k))
                x, y = get_batch(split_path(run.data_dir, split), run.batch_size, run.block_size, gen, run.device)
                with autocast(run.device, run.dtype):
                    losses[k] = run.model(x, y)[1].float()
                if stop.requested and not run.ddp:
                    raise KeyboardInterrupt
                if time.time() - shown > PROGRESS_EVERY_S:
                    say(run, f"  evaluating: {split} batch {k + 1}/{n}, {time.time() - t0:.0f} s")
                    shown = time.time()
            if run.ddp:
                torch.distributed.all_reduce(losses)
            out[split] = losses.mean().item()
    finally:
        run.model.train()
    return out


def evaluate_and_log(run, lr, stop):
    """The evaluation at an iteration boundary: train and val loss (pgpt: also the heaviest branch alone), one
    line printed, one row in log.csv. Returns the row."""
    losses = evaluate(run, ("train", "val"), stop)
    say(run, f"step {run.iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
    if not all(math.isfinite(v) for v in losses.values()):
        raise diverged(run, f"the eval loss is {losses['val']}", run.iter_num)
    row = dict(iter=run.iter_num, kind="eval", loss=losses["train"], val_loss=losses["val"], lr=lr,
               elapsed_s=time.time() - run.t_start)
    model = run.raw_model
    if model.config.n_branches > 1:   # pgpt: also the val loss of the heaviest branch alone
        model.keep_branch = model.heaviest_branch()
        try:
            heavy = evaluate(run, ("val",), stop)["val"]
        finally:
            branch, model.keep_branch = model.keep_branch, None
        weights = [float(w) for w in model.branch_weights().tolist()]
        say(run, f"step {run.iter_num}: val loss (heaviest branch only) {heavy:.4f} (branch {branch}), "
            f"branch weights {' '.join(f'{w:.4f}' for w in weights)}")
        row.update(val_loss_heaviest=heavy, branch_weights=weights)
    if run.master:
        run.csv_log.write(**row)
        run.wandb.log(row)
    return row


def save_last(run, best=False, gather=True):
    """last.pt (and ckpt.pt) for the state at the start of iteration iter_num. Collective under DDP."""
    if not all(torch.isfinite(p).all() for p in run.raw_model.parameters()):
        raise diverged(run, "the weights are not finite", run.iter_num)
    rng = rng_state(run.device)
    rng_ranks = None
    if run.ddp and gather:
        rng_ranks = [None] * run.world
        torch.distributed.all_gather_object(rng_ranks, rng)
    if run.master:
        path = os.path.join(run.out_dir, LAST_NAME)
        atomic_save({"model": run.raw_model.state_dict(), "model_args": run.args,
                     "optimizer": run.optimizer.state_dict(),
                     "scaler": run.scaler.state_dict() if run.scaler.is_enabled() else None,
                     "iter_num": run.iter_num, "best_val_loss": run.best_val_loss, "config": dict(run.config),
                     "rng": rng, "rng_ranks": rng_ranks, "dataset": run.config["dataset"], "data_dir": run.data_dir,
                     "tokenizer_id": tokenizer_id(run.meta)}, path)
        # the first save of a new run replaces an earlier run's ckpt.pt too (Ctrl-C before the first eval's)
        if best or (run.earlier and run.saved_iter is None):
            atomic_copy(path, os.path.join(run.out_dir, CKPT_NAME))
            say(run, f"saved {CKPT_NAME} and {LAST_NAME} to {run.out_dir}")
        run.csv_log.commit()
    run.saved_iter = run.iter_num


def kept(run):
    """What a stop now leaves in out_dir, in words."""
    if run.saved_iter is not None:
        return f"{LAST_NAME} keeps iteration {run.saved_iter}"
    # a new run that saved nothing yet: checkpoints in out_dir are an earlier run's, which sample.py would load
    earlier = [n for n in (CKPT_NAME, LAST_NAME) if not run.resuming and os.path.exists(os.path.join(run.out_dir, n))]
    return "nothing was saved" + (f" (the {' and '.join(earlier)} in {run.out_dir} are an earlier run's)" if earlier else "")


def diverged(run, what, it):
    return UserError(f"{what} at iteration {it}: training diverged; {kept(run)} (fix: lower --learning_rate "
                     f"(now {run.config['learning_rate']:g}) or lengthen --warmup_iters (now {run.config['warmup_iters']}))")


def optimizer_step(run, X, Y):
    """One optimizer step: accum micro-batches (gradients synced under DDP only on the last), clipping, AdamW.
    Each micro-step fetches the next batch while the GPU works. Returns (mean loss as a tensor, next X, Y)."""
    loss_sum = torch.zeros((), device=run.device)
    for micro in range(run.accum):
        sync = contextlib.nullcontext() if not run.ddp or micro == run.accum - 1 else run.train_model.no_sync()
        with sync:
            with autocast(run.device, run.dtype):
                loss = run.train_model(X, Y)[1]
            loss_sum += loss.detach().float()
            X, Y = next_batch(run, run.iter_num, micro + 1) if micro < run.accum - 1 else \
                next_batch(run, run.iter_num + 1, 0)
            run.scaler.scale(loss / run.accum).backward()
    if run.config["grad_clip"] > 0:
        run.scaler.unscale_(run.optimizer)
        torch.nn.utils.clip_grad_norm_(run.raw_model.parameters(), run.config["grad_clip"])
    run.scaler.step(run.optimizer)
    run.scaler.update()
    run.optimizer.zero_grad(set_to_none=True)
    return loss_sum / run.accum, X, Y


def log_iteration(run, it, loss, lr, speed, stop):
    """One log line and log.csv row: the loss averaged over ranks (one all_reduce, which also carries the ranks'
    stop votes), speed and time left (smoothed ms/iter plus the evaluations still to come).
    Returns (the loss as a float, whether any rank asked to stop)."""
    config = run.config
    stats = torch.stack([loss, torch.tensor(float(stop.requested), device=run.device)])
    if run.ddp:
        torch.distributed.all_reduce(stats)
    lossf, stop_votes = stats[0].item() / run.world, stats[1].item()
    if not math.isfinite(lossf):
        raise diverged(run, f"the training loss is {lossf}", it)
    ms = speed.window_ms()
    eta = speed.eta(config["max_iters"] - run.iter_num, (config["max_iters"] - run.iter_num) // config["eval_interval"] + 1)
    tok_s = run.tokens_per_iter / (ms / 1000)
    say(run, f"iter {it}: loss {lossf:.4f}, lr {lr:.2e}, {ms:.2f} ms/iter, {tok_s:,.0f} tok/s, "
        f"eta {format_duration(eta)}")
    if run.master:
        run.csv_log.write(iter=it, kind="train", loss=lossf, lr=lr, ms_per_iter=ms, tokens_per_s=tok_s,
                          elapsed_s=time.time() - run.t_start)
    return lossf, stop_votes > 0


class Speed:
    """ms/iter of the windows between log lines (evaluation left out), smoothed for the ETA."""

    def __init__(self):
        self.windows, self.ema, self.t_window, self.iters = [], None, time.time(), 0
        self.eval_seconds, self.n_evals = 0.0, 0

    def restart(self):
        self.t_window, self.iters = time.time(), 0

    def window_ms(self):
        ms = (time.time() - self.t_window) * 1000 / self.iters
        self.restart()
        self.windows.append(ms)
        self.ema = ms if len(self.windows) <= 2 else 0.9 * self.ema + 0.1 * ms   # the first windows warm up
        return ms

    def eta(self, iters_left, evals_left):
        return iters_left * self.ema / 1000 + evals_left * self.eval_seconds / max(1, self.n_evals)


# --- one training run ----------------------------------------------------------------------------------

def train(config, explicit=None, callback=None):
    """Train with `config` (DEFAULTS updated with the caller's values). explicit: the keys the user set
    (model keys among them override the variant; see model_args); None means the model keys that differ
    from GPTConfig's defaults. callback(event, info), if given, is called on every rank with event 'iter'
    (after each optimizer step; its loss is a 0-d tensor on the device), 'eval' or 'end'; info has iter_num,
    model (the raw module), rank and the logged values. Returns a summary dict."""
    unknown = sorted(set(config) - set(DEFAULTS))
    if unknown:
        raise UserError(f"unknown config keys {unknown} (fix: see `python train.py --help` for the keys)")
    # numpy scalars (a config file may compute with numpy) would reach the checkpoint, in its config and the
    # optimizer's lr, and the safe loader refuses them
    config = plain_values({**DEFAULTS, **config})
    if explicit is None:   # called as a library: model keys that differ from GPTConfig's defaults win over a variant
        explicit = {k for k, v in gpt_config_defaults().items() if config[k] != v}
    rank, local_rank, world = distributed_env() or (0, None, 1)   # torchrun sets the ranks
    check_train_config(config, world)
    device = resolve_device(config["device"], local_rank)
    owns_group = world > 1 and not torch.distributed.is_initialized()
    if world > 1 and device.type == "cuda":
        torch.cuda.set_device(device)
    if owns_group:
        torch.distributed.init_process_group(backend=ddp_backend(config, device))
    with contextlib.ExitStack() as held:   # out_dir's lock (and the process group): released however the run ends
        if owns_group:
            held.callback(torch.distributed.destroy_process_group)
        run, ckpt = setup(config, set(explicit), device, rank, world)
        prepare_loop(run, ckpt, held)
        return run_training(run, callback)


def setup(config, explicit, device, rank=0, world=1):
    """The run's inputs: data, model (fresh, resumed or from another checkpoint) and optimizer, every one checked
    before anything in out_dir changes. Returns the run's state and the checkpoint it starts from (or None)."""
    run = SimpleNamespace(config=config, device=device, rank=rank, world=world, master=rank == 0, ddp=world > 1)
    run.wandb = WandbLog(config, run.master)   # wandb_log=True: the package is imported now, before any file changes
    run.accum = config["gradient_accumulation_steps"] // world   # micro-steps per iteration on this rank
    run.dtype = resolve_dtype(config["dtype"], device)
    config.update(device=str(device), dtype=run.dtype)
    if config["num_threads"] > 0:
        torch.set_num_threads(config["num_threads"])
    run.out_dir = config["out_dir"]

    # data: prepared on first use (by rank 0; the others wait), then checked
    run.data_dir = config["data_dir"] = default_data_dir(config)
    if run.master:
        ensure_prepared(config["dataset"], run.data_dir)
    if run.ddp:
        torch.distributed.barrier()
    run.meta = load_meta(run.data_dir)

    # model: fresh, resumed, or initialized from another checkpoint's weights
    run.args, ckpt = train_model_args(config, explicit, run.meta, device, lambda m: say(run, m))
    config.update(run.args)   # the config saved with checkpoints shows the model that was really trained
    run.block_size, run.batch_size = run.args["block_size"], config["batch_size"]
    run.segments = check_splits(run.data_dir, run.args["vocab_size"], run.block_size, config["data_segments"])
    if run.segments is not None:   # paper 003's data refining
        say(run, f"training windows start only at the {len(run.segments):,} segments of {config['data_segments']}")
    torch.manual_seed(config["seed"])   # the same initial weights on every rank and in every run with this seed
    run.raw_model = model = build_model(run.args)
    run.resuming = config["init_from"] == "resume"
    run.iter_num, run.best_val_loss = (int(ckpt["iter_num"]), float(ckpt["best_val_loss"])) if run.resuming \
        else (0, math.inf)
    if run.resuming:
        load_own_weights(model, ckpt)
    elif ckpt is not None:
        copied, total = load_matching_weights(model, ckpt["model"], ckpt["path"], config["allow_partial_init"])
        say(run, f"initialized {copied}/{total} tensors from {ckpt['path']}")
    model.to(device)
    run.optimizer = model.configure_optimizers(config["weight_decay"], config["learning_rate"],
                                               (config["beta1"], config["beta2"]), device.type)
    run.scaler = torch.amp.GradScaler(device.type, enabled=(run.dtype == "float16"))   # loss scaling for fp16 only
    if run.resuming:
        load_optimizer_state(run.optimizer, ckpt)
        if run.scaler.is_enabled() and ckpt.get("scaler"):
            run.scaler.load_state_dict(ckpt["scaler"])
    # the first batch (each step fetches the next one): a batch too big for the machine fails here, not in out_dir
    run.train_gen = torch.Generator()
    run.X, run.Y = next_batch(run, run.iter_num, 0)
    check_out_dir(run.out_dir)
    return run, ckpt


def prepare_loop(run, ckpt, held):
    """Every input is checked: take out_dir (only from here on do files in it change), say what will run, fetch the
    first batch, compile / wrap the model for DDP, and set the RNG where the run starts. held: an ExitStack that
    keeps rank 0's lock on out_dir (and discards an uncommitted log) until the run has ended."""
    config, device, model, rank, world = run.config, run.device, run.raw_model, run.rank, run.world
    run.earlier = False
    if run.master:
        # one writer per out_dir: a second run into it would replace this one's checkpoints and log.csv
        held.enter_context(lock_dir(run.out_dir))
        remove_stale_temp_files(run.out_dir, (CKPT_NAME, LAST_NAME, "log.csv", "loss.png"), lambda m: say(run, m))
        # a new run into the folder of an earlier one: its log.csv and loss.png stay until this run's first save,
        # so that they always go with the checkpoints beside them
        run.earlier = not run.resuming and any(os.path.exists(os.path.join(run.out_dir, n)) for n in (CKPT_NAME, LAST_NAME))
        run.csv_log = CsvLog(os.path.join(run.out_dir, "log.csv"), keep_before=run.iter_num if run.resuming else None,
                             pending=run.earlier)
        held.callback(run.csv_log.discard)   # also when the run fails before its first save
    say(run, f"number of parameters: {model.get_num_params(False) / 1e6:.2f}M "
        f"(non-embedding: {model.get_num_params(True) / 1e6:.2f}M)")
    say(run, f"depth: {model.depth_summary()}")
    run.tokens_per_iter = run.accum * world * run.batch_size * run.block_size
    say(run, f"tokens per iteration: {run.tokens_per_iter:,} ({run.accum} accum x {world} ranks x {run.batch_size} "
        f"batch x {run.block_size} block); device {device}, dtype {run.dtype}, compile {config['compile']}")
    if config["decay_lr"] and config["warmup_iters"] >= config["max_iters"] > 0:   # e.g. a config shrunk by --max_iters
        say(run, f"note: all {config['max_iters']} iterations fall in the {config['warmup_iters']}-iteration warmup, "
            f"so the lr never reaches {config['learning_rate']:g} (fix: also pass --warmup_iters and --lr_decay_iters)")
    if device.type == "cpu" and run.master:
        if busy_machine(device):
            say(run, f"note: {busy_machine(device)}")
        note_cpu_time(config, model, run.X, run.Y, run.dtype, run.accum, lambda m: say(run, m))
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    # model (compiled if asked) evaluates; train_model (model in DDP when distributed) trains
    if config["compile"]:
        # dynamo keeps at most 8 graphs of GPT.forward per process; compare.py trains 4 models in one, and the
        # later ones would silently run uncompiled: start each run's compilation afresh
        torch._dynamo.reset()
    run.model = torch.compile(model) if config["compile"] else model
    run.train_model = run.model
    if run.ddp:
        from torch.nn.parallel import DistributedDataParallel
        run.train_model = DistributedDataParallel(run.model, device_ids=[device.index] if device.type == "cuda" else None)
    # the RNG (dropout): each rank its own stream; a resumed run continues the saved one (a rank that has
    # none, after a change of the number of ranks, starts a new stream for this iteration)
    seed = config["seed"] + rank + run.iter_num
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed % 2**32)
    if run.resuming:
        saved = ckpt["rng_ranks"][rank] if ckpt.get("rng_ranks") and len(ckpt["rng_ranks"]) == world else \
            ckpt.get("rng") if run.master else None
        if saved is not None:
            restore_rng(saved, device)
    # what last.pt holds now: the resumed iteration, or nothing of this run yet
    run.saved_iter = run.iter_num if run.resuming and ckpt["path"].endswith(LAST_NAME) else None
    return run


def run_training(run, callback=None):
    """The training loop, then the summary. Each pass starts at an iteration boundary: the weights and optimizer
    hold the state after iter_num steps, and the RNG (dropout) is exactly where step iter_num-1 left it. State
    saved there resumes exactly, so evaluation, saving and stopping happen only there. `in_step` marks the rest
    (from the first forward to iter_num += 1): an interrupt in there saves nothing."""
    config, X, Y = run.config, run.X, run.Y
    history, last_train_loss, speed = [], None, Speed()
    run.t_start = time.time()
    in_step = interrupted = hard_stop = False

    with StopRequest(lambda m: say(run, m)) as stop:
        try:
            while True:
                lr = get_lr(run.iter_num, config["learning_rate"], config["min_lr"], config["warmup_iters"],
                            config["lr_decay_iters"], config["decay_lr"])
                for group in run.optimizer.param_groups:
                    group["lr"] = lr
                last_iter = run.iter_num >= config["max_iters"]

                # evaluate on fixed batches, log, and save last.pt (and ckpt.pt when val loss improved)
                if run.iter_num % config["eval_interval"] == 0 or last_iter or config["eval_only"]:
                    t_eval = time.time()
                    row = evaluate_and_log(run, lr, stop)
                    history.append(row)
                    improved = row["val_loss"] < run.best_val_loss
                    run.best_val_loss = min(run.best_val_loss, row["val_loss"])
                    if run.iter_num > 0 and not config["eval_only"]:
                        save_last(run, best=improved or config["always_save_checkpoint"])
                    notify(run, callback, "eval", **row)
                    speed.eval_seconds, speed.n_evals = speed.eval_seconds + time.time() - t_eval, speed.n_evals + 1
                    speed.restart()   # ms/iter leaves out evaluation time
                if config["eval_only"] or last_iter:
                    break
                # Ctrl-C / SIGTERM: stop here. Under DDP all ranks must stop at the same boundary, so they
                # vote at log steps instead (below)
                if stop.requested and not run.ddp:
                    interrupted = True
                    break

                in_step = True
                loss, X, Y = optimizer_step(run, X, Y)
                it, run.iter_num = run.iter_num, run.iter_num + 1
                in_step = False
                speed.iters += 1

                if it % config["log_interval"] == 0:
                    last_train_loss, stop_voted = log_iteration(run, it, loss, lr, speed, stop)
                    if stop_voted:
                        interrupted = True
                        break
                notify(run, callback, "iter", loss=loss, lr=lr)   # a tensor: .item() would wait for the GPU
        except KeyboardInterrupt:   # a second Ctrl-C, or raised by a callback
            interrupted = hard_stop = True
        if interrupted:
            save_on_stop(run, in_step, hard_stop)

    summary = finish(run, history, last_train_loss, speed, interrupted)
    notify(run, callback, "end", **{k: v for k, v in summary.items() if k != "evals"})
    if not interrupted:
        say(run, f"done: best val loss {run.best_val_loss:.4f}, {run.iter_num} iterations in "
            f"{format_duration(summary['train_time_s'])}")
    return summary


def notify(run, callback, event, **info):
    if callback is not None:
        callback(event, dict(info, iter_num=run.iter_num, model=run.raw_model, rank=run.rank))


def save_on_stop(run, in_step, hard_stop):
    """After Ctrl-C / SIGTERM: save last.pt at the boundary the loop stopped at (nothing when stopped mid-step)."""
    if in_step:
        say(run, f"\nstopped during iteration {run.iter_num}: {kept(run)}")
        return
    try:
        if run.saved_iter != run.iter_num:
            save_last(run, gather=not hard_stop)   # after a hard stop the other DDP ranks may be gone
        say(run, f"interrupted at iteration {run.iter_num}: saved {os.path.join(run.out_dir, LAST_NAME)}; "
            f"continue with --init_from=resume")
    except KeyboardInterrupt:   # a second Ctrl-C during that save: the atomic save kept the old file
        say(run, f"\nstopped while saving iteration {run.iter_num}: {kept(run)}")


def finish(run, history, last_train_loss, speed, interrupted):
    """loss.png and the summary dict."""
    if run.master and run.csv_log.discard():
        say(run, f"this run saved no checkpoint: kept the earlier run's log.csv and loss.png in {run.out_dir}, which go "
            f"with its checkpoints")
    elif run.master:
        run.csv_log.close()
        plot_run(run.csv_log.rows, os.path.join(run.out_dir, "loss.png"), os.path.basename(os.path.abspath(run.out_dir)))
    train_time = time.time() - run.t_start
    steady = speed.windows[1:] or speed.windows   # the first window includes warm-up (and compilation)
    ms_per_iter = float(np.median(steady)) if steady else None
    final = history[-1] if history else {}
    model = run.raw_model
    summary = {
        "best_val_loss": run.best_val_loss, "final_train_loss": final.get("loss"),
        "final_val_loss": final.get("val_loss"), "final_val_loss_heaviest": final.get("val_loss_heaviest"),
        "last_train_loss": last_train_loss, "iter_num": run.iter_num, "ms_per_iter": ms_per_iter,
        "tokens_per_s": run.tokens_per_iter / (ms_per_iter / 1000) if steady else None,
        "train_time_s": train_time, "eval_time_s": speed.eval_seconds, "num_params": model.get_num_params(False),
        "num_params_non_embedding": model.get_num_params(True), "model_args": dict(run.args),
        "out_dir": run.out_dir, "interrupted": interrupted, "evals": history,
    }
    return summary


def main(argv=None):
    try:
        config, explicit = load_config(DEFAULTS, sys.argv[1:] if argv is None else argv)
        summary = train(config, explicit)
    except UserError as e:
        raise SystemExit(f"error: {e}") from None
    except KeyboardInterrupt:   # a third Ctrl-C, while saving after the second
        raise SystemExit(130) from None
    except (MemoryError, RuntimeError) as e:   # torch.OutOfMemoryError is a RuntimeError
        if not out_of_memory(e):
            raise
        raise SystemExit(f"error: {out_of_memory(e)} (fix: lower --batch_size and raise --gradient_accumulation_steps, "
                         "or lower --block_size)") from None
    if summary["interrupted"]:
        raise SystemExit(130)
    return summary


if __name__ == "__main__":
    main()
    # everything is written and closed: spare the exit its garbage collection over all of torch's objects, which
    # takes most of a second (results/README.md, "The whole process against nanoGPT")
    gc.freeze()
