"""
Train a GPT variant on a tokenized dataset (nanoGPT-style, single process or DDP).

    python train.py config/gpt_shakespeare_cpu.py                 # ~3 min on a laptop CPU
    python train.py config/gpt_shakespeare.py --variant=lgpt       # GPU recipe, a compact variant
    python train.py config/gpt_shakespeare_cpu.py --init_from=resume --max_iters=3000
    torchrun --standalone --nproc_per_node=8 train.py config/gpt_shakespeare.py

Every key of DEFAULTS below (and every GPTConfig field, e.g. --n_layer=4) can be set in a config file
or on the command line; `python train.py --help` lists them.

What is written to out_dir: ckpt.pt (best val loss), last.pt (latest, resumable; also on Ctrl-C),
log.csv (every logged value) and loss.png (curves).

Reproducibility: the batch for (iteration, micro-step) is drawn from a torch.Generator seeded with
hash(seed, split, iteration, global micro-step), so training data does not depend on how often we
evaluate, resuming needs no sampler state, and a DDP run over W ranks sees exactly the batches of a
single-process run with the same global batch. Evaluation uses the same fixed batches every time,
so successive val losses (and different runs) are compared on identical data.

The functions are importable: compare.py calls train(config) in-process and reads the summary dict.
"""

import contextlib
import csv
import math
import os
import random
import signal
import sys
import threading
import time

import numpy as np
import torch

from checkpoint import (CKPT_NAME, LAST_NAME, CheckpointError, atomic_copy, atomic_open, atomic_save,
                        clean_state_dict, load_checkpoint)
from configurator import ConfigError, gpt_config_defaults, load_config
from configurator import model_args as resolve_model_args

# -----------------------------------------------------------------------------------------------
# default config values; every GPTConfig field is added below with its GPTConfig default
TRAIN_DEFAULTS = dict(
    # I/O
    out_dir="out",
    eval_interval=250,
    log_interval=10,
    eval_iters=200,
    eval_only=False,              # evaluate once and exit
    always_save_checkpoint=False,  # write ckpt.pt at every eval, not only when val loss improves
    init_from="scratch",          # 'scratch' | 'resume' (out_dir/last.pt) | path to a checkpoint or a Hugging Face
                                  # model directory (weights only)
    # data
    dataset="shakespeare_char",
    data_dir="",                  # '' = data/<dataset>
    data_segments="",             # refine.py's refine.npy: train windows start only at these offsets ('' = anywhere)
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
    warmup_iters=100,
    lr_decay_iters=None,          # None = max_iters
    min_lr=None,                  # None = learning_rate / 10
    # system
    device="auto",                # 'auto' (cuda > mps > cpu) | 'cpu' | 'cuda' | 'cuda:1' | 'mps'
    dtype="auto",                 # 'auto' (bf16 if supported, else fp16 on cuda; fp32 elsewhere) | float32 | bfloat16 | float16
    compile=False,                # torch.compile the model
    num_threads=0,                # CPU threads for torch; 0 = torch's default (all cores). 1 is much faster
                                  # when other jobs share the cores (busy threads wait on each other)
    seed=1337,
)


def default_config():
    cfg = dict(TRAIN_DEFAULTS)
    for key, value in gpt_config_defaults().items():
        cfg.setdefault(key, value)
    return cfg


DEFAULTS = default_config()

# dense bf16 peak FLOP/s (no sparsity) for the MFU print; unknown devices print no MFU
PEAK_FLOPS = {"H100": 989e12, "H200": 989e12, "A100": 312e12}
SPLIT_CODES = {"train": 0, "val": 1, "test": 2}
CSV_COLUMNS = ["iter", "kind", "loss", "val_loss", "val_loss_heaviest", "lr", "ms_per_iter", "tokens_per_s",
               "mfu", "elapsed_s", "branch_weights"]


class TrainError(ValueError):
    """Bad training input (config, data, checkpoint); the message is one line with a fix."""


# -----------------------------------------------------------------------------------------------
# learning-rate schedule

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
    coeff = 0.5 * (1.0 + math.cos(math.pi * ratio))  # 1 -> 0
    return min_lr + coeff * (learning_rate - min_lr)


# -----------------------------------------------------------------------------------------------
# config checks

def resolve_schedule(config):
    """Fill the None defaults of lr_decay_iters / min_lr."""
    if config["lr_decay_iters"] is None:
        config["lr_decay_iters"] = config["max_iters"]
    if config["min_lr"] is None:
        config["min_lr"] = config["learning_rate"] / 10


def validate(config):
    def need(ok, msg):
        if not ok:
            raise TrainError(msg)

    def is_num(v):
        return isinstance(v, (int, float)) and not isinstance(v, bool)

    for key in ("batch_size", "eval_interval", "log_interval", "eval_iters", "gradient_accumulation_steps"):
        need(isinstance(config[key], int) and config[key] >= 1, f"{key} must be an integer >= 1, got {config[key]!r} "
             f"(fix: --{key}=1 or more)")
    for key in ("max_iters", "warmup_iters"):
        need(isinstance(config[key], int) and config[key] >= 0, f"{key} must be an integer >= 0, got {config[key]!r}")
    need(is_num(config["lr_decay_iters"]), f"lr_decay_iters must be a number, got {config['lr_decay_iters']!r} "
         f"(fix: --lr_decay_iters={config['max_iters']})")
    need(is_num(config["min_lr"]) and config["min_lr"] >= 0, f"min_lr must be a number >= 0, got {config['min_lr']!r}")
    need(config["learning_rate"] > 0, f"learning_rate must be > 0, got {config['learning_rate']}")
    need(config["min_lr"] <= config["learning_rate"],
         f"min_lr ({config['min_lr']}) is above learning_rate ({config['learning_rate']}) (fix: lower --min_lr)")
    need(not config["decay_lr"] or config["lr_decay_iters"] >= config["warmup_iters"],
         f"lr_decay_iters ({config['lr_decay_iters']}) must be >= warmup_iters ({config['warmup_iters']}) "
         f"(fix: --lr_decay_iters={config['max_iters']})")
    need(config["num_threads"] >= 0, f"num_threads must be >= 0 (0 = all cores), got {config['num_threads']}")
    need(config["grad_clip"] >= 0, f"grad_clip must be >= 0 (0 = off), got {config['grad_clip']}")
    need(config["dtype"] in ("auto", "float32", "bfloat16", "float16"),
         f"unknown dtype '{config['dtype']}' (fix: --dtype=auto|float32|bfloat16|float16)")
    need(config["device"] == "auto" or config["device"].split(":")[0] in ("cpu", "cuda", "mps"),
         f"unknown device '{config['device']}' (fix: --device=auto|cpu|cuda|cuda:N|mps)")
    need(config["dataset"] != "", "dataset is empty (fix: --dataset=shakespeare_char)")
    need(config["out_dir"] != "", "out_dir is empty (fix: --out_dir=out)")
    if config["init_from"] not in ("scratch", "resume"):
        need(os.path.exists(config["init_from"]), f"init_from='{config['init_from']}' is neither 'scratch', 'resume' "
             f"nor an existing checkpoint (fix: --init_from=scratch|resume|path/to/ckpt.pt)")


# -----------------------------------------------------------------------------------------------
# device, dtype, distributed

def resolve_device(name, local_rank=None):
    if name == "auto":
        if torch.cuda.is_available():
            name = "cuda"
        elif getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            name = "mps"
        else:
            name = "cpu"
    kind = name.split(":")[0]
    if kind == "cuda" and not torch.cuda.is_available():
        raise TrainError(f"device '{name}' requested but CUDA is not available (fix: --device=cpu or --device=auto)")
    if kind == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise TrainError(f"device '{name}' requested but MPS is not available (fix: --device=cpu or --device=auto)")
    if kind == "cuda" and local_rank is not None:
        name = f"cuda:{local_rank}"   # one GPU per DDP rank
    return torch.device(name)


def resolve_dtype(name, device):
    if name == "auto":
        if device.type == "cuda":
            return "bfloat16" if torch.cuda.is_bf16_supported() else "float16"
        return "float32"
    return name


def distributed_env():
    """(rank, local_rank, world_size) from torchrun's environment, or None when not launched by it."""
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        return None
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    return rank, local_rank, world


def peak_flops(device):
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    for key, flops in PEAK_FLOPS.items():
        if key in name:
            return flops
    return None


# -----------------------------------------------------------------------------------------------
# data

def split_path(data_dir, split):
    return os.path.join(data_dir, f"{split}.bin")


def ensure_data(dataset, data_dir):
    """Run prepare.prepare(dataset) into data_dir when it has not been prepared yet (first run)."""
    # prepare.py writes meta.json last, so its presence means the folder is complete
    if all(os.path.exists(p) for p in (split_path(data_dir, "train"), split_path(data_dir, "val"),
                                       os.path.join(data_dir, "meta.json"))):
        return
    print(f"dataset '{dataset}' is not prepared in {data_dir}: running prepare.prepare('{dataset}')", flush=True)
    try:
        import prepare
        prepare.prepare(dataset, out_dir=data_dir)
    except SystemExit as e:   # prepare.py's own one-line "error: ..." message
        reason = str(e).removeprefix("error: ")
        raise TrainError(f"preparing dataset '{dataset}' failed: {reason}") from None
    except (ValueError, KeyError, OSError) as e:
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise TrainError(f"preparing dataset '{dataset}' failed: {msg} "
                         f"(fix: check --dataset, or run `python prepare.py {dataset}` by hand)") from None
    if not os.path.exists(split_path(data_dir, "train")):
        raise TrainError(f"prepare('{dataset}') did not create {split_path(data_dir, 'train')} "
                         f"(fix: run `python prepare.py {dataset} --out_dir={data_dir}`)")


def load_meta(data_dir):
    import json
    path = os.path.join(data_dir, "meta.json")
    if not os.path.exists(path):
        raise TrainError(f"{path} is missing (fix: re-run `python prepare.py` for this dataset)")
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def split_length(data_dir, split):
    return os.path.getsize(split_path(data_dir, split)) // np.dtype(np.uint16).itemsize


def batch_seed(*parts):
    """Mix integers into one 63-bit seed (splitmix64), so nearby (iter, micro-step) pairs give
    unrelated generator states."""
    mask = (1 << 64) - 1
    x = 0
    for p in parts:
        x = (x + 0x9E3779B97F4A7C15 + (int(p) & mask)) & mask
        x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & mask
        x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & mask
        x ^= x >> 31
    return x >> 1


def get_batch(path, batch_size, block_size, generator, device=torch.device("cpu"), segments=None):
    """(x, y) of shape (batch_size, block_size): random windows of the uint16 token file `path`, y = x
    shifted by one. The memmap is reopened every call: a long-lived one keeps growing resident memory.
    segments: optional array of allowed window starts (data refining, paper 003 4.2: see refine.py)."""
    data = np.memmap(path, dtype=np.uint16, mode="r")
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


def load_segments(path, n_tokens, block_size):
    """The window starts saved by refine.py (an int .npy), checked against the train split."""
    try:
        starts = np.load(path)
    except (OSError, ValueError) as e:
        raise TrainError(f"cannot read data_segments '{path}': {e} (fix: run `python refine.py` first)") from None
    if starts.ndim != 1 or len(starts) == 0 or starts.dtype.kind not in "iu":
        raise TrainError(f"data_segments '{path}' is not a non-empty 1-D integer array (fix: write it with refine.py)")
    if starts.min() < 0 or starts.max() + block_size >= n_tokens:
        raise TrainError(f"data_segments '{path}' has window starts outside the train split for block_size="
                         f"{block_size} (fix: refine with a model of this dataset and block_size)")
    return starts.astype(np.int64)


@torch.no_grad()
def estimate_loss(model, data_dir, splits, eval_iters, batch_size, block_size, seed, device,
                  autocast=contextlib.nullcontext, rank=0, world=1):
    """Mean loss over eval_iters fixed batches per split (the same batches every call). Under DDP
    each rank evaluates every world-th batch and the sums are all-reduced."""
    was_training = model.training
    model.eval()
    gen = torch.Generator()
    out = {}
    for split in splits:
        losses = torch.zeros(eval_iters, device=device)
        for k in range(rank, eval_iters, world):
            gen.manual_seed(batch_seed(seed, 1000 + SPLIT_CODES.get(split, 9), k))
            x, y = get_batch(split_path(data_dir, split), batch_size, block_size, gen, device)
            with autocast():
                _, loss = model(x, y)
            losses[k] = loss.float()
        if world > 1:
            torch.distributed.all_reduce(losses)
        out[split] = losses.mean().item()
    model.train(was_training)
    return out


# -----------------------------------------------------------------------------------------------
# RNG state (saved in checkpoints so a resumed run draws the same dropout masks)

def rng_snapshot(device):
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
    np.random.set_state((n["name"], n["keys"].cpu().numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["cached_gaussian"]))
    torch.set_rng_state(state["torch"].cpu())
    if device.type == "cuda" and state.get("cuda") is not None:
        torch.cuda.set_rng_state(state["cuda"].cpu(), device)


# -----------------------------------------------------------------------------------------------
# model construction

def build_model(model_args):
    from model import GPT, GPTConfig
    try:
        return GPT(GPTConfig(**model_args))
    except (ValueError, TypeError) as e:
        raise TrainError(f"invalid model configuration: {e}") from None


def init_from_checkpoint(model, state_dict):
    """Initialize `model` from another checkpoint's weights: every tensor whose name and shape match is
    copied, the rest keeps its fresh initialization. Returns (copied, total). This is the hook for
    parameter inheritance (a smarter mapping can replace it)."""
    own = model.state_dict()
    matched = {k: v for k, v in clean_state_dict(state_dict).items() if k in own and own[k].shape == v.shape}
    model.load_state_dict(matched, strict=False)
    return len(matched), len(own)


def model_args_for(config, explicit, meta_vocab, device, say):
    """(model_args, checkpoint or None) for init_from = scratch | resume | <path>."""
    init_from = config["init_from"]
    ckpt = None
    if init_from == "scratch":
        args = resolve_model_args(config, explicit)
    elif init_from == "resume":
        out_dir = config["out_dir"]
        if not any(os.path.isfile(os.path.join(out_dir, n)) for n in (LAST_NAME, CKPT_NAME)):
            raise TrainError(f"nothing to resume: no {LAST_NAME} or {CKPT_NAME} in '{out_dir}' (fix: pass the "
                             f"out_dir of an earlier run, or start one with --init_from=scratch)")
        ckpt = load_checkpoint(out_dir, device, prefer=(LAST_NAME, CKPT_NAME))
        say(f"resuming from {ckpt['path']} at iteration {ckpt['iter_num']}")
        args = dict(ckpt["model_args"])
        # dropout may change between sessions; anything else changes the architecture. vocab_size came
        # from meta.json, not the variant's preset, unless the user set it
        wanted = resolve_model_args(config, explicit, base=args)
        if "vocab_size" not in explicit:
            wanted["vocab_size"] = args["vocab_size"]
        for key in sorted(k for k in wanted if k != "dropout" and wanted[k] != args.get(k)):
            raise TrainError(f"resume: {key}={wanted[key]!r} differs from the checkpoint's {key}={args.get(key)!r} "
                             f"(fix: drop that override, or use --init_from={ckpt['path']} to start a new run from its weights)")
        args["dropout"] = wanted["dropout"]
    elif os.path.isfile(os.path.join(init_from, "config.json")):   # a Hugging Face model directory
        from huggingface.convert import ConversionError, checkpoint_dict
        try:
            ckpt = checkpoint_dict(init_from, say=say)
        except ConversionError as e:
            raise TrainError(str(e)) from None
        args = resolve_model_args(config, explicit, base=ckpt["model_args"])
    else:
        ckpt = load_checkpoint(init_from, device)
        args = resolve_model_args(config, explicit, base=ckpt["model_args"])
    if init_from != "resume" and "vocab_size" not in explicit:
        args["vocab_size"] = meta_vocab
    if args["vocab_size"] < meta_vocab:
        raise TrainError(f"vocab_size {args['vocab_size']} is smaller than the dataset's {meta_vocab} tokens "
                         f"(fix: drop --vocab_size, it is read from meta.json)")
    return args, ckpt


# -----------------------------------------------------------------------------------------------
# logging: log.csv and loss.png

class CsvLog:
    """Appends one row per logged value to out_dir/log.csv (columns CSV_COLUMNS). A fresh run starts a
    new file; a resumed run keeps the rows from before the resume point."""

    def __init__(self, path, resume_iter=None):
        self.path = path
        rows = []
        if resume_iter is not None and os.path.exists(path):
            with open(path, newline="", encoding="utf-8") as f:
                for row in csv.DictReader(f):
                    try:
                        it = int(row["iter"])
                    except (KeyError, ValueError):
                        continue
                    if it < resume_iter or (it == resume_iter and row.get("kind") == "eval"):
                        rows.append(row)
        with atomic_open(path, "w") as f:
            writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(rows)
        self.file = open(path, "a", newline="", encoding="utf-8")
        self.writer = csv.DictWriter(self.file, fieldnames=CSV_COLUMNS, extrasaction="ignore")

    def write(self, **row):
        self.writer.writerow({k: _fmt(v) for k, v in row.items()})
        self.file.flush()

    def close(self):
        self.file.close()


def _fmt(v):
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, (list, tuple)):
        return " ".join(_fmt(x) for x in v)
    return v


def plot_losses(out_dir):
    """out_dir/loss.png from out_dir/log.csv (plots.plot_run: batch train loss, eval train/val losses)."""
    import plots
    return plots.plot_run(out_dir)


def format_eta(seconds):
    seconds = int(max(0, seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}"


# -----------------------------------------------------------------------------------------------
# Ctrl-C: finish the current iteration, save last.pt, exit cleanly

class StopRequest:
    """First SIGINT sets a flag that the loop checks at iteration boundaries (where the saved state is
    exactly resumable); a second one raises KeyboardInterrupt immediately. Only installed in the main
    thread and when nobody else handles SIGINT (e.g. not under a caller's own handler)."""

    def __init__(self, verbose):
        self.requested = False
        self.verbose = verbose
        self._previous = None

    def __enter__(self):
        if threading.current_thread() is threading.main_thread() and \
                signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def _handle(self, signum, frame):
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        if self.verbose:
            print("\ninterrupt: saving last.pt after this iteration (Ctrl-C again to stop at once)", flush=True)

    def __exit__(self, *exc):
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
        return False


# -----------------------------------------------------------------------------------------------
# training

def train(config, explicit=None, callback=None):
    """Train with `config` (DEFAULTS updated with the caller's values). explicit: the keys the user set
    (model keys among them override the variant; see configurator.model_args); None means the model keys
    that differ from GPTConfig's defaults. callback(event, info), if given, is
    called on every rank with event 'iter' (after each optimizer step), 'eval' or 'end'; info has
    iter_num, model (the raw module), rank and the logged values. Returns a summary dict."""
    unknown = sorted(set(config) - set(DEFAULTS))
    if unknown:
        raise TrainError(f"unknown config keys {unknown} (fix: see `python train.py --help` for the keys)")
    config = {**DEFAULTS, **config}
    if explicit is None:
        # called as a library without load_config: model keys that differ from GPTConfig's defaults
        # count as set by the user (so they win over a variant)
        gpt_defaults = gpt_config_defaults()
        explicit = {k for k, v in gpt_defaults.items() if config[k] != v}
    explicit = set(explicit)
    resolve_schedule(config)
    validate(config)
    if config["num_threads"] > 0:
        torch.set_num_threads(config["num_threads"])

    dist_env = distributed_env()
    owns_group = False
    if dist_env is not None:
        import torch.distributed as dist
        rank, local_rank, world = dist_env
        accum = config["gradient_accumulation_steps"]
        if accum % world != 0:
            raise TrainError(f"gradient_accumulation_steps={accum} must be divisible by the {world} DDP ranks; "
                             f"each rank runs gradient_accumulation_steps/{world} micro-steps "
                             f"(fix: --gradient_accumulation_steps={max(world, accum // world * world)})")
        device = resolve_device(config["device"], local_rank)
        if device.type == "cuda":
            torch.cuda.set_device(device)
        if not dist.is_initialized():
            dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
            owns_group = True
    else:
        rank, local_rank, world = 0, 0, 1
        device = resolve_device(config["device"])
    try:
        return Trainer(config, explicit, callback, device, rank, world).run()
    finally:
        if owns_group:
            torch.distributed.destroy_process_group()


class Trainer:
    """One training run. __init__ sets everything up in the order the log lines appear (data, model,
    optimizer, RNG, logging); run() is the loop: evaluate/checkpoint at iteration boundaries, then one
    optimizer step, then log. Every rank builds its own Trainer; only rank 0 prints and writes files."""

    def __init__(self, config, explicit, callback, device, rank, world):
        self.config, self.callback, self.device = config, callback, device
        self.rank, self.world = rank, world
        self.master, self.ddp = rank == 0, world > 1
        self.accum = config["gradient_accumulation_steps"]
        self.accum_per_rank = self.accum // world
        self.dtype = resolve_dtype(config["dtype"], device)
        config["device"], config["dtype"] = str(device), self.dtype
        vocab_size = self.setup_data()
        self.make_model(explicit, vocab_size)
        self.make_optimizer()
        self.wrap_model()
        self.seed_rng()
        self.setup_logging()
        self.setup_batches()
        self.reset_progress()

    def say(self, *args, **kwargs):
        if self.master:
            print(*args, **kwargs, flush=True)

    def notify(self, event, **info):
        if self.callback is not None:
            self.callback(event, dict(info, iter_num=self.iter_num, model=self.raw_model, rank=self.rank))

    # --- setup -----------------------------------------------------------------------------------

    def setup_data(self):
        """Prepare the dataset (rank 0 only, the others wait) and return its vocab size."""
        config = self.config
        self.data_dir = config["data_dir"] or os.path.join("data", config["dataset"])
        if self.master:
            ensure_data(config["dataset"], self.data_dir)
        if self.ddp:
            torch.distributed.barrier()
        config["data_dir"] = self.data_dir
        meta = load_meta(self.data_dir)
        if "vocab_size" not in meta:
            raise TrainError(f"{self.data_dir}/meta.json has no vocab_size (fix: re-run `python prepare.py`)")
        return int(meta["vocab_size"])

    def make_model(self, explicit, vocab_size):
        """raw_model on the device: fresh, resumed (weights, iter_num, best_val_loss) or initialized from
        another checkpoint."""
        config = self.config
        self.args, self.src_ckpt = model_args_for(config, explicit, vocab_size, self.device, self.say)
        config.update(self.args)   # the config saved with checkpoints shows the model that was really trained
        self.block_size, self.batch_size = self.args["block_size"], config["batch_size"]
        for split in ("train", "val"):
            n = split_length(self.data_dir, split)
            if n <= self.block_size:
                raise TrainError(f"{split} split of {self.data_dir} has {n} tokens, not enough for block_size="
                                 f"{self.block_size} (fix: --block_size={max(1, n // 2)} or a bigger dataset)")
        torch.manual_seed(config["seed"])   # same initial weights on every rank and every run with this seed
        self.raw_model = build_model(self.args)
        self.resuming = config["init_from"] == "resume"
        self.iter_num, self.best_val_loss = 0, float("inf")
        src = self.src_ckpt
        if src is not None and self.resuming:
            if src.get("optimizer") is None:
                raise TrainError(f"{src['path']} has weights only (e.g. from inherit.py), nothing to resume "
                                 f"(fix: --init_from={src['path']} to start a new run from it)")
            self.raw_model.load_state_dict(clean_state_dict(src["model"]))
            self.iter_num, self.best_val_loss = int(src["iter_num"]), float(src["best_val_loss"])
        elif src is not None:
            copied, total = init_from_checkpoint(self.raw_model, src["model"])
            self.say(f"initialized {copied}/{total} tensors from {src['path']}")
        self.raw_model.to(self.device)
        self.say(f"number of parameters: {self.raw_model.get_num_params(False) / 1e6:.2f}M "
                 f"(non-embedding: {self.raw_model.get_num_params(True) / 1e6:.2f}M)")
        self.say(f"depth: {self.raw_model.depth_summary()}")

    def make_optimizer(self):
        """optimizer, GradScaler (active for float16 only) and the autocast context for the dtype."""
        config, device = self.config, self.device
        self.optimizer = self.raw_model.configure_optimizers(config["weight_decay"], config["learning_rate"],
                                                             (config["beta1"], config["beta2"]), device.type)
        self.scaler = torch.amp.GradScaler(device.type, enabled=(self.dtype == "float16"))
        if self.resuming:
            self.optimizer.load_state_dict(self.src_ckpt["optimizer"])
            if self.scaler.is_enabled() and self.src_ckpt.get("scaler"):
                self.scaler.load_state_dict(self.src_ckpt["scaler"])
        ptdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[self.dtype]
        if ptdtype == torch.float32:
            self.autocast = contextlib.nullcontext
        else:
            def autocast():
                return torch.amp.autocast(device_type=device.type, dtype=ptdtype)
            self.autocast = autocast
        if device.type == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = True
            torch.backends.cudnn.allow_tf32 = True

    def wrap_model(self):
        """model: raw_model, compiled if asked (used for eval); train_model: model, in DDP if distributed."""
        self.model = self.raw_model
        if self.config["compile"]:
            self.say("compiling the model...")
            self.model = torch.compile(self.raw_model)
        self.train_model = self.model
        if self.ddp:
            from torch.nn.parallel import DistributedDataParallel
            device = self.device
            self.train_model = DistributedDataParallel(self.model,
                                                       device_ids=[device.index] if device.type == "cuda" else None)

    def seed_rng(self):
        # RNG for dropout: each rank its own stream; a resumed run continues the saved one
        seed, rank = self.config["seed"], self.rank
        torch.manual_seed(seed + rank)
        random.seed(seed + rank)
        np.random.seed((seed + rank) % 2**32)
        if self.resuming:
            saved = self.src_ckpt.get("rng_ranks")
            if saved and len(saved) == self.world:
                state = saved[rank]
            else:
                state = self.src_ckpt.get("rng") if rank == 0 else None
            if state is not None:
                restore_rng(state, self.device)
            else:
                torch.manual_seed(seed + rank + self.iter_num)

    def setup_logging(self):
        config = self.config
        self.tokens_per_iter = self.accum * self.world * self.batch_size * self.block_size
        self.say(f"tokens per iteration: {self.tokens_per_iter:,} ({self.accum} accum x {self.world} ranks x "
                 f"{self.batch_size} batch x {self.block_size} block); device {self.device}, dtype {self.dtype}, "
                 f"compile {config['compile']}")
        self.out_dir = config["out_dir"]
        self.csv_log = None
        if self.master:
            os.makedirs(self.out_dir, exist_ok=True)
            self.csv_log = CsvLog(os.path.join(self.out_dir, "log.csv"),
                                  resume_iter=self.iter_num if self.resuming else None)
        self.peak = peak_flops(self.device)

    def setup_batches(self):
        config = self.config
        self.eval_args = dict(data_dir=self.data_dir, eval_iters=config["eval_iters"], batch_size=self.batch_size,
                              block_size=self.block_size, seed=config["seed"], device=self.device,
                              autocast=self.autocast, rank=self.rank, world=self.world)
        self.train_path = split_path(self.data_dir, "train")
        self.segments = None
        if config["data_segments"]:
            self.segments = load_segments(config["data_segments"], split_length(self.data_dir, "train"),
                                          self.block_size)
            self.say(f"training windows start only at the {len(self.segments):,} segments of {config['data_segments']}")
        self.gen = torch.Generator()

    def reset_progress(self):
        self.history = []      # eval results
        self.window_ms = []    # ms/iter of each log window
        self.final = {}        # the last eval row
        self.last_train_loss = None
        self.t_start = time.time()
        self.eval_seconds, self.n_evals = 0.0, 0
        self.ema_ms = None
        self.running_mfu = None
        self.interrupted = False
        self.stepping = False   # True while optimizer.step() may have changed weights of iteration iter_num
        self.start_iter = self.iter_num
        # RNG state at the start of iteration iter_num (None: the live state is that boundary state)
        self.snapshot = rng_snapshot(self.device)
        self.evaluated = False  # whether the eval of iteration iter_num has run (saved as eval_done)

    def next_batch(self, it, micro):
        # the global micro-step index makes rank r of W see what a single process sees at micro r*k+micro
        self.gen.manual_seed(batch_seed(self.config["seed"], SPLIT_CODES["train"], it,
                                        self.rank * self.accum_per_rank + micro))
        return get_batch(self.train_path, self.batch_size, self.block_size, self.gen, self.device, self.segments)

    # --- checkpoints -----------------------------------------------------------------------------

    def checkpoint_dict(self, rng_state, rng_ranks, eval_done):
        return {
            "model": self.raw_model.state_dict(), "model_args": self.args, "optimizer": self.optimizer.state_dict(),
            "scaler": self.scaler.state_dict() if self.scaler.is_enabled() else None, "iter_num": self.iter_num,
            "best_val_loss": self.best_val_loss, "config": dict(self.config), "rng": rng_state,
            "rng_ranks": rng_ranks, "dataset": self.config["dataset"], "data_dir": self.data_dir,
            "eval_done": eval_done,   # the eval of iteration iter_num already ran (resume skips it)
        }

    def save_last(self, rng_state, also_best=False, gather=True, eval_done=False):
        """last.pt (and ckpt.pt) for the state at the start of iteration iter_num. Collective under DDP."""
        rng_ranks = None
        if self.ddp and gather:
            rng_ranks = [None] * self.world
            torch.distributed.all_gather_object(rng_ranks, rng_state)
        if not self.master:
            return
        last = os.path.join(self.out_dir, LAST_NAME)
        atomic_save(self.checkpoint_dict(rng_state, rng_ranks, eval_done), last)
        if also_best:
            atomic_copy(last, os.path.join(self.out_dir, CKPT_NAME))
            self.say(f"saved {CKPT_NAME} and {LAST_NAME} to {self.out_dir}")

    # --- the loop --------------------------------------------------------------------------------

    def run(self):
        self.X, self.Y = self.next_batch(self.iter_num, 0)
        self.t_window, self.window_iters = time.time(), 0
        self.stop = StopRequest(verbose=self.master)
        try:
            with self.stop:
                self.loop()
        except KeyboardInterrupt:
            self.save_after_keyboard_interrupt()
        if self.interrupted and self.stepping is not None:
            self.say(f"interrupted at iteration {self.iter_num}: saved {os.path.join(self.out_dir, LAST_NAME)}; "
                     f"continue with --init_from=resume")
        if self.master:
            self.csv_log.close()
            plot_losses(self.out_dir)
        return self.summarize()

    def loop(self):
        config = self.config
        while True:
            self.snapshot = rng_snapshot(self.device)
            self.evaluated = False
            last_iter = self.iter_num >= config["max_iters"]
            lr = self.set_lr()
            if self.eval_due(last_iter):
                self.evaluate(lr)
            if config["eval_only"] or last_iter:
                return
            # Ctrl-C: stop at this boundary (under DDP the ranks vote at log steps instead)
            if self.stop.requested and not self.ddp:
                self.save_last(self.snapshot, eval_done=self.evaluated)
                self.interrupted = True
                return
            it = self.iter_num
            loss_sum = self.train_step()
            if it % config["log_interval"] == 0:
                stop_votes = self.log_progress(it, lr, loss_sum)
                if self.ddp and stop_votes > 0:
                    self.save_last(rng_snapshot(self.device))
                    self.interrupted = True
                    return
            self.notify("iter", loss=loss_sum.item() / self.accum_per_rank if self.callback else None, lr=lr)

    def set_lr(self):
        config = self.config
        lr = get_lr(self.iter_num, config["learning_rate"], config["min_lr"], config["warmup_iters"],
                    config["lr_decay_iters"], config["decay_lr"])
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        return lr

    def eval_due(self, last_iter):
        config = self.config
        # the first iteration of a resumed run was already evaluated before the checkpoint was saved
        fresh_resume = (self.resuming and self.iter_num == self.start_iter and self.src_ckpt.get("eval_done", False)
                        and not (last_iter or config["eval_only"]))
        return (self.iter_num % config["eval_interval"] == 0 or last_iter or config["eval_only"]) and not fresh_resume

    def evaluate(self, lr):
        """Train/val loss at the start of iteration iter_num: print, log, checkpoint, notify."""
        t_eval = time.time()
        losses = estimate_loss(self.model, splits=("train", "val"), **self.eval_args)
        self.say(f"step {self.iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
        row = dict(iter=self.iter_num, kind="eval", loss=losses["train"], val_loss=losses["val"], lr=lr,
                   elapsed_s=time.time() - self.t_start)
        if getattr(self.raw_model.config, "n_branches", 1) > 1:
            row.update(self.evaluate_heaviest_branch())
        self.history.append(row)
        self.final = row
        if self.master:
            self.csv_log.write(**row)
        improved = losses["val"] < self.best_val_loss
        self.best_val_loss = min(self.best_val_loss, losses["val"])
        if self.iter_num > 0 and not self.config["eval_only"]:
            self.save_last(self.snapshot, also_best=improved or self.config["always_save_checkpoint"], eval_done=True)
        self.evaluated = True
        self.notify("eval", **row)
        self.eval_seconds += time.time() - t_eval
        self.n_evals += 1
        self.t_window, self.window_iters = time.time(), 0   # ms/iter excludes eval time

    def evaluate_heaviest_branch(self):
        """pgpt: val loss with only the branch of largest weight kept, and the branch weights."""
        raw_model = self.raw_model
        raw_model.keep_branch = raw_model.heaviest_branch()
        try:
            heavy = estimate_loss(self.model, splits=("val",), **self.eval_args)["val"]
        finally:
            kept, raw_model.keep_branch = raw_model.keep_branch, None
        weights = raw_model.branch_weights()
        weights = [float(w) for w in (weights.tolist() if torch.is_tensor(weights) else weights)]
        self.say(f"step {self.iter_num}: val loss (heaviest branch only) {heavy:.4f} (branch {kept}), "
                 f"branch weights {' '.join(f'{w:.4f}' for w in weights)}")
        return dict(val_loss_heaviest=heavy, branch_weights=weights)

    def train_step(self):
        """One optimizer step: accum_per_rank micro-steps, gradients synced on the last. Returns the summed
        micro-step losses; iter_num is advanced."""
        loss_sum = torch.zeros((), device=self.device)
        for micro in range(self.accum_per_rank):
            last_micro = micro == self.accum_per_rank - 1
            sync = contextlib.nullcontext() if (not self.ddp or last_micro) else self.train_model.no_sync()
            with sync:
                with self.autocast():
                    _, loss = self.train_model(self.X, self.Y)
                loss_sum += loss.detach().float()
                # fetch the next batch while the GPU works on this one
                if last_micro:
                    self.X, self.Y = self.next_batch(self.iter_num + 1, 0)
                else:
                    self.X, self.Y = self.next_batch(self.iter_num, micro + 1)
                self.scaler.scale(loss / self.accum_per_rank).backward()
        if self.config["grad_clip"] > 0:
            self.scaler.unscale_(self.optimizer)
            torch.nn.utils.clip_grad_norm_(self.raw_model.parameters(), self.config["grad_clip"])
        self.stepping = True
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        self.iter_num += 1
        self.stepping = False
        self.snapshot = None   # from here to the next loop top the live RNG state is the boundary state
        self.evaluated = False
        self.window_iters += 1
        return loss_sum

    def log_progress(self, it, lr, loss_sum):
        """Print and log iteration `it` (loss averaged over ranks, timing, eta, mfu). Returns how many ranks
        asked to stop (Ctrl-C), summed in the same all_reduce as the loss."""
        stop_requested = torch.tensor(float(self.stop.requested), device=self.device)
        stats = torch.stack([loss_sum / self.accum_per_rank, stop_requested])
        if self.ddp:
            torch.distributed.all_reduce(stats)
        lossf, stop_votes = stats[0].item() / self.world, stats[1].item()
        now = time.time()
        ms = (now - self.t_window) * 1000 / max(1, self.window_iters)
        self.t_window, self.window_iters = now, 0
        self.window_ms.append(ms)
        tok_s = self.tokens_per_iter / (ms / 1000)
        eta = self.estimate_eta(ms)
        mfu = self.update_mfu(ms)
        self.say(f"iter {it}: loss {lossf:.4f}, lr {lr:.2e}, {ms:.2f} ms/iter, {tok_s:,.0f} tok/s, "
                 f"eta {format_eta(eta)}" + (f", mfu {mfu * 100:.2f}%" if mfu is not None else ""))
        row = dict(iter=it, kind="train", loss=lossf, lr=lr, ms_per_iter=ms, tokens_per_s=tok_s,
                   mfu=mfu, elapsed_s=now - self.t_start)
        if self.master:
            self.csv_log.write(**row)
        self.last_train_loss = lossf
        return stop_votes

    def estimate_eta(self, ms):
        """Seconds left: remaining iterations at the smoothed ms/iter plus the remaining evals."""
        ema = self.ema_ms
        self.ema_ms = ms if ema is None or len(self.window_ms) <= 2 else 0.9 * ema + 0.1 * ms
        max_iters, eval_interval = self.config["max_iters"], self.config["eval_interval"]
        remaining_evals = max(0, (max_iters - self.iter_num) // eval_interval + 1)
        return ((max_iters - self.iter_num) * self.ema_ms / 1000
                + remaining_evals * self.eval_seconds / max(1, self.n_evals))

    def update_mfu(self, ms):
        """Smoothed model FLOPs utilization, or None (unknown peak, or still warming up)."""
        if self.peak is None or len(self.window_ms) <= 2:
            return None
        m = self.raw_model.estimate_mfu(self.batch_size * self.accum_per_rank, ms / 1000, self.peak)
        self.running_mfu = m if self.running_mfu is None else 0.9 * self.running_mfu + 0.1 * m
        return self.running_mfu

    def save_after_keyboard_interrupt(self):
        # raised mid-iteration (second Ctrl-C, or by a callback): unless the optimizer was mid-step, the
        # weights are those at the start of iteration iter_num and `snapshot` holds that RNG state
        self.interrupted = True
        if self.stepping:
            self.say("\ninterrupted during an optimizer step: last.pt not updated (the previous one is kept)")
            self.stepping = None
        else:
            snapshot = self.snapshot if self.snapshot is not None else rng_snapshot(self.device)
            self.save_last(snapshot, gather=False, eval_done=self.evaluated)

    # --- the end ---------------------------------------------------------------------------------

    def summarize(self):
        train_time = time.time() - self.t_start
        steady = self.window_ms[1:] or self.window_ms
        ms_per_iter = float(np.median(steady)) if steady else None
        summary = {
            "best_val_loss": self.best_val_loss,
            "final_train_loss": self.final.get("loss"),
            "final_val_loss": self.final.get("val_loss"),
            "final_val_loss_heaviest": self.final.get("val_loss_heaviest"),
            "last_train_loss": self.last_train_loss,
            "iter_num": self.iter_num,
            "ms_per_iter": ms_per_iter,
            "tokens_per_s": self.tokens_per_iter / (ms_per_iter / 1000) if steady else None,
            "train_time_s": train_time,
            "eval_time_s": self.eval_seconds,
            "num_params": self.raw_model.get_num_params(False),
            "num_params_non_embedding": self.raw_model.get_num_params(True),
            "model_args": dict(self.args),
            "out_dir": self.out_dir,
            "interrupted": self.interrupted,
            "evals": self.history,
        }
        self.notify("end", **{k: v for k, v in summary.items() if k != "evals"})
        if not self.interrupted:
            self.say(f"done: best val loss {self.best_val_loss:.4f}, {self.iter_num} iterations in "
                     f"{format_eta(train_time)}")
        return summary


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    try:
        config, explicit = load_config(DEFAULTS, argv)
        summary = train(config, explicit)
    except (ConfigError, TrainError, CheckpointError) as e:
        raise SystemExit(f"error: {e}")
    except (torch.OutOfMemoryError, RuntimeError) as e:
        if not isinstance(e, torch.OutOfMemoryError) and "can't allocate memory" not in str(e):
            raise
        raise SystemExit("error: out of memory (fix: lower --batch_size and raise --gradient_accumulation_steps, "
                         "or lower --block_size)") from None
    if summary["interrupted"]:
        raise SystemExit(130)
    return summary


if __name__ == "__main__":
    main(sys.argv[1:])
