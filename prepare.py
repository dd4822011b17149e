"""
Dataset preparation: tinyshakespeare as characters or as GPT-2 BPE tokens.

    python prepare.py shakespeare_char    # characters, 65-symbol vocabulary -> data/shakespeare_char/
    python prepare.py shakespeare         # GPT-2 BPE -> data/shakespeare/

A dataset folder (data/<dataset>/, or --out_dir) holds train.bin and val.bin, the token ids as flat uint16
(np.memmap(path, dtype=np.uint16, mode="r") reads them), and meta.json, which describes the tokenizer
(dataset.py reads it back). meta.json is written last: its presence means the folder is complete.

Offline: the repository ships tinyshakespeare (data/tinyshakespeare/input.txt); --input (or SHAKESPEARE_INPUT)
names another copy, --gpt2_ranks (or GPT2_TIKTOKEN_FILE) a local gpt2.tiktoken.
Library use: prepare(dataset, out_dir=None, **opts) -> out_dir.

The other datasets are prepared by tools:

    python -m tools.pangu.compact_vocab shakespeare --vocab_size 4096   # paper 003's compact vocabulary
    python -m tools.wikitext103 [--vocab_size K]                        # WikiText-103
"""
import argparse
import hashlib
import http.client
import json
import os
import re
import shlex
import sys
import time
import urllib.request

import numpy as np

from checkpoint import atomic_open, check_out_dir, remove_stale_temp_files
from configurator import ArgumentParser, UserError
from dataset import GPT2_EOT_ID, GPT2_VOCAB_SIZE, CharTokenizer, get_gpt2_encoding, one_line

SHAKESPEARE_URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
SHAKESPEARE_BYTES = 1115394
SHAKESPEARE_SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
SHIPPED_SHAKESPEARE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "tinyshakespeare", "input.txt")

DATASETS = ("shakespeare_char", "shakespeare")
# datasets that tools prepare (python -m tools.<...>), by name pattern: the command for each
TOOL_DATASETS = {r"shakespeare_v(\d+)": "tools.pangu.compact_vocab shakespeare --vocab_size {}",
                 r"wikitext103": "tools.wikitext103",
                 r"wikitext103_v(\d+)": "tools.wikitext103 --vocab_size {}"}


# -----------------------------------------------------------------------------
# downloads and dataset files

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
        self.done = self.total
        self._show("\n")

    def _show(self, end):
        done = f"{self.done / self.scale:.1f}"
        if self.total > 1:  # total unknown (e.g. no Content-Length): show the amount only
            done = f"{100.0 * min(self.done / self.total, 1.0):5.1f}% ({done}/{self.total / self.scale:.1f}"
        else:
            done = f"({done}"
        print(f"\r{self.label}: {done} {self.unit})", end=end, file=sys.stderr, flush=True)


def download(url, dest, expected_size=None, expected_sha256=None):
    """Download url to dest with a progress line; verify the size (and sha256 when given).

    Writes to dest + '.part' and renames at the end, so an interrupted download never leaves a
    truncated file that would later pass for a complete one. Raises OSError/ValueError on failure.
    """
    os.makedirs(os.path.dirname(os.path.abspath(dest)), exist_ok=True)
    tmp = dest + ".part"
    req = urllib.request.Request(url, headers={"User-Agent": "nanogpt-prepare/1.0"})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp, open(tmp, "wb") as f:
            announced = int(resp.headers.get("Content-Length") or 0)
            bar = Progress(f"downloading {os.path.basename(dest)}", announced or expected_size or 0)
            sha = hashlib.sha256()
            size = 0
            while chunk := resp.read(1 << 20):
                f.write(chunk)
                sha.update(chunk)
                size += len(chunk)
                bar.update(len(chunk))
            bar.close()
    except BaseException as e:
        if os.path.exists(tmp):
            os.remove(tmp)
        if isinstance(e, http.client.HTTPException):  # e.g. IncompleteRead, which is not an OSError
            raise OSError(one_line(e)) from e
        raise
    for want in (announced or None, expected_size):
        if want is not None and size != want:
            os.remove(tmp)
            raise ValueError(f"got {size} bytes, expected {want}")
    if expected_sha256 is not None and sha.hexdigest() != expected_sha256:
        os.remove(tmp)
        raise ValueError(f"sha256 mismatch ({sha.hexdigest()[:12]}... != {expected_sha256[:12]}...)")
    os.replace(tmp, dest)
    return dest


DATA_FILES = ("train.bin", "val.bin", "test.bin", "meta.json", "coverage.png")   # the tools write the last ones too


def begin_writing(out_dir):
    """Called once the inputs are read and checked, before the first file is written. meta.json marks a
    complete folder, so an old one goes first: a run stopped halfway must not leave new token files under
    the old vocabulary. Temporary files a killed earlier run left behind are removed (and reported)."""
    os.makedirs(out_dir, exist_ok=True)
    remove_stale_temp_files(out_dir, DATA_FILES)
    try:
        os.remove(os.path.join(out_dir, "meta.json"))
    except FileNotFoundError:
        pass
    except OSError as e:
        raise UserError(f"cannot replace {os.path.join(out_dir, 'meta.json')}: {e.strerror} "
                        f"(fix: choose a writable --out_dir)") from None


def write_meta(out_dir, meta):
    """Write meta.json atomically; it goes last, so it marks a complete dataset folder."""
    with atomic_open(os.path.join(out_dir, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1, ensure_ascii=False)


def write_bin(path, ids):
    """Write token ids as a flat uint16 file (readable with np.memmap), atomically."""
    ids = np.asarray(ids)
    assert ids.size == 0 or ids.max() < 2**16, "token ids must fit in uint16"
    with atomic_open(path, "wb") as f:
        f.write(ids.astype(np.uint16).tobytes())


# -----------------------------------------------------------------------------
# tinyshakespeare

def shakespeare_text(out_dir, input_path=None):
    """The tinyshakespeare text: --input, $SHAKESPEARE_INPUT, a local copy, the shipped one, else a download."""
    candidates = [input_path, os.environ.get("SHAKESPEARE_INPUT"), os.path.join(out_dir, "input.txt"),
                  os.path.join(os.path.dirname(os.path.abspath(out_dir)), "shakespeare_char", "input.txt"),
                  SHIPPED_SHAKESPEARE]
    explicit = [p for p in candidates[:2] if p]
    if explicit and not os.path.isfile(explicit[0]):
        raise UserError(f"tinyshakespeare input not found: {explicit[0]} (fix: check --input / SHAKESPEARE_INPUT)")
    path = next((p for p in candidates if p and os.path.isfile(p)), None)
    if path is None:
        path = os.path.join(out_dir, "input.txt")
        try:
            download(SHAKESPEARE_URL, path, SHAKESPEARE_BYTES, SHAKESPEARE_SHA256)
        except (OSError, ValueError) as e:
            raise UserError(f"could not download tinyshakespeare ({one_line(e)}); "
                            "pass a local copy with --input PATH or SHAKESPEARE_INPUT=PATH") from None
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except UnicodeDecodeError:
        raise UserError(f"{path} is not UTF-8 text (fix: pass the tinyshakespeare input.txt)") from None
    if not text:
        raise UserError(f"{path} is empty (fix: pass the tinyshakespeare input.txt)")
    return text


def split_90_10(text):
    """First 90% of the characters for training, the rest for validation (as nanoGPT)."""
    n = int(len(text) * 0.9)
    return text[:n], text[n:]


def prepare_shakespeare_char(out_dir, input_path=None, gpt2_ranks=None):
    """Characters as tokens: the vocabulary is the text's distinct characters (gpt2_ranks is not used)."""
    text = shakespeare_text(out_dir, input_path)
    chars = sorted(set(text))
    if len(chars) > 2**16:   # checked before begin_writing: a failure must leave an existing folder as it was
        raise UserError(f"the text has {len(chars):,} distinct characters, and the char tokenizer stores token ids "
                        f"as uint16: at most 65,536 (fix: a text with fewer distinct characters, or a BPE dataset: "
                        f"python prepare.py shakespeare --input ...)")
    tok = CharTokenizer(chars)
    train, val = split_90_10(text)
    begin_writing(out_dir)
    write_bin(os.path.join(out_dir, "train.bin"), tok.encode(train))
    write_bin(os.path.join(out_dir, "val.bin"), tok.encode(val))
    print(f"length of dataset in characters: {len(text):,}; vocab size: {len(chars)}")
    print(f"train has {len(train):,} tokens, val has {len(val):,} tokens")
    write_meta(out_dir, {"dataset": "shakespeare_char", "tokenizer": "char", "vocab_size": len(chars),
                         "chars": chars, "splits": {"train": {"tokens": len(train)}, "val": {"tokens": len(val)}}})


def prepare_shakespeare(out_dir, input_path=None, gpt2_ranks=None):
    """GPT-2 BPE tokens (encode_ordinary: an <|endoftext|> in the text is plain text)."""
    text = shakespeare_text(out_dir, input_path)
    train, val = split_90_10(text)
    enc = get_gpt2_encoding(gpt2_ranks)
    begin_writing(out_dir)
    train_ids, val_ids = enc.encode_ordinary(train), enc.encode_ordinary(val)
    write_bin(os.path.join(out_dir, "train.bin"), train_ids)
    write_bin(os.path.join(out_dir, "val.bin"), val_ids)
    print(f"train has {len(train_ids):,} tokens, val has {len(val_ids):,} tokens (vocab {GPT2_VOCAB_SIZE})")
    write_meta(out_dir, {"dataset": "shakespeare", "tokenizer": "gpt2", "vocab_size": GPT2_VOCAB_SIZE,
                         "eot_token": GPT2_EOT_ID,
                         "splits": {"train": {"tokens": len(train_ids)}, "val": {"tokens": len(val_ids)}}})


# -----------------------------------------------------------------------------
# entry points

def tool_command(dataset):
    """The command that prepares `dataset` when a tool does (shakespeare_vK, wikitext103, wikitext103_vK), else None."""
    for pattern, command in TOOL_DATASETS.items():
        m = re.fullmatch(pattern, dataset)
        if m:
            return "python -m " + command.format(*m.groups())
    return None


def prepare(dataset, out_dir=None, **opts):
    """Prepare `dataset` into out_dir (default data/<dataset>). Options: input_path, gpt2_ranks. Returns out_dir."""
    command = tool_command(dataset)
    if command:
        if out_dir and os.path.normpath(out_dir) != os.path.join("data", dataset):
            command += f" --out_dir {shlex.quote(out_dir)}"
        raise UserError(f"dataset {dataset!r} is prepared by a tool, not by prepare.py (fix: {command})")
    if dataset not in DATASETS:
        raise UserError(f"unknown dataset {dataset!r} (fix: shakespeare_char or shakespeare; tools prepare the others: "
                        f"python -m tools.pangu.compact_vocab for shakespeare_vK, python -m tools.wikitext103 "
                        f"for wikitext103 and wikitext103_vK)")
    out_dir = out_dir or os.path.join("data", dataset)
    check_out_dir(out_dir)   # a file, or not writable: one line now, not a traceback later
    fn = {"shakespeare_char": prepare_shakespeare_char, "shakespeare": prepare_shakespeare}[dataset]
    fn(out_dir, **opts)
    print(f"wrote {out_dir}")
    return out_dir


def main(argv=None):
    p = ArgumentParser(prog="python prepare.py", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dataset", help="shakespeare_char | shakespeare")
    p.add_argument("--out_dir", help="output folder (default data/<dataset>)")
    p.add_argument("--input", dest="input_path", help="local tinyshakespeare input.txt (env SHAKESPEARE_INPUT)")
    p.add_argument("--gpt2_ranks", help="local gpt2.tiktoken ranks file (env GPT2_TIKTOKEN_FILE)")
    args = vars(p.parse_args(argv))
    try:
        prepare(args.pop("dataset"), **args)
    except UserError as e:
        raise SystemExit(f"error: {e}") from None


if __name__ == "__main__":
    main()
