"""Tests for prepare.py: datasets, GPT-2 BPE offline, WikiText-103 layout, compact tokenizer.

No network: downloads are monkeypatched to fail, archives are built here, and the GPT-2 ranks
come from GPT2_TIKTOKEN_FILE or ../shared/data/gpt2/gpt2.tiktoken (tests needing it skip otherwise).
"""
import base64
import io
import json
import os
import sys
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

import numpy as np
import pytest
import tiktoken

import prepare
from configurator import UserError
import dataset as tokenizer

ROOT = Path(__file__).resolve().parents[1]

SMALL_TEXT = ("First Citizen:\nBefore we proceed any further, hear me speak.\n\n"
              "All:\nSpeak, speak.\n\nFirst Citizen:\nYou are all resolved rather to die than to famish?\n") * 5
UNICODE_TEXT = "naïve café — 日本語 🙂 \x00\x7f\u200b ROMEO: wherefore art thou, 'tis 1234 \t\n  x"


def gpt2_ranks_file():
    """The local GPT-2 ranks file: env GPT2_TIKTOKEN_FILE, else ../shared relative to the repo."""
    env = os.environ.get("GPT2_TIKTOKEN_FILE")
    if env and os.path.isfile(env):
        return env
    fallback = ROOT.parent / "shared" / "data" / "gpt2" / "gpt2.tiktoken"
    return str(fallback) if fallback.is_file() else None


@pytest.fixture
def gpt2_file(monkeypatch):
    path = gpt2_ranks_file()
    if path is None:
        pytest.skip("no GPT-2 ranks file: set GPT2_TIKTOKEN_FILE or provide ../shared/data/gpt2/gpt2.tiktoken")
    monkeypatch.setenv("GPT2_TIKTOKEN_FILE", path)
    return path


@pytest.fixture
def offline(monkeypatch):
    """Any download attempt fails like it does without network."""
    def no_network(*args, **kwargs):
        raise urllib.error.URLError("[Errno -2] Name or service not known")
    monkeypatch.setattr(urllib.request, "urlopen", no_network)
    monkeypatch.delenv("SHAKESPEARE_INPUT", raising=False)
    monkeypatch.delenv("WIKITEXT103_SOURCE", raising=False)


def read_bin(path):
    return np.memmap(path, dtype=np.uint16, mode="r")


def read_meta(out_dir):
    return json.loads((Path(out_dir) / "meta.json").read_text(encoding="utf-8"))


def write_input(tmp_path, text=SMALL_TEXT):
    path = tmp_path / "input.txt"
    path.write_text(text, encoding="utf-8")
    return str(path)


# ----------------------------------------------------------------------------- shakespeare_char

def test_shakespeare_char_small(tmp_path):
    out = tmp_path / "sc"
    prepare.prepare("shakespeare_char", out_dir=str(out), input_path=write_input(tmp_path))
    meta = read_meta(out)
    chars = sorted(set(SMALL_TEXT))
    assert meta["dataset"] == "shakespeare_char" and meta["tokenizer"] == "char"
    assert meta["chars"] == chars and meta["vocab_size"] == len(chars)
    n_train = int(len(SMALL_TEXT) * 0.9)
    train, val = read_bin(out / "train.bin"), read_bin(out / "val.bin")
    assert train.dtype == np.uint16 and len(train) == n_train and len(val) == len(SMALL_TEXT) - n_train
    tok = tokenizer.load_tokenizer(str(out))
    assert tok.decode(train.tolist()) + tok.decode(val.tolist()) == SMALL_TEXT
    assert tok.decode(tok.encode("Speak")) == "Speak" and tok.eot_token is None
    with pytest.raises(ValueError, match="not in the vocabulary"):
        tok.encode("Z")


def test_shakespeare_input_from_env_and_cli(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SHAKESPEARE_INPUT", write_input(tmp_path))
    prepare.main(["shakespeare_char", "--out_dir", str(tmp_path / "a")])
    assert read_meta(tmp_path / "a")["vocab_size"] == len(set(SMALL_TEXT))
    assert "train has" in capsys.readouterr().out


def test_download_failure_is_one_line(tmp_path, monkeypatch, offline):
    monkeypatch.chdir(tmp_path)  # no data/shakespeare_char/input.txt to fall back on
    with pytest.raises(UserError) as exc:
        prepare.prepare("shakespeare_char", out_dir=str(tmp_path / "sc"))
    msg = str(exc.value)
    assert "\n" not in msg
    assert msg.startswith("could not download tinyshakespeare (")
    assert "--input PATH" in msg and "SHAKESPEARE_INPUT" in msg
    assert not list((tmp_path / "sc").glob("*.part"))


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
        prepare.download("http://example.invalid/f", dest, expected_size=10)
    with pytest.raises(ValueError, match="sha256"):
        prepare.download("http://example.invalid/f", dest, expected_size=3000, expected_sha256="0" * 64)
    assert not os.path.exists(dest) and not os.path.exists(dest + ".part")
    import hashlib
    prepare.download("http://example.invalid/f", dest, 3000, hashlib.sha256(data).hexdigest())
    assert Path(dest).read_bytes() == data
    # a truncated transfer (fewer bytes than Content-Length) is rejected
    monkeypatch.setattr(urllib.request, "urlopen", lambda *a, **k: FakeResponse(data, 4000))
    with pytest.raises(ValueError, match="expected 4000"):
        prepare.download("http://example.invalid/f", str(tmp_path / "g.bin"))


# ----------------------------------------------------------------------------- GPT-2 BPE

def test_gpt2_from_ranks_file(gpt2_file):
    enc = tokenizer.get_gpt2_encoding()
    assert enc.name == "gpt2" and enc.n_vocab == 50257 and enc.eot_token == 50256
    assert enc.encode_ordinary("Hello world") == [15496, 995]
    assert enc.decode(enc.encode_ordinary(UNICODE_TEXT)) == UNICODE_TEXT


def test_gpt2_regex_matches_tiktoken_reference(gpt2_file):
    """Our hand-written GPT-2 pattern splits text exactly like tiktoken's own gpt2 pattern."""
    from tiktoken_ext.openai_public import r50k_pat_str
    ours = tokenizer.get_gpt2_encoding()
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
        tokenizer.get_gpt2_encoding()
    msg = str(exc.value)
    assert "\n" not in msg and "(fix: " in msg and "GPT2_TIKTOKEN_FILE" in msg


def test_gpt2_ranks_file_missing(tmp_path):
    with pytest.raises(UserError, match="not found"):
        tokenizer.get_gpt2_encoding(str(tmp_path / "missing.tiktoken"))


def test_shakespeare_gpt2(tmp_path, gpt2_file):
    out = tmp_path / "s"
    prepare.prepare("shakespeare", out_dir=str(out), input_path=write_input(tmp_path))
    meta = read_meta(out)
    assert meta["tokenizer"] == "gpt2" and meta["vocab_size"] == 50257 and meta["eot_token"] == 50256
    tok = tokenizer.load_tokenizer(str(out))
    train, val = read_bin(out / "train.bin"), read_bin(out / "val.bin")
    n = int(len(SMALL_TEXT) * 0.9)
    assert tok.decode(train.tolist()) == SMALL_TEXT[:n] and tok.decode(val.tolist()) == SMALL_TEXT[n:]
    assert meta["splits"]["train"]["tokens"] == len(train)
    assert tok.encode("Hello world<|endoftext|>") == [15496, 995, 50256]


# ----------------------------------------------------------------------------- WikiText-103

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
    arts = prepare.split_articles(raw)
    assert [a.decode() for a in arts] == WIKI["train"]  # sub-headings and '= =' text don't split
    assert arts[1].startswith(b" \n = Tower Building = \n")
    assert prepare.split_articles(b"no heading at all\n") == [b"no heading at all\n"]


@pytest.mark.parametrize("kind", ["zip", "folder"])
def test_wikitext103_layout(tmp_path, monkeypatch, gpt2_file, offline, kind):
    monkeypatch.setattr(prepare, "GROUP_BYTES", 150)  # several article groups -> eot between groups too
    out = tmp_path / "w"
    prepare.prepare("wikitext103", out_dir=str(out), source=make_wikitext(tmp_path, kind), num_proc=2)
    meta = read_meta(out)
    assert meta["tokenizer"] == "gpt2" and meta["eot_token"] == 50256
    enc = tokenizer.get_gpt2_encoding()
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
        for i, art in enumerate(prepare.split_articles(text.encode())):
            expect += ([50256] if i else []) + enc.encode_ordinary(art.decode())
        assert ids == expect


def test_wikitext103_malformed(tmp_path, offline):
    bad = tmp_path / "bad.zip"
    bad.write_bytes(b"this is not a zip file")
    with pytest.raises(UserError) as exc:
        prepare.prepare("wikitext103", out_dir=str(tmp_path / "o"), source=str(bad))
    assert "\n" not in str(exc.value) and "not a valid zip" in str(exc.value)

    incomplete = tmp_path / "incomplete.zip"
    with zipfile.ZipFile(incomplete, "w") as zf:
        zf.writestr("wikitext-103-raw/wiki.train.raw", " = A = \n")
    with pytest.raises(UserError, match="lacks wikitext-103-raw/wiki.valid.raw"):
        prepare.prepare("wikitext103", out_dir=str(tmp_path / "o"), source=str(incomplete))
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="lacks"):
        prepare.prepare("wikitext103", out_dir=str(tmp_path / "o"), source=str(tmp_path / "empty"))


def test_wikitext103_download_failure(tmp_path, offline):
    with pytest.raises(UserError) as exc:
        prepare.prepare("wikitext103", out_dir=str(tmp_path / "o"))
    msg = str(exc.value)
    assert "\n" not in msg and msg.startswith("could not download WikiText-103") and "--source" in msg


# ----------------------------------------------------------------------------- bad input leaves the folder as it was

def prepared_folder(tmp_path):
    """An existing dataset folder (a finished shakespeare_char prepare) and {file name: bytes} of it."""
    out = tmp_path / "data"
    prepare.prepare("shakespeare_char", out_dir=str(out), input_path=write_input(tmp_path))
    return out, {p.name: p.read_bytes() for p in out.iterdir()}


def one_line_error(argv, *words):
    with pytest.raises(SystemExit) as e:
        prepare.main(argv)
    message = e.value.code
    assert isinstance(message, str) and message.startswith("error: ") and "\n" not in message, message
    assert "(fix: " in message and all(w in message for w in words), message


def test_too_many_distinct_characters_leave_the_folder_as_it_was(tmp_path):
    """Over 65,536 distinct characters do not fit uint16 ids: refused before meta.json goes (it used to be deleted
    first, then an AssertionError)."""
    out, before = prepared_folder(tmp_path)
    text = "".join(chr(c) for c in range(0x100, 0x100 + 70_000) if not 0xD800 <= c < 0xE000)
    big = tmp_path / "big.txt"
    big.write_text(text, encoding="utf-8")
    one_line_error(["shakespeare_char", "--input", str(big), "--out_dir", str(out)],
                   f"{len(set(text)):,} distinct characters", "65,536")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_wikitext_that_is_not_utf8_leaves_the_folder_as_it_was(tmp_path, offline):
    out, before = prepared_folder(tmp_path)
    path = tmp_path / "bad.zip"
    with zipfile.ZipFile(path, "w") as zf:
        for split, name in WIKI_FILES.items():
            raw = "".join(WIKI[split]).encode("utf-8")
            zf.writestr(f"wikitext-103-raw/{name}", raw[:40] + b"\xff\xfe" + raw[40:] if split == "val" else raw)
    one_line_error(["wikitext103", "--source", str(path), "--out_dir", str(out)],
                   "the val split is not UTF-8 text", "invalid start byte at byte 40")
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


# ----------------------------------------------------------------------------- compact tokenizer

@pytest.fixture
def gpt2_ranks(gpt2_file):
    return prepare.gpt2_ranks(tokenizer.get_gpt2_encoding())


def test_merge_parents_follow_bpe(gpt2_ranks):
    # " the" is built from " t" + "he" in GPT-2 (not " " + "the"): the split comes from merge order
    assert prepare.merge_parents(b" the", gpt2_ranks) == (b" t", b"he")
    for tok in [b"Hello", b" world", b"ization", b" Shakespeare", b"\n\n"]:
        a, b = prepare.merge_parents(tok, gpt2_ranks)
        assert a + b == tok and gpt2_ranks[a] < gpt2_ranks[tok] and gpt2_ranks[b] < gpt2_ranks[tok]
    assert prepare.merge_parents(b"a", gpt2_ranks) == ()


def check_compact(tokens, ranks, vocab_size):
    """vocab size, all bytes, parents kept and reachable by BPE over the subset, rank order."""
    kept = set(tokens)
    assert len(tokens) + 1 == vocab_size  # + eot
    assert all(bytes([b]) in kept for b in range(256))
    assert [ranks[t] for t in tokens] == sorted(ranks[t] for t in tokens)
    sub = {t: i for i, t in enumerate(tokens)}
    for tok in tokens:
        if len(tok) > 1:
            assert set(prepare.merge_parents(tok, ranks)) <= kept
            assert prepare.bpe_parts(tok, sub, sub[tok] + 1) == [tok]  # BPE over the subset builds it


@pytest.mark.parametrize("vocab_size", [257, 300, 1000])
def test_select_compact_tokens(gpt2_file, gpt2_ranks, vocab_size):
    enc = tokenizer.get_gpt2_encoding()
    counts = np.bincount(enc.encode_ordinary(SMALL_TEXT), minlength=50257)
    tokens = prepare.select_compact_tokens(counts, gpt2_ranks, vocab_size)
    check_compact(tokens, gpt2_ranks, vocab_size)
    # most frequent tokens are kept first
    top = [enc.decode_single_token_bytes(int(i)) for i in np.argsort(-counts, kind="stable")[:20]]
    if vocab_size >= 1000:
        assert set(top) <= set(tokens)


def test_select_compact_rejects_bad_size(gpt2_ranks):
    with pytest.raises(ValueError, match="vocab_size"):
        prepare.select_compact_tokens(np.zeros(50257), gpt2_ranks, 256)
    with pytest.raises(SystemExit, match="error: vocab_size"):
        prepare.main(["shakespeare", "--vocab_size", "100"])


def test_compact_shakespeare_roundtrip(tmp_path, monkeypatch, gpt2_file, gpt2_ranks, capsys):
    monkeypatch.chdir(tmp_path)  # default out_dir data/shakespeare_v400
    out = prepare.prepare("shakespeare", vocab_size=400, input_path=write_input(tmp_path),
                          n_layer=6, n_embd=384, plot=True)
    assert out == os.path.join("data", "shakespeare_v400")
    meta = read_meta(out)
    assert meta["tokenizer"] == "compact" and meta["vocab_size"] == 400 and meta["eot_token"] == 399
    assert meta["dataset"] == "shakespeare_v400" and (Path(out) / "coverage.png").is_file()
    tokens = [base64.b64decode(t) for t in meta["tokens"]]
    check_compact(tokens, gpt2_ranks, 400)
    tok = tokenizer.load_tokenizer(out)
    assert tok.vocab_size == 400 and tok.eot_token == 399
    for text in (UNICODE_TEXT, SMALL_TEXT, "Ωmega ∑ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 \U0010FFFF end"):
        ids = tok.encode(text)
        assert max(ids) < 400 and tok.decode(ids) == text
    assert tok.encode("a<|endoftext|>b")[1] == 399
    train = read_bin(Path(out) / "train.bin")
    assert int(train.max()) < 400 and tok.decode(train.tolist()) == SMALL_TEXT[:int(len(SMALL_TEXT) * 0.9)]
    report = capsys.readouterr().out
    assert "top-k" in report and "PEHL = 2*V*d / (2*V*d + 12*n_layer*d^2)" in report
    # dataset name form used by train.py's auto-prepare
    assert prepare.parse_dataset("shakespeare_v400") == ("shakespeare", 400)


def test_compact_wikitext103(tmp_path, gpt2_file, offline):
    out = tmp_path / "wc"
    prepare.prepare("wikitext103", out_dir=str(out), source=make_wikitext(tmp_path, "zip"),
                    vocab_size=300, num_proc=2, plot=False)
    meta = read_meta(out)
    assert meta["tokenizer"] == "compact" and meta["vocab_size"] == 300
    tok = tokenizer.load_tokenizer(str(out))
    ids = read_bin(out / "train.bin").tolist()
    assert max(ids) < 300 and ids.count(299) == len(WIKI["train"]) - 1
    assert tok.decode(ids).split("<|endoftext|>") == WIKI["train"]
    assert meta["splits"]["test"]["words"] == len("".join(WIKI["test"]).split())


def test_coverage_and_pehl():
    table = prepare.coverage_table([5, 0, 3, 2], [1, 2, 4, 10])
    assert table == [(1, 0.5), (2, 0.8), (4, 1.0), (10, 1.0)]
    v, layers, d = 50257, 12, 768
    assert prepare.pehl(v, layers, d) == pytest.approx(2 * v * d / (2 * v * d + 12 * layers * d * d))
    assert prepare.pehl(8192, layers, d) < prepare.pehl(v, layers, d)


def test_parse_dataset():
    assert prepare.parse_dataset("wikitext103") == ("wikitext103", None)
    with pytest.raises(ValueError, match="unknown dataset"):
        prepare.parse_dataset("openwebtext")
    with pytest.raises(ValueError, match="vocab_size works with"):
        prepare.prepare("shakespeare_char", vocab_size=300)


# ----------------------------------------------------------------------------- benchmark

def test_bench_tokenize(tmp_path, gpt2_file, capsys):
    from tools.bench_tokenize import bench_tokenize
    res = bench_tokenize(mb=0.2, input_path=write_input(tmp_path), num_proc=2)
    assert set(res) == {1, 2} and all(v > 0 for v in res.values())
    assert "MB/s" in capsys.readouterr().out


def test_merge_parents_are_the_last_bpe_merge():
    """BPE merges ' ' 'a' 'n' by lowest rank: ' a' (3) first, so ' an' comes from (' a', 'n'), not from the
    first split into two known tokens (' ', 'an')."""
    ranks = {b" ": 0, b"a": 1, b"n": 2, b" a": 3, b"an": 4, b" an": 5}
    assert prepare.merge_parents(b" an", ranks) == (b" a", b"n")
