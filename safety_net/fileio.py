"""
Writing files safely. Every write goes to a temporary file in the same directory, is fsync'ed and then
os.replace'd over the target (atomic_path, atomic_open, atomic_save), so a crash, a full disk, Ctrl-C or SIGTERM
mid-write never leaves a truncated file behind; the next write removes what a killed writer left
(remove_stale_temp_files). One writer per out_dir: lock_dir; no writer of a dataset a run reads:
lock_for_reading. Checked before a run writes: check_out_dir.
"""

import contextlib
import fcntl
import functools
import glob
import os
import signal
import sys
import tempfile
import threading

from safety_net.configurator import UserError


LOCK_NAME = ".lock"         # lock_dir: one writer per out_dir / compare_dir / dataset folder


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
        if not isinstance(e, KeyboardInterrupt) and underlying(e, KeyboardInterrupt) is not None:
            raise KeyboardInterrupt from None   # torch's zip writer reports a Ctrl-C in its writes as a RuntimeError
        os_error = underlying(e, OSError)
        if os_error is not None and not isinstance(e, UserError):
            # said only when there is one: compact_vocab and wikitext103 remove their dataset first (a hunt)
            kept = " (its previous version is kept)" if os.path.exists(path) else ""
            raise UserError(f"cannot write {path}: {os_error.strerror or os_error}{kept} "
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


def underlying(e, kind):
    """The exception of that kind that `e` is or was raised while handling, else None. torch.save reports a full
    disk, or a Ctrl-C, as a RuntimeError of its zip writer, raised while the OSError of the failed write (or the
    KeyboardInterrupt) is handled."""
    seen = set()
    while e is not None and id(e) not in seen:
        if isinstance(e, kind):
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
    import torch   # here, not at the top: prepare.py imports this module and needs no torch (a second to import)
    with atomic_open(path, "wb") as f:
        torch.save(obj, f)


def check_out_dir(path, key="out_dir"):
    """One-line UserError unless `path` is (or can become) a writable folder. Writes nothing that stays.
    key: the option that named the folder (out_dir, compare_dir, ...), for the message."""
    existing = os.path.abspath(path)
    while not os.path.exists(existing):
        if os.path.islink(existing):   # a link to nothing: makedirs fails there (a traceback; a hunt)
            raise UserError(f"{key} '{path}': {existing} is a symbolic link to {os.readlink(existing)}, which "
                            f"does not exist (fix: create its target, or choose another --{key})")
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise UserError(f"{key} '{path}': {existing} is a file, not a folder (fix: choose another --{key})")
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as e:
        raise UserError(f"{key} '{path}': cannot write to {existing}: {e.strerror} "
                        f"(fix: choose a writable --{key})") from None


def unused_name(stem, suffix="", beside=None):
    """stem + suffix, or stem-2 + suffix, stem-3 + suffix, ...: the first name that nothing on disk has yet, for
    a fix hint that must not send its output over an existing file or folder (a checkpoint, another run's).
    beside: the suffix of a second file written beside it (an export's tokenizer), whose name must be free too."""
    free, n = stem, 1
    while os.path.lexists(free + suffix) or (beside is not None and os.path.lexists(free + beside)):
        n += 1
        free = f"{stem}-{n}"
    return free + suffix


def check_not_a_folder(path, example, key="out"):
    """One-line UserError when the file --key=path names is a folder (example: a file name for the fix). The
    exports said "cannot write it: Is a directory (fix: free disk space, ...)" (a hunt)."""
    if os.path.isdir(path):
        raise UserError(f"--{key}={path} is a folder (fix: name a file in it, e.g. "
                        f"--{key}={os.path.join(path, example)})")


def check_out_file(path, example, marker=None, key="out"):
    """One-line UserError unless --out=path (--key) can be written: not a folder, in a folder that exists and is
    writable, not a training run's own file (check_not_a_run_file). example: a file name for the fix when path is
    a folder. marker: text every file of this command holds near its start; an existing file without it is
    refused (not one this command wrote: model.py, say)."""
    check_not_a_folder(path, example, key)
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
        raise UserError(f"--{key}={path}: the folder {folder} does not exist or is not writable "
                        f"(fix: create it, or write elsewhere)")
    check_not_a_run_file(path, key)
    if marker is not None:
        check_own_file(path, functools.partial(holds_marker, marker=marker), example, key)


def holds_marker(path, marker):
    """Whether file `path` holds the text `marker` in its first 4 KB."""
    with open(path, "rb") as f:
        return marker.encode("utf-8") in f.read(4096)


def check_own_file(path, ours, example, key="out", beside=None):
    """One-line UserError when `path` is a file (not empty: nothing to lose) that ours(path) does not take for one
    this command wrote (model.py, a user's notes or photo, another program's model): it would be replaced.
    example: a file name for the fix. beside: the --key value when `path` is a file written beside it (an
    export's tokenizer)."""
    if os.path.isfile(path) and os.path.getsize(path) > 0 and not ours(path):
        named = f"--{key}={path}" if beside is None else f"{path} (written beside --{key}={beside})"
        raise UserError(f"{named} exists and is not a file this command wrote: it would be replaced "
                        f"(fix: another --{key}, e.g. --{key}={example}, or move that file away first)")


RUN_CHECKPOINTS = ("ckpt.pt", "last.pt")   # checkpoint.py's CKPT_NAME and LAST_NAME
RUN_FILES = RUN_CHECKPOINTS + ("log.csv", "loss.png")   # what train.py writes into its out_dir


def is_run_folder(path):
    """Whether folder `path` holds a training run's checkpoint (ckpt.pt or last.pt)."""
    return any(os.path.isfile(os.path.join(path, name)) for name in RUN_CHECKPOINTS)


def check_not_a_run_folder(path, key, fix):
    """One line when folder `path` holds a training run: a dataset or an export written there would mix with
    its files (and sample.py or --init_from=resume would read a folder of two kinds)."""
    if is_run_folder(path):
        raise UserError(f"--{key}={path} is a training run's folder (it holds its checkpoints): the files would mix "
                        f"(fix: {fix})")


def check_not_a_run_file(path, key):
    """One line when path names one of a training run's own files (RUN_FILES, in a folder that holds a
    checkpoint): an output written there would replace it."""
    in_a_run = is_run_folder(os.path.dirname(os.path.abspath(path)))
    if in_a_run and os.path.basename(path) in RUN_FILES:
        raise UserError(f"--{key}={path} is a training run's own {os.path.basename(path)}: it would be replaced "
                        f"(fix: another file name, or a folder of its own)")


def lock_dir(path, key="out_dir", fix=None):
    """Make this process the one writer of folder `path` (created if needed): an exclusive flock on
    <path>/.lock, which holds the writer's pid. Returns the open lock file: keep it open while writing, close it
    to release (it is a context manager). The lock belongs to the open file, so it dies with the process (kill -9
    included) and is never left stale. A second writer, or a training run reading the folder (lock_for_reading),
    gets a one-line UserError naming the holder; fix: its own fix (default: wait, or another --key)."""
    fix = fix or f"wait for it to finish or stop it, or choose another --{key}"
    os.makedirs(path, exist_ok=True)
    f = open(os.path.join(path, LOCK_NAME), "a+", encoding="utf-8")   # "a+": opening keeps the holder's pid
    try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        readers = only_readers(f.fileno())
        f.seek(0)
        holder = f.read().strip() or "?"   # "?": the holder has the lock but has not written its pid yet
        f.close()
        if readers:
            raise UserError(f"{key} '{path}' is being read by a training run; writing it would change the run's "
                            f"data under it (fix: {fix})") from None
        raise UserError(f"{key} '{path}' is being written by another process (pid {holder}); two writers would "
                        f"overwrite each other's files (fix: {fix})") from None
    except BaseException:
        f.close()
        raise
    f.seek(0)
    f.truncate()
    f.write(f"{os.getpid()}\n")
    f.flush()
    return f


def only_readers(fd):
    """Whether the lock on fd's file that refused an exclusive flock is lock_for_reading's (shared), not a writer's."""
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    fcntl.flock(fd, fcntl.LOCK_UN)
    return True


def lock_for_reading(path):
    """A shared flock on folder `path`'s .lock while a training run reads the folder (its dataset: train.py reads
    train.bin at every batch), so that lock_dir's writers (prepare.py --force, the tools that prepare datasets)
    are refused meanwhile (they changed the data under a run, or removed it: a hunt). Readers do not exclude each
    other. train.py takes it as its run begins (RunDir), after its setup read the data: a prepare that ends in
    between, while the model is built, is not seen. Returns a context manager holding the lock. Not locked: no
    folder named ("": a RunDir made without train.py's setup, which names it; it locked the current folder), and
    a folder with no lock file that this user cannot give one (read-only to us: our prepare.py cannot write there
    either, its owner still may). A writer at work: a one-line UserError."""
    if not path:
        return contextlib.nullcontext()
    name = os.path.join(path, LOCK_NAME)
    try:
        fd = os.open(name, os.O_RDONLY | os.O_CREAT, 0o644)
    except OSError:
        try:
            fd = os.open(name, os.O_RDONLY)
        except OSError:
            return contextlib.nullcontext()
    f = os.fdopen(fd, encoding="utf-8")
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = f.read().strip() or "?"
        f.close()
        raise UserError(f"data_dir '{path}' is being written by another process (pid {holder}) (fix: wait for it "
                        f"to finish, then start again)") from None
    except BaseException:
        f.close()
        raise
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
