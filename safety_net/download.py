"""
Downloading a dataset's input, checked (size, sha256) and written atomically (download), and tinyshakespeare:
--input, $SHAKESPEARE_INPUT, out_dir/input.txt, the copy beside the dataset folder (shakespeare_char/input.txt), the
copy this repository ships, or nanoGPT's download into out_dir (shakespeare_path).
"""

import hashlib
import os
import sys
import time

from safety_net import REPO_ROOT
from safety_net.configurator import UserError, one_line
from safety_net.fileio import atomic_path


class Progress:
    """A `\\r` percentage line on stderr; throttled so that it costs nothing (no tqdm dependency)."""

    def __init__(self, label, total, unit="MB", scale=1e6):
        self.label, self.total, self.unit, self.scale = label, max(total, 1), unit, scale
        self.done, self.last = 0, 0.0

    def update(self, n):
        self.done += n
        if time.time() - self.last > 0.2:
            self.last = time.time()
            self._show("")

    def close(self):
        if self.total > 1:   # a known total: 100% (wikitext103 counts characters, then adds bytes)
            self.done = self.total
        self._show("\n")   # an unknown one: the amount itself (its last line said 0.0 MB; a hunt)

    def _show(self, end):
        done = f"{self.done / self.scale:.1f}"
        if self.total > 1:   # a known total: the share done; unknown (no Content-Length): the amount only
            done = f"{100.0 * min(self.done / self.total, 1.0):5.1f}% ({done}/{self.total / self.scale:.1f}"
        else:
            done = f"({done}"
        print(f"\r{self.label}: {done} {self.unit})", end=end, file=sys.stderr, flush=True)


def download(url, dest, expected_size=None, expected_sha256=None):
    """Download url to dest with a progress line; verify the size (and sha256 when given).

    Writes through fileio.atomic_path, so an interrupted or rejected download never leaves a truncated file
    that would later pass for a complete one. Raises OSError (the transfer failed: the caller may try another
    mirror) or ValueError (wrong size or sha256).
    """
    import http.client   # here, not at the top: sample.py and train.py never download
    import urllib.request
    req = urllib.request.Request(url, headers={"User-Agent": "nanogpt-prepare/1.0"})
    failed = None
    try:
        with atomic_path(dest) as tmp:
            try:
                size, sha, announced = fetch(urllib.request.urlopen(req, timeout=60), tmp, dest, expected_size)
            except (OSError, http.client.HTTPException) as e:   # HTTPException (IncompleteRead) is no OSError
                failed = e
            if failed is not None:
                # raised outside the except clause: atomic_path removes the file and passes this on as it is
                # (with the OSError in its chain it would become atomic_path's "cannot write" error)
                raise TransferFailed()
            for want in (announced or None, expected_size):
                if want is not None and size != want:
                    raise ValueError(f"got {size} bytes, expected {want}")
            if expected_sha256 is not None and sha.hexdigest() != expected_sha256:
                raise ValueError(f"sha256 mismatch ({sha.hexdigest()[:12]}... != {expected_sha256[:12]}...)")
    except TransferFailed:
        raise OSError(one_line(failed)) from failed
    return dest


class TransferFailed(Exception):
    """download's transfer failed; download raises its error as an OSError."""


def fetch(response, path, dest, expected_size):
    """Write an HTTP response's body to path with a progress line: (bytes, sha256, Content-Length or 0)."""
    with response, open(path, "wb") as f:
        announced = int(response.headers.get("Content-Length") or 0)
        bar = Progress(f"downloading {os.path.basename(dest)}", announced or expected_size or 0)
        sha = hashlib.sha256()
        size = 0
        while chunk := response.read(1 << 20):
            f.write(chunk)
            sha.update(chunk)
            size += len(chunk)
            bar.update(len(chunk))
        bar.close()
    return size, sha, announced


# prepare.py's tinyshakespeare: where nanoGPT downloads it from, and the copy this repository ships
SHAKESPEARE_URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
SHAKESPEARE_BYTES = 1115394
SHAKESPEARE_SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
SHIPPED_SHAKESPEARE = os.path.join(REPO_ROOT, "data", "tinyshakespeare", "input.txt")


def shakespeare_path(out_dir, input_path=None):
    """Where tinyshakespeare is, the first found of: --input, $SHAKESPEARE_INPUT, out_dir/input.txt,
    shakespeare_char/input.txt beside out_dir, the shipped copy; else downloaded into out_dir/input.txt."""
    if input_path:
        return input_path   # read_text says so if it is missing
    given = os.environ.get("SHAKESPEARE_INPUT")
    if given and not os.path.isfile(given):
        raise UserError(f"SHAKESPEARE_INPUT={given}: no such file (fix: SHAKESPEARE_INPUT=<tinyshakespeare's "
                        f"input.txt>, or unset it)")
    if given:
        return given
    data_dir = os.path.dirname(os.path.abspath(out_dir))
    beside = os.path.join(data_dir, "shakespeare_char", "input.txt")
    path = os.path.join(out_dir, "input.txt")
    for found in (path, beside, SHIPPED_SHAKESPEARE):
        if os.path.isfile(found):
            return found
    try:
        download(SHAKESPEARE_URL, path, SHAKESPEARE_BYTES, SHAKESPEARE_SHA256)
    except (OSError, ValueError) as e:
        raise UserError(f"could not download tinyshakespeare ({one_line(e)}) "
                        f"(fix: pass a local copy with --input PATH or "
                        f"SHAKESPEARE_INPUT=PATH)") from None
    return path
