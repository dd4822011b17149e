"""
Dataset preparation.

    python prepare.py shakespeare_char             # chars, 65-symbol vocabulary
    python prepare.py shakespeare                  # GPT-2 BPE
    python prepare.py shakespeare --vocab_size 8192   # compact GPT-2 BPE -> data/shakespeare_v8192/
    python prepare.py wikitext103 [--source wikitext-103-raw-v1.zip]

Every dataset is written to data/<dataset>/ (or --out_dir) as train.bin / val.bin (/ test.bin):
flat uint16 token ids that np.memmap(path, dtype=np.uint16, mode="r") reads, plus meta.json that
describes the tokenizer. meta.json is written last, so its presence means the folder is complete.

Offline use: SHAKESPEARE_INPUT (or --input) names a local tinyshakespeare input.txt,
GPT2_TIKTOKEN_FILE (or --gpt2_ranks) a local gpt2.tiktoken ranks file, --source (or
WIKITEXT103_SOURCE) a local wikitext-103-raw-v1.zip or its extracted folder.

Library use: prepare(dataset, **opts) -> out_dir. The tokenizers meta.json describes are read back by
dataset.py (load_tokenizer(data_dir)); the compact vocabulary of paper 003 is chosen here (build_compact).
Tokenization throughput: python -m tools.bench_tokenize.
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

from checkpoint import atomic_open, check_out_dir, remove_stale_temp_files
from configurator import ArgumentParser, UserError
from dataset import (GPT2_EOT_ID, GPT2_PAT_STR, GPT2_VOCAB_SIZE, CharTokenizer, compact_encoding, get_gpt2_encoding,
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
# paper 003 (PanGu-pi Pro) 2.1: a compact tokenizer. Keep the K GPT-2 tokens most frequent in the training
# split (plus the 256 single bytes, every kept token's merge parents, and eot), so the embedding and head
# shrink while any text still encodes; report the coverage of the top-k tokens (Fig. 2) and PEHL, the share
# of parameters in embedding + head.

def gpt2_ranks(enc):
    """bytes -> rank for the mergeable GPT-2 tokens (rank == token id for GPT-2)."""
    return {enc.decode_single_token_bytes(i): i for i in range(GPT2_EOT_ID)}


def bpe_parts(token, ranks, max_rank):
    """Run byte-pair merging on `token`'s bytes using only merges of rank < max_rank.

    This is tiktoken's merge order (always merge the adjacent pair whose concatenation has the
    lowest rank). Run with max_rank = rank(token) it stops one merge short of the token, i.e. it
    returns the token's two merge parents.
    """
    parts = [token[i:i + 1] for i in range(len(token))]
    while len(parts) > 1:
        best_rank, best_i = None, None
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and r < max_rank and (best_rank is None or r < best_rank):
                best_rank, best_i = r, i
        if best_i is None:
            break
        parts[best_i:best_i + 2] = [parts[best_i] + parts[best_i + 1]]
    return parts


def merge_parents(token, ranks):
    """The two lower-ranked tokens whose merge produces `token` (empty for a single byte)."""
    if len(token) == 1:
        return ()
    rank = ranks[token]
    parts = bpe_parts(token, ranks, rank)
    if len(parts) == 2:
        return tuple(parts)
    # Not reachable by BPE (never happens for GPT-2): any split into two lower-ranked tokens.
    for i in range(1, len(token)):
        if ranks.get(token[:i], rank) < rank and ranks.get(token[i:], rank) < rank:
            return token[:i], token[i:]
    raise ValueError(f"token {token!r} has no merge parents in the vocabulary")


def select_compact_tokens(counts, ranks, vocab_size):
    """Choose vocab_size-1 GPT-2 tokens (eot is added on top) by training-set frequency.

    Always keeps the 256 single bytes (lossless encoding) and every kept token's merge parents,
    recursively (so BPE over the subset can still build each kept token). Tokens are visited by
    decreasing count, ties (and never-seen tokens, used to fill) by rank; a token is kept when it
    fits together with its missing ancestors. Filling always succeeds: the lowest-ranked token not
    yet kept has both parents kept. Returns the kept tokens as bytes, in GPT-2 rank order.
    """
    if not 257 <= vocab_size <= GPT2_VOCAB_SIZE:
        raise ValueError(f"vocab_size must be in [257, {GPT2_VOCAB_SIZE}] "
                         f"(256 byte tokens + <|endoftext|>), got {vocab_size}")
    by_rank = sorted(ranks, key=ranks.get)
    kept = {tok for tok in by_rank if len(tok) == 1}
    budget = vocab_size - 1
    counts = np.asarray(counts)[:GPT2_EOT_ID]
    for tid in np.argsort(-counts, kind="stable"):
        if len(kept) >= budget:
            break
        missing = _missing_ancestors(by_rank[tid], ranks, kept)
        if len(kept) + len(missing) <= budget:
            kept.update(missing)
    assert len(kept) == budget
    return sorted(kept, key=ranks.get)


def _missing_ancestors(token, ranks, kept):
    """`token` plus all of its merge ancestors that are not in `kept`."""
    missing, stack = set(), [token]
    while stack:
        tok = stack.pop()
        if tok not in kept and tok not in missing:
            missing.add(tok)
            stack.extend(merge_parents(tok, ranks))
    return missing


def coverage_table(counts, ks):
    """[(k, fraction of all tokens covered by the k most frequent token types)] (paper's Fig. 2)."""
    counts = np.sort(np.asarray(counts, dtype=np.int64))[::-1]
    cum = np.cumsum(counts) / max(counts.sum(), 1)
    return [(k, float(cum[min(k, len(cum)) - 1])) for k in ks]


def pehl(vocab_size, n_layer, n_embd):
    """Proportion of parameters in embedding + head: 2*V*d / (2*V*d + 12*L*d^2).

    Untied input embedding and LM head (V*d each); each transformer block counted as 12*d^2
    (attention 4*d^2 + MLP with 4x expansion 8*d^2), ignoring biases, norms and positions.
    """
    vocab_params = 2 * vocab_size * n_embd
    return vocab_params / (vocab_params + 12 * n_layer * n_embd ** 2)


PEHL_FORMULA = "PEHL = 2*V*d / (2*V*d + 12*n_layer*d^2)  (untied embedding+head; block = 4d^2 attn + 8d^2 MLP)"


def compact_report(counts, kept_ids, vocab_size, n_layer, n_embd, plot_path=None):
    """Print coverage of the top-k GPT-2 tokens and PEHL; optionally plot the coverage curve.

    Returns a dict that goes into meta.json.
    """
    seen = int((np.asarray(counts) > 0).sum())
    ks = sorted({k for k in (256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 48000, GPT2_VOCAB_SIZE, vocab_size)})
    table = coverage_table(counts, ks)
    kept_cov = float(np.asarray(counts)[kept_ids].sum() / max(np.sum(counts), 1))
    print(f"GPT-2 tokens in the training split: {int(np.sum(counts)):,} ({seen:,} distinct types)")
    print(f"{'top-k':>8} {'coverage':>9} {'PEHL':>7}")
    for k, cov in table:
        print(f"{k:>8} {100 * cov:8.2f}% {100 * pehl(k, n_layer, n_embd):6.2f}%")
    print(f"compact vocab ({vocab_size} tokens incl. bytes, merge parents and eot) covers "
          f"{100 * kept_cov:.2f}% of the GPT-2 tokens")
    print(f"{PEHL_FORMULA}, n_layer={n_layer}, d={n_embd}: "
          f"V={GPT2_VOCAB_SIZE}: {100 * pehl(GPT2_VOCAB_SIZE, n_layer, n_embd):.2f}%, "
          f"V={vocab_size}: {100 * pehl(vocab_size, n_layer, n_embd):.2f}%")
    if plot_path:
        plot_coverage(counts, vocab_size, plot_path)
    return {"coverage_topk": {str(k): cov for k, cov in table}, "kept_coverage": kept_cov,
            "pehl": {"formula": PEHL_FORMULA, "n_layer": n_layer, "n_embd": n_embd,
                     "gpt2": pehl(GPT2_VOCAB_SIZE, n_layer, n_embd),
                     "compact": pehl(vocab_size, n_layer, n_embd)}}


def plot_coverage(counts, vocab_size, path):
    """Save the accumulative frequency of the top-k vocabulary (paper's Figure 2) as a PNG."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    counts = np.sort(np.asarray(counts, dtype=np.int64))[::-1]
    cum = 100 * np.cumsum(counts) / max(counts.sum(), 1)
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(np.arange(1, len(cum) + 1), cum)
    ax.axvline(vocab_size, color="gray", ls="--", label=f"k={vocab_size}: {cum[vocab_size - 1]:.2f}%")
    ax.set_xscale("log")
    ax.set_xlabel("top-k GPT-2 tokens")
    ax.set_ylabel("accumulated frequency (%)")
    ax.legend()
    fig.tight_layout()
    with atomic_open(path, "wb") as f:   # a full disk or read-only folder: one-line error, no half file
        fig.savefig(f, format="png", dpi=120)
    plt.close(fig)
    print(f"saved {path}")


def build_compact(counts, vocab_size, ranks_path=None, n_layer=12, n_embd=768, plot_path=None):
    """From GPT-2 token counts of a training split: (compact encoding, meta fields, report)."""
    base = get_gpt2_encoding(ranks_path)
    ranks = gpt2_ranks(base)
    tokens = select_compact_tokens(counts, ranks, vocab_size)
    kept_ids = [ranks[t] for t in tokens]
    report = compact_report(counts, kept_ids, vocab_size, n_layer, n_embd, plot_path)
    meta = {"tokenizer": "compact", "vocab_size": vocab_size, "eot_token": vocab_size - 1,
            "base_tokenizer": "gpt2", "pat_str": GPT2_PAT_STR,
            "tokens": [base64.b64encode(t).decode("ascii") for t in tokens],
            "gpt2_ids": kept_ids}
    return compact_encoding(tokens), meta, report


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


def check_num_proc(num_proc):
    """UserError for --num_proc beyond the machine's CPUs (None = not given): more workers cannot go faster, and a
    huge count would fork processes until the machine has none left."""
    cpus = os.cpu_count() or 1
    check_positive(num_proc=num_proc)
    if num_proc is not None and num_proc > cpus:
        raise UserError(f"--num_proc={num_proc} is more than this machine's {cpus} CPUs (fix: --num_proc={cpus}, "
                        f"or leave it out to use them all)")


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
    check_positive(**{k: opts.get(k) for k in ("n_layer", "n_embd")})
    check_num_proc(opts.get("num_proc"))
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
    p.add_argument("dataset", help="shakespeare_char | shakespeare | wikitext103 "
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
    args = vars(p.parse_args(argv))
    dataset = args.pop("dataset")
    try:
        prepare(dataset, **args)
    except UserError as e:
        raise SystemExit(f"error: {e}") from None


if __name__ == "__main__":
    main()
