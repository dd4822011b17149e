"""sample.py from the command line on a tiny checkpoint built in tmp_path (no training needed)."""
import os
import subprocess
import sys

import pytest
import torch

from conftest import one_error_line, write_char_checkpoint
from model import GPT, GPTConfig
from tests.test_model import visible_weights

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHARS = list("\n !',.:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")


def make_checkpoint(tmp_path, **model_overrides):
    """A tiny char model with its weights at std 0.3 (so the next character depends strongly on the context, and a
    KV cache that loses or shifts a position changes the text), saved like train.py does, with its meta.json."""
    torch.manual_seed(0)
    args = dict(vocab_size=len(CHARS), block_size=32, n_layer=2, n_head=2, n_embd=32, dropout=0.0)
    args.update(model_overrides)
    model = visible_weights(GPT(GPTConfig(**args)))
    return write_char_checkpoint(tmp_path, model, CHARS)


def run_sample(*args, cwd=None):
    # one thread: tiny models gain nothing from more, and on a busy machine OpenMP threads that wait
    # for each other make every forward pass 100x slower
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, os.path.join(ROOT, "sample.py"), *args],
                          capture_output=True, text=True, cwd=cwd or ROOT, timeout=120, env=env)


def samples(stdout):
    parts = stdout.split("---------------\n")
    assert parts[-1] == ""
    return [p[:-1] for p in parts[:-1]]   # each sample is printed with a trailing newline


@pytest.fixture(scope="module")
def ckpt_dir(tmp_path_factory):
    return make_checkpoint(tmp_path_factory.mktemp("sample"))


pytestmark = pytest.mark.usefixtures("one_thread")   # conftest.py


def run_main(capsys, *args):
    """sample.main in this process (no interpreter start-up): (stdout, stderr)."""
    import sample
    sample.main(list(args))
    captured = capsys.readouterr()
    return captured.out, captured.err


# --- from the command line (each subprocess pays the ~3 s torch import, so they are few) ----------

def test_cli_unknown_characters_one_line_error(ckpt_dir):
    r = run_sample(f"--out_dir={ckpt_dir}", "--start=caf\u00e9 \u20ac5", "--device=cpu")
    assert r.returncode != 0
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("error: characters not in the vocabulary:")
    assert "'\u00e9'" in lines[0] and "'\u20ac'" in lines[0] and "'5'" in lines[0]
    assert "tinychars" in lines[0]
    assert lines[0].endswith("(fix: remove them from --start)")   # was "; fix: ...", which no one-line check finds
    assert r.stdout == ""


# --- in process -------------------------------------------------------------------------------------

def test_cli_missing_checkpoint(tmp_path, capsys):
    import sample
    one_error_line(sample.main, [f"--out_dir={tmp_path / 'nothing_here'}", "--device=cpu"], "train.py")
    assert capsys.readouterr().out == ""

def test_cli_file_start_and_no_kv_cache_same_text(ckpt_dir, tmp_path, capsys):
    """The command line's arguments, given to sample.main in this process (the tests above start sample.py as a
    process; a second and third start would cost ~4 s each and check nothing more)."""
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("First Citizen:\nSpeak.", encoding="utf-8")
    # 70 new tokens past a block of 32 also exercises the window re-priming of both paths
    common = [f"--out_dir={ckpt_dir}", f"--start=FILE:{prompt}", "--num_samples=2", "--max_new_tokens=70",
              "--seed=7", "--device=cpu", "--temperature=1.0"]
    cached_out, cached_err = run_main(capsys, *common)
    # a bare --no_kv_cache, followed by another option it must not swallow
    plain_out, plain_err = run_main(capsys, "--no_kv_cache", *common)
    assert "KV cache on" in cached_err and "KV cache off" in plain_err
    out = samples(cached_out)
    assert len(out) == 2
    for s in out:
        assert s.startswith("First Citizen:\nSpeak.")
        assert len(s) == len("First Citizen:\nSpeak.") + 70   # char tokenizer: one character per token
    assert out[0] != out[1]
    assert cached_out == plain_out


def test_start_text_and_seeds(ckpt_dir, capsys):
    common = [f"--out_dir={ckpt_dir}", "--start=ROMEO: ", "--num_samples=1", "--max_new_tokens=40",
              "--device=cpu", "--temperature=1.0"]
    a, _ = run_main(capsys, *common, "--seed=1")
    b, err = run_main(capsys, *common, "--seed=1", "--no_kv_cache=True")
    c, _ = run_main(capsys, *common, "--seed=2")
    assert samples(a)[0].startswith("ROMEO: ") and len(samples(a)[0]) == len("ROMEO: ") + 40
    assert "KV cache off" in err
    assert a == b and a != c


def test_greedy_is_deterministic(ckpt_dir, capsys):
    common = [f"--out_dir={ckpt_dir}", "--start=A", "--num_samples=2", "--max_new_tokens=20",
              "--device=cpu", "--temperature=0"]
    out = samples(run_main(capsys, *common)[0])
    assert out[0] == out[1]


def test_keep_heaviest_branch_on_pgpt(tmp_path, capsys):
    out_dir = make_checkpoint(tmp_path, n_branches=2, tie_embeddings=False)
    out, err = run_main(capsys, f"--out_dir={out_dir}", "--keep_heaviest_branch", "--start=A",
                        "--num_samples=1", "--max_new_tokens=5", "--device=cpu")
    assert "running only branch" in err
    assert samples(out)[0].startswith("A")


def test_falls_back_to_last_pt(ckpt_dir, tmp_path, capsys):
    out_dir = tmp_path / "resumable"
    out_dir.mkdir()
    os.link(ckpt_dir / "ckpt.pt", out_dir / "last.pt")
    _, err = run_main(capsys, f"--out_dir={out_dir}", "--start=A", "--num_samples=1", "--max_new_tokens=3",
                      "--device=cpu")
    assert "last.pt" in err


def test_bad_start_file_is_one_line_error(ckpt_dir, tmp_path, monkeypatch, capsys):
    """One line, even on a busy machine: its note came first."""
    import sample
    from safety_net import sampling
    monkeypatch.setattr(sampling, "busy_machine", lambda device: "other jobs keep the CPUs busy")
    with pytest.raises(SystemExit) as e:
        sample.main([f"--out_dir={ckpt_dir}", f"--start=FILE:{tmp_path / 'missing.txt'}"])
    assert str(e.value).startswith("error: cannot read the start file") and "\n" not in str(e.value)
    assert capsys.readouterr().err == ""


def test_a_refused_checkpoint_or_dataset_is_one_line_on_a_busy_machine(ckpt_dir, tmp_path, monkeypatch, capsys):
    """On a busy machine, a checkpoint or a --data_dir that is missing is the error line alone; the busy note comes
    in the header, once every check has passed (an exploration as a new user found it: "note: the machine is
    busy ..." printed first, then the error)."""
    import sample
    from safety_net import sampling
    monkeypatch.setattr(sampling, "busy_machine", lambda device: "other jobs keep the CPUs busy")
    one_error_line(sample.main, [f"--out_dir={tmp_path / 'missing'}"], "does not exist")
    one_error_line(sample.main, [f"--out_dir={ckpt_dir}", f"--data_dir={tmp_path / 'missing'}"], "meta.json")
    assert capsys.readouterr().err == ""
    _, err = run_main(capsys, f"--out_dir={ckpt_dir}", "--start=A", "--num_samples=1", "--max_new_tokens=2")
    assert err.startswith("sampling from ") and "; other jobs keep the CPUs busy\n" in err


def test_a_start_file_that_is_not_utf8_is_one_line_error(ckpt_dir, tmp_path):
    """A Latin-1 prompt file: one line naming the file (a hunt: without its UnicodeDecodeError in read_prompt's
    except, nothing caught it), and no sample."""
    import sample
    prompt = tmp_path / "latin1.txt"
    prompt.write_bytes("caf\u00e9\n".encode("latin-1"))
    one_error_line(sample.main, [f"--out_dir={ckpt_dir}", f"--start=FILE:{prompt}"],
                   f"cannot read the start file '{prompt}'", "utf-8 text file")


def test_no_new_tokens_prints_the_prompt(ckpt_dir, capsys):
    """--max_new_tokens=0 is allowed (the prompt alone, e.g. to check its encoding); only a negative count is refused."""
    out, _ = run_main(capsys, f"--out_dir={ckpt_dir}", "--start=ROMEO:", "--num_samples=2", "--max_new_tokens=0",
                      "--device=cpu")
    assert samples(out) == ["ROMEO:", "ROMEO:"]


def test_num_threads_sets_torchs_threads():
    import sample
    from safety_net.sampling import setup_sampling
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        setup_sampling(dict(sample.DEFAULTS, num_threads=1, device="cpu"))
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_expand_bool_flags():
    from safety_net.configurator import expand_bool_flags
    flags = ("no_kv_cache",)
    assert expand_bool_flags(["--no_kv_cache"], flags) == ["--no_kv_cache=True"]
    assert expand_bool_flags(["--no_kv_cache", "--seed=1"], flags) == ["--no_kv_cache=True", "--seed=1"]
    assert expand_bool_flags(["--no_kv_cache", "False"], flags) == ["--no_kv_cache", "False"]
    assert expand_bool_flags(["--no-kv-cache", "cfg.py"], flags) == ["--no_kv_cache=True", "cfg.py"]
    assert expand_bool_flags(["--no_kv_cache=0"], flags) == ["--no_kv_cache=0"]


def test_default_out_dir_is_the_newest_checkpoint(tmp_path):
    from safety_net.checkpoint import latest_out_dir
    assert latest_out_dir(str(tmp_path)) == str(tmp_path / "out")
    for i, name in enumerate(["out", "out-lgpt-shakespeare", "outside"]):
        (tmp_path / name).mkdir()
        (tmp_path / name / ("ckpt.pt" if i != 1 else "last.pt")).write_bytes(b"x")
        os.utime(tmp_path / name / ("ckpt.pt" if i != 1 else "last.pt"), (1000 + i, 1000 + i))
    (tmp_path / "notes").mkdir()
    assert latest_out_dir(str(tmp_path)) == str(tmp_path / "outside")
    os.utime(tmp_path / "out-lgpt-shakespeare" / "last.pt", (2000, 2000))
    assert latest_out_dir(str(tmp_path)) == str(tmp_path / "out-lgpt-shakespeare")


def test_no_checkpoint_anywhere_is_not_announced_as_the_newest(tmp_path, monkeypatch, capsys):
    """With no out*/ checkpoint, one line says to train first; it announced 'out' as the newest checkpoint."""
    import sample
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit, match="checkpoint 'out' does not exist"):
        sample.main(["--device=cpu"])
    assert "newest" not in capsys.readouterr().err


def test_a_missing_checkpoints_fix_names_no_option_the_command_lacks(tmp_path):
    """Its fix said "pass the right --out_dir", which tools.pangu.inherit (--init_from) does not take."""
    from tools.pangu import inherit
    argv = [f"--init_from={tmp_path / 'none.pt'}", f"--out_dir={tmp_path / 'small'}", "--n_layer=1"]
    one_error_line(inherit.main, argv, "does not exist", "name a run folder or checkpoint file")
    with pytest.raises(SystemExit) as e:
        inherit.main(argv)
    assert "--out_dir" not in str(e.value)


def test_an_empty_prompt_is_refused_with_a_fix_that_works(ckpt_dir):
    """Its fix said --start="\\n", which a shell passes as a backslash and an n."""
    import sample
    with pytest.raises(SystemExit, match="--start is empty .*leave --start out"):
        sample.main([f"--out_dir={ckpt_dir}", "--device=cpu", "--start="])


def test_an_empty_prompt_of_a_text_without_newlines_gets_a_fix_that_works():
    """Its fix said "leave --start out: a newline", which the same vocabulary refuses next (a hunt)."""
    from safety_net.configurator import UserError
    from safety_net.tokenizers import check_prompt, tokenizer_from_meta
    tok = tokenizer_from_meta(dict(tokenizer="char", vocab_size=3, chars=["a", "b", " "]))
    with pytest.raises(UserError, match="a newline, the default, is not one of them"):
        check_prompt(tok, "", "ab")
    with pytest.raises(UserError, match="characters not in the vocabulary: '\\\\n'"):   # what the old fix led to
        check_prompt(tok, "\n", "ab")


def test_a_prompt_in_another_unicode_form_than_the_text_gets_a_fix_naming_it():
    """A text that writes é as e + a combining accent (NFD, as some editors save it) and a --start typed with the
    one character é (NFC): the same to a reader, a character the vocabulary lacks; its fix was to remove it."""
    from safety_net.configurator import UserError
    from safety_net.tokenizers import check_prompt, tokenizer_from_meta
    decomposed = tokenizer_from_meta(dict(tokenizer="char", vocab_size=4, chars=["a", "c", "e", "\u0301"]))
    with pytest.raises(UserError, match="in Unicode's NFD form"):
        check_prompt(decomposed, "ac\u00e9", "ab")
    composed = tokenizer_from_meta(dict(tokenizer="char", vocab_size=3, chars=["a", "c", "\u00e9"]))
    with pytest.raises(UserError, match="in Unicode's NFC form"):
        check_prompt(composed, "ace\u0301", "ab")
    with pytest.raises(UserError, match="remove them from --start"):   # no form helps: the old fix
        check_prompt(composed, "acx", "ab")
    check_prompt(decomposed, "ace\u0301", "ab")   # the text's own form: taken


# --- text as it is generated (issue 48) ---------------------------------------------------------

def test_text_appears_as_it_is_generated(ckpt_dir, capsys, monkeypatch):
    """Each token's text is on stdout before the next token is drawn: a generate that checks stdout after every
    token it hands on sees the sample growing, beginning with the prompt."""
    import sample
    from model import GPT
    seen = []
    generate = GPT.generate

    def watching_generate(model, idx, *args, on_token=None, **kwargs):
        def hand_on(token):
            on_token(token)
            seen.append(capsys.readouterr().out)
        return generate(model, idx, *args, on_token=hand_on, **kwargs)

    cfg = dict(sample.DEFAULTS, out_dir=str(ckpt_dir), start="ROMEO:", num_samples=1, max_new_tokens=12,
               device="cpu", temperature=0)
    with monkeypatch.context() as patched:
        patched.setattr(GPT, "generate", watching_generate)
        sample.run(cfg)
    rest = capsys.readouterr().out
    assert len(seen) == 12 and seen[0].startswith("ROMEO:") and all(len(s) == 1 for s in seen[1:])
    streamed = "".join(seen) + rest
    out, _ = run_main(capsys, f"--out_dir={ckpt_dir}", "--start=ROMEO:", "--num_samples=1",
                      "--max_new_tokens=12", "--device=cpu", "--temperature=0")
    assert streamed == out   # the same text as an unwatched run


class ByteTokenizer:
    """Token i is the one byte i: a stream can end inside a character, or hold a byte no UTF-8 text has."""
    vocab_size = 256

    def token_bytes(self, token):
        return bytes([token])


def test_write_samples_decodes_cut_and_invalid_bytes_counts_new_tokens_and_autocasts(capsys):
    """What write_samples does around generate (each untested until a hunt): a byte that is no UTF-8 is U+FFFD
    (it was a UnicodeDecodeError), a character cut at the end is U+FFFD before the separator, the speed line
    counts the new tokens only (not the prompt's), and a bfloat16 dtype samples under autocast."""
    import sample
    new = [0xFF, ord("o"), ord("k"), 0xC3]   # an invalid byte, "ok", half of an "é"
    autocast = []

    def fake_generate(model, x, max_new_tokens, temperature, top_k, use_kv_cache, generator, on_token, n_tokens):
        autocast.append(torch.is_autocast_enabled("cpu"))
        for token in new:
            on_token(torch.tensor(token))
        return torch.cat([x, torch.tensor([new])], dim=1)

    model = GPT(GPTConfig(vocab_size=256, block_size=8, n_layer=1, n_head=1, n_embd=8))
    cfg = dict(sample.DEFAULTS, num_samples=2, max_new_tokens=len(new))
    prompt = [ord(c) for c in "ab"]
    sample.write_samples(model, ByteTokenizer(), "ab", prompt, cfg, torch.device("cpu"), torch.bfloat16, "src",
                         fake_generate)
    out, err = capsys.readouterr()
    assert samples(out) == ["ab\ufffdok\ufffd"] * 2
    assert autocast == [True, True]
    assert f"{2 * len(new)} tokens in" in err and "bfloat16, KV cache on" in err


@pytest.mark.parametrize("kind", ["gpt2", "char"])
def test_each_tokenizer_streams_what_decode_gives(kind, gpt2_file, capsys):
    """sample.py prints tok.token_bytes(id) through an incremental UTF-8 decoder (print_token): for each of our
    tokenizers (GPT-2 BPE splits the emoji and the CJK characters across tokens; nanoGPT's meta.pkl is a
    CharTokenizer too) the text printed token by token is tok.decode of all ids, and never half a character."""
    import codecs
    import sample
    from safety_net.tokenizers import BPETokenizer, CharTokenizer, get_gpt2_encoding
    text = "War is \U0001f642 peace, \u5e73\u548c \u2014 ok\n"
    if kind == "gpt2":
        tok = BPETokenizer(get_gpt2_encoding(), 50257, 50256)
    else:
        tok = CharTokenizer(sorted(set(text)))
    ids = tok.encode(text)
    utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
    printed = ""
    for i in ids:
        sample.print_token(tok, utf8, i)
        printed += capsys.readouterr().out
        assert "\ufffd" not in printed
    assert utf8.decode(b"", final=True) == ""   # nothing held back at the end
    assert printed == tok.decode(ids) == text


def test_ctrl_c_keeps_what_was_printed_without_a_traceback(ckpt_dir):
    """Ctrl-C during a long generation: exit code 130, the text printed so far stays, no traceback."""
    import signal
    import time
    env = dict(os.environ, OMP_NUM_THREADS="1")
    cmd = [sys.executable, os.path.join(ROOT, "sample.py"), f"--out_dir={ckpt_dir}", "--start=ROMEO:",
           "--num_samples=1", "--max_new_tokens=100000000", "--device=cpu"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env)
    try:
        first = proc.stdout.read(40)   # the prompt and 34 generated characters: it is generating
        time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert first.startswith("ROMEO:") and len(first) == 40
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err


def test_start_file_from_notepad_drops_its_byte_order_mark(ckpt_dir, tmp_path, capsys):
    prompt = tmp_path / "prompt.txt"
    prompt.write_bytes("\ufeffROMEO:".encode("utf-8"))
    out, _ = run_main(capsys, f"--out_dir={ckpt_dir}", f"--start=FILE:{prompt}", "--num_samples=1",
                      "--max_new_tokens=5", "--device=cpu")
    assert samples(out)[0].startswith("ROMEO:")


def test_a_start_file_from_notepad_reads_its_line_ends_as_newlines(ckpt_dir, tmp_path, capsys):
    """--start=FILE: reads line ends as nanoGPT's sample.py does ("\r\n" and "\r" as "\n"), so a prompt written
    by Notepad fits a model of a text with "\n" (a version that kept the "\r" refused it: not in the
    vocabulary)."""
    from safety_net.sampling import read_prompt
    prompt = tmp_path / "prompt.txt"
    prompt.write_bytes(b"ROMEO:\r\nJULIET:\rNURSE:\n")
    assert read_prompt(f"FILE:{prompt}") == "ROMEO:\nJULIET:\nNURSE:\n"
    out, _ = run_main(capsys, f"--out_dir={ckpt_dir}", f"--start=FILE:{prompt}", "--num_samples=1",
                      "--max_new_tokens=5", "--device=cpu")
    assert samples(out)[0].startswith("ROMEO:\nJULIET:\nNURSE:\n")


def test_a_text_without_line_ends_names_the_default_start(tmp_path, capsys):
    """A model of a text without "\n", sampled with a plain `python sample.py`, was told to remove characters from
    a --start it was never given."""
    torch.manual_seed(0)
    chars = list("ab")
    out = write_char_checkpoint(tmp_path, GPT(GPTConfig(vocab_size=2, block_size=8, n_layer=1, n_head=1,
                                                         n_embd=8)), chars)
    with pytest.raises(SystemExit) as e:
        run_main(capsys, f"--out_dir={out}", "--device=cpu")
    assert "a newline, the default, is not one of them" in str(e.value.code), e.value.code
    with pytest.raises(SystemExit) as e:   # a --start given: only its own characters are named
        run_main(capsys, f"--out_dir={out}", "--start=ab\nba", "--device=cpu")
    assert "(fix: remove them from --start)" in str(e.value.code), e.value.code
    out_text, _ = run_main(capsys, f"--out_dir={out}", "--start=ab", "--num_samples=1", "--max_new_tokens=3",
                           "--device=cpu")   # the fix works
    assert samples(out_text)[0].startswith("ab")


# --- a vocabulary padded past the tokenizer's (nanoGPT's 50304 for GPT-2's 50257) ------------------

def test_a_padded_vocabulary_never_draws_a_token_without_text(tmp_path, capsys):
    """A model with more vocabulary rows than its tokenizer has tokens: generate(n_tokens=...) draws only the
    tokenizer's ids, so sample.py and tools.fast_sample print text (they crashed with an IndexError, or tiktoken's
    KeyError, at the first padded id drawn). At these weights and temperature 2 the padded rows are most of the
    probability: without n_tokens nearly every draw is one."""
    from tools import fast_sample
    from safety_net.dataset import load_meta, tokenizer_id
    out = make_checkpoint(tmp_path, vocab_size=4 * len(CHARS))
    ckpt = torch.load(out / "ckpt.pt", weights_only=True)   # as train.py --vocab_size=244 records it
    ckpt["tokenizer_id"] = tokenizer_id(load_meta(str(tmp_path / "data")))
    torch.save(ckpt, out / "ckpt.pt")
    text, _ = run_main(capsys, f"--out_dir={out}", "--device=cpu", "--num_samples=2", "--max_new_tokens=60",
                       "--temperature=2", "--top_k=0", "--start=a")
    assert all(len(s) == 61 and set(s) <= set(CHARS) for s in samples(text))
    model = GPT(GPTConfig(vocab_size=4 * len(CHARS), block_size=16, n_layer=1, n_head=2, n_embd=16))
    model = visible_weights(model)
    prompt = torch.zeros((1, 3), dtype=torch.long)
    torch._dynamo.reset()
    fast_sample.compiled_decode_step(model, backend="eager")   # the step generate uses, without inductor's compile
    for generate in (GPT.generate, fast_sample.generate):
        padded = generate(model, prompt, 40, 2.0, generator=torch.Generator().manual_seed(0))[0, 3:]
        assert (padded >= len(CHARS)).sum() > 20
        kept = generate(model, prompt, 40, 2.0, generator=torch.Generator().manual_seed(0), n_tokens=len(CHARS))
        assert kept[0, 3:].max() < len(CHARS)


def test_fast_sample_refuses_deep_thinking_before_it_prints(tmp_path, capsys):
    """tools.fast_sample's refusal of Deep Thinking came after the header and the prompt were printed."""
    from tools import fast_sample
    out = make_checkpoint(tmp_path, think_steps=2)
    with pytest.raises(SystemExit, match="does not hold Deep Thinking's memory"):
        fast_sample.main([f"--out_dir={out}", "--device=cpu", "--start=a", "--max_new_tokens=2"])
    captured = capsys.readouterr()
    assert captured.out == "" and "sampling from" not in captured.err


def test_a_start_of_bytes_that_are_not_utf8_is_refused():
    """A shell passes bytes that are not UTF-8 as lone surrogates ('ab\\udcffc'): a GPT-2 or compact model was
    prompted with 'ab\\ufffdc' without a word, the raw byte echoed as the prompt (a hunt). One line, as a FILE: prompt
    that is not UTF-8 gets; the same text in UTF-8 is read as given."""
    import os
    from safety_net.configurator import UserError
    from safety_net.sampling import read_prompt
    start = os.fsdecode(b"ab\xffc")   # what sys.argv holds for those bytes
    with pytest.raises(UserError, match=r"--start holds bytes that are not UTF-8 text \(at character 2\) .*FILE:"):
        read_prompt(start)
    assert read_prompt("ab\u00ffc") == "ab\u00ffc"


def test_a_sample_into_an_encoding_that_lacks_its_characters_prints_them_as_question_marks(tmp_path):
    """python sample.py > out.txt on Windows writes cp1252, which has no '日': a UnicodeEncodeError traceback at the
    prompt, or mid-sample (a hunt). Such characters print as '?'; the rest of the sample as it is."""
    import subprocess
    import sys
    from conftest import write_char_checkpoint
    from model import GPT, GPTConfig
    chars = list("ab日本 ")
    torch.manual_seed(0)
    out = write_char_checkpoint(tmp_path, GPT(GPTConfig(vocab_size=len(chars), block_size=8, n_layer=1, n_head=1,
                                                        n_embd=8)), chars)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONIOENCODING="cp1252")
    r = subprocess.run([sys.executable, os.path.join(root, "sample.py"), f"--out_dir={out}", "--start=a日本",
                        "--num_samples=1", "--max_new_tokens=20", "--device=cpu", "--seed=1"],
                       capture_output=True, env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr.decode("cp1252", "replace")[-500:]
    assert b"a??" in r.stdout and b"Traceback" not in r.stderr


def compile_with_dynamos_eager_backend(monkeypatch):
    """torch.compile with dynamo's eager backend, in place of inductor's minutes: fast_sample's path, traced."""
    real_compile = torch.compile

    def eager(fn, **kwargs):
        return real_compile(fn, backend="eager", fullgraph=True)

    monkeypatch.setattr(torch, "compile", eager)
    torch._dynamo.reset()


def test_fast_sample_compiles_before_its_clock_and_samples_as_sample_py(tmp_path, capsys, monkeypatch):
    """tools.fast_sample's tokens/s included compiling its decode step (1.3 tokens/s where the step runs 300; a
    hunt): the step compiles first, its time on a line of its own, and the samples stay sample.py's. The compile is
    stood in for by dynamo's eager backend."""
    from tools import fast_sample
    out = make_checkpoint(tmp_path)
    args = [f"--out_dir={out}", "--device=cpu", "--start=ab", "--max_new_tokens=30", "--seed=5", "--num_samples=2"]
    expected, _ = run_main(capsys, *args)
    compile_with_dynamos_eager_backend(monkeypatch)
    calls = []
    timed = fast_sample.compile_before_timing
    monkeypatch.setattr(fast_sample, "compile_before_timing", lambda *a: calls.append(a) or timed(*a))
    fast_sample.main(args)
    captured = capsys.readouterr()
    assert captured.out == expected and len(calls) == 1
    assert "compiled the decode step in" in captured.err.split("sampling from")[0]   # before the clock starts
    fast_sample.main(args[:-3] + ["--max_new_tokens=1"])   # the prime's token only: nothing to compile
    assert len(calls) == 1
    torch._dynamo.reset()


def test_fast_sample_keeps_pgpts_branch_before_it_compiles(tmp_path, capsys, monkeypatch):
    """--keep_heaviest_branch: the branch is kept before the decode step compiles. Kept after it (write_samples), the
    step of both branches was compiled for nothing and compiled again inside the timed loop (6.4 tokens/s where it
    runs 1,750; a hunt of the user tools). The samples stay sample.py's; dynamo's eager backend stands in."""
    from tools import fast_sample
    out = make_checkpoint(tmp_path, n_branches=2, tie_embeddings=False)
    args = [f"--out_dir={out}", "--device=cpu", "--start=ab", "--max_new_tokens=20", "--seed=5", "--num_samples=1",
            "--keep_heaviest_branch"]
    expected, _ = run_main(capsys, *args)
    compile_with_dynamos_eager_backend(monkeypatch)
    kept = []
    timed = fast_sample.compile_before_timing

    def compile_before_timing(model, *args):
        kept.append(model.keep_branch)
        return timed(model, *args)

    monkeypatch.setattr(fast_sample, "compile_before_timing", compile_before_timing)
    fast_sample.main(args)
    captured = capsys.readouterr()
    assert captured.out == expected and len(kept) == 1 and kept[0] is not None
    assert "running only branch" in captured.err
    torch._dynamo.reset()
