"""
Prepare a dataset for train.py: a text file becomes token ids.

    python prepare.py shakespeare_char   # chars -> data/shakespeare_char/
    python prepare.py shakespeare        # GPT-2 BPE -> data/shakespeare/
    python prepare.py --input=notes.txt  # yours -> data/notes_char/
    python prepare.py --input=notes.txt --tokenizer=gpt2   # data/notes_gpt2/
    python train.py config/gpt_shakespeare_cpu.py --dataset=notes_char

Any UTF-8 text file works. The first 90% of the text is the train split, the
rest the val split (--val_fraction). The dataset folder (data/<dataset>/, or
--out_dir) gets train.bin and val.bin, the token ids as flat uint16, and
meta.json, the tokenizer, written last: it marks a complete folder. A
dataset of another text is replaced only with --force.

Offline: the repository ships data/tinyshakespeare/input.txt; --gpt2_ranks
(or GPT2_TIKTOKEN_FILE) names a local gpt2.tiktoken. Tools prepare others:

    python -m tools.pangu.compact_vocab --input=notes.txt --vocab_size=1024
    python -m tools.wikitext103 [--vocab_size K]
"""
import argparse
import os

from checkpoint import check_out_dir
from configurator import ArgumentParser, UserError
from dataset import (GPT2_EOT_ID, GPT2_VOCAB_SIZE, CharTokenizer, begin_writing,
                     check_char_count, check_long_enough, check_replace,
                     check_text_dataset, get_gpt2_encoding, read_text,
                     shakespeare_path, text_record, write_bin, write_meta)

# nanoGPT's names, and their tokenizer
DATASETS = {"shakespeare_char": "char", "shakespeare": "gpt2"}


# -----------------------------------------------------------------------------
# the text

def split_text(text, val_fraction=0.1):
    """The first part of the text trains, the last val_fraction validates."""
    n = int(len(text) * (1 - val_fraction))
    return text[:n], text[n:]


# -----------------------------------------------------------------------------
# the tokenizer, and the token files

def char_tokenizer(text):
    """Characters as tokens: the text's distinct characters, sorted."""
    chars = sorted(set(text))
    check_char_count(len(chars))   # ids are stored as uint16
    meta = {"tokenizer": "char", "vocab_size": len(chars), "chars": chars}
    return CharTokenizer(chars).encode, meta


def gpt2_tokenizer(gpt2_ranks=None):
    """GPT-2 BPE (encode_ordinary: "<|endoftext|>" in the text is plain text)."""
    enc = get_gpt2_encoding(gpt2_ranks)
    meta = {"tokenizer": "gpt2", "vocab_size": GPT2_VOCAB_SIZE,
            "eot_token": GPT2_EOT_ID}
    return enc.encode_ordinary, meta


def prepare(dataset="", out_dir=None, input_path=None, tokenizer=None,
            val_fraction=0.1, force=False, gpt2_ranks=None):
    """Prepare `dataset` into out_dir (default data/<dataset>); "" names it after
    --input (notes.txt -> notes_char). Returns out_dir (also for library use)."""
    # the dataset's name (shakespeare_char, notes_char, ...) and its tokenizer
    dataset, tokenizer = check_text_dataset(dataset, input_path, tokenizer,
                                            val_fraction, DATASETS, out_dir)
    out_dir = out_dir or os.path.join("data", dataset)
    check_out_dir(out_dir)   # a file, or not writable: one line now
    if dataset in DATASETS:
        input_path = shakespeare_path(out_dir, input_path)
    text = read_text(input_path)

    # tokenize the two splits
    train_text, val_text = split_text(text, val_fraction)
    if tokenizer == "char":
        encode, meta = char_tokenizer(text)
    else:
        encode, meta = gpt2_tokenizer(gpt2_ranks)
    train_ids = encode(train_text)
    val_ids = encode(val_text)
    splits = {"train": {"tokens": len(train_ids)},
              "val": {"tokens": len(val_ids)}}
    # e.g. a text too short for a val split is refused
    check_long_enough(input_path, len(text), splits, val_fraction)
    record = text_record(input_path, text, val_fraction)   # the text's sha256
    meta = {"dataset": dataset, **meta, "splits": splits, "text": record}
    # a dataset of another text stays unless --force
    check_replace(out_dir, meta, force)

    # write: the token files first, meta.json last (it marks a complete folder)
    begin_writing(out_dir)
    write_bin(os.path.join(out_dir, "train.bin"), train_ids)
    write_bin(os.path.join(out_dir, "val.bin"), val_ids)
    write_meta(out_dir, meta)
    n_train = len(train_ids)
    n_val = len(val_ids)
    print(f"length of dataset in characters: {len(text):,}; "
          f"vocab size: {meta['vocab_size']:,}")
    print(f"train has {n_train:,} tokens (the first {1 - val_fraction:.0%} "
          f"of the text), val has {n_val:,} tokens (the rest): a model's "
          f"block_size must stay below {n_val:,}")
    print(f"wrote {out_dir}")
    return out_dir


# -----------------------------------------------------------------------------
# the command

def main(argv=None):
    p = ArgumentParser(prog="python prepare.py", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dataset", nargs="?", default="",
                   help="shakespeare_char | shakespeare | a name")
    p.add_argument("--input", dest="input_path",
                   help="a UTF-8 text file (env SHAKESPEARE_INPUT)")
    p.add_argument("--tokenizer", help="char (default) | gpt2")
    p.add_argument("--val_fraction", type=float, default=0.1,
                   help="the share of the text for val")
    p.add_argument("--out_dir", help="output folder (default data/<dataset>)")
    p.add_argument("--force", action="store_true",
                   help="replace a dataset of another text")
    p.add_argument("--gpt2_ranks",
                   help="a local gpt2.tiktoken (env GPT2_TIKTOKEN_FILE)")
    args = vars(p.parse_args(argv))
    try:
        prepare(args.pop("dataset"), **args)
    except UserError as e:
        raise SystemExit(f"error: {e}") from None


if __name__ == "__main__":
    main()
