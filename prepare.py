"""
Dataset preparation: tinyshakespeare as characters or as GPT-2 BPE tokens.

    python prepare.py shakespeare_char    # characters, 65-symbol vocabulary -> data/shakespeare_char/
    python prepare.py shakespeare         # GPT-2 BPE -> data/shakespeare/

A dataset folder (data/<dataset>/, or --out_dir) holds train.bin and val.bin, the token ids as flat uint16
(np.memmap(path, dtype=np.uint16, mode="r") reads them), and meta.json, which describes the tokenizer
(dataset.py reads it back). meta.json is written last: its presence means the folder is complete.

Offline: --input (or SHAKESPEARE_INPUT) names a local tinyshakespeare input.txt, --gpt2_ranks (or
GPT2_TIKTOKEN_FILE) a local gpt2.tiktoken. Library use: prepare(dataset, out_dir=None, **opts) -> out_dir.

The other datasets are prepared by tools:

    python -m tools.pangu.compact_vocab shakespeare --vocab_size 4096   # paper 003's compact vocabulary
    python -m tools.wikitext103 [--vocab_size K]                        # WikiText-103
"""
import argparse
import os
import re
import shlex

from checkpoint import check_out_dir
from configurator import ArgumentParser, UserError
from dataset import (GPT2_EOT_ID, GPT2_VOCAB_SIZE, CharTokenizer, begin_writing, download, get_gpt2_encoding,
                     one_line, write_bin, write_meta)

SHAKESPEARE_URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
SHAKESPEARE_BYTES = 1115394

DATASETS = ("shakespeare_char", "shakespeare")
# datasets that tools prepare (python -m tools.<...>), by name pattern: the command for each
TOOL_DATASETS = {r"shakespeare_v(\d+)": "tools.pangu.compact_vocab shakespeare --vocab_size {}",
                 r"wikitext103": "tools.wikitext103",
                 r"wikitext103_v(\d+)": "tools.wikitext103 --vocab_size {}"}


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


def prepare_shakespeare_char(out_dir, input_path=None, gpt2_ranks=None):
    """Characters as tokens: the vocabulary is the text's distinct characters (gpt2_ranks is not used)."""
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


def prepare_shakespeare(out_dir, input_path=None, gpt2_ranks=None):
    """GPT-2 BPE tokens (encode_ordinary: an <|endoftext|> in the text is plain text)."""
    text = shakespeare_text(out_dir, input_path)
    train, val = split_90_10(text)
    enc = get_gpt2_encoding(gpt2_ranks)
    begin_writing(out_dir)
    train_ids, val_ids = enc.encode_ordinary(train), enc.encode_ordinary(val)
    write_bin(os.path.join(out_dir, "train.bin"), train_ids)
    write_bin(os.path.join(out_dir, "val.bin"), val_ids)
    print(f"train has {len(train_ids):,} tokens, val has {len(val_ids):,} tokens (vocab {GPT2_VOCAB_SIZE})")
    write_meta(out_dir, {"dataset": "shakespeare", "tokenizer": "gpt2", "vocab_size": GPT2_VOCAB_SIZE,
                         "eot_token": GPT2_EOT_ID,
                         "splits": {"train": {"tokens": len(train_ids)}, "val": {"tokens": len(val_ids)}}})


# -----------------------------------------------------------------------------
# entry points

def tool_command(dataset):
    """The command that prepares `dataset` when a tool does (shakespeare_vK, wikitext103, wikitext103_vK), else None."""
    for pattern, command in TOOL_DATASETS.items():
        m = re.fullmatch(pattern, dataset)
        if m:
            return "python -m " + command.format(*m.groups())
    return None


def prepare(dataset, out_dir=None, **opts):
    """Prepare `dataset` into out_dir (default data/<dataset>). Options: input_path, gpt2_ranks. Returns out_dir."""
    command = tool_command(dataset)
    if command:
        if out_dir and os.path.normpath(out_dir) != os.path.join("data", dataset):
            command += f" --out_dir {shlex.quote(out_dir)}"
        raise UserError(f"dataset {dataset!r} is prepared by a tool, not by prepare.py (fix: {command})")
    if dataset not in DATASETS:
        raise UserError(f"unknown dataset {dataset!r} (fix: shakespeare_char or shakespeare; tools prepare the others: "
                        f"python -m tools.pangu.compact_vocab for shakespeare_vK, python -m tools.wikitext103 "
                        f"for wikitext103 and wikitext103_vK)")
    out_dir = out_dir or os.path.join("data", dataset)
    check_out_dir(out_dir)   # a file, or not writable: one line now, not a traceback later
    fn = {"shakespeare_char": prepare_shakespeare_char, "shakespeare": prepare_shakespeare}[dataset]
    fn(out_dir, **opts)
    print(f"wrote {out_dir}")
    return out_dir


def main(argv=None):
    p = ArgumentParser(prog="python prepare.py", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dataset", help="shakespeare_char | shakespeare")
    p.add_argument("--out_dir", help="output folder (default data/<dataset>)")
    p.add_argument("--input", dest="input_path", help="local tinyshakespeare input.txt (env SHAKESPEARE_INPUT)")
    p.add_argument("--gpt2_ranks", help="local gpt2.tiktoken ranks file (env GPT2_TIKTOKEN_FILE)")
    args = vars(p.parse_args(argv))
    try:
        prepare(args.pop("dataset"), **args)
    except UserError as e:
        raise SystemExit(f"error: {e}") from None


if __name__ == "__main__":
    main()
