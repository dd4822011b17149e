"""
Paper 003 (PanGu-pi Pro) 2.1, a compact tokenizer: remove the low-frequency tokens, here keeping the K GPT-2 tokens
most frequent in the training split, so the embedding and head shrink; report the coverage of the top-k tokens
(Fig. 2) and PEHL, the share of parameters in embedding + head. Ours, so that any text still encodes with BPE: the
256 single bytes, every kept token's merge parents and eot are always kept. (The paper analyses the frequencies of
its 100k PanGu-pi vocabulary, and its models use a 48k BPE tokenizer built with SentencePiece on its own data;
starting from GPT-2's tokens, on the user's text, is ours.)

    python -m tools.pangu.compact_vocab --input=notes.txt --vocab_size=1024   # your own text -> data/notes_v1024/
    python -m tools.pangu.compact_vocab shakespeare --vocab_size 4096    # -> data/shakespeare_v4096/
    python -m tools.pangu.compact_vocab shakespeare_v1024 --n_layer 4 --n_embd 128 --no_plot

Writes the folder prepare.py writes for the same text with --tokenizer=gpt2 (train.bin, val.bin, meta.json; the
same split), with the compact tokenizer in meta.json (its tokens and their GPT-2 ids; dataset.py reads it back),
the coverage and PEHL report, and coverage.png (Figure 2; --no_plot: none). A name may be given for --input's
text (mynotes, or mynotes_v1024); without one the file names it. --n_layer / --n_embd: the model size PEHL is
reported for. --input (SHAKESPEARE_INPUT for tinyshakespeare), --val_fraction, --force, --gpt2_ranks
(GPT2_TIKTOKEN_FILE) and --out_dir as for prepare.py.
WikiText-103 with a compact vocabulary: python -m tools.wikitext103 --vocab_size K (it uses build_compact).
"""
import base64
import contextlib
import io
import os
import re

import numpy as np

from prepare import DATASETS, split_text
from safety_net.configurator import UserError, run_command
from safety_net.dataset import load_meta
from safety_net.download import shakespeare_path
from safety_net.fileio import atomic_open, check_not_a_run_folder, check_out_dir
from safety_net.text_dataset import (begin_writing, check_dataset_name, check_long_enough, check_replace,
                                     check_val_fraction, holds_dataset, name_of_text, read_text, text_record,
                                     tool_command, write_bin, write_meta)
from safety_net.tokenizers import (GPT2_EOT, GPT2_EOT_ID, GPT2_PAT_STR, GPT2_VOCAB_SIZE, compact_encoding,
                                   get_gpt2_encoding)


# -----------------------------------------------------------------------------
# choosing the tokens, and the report

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
                         f"(256 byte tokens + {GPT2_EOT}), got {vocab_size}")
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


# meta.json's coverage / PEHL report (compact_report): of the options, not of the dataset
REPORT_KEYS = ("coverage_topk", "kept_coverage", "pehl")


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
# a compact dataset of a text (tinyshakespeare, or --input's), and the checks shared with tools.wikitext103

def prepare_compact(out_dir, dataset, vocab_size, input_path, gpt2_ranks=None, n_layer=12, n_embd=768, plot=True,
                    val_fraction=0.1, force=False):
    """prepare.py's dataset of the same text and split, tokenized with the compact vocabulary chosen from the
    training split. Returns whether it wrote the token files (False: the folder held this dataset already)."""
    check_val_fraction(val_fraction)
    text = read_text(input_path)
    train, val = split_text(text, val_fraction)
    gpt2 = get_gpt2_encoding(gpt2_ranks)
    counts = np.bincount(gpt2.encode_ordinary(train), minlength=GPT2_VOCAB_SIZE)
    report = io.StringIO()   # printed once the checks below pass: bad input is one line (it came after the report)
    with contextlib.redirect_stdout(report):
        enc, meta_c, extra = build_compact(counts, vocab_size, gpt2_ranks, n_layer, n_embd)
    train_ids, val_ids = enc.encode_ordinary(train), enc.encode_ordinary(val)
    splits = {"train": {"tokens": len(train_ids)}, "val": {"tokens": len(val_ids)}}
    check_long_enough(input_path, len(text), splits, val_fraction)
    meta = {"dataset": dataset, **meta_c, "splits": splits, **extra,
            "text": text_record(input_path, text, val_fraction)}
    same = check_replace(out_dir, meta, force)
    print(report.getvalue(), end="")
    # this very dataset's token files left as they are: a run training on the folder reads train.bin at every
    # batch, and removing it killed the run (prepare.py's rule; a review). Only the report (--n_layer, --n_embd)
    # and the figure follow the options (they took the token files with them; a hunt).
    if same and holds_dataset(out_dir, {"train": train_ids, "val": val_ids}, meta, ignore=REPORT_KEYS):
        figure = os.path.join(out_dir, "coverage.png")
        drawn = plot and not os.path.exists(figure)
        if drawn:
            plot_coverage(counts, vocab_size, figure)
        if load_meta(out_dir) != meta:
            write_meta(out_dir, meta)
            print(f"{out_dir} holds this dataset already: its token files unchanged, its report updated")
        else:
            kept = "its token files and report unchanged" if drawn else "unchanged"
            print(f"{out_dir} holds this dataset already: {kept}")
        return False
    with begin_writing(out_dir):   # the folder's writer lock, until meta.json is written
        if plot:
            plot_coverage(counts, vocab_size, os.path.join(out_dir, "coverage.png"))
        write_bin(os.path.join(out_dir, "train.bin"), train_ids)
        write_bin(os.path.join(out_dir, "val.bin"), val_ids)
        print(f"train has {len(train_ids):,} tokens, val has {len(val_ids):,} tokens (vocab {vocab_size})")
        write_meta(out_dir, meta)
    return True


def compact_base(dataset, input_path):
    """The name a compact dataset is made from: 'shakespeare' (tinyshakespeare), or --input's text's (a name given
    with --input, without its _vK; else the file's: notes.txt -> notes)."""
    if not dataset:
        return name_of_text(input_path) if input_path else "shakespeare"
    base = re.fullmatch(r"(.+?)(?:_v\d+)?", dataset).group(1)
    if input_path and base != "shakespeare":
        check_dataset_name(dataset)
        return base
    return "shakespeare"   # compact_size refuses any other name


def check_positive(**values):
    """UserError for an option given as 0 or less (None = not given)."""
    for key, value in values.items():
        if value is not None and value < 1:
            raise UserError(f"--{key} must be >= 1, got {value} (fix: a positive number, or leave it out)")


def compact_size(dataset, base, vocab_size=None, tool="tools.pangu.compact_vocab"):
    """The compact vocabulary size of `dataset`, which must be `base` or `base`_vK ('shakespeare_v8192' -> 8192),
    and --vocab_size (either may give it; None when neither does). Checked: one line for anything else."""
    m = re.fullmatch(re.escape(base) + r"(?:_v(\d+))?", dataset)
    if not m:
        fix = tool_command(dataset) or (f"python prepare.py {dataset}" if dataset in DATASETS else
                                        f"{base}, or {base}_vK for a K-token vocabulary")
        if fix.startswith(base) and tool == "tools.pangu.compact_vocab":
            fix += f"; your own text: python -m {tool} {dataset} --input=YOUR_TEXT.txt"
        raise UserError(f"{tool} prepares {base} and {base}_vK, not {dataset!r} (fix: {fix})")
    named = int(m.group(1)) if m.group(1) else None
    if named is not None and vocab_size is not None and named != vocab_size:
        raise UserError(f"{dataset} means --vocab_size {named}, but --vocab_size is {vocab_size} "
                        f"(fix: give the size once)")
    vocab_size = named if vocab_size is None else vocab_size
    if vocab_size is not None and not 257 <= vocab_size <= GPT2_VOCAB_SIZE:
        raise UserError(f"vocab_size must be in [257, {GPT2_VOCAB_SIZE}] (256 bytes + eot at least), got "
                        f"{vocab_size} (fix: --vocab_size=8192, for example)")
    return vocab_size


def prepare(dataset="", out_dir=None, vocab_size=None, n_layer=12, n_embd=768, input_path=None, **opts):
    """Prepare tinyshakespeare (dataset shakespeare or shakespeare_vK), or --input's text, with a compact vocabulary
    of vocab_size tokens into out_dir (default data/<name>_v<K>). Options: gpt2_ranks, plot, val_fraction, force.
    Returns out_dir."""
    base = compact_base(dataset, input_path)
    vocab_size = compact_size(dataset or base, base, vocab_size)
    if vocab_size is None:
        raise UserError(f"no vocabulary size given (fix: --vocab_size 4096, or the dataset name {base}_v4096)")
    check_positive(n_layer=n_layer, n_embd=n_embd)
    name = f"{base}_v{vocab_size}"
    out_dir = out_dir or os.path.join("data", name)
    check_out_dir(out_dir)   # a file, or not writable: one line now, not a traceback later
    check_not_a_run_folder(out_dir, "out_dir", f"--out_dir=data/{name}, a folder of its own")
    if base == "shakespeare":
        input_path = shakespeare_path(out_dir, input_path)
    if prepare_compact(out_dir, name, vocab_size, input_path, n_layer=n_layer, n_embd=n_embd, **opts):
        print(f"wrote {out_dir}")
    return out_dir


# the options of the coverage / PEHL report (shared with tools.wikitext103)
REPORT_DEFAULTS = dict(
    n_layer=12,      # model depth for the PEHL report
    n_embd=768,      # model width for the PEHL report
    no_plot=False,   # do not save coverage.png
)
DEFAULTS = dict(
    dataset="",        # the positional argument: shakespeare (with --vocab_size K) or shakespeare_vK; "" = shakespeare, or --input's text's name
    vocab_size=0,      # keep K GPT-2 tokens (incl. the 256 bytes and eot); not given: the dataset name's K
    out_dir="",        # output folder ("" = data/<name>_v<K>)
    input="",          # a UTF-8 text file ("" = tinyshakespeare, env SHAKESPEARE_INPUT)
    val_fraction=0.1,  # the share of the text for val
    force=False,       # replace a dataset of another text
    gpt2_ranks="",     # local gpt2.tiktoken ranks file ("" = env GPT2_TIKTOKEN_FILE)
    **REPORT_DEFAULTS,
)


def main(argv=None):
    return run_command(run, DEFAULTS, argv, positional="dataset", with_explicit=True)


def given(config, explicit, key):
    """The value of an integer key when the command line or a config file set it, else None (0 is checked as
    any other value, not taken for "not given")."""
    return config[key] if key in explicit else None


def run(config, explicit):
    return prepare(config["dataset"], out_dir=config["out_dir"] or None, vocab_size=given(config, explicit, "vocab_size"),
                   n_layer=config["n_layer"], n_embd=config["n_embd"], input_path=config["input"] or None,
                   gpt2_ranks=config["gpt2_ranks"] or None, plot=not config["no_plot"],
                   val_fraction=config["val_fraction"], force=config["force"])


if __name__ == "__main__":
    main()
