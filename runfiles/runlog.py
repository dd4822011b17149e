"""
out_dir/log.csv: one row per logged value of a training run (train.py writes it, plots and compare.py
read it). A fresh run starts a new file; a resumed run keeps the rows from before its resume point.
"""

import csv
import os

from checkpoint import atomic_open

COLUMNS = ["iter", "kind", "loss", "val_loss", "val_loss_heaviest", "lr", "ms_per_iter", "tokens_per_s",
           "mfu", "elapsed_s", "branch_weights"]


class CsvLog:
    """Appends rows to `path`. keep_before=k keeps the existing rows of iterations < k (a run resumed at
    iteration k logs iteration k and later again, its eval at k included); None starts an empty file."""

    def __init__(self, path, keep_before=None):
        rows = []
        if keep_before is not None and os.path.exists(path):
            with open(path, newline="", encoding="utf-8") as f:
                rows = [r for r in csv.DictReader(f) if r.get("iter", "").isdigit() and int(r["iter"]) < keep_before]
        with atomic_open(path, "w") as f:
            writer = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(rows)
        self.file = open(path, "a", newline="", encoding="utf-8")
        self.writer = csv.DictWriter(self.file, fieldnames=COLUMNS, extrasaction="ignore")

    def write(self, **row):
        self.writer.writerow({k: _text(v) for k, v in row.items()})
        self.file.flush()

    def close(self):
        self.file.close()


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
