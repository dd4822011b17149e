"""
A prepared dataset folder (written by prepare.py or a tool): train.bin / val.bin (/ test.bin) hold flat uint16
token ids, meta.json describes the tokenizer (written last: its presence means the folder is complete).
nanoGPT's folders are read too: meta.pkl (its char vocabulary) instead of meta.json, or neither (GPT-2 BPE, for a
nanoGPT checkpoint: read_meta_pkl).

The tokenizers are tokenizers.py's; here, the tokenizer of a folder or a checkpoint (load_tokenizer). What
sample.py needs of it: the tokenizer of a checkpoint's dataset and the prompt's ids, checked (tokenizer_of).
train.py reads the token files itself (get_batch, with its batch seeds); what it checks of them before a run is
here. Downloading an input: download.py; a text file as a dataset and writing the folder: text_dataset.py.
"""

import contextlib
import hashlib
import json
import os
import pickle

import numpy as np

from safety_net import REPO_ROOT
from safety_net.configurator import UserError, one_line
from safety_net.fileio import print_to_stderr
from safety_net.tokenizers import GPT2_VOCAB_SIZE, Vocabulary, encode_start, gpt2_meta, tokenizer_from_meta


PREPARING = ".preparing"   # text_dataset.begin_writing to write_meta: the folder is being written


def split_path(data_dir, split):
    return os.path.join(data_dir, f"{split}.bin")


def load_meta(data_dir, ckpt=None):
    """meta.json of a prepared dataset, with one-line errors for a missing or damaged file. Without one, a nanoGPT
    folder's meta.pkl; without either, GPT-2 BPE when `ckpt` is a nanoGPT checkpoint (as nanoGPT's sample.py)."""
    path = os.path.join(data_dir, "meta.json")
    fix = (f"(fix: prepare it with `python prepare.py <dataset> --out_dir={data_dir}` (a compact vocabulary's or "
           f"WikiText-103's: python -m tools.pangu.compact_vocab or tools.wikitext103), or pass the right --data_dir)")
    if not os.path.isfile(path) and os.path.exists(os.path.join(data_dir, PREPARING)):
        # a prepare stopped halfway: its new token files beside an old meta.pkl were read with that vocabulary
        raise UserError(f"{data_dir} is being prepared, or its prepare was stopped halfway {fix}")
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
    """train.bin, val.bin and the vocabulary: meta.json, or nanoGPT's meta.pkl (its prepare.py's folders) unless a
    prepare of ours was stopped there before its meta.json (PREPARING)."""
    if os.path.exists(os.path.join(data_dir, PREPARING)) and not os.path.exists(os.path.join(data_dir, "meta.json")):
        return False
    return all(os.path.exists(os.path.join(data_dir, name)) for name in ("train.bin", "val.bin")) and \
        any(os.path.exists(os.path.join(data_dir, name)) for name in ("meta.json", "meta.pkl"))


def default_data_dir(config):
    """The dataset folder of a train.py config: data_dir, or data/<dataset>."""
    return config.get("data_dir") or os.path.join("data", config["dataset"])


def resolve_data_dir(ckpt, override=""):
    """The dataset folder for a checkpoint: --data_dir, else the one it recorded (a relative path is tried
    from the current directory, then from the repository root). A folder whose tokenizer is not the
    checkpoint's (another --data_dir, or the recorded one prepared again) is refused: its ids mean other text; so
    is one whose vocabulary is not the model's (check_vocabulary; for a checkpoint that records no tokenizer,
    nanoGPT's or an older one, tools.eval, pangu.refine and the exports read another char dataset's ids without a
    word)."""
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
            # a Hugging Face export records no dataset, and has no folder to fall back on
            dataset = f" (dataset {ckpt['dataset']})" if ckpt.get("dataset") else ""
            drop = ", or drop it" if ckpt.get("data_dir") else ""
            raise UserError(f"{data_dir} has another tokenizer than the one {source} was trained with{dataset} "
                            f"(fix: --data_dir=<a dataset of that tokenizer>{drop})")
        # the recorded folder was prepared again since, e.g. from another text: its ids now mean other text
        raise UserError(f"{data_dir}, the dataset {source} was trained on, has been prepared again with another "
                        f"tokenizer since (fix: prepare it again as it was for that run, or pass --data_dir=<a "
                        f"dataset with that run's tokenizer>)")
    check_vocabulary(load_meta(data_dir, ckpt), ckpt, data_dir)
    return data_dir


def tokenizer_id(meta):
    """A short hash of what maps ids to text (tokenizer kind, vocabulary, eot), recorded in checkpoints:
    two datasets with the same id decode the same ids to the same text."""
    keys = ("tokenizer", "vocab_size", "chars", "tokens", "eot_token")
    identity = json.dumps({k: meta.get(k) for k in keys}, sort_keys=True)
    return hashlib.sha256(identity.encode("utf-8")).hexdigest()[:16]


# --- the tokenizer of a dataset folder, and of a checkpoint's -----------------------------------

def load_tokenizer(data_dir, ckpt=None):
    """The tokenizer described by data_dir/meta.json (char, gpt2 or compact), with one-line errors; with a nanoGPT
    checkpoint, of its folders too (load_meta). A checkpoint's folder comes from resolve_data_dir, which checks its
    vocabulary against the model's (check_vocabulary)."""
    meta = load_meta(data_dir, ckpt)
    try:
        tok = tokenizer_from_meta(meta)
    except (KeyError, ValueError, TypeError) as e:
        if isinstance(e, UserError):
            raise
        raise UserError(f"cannot build the tokenizer of {data_dir}/meta.json: {one_line(e)} "
                        f"(fix: re-run prepare.py for that dataset, or pass --data_dir)") from None
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
    """vocab_size of a train.py config's dataset (what train.py will use), or None before it is prepared
    (is_prepared, as train.py asks it: a nanoGPT meta.pkl folder counted as not prepared here; a hunt)."""
    folder = default_data_dir(config)
    return load_meta(folder)["vocab_size"] if is_prepared(folder) else None


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
    n_train = split_tokens(data_dir, "train", vocab_size)
    n_val = split_tokens(data_dir, "val", vocab_size)
    shorter = "val" if n_val < n_train else "train"   # its --block_size fix then fits both (it led to the other's)
    split_tokens(data_dir, shorter, vocab_size, block_size)
    # a token file cut short to an even size trained without a word (a hunt): meta.json records each split's count
    recorded = load_meta(data_dir).get("splits") or {}
    for split, n in (("train", n_train), ("val", n_val)):
        tokens = (recorded.get(split) or {}).get("tokens")
        if isinstance(tokens, int) and tokens != n:
            raise UserError(f"{split_path(data_dir, split)} holds {n:,} tokens, but {data_dir}'s meta.json records "
                            f"{tokens:,}: cut short, or of another preparation (fix: re-run `python prepare.py` for "
                            f"this dataset, or pass the right --data_dir)")
    return load_segments(segments_path, n_train, block_size) if segments_path else None


def segments_info_path(path):
    """refine.json for refine.npy: what the window starts were made for (tools/pangu/refine.py writes it)."""
    return os.path.splitext(path)[0] + ".json"


def read_segments(path):
    """The window starts in a data_segments file: a non-empty 1-D integer .npy (before the data is known)."""
    try:
        starts = np.load(path)
    except (OSError, ValueError, EOFError, pickle.UnpicklingError) as e:   # EOFError: an empty file
        # numpy reads a file that is not a .npy as a pickle, refuses it, and advises loading it unsafely
        why = "it is not a .npy file" if "pickled" in str(e) else str(e)
        raise UserError(f"cannot read data_segments '{path}': {why} (fix: write it with `python -m tools.pangu.refine` "
                        f"first)") from None
    if starts.ndim != 1 or len(starts) == 0 or starts.dtype.kind not in "iu":
        raise UserError(f"data_segments '{path}' is not a non-empty 1-D integer array (fix: write it with "
                        f"`python -m tools.pangu.refine`)")
    return starts


def load_segments(path, n_tokens, block_size):
    """The window starts saved by refine (an int .npy), checked against the train split (and, when refine.json
    is beside it, against the length of the train split they were made for: another dataset's are refused)."""
    starts = read_segments(path)
    info = {}
    with contextlib.suppress(OSError, ValueError):
        with open(segments_info_path(path), encoding="utf-8") as f:
            info = json.load(f)
    if not isinstance(info, dict):
        info = {}
    # refine scores whole windows: segment i starts at i * (block_size + 1). Without refine.json, that is all
    # there is to check: a divisor's windows (block_size 10 for 32: 11 divides 33) would pass it
    made_for_block = info.get("block_size")
    if np.any(starts % (block_size + 1)) or made_for_block not in (None, block_size):
        made, train_with = "", "the block_size it was made for"
        if made_for_block is not None:
            made, train_with = f" ({made_for_block})", f"--block_size={made_for_block}"
        raise UserError(f"data_segments '{path}' was made for another block_size{made} than {block_size} (fix: "
                        f"refine again with a model of this block_size, or train with {train_with})")
    made_for = info.get("train_tokens")
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
    module imports no script). Says so first: a folder other than data/<dataset>, a --data_dir, in a note on stderr
    (a mistyped one was prepared and trained on: an exploration as a new user); its one-line errors name the
    dataset."""
    if os.path.normpath(data_dir) != os.path.join("data", dataset):
        print_to_stderr(f"note: --data_dir {data_dir} holds no prepared dataset: preparing '{dataset}' into it "
                        f"(fix: if that folder is mistyped, Ctrl-C and pass the right --data_dir)")
    else:
        print(f"dataset '{dataset}' is not prepared in {data_dir}: running prepare.prepare('{dataset}')", flush=True)
    try:
        prepare(dataset, out_dir=data_dir)
    except UserError as e:
        raise UserError(f"preparing dataset '{dataset}' failed: {e}") from None


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
    if itos is None and size is not None:   # nanoGPT's train.py reads only vocab_size; its fix did not apply (a hunt)
        raise UserError(f"{path} holds a vocab_size but no itos: token ids of a tokenizer of your own, which "
                        f"nanoGPT trains on but this repository cannot decode (fix: prepare the text here, python "
                        f"prepare.py --input=TEXT_FILE, char or --tokenizer=gpt2)")
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
