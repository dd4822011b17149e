"""
A prepared dataset folder (written by prepare.py or a tool): train.bin / val.bin (/ test.bin) hold flat uint16
token ids, meta.json describes the tokenizer (written last: its presence means the folder is complete).

Tokenizers, as meta.json describes them:
    char      CharTokenizer: one id per character of meta["chars"]
    gpt2      GPT-2 BPE (tiktoken; offline from GPT2_TIKTOKEN_FILE when set)
    compact   a subset of GPT-2's tokens (paper 003, 2.1, chosen by tools/pangu/compact_vocab.py), meta["tokens"]
What sample.py needs of it: the tokenizer (load_tokenizer), the prompt (read_start), its ids (encode_start) and
back to text (render). What prepare.py and the tools need: downloading an input (download), writing the folder
(begin_writing, write_bin, write_meta). train.py reads the token files itself (get_batch).
"""

import base64
import functools
import hashlib
import json
import os
import sys
import time

import numpy as np

from checkpoint import atomic_open, remove_stale_temp_files
from configurator import UserError


def split_path(data_dir, split):
    return os.path.join(data_dir, f"{split}.bin")


def load_meta(data_dir):
    """meta.json of a prepared dataset, with one-line errors for a missing or damaged file."""
    path = os.path.join(data_dir, "meta.json")
    fix = f"(fix: prepare it with `python prepare.py <dataset> --out_dir={data_dir}`, or pass the right --data_dir)"
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
    if not os.path.isabs(data_dir) and not os.path.isdir(data_dir):
        here = os.path.join(os.path.dirname(os.path.abspath(__file__)), data_dir)
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


# --- tokenizers ------------------------------------------------------------------------------------

# The GPT-2 pre-tokenization regex, as defined in OpenAI's gpt-2 encoder.py: English
# contractions, optionally space-prefixed runs of letters / digits / other symbols, and
# whitespace (a whitespace run keeps its last space for the following word).
GPT2_PAT_STR = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
GPT2_EOT = "<|endoftext|>"
GPT2_EOT_ID = 50256
GPT2_VOCAB_SIZE = 50257


def get_gpt2_encoding(ranks_path=None):
    """The GPT-2 tiktoken encoding, offline when a local ranks file is configured.

    ranks_path (or env GPT2_TIKTOKEN_FILE) names a gpt2.tiktoken file; from it we build the same
    encoding tiktoken ships as "gpt2". Without one we ask tiktoken, which downloads (or uses its cache).
    """
    import tiktoken   # here, not at the top: a char-level run never pays for it
    ranks_path = ranks_path or os.environ.get("GPT2_TIKTOKEN_FILE") or None
    if ranks_path is None:
        try:
            return tiktoken.get_encoding("gpt2")
        except Exception as e:  # tiktoken raises requests/OS/blobfile errors when offline
            raise UserError(f"could not load the GPT-2 BPE vocabulary ({one_line(e)}) "
                            "(fix: set GPT2_TIKTOKEN_FILE=PATH to a local gpt2.tiktoken ranks file: every script reads "
                            "it)") from None
    return _gpt2_encoding_from_file(os.path.abspath(ranks_path))


@functools.lru_cache(maxsize=4)
def _gpt2_encoding_from_file(path):
    import tiktoken
    import tiktoken.load
    if not os.path.isfile(path):
        raise UserError(f"GPT-2 ranks file not found: {path} "
                        "(fix: point GPT2_TIKTOKEN_FILE=PATH at a gpt2.tiktoken ranks file)")
    try:
        ranks = tiktoken.load.load_tiktoken_bpe(path)
    except Exception as e:
        raise UserError(f"could not read GPT-2 ranks file {path} ({one_line(e)}) "
                        "(fix: point GPT2_TIKTOKEN_FILE=PATH at a gpt2.tiktoken ranks file)") from None
    if len(ranks) != GPT2_EOT_ID:
        raise UserError(f"{path} has {len(ranks)} ranks, expected {GPT2_EOT_ID} for GPT-2 "
                        "(fix: point GPT2_TIKTOKEN_FILE=PATH at a gpt2.tiktoken ranks file)")
    return tiktoken.Encoding(name="gpt2", pat_str=GPT2_PAT_STR, mergeable_ranks=ranks,
                             special_tokens={GPT2_EOT: GPT2_EOT_ID})


def compact_encoding(tokens, name="gpt2_compact"):
    """A tiktoken encoding over a subset of GPT-2's byte tokens, ids 0..len(tokens) (eot last).

    `tokens` must be listed in GPT-2 rank order: BPE merges by rank, so re-ranking the subset
    0..n-1 while preserving the order keeps GPT-2's merge priorities. All 256 single bytes are in
    the subset, so any text encodes losslessly.
    """
    import tiktoken
    ranks = {tok: i for i, tok in enumerate(tokens)}
    return tiktoken.Encoding(name=f"{name}_{len(tokens) + 1}", pat_str=GPT2_PAT_STR,
                             mergeable_ranks=ranks, special_tokens={GPT2_EOT: len(tokens)})


class CharTokenizer:
    """Character-level tokenizer from a list of symbols (id = position in the list)."""

    def __init__(self, chars):
        self.chars = list(chars)
        self.stoi = {ch: i for i, ch in enumerate(self.chars)}
        self.vocab_size = len(self.chars)
        self.eot_token = None

    def encode(self, text):
        unknown = sorted(set(text) - self.stoi.keys())
        if unknown:
            raise ValueError(f"characters not in the vocabulary: {''.join(unknown)!r}")
        return [self.stoi[ch] for ch in text]

    def decode(self, ids):
        return "".join(self.chars[i] for i in ids)


class BPETokenizer:
    """A tiktoken encoding (GPT-2 or compact). '<|endoftext|>' in a prompt maps to the eot token."""

    def __init__(self, enc, vocab_size, eot_token):
        self.enc, self.vocab_size, self.eot_token = enc, vocab_size, eot_token

    def encode(self, text):
        return self.enc.encode(text, allowed_special={GPT2_EOT})

    def decode(self, ids):
        return self.enc.decode(list(ids))


def load_tokenizer(data_dir):
    """The tokenizer described by data_dir/meta.json (char, gpt2 or compact), with one-line errors."""
    meta = load_meta(data_dir)
    try:
        return tokenizer_from_meta(meta)
    except (KeyError, ValueError, TypeError) as e:
        if isinstance(e, UserError):
            raise
        raise UserError(f"cannot build the tokenizer of {data_dir}/meta.json: {one_line(e)} "
                        f"(fix: re-run prepare.py for that dataset, or pass --data_dir)") from None


def tokenizer_from_meta(meta):
    kind = meta.get("tokenizer")
    if kind == "char":
        return CharTokenizer(meta["chars"])
    if kind == "gpt2":
        return BPETokenizer(get_gpt2_encoding(), GPT2_VOCAB_SIZE, GPT2_EOT_ID)
    if kind == "compact":
        tokens = [base64.b64decode(t) for t in meta["tokens"]]
        return BPETokenizer(compact_encoding(tokens), meta["vocab_size"], meta["eot_token"])
    raise UserError(f"unknown tokenizer {kind!r} in meta.json (fix: re-run prepare.py; it writes char, gpt2 or compact)")


def read_start(start):
    """The prompt text of --start: the text itself, or the contents of the file named by FILE:path."""
    if start.startswith("FILE:"):
        path = start[len("FILE:"):]
        try:
            with open(path, encoding="utf-8") as f:
                return f.read()
        except (OSError, UnicodeDecodeError) as e:
            raise UserError(f"cannot read the start file '{path}': {e.strerror if isinstance(e, OSError) else e} "
                            f"(fix: --start=FILE:path must name a readable utf-8 text file)") from None
    return start


def encode_start(tok, text, dataset, vocab_size=None):
    """Token ids of the prompt; characters the (char-level) vocabulary lacks, or an id at or beyond the model's
    vocab_size (when given), are a one-line error."""
    known = getattr(tok, "stoi", None)
    if known is not None:
        unknown = sorted(set(text) - set(known))
        if unknown:
            listed = ", ".join(repr(ch) for ch in unknown)
            raise UserError(f"characters not in the vocabulary: {listed} "
                            f"(the model was trained on {dataset}) (fix: remove them from --start)")
    try:
        ids = tok.encode(text)
    except (ValueError, KeyError) as e:
        raise UserError(f"cannot encode --start: {e} (the model was trained on {dataset}) "
                        f"(fix: change --start)") from None
    if not ids:
        eot = getattr(tok, "eot_token", None)
        if eot is None:
            raise UserError("--start is empty (fix: give at least one character, e.g. --start=\"\\n\")")
        ids = [eot]  # an empty prompt means "start of a document" for BPE datasets
    if vocab_size is not None and max(ids) >= vocab_size:
        raise UserError(f"the prompt encodes to token id {max(ids)}, beyond the model's vocabulary of "
                        f"{vocab_size} (fix: use the tokenizer the model was trained with)")
    return ids


def render(tok, start_text, start_ids, ids):
    """The sample as text, beginning with the start text exactly as given. Decoding all ids at once
    keeps multi-byte characters that straddle the prompt boundary whole (BPE); the decoded prompt is
    then swapped for the user's text (they differ only for an empty BPE prompt, which became eot)."""
    prompt = tok.decode(start_ids)
    text = tok.decode(ids)
    if text.startswith(prompt):
        return start_text + text[len(prompt):]
    return start_text + tok.decode(ids[len(start_ids):])


def one_line(err):
    """A short single-line description of an exception, for one-line error messages."""
    text = " ".join(str(err).split()) or type(err).__name__
    return text if len(text) <= 200 else text[:197] + "..."


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

    Writes to dest + '.part' and renames at the end, so an interrupted download never leaves a
    truncated file that would later pass for a complete one. Raises OSError/ValueError on failure.
    """
    import http.client   # here, not at the top: sample.py and train.py never download
    import urllib.request
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
