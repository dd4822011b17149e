"""Text appears as it is generated (issue 48): tools.executorch.run and tools.llamacpp.run print each token as it
comes (tokenizers.TextStream), a multi-byte character once all its bytes are there, and Ctrl-C stops them there with
exit code 130, the line `interrupted` on stderr and no traceback.

No runtime is needed here: the runners run on fakes of ExecuTorch's program and of llama_cpp's Llama (a bigram
table of logits), with their real tokenizers and printing. The real runtimes: tests/test_executorch.py's
`-m slow` test of an exported program, tests.fault_trial's et_run_endless_ctrl_c and llamacpp_run_endless_ctrl_c
(the latter where llama_cpp is installed).
"""
import io
import json
import random
import sys
import types

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer

from conftest import one_error_line
from tools.executorch import run as et_run
from tools.huggingface.tokenizer import TokenBytes, char_level, tokenizer_files
from tools.llamacpp import run as lc_run
from tools.llamacpp.export import MODEL_VOCAB_KEY
from safety_net.tokenizers import TextStream, get_gpt2_encoding

# characters of 1 to 4 UTF-8 bytes: GPT-2's BPE splits the snowman and the CJK characters across tokens
MIXED = "na\u00efve caf\u00e9 \u2603 \u65e5\u672c\u8a9e \U0001f642 done\n"


def complete_prefix(data):
    """The text of the longest prefix of `data` that ends where a character ends."""
    for end in range(len(data), -1, -1):
        try:
            return data[:end].decode("utf-8")
        except UnicodeDecodeError:
            continue


def test_text_stream_prints_each_character_once_its_bytes_are_there(gpt2_file):
    enc = get_gpt2_encoding()
    pieces = [enc.decode_single_token_bytes(i) for i in enc.encode_ordinary(MIXED)]
    assert any(complete_prefix(p) != p.decode("utf-8", errors="replace") for p in pieces)   # a split character
    out, data = io.StringIO(), b""
    stream = TextStream(out)
    for piece in pieces:
        stream.add(piece)
        data += piece
        assert out.getvalue() == complete_prefix(data)   # all that is whole, nothing that is not
    stream.end()
    assert out.getvalue() == MIXED + "\n"


@pytest.mark.parametrize("kind", ["gpt2", "char"])
def test_streamed_text_equals_decoding_at_the_end(kind, gpt2_file):
    """Random ids (bytes that are no UTF-8 included, end-of-text, a model's padding ids past the vocabulary):
    TokenBytes (the runner's) through a TextStream print exactly tokenizer.decode(ids), the text it printed before."""
    if kind == "gpt2":
        meta = {"dataset": "x", "tokenizer": "gpt2", "vocab_size": 50257, "eot_token": 50256}
        tokenizer = Tokenizer.from_str(json.dumps(tokenizer_files(meta, 50304, 64)[0]["tokenizer.json"]))
        vocab = 50304
    else:
        tokenizer = Tokenizer.from_str(json.dumps(char_level(list(MIXED))))
        vocab = len(set(MIXED))
    token_bytes, rng = TokenBytes(tokenizer), random.Random(0)
    for _ in range(100):
        ids = [rng.randrange(vocab) for _ in range(rng.randrange(1, 30))]
        out = io.StringIO()
        stream = TextStream(out)
        for token in ids:
            stream.add(token_bytes(token))
        stream.end()
        assert out.getvalue() == tokenizer.decode(ids) + "\n", ids


def sentencepiece_tokenizer():
    """A Llama-layout tokenizer.json (SentencePiece BPE: "\u2581" for a space, byte fallback <0xNN> for a character
    outside the vocabulary; its decoder strips the text's first space), as MobileLLM's and TinyLlama's."""
    words = ["\u2581", "a", "c", "d", "e", "f", "n", "o", "v", "\u2581c", "\u2581ca", "\u2581caf", "\u2581d",
             "\u2581do", "\u2581don", "\u2581done"]
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"<0x{b:02X}>": 3 + b for b in range(256)}}
    for w in words:
        vocab.setdefault(w, len(vocab))
    merges = [[w[:-1], w[-1]] for w in words if len(w) > 1 and w.startswith("\u2581")]
    special = [{"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
                "special": True} for c, i in (("<unk>", 0), ("<s>", 1), ("</s>", 2))]
    return Tokenizer.from_str(json.dumps({
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": special,
        "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"},
                       {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
        "pre_tokenizer": None, "post_processor": None,
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "}, {"type": "ByteFallback"},
            {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                  "vocab": vocab, "merges": merges}}))


def test_sentencepiece_tokens_stream_with_their_spaces_and_bytes():
    """A Llama/MobileLLM tokenizer's tokens decoded one at a time lost their spaces ("Hello world" printed as
    "Helloworld") and each byte-fallback byte became U+FFFD (a hunt): streamed after a prompt, the text is what
    decoding prompt and tokens at once gives after the prompt's text."""
    tokenizer = sentencepiece_tokenizer()
    prompt = tokenizer.encode("done").ids
    ids = tokenizer.encode(MIXED).ids
    assert any(tokenizer.id_to_token(i).startswith("<0x") for i in ids)   # bytes of a character
    out = io.StringIO()
    stream = TextStream(out)
    token_bytes = TokenBytes(tokenizer)
    for token in ids:
        stream.add(token_bytes(token))
    stream.end()
    whole = tokenizer.decode(prompt + ids)
    assert out.getvalue() == whole[len(tokenizer.decode(prompt)):] + "\n" == " " + MIXED + "\n"


# --- tools.executorch.run on a fake program -----------------------------------------------------------------

class BigramProgram:
    """ExecuTorch's Program as the runner uses it: logits of a fixed random bigram table. stop_at: the decode
    step that raises KeyboardInterrupt (Ctrl-C); on_step(step) runs at every step."""

    def __init__(self, vocab_size, max_len=8, on_step=None, stop_at=None):
        self.table = torch.randn(vocab_size, vocab_size, generator=torch.Generator().manual_seed(0)) * 3
        self.max_len, self.vocab_size, self.eot_token, self.tokenizer_id = max_len, vocab_size, -1, None
        self.on_step, self.stop_at, self.steps = on_step, stop_at, 0

    def step(self, token):
        self.steps += 1
        if self.on_step:
            self.on_step(self.steps)
        if self.steps == self.stop_at:
            raise KeyboardInterrupt
        return self.table[token]

    def prefill(self, ids):
        return self.step(ids[-1])

    def decode(self, token, pos):
        return self.step(token)


@pytest.fixture
def fake_program(tmp_path, monkeypatch):
    """(a function that runs tools.executorch.run's main on BigramProgram(**kw) with argv, the char tokenizer)."""
    chars = sorted(set("War is \n" + MIXED))
    tokenizer = Tokenizer.from_str(json.dumps(char_level(chars)))
    (tmp_path / "model.pte").write_bytes(b"not read: the program is a fake")
    (tmp_path / "model.tokenizer.json").write_text(tokenizer.to_str(), encoding="utf-8")
    monkeypatch.setattr(et_run, "probe_program", lambda path: None)
    monkeypatch.setattr(et_run, "check_program_file", lambda path: None)
    monkeypatch.setattr(et_run, "check_pair", lambda *args: None)
    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)   # the runner's; the test process keeps its own

    def main(argv, **kw):
        monkeypatch.setattr(et_run, "Program", lambda path: BigramProgram(len(chars), **kw))
        return et_run.main([f"--pte={tmp_path / 'model.pte'}", *argv])
    return main, tokenizer


def test_executorch_runner_prints_each_token_as_it_comes(fake_program, capsys):
    """Text is on stdout while the program still runs, every step; all of it is the text the runner printed before
    it streamed (the prompt, then the decoded tokens of generate(), a separator per sample)."""
    main, tokenizer = fake_program
    printed = []

    def on_step(step):
        printed.append(capsys.readouterr().out)

    main(["--start=War is ", "--max_new_tokens=30", "--num_samples=2", "--seed=3"], on_step=on_step)
    text = "".join(printed) + capsys.readouterr().out
    assert [len(p) > 0 for p in printed[1:]] == [True] * 59   # each step found the token before it printed
    start = tokenizer.encode("War is ").ids
    generator = torch.Generator().manual_seed(3)
    program = BigramProgram(tokenizer.get_vocab_size())
    samples = [tokenizer.decode(et_run.generate(program, start, 30, 0.8, 200, generator)) for _ in range(2)]
    assert text == "".join(f"{s}\n{et_run.SEPARATOR}\n" for s in samples)
    assert samples[0].startswith("War is ") and samples[0] != samples[1]


def test_executorch_runner_ctrl_c_keeps_what_was_printed(fake_program, capsys):
    main, tokenizer = fake_program
    with pytest.raises(SystemExit) as e:
        main(["--start=War is ", f"--max_new_tokens={10**15}"], stop_at=12)
    out, err = capsys.readouterr()
    assert e.value.code == 130 and err.strip().splitlines()[-1] == "interrupted"
    assert out.startswith("War is ") and len(out) == len("War is ") + 11   # the 11 tokens drawn before Ctrl-C


# --- tools.llamacpp.run on a fake Llama ---------------------------------------------------------------------

class BigramLlama:
    """llama_cpp.Llama as the runner uses it, over a byte-level vocabulary (the 256 bytes, then pieces that cut
    characters): greedy after token t is self.next[t], which after a space cycles through CYCLE, the text
    "\u2603 \u65e5\u672c \U0001f642\ncaf\u00e9! " in tokens that cut four of its characters in two. stop_at: the
    eval call that raises KeyboardInterrupt."""

    PIECES = [b"\xe2\x98", b"\x83 ", b"\xe6\x97", b"\xa5\xe6\x9c\xac", b" \xf0\x9f", b"\x99\x82\n", b"caf\xc3"]
    CYCLE = [32, 256, 257, 258, 259, 260, 261, 262, 0xa9, ord("!")]

    def __init__(self, on_eval=None, stop_at=None):
        self.vocab = [bytes([b]) for b in range(256)] + self.PIECES
        self.next = [32] * len(self.vocab)
        for token, after in zip(self.CYCLE, self.CYCLE[1:] + self.CYCLE[:1]):
            self.next[token] = after
        self.metadata = {"general.architecture": "llama", "llama.context_length": "8"}
        self.tokens, self.on_eval, self.stop_at, self.evals = [], on_eval, stop_at, 0

    def n_vocab(self):
        return len(self.vocab)

    def tokenize(self, data, add_bos, special):
        return list(data)

    def detokenize(self, ids):
        return b"".join(self.vocab[i] for i in ids)

    def reset(self):
        self.tokens = []

    def eval(self, ids):
        self.evals += 1
        if self.on_eval:
            self.on_eval(self.evals)
        if self.evals == self.stop_at:
            raise KeyboardInterrupt
        self.tokens += ids

    @property
    def n_tokens(self):
        return len(self.tokens)

    @property
    def scores(self):
        return np.eye(len(self.vocab), dtype=np.float32)[[self.next[t] for t in self.tokens]]


@pytest.fixture
def llama_run(tmp_path, monkeypatch):
    """(a function that runs tools.llamacpp.run's main with argv on `llm`, or with its load raising `load_error`,
    the list of num_threads each load was given)."""
    (tmp_path / "model.gguf").write_bytes(b"not read: the model is a fake")
    monkeypatch.setattr(lc_run, "check_gguf", lambda path: None)
    monkeypatch.setitem(sys.modules, "llama_cpp", types.ModuleType("llama_cpp"))   # installed, as far as run knows
    loads = []

    def main(argv, llm=None, load_error=None):
        def load(path, num_threads):
            loads.append(num_threads)
            if load_error is not None:
                raise load_error
            return llm
        monkeypatch.setattr(lc_run, "load", load)
        return lc_run.main([f"--gguf={tmp_path / 'model.gguf'}", *argv])
    return main, loads


@pytest.fixture
def fake_llama(llama_run):
    """llama_run's main on a BigramLlama made with the keyword arguments."""
    main, _ = llama_run

    def run(argv, **kw):
        return main(argv, BigramLlama(**kw))
    return run


def test_llamacpp_runner_prints_each_token_as_it_comes(fake_llama, capsys):
    """Every eval finds the text of the tokens before it printed (characters cut by a token wait for the next);
    all of it is the text of all the bytes decoded at once, as the runner printed before it streamed."""
    printed = []

    def on_eval(n):
        printed.append(capsys.readouterr().out)

    fake_llama(["--start=War is ", "--max_new_tokens=40"], on_eval=on_eval)
    text = "".join(printed) + capsys.readouterr().out
    llm = BigramLlama()
    tokens = [ord(" ")]
    for _ in range(40):
        tokens.append(llm.next[tokens[-1]])
    expected = "War is " + llm.detokenize(tokens[1:]).decode("utf-8", errors="replace") + "\n"
    assert text == expected and "\u2603 \u65e5\u672c \U0001f642\ncaf\u00e9! " in text   # cut characters, whole
    assert sum(len(p) > 0 for p in printed[1:]) > 20   # text came out along the way, not at the end


def test_llamacpp_runner_ctrl_c_keeps_what_was_printed(fake_llama, capsys):
    with pytest.raises(SystemExit) as e:
        fake_llama(["--start=War is ", f"--max_new_tokens={10**15}"], stop_at=30)
    out, err = capsys.readouterr()
    assert e.value.code == 130 and err.strip().splitlines()[-1] == "interrupted"
    assert out.startswith("War is ") and len(out) > len("War is ") + 10


@pytest.mark.parametrize("cut", [1, 2, 3])
def test_a_stream_that_ends_inside_a_character_prints_its_replacement_character(cut):
    """A sample can end inside a character (max_new_tokens reached after the first byte of a BPE token pair):
    end() prints what was held back, U+FFFD, as decoding the whole sample does; it is not dropped."""
    data = "ok \U0001f642".encode("utf-8")[:-cut]   # the emoji's 4 bytes, cut short
    out = io.StringIO()
    stream = TextStream(out)
    stream.add(data)
    assert out.getvalue() == "ok "   # the partial character is held back...
    stream.end()
    expected = data.decode("utf-8", errors="replace") + "\n"
    assert expected == "ok \ufffd\n"
    assert out.getvalue() == expected   # ...and printed at the end, as one replacement character


class RecordingLlama:
    """llama_cpp.Llama as the runner uses it, recording its reset and eval calls: a vocabulary of `n` one-byte
    tokens whose logits are highest at `best`, then at `second`; metadata as llama_cpp gives it (strings), with
    MODEL_VOCAB_KEY when model_vocab is given."""

    def __init__(self, context=4, n=128, best=ord("x"), second=ord("A"), model_vocab=None):
        self.metadata = {"general.architecture": "llama", "llama.context_length": str(context)}
        if model_vocab is not None:
            self.metadata[MODEL_VOCAB_KEY] = str(model_vocab)
        self.n, self.best, self.second, self.tokens, self.calls = n, best, second, [], []

    def n_vocab(self):
        return self.n

    def tokenize(self, data, add_bos, special):
        return list(data)

    def detokenize(self, ids):
        return bytes(ids)

    def reset(self):
        self.calls.append("reset")
        self.tokens = []

    def eval(self, ids):
        self.calls.append(list(ids))
        self.tokens += ids

    @property
    def n_tokens(self):
        return len(self.tokens)

    @property
    def scores(self):
        scores = np.zeros((len(self.tokens), self.n), dtype=np.float32)
        scores[:, self.best], scores[:, self.second] = 2, 1
        return scores


def test_llamacpp_greedy_loop_reprimes_with_the_newest_half_once_the_context_is_outgrown():
    """Context 4, a prompt of 3 ids, 5 new tokens: llama.cpp evaluates the prompt, then one new token at a time, and
    once the window outgrows the context (5 ids) starts over (reset) from its newest 2, as model.generate does: the
    calls are exactly these (a hunt: a changed line did this, and no test failed)."""
    llm = RecordingLlama(context=4, n=10, best=7, second=3)
    assert list(lc_run.greedy_tokens(llm, [1, 2, 3], 5, 10)) == [7] * 5
    assert llm.calls == ["reset", [1, 2, 3], [7], "reset", [7, 7], [7], [7]]


def test_llamacpp_runner_draws_among_the_tokenizers_ids_on_every_cpu(llama_run, monkeypatch, capsys):
    """A file whose MODEL_VOCAB_KEY says 100 of its 128 rows are the tokenizer's ids: the greedy token is the best
    of those ('A'), never a padding row past them ('x'), as sample.py draws; --num_threads=0 (the default) loads
    llama.cpp with a thread per CPU (a hunt: a changed line did this, and no test failed)."""
    main, loads = llama_run
    assert lc_run.model_vocab(RecordingLlama(model_vocab=100)) == 100
    assert lc_run.model_vocab(RecordingLlama()) == 128   # a GGUF from elsewhere: all of its rows
    monkeypatch.setattr(lc_run.os, "cpu_count", lambda: 3)
    main(["--start=ab", "--max_new_tokens=3"], RecordingLlama(model_vocab=100))
    assert capsys.readouterr().out == "abAAA\n" and loads == [3]


def test_llamacpp_runner_refusals_after_loading_are_one_line(llama_run):
    """An empty --start, and a file llama.cpp cannot load (llama_cpp raises ValueError): one line each (a hunt: a
    changed line did this, and no test failed)."""
    main, _ = llama_run
    one_error_line(lambda argv: main(argv, RecordingLlama()), ["--start="], "--start is empty")
    one_error_line(lambda argv: main(argv, load_error=ValueError("Failed to load model from file")), ["--start=ab"],
                   "llama.cpp cannot load", "(Failed to load model from file)")
