"""Issue 40: what a command loads is checked against what it is used with, once, where it is loaded, and what is
wrong is one line `error: ... (fix: ...)`, never a traceback or silently wrong output:
  - a vocabulary against its model: nanoGPT's meta.pkl (stoi must invert itos), a meta.json (its parts agree), a
    dataset against a checkpoint's model (dataset.load_tokenizer), an ExecuTorch program against its tokenizer
    (the tokenizer_id the export stores), a GGUF's vocabulary keys (before llama.cpp reads them);
  - paired files (a program and its tokenizer) replaced together or not at all; a killed write's temporary file
    removed and reported by the next write of the same file, a live writer's left alone (fileio.atomic_path);
  - a prompt llama.cpp cannot encode exactly refused (it drops characters without a word);
  - a damaged .pte: not a program, cut short, or a runtime crash caught in a forked probe;
  - W&B: no API key or no server is one line before training; a failure later turns W&B logging off with a
    warning, and the run goes on;
  - model sizes that cannot be built in reasonable time or memory refused at once;
  - tools.plan --png and tools.executorch.bench --work_dir at odd paths.
The ExecuTorch checks run on a toy program (a lookup table behind prefill/decode, exported without XNNPACK in
about a second): what they check is the runner's loading, not the model (tests/test_executorch.py, -m slow), and
(issue 48) its text streamed as it is generated, stopped by Ctrl-C.
"""
import fcntl
import functools
import json
import os
import pickle
import signal
import socket
import struct
import sys
import types

import pytest
import torch

from conftest import one_error_line, write_char_checkpoint
from fault_trial import STUB_PTE
from model import GPT, GPTConfig, MLP
from safety_net import dataset
from safety_net import tokenizers
from safety_net import wandb_log
from safety_net.build import MAX_LAYERS, check_layer_count, check_memory, gpt_config_defaults, weights_lower_bound
from safety_net.build import model_config
from safety_net.configurator import UserError

CHARS = list("\n !',.:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")


def nanogpt_meta_pkl(folder, n, stoi=None):
    chars = [chr(32 + i) for i in range(n)]
    meta = {"vocab_size": n, "itos": dict(enumerate(chars)), "stoi": stoi or {c: i for i, c in enumerate(chars)}}
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "meta.pkl"), "wb") as f:
        pickle.dump(meta, f)
    return chars


# --- vocabularies against their models ---------------------------------------------------------------------

def test_meta_pkl_stoi_must_invert_itos(tmp_path):
    chars = nanogpt_meta_pkl(tmp_path / "ok", 10)
    assert dataset.read_meta_pkl(str(tmp_path / "ok" / "meta.pkl"))["chars"] == chars
    nanogpt_meta_pkl(tmp_path / "shifted", 10, stoi={c: (i + 1) % 10 for i, c in enumerate(chars)})
    with pytest.raises(UserError, match=r"stoi and itos disagree \(itos\[0\] is ' ', stoi\[' '\] is 1\)"):
        dataset.read_meta_pkl(str(tmp_path / "shifted" / "meta.pkl"))
    nanogpt_meta_pkl(tmp_path / "extra", 10, stoi=dict({c: i for i, c in enumerate(chars)}, Z=3))
    with pytest.raises(UserError, match="stoi has 11 entries, its itos 10"):
        dataset.read_meta_pkl(str(tmp_path / "extra" / "meta.pkl"))


def base64_of(token):
    import base64
    return base64.b64encode(token).decode("ascii")


def compact_meta(**changes):
    """A whole compact vocabulary's meta.json (256 single bytes, one merge, eot), with changes."""
    tokens = [base64_of(bytes([b])) for b in range(256)] + [base64_of(b"th")]
    meta = dict(tokenizer="compact", vocab_size=258, tokens=tokens, eot_token=257, gpt2_ids=list(range(257)))
    meta.update(changes)
    return meta


@pytest.mark.parametrize("meta,words", [
    ({"tokenizer": "char", "vocab_size": 0, "chars": []}, "has no valid vocab_size"),
    ({"tokenizer": "char", "vocab_size": 3, "chars": ["a", "a", "b"]}, "not 3 distinct characters"),
    ({"tokenizer": "char", "vocab_size": 4, "chars": ["a", "b", "c"]}, "not 4 distinct characters"),
    ({"tokenizer": "gpt2", "vocab_size": 50000}, "not 50257"),
    ({"tokenizer": "compact", "vocab_size": 3, "eot_token": 1, "tokens": ["YQ==", "Yg=="]}, "then eot"),
    # not base64, a token twice: they decoded without a word (a hunt)
    (compact_meta(tokens=["A!A=="] + compact_meta()["tokens"][1:]), "no valid compact 'tokens'"),
    (compact_meta(tokens=compact_meta()["tokens"][:256] + [base64_of(b"A")]), "not 257 distinct byte tokens"),
])
def test_meta_json_parts_must_agree(meta, words):
    with pytest.raises(UserError, match=words):
        tokenizers.tokenizer_from_meta(meta)


def test_compact_gpt2_ids_must_cover_the_vocabulary():
    """Inheritance reads them: 10 ids for 257 tokens were handed on (a hunt)."""
    assert tokenizers.Vocabulary(compact_meta()).gpt2_ids() == list(range(257)) + [tokenizers.GPT2_EOT_ID]
    with pytest.raises(UserError, match="compact gpt2_ids are not vocab_size - 1 = 257 GPT-2 ids"):
        tokenizers.Vocabulary(compact_meta(gpt2_ids=list(range(10)))).gpt2_ids()


def test_prompts_at_the_vocabularys_edge():
    """An id equal to the model's vocab_size has no row; an empty prompt of a BPE vocabulary is its eot."""
    tok = tokenizers.CharTokenizer(list("abc"))
    with pytest.raises(UserError, match="encodes to token id 2, beyond the model's vocabulary of 2"):
        tokenizers.check_prompt(tok, "c", "ds", vocab_size=2)
    compact = tokenizers.tokenizer_from_meta(compact_meta())
    assert tokenizers.encode_start(compact, "", "ds") == [compact.eot_token]


def test_a_new_tokenizer_kind_is_refused_by_every_reader(monkeypatch):
    """A kind added to tokenizers.TOKENIZER_KINDS before its parts are written in tokenizers.Vocabulary: each reader of a
    vocabulary (the tokenizer, the files the Hugging Face / ExecuTorch / GGUF exports write, inheritance's GPT-2
    ids, wikitext103's workers, the export's summary) refuses it in one line instead of taking it for another kind;
    a kind not in the list is refused as soon as it is read."""
    from tools.huggingface.tokenizer import tokenizer_files
    from tools.pangu.inherit import vocab_rows
    from tools.wikitext103 import encoding_from_spec, encoding_spec
    with pytest.raises(UserError, match="names tokenizer 'dummy', which is none of char, gpt2, compact"):
        tokenizers.Vocabulary({"tokenizer": "dummy", "vocab_size": 10})
    monkeypatch.setattr(tokenizers, "TOKENIZER_KINDS", (*tokenizers.TOKENIZER_KINDS, "dummy"))
    meta = {"tokenizer": "dummy", "vocab_size": 10}
    readers = [functools.partial(tokenizers.tokenizer_from_meta, meta),
               functools.partial(tokenizer_files, meta, 10, 8),
               functools.partial(vocab_rows, meta, meta),
               functools.partial(encoding_from_spec, encoding_spec(meta)),
               tokenizers.Vocabulary(meta).describe]
    for read in readers:
        with pytest.raises(UserError) as e:
            read()
        assert "meta.json's tokenizer 'dummy' has no " in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("kind,model_vocab,recorded,fits", [
    ("meta.pkl", 65, False, True),
    ("meta.pkl", 60, False, False),     # nanoGPT's model of 60 characters: ids 60..64 of the dataset do not exist
    ("meta.pkl", 70, False, False),     # 70: ids 65..69 would be sampled and fail to decode (after sampling)
    ("char", 80, True, True),           # trained with --vocab_size=80 on this dataset (tokenizer_id): its padding
    ("char", 80, False, False),
    ("gpt2", 50304, False, True),       # GPT-2's vocabulary padded to a multiple of 64
    ("gpt2", 50000, False, False),
])
def test_a_dataset_vocabulary_is_checked_against_the_model(tmp_path, gpt2_file, kind, model_vocab, recorded, fits):
    if kind == "meta.pkl":
        nanogpt_meta_pkl(tmp_path, 65)
        meta = dataset.load_meta(str(tmp_path))
    else:
        chars = CHARS + list("~@#$")
        meta = {"tokenizer": kind, "vocab_size": len(chars) if kind == "char" else 50257, "chars": chars}
        (tmp_path / "meta.json").write_text(json.dumps(meta))
    ckpt = {"model_args": {"vocab_size": model_vocab}, "path": "ckpt.pt",
            "tokenizer_id": dataset.tokenizer_id(meta) if recorded else None}
    # a checkpoint's dataset folder comes from resolve_data_dir, the one home of the check
    if fits:
        assert dataset.load_tokenizer(dataset.resolve_data_dir(ckpt, str(tmp_path)), ckpt).vocab_size == \
            meta["vocab_size"]
    else:
        with pytest.raises(UserError, match=f"has {meta['vocab_size']} tokens, the model in ckpt.pt {model_vocab}"):
            dataset.resolve_data_dir(ckpt, str(tmp_path))
    assert dataset.load_tokenizer(str(tmp_path)).vocab_size == meta["vocab_size"]   # without a model: nothing to check


# --- ExecuTorch: a program and its tokenizer ---------------------------------------------------------------

class Lookup(torch.nn.Module):
    """prefill(tokens) / decode(token, pos): logits = a fixed table's row of each token (the runner's interface)."""

    def __init__(self, decode):
        super().__init__()
        self.decode = decode
        self.register_buffer("table", torch.randn(len(CHARS), len(CHARS), generator=torch.Generator().manual_seed(0)))

    def forward(self, tokens, pos=None):
        return self.table[tokens] + (0 if pos is None else 0 * pos.sum())


def toy_program(tokenizer_id):
    """A program with the runner's methods and constants (no XNNPACK: it exports in a second); tokenizer_id None:
    without that constant, as the export wrote programs before it stored one."""
    from executorch.exir import to_edge_transform_and_lower
    from torch.export import Dim, export
    programs = {"prefill": export(Lookup(False), (torch.zeros(1, 2, dtype=torch.long),),
                                  dynamic_shapes=({1: Dim("T", min=1, max=16)},)),
                "decode": export(Lookup(True), (torch.zeros(1, 1, dtype=torch.long), torch.ones(1, dtype=torch.long)))}
    constants = {"max_len": 16, "vocab_size": len(CHARS), "eot_token": -1}
    if tokenizer_id is not None:
        constants["tokenizer_id"] = tokenizer_id
    return to_edge_transform_and_lower(programs, constant_methods=constants).to_executorch().buffer


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    """A folder with toy.pte and toy.tokenizer.json (a char vocabulary), paired as the export pairs them."""
    pytest.importorskip("executorch", reason="executorch is not installed")
    from tokenizers import Tokenizer
    from tools.executorch.run import vocabulary_id
    from tools.huggingface.tokenizer import char_level
    folder = tmp_path_factory.mktemp("toy")
    text = json.dumps(char_level(CHARS))
    (folder / "toy.tokenizer.json").write_text(text)
    (folder / "toy.pte").write_bytes(toy_program(vocabulary_id(Tokenizer.from_str(text))))
    return folder


def runner(argv):
    """tools.executorch.run on argv = [program, options...]."""
    from tools.executorch import run
    return run.main([f"--pte={argv[0]}", "--max_new_tokens=4", "--num_samples=1", "--temperature=0", *argv[1:]])


def test_a_program_runs_with_its_own_tokenizer(toy, capsys):
    runner([toy / "toy.pte", "--start=War "])
    text = capsys.readouterr().out.split("\n---------------")[0]
    assert text.startswith("War ") and len(text) == len("War ") + 4


def test_a_program_streams_its_text_and_stops_on_ctrl_c(toy, monkeypatch, capsys):
    """The runner on a real program, asked for 10**15 tokens (issue 48): every draw finds the text of the tokens
    before it printed, and a real SIGINT (Ctrl-C, in this process, at the 30th draw) ends the command with what was
    printed, exit code 130 and `interrupted`. (A subprocess would spend 20 s loading ExecuTorch here; the command
    line and its own startup: tests.fault_trial's et_run_endless_ctrl_c.)"""
    from tools.executorch import run
    real_draw, printed = run.sample_next, []

    def draw(logits, temperature, top_k, generator):
        printed.append(capsys.readouterr().out)
        if len(printed) == 30:
            os.kill(os.getpid(), signal.SIGINT)
        return real_draw(logits, temperature, top_k, generator)

    monkeypatch.setattr(run, "sample_next", draw)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)   # Ctrl-C as in a terminal
    try:
        with pytest.raises(SystemExit) as e:
            run.main([f"--pte={toy / 'toy.pte'}", "--start=War ", f"--max_new_tokens={10**15}"])
    except KeyboardInterrupt:   # not a test failure by itself: pytest would stop the whole session
        pytest.fail("Ctrl-C escaped the runner")
    finally:
        signal.signal(signal.SIGINT, previous)
    out, err = capsys.readouterr()
    assert e.value.code == 130 and err.strip().splitlines()[-1] == "interrupted"
    assert printed[0] == "War " and len(printed) == 30 and out == ""   # the 30th token was never drawn
    assert all(len(p) == 1 and p in CHARS for p in printed[1:])   # each token's character before the next draw


def test_a_tokenizer_of_another_model_is_refused(toy, tmp_path):
    from tools.huggingface.tokenizer import char_level
    other = char_level([chr(0x400 + i) for i in range(len(CHARS))])   # as many tokens: only the id tells
    (tmp_path / "other.json").write_text(json.dumps(other))
    one_error_line(runner, [toy / "toy.pte", f"--tokenizer={tmp_path / 'other.json'}"],
                   "is not the tokenizer", "was exported with", "toy.tokenizer.json")
    # a program exported before tokenizer_id: its size and end-of-text are all there is to compare
    from tokenizers import Tokenizer
    from tools.executorch.run import check_pair
    older = type("OlderProgram", (), dict(tokenizer_id=None, vocab_size=len(CHARS), eot_token=-1))
    check_pair(older, Tokenizer.from_str(json.dumps(char_level(CHARS))), "old.pte", "old.tokenizer.json")
    with pytest.raises(UserError, match=f"does not fit old.pte: its ids go to {len(CHARS)} and its end-of-text is "
                                        f"-1, the program has {len(CHARS)} tokens"):
        check_pair(older, Tokenizer.from_str(json.dumps(char_level(CHARS + ["~"]))), "old.pte", "x.json")


def flip_identifier(data):
    return data[:6] + bytes([data[6] ^ 0xFF]) + data[7:]   # 'ET12' -> 'ET\xce2': the runtime aborts (SIGABRT)


@pytest.mark.parametrize("damage,words", [
    (lambda data: os.urandom(len(data)), "not an ExecuTorch program"),
    (lambda data: data[:len(data) // 2], "is cut short"),
    (lambda data: data.replace(b"prefill", b"pr\xfffill", 1), "cannot load"),
    (flip_identifier, "crashes ExecuTorch's runtime (SIGABRT"),
])
def test_a_damaged_program_is_one_line(toy, tmp_path, damage, words):
    (tmp_path / "toy.pte").write_bytes(damage((toy / "toy.pte").read_bytes()))
    (tmp_path / "toy.tokenizer.json").write_bytes((toy / "toy.tokenizer.json").read_bytes())
    one_error_line(runner, [tmp_path / "toy.pte"], words, "export it again")


def test_a_program_shorter_than_its_header_says_is_one_line(toy, tmp_path):
    """A file of 7 bytes with the identifier ET at byte 4, and a program cut by its last byte: the runner says what is
    wrong, with the sizes (a hunt: a changed line did this, and no test failed)."""
    (tmp_path / "toy.tokenizer.json").write_bytes((toy / "toy.tokenizer.json").read_bytes())
    (tmp_path / "toy.pte").write_bytes(b"\0\0\0\0ET1")
    one_error_line(runner, [tmp_path / "toy.pte"], "is not an ExecuTorch program (no ET identifier at byte 4)")
    data = (toy / "toy.pte").read_bytes()
    (tmp_path / "toy.pte").write_bytes(data[:-1])
    one_error_line(runner, [tmp_path / "toy.pte"], f"is cut short: its header gives {len(data):,} bytes, the file has "
                   f"{len(data) - 1:,}", "export it again")


def test_a_program_that_crashes_the_runtime_prints_only_the_one_line(toy, tmp_path, capfd, monkeypatch):
    """The forked probe's crash (the runtime's log and abort message, "terminate called ... what(): ...") stays out of
    the terminal: the one error line is all the user sees. Here sys.stderr writes to file descriptor 2, as in a
    command (pytest's capture gives it another one) (a hunt: a changed line did this, and no test failed)."""
    from tools.executorch import run
    (tmp_path / "toy.pte").write_bytes(flip_identifier((toy / "toy.pte").read_bytes()))
    monkeypatch.setattr(sys, "stderr", open(2, "w", closefd=False))
    capfd.readouterr()
    with pytest.raises(UserError, match="crashes ExecuTorch's runtime \\(SIGABRT"):
        run.probe_program(str(tmp_path / "toy.pte"))
    assert capfd.readouterr() == ("", "")


def test_a_program_exported_before_tokenizer_id_runs(toy, tmp_path, capsys):
    """A program without the tokenizer_id constant (exported before the export stored it) loads, with tokenizer_id
    None, and runs with a tokenizer that fits it (a hunt: a changed line did this, and no test failed)."""
    from tools.executorch import run
    (tmp_path / "old.pte").write_bytes(toy_program(None))
    (tmp_path / "old.tokenizer.json").write_bytes((toy / "toy.tokenizer.json").read_bytes())
    program = run.Program(str(tmp_path / "old.pte"))
    assert (program.tokenizer_id, program.max_len, program.vocab_size) == (None, 16, len(CHARS))
    runner([tmp_path / "old.pte", "--start=War "])
    assert capsys.readouterr().out.startswith("War ")


def test_the_runner_samples_on_one_torch_thread_and_sets_the_runtimes(toy, monkeypatch, capsys):
    """--num_threads=1: torch samples on one thread, and ExecuTorch's pool is set to 1 (a hunt: a changed line did
    this, and no test failed)."""
    from tools import torch_internals
    calls = []
    monkeypatch.setattr(torch, "set_num_threads", lambda n: calls.append(("torch.set_num_threads", n)))
    monkeypatch.setattr(torch_internals, "executorch_set_threads", lambda n: calls.append(("executorch", n)))
    runner([toy / "toy.pte", "--num_threads=1"])
    assert calls == [("torch.set_num_threads", 1), ("executorch", 1)]
    assert capsys.readouterr().out.endswith("---------------\n")


def test_profile_of_a_whole_window(toy):
    """tools.executorch.profile on the toy program (16 positions): 16 steps fit (0-15), 17 are one line; the header
    names the positions profiled (a hunt: a changed line did this, and no test failed)."""
    from tools.executorch import profile
    for steps in (16, 0):   # 0: the whole window
        lines = profile.profile(str(toy / "toy.pte"), steps, 1)
        assert lines[0].startswith("`toy.pte`: 16 decode steps at positions 0-15, 1 thread(s); ")
    assert profile.profile(str(toy / "toy.pte"), 3, 1)[0].startswith("`toy.pte`: 3 decode steps at positions 0-2, ")
    with pytest.raises(UserError, match=r"--steps=17 exceeds the program's window of 16 \(fix: --steps=16\)"):
        profile.decode_events(str(toy / "toy.pte"), 17, 1)


@pytest.fixture
def tiny_checkpoint(tmp_path):
    """out/ckpt.pt of a tiny random model on a char dataset (data/meta.json)."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=1, n_head=2, n_embd=32, block_size=16, vocab_size=len(CHARS)))
    return write_char_checkpoint(tmp_path, model, CHARS)


def test_another_char_vocabulary_is_refused_by_every_tool(tiny_checkpoint, tmp_path):
    """A checkpoint that records no tokenizer (nanoGPT's, older ones) with another char dataset: sample.py refused
    it, while tools.eval scored it, pangu.refine wrote refine.npy and the exports wrote that dataset's tokenizer,
    without a word (a hunt). One home now: resolve_data_dir."""
    from conftest import write_token_dataset
    from tools import eval as eval_tool
    from tools.huggingface import convert
    from tools.pangu import refine
    other = write_token_dataset(tmp_path / "other", n_train=3000, n_val=500, vocab_size=len(CHARS) - 5)
    words = f"the vocabulary of {other} has {len(CHARS) - 5} tokens"
    before = sorted(os.listdir(tiny_checkpoint))
    one_error_line(eval_tool.main, [f"--out_dir={tiny_checkpoint}", f"--data_dir={other}"], words)
    one_error_line(refine.main, [f"--out_dir={tiny_checkpoint}", f"--data_dir={other}"], words)
    one_error_line(convert.main, ["export", f"--out_dir={tiny_checkpoint}", f"--out={tmp_path / 'hf'}",
                                  f"--data_dir={other}"], words)
    assert sorted(os.listdir(tiny_checkpoint)) == before and not (tmp_path / "hf").exists()


def test_the_export_replaces_program_and_tokenizer_together(toy, tiny_checkpoint, tmp_path, monkeypatch, capsys):
    """The write step: both files are written whole before either replaces its old version; a failure replacing
    the program (a full disk, say) leaves the old pair; a killed export's temporary file is removed, and said, by the
    next export."""
    from tools.executorch import export
    pte, tok = tmp_path / "m.pte", tmp_path / "m.tokenizer.json"
    monkeypatch.setattr(export, "program_bytes", lambda *args: STUB_PTE + b"program 1")   # exporting itself: -m slow
    export.main([f"--out_dir={tiny_checkpoint}", f"--pte={pte}"])
    old = {pte: pte.read_bytes(), tok: tok.read_bytes()}
    (tmp_path / "data" / "meta.json").write_text(json.dumps({"dataset": "tinychars", "tokenizer": "char",
                                                             "vocab_size": len(CHARS), "chars": CHARS[::-1]}))
    monkeypatch.setattr(export, "program_bytes", lambda *args: STUB_PTE + b"program 2")
    real_replace = os.replace

    def disk_full(src, dst):
        if str(dst).endswith(".pte"):
            raise OSError(28, "No space left on device")
        real_replace(src, dst)
    monkeypatch.setattr(os, "replace", disk_full)
    one_error_line(export.main, [f"--out_dir={tiny_checkpoint}", f"--pte={pte}", f"--data_dir={tmp_path / 'data'}"],
                   f"cannot write {pte}: No space left on device")
    assert {p: p.read_bytes() for p in old} == old and sorted(os.listdir(tmp_path)) == sorted(
        ["data", "out", "m.pte", "m.tokenizer.json"])
    monkeypatch.setattr(os, "replace", real_replace)
    (tmp_path / ".m.pte.k1ll3d.tmp").write_bytes(b"\0" * 1000)   # left by a kill -9
    capsys.readouterr()
    export.main([f"--out_dir={tiny_checkpoint}", f"--pte={pte}", f"--data_dir={tmp_path / 'data'}"])
    assert f"removed 1 temporary file(s) (0.0 MB) left in {tmp_path}" in capsys.readouterr().err
    assert pte.read_bytes() == STUB_PTE + b"program 2" and json.loads(tok.read_text())["model"]["vocab"]["z"] == 0


def test_a_live_writers_temporary_file_is_left_alone(tmp_path):
    from safety_net.fileio import atomic_open, remove_stale_temp_files
    live, stale = tmp_path / ".f.bin.live.tmp", tmp_path / ".f.bin.dead.tmp"
    live.write_bytes(b"being written")
    stale.write_bytes(b"left by a kill -9")
    with open(live, "rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX)   # as atomic_path holds its own
        with atomic_open(tmp_path / "f.bin") as f:
            f.write(b"done")
        assert live.exists() and not stale.exists() and (tmp_path / "f.bin").read_bytes() == b"done"
    assert remove_stale_temp_files(str(tmp_path), ["f.bin"], say=print) == 1 and not live.exists()


# --- llama.cpp: a GGUF's vocabulary, and prompts it cannot encode -----------------------------------------------

@pytest.fixture
def gguf_file(tiny_checkpoint, tmp_path):
    pytest.importorskip("gguf", reason="gguf is not installed")
    from tools.llamacpp import export
    export.main([f"--out_dir={tiny_checkpoint}", f"--gguf={tmp_path / 'm.gguf'}"])
    return tmp_path / "m.gguf"


def patched(path, key, value=None, type_code=None):
    """A copy of a GGUF with one key's 4-byte type code or value changed."""
    data = bytearray(path.read_bytes())
    at = data.index(key.encode()) + len(key)
    if type_code is not None:
        struct.pack_into("<I", data, at, type_code)
    if value is not None:
        struct.pack_into("<I", data, at + 4, value)
    out = path.with_name("damaged.gguf")
    out.write_bytes(bytes(data))
    return out


@pytest.mark.parametrize("key,change,words", [
    ("compact_gpt.vocab_size", dict(type_code=6), "compact_gpt.vocab_size is 8.5"),   # a float: int() failed on it
    ("compact_gpt.vocab_size", dict(value=10**6), "not an integer in [1, 62]"),
    ("tokenizer.ggml.eos_token_id", dict(value=62), "not an integer in [0, 61]"),
    ("tokenizer.ggml.tokens", dict(), "no vocabulary"),
    # a bos one past the tokens, a float within the bounds (a hunt: a changed line did this, and no test failed)
    ("tokenizer.ggml.bos_token_id", dict(value=62), "bos_token_id is 62 (UINT32), not an integer in [0, 61]"),
    ("compact_gpt.vocab_size", dict(type_code=6, value=struct.unpack("<I", struct.pack("<f", 2.5))[0]),
     "compact_gpt.vocab_size is 2.5 (FLOAT32), not an integer in [1, 62]"),
])
def test_a_damaged_gguf_vocabulary_is_one_line(gguf_file, key, change, words):
    from tools.llamacpp import run
    run.check_gguf(str(gguf_file))
    if change:
        damaged = patched(gguf_file, key, **change)
    else:
        damaged = gguf_file.with_name("damaged.gguf")
        damaged.write_bytes(gguf_file.read_bytes().replace(key.encode(), key[:-1].encode() + b"X", 1))
    one_error_line(run.main, [f"--gguf={damaged}"], words, "export it again")


def small_gguf(path, tokens, token_types, embedding=True):
    """A GGUF file of `tokens` (and `token_types`), with an embedding of as many rows, written by gguf's writer."""
    import gguf
    import numpy as np
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_token_list(tokens)
    writer.add_token_types(token_types)
    if embedding:
        writer.add_tensor("token_embd.weight", np.zeros((len(tokens), 8), np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_a_gguf_cut_short_or_with_a_list_of_another_length_is_one_line(gguf_file):
    """A file cut short inside its header (an interrupted copy), token types for 2 of its 3 tokens, and an empty
    token list are one line each, before llama.cpp is asked to load them (a hunt: a changed line did this, and no
    test failed)."""
    from tools.llamacpp import run
    data = gguf_file.read_bytes()
    cut = gguf_file.with_name("cut.gguf")
    cut.write_bytes(data[:data.index(b"tokenizer.ggml.merges")])   # the gguf reader: an IndexError
    one_error_line(run.main, [f"--gguf={cut}"], f"{cut} is not a readable GGUF file (", "(fix: export it again")
    types = small_gguf(gguf_file.with_name("types.gguf"), ["a", "b", "c"], [1, 1])
    one_error_line(run.main, [f"--gguf={types}"], "tokenizer.ggml.token_type does not list the 3 tokens",
                   "export it again")
    # gguf's writer leaves out an empty list: a file of one token (no types, no tensors), its list emptied
    empty = bytearray(small_gguf(gguf_file.with_name("empty.gguf"), ["a"], [], embedding=False).read_bytes())
    key = b"tokenizer.ggml.tokens"
    at = empty.index(key) + len(key)
    assert struct.unpack_from("<IIQQ", empty, at) + (bytes(empty[at + 24:at + 25]),) == (9, 8, 1, 1, b"a")
    struct.pack_into("<Q", empty, at + 8, 0)
    del empty[at + 16:at + 25]   # the one string: its u64 length and b"a"
    gguf_file.with_name("empty.gguf").write_bytes(bytes(empty))
    one_error_line(run.main, [f"--gguf={gguf_file.with_name('empty.gguf')}"], "has no vocabulary", "export it again")


def test_a_killed_gguf_export_is_reported_by_the_next(gguf_file, tiny_checkpoint, capsys):
    from tools.llamacpp import export
    (gguf_file.parent / ".m.gguf.x8f2k.tmp").write_bytes(b"\0" * 2000)
    export.main([f"--out_dir={tiny_checkpoint}", f"--gguf={gguf_file}"])
    assert f"removed 1 temporary file(s) (0.0 MB) left in {gguf_file.parent}" in capsys.readouterr().err
    assert not list(gguf_file.parent.glob(".*.tmp"))


class Dropping:
    """llama_cpp.Llama's tokenize/detokenize for a vocabulary of CHARS: what it cannot spell it drops, as
    llama.cpp does."""

    def tokenize(self, data, add_bos=False, special=False):
        return [CHARS.index(c) for c in data.decode("utf-8") if c in CHARS]

    def detokenize(self, ids):
        return "".join(CHARS[i] for i in ids).encode("utf-8")


def test_a_prompt_llamacpp_cannot_encode_is_refused():
    from tools.llamacpp.run import encode_exactly
    assert encode_exactly(Dropping(), "War is ", "m.gguf") == [CHARS.index(c) for c in "War is "]
    with pytest.raises(UserError, match="cannot encode --start with the vocabulary of m.gguf: it would drop '~', "
                                        "'é' \\(fix: remove them"):
        encode_exactly(Dropping(), "War is é~", "m.gguf")


@pytest.mark.slow
def test_llamacpp_itself_refuses_a_prompt_it_would_drop(gguf_file):
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
    from tools.llamacpp import run
    one_error_line(run.main, [f"--gguf={gguf_file}", "--start=War is é~", "--max_new_tokens=2"], "'~', 'é'")


# --- W&B: found before training starts -------------------------------------------------------------------------

@pytest.fixture
def no_wandb_import(monkeypatch):
    monkeypatch.setattr(wandb_log, "import_wandb", lambda: None)   # importing wandb takes seconds; its checks do not
    for key in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_BASE_URL", "WANDB_IDENTITY_TOKEN_FILE"):
        monkeypatch.delenv(key, raising=False)


def closed_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_wandb_without_a_key_or_a_server_is_one_line_before_training(tmp_path, monkeypatch, no_wandb_import):
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    with pytest.raises(UserError, match="no W&B API key is set for api.wandb.ai \\(fix: `wandb login`"):
        wandb_log.check_wandb()
    (tmp_path / "netrc").write_text("machine api.wandb.ai login user password " + "k" * 40 + "\n")
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{closed_port()}")
    with pytest.raises(UserError, match="no W&B API key"):   # the netrc entry is for another host
        wandb_log.check_wandb()
    monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
    with pytest.raises(UserError, match="cannot be reached in 5 s \\(Connection refused\\).*WANDB_MODE=offline"):
        wandb_log.check_wandb()
    monkeypatch.setenv("WANDB_MODE", "offline")
    wandb_log.check_wandb()   # offline logging needs neither


class FailingWandb:
    def init(self, **kwargs):
        raise RuntimeError("Run initialization has timed out after 90.0 sec.")


def test_wandb_failing_during_the_run_turns_logging_off_with_a_warning(monkeypatch, capsys):
    monkeypatch.setattr(wandb_log, "import_wandb", FailingWandb)
    log = wandb_log.WandbLog({"wandb_log": True, "wandb_project": "p", "wandb_run_name": ""})
    row = {"kind": "eval", "iter": 0, "loss": 1.0, "val_loss": 1.0, "lr": 1e-3}
    log.log(row)
    log.log(row)   # off: said once
    err = capsys.readouterr().err
    assert err.count("warning: W&B logging failed (RuntimeError: Run initialization has timed out") == 1
    assert "off for the rest of this run" in err and log.wandb is None


class RecordingWandb:
    """A stand-in for the wandb package that records what it is given."""

    def __init__(self):
        self.inits, self.logged = [], []

    def init(self, **kwargs):
        self.inits.append(kwargs)
        return self

    def log(self, values):
        self.logged.append(values)


def test_wandb_logs_nanogpts_values_at_each_evaluation_on_rank_zero_only(monkeypatch):
    """One W&B run (started at the first evaluation, unnamed when wandb_run_name is ''), one log per evaluation row
    with nanoGPT's keys, nothing for training rows, nothing from another DDP rank (each untested until a hunt)."""
    fake = RecordingWandb()
    monkeypatch.setattr(wandb_log, "import_wandb", lambda: fake)
    config = {"wandb_log": True, "wandb_project": "p", "wandb_run_name": ""}
    assert wandb_log.WandbLog(config, master=False).wandb is None
    log = wandb_log.WandbLog(config)
    log.log({"kind": "train", "iter": 0, "loss": 3.0, "lr": 1e-3})
    for it in (0, 250):
        log.log({"kind": "eval", "iter": it, "loss": 2.0, "val_loss": 2.5, "lr": 1e-3})
    assert [(i["project"], i["name"]) for i in fake.inits] == [("p", None)]
    assert fake.logged == [{"iter": it, "train/loss": 2.0, "val/loss": 2.5, "lr": 1e-3} for it in (0, 250)]


def test_wandb_needs_no_key_when_disabled_and_takes_a_token_file_or_another_port(monkeypatch, tmp_path,
                                                                              no_wandb_import):
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    monkeypatch.setenv("WANDB_MODE", "disabled")
    wandb_log.check_wandb()
    monkeypatch.delenv("WANDB_MODE")
    monkeypatch.setenv("WANDB_IDENTITY_TOKEN_FILE", str(tmp_path / "token"))
    tried = []
    monkeypatch.setattr(socket, "create_connection", lambda address, timeout: tried.append(address) or socket.socket())
    wandb_log.check_wandb()   # a token file is a key
    monkeypatch.setenv("WANDB_BASE_URL", "http://my.wandb.host")
    wandb_log.check_wandb()
    monkeypatch.setenv("WANDB_BASE_URL", "https://my.wandb.host:8443")
    wandb_log.check_wandb()
    assert tried == [("api.wandb.ai", 443), ("my.wandb.host", 80), ("my.wandb.host", 8443)]


def test_wandb_dryrun_mode_needs_no_key(monkeypatch, tmp_path, no_wandb_import):
    """WANDB_MODE=dryrun (wandb's old name for offline) logs on this machine: no key is asked for (a hunt: a changed
    line did this, and no test failed)."""
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    monkeypatch.setenv("WANDB_MODE", "dryrun")
    assert wandb_log.check_wandb() is None


def test_wandb_key_in_the_netrc_file_named_by_netrc(monkeypatch, tmp_path, no_wandb_import):
    """NETRC names the file `wandb login` wrote the key to: with no WANDB_API_KEY the run starts; a netrc file that
    is no netrc is the one line "no W&B API key is set" (a hunt: a changed line did this, and no test failed)."""
    monkeypatch.setenv("HOME", str(tmp_path))   # no ~/.netrc of the machine's user
    monkeypatch.setattr(socket, "create_connection", lambda address, timeout: socket.socket())
    (tmp_path / "netrc").write_text("machine api.wandb.ai login user password " + "k" * 40 + "\n")
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    wandb_log.check_wandb()
    (tmp_path / "netrc").write_text("nonsense api.wandb.ai\n")
    with pytest.raises(UserError, match="no W&B API key is set for api.wandb.ai"):
        wandb_log.check_wandb()


@pytest.mark.parametrize("url, words", [
    ("api.wandb.ai", "WANDB_BASE_URL=api.wandb.ai needs http:// or https://"),
    ("my.host:8080", "WANDB_BASE_URL=my.host:8080 needs http:// or https://"),
    ("http://localhost:abc", "WANDB_BASE_URL=http://localhost:abc: Port could not be cast"),
    ("https://my.host:70000", "WANDB_BASE_URL=https://my.host:70000: Port out of range"),
])
def test_wandb_base_url_without_a_scheme_or_with_a_bad_port_is_one_line(monkeypatch, no_wandb_import, url, words):
    """A WANDB_BASE_URL without http:// read as an empty host ("no W&B API key is set for  (fix: ..."), and a port
    that is no number was a ValueError traceback (a hunt found it: now one line naming WANDB_BASE_URL)."""
    monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
    monkeypatch.setenv("WANDB_BASE_URL", url)
    monkeypatch.setattr(socket, "create_connection", lambda address, timeout: socket.socket())
    with pytest.raises(UserError) as e:
        wandb_log.check_wandb()
    assert str(e.value).startswith(words) and "(fix: " in str(e.value) and "\n" not in str(e.value)


def test_a_bad_wandb_base_url_stops_train_py_before_it_writes(monkeypatch, tmp_path, tiny_train_config,
                                                              no_wandb_import):
    """train.py --wandb_log=True with WANDB_BASE_URL=http://localhost:abc: one line, and no out_dir (a hunt found
    it: a ValueError traceback)."""
    import train
    monkeypatch.setenv("WANDB_BASE_URL", "http://localhost:abc")
    cfg = dict(tiny_train_config, wandb_log=True)
    one_error_line(train.main, [f"--{k}={v}" for k, v in cfg.items()], "WANDB_BASE_URL=http://localhost:abc")
    assert not os.path.exists(cfg["out_dir"])


def test_wandb_run_records_the_config_and_import_wandb_returns_the_package(monkeypatch):
    """The W&B run's config is the run's, as nanoGPT's; import_wandb hands back the wandb package (a hunt: a changed
    line did this, and no test failed)."""
    package = types.ModuleType("wandb")
    monkeypatch.setitem(sys.modules, "wandb", package)
    assert wandb_log.import_wandb() is package
    fake = RecordingWandb()
    monkeypatch.setattr(wandb_log, "import_wandb", lambda: fake)
    config = {"wandb_log": True, "wandb_project": "p", "wandb_run_name": "r", "learning_rate": 1e-3}
    wandb_log.WandbLog(config).log({"kind": "eval", "iter": 0, "loss": 2.0, "val_loss": 2.5, "lr": 1e-3})
    assert fake.inits[0]["config"] == config


# --- sizes that cannot be built, and odd output paths ------------------------------------------------------------

def test_sizes_that_cannot_be_built_are_refused_at_once():
    with pytest.raises(UserError, match=f"n_layer=100,000: more than {MAX_LAYERS:,} layers"):
        check_layer_count({"n_layer": 100_000})
    check_layer_count({"n_layer": "many"})   # GPTConfig's own message says what is wrong
    huge = GPTConfig(n_layer=1000, n_embd=8192, n_head=2)
    with pytest.raises(UserError, match="GiB in float32, more than this machine's"):
        check_memory(huge)
    check_memory(huge, device="meta")   # tools.plan builds shapes only


@pytest.mark.parametrize("key, value", [("mlp_hidden", 4.5), ("embd_factor_dim", True), ("n_kv_head", "two"),
                                        ("n_attn_layers", 1.0)])
def test_whole_number_fields_refuse_other_values(key, value):
    """GPTConfig's Optional[int] fields: the configurator takes any value for a key whose default is None, so
    model_config refuses what is neither None nor a whole number (True built one hidden unit; 4.5 a traceback)."""
    with pytest.raises(UserError, match=rf"^{key}={value!r}: expected a whole number or None \(fix: "):
        model_config({key: value})
    assert model_config({key: None}).n_layer == 12


def test_an_optional_field_of_any_type_is_checked():
    """Optional[T] for any T, not only int: a future Optional[float] field refuses True (a bool is no number) and
    takes an int; a type that is not Optional[T] is left to GPTConfig's checks."""
    from typing import Optional
    from safety_net.build import fits, optional_kind
    assert optional_kind(Optional[float]) is float and optional_kind(Optional[int]) is int
    assert optional_kind(int | None) is int and optional_kind(float | None) is float
    assert optional_kind(int) is None and optional_kind(str) is None
    assert fits(float, 2) and fits(float, 0.5) and fits(float, None)
    assert not fits(float, True) and not fits(float, "x") and not fits(int, 4.5) and not fits(int, True)


def test_every_field_that_defaults_to_none_is_typed_optional():
    """check_optional_types reads a field's type: a field defaulting to None must say Optional[T] (or T | None),
    else the configurator's any-value for a None default would reach GPTConfig unchecked."""
    import dataclasses
    from safety_net.build import optional_kind
    untyped = [f.name for f in dataclasses.fields(GPTConfig) if f.default is None and optional_kind(f.type) is None]
    assert not untyped, f"fields defaulting to None without an Optional[T] type: {untyped} (fix: type them)"


def test_a_tool_refuses_a_mistyped_whole_number_in_one_line():
    from tools import bench, plan
    one_error_line(plan.main, ["--embd_factor_dim=True"], "embd_factor_dim=True", "whole number")
    one_error_line(bench.main, ["--mlp_hidden=4.5"], "mlp_hidden=4.5", "whole number")
    one_error_line(bench.main, ["--variants=baseline", "--mlp_ratio=2", "--dry_run=True"], "changes nothing")
    one_error_line(plan.main, ["--variant=baseline", "--mlp_ratio=2"], "mlp_ratio=2.0 changes nothing")   # a review


def test_the_weights_bound_never_exceeds_a_model():
    """check_memory must never refuse a model that fits: its bound is at most the real count, for every preset
    (its depth and flags, at a small width) and every flag set of test_model.py's FLAGS, which
    tests/test_support.py makes name every GPTConfig field: a new field that makes a model smaller than
    weights_lower_bound reckons fails here."""
    import variants
    from test_model import FLAGS, TINY
    configs = {}
    for name in variants.available():
        args = {**gpt_config_defaults(), **variants.load(name), "vocab_size": 100, "block_size": 16}
        args["n_embd"] = 8 * args["n_head"]
        args["mlp_hidden"] = args["mlp_hidden"] and 2 * args["n_embd"]
        args["embd_factor_dim"] = args["embd_factor_dim"] and 16
        configs[name] = GPTConfig(**args)
    for name, flags in FLAGS.items():
        configs[f"FLAGS[{name!r}]"] = GPTConfig(**{**TINY, **flags})
    for name, config in configs.items():
        with torch.device("meta"):
            model = GPT(config)
        # what the bound counts, counted on the model: sharper than the whole model, whose attention
        # weights would hide a bound that over-counts the FFN
        assert 0 < weights_lower_bound(config) <= embedding_and_ffn_weights(model), name


def kept_for_the_backward(config, batch_size, dtype):
    """(bytes over the vocabulary, other bytes) of the tensors a training step on batch_size sequences keeps for its
    backward (autograd's saved-tensor hooks, each storage once), its logits counted with the first."""
    torch.manual_seed(0)
    model = GPT(config)
    idx = torch.randint(0, config.vocab_size, (batch_size, config.block_size))
    storages = {}   # data_ptr: (bytes, over the vocabulary)

    def keep(t):
        over_vocab = t.dim() > 0 and t.size(-1) == config.vocab_size
        storages[t.untyped_storage().data_ptr()] = (t.untyped_storage().nbytes(), over_vocab)
        return t

    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bfloat16")
    with torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t), autocast:
        logits, loss = model(idx, targets=idx)
    storages[logits.untyped_storage().data_ptr()] = (logits.untyped_storage().nbytes(), True)
    over_vocab = sum(n for n, vocab in storages.values() if vocab)
    return over_vocab, sum(n for n, _ in storages.values()) - over_vocab


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_batch_bound_never_exceeds_a_step(dtype):
    """check_batch_memory must never refuse a batch that fits: each of its two terms is at most what it counts, for
    every flag set of test_model.py's FLAGS (vocab 37, no width of 37), in float32 and under bfloat16 autocast: the
    logits and the tensors over the vocabulary a training step keeps (their log-softmax), and the other tensors it
    keeps for the backward, both counted as what 4 more sequences add (6 against 2: the weights a Linear keeps
    cancel). The layers' term is also over a sixth of what it counts (a step keeps 1.3-3.1 times it in float32,
    1.5-3.7 times under bf16), so that a batch the kernel would kill is refused: it counted one activation per
    layer, 17-115 times too few, and let a quickstart batch of 100,000 through to the kernel's out-of-memory
    kill."""
    from test_model import FLAGS, TINY
    from safety_net.build import batch_bytes_lower_bound
    for name, flags in FLAGS.items():
        config = GPTConfig(**{**TINY, **flags})
        vocab_2, others_2 = kept_for_the_backward(config, 2, dtype)
        vocab_6, others_6 = kept_for_the_backward(config, 6, dtype)
        evaluation = batch_bytes_lower_bound(config, 4, training=False, dtype=dtype)
        layers = batch_bytes_lower_bound(config, 4, dtype=dtype) - evaluation
        assert evaluation <= vocab_6 - vocab_2, name
        assert (others_6 - others_2) / 6 < layers <= others_6 - others_2, (name, layers, others_6 - others_2)


def test_an_evaluation_is_reckoned_without_the_training_activations():
    """--eval_only keeps no activations for a backward: a micro-batch that a training step cannot hold is refused
    for training and let through for an evaluation, whose logits fit."""
    from safety_net.build import batch_bytes_lower_bound, check_batch_memory
    config = GPTConfig(vocab_size=8, n_layer=8, n_head=1, n_embd=64, block_size=64)
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    batch = memory // batch_bytes_lower_bound(config, 1) + 1   # a training step just over the memory
    assert batch_bytes_lower_bound(config, batch, training=False) < memory / 10
    with pytest.raises(UserError, match="a micro-batch of"):
        check_batch_memory(config, batch, "cpu")
    check_batch_memory(config, batch, "cpu", training=False)


def test_an_eval_only_run_reckons_its_batch_as_an_evaluation():
    """train.py checks the micro-batch before the data is prepared (StartingPoint.check_model, at vocab_size 1):
    --eval_only's as an evaluation there too (a hunt: reckoned as a training step, an evaluation that fits was
    refused, and no test failed)."""
    import train
    from safety_net.build import batch_bytes_lower_bound
    from safety_net.starting_point import StartingPoint
    sizes = dict(vocab_size=1, n_layer=8, n_head=1, n_embd=64, block_size=64)
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    batch = memory // batch_bytes_lower_bound(GPTConfig(**sizes), 1) + 1   # a training step just over the memory
    args = dict(train.MODEL_DEFAULTS, **sizes)
    config = dict(train.DEFAULTS, device="cpu", dtype="float32", batch_size=batch, eval_iters=1)
    with pytest.raises(UserError, match="a micro-batch of"):
        StartingPoint(config, "cpu").check_model(args, set())
    StartingPoint(dict(config, eval_only=True), "cpu").check_model(args, set())


def embedding_and_ffn_weights(model):
    """The token embedding's parameters and the weight matrices of the model's unique MLPs."""
    n = sum(p.numel() for p in model.tok_emb.parameters())
    for module in model.modules():   # each shared module once
        if isinstance(module, MLP):
            n += sum(p.numel() for p in module.parameters() if p.dim() == 2)
    return n


def test_plan_and_bench_at_odd_paths_are_one_line(tmp_path):
    from tools import plan
    from tools.executorch import bench
    (tmp_path / "taken").write_text("a file")
    one_error_line(plan.main, ["--n_layer=100000"], "more than 1,000 layers")
    one_error_line(plan.main, ["--n_layer=2", f"--png={tmp_path / 'taken' / 'p.png'}"], "is a file, not a folder")
    one_error_line(plan.main, ["--n_layer=2", f"--png={tmp_path / 'no' / 'p.png'}"], "does not exist")
    one_error_line(plan.main, ["--n_layer=2", f"--png={tmp_path}"], "PNG file")
    pytest.importorskip("executorch", reason="executorch is not installed")
    one_error_line(bench.main, ["--out_dirs=nope", f"--work_dir={tmp_path / 'taken'}"], "is a file, not a folder")
    assert sorted(os.listdir(tmp_path)) == ["taken"]
