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
import sys
import time

import numpy as np
import torch

from benchmarks.measure import peak_flops
from configurator import (UserError, autocast, check_train_config, distributed_env, gpt_config_defaults, load_config,
                          resolve_device, resolve_dtype, train_model_args)
from runfiles.checkpoint import (CKPT_NAME, LAST_NAME, StopRequest, atomic_copy, atomic_save, build_model,
                                 check_out_dir, load_matching_weights, load_optimizer_state, load_own_weights,
                                 lock_dir, plain_values, remove_stale_temp_files, restore_rng, rng_state)
from runfiles.dataset import (SPLIT_CODES, batch_seed, check_splits, default_data_dir, ensure_prepared, get_batch,
                              load_meta, split_path, tokenizer_id)
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


def train(config, explicit=None, callback=None):
    """Train with `config` (DEFAULTS updated with the caller's values). explicit: the keys the user set
    (model keys among them override the variant; see configurator.model_args); None means the model keys
    that differ from GPTConfig's defaults. callback(event, info), if given, is called on every rank with
    event 'iter' (after each optimizer step; its loss is a 0-d tensor on the device), 'eval' or 'end'; info has
    iter_num, model (the raw module), rank and the logged values. Returns a summary dict."""
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
    if world == 1:
        with contextlib.ExitStack() as held:   # run() keeps out_dir's lock in it: released however run() ends
            return run(config, set(explicit), callback, device, held=held)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    owns_group = not torch.distributed.is_initialized()
    if owns_group:
        torch.distributed.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    try:
        with contextlib.ExitStack() as held:
            return run(config, set(explicit), callback, device, rank, world, held=held)
    finally:
        if owns_group:
            torch.distributed.destroy_process_group()


def run(config, explicit, callback, device, rank=0, world=1, *, held):
    """One training run: setup, the loop, the summary. Every rank runs it; only rank 0 prints and writes.
    held: an ExitStack of the caller's that keeps rank 0's lock on out_dir until the run has ended."""
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
        ensure_prepared(config["dataset"], data_dir)
    if ddp:
        torch.distributed.barrier()
    meta = load_meta(data_dir)

    # --- model: fresh, resumed, or initialized from another checkpoint's weights ----------------------
    args, ckpt = train_model_args(config, explicit, meta, device, say)
    config.update(args)   # the config saved with checkpoints shows the model that was really trained
    block_size, batch_size = args["block_size"], config["batch_size"]
    segments = check_splits(data_dir, args["vocab_size"], block_size, config["data_segments"])
    if segments is not None:   # paper 003's data refining
        say(f"training windows start only at the {len(segments):,} segments of {config['data_segments']}")
    torch.manual_seed(config["seed"])   # the same initial weights on every rank and in every run with this seed
    raw_model = build_model(args)
    resuming = config["init_from"] == "resume"
    iter_num, best_val_loss = (int(ckpt["iter_num"]), float(ckpt["best_val_loss"])) if resuming else (0, math.inf)
    if resuming:
        load_own_weights(raw_model, ckpt)
    elif ckpt is not None:
        copied, total = load_matching_weights(raw_model, ckpt["model"], ckpt["path"], config["allow_partial_init"])
        say(f"initialized {copied}/{total} tensors from {ckpt['path']}")
    raw_model.to(device)
    optimizer = raw_model.configure_optimizers(config["weight_decay"], config["learning_rate"],
                                               (config["beta1"], config["beta2"]), device.type)
    scaler = torch.amp.GradScaler(device.type, enabled=(dtype == "float16"))   # loss scaling for fp16 only
    if resuming:
        load_optimizer_state(optimizer, ckpt)
        if scaler.is_enabled() and ckpt.get("scaler"):
            scaler.load_state_dict(ckpt["scaler"])
    check_out_dir(out_dir)

    # --- every input is checked: only from here on do files in out_dir change -------------------------
    if master:
        # one writer per out_dir: a second run into it would replace this one's checkpoints and log.csv
        held.enter_context(lock_dir(out_dir))
        os.makedirs(out_dir, exist_ok=True)
        remove_stale_temp_files(out_dir, (CKPT_NAME, LAST_NAME, "log.csv", "loss.png"), say)
        # a new run into the folder of an earlier one: its log.csv and loss.png stay until this run's first save,
        # so that they always go with the checkpoints beside them
        earlier = not resuming and any(os.path.exists(os.path.join(out_dir, n)) for n in (CKPT_NAME, LAST_NAME))
        csv_log = CsvLog(os.path.join(out_dir, "log.csv"), keep_before=iter_num if resuming else None,
                         pending=earlier)
        held.callback(csv_log.discard)   # also when the run fails before its first save
    say(f"number of parameters: {raw_model.get_num_params(False) / 1e6:.2f}M "
        f"(non-embedding: {raw_model.get_num_params(True) / 1e6:.2f}M)")
    say(f"depth: {raw_model.depth_summary()}")
    tokens_per_iter = accum * world * batch_size * block_size
    say(f"tokens per iteration: {tokens_per_iter:,} ({accum} accum x {world} ranks x {batch_size} batch x "
        f"{block_size} block); device {device}, dtype {dtype}, compile {config['compile']}")
    if config["decay_lr"] and config["warmup_iters"] >= config["max_iters"] > 0:   # e.g. a config shrunk by --max_iters
        say(f"note: all {config['max_iters']} iterations fall in the {config['warmup_iters']}-iteration warmup, so the "
            f"lr never reaches {config['learning_rate']:g} (fix: also pass --warmup_iters and --lr_decay_iters)")
    train_gen = torch.Generator()

    def next_batch(it, micro):
        # the global micro-step index makes rank r of W see what one process sees at micro-step r*accum+micro
        train_gen.manual_seed(batch_seed(config["seed"], SPLIT_CODES["train"], it, rank * accum + micro))
        return get_batch(split_path(data_dir, "train"), batch_size, block_size, train_gen, device, segments)

    X, Y = next_batch(iter_num, 0)   # the first batch; each step fetches the next one while the GPU works
    if device.type == "cpu" and master:
        note_cpu_time(config, raw_model, X, Y, dtype, accum, say)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    # model (compiled if asked) evaluates; train_model (model in DDP when distributed) trains
    if config["compile"]:
        # dynamo keeps at most 8 graphs of GPT.forward per process; compare.py trains 4 models in one, and the
        # later ones would silently run uncompiled: start each run's compilation afresh
        torch._dynamo.reset()
    model = torch.compile(raw_model) if config["compile"] else raw_model
    train_model = model
    if ddp:
        from torch.nn.parallel import DistributedDataParallel
        train_model = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    # the RNG (dropout): each rank its own stream; a resumed run continues the saved one (a rank that has
    # none, after a change of the number of ranks, starts a new stream for this iteration)
    torch.manual_seed(config["seed"] + rank + iter_num)
    random.seed(config["seed"] + rank + iter_num)
    np.random.seed((config["seed"] + rank + iter_num) % 2**32)
    if resuming:
        saved = ckpt["rng_ranks"][rank] if ckpt.get("rng_ranks") and len(ckpt["rng_ranks"]) == world else \
            ckpt.get("rng") if master else None
        if saved is not None:
            restore_rng(saved, device)

    @torch.no_grad()
    def evaluate(splits):
        """Mean loss over eval_iters fixed batches per split (the same batches at every call). Under DDP each
        rank evaluates every world-th batch and the sums are all-reduced. Ctrl-C / SIGTERM cut it short
        (single process only: DDP ranks all finish it); evaluating changes no state, so the loop saves at once."""
        n, gen, out = config["eval_iters"], torch.Generator(), {}
        t0 = shown = time.time()
        model.eval()
        try:
            for split in splits:
                losses = torch.zeros(n, device=device)
                for k in range(rank, n, world):
                    gen.manual_seed(batch_seed(config["seed"], 1000 + SPLIT_CODES.get(split, 9), k))
                    x, y = get_batch(split_path(data_dir, split), batch_size, block_size, gen, device)
                    with autocast(device, dtype):
                        losses[k] = model(x, y)[1].float()
                    if stop.requested and not ddp:
                        raise KeyboardInterrupt
                    if time.time() - shown > PROGRESS_EVERY_S:
                        say(f"  evaluating: {split} batch {k + 1}/{n}, {time.time() - t0:.0f} s")
                        shown = time.time()
                if ddp:
                    torch.distributed.all_reduce(losses)
                out[split] = losses.mean().item()
        finally:
            model.train()
        return out

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
            # the first save of a new run replaces an earlier run's ckpt.pt too (Ctrl-C before the first eval's)
            if best or (earlier and saved_iter is None):
                atomic_copy(os.path.join(out_dir, LAST_NAME), os.path.join(out_dir, CKPT_NAME))
                say(f"saved {CKPT_NAME} and {LAST_NAME} to {out_dir}")
            csv_log.commit()
        saved_iter = iter_num

    def kept():
        if saved_iter is not None:
            return f"{LAST_NAME} keeps iteration {saved_iter}"
        # a new run that saved nothing yet: checkpoints in out_dir are an earlier run's, which sample.py would load
        earlier = [n for n in (CKPT_NAME, LAST_NAME) if not resuming and os.path.exists(os.path.join(out_dir, n))]
        return "nothing was saved" + (f" (the {' and '.join(earlier)} in {out_dir} are an earlier run's)" if earlier else "")

    def diverged(what, it):
        return UserError(f"{what} at iteration {it}: training diverged; {kept()} (fix: lower --learning_rate "
                         f"(now {config['learning_rate']:g}) or lengthen --warmup_iters (now {config['warmup_iters']}))")

    # --- the training loop ------------------------------------------------------------------------------
    # Each pass starts at an iteration boundary: the weights and optimizer hold the state after iter_num
    # steps, and the RNG (dropout) is exactly where step iter_num-1 left it. State saved there resumes
    # exactly, so evaluation, saving and stopping happen only there. The one flag `in_step` marks the rest
    # (from the first forward to iter_num += 1): an interrupt in there saves nothing.
    peak = peak_flops(device)   # the GPU's bf16 FLOP/s for the MFU print; None on a CPU
    saved_iter = iter_num if resuming and ckpt["path"].endswith(LAST_NAME) else None   # what last.pt holds
    history, window_ms, last_train_loss, ema_ms = [], [], None, None
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
                    mfu = raw_model.estimate_mfu(batch_size * accum, ema_ms / 1000, peak) \
                        if peak is not None and len(window_ms) > 2 else None
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
                notify("iter", loss=loss_sum / accum, lr=lr)   # a tensor: .item() would wait for the GPU
        except KeyboardInterrupt:   # a second Ctrl-C, or raised by a callback
            interrupted = hard_stop = True
        if interrupted and in_step:
            say(f"\nstopped during iteration {iter_num}: {kept()}")
        elif interrupted:
            try:
                if saved_iter != iter_num:
                    save_last(gather=not hard_stop)   # after a hard stop the other DDP ranks may be gone
                say(f"interrupted at iteration {iter_num}: saved {os.path.join(out_dir, LAST_NAME)}; "
                    f"continue with --init_from=resume")
            except KeyboardInterrupt:   # a second Ctrl-C during that save: the atomic save kept the old file
                say(f"\nstopped while saving iteration {iter_num}: {kept()}")

    # --- the end: loss.png and the summary -------------------------------------------------------------
    if master:
        if csv_log.discard():
            say(f"this run saved no checkpoint: kept the earlier run's log.csv and loss.png in {out_dir}, which go "
                f"with its checkpoints")
        else:
            csv_log.close()
            plot_run(out_dir)
    train_time = time.time() - t_start
    steady = window_ms[1:] or window_ms   # the first window includes warm-up (and compilation)
    ms_per_iter = float(np.median(steady)) if steady else None
    final = history[-1] if history else {}
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
        raise SystemExit(f"error: {e}") from None
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
