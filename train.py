"""
Train a GPT variant on a tokenized dataset (nanoGPT-style, single process or DDP).

    python train.py config/gpt_shakespeare_cpu.py        # the CPU quickstart (about 1 minute)
    python train.py config/gpt_shakespeare_cpu.py --init_from=resume --max_iters=3000
    torchrun --standalone --nproc_per_node=8 train.py config/gpt_shakespeare.py

In nanoGPT's order: the settings, the data (get_batch), the learning rate (get_lr), the model and
the optimizer (setup), evaluation and checkpoints, then train() and its loop. Every key of DEFAULTS
and every GPTConfig field can be set in a config file or as --key=value (`--help` lists them).
out_dir gets ckpt.pt (best val loss), last.pt (latest; Ctrl-C saves it, --init_from=resume continues
exactly), log.csv and loss.png. What keeps a run safe (one-line errors, the out_dir lock, atomic
writes, log.csv) is called like a library from run_dir.py, checkpoint.py and dataset.py: a learner
can skip them (docs/training.md).
"""

import contextlib
import dataclasses
import gc
import math
import os
import sys
import time
from functools import partial
from types import SimpleNamespace

import numpy as np
import torch
from torch.nn.parallel import DistributedDataParallel as DDP

import prepare
from checkpoint import process_group, resolve_device, resolve_dtype
from configurator import load_config
from dataset import check_splits, tokenizer_id
from model import GPT, GPTConfig
from run_dir import (RunDir, StopRequest, check_settings, full_config, load_state, notes_before_run,
                     one_line_errors, prepared_data, train_model_args)

# --- settings ----------------------------------------------------------------------------------

TRAIN_DEFAULTS = dict(
    # I/O
    out_dir="out",
    eval_interval=250,
    log_interval=10,
    eval_iters=200,
    eval_only=False,              # evaluate once and exit
    always_save_checkpoint=False,  # write ckpt.pt at every eval, not only when val loss improves
    init_from="scratch",          # 'scratch' | 'resume' (out_dir/last.pt) | a checkpoint file, ours
                                  # or nanoGPT's | 'gpt2'..'gpt2-xl' or a Hugging Face folder
    wandb_log=False,              # nanoGPT's W&B logging (pip install wandb)
    wandb_project="compact-gpt",
    wandb_run_name="",
    allow_partial_init=False,     # init_from=<path>: also when only some tensors fit
    cpu_twin="",                  # GPU recipes: the config to run on a CPU instead
    # data
    dataset="shakespeare_char",
    data_dir="",                  # '' = data/<dataset>
    data_segments="",             # refine.npy (paper 003's data refining): windows start only there
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
    warmup_iters=None,            # None: filled below, like the next two
    lr_decay_iters=None,
    min_lr=None,
    # system
    device="auto",                # 'auto' (cuda > mps > cpu) | 'cpu' | 'cuda' | 'cuda:1' | 'mps'
    dtype="auto",                 # 'auto' (cuda: bf16, else fp16; fp32 elsewhere) | float32 | ...
    compile=False,                # torch.compile the model
    backend="nccl",               # DDP's backend on GPUs (nccl | gloo); CPUs use gloo
    num_threads=0,                # CPU threads; 0 = all cores (1 is faster on a busy machine)
    seed=1337,
)
MODEL_DEFAULTS = {field.name: field.default for field in dataclasses.fields(GPTConfig)}
DEFAULTS = {**TRAIN_DEFAULTS, **MODEL_DEFAULTS}


def check_train_config(c, world=1):
    """Refuse bad settings in one line (run_dir.py), then fill the schedule's settings left None."""
    check_settings(c, world)
    if c["lr_decay_iters"] is None:
        c["lr_decay_iters"] = c["max_iters"]   # decay over the whole run
    if c["min_lr"] is None:
        c["min_lr"] = c["learning_rate"] / 10
    if c["warmup_iters"] is None:   # a short run gets a short warmup
        c["warmup_iters"] = min(100, int(c["lr_decay_iters"]) // 10)


# --- data --------------------------------------------------------------------------------------
# A batch is a pure function of its seed, and the seed names it: (seed, split, iteration,
# micro-step). So the data does not depend on how often we evaluate, resuming needs no sampler
# state, and the DDP ranks together draw exactly the batches one process would draw. Evaluation
# uses seeds (seed, 1000 + split, k): the same batches at every evaluation, none of training's.

SPLIT_CODES = {"train": 0, "val": 1, "test": 2}


def batch_seed(*parts):
    """Mix integers into one 63-bit seed (splitmix64), so that nearby (iteration, micro-step)
    pairs give unrelated generator states."""
    mask = (1 << 64) - 1
    x = 0
    for p in parts:
        x = (x + 0x9E3779B97F4A7C15 + (int(p) & mask)) & mask
        x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & mask
        x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & mask
        x ^= x >> 31
    return x >> 1


def get_batch(path, batch_size, block_size, generator, device=torch.device("cpu"), segments=None):
    """(x, y) of shape (batch_size, block_size): random windows of the token file, y = x shifted
    by one. segments: the allowed window starts (paper 003's data refining), None: any."""
    # prepare.py's uint16 ids, opened again at every call (a memmap kept open grows in memory)
    data = np.memmap(path, dtype=np.uint16, mode="r")
    if segments is None:
        starts = torch.randint(len(data) - block_size, (batch_size,), generator=generator).numpy()
    else:
        starts = segments[torch.randint(len(segments), (batch_size,), generator=generator).numpy()]
    windows = torch.from_numpy(data[starts[:, None] + np.arange(block_size + 1)].astype(np.int64))
    x = windows[:, :-1].contiguous()
    y = windows[:, 1:].contiguous()
    if device.type == "cuda":   # pinned memory: the copy runs while the GPU works
        x = x.pin_memory().to(device, non_blocking=True)
        y = y.pin_memory().to(device, non_blocking=True)
        return x, y
    return x.to(device), y.to(device)


def train_batch(run, it, micro):
    """Micro-step `micro` of iteration `it` on this rank. Rank r draws what one process draws at
    micro-step r * accum + micro, so the ranks together draw one process's batch."""
    seed = batch_seed(run.config["seed"], SPLIT_CODES["train"], it, run.rank * run.accum + micro)
    generator = torch.Generator().manual_seed(seed)
    path = os.path.join(run.data_dir, "train.bin")
    return get_batch(path, run.batch_size, run.block_size, generator, run.device, run.segments)


# --- the learning rate -------------------------------------------------------------------------

def get_lr(it, c):
    """Linear warmup over warmup_iters (from learning_rate / (warmup_iters + 1), never 0), cosine
    decay from learning_rate at warmup_iters to min_lr at lr_decay_iters, then min_lr."""
    if not c["decay_lr"]:
        return c["learning_rate"]
    if it < c["warmup_iters"]:
        return c["learning_rate"] * (it + 1) / (c["warmup_iters"] + 1)
    if it >= c["lr_decay_iters"]:
        return c["min_lr"]
    ratio = (it - c["warmup_iters"]) / max(1, c["lr_decay_iters"] - c["warmup_iters"])
    coeff = 0.5 * (1.0 + math.cos(math.pi * ratio))   # from 1 down to 0
    return c["min_lr"] + coeff * (c["learning_rate"] - c["min_lr"])


# --- the model and the optimizer ---------------------------------------------------------------

def say(run, message):
    if run.master:
        print(message, flush=True)


def setup(config, explicit, device, dtype, rank, world, held):
    """The run's data, model and optimizer, all checked before out_dir changes; then out_dir (held,
    an ExitStack, keeps its lock until the run ends), compile and DDP."""
    run = SimpleNamespace(config=config, device=device, dtype=dtype, rank=rank, world=world)
    run.master = rank == 0
    run.ddp = world > 1
    run.accum = config["gradient_accumulation_steps"] // world   # micro-steps on this rank
    config.update(device=str(device), dtype=dtype)
    if config["num_threads"] > 0:
        torch.set_num_threads(config["num_threads"])
    # autocast: bf16 or fp16 activations where the GPU has them (the weights stay fp32)
    if dtype == "float32":
        run.ctx = contextlib.nullcontext()
    else:
        run.ctx = torch.autocast(device.type, dtype=getattr(torch, dtype))

    # the data (prepared on first use), and the model's arguments: fresh, resumed or another's
    run.data_dir, run.meta = prepared_data(config, prepare.prepare, rank, world)
    config["data_dir"] = run.data_dir
    run.args, ckpt = train_model_args(config, explicit, run.meta, device, run.master)
    config.update(run.args)   # the config saved with checkpoints shows the model really trained
    run.block_size = run.args["block_size"]
    run.batch_size = config["batch_size"]
    vocab_size = run.args["vocab_size"]
    run.segments = check_splits(run.data_dir, vocab_size, run.block_size, config["data_segments"])
    if run.segments is not None:
        say(run, f"training windows start only at the {len(run.segments):,} segments of "
            f"{config['data_segments']}")

    # the model and AdamW, with loss scaling for fp16 only
    torch.manual_seed(config["seed"])   # the same initial weights on every rank, in every run
    model = GPT(GPTConfig(**run.args))
    model.to(device)
    run.raw_model = model
    betas = (config["beta1"], config["beta2"])
    lr = config["learning_rate"]
    run.optimizer = model.configure_optimizers(config["weight_decay"], lr, betas, device.type)
    run.scaler = torch.amp.GradScaler(device.type, enabled=(dtype == "float16"))
    run.start_iter = 0
    run.start_best_val_loss = math.inf
    if config["init_from"] == "resume":
        run.start_iter = int(ckpt["iter_num"])
        run.start_best_val_loss = float(ckpt["best_val_loss"])
    # dropout's RNG: each rank its own stream, from (seed, rank, iteration)
    torch.manual_seed(config["seed"] + rank + run.start_iter)
    if ckpt is not None:   # resume: weights, optimizer, scaler and RNG; another's: fitting weights
        load_state(ckpt, model, run.optimizer, run.scaler, config, rank, world)
    # the first batch (each micro-step draws the next): one too big for the machine fails here
    run.X, run.Y = train_batch(run, run.start_iter, 0)

    # everything is checked: take out_dir, say what will run
    run.tokens_per_iter = run.accum * world * run.batch_size * run.block_size
    run.dir = RunDir(config, run.start_iter, ckpt, rank, world, run.tokens_per_iter, device)
    held.enter_context(run.dir)
    total = model.get_num_params(non_embedding=False)
    say(run, f"number of parameters: {total:,} (non-embedding: {model.get_num_params():,})")
    say(run, f"depth: {model.depth_summary()}")
    say(run, f"tokens per iteration: {run.tokens_per_iter:,} ({run.accum} accum x {world} ranks "
        f"x {run.batch_size} batch x {run.block_size} block); device {device}, dtype {dtype}, "
        f"compile {config['compile']}")
    if run.master:   # a warmup longer than the run, a busy machine, hours of CPU time
        probe = partial(time_one_sequence, model, run.X, run.Y, run.ctx)
        notes_before_run(config, device, run.accum, len(run.X), probe)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    # run.model (compiled if asked) evaluates; run.train_model (in DDP when distributed) trains
    run.model = model
    if config["compile"]:
        torch._dynamo.reset()   # dynamo keeps 8 graphs a process: compare.py's 4th model needs room
        run.model = torch.compile(model)
    run.train_model = run.model
    if run.ddp:
        device_ids = [device.index] if device.type == "cuda" else None
        run.train_model = DDP(run.model, device_ids=device_ids)
    return run


def time_one_sequence(model, x, y, ctx):
    """Seconds of a forward and backward pass of one sequence (the note on the run's length)."""
    t0 = time.time()
    with ctx:
        logits, loss = model(x[:1], y[:1])
    loss.backward()
    seconds = time.time() - t0
    model.zero_grad(set_to_none=True)
    return seconds


# --- evaluation and checkpoints ----------------------------------------------------------------

@torch.no_grad()
def estimate_loss(run, splits, stop):
    """Mean loss over eval_iters fixed batches per split (the same batches at every call); under
    DDP each rank evaluates every world-th batch. Ctrl-C cuts it short (one process only)."""
    n = run.config["eval_iters"]
    out = {}
    run.model.eval()
    try:
        for split in splits:
            path = os.path.join(run.data_dir, f"{split}.bin")
            losses = torch.zeros(n, device=run.device)
            for k in range(run.rank, n, run.world):
                seed = batch_seed(run.config["seed"], 1000 + SPLIT_CODES[split], k)
                generator = torch.Generator().manual_seed(seed)
                x, y = get_batch(path, run.batch_size, run.block_size, generator, run.device)
                with run.ctx:
                    logits, loss = run.model(x, y)
                losses[k] = loss.float()
                if stop.requested and not run.ddp:   # evaluating changes no state: stop now
                    raise KeyboardInterrupt
                run.dir.eval_progress(split, k, n)
            if run.ddp:
                torch.distributed.all_reduce(losses)
            out[split] = losses.mean().item()
    finally:
        run.model.train()
    return out


def evaluate(run, iter_num, lr, stop):
    """Train and val loss (pgpt: also the heaviest branch's val loss): one line, one log.csv row."""
    losses = estimate_loss(run, ("train", "val"), stop)
    say(run, f"step {iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
    if not all(math.isfinite(v) for v in losses.values()):
        raise run.dir.diverged(f"the eval loss is {losses['val']}", iter_num)
    row = dict(iter=iter_num, kind="eval", loss=losses["train"], val_loss=losses["val"], lr=lr,
               elapsed_s=run.dir.elapsed())
    model = run.raw_model
    if model.config.n_branches > 1:   # pgpt (paper 004): the heaviest branch alone, as at inference
        branch = model.heaviest_branch()
        model.keep_branch = branch
        try:
            heavy = estimate_loss(run, ("val",), stop)["val"]
        finally:
            model.keep_branch = None
        weights = [float(w) for w in model.branch_weights().tolist()]
        say(run, f"step {iter_num}: val loss (heaviest branch only) {heavy:.4f} (branch {branch}), "
            f"branch weights {' '.join(f'{w:.4f}' for w in weights)}")
        row.update(val_loss_heaviest=heavy, branch_weights=weights)
    run.dir.log(**row)
    return row


def checkpoint_dict(run, iter_num, best_val_loss):
    """What last.pt and ckpt.pt hold: the state at the start of iteration iter_num, from which
    --init_from=resume continues exactly (run.dir.save_checkpoint adds every rank's RNG state)."""
    return {
        "model": run.raw_model.state_dict(),
        "model_args": run.args,
        "optimizer": run.optimizer.state_dict(),
        "scaler": run.scaler.state_dict() if run.scaler.is_enabled() else None,
        "iter_num": iter_num,
        "best_val_loss": best_val_loss,
        "config": dict(run.config),
        "dataset": run.config["dataset"],
        "data_dir": run.data_dir,
        "tokenizer_id": tokenizer_id(run.meta),
    }


def notify(run, callback, event, iter_num, info):
    if callback is not None:
        callback(event, dict(info, iter_num=iter_num, model=run.raw_model, rank=run.rank))


# --- training ----------------------------------------------------------------------------------

def train(config, explicit=None, callback=None):
    """Train with `config` (over DEFAULTS); explicit: the keys the user set (None: see full_config).
    Returns a summary dict. callback(event, info) sees 'iter', 'eval' and 'end' on every rank
    (tools/compare.py; docs/training.md)."""
    config, explicit = full_config(config, explicit, DEFAULTS)   # refuses unknown keys
    ddp = "RANK" in os.environ and "WORLD_SIZE" in os.environ   # set by torchrun
    rank = int(os.environ["RANK"]) if ddp else 0
    world = int(os.environ["WORLD_SIZE"]) if ddp else 1
    local_rank = int(os.environ.get("LOCAL_RANK", rank)) if ddp else None
    check_train_config(config, world)
    device = resolve_device(config["device"], local_rank)
    dtype = resolve_dtype(config["dtype"], device)
    with contextlib.ExitStack() as held:   # DDP's process group and out_dir's lock, kept to the end
        held.enter_context(process_group(world, device, config["backend"]))
        run = setup(config, explicit, device, dtype, rank, world, held)
        model = run.train_model
        optimizer = run.optimizer
        scaler = run.scaler
        X, Y = run.X, run.Y
        iter_num = run.start_iter
        best_val_loss = run.start_best_val_loss
        history = []
        last_train_loss = None
        in_step = False
        stopped = False   # by Ctrl-C or SIGTERM
        at_once = False   # by a KeyboardInterrupt: a second Ctrl-C, or raised by a callback
        run.dir.start_clock(iter_num)
        # each pass starts at an iteration boundary, where the saved state resumes exactly:
        # evaluating, saving and stopping happen only there
        with StopRequest(run.master) as stop:   # Ctrl-C or SIGTERM: stop at the next boundary
            try:
                while True:
                    lr = get_lr(iter_num, config)
                    for group in optimizer.param_groups:
                        group["lr"] = lr
                    last_iter = iter_num >= config["max_iters"]

                    # evaluate on fixed batches, log, save last.pt (and ckpt.pt when val improved)
                    if iter_num % config["eval_interval"] == 0 or last_iter or config["eval_only"]:
                        run.dir.eval_started()
                        row = evaluate(run, iter_num, lr, stop)
                        history.append(row)
                        improved = row["val_loss"] < best_val_loss
                        best_val_loss = min(best_val_loss, row["val_loss"])
                        if iter_num > 0 and not config["eval_only"]:
                            best = improved or config["always_save_checkpoint"]
                            state = checkpoint_dict(run, iter_num, best_val_loss)
                            run.dir.save_checkpoint(state, best)
                        notify(run, callback, "eval", iter_num, row)
                        run.dir.eval_ended(iter_num)   # ms/iter leaves evaluations out
                    if config["eval_only"] or last_iter:
                        break
                    if stop.requested and not run.ddp:   # DDP ranks vote at log steps, below
                        stopped = True
                        break

                    # one optimizer step, its gradient accumulated over accum micro-batches
                    in_step = True
                    loss_sum = torch.zeros((), device=device)
                    for micro in range(run.accum):
                        if run.ddp:   # average the gradients over the ranks after the last one only
                            model.require_backward_grad_sync = micro == run.accum - 1
                        with run.ctx:
                            logits, loss = model(X, Y)
                        loss_sum += loss.detach().float()
                        # the next batch, drawn while the GPU works
                        if micro + 1 < run.accum:
                            X, Y = train_batch(run, iter_num, micro + 1)
                        else:
                            X, Y = train_batch(run, iter_num + 1, 0)
                        # loss / accum: the gradients sum to those of the micro-steps' mean loss;
                        # scaler.scale: fp16's loss scaling, so small gradients do not underflow
                        scaler.scale(loss / run.accum).backward()
                    if config["grad_clip"] > 0:
                        scaler.unscale_(optimizer)   # clip the true gradient, not the scaled one
                        params = run.raw_model.parameters()
                        torch.nn.utils.clip_grad_norm_(params, config["grad_clip"])
                    scaler.step(optimizer)
                    scaler.update()
                    optimizer.zero_grad(set_to_none=True)
                    loss = loss_sum / run.accum   # a tensor: .item() would wait for the GPU
                    it = iter_num   # the iteration this step did
                    iter_num += 1   # the step is done: the state is at a boundary again
                    in_step = False

                    if it % config["log_interval"] == 0:
                        # one all_reduce carries the loss summed over the ranks and their stop votes
                        # (each rank gets its own Ctrl-C; all must stop at the same boundary)
                        votes = torch.tensor(float(stop.requested), device=device)
                        stats = torch.stack([loss, votes])
                        if run.ddp:
                            torch.distributed.all_reduce(stats)
                        last_train_loss = stats[0].item() / world
                        if not math.isfinite(last_train_loss):
                            loss_text = f"the training loss is {last_train_loss}"
                            raise run.dir.diverged(loss_text, it)
                        run.dir.log_iteration(it, iter_num, last_train_loss, lr)
                        if stats[1].item() > 0:
                            stopped = True
                            break
                    notify(run, callback, "iter", iter_num, dict(loss=loss, lr=lr))
            except KeyboardInterrupt:   # a second Ctrl-C, one during an evaluation, or a callback's
                stopped = True
                at_once = True
            if stopped:   # last.pt at this boundary (not mid-step); say what out_dir keeps
                state = checkpoint_dict(run, iter_num, best_val_loss)
                run.dir.save_on_stop(state, in_step, at_once)
        summary = run.dir.finish(run.raw_model, run.args, history, best_val_loss, last_train_loss,
                                 iter_num, stopped)
        notify(run, callback, "end", iter_num, {k: v for k, v in summary.items() if k != "evals"})
    return summary


def main(argv=None):
    with one_line_errors():   # bad input: one line `error: ... (fix: ...)` and exit code 1
        config, explicit = load_config(DEFAULTS, sys.argv[1:] if argv is None else argv)
        summary = train(config, explicit)
    if summary["interrupted"]:
        raise SystemExit(130)
    return summary


if __name__ == "__main__":
    main()
    gc.freeze()   # all is written: spare the exit a collection over torch's objects (results/)
