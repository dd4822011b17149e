"""
A training run's folder (out_dir) while train.py writes it (RunDir): its lock, stale temporary files, the notes
before a run (a warmup longer than the run, a busy machine, the CPU time), log.csv (run_log.py's CsvLog) with the
speed and time left (Speed), a NaN loss stopping the run, what goes with each checkpoint write (log.csv, saved),
what a stop or a divergence leaves behind, loss.png at the end; W&B (wandb_log.py). The rest of what keeps a run
safe: train_config.py (the config's checks), starting_point.py (the data and the checkpoint a run starts from),
stop.py (Ctrl-C and SIGTERM).

No training logic: the loop, the batches and their seeds, the learning rate, the RNG's seeds, the
model's arguments, the loss averaged over the ranks and its log line, the optimizer step and which
checkpoint is written when (train.py's save_checkpoints: NaN weights refused, every rank's RNG state
gathered, checkpoint.save_checkpoint) are train.py's.
"""

import contextlib
import functools
import math
import os
import shutil
import sys
import time

import torch

from safety_net.build import depth_summary
from safety_net.checkpoint import CKPT_NAME, LAST_NAME, load_checkpoint
from safety_net.configurator import UserError
from safety_net.fileio import (LOCK_NAME, RUN_FILES, atomic_path, lock_dir, lock_for_reading,
                               remove_stale_temp_files)
from safety_net.run_log import CsvLog, Speed, format_duration, plot_run
from safety_net.runtime import busy_machine, on_rank_zero
from safety_net.wandb_log import WandbLog


PROGRESS_EVERY_S = 15   # a long evaluation prints a progress line this often


# --- notes before a long run ----------------------------------------------------------------------------

def time_one_sequence(model, x, y, ctx):
    """Seconds of a forward and backward pass of the first sequence of (x, y) (the note on the run's length). The
    gradients are taken with torch.autograd.grad, so the parameters' .grad stay untouched."""
    t0 = time.time()
    with ctx:
        logits, loss = model(x[:1], y[:1])
    params = [p for p in model.parameters() if p.requires_grad]
    torch.autograd.grad(loss, params, allow_unused=True)
    return time.time() - t0


def notes_before_run(config, device, micro_steps, batch_size, time_one_sequence, start_iter=0, explicit=()):
    """One line each, when they apply: the schedule's keys the user set (explicit) are not read without decay_lr;
    every iteration falls in the warmup; the CPUs are busy; the run would take over half an hour on this CPU
    (time_one_sequence(): the seconds of a forward+backward of one sequence), from start_iter (a resume's: the
    iterations left; it counted all max_iters). --eval_only trains no iteration: one evaluation."""
    iterations = 0 if config["eval_only"] else config["max_iters"]
    # nanoGPT's get_lr reads none of them without decay_lr either, and says nothing (they were accepted and dropped)
    unread = [key for key in ("warmup_iters", "lr_decay_iters", "min_lr") if key in explicit]
    if not config["decay_lr"] and unread and iterations > 0:
        print(f"note: decay_lr=False: the lr is {config['learning_rate']:g} throughout, and "
              f"{', '.join(unread)} {'is' if len(unread) == 1 else 'are'} not read "
              f"(fix: --decay_lr=True for the warmup and decay)", flush=True)
    if config["decay_lr"] and config["warmup_iters"] >= iterations > 0:   # e.g. a config shrunk by --max_iters
        which = "the one iteration falls" if iterations == 1 else f"all {iterations} iterations fall"
        print(f"note: {which} in the "
              f"{config['warmup_iters']}-iteration warmup, so the lr never reaches "
              f"{config['learning_rate']:g} (fix: also pass --warmup_iters and --lr_decay_iters)", flush=True)
    if device.type != "cpu":
        return
    if busy_machine(device):
        print(f"note: {busy_machine(device)}", flush=True)
    with torch.random.fork_rng(devices=[]):   # the probe must not move the dropout RNG
        for _ in range(2):   # the second call: the first pays one-time costs
            step_s = time_one_sequence() * batch_size
    left = max(0, iterations - start_iter)
    evals = left // config["eval_interval"] + 1
    total_s = step_s * (micro_steps * left + evals * 2 * config["eval_iters"] / 3)
    if total_s < 1800:
        return
    fix = (f"this is a GPU recipe; its CPU twin is `python train.py {config['cpu_twin']}`" if config["cpu_twin"]
           else "a GPU, or a smaller model / fewer --max_iters")
    print(f"note: this run needs about {format_duration(total_s)} on this CPU (~{step_s:.1f} s per "
          f"micro-step; {count_iterations(left)}, {evals} evaluation(s)) (fix: {fix})", flush=True)


def count_iterations(n):
    """'1 iteration', '2 iterations' (the closing line said "1 iterations")."""
    return f"{n} iteration" if n == 1 else f"{n} iterations"


def note_earlier_run(out_dir, config):
    """A note on stderr when a new run's out_dir holds an earlier run's checkpoint: this run replaces it, with
    log.csv and loss.png, at its first save or a stop (nanoGPT's behaviour, said at the start: a run from scratch
    in a reused out_dir replaced a trained run without a word); an --eval_only run from scratch evaluates fresh
    weights and does not read it. A run that saves nothing (max_iters=0) replaces nothing."""
    path = os.path.join(out_dir, LAST_NAME if os.path.exists(os.path.join(out_dir, LAST_NAME)) else CKPT_NAME)
    if config["eval_only"]:
        if config["init_from"] == "scratch":
            print(f"note: --eval_only evaluates a model initialized from scratch; {path} is not read (fix: "
                  f"--init_from=resume to evaluate it)", file=sys.stderr, flush=True)
        return
    if config["max_iters"] == 0:
        return
    try:
        at = f" (iteration {load_checkpoint(path, mmap=True)['iter_num']})"
    except (UserError, KeyError):   # damaged, or no iteration recorded: replaced all the same
        at = ""
    print(f"note: {out_dir} holds an earlier run's {os.path.basename(path)}{at}: this new run replaces its "
          f"checkpoints, log.csv and loss.png at its first save, or a stop (fix: another --out_dir, or "
          f"--init_from=resume to continue it)", file=sys.stderr, flush=True)


# --- out_dir while a run writes to it -------------------------------------------------------------------

def catch_up_ckpt(out_dir, resumed, best_val_loss):
    """A resume from last.pt: when out_dir's ckpt.pt misses the best val loss last.pt records, last.pt becomes
    ckpt.pt. A kill, a second Ctrl-C or a full disk between last.pt and ckpt.pt of a best evaluation left ckpt.pt
    at an earlier one, and no later save replaced it, as none beat that loss (a hunt); last.pt is that evaluation's
    state (the cut save's, or the stop's right after it). A damaged ckpt.pt is replaced too, and a missing one
    when last.pt records an evaluation; before the first (best_val_loss inf) there is none to keep, and sample.py
    reads last.pt then (it was copied as "a save cut short"; a hunt)."""
    path = os.path.join(out_dir, CKPT_NAME)
    if not resumed.endswith(LAST_NAME):
        return
    if not os.path.exists(path):
        why = "was missing"
        behind = math.isfinite(best_val_loss)
    else:
        why = f"was behind the best val loss of {resumed} (a save cut short)"
        try:
            behind = load_checkpoint(path, mmap=True).get("best_val_loss") != best_val_loss
        except UserError:
            why = "could not be read"
            behind = True
    if behind:
        with atomic_path(path) as tmp:
            shutil.copyfile(resumed, tmp)
        print(f"{path} {why}: copied last.pt to it", flush=True)


def missing_folders(path):
    """The folders of path that do not exist yet, innermost first: those a run makes (lock_dir makes them all)."""
    missing = []
    path = os.path.abspath(path)
    while not os.path.exists(path):
        missing.append(path)
        path = os.path.dirname(path)
    return missing


def remove_if_only_the_lock(path, made):
    """A folder a run made and left holding only its lock (it saved nothing): removed, and the empty folders above
    it that the run made too (`made`, missing_folders': --out_dir=runs/a/b left runs/a; a hunt)."""
    with contextlib.suppress(OSError):   # another process's file appeared meanwhile: the folder stays
        if os.listdir(path) == [LOCK_NAME]:
            os.remove(os.path.join(path, LOCK_NAME))
            os.rmdir(path)
            for folder in made[1:]:
                os.rmdir(folder)   # OSError once one is not empty: it and those above it stay


class RunDir:
    """out_dir during a run, a context manager (check_train_config has checked that out_dir can be
    written, before anything changed). Entering it, rank 0 (master) takes the folder's lock (one
    writer per out_dir: a second run into it would replace this one's checkpoints and log.csv),
    removes the temporary files a kill -9 left and opens log.csv (CsvLog); leaving it releases them.
    A new run into the folder of an earlier one keeps the earlier log.csv and loss.png until this
    run's first save, so that they always go with the checkpoints beside them. iter_num: where the
    run starts; ckpt: the checkpoint it starts from, or None."""

    def __init__(self, config, iter_num, ckpt, rank, world, device):
        self.path = config["out_dir"]
        self.config = config
        self.iter_num = iter_num
        self.resuming = config["init_from"] == "resume"
        # the iteration last.pt holds for this run (None: nothing saved yet)
        self.saved_iter = iter_num if self.resuming and ckpt["path"].endswith(LAST_NAME) else None
        self.rank = rank
        self.master = rank == 0
        self.world = world
        self.ddp = world > 1
        self.device = device
        self.accum = config["gradient_accumulation_steps"] // world   # micro-steps per rank
        self.tokens_per_iter = self.accum * world * config["batch_size"] * config["block_size"]
        self.speed = Speed(config["max_iters"], config["eval_interval"], self.tokens_per_iter)
        self.earlier = False
        # True while out_dir's checkpoints are an earlier run's: this run's first save replaces ckpt.pt too
        self.ckpt_from_earlier_run = False
        self.resumed = (ckpt["path"], ckpt["best_val_loss"]) if self.resuming else None
        self.csv_log = None
        self.t_start = time.time()
        self.t_eval = None
        self.shown = self.t_start
        self.wandb = WandbLog(config, self.master)
        self.held = contextlib.ExitStack()

    def __enter__(self):
        on_rank_zero(self.open, self.rank, self.world)
        return self

    def open(self):
        with contextlib.ExitStack() as held:
            made = missing_folders(self.path)
            # the dataset: no prepare --force writes it while this run reads train.bin at every batch
            held.enter_context(lock_for_reading(self.config["data_dir"]))
            held.enter_context(lock_dir(self.path))
            # a folder this run made and leaves holding only its lock (it saved nothing): removed while the
            # lock is still held (a run refused the lock removes nothing)
            if made:
                held.callback(remove_if_only_the_lock, self.path, made)
            remove_stale_temp_files(self.path, RUN_FILES,
                                    functools.partial(print, flush=True))
            self.earlier = not self.resuming and any(os.path.exists(os.path.join(self.path, n))
                                                     for n in (CKPT_NAME, LAST_NAME))
            self.ckpt_from_earlier_run = self.earlier
            if self.resuming:
                catch_up_ckpt(self.path, *self.resumed)
            keep_before = self.iter_num if self.resuming else None
            path = os.path.join(self.path, "log.csv")
            # pending: rows kept aside until a checkpoint is written (an eval_only run writes none, nor
            # one of max_iters=0: saves come after iteration 0)
            pending = self.earlier or self.config["eval_only"] or self.config["max_iters"] == 0
            self.csv_log = CsvLog(path, keep_before=keep_before, pending=pending)
            held.callback(self.csv_log.discard)   # also when the run fails before its first save
            self.held = held.pop_all()
        if self.earlier:
            note_earlier_run(self.path, self.config)

    def __exit__(self, *exc):
        self.held.close()

    def say(self, message):
        if self.master:
            print(message, flush=True)

    def say_what_runs(self, model, segments, batch, ctx, explicit=()):
        """Rank 0, before the loop: the model's size and depth, the tokens per iteration, the data_segments
        in use, then notes_before_run's (schedule keys set but not read, a warmup longer than the run, busy CPUs,
        hours of CPU time, timed on the first batch: `batch`, run under ctx; explicit: the keys the user set)."""
        if not self.master:
            return
        c = self.config
        if segments is not None:
            print(f"training windows start only at the {len(segments):,} segments of {c['data_segments']}", flush=True)
        print(f"number of parameters: {model.get_num_params(non_embedding=False):,} (non-embedding: "
              f"{model.get_num_params():,})", flush=True)
        print(f"depth: {depth_summary(model)}", flush=True)
        print(f"tokens per iteration: {self.tokens_per_iter:,} ({self.accum} accum x {self.world} ranks x "
              f"{c['batch_size']} batch x {c['block_size']} block); device {self.device}, dtype {c['dtype']}, "
              f"compile {c['compile']}", flush=True)
        probe = functools.partial(time_one_sequence, model, *batch, ctx)
        notes_before_run(c, self.device, self.accum, c["batch_size"], probe, self.iter_num, explicit)

    def start_clock(self, iter_num):
        """The loop starts at iter_num: elapsed_s counts from here, and the first speed window."""
        self.t_start = time.time()
        self.speed.restart(iter_num)

    def elapsed(self):
        return time.time() - self.t_start

    def eval_progress(self, split, k, n):
        """Before each evaluation batch: the first starts the evaluation's clock (its time is left out of
        ms/iter), then a line every PROGRESS_EVERY_S seconds during a long evaluation."""
        if self.t_eval is None:
            self.speed.eval_started()
            self.t_eval = self.shown = time.time()
        if time.time() - self.shown > PROGRESS_EVERY_S:
            self.say(f"  evaluating: {split} batch {k + 1}/{n}, {time.time() - self.t_eval:.0f} s")
            self.shown = time.time()

    def log(self, **row):
        """One row of log.csv (and of W&B, for an evaluation), with elapsed_s, the seconds since the loop
        started; returns it. A train row (kind='train', iteration `iter`) gets the speed since the last one
        (ms_per_iter, tokens_per_s), and the row returned also the time left as text (eta), for train.py's line.
        An eval row ends the evaluation's clock. Before anything, a NaN or inf loss stops the run: training
        diverged (at this logged iteration or since the last one)."""
        it = row["iter"]
        if row["kind"] == "train":
            # read every log_interval iterations (reading waits for the GPU): it may have diverged since the last
            every = self.config["log_interval"]
            losses = {"the training loss" + (f" (read every {every} iterations)" if every > 1 else ""): row["loss"]}
        else:
            losses = {"the eval loss on train": row["loss"], "the eval loss on val": row["val_loss"]}
        for what, value in losses.items():
            if not math.isfinite(value):
                raise self.diverged(f"{what} is {value}", it)
        eta = None
        if row["kind"] == "train":
            timing, eta = self.speed.log_window(it + 1)
            row.update(timing)
        else:
            self.speed.eval_ended(it)
            self.t_eval = None
        row["elapsed_s"] = self.elapsed()
        if self.master:
            self.csv_log.write(**row)
            self.wandb.log(row)
        if eta is not None:
            return dict(row, eta=eta)
        return row

    def saved(self, iter_num, seconds):
        """After train.py saved iteration iter_num (every rank calls it): log.csv's pending rows go with last.pt,
        a stop now keeps this iteration, ckpt.pt is this run's; the save's seconds are left out of ms/iter."""
        if self.master:
            self.csv_log.commit()
        self.saved_iter = iter_num
        self.ckpt_from_earlier_run = False
        self.speed.set_aside(iter_num, seconds)

    def kept(self):
        """What a stop now leaves in out_dir, in words."""
        if self.saved_iter is not None:
            return f"{LAST_NAME} keeps iteration {self.saved_iter}"
        # a new run that saved nothing yet: checkpoints in out_dir are an earlier run's, which sample.py would load
        earlier = [n for n in (CKPT_NAME, LAST_NAME)
                   if not self.resuming and os.path.exists(os.path.join(self.path, n))]
        if not earlier:
            return "nothing was saved"
        names = " and ".join(earlier)
        verb = "is" if len(earlier) == 1 else "are"
        return f"nothing was saved (the {names} in {self.path} {verb} an earlier run's)"

    def diverged(self, what, it):
        c = self.config
        # without decay_lr the lr is learning_rate throughout (nanoGPT's get_lr): no warmup to lengthen (a hunt)
        warmup = f" or lengthen --warmup_iters (now {c['warmup_iters']})" if c["decay_lr"] else ""
        return UserError(f"{what} at iteration {it}: training diverged; {self.kept()} (fix: lower --learning_rate "
                         f"(now {c['learning_rate']:g}){warmup})")

    @contextlib.contextmanager
    def stopping(self, iter_num, in_step):
        """After Ctrl-C / SIGTERM, around train.py's save of last.pt at the iteration boundary the loop stopped at:
        yields whether to save (not when stopped mid-step: that state is half-updated; not when this iteration
        is saved already; not when the run has not trained: an --eval_only run, or a stop in the first
        evaluation, replaced an earlier run's ckpt.pt and last.pt with the weights it started from; a hunt), then
        says what out_dir keeps. A Ctrl-C during that save ends it: the atomic save kept the old file."""
        if in_step:
            self.say(f"\nstopped during iteration {iter_num}: {self.kept()}")
            yield False
            return
        if iter_num == self.iter_num:
            self.say(f"\ninterrupted at iteration {iter_num}, before any training step: {self.kept()}")
            yield False
            return
        try:
            yield self.saved_iter != iter_num
            self.say(f"interrupted at iteration {iter_num}: saved {os.path.join(self.path, LAST_NAME)}; "
                     f"continue with --init_from=resume")
        except KeyboardInterrupt:   # a second Ctrl-C during that save
            self.say(f"\nstopped while saving iteration {iter_num}: {self.kept()}")

    def finish(self, model, args, history, best_val_loss, last_train_loss, iter_num, interrupted):
        """loss.png from log.csv (or, when this run saved no checkpoint, the earlier run's log.csv
        and loss.png kept), the closing line, then the dict train() returns (tools/compare.py reads
        it)."""
        if self.master and self.csv_log.discard():
            if os.path.exists(self.csv_log.path):
                self.say(f"this run saved no checkpoint: kept log.csv and loss.png in {self.path} as they were, "
                         f"with the checkpoints they go with")
            else:   # --eval_only into a new out_dir
                self.say("this run saved no checkpoint, so it wrote no log.csv or loss.png either")
        elif self.master:
            self.csv_log.close()
            plot_run(self.csv_log.rows, os.path.join(self.path, "loss.png"),
                     os.path.basename(os.path.abspath(self.path)))
        train_time = self.elapsed()
        ms_per_iter, tokens_per_s = self.speed.summary()
        final = history[-1] if history else {}
        if not interrupted:
            # this run's iterations; a resumed run also says where it started
            since = f" (iterations {self.iter_num} to {iter_num})" if self.resuming else ""
            self.say(f"done: best val loss {best_val_loss:.4f}, {count_iterations(iter_num - self.iter_num)} in "
                     f"{format_duration(train_time)}{since}")
        return {
            "best_val_loss": best_val_loss, "final_train_loss": final.get("loss"),
            "final_val_loss": final.get("val_loss"), "final_val_loss_heaviest": final.get("val_loss_heaviest"),
            "last_train_loss": last_train_loss, "iter_num": iter_num, "ms_per_iter": ms_per_iter,
            "tokens_per_s": tokens_per_s, "train_time_s": train_time, "eval_time_s": self.speed.eval_seconds,
            "num_params": model.get_num_params(False), "num_params_non_embedding": model.get_num_params(True),
            "model_args": dict(args), "out_dir": self.path, "interrupted": interrupted, "evals": history,
        }
