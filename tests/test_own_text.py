"""Your own text as a dataset (issue 40): `python prepare.py --input=notes.txt` (characters), the same with
--tokenizer=gpt2 (GPT-2 BPE), and `python -m tools.pangu.compact_vocab --input=notes.txt --vocab_size=K` (paper
003's compact vocabulary learned from the text); then train.py and sample.py on it with no other step. Bad input is
one line, and a dataset of another text is never replaced without --force.

The text is tests/fixtures/keeper_log.txt (2.7 KB, written for these tests, with a few non-ASCII characters), not
tinyshakespeare. Every check decodes the token files back and compares them with the file's own text.
"""
import hashlib
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from conftest import one_error_line
import prepare
from safety_net import dataset

TEXT_FILE = Path(__file__).parent / "fixtures" / "keeper_log.txt"
TEXT = TEXT_FILE.read_text(encoding="utf-8")


def read_bin(path):
    return np.fromfile(path, dtype=np.uint16).tolist()


def decoded_splits(folder):
    tok = dataset.load_tokenizer(str(folder))
    return tok.decode(read_bin(Path(folder) / "train.bin")), tok.decode(read_bin(Path(folder) / "val.bin"))


@pytest.fixture
def notes(tmp_path, monkeypatch):
    """A folder with notes.txt (the fixture text), as the current directory."""
    shutil.copy(TEXT_FILE, tmp_path / "notes.txt")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_own_text_trains_and_samples_with_the_documented_commands(notes, capsys):
    """prepare.py --input=notes.txt writes data/notes_char/ (the split stated and recorded); train.py with the CPU
    config and --dataset=notes_char trains on it, and sample.py samples it, with no other step."""
    import sample
    import train
    prepare.main(["--input=notes.txt"])
    out = capsys.readouterr().out
    n_val = len(TEXT) - int(len(TEXT) * 0.9)
    assert f"val has {n_val:,} tokens (the rest)" in out and "the first 90% of the text" in out
    meta = json.loads((notes / "data" / "notes_char" / "meta.json").read_text(encoding="utf-8"))
    assert meta["dataset"] == "notes_char" and meta["chars"] == sorted(set(TEXT))
    assert meta["text"]["val_fraction"] == 0.1 and meta["text"]["characters"] == len(TEXT)
    assert decoded_splits(notes / "data" / "notes_char") == (TEXT[:-n_val], TEXT[-n_val:])

    config = os.path.join(os.path.dirname(os.path.abspath(prepare.__file__)), "config", "gpt_shakespeare_cpu.py")
    train.main([config, "--dataset=notes_char", "--max_iters=2", "--eval_interval=2", "--eval_iters=1",
                "--n_layer=1", "--n_embd=32", "--n_head=2", "--block_size=32"])
    assert "step 2: train loss" in capsys.readouterr().out
    sample.main(["--start=Monday. ", "--num_samples=1", "--max_new_tokens=40", "--device=cpu"])
    text = capsys.readouterr().out.split("\n---------------\n")[0]
    assert text.startswith("Monday. ") and len(text) == len("Monday. ") + 40 and set(text) <= set(TEXT)


def test_own_text_as_gpt2_bpe_and_as_a_compact_vocabulary(notes, gpt2_file):
    """--tokenizer=gpt2 writes data/notes_gpt2/; compact_vocab --input=notes.txt writes data/notes_v300/ from the
    same text and split (GPT-2's 300 tokens most frequent in the train split, the 256 bytes among them); a 20% val
    split is settable, and each decodes back to the text."""
    from tools.pangu import compact_vocab
    prepare.main(["--input=notes.txt", "--tokenizer=gpt2", "--val_fraction=0.2"])
    compact_vocab.main(["--input=notes.txt", "--vocab_size=300", "--val_fraction=0.2", "--no_plot"])
    n_train = int(len(TEXT) * 0.8)
    for name, vocab in (("notes_gpt2", 50257), ("notes_v300", 300)):
        meta = json.loads((notes / "data" / name / "meta.json").read_text(encoding="utf-8"))
        assert meta["dataset"] == name and meta["vocab_size"] == vocab
        assert decoded_splits(notes / "data" / name) == (TEXT[:n_train], TEXT[n_train:])
    gpt2, compact = (read_bin(notes / "data" / n / "train.bin") for n in ("notes_gpt2", "notes_v300"))
    assert max(compact) < 300 and len(compact) > len(gpt2)   # rarer GPT-2 tokens are spelled by their parts


def test_a_byte_order_mark_is_dropped_and_crlf_line_ends_are_kept(notes, gpt2_file):
    """Windows Notepad's UTF-8 starts with a byte-order mark (EF BB BF): prepare.py --input and compact_vocab --input
    read the text after it (Python's utf-8-sig), so U+FEFF is no token and the dataset is the text's, its sha256
    too. CRLF line ends are kept as they are (not translated to \\n, as a text-mode read would): '\\r' is a
    character of the char vocabulary, every split decodes back to the file's text byte for byte, and a dataset
    prepared before this change keeps its sha256."""
    from tools.pangu import compact_vocab
    crlf = TEXT.replace("\n", "\r\n")
    (notes / "bom.txt").write_bytes(b"\xef\xbb\xbf" + TEXT.encode("utf-8"))
    (notes / "crlf.txt").write_bytes(crlf.encode("utf-8"))
    prepare.main(["--input=bom.txt"])
    prepare.main(["--input=bom.txt", "--tokenizer=gpt2"])
    compact_vocab.main(["--input=bom.txt", "--vocab_size=300", "--no_plot"])
    prepare.main(["--input=crlf.txt"])
    n_train = int(len(TEXT) * 0.9)
    for name in ("bom_char", "bom_gpt2", "bom_v300"):
        meta = json.loads((notes / "data" / name / "meta.json").read_text(encoding="utf-8"))
        assert meta["text"]["characters"] == len(TEXT) and "\ufeff" not in meta.get("chars", [])
        assert meta["text"]["sha256"] == hashlib.sha256(TEXT.encode("utf-8")).hexdigest()
        assert decoded_splits(notes / "data" / name) == (TEXT[:n_train], TEXT[n_train:])
    meta = json.loads((notes / "data" / "crlf_char" / "meta.json").read_text(encoding="utf-8"))
    assert meta["chars"] == sorted(set(TEXT) | {"\r"})
    n_train = int(len(crlf) * 0.9)
    assert decoded_splits(notes / "data" / "crlf_char") == (crlf[:n_train], crlf[n_train:])


@pytest.mark.parametrize("content,argv,words", [
    (b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR", [], ["not text", "NUL bytes"]),
    ("UTF-16 text".encode("utf-16"), [], ["NUL bytes", "UTF-16"]),
    ("UTF-16 text, no BOM".encode("utf-16-le"), [], ["NUL bytes", "UTF-16"]),
    ("caf\xe9 au lait\n".encode("latin-1"), [], ["not UTF-8", "byte 3 is 0xe9"]),
    (b"", [], ["is empty"]),
    (b"\xef\xbb\xbf", [], ["is empty", "only a byte-order mark"]),
    (b"hello\n", [], ["too short for a val split", "--val_fraction"]),
    (b"abc", [], ["too short for a val split", "(fix: a longer text)"]),   # no split of 3 gives both 2 tokens
    (TEXT.encode(), ["--val_fraction=0"], ["--val_fraction must be in (0, 1)"]),
    (TEXT.encode(), ["--val_fraction=1.5"], ["--val_fraction must be in (0, 1)"]),
    (TEXT.encode(), ["--tokenizer=compact"], ["tools.pangu.compact_vocab --input=notes.txt"]),
    (TEXT.encode(), ["--tokenizer=bytes"], ["--tokenizer must be char or gpt2"]),
    (TEXT.encode(), ["notes_char", "--tokenizer=gpt2"], ["the name notes_char says char", "notes_gpt2"]),
    (TEXT.encode(), ["../escaped"], ["not a plain folder name"]),
    (TEXT.encode(), ["shakespeare", "--tokenizer=char"], ["(fix: python prepare.py shakespeare_char)"]),
])
def test_bad_input_is_one_line_and_writes_nothing(notes, content, argv, words):
    (notes / "notes.txt").write_bytes(content)
    one_error_line(prepare.main, ["--input=notes.txt", *argv], *words)
    assert sorted(os.listdir(notes)) == ["notes.txt"]


def test_the_block_size_bound_is_the_shorter_splits(notes, capsys):
    """With most of the text in val, train is the shorter split, and block_size must stay below it (the line named
    val's length, which train.py then refused)."""
    prepare.main(["--input=notes.txt", "--val_fraction=0.9"])
    splits = json.loads((notes / "data" / "notes_char" / "meta.json").read_text())["splits"]
    n_train = splits["train"]["tokens"]
    assert n_train < splits["val"]["tokens"]
    assert f"block_size must stay below {n_train:,}" in capsys.readouterr().out


def test_a_dataset_of_another_text_is_replaced_only_with_force(notes, capsys):
    """The name collides with a dataset of another text: one line, the folder as it was; the same text again is
    fine (prepared again); --force replaces it."""
    prepare.main(["--input=notes.txt"])
    folder = notes / "data" / "notes_char"
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    prepare.main(["--input=notes.txt"])   # the same text: no harm
    (notes / "other").mkdir()
    (notes / "other" / "notes.txt").write_text(TEXT.upper(), encoding="utf-8")
    message = one_error_line(prepare.main, ["--input=other/notes.txt"], "holds the dataset 'notes_char' of another "
                             "text", str(notes / "notes.txt"), "--force")
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before, message
    (folder / "test.bin").write_bytes(b"\x01\x00" * 8)   # a test split of the dataset it replaces (WikiText's)
    (folder / "coverage.png").write_bytes(b"its figure")   # and its compact vocabulary's coverage
    prepare.main(["--input=other/notes.txt", "--force"])
    assert decoded_splits(folder)[0] == TEXT.upper()[:int(len(TEXT) * 0.9)]
    # they were left, and tools.eval scored the test split as this text's
    assert not (folder / "test.bin").exists() and not (folder / "coverage.png").exists()
    # the same text split otherwise: a resumed run would have evaluated on other text without a word
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    one_error_line(prepare.main, ["--input=other/notes.txt", "--val_fraction=0.5"], "of this text split otherwise",
                   "another --val_fraction", "--force", "another dataset name or --out_dir")
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before


def test_train_py_says_how_to_prepare_an_unknown_dataset_and_a_too_short_text(notes, capsys):
    import train
    config = os.path.join(os.path.dirname(os.path.abspath(prepare.__file__)), "config", "gpt_shakespeare_cpu.py")
    one_error_line(train.main, [config, "--dataset=notes_char", "--max_iters=1"],
                   "preparing dataset 'notes_char' failed: unknown dataset 'notes_char'",
                   "python prepare.py notes_char --input=YOUR_TEXT.txt")
    assert not (notes / "data").exists()
    prepare.main(["--input=notes.txt"])
    n_val = len(TEXT) - int(len(TEXT) * 0.9)
    one_error_line(train.main, [config, "--dataset=notes_char", f"--block_size={n_val}"],
                   f"val split of data{os.sep}notes_char has {n_val} tokens, not enough for block_size={n_val}",
                   "--val_fraction")


def test_a_text_named_as_tinyshakespeares_dataset_is_refused(tmp_path, monkeypatch):
    """--input=shakespeare.txt became data/shakespeare_char, the quickstart's folder, which train.py's default
    config then trained on without a word (a hunt); the fix names a name of its own, and works."""
    import prepare
    monkeypatch.chdir(tmp_path)
    (tmp_path / "shakespeare.txt").write_text("to be or not to be, that is the question\n" * 40)
    one_error_line(prepare.main, ["--input=shakespeare.txt"], "the name of tinyshakespeare's dataset",
                   "python prepare.py my_shakespeare_char --input=shakespeare.txt")
    assert not (tmp_path / "data").exists()
    prepare.main(["my_shakespeare_char", "--input=shakespeare.txt"])
    assert (tmp_path / "data" / "my_shakespeare_char" / "meta.json").is_file()


def test_a_compact_vocabularys_name_is_the_compact_tools(tmp_path, monkeypatch, gpt2_file):
    """prepare.py notes_v1024 --input=... (train.py's fix for --dataset=notes_v1024) wrote a char dataset under the
    compact vocabulary's name (a hunt): refused, naming the tool, whose command works as given."""
    import prepare
    from tools.pangu import compact_vocab
    monkeypatch.chdir(tmp_path)
    shutil.copy(TEXT_FILE, tmp_path / "notes.txt")
    message = one_error_line(prepare.main, ["notes_v300", "--input=notes.txt"], "compact vocabulary of 300 tokens",
                             "python -m tools.pangu.compact_vocab notes_v300 --input=notes.txt")
    assert not (tmp_path / "data").exists()
    fix = message.split("(fix: python -m tools.pangu.compact_vocab ", 1)[1].rstrip(")").split()
    compact_vocab.main([*fix, "--no_plot"])
    assert json.loads((tmp_path / "data" / "notes_v300" / "meta.json").read_text())["vocab_size"] == 300
    prepare.main(["notes_v2", "--input=notes.txt"])   # a version, not a vocabulary size: a name like any other
    assert json.loads((tmp_path / "data" / "notes_v2" / "meta.json").read_text())["tokenizer"] == "char"
