"""
Train a GPT variant on a tokenized dataset (nanoGPT-style, single process or DDP).

    python train.py config/gpt_shakespeare_cpu.py        # the CPU quickstart (1-2 minutes)
    python train.py config/gpt_shakespeare_cpu.py --init_from=resume --max_iters=3000
    torchrun --standalone --nproc_per_node=8 train.py config/layer_sharing_wikitext103.py

Top to bottom: the settings, the data (get_batch), the learning rate (get_lr), the
model and optimizer (setup), evaluation and checkpoints, then train() and its loop.
Every key below and GPTConfig field is a config key (`--help` lists them). out_dir
gets last.pt (latest), ckpt.pt (see save_checkpoints), log.csv and loss.png. What
keeps a run safe lives in safety_net/ (docs/training.md).
"""

import contextlib
import dataclasses
import gc
import math
import os
import time
from types import SimpleNamespace

import numpy as np
import torch
from torch.nn.parallel import DistributedDataParallel as DDP

import prepare
import variants
from model import GPT, GPTConfig
from safety_net.checkpoint import save_checkpoint
from safety_net.configurator import run_command
from safety_net.run_dir import RunDir
from safety_net.runtime import gather_rng_states
from safety_net.starting_point import StartingPoint, prepared_data
from safety_net.stop import StopRequest
from safety_net.train_config import check_train_config

# --- settings ----------------------------------------------------------------------------

TRAIN_DEFAULTS = dict(
    # I/O
    out_dir="out",
    eval_interval=250,
    log_interval=10,
    eval_iters=200,
    eval_only=False,              # evaluate once and exit
    always_save_checkpoint=False,  # ckpt.pt at every evaluation, not only when val improves
    # 'scratch' | 'resume' (out_dir/last.pt, else ckpt.pt) | a checkpoint file, ours or nanoGPT's |
    # 'gpt2'..'gpt2-xl' or a Hugging Face folder
    init_from="scratch",
    wandb_log=False,              # nanoGPT's W&B logging
    wandb_project="compact-gpt",
    wandb_run_name="",
    allow_partial_init=False,     # init_from=<path>: also when only some tensors fit
    cpu_twin="",                  # GPU recipes: the config to run on a CPU instead
    # data
    dataset="shakespeare_char",
    data_dir="",                  # '' = data/<dataset>
    data_segments="",             # refine.npy (paper 003): windows start only there
    gradient_accumulation_steps=1,  # over all DDP ranks
    batch_size=12,                # per micro-step, per rank
    # model
    variant="",                   # variants/<name>.py; model keys you set win
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
    compile=False,
    backend="nccl",               # DDP's backend on GPUs; CPUs use gloo
    num_threads=0,                # CPU threads; 0: torch's default
    seed=1337,
)
MODEL_DEFAULTS = {field.name: field.default for field in dataclasses.fields(GPTConfig)}
DEFAULTS = {**TRAIN_DEFAULTS, **MODEL_DEFAULTS}


def fill_schedule(c):
    """The schedule's settings left None, from the others (checked already)."""
    if c["lr_decay_iters"] is None:
        c["lr_decay_iters"] = c["max_iters"]   # decay over the whole run
    if c["min_lr"] is None:
        c["min_lr"] = c["learning_rate"] / 10
    if c["warmup_iters"] is None:   # a short run gets a short warmup
        c["warmup_iters"] = min(100, int(c["lr_decay_iters"]) // 10)


# --- data --------------------------------------------------------------------------------
# A batch is a pure function of its seed (seed, split, iteration, micro-step): so
# resuming needs no sampler state, and the DDP ranks together draw the batches one
# process would. Evaluation uses (seed, 1000 + split, k): the same batches always.

SPLIT_CODES = {"train": 0, "val": 1, "test": 2}


def batch_seed(*parts):
    """Mix integers into one 63-bit seed (splitmix64): nearby parts, unrelated seeds."""
    mask = (1 << 64) - 1
    x = 0
    for p in parts:
        x = (x + 0x9E3779B97F4A7C15 + int(p)) & mask
        x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & mask
        x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & mask
        x ^= x >> 31
    return x >> 1


def get_batch(path, batch_size, block_size, generator, device=torch.device("cpu"),
              segments=None):
    """(x, y) of shape (batch_size, block_size): random windows of the token file, y = x
    shifted by one. segments: the allowed window starts (paper 003's data refining)."""
    # opened at every call: a memmap kept open grows in memory (as in nanoGPT)
    data = np.memmap(path, dtype=np.uint16, mode="r")
    if segments is None:
        n = len(data) - block_size
        starts = torch.randint(n, (batch_size,), generator=generator).numpy()
    else:
        picks = torch.randint(len(segments), (batch_size,), generator=generator)
        starts = segments[picks.numpy()]
    # row i: tokens starts[i] .. starts[i] + block_size
    rows = starts[:, None] + np.arange(block_size + 1)
    windows = torch.from_numpy(data[rows].astype(np.int64))
    x = windows[:, :-1].contiguous()
    y = windows[:, 1:].contiguous()
    if device.type == "cuda":   # pinned memory: the copy runs while the GPU works
        x = x.pin_memory().to(device, non_blocking=True)
        y = y.pin_memory().to(device, non_blocking=True)
        return x, y
    return x.to(device), y.to(device)


def train_batch(run, it, micro):
    """Micro-step `micro` of iteration `it` on this rank: one process's micro-step
    rank * accum + micro. run: setup's (below)."""
    step = run.rank * run.accum + micro
    seed = batch_seed(run.config["seed"], SPLIT_CODES["train"], it, step)
    generator = torch.Generator().manual_seed(seed)
    path = os.path.join(run.data_dir, "train.bin")
    return get_batch(path, run.batch_size, run.block_size, generator, run.device,
                     run.segments)


# --- the learning rate -------------------------------------------------------------------

def get_lr(it, c):
    """Linear warmup (never 0), cosine decay to min_lr at lr_decay_iters, then min_lr."""
    if not c["decay_lr"]:
        return c["learning_rate"]
    if it < c["warmup_iters"]:
        return c["learning_rate"] * (it + 1) / (c["warmup_iters"] + 1)
    if it >= c["lr_decay_iters"]:
        return c["min_lr"]
    ratio = (it - c["warmup_iters"]) / (c["lr_decay_iters"] - c["warmup_iters"])
    coeff = 0.5 * (1.0 + math.cos(math.pi * ratio))   # from 1 down to 0
    return c["min_lr"] + coeff * (c["learning_rate"] - c["min_lr"])


# --- the model and the optimizer ---------------------------------------------------------

def say(run, message):
    if run.master:
        print(message, flush=True)


def setup(config, explicit, device, dtype, rank, world):
    """The run's data, model and optimizer, all checked before out_dir changes; compile and
    DDP. explicit: the keys the user set."""
    run = SimpleNamespace(config=config, device=device, dtype=dtype, rank=rank, world=world)
    run.master = rank == 0
    run.ddp = world > 1
    run.accum = config["gradient_accumulation_steps"] // world   # micro-steps on this rank
    config.update(device=str(device), dtype=dtype)
    if config["num_threads"] > 0:
        torch.set_num_threads(config["num_threads"])
    # autocast: bf16 or fp16 activations if dtype says so (the weights stay fp32)
    run.ctx = contextlib.nullcontext()
    if dtype != "float32":
        run.ctx = torch.autocast(device.type, dtype=getattr(torch, dtype))

    # the checkpoint init_from names (None: scratch), and its checks
    starting_point = StartingPoint(config, device, run.master)
    ckpt = starting_point.ckpt
    # the model's arguments: each update below wins over those before it
    args = dict(MODEL_DEFAULTS)
    if ckpt is not None:
        args.update(ckpt["model_args"])
    if config["variant"]:
        args.update(variants.load(config["variant"]))
    if config["init_from"] == "resume":
        args["vocab_size"] = ckpt["model_args"]["vocab_size"]
    args.update({k: config[k] for k in explicit if k in MODEL_DEFAULTS})
    # before the data is prepared: resume changing more than dropout, args GPTConfig refuses
    starting_point.check_model(args, explicit)

    # the data (prepared on first use): its folder, meta.json, the tokenizer's id
    run.data_dir, meta, run.tokenizer_id = prepared_data(config, prepare.prepare, rank, world)
    config["data_dir"] = run.data_dir
    config["dataset"] = meta.get("dataset", config["dataset"])
    if config["init_from"] != "resume" and "vocab_size" not in explicit:
        args["vocab_size"] = meta["vocab_size"]
    # after it: another tokenizer, data too short
    starting_point.check(args, meta)
    run.args = args
    config.update(args)   # the saved config shows the model trained
    run.block_size = args["block_size"]
    run.batch_size = config["batch_size"]
    run.segments = None   # data_segments (paper 003): the only window starts
    if config["data_segments"]:
        run.segments = np.load(config["data_segments"]).astype(np.int64)

    # the model and AdamW, with loss scaling for fp16 only
    torch.manual_seed(config["seed"])   # the same initial weights on every rank
    model = GPT(GPTConfig(**args))
    model.to(device)
    run.raw_model = model
    betas = (config["beta1"], config["beta2"])
    lr = config["learning_rate"]
    decay = config["weight_decay"]
    run.optimizer = model.configure_optimizers(decay, lr, betas, device.type)
    run.scaler = torch.amp.GradScaler(device.type, enabled=(dtype == "float16"))
    run.start_iter = 0
    run.start_best_val_loss = math.inf
    run.ckpt = ckpt
    if config["init_from"] == "resume":
        run.start_iter = int(ckpt["iter_num"])
        run.start_best_val_loss = float(ckpt["best_val_loss"])
    # dropout's RNG, per rank; a resume restores the checkpoint's
    torch.manual_seed(config["seed"] + rank + run.start_iter)
    # resume: weights, optimizer, scaler, RNG; else: its weights that fit
    if ckpt is not None:
        starting_point.restore(model, run.optimizer, run.scaler, rank, world)
    run.first_batch = train_batch(run, run.start_iter, 0)   # too big: fails here

    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    # run.model (compiled if asked) evaluates; run.train_model (in DDP if distributed) trains
    run.model = model
    if config["compile"]:
        torch._dynamo.reset()   # dynamo recompiles at most 8 times (tools/compare.py)
        run.model = torch.compile(model)
    run.train_model = run.model
    if run.ddp:
        device_ids = [device.index] if device.type == "cuda" else None
        run.train_model = DDP(run.model, device_ids=device_ids)
    return run


# --- evaluation and checkpoints ----------------------------------------------------------

@torch.no_grad()
def estimate_loss(run, splits, stop):
    """Mean loss over eval_iters fixed batches per split; under DDP each rank evaluates
    every world-th batch."""
    n = run.config["eval_iters"]
    out = {}
    run.model.eval()
    try:
        for split in splits:
            path = os.path.join(run.data_dir, f"{split}.bin")
            losses = torch.zeros(n, device=run.device)
            for k in range(run.rank, n, run.world):
                run.dir.eval_progress(split, k, n)   # a line now and then
                seed = batch_seed(run.config["seed"], 1000 + SPLIT_CODES[split], k)
                generator = torch.Generator().manual_seed(seed)
                x, y = get_batch(path, run.batch_size, run.block_size, generator, run.device)
                with run.ctx:
                    logits, loss = run.model(x, y)
                losses[k] = loss.float()
                if stop.requested and not run.ddp:   # evaluating changes nothing: stop now
                    raise KeyboardInterrupt
            if run.ddp:
                torch.distributed.all_reduce(losses)
            out[split] = losses.mean().item()
    finally:
        run.model.train()
    return out


def evaluate(run, iter_num, lr, stop):
    """Train and val loss: a line (pgpt: two, the heaviest branch's too), a log.csv row."""
    losses = estimate_loss(run, ("train", "val"), stop)
    say(run, f"step {iter_num}: train loss {losses['train']:.4f}, "
        f"val loss {losses['val']:.4f}")
    row = dict(iter=iter_num, kind="eval", loss=losses["train"], val_loss=losses["val"],
               lr=lr)
    model = run.raw_model
    if model.config.n_branches > 1:   # pgpt (paper 004): the heaviest branch, as at inference
        branch = model.heaviest_branch()
        model.keep_branch = branch
        try:
            heavy = estimate_loss(run, ("val",), stop)["val"]
        finally:
            model.keep_branch = None
        weights = model.branch_weights().tolist()
        shown = " ".join(f"{w:.4f}" for w in weights)
        say(run, f"step {iter_num}: val loss (heaviest branch only) {heavy:.4f} "
            f"(branch {branch}), branch weights {shown}")
        row.update(val_loss_heaviest=heavy, branch_weights=weights)
    return run.dir.log(**row)


def checkpoint_fields(run, iter_num, best_val_loss):
    """What last.pt and ckpt.pt hold: the state at the start of iteration iter_num, from
    which --init_from=resume continues exactly."""
    return dict(
        model=run.raw_model.state_dict(),
        model_args=run.args,
        optimizer=run.optimizer.state_dict(),
        scaler=run.scaler.state_dict() if run.scaler.is_enabled() else None,
        iter_num=iter_num,
        best_val_loss=best_val_loss,
        config=dict(run.config),
        dataset=run.config["dataset"],
        data_dir=run.data_dir,
        tokenizer_id=run.tokenizer_id,
    )


def save_checkpoints(run, iter_num, best_val_loss, best, gather=True):
    """last.pt := the state at iteration iter_num (at an evaluation after iteration 0, or
    at a stop); ckpt.pt := the same when best, and at the first save when out_dir held
    an earlier run's checkpoints. Rank 0 writes, each file atomically: a crash or
    Ctrl-C keeps the previous one whole. gather: False after a stop at once (the other
    ranks may be gone)."""
    state = checkpoint_fields(run, iter_num, best_val_loss)
    if not all(torch.isfinite(w).all() for w in state["model"].values()):
        raise run.dir.diverged("the weights are not finite", iter_num)   # never saved
    t0 = time.time()
    # every rank's RNG state, for an exact resume (under DDP: a collective)
    state["rng"], state["rng_ranks"] = gather_rng_states(run.device, run.ddp and gather)
    out_dir = run.config["out_dir"]
    if run.master:
        save_checkpoint(os.path.join(out_dir, "last.pt"), **state)
    if run.master and (best or run.dir.ckpt_from_earlier_run):
        save_checkpoint(os.path.join(out_dir, "ckpt.pt"), **state)
        say(run, f"saved ckpt.pt and last.pt to {out_dir}")
    run.dir.saved(iter_num, time.time() - t0)   # log.csv's rows go with last.pt
    if run.ddp and gather:   # rank 0's files first: torchrun ends all ranks when one exits
        torch.distributed.barrier()


def notify(run, callback, event, iter_num, info):
    if callback is not None:
        callback(event, dict(info, iter_num=iter_num, model=run.raw_model, rank=run.rank))


# --- training ----------------------------------------------------------------------------

def train(config, explicit=None, callback=None):
    """Train with `config` (over DEFAULTS); explicit: the keys the user set. Returns a
    summary dict. callback(event, info): 'iter', 'eval', 'end' (docs/training.md)."""
    ddp = "RANK" in os.environ and "WORLD_SIZE" in os.environ   # set by torchrun
    rank = int(os.environ["RANK"]) if ddp else 0
    world = int(os.environ["WORLD_SIZE"]) if ddp else 1
    local_rank = int(os.environ.get("LOCAL_RANK", rank)) if ddp else None
    # unknown keys and bad values refused in one line; 'auto' device and dtype resolved
    config, explicit, device, dtype = check_train_config(config, explicit, DEFAULTS,
                                                         world, local_rank)
    fill_schedule(config)
    # DDP's process group, unless the caller runs one
    own_group = world > 1 and not torch.distributed.is_initialized()
    if world > 1 and device.type == "cuda":
        torch.cuda.set_device(device)
    if own_group:
        backend = config["backend"] if device.type == "cuda" else "gloo"
        torch.distributed.init_process_group(backend=backend)
    try:
        run = setup(config, explicit, device, dtype, rank, world)
        # run.dir: out_dir's lock, log.csv, loss.png, progress lines
        run.dir = RunDir(config, run.start_iter, run.ckpt, rank, world, device)
        # rank 0: the model's size, tokens per iteration, notes (CPU time, unread keys)
        run.dir.say_what_runs(run.raw_model, run.segments, run.first_batch, run.ctx, explicit)
        # out_dir, locked; Ctrl-C or SIGTERM: stop at the next iteration boundary
        with run.dir, StopRequest(run.master, world) as stop:
            end = train_loop(run, stop, callback)
            summary = run.dir.finish(run.raw_model, run.args, **end)   # loss.png, last line
            info = {k: v for k, v in summary.items() if k != "evals"}
            notify(run, callback, "end", end["iter_num"], info)
    finally:
        if own_group:
            torch.distributed.destroy_process_group()
    return summary


def train_loop(run, stop, callback):
    """Evaluating, saving and stopping happen only at an iteration boundary, where the
    saved state resumes exactly."""
    config = run.config
    model = run.train_model
    optimizer = run.optimizer
    scaler = run.scaler
    X, Y = run.first_batch
    iter_num = run.start_iter
    best_val_loss = run.start_best_val_loss
    history = []
    last_train_loss = None
    in_step = False   # in an optimizer step: the state is half-updated
    stopped = False   # by Ctrl-C or SIGTERM
    at_once = False   # by a KeyboardInterrupt
    run.dir.start_clock(iter_num)
    try:
        while True:
            lr = get_lr(iter_num, config)
            for group in optimizer.param_groups:
                group["lr"] = lr
            last_iter = iter_num >= config["max_iters"]
            if run.ddp:   # all ranks stop at the same boundary
                stop.vote()
            if stop.requested:
                stopped = True
                break

            # evaluate on fixed batches; save last.pt, and ckpt.pt when val improved
            if iter_num % config["eval_interval"] == 0 or last_iter or config["eval_only"]:
                row = evaluate(run, iter_num, lr, stop)
                history.append(row)
                best = row["val_loss"] < best_val_loss or config["always_save_checkpoint"]
                # ckpt.pt holds best_val_loss; iteration 0, unsaved, counts where nothing is saved
                if iter_num > 0 or config["eval_only"] or last_iter:
                    best_val_loss = min(best_val_loss, row["val_loss"])
                if iter_num > 0 and not config["eval_only"]:
                    save_checkpoints(run, iter_num, best_val_loss, best)
                notify(run, callback, "eval", iter_num, row)
            if config["eval_only"] or last_iter:
                break

            # one optimizer step, its gradient accumulated over accum micro-batches
            in_step = True
            loss_sum = torch.zeros((), device=run.device)
            for micro in range(run.accum):
                if run.ddp:   # average the gradients after the last micro-step only
                    model.require_backward_grad_sync = micro == run.accum - 1
                with run.ctx:
                    logits, loss = model(X, Y)
                loss_sum += loss.detach()
                # the next batch, while the GPU works
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
            iter_num += 1
            in_step = False

            if it % config["log_interval"] == 0:
                total = loss.clone()
                if run.ddp:
                    torch.distributed.all_reduce(total)
                last_train_loss = total.item() / run.world
                # a log.csv row with the speed; a NaN loss stops the run here
                row = run.dir.log(iter=it, kind="train", loss=last_train_loss, lr=lr)
                say(run, f"iter {it}: loss {last_train_loss:.4f}, lr {lr:.2e}, "
                    f"{row['ms_per_iter']:.2f} ms/iter, {row['tokens_per_s']:,.0f} tok/s, "
                    f"eta {row['eta']}")
            notify(run, callback, "iter", iter_num, dict(loss=loss, lr=lr))
    except KeyboardInterrupt:   # a second Ctrl-C, or one during an evaluation
        stopped = True
        at_once = True
    if stopped:   # last.pt here, unless mid-step or saved already; say what out_dir keeps
        with run.dir.stopping(iter_num, in_step) as should_save:
            if should_save:
                save_checkpoints(run, iter_num, best_val_loss, False, gather=not at_once)
    return dict(history=history, best_val_loss=best_val_loss, interrupted=stopped,
                last_train_loss=last_train_loss, iter_num=iter_num)


def main(argv=None):
    # config files, then --key=value over DEFAULTS;
    # bad input: one line `error: ... (fix: ...)`, exit code 1
    memory_fix = "lower --batch_size and raise --gradient_accumulation_steps, or lower --block_size"
    summary = run_command(train, DEFAULTS, argv, with_explicit=True, memory_fix=memory_fix)
    if summary["interrupted"]:
        raise SystemExit(130)
    return summary


if __name__ == "__main__":
    main()
    gc.freeze()   # all is written: spare the exit a garbage collection
