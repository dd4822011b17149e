"""
Checkpoint files: atomic writes, one writer per run folder, safe loading and building the model a checkpoint
describes; where a model runs (device, dtype, threads, seeds); and for train.py, the RNG
state that makes a resume exact (gather_rng_states) and the weights of another checkpoint that fit. train.py
builds its model arguments itself (setup); model_args builds them for the tools and tests.

A checkpoint is a torch.save'd dict of one format (FORMAT_VERSION, CHECKPOINT_FIELDS), built by
checkpoint_dict and written by save_checkpoint, the one way every writer writes one (train.py,
tools.pangu.inherit, tools.huggingface.convert import, tools.executorch.bench); every reader goes through
load_checkpoint, which migrates an earlier version (migrate_checkpoint). nanoGPT's ckpt.pt is read as one
(the section "nanoGPT's checkpoints").
train.py writes two of them into out_dir:
  ckpt.pt  - the best validation loss so far (what sample.py / eval.py load by default)
  last.pt  - the latest state, written at every eval and on Ctrl-C (what init_from='resume' loads)
both by train.py's save_checkpoints.

Every write goes to a temporary file in the same directory, is fsync'ed and then os.replace'd over the
target, so a crash or a full disk mid-write never leaves a truncated checkpoint behind.

Loading uses torch.load(weights_only=True) only, with no way around it: checkpoints travel (shared files,
out*/ folders in cloned repositories), and the full unpickler runs whatever code a file names.
"""

import contextlib
import fcntl
import glob
import os
import pickle
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading

import numpy as np
import torch

from configurator import UserError, check_temperature, read_prompt

CKPT_NAME = "ckpt.pt"
LOCK_NAME = ".lock"         # lock_dir: one writer per out_dir / compare_dir
LAST_NAME = "last.pt"
ORIG_MOD_PREFIX = "_orig_mod."   # added to state_dict keys by torch.compile
DDP_PREFIX = "module."           # added by DistributedDataParallel



@contextlib.contextmanager
def atomic_path(path):
    """Yield the name of a temporary file beside `path` to write; when the block ends without an error it is
    fsync'ed and os.replace'd onto `path`. On any error (including KeyboardInterrupt, and SIGTERM, which raises
    one meanwhile: sigterm_as_interrupt) it is removed and `path` is untouched; a filesystem error (full disk,
    read-only folder, ...) becomes a one-line UserError naming the path. The temporary file is locked while it
    lives, so the next write of `path` removes (and reports) only the ones a killed writer left
    (remove_stale_temp_files), never those of a writer still at work."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    tmp = fd = None
    installed = sigterm_as_interrupt()
    try:
        os.makedirs(directory, exist_ok=True)
        remove_stale_temp_files(directory, [os.path.basename(path)], say=print_to_stderr)
        fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=directory)
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield tmp
        os.fsync(fd)   # the file's data, whichever open file wrote it
        # mkstemp creates 0600 files; give the result the usual permissions (0666 minus umask)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
        tmp = None
    except BaseException as e:
        if tmp is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        os_error = underlying_os_error(e)
        if os_error is not None and not isinstance(e, UserError):
            raise UserError(f"cannot write {path}: {os_error.strerror or os_error} (any previous version is kept) "
                            f"(fix: free disk space, or choose a writable folder)") from None
        raise
    finally:
        if fd is not None:
            os.close(fd)
        if installed:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _fsync_dir(directory)


def sigterm_as_interrupt():
    """Make SIGTERM raise KeyboardInterrupt, as Ctrl-C does, while atomic_path writes: its cleanup then runs (the
    temporary file removed; configurator.run_command ends the command with exit code 130), where SIGTERM's default
    ends the process at once and leaves the temporary file beside the target (a GGUF export's: 65 MB). Only over
    the default handler (train.py's StopRequest has its own; a nested write finds this one) and in the main thread
    (the one Python runs handlers in). True when it installed the handler: the caller puts the default back."""
    if threading.current_thread() is not threading.main_thread():
        return False
    if signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
        return False
    signal.signal(signal.SIGTERM, raise_keyboard_interrupt)
    return True


def raise_keyboard_interrupt(signum, frame):
    raise KeyboardInterrupt


def default_sigterm_in_a_child():
    """A process forked while atomic_path writes (a multiprocessing worker: tools/wikitext103.py tokenizes inside its
    write) gets SIGTERM's default back: the write is its parent's, and a Pool ends its workers with SIGTERM (one
    that raised KeyboardInterrupt instead could hang the Pool's exit)."""
    if signal.getsignal(signal.SIGTERM) is raise_keyboard_interrupt:
        with contextlib.suppress(ValueError):   # forked from a thread that Python does not count as the main one
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


os.register_at_fork(after_in_child=default_sigterm_in_a_child)


@contextlib.contextmanager
def atomic_open(path, mode="wb"):
    """open(path, mode) for writing, atomically (atomic_path): `path` changes only when the block ends without an
    error, and then holds everything written."""
    with atomic_path(path) as tmp, open(tmp, mode) as f:
        yield f


def print_to_stderr(message):
    print(message, file=sys.stderr, flush=True)


def underlying_os_error(e):
    """The OSError that `e` is or was raised while handling, else None. torch.save reports a full disk as
    a RuntimeError of its zip writer, raised while the OSError of the failed write is handled."""
    seen = set()
    while e is not None and id(e) not in seen:
        if isinstance(e, OSError):
            return e
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return None


def _fsync_dir(directory):
    """Make the rename itself durable (best effort: not every OS/filesystem allows it)."""
    with contextlib.suppress(OSError, AttributeError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def atomic_save(obj, path):
    """torch.save(obj, path), atomically."""
    with atomic_open(path, "wb") as f:
        torch.save(obj, f)


# --- the checkpoint format -----------------------------------------------------------------------------------
# Version 1 (this code): format_version, then the fields below. Version 0: every checkpoint written before the
# field existed (tests/fixtures/ckpt_before_issue24.pt is one); the same fields without format_version, which
# migrate_checkpoint adds. An older layout still (weights under other names, written by a model.py before issue
# 24's redesign) has no fixture and no migration: it stays refused in one line ("do not fit its own model_args").

FORMAT_VERSION = 1
CHECKPOINT_FIELDS = (
    "model",          # the weights: state_dict of GPT(GPTConfig(**model_args)), without compile/DDP prefixes
    "model_args",     # GPTConfig's fields
    "iter_num",       # train.py: the iteration it resumes at (0 for weights only)
    "best_val_loss",  # train.py: the best val loss so far (inf, or nan, when none)
    "optimizer",      # train.py: AdamW's state_dict (None or absent: weights only, nothing to resume)
    "scaler",         # train.py: fp16's GradScaler state_dict, or None
    "config",         # the run's whole config
    "rng", "rng_ranks",   # train.py: this rank's RNG states, and every rank's under DDP (an exact resume)
    "dataset", "data_dir", "tokenizer_id",   # the data it was trained on; tokenizer_id: dataset.tokenizer_id
    "inherit",        # tools.pangu.inherit: what was inherited from which checkpoint
    "source",         # tools.huggingface.convert import: the Hugging Face model it came from
)


def checkpoint_dict(model, model_args, **fields):
    """The one builder of a checkpoint dict: format_version, the weights, GPTConfig's fields and any of
    CHECKPOINT_FIELDS (another name is a programming error, refused)."""
    unknown = sorted(set(fields) - set(CHECKPOINT_FIELDS))
    if unknown:
        raise TypeError(f"checkpoint_dict: fields outside the checkpoint format: {unknown}")
    return {"format_version": FORMAT_VERSION, "model": model, "model_args": dict(model_args), **fields}


def save_checkpoint(path, model, model_args, **fields):
    """checkpoint_dict(model, model_args, **fields) written to `path` atomically (atomic_save): how every
    writer writes a checkpoint."""
    atomic_save(checkpoint_dict(model, model_args, **fields), path)


def migrate_checkpoint(ckpt, path):
    """A loaded checkpoint dict in this code's format: version 0 (no format_version) becomes version 1 by adding
    the field; a version newer than this code's is refused in one line."""
    version = ckpt.get("format_version", 0)
    if not isinstance(version, int) or isinstance(version, bool) or version < 0:
        raise UserError(f"'{path}' is damaged: 'format_version' is {version!r} (fix: retrain, or use a "
                        f"ckpt.pt/last.pt written by train.py)")
    if version > FORMAT_VERSION:
        raise UserError(f"'{path}' has checkpoint format {version}, newer than this code's {FORMAT_VERSION} "
                        f"(fix: use the code version that wrote it)")
    if version == 0:   # the same fields: only the version is new
        ckpt["format_version"] = 1
    return ckpt


def check_out_dir(path, key="out_dir"):
    """One-line UserError unless `path` is (or can become) a writable folder. Writes nothing that stays.
    key: the option that named the folder (out_dir, compare_dir, ...), for the message."""
    existing = os.path.abspath(path)
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise UserError(f"{key} '{path}': {existing} is a file, not a folder (fix: choose another --{key})")
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as e:
        raise UserError(f"{key} '{path}': cannot write to {existing}: {e.strerror} "
                        f"(fix: choose a writable --{key})") from None


def lock_dir(path, key="out_dir"):
    """Make this process the one writer of folder `path` (created if needed): an exclusive flock on
    <path>/.lock, which holds the writer's pid. Returns the open lock file: keep it open while writing, close it
    to release (it is a context manager). The lock belongs to the open file, so it dies with the process (kill -9
    included) and is never left stale. A second writer gets a one-line UserError naming the holder."""
    os.makedirs(path, exist_ok=True)
    f = open(os.path.join(path, LOCK_NAME), "a+", encoding="utf-8")   # "a+": opening keeps the holder's pid
    try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        holder = f.read().strip() or "?"   # "?": the holder has the lock but has not written its pid yet
        f.close()
        raise UserError(f"{key} '{path}' is being written by another process (pid {holder}); two writers would "
                        f"overwrite each other's files (fix: wait for it to finish or stop it, or choose another "
                        f"--{key})") from None
    except BaseException:
        f.close()
        raise
    f.seek(0)
    f.truncate()
    f.write(f"{os.getpid()}\n")
    f.flush()
    return f


def remove_stale_temp_files(directory, names, say=print):
    """Delete the temporary files that a killed atomic write of one of `names` left in `directory` (e.g.
    .last.pt.x8f2k.tmp, possibly gigabytes), and say so. Returns how many. A temporary file that a live writer
    holds (atomic_path locks its own) is left alone."""
    stale = [p for name in names for p in glob.glob(os.path.join(glob.escape(directory), f".{name}.*.tmp"))]
    freed, removed = 0, 0
    for path in stale:
        with contextlib.suppress(OSError):   # BlockingIOError: its writer is at work
            fd = os.open(path, os.O_RDONLY)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                freed += os.fstat(fd).st_size
                os.unlink(path)
                removed += 1
            finally:
                os.close(fd)
    if removed:
        say(f"removed {removed} temporary file(s) ({freed / 1e6:,.1f} MB) left in {directory} by an "
            f"interrupted write")
    return removed


def latest_out_dir(root="."):
    """The out*/ folder under `root` whose checkpoint was written most recently, i.e. the run train.py
    just finished; 'out' when there is none. sample.py and eval.py use it when --out_dir is not given."""
    found = [os.path.join(root, d, name) for d in os.listdir(root) if d.startswith("out")
             for name in (CKPT_NAME, LAST_NAME) if os.path.isfile(os.path.join(root, d, name))]
    if not found:
        return os.path.normpath(os.path.join(root, "out"))
    return os.path.normpath(os.path.dirname(max(found, key=os.path.getmtime)))


def resolve_path(path_or_out_dir, prefer=(CKPT_NAME, LAST_NAME)):
    """A checkpoint file path: the argument itself if it is a file, else the first of `prefer` found in
    that directory. Raises UserError telling the user to train first."""
    p = os.fspath(path_or_out_dir)
    if os.path.isfile(p):
        return p
    if os.path.isdir(p):
        for name in prefer:
            candidate = os.path.join(p, name)
            if os.path.isfile(candidate):
                return candidate
        raise UserError(f"no checkpoint ({' or '.join(prefer)}) in '{p}' "
                              f"(fix: run train.py with --out_dir={p} first, or pass the right --out_dir)")
    raise UserError(f"checkpoint '{p}' does not exist (fix: run train.py first, or pass the right --out_dir)")


def load_checkpoint(path_or_out_dir, device="cpu", prefer=(CKPT_NAME, LAST_NAME), mmap=False):
    """Load a checkpoint dict. A directory means its ckpt.pt (falling back to last.pt); "" means the out*/ folder
    with the newest checkpoint (the run train.py just finished), announced on stderr. Only the safe loader
    (weights_only) is used: checkpoints are shared and cloned with repositories, and the full unpickler runs
    whatever code a file names. A file that needs it is refused (unsafe_pickle_error). The dict it returns is
    this code's format (migrate_checkpoint), its weights without key prefixes, finite and fitting its own
    model_args (check_weights), so GPT(GPTConfig(**ckpt["model_args"])).load_state_dict(ckpt["model"]) takes
    them. mmap: tensors are read only when used, and the weights are not checked (a check of the file that
    costs no memory)."""
    if not path_or_out_dir:
        path_or_out_dir = latest_out_dir()
        print(f"loading the newest checkpoint: {path_or_out_dir} (choose another with --out_dir)", file=sys.stderr)
    path = resolve_path(path_or_out_dir, prefer)
    try:
        # what train.py writes holds only tensors and plain python values, which this loads
        ckpt = torch.load(path, map_location=device, weights_only=True, mmap=mmap)
    except Exception as e:   # a damaged file: the unpickler also raises IndexError, KeyError, UnicodeDecodeError, ...
        refused = unsafe_pickle_error(e, path)
        if refused is not None:
            raise refused from None
        # the safe loader's own reason, not its advice to load the file unsafely
        text = str(e).split("WeightsUnpickler error:", 1)[-1].strip()
        msg = text.splitlines()[0] if text else type(e).__name__
        raise UserError(f"cannot read checkpoint '{path}': {msg} (fix: re-run train.py to rewrite it)") from None
    if not isinstance(ckpt, dict) or "model" not in ckpt or "model_args" not in ckpt:
        raise UserError(f"'{path}' is not a train.py checkpoint (no 'model'/'model_args') "
                              f"(fix: point at a ckpt.pt or last.pt written by train.py)")
    weights = ckpt["model"]
    if isinstance(weights, dict) and all(isinstance(k, str) for k in weights):
        # the weights without torch.compile's and DDP's key prefixes: model.load_state_dict takes them as they are
        ckpt["model"] = clean_state_dict(weights)
        if is_nanogpt_checkpoint(ckpt, ckpt["model"]):
            ckpt = from_nanogpt(ckpt, ckpt["model"], path)
    ckpt = migrate_checkpoint(ckpt, path)
    damaged = damaged_fields(ckpt)
    if damaged:
        raise UserError(f"'{path}' is damaged: {damaged} (fix: the file was edited or written by other code: "
                        f"retrain, or use a ckpt.pt/last.pt written by train.py)")
    # its model_args build a GPTConfig (sample.py builds one plainly); "meta": the weights are already in memory
    model_config(ckpt["model_args"], path, device="meta")
    ckpt.setdefault("path", path)
    if not mmap:   # (mmap: the weights are never read)
        check_weights(ckpt)
    return ckpt


def load_init_checkpoint(init_from, device="cpu"):
    """The checkpoint train.py --init_from=<...> starts from: a checkpoint file (ours or nanoGPT's), or a Hugging
    Face model (nanoGPT's 'gpt2' ... 'gpt2-xl', or a local transformers folder) imported by
    `python -m tools.huggingface.convert import` in a subprocess, into a temporary file: the import (a folder's
    safetensors or shards, a hub download) is that tool's job, and top-level modules never import tools/."""
    if not is_hf_source(init_from):
        return load_checkpoint(init_from, device)
    source = init_from if init_from in GPT2_NAMES else os.path.abspath(init_from)
    root = os.path.dirname(os.path.abspath(__file__))
    with tempfile.TemporaryDirectory(prefix="init_from.") as tmp:
        out = os.path.join(tmp, "imported.pt")
        print(f"importing {init_from}: python -m tools.huggingface.convert import {source} --out={out}", flush=True)
        done = subprocess.run([sys.executable, "-m", "tools.huggingface.convert", "import", source, "--out", out],
                              cwd=root, stderr=subprocess.PIPE, text=True)
        said = [line for line in done.stderr.splitlines() if line.strip()]
        if done.returncode != 0:
            reason = said[-1].removeprefix("error: ") if said else f"exit code {done.returncode}"
            fix = "" if "(fix: " in reason else " (fix: a local transformers folder, or a connection to the hub)"
            raise UserError(f"--init_from={init_from}: the Hugging Face import failed: {reason}{fix}")
        print(said[0] if said else f"imported {init_from}", flush=True)
        ckpt = load_checkpoint(out, device)
    ckpt["path"] = init_from
    return ckpt


def unsafe_pickle_error(e, path, fix="re-save it with tensors and plain Python values only, or re-run train.py"):
    """The UserError for a file the safe loader refused because its pickle names a global outside the allowed
    tensors and plain values (a class, or a function such as os.system that unpickling would call); None when
    `e` is another error. There is no way around it on purpose: loading such a file runs code from it."""
    if not isinstance(e, pickle.UnpicklingError):
        return None
    found = re.search(r"GLOBAL ([\w.]+)", str(e))
    if found is None:   # not a refused global: a damaged file, reported as such
        return None
    return UserError(f"refusing to load '{path}': it holds objects the safe loader refuses ({found.group(1)}); "
                     f"loading them would run code from the file (fix: only load files you trust; for one of your "
                     f"own, written by other code, {fix})")


def damaged_fields(ckpt):
    """What is wrong with the fields of a checkpoint dict that scripts rely on ("" when nothing)."""
    if not isinstance(ckpt["model"], dict) or not all(torch.is_tensor(v) for v in ckpt["model"].values()):
        return "'model' is not a dict of tensors"
    # every weight of ours is floating point; load_state_dict would turn integers into floats without a word
    integer = [k for k, v in ckpt["model"].items() if not v.is_floating_point()]
    if integer:
        return f"'model' holds integer tensors where weights are floating point (e.g. {integer[0]})"
    if not isinstance(ckpt["model_args"], dict):
        return f"'model_args' is a {type(ckpt['model_args']).__name__}, not a dict"
    if not isinstance(ckpt.get("iter_num", 0), int) or isinstance(ckpt.get("iter_num"), bool):
        return f"'iter_num' is {ckpt['iter_num']!r}, not an integer"
    if not isinstance(ckpt.get("best_val_loss", 0.0), (int, float)):
        return f"'best_val_loss' is {ckpt['best_val_loss']!r}, not a number"
    return ""


def clean_state_dict(state_dict):
    """Strip the torch.compile ('_orig_mod.') and DDP ('module.') key prefixes."""
    out = {}
    for k, v in state_dict.items():
        stripped = True
        while stripped:
            stripped = False
            for prefix in (ORIG_MOD_PREFIX, DDP_PREFIX):
                if k.startswith(prefix):
                    k, stripped = k[len(prefix):], True
        out[k] = v
    return out


def check_finite(state_dict, path, fix="retrain with a lower --learning_rate"):
    """UserError if any floating tensor holds NaN or inf (the weights of a diverged run)."""
    bad = [k for k, v in state_dict.items() if torch.is_tensor(v) and v.is_floating_point()
           and not torch.isfinite(v).all()]
    if bad:
        raise UserError(f"{path} holds non-finite weights ({len(bad)} tensors, e.g. {bad[0]}): the run that wrote "
                        f"them diverged (fix: {fix})")


def model_config(model_args, source=None, device="cpu"):
    """GPTConfig(**model_args) with a one-line error for arguments this model.py refuses or does not know,
    or for a size it cannot build on `device` in reasonable time or memory (check_layer_count, check_memory).
    source: the
    checkpoint they come from (None: the user's config)."""
    from model import GPTConfig
    unknown = sorted(set(model_args) - set(gpt_config_defaults()))
    if unknown and source is not None:   # dropping them would build another model
        raise UserError(f"{source} has model_args this model.py does not know: {', '.join(unknown)} (a "
                        f"checkpoint of another code version) (fix: use the code version that wrote it)")
    check_layer_count(model_args)   # before GPTConfig, which lists every layer's width
    try:
        config = GPTConfig(**model_args)
    except (TypeError, ValueError) as e:
        reason = str(e) if len(str(e)) <= 300 else str(e)[:297] + "..."   # e.g. a list of 1000 widths
        if source is None:
            raise UserError(f"invalid model configuration: {reason} (fix: correct the model keys)") from None
        raise UserError(f"the model_args of {source} do not fit this model.py: {reason} "
                        f"(fix: use the code version that wrote the checkpoint)") from None
    check_memory(config, device)
    return config


def build_model(model_args, device="cpu", source=None):
    """GPT(GPTConfig(**model_args)), with model_config's one-line errors."""
    from model import GPT
    return GPT(model_config(model_args, source, device)).to(device)


MAX_LAYERS = 1000   # our limit: building a layer takes 10-20 ms on a 2-core CPU (1000: 10-20 s); presets have <= 60


def check_layer_count(model_args):
    """One line for a model of more than MAX_LAYERS layers. What GPTConfig refuses (negative, mistyped sizes) is
    left to its own message."""
    n_layer = model_args.get("n_layer", gpt_config_defaults()["n_layer"])
    if isinstance(n_layer, int) and n_layer > MAX_LAYERS:
        raise UserError(f"n_layer={n_layer:,}: more than {MAX_LAYERS:,} layers take too long to build (about 15 ms "
                        f"a layer on a CPU) (fix: --n_layer={MAX_LAYERS} or fewer)")


def check_memory(config, device="cpu"):
    """One line, before anything is built on a real device (not "meta"), for a model whose weights cannot fit
    this machine's memory: at least 4 bytes for each of the embedding's and the unique FFN layers' weights
    (weights_lower_bound) against the physical memory."""
    if str(device) == "meta":
        return
    weights = weights_lower_bound(config)
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if 4 * weights > memory:
        raise UserError(f"this model has at least {weights:,} weights: {4 * weights / 2**30:,.0f} GiB in float32, "
                        f"more than this machine's {memory / 2**30:,.0f} GiB of memory (fix: lower --n_layer, "
                        f"--n_embd or --vocab_size)")


def weights_lower_bound(config):
    """A lower bound of the model's parameters, from its GPTConfig alone (nothing built): the token embedding and
    the FFN matrices of its unique layers (at least two of width x hidden each, as MLP sizes them)."""
    widths = config.widths()
    hidden = [config.mlp_hidden or int(config.mlp_ratio * w) for w in widths]
    ffn = sum(2 * w * h for w, h in zip(widths, hidden)) * config.n_branches // config.share_group_size
    # n_embd * n_branches spelled out: embd_width() called here would run in every quickstart and count in
    # model.py's plain-GPT path (tools.technique_lines gpt)
    embedding = config.vocab_size * (config.embd_factor_dim or config.n_embd * config.n_branches)
    return ffn + embedding


def load_model(path_or_out_dir="", device="cpu"):
    """(model in eval mode on `device`, checkpoint dict): what eval.py, compare.py and pangu/ run (sample.py
    writes the same steps out). A directory means its ckpt.pt (else last.pt); "" means the out*/ folder with the
    newest checkpoint (load_checkpoint)."""
    ckpt = load_checkpoint(path_or_out_dir, device)
    model = build_model(ckpt["model_args"], device, source=ckpt["path"])
    model.load_state_dict(ckpt["model"])   # checked by load_checkpoint
    model.eval()
    return model, ckpt


def check_weights(ckpt):
    """One line for weights that a model built from the checkpoint's own model_args cannot take: non-finite (a
    diverged run), or missing, unexpected or of another shape (an edited or damaged file, or another model.py).
    The model is built on the "meta" device: shapes only, no memory."""
    from model import GPT, GPTConfig
    check_finite(ckpt["model"], ckpt["path"])
    with torch.device("meta"):
        own = GPT(GPTConfig(**ckpt["model_args"])).state_dict()
    theirs = ckpt["model"]
    missing = [k for k in own if k not in theirs]
    unexpected = [k for k in theirs if k not in own]
    reshaped = [f"{k} {tuple(theirs[k].shape)} instead of {tuple(own[k].shape)}" for k in own
                if k in theirs and theirs[k].shape != own[k].shape]
    problems = [f"{len(names)} {what} (e.g. {names[0]})" for what, names in
                (("missing", missing), ("unexpected", unexpected), ("of another shape", reshaped)) if names]
    if problems:
        raise UserError(f"the weights in '{ckpt['path']}' do not fit its own model_args: {', '.join(problems)} "
                        f"(fix: the file is damaged or was edited: retrain, or load it with the code version that "
                        f"wrote it)")


def keep_heaviest_branch(model, enabled):
    """model.keep_heaviest_branch() when enabled (pgpt at inference, paper 004): its note for the user, else ""."""
    return model.keep_heaviest_branch() if enabled else ""


def depth_summary(model):
    """Effective depth vs unique weights, e.g. '60 layers applied, from 30 unique attention and 30 unique FFN
    sub-layers'."""
    stack = model.branches[0]
    branches = ""
    if model.config.n_branches > 1:
        branches = f" x {model.config.n_branches} branches"
    passes = ""
    if model.config.think_steps:
        passes = f", {model.config.think_steps + 1} passes (Deep Thinking)"
    layers = model.config.n_layer // model.config.n_branches   # per branch
    return (f"{layers} layers applied{branches}, from {len(stack.attn)} unique attention and "
            f"{len(stack.mlp)} unique FFN sub-layers{passes}")


# --- where a model runs: device and dtype, and the seeds it accepts ----------------------------------

# seeds of train.py and sample.py: numpy's range [0, 2**32), nanoGPT's habit (neither seeds numpy now); a larger
# one used to end in torch's "Overflow when unpacking long long" traceback
MAX_SEED = 2**32


def check_seed(seed, key="seed"):
    """UserError unless the seed is an integer in [0, MAX_SEED) (every script that takes a seed)."""
    if not (isinstance(seed, int) and not isinstance(seed, bool) and 0 <= seed < MAX_SEED):
        raise UserError(f"--{key} must be an integer in [0, {MAX_SEED - 1}], got {seed!r} (fix: e.g. --{key}=1337)")


def busy_machine(device):
    """When other jobs keep the CPUs busy, torch's threads wait on each other and steps get many times slower, while
    one thread is not slowed: that in one line with the fix ("" on an idle machine, a GPU, or with one thread)."""
    if str(device) != "cpu" or not hasattr(os, "getloadavg") or torch.get_num_threads() == 1:
        return ""
    load, cpus = os.getloadavg()[0], os.cpu_count() or 1
    if load <= cpus - torch.get_num_threads() + 0.5:
        return ""
    return (f"the machine is busy (load {load:.1f} on {cpus} CPUs): {torch.get_num_threads()} torch threads wait on "
            f"each other (fix: --num_threads=1)")


def check_num_threads(n, key="num_threads"):
    """UserError unless --num_threads is 0 (torch's default) up to the machine's CPU count: more threads only wait
    on each other, and a huge count crashes torch (a segfault at 100000 threads, after starving the machine of
    processes while it starts them)."""
    cpus = os.cpu_count() or 1
    if not (isinstance(n, int) and not isinstance(n, bool) and 0 <= n <= cpus):
        raise UserError(f"--{key} must be an integer in [0, {cpus}] (this machine's CPUs), got {n!r} "
                        f"(fix: --{key}=1, or 0 for torch's default)")


def resolve_device(name, local_rank=None):
    """torch.device for --device: 'auto' = cuda > mps > cpu; under DDP one GPU per local rank."""
    mps = getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "mps" if mps else "cpu"
    kind = name.split(":")[0]
    try:   # 'cuda:x' is not a device; 'cpu:3' is to torch, but every map_location to it fails
        index = torch.device(name).index
    except RuntimeError:
        index = -1
    if kind not in ("cpu", "cuda", "mps") or index is not None and (index < 0 or kind != "cuda" and index != 0):
        raise UserError(f"unknown device '{name}' (fix: --device=auto|cpu|cuda|cuda:N|mps)")
    if (kind == "cuda" and not torch.cuda.is_available()) or (kind == "mps" and not mps):
        raise UserError(f"device '{name}' requested but {kind.upper()} is not available "
                        f"(fix: --device=cpu or --device=auto)")
    if kind == "cuda" and index is not None and index >= torch.cuda.device_count():
        raise UserError(f"device '{name}' does not exist: this machine has {torch.cuda.device_count()} GPU(s) "
                        f"(fix: --device=cuda:0 to cuda:{torch.cuda.device_count() - 1}, or --device=cuda)")
    if kind == "cuda" and local_rank is not None:
        name = f"cuda:{local_rank}"
    return torch.device(name)


def setup_sampling(cfg):
    """What a script that samples (sample.py, tools/huggingface/sample.py) checks and sets before anything is
    loaded: --num_samples, --max_new_tokens, --top_k, --temperature, --seed, --num_threads (set here), --device,
    --dtype and --start (the text, or FILE:path read: read_prompt), with one-line errors; a note on stderr when
    other jobs keep the CPUs busy. Returns (torch.device, torch dtype, the prompt's text)."""
    if cfg["num_samples"] < 1 or cfg["max_new_tokens"] < 0:
        raise UserError("--num_samples must be >= 1 and --max_new_tokens >= 0 (fix: e.g. --num_samples=1)")
    if cfg["top_k"] < 0:
        raise UserError("--top_k must be >= 0 (fix: 0 means no top-k)")
    check_temperature(cfg["temperature"])
    check_seed(cfg["seed"])
    check_num_threads(cfg["num_threads"])
    if cfg["num_threads"] > 0:
        torch.set_num_threads(cfg["num_threads"])
    device = resolve_device(cfg["device"])
    dtype = getattr(torch, resolve_dtype(cfg["dtype"], device))
    if busy_machine(device):
        print(f"note: {busy_machine(device)}", file=sys.stderr)
    return device, dtype, read_prompt(cfg["start"])


def resolve_dtype(name, device):
    """'float32' | 'bfloat16' | 'float16' for --dtype: 'auto' = bf16 on CUDA if supported, else fp16;
    float32 elsewhere."""
    if name not in ("auto", "float32", "bfloat16", "float16"):
        raise UserError(f"unknown dtype '{name}' (fix: --dtype=auto|float32|bfloat16|float16)")
    if name != "auto":
        return name
    if str(device).startswith("cuda"):
        return "bfloat16" if torch.cuda.is_bf16_supported() else "float16"
    return "float32"


def autocast(device, dtype):
    """The autocast context for a resolved dtype, by name or torch.dtype (none for float32)."""
    dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    if dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device_type=str(device).split(":")[0], dtype=dtype)


# --- train.py's model: its arguments, its weights from another checkpoint, the state that makes a resume exact

def gpt_config_defaults():
    """{field: default} for every GPTConfig field."""
    import dataclasses
    from model import GPTConfig
    return {f.name: f.default for f in dataclasses.fields(GPTConfig)}


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


def distributed_env():
    """(rank, local_rank, world_size) from torchrun's environment, or None when not launched by it."""
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        return None
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    return rank, int(os.environ.get("LOCAL_RANK", rank)), world


def rng_state(device):
    """Every RNG's state (python, numpy, torch, cuda), as tensors and plain values the safe loader reads."""
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


def gather_rng_states(device, gather):
    """(this rank's RNG state, every rank's when gather (DDP), else None): what last.pt records. gather is a
    collective: every rank must call it."""
    rng = rng_state(device)
    if not gather:
        return rng, None
    ranks = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(ranks, rng)
    return rng, ranks


# --- nanoGPT's checkpoints, read as ours (docs/training.md: Coming from nanoGPT) -------------------------
# Its ckpt.pt (model, optimizer, model_args, iter_num, best_val_loss as a 0-d tensor, config), with or without
# torch.compile's `_orig_mod.` prefix, is mapped onto our `gpt` architecture, the same network
# (tests/test_nanogpt.py); its init_from='gpt2*' too (backend: train.py's train(); W&B: run_dir.py).

# nanoGPT's GPT is our `gpt` architecture with these settings (its model.py: LayerNorm eps 1e-5 with an optional
# bias, learned positions, nn.GELU() (exact, not tanh) in a 4x MLP, lm_head tied to wte); the rest of its
# model_args (n_layer, n_head, n_embd, block_size, bias, vocab_size, dropout) keep their names here
ARCHITECTURE = dict(norm="layernorm", norm_eps=1e-5, norm_placement="pre", pos_embedding="learned",
                    mlp_type="standard", activation="gelu", mlp_ratio=4.0, mlp_hidden=None, tie_embeddings=True,
                    head_bias=False)
MODEL_ARGS = ("n_layer", "n_head", "n_embd", "block_size", "bias", "vocab_size")
GPT2_NAMES = ("gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl")   # nanoGPT's init_from='gpt2*'
DEFAULT_DATASET = "openwebtext"   # nanoGPT's train.py default, for a checkpoint whose config names none


def is_nanogpt_checkpoint(ckpt, state_dict):
    """True for a checkpoint dict written by nanoGPT's train.py (state_dict: its weights without key prefixes)."""
    return isinstance(ckpt.get("model_args"), dict) and "transformer.wte.weight" in state_dict


def from_nanogpt(ckpt, state_dict, path):
    """A nanoGPT checkpoint as ours: weights mapped onto the `gpt` architecture, model_args as GPTConfig fields,
    best_val_loss a number, dataset and data_dir from its config (data/<dataset>, as nanoGPT reads it). Its
    optimizer state is not kept: nanoGPT groups the parameters under its own names, so --init_from starts a
    new run from the weights (as from any checkpoint file)."""
    fix = "(fix: point at the ckpt.pt nanoGPT's train.py wrote, unedited)"
    args = ckpt["model_args"]
    missing = [k for k in MODEL_ARGS if k not in args]
    if missing:
        raise UserError(f"'{path}' looks like a nanoGPT checkpoint but its model_args lack {', '.join(missing)} {fix}")
    model_args = dict(ARCHITECTURE, **{k: args[k] for k in MODEL_ARGS}, dropout=args.get("dropout", 0.0))
    if not isinstance(args["n_layer"], int) or not isinstance(args["bias"], bool):
        raise UserError(f"'{path}': nanoGPT's model_args n_layer={args['n_layer']!r}, bias={args['bias']!r} are not "
                        f"an integer and a bool {fix}")
    try:
        model, left = gpt2_layout_state_dict(state_dict, args["n_layer"], args["bias"], conv1d=False)
    except UserError as e:
        raise UserError(f"'{path}' (nanoGPT): {e}") from None
    head = left.pop("lm_head.weight", None)   # nanoGPT ties lm_head to wte: state_dict holds both names
    if head is not None and not torch.equal(head, model["tok_emb.wte.weight"]):
        raise UserError(f"'{path}' (nanoGPT) has an lm_head.weight that differs from transformer.wte.weight; "
                        f"nanoGPT ties them {fix}")
    if left:
        raise UserError(f"'{path}' (nanoGPT) has {len(left)} tensors its GPT does not have, e.g. "
                        f"{', '.join(sorted(left)[:3])} {fix}")
    best = ckpt.get("best_val_loss", float("inf"))
    if torch.is_tensor(best):   # nanoGPT saves losses['val'], a 0-d tensor
        if best.numel() != 1:
            raise UserError(f"'{path}' (nanoGPT): best_val_loss is a tensor of shape {tuple(best.shape)} {fix}")
        best = best.item()
    config = ckpt.get("config") if isinstance(ckpt.get("config"), dict) else {}
    dataset = config.get("dataset") if isinstance(config.get("dataset"), str) and config.get("dataset") \
        else DEFAULT_DATASET
    return {"model": model, "model_args": model_args, "optimizer": None, "iter_num": ckpt.get("iter_num", 0),
            "best_val_loss": best, "config": config, "dataset": dataset, "data_dir": os.path.join("data", dataset),
            "format": "nanogpt"}


def gpt2_layout_state_dict(tensors, n_layer, bias, conv1d):
    """Our `gpt` state_dict from weights named as GPT-2's: [transformer.]wte, wpe, h.N.ln_1, h.N.attn.c_attn,
    h.N.attn.c_proj, h.N.ln_2, h.N.mlp.c_fc, h.N.mlp.c_proj, ln_f. nanoGPT keeps these names in nn.Linear's
    (out, in) layout; Hugging Face's GPT2LMHeadModel in Conv1D's (in, out) layout (conv1d=True transposes).
    bias=False: no bias tensors (nanoGPT's bias=False model). The causal-mask buffers (.attn.bias,
    .attn.masked_bias) are dropped. Returns (state_dict, the tensors not used, e.g. lm_head.weight)."""
    left = {k.removeprefix("transformer."): v for k, v in tensors.items()
            if not k.endswith((".attn.bias", ".attn.masked_bias"))}
    sd = {"tok_emb.wte.weight": _take(left, "wte.weight"), "pos_emb.weight": _take(left, "wpe.weight")}
    for i in range(n_layer):
        h, a, m = f"h.{i}.", f"branches.0.attn.{i}.", f"branches.0.mlp.{i}."
        pairs = ((a + "norm", h + "ln_1", False), (a + "inner.qkv_proj", h + "attn.c_attn", True),
                 (a + "inner.out_proj", h + "attn.c_proj", True), (m + "norm", h + "ln_2", False),
                 (m + "inner.up", h + "mlp.c_fc", True), (m + "inner.down", h + "mlp.c_proj", True))
        for ours, theirs, linear in pairs:
            weight = _take(left, theirs + ".weight")
            sd[ours + ".weight"] = weight.t() if linear and conv1d else weight
            if bias:
                sd[ours + ".bias"] = _take(left, theirs + ".bias")
    sd["ln_f.weight"] = _take(left, "ln_f.weight")
    if bias:
        sd["ln_f.bias"] = _take(left, "ln_f.bias")
    return sd, left


def _take(tensors, key):
    if key not in tensors:
        raise UserError(f"the weights have no '{key}' (fix: use the complete checkpoint)")
    return tensors.pop(key)


def is_hf_source(init_from):
    """init_from that names a Hugging Face model: nanoGPT's 'gpt2*' hub names, or a local transformers folder."""
    return init_from in GPT2_NAMES or os.path.isfile(os.path.join(init_from, "config.json"))
