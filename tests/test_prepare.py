"""Tests for prepare.py: tinyshakespeare as characters and as GPT-2 BPE (offline), and the datasets it leaves to tools.

No network: downloads are monkeypatched to fail, and the GPT-2 ranks come from GPT2_TIKTOKEN_FILE or
../shared/data/gpt2/gpt2.tiktoken (tests needing it skip otherwise). The helpers here serve test_compact_vocab.py
and test_wikitext103.py too.
"""
import functools
import hashlib
import http.server
import io
import json
import os
import re
import subprocess
import sys
import threading
import types
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tiktoken

from conftest import one_error_line
import prepare
from safety_net import dataset as tokenizer
from safety_net import download
from safety_net import text_dataset
from safety_net import tokenizers
from safety_net.configurator import UserError

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = download.SHIPPED_SHAKESPEARE

SMALL_TEXT = ("First Citizen:\nBefore we proceed any further, hear me speak.\n\n"
              "All:\nSpeak, speak.\n\nFirst Citizen:\nYou are all resolved rather to die than to famish?\n") * 5
UNICODE_TEXT = "naïve café — 日本語 🙂 \x01\x7f\u200b ROMEO: wherefore art thou, 'tis 1234 \t\n  x"


def read_bin(path):
    return np.memmap(path, dtype=np.uint16, mode="r")


def read_meta(out_dir):
    return json.loads((Path(out_dir) / "meta.json").read_text(encoding="utf-8"))


def write_input(tmp_path, text=SMALL_TEXT):
    path = tmp_path / "input.txt"
    path.write_text(text, encoding="utf-8")
    return str(path)


def reference_gpt2(ranks_path):
    """tiktoken's GPT-2 encoding, built here from the ranks file and tiktoken's own GPT-2 pattern (r50k_pat_str):
    not dataset.py's."""
    import tiktoken.load
    from tiktoken_ext.openai_public import r50k_pat_str
    return tiktoken.Encoding(name="gpt2_reference", pat_str=r50k_pat_str,
                             mergeable_ranks=tiktoken.load.load_tiktoken_bpe(ranks_path),
                             special_tokens={"<|endoftext|>": 50256})


def split_as_documented(text):
    """prepare.py's split: the first 90% of the characters (int(0.9 * length)) train, the rest validate."""
    n = int(len(text) * 0.9)
    return {"train": text[:n], "val": text[n:]}


# ----------------------------------------------------------------------------- shakespeare_char

def test_shakespeare_char_ids_are_positions_in_the_sorted_characters(tmp_path):
    """Token id = position of the character in the sorted set of the text's characters; the split is the documented
    90/10 of the characters; meta.json holds exactly that vocabulary, and the tokenizer dataset.py builds from it is
    the one its fields describe."""
    text = SMALL_TEXT + UNICODE_TEXT
    out = tmp_path / "sc"
    prepare.prepare("shakespeare_char", out_dir=str(out), input_path=write_input(tmp_path, text))
    meta = read_meta(out)
    chars = sorted(set(text))
    splits = split_as_documented(text)
    expected = {"dataset": "shakespeare_char", "tokenizer": "char", "vocab_size": len(chars), "chars": chars,
                "splits": {s: {"tokens": len(part)} for s, part in splits.items()}}
    assert {k: meta.get(k) for k in expected} == expected
    for split, part in splits.items():
        ids = read_bin(out / f"{split}.bin")
        assert ids.dtype == np.uint16 and ids.tolist() == [chars.index(c) for c in part]
        assert "".join(meta["chars"][i] for i in ids) == part
    tok = tokenizer.load_tokenizer(str(out))
    assert tok.encode(text) == [meta["chars"].index(c) for c in text] and tok.vocab_size == meta["vocab_size"]
    assert tok.decode(range(len(chars))) == "".join(meta["chars"]) and tok.eot_token is None
    with pytest.raises(ValueError, match="not in the vocabulary"):
        tok.encode("Z")


def test_shakespeare_input_from_env_and_cli(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SHAKESPEARE_INPUT", write_input(tmp_path))
    prepare.main(["shakespeare_char", "--out_dir", str(tmp_path / "a")])
    assert read_meta(tmp_path / "a")["vocab_size"] == len(set(SMALL_TEXT))
    assert "train has" in capsys.readouterr().out


def test_download_failure_is_one_line(tmp_path, monkeypatch, offline):
    monkeypatch.chdir(tmp_path)  # no data/shakespeare_char/input.txt to fall back on
    monkeypatch.setattr(download, "SHIPPED_SHAKESPEARE", str(tmp_path / "not-shipped.txt"))
    with pytest.raises(UserError) as exc:
        prepare.prepare("shakespeare_char", out_dir=str(tmp_path / "sc"))
    msg = str(exc.value)
    assert "\n" not in msg
    assert msg.startswith("could not download tinyshakespeare (")
    assert "--input PATH" in msg and "SHAKESPEARE_INPUT" in msg
    assert not list((tmp_path / "sc").glob("*.part"))


def test_shipped_text_is_tinyshakespeare_and_tracked():
    """The quickstart's text ships with the repository (a fresh clone trains offline): the file the download
    would fetch, byte for byte, and not hidden by .gitignore (data/*/ ignores the prepared folders)."""
    data = Path(download.SHIPPED_SHAKESPEARE).read_bytes()
    assert len(data) == download.SHAKESPEARE_BYTES
    assert hashlib.sha256(data).hexdigest() == download.SHAKESPEARE_SHA256
    if (ROOT / ".git").exists():
        ignored = subprocess.run(["git", "check-ignore", "-q", download.SHIPPED_SHAKESPEARE], cwd=ROOT)
        assert ignored.returncode == 1, "data/tinyshakespeare/input.txt is ignored by git"


def test_quickstart_needs_no_input_variable(tmp_path, monkeypatch, offline):
    """No SHAKESPEARE_INPUT, no network, nothing beside the repository: the shipped text is found."""
    monkeypatch.chdir(tmp_path)
    prepare.prepare("shakespeare_char", out_dir=str(tmp_path / "sc"))
    assert read_meta(tmp_path / "sc")["vocab_size"] == 65


@pytest.fixture
def local_server(tmp_path):
    """An HTTP server on 127.0.0.1 serving tmp_path/www (a real download, no network)."""
    root = tmp_path / "www"
    root.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_download_from_a_local_server(tmp_path, monkeypatch, local_server):
    """Without the shipped text the quickstart downloads tinyshakespeare; a wrong file (another size or sha256)
    is refused in one line and leaves nothing behind."""
    root, url = local_server
    monkeypatch.delenv("SHAKESPEARE_INPUT", raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(download, "SHIPPED_SHAKESPEARE", str(tmp_path / "not-shipped.txt"))
    monkeypatch.setattr(download, "SHAKESPEARE_URL", url + "/input.txt")
    (root / "input.txt").write_bytes(Path(SHIPPED).read_bytes())
    prepare.prepare("shakespeare_char", out_dir=str(tmp_path / "sc"))
    assert (tmp_path / "sc" / "input.txt").read_bytes() == Path(SHIPPED).read_bytes()
    (root / "input.txt").write_bytes(b"x" * download.SHAKESPEARE_BYTES)   # right size, other text
    with pytest.raises(UserError, match="sha256 mismatch") as e:
        prepare.prepare("shakespeare_char", out_dir=str(tmp_path / "other"))
    assert "\n" not in str(e.value) and not list((tmp_path / "other").glob("*"))


def test_missing_explicit_input(tmp_path):
    with pytest.raises(UserError, match="input not found"):
        prepare.prepare("shakespeare_char", out_dir=str(tmp_path), input_path=str(tmp_path / "nope.txt"))


class FakeResponse(io.BytesIO):
    def __init__(self, data, length):
        super().__init__(data)
        self.headers = {"Content-Length": str(length)}


def test_download_checks_size_and_sha(tmp_path, monkeypatch):
    data = b"x" * 3000
    monkeypatch.setattr(urllib.request, "urlopen", lambda *a, **k: FakeResponse(data, len(data)))
    dest = str(tmp_path / "f.bin")
    with pytest.raises(ValueError, match="expected 10"):
        download.download("http://example.invalid/f", dest, expected_size=10)
    with pytest.raises(ValueError, match="sha256"):
        download.download("http://example.invalid/f", dest, expected_size=3000, expected_sha256="0" * 64)
    assert not os.path.exists(dest) and not os.path.exists(dest + ".part")
    download.download("http://example.invalid/f", dest, 3000, hashlib.sha256(data).hexdigest())
    assert Path(dest).read_bytes() == data
    # a truncated transfer (fewer bytes than Content-Length) is rejected
    monkeypatch.setattr(urllib.request, "urlopen", lambda *a, **k: FakeResponse(data, 4000))
    with pytest.raises(ValueError, match="expected 4000"):
        download.download("http://example.invalid/f", str(tmp_path / "g.bin"))


def test_a_transfer_cut_short_is_an_oserror_and_leaves_nothing(tmp_path, monkeypatch):
    """http.client's IncompleteRead is no OSError: download passes it on as one (the caller's "could not download"
    line, or another mirror), and the partial file is gone (untested until a hunt)."""
    import http.client

    class CutShort(FakeResponse):
        def read(self, n=-1):
            raise http.client.IncompleteRead(b"abc", 7)

    monkeypatch.setattr(urllib.request, "urlopen", lambda *a, **k: CutShort(b"", 10))
    dest = tmp_path / "f.bin"
    with pytest.raises(OSError, match="IncompleteRead"):
        download.download("http://example.invalid/f", str(dest))
    assert not list(tmp_path.iterdir())


def test_tinyshakespeare_beside_the_dataset_folder_is_found(tmp_path, monkeypatch):
    """A dataset folder next to data/shakespeare_char (shakespeare, GPT-2 BPE) reads its input.txt there, before
    the shipped copy: a copy the user put there is the text asked for."""
    monkeypatch.delenv("SHAKESPEARE_INPUT", raising=False)
    beside = tmp_path / "shakespeare_char" / "input.txt"
    beside.parent.mkdir()
    beside.write_text("a copy of one's own\n")
    assert download.shakespeare_path(str(tmp_path / "shakespeare")) == str(beside)


def test_progress_of_an_unknown_size_shows_the_amount_only(capsys):
    bar = download.Progress("downloading x", 0)
    bar.update(2_500_000)
    bar.close()
    assert capsys.readouterr().err.endswith("\rdownloading x: (2.5 MB)\n")


def test_progress_shows_a_line_every_fifth_of_a_second(capsys, monkeypatch):
    """Two updates 0.3 s apart are two lines (a hunt: a changed line did this, and no test failed)."""
    now = [1000.0]
    monkeypatch.setattr(download, "time", types.SimpleNamespace(time=lambda: now[0]))   # its clock alone
    bar = download.Progress("downloading x", 10_000_000)
    bar.update(1_000_000)
    now[0] += 0.3
    bar.update(1_000_000)
    assert capsys.readouterr().err == "\rdownloading x:  10.0% (1.0/10.0 MB)\rdownloading x:  20.0% (2.0/10.0 MB)"


def test_progress_of_a_known_total_ends_at_100_percent_and_never_passes_it(capsys):
    """A download's last line is 100% of its size; wikitext103's count of characters, which its bytes then pass,
    shows 100%, not 150% (a hunt: a changed line did this, and no test failed)."""
    bar = download.Progress("downloading x", 10_000_000)
    bar.update(5_000_000)
    bar.close()
    assert capsys.readouterr().err.endswith("\rdownloading x: 100.0% (10.0/10.0 MB)\n")
    download.Progress("wikitext", 1000, unit="M chars", scale=1).update(1500)
    assert capsys.readouterr().err == "\rwikitext: 100.0% (1500.0/1000.0 M chars)"


def test_download_without_a_sha256_names_the_file_and_the_servers_size(tmp_path, monkeypatch, capsys):
    """A download with no sha256 and the right size is written; its progress line names the file alone, out of
    the size the server announces (a hunt: a changed line did this, and no test failed)."""
    data = b"x" * 3_000_000
    monkeypatch.setattr(urllib.request, "urlopen", lambda *a, **k: FakeResponse(data, len(data)))
    dest = tmp_path / "f.bin"
    download.download("http://example.invalid/f", str(dest), len(data))
    assert dest.read_bytes() == data
    assert capsys.readouterr().err.startswith("\rdownloading f.bin:  35.0% (1.0/3.0 MB)")
    with pytest.raises(ValueError, match="expected 6000000"):   # the server's size, not the one expected
        download.download("http://example.invalid/f", str(tmp_path / "g.bin"), 6_000_000)
    assert capsys.readouterr().err.startswith("\rdownloading g.bin:  35.0% (1.0/3.0 MB)")


def test_shakespeare_input_naming_a_folder_is_refused(tmp_path, monkeypatch):
    """SHAKESPEARE_INPUT=<a folder> is one line, not read as the text (a hunt: a changed line did this, and no test
    failed)."""
    monkeypatch.setenv("SHAKESPEARE_INPUT", str(tmp_path))
    with pytest.raises(UserError, match=f"SHAKESPEARE_INPUT={tmp_path}: no such file"):
        download.shakespeare_path(str(tmp_path / "out"))


# ----------------------------------------------------------------------------- GPT-2 BPE

def test_gpt2_from_ranks_file(gpt2_file):
    enc = tokenizers.get_gpt2_encoding()
    assert enc.name == "gpt2" and enc.n_vocab == 50257 and enc.eot_token == 50256
    assert enc.encode_ordinary("Hello world") == [15496, 995]
    assert enc.decode(enc.encode_ordinary(UNICODE_TEXT)) == UNICODE_TEXT


def test_gpt2_regex_matches_tiktoken_reference(gpt2_file):
    """Our hand-written GPT-2 pattern splits text exactly like tiktoken's own gpt2 pattern."""
    from tiktoken_ext.openai_public import r50k_pat_str
    ours = tokenizers.get_gpt2_encoding()
    ref = tiktoken.Encoding(name="ref", pat_str=r50k_pat_str, mergeable_ranks=ours._mergeable_ranks,
                            special_tokens={"<|endoftext|>": 50256})
    text = (SMALL_TEXT + UNICODE_TEXT + " I'm you're they'll it's we've he'd  \n\n  x2024 3.14 "
            "HELLO'S  trailing   \n\t\t end   ")
    assert ours.encode_ordinary(text) == ref.encode_ordinary(text)


def test_gpt2_offline_error_is_one_line(monkeypatch):
    monkeypatch.delenv("GPT2_TIKTOKEN_FILE", raising=False)

    def fail(name):
        raise ConnectionError("Failed to resolve 'openaipublic.blob.core.windows.net'\n(more)")
    monkeypatch.setattr(tiktoken, "get_encoding", fail)
    with pytest.raises(UserError) as exc:
        tokenizers.get_gpt2_encoding()
    msg = str(exc.value)
    assert "\n" not in msg and "(fix: " in msg and "GPT2_TIKTOKEN_FILE" in msg


def test_gpt2_ranks_file_missing(tmp_path):
    with pytest.raises(UserError, match="not found"):
        tokenizers.get_gpt2_encoding(str(tmp_path / "missing.tiktoken"))


def test_a_mended_ranks_file_is_read_again(tmp_path, gpt2_file, monkeypatch):
    """tiktoken.load kept a copy of a local ranks file in its cache, by path: a file mended as the fix said was
    refused again, with the same line, in every later process (a hunt). The file is read as it is now."""
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "cache"))   # tiktoken's, for the old code
    path = tmp_path / "ranks.tiktoken"
    lines = open(gpt2_file, "rb").read().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:1000]))
    with pytest.raises(UserError, match="has 1000 ranks, expected 50256"):
        tokenizers.get_gpt2_encoding(str(path))
    path.write_bytes(b"".join(lines))   # the fix, followed
    tokenizers._gpt2_encoding_from_file.cache_clear()   # a new process
    assert tokenizers.get_gpt2_encoding(str(path)).encode_ordinary("Hello world") == [15496, 995]
    assert not (tmp_path / "cache").exists()   # nothing written for a file read


def test_token_files_of_another_program_are_replaced_only_with_force(tmp_path):
    """A nanoGPT GPT-2 folder (train.bin, val.bin, no meta.json) was taken for a free one and replaced without a
    word, exit code 0 (a hunt); an interrupted prepare's own files (PREPARING) are still replaced."""
    text = tmp_path / "small.txt"
    text.write_text(SMALL_TEXT * 20)
    theirs = tmp_path / "owt"
    theirs.mkdir()
    np.arange(1000, dtype=np.uint16).tofile(theirs / "train.bin")
    np.arange(100, dtype=np.uint16).tofile(theirs / "val.bin")
    before = (theirs / "train.bin").read_bytes()
    args = [f"--input={text}", f"--out_dir={theirs}"]
    one_error_line(prepare.main, args, "holds train.bin, val.bin without a readable meta.json",
                   "--force")
    assert (theirs / "train.bin").read_bytes() == before and sorted(os.listdir(theirs)) == ["train.bin", "val.bin"]
    prepare.main([*args, "--force"])
    assert (theirs / "meta.json").exists() and not (theirs / text_dataset.PREPARING).exists()
    ours = tmp_path / "interrupted"
    text_dataset.begin_writing(str(ours))   # a prepare stopped after its first file
    text_dataset.write_bin(str(ours / "train.bin"), np.arange(10))
    prepare.main([f"--input={text}", f"--out_dir={ours}"])
    assert (ours / "meta.json").exists() and not (ours / text_dataset.PREPARING).exists()


def test_a_projects_own_files_are_replaced_only_with_force(tmp_path):
    """An --out_dir holding a test.bin or coverage.png, and no dataset of ours, lost them without a word, exit code 0
    (prepare removes a dataset's old files; a hunt): refused, as another program's token files are."""
    text = tmp_path / "small.txt"
    text.write_text(SMALL_TEXT * 20)
    mine = tmp_path / "myproj"
    mine.mkdir()
    (mine / "test.bin").write_text("precious")
    (mine / "coverage.png").write_text("a figure")
    one_error_line(prepare.main, [f"--input={text}", f"--out_dir={mine}"],
                   "holds test.bin, coverage.png without a readable meta.json", "--force")
    assert sorted(os.listdir(mine)) == ["coverage.png", "test.bin"]
    # a meta.json that is not a dataset's, the likeliest of them, was removed without --force (a hunt)
    for text_of_it in ('{"project": "x"}', "[1, 2, 3]", "not json"):
        own = tmp_path / "own"
        own.mkdir(exist_ok=True)
        (own / "meta.json").write_text(text_of_it)
        one_error_line(prepare.main, [f"--input={text}", f"--out_dir={own}"], "is not a dataset's meta.json",
                       "--force")
        assert (own / "meta.json").read_text() == text_of_it and os.listdir(own) == ["meta.json"]
    prepare.main([f"--input={text}", f"--out_dir={own}", "--force"])
    assert json.loads((own / "meta.json").read_text())["vocab_size"] > 0


def test_preparing_the_same_dataset_again_leaves_the_folder_as_it_is(tmp_path, capsys):
    """train.py reads train.bin again at every batch; prepare.py run again on its folder (the same text, accepted)
    removed train.bin and val.bin before writing them, and the run died with a FileNotFoundError, its iterations
    lost (a hunt). The same dataset, whole, is left as it is; a damaged one (a split cut short) is written again,
    and --force rewrites it (removing first: a run must not go on with other text read by the old vocabulary)."""
    text = tmp_path / "small.txt"
    text.write_text(SMALL_TEXT * 20)
    out = tmp_path / "data"
    args = [f"--input={text}", f"--out_dir={out}"]
    prepare.main(args)
    names = ("meta.json", "train.bin", "val.bin")
    for name in names:   # a link keeps each file's inode taken: a file written anew has another
        os.link(out / name, tmp_path / name)
    capsys.readouterr()
    prepare.main(args)
    assert all(os.path.samefile(out / name, tmp_path / name) for name in names)
    assert f"{out} holds this dataset already: unchanged" in capsys.readouterr().out
    prepare.main([*args, "--force"])   # asked: written again
    assert not os.path.samefile(out / "train.bin", tmp_path / "train.bin")
    val = (out / "val.bin").read_bytes()
    for damaged in (val[:-2], bytes(len(val))):   # cut short, or of other ids (a review): written again
        (out / "val.bin").write_bytes(damaged)
        prepare.main(args)
        assert (out / "val.bin").read_bytes() == val and f"wrote {out}" in capsys.readouterr().out
    prepare.main(["again_char", *args])   # another name for it: its meta.json says so (a review)
    assert json.loads((out / "meta.json").read_text())["dataset"] == "again_char"


def test_a_prepare_stopped_over_nanogpts_meta_pkl_is_not_a_dataset(tmp_path):
    """prepare.py --force over a nanoGPT char folder, stopped before its meta.json: the new token files beside the
    old meta.pkl counted as a prepared dataset, and train.py trained on them, sample.py decoded them, with the old
    vocabulary (a hunt). The marker says the folder is being written."""
    import pickle
    folder = tmp_path / "ng"
    folder.mkdir()
    chars = sorted(set(SMALL_TEXT))
    with open(folder / "meta.pkl", "wb") as f:
        pickle.dump({"vocab_size": len(chars), "itos": dict(enumerate(chars)),
                     "stoi": {c: i for i, c in enumerate(chars)}}, f)
    for split in ("train", "val"):
        np.arange(50, dtype=np.uint16).tofile(folder / f"{split}.bin")
    assert tokenizer.is_prepared(str(folder))
    text_dataset.begin_writing(str(folder))   # a prepare --force stopped after its first file
    text_dataset.write_bin(str(folder / "train.bin"), np.arange(3))
    assert not tokenizer.is_prepared(str(folder))
    with pytest.raises(UserError, match="is being prepared, or its prepare was stopped halfway"):
        tokenizer.load_meta(str(folder))


def test_a_compact_folder_stopped_halfway_names_compact_vocab(tmp_path):
    """A dataset folder whose prepare was stopped halfway: the fix names prepare.py and, for a compact vocabulary's
    folder, tools.pangu.compact_vocab (an exploration as a new user found it: the fix named only prepare.py, which
    makes no compact vocabulary)."""
    folder = tmp_path / "notes_v300"
    folder.mkdir()
    (folder / tokenizer.PREPARING).touch()
    with pytest.raises(UserError, match=r"\(fix: prepare it with `python prepare.py <dataset> --out_dir=.*notes_v300` "
                                        r"\(a compact vocabulary's or WikiText-103's: python -m tools.pangu.compact_vocab"):
        tokenizer.load_meta(str(folder))


def test_shakespeare_gpt2_ids_equal_tiktokens_gpt2(tmp_path, gpt2_file):
    """The token files hold tiktoken's GPT-2 ids of the documented 90/10 character split (an <|endoftext|> in the text
    is plain text); meta.json's vocab_size and eot are that encoding's, and dataset.py's tokenizer encodes like it."""
    # one <|endoftext|> in each split (the val one alone let an encode of the train part with specials pass)
    text = "<|endoftext|>" + SMALL_TEXT + UNICODE_TEXT + " runs   of  spaces\n\n\n  <|endoftext|> I'll we're x2024"
    out = tmp_path / "s"
    prepare.prepare("shakespeare", out_dir=str(out), input_path=write_input(tmp_path, text))
    meta = read_meta(out)
    ref = reference_gpt2(gpt2_file)
    splits = {s: ref.encode_ordinary(part) for s, part in split_as_documented(text).items()}
    assert all(split_as_documented(text)[s].count("<|endoftext|>") == 1 for s in splits)
    expected = {"dataset": "shakespeare", "tokenizer": "gpt2", "vocab_size": ref.n_vocab, "eot_token": ref.eot_token,
                "splits": {s: {"tokens": len(ids)} for s, ids in splits.items()}}
    assert {k: meta.get(k) for k in expected} == expected
    for split, ids in splits.items():
        assert read_bin(out / f"{split}.bin").tolist() == ids
    tok = tokenizer.load_tokenizer(str(out))
    assert tok.encode(text) == ref.encode(text, allowed_special="all") and tok.eot_token == ref.eot_token
    assert tok.encode("Hello world<|endoftext|>") == [15496, 995, 50256]


# ----------------------------------------------------------------------------- bad input leaves the folder as it was

def prepared_folder(tmp_path):
    """An existing dataset folder (a finished shakespeare_char prepare) and {file name: bytes} of it."""
    out = tmp_path / "data"
    prepare.prepare("shakespeare_char", out_dir=str(out), input_path=write_input(tmp_path))
    return out, {p.name: p.read_bytes() for p in out.iterdir()}


def test_too_many_distinct_characters_leave_the_folder_as_it_was(tmp_path):
    """Over 65,536 distinct characters do not fit uint16 ids: refused before meta.json goes (it used to be deleted
    first, then an AssertionError)."""
    out, before = prepared_folder(tmp_path)
    text = "".join(chr(c) for c in range(0x100, 0x100 + 70_000) if not 0xD800 <= c < 0xE000)
    big = tmp_path / "big.txt"
    big.write_text(text, encoding="utf-8")
    one_error_line(prepare.main, ["shakespeare_char", "--input", str(big), "--out_dir", str(out)],
                   f"{len(set(text)):,} distinct characters", "65,536")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


# ----------------------------------------------------------------------------- datasets that tools prepare

@pytest.mark.parametrize("dataset,command", [
    ("shakespeare_v400", "python -m tools.pangu.compact_vocab shakespeare --vocab_size 400"),
    ("wikitext103", "python -m tools.wikitext103"),
    ("wikitext103_v8192", "python -m tools.wikitext103 --vocab_size 8192"),
])
def test_a_dataset_of_a_tool_is_refused_with_its_command(tmp_path, monkeypatch, dataset, command):
    """prepare.py prepares the two tinyshakespeare datasets; for the others it names the tool's exact command in
    one line and writes nothing (train.py's first run passes the line on)."""
    monkeypatch.chdir(tmp_path)
    out, before = prepared_folder(tmp_path)   # data/: an existing dataset folder, which must stay as it was
    message = one_error_line(prepare.main, [dataset], f"dataset '{dataset}' is prepared by a tool, not by prepare.py")
    assert message.endswith(f"(fix: {command})")
    one_error_line(prepare.main, [dataset, "--out_dir", str(out)], f"(fix: {command} --out_dir {out})")
    with pytest.raises(UserError, match=re.escape(f"(fix: {command})") + "$"):
        prepare.prepare(dataset, out_dir=os.path.join("data", dataset))
    assert sorted(os.listdir(tmp_path)) == ["data", "input.txt"]
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert text_dataset.tool_command(dataset) == command and text_dataset.tool_command("shakespeare") is None


def test_a_dataset_of_a_tool_through_train_py(tmp_path, monkeypatch, tiny_train_config):
    """train.py prepares a missing dataset on its first run; for a tool's dataset it stops with the command."""
    import train
    monkeypatch.chdir(tmp_path)
    cfg = dict({k: v for k, v in tiny_train_config.items() if k != "data_dir"}, dataset="shakespeare_v1024")
    with pytest.raises(SystemExit) as e:
        train.main([f"--{k}={v}" for k, v in cfg.items()])
    assert e.value.code == ("error: preparing dataset 'shakespeare_v1024' failed: dataset 'shakespeare_v1024' is "
                            "prepared by a tool, not by prepare.py (fix: python -m tools.pangu.compact_vocab "
                            "shakespeare --vocab_size 1024)")
    assert not (tmp_path / "data" / "shakespeare_v1024").exists()


def test_the_split_is_the_fraction_asked_for(tmp_path, capsys, monkeypatch):
    """int(90 * (1 - 0.3)) is 62 in floats: the first 70% of a 90-character text was 62 characters, not 63 (5,154
    pairs of a length below 200,000 and a fraction of 0.004, 0.07, 0.1, 0.2, 0.3 or 0.5 were one short).
    tinyshakespeare's split is unchanged. And 99.6% was printed as 'the first 100%'."""
    assert [len(part) for part in prepare.split_text("x" * 90, 0.3)] == [63, 27]
    assert [len(part) for part in prepare.split_text("x" * 1115394, 0.1)] == [1003854, 111540]
    text = tmp_path / "notes.txt"
    text.write_text("abcdefghij" * 250)
    prepare.prepare(input_path=str(text), out_dir=str(tmp_path / "d"), val_fraction=0.004)
    assert "train has 2,490 tokens (the first 99.6% of the text), val has 10" in capsys.readouterr().out
    # a folder an earlier prepare.py split in floats: prepared again, refused for what it is, then --force
    text.write_text("abcdefghij" * 9)

    def float_split(text, val_fraction=0.1):
        n = int(len(text) * (1 - val_fraction))
        return text[:n], text[n:]

    with monkeypatch.context() as m:
        m.setattr(prepare, "split_text", float_split)
        prepare.prepare(input_path=str(text), out_dir=str(tmp_path / "old"), val_fraction=0.3)
    with pytest.raises(UserError, match="split a character early by an earlier prepare.py"):
        prepare.prepare(input_path=str(text), out_dir=str(tmp_path / "old"), val_fraction=0.3)
    prepare.prepare(input_path=str(text), out_dir=str(tmp_path / "old"), val_fraction=0.3, force=True)
    assert "train has 63 tokens" in capsys.readouterr().out


def test_unknown_dataset():
    for name in ("openwebtext", "shakespeare_vx", "wikitext2"):
        with pytest.raises(UserError, match=f"unknown dataset '{name}' .*tools.wikitext103"):
            prepare.prepare(name)
    with pytest.raises(TypeError):   # the compact vocabulary is the tool's
        prepare.prepare("shakespeare_char", vocab_size=300)


def test_a_text_given_as_the_dataset_name_names_input(tmp_path, monkeypatch):
    """`python prepare.py notes.txt` suggested `python prepare.py notes.txt --input=YOUR_TEXT.txt`, which failed
    too (not a plain folder name)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("to be or not to be, that is the question\n" * 20)
    with pytest.raises(SystemExit) as e:
        prepare.main(["notes.txt"])
    assert e.value.code == "error: 'notes.txt' is a file, not a dataset name (fix: python prepare.py --input=notes.txt)"
    assert not (tmp_path / "data").exists()
    prepare.main(["--input=notes.txt"])   # the fix
    assert (tmp_path / "data" / "notes_char" / "meta.json").exists()


def test_options_are_every_commands_keys(tmp_path, monkeypatch):
    """prepare.py reads --key=value as every command (issue 56): a key is whole (argparse took `--inp` for
    `--input`), a bad one is one line naming the right key, before anything is written; `--key value` and a bare
    `--force` work as the docs show them."""
    monkeypatch.chdir(tmp_path)
    write_input(tmp_path)
    one_error_line(prepare.main, ["--inp=input.txt"], "unknown config key 'inp'", "did you mean --input?")
    assert not (tmp_path / "data").exists()
    prepare.main(["--input", "input.txt", "--tokenizer=char", "--val_fraction=0.2"])
    assert read_meta(tmp_path / "data" / "input_char")["text"]["val_fraction"] == 0.2
    write_input(tmp_path, SMALL_TEXT + "another text")
    prepare.main(["--input=input.txt", "--force"])
    assert read_meta(tmp_path / "data" / "input_char")["text"]["characters"] == len(SMALL_TEXT + "another text")


def test_a_missing_ranks_file_names_where_its_path_came_from(tmp_path, monkeypatch):
    """--gpt2_ranks=<missing>: the fix names --gpt2_ranks (it named only GPT2_TIKTOKEN_FILE); a missing file the
    variable names: the variable."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("some notes of mine\n" * 50, encoding="utf-8")
    monkeypatch.delenv("GPT2_TIKTOKEN_FILE", raising=False)
    one_error_line(prepare.main, ["--input=notes.txt", "--tokenizer=gpt2", f"--gpt2_ranks={tmp_path}/none"],
                   "GPT-2 ranks file not found", "(fix: point --gpt2_ranks at a gpt2.tiktoken ranks file)")
    monkeypatch.setenv("GPT2_TIKTOKEN_FILE", str(tmp_path / "nothing"))
    one_error_line(prepare.main, ["--input=notes.txt", "--tokenizer=gpt2"],
                   "GPT-2 ranks file not found", "(fix: point GPT2_TIKTOKEN_FILE at a gpt2.tiktoken ranks file)")
    assert sorted(os.listdir(tmp_path)) == ["notes.txt"]


def test_a_forced_prepare_on_a_full_disk_keeps_the_old_dataset(tmp_path):
    """--force writes the new token files before it removes the folder's dataset: a write that fails (a full disk;
    here a file-size limit) keeps it, and says so (it said "any previous version is kept" of a file already removed,
    a hunt: atomic_path says it only of a file that is there)."""
    small, big = tmp_path / "small.txt", tmp_path / "big.txt"
    small.write_text("hello world, a tiny text\n" * 40)
    big.write_text("another text altogether\n" * 4000)
    out = tmp_path / "notes"
    prepare.main([f"--input={small}", f"--out_dir={out}"])
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    # writes over 8 KB fail with EFBIG, as on a full disk (Python ignores SIGXFSZ)
    command = f"ulimit -f 8; {sys.executable} {os.path.join(root, 'prepare.py')} --input={big} --out_dir={out} --force"
    r = subprocess.run(["bash", "-c", command], capture_output=True, text=True, stdin=subprocess.DEVNULL)
    assert r.returncode == 1 and f"cannot write {out / 'train.bin'}: File too large (its previous version is kept) " \
        f"(fix: " in r.stderr, r.stderr
    assert json.loads((out / "meta.json").read_text())["text"]["path"] == str(small)


def test_a_forced_prepare_that_fails_halfway_keeps_the_old_dataset(tmp_path, monkeypatch):
    """prepare.py --force of another text that fails while writing (a full disk at val.bin) leaves the old
    dataset whole and usable, and says its file is kept; the same command then writes the new one (an exploration
    as a new user found it: --force removed the old dataset first, and the failure left a folder with no dataset)."""
    import errno
    small, big = tmp_path / "small.txt", tmp_path / "big.txt"
    small.write_text("hello world, a tiny text\n" * 40)
    big.write_text("another text altogether\n" * 40)
    out = tmp_path / "notes"
    prepare.main([f"--input={small}", f"--out_dir={out}"])
    before = {name: (out / name).read_bytes() for name in ("meta.json", "train.bin", "val.bin")}
    write_ids = text_dataset.write_ids

    def disk_full_at_val(path, ids):
        if ".val.bin." in path:
            raise OSError(errno.ENOSPC, "No space left on device")
        write_ids(path, ids)

    monkeypatch.setattr(text_dataset, "write_ids", disk_full_at_val)
    one_error_line(prepare.main, [f"--input={big}", f"--out_dir={out}", "--force"],
                   f"cannot write {out / 'val.bin'}: No space left on device (its previous version is kept)")
    assert {name: (out / name).read_bytes() for name in before} == before
    assert sorted(os.listdir(out)) == [".lock", "meta.json", "train.bin", "val.bin"]   # no temporary file left
    monkeypatch.undo()
    prepare.main([f"--input={big}", f"--out_dir={out}", "--force"])
    assert json.loads((out / "meta.json").read_text())["text"]["path"] == str(big)


# --- vocabularies and names at their edges (each untested until a hunt changed tokenizers.py and text_dataset.py) --

def test_a_ranks_file_of_another_size_is_refused_and_a_blank_line_is_not(gpt2_file, tmp_path):
    """A ranks file with one token more (or cl100k's 100k) passed as GPT-2 when only fewer were refused; a file that
    ends in a blank line is still GPT-2's."""
    import base64
    text = Path(gpt2_file).read_bytes()
    longer = tmp_path / "longer.tiktoken"
    longer.write_bytes(text.rstrip(b"\n") + b"\n" + base64.b64encode(b"\x00no such token\x01") + b" 50256\n")
    with pytest.raises(UserError, match="has 50257 ranks, expected 50256 for GPT-2"):
        tokenizers._gpt2_encoding_from_file(str(longer))
    blank = tmp_path / "blank.tiktoken"
    blank.write_bytes(text + b"\n\n")
    assert tokenizers._gpt2_encoding_from_file(str(blank)).encode_ordinary("hello") == [31373]


def test_a_char_vocabulary_of_65536_fits_uint16():
    tokenizers.check_char_count(2**16)
    with pytest.raises(UserError, match="65,537 distinct characters"):
        tokenizers.check_char_count(2**16 + 1)


def test_dataset_names_of_odd_texts():
    """A text whose name has no letter makes data/text_char (it made data/_char); '..' is no dataset name."""
    assert text_dataset.name_of_text("/tmp/!!.txt") == "text"
    with pytest.raises(UserError, match="not a plain folder name"):
        text_dataset.check_dataset_name("..")
    # 4 tokens in all: a val_fraction that splits them 2 + 2 is the fix; 3 cannot be split so
    with pytest.raises(UserError, match=r"fix: a longer text, or a larger --val_fraction\)"):
        text_dataset.check_long_enough("t.txt", 4, {"train": {"tokens": 3}, "val": {"tokens": 1}}, 0.25)
    with pytest.raises(UserError, match=r"fix: a longer text\)"):
        text_dataset.check_long_enough("t.txt", 3, {"train": {"tokens": 2}, "val": {"tokens": 1}}, 0.25)


def test_prepare_imports_no_torch():
    """prepare.py needs no torch, and imports none: --help answers in a tenth of a second, and a Ctrl-C in its
    first second is `interrupted` (an exploration as a new user found it: torch imported through
    safety_net.fileio, a second before anything, and a 40-line traceback for an early Ctrl-C)."""
    r = subprocess.run([sys.executable, "-c", "import prepare, sys; print('torch' in sys.modules)"], cwd=ROOT,
                       capture_output=True, text=True, stdin=subprocess.DEVNULL)
    assert (r.returncode, r.stdout.strip()) == (0, "False"), r.stderr
