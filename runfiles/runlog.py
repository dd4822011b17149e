"""
out_dir/log.csv: one row per logged value of a training run (train.py writes it with CsvLog; plots and
compare.py read it with read_log). A fresh run starts a new file; a resumed run keeps the rows from
before its resume point.
"""

import contextlib
import csv
import os
import tempfile

from configurator import UserError
from runfiles.checkpoint import atomic_open

COLUMNS = ["iter", "kind", "loss", "val_loss", "val_loss_heaviest", "lr", "ms_per_iter", "tokens_per_s",
           "mfu", "elapsed_s", "branch_weights"]


class CsvLog:
    """Appends rows to `path`. keep_before=k keeps the existing rows of iterations < k (a run resumed at
    iteration k logs iteration k and later again, its eval at k included); None starts an empty file.
    pending=True: a new run into a folder whose log.csv goes with an earlier run's checkpoints; its rows go to a
    temporary file beside `path` until commit() (its first checkpoint is written) moves it onto `path`, and
    discard() (it never saved one) deletes it, so that log.csv always belongs to the checkpoints beside it."""

    def __init__(self, path, keep_before=None, pending=False):
        self.path, self.tmp = path, None
        if pending:
            # the name remove_stale_temp_files cleans up after a kill -9
            fd, self.tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp",
                                            dir=os.path.dirname(os.path.abspath(path)))
            self.file = os.fdopen(fd, "w", newline="", encoding="utf-8")
            self.writer = csv.DictWriter(self.file, fieldnames=COLUMNS, extrasaction="ignore")
            self.writer.writeheader()
            return
        rows = []
        if keep_before is not None:
            rows = [r for r in read_rows(path) if int(r["iter"]) < keep_before]
        with atomic_open(path, "w") as f:
            writer = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(rows)
        self.file = open(path, "a", newline="", encoding="utf-8")
        self.writer = csv.DictWriter(self.file, fieldnames=COLUMNS, extrasaction="ignore")

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
        try:
            self.writer.writerow({k: _text(v) for k, v in row.items()})
            self.file.flush()
        except OSError as e:   # a full disk mid-run: one line, not a traceback
            with contextlib.suppress(OSError):
                self.file.close()   # now, so that the unwritten row does not fail again at exit
            raise UserError(f"cannot write {self.path}: {e.strerror or e} (fix: free disk space; "
                            f"--init_from=resume continues from the last saved last.pt)") from None

    def close(self):
        self.file.close()


def read_rows(path):
    """The rows of a log.csv (dicts of text) with a valid iteration number; [] when there is no file."""
    if not os.path.exists(path):
        return []
    try:
        with open(path, newline="", encoding="utf-8") as f:
            return [row for row in csv.DictReader(f) if (row.get("iter") or "").isdigit()]
    except (UnicodeDecodeError, csv.Error) as e:   # e.g. overwritten by another program: one line, not a traceback
        raise UserError(f"{path} is damaged ({e}) (fix: delete it: a resumed run then logs from where it "
                        f"resumes, and loss.png shows only that part)") from None


def _float(text):
    return None if text in (None, "") else float(text)


def read_log(out_dir):
    """Rows of out_dir/log.csv: per-iteration train losses and the eval rows (iter, loss = train
    loss at eval, val_loss, val_loss_heaviest or None, elapsed_s, branch_weights list or None)."""
    log = {"train": [], "eval": []}
    for row in read_rows(os.path.join(out_dir, "log.csv")):
        it = int(row["iter"])
        if row.get("kind") == "train" and row.get("loss"):
            log["train"].append((it, float(row["loss"])))
        elif row.get("kind") == "eval":
            weights = row.get("branch_weights") or ""
            log["eval"].append(dict(iter=it, loss=_float(row.get("loss")), val_loss=_float(row.get("val_loss")),
                                    val_loss_heaviest=_float(row.get("val_loss_heaviest")),
                                    elapsed_s=_float(row.get("elapsed_s")),
                                    branch_weights=[float(w) for w in weights.split()] or None))
    return log


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
