"""
Train a GPT variant on a tokenized dataset (nanoGPT-style, single process or DDP).

    python train.py config/gpt_shakespeare_cpu.py                 # the CPU quickstart (about 1 minute)
    python train.py config/gpt_shakespeare_cpu.py --init_from=resume --max_iters=3000
    torchrun --standalone --nproc_per_node=8 train.py config/gpt_shakespeare.py

In nanoGPT's order: settings, data (get_batch), model and optimizer (setup), get_lr, evaluation, the loop (train).
Every key of DEFAULTS and every GPTConfig field can be set in a config file or as --key=value (`--help` lists them).
out_dir gets ckpt.pt (best val loss), last.pt (latest; Ctrl-C saves it, --init_from=resume continues exactly),
log.csv and loss.png. What keeps a run safe (one-line errors, the lock, atomic saves, exact resume, the log) is
called like a library from run_dir.py, checkpoint.py and dataset.py: a learner can skip it (docs/training.md).
"""

import contextlib
import gc
import math
import os
import time
from types import SimpleNamespace

import numpy as np
import torch
from torch.nn.parallel import DistributedDataParallel as DDP

from checkpoint import (CKPT_NAME, LAST_NAME, atomic_copy, atomic_save, autocast, build_model, check_out_dir,
                        distributed_env, gather_rng_states, gpt_config_defaults, load_matching_weights,
                        load_optimizer_state, load_own_weights, process_group, resolve_device, resolve_dtype,
                        start_rng)
from dataset import (TOKEN_DTYPE, check_splits, default_data_dir, is_prepared, load_meta, run_prepare, split_path,
                     tokenizer_id)
from run_dir import (EvalProgress, RunDir, StopRequest, check_run_settings, check_schedule, check_train_settings,
                     format_duration, full_config, notes_before_run, train_command, train_model_args)

# --- settings -----------------------------------------------------------------------------------------------------

TRAIN_DEFAULTS = dict(
    # I/O
    out_dir="out",
    eval_interval=250,
    log_interval=10,
    eval_iters=200,
    eval_only=False,              # evaluate once and exit
    always_save_checkpoint=False,  # write ckpt.pt at every eval, not only when val loss improves
    init_from="scratch",          # 'scratch' | 'resume' (out_dir/last.pt) | a checkpoint file, ours or nanoGPT's
                                  # (its weights) | 'gpt2'..'gpt2-xl' or a Hugging Face folder (imported)
    wandb_log=False, wandb_project="compact-gpt", wandb_run_name="",  # nanoGPT's W&B logging (pip install wandb)
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
    warmup_iters=None,            # None: filled below, like the next two (a short run gets a short warmup)
    lr_decay_iters=None,
    min_lr=None,
    # system
    device="auto",                # 'auto' (cuda > mps > cpu) | 'cpu' | 'cuda' | 'cuda:1' | 'mps'
    dtype="auto",                 # 'auto' (cuda: bf16 if supported, else fp16; fp32 elsewhere) | float32 | ...
    compile=False,                # torch.compile the model
    backend="nccl",               # DDP's backend on GPUs (nccl | gloo); CPUs use gloo
    num_threads=0,                # CPU threads for torch; 0 = all cores. 1 is faster when other jobs share them
    seed=1337,
)

DEFAULTS = {**TRAIN_DEFAULTS, **{k: v for k, v in gpt_config_defaults().items() if k not in TRAIN_DEFAULTS}}


def check_train_config(c, world=1):
    """Refuse bad settings in one line (run_dir.py) and fill the schedule's settings left None above."""
    check_train_settings(c, world)
    c["lr_decay_iters"] = c["max_iters"] if c["lr_decay_iters"] is None else c["lr_decay_iters"]   # the whole run
    c["min_lr"] = c["learning_rate"] / 10 if c["min_lr"] is None else c["min_lr"]
    c["warmup_iters"] = min(100, int(c["lr_decay_iters"]) // 10) if c["warmup_iters"] is None else c["warmup_iters"]
    check_schedule(c)
    check_run_settings(c, world)


# --- data ---------------------------------------------------------------------------------------------------------
# Batches are a pure function of (seed, split, iteration, micro-step), so the data does not depend on how often we
# evaluate, resuming needs no sampler state, and a DDP rank sees exactly the batches one process would see.

SPLIT_CODES = {"train": 0, "val": 1, "test": 2}


def batch_seed(*parts):
    """Mix integers into one 63-bit seed (splitmix64), so nearby (iter, micro-step) pairs give unrelated
    generator states: every batch's generator is seeded with batch_seed(seed, split, iteration, micro-step)."""
    mask = (1 << 64) - 1
    x = 0
    for p in parts:
        x = (x + 0x9E3779B97F4A7C15 + (int(p) & mask)) & mask
        x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & mask
        x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & mask
        x ^= x >> 31
    return x >> 1


def get_batch(path, batch_size, block_size, generator, device=torch.device("cpu"), segments=None):
    """(x, y) of shape (batch_size, block_size): random windows of the token file, y = x shifted by one. segments:
    the allowed window starts (data refining, paper 003 4.2; tools/pangu/refine.py), None: every position."""
    data = np.memmap(path, dtype=TOKEN_DTYPE, mode="r")   # reopened every call: a kept one grows resident memory
    if segments is None:
        starts = torch.randint(len(data) - block_size, (batch_size,), generator=generator).numpy()
    else:
        starts = segments[torch.randint(len(segments), (batch_size,), generator=generator).numpy()]
    windows = torch.from_numpy(data[starts[:, None] + np.arange(block_size + 1)].astype(np.int64))
    x, y = windows[:, :-1].contiguous(), windows[:, 1:].contiguous()
    if device.type == "cuda":   # pinned host memory: the copy runs asynchronously with the GPU work already queued
        return x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
    return x.to(device), y.to(device)


def train_batch(run, it, micro):
    """Micro-step `micro` of iteration `it`; rank r sees what one process sees at micro-step r*accum+micro."""
    run.train_gen.manual_seed(batch_seed(run.config["seed"], SPLIT_CODES["train"], it, run.rank * run.accum + micro))
    return get_batch(split_path(run.data_dir, "train"), run.batch_size, run.block_size, run.train_gen, run.device,
                     run.segments)


# --- the model and the optimizer ----------------------------------------------------------------------------------

def say(run, message):
    if run.master:
        print(message, flush=True)


def setup(config, explicit, device, rank, world, held):
    """The run's data, model and optimizer, all checked before out_dir changes (held, an ExitStack, keeps its lock
    until the run ends); then compile and DDP, and the RNG (dropout) where the run starts."""
    run = SimpleNamespace(config=config, device=device, rank=rank, world=world, master=rank == 0, ddp=world > 1,
                          out_dir=config["out_dir"])
    run.accum = config["gradient_accumulation_steps"] // world   # micro-steps per iteration on this rank
    run.dtype = resolve_dtype(config["dtype"], device)
    config.update(device=str(device), dtype=run.dtype)
    if config["num_threads"] > 0:
        torch.set_num_threads(config["num_threads"])

    # the data: prepared on first use (by rank 0; the others wait), then checked
    run.data_dir = config["data_dir"] = default_data_dir(config)
    if run.master and not is_prepared(run.data_dir):
        import prepare
        run_prepare(prepare.prepare, config["dataset"], run.data_dir)
    if run.ddp:
        torch.distributed.barrier()
    run.meta = load_meta(run.data_dir)

    # the model: fresh, resumed, or initialized from another checkpoint's weights
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

    # the optimizer: AdamW, and loss scaling for fp16 only
    run.optimizer = model.configure_optimizers(config["weight_decay"], config["learning_rate"],
                                               (config["beta1"], config["beta2"]), device.type)
    run.scaler = torch.amp.GradScaler(device.type, enabled=(run.dtype == "float16"))
    if run.resuming:
        load_optimizer_state(run.optimizer, ckpt)
        if run.scaler.is_enabled() and ckpt.get("scaler"):
            run.scaler.load_state_dict(ckpt["scaler"])
    # the first batch (each step fetches the next one): a batch too big for the machine fails here, not in out_dir
    run.train_gen = torch.Generator()
    run.X, run.Y = train_batch(run, run.iter_num, 0)
    check_out_dir(run.out_dir)

    # every input is checked: take out_dir (held keeps its lock until the run ends), say what will run
    run.tokens_per_iter = run.accum * run.world * run.batch_size * run.block_size
    saved_iter = run.iter_num if run.resuming and ckpt["path"].endswith(LAST_NAME) else None   # what last.pt holds
    run.dir = RunDir(run.out_dir, config, run.resuming, run.iter_num, saved_iter, run.rank, run.world,
                     run.tokens_per_iter, device, held, lambda m: say(run, m))
    say(run, f"number of parameters: {model.get_num_params(False):,} (non-embedding: {model.get_num_params(True):,})")
    say(run, f"depth: {model.depth_summary()}")
    say(run, f"tokens per iteration: {run.tokens_per_iter:,} ({run.accum} accum x {run.world} ranks x "
        f"{run.batch_size} batch x {run.block_size} block); device {device}, dtype {run.dtype}, "
        f"compile {config['compile']}")
    if run.master:
        notes_before_run(config, device, run.accum, lambda: time_one_sequence(model, run.X, run.Y, run.dtype),
                         len(run.X), lambda m: say(run, m))
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    # model (compiled if asked) evaluates; train_model (model in DDP when distributed) trains
    if config["compile"]:
        torch._dynamo.reset()   # dynamo keeps 8 graphs per process: compare.py's 4th model would run uncompiled
    run.model = torch.compile(model) if config["compile"] else model
    run.train_model = DDP(run.model, device_ids=[device.index] if device.type == "cuda" else None) if run.ddp \
        else run.model
    start_rng(config["seed"], run.rank, run.world, run.iter_num, ckpt if run.resuming else None, device)
    return run


def time_one_sequence(model, x, y, dtype):
    """Seconds of a forward and backward pass of one sequence on the CPU (for the note on the run's length)."""
    t0 = time.time()
    with autocast("cpu", dtype):
        loss = model(x[:1], y[:1])[1]
    loss.backward()
    seconds = time.time() - t0
    model.zero_grad(set_to_none=True)
    return seconds


# --- the learning rate --------------------------------------------------------------------------------------------

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


# --- evaluation and checkpoints -----------------------------------------------------------------------------------

@torch.no_grad()
def estimate_loss(run, splits, stop):
    """Mean loss over eval_iters fixed batches per split (the same batches at every call); under DDP each rank
    evaluates every world-th batch. Ctrl-C cuts it short (one process only): evaluating changes no state."""
    n, gen, out, progress = run.config["eval_iters"], torch.Generator(), {}, EvalProgress(lambda m: say(run, m))
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
                progress.show(split, k, n)
            if run.ddp:
                torch.distributed.all_reduce(losses)
            out[split] = losses.mean().item()
    finally:
        run.model.train()
    return out


def evaluate_and_log(run, lr, stop):
    """Train and val loss (pgpt: also the heaviest branch's val loss), one line and one log.csv row (returned)."""
    losses = estimate_loss(run, ("train", "val"), stop)
    say(run, f"step {run.iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
    if not all(math.isfinite(v) for v in losses.values()):
        raise run.dir.diverged(f"the eval loss is {losses['val']}", run.iter_num)
    row = dict(iter=run.iter_num, kind="eval", loss=losses["train"], val_loss=losses["val"], lr=lr,
               elapsed_s=run.dir.elapsed())
    model = run.raw_model
    if model.config.n_branches > 1:   # pgpt (paper 004): the heaviest branch alone, as it runs at inference
        model.keep_branch = model.heaviest_branch()
        try:
            heavy = estimate_loss(run, ("val",), stop)["val"]
        finally:
            branch, model.keep_branch = model.keep_branch, None
        weights = [float(w) for w in model.branch_weights().tolist()]
        say(run, f"step {run.iter_num}: val loss (heaviest branch only) {heavy:.4f} (branch {branch}), "
            f"branch weights {' '.join(f'{w:.4f}' for w in weights)}")
        row.update(val_loss_heaviest=heavy, branch_weights=weights)
    run.dir.log(**row)
    return row


def save_checkpoint(run, best=False, gather=True):
    """last.pt (and ckpt.pt when best): weights, optimizer and RNGs at the start of iteration iter_num, from which
    --init_from=resume continues exactly. Collective under DDP."""
    if not all(torch.isfinite(p).all() for p in run.raw_model.parameters()):
        raise run.dir.diverged("the weights are not finite", run.iter_num)
    rng, rng_ranks = gather_rng_states(run.device, run.ddp and gather)
    if run.master:
        path = os.path.join(run.out_dir, LAST_NAME)
        atomic_save({"model": run.raw_model.state_dict(), "model_args": run.args,
                     "optimizer": run.optimizer.state_dict(),
                     "scaler": run.scaler.state_dict() if run.scaler.is_enabled() else None,
                     "iter_num": run.iter_num, "best_val_loss": run.best_val_loss, "config": dict(run.config),
                     "rng": rng, "rng_ranks": rng_ranks, "dataset": run.config["dataset"], "data_dir": run.data_dir,
                     "tokenizer_id": tokenizer_id(run.meta)}, path)
        if run.dir.replaces_best(best):
            atomic_copy(path, os.path.join(run.out_dir, CKPT_NAME))
            say(run, f"saved {CKPT_NAME} and {LAST_NAME} to {run.out_dir}")
    run.dir.saved(run.iter_num)


# --- training -----------------------------------------------------------------------------------------------------

def train(config, explicit=None, callback=None):
    """Train with `config` (over DEFAULTS); explicit: the keys the user set (None: see full_config). Returns a summary
    dict; callback(event, info) sees 'iter', 'eval' and 'end' on every rank (tools/compare.py, docs/training.md)."""
    config, explicit = full_config(config, explicit, DEFAULTS)   # refuses unknown keys
    rank, local_rank, world = distributed_env() or (0, None, 1)   # torchrun sets the ranks
    check_train_config(config, world)
    device = resolve_device(config["device"], local_rank)
    with contextlib.ExitStack() as held:   # DDP's process group and out_dir's lock: released however the run ends
        held.enter_context(process_group(world, device, config["backend"]))
        return train_loop(setup(config, explicit, device, rank, world, held), callback)


def train_loop(run, callback=None):
    """Each pass starts at an iteration boundary, where the saved state resumes exactly: evaluating, saving and
    stopping happen only there. A stop inside a step (in_step) saves nothing."""
    config, model, optimizer, scaler, X, Y = run.config, run.train_model, run.optimizer, run.scaler, run.X, run.Y
    history, last_train_loss, in_step, interrupted, hard_stop = [], None, False, False, False
    run.dir.start_clock()
    with StopRequest(lambda m: say(run, m)) as stop:
        try:
            while True:
                lr = get_lr(run.iter_num, config["learning_rate"], config["min_lr"], config["warmup_iters"],
                            config["lr_decay_iters"], config["decay_lr"])
                for group in optimizer.param_groups:
                    group["lr"] = lr
                last_iter = run.iter_num >= config["max_iters"]

                # evaluate on fixed batches, log, and save last.pt (and ckpt.pt when val loss improved)
                if run.iter_num % config["eval_interval"] == 0 or last_iter or config["eval_only"]:
                    run.dir.eval_started()
                    row = evaluate_and_log(run, lr, stop)
                    history.append(row)
                    improved = row["val_loss"] < run.best_val_loss
                    run.best_val_loss = min(run.best_val_loss, row["val_loss"])
                    if run.iter_num > 0 and not config["eval_only"]:
                        save_checkpoint(run, best=improved or config["always_save_checkpoint"])
                    notify(run, callback, "eval", **row)
                    run.dir.eval_ended()   # ms/iter leaves out evaluation time
                if config["eval_only"] or last_iter:
                    break
                if stop.requested and not run.ddp:   # Ctrl-C / SIGTERM (DDP ranks vote at log steps instead, below)
                    interrupted = True
                    break

                # one optimizer step: forward/backward over accum micro-batches (gradient accumulation; DDP syncs
                # on the last one only; each fetches the next batch while the GPU works), clipping, then AdamW
                in_step = True
                loss_sum = torch.zeros((), device=run.device)
                for micro in range(run.accum):
                    last_micro = micro == run.accum - 1
                    with contextlib.nullcontext() if not run.ddp or last_micro else model.no_sync():
                        with autocast(run.device, run.dtype):
                            loss = model(X, Y)[1]
                        loss_sum += loss.detach().float()
                        X, Y = train_batch(run, run.iter_num + 1, 0) if last_micro else \
                            train_batch(run, run.iter_num, micro + 1)
                        scaler.scale(loss / run.accum).backward()   # scaled: fp16 gradients do not underflow
                if config["grad_clip"] > 0:
                    scaler.unscale_(optimizer)
                    torch.nn.utils.clip_grad_norm_(run.raw_model.parameters(), config["grad_clip"])
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad(set_to_none=True)
                loss = loss_sum / run.accum
                it, run.iter_num = run.iter_num, run.iter_num + 1
                in_step = False
                run.dir.step_done()

                if it % config["log_interval"] == 0:
                    last_train_loss, stop_voted = run.dir.log_iteration(it, run.iter_num, loss, lr, stop.requested)
                    if stop_voted:
                        interrupted = True
                        break
                notify(run, callback, "iter", loss=loss, lr=lr)   # a tensor: .item() would wait for the GPU
        except KeyboardInterrupt:   # a second Ctrl-C, or raised by a callback
            interrupted = hard_stop = True
        if interrupted:
            run.dir.save_on_stop(run.iter_num, in_step, hard_stop, lambda gather: save_checkpoint(run, gather=gather))

    summary = run.dir.finish(run.raw_model, run.args, history, run.best_val_loss, last_train_loss, run.iter_num,
                              interrupted)
    notify(run, callback, "end", **{k: v for k, v in summary.items() if k != "evals"})
    if not interrupted:
        say(run, f"done: best val loss {run.best_val_loss:.4f}, {run.iter_num} iterations in "
            f"{format_duration(summary['train_time_s'])}")
    return summary


def notify(run, callback, event, **info):
    if callback is not None:
        callback(event, dict(info, iter_num=run.iter_num, model=run.raw_model, rank=run.rank))


def main(argv=None):
    return train_command(train, DEFAULTS, argv)   # one-line errors, exit codes


if __name__ == "__main__":
    main()
    gc.freeze()   # all is written: spare the exit a collection over torch's objects (most of a second; results/)
