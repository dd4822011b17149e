"""
A prepared dataset folder (written by prepare.py or a tool): train.bin / val.bin (/ test.bin) hold flat uint16
token ids, meta.json describes the tokenizer (written last: its presence means the folder is complete).
nanoGPT's folders are read too: meta.pkl (its char vocabulary) instead of meta.json, or neither (GPT-2 BPE, for a
nanoGPT checkpoint: read_meta_pkl).

The tokenizers are tokenizers.py's; here, the tokenizer of a folder or a checkpoint (load_tokenizer). What
sample.py needs of it: the tokenizer of a checkpoint's dataset and the prompt's ids, checked (tokenizer_of). What
prepare.py and the tools need: checking a text dataset's name and folder (check_text_dataset), finding or
downloading an input (shakespeare_path, download), reading it (read_text), writing the folder (prepare.py:
write_dataset; the tools: begin_writing, write_bin, write_meta). train.py reads the token files itself
(get_batch, with its batch seeds); what it checks of them before a run is here.
"""

import contextlib
import hashlib
import json
import os
import pickle
import re
import shlex
import sys
import time

import numpy as np

from safety_net.configurator import UserError, one_line
from safety_net.fileio import atomic_open, atomic_path, check_out_dir, remove_stale_temp_files
from safety_net.tokenizers import (GPT2_VOCAB_SIZE, Vocabulary, check_char_count, encode_start, gpt2_meta,
                                   tokenizer_from_meta)

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # (this file is in safety_net/)


def split_path(data_dir, split):
    return os.path.join(data_dir, f"{split}.bin")


def load_meta(data_dir, ckpt=None):
    """meta.json of a prepared dataset, with one-line errors for a missing or damaged file. Without one, a nanoGPT
    folder's meta.pkl; without either, GPT-2 BPE when `ckpt` is a nanoGPT checkpoint (as nanoGPT's sample.py)."""
    path = os.path.join(data_dir, "meta.json")
    fix = f"(fix: prepare it with `python prepare.py <dataset> --out_dir={data_dir}`, or pass the right --data_dir)"
    if not os.path.isfile(path) and os.path.isfile(os.path.join(data_dir, "meta.pkl")):
        return read_meta_pkl(os.path.join(data_dir, "meta.pkl"))
    if not os.path.isfile(path) and ckpt is not None and ckpt.get("format") == "nanogpt":
        if ckpt.get("model_args", {}).get("vocab_size", GPT2_VOCAB_SIZE) < GPT2_VOCAB_SIZE:
            raise UserError(f"{data_dir} has no meta.pkl (nanoGPT's char vocabulary), and {ckpt.get('path')} has "
                            f"{ckpt['model_args']['vocab_size']} tokens, not GPT-2's (fix: --data_dir=<the nanoGPT "
                            f"data folder it was trained on>)")
        return dict(gpt2_meta(), dataset=os.path.basename(os.path.normpath(data_dir)))
    try:
        with open(path, encoding="utf-8") as f:
            meta = json.load(f)
    except FileNotFoundError:
        raise UserError(f"{path} not found {fix}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UserError(f"{path} is not readable JSON ({type(e).__name__}: {e}) {fix}") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("vocab_size"), int) or meta["vocab_size"] < 1:
        raise UserError(f"{path} has no valid vocab_size {fix}")
    return meta


def is_prepared(data_dir):
    """train.bin, val.bin and the vocabulary: meta.json, or nanoGPT's meta.pkl (its prepare.py's folders)."""
    return all(os.path.exists(os.path.join(data_dir, name)) for name in ("train.bin", "val.bin")) and \
        any(os.path.exists(os.path.join(data_dir, name)) for name in ("meta.json", "meta.pkl"))


def default_data_dir(config):
    """The dataset folder of a train.py config: data_dir, or data/<dataset>."""
    return config.get("data_dir") or os.path.join("data", config["dataset"])


def resolve_data_dir(ckpt, override=""):
    """The dataset folder for a checkpoint: --data_dir, else the one it recorded (a relative path is tried
    from the current directory, then from the repository root). A folder whose tokenizer is not the
    checkpoint's (another --data_dir, or the recorded one prepared again) is refused: its ids mean other text."""
    data_dir = override or ckpt.get("data_dir") or ""
    if not data_dir:
        raise UserError("the checkpoint records no data_dir (fix: pass --data_dir=data/<dataset>)")
    # nanoGPT's checkpoints record no tokenizer to check a folder against: only the one it names, as nanoGPT reads it
    if not os.path.isabs(data_dir) and not os.path.isdir(data_dir) and ckpt.get("format") != "nanogpt":
        here = os.path.join(REPO_ROOT, data_dir)
        data_dir = here if os.path.isdir(here) else data_dir
    if ckpt.get("tokenizer_id") and ckpt["tokenizer_id"] != tokenizer_id(load_meta(data_dir)):
        source = ckpt.get("path", "the checkpoint")
        if override:
            raise UserError(f"{data_dir} has another tokenizer than the one {source} was trained with (dataset "
                            f"{ckpt.get('dataset')}) (fix: --data_dir=<that dataset>, or drop it)")
        # the recorded folder was prepared again since, e.g. from another text: its ids now mean other text
        raise UserError(f"{data_dir}, the dataset {source} was trained on, has been prepared again with another "
                        f"tokenizer since (fix: prepare it again as it was for that run, or pass --data_dir=<a "
                        f"dataset with that run's tokenizer>)")
    return data_dir


def tokenizer_id(meta):
    """A short hash of what maps ids to text (tokenizer kind, vocabulary, eot), recorded in checkpoints:
    two datasets with the same id decode the same ids to the same text."""
    keys = ("tokenizer", "vocab_size", "chars", "tokens", "eot_token")
    identity = json.dumps({k: meta.get(k) for k in keys}, sort_keys=True)
    return hashlib.sha256(identity.encode("utf-8")).hexdigest()[:16]


# --- the tokenizer of a dataset folder, and of a checkpoint's -----------------------------------

def load_tokenizer(data_dir, ckpt=None):
    """The tokenizer described by data_dir/meta.json (char, gpt2 or compact), with one-line errors. With a
    checkpoint (load_meta reads nanoGPT's folders for it too), its vocabulary is checked against the model's
    (check_vocabulary): every script that samples or scores a checkpoint loads its tokenizer here."""
    meta = load_meta(data_dir, ckpt)
    try:
        tok = tokenizer_from_meta(meta)
    except (KeyError, ValueError, TypeError) as e:
        if isinstance(e, UserError):
            raise
        raise UserError(f"cannot build the tokenizer of {data_dir}/meta.json: {one_line(e)} "
                        f"(fix: re-run prepare.py for that dataset, or pass --data_dir)") from None
    if ckpt is not None:
        check_vocabulary(meta, ckpt, data_dir)
    return tok


def check_vocabulary(meta, ckpt, data_dir):
    """One line unless the dataset's vocabulary is the model's: no more tokens than the model has, and for a
    checkpoint that records no tokenizer (nanoGPT's, or older ones) and a char vocabulary, exactly as many (with
    fewer, the model's ids past the vocabulary would fail to decode after sampling; with more, other characters
    would be read from its ids without a word). A model may have more rows than a BPE vocabulary (GPT-2's 50257
    padded to 50304), or than the vocabulary it was trained on (tokenizer_id: resolve_data_dir checks it)."""
    model_vocab = ckpt.get("model_args", {}).get("vocab_size")
    size = meta["vocab_size"]
    if not isinstance(model_vocab, int):
        return
    exact = Vocabulary(meta).is_char_level and not ckpt.get("tokenizer_id")
    if size > model_vocab or (exact and size != model_vocab):
        raise UserError(f"the vocabulary of {data_dir} has {size} tokens, the model in {ckpt.get('path')} "
                        f"{model_vocab}: it was trained on another vocabulary, and its ids would decode to other "
                        f"text (fix: --data_dir=<the dataset folder it was trained on>)")


def tokenizer_of(ckpt, data_dir, start_text):
    """sample.py's (tokenizer, the prompt's ids): the tokenizer of the dataset a checkpoint was trained on (the
    folder it recorded, or data_dir, --data_dir, when given), with one-line errors when it is missing or has
    another tokenizer (resolve_data_dir); start_text encoded and checked against it and the model's vocab_size
    (encode_start: an empty BPE prompt is the eot token)."""
    data_dir = resolve_data_dir(ckpt, data_dir)
    dataset = ckpt.get("dataset") or os.path.basename(os.path.normpath(data_dir))
    tok = load_tokenizer(data_dir, ckpt)
    return tok, encode_start(tok, start_text, dataset, ckpt["model_args"]["vocab_size"])


# --- train.py's token files, checked before a run ------------------------------------------------------

TOKEN_DTYPE = np.uint16   # prepare.py's token files: flat uint16 ids, read with np.memmap


def dataset_vocab_size(config):
    """vocab_size of a train.py config's dataset (what train.py will use), or None before it is prepared."""
    path = os.path.join(default_data_dir(config), "meta.json")
    return load_meta(default_data_dir(config))["vocab_size"] if os.path.isfile(path) else None


def split_tokens(data_dir, split, vocab_size, block_size=None):
    """Number of tokens of a split, after checking the file: present, whole uint16 ids, ids below
    vocab_size, and longer than one training window (block_size None: at least one prediction, 2 tokens)."""
    path = split_path(data_dir, split)
    fix = "(fix: re-run `python prepare.py` for this dataset, or pass the right --data_dir)"
    if not os.path.isfile(path):
        raise UserError(f"{path} not found {fix}")
    size = os.path.getsize(path)
    if size % np.dtype(TOKEN_DTYPE).itemsize:
        raise UserError(f"{path} has an odd number of bytes ({size}): not uint16 token ids {fix}")
    n = size // np.dtype(TOKEN_DTYPE).itemsize
    if block_size is None and n < 2:
        raise UserError(f"{split} split of {data_dir} has {n} token(s), nothing to score {fix}")
    if block_size is not None and n <= block_size:
        raise UserError(f"{split} split of {data_dir} has {n} tokens, not enough for block_size={block_size} "
                        f"(fix: --block_size={max(1, n // 2)}, or a bigger dataset: a longer text, or for val a larger "
                        f"prepare.py --val_fraction)")
    top = int(np.memmap(path, dtype=TOKEN_DTYPE, mode="r").max())
    if top >= vocab_size:
        raise UserError(f"{path} holds token id {top}, but meta.json's vocab_size is {vocab_size} {fix}")
    return n


def check_splits(data_dir, vocab_size, block_size, segments_path=""):
    """train.py's data check: the train and val token files fit the model (split_tokens). Returns the window
    starts of segments_path (data_segments, checked against the train split), or None: every position."""
    n_train = split_tokens(data_dir, "train", vocab_size, block_size)
    split_tokens(data_dir, "val", vocab_size, block_size)
    return load_segments(segments_path, n_train, block_size) if segments_path else None


def segments_info_path(path):
    """refine.json for refine.npy: what the window starts were made for (tools/pangu/refine.py writes it)."""
    return os.path.splitext(path)[0] + ".json"


def load_segments(path, n_tokens, block_size):
    """The window starts saved by refine (an int .npy), checked against the train split (and, when refine.json
    is beside it, against the length of the train split they were made for: another dataset's are refused)."""
    try:
        starts = np.load(path)
    except (OSError, ValueError) as e:
        raise UserError(f"cannot read data_segments '{path}': {e} (fix: write it with `python -m tools.pangu.refine` "
                        f"first)") from None
    if starts.ndim != 1 or len(starts) == 0 or starts.dtype.kind not in "iu":
        raise UserError(f"data_segments '{path}' is not a non-empty 1-D integer array (fix: write it with "
                        f"`python -m tools.pangu.refine`)")
    if np.any(starts % (block_size + 1)):   # refine scores whole windows: segment i starts at i * (block_size + 1)
        raise UserError(f"data_segments '{path}' was made for another block_size than {block_size} (fix: refine "
                        f"again with a model of this block_size, or train with the block_size it was made for)")
    info = {}
    with contextlib.suppress(OSError, ValueError):
        with open(segments_info_path(path), encoding="utf-8") as f:
            info = json.load(f)
    made_for = info.get("train_tokens") if isinstance(info, dict) else None
    if made_for is not None and made_for != n_tokens:
        raise UserError(f"data_segments '{path}' was made for a train split of {made_for:,} tokens "
                        f"({info.get('data_dir')}), this run's has {n_tokens:,} (fix: train on the dataset it was "
                        f"refined on, or refine again with a model of this dataset)")
    if starts.min() < 0 or starts.max() + block_size >= n_tokens:
        raise UserError(f"data_segments '{path}' has window starts outside the train split for block_size="
                        f"{block_size} (fix: refine with a model of this dataset and block_size)")
    return starts.astype(np.int64)


def run_prepare(prepare, dataset, data_dir):
    """prepare(dataset, out_dir=data_dir): prepare.py's, which train.py passes in on a dataset's first run (this
    module imports no script). Says so first; its one-line errors name the dataset."""
    print(f"dataset '{dataset}' is not prepared in {data_dir}: running prepare.prepare('{dataset}')", flush=True)
    try:
        prepare(dataset, out_dir=data_dir)
    except UserError as e:
        raise UserError(f"preparing dataset '{dataset}' failed: {e}") from None


# --- writing a dataset folder (prepare.py and the tools): downloads, token files, meta.json --------------

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
    """Where tinyshakespeare is: --input, $SHAKESPEARE_INPUT, a copy beside
    out_dir, the shipped one, else downloaded into out_dir."""
    given = input_path or os.environ.get("SHAKESPEARE_INPUT")
    if given:
        return given   # read_text says so if it is missing
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


# --- a text file as a dataset (prepare.py, tools/pangu/compact_vocab.py): its name, text and checks ---------

TOKENIZERS = ("char", "gpt2")   # prepare.py's; the compact vocabulary is tools.pangu.compact_vocab's
# datasets that tools prepare (python -m tools.<...>), by name pattern: the command for each
TOOL_DATASETS = {r"shakespeare_v(\d+)": "tools.pangu.compact_vocab shakespeare --vocab_size {}",
                 r"wikitext103": "tools.wikitext103",
                 r"wikitext103_v(\d+)": "tools.wikitext103 --vocab_size {}"}
TEXT_FIX = "(fix: --input=<a UTF-8 text file>)"
BYTE_ORDER_MARK = "\ufeff"   # U+FEFF at the start of a file: the encoding's mark, not text


def tool_command(dataset):
    """The command that prepares `dataset` when a tool does (shakespeare_vK, wikitext103, wikitext103_vK), else None."""
    for pattern, command in TOOL_DATASETS.items():
        m = re.fullmatch(pattern, dataset)
        if m:
            return "python -m " + command.format(*m.groups())
    return None


def name_of_text(input_path):
    """notes.txt -> notes: the name of a text file's datasets (notes_char, notes_gpt2, notes_v1024), as a plain
    folder name."""
    stem = os.path.splitext(os.path.basename(os.path.normpath(input_path)))[0]
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", stem).strip("._-") or "text"


def check_val_fraction(val_fraction):
    if not (isinstance(val_fraction, (int, float)) and 0 < val_fraction < 1):
        raise UserError(f"--val_fraction must be in (0, 1), got {val_fraction} (fix: --val_fraction=0.1)")


def check_dataset_name(dataset):
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", dataset):
        raise UserError(f"dataset name {dataset!r} is not a plain folder name (fix: letters, digits, '_', '.' "
                        f"and '-', e.g. mynotes_char)")


def check_text_dataset(dataset, input_path, tokenizer, val_fraction, known, out_dir=None):
    """prepare.py's (dataset name, tokenizer, out_dir: default data/<name>), or a one-line error: a val_fraction
    outside (0, 1), a tokenizer that is not char or gpt2, a tool's dataset, a name other than `known`
    ({tinyshakespeare's names: their tokenizer}) without --input, a name that is no plain folder name or that
    names another tokenizer, an out_dir that is a file or not writable. Without a name, --input's file names it:
    notes.txt -> notes_char (notes_gpt2 with --tokenizer=gpt2)."""
    dataset, tokenizer = dataset_and_tokenizer(dataset, input_path, tokenizer, val_fraction, known, out_dir)
    out_dir = out_dir or os.path.join("data", dataset)
    check_out_dir(out_dir)
    return dataset, tokenizer, out_dir


def dataset_and_tokenizer(dataset, input_path, tokenizer, val_fraction, known, out_dir):
    check_val_fraction(val_fraction)
    if tokenizer == "compact":
        raise UserError(f"paper 003's compact vocabulary is a tool's (fix: python -m tools.pangu.compact_vocab "
                        f"--input={input_path or 'YOUR_TEXT.txt'} --vocab_size=1024)")
    if tokenizer and tokenizer not in TOKENIZERS:   # "" or None: the dataset name's (prepare.py's default)
        raise UserError(f"--tokenizer must be char or gpt2, got {tokenizer!r} (fix: --tokenizer=gpt2)")
    if not dataset:
        if not input_path:
            raise UserError("no dataset named (fix: python prepare.py shakespeare_char, or your own text: "
                            "python prepare.py --input=YOUR_TEXT.txt)")
        return f"{name_of_text(input_path)}_{tokenizer or 'char'}", tokenizer or "char"
    command = tool_command(dataset)
    if command:
        if out_dir and os.path.normpath(out_dir) != os.path.join("data", dataset):
            command += f" --out_dir {shlex.quote(out_dir)}"
        raise UserError(f"dataset {dataset!r} is prepared by a tool, not by prepare.py (fix: {command})")
    if dataset in known:
        if tokenizer and tokenizer != known[dataset]:
            other = next(name for name, kind in known.items() if kind == tokenizer)
            raise UserError(f"{dataset} is tinyshakespeare as {known[dataset]} tokens, not {tokenizer} "
                            f"(fix: python prepare.py {other})")
        return dataset, known[dataset]
    if not input_path:
        raise UserError(f"unknown dataset {dataset!r} (fix: your own text: python prepare.py {dataset} "
                        f"--input=YOUR_TEXT.txt; tinyshakespeare: shakespeare_char or shakespeare; tools prepare "
                        f"the others: python -m tools.pangu.compact_vocab for shakespeare_vK, python -m "
                        f"tools.wikitext103 for wikitext103 and wikitext103_vK)")
    check_dataset_name(dataset)
    named = next((kind for kind in TOKENIZERS if dataset.endswith("_" + kind)), None)
    if named and tokenizer and named != tokenizer:
        raise UserError(f"the name {dataset} says {named}, but --tokenizer is {tokenizer} (fix: drop one of them, "
                        f"or name it {dataset[:-len(named)]}{tokenizer})")
    return dataset, tokenizer or named or "char"


def read_text(path):
    """The text of a UTF-8 file, or a one-line error: missing, unreadable, empty, binary (NUL bytes, which
    UTF-16 text has too) or not UTF-8. A byte-order mark (Windows Notepad writes one) is not text: it is dropped,
    as Python's utf-8-sig does, so U+FEFF never becomes a token. Line ends stay as they are: a CRLF file keeps
    its carriage returns (a char vocabulary has one as a token, and a sample prints the file's line ends)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise UserError(f"input not found: {path} {TEXT_FIX}") from None
    except OSError as e:   # a folder, no permission
        raise UserError(f"cannot read {path}: {e.strerror} {TEXT_FIX}") from None
    if not data:
        raise UserError(f"{path} is empty {TEXT_FIX}")
    if b"\0" in data:
        raise UserError(f"{path} is not text: it holds NUL bytes (a binary file, or UTF-16 text) {TEXT_FIX}")
    try:
        text = data.decode("utf-8")   # not utf-8-sig: an error's byte offset counts from the file's first byte
    except UnicodeDecodeError as e:
        raise UserError(f"{path} is not UTF-8 text (byte {e.start:,} is {data[e.start]:#04x}: a binary file, or "
                        f"another encoding) {TEXT_FIX}") from None
    text = text.removeprefix(BYTE_ORDER_MARK)
    if not text:
        raise UserError(f"{path} is empty (it holds only a byte-order mark) {TEXT_FIX}")
    return text


def check_long_enough(path, n_chars, splits, val_fraction):
    """Each split must hold 2 tokens at least (one prediction; train.py wants more than block_size)."""
    for split, other in (("train", "smaller"), ("val", "larger")):
        n = splits[split]["tokens"]
        if n < 2:
            raise UserError(f"{path} is too short for a {split} split: its {n_chars:,} characters give {n} {split} "
                            f"token(s) at val_fraction={val_fraction} (fix: a longer text, or a {other} "
                            f"--val_fraction)")


def text_record(path, text, val_fraction):
    """meta.json's "text": where the dataset came from and its sha256 (check_replace compares it)."""
    sha = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return {"path": os.path.abspath(path), "sha256": sha, "characters": len(text), "val_fraction": val_fraction}


def write_dataset(out_dir, splits, meta, force=False):
    """prepare.py's dataset folder: splits {"train": ids, "val": ids} as train.bin and val.bin, then meta.json last
    (it marks a complete folder). Refused first, in one line, before anything is written: more distinct characters
    than uint16 ids hold, a split under 2 tokens, a dataset of another text in out_dir (unless force)."""
    text = meta["text"]
    if Vocabulary(meta).is_char_level:
        check_char_count(meta["vocab_size"])
    check_long_enough(text["path"], text["characters"], meta["splits"], text["val_fraction"])
    check_replace(out_dir, meta, force)
    begin_writing(out_dir)
    for split, ids in splits.items():
        write_bin(os.path.join(out_dir, f"{split}.bin"), ids)
    write_meta(out_dir, meta)


def check_replace(out_dir, meta, force=False):
    """One line unless out_dir is free for `meta`'s dataset: no complete dataset there (no meta.json, or a damaged
    one: an interrupted prepare), or one of the same text and tokenizer (the text's sha256; a folder that records
    none: the same tokenizer and split sizes), or force."""
    try:
        old = load_meta(out_dir)
    except UserError:
        return
    text = old.get("text") if isinstance(old.get("text"), dict) else {}
    if text.get("sha256"):
        same_text = text["sha256"] == meta["text"]["sha256"]
    else:
        same_text = old.get("splits") == meta["splits"]
    if force or same_text and tokenizer_id(old) == tokenizer_id(meta):
        return
    what = "another text" if not same_text else f"this text in another tokenizer ({old.get('tokenizer')})"
    source = f", from {text['path']}" if text.get("path") else ""
    raise UserError(f"{out_dir} holds the dataset {old.get('dataset')!r} of {what}{source} (fix: --force to "
                    f"replace it, or another name: python prepare.py NAME --input=...)")


# --- meta.pkl: nanoGPT's char vocabulary, read as data ------------------------------------------------

class PlainDataUnpickler(pickle.Unpickler):
    """Unpickles plain containers, strings and numbers only. A pickle that names any global (a class, or a
    function such as os.system that unpickling would call) is refused before anything of it runs."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"it names {module}.{name}")


PLAIN_TYPES = (dict, list, tuple, str, int, float, bool, type(None))


def read_meta_pkl(path):
    """Our meta (tokenizer 'char', vocab_size, chars) from nanoGPT's meta.pkl ({vocab_size, itos, stoi})."""
    fix = "(fix: re-run nanoGPT's data/<dataset>/prepare.py, or prepare the dataset here with prepare.py)"
    try:
        with open(path, "rb") as f:
            meta = PlainDataUnpickler(f).load()
    except pickle.UnpicklingError as e:
        if str(e).startswith("it names "):
            raise UserError(f"refusing to read {path}: {e}, and unpickling it would run code; a meta.pkl holds plain "
                            f"data only (fix: only use data folders you trust; re-create it with nanoGPT's "
                            f"prepare.py)") from None
        raise UserError(f"cannot read {path}: {e} {fix}") from None
    except (OSError, EOFError, ValueError, TypeError, KeyError, IndexError, AttributeError) as e:
        raise UserError(f"cannot read {path}: {type(e).__name__}: {e} {fix}") from None
    if not _plain(meta):
        raise UserError(f"{path} holds values other than plain containers, strings and numbers {fix}")
    itos = meta.get("itos") if isinstance(meta, dict) else None
    size = meta.get("vocab_size") if isinstance(meta, dict) else None
    if not (isinstance(itos, dict) and isinstance(size, int) and not isinstance(size, bool) and size >= 1
            and set(itos) == set(range(size)) and all(isinstance(c, str) and c for c in itos.values())):
        raise UserError(f"{path} is not nanoGPT's char vocabulary (vocab_size and itos: id -> character for "
                        f"ids 0..vocab_size-1) {fix}")
    # nanoGPT encodes with stoi and decodes with itos: they must be each other's inverse
    stoi = meta.get("stoi", {itos[i]: i for i in range(size)})
    if not isinstance(stoi, dict):
        raise UserError(f"{path}'s stoi is a {type(stoi).__name__}, not a dict of character -> id {fix}")
    wrong = [i for i in range(size) if stoi.get(itos[i]) != i]
    if wrong:
        ch = itos[wrong[0]]
        raise UserError(f"{path}'s stoi and itos disagree (itos[{wrong[0]}] is {ch!r}, stoi[{ch!r}] is "
                        f"{stoi.get(ch)!r}): encoded text would decode to other text {fix}")
    if len(stoi) != size:
        raise UserError(f"{path}'s stoi has {len(stoi)} entries, its itos {size}: another vocabulary {fix}")
    return {"tokenizer": "char", "vocab_size": size, "chars": [itos[i] for i in range(size)],
            "dataset": os.path.basename(os.path.dirname(os.path.abspath(path))), "source": "meta.pkl"}


def _plain(value, depth=0):
    if depth > 20 or not isinstance(value, PLAIN_TYPES):
        return False
    if isinstance(value, dict):
        return all(_plain(k, depth + 1) and _plain(v, depth + 1) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return all(_plain(v, depth + 1) for v in value)
    return True
