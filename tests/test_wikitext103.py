"""Tests for tools/wikitext103.py: the archive's layout (zip or folder), articles, the parallel tokenizer, a compact
vocabulary, and bad archives (one line, the output folder as it was).

No network: downloads are monkeypatched to fail and the archives are built here (make_wikitext).
"""
import contextlib
import os
import signal
import subprocess
import sys
import zipfile

import pytest

from conftest import ROOT, one_error_line
from safety_net import dataset as tokenizer
from safety_net import tokenizers
from safety_net.configurator import UserError
from test_prepare import (prepared_folder, read_bin, read_meta,
                          write_input)
from tools import wikitext103
from tools.wikitext103 import main, prepare, split_articles

def wiki_article(title, paras):
    """An article in WikiText raw layout: blank line, heading, blank line, paragraphs, subsection."""
    text = f" \n = {title} = \n \n"
    for i, p in enumerate(paras):
        text += f" {p} \n \n"
        if i == 0:
            text += f" = = Section of {title} = = \n \n"
    return text


WIKI = {
    "train": [wiki_article("Valkyria Chronicles III", ["Senjō no Valkyria 3 is a game .", "It was released in 2011 ."]),
              wiki_article("Tower Building", ["The tower is 1 @,@ 000 ft tall 🙂 .", "Built = rebuilt ."]),
              wiki_article("A", ["Short one .", "Also = = not a heading = = here ."])],
    "val": [wiki_article("Homarus gammarus", ["A lobster .", "It lives in the sea ."]),
            wiki_article("Ice", ["Cold ."])],
    "test": [wiki_article("Robert Boulter", ["An English actor .", "Born 1976 ."])],
}
WIKI_FILES = {"train": "wiki.train.raw", "val": "wiki.valid.raw", "test": "wiki.test.raw"}


def make_wikitext(tmp_path, kind):
    """The real layout (wikitext-103-raw/wiki.*.raw) as an extracted folder or a zip archive."""
    folder = tmp_path / "extracted"
    (folder / "wikitext-103-raw").mkdir(parents=True)
    for split, name in WIKI_FILES.items():
        (folder / "wikitext-103-raw" / name).write_bytes("".join(WIKI[split]).encode("utf-8"))
    if kind == "folder":
        return str(folder)
    path = tmp_path / "wikitext-103-raw-v1.zip"
    with zipfile.ZipFile(path, "w") as zf:
        for name in WIKI_FILES.values():
            zf.write(folder / "wikitext-103-raw" / name, f"wikitext-103-raw/{name}")
    return str(path)


def test_split_articles_level1_only():
    raw = "".join(WIKI["train"]).encode()
    arts = split_articles(raw)
    assert [a.decode() for a in arts] == WIKI["train"]  # sub-headings and '= =' text don't split
    assert arts[1].startswith(b" \n = Tower Building = \n")
    assert split_articles(b"no heading at all\n") == [b"no heading at all\n"]


@pytest.mark.parametrize("kind", ["zip", "folder"])
def test_wikitext103_layout(tmp_path, monkeypatch, gpt2_file, offline, kind):
    monkeypatch.setattr(wikitext103, "GROUP_BYTES", 150)  # several article groups -> eot between groups too
    out = tmp_path / "w"
    prepare("wikitext103", out_dir=str(out), source=make_wikitext(tmp_path, kind), num_proc=2)
    meta = read_meta(out)
    assert meta["tokenizer"] == "gpt2" and meta["eot_token"] == 50256
    enc = tokenizers.get_gpt2_encoding()
    for split in ("train", "val", "test"):
        text = "".join(WIKI[split])
        ids = read_bin(out / f"{split}.bin").tolist()
        stats = meta["splits"][split]
        assert stats["tokens"] == len(ids)
        assert stats["words"] == len(text.split()) and stats["bytes"] == len(text.encode())
        assert stats["articles"] == len(WIKI[split]) == ids.count(50256) + 1
        # eot separates articles; each article's tokens are its own encode_ordinary
        pieces = enc.decode(ids).split("<|endoftext|>")
        assert "".join(pieces) == text and len(pieces) == len(WIKI[split])
        expect = []
        for i, art in enumerate(split_articles(text.encode())):
            expect += ([50256] if i else []) + enc.encode_ordinary(art.decode())
        assert ids == expect


def test_the_writer_lock_is_held_until_meta_json(tmp_path, monkeypatch, gpt2_file, offline):
    """A run starting while the token files are written is refused (a bare begin_writing dropped the lock at
    once; a review)."""
    from conftest import refused_at_meta_json
    out = tmp_path / "w"
    seen = refused_at_meta_json(monkeypatch, wikitext103, out)
    prepare("wikitext103", out_dir=str(out), source=make_wikitext(tmp_path, "folder"), num_proc=1)
    assert len(seen) == 1 and "is being written by another process" in seen[0], seen


def test_wikitext103_malformed(tmp_path, offline):
    bad = tmp_path / "bad.zip"
    bad.write_bytes(b"this is not a zip file")
    with pytest.raises(UserError) as exc:
        prepare("wikitext103", out_dir=str(tmp_path / "o"), source=str(bad))
    assert "\n" not in str(exc.value) and "not a valid zip" in str(exc.value)

    incomplete = tmp_path / "incomplete.zip"
    with zipfile.ZipFile(incomplete, "w") as zf:
        zf.writestr("wikitext-103-raw/wiki.train.raw", " = A = \n")
    with pytest.raises(UserError, match="lacks wikitext-103-raw/wiki.valid.raw"):
        prepare("wikitext103", out_dir=str(tmp_path / "o"), source=str(incomplete))
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="lacks"):
        prepare("wikitext103", out_dir=str(tmp_path / "o"), source=str(tmp_path / "empty"))


def test_wikitext103_download_failure(tmp_path, offline):
    with pytest.raises(UserError) as exc:
        prepare("wikitext103", out_dir=str(tmp_path / "o"))
    msg = str(exc.value)
    assert "\n" not in msg and msg.startswith("could not download WikiText-103") and "(fix: " in msg and "--source" in msg
    assert not (tmp_path / "o").exists()   # it left an empty folder behind


def test_wikitext_that_is_not_utf8_leaves_the_folder_as_it_was(tmp_path, offline):
    out, before = prepared_folder(tmp_path)
    path = tmp_path / "bad.zip"
    with zipfile.ZipFile(path, "w") as zf:
        for split, name in WIKI_FILES.items():
            raw = "".join(WIKI[split]).encode("utf-8")
            zf.writestr(f"wikitext-103-raw/{name}", raw[:40] + b"\xff\xfe" + raw[40:] if split == "val" else raw)
    one_error_line(main, ["--source", str(path), "--out_dir", str(out), "--force"],   # --force: over another dataset
                   "the val split is not UTF-8 text", "invalid start byte at byte 40")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_an_empty_split_leaves_the_folder_as_it_was(tmp_path, offline):
    """An empty wiki.valid.raw became a 0-byte val.bin and exit code 0, also over a good dataset (a hunt)."""
    out, before = prepared_folder(tmp_path)
    path = tmp_path / "empty_val.zip"
    with zipfile.ZipFile(path, "w") as zf:
        for split, name in WIKI_FILES.items():
            zf.writestr(f"wikitext-103-raw/{name}", b" \n \n" if split == "val" else "".join(WIKI[split]).encode())
    one_error_line(main, ["--source", str(path), "--out_dir", str(out), "--force"], "the val split",
                   "holds no text")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_a_decode_error_in_a_tokenizer_worker_is_one_line(tmp_path, gpt2_file):
    """The workers decode the text: an error there comes back as the one-line error, not the worker's traceback
    (bench_tokenize reads --input as bytes)."""
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("caf\xe9 au lait\n".encode("latin-1") * 100)
    from tools import bench_tokenize
    with pytest.raises(SystemExit) as e:
        bench_tokenize.main([f"--input_path={bad}", "--mb=0.001", "--num_proc=1"])
    assert str(e.value).startswith("error: ") and "not UTF-8" in str(e.value) and "\n" not in str(e.value)


def test_the_tokenizer_pool_ends_under_a_sigterm_handler_that_only_asks(gpt2_file):
    """A Pool ends its workers with SIGTERM at its exit; a worker that inherited a handler that only asks to stop
    (train.py's StopRequest, a caller's own) waited on its queue forever: a hang in the suite. The workers take
    SIGTERM's default. In a process of its own, with a timeout: the old code hangs."""
    script = ("import signal\n"
              "from tools.wikitext103 import encoding_spec, iter_tokenized\n"
              "from safety_net.tokenizers import gpt2_meta\n"
              "def asks(signum, frame):\n"
              "    print('asked to stop', flush=True)\n"
              "signal.signal(signal.SIGTERM, asks)\n"
              "groups = list(iter_tokenized([b'Hello world'] * 8, encoding_spec(gpt2_meta()), 50256, num_proc=2))\n"
              "print(len(groups), 'groups')\n")
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=dict(os.environ, PYTHONPATH=ROOT), start_new_session=True)
    try:
        out, err = proc.communicate(timeout=60)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)   # a hung Pool's workers too
    assert proc.returncode == 0 and out.endswith("groups\n"), err


def test_compact_wikitext103(tmp_path, gpt2_file, offline):
    out = tmp_path / "wc"
    prepare("wikitext103", out_dir=str(out), source=make_wikitext(tmp_path, "zip"), vocab_size=300, num_proc=2,
            plot=False)
    meta = read_meta(out)
    assert meta["tokenizer"] == "compact" and meta["vocab_size"] == 300
    tok = tokenizer.load_tokenizer(str(out))
    ids = read_bin(out / "train.bin").tolist()
    assert max(ids) < 300 and ids.count(299) == len(WIKI["train"]) - 1
    assert tok.decode(ids).split("<|endoftext|>") == WIKI["train"]
    assert meta["splits"]["test"]["words"] == len("".join(WIKI["test"]).split())


def test_bench_corpus_is_the_size_asked(tmp_path, monkeypatch):
    """The repository's tinyshakespeare by default (it looked for data/shakespeare_char/input.txt, which prepare.py
    never writes); without a text, generated lines: both about `mb` MB (the generated words were one line, cut to
    nothing below 1.2 MB). A missing --input_path is refused (it fell back to generated words)."""
    from tools import bench_tokenize
    monkeypatch.delenv("SHAKESPEARE_INPUT", raising=False)
    arts, source = bench_tokenize.bench_corpus(0.3)
    assert source.endswith(os.path.join("data", "tinyshakespeare", "input.txt"))
    assert 0.29e6 < sum(map(len, arts)) <= 0.3e6
    monkeypatch.setattr(bench_tokenize, "SHIPPED_SHAKESPEARE", str(tmp_path / "none.txt"))
    arts, source = bench_tokenize.bench_corpus(0.3)
    assert source == "generated words" and 0.29e6 < sum(map(len, arts)) <= 0.3e6 and len(arts) == 3
    with pytest.raises(UserError, match="--input_path=.*missing.txt: no such file"):
        bench_tokenize.bench_corpus(0.3, input_path=str(tmp_path / "missing.txt"))


def test_bench_tokenize(tmp_path, gpt2_file, capsys):
    from tools.bench_tokenize import bench_tokenize
    res = bench_tokenize(mb=0.2, input_path=write_input(tmp_path), num_proc=2)
    assert set(res) == {1, 2} and all(v > 0 for v in res.values())
    assert "MB/s" in capsys.readouterr().out


def test_bench_tokenize_returns_the_rate_it_prints(tmp_path, gpt2_file, capsys):
    """bench_tokenize() returns MB/s per worker count, the number its row prints (a hunt: a changed line returned
    bytes/s, and no test failed)."""
    from tools.bench_tokenize import bench_tokenize
    res = bench_tokenize(mb=0.05, input_path=write_input(tmp_path), num_proc=1)
    assert set(res) == {1} and f"workers=  1: {res[1]:7.2f} MB/s," in capsys.readouterr().out


def test_command_line_names_and_default_folders(tmp_path, monkeypatch, gpt2_file, offline):
    """The dataset name may carry the compact size (wikitext103_vK); the folder defaults to data/<that name>."""
    monkeypatch.chdir(tmp_path)
    source = make_wikitext(tmp_path, "folder")
    main(["--source", source, "--num_proc=1"])
    assert read_meta("data/wikitext103")["tokenizer"] == "gpt2"
    main(["wikitext103_v300", "--source", source, "--num_proc=1", "--no_plot", "--n_layer=2", "--n_embd=64"])
    meta = read_meta("data/wikitext103_v300")
    assert meta["vocab_size"] == 300 and meta["dataset"] == "wikitext103_v300" and meta["pehl"]["n_layer"] == 2
    assert not os.path.exists("data/wikitext103_v300/coverage.png")
    with pytest.raises(UserError, match="wikitext103_v300 means --vocab_size 300, but --vocab_size is 400"):
        prepare("wikitext103_v300", vocab_size=400)
    one_error_line(main, ["shakespeare_v300"], "tools.wikitext103 prepares wikitext103 and wikitext103_vK",
                   "(fix: python -m tools.pangu.compact_vocab shakespeare --vocab_size 300)")
    one_error_line(main, ["--vocab_size=256", "--source", source], "vocab_size must be in [257, 50257]")
    assert sorted(os.listdir("data")) == ["wikitext103", "wikitext103_v300"]


def test_an_out_dir_of_another_dataset_or_a_run_is_refused_before_reading(tmp_path, gpt2_file, offline, capsys):
    """--out_dir over another dataset replaced it without --force, and over a training run's folder wrote beside its
    checkpoints (a hunt): prepare.py's rules, one line before the archive is read; --force replaces, and the same
    dataset is left as it is."""
    import json
    source = make_wikitext(tmp_path, "folder")
    other = tmp_path / "notes_char"
    other.mkdir()
    (other / "meta.json").write_text(json.dumps({"dataset": "notes_char", "vocab_size": 3, "chars": ["a", "b", "c"]}))
    one_error_line(main, [f"--out_dir={other}", "--source", source, "--num_proc=1"],
                   "holds the dataset 'notes_char', not wikitext103", "--force")
    assert sorted(os.listdir(other)) == ["meta.json"]
    # token files without meta.json (nanoGPT's openwebtext folder) were replaced without --force (a review)
    theirs = tmp_path / "owt"
    theirs.mkdir()
    (theirs / "train.bin").write_bytes(b"\0" * 64)
    (theirs / "val.bin").write_bytes(b"\0" * 16)
    one_error_line(main, [f"--out_dir={theirs}", "--source", source, "--num_proc=1"],
                   "holds train.bin, val.bin without a readable meta.json", "--force")
    assert (theirs / "train.bin").read_bytes() == b"\0" * 64 and sorted(os.listdir(theirs)) == ["train.bin", "val.bin"]
    run = tmp_path / "out"
    run.mkdir()
    (run / "ckpt.pt").write_bytes(b"a run's")
    one_error_line(main, [f"--out_dir={run}", "--source", source, "--num_proc=1"], "training run's folder")
    assert sorted(os.listdir(run)) == ["ckpt.pt"]
    main([f"--out_dir={other}", "--source", source, "--num_proc=1", "--force"])
    assert read_meta(other)["dataset"] == "wikitext103"
    # the same dataset is left as it is: removing train.bin first killed a run training on it (a hunt)
    def written(path):
        return os.stat(path).st_ino, os.stat(path).st_mtime_ns

    before, ids = written(other / "train.bin"), (other / "train.bin").read_bytes()
    main([f"--out_dir={other}", "--source", source, "--num_proc=1"])
    assert written(other / "train.bin") == before and "left as it is" in capsys.readouterr().out
    (other / "train.bin").write_bytes(b"\0\0")
    main([f"--out_dir={other}", "--source", source, "--num_proc=1", "--force"])   # prepared again
    assert (other / "train.bin").read_bytes() == ids


def test_the_compact_reports_keys_without_a_compact_vocabulary_are_refused(tmp_path):
    """--n_layer, --n_embd and --no_plot size the compact vocabulary's report: without --vocab_size they were
    accepted and changed nothing (a hunt)."""
    for key in ("--n_layer=3", "--no_plot"):
        one_error_line(main, [key, f"--out_dir={tmp_path / 'w'}"], "goes with --vocab_size")
    assert not (tmp_path / "w").exists()


def test_text_before_the_first_heading_belongs_to_the_first_article():
    """A preamble before the first heading is part of the first article, not an article of its own (a hunt: a
    changed line did this, and no test failed)."""
    raw = b"intro line\n \n = A = \n x\n \n = B = \n y\n"
    assert split_articles(raw) == [b"intro line\n \n = A = \n x\n", b" \n = B = \n y\n"]


def test_a_flat_folder_of_the_raw_files_is_read(tmp_path):
    """--source may be the folder holding wiki.*.raw itself, not only the one above wikitext-103-raw/ (a hunt: a
    changed line did this, and no test failed)."""
    for name in WIKI_FILES.values():
        (tmp_path / name).write_bytes(b" \n = " + name.encode() + b" = \n text\n")
    assert wikitext103.wikitext_reader(str(tmp_path))("wiki.valid.raw") == b" \n = wiki.valid.raw = \n text\n"


def test_a_flat_folder_without_a_split_names_the_file_it_looked_for(tmp_path):
    """A flat folder (wiki.train.raw in it) without wiki.valid.raw: the error named
    wikitext-103-raw/wiki.valid.raw, a path it never looked at (a hunt found it: the message named the wrong
    path)."""
    (tmp_path / "wiki.train.raw").write_bytes(b" \n = A = \n x\n")
    (tmp_path / "wiki.test.raw").write_bytes(b" \n = B = \n y\n")
    with pytest.raises(UserError) as e:
        wikitext103.wikitext_reader(str(tmp_path))
    assert str(e.value).startswith(f"{tmp_path} lacks wiki.valid.raw (fix: "), str(e.value)


def test_an_archive_that_cannot_be_opened_is_one_line(tmp_path, monkeypatch):
    """An archive the system refuses to open (no permission) is the one line, not a traceback (a hunt: a changed
    line did this, and no test failed)."""
    path = tmp_path / "wikitext-103-raw-v1.zip"
    path.write_bytes(b"PK")

    def refused(*args, **kwargs):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(zipfile, "ZipFile", refused)
    with pytest.raises(UserError) as e:
        wikitext103.wikitext_reader(str(path))
    assert "is not a valid zip archive" in str(e.value) and "Permission denied" in str(e.value), str(e.value)


@pytest.mark.parametrize("error, said", [(EOFError(), "EOFError"), (OSError(5, "I/O error"), "[Errno 5] I/O error")])
def test_an_archive_whose_read_fails_is_damaged(tmp_path, monkeypatch, error, said):
    """A truncated archive (EOFError) or a failed read (OSError) says the archive is damaged, in one line (a hunt:
    a changed line did this, and no test failed)."""
    source = make_wikitext(tmp_path, "zip")

    def fails(self, name, pwd=None):
        raise error

    monkeypatch.setattr(zipfile.ZipFile, "read", fails)
    with pytest.raises(UserError) as e:
        wikitext103.wikitext_reader(source)("wiki.train.raw")
    assert str(e.value).startswith(f"{source} is damaged ({said}) (fix: "), str(e.value)


def test_a_damaged_compressed_archive_is_one_line(tmp_path, offline):
    """Corrupted deflate data in the archive ended in zlib's traceback (`Error -3 while decompressing data`); an
    unknown compression method in NotImplementedError's (a hunt found it: zlib.error was not caught, nor was
    NotImplementedError)."""
    import zlib
    path = tmp_path / "damaged.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name in WIKI_FILES.values():
            zf.writestr(f"wikitext-103-raw/{name}", "".join(wiki_article(f"T{i}", [f"p {i} ."]) for i in range(2000)))
    data = bytearray(path.read_bytes())
    data[200:260] = bytes(b ^ 0x5A for b in data[200:260])
    path.write_bytes(bytes(data))
    one_error_line(main, ["--source", str(path), "--out_dir", str(tmp_path / "o")], f"{path} is damaged (")
    for error in (zlib.error("Error -3 while decompressing data"), NotImplementedError("compression type 99")):
        def fails(self, name, pwd=None):
            raise error
        with pytest.MonkeyPatch.context() as m:
            m.setattr(zipfile.ZipFile, "read", fails)
            with pytest.raises(UserError, match="is damaged"):
                wikitext103.wikitext_reader(str(path))("wiki.train.raw")


def test_a_failed_download_names_each_host_tried(tmp_path, offline):
    """Every mirror that failed is named by its host (a hunt: a changed line did this, and no test failed)."""
    with pytest.raises(UserError) as e:
        prepare("wikitext103", out_dir=str(tmp_path / "o"))
    assert "(wikitext.smerity.com: " in str(e.value) and "; s3.amazonaws.com: " in str(e.value), str(e.value)


def test_an_empty_validation_file_is_refused(tmp_path, offline):
    """A 0-byte wiki.valid.raw holds no article at all: refused as a split without text (a hunt: a changed line
    did this, and no test failed)."""
    path = tmp_path / "empty_val.zip"
    with zipfile.ZipFile(path, "w") as zf:
        for split, name in WIKI_FILES.items():
            zf.writestr(f"wikitext-103-raw/{name}", b"" if split == "val" else "".join(WIKI[split]).encode())
    one_error_line(main, ["--source", str(path), "--out_dir", str(tmp_path / "o")],
                   "the val split (wiki.valid.raw) holds no text")
    assert not (tmp_path / "o").exists()


def test_a_non_utf8_byte_is_located_in_the_whole_split():
    """The byte offset of bad text counts the articles before it (a hunt: a changed line did this, and no test
    failed)."""
    with pytest.raises(UserError, match=r"invalid start byte at byte 25\)"):
        wikitext103.check_utf8({"val": [b" \n = A = \n ok\n", b" \n = B = \n \xff\n"]}, "SRC")


def test_the_tokenizer_uses_every_cpu_by_default(monkeypatch, gpt2_file):
    """Without --num_proc the tokenizer starts one worker per CPU, as documented (a hunt: a changed line did this,
    and no test failed)."""
    import multiprocessing
    started = []

    def pool(n, **kwargs):
        started.append(n)
        return multiprocessing.Pool(1, **kwargs)   # one real worker: the test's own cost

    monkeypatch.setattr(os, "cpu_count", lambda: 3)
    monkeypatch.setattr(wikitext103, "Pool", pool)
    list(wikitext103.iter_tokenized([b"a b c"], wikitext103.encoding_spec(tokenizers.gpt2_meta()), 50256))
    assert started == [3]


def test_num_proc_up_to_the_cpus_is_accepted():
    """--num_proc may be as many as the machine's CPUs, not one more (a hunt: a changed line did this, and a test
    failed only on a 2-CPU machine)."""
    with pytest.MonkeyPatch.context() as m:
        m.setattr(os, "cpu_count", lambda: 4)
        wikitext103.check_num_proc(4)
        with pytest.raises(UserError, match="--num_proc=5 is more than this machine's 4 CPUs"):
            wikitext103.check_num_proc(5)


def test_the_tokenizing_progress_line_counts_bytes_and_ends_its_line(gpt2_file, capsys):
    """The progress line counts the text's MB and ends at 100% with a newline, so the next line starts on its own
    (a hunt: a changed line did this, and no test failed)."""
    spec = wikitext103.encoding_spec(tokenizers.gpt2_meta())
    wikitext103.tokenize_to_file(None, [b"word " * 40_000] * 3, spec, 50256, 1, "tokenizing val")
    assert capsys.readouterr().err.endswith("tokenizing val: 100.0% (0.6/0.6 MB)\n")


def test_a_decode_error_names_the_split(gpt2_file):
    """Text that is not UTF-8 is reported under the label of what was being tokenized (a hunt: a changed line did
    this, and no test failed)."""
    spec = wikitext103.encoding_spec(tokenizers.gpt2_meta())
    with pytest.raises(UserError) as e:
        wikitext103.tokenize_to_file(None, [b"caf\xe9"], spec, 50256, 1, "tokenizing val")
    assert str(e.value).startswith("tokenizing val: the text is not UTF-8"), str(e.value)


def test_a_split_file_that_fails_midway_is_not_left_behind(tmp_path, monkeypatch):
    """A write that fails midway (a full disk) leaves no truncated train.bin under its final name, which would
    pass for a complete one (a hunt: a changed line did this, and no test failed)."""
    import numpy as np

    def tokenized(*args):
        yield np.arange(100, dtype=np.uint16), 10, 50
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(wikitext103, "iter_tokenized", tokenized)
    path = tmp_path / "train.bin"
    with pytest.raises(UserError, match="cannot write .*train.bin: No space left on device"):
        wikitext103.tokenize_to_file(str(path), [b"a"] * 2, None, 50256)
    assert os.listdir(tmp_path) == []


def test_the_compact_vocabulary_counts_no_separators(tmp_path, gpt2_file, offline, capsys):
    """The GPT-2 tokens counted for the compact vocabulary are the articles' own: the <|endoftext|> between them
    is not corpus text (a hunt: a changed line did this, and no test failed)."""
    enc = tokenizers.get_gpt2_encoding()
    n = sum(len(enc.encode_ordinary(article)) for article in WIKI["train"])
    prepare("wikitext103", out_dir=str(tmp_path / "wc"), source=make_wikitext(tmp_path, "zip"), vocab_size=300,
            num_proc=1, plot=False)
    assert f"GPT-2 tokens in the training split: {n:,} (" in capsys.readouterr().out
