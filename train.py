"""
Train a GPT variant on a tokenized dataset (nanoGPT-style, single process or DDP).

    python train.py config/gpt_shakespeare_cpu.py                 # ~3 min on a laptop CPU
    python train.py config/lgpt_shakespeare.py                    # paper 004's recipe, for a GPU
    python train.py config/gpt_shakespeare_cpu.py --init_from=resume --max_iters=3000
    torchrun --standalone --nproc_per_node=8 train.py config/gpt_shakespeare.py

Every key of DEFAULTS below (and every GPTConfig field, e.g. --n_layer=4) can be set in a config file or
on the command line; `python train.py --help` lists them.

out_dir receives ckpt.pt (best val loss), last.pt (latest, resumable), log.csv (every logged value) and
loss.png. Ctrl-C, or SIGTERM from a cluster scheduler, finishes the current iteration, saves last.pt and
exits; --init_from=resume then continues exactly as if never stopped (same batches, same dropout masks,
same weights). A second Ctrl-C stops at once; caught mid-step, it keeps the last.pt saved before.

Training batches are a function of (seed, iteration, micro-step) only, and evaluation uses the same fixed
batches every time (runfiles/dataset.py), so val losses of different runs are compared on identical data.
train(config) is importable: compare.py calls it in-process and reads the summary dict it returns.
"""

import contextlib
import math
import os
import random
import signal
import sys
import threading
import time

import numpy as np
import torch

from configurator import UserError, autocast, gpt_config_defaults, load_config, resolve_device, resolve_dtype
from configurator import model_args as resolve_model_args
from huggingface.convert import checkpoint_dict, is_hf_dir
from runfiles.checkpoint import (CKPT_NAME, LAST_NAME, atomic_copy, atomic_save, build_model, check_finite,
                                 check_out_dir, clean_state_dict, load_checkpoint, load_matching_weights,
                                 remove_stale_temp_files, restore_rng, rng_state)
from runfiles.dataset import (SPLIT_CODES, batch_seed, default_data_dir, get_batch, load_meta, load_segments,
                              split_path, split_tokens, tokenizer_id)
from runfiles.plots import plot_run
from runfiles.runlog import CsvLog, format_duration

TRAIN_DEFAULTS = dict(
    # I/O
    out_dir="out",
    eval_interval=250,
    log_interval=10,
    eval_iters=200,
    eval_only=False,              # evaluate once and exit
    always_save_checkpoint=False,  # write ckpt.pt at every eval, not only when val loss improves
    init_from="scratch",          # 'scratch' | 'resume' (out_dir/last.pt) | a checkpoint or a Hugging Face model
                                  # directory (weights only)
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
)
DEFAULTS = {**TRAIN_DEFAULTS, **{k: v for k, v in gpt_config_defaults().items() if k not in TRAIN_DEFAULTS}}
PEAK_FLOPS = {"H100": 989e12, "H200": 989e12, "A100": 312e12}   # dense bf16, for the MFU print
PROGRESS_EVERY_S = 15   # a long evaluation prints a progress line this often


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


def check_config(c):
    """Fill the schedule's None defaults and refuse values that make no sense, naming the key. Runs
    before anything is read or written."""
    def need(ok, key, rule, fix):
        if not ok:
            raise UserError(f"{key} must be {rule}, got {c[key]!r} (fix: {fix})")

    def integer(v):
        return isinstance(v, int) and not isinstance(v, bool)

    def number(v):
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)

    for key in ("batch_size", "eval_interval", "log_interval", "eval_iters", "gradient_accumulation_steps"):
        need(integer(c[key]) and c[key] >= 1, key, "an integer >= 1", f"--{key}=1 or more")
    for key in ("max_iters", "num_threads"):
        need(integer(c[key]) and c[key] >= 0, key, "an integer >= 0", f"--{key}=0 or more")
    need(number(c["learning_rate"]) and c["learning_rate"] > 0, "learning_rate", "> 0", "--learning_rate=1e-3")
    need(number(c["weight_decay"]) and c["weight_decay"] >= 0, "weight_decay", ">= 0", "--weight_decay=0.1")
    for key in ("beta1", "beta2"):
        need(number(c[key]) and 0 <= c[key] < 1, key, "in [0, 1)", f"--{key}={DEFAULTS[key]}")
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
    need(c["dataset"] != "", "dataset", "a dataset name", "--dataset=shakespeare_char")
    need(c["out_dir"] != "", "out_dir", "a folder", "--out_dir=out")
    need(c["init_from"] in ("scratch", "resume") or os.path.isfile(c["init_from"]) or is_hf_dir(c["init_from"]),
         "init_from", "'scratch', 'resume', an existing checkpoint file or a Hugging Face model directory",
         "--init_from=scratch|resume|path/to/ckpt.pt|path/to/hf-dir")


def distributed_env():
    """(rank, local_rank, world_size) from torchrun's environment, or None when not launched by it."""
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        return None
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    return rank, int(os.environ.get("LOCAL_RANK", rank)), world


def ensure_data(dataset, data_dir):
    """Run prepare.prepare(dataset) into data_dir when it has not been prepared yet (first run)."""
    if all(os.path.exists(os.path.join(data_dir, name)) for name in ("train.bin", "val.bin", "meta.json")):
        return
    print(f"dataset '{dataset}' is not prepared in {data_dir}: running prepare.prepare('{dataset}')", flush=True)
    import prepare
    try:
        prepare.prepare(dataset, out_dir=data_dir)
    except UserError as e:
        raise UserError(f"preparing dataset '{dataset}' failed: {e}") from None


def model_args_for(config, explicit, meta, device, say):
    """(model_args, checkpoint or None) for init_from = scratch | resume | <path>. Refuses a checkpoint of
    another tokenizer, with non-finite weights, or (resume) of another architecture."""
    init_from, ckpt = config["init_from"], None
    if init_from == "scratch":
        args = resolve_model_args(config, explicit, vocab_size=meta["vocab_size"])
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
        wanted = resolve_model_args(config, explicit, base=args)
        wanted["vocab_size"] = wanted["vocab_size"] if "vocab_size" in explicit else args["vocab_size"]
        for key in sorted(k for k in wanted if k != "dropout" and wanted[k] != args.get(k)):
            raise UserError(f"resume: {key}={wanted[key]!r} differs from the checkpoint's {key}={args.get(key)!r} "
                            f"(fix: drop that override, or start a new run from its weights: --init_from={ckpt['path']} "
                            f"--allow_partial_init=True)")
        args["dropout"] = wanted["dropout"]
    else:
        ckpt = checkpoint_dict(init_from, say=say) if is_hf_dir(init_from) else load_checkpoint(init_from, device)
        args = resolve_model_args(config, explicit, base=ckpt["model_args"], vocab_size=meta["vocab_size"])
    if args["vocab_size"] < meta["vocab_size"]:
        raise UserError(f"vocab_size {args['vocab_size']} is smaller than the dataset's {meta['vocab_size']} tokens "
                        f"(fix: drop --vocab_size, it is read from meta.json)")
    if ckpt is not None:
        check_finite(ckpt["model"], ckpt["path"])
        if ckpt.get("tokenizer_id") not in (None, tokenizer_id(meta)):   # older checkpoints record none
            raise UserError(f"{ckpt['path']} was trained with another tokenizer than {config['data_dir']}'s (its "
                            f"dataset: {ckpt.get('dataset')}) (fix: --dataset/--data_dir of that run, or --init_from=scratch)")
    return args, ckpt


@torch.no_grad()
def estimate_loss(model, splits, data_dir, eval_iters, batch_size, block_size, seed, device, dtype,
                  rank=0, world=1, say=print, stop=None):
    """Mean loss over eval_iters fixed batches per split (the same batches at every call). Under DDP each
    rank evaluates every world-th batch and the sums are all-reduced. Long evaluations print progress.
    Raises KeyboardInterrupt once stop() is true: evaluating changes no state, so the caller can save at once."""
    was_training = model.training
    model.eval()
    gen, out = torch.Generator(), {}
    t0 = shown = time.time()
    for split in splits:
        losses = torch.zeros(eval_iters, device=device)
        for k in range(rank, eval_iters, world):
            gen.manual_seed(batch_seed(seed, 1000 + SPLIT_CODES.get(split, 9), k))
            x, y = get_batch(split_path(data_dir, split), batch_size, block_size, gen, device)
            with autocast(device, dtype):
                losses[k] = model(x, y)[1].float()
            if stop is not None and stop():
                model.train(was_training)
                raise KeyboardInterrupt
            if time.time() - shown > PROGRESS_EVERY_S:
                say(f"  evaluating: {split} batch {k + 1}/{eval_iters}, {time.time() - t0:.0f} s")
                shown = time.time()
        if world > 1:
            torch.distributed.all_reduce(losses)
        out[split] = losses.mean().item()
    model.train(was_training)
    return out


def time_estimate_note(config, model, x, y, device, dtype, micro_steps):
    """On a CPU: time a forward+backward of one sequence (the second call: the first pays one-time costs),
    scale it to the run and, when that is over half an hour, say so in one line (naming a CPU twin)."""
    with torch.random.fork_rng(devices=[]):   # the probe must not move the dropout RNG
        for _ in range(2):
            t0 = time.time()
            with autocast(device, dtype):
                loss = model(x[:1], y[:1])[1]
            loss.backward()
            step_s = (time.time() - t0) * len(x)
    model.zero_grad(set_to_none=True)
    evals = config["max_iters"] // config["eval_interval"] + 1
    total_s = step_s * (micro_steps * config["max_iters"] + evals * 2 * config["eval_iters"] / 3)
    if total_s < 1800:
        return None
    fix = (f"this is a GPU recipe; its CPU twin is `python train.py {config['cpu_twin']}`" if config["cpu_twin"]
           else "a GPU, or a smaller model / fewer --max_iters")
    return (f"note: this run needs about {format_duration(total_s)} on this CPU (~{step_s:.1f} s per micro-step, "
            f"{config['max_iters']} iterations) (fix: {fix})")


class StopRequest:
    """Ctrl-C (SIGINT) or SIGTERM asks the loop to stop at the next iteration boundary, where the state saved
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


def train(config, explicit=None, callback=None):
    """Train with `config` (DEFAULTS updated with the caller's values). explicit: the keys the user set
    (model keys among them override the variant; see configurator.model_args); None means the model keys
    that differ from GPTConfig's defaults. callback(event, info), if given, is called on every rank with
    event 'iter' (after each optimizer step), 'eval' or 'end'; info has iter_num, model (the raw module),
    rank and the logged values. Returns a summary dict."""
    unknown = sorted(set(config) - set(DEFAULTS))
    if unknown:
        raise UserError(f"unknown config keys {unknown} (fix: see `python train.py --help` for the keys)")
    config = {**DEFAULTS, **config}
    if explicit is None:   # called as a library: model keys that differ from GPTConfig's defaults win over a variant
        explicit = {k for k, v in gpt_config_defaults().items() if config[k] != v}
    check_config(config)
    dist_env = distributed_env()
    if dist_env is None:
        return run(config, set(explicit), callback, resolve_device(config["device"]))
    rank, local_rank, world = dist_env
    accum = config["gradient_accumulation_steps"]
    if accum % world != 0:
        raise UserError(f"gradient_accumulation_steps={accum} must be divisible by the {world} DDP ranks; each "
                        f"rank runs gradient_accumulation_steps/{world} micro-steps "
                        f"(fix: --gradient_accumulation_steps={max(world, accum // world * world)})")
    device = resolve_device(config["device"], local_rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    owns_group = not torch.distributed.is_initialized()
    if owns_group:
        torch.distributed.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    try:
        return run(config, set(explicit), callback, device, rank, world)
    finally:
        if owns_group:
            torch.distributed.destroy_process_group()


def run(config, explicit, callback, device, rank=0, world=1):
    """One training run: setup, the loop, the summary. Every rank runs it; only rank 0 prints and writes."""
    master, ddp = rank == 0, world > 1

    def say(message):
        if master:
            print(message, flush=True)

    accum = config["gradient_accumulation_steps"] // world   # micro-steps per iteration on this rank
    dtype = resolve_dtype(config["dtype"], device)
    config.update(device=str(device), dtype=dtype)
    if config["num_threads"] > 0:
        torch.set_num_threads(config["num_threads"])
    out_dir = config["out_dir"]

    # --- data: prepared on first use (by rank 0; the others wait), then checked -----------------------
    data_dir = config["data_dir"] = default_data_dir(config)
    if master:
        ensure_data(config["dataset"], data_dir)
    if ddp:
        torch.distributed.barrier()
    meta = load_meta(data_dir)

    # --- model: fresh, resumed, or initialized from another checkpoint's weights ----------------------
    args, ckpt = model_args_for(config, explicit, meta, device, say)
    config.update(args)   # the config saved with checkpoints shows the model that was really trained
    block_size, batch_size = args["block_size"], config["batch_size"]
    n_train = split_tokens(data_dir, "train", args["vocab_size"], block_size)
    split_tokens(data_dir, "val", args["vocab_size"], block_size)
    segments = None
    if config["data_segments"]:
        segments = load_segments(config["data_segments"], n_train, block_size)
        say(f"training windows start only at the {len(segments):,} segments of {config['data_segments']}")
    torch.manual_seed(config["seed"])   # the same initial weights on every rank and in every run with this seed
    raw_model = build_model(args)
    resuming = config["init_from"] == "resume"
    iter_num, best_val_loss = (int(ckpt["iter_num"]), float(ckpt["best_val_loss"])) if resuming else (0, math.inf)
    if resuming:
        raw_model.load_state_dict(clean_state_dict(ckpt["model"]))
    elif ckpt is not None:
        copied, total = load_matching_weights(raw_model, ckpt["model"], ckpt["path"], config["allow_partial_init"])
        say(f"initialized {copied}/{total} tensors from {ckpt['path']}")
    raw_model.to(device)
    optimizer = raw_model.configure_optimizers(config["weight_decay"], config["learning_rate"],
                                               (config["beta1"], config["beta2"]), device.type)
    scaler = torch.amp.GradScaler(device.type, enabled=(dtype == "float16"))   # loss scaling for fp16 only
    if resuming:
        optimizer.load_state_dict(ckpt["optimizer"])
        if scaler.is_enabled() and ckpt.get("scaler"):
            scaler.load_state_dict(ckpt["scaler"])
    check_out_dir(out_dir)

    # --- every input is checked: only from here on do files in out_dir change -------------------------
    if master:
        os.makedirs(out_dir, exist_ok=True)
        n_stale, stale_bytes = remove_stale_temp_files(out_dir, (CKPT_NAME, LAST_NAME, "log.csv", "loss.png"))
        if n_stale:
            say(f"removed {n_stale} temporary file(s) ({stale_bytes / 1e6:,.1f} MB) left in {out_dir} by an "
                f"interrupted save")
        csv_log = CsvLog(os.path.join(out_dir, "log.csv"), keep_before=iter_num if resuming else None)
    say(f"number of parameters: {raw_model.get_num_params(False) / 1e6:.2f}M "
        f"(non-embedding: {raw_model.get_num_params(True) / 1e6:.2f}M)")
    say(f"depth: {raw_model.depth_summary()}")
    tokens_per_iter = accum * world * batch_size * block_size
    say(f"tokens per iteration: {tokens_per_iter:,} ({accum} accum x {world} ranks x {batch_size} batch x "
        f"{block_size} block); device {device}, dtype {dtype}, compile {config['compile']}")
    train_gen = torch.Generator()

    def next_batch(it, micro):
        # the global micro-step index makes rank r of W see what one process sees at micro-step r*accum+micro
        train_gen.manual_seed(batch_seed(config["seed"], SPLIT_CODES["train"], it, rank * accum + micro))
        return get_batch(split_path(data_dir, "train"), batch_size, block_size, train_gen, device, segments)

    X, Y = next_batch(iter_num, 0)   # the first batch; each step fetches the next one while the GPU works
    if device.type == "cpu" and master:
        note = time_estimate_note(config, raw_model, X, Y, device, dtype, accum)
        if note:
            say(note)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    # model (compiled if asked) evaluates; train_model (model in DDP when distributed) trains
    model = torch.compile(raw_model) if config["compile"] else raw_model
    train_model = model
    if ddp:
        from torch.nn.parallel import DistributedDataParallel
        train_model = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    # the RNG (dropout): each rank its own stream; a resumed run continues the saved one
    torch.manual_seed(config["seed"] + rank)
    random.seed(config["seed"] + rank)
    np.random.seed((config["seed"] + rank) % 2**32)
    if resuming:
        saved = ckpt["rng_ranks"][rank] if ckpt.get("rng_ranks") and len(ckpt["rng_ranks"]) == world else \
            ckpt.get("rng") if master else None
        if saved is not None:
            restore_rng(saved, device)
        else:
            torch.manual_seed(config["seed"] + rank + iter_num)

    def evaluate(splits):   # Ctrl-C / SIGTERM cut it short (single process only: DDP ranks all finish it)
        return estimate_loss(model, splits, data_dir, config["eval_iters"], batch_size, block_size, config["seed"],
                             device, dtype, rank, world, say, stop=None if ddp else lambda: stop.requested)

    def notify(event, **info):
        if callback is not None:
            callback(event, dict(info, iter_num=iter_num, model=raw_model, rank=rank))

    def save_last(best=False, gather=True):
        """last.pt (and ckpt.pt) for the state at the start of iteration iter_num. Collective under DDP."""
        nonlocal saved_iter
        if not all(torch.isfinite(p).all() for p in raw_model.parameters()):
            raise diverged("the weights are not finite", iter_num)
        rng = rng_state(device)
        rng_ranks = None
        if ddp and gather:
            rng_ranks = [None] * world
            torch.distributed.all_gather_object(rng_ranks, rng)
        if master:
            atomic_save({"model": raw_model.state_dict(), "model_args": args, "optimizer": optimizer.state_dict(),
                         "scaler": scaler.state_dict() if scaler.is_enabled() else None, "iter_num": iter_num,
                         "best_val_loss": best_val_loss, "config": dict(config), "rng": rng, "rng_ranks": rng_ranks,
                         "dataset": config["dataset"], "data_dir": data_dir, "tokenizer_id": tokenizer_id(meta)},
                        os.path.join(out_dir, LAST_NAME))
            if best:
                atomic_copy(os.path.join(out_dir, LAST_NAME), os.path.join(out_dir, CKPT_NAME))
                say(f"saved {CKPT_NAME} and {LAST_NAME} to {out_dir}")
        saved_iter = iter_num

    def kept():
        return f"{LAST_NAME} keeps iteration {saved_iter}" if saved_iter is not None else "nothing was saved"

    def diverged(what, it):
        return UserError(f"{what} at iteration {it}: training diverged; {kept()} (fix: lower --learning_rate "
                         f"(now {config['learning_rate']:g}) or lengthen --warmup_iters (now {config['warmup_iters']}))")

    # --- the training loop ------------------------------------------------------------------------------
    # Each pass starts at an iteration boundary: the weights and optimizer hold the state after iter_num
    # steps, and the RNG (dropout) is exactly where step iter_num-1 left it. State saved there resumes
    # exactly, so evaluation, saving and stopping happen only there. The one flag `in_step` marks the rest
    # (from the first forward to iter_num += 1): an interrupt in there saves nothing.
    peak = next((f for name, f in PEAK_FLOPS.items() if name in torch.cuda.get_device_name(device)), None) \
        if device.type == "cuda" else None
    saved_iter = iter_num if resuming and ckpt["path"].endswith(LAST_NAME) else None   # what last.pt holds
    history, final, last_train_loss, window_ms = [], {}, None, []
    ema_ms = running_mfu = None
    t_start = t_window = time.time()
    window_iters, eval_seconds, n_evals = 0, 0.0, 0
    in_step = interrupted = hard_stop = False
    with StopRequest(say) as stop:
        try:
            while True:
                lr = get_lr(iter_num, config["learning_rate"], config["min_lr"], config["warmup_iters"],
                            config["lr_decay_iters"], config["decay_lr"])
                for group in optimizer.param_groups:
                    group["lr"] = lr
                last_iter = iter_num >= config["max_iters"]

                # evaluate on fixed batches, log, and save last.pt (and ckpt.pt when val loss improved)
                if iter_num % config["eval_interval"] == 0 or last_iter or config["eval_only"]:
                    t_eval = time.time()
                    losses = evaluate(("train", "val"))
                    say(f"step {iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
                    if not all(math.isfinite(v) for v in losses.values()):
                        raise diverged(f"the eval loss is {losses['val']}", iter_num)
                    row = dict(iter=iter_num, kind="eval", loss=losses["train"], val_loss=losses["val"], lr=lr,
                               elapsed_s=time.time() - t_start)
                    if raw_model.config.n_branches > 1:   # pgpt: also the val loss of the heaviest branch alone
                        raw_model.keep_branch = raw_model.heaviest_branch()
                        try:
                            heavy = evaluate(("val",))["val"]
                        finally:
                            branch, raw_model.keep_branch = raw_model.keep_branch, None
                        weights = [float(w) for w in raw_model.branch_weights().tolist()]
                        say(f"step {iter_num}: val loss (heaviest branch only) {heavy:.4f} (branch {branch}), "
                            f"branch weights {' '.join(f'{w:.4f}' for w in weights)}")
                        row.update(val_loss_heaviest=heavy, branch_weights=weights)
                    history.append(row)
                    final = row
                    if master:
                        csv_log.write(**row)
                    improved = losses["val"] < best_val_loss
                    best_val_loss = min(best_val_loss, losses["val"])
                    if iter_num > 0 and not config["eval_only"]:
                        save_last(best=improved or config["always_save_checkpoint"])
                    notify("eval", **row)
                    eval_seconds, n_evals = eval_seconds + time.time() - t_eval, n_evals + 1
                    t_window, window_iters = time.time(), 0   # ms/iter leaves out evaluation time
                if config["eval_only"] or last_iter:
                    break
                # Ctrl-C / SIGTERM: stop here. Under DDP all ranks must stop at the same boundary, so they
                # vote at log steps instead (below)
                if stop.requested and not ddp:
                    interrupted = True
                    break

                # one optimizer step: accum micro-batches, gradients synced (DDP) only on the last one
                in_step = True
                loss_sum = torch.zeros((), device=device)
                for micro in range(accum):
                    sync = contextlib.nullcontext() if not ddp or micro == accum - 1 else train_model.no_sync()
                    with sync:
                        with autocast(device, dtype):
                            loss = train_model(X, Y)[1]
                        loss_sum += loss.detach().float()
                        X, Y = next_batch(iter_num, micro + 1) if micro < accum - 1 else next_batch(iter_num + 1, 0)
                        scaler.scale(loss / accum).backward()
                if config["grad_clip"] > 0:
                    scaler.unscale_(optimizer)
                    torch.nn.utils.clip_grad_norm_(raw_model.parameters(), config["grad_clip"])
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad(set_to_none=True)
                it, iter_num = iter_num, iter_num + 1
                in_step = False
                window_iters += 1

                # log: loss averaged over ranks (one all_reduce, which also carries the ranks' stop votes),
                # speed, time left (smoothed ms/iter plus the evaluations still to come) and MFU
                if it % config["log_interval"] == 0:
                    stats = torch.stack([loss_sum / accum, torch.tensor(float(stop.requested), device=device)])
                    if ddp:
                        torch.distributed.all_reduce(stats)
                    lossf, stop_votes = stats[0].item() / world, stats[1].item()
                    if not math.isfinite(lossf):
                        raise diverged(f"the training loss is {lossf}", it)
                    now = time.time()
                    ms = (now - t_window) * 1000 / window_iters
                    t_window, window_iters = now, 0
                    window_ms.append(ms)
                    ema_ms = ms if len(window_ms) <= 2 else 0.9 * ema_ms + 0.1 * ms   # the first windows warm up
                    evals_left = (config["max_iters"] - iter_num) // config["eval_interval"] + 1
                    eta = (config["max_iters"] - iter_num) * ema_ms / 1000 + evals_left * eval_seconds / max(1, n_evals)
                    mfu = None
                    if peak is not None and len(window_ms) > 2:
                        m = raw_model.estimate_mfu(batch_size * accum, ms / 1000, peak)
                        running_mfu = mfu = m if running_mfu is None else 0.9 * running_mfu + 0.1 * m
                    tok_s = tokens_per_iter / (ms / 1000)
                    say(f"iter {it}: loss {lossf:.4f}, lr {lr:.2e}, {ms:.2f} ms/iter, {tok_s:,.0f} tok/s, "
                        f"eta {format_duration(eta)}" + (f", mfu {mfu * 100:.2f}%" if mfu is not None else ""))
                    if master:
                        csv_log.write(iter=it, kind="train", loss=lossf, lr=lr, ms_per_iter=ms, tokens_per_s=tok_s,
                                      mfu=mfu, elapsed_s=now - t_start)
                    last_train_loss = lossf
                    if stop_votes > 0:
                        interrupted = True
                        break
                notify("iter", loss=loss_sum.item() / accum if callback else None, lr=lr)
        except KeyboardInterrupt:   # a second Ctrl-C, or raised by a callback
            interrupted = hard_stop = True
        if interrupted and in_step:
            say(f"\nstopped during iteration {iter_num}: {kept()}")
        elif interrupted:
            if saved_iter != iter_num:
                save_last(gather=not hard_stop)   # after a hard stop the other DDP ranks may be gone
            say(f"interrupted at iteration {iter_num}: saved {os.path.join(out_dir, LAST_NAME)}; "
                f"continue with --init_from=resume")

    # --- the end: loss.png and the summary -------------------------------------------------------------
    if master:
        csv_log.close()
        plot_run(out_dir)
    train_time = time.time() - t_start
    steady = window_ms[1:] or window_ms   # the first window includes warm-up (and compilation)
    ms_per_iter = float(np.median(steady)) if steady else None
    summary = {
        "best_val_loss": best_val_loss, "final_train_loss": final.get("loss"), "final_val_loss": final.get("val_loss"),
        "final_val_loss_heaviest": final.get("val_loss_heaviest"), "last_train_loss": last_train_loss,
        "iter_num": iter_num, "ms_per_iter": ms_per_iter,
        "tokens_per_s": tokens_per_iter / (ms_per_iter / 1000) if steady else None,
        "train_time_s": train_time, "eval_time_s": eval_seconds, "num_params": raw_model.get_num_params(False),
        "num_params_non_embedding": raw_model.get_num_params(True), "model_args": dict(args), "out_dir": out_dir,
        "interrupted": interrupted, "evals": history,
    }
    notify("end", **{k: v for k, v in summary.items() if k != "evals"})
    if not interrupted:
        say(f"done: best val loss {best_val_loss:.4f}, {iter_num} iterations in {format_duration(train_time)}")
    return summary


def main(argv=None):
    try:
        config, explicit = load_config(DEFAULTS, sys.argv[1:] if argv is None else argv)
        summary = train(config, explicit)
    except UserError as e:
        raise SystemExit(f"error: {e}")
    except KeyboardInterrupt:   # a third Ctrl-C, while saving after the second
        raise SystemExit(130) from None
    except (torch.OutOfMemoryError, RuntimeError) as e:
        if not isinstance(e, torch.OutOfMemoryError) and "can't allocate memory" not in str(e):
            raise
        raise SystemExit("error: out of memory (fix: lower --batch_size and raise --gradient_accumulation_steps, "
                         "or lower --block_size)") from None
    if summary["interrupted"]:
        raise SystemExit(130)
    return summary


if __name__ == "__main__":
    main()
