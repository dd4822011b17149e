"""
Dataset preparation.

    python prepare.py shakespeare_char             # chars, 65-symbol vocabulary
    python prepare.py shakespeare                  # GPT-2 BPE
    python prepare.py shakespeare --vocab_size 8192   # compact GPT-2 BPE -> data/shakespeare_v8192/
    python prepare.py wikitext103 [--source wikitext-103-raw-v1.zip]
    python prepare.py bench_tokenize [--mb 32]     # tokenization throughput, 1 worker vs all

Every dataset is written to data/<dataset>/ (or --out_dir) as train.bin / val.bin (/ test.bin):
flat uint16 token ids that np.memmap(path, dtype=np.uint16, mode="r") reads, plus meta.json that
describes the tokenizer. meta.json is written last, so its presence means the folder is complete.

Offline use: SHAKESPEARE_INPUT (or --input) names a local tinyshakespeare input.txt,
GPT2_TIKTOKEN_FILE (or --gpt2_ranks) a local gpt2.tiktoken ranks file, --source (or
WIKITEXT103_SOURCE) a local wikitext-103-raw-v1.zip or its extracted folder.

Library use: prepare(dataset, **opts) -> out_dir. The tokenizers meta.json describes are read back by
runfiles/tokenizer.py (load_tokenizer(data_dir)); the compact vocabulary is chosen by pangu/compact_vocab.py.
"""
import argparse
import base64
import hashlib
import http.client
import json
import os
import re
import sys
import time
import urllib.request
import zipfile
from multiprocessing import Pool

import numpy as np

from configurator import ArgumentParser, UserError
from pangu.compact_vocab import build_compact
from runfiles.checkpoint import atomic_open, check_out_dir, remove_stale_temp_files
from runfiles.tokenizer import (GPT2_EOT_ID, GPT2_VOCAB_SIZE, CharTokenizer, compact_encoding, get_gpt2_encoding,
                                one_line)

SHAKESPEARE_URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
SHAKESPEARE_BYTES = 1115394

# WikiText-103 (raw, v1, Merity et al.), tried in order. The original Salesforce S3 bucket is
# the canonical home; the size and sha256 are those published for this archive with the Hugging
# Face `wikitext` dataset, so a mirror serving anything else is rejected and the next one tried.
WIKITEXT103_URLS = [
    "https://wikitext.smerity.com/wikitext-103-raw-v1.zip",
    "https://s3.amazonaws.com/research.metamind.io/wikitext/wikitext-103-raw-v1.zip",
]
WIKITEXT103_BYTES = 191984949
WIKITEXT103_SHA256 = "91c00ae287f0d699e18605c84afc9e45c192bc6b7797ff8837e5474655a33794"
WIKITEXT103_DIR = "wikitext-103-raw"
WIKITEXT103_SPLITS = {"train": "wiki.train.raw", "val": "wiki.valid.raw", "test": "wiki.test.raw"}

BASE_DATASETS = ("shakespeare_char", "shakespeare", "wikitext103")
COMPACT_BASES = ("shakespeare", "wikitext103")  # datasets that support --vocab_size


# -----------------------------------------------------------------------------
# small utilities

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


DATA_FILES = ("train.bin", "val.bin", "test.bin", "meta.json", "coverage.png")


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
# parallel tokenization of articles (WikiText-103 and the benchmark)
#
# Work is shipped to a multiprocessing Pool as groups of whole articles (~1 MB each); each worker
# builds its own tiktoken encoding once (Encoding objects are not cheap to pickle) from a small
# picklable "spec". Chunks come back in order, so the output is identical for any worker count.

_worker_enc = None


def encoding_spec(tokens=None, ranks_path=None):
    """A picklable description of an encoding: GPT-2 (by ranks file) or compact (its byte tokens)."""
    if tokens is None:
        return {"kind": "gpt2", "ranks_path": ranks_path or os.environ.get("GPT2_TIKTOKEN_FILE") or None}
    return {"kind": "compact", "tokens": list(tokens)}


def encoding_from_spec(spec):
    if spec["kind"] == "gpt2":
        return get_gpt2_encoding(spec["ranks_path"])
    return compact_encoding(spec["tokens"])


def _init_worker(spec):
    global _worker_enc
    _worker_enc = encoding_from_spec(spec)


def _encode_articles(args):
    """Worker: tokenize a group of articles (utf-8 bytes), eot between them; count words/bytes."""
    articles, eot = args
    ids, words, nbytes = [], 0, 0
    for i, raw in enumerate(articles):
        text = raw.decode("utf-8")
        if i:
            ids.append(eot)
        ids.extend(_worker_enc.encode_ordinary(text))
        words += len(text.split())
        nbytes += len(raw)
    return np.array(ids, dtype=np.uint16), words, nbytes


GROUP_BYTES = 1 << 20  # ~1 MB of text per task: small enough for a smooth progress line and
                      # load balance, large enough that pickling/IPC overhead stays negligible


def group_articles(articles, target_bytes=None):
    """Consecutive groups of whole articles, about target_bytes each (the parallel work units)."""
    target_bytes = target_bytes or GROUP_BYTES
    group, size = [], 0
    for art in articles:
        group.append(art)
        size += len(art)
        if size >= target_bytes:
            yield group
            group, size = [], 0
    if group:
        yield group


def iter_tokenized(articles, spec, eot, num_proc=None, label="tokenizing"):
    """Yield (uint16 ids, words, bytes) per article group, in order; eot goes between articles
    inside a group, the caller puts one between consecutive groups."""
    num_proc = num_proc or os.cpu_count() or 1
    bar = Progress(label, sum(len(a) for a in articles))
    with Pool(num_proc, initializer=_init_worker, initargs=(spec,)) as pool:
        jobs = ((group, eot) for group in group_articles(articles))
        try:
            for ids, words, nbytes in pool.imap(_encode_articles, jobs):
                bar.update(nbytes)
                yield ids, words, nbytes
        except UnicodeDecodeError as e:   # a worker's, raised again here: one line, not its traceback
            raise UserError(f"{label}: the text is not UTF-8 ({e.reason} in an article) (fix: pass UTF-8 text)") \
                from None
    bar.close()


def tokenize_to_file(path, articles, spec, eot, num_proc=None, label="tokenizing", vocab_size=None):
    """Tokenize articles in parallel, streaming uint16 ids to path (eot between articles).

    Returns {"tokens", "words", "bytes", "articles"} and, when vocab_size is given, per-token
    counts (eot separators included). With path=None nothing is written (counting only).
    """
    stats = {"tokens": 0, "words": 0, "bytes": 0, "articles": len(articles)}
    counts = np.zeros(vocab_size, dtype=np.int64) if vocab_size else None
    sep = np.array([eot], dtype=np.uint16)
    with (atomic_open(path, "wb") if path else open(os.devnull, "wb")) as f:
        for i, (ids, words, nbytes) in enumerate(iter_tokenized(articles, spec, eot, num_proc, label)):
            if i:
                f.write(sep.tobytes())
                stats["tokens"] += 1
            f.write(ids.tobytes())
            stats["tokens"] += len(ids)
            stats["words"] += words
            stats["bytes"] += nbytes
            if counts is not None:
                counts += np.bincount(ids, minlength=vocab_size)
    return stats, counts


# -----------------------------------------------------------------------------
# tinyshakespeare

def shakespeare_text(out_dir, input_path=None):
    """The tinyshakespeare text: --input, $SHAKESPEARE_INPUT, a local copy, else a download."""
    candidates = [input_path, os.environ.get("SHAKESPEARE_INPUT"),
                  os.path.join(out_dir, "input.txt"),
                  os.path.join(os.path.dirname(os.path.abspath(out_dir)), "shakespeare_char", "input.txt")]
    explicit = [p for p in candidates[:2] if p]
    if explicit and not os.path.isfile(explicit[0]):
        raise UserError(f"tinyshakespeare input not found: {explicit[0]} (fix: check --input / SHAKESPEARE_INPUT)")
    path = next((p for p in candidates if p and os.path.isfile(p)), None)
    if path is None:
        path = os.path.join(out_dir, "input.txt")
        try:
            download(SHAKESPEARE_URL, path, expected_size=SHAKESPEARE_BYTES)
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


def prepare_shakespeare_char(out_dir, input_path=None, **_):
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


def prepare_shakespeare(out_dir, input_path=None, gpt2_ranks=None, vocab_size=None,
                        n_layer=12, n_embd=768, plot=True, dataset="shakespeare", **_):
    text = shakespeare_text(out_dir, input_path)
    train, val = split_90_10(text)
    gpt2 = get_gpt2_encoding(gpt2_ranks)
    meta = {"dataset": dataset, "tokenizer": "gpt2", "vocab_size": GPT2_VOCAB_SIZE, "eot_token": GPT2_EOT_ID}
    enc, extra = gpt2, {}
    begin_writing(out_dir)
    if vocab_size:
        counts = np.bincount(gpt2.encode_ordinary(train), minlength=GPT2_VOCAB_SIZE)
        plot_path = os.path.join(out_dir, "coverage.png") if plot else None
        enc, meta_c, extra = build_compact(counts, vocab_size, gpt2_ranks, n_layer, n_embd, plot_path)
        meta.update(meta_c)
    train_ids, val_ids = enc.encode_ordinary(train), enc.encode_ordinary(val)
    write_bin(os.path.join(out_dir, "train.bin"), train_ids)
    write_bin(os.path.join(out_dir, "val.bin"), val_ids)
    print(f"train has {len(train_ids):,} tokens, val has {len(val_ids):,} tokens (vocab {meta['vocab_size']})")
    meta["splits"] = {"train": {"tokens": len(train_ids)}, "val": {"tokens": len(val_ids)}}
    meta.update(extra)
    write_meta(out_dir, meta)


# -----------------------------------------------------------------------------
# WikiText-103

# A level-1 heading line " = Title = " starts an article; " = = Section = = " does not.
TITLE_RE = re.compile(rb"^ = [^=\n](?:[^\n]*[^=\n])? = $", re.MULTILINE)


def split_articles(raw):
    """Split raw WikiText bytes into articles at level-1 heading lines.

    In WikiText every heading is preceded by a blank line (" \n"); that line goes with the article
    it introduces, so all articles look alike (" \n = Title = \n ..."). Text before the second
    heading belongs to the first article; the articles concatenate back to the exact input.
    """
    starts = []
    for m in TITLE_RE.finditer(raw):
        start = m.start()
        prev = raw.rfind(b"\n", 0, start - 1) + 1  # start of the previous line
        if start > 0 and not raw[prev:start].strip():
            start = prev
        starts.append(start)
    bounds = [0] + [s for s in starts[1:] if s > 0] + [len(raw)]
    return [raw[a:b] for a, b in zip(bounds[:-1], bounds[1:]) if b > a]


def wikitext_reader(source):
    """Return read(split_filename) -> bytes for a .zip archive or an extracted folder."""
    how_to = "(fix: --source must be wikitext-103-raw-v1.zip or a folder containing wikitext-103-raw/wiki.*.raw)"
    if os.path.isdir(source):
        folder = source if os.path.isfile(os.path.join(source, "wiki.train.raw")) else os.path.join(source, WIKITEXT103_DIR)
        missing = [n for n in WIKITEXT103_SPLITS.values() if not os.path.isfile(os.path.join(folder, n))]
        if missing:
            raise UserError(f"{source} lacks {WIKITEXT103_DIR}/{missing[0]} {how_to}")

        def read(name):
            with open(os.path.join(folder, name), "rb") as f:
                return f.read()
        return read
    if not os.path.isfile(source):
        raise UserError(f"WikiText-103 source not found: {source} {how_to}")
    try:
        zf = zipfile.ZipFile(source)
        names = set(zf.namelist())
    except (zipfile.BadZipFile, OSError) as e:
        raise UserError(f"{source} is not a valid zip archive ({one_line(e)}) {how_to}") from None
    missing = [n for n in WIKITEXT103_SPLITS.values() if f"{WIKITEXT103_DIR}/{n}" not in names]
    if missing:
        raise UserError(f"{source} lacks {WIKITEXT103_DIR}/{missing[0]} {how_to}")

    def read(name):
        try:
            return zf.read(f"{WIKITEXT103_DIR}/{name}")
        except (zipfile.BadZipFile, OSError, EOFError) as e:  # CRC errors, truncated archives
            raise UserError(f"{source} is damaged ({one_line(e)}) {how_to}") from None
    return read


def wikitext_source(out_dir, source=None):
    """--source, $WIKITEXT103_SOURCE, a previous download in out_dir, else download from mirrors."""
    source = source or os.environ.get("WIKITEXT103_SOURCE")
    if source:
        return source
    path = os.path.join(out_dir, "wikitext-103-raw-v1.zip")
    if os.path.isfile(path):
        return path
    reasons = []
    for url in WIKITEXT103_URLS:
        try:
            return download(url, path, WIKITEXT103_BYTES, WIKITEXT103_SHA256)
        except (OSError, ValueError) as e:
            reasons.append(f"{url.split('/')[2]}: {one_line(e)}")
    raise UserError(f"could not download WikiText-103 ({'; '.join(reasons)}); pass a local "
                    "wikitext-103-raw-v1.zip or its extracted folder with --source PATH") from None


def check_utf8(splits, source):
    """UserError unless every article is UTF-8 text: the workers decode them after begin_writing, and a failure
    there would leave the folder without meta.json. Article by article: one str of a whole split could take
    gigabytes."""
    for split, articles in splits.items():
        offset = 0
        for article in articles:
            try:
                article.decode("utf-8")
            except UnicodeDecodeError as e:
                raise UserError(f"{source}: the {split} split is not UTF-8 text ({e.reason} at byte "
                                f"{offset + e.start:,}) (fix: pass the original wikitext-103-raw-v1.zip, or "
                                f"re-download it)") from None
            offset += len(article)


def prepare_wikitext103(out_dir, source=None, gpt2_ranks=None, vocab_size=None, num_proc=None,
                        n_layer=12, n_embd=768, plot=True, dataset="wikitext103", **_):
    source = wikitext_source(out_dir, source)
    read = wikitext_reader(source)
    splits = {split: split_articles(read(name)) for split, name in WIKITEXT103_SPLITS.items()}
    check_utf8(splits, source)
    get_gpt2_encoding(gpt2_ranks)  # fail early (and download once) before starting workers
    spec, eot = encoding_spec(ranks_path=gpt2_ranks), GPT2_EOT_ID
    meta = {"dataset": dataset, "tokenizer": "gpt2", "vocab_size": GPT2_VOCAB_SIZE, "eot_token": GPT2_EOT_ID}
    extra = {}
    begin_writing(out_dir)
    if vocab_size:
        # the compact vocabulary is chosen by GPT-2 token frequency in the training split
        _, counts = tokenize_to_file(None, splits["train"], spec, eot, num_proc,
                                     "counting gpt2 tokens (train)", GPT2_VOCAB_SIZE)
        counts[GPT2_EOT_ID] = 0  # separators are not corpus tokens
        plot_path = os.path.join(out_dir, "coverage.png") if plot else None
        _, meta_c, extra = build_compact(counts, vocab_size, gpt2_ranks, n_layer, n_embd, plot_path)
        meta.update(meta_c)
        spec, eot = encoding_spec([base64.b64decode(t) for t in meta_c["tokens"]]), meta_c["eot_token"]
    meta["splits"] = {}
    for split, articles in splits.items():
        stats, _ = tokenize_to_file(os.path.join(out_dir, f"{split}.bin"), articles, spec, eot,
                                    num_proc, f"tokenizing {split}")
        meta["splits"][split] = stats
        print(f"{split}: {stats['articles']:,} articles, {stats['tokens']:,} tokens, "
              f"{stats['words']:,} words, {stats['bytes']:,} bytes")
    meta["word_count"] = "whitespace-separated words of the raw text (str.split), for per-word perplexity"
    meta.update(extra)
    write_meta(out_dir, meta)


# -----------------------------------------------------------------------------
# tokenization throughput benchmark

def bench_corpus(mb, input_path=None):
    """About `mb` MB of text as ~100 KB articles: tinyshakespeare repeated when available,
    else deterministic pseudo-random words."""
    path = input_path or os.environ.get("SHAKESPEARE_INPUT") or os.path.join("data", "shakespeare_char", "input.txt")
    if os.path.isfile(path):
        with open(path, "rb") as f:
            text, source = f.read(), path
    else:
        rng = np.random.default_rng(0)
        words = [bytes(rng.integers(97, 123, size=rng.integers(1, 10)).astype(np.uint8)) for _ in range(5000)]
        text = b" ".join(words[i] for i in rng.integers(0, len(words), size=200_000)) + b"\n"
        source = "generated words"
    text = text * (int(mb * 1e6) // len(text) + 1)
    text = text[:int(mb * 1e6)]
    text = text[:text.rfind(b"\n") + 1]
    # cut into ~100 KB articles at line boundaries (keeps utf-8 characters whole)
    arts, start = [], 0
    while start < len(text):
        end = text.find(b"\n", start + 100_000)
        end = len(text) if end < 0 else end + 1
        arts.append(text[start:end])
        start = end
    return arts, source


def bench_tokenize(mb=32, input_path=None, gpt2_ranks=None, num_proc=None):
    """Tokenize ~mb MB through the WikiText parallel path with 1 worker and with all workers."""
    if not mb > 0:
        raise UserError(f"--mb must be > 0, got {mb} (fix: --mb=32)")
    check_positive(num_proc=num_proc)
    articles, source = bench_corpus(mb, input_path)
    get_gpt2_encoding(gpt2_ranks)
    spec = encoding_spec(ranks_path=gpt2_ranks)
    nbytes = sum(len(a) for a in articles)
    print(f"corpus: {nbytes / 1e6:.1f} MB ({source}), {len(articles)} articles, GPT-2 encode_ordinary")
    results = {}
    for workers in sorted({1, num_proc or os.cpu_count() or 1}):
        t0 = time.time()
        ntok = sum(len(ids) for ids, _, _ in iter_tokenized(articles, spec, GPT2_EOT_ID, workers, f"{workers} worker(s)"))
        dt = time.time() - t0
        results[workers] = nbytes / 1e6 / dt
        print(f"workers={workers:3d}: {nbytes / 1e6 / dt:7.2f} MB/s, {ntok / dt / 1e6:6.2f} M tokens/s ({dt:.2f} s, {ntok:,} tokens)")
    return results


# -----------------------------------------------------------------------------
# entry points

def parse_dataset(name):
    """'shakespeare' -> ('shakespeare', None); 'shakespeare_v8192' -> ('shakespeare', 8192)."""
    m = re.fullmatch(r"(shakespeare|wikitext103)_v(\d+)", name)
    if m:
        return m.group(1), int(m.group(2))
    if name not in BASE_DATASETS:
        raise UserError(f"unknown dataset {name!r} (fix: one of {', '.join(BASE_DATASETS)}, "
                        "or shakespeare_vK / wikitext103_vK for a compact K-token vocabulary)")
    return name, None


def check_positive(**values):
    """UserError for an option given as 0 or less (None = not given)."""
    for key, value in values.items():
        if value is not None and value < 1:
            raise UserError(f"--{key} must be >= 1, got {value} (fix: a positive number, or leave it out)")


def prepare(dataset, out_dir=None, vocab_size=None, **opts):
    """Prepare `dataset` into out_dir (default data/<dataset>, or data/<dataset>_v<K> with a
    compact vocab_size K). Options: input_path, source, gpt2_ranks, num_proc, n_layer, n_embd, plot.
    Returns out_dir."""
    base, k = parse_dataset(dataset)
    vocab_size = k if vocab_size is None else vocab_size
    if vocab_size is not None and base not in COMPACT_BASES:
        raise UserError(f"--vocab_size works with {' and '.join(COMPACT_BASES)}, not {base} "
                        f"(fix: drop --vocab_size, or use --dataset=shakespeare)")
    if vocab_size is not None and not 257 <= vocab_size <= GPT2_VOCAB_SIZE:
        raise UserError(f"vocab_size must be in [257, {GPT2_VOCAB_SIZE}] (256 bytes + eot at least), got "
                        f"{vocab_size} (fix: --vocab_size=8192, or leave it out for the full GPT-2 vocabulary)")
    check_positive(**{k: opts.get(k) for k in ("n_layer", "n_embd", "num_proc")})
    name = f"{base}_v{vocab_size}" if vocab_size else base
    out_dir = out_dir or os.path.join("data", name)
    check_out_dir(out_dir)   # a file, or not writable: one line now, not a traceback later
    fn = {"shakespeare_char": prepare_shakespeare_char, "shakespeare": prepare_shakespeare,
          "wikitext103": prepare_wikitext103}[base]
    fn(out_dir, vocab_size=vocab_size, dataset=name, **opts)
    print(f"wrote {out_dir}")
    return out_dir


def main(argv=None):
    p = ArgumentParser(prog="python prepare.py", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dataset", help="shakespeare_char | shakespeare | wikitext103 | bench_tokenize "
                                   "(shakespeare_vK / wikitext103_vK = --vocab_size K)")
    p.add_argument("--out_dir", help="output folder (default data/<dataset>, data/<dataset>_v<K> with --vocab_size)")
    p.add_argument("--input", dest="input_path", help="local tinyshakespeare input.txt (env SHAKESPEARE_INPUT)")
    p.add_argument("--source", help="local wikitext-103-raw-v1.zip or extracted folder (env WIKITEXT103_SOURCE)")
    p.add_argument("--gpt2_ranks", help="local gpt2.tiktoken ranks file (env GPT2_TIKTOKEN_FILE)")
    p.add_argument("--vocab_size", type=int, help="compact tokenizer: keep K GPT-2 tokens (incl. 256 bytes + eot)")
    p.add_argument("--n_layer", type=int, default=12, help="model depth for the PEHL report")
    p.add_argument("--n_embd", type=int, default=768, help="model width for the PEHL report")
    p.add_argument("--no_plot", dest="plot", action="store_false", help="do not save coverage.png")
    p.add_argument("--num_proc", type=int, help="tokenizer worker processes (default: all CPUs)")
    p.add_argument("--mb", type=float, default=32, help="bench_tokenize: corpus size in MB")
    args = vars(p.parse_args(argv))
    dataset, mb = args.pop("dataset"), args.pop("mb")
    try:
        if dataset == "bench_tokenize":
            bench_tokenize(mb, args["input_path"], args["gpt2_ranks"], args["num_proc"])
        else:
            prepare(dataset, **args)
    except UserError as e:
        raise SystemExit(f"error: {e}") from None


if __name__ == "__main__":
    main()
