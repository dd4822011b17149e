"""
A text file as a dataset (prepare.py, tools/pangu/compact_vocab.py): its name and folder checked
(check_text_dataset), the text read (read_text), and a dataset folder written: prepare.py's write_dataset (its
checks, then meta.json last), the tools' begin_writing, write_bin and write_meta.
"""

import contextlib
import hashlib
import json
import os
import re
import shlex

import numpy as np

from safety_net.configurator import UserError
from safety_net.dataset import PREPARING, load_meta, tokenizer_id
from safety_net.fileio import (atomic_open, atomic_path, check_not_a_run_folder, check_out_dir, lock_dir,
                              remove_stale_temp_files)
from safety_net.tokenizers import Vocabulary, check_char_count


# meta.json first: it marks a complete folder (begin_writing); the tools also write test.bin and coverage.png
DATA_FILES = ("meta.json", "train.bin", "val.bin", "test.bin", "coverage.png")


def begin_writing(out_dir, remove_old=True):
    """Called once the inputs are read and checked, before the first file is written. Returns the folder's writer
    lock (fileio.lock_dir): hold it until write_meta. It refuses a second writer, and a training run reading the
    folder (fileio.lock_for_reading): a prepare --force changed the data under the run, or removed it. Temporary
    files a killed earlier run left behind are removed (and reported). Then, unless remove_old is False (the
    caller calls remove_dataset itself, once its new files are written), the old dataset (remove_dataset)."""
    lock = lock_dir(out_dir, key="dataset folder", fix="wait for it to finish or stop it")
    try:
        remove_stale_temp_files(out_dir, DATA_FILES)
        if remove_old:
            remove_dataset(out_dir)
    except BaseException:
        lock.close()
        raise
    return lock


def remove_dataset(out_dir):
    """meta.json marks a complete folder, so an old one goes first: a run stopped halfway must not leave new token
    files under the old vocabulary. Then the old dataset's other files: a split or figure the new one does not
    write (a test.bin) would be read as its own. PREPARING marks the folder as being written, until write_meta
    (check_foreign_token_files, load_meta)."""
    open(os.path.join(out_dir, PREPARING), "w").close()   # first: a kill from here on leaves files known as ours
    for name in DATA_FILES:
        try:
            os.remove(os.path.join(out_dir, name))
        except FileNotFoundError:
            pass
        except OSError as e:
            raise UserError(f"cannot replace {os.path.join(out_dir, name)}: {e.strerror} "
                            f"(fix: choose a writable --out_dir)") from None


def write_meta(out_dir, meta):
    """Write meta.json atomically; it goes last, so it marks a complete dataset folder."""
    with atomic_open(os.path.join(out_dir, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1, ensure_ascii=False)
    with contextlib.suppress(FileNotFoundError):
        os.remove(os.path.join(out_dir, PREPARING))


def write_bin(path, ids):
    """Write token ids as a flat uint16 file (readable with np.memmap), atomically."""
    with atomic_path(path) as tmp:
        write_ids(tmp, ids)


def write_ids(path, ids):
    ids = np.asarray(ids)
    assert ids.size == 0 or ids.max() < 2**16, "token ids must fit in uint16"
    with open(path, "wb") as f:
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


def check_text_dataset(dataset, input_path, tokenizer, val_fraction, known, out_dir=None, gpt2_ranks=""):
    """prepare.py's (dataset name, tokenizer, out_dir: default data/<name>), or a one-line error: a val_fraction
    outside (0, 1), a tokenizer that is not char or gpt2, a tool's dataset, a name other than `known`
    ({tinyshakespeare's names: their tokenizer}) without --input, a name that is no plain folder name or that
    names another tokenizer, an out_dir that is a file or not writable, --gpt2_ranks for chars. Without a name,
    --input's file names it: notes.txt -> notes_char (notes_gpt2 with --tokenizer=gpt2)."""
    dataset, tokenizer = dataset_and_tokenizer(dataset, input_path, tokenizer, val_fraction, known, out_dir)
    if gpt2_ranks and tokenizer != "gpt2":   # read by GPT-2 BPE only: dropped without a word (a hunt)
        raise UserError(f"--gpt2_ranks is GPT-2's vocabulary, but {dataset} is tokenized by {tokenizer} (fix: drop "
                        f"--gpt2_ranks, or --tokenizer=gpt2)")
    out_dir = out_dir or os.path.join("data", dataset)
    check_out_dir(out_dir)
    check_not_a_run_folder(out_dir, "out_dir", f"--out_dir=data/{dataset}, a folder of its own")
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
        name = f"{name_of_text(input_path)}_{tokenizer or 'char'}"
        if name in known:   # shakespeare.txt became the quickstart's data/shakespeare_char without a word (a hunt)
            raise UserError(f"{input_path} would be named {name}, the name of tinyshakespeare's dataset (fix: name "
                            f"yours: python prepare.py my_{name} --input={shlex.quote(input_path)})")
        return name, tokenizer or "char"
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
    compact = re.fullmatch(r"(.+)_v(\d+)", dataset)
    # the compact vocabulary's names (its sizes: 257 and up; notes_v2 is a name): prepare.py wrote a char dataset
    # under one (a hunt)
    if compact and int(compact[2]) >= 257:
        raise UserError(f"{dataset} is the name of a compact vocabulary of {compact[2]} tokens, which "
                        f"tools.pangu.compact_vocab prepares from a text (fix: python -m tools.pangu.compact_vocab "
                        f"{dataset} --input={shlex.quote(input_path) if input_path else 'YOUR_TEXT.txt'})")
    if not input_path and os.path.isfile(dataset):   # `python prepare.py notes.txt`: a text given as the name
        raise UserError(f"{dataset!r} is a file, not a dataset name (fix: python prepare.py --input={dataset})")
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
    total = splits["train"]["tokens"] + splits["val"]["tokens"]
    for split, other in (("train", "smaller"), ("val", "larger")):
        n = splits[split]["tokens"]
        if n < 2:
            fix = "a longer text"
            if total >= 4:   # else no split of it gives both 2 tokens
                fix += f", or a {other} --val_fraction"
            raise UserError(f"{path} is too short for a {split} split: its {n_chars:,} characters give {n} {split} "
                            f"token(s) at val_fraction={val_fraction} (fix: {fix})")


def text_record(path, text, val_fraction):
    """meta.json's "text": where the dataset came from and its sha256 (check_replace compares it)."""
    sha = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return {"path": os.path.abspath(path), "sha256": sha, "characters": len(text), "val_fraction": val_fraction}


def write_dataset(out_dir, splits, meta, force=False):
    """prepare.py's dataset folder: splits {"train": ids, "val": ids} as train.bin and val.bin, then meta.json last
    (it marks a complete folder). Refused first, in one line, before anything is written: more distinct characters
    than uint16 ids hold, a split under 2 tokens, a dataset of another text in out_dir (unless force). False, and
    nothing written, when out_dir holds this very dataset (holds_dataset; unless force): a run training on the
    folder reads train.bin again at every batch, and the same prepare run again removed it (a FileNotFoundError,
    the run's iterations lost; a hunt). The new token files are written under temporary names before the old
    dataset is removed: a full disk or a Ctrl-C while they are written leaves it whole (--force removed it first)."""
    text = meta["text"]
    if Vocabulary(meta).is_char_level:
        check_char_count(meta["vocab_size"])
    check_long_enough(text["path"], text["characters"], meta["splits"], text["val_fraction"])
    if check_replace(out_dir, meta, force) and holds_dataset(out_dir, splits, meta):
        return False
    with begin_writing(out_dir, remove_old=False):
        # the new token files under temporary names first: the old dataset stays whole until they are written
        with contextlib.ExitStack() as new_files:   # each os.replace'd over its name at the end (atomic_path)
            for split, ids in splits.items():
                write_ids(new_files.enter_context(atomic_path(os.path.join(out_dir, f"{split}.bin"))), ids)
            remove_dataset(out_dir)
        write_meta(out_dir, meta)
    return True


def holds_dataset(out_dir, splits, meta, ignore=()):
    """Whether out_dir holds exactly this dataset: its meta.json (but the keys in `ignore`), and each split's ids in
    its token file (a file of the right size with other ids, or a meta.json under another name, is written again;
    a review)."""
    old = load_meta(out_dir)
    if {k: v for k, v in old.items() if k not in ignore} != {k: v for k, v in meta.items() if k not in ignore}:
        return False
    for split, ids in splits.items():
        path = os.path.join(out_dir, f"{split}.bin")
        if not os.path.isfile(path) or not np.array_equal(np.fromfile(path, dtype=np.uint16), np.asarray(ids)):
            return False
    return True


def foreign_token_files(out_dir):
    """The files of a dataset in out_dir (train.bin, val.bin, test.bin, coverage.png) that no prepare of ours was
    writing (PREPARING): another program's, e.g. nanoGPT's GPT-2 folders, or a project's own test.bin (removed
    without a word; a hunt)."""
    if os.path.exists(os.path.join(out_dir, PREPARING)):
        return []
    return [name for name in DATA_FILES[1:] if os.path.exists(os.path.join(out_dir, name))]


def is_dataset_meta(path):
    """Whether the meta.json at path is a dataset's, readable or damaged: a JSON object with a vocab_size."""
    try:
        with open(path, encoding="utf-8") as f:
            meta = json.load(f)
    except (OSError, ValueError):   # UnicodeDecodeError too
        return False
    return isinstance(meta, dict) and "vocab_size" in meta


def check_foreign_token_files(out_dir, force=False):
    """One line, unless force, when out_dir holds another program's token files without a readable meta.json
    (foreign_token_files), or a meta.json that is not a dataset's: they were replaced without a word (hunts).
    prepare.py, tools.pangu.compact_vocab and tools.wikitext103 ask it; train.py asks foreign_token_files itself
    (starting_point.prepared_data), then prepare.py's prepare this."""
    meta = os.path.join(out_dir, "meta.json")
    ours = os.path.exists(os.path.join(out_dir, PREPARING))   # an interrupted prepare's
    if os.path.isfile(meta) and not force and not ours and not is_dataset_meta(meta):
        # a project's own meta.json was removed without a word, where token files were refused (a hunt)
        raise UserError(f"{meta} is not a dataset's meta.json (no vocab_size): preparing here would replace it "
                        f"(fix: move it away or prepare elsewhere, another dataset name or folder; prepare.py's "
                        f"--force replaces it)")
    tokens = foreign_token_files(out_dir)
    if tokens and not force:
        raise UserError(f"{out_dir} holds {', '.join(tokens)} without a readable meta.json: another program's "
                        f"files, e.g. nanoGPT's dataset (fix: --force to replace them, or write elsewhere: another "
                        f"dataset name or --out_dir)")


def check_replace(out_dir, meta, force=False):
    """One line unless out_dir is free for `meta`'s dataset: no dataset there (no meta.json and no token files, or
    those of an interrupted prepare: PREPARING), or one of the same text, tokenizer and split sizes (the text's
    sha256; a folder that records none: the same tokenizer and split sizes; then True unless force), or force. Split otherwise
    (--val_fraction), runs resumed on it would evaluate on other text, and train on text they evaluated on.
    Token files without meta.json and not ours (nanoGPT's GPT-2 folders) were replaced without a word (a hunt)."""
    try:
        old = load_meta(out_dir)
    except UserError:
        check_foreign_token_files(out_dir, force)
        return False
    text = old.get("text") if isinstance(old.get("text"), dict) else {}
    if text.get("sha256"):
        same_text = text["sha256"] == meta["text"]["sha256"]
    else:
        same_text = old.get("splits") == meta["splits"]
    same_tokenizer = tokenizer_id(old) == tokenizer_id(meta)
    same_splits = old.get("splits") == meta["splits"]
    # a compact vocabulary is chosen from the train split: another split changes it too ("another tokenizer"; a hunt)
    resplit = text.get("val_fraction") != meta["text"]["val_fraction"]
    same_kind = old.get("tokenizer") == meta["tokenizer"]
    if same_text and same_tokenizer and same_splits:
        return not force   # --force: written again
    if force:
        return False
    if not text.get("sha256") and "splits" not in old:   # nanoGPT's meta.pkl: not "another text" (a hunt)
        what = "a text it does not record (nanoGPT's prepare.py, say), which may be this one"
    elif not same_text:
        what = "another text"
    elif not same_tokenizer and not (resplit and same_kind):
        what = f"this text in another tokenizer ({old.get('tokenizer')})"
    elif not resplit:   # prepare.py before its split was exact
        what = ("this text split a character early by an earlier prepare.py (floats): runs resumed on it would "
                "evaluate on other text")
    else:
        what = "this text split otherwise (another --val_fraction: runs resumed on it would evaluate on other text)"
    source = f", from {text['path']}" if text.get("path") else ""
    raise UserError(f"{out_dir} holds the dataset {old.get('dataset')!r} of {what}{source} (fix: --force to "
                    f"replace it, or write it elsewhere: another dataset name or --out_dir)")
