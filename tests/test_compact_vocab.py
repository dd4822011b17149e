"""Tests for tools/pangu/compact_vocab.py, paper 003's compact tokenizer: merge parents, the choice of tokens,
coverage and PEHL, and the compact tinyshakespeare dataset (same text and split as prepare.py's shakespeare).

The GPT-2 ranks come from GPT2_TIKTOKEN_FILE or ../shared/data/gpt2/gpt2.tiktoken (tests needing it skip otherwise).
"""
import base64
import os
from pathlib import Path

import numpy as np
import pytest

from conftest import one_error_line
import prepare
from safety_net import dataset as tokenizer
from safety_net import tokenizers
from safety_net.configurator import UserError
from test_prepare import (SMALL_TEXT, UNICODE_TEXT, prepared_folder, read_bin, read_meta, reference_gpt2,
                          split_as_documented, write_input)
from tools.pangu import compact_vocab
from tools.pangu.compact_vocab import main


@pytest.fixture
def gpt2_ranks(gpt2_file):
    return compact_vocab.gpt2_ranks(tokenizers.get_gpt2_encoding())


def test_merge_parents_follow_bpe(gpt2_ranks):
    # " the" is built from " t" + "he" in GPT-2 (not " " + "the"): the split comes from merge order
    assert compact_vocab.merge_parents(b" the", gpt2_ranks) == (b" t", b"he")
    for tok in [b"Hello", b" world", b"ization", b" Shakespeare", b"\n\n"]:
        a, b = compact_vocab.merge_parents(tok, gpt2_ranks)
        assert a + b == tok and gpt2_ranks[a] < gpt2_ranks[tok] and gpt2_ranks[b] < gpt2_ranks[tok]
    assert compact_vocab.merge_parents(b"a", gpt2_ranks) == ()


def check_compact(tokens, ranks, vocab_size):
    """vocab size, all bytes, parents kept and reachable by BPE over the subset, rank order."""
    kept = set(tokens)
    assert len(tokens) + 1 == vocab_size  # + eot
    assert all(bytes([b]) in kept for b in range(256))
    assert [ranks[t] for t in tokens] == sorted(ranks[t] for t in tokens)
    sub = {t: i for i, t in enumerate(tokens)}
    for tok in tokens:
        if len(tok) > 1:
            assert set(compact_vocab.merge_parents(tok, ranks)) <= kept
            assert compact_vocab.bpe_parts(tok, sub, sub[tok] + 1) == [tok]  # BPE over the subset builds it


@pytest.mark.parametrize("vocab_size", [257, 300, 1000])
def test_select_compact_tokens(gpt2_file, gpt2_ranks, vocab_size):
    enc = tokenizers.get_gpt2_encoding()
    counts = np.bincount(enc.encode_ordinary(SMALL_TEXT), minlength=50257)
    tokens = compact_vocab.select_compact_tokens(counts, gpt2_ranks, vocab_size)
    check_compact(tokens, gpt2_ranks, vocab_size)
    # most frequent tokens are kept first
    top = [enc.decode_single_token_bytes(int(i)) for i in np.argsort(-counts, kind="stable")[:20]]
    if vocab_size >= 1000:
        assert set(top) <= set(tokens)


def test_select_compact_rejects_bad_size(gpt2_ranks):
    with pytest.raises(ValueError, match="vocab_size"):
        compact_vocab.select_compact_tokens(np.zeros(50257), gpt2_ranks, 256)
    with pytest.raises(SystemExit, match="error: vocab_size"):
        main(["shakespeare", "--vocab_size", "100"])


def test_compact_shakespeare_roundtrip(tmp_path, monkeypatch, gpt2_file, gpt2_ranks, capsys):
    monkeypatch.chdir(tmp_path)  # default out_dir data/shakespeare_v400
    out = compact_vocab.prepare("shakespeare", vocab_size=400, input_path=write_input(tmp_path),
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
    # the same command again leaves the folder as it is (a run training on it reads train.bin at every batch:
    # removing it killed the run, as prepare.py's did; a review), and so do another report (--n_layer, --n_embd:
    # meta.json's report follows them) and --no_plot: they wrote the folder anew (a hunt)
    names = ("meta.json", "train.bin", "val.bin", "coverage.png")
    for name in names:   # a link keeps each file's inode taken: a file written anew has another
        os.link(Path(out) / name, tmp_path / name)
    compact_vocab.prepare("shakespeare", vocab_size=400, input_path=write_input(tmp_path), n_layer=6, n_embd=384,
                          plot=True)
    assert all(os.path.samefile(Path(out) / name, tmp_path / name) for name in names)
    assert f"{out} holds this dataset already: unchanged" in capsys.readouterr().out
    compact_vocab.prepare("shakespeare", vocab_size=400, input_path=write_input(tmp_path), n_layer=2, n_embd=64,
                          plot=False)
    assert all(os.path.samefile(Path(out) / name, tmp_path / name) for name in names[1:])
    assert "its token files unchanged, its report updated" in capsys.readouterr().out
    assert read_meta(out)["pehl"]["n_layer"] == 2


def test_the_same_command_again_says_it_wrote_nothing(tmp_path, gpt2_file, capsys):
    """The same command again says the folder holds the dataset already, and no `wrote` after it; with the figure
    missing, that it drew it and left the token files and report as they were (an exploration as a new user found
    it: "... holds this dataset already: unchanged" then "wrote ...")."""
    out, text = str(tmp_path / "cv"), write_input(tmp_path)
    compact_vocab.prepare("shakespeare", vocab_size=300, input_path=text, out_dir=out, plot=False)
    assert f"wrote {out}" in capsys.readouterr().out
    compact_vocab.prepare("shakespeare", vocab_size=300, input_path=text, out_dir=out, plot=False)
    said = capsys.readouterr().out
    assert f"{out} holds this dataset already: unchanged" in said and "wrote" not in said
    compact_vocab.prepare("shakespeare", vocab_size=300, input_path=text, out_dir=out, plot=True)
    said = capsys.readouterr().out
    assert "its token files and report unchanged" in said and "wrote" not in said


def test_compact_meta_maps_every_token_to_its_gpt2_id(tmp_path, gpt2_file):
    """meta.json read back: compact token i is GPT-2's token gpt2_ids[i] (tiktoken's GPT-2 encoding, built here from the
    ranks file), eot is the last id; the token files hold what the tokenizer built here from meta.json's fields alone
    encodes, their ids mapped through gpt2_ids are GPT-2 ids of the split's text, and a piece of text that GPT-2 spells
    with kept tokens only is spelled with the same tokens (dataset.py's tokenizer)."""
    import regex
    import tiktoken
    text = SMALL_TEXT + UNICODE_TEXT
    out = tmp_path / "c"
    main(["shakespeare", "--vocab_size", "300", "--input", write_input(tmp_path, text), "--out_dir", str(out),
          "--no_plot"])
    meta = read_meta(out)
    ref = reference_gpt2(gpt2_file)
    tokens = [base64.b64decode(t) for t in meta["tokens"]]
    assert len(tokens) == len(meta["gpt2_ids"]) == meta["eot_token"] == meta["vocab_size"] - 1 == 299
    assert [ref.decode_single_token_bytes(g) for g in meta["gpt2_ids"]] == tokens
    assert meta["gpt2_ids"] == sorted(meta["gpt2_ids"])   # GPT-2's rank order: BPE over the subset merges as GPT-2
    mine = tiktoken.Encoding(name="compact_reference", pat_str=meta["pat_str"],
                             mergeable_ranks={t: i for i, t in enumerate(tokens)},
                             special_tokens={"<|endoftext|>": meta["eot_token"]})
    for split, part in split_as_documented(text).items():
        ids = read_bin(out / f"{split}.bin").tolist()
        assert ids == mine.encode_ordinary(part)
        assert ref.decode([meta["gpt2_ids"][i] for i in ids]) == part
    tok = tokenizer.load_tokenizer(str(out))
    assert tok.eot_token == meta["eot_token"] and tok.encode("<|endoftext|>") == [meta["eot_token"]]
    compact_id = {g: i for i, g in enumerate(meta["gpt2_ids"])}
    pieces = regex.findall(meta["pat_str"], text)
    kept = [p for p in pieces if all(g in compact_id for g in ref.encode_ordinary(p))]
    assert len(kept) > len(pieces) / 2 and any(len(ref.encode_ordinary(p)) == 1 and len(p) > 2 for p in kept)
    for piece in kept:
        assert tok.encode(piece) == [compact_id[g] for g in ref.encode_ordinary(piece)], piece


def test_coverage_and_pehl():
    table = compact_vocab.coverage_table([5, 0, 3, 2], [1, 2, 4, 10])
    assert table == [(1, 0.5), (2, 0.8), (4, 1.0), (10, 1.0)]
    v, layers, d = 50257, 12, 768
    assert compact_vocab.pehl(v, layers, d) == pytest.approx(2 * v * d / (2 * v * d + 12 * layers * d * d))
    assert compact_vocab.pehl(8192, layers, d) < compact_vocab.pehl(v, layers, d)


def test_the_report_is_of_the_kept_tokens_and_each_size(capsys):
    """compact_report's numbers, printed and written to meta.json (a hunt changed each without a failing test):
    the distinct types seen, the kept tokens' coverage (tokens 0 and 3 of counts 5, 0, 3, 2: 7 of 10), and PEHL at
    each row's size, the compact size and GPT-2's."""
    report = compact_vocab.compact_report(np.array([5, 0, 3, 2]), [0, 3], 300, 2, 64)
    out = capsys.readouterr().out
    assert "10 (3 distinct types)" in out and "covers 70.00% of the GPT-2 tokens" in out
    assert report["kept_coverage"] == pytest.approx(0.7)
    assert report["pehl"]["compact"] == compact_vocab.pehl(300, 2, 64)
    assert report["pehl"]["gpt2"] == compact_vocab.pehl(50257, 2, 64)
    rows = {int(line.split()[0]): line.split()[2] for line in out.splitlines() if line.split()[0].isdigit()}
    assert {k: rows[k] for k in (256, 300, 512)} == {k: f"{100 * compact_vocab.pehl(k, 2, 64):.2f}%"
                                                     for k in (256, 300, 512)}


def test_merge_parents_are_the_last_bpe_merge():
    """BPE merges ' ' 'a' 'n' by lowest rank: ' a' (3) first, so ' an' comes from (' a', 'n'), not from the
    first split into two known tokens (' ', 'an')."""
    ranks = {b" ": 0, b"a": 1, b"n": 2, b" a": 3, b"an": 4, b" an": 5}
    assert compact_vocab.merge_parents(b" an", ranks) == (b" a", b"n")


def test_same_text_and_split_as_prepare_py(tmp_path, gpt2_file):
    """The compact dataset is prepare.py's shakespeare in other tokens: both decode to the same train and val text;
    the name shakespeare_vK is the same as --vocab_size K."""
    src = write_input(tmp_path)
    full = prepare.prepare("shakespeare", out_dir=str(tmp_path / "full"), input_path=src)
    main(["shakespeare_v300", "--input", src, "--out_dir", str(tmp_path / "a"), "--no_plot"])
    main(["shakespeare", "--vocab_size", "300", "--input", src, "--out_dir", str(tmp_path / "b"), "--no_plot"])
    for split in ("train", "val"):
        texts = {tokenizer.load_tokenizer(str(d)).decode(read_bin(Path(d) / f"{split}.bin").tolist())
                 for d in (full, tmp_path / "a")}
        assert len(texts) == 1
        assert (tmp_path / "a" / f"{split}.bin").read_bytes() == (tmp_path / "b" / f"{split}.bin").read_bytes()
    assert read_meta(tmp_path / "a") == read_meta(tmp_path / "b")
    assert not (tmp_path / "a" / "coverage.png").exists()
    # another split is named as such, though it changes the compact vocabulary too ("another tokenizer"; a hunt)
    with pytest.raises(SystemExit, match="split otherwise"):
        main(["shakespeare_v300", "--input", src, "--out_dir", str(tmp_path / "a"), "--no_plot",
              "--val_fraction=0.2"])


@pytest.mark.parametrize("writer", ["compact_vocab", "prepare"])
def test_a_dataset_writer_holds_its_lock_until_meta_json(tmp_path, gpt2_file, monkeypatch, writer):
    """A run starting while the token files are written is refused: begin_writing's lock is held until meta.json
    (a bare call would drop it at once; a review)."""
    from conftest import refused_at_meta_json
    from safety_net import text_dataset
    src = write_input(tmp_path)
    out = tmp_path / "a"
    module = compact_vocab if writer == "compact_vocab" else text_dataset
    seen = refused_at_meta_json(monkeypatch, module, out)
    if writer == "compact_vocab":
        main(["shakespeare_v300", "--input", src, "--out_dir", str(out), "--no_plot"])
    else:
        prepare.main([f"--input={src}", f"--out_dir={out}"])
    assert len(seen) == 1 and "is being written by another process" in seen[0], seen


def test_dataset_names_and_sizes():
    assert compact_vocab.compact_size("shakespeare_v400", "shakespeare") == 400
    assert compact_vocab.compact_size("shakespeare", "shakespeare", 400) == 400
    assert compact_vocab.compact_size("wikitext103", "wikitext103") is None
    with pytest.raises(UserError, match="means --vocab_size 400, but --vocab_size is 500"):
        compact_vocab.compact_size("shakespeare_v400", "shakespeare", 500)
    with pytest.raises(UserError, match="vocab_size must be in \\[257, 50257\\].* got 0"):
        compact_vocab.compact_size("shakespeare", "shakespeare", 0)   # not silently "the full vocabulary"
    with pytest.raises(UserError, match="no vocabulary size given"):
        compact_vocab.prepare("shakespeare")
    assert compact_vocab.compact_size("shakespeare", "shakespeare", 50257) == 50257   # GPT-2's whole, documented


@pytest.mark.parametrize("argv,words", [
    (["shakespeare_char", "--vocab_size=300"], ["not 'shakespeare_char'", "(fix: python prepare.py shakespeare_char)"]),
    (["wikitext103_v300"], ["(fix: python -m tools.wikitext103 --vocab_size 300)"]),
    (["openwebtext", "--vocab_size=300"], ["not 'openwebtext'", "shakespeare_vK"]),
    (["shakespeare", "--vocab_size=1024", "--n_layer=-1"], ["--n_layer must be >= 1, got -1"]),
    (["shakespeare", "--vocab_size=many"], ["--vocab_size", "many"]),
    (["shakespeare", "--vocab_size=0"], ["vocab_size must be in [257, 50257]", "got 0"]),   # not "none given"
])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, monkeypatch, argv, words):
    monkeypatch.chdir(tmp_path)
    out, before = prepared_folder(tmp_path)
    one_error_line(main, argv, *words)
    one_error_line(main, argv + ["--out_dir", str(out)], *words)
    assert sorted(os.listdir(tmp_path)) == ["data", "input.txt"]
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_a_text_refused_after_its_tokens_are_counted_prints_only_its_error(tmp_path, gpt2_file, capsys):
    """A text too short, or one over another text's dataset, printed the whole coverage/PEHL report before its
    error line (a hunt): the report comes once the checks pass."""
    short = tmp_path / "four.txt"
    short.write_text("abcd")
    one_error_line(main, [f"--input={short}", "--vocab_size=300", "--no_plot"], "too short for a train split")
    assert capsys.readouterr().out == ""
    text = tmp_path / "small.txt"
    text.write_text("First Citizen: Before we proceed any further, hear me speak.\n" * 40)
    out = tmp_path / "data"
    main([f"--input={text}", "--vocab_size=300", f"--out_dir={out}", "--no_plot"])
    assert "PEHL" in capsys.readouterr().out
    text.write_text("Second Citizen: Speak, speak.\n" * 80)
    one_error_line(main, [f"--input={text}", "--vocab_size=300", f"--out_dir={out}", "--no_plot"], "of another text")
    assert capsys.readouterr().out == ""
