"""
WikiText-103 (raw, Merity et al.): Wikipedia articles, GPT-2 BPE tokens (or a compact vocabulary, paper 003 2.1).

    python -m tools.wikitext103                                      # -> data/wikitext103/ (~10 min on 16 cores)
    python -m tools.wikitext103 --source wikitext-103-raw-v1.zip     # a local copy of the archive
    python -m tools.wikitext103 --vocab_size 8192                    # compact vocabulary -> data/wikitext103_v8192/

Writes train.bin, val.bin and test.bin (uint16 token ids, <|endoftext|> between articles) and meta.json, as
prepare.py does for its datasets; meta.json also counts each split's articles, words and bytes (per-word
perplexity). The text comes from --source (or WIKITEXT103_SOURCE: wikitext-103-raw-v1.zip or its extracted
folder), else a previous download in the output folder, else a download (checked by size and sha256).
--gpt2_ranks (GPT2_TIKTOKEN_FILE): a local gpt2.tiktoken. --num_proc: tokenizer worker processes (default: all
CPUs). --vocab_size K: the K GPT-2 tokens most frequent in the training split (tools/pangu/compact_vocab.py),
with its coverage / PEHL report for --n_layer / --n_embd and coverage.png (--no_plot: none). An --out_dir that
holds another dataset (prepare.py's, or the other vocabulary's) is replaced only with --force, as prepare.py's
rule; a training run's folder never.
Tokenization throughput: python -m tools.bench_tokenize.
"""
import contextlib
import os
import re
import signal
import zipfile
import zlib
from multiprocessing import Pool

import numpy as np

from tools.pangu.compact_vocab import REPORT_DEFAULTS, build_compact, check_positive, compact_size, given
from safety_net.configurator import UserError, run_command
from safety_net.configurator import one_line
from safety_net.download import Progress, download
from safety_net.dataset import load_meta
from safety_net.fileio import atomic_open, check_not_a_run_folder, check_out_dir
from safety_net.text_dataset import begin_writing, check_foreign_token_files, write_meta
from safety_net.tokenizers import GPT2_EOT_ID, GPT2_VOCAB_SIZE, Vocabulary, get_gpt2_encoding, gpt2_meta

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


# -----------------------------------------------------------------------------
# reading the archive

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
            inside = "" if folder == source else f"{WIKITEXT103_DIR}/"   # the path it looked at (a hunt)
            raise UserError(f"{source} lacks {inside}{missing[0]} {how_to}")

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
        # CRC errors, truncated archives, damaged compressed data (zlib.error, a hunt), an unknown compression method
        except (zipfile.BadZipFile, OSError, EOFError, zlib.error, NotImplementedError) as e:
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
    existed = os.path.isdir(out_dir)
    reasons = []
    for url in WIKITEXT103_URLS:
        try:
            return download(url, path, WIKITEXT103_BYTES, WIKITEXT103_SHA256)
        except (OSError, ValueError) as e:
            reasons.append(f"{url.split('/')[2]}: {one_line(e)}")
    if not existed:   # the download made it, and nothing is in it
        with contextlib.suppress(OSError):
            os.rmdir(out_dir)
    raise UserError(f"could not download WikiText-103 ({'; '.join(reasons)}) (fix: pass a local "
                    "wikitext-103-raw-v1.zip or its extracted folder with --source PATH)") from None


def check_not_empty(splits, source):
    """UserError for a split without text (an empty wiki.valid.raw): it became a 0-byte val.bin with exit code 0,
    also over a good dataset of the same name (a hunt); prepare.py's splits hold 2 tokens at least."""
    for split, articles in splits.items():
        if not any(article.strip() for article in articles):
            raise UserError(f"{source}: the {split} split ({WIKITEXT103_SPLITS[split]}) holds no text (fix: pass "
                            f"the original wikitext-103-raw-v1.zip, or re-download it)")


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


# -----------------------------------------------------------------------------
# parallel tokenization of articles (WikiText-103 and the benchmark)
#
# Work is shipped to a multiprocessing Pool as groups of whole articles (~1 MB each); each worker
# builds its own tiktoken encoding once (Encoding objects are not cheap to pickle) from a small
# picklable "spec". Chunks come back in order, so the output is identical for any worker count.

_worker_enc = None


def encoding_spec(meta, ranks_path=None):
    """A picklable description of an encoding: a gpt2 or compact meta.json (tokenizers.Vocabulary reads it) and
    GPT-2's ranks file."""
    return {"meta": meta, "ranks_path": ranks_path or os.environ.get("GPT2_TIKTOKEN_FILE") or None}


def encoding_from_spec(spec):
    return Vocabulary(spec["meta"]).encoding(spec["ranks_path"])


def _init_worker(spec):
    # SIGTERM's default: the Pool's exit ends its workers with SIGTERM, and a worker that inherited a handler that
    # only asks to stop (train.py's StopRequest, a caller's own) waited on its queue forever (a hang in the suite)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
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


def check_num_proc(num_proc):
    """UserError for --num_proc beyond the machine's CPUs (None = not given): more workers cannot go faster, and a
    huge count would fork processes until the machine has none left."""
    cpus = os.cpu_count() or 1
    check_positive(num_proc=num_proc)
    if num_proc is not None and num_proc > cpus:
        raise UserError(f"--num_proc={num_proc} is more than this machine's {cpus} CPUs (fix: --num_proc={cpus}, "
                        f"or leave it out to use them all)")


# -----------------------------------------------------------------------------
# the dataset

def prepare_wikitext103(out_dir, source=None, gpt2_ranks=None, vocab_size=None, num_proc=None,
                        n_layer=12, n_embd=768, plot=True, dataset="wikitext103"):
    source = wikitext_source(out_dir, source)
    read = wikitext_reader(source)
    splits = {split: split_articles(read(name)) for split, name in WIKITEXT103_SPLITS.items()}
    check_utf8(splits, source)
    check_not_empty(splits, source)
    get_gpt2_encoding(gpt2_ranks)  # fail early (and download once) before starting workers
    spec, eot = encoding_spec(gpt2_meta(), gpt2_ranks), GPT2_EOT_ID
    meta = {"dataset": dataset, **gpt2_meta()}
    extra = {}
    with begin_writing(out_dir):   # the folder's writer lock, until meta.json is written
        if vocab_size:
            # the compact vocabulary is chosen by GPT-2 token frequency in the training split
            _, counts = tokenize_to_file(None, splits["train"], spec, eot, num_proc,
                                         "counting gpt2 tokens (train)", GPT2_VOCAB_SIZE)
            counts[GPT2_EOT_ID] = 0  # separators are not corpus tokens
            plot_path = os.path.join(out_dir, "coverage.png") if plot else None
            _, meta_c, extra = build_compact(counts, vocab_size, gpt2_ranks, n_layer, n_embd, plot_path)
            meta.update(meta_c)
            spec, eot = encoding_spec(meta_c), meta_c["eot_token"]
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


def check_other_dataset(out_dir, name, force):
    """One line when out_dir holds a complete dataset other than `name` (another text's, or the other
    vocabulary's), unless force: prepare.py's rule. True when it holds `name` complete and not force: left as it
    is, as prepare.py leaves its own dataset (its train.bin was removed under a run training on it; a hunt). An
    interrupted preparation of it is prepared again."""
    try:
        old = load_meta(out_dir)
    except UserError:   # none there, an interrupted preparation's, or another program's token files
        check_foreign_token_files(out_dir, force)
        return False
    if old.get("dataset") == name:
        return not force
    if not force:
        raise UserError(f"{out_dir} holds the dataset {old.get('dataset')!r}, not {name} (fix: --force to replace "
                        f"it, or another --out_dir)")


def prepare(dataset="wikitext103", out_dir=None, vocab_size=None, n_layer=12, n_embd=768, num_proc=None,
            force=False, **opts):
    """Prepare WikiText-103 into out_dir (default data/wikitext103, or data/wikitext103_v<K> with a compact
    vocab_size K, also given by dataset 'wikitext103_vK'). Options: source, gpt2_ranks, plot. Returns out_dir."""
    vocab_size = compact_size(dataset, "wikitext103", vocab_size, tool="tools.wikitext103")
    check_positive(n_layer=n_layer, n_embd=n_embd)
    check_num_proc(num_proc)
    name = f"wikitext103_v{vocab_size}" if vocab_size else "wikitext103"
    out_dir = out_dir or os.path.join("data", name)
    check_out_dir(out_dir)   # a file, or not writable: one line now, not a traceback later
    check_not_a_run_folder(out_dir, "out_dir", f"--out_dir=data/{name}, a folder of its own")
    if check_other_dataset(out_dir, name, force):
        print(f"{out_dir} already holds {name}: left as it is (--force prepares it again)")
        return out_dir
    prepare_wikitext103(out_dir, vocab_size=vocab_size, num_proc=num_proc, n_layer=n_layer, n_embd=n_embd,
                        dataset=name, **opts)
    print(f"wrote {out_dir}")
    return out_dir


DEFAULTS = dict(
    dataset="wikitext103",   # the positional argument: wikitext103, or wikitext103_vK for --vocab_size K
    vocab_size=0,            # compact tokenizer: keep K GPT-2 tokens (incl. 256 bytes + eot); not given: all
    source="",               # local wikitext-103-raw-v1.zip or extracted folder ("" = env WIKITEXT103_SOURCE)
    gpt2_ranks="",           # local gpt2.tiktoken ranks file ("" = env GPT2_TIKTOKEN_FILE)
    num_proc=0,              # tokenizer worker processes; not given: all CPUs
    out_dir="",              # output folder ("" = data/wikitext103, or data/wikitext103_v<K>)
    force=False,             # replace another dataset in out_dir
    **REPORT_DEFAULTS,
)


def main(argv=None):
    return run_command(run, DEFAULTS, argv, positional="dataset", with_explicit=True)


def run(config, explicit):
    report_keys = sorted(explicit & set(REPORT_DEFAULTS))
    if report_keys and not given(config, explicit, "vocab_size") and config["dataset"] == "wikitext103":
        # they size the compact vocabulary's report: without one they changed nothing (a hunt)
        raise UserError(f"--{report_keys[0]} goes with --vocab_size (the compact vocabulary's report and figure) "
                        f"(fix: drop it, or add --vocab_size=K)")
    return prepare(config["dataset"], out_dir=config["out_dir"] or None, vocab_size=given(config, explicit, "vocab_size"),
                   n_layer=config["n_layer"], n_embd=config["n_embd"], num_proc=given(config, explicit, "num_proc"),
                   source=config["source"] or None, gpt2_ranks=config["gpt2_ranks"] or None,
                   plot=not config["no_plot"], force=config["force"])


if __name__ == "__main__":
    main()
