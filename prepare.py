"""
Prepare a dataset for train.py: a text file becomes token ids.

    python prepare.py shakespeare_char   # chars -> data/shakespeare_char/
    python prepare.py shakespeare        # GPT-2 BPE -> data/shakespeare/
    python prepare.py --input=notes.txt  # yours -> data/notes_char/
    python prepare.py --input=notes.txt --tokenizer=gpt2   # data/notes_gpt2/
    python train.py config/gpt_shakespeare_cpu.py --dataset=notes_char --out_dir=out-notes

Any UTF-8 text file works. The first 90% of the text is the train split, the
rest the val split (--val_fraction). The dataset folder (data/<dataset>/, or
--out_dir) gets train.bin and val.bin, the token ids as uint16, and
meta.json, the tokenizer. Another text's, split's or tokenizer's dataset is
replaced only with --force.

Offline: the repository ships data/tinyshakespeare/input.txt; --gpt2_ranks
(or GPT2_TIKTOKEN_FILE) names a local gpt2.tiktoken. Tools prepare others:

    python -m tools.pangu.compact_vocab --input=notes.txt --vocab_size=1024
    python -m tools.wikitext103 [--vocab_size K]
"""
import hashlib
import os
from decimal import Decimal

from safety_net.configurator import run_command
from safety_net.download import shakespeare_path
from safety_net.text_dataset import check_text_dataset, read_text, write_dataset
from safety_net.tokenizers import get_gpt2_encoding

# nanoGPT's names, and their tokenizer
DATASETS = {"shakespeare_char": "char", "shakespeare": "gpt2"}

# the keys (--help lists them); "" = not given
DEFAULTS = dict(
    dataset="",
    input="",
    tokenizer="",      # "" = the dataset's, else char
    val_fraction=0.1,
    out_dir="",
    force=False,
    gpt2_ranks="",
)


# -----------------------------------------------------------------------------
# the text

def split_text(text, val_fraction=0.1):
    """The first part of the text trains, the last val_fraction validates."""
    # exact: in floats, 90 * 0.7 is 62.99999
    n = int(len(text) * (1 - Decimal(str(val_fraction))))
    return text[:n], text[n:]


# -----------------------------------------------------------------------------
# the dataset: its text, its tokens, its folder

def prepare(dataset="", out_dir="", input_path="", tokenizer="",
            val_fraction=0.1, force=False, gpt2_ranks=""):
    """Prepare `dataset` into out_dir (default data/<dataset>); "" names it after
    --input (notes.txt -> notes_char). Returns out_dir."""
    # checked, defaults filled: name, tokenizer, folder
    dataset, tokenizer, out_dir = check_text_dataset(
        dataset, input_path, tokenizer, val_fraction, DATASETS, out_dir, gpt2_ranks)
    if dataset in DATASETS:
        input_path = shakespeare_path(out_dir, input_path)   # found, else downloaded
    text = read_text(input_path)   # UTF-8, not empty: else one line

    # tokenize the splits: characters (as nanoGPT's stoi), or GPT-2 BPE
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
    # the text's sha256 tells whether a dataset is of this text
    sha256 = hashlib.sha256(text.encode("utf-8")).hexdigest()
    record = {"path": os.path.abspath(input_path),
              "sha256": sha256,
              "characters": len(text),
              "val_fraction": val_fraction}
    meta = {"dataset": dataset, **meta, "splits": splits, "text": record}

    # refused: a split too short, another dataset (unless --force); meta.json
    # last marks a complete folder
    written = write_dataset(out_dir, {"train": train_ids, "val": val_ids}, meta, force)
    print(f"length of dataset in characters: {len(text):,}; "
          f"vocab size: {meta['vocab_size']:,}")
    print(f"train has {n_train:,} tokens (the first {(1 - val_fraction) * 100:g}% "
          f"of the text), val has {n_val:,} tokens (the rest): a model's "
          f"block_size must stay below {min(n_train, n_val):,}")
    if written:
        print(f"wrote {out_dir}")
    else:
        print(f"{out_dir} holds this dataset already: unchanged")
    return out_dir


# -----------------------------------------------------------------------------
# the command

def main(argv=None):
    # bad input: one line `error: ...`; Ctrl-C: `interrupted`, exit 130
    return run_command(run, DEFAULTS, argv, positional="dataset")


def run(cfg):
    return prepare(cfg["dataset"], out_dir=cfg["out_dir"],
                   input_path=cfg["input"], tokenizer=cfg["tokenizer"],
                   val_fraction=cfg["val_fraction"], force=cfg["force"],
                   gpt2_ranks=cfg["gpt2_ranks"])


if __name__ == "__main__":
    main()
