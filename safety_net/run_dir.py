"""
A training run's folder (out_dir) and what keeps the run safe, for train.py; a learner can skip it.

    check_train_config refuse a bad config in one line, before anything changes (full_config,
                       check_settings); resolve device and dtype
    prepared_data      the dataset folder, prepared on first use (by rank 0; the others wait), its
                       meta.json and its tokenizer_id
    StartingPoint      the checkpoint a run starts from (resume, another's weights), or None; check:
                       one line for what a run cannot start from (the model arguments train.py built
                       against the checkpoint, the data and this model.py; the token files); restore:
                       a resumed run's weights, optimizer, loss scaler and RNG states, or another
                       checkpoint's weights that fit
    StopRequest        Ctrl-C / SIGTERM: the first asks the loop to stop at the next iteration
                       boundary (where last.pt resumes exactly; DDP ranks vote), the second stops
                       at once
    RunDir             out_dir while the run writes it: its lock, stale temporary files, the notes
                       before a run, log.csv (CsvLog) with the speed and time left (Speed), a NaN
                       loss stopping the run, what goes with each checkpoint write (log.csv,
                       saved), what a stop or a divergence leaves behind, loss.png at the end

No training logic: the loop, the batches and their seeds, the learning rate, the RNG's seeds, the
model's arguments, the loss averaged over the ranks and its log line, the optimizer step and which
checkpoint is written when (train.py's save_checkpoints: NaN weights refused, every rank's RNG state
gathered, checkpoint.save_checkpoint) are train.py's.
"""

import contextlib
import csv
import functools
import math
import os
import signal
import socket
import sys
import tempfile
import threading
import time
import urllib.parse

import numpy as np
import torch

from safety_net.build import depth_summary, gpt_config_defaults, load_variant, model_config
from safety_net.checkpoint import (CKPT_NAME, GPT2_NAMES, LAST_NAME, is_hf_source, load_checkpoint,
                                   load_init_checkpoint, load_matching_weights, load_optimizer_state, plain_values)
from safety_net.configurator import UserError
from safety_net.dataset import check_splits, default_data_dir, is_prepared, load_meta, run_prepare, tokenizer_id
from safety_net.fileio import atomic_open, check_out_dir, lock_dir, remove_stale_temp_files
from safety_net.runtime import busy_machine, check_num_threads, check_seed, resolve_device, resolve_dtype, restore_rng

PROGRESS_EVERY_S = 15   # a long evaluation prints a progress line this often


# --- the config, checked before anything is read or written ---------------------------------------------

def _need(c, ok, key, rule, fix):
    if not ok:
        raise UserError(f"{key} must be {rule}, got {c[key]!r} (fix: {fix})")


def _integer(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def full_config(config, explicit, defaults):
    """(defaults updated with config, the keys the user set). Unknown keys are refused; numpy scalars (a config file
    may compute with numpy) become Python numbers, as the safe loader refuses them in a checkpoint. explicit None
    (train() called as a library): the model keys that differ from GPTConfig's defaults win over a variant."""
    unknown = sorted(set(config) - set(defaults))
    if unknown:
        raise UserError(f"unknown config keys {unknown} (fix: see `python train.py --help` for the keys)")
    config = plain_values({**defaults, **config})
    if explicit is None:
        explicit = {k for k, v in gpt_config_defaults().items() if config[k] != v}
    return config, set(explicit)


def check_train_config(config, explicit, defaults, world=1, local_rank=None):
    """train.py's checks before anything runs: (config over defaults, the keys the user set, torch.device, dtype
    name). Refuses unknown keys (full_config) and values that make no sense (check_settings) in one line; resolves
    device and dtype ('auto': cuda > mps > cpu; bf16, else fp16, on cuda; float32 elsewhere)."""
    config, explicit = full_config(config, explicit, defaults)
    check_settings(config, world)
    device = resolve_device(config["device"], local_rank)
    return config, explicit, device, resolve_dtype(config["dtype"], device)


def check_settings(c, world=1):
    """train.py's keys as the user set them (the schedule's None defaults, which train.py fills,
    fit by construction): refuse values that make no sense, naming the key. world: DDP's ranks."""
    _check_train_settings(c)
    _check_schedule(c)
    _check_run_settings(c, world)


def _check_train_settings(c):
    for key in ("batch_size", "eval_interval", "log_interval", "eval_iters", "gradient_accumulation_steps"):
        _need(c, _integer(c[key]) and c[key] >= 1, key, "an integer >= 1", f"--{key}=1 or more")
    _need(c, _integer(c["max_iters"]) and c["max_iters"] >= 0, "max_iters", "an integer >= 0", "--max_iters=0 or more")
    check_num_threads(c["num_threads"])
    check_seed(c["seed"])
    _need(c, _number(c["learning_rate"]) and c["learning_rate"] > 0, "learning_rate", "> 0", "--learning_rate=1e-3")
    _need(c, _number(c["weight_decay"]) and c["weight_decay"] >= 0, "weight_decay", ">= 0", "--weight_decay=0.1")
    for key, usual in (("beta1", 0.9), ("beta2", 0.95)):
        _need(c, _number(c[key]) and 0 <= c[key] < 1, key, "in [0, 1)", f"--{key}={usual}")
    _need(c, _number(c["grad_clip"]) and c["grad_clip"] >= 0, "grad_clip", ">= 0 (0 = off)", "--grad_clip=1.0")
    if c["lr_decay_iters"] is not None:
        _need(c, _number(c["lr_decay_iters"]) and c["lr_decay_iters"] >= 0, "lr_decay_iters", "a number >= 0",
              f"--lr_decay_iters={c['max_iters']}")


def _check_schedule(c):
    """min_lr and warmup_iters fit learning_rate and lr_decay_iters (whose None is max_iters)."""
    decay = c["max_iters"] if c["lr_decay_iters"] is None else c["lr_decay_iters"]
    lr = c["learning_rate"]
    if c["min_lr"] is not None:
        _need(c, _number(c["min_lr"]) and 0 <= c["min_lr"] <= lr, "min_lr",
              f"in [0, learning_rate={lr:g}]", f"--min_lr={lr / 10:g}")
    if c["warmup_iters"] is not None:
        longest = decay if c["decay_lr"] else math.inf
        _need(c, _integer(c["warmup_iters"]) and 0 <= c["warmup_iters"] <= longest,
              "warmup_iters", f"an integer in [0, lr_decay_iters={decay}]",
              f"--warmup_iters={int(decay) // 10}, or leave it out: it defaults to "
              f"min(100, lr_decay_iters // 10)")


def _check_run_settings(c, world):
    """The rest of train.py's keys: DDP ranks, variant, dataset, out_dir, init_from."""
    accum = c["gradient_accumulation_steps"]
    if accum % world:
        raise UserError(f"gradient_accumulation_steps={accum} must be divisible by the {world} DDP ranks; each "
                        f"rank runs gradient_accumulation_steps/{world} micro-steps "
                        f"(fix: --gradient_accumulation_steps={max(world, accum // world * world)})")
    _need(c, c["backend"] in ("nccl", "gloo"), "backend", "nccl or gloo", "--backend=nccl for GPUs, gloo otherwise")
    if c["wandb_log"]:
        check_wandb()
    if c["variant"]:   # train.py then loads it with variants.load
        load_variant(c["variant"])
    _need(c, c["dataset"] != "", "dataset", "a dataset name", "--dataset=shakespeare_char")
    _need(c, c["out_dir"] != "", "out_dir", "a folder", "--out_dir=out")
    if c["init_from"] not in ("scratch", "resume", *GPT2_NAMES) and not os.path.exists(c["init_from"]):
        raise UserError(f"init_from '{c['init_from']}' does not exist (fix: write it first, e.g. with train.py or "
                        f"pangu.inherit as its config says, or --init_from=scratch)")
    _need(c, c["init_from"] in ("scratch", "resume") or os.path.isfile(c["init_from"]) or is_hf_source(c["init_from"]),
          "init_from", "'scratch', 'resume', a checkpoint file, gpt2* or a Hugging Face folder",
          "--init_from=scratch|resume|path/to/ckpt.pt|gpt2")


# --- the data and the model a run starts from -----------------------------------------------

def prepared_data(config, prepare, rank, world):
    """(the dataset folder, its meta.json, its tokenizer_id): data_dir, or data/<dataset>, prepared with
    prepare.py's `prepare` on first use (by rank 0; under DDP the other ranks wait for it)."""
    data_dir = default_data_dir(config)
    if rank == 0 and not is_prepared(data_dir):
        run_prepare(prepare, config["dataset"], data_dir)
    if world > 1:
        torch.distributed.barrier()
    meta = load_meta(data_dir)
    return data_dir, meta, tokenizer_id(meta)


class StartingPoint:
    """The checkpoint train.py starts from (init_from), its checks and its state: constructing it loads the
    checkpoint (`ckpt`, None for init_from=scratch); check(args, meta) refuses in one line what cannot start;
    restore(...) puts its state into the model train.py built."""

    def __init__(self, config, device, master=True):
        """init_from=resume: out_dir's last.pt, else ckpt.pt, refused in one line when there is none, when it holds
        weights only (no optimizer) or no iter_num or best_val_loss; master: say what it resumes.
        init_from=<path>: that checkpoint, ours or nanoGPT's, or a Hugging Face model imported
        (load_init_checkpoint); its weights checked by load_checkpoint."""
        self.config = config
        self.ckpt = None
        init_from = config["init_from"]
        if init_from == "resume":
            self.ckpt = self.resumed(config["out_dir"], device, master)
        elif init_from != "scratch":
            self.ckpt = load_init_checkpoint(init_from, device)   # (its model_args checked: model_config)

    @staticmethod
    def resumed(out_dir, device, master):
        if not any(os.path.isfile(os.path.join(out_dir, n)) for n in (LAST_NAME, CKPT_NAME)):
            raise UserError(f"nothing to resume: no {LAST_NAME} or {CKPT_NAME} in '{out_dir}' (fix: pass the "
                            f"out_dir of an earlier run, or start one with --init_from=scratch)")
        ckpt = load_checkpoint(out_dir, device, prefer=(LAST_NAME, CKPT_NAME))
        if ckpt.get("optimizer") is None:
            raise UserError(f"{ckpt['path']} has weights only (e.g. from pangu.inherit), nothing to resume "
                            f"(fix: --init_from={ckpt['path']} to start a new run from it)")
        missing = [k for k in ("iter_num", "best_val_loss") if k not in ckpt]   # (their types: damaged_fields)
        if missing:
            raise UserError(f"{ckpt['path']} has no {' or '.join(missing)}, so it cannot be resumed (fix: "
                            f"--init_from={ckpt['path']} to start a new run from its weights)")
        if master:
            print(f"resuming from {ckpt['path']} at iteration {ckpt['iter_num']}", flush=True)
        return ckpt

    def check(self, args, meta):
        """One line, before anything is built, for what train.py cannot start from: a resume whose model
        arguments (args, as train.py built them) differ from its checkpoint's in anything but dropout; a
        checkpoint of another tokenizer; a vocab_size under the data's; arguments this model.py cannot build
        (model_config); token files that do not fit the model, or data_segments that do not fit them
        (check_splits). (Non-finite weights: load_checkpoint.)"""
        config, ckpt = self.config, self.ckpt
        if config["init_from"] == "resume":
            saved = ckpt["model_args"]
            for key in sorted(k for k in args if k != "dropout" and args[k] != saved.get(k)):
                raise UserError(f"resume: {key}={args[key]!r} differs from the checkpoint's {key}="
                                f"{saved.get(key)!r} (fix: drop that override, or start a new run from its "
                                f"weights: --init_from={ckpt['path']} --allow_partial_init=True)")
        # first: another tokenizer's data also shows up as a vocab_size mismatch below
        if ckpt is not None and ckpt.get("tokenizer_id") not in (None, tokenizer_id(meta)):   # older: none
            raise UserError(f"{ckpt['path']} was trained with another tokenizer than {config['data_dir']}'s (its "
                            f"dataset: {ckpt.get('dataset')}) (fix: --dataset/--data_dir of that run, or "
                            f"--init_from=scratch)")
        if args["vocab_size"] < meta["vocab_size"]:
            raise UserError(f"vocab_size {args['vocab_size']} is smaller than the dataset's {meta['vocab_size']} "
                            f"tokens (fix: drop --vocab_size, it is read from meta.json)")
        model_config(args)   # what GPTConfig refuses, as one line
        check_splits(config["data_dir"], args["vocab_size"], args["block_size"], config["data_segments"])

    def restore(self, model, optimizer, scaler, rank, world):
        """A resumed run (init_from=resume): the weights, optimizer, fp16 loss scaler and this rank's RNG states
        as last.pt saved them (a rank with none, after a change of the number of ranks, keeps the stream
        train.py seeded). Another checkpoint (init_from=<path>): its weights whose names and shapes fit, and a
        line saying how many. Scratch: nothing."""
        config, ckpt = self.config, self.ckpt
        if ckpt is None:
            return
        if config["init_from"] != "resume":
            allow_partial = config["allow_partial_init"]
            copied, total = load_matching_weights(model, ckpt["model"], ckpt["path"], allow_partial)
            if rank == 0:
                print(f"initialized {copied}/{total} tensors from {ckpt['path']}", flush=True)
            return
        model.load_state_dict(ckpt["model"])   # they fit its model_args: load_checkpoint checked
        load_optimizer_state(optimizer, ckpt)
        if scaler.is_enabled() and ckpt.get("scaler"):
            scaler.load_state_dict(ckpt["scaler"])
        saved = ckpt.get("rng") if rank == 0 else None
        if ckpt.get("rng_ranks") and len(ckpt["rng_ranks"]) == world:
            saved = ckpt["rng_ranks"][rank]
        if saved is not None:
            restore_rng(saved, torch.device(config["device"]))


def _say(message):
    print(message, flush=True)


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


def notes_before_run(config, device, micro_steps, batch_size, time_one_sequence):
    """One line each, when they apply: every iteration falls in the warmup; the CPUs are busy; the run would take
    over half an hour on this CPU (time_one_sequence(): the seconds of a forward+backward of one sequence)."""
    if config["decay_lr"] and config["warmup_iters"] >= config["max_iters"] > 0:   # e.g. a config shrunk by --max_iters
        _say(f"note: all {config['max_iters']} iterations fall in the "
             f"{config['warmup_iters']}-iteration warmup, so the lr never reaches "
             f"{config['learning_rate']:g} (fix: also pass --warmup_iters and --lr_decay_iters)")
    if device.type != "cpu":
        return
    if busy_machine(device):
        _say(f"note: {busy_machine(device)}")
    with torch.random.fork_rng(devices=[]):   # the probe must not move the dropout RNG
        for _ in range(2):   # the second call: the first pays one-time costs
            step_s = time_one_sequence() * batch_size
    evals = config["max_iters"] // config["eval_interval"] + 1
    total_s = step_s * (micro_steps * config["max_iters"] + evals * 2 * config["eval_iters"] / 3)
    if total_s < 1800:
        return
    fix = (f"this is a GPU recipe; its CPU twin is `python train.py {config['cpu_twin']}`" if config["cpu_twin"]
           else "a GPU, or a smaller model / fewer --max_iters")
    _say(f"note: this run needs about {format_duration(total_s)} on this CPU (~{step_s:.1f} s per "
         f"micro-step, {config['max_iters']} iterations) (fix: {fix})")


# --- stopping where a checkpoint resumes exactly --------------------------------------------------------

class StopRequest:
    """Ctrl-C (SIGINT) or SIGTERM asks train.py's loop to stop at the next iteration boundary, where the state saved
    to last.pt is exactly resumable (`requested`); a second signal raises KeyboardInterrupt at once. Under DDP each
    rank gets its own signal, but all must stop at the same boundary: `requested` is set only by vote(), which
    every rank calls at the same iterations. Installed only in the main thread and over the default handlers (a
    caller's own handlers are left alone). master: say so."""

    DEFAULT_HANDLERS = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: signal.SIG_DFL}

    def __init__(self, master=True, device=None, world=1):
        self.asked = False       # this process got the signal
        self.requested = False   # stop at the next boundary (asked here, or under DDP by any rank's vote)
        self.master = master
        self.device = device
        self.world = world
        self.previous = {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig, default in self.DEFAULT_HANDLERS.items():
                if signal.getsignal(sig) == default:
                    self.previous[sig] = signal.signal(sig, self.handle)
        return self

    def handle(self, signum, frame):
        if self.asked:
            raise KeyboardInterrupt
        self.asked = True
        self.requested = self.world == 1
        if self.master:
            _say(f"\n{signal.Signals(signum).name}: stopping after this iteration to save last.pt "
                 f"(Ctrl-C again to stop at once)")

    def vote(self):
        """DDP: every rank calls this at the same iterations (an all_reduce); a stop asked on any rank is then
        requested on all."""
        votes = torch.tensor(float(self.asked), device=self.device)
        torch.distributed.all_reduce(votes)
        self.requested = votes.item() > 0

    def __exit__(self, *exc):
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)


# --- out_dir while a run writes to it -------------------------------------------------------------------

class RunDir:
    """out_dir during a run, a context manager. Constructing it checks that out_dir can be written
    (one line, before anything changes); entering it, rank 0 (master) takes the folder's lock (one
    writer per out_dir: a second run into it would replace this one's checkpoints and log.csv),
    removes the temporary files a kill -9 left and opens log.csv (CsvLog); leaving it releases them.
    A new run into the folder of an earlier one keeps the earlier log.csv and loss.png until this
    run's first save, so that they always go with the checkpoints beside them. iter_num: where the
    run starts; ckpt: the checkpoint it starts from, or None."""

    def __init__(self, config, iter_num, ckpt, rank, world, device):
        check_out_dir(config["out_dir"])
        self.path = config["out_dir"]
        self.config = config
        self.iter_num = iter_num
        self.resuming = config["init_from"] == "resume"
        # the iteration last.pt holds for this run (None: nothing saved yet)
        self.saved_iter = iter_num if self.resuming and ckpt["path"].endswith(LAST_NAME) else None
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
        self.csv_log = None
        self.t_start = time.time()
        self.t_eval = None
        self.shown = self.t_start
        self.wandb = WandbLog(config, self.master)
        self.held = contextlib.ExitStack()

    def __enter__(self):
        if not self.master:
            return self
        with contextlib.ExitStack() as held:
            held.enter_context(lock_dir(self.path))
            remove_stale_temp_files(self.path, (CKPT_NAME, LAST_NAME, "log.csv", "loss.png"), _say)
            self.earlier = not self.resuming and any(os.path.exists(os.path.join(self.path, n))
                                                     for n in (CKPT_NAME, LAST_NAME))
            self.ckpt_from_earlier_run = self.earlier
            keep_before = self.iter_num if self.resuming else None
            path = os.path.join(self.path, "log.csv")
            self.csv_log = CsvLog(path, keep_before=keep_before, pending=self.earlier)
            held.callback(self.csv_log.discard)   # also when the run fails before its first save
            self.held = held.pop_all()
        return self

    def __exit__(self, *exc):
        self.held.close()

    def say(self, message):
        if self.master:
            _say(message)

    def say_what_runs(self, model, segments, batch, ctx):
        """Rank 0, before the loop: the model's size and depth, the tokens per iteration, the data_segments
        in use, then notes_before_run's (a warmup longer than the run, busy CPUs, hours of CPU time, timed on
        the first batch: `batch`, run under ctx)."""
        if not self.master:
            return
        c = self.config
        if segments is not None:
            _say(f"training windows start only at the {len(segments):,} segments of {c['data_segments']}")
        _say(f"number of parameters: {model.get_num_params(non_embedding=False):,} (non-embedding: "
             f"{model.get_num_params():,})")
        _say(f"depth: {depth_summary(model)}")
        _say(f"tokens per iteration: {self.tokens_per_iter:,} ({self.accum} accum x {self.world} ranks x "
             f"{c['batch_size']} batch x {c['block_size']} block); device {self.device}, dtype {c['dtype']}, "
             f"compile {c['compile']}")
        probe = functools.partial(time_one_sequence, model, *batch, ctx)
        notes_before_run(c, self.device, self.accum, c["batch_size"], probe)

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
        diverged."""
        it = row["iter"]
        if row["kind"] == "train":
            losses = {"the training loss": row["loss"]}
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
        return f"nothing was saved (the {names} in {self.path} are an earlier run's)"

    def diverged(self, what, it):
        c = self.config
        return UserError(f"{what} at iteration {it}: training diverged; {self.kept()} (fix: lower --learning_rate "
                         f"(now {c['learning_rate']:g}) or lengthen --warmup_iters (now {c['warmup_iters']}))")

    @contextlib.contextmanager
    def stopping(self, iter_num, in_step):
        """After Ctrl-C / SIGTERM, around train.py's save of last.pt at the iteration boundary the loop stopped at:
        yields whether to save (not when stopped mid-step: that state is half-updated; not when this iteration
        is saved already), then says what out_dir keeps. A Ctrl-C during that save ends it: the atomic save kept
        the old file."""
        if in_step:
            self.say(f"\nstopped during iteration {iter_num}: {self.kept()}")
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
            self.say(f"this run saved no checkpoint: kept the earlier run's log.csv and loss.png in {self.path}, which "
                     f"go with its checkpoints")
        elif self.master:
            self.csv_log.close()
            plot_run(self.csv_log.rows, os.path.join(self.path, "loss.png"),
                     os.path.basename(os.path.abspath(self.path)))
        train_time = self.elapsed()
        ms_per_iter, tokens_per_s = self.speed.summary()
        final = history[-1] if history else {}
        if not interrupted:
            self.say(f"done: best val loss {best_val_loss:.4f}, {iter_num} iterations in "
                     f"{format_duration(train_time)}")
        return {
            "best_val_loss": best_val_loss, "final_train_loss": final.get("loss"),
            "final_val_loss": final.get("val_loss"), "final_val_loss_heaviest": final.get("val_loss_heaviest"),
            "last_train_loss": last_train_loss, "iter_num": iter_num, "ms_per_iter": ms_per_iter,
            "tokens_per_s": tokens_per_s, "train_time_s": train_time, "eval_time_s": self.speed.eval_seconds,
            "num_params": model.get_num_params(False), "num_params_non_embedding": model.get_num_params(True),
            "model_args": dict(args), "out_dir": self.path, "interrupted": interrupted, "evals": history,
        }


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


# --- speed and time left ---------------------------------------------------------------------------------

class Speed:
    """ms/iter of the windows between log lines (evaluation left out), smoothed for the ETA."""

    def __init__(self, max_iters, eval_interval, tokens_per_iter):
        self.max_iters, self.eval_interval, self.tokens_per_iter = max_iters, eval_interval, tokens_per_iter
        self.windows, self.ema, self.t_window, self.start_iter = [], None, time.time(), 0
        self.eval_seconds, self.n_evals, self.t_eval = 0.0, 0, None

    def restart(self, iter_num):
        """A window starts at iteration iter_num."""
        self.t_window, self.start_iter = time.time(), iter_num

    def eval_started(self):
        self.t_eval = time.time()

    def eval_ended(self, iter_num):
        """Count the evaluation's time for the ETA; ms/iter leaves it out. (A DDP rank with no batch of it to
        evaluate never started its clock.)"""
        self.n_evals += 1
        self.set_aside(iter_num, 0.0 if self.t_eval is None else time.time() - self.t_eval)
        self.t_eval = None

    def set_aside(self, iter_num, seconds):
        """Seconds spent evaluating or saving until iteration iter_num: counted for the ETA, left out of
        ms/iter (the next window starts now)."""
        self.eval_seconds += seconds
        self.restart(iter_num)

    def window_ms(self, iter_num):
        ms = (time.time() - self.t_window) * 1000 / (iter_num - self.start_iter)
        self.restart(iter_num)
        self.windows.append(ms)
        self.ema = ms if len(self.windows) <= 2 else 0.9 * self.ema + 0.1 * ms   # the first windows warm up
        return ms

    def eta(self, iters_left, evals_left):
        return iters_left * self.ema / 1000 + evals_left * self.eval_seconds / max(1, self.n_evals)

    def log_window(self, iter_num):
        """The speed of the window that ends with iter_num iterations done, and the time left (smoothed ms/iter
        plus the evaluations still to come): ({ms_per_iter, tokens_per_s} for log.csv, the time left as text)."""
        ms = self.window_ms(iter_num)
        eta = self.eta(self.max_iters - iter_num, (self.max_iters - iter_num) // self.eval_interval + 1)
        tok_s = self.tokens_per_iter / (ms / 1000)
        return dict(ms_per_iter=ms, tokens_per_s=tok_s), format_duration(eta)

    def summary(self):
        """(median ms/iter, tokens/s) of the steady windows (the first includes warm-up and compilation), or Nones."""
        steady = self.windows[1:] or self.windows
        if not steady:
            return None, None
        ms = float(np.median(steady))
        return ms, self.tokens_per_iter / (ms / 1000)


# --- nanoGPT's Weights & Biases logging (wandb_log, wandb_project, wandb_run_name) ----------------------

def import_wandb():
    try:
        import wandb
    except ImportError:
        raise UserError("wandb_log=True logs to Weights & Biases, but the wandb package is not installed "
                        "(fix: pip install wandb, or --wandb_log=False)") from None
    return wandb


WANDB_CONNECT_S = 5   # check_wandb waits this long for the server


def check_wandb():
    """W&B logging, checked before anything on disk changes, each problem in one line: the package, an API key
    (WANDB_API_KEY, WANDB_IDENTITY_TOKEN_FILE, or `wandb login`'s netrc entry), the server reachable within
    WANDB_CONNECT_S seconds. WANDB_MODE=offline or disabled needs neither. Our choice: what fails only later (a
    key the server refuses, a server gone) turns W&B logging off with a warning, and the run goes on (WandbLog)."""
    import_wandb()
    if os.environ.get("WANDB_MODE", "") in ("offline", "disabled", "dryrun"):
        return
    url = urllib.parse.urlsplit(os.environ.get("WANDB_BASE_URL") or "https://api.wandb.ai")
    host, port = url.hostname or "", url.port or (443 if url.scheme == "https" else 80)
    offline = "WANDB_MODE=offline to log on this machine (wandb sync uploads it later), or --wandb_log=False"
    if not (os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_IDENTITY_TOKEN_FILE") or netrc_login(host)):
        raise UserError(f"wandb_log=True, but no W&B API key is set for {host} (fix: `wandb login` or "
                        f"WANDB_API_KEY=..., or {offline})")
    try:
        socket.create_connection((host, port), timeout=WANDB_CONNECT_S).close()
    except OSError as e:
        raise UserError(f"wandb_log=True, but the W&B server {host}:{port} cannot be reached in "
                        f"{WANDB_CONNECT_S} s ({e.strerror or type(e).__name__}) (fix: check the network or "
                        f"WANDB_BASE_URL, or {offline})") from None


def netrc_login(host):
    """Whether the netrc file (NETRC, else ~/.netrc: where `wandb login` keeps the key) has an entry for host."""
    import netrc
    path = os.environ.get("NETRC") or os.path.join(os.path.expanduser("~"), ".netrc")
    try:
        return netrc.netrc(path).authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


class WandbLog:
    """nanoGPT's Weights & Biases logging: with wandb_log=True, each evaluation logs what nanoGPT's train.py logs
    that we have: iter, train/loss, val/loss, lr (nanoGPT also logs mfu, an estimate we do not make). What W&B
    needs is checked before the run starts (check_wandb); the W&B run (wandb.init with wandb_project,
    wandb_run_name and the config, as nanoGPT) starts at the first evaluation, and if W&B fails then or later,
    logging to it stops with a warning while training goes on. Only the master process logs. WANDB_MODE=offline
    keeps it on this machine."""

    def __init__(self, config, master=True):
        self.config, self.run = config, None
        self.wandb = import_wandb() if config["wandb_log"] and master else None

    def log(self, row):
        """Log one evaluation row of train.py (iter, loss, val_loss, lr)."""
        if self.wandb is None or row["kind"] != "eval":
            return
        try:
            if self.run is None:
                self.run = self.wandb.init(project=self.config["wandb_project"],
                                           name=self.config["wandb_run_name"] or None, config=dict(self.config))
            self.run.log({"iter": row["iter"], "train/loss": row["loss"], "val/loss": row["val_loss"],
                          "lr": row["lr"]})
        except Exception as e:   # wandb's own errors (a refused key, a timeout, ...): the run is worth more
            print(f"warning: W&B logging failed ({type(e).__name__}: {' '.join(str(e).split())[:200]}); it is off "
                  f"for the rest of this run (log.csv keeps every row)", file=sys.stderr, flush=True)
            self.wandb = None
