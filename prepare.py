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
import hashlib
import os

from configurator import ArgumentParser
from dataset import (check_text_dataset, get_gpt2_encoding, read_text,
                     shakespeare_path, write_dataset)

# nanoGPT's names, and their tokenizer
DATASETS = {"shakespeare_char": "char", "shakespeare": "gpt2"}


# -----------------------------------------------------------------------------
# the text

def split_text(text, val_fraction=0.1):
    """The first part of the text trains, the last val_fraction validates."""
    n = int(len(text) * (1 - val_fraction))
    return text[:n], text[n:]


# -----------------------------------------------------------------------------
# the dataset: its text, its tokens, its folder

def prepare(dataset="", out_dir=None, input_path=None, tokenizer=None,
            val_fraction=0.1, force=False, gpt2_ranks=None):
    """Prepare `dataset` into out_dir (default data/<dataset>); "" names it after
    --input (notes.txt -> notes_char). Returns out_dir (also for library use)."""
    # checked: the name (shakespeare_char, notes_char, ...), tokenizer, folder
    dataset, tokenizer, out_dir = check_text_dataset(
        dataset, input_path, tokenizer, val_fraction, DATASETS, out_dir)
    if dataset in DATASETS:
        input_path = shakespeare_path(out_dir, input_path)   # found, else downloaded
    text = read_text(input_path)   # UTF-8, not empty: else one line

    # tokenize the two splits: characters (as nanoGPT's stoi), or GPT-2 BPE
    train_text, val_text = split_text(text, val_fraction)
    if tokenizer == "char":
        chars = sorted(set(text))
        stoi = {ch: i for i, ch in enumerate(chars)}
        train_ids = [stoi[ch] for ch in train_text]
        val_ids = [stoi[ch] for ch in val_text]
        meta = {"tokenizer": "char", "vocab_size": len(chars), "chars": chars}
    else:
        # encode_ordinary: "<|endoftext|>" in the text is plain text
        enc = get_gpt2_encoding(gpt2_ranks)
        train_ids = enc.encode_ordinary(train_text)
        val_ids = enc.encode_ordinary(val_text)
        meta = {"tokenizer": "gpt2",
                "vocab_size": enc.n_vocab,
                "eot_token": enc.eot_token}
    n_train = len(train_ids)
    n_val = len(val_ids)
    splits = {"train": {"tokens": n_train}, "val": {"tokens": n_val}}
    # the text's source; its sha256 tells whether a dataset is of this text
    sha256 = hashlib.sha256(text.encode("utf-8")).hexdigest()
    record = {"path": os.path.abspath(input_path),
              "sha256": sha256,
              "characters": len(text),
              "val_fraction": val_fraction}
    meta = {"dataset": dataset, **meta, "splits": splits, "text": record}

    # refused: a split too short, another text's dataset (unless --force); then
    # the token files, and meta.json last: it marks a complete folder
    write_dataset(out_dir, {"train": train_ids, "val": val_ids}, meta, force)
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
    p.run(prepare, argv)   # bad input: one line `error: ... (fix: ...)`, exit 1


if __name__ == "__main__":
    main()
