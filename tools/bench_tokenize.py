"""
Tokenization throughput of the parallel WikiText path (tools/wikitext103.py): GPT-2 encode_ordinary with 1 worker
and with all.

    python -m tools.bench_tokenize [--mb=32] [--num_proc=N]
"""
import math
import os
import sys
import time

import numpy as np

from tools.wikitext103 import check_num_proc, encoding_spec, iter_tokenized
from safety_net.configurator import UserError, run_command
from safety_net.download import SHIPPED_SHAKESPEARE
from safety_net.tokenizers import GPT2_EOT_ID, get_gpt2_encoding, gpt2_meta

DEFAULTS = dict(mb=32.0, input_path="", gpt2_ranks="", num_proc=0)


def check_text(text, path):
    """One line for a file that is empty (a ZeroDivisionError) or not UTF-8 (read as 0 MB without a word: hunts)."""
    if not text:
        raise UserError(f"{path} is empty (fix: a UTF-8 text file, or leave --input_path out: tinyshakespeare)")
    try:
        text.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"{path} is not UTF-8 text ({e.reason} at byte {e.start}) (fix: convert it, e.g. iconv "
                        f"-t utf-8, or leave --input_path out)") from None


def bench_corpus(mb, input_path=None):
    """About `mb` MB of text as ~100 KB articles: tinyshakespeare (the repository's copy, or
    SHAKESPEARE_INPUT, or input_path) repeated, else deterministic pseudo-random words."""
    if input_path and not os.path.isfile(input_path):
        raise UserError(f"--input_path={input_path}: no such file (fix: a text file, or leave it out: tinyshakespeare)")
    path = input_path or os.environ.get("SHAKESPEARE_INPUT") or SHIPPED_SHAKESPEARE
    if os.path.isfile(path):
        with open(path, "rb") as f:
            text, source = f.read(), path
        check_text(text, path)
    else:
        rng = np.random.default_rng(0)
        words = [bytes(rng.integers(97, 123, size=rng.integers(1, 10)).astype(np.uint8)) for _ in range(5000)]
        picks = rng.integers(0, len(words), size=(10_000, 20))
        text = b"".join(b" ".join(words[i] for i in line) + b"\n" for line in picks)   # lines: cut below
        source = "generated words"
    text = text * (int(mb * 1e6) // len(text) + 1)
    text = text[:int(mb * 1e6)]
    text = text[:text.rfind(b"\n") + 1]
    if not text:   # it measured nothing and printed 0.00 MB/s (a hunt)
        raise UserError(f"{source} holds no whole line within --mb={mb:g} MB (fix: a larger --mb, or a text "
                        f"with line breaks)")
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
    if not 0 < mb < math.inf:
        raise UserError(f"--mb must be > 0 and finite, got {mb} (fix: --mb=32)")
    check_num_proc(num_proc)
    articles, source = bench_corpus(mb, input_path)
    get_gpt2_encoding(gpt2_ranks)
    spec = encoding_spec(gpt2_meta(), gpt2_ranks)
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


def main(argv=None):
    return run_command(lambda c: bench_tokenize(c["mb"], c["input_path"] or None, c["gpt2_ranks"] or None,
                                                c["num_proc"] or None), DEFAULTS, argv)


if __name__ == "__main__":
    main(sys.argv[1:])
