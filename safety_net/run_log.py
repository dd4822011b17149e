"""
A run's record in out_dir: log.csv (CsvLog; read_rows), loss.png (plot_run), and the speed and time left
(Speed; format_duration).
"""

import contextlib
import csv
import os
import tempfile
import time

import numpy as np

from safety_net.configurator import UserError
from safety_net.fileio import atomic_open


COLUMNS = ["iter", "kind", "loss", "val_loss", "val_loss_heaviest", "lr", "ms_per_iter", "tokens_per_s",
           "elapsed_s", "branch_weights"]


class CsvLog:
    """Appends rows to `path` and keeps them for loss.png. keep_before=k keeps the existing rows of iterations < k
    and the eval at k, an evaluation of the weights last.pt holds (a run resumed at iteration k logs its training
    from k again; a run that ended at k evaluated there, and best_val_loss and ckpt.pt may come from that row); an
    eval the resumed run logs at k replaces the kept one. None starts empty.
    pending=True: a new run into a folder whose log.csv goes with an earlier run's checkpoints; its rows go to a
    temporary file beside `path` until commit() (its first checkpoint is written) moves it onto `path`, and
    discard() (it never saved one) deletes it, so that log.csv always belongs to the checkpoints beside it."""

    def __init__(self, path, keep_before=None, pending=False):
        self.path, self.tmp = path, None
        self.rows = [] if keep_before is None else [r for r in read_rows(path) if kept(r, keep_before)]
        # the kept eval at the resumed iteration, which an eval logged there again replaces
        self.replaceable = None
        if keep_before is not None and not pending:
            self.replaceable = next((r for r in self.rows if int(r["iter"]) == keep_before), None)
        if pending:   # the temporary name is one remove_stale_temp_files cleans up after a kill -9
            fd, self.tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp",
                                            dir=os.path.dirname(os.path.abspath(path)))
            self.file = os.fdopen(fd, "w", newline="", encoding="utf-8")
            self.writer = csv.DictWriter(self.file, fieldnames=COLUMNS, extrasaction="ignore")
            self.writer.writeheader()
        else:
            self.rewrite()

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

    def rewrite(self):
        """`path` holds self.rows, written atomically, and takes the next rows appended."""
        with atomic_open(self.path, "w") as f:
            writer = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(self.rows)
        self.file = open(self.path, "a", newline="", encoding="utf-8")
        self.writer = csv.DictWriter(self.file, fieldnames=COLUMNS, extrasaction="ignore")

    def write(self, **row):
        row = {k: _text(v) for k, v in row.items()}
        earlier = self.replaceable
        try:
            if earlier is not None and (earlier["iter"], earlier["kind"]) == (str(row["iter"]), row["kind"]):
                self.rows.remove(earlier)
                self.replaceable = None
                self.file.close()
                self.rewrite()
            self.rows.append(row)
            self.writer.writerow(row)
            self.file.flush()
        except OSError as e:   # a full disk mid-run: one line, not a traceback
            with contextlib.suppress(OSError):
                self.file.close()   # now, so that the unwritten row does not fail again at exit
            raise UserError(f"cannot write {self.path}: {e.strerror or e} (fix: free disk space; "
                            f"--init_from=resume continues from the last saved last.pt)") from None

    def close(self):
        self.file.close()


def kept(row, resumed_at):
    """Whether a resumed run keeps a row of log.csv: the rows of the iterations before it, and the eval at it."""
    return int(row["iter"]) < resumed_at or int(row["iter"]) == resumed_at and row["kind"] == "eval"


def read_rows(path):
    """The rows of a log.csv (dicts of text) whose values are what train.py writes: an iteration number, a kind,
    numbers (or nothing). Other rows (an edited file) are left out with a note, so that loss.png, drawn after
    the run, never meets text where it reads a number. [] when there is no file."""
    if not os.path.exists(path):
        return []
    try:
        with open(path, newline="", encoding="utf-8") as f:
            rows = list(enumerate(csv.DictReader(f), 2))
    except (UnicodeDecodeError, csv.Error) as e:   # e.g. overwritten by another program: one line, not a traceback
        raise UserError(f"{path} is damaged ({e}) (fix: delete it: a resumed run then logs from where it "
                        f"resumes, and loss.png shows only that part)") from None
    bad = sorted(n for n, row in rows if not log_row_ok(row))   # an iteration that is no number too (an audit)
    if bad:
        print(f"note: {path}: left out {len(bad)} row(s) whose values are not numbers (line {bad[0]} first)",
              flush=True)
    return [row for n, row in rows if n not in set(bad)]


def log_row_ok(row):
    """True when a log.csv row holds what train.py writes: an iteration number, a kind, and numbers or nothing in
    the other columns."""
    def number(text):
        try:
            float(text)
            return True
        except ValueError:
            return False
    numbers = [row.get(k) or "" for k in COLUMNS if k not in ("iter", "kind", "branch_weights")]
    numbers += (row.get("branch_weights") or "").split()
    iteration = (row.get("iter") or "").isdigit()
    return iteration and row.get("kind") in ("train", "eval") and all(number(v) for v in numbers if v != "")


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
    except (ImportError, OSError, UserError) as e:   # atomic_open's write errors are UserErrors
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
