"""eval.py: every token but the first scored exactly once, totals equal brute force, no padding, formulas."""
import dataclasses
import json
import math
import os

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from model import GPT, GPTConfig
from tools.eval import evaluate_split, metrics, split_counts, window_plan

BLOCK = 8
VOCAB = 11


pytestmark = pytest.mark.usefixtures("one_thread")   # conftest.py


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    m = GPT(GPTConfig(vocab_size=VOCAB, block_size=BLOCK, n_layer=2, n_head=2, n_embd=16, dropout=0.0))
    return m.eval()


def synthetic(n, seed=0):
    return np.random.default_rng(seed).integers(0, VOCAB, n).astype(np.uint16)


@torch.no_grad()
def nll_of(model, context, target):
    """-log p(target | context) from one forward pass over exactly `context` (no batching, no padding)."""
    x = torch.tensor(np.asarray(context, dtype=np.int64))[None]
    logits, _ = model(x, all_logits=True)
    return float(F.cross_entropy(logits[0, -1:].double(), torch.tensor([int(target)])))


def coverage(plan, n):
    scored = np.zeros(n, dtype=int)
    for start, end, k in plan:
        assert 1 <= k <= end - start <= BLOCK
        scored[end - k + 1:end + 1] += 1           # targets of the last k positions of the window
    return scored


# --- which tokens are scored ------------------------------------------------------------------------

@pytest.mark.parametrize("n", [2, 5, BLOCK, BLOCK + 1, 3 * BLOCK + 1, 3 * BLOCK + 4, 50])
@pytest.mark.parametrize("stride", [0, 1, 3, BLOCK - 1, BLOCK])
def test_every_token_but_the_first_scored_exactly_once(n, stride):
    plan = window_plan(n, BLOCK, stride)
    scored = coverage(plan, n)
    assert scored[0] == 0 and (scored[1:] == 1).all()


def test_sliding_windows_use_full_context():
    plan = window_plan(50, BLOCK, 3)
    assert plan[0] == (0, BLOCK, BLOCK)
    assert all(end - start == BLOCK for start, end, _ in plan)   # as much context as the model takes
    assert all(k == 3 for _, _, k in plan[1:-1]) and plan[-1][2] <= 3


def test_partial_last_window_runs_at_true_length():
    # 3 full windows of 8 targets + 4 targets left: the last window is 4 tokens long, not padded to 8
    plan = window_plan(3 * BLOCK + 5, BLOCK, 0)
    assert plan[:3] == [(0, 8, 8), (8, 16, 16 - 8), (16, 24, 8)]
    assert plan[-1] == (24, 28, 4)


def test_partial_window_not_padded_in_the_forward(model):
    # every forward must see only real tokens: record the input shapes the model gets
    data = synthetic(3 * BLOCK + 5)
    shapes = []
    hook = model.register_forward_pre_hook(lambda m, args, kwargs: shapes.append(tuple(args[0].shape)),
                                           with_kwargs=True)
    try:
        r = evaluate_split(model, data, BLOCK, 0, batch_size=2)
    finally:
        hook.remove()
    assert shapes == [(2, BLOCK), (1, BLOCK), (1, 4)]
    assert r["n_tokens"] == len(data) - 1


# --- totals equal brute force --------------------------------------------------------------------

@torch.no_grad()
@pytest.mark.parametrize("batch_size", [1, 3])
def test_non_overlapping_total_equals_manual_windows(model, batch_size):
    data = synthetic(3 * BLOCK + 6, seed=1)
    r = evaluate_split(model, data, BLOCK, 0, batch_size=batch_size)
    assert r["n_tokens"] == len(data) - 1
    # manual: cut the targets 1..n-1 into windows of BLOCK, each a separate forward pass
    total = 0.0
    for start in range(0, len(data) - 1, BLOCK):
        end = min(start + BLOCK, len(data) - 1)
        x = torch.tensor(data[start:end].astype(np.int64))[None]
        y = torch.tensor(data[start + 1:end + 1].astype(np.int64))
        logits, _ = model(x, all_logits=True)
        total += float(F.cross_entropy(logits[0].double(), y, reduction="sum"))
    assert r["nll_sum"] == pytest.approx(total, rel=1e-5)


@pytest.mark.parametrize("stride", [1, 3, 5])
def test_strided_total_equals_per_token_computation(model, stride):
    data = synthetic(4 * BLOCK + 3, seed=2)
    r = evaluate_split(model, data, BLOCK, stride, batch_size=4)
    assert r["n_tokens"] == len(data) - 1
    # per token, with the context rule written out independently: targets 1..BLOCK see everything
    # before them; later targets are scored in groups of `stride`, each group by a window ending at
    # the group's last target, so target t (in a group ending at e) sees data[e-BLOCK .. t-1]
    total = 0.0
    for t in range(1, len(data)):
        if t <= BLOCK:
            context = data[:t]
        else:
            e = min(BLOCK + stride * math.ceil((t - BLOCK) / stride), len(data) - 1)
            context = data[e - BLOCK:t]
        total += nll_of(model, context, data[t])
    assert r["nll_sum"] == pytest.approx(total, rel=1e-5)


def test_stride_one_is_the_exact_sliding_limit(model):
    """Stride 1: every target t sees the BLOCK tokens before it (all of them for t <= BLOCK), one window per target
    after the first."""
    data = synthetic(3 * BLOCK, seed=3)
    full = evaluate_split(model, data, BLOCK, 1, batch_size=8)
    assert full["n_tokens"] == len(data) - 1 and full["n_windows"] == 1 + (len(data) - 1 - BLOCK)
    total = sum(nll_of(model, data[max(0, t - BLOCK):t], data[t]) for t in range(1, len(data)))
    assert full["nll_sum"] == pytest.approx(total, rel=1e-5)


def test_works_with_deep_thinking_and_pgpt():
    """The totals of models whose forward differs most from gpt's equal the per-token computation too."""
    from test_checkpoint import visible
    data = synthetic(2 * BLOCK + 3, seed=4)
    for extra in (dict(think_steps=2), dict(n_branches=2, tie_embeddings=False)):
        m = visible(GPT(GPTConfig(vocab_size=VOCAB, block_size=BLOCK, n_layer=2, n_head=2, n_embd=16, **extra)))
        r = evaluate_split(m, data, BLOCK, 3, batch_size=2)
        assert r["n_tokens"] == len(data) - 1
        total = 0.0
        for t in range(1, len(data)):   # as in test_strided_total_equals_per_token_computation
            e = t if t <= BLOCK else min(BLOCK + 3 * math.ceil((t - BLOCK) / 3), len(data) - 1)
            total += nll_of(m, data[max(0, e - BLOCK):t], data[t])
        assert r["nll_sum"] == pytest.approx(total, rel=1e-5), extra


# --- formulas ---------------------------------------------------------------------------------------

def test_metric_formulas_on_known_numbers():
    m = metrics(nll_sum=200.0, n_tokens=100, n_words=50, n_bytes=400)
    assert m["loss"] == pytest.approx(2.0)
    assert m["token_ppl"] == pytest.approx(math.exp(2.0))
    assert m["word_ppl"] == pytest.approx(math.exp(4.0))            # exp(200 / 50)
    assert m["bpb"] == pytest.approx(200.0 / math.log(2) / 400)     # 0.7213...
    assert m["bpb"] == pytest.approx(0.72134752, rel=1e-7)
    missing = metrics(nll_sum=200.0, n_tokens=100)
    assert missing["word_ppl"] is None and missing["bpb"] is None
    # an untrained model on a text of one word: exp(750) is over a float's range, printed inf (not a traceback)
    assert metrics(nll_sum=750.0, n_tokens=100, n_words=1)["word_ppl"] == math.inf


def test_split_counts_prefers_meta_then_decodes():
    from safety_net.tokenizers import CharTokenizer
    tok = CharTokenizer(list(" ab\u00e9"))
    data = np.array(tok.encode("ab \u00e9a b"), dtype=np.uint16)
    meta = {"splits": {"val": {"tokens": 7, "words": 10, "bytes": 99}}}
    assert split_counts(meta, "val", data, tok) == (10, 99, "meta.json")
    words, nbytes, source = split_counts({"splits": {"val": {"tokens": 7}}}, "val", data, tok)
    assert (words, nbytes) == (3, 8) and "decoded" in source         # 'é' is two utf-8 bytes
    assert split_counts({}, "val", data, None) == (None, None, "n/a")
    assert split_counts({"splits": {"val": {"words": 10}}}, "val", data, tok)[2] == "counted from the decoded split"


def test_eval_cli_in_process(tmp_path, capsys):
    """eval.main on a saved tiny checkpoint prints a row per split with the method stated."""
    from tools import eval as eval_script
    from safety_net.fileio import atomic_save
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    chars = [chr(ord("a") + i) for i in range(VOCAB)]
    synthetic(100, seed=5).tofile(data_dir / "val.bin")
    synthetic(37, seed=6).tofile(data_dir / "test.bin")
    with open(data_dir / "meta.json", "w") as f:
        json.dump({"dataset": "syn", "tokenizer": "char", "vocab_size": VOCAB, "chars": chars,
                   "splits": {"val": {"tokens": 100, "words": 20, "bytes": 100}}}, f)
    torch.manual_seed(0)
    m = GPT(GPTConfig(vocab_size=VOCAB, block_size=BLOCK, n_layer=1, n_head=2, n_embd=16))
    atomic_save({"model": m.state_dict(), "model_args": dataclasses.asdict(m.config), "iter_num": 3,
                 "dataset": "syn", "data_dir": str(data_dir)}, str(tmp_path / "out" / "ckpt.pt"))
    eval_script.main([f"--out_dir={tmp_path / 'out'}", "--device=cpu", "--stride=3"])
    out = capsys.readouterr().out
    assert "sliding window of 8 tokens, stride 3" in out and "--compile" not in out
    assert "| val | 99 | 20 | 100 |" in out and "| test | 36 |" in out
    r = evaluate_split(m.eval(), np.fromfile(data_dir / "val.bin", dtype=np.uint16), BLOCK, 3)
    assert f"{r['nll_sum'] / 99:.4f}" in out
    with pytest.raises(SystemExit, match="split 'train' not found"):
        eval_script.main([f"--out_dir={tmp_path / 'out'}", "--device=cpu", "--splits=train"])
    # a split named twice was scored twice, two rows; its fix, followed, scores each once (a hunt)
    with pytest.raises(SystemExit, match=r"--splits names val twice \(fix: --splits=val,test\)"):
        eval_script.main([f"--out_dir={tmp_path / 'out'}", "--device=cpu", "--splits=val,test,val"])
    capsys.readouterr()
    eval_script.main([f"--out_dir={tmp_path / 'out'}", "--device=cpu", "--splits=val,test"])
    assert capsys.readouterr().out.count("| val |") == 1
    # --gpt2_ranks on a char-level model was accepted and read by nothing (a hunt); its fix is to drop it
    with pytest.raises(SystemExit, match="--gpt2_ranks is read only for a GPT-2 BPE vocabulary"):
        eval_script.main([f"--out_dir={tmp_path / 'out'}", "--device=cpu", f"--gpt2_ranks={data_dir / 'meta.json'}"])
    # --num_threads, as sample.py's (it was an unknown key); the suite's one thread put back after
    threads = torch.get_num_threads()
    try:
        eval_script.main([f"--out_dir={tmp_path / 'out'}", "--device=cpu", "--num_threads=2"])
        assert torch.get_num_threads() == 2
        eval_script.main([f"--out_dir={tmp_path / 'out'}", "--device=cpu", "--num_threads=1"])
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(threads)
    # the bounds of --stride and --block_size, each named: a stride of a whole window evaluates
    eval_script.main([f"--out_dir={tmp_path / 'out'}", "--device=cpu", f"--stride={BLOCK}"])
    with pytest.raises(SystemExit, match=f"--stride must be in \\[0, {BLOCK}\\]"):
        eval_script.main([f"--out_dir={tmp_path / 'out'}", "--device=cpu", "--stride=-3"])
    with pytest.raises(SystemExit, match=f"--block_size=-1 must be in \\[1, {BLOCK}\\]"):
        eval_script.main([f"--out_dir={tmp_path / 'out'}", "--device=cpu", "--block_size=-1"])
    # a dataset folder without token files: one line, not a table without rows
    (data_dir / "val.bin").unlink()
    (data_dir / "test.bin").unlink()
    with pytest.raises(SystemExit, match="no val.bin or test.bin in"):
        eval_script.main([f"--out_dir={tmp_path / 'out'}", "--device=cpu"])
    with pytest.raises(SystemExit, match="num_threads must be"):
        eval_script.main([f"--out_dir={tmp_path / 'out'}", "--device=cpu", "--num_threads=-1"])


def test_eval_table_is_recomputed_from_the_models_logits(tmp_path, capsys):
    """Each split's printed row, recomputed here from the model's logits (weights at std 0.3): one forward per
    non-overlapping window of block_size (the last one shorter), loss = summed NLL / scored tokens, token ppl =
    exp(loss), word ppl = exp(NLL / words), bits per byte = NLL / ln 2 / bytes; words and bytes from meta.json (val),
    else counted here from the split's text (test: whitespace-separated words, UTF-8 bytes, where é is two)."""
    from safety_net.fileio import atomic_save
    from test_checkpoint import visible
    from tools import eval as eval_script
    chars = list("ab c\néfghij")
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    splits = {"val": synthetic(43, seed=7), "test": synthetic(29, seed=8)}
    for split, ids in splits.items():
        ids.tofile(data_dir / f"{split}.bin")
    (data_dir / "meta.json").write_text(json.dumps({"tokenizer": "char", "vocab_size": VOCAB, "chars": chars,
                                                    "splits": {"val": {"words": 9, "bytes": 50}}}))
    model = visible(GPT(GPTConfig(vocab_size=VOCAB, block_size=BLOCK, n_layer=1, n_head=2, n_embd=16)))
    atomic_save({"model": model.state_dict(), "model_args": dataclasses.asdict(model.config), "iter_num": 3,
                 "data_dir": str(data_dir)}, str(tmp_path / "out" / "ckpt.pt"))
    eval_script.main([f"--out_dir={tmp_path / 'out'}", "--device=cpu", "--batch_size=2"])
    rows = {line.split(" | ")[0][2:]: line.split(" | ")[1:8] for line in capsys.readouterr().out.splitlines()
            if line.startswith(("| val |", "| test |"))}
    for split, ids in splits.items():
        ids = torch.from_numpy(ids.astype(np.int64))
        nll = 0.0
        with torch.no_grad():
            for start in range(0, len(ids) - 1, BLOCK):
                end = min(start + BLOCK, len(ids) - 1)
                logits = model(ids[None, start:end], all_logits=True)[0][0]
                nll += F.cross_entropy(logits.double(), ids[start + 1:end + 1], reduction="sum").item()
        text = "".join(chars[i] for i in ids)
        words = 9 if split == "val" else len(text.split())
        nbytes = 50 if split == "val" else len(text.encode("utf-8"))
        n = len(ids) - 1
        expected = [n, words, nbytes, nll / n, math.exp(nll / n), math.exp(nll / words), nll / math.log(2) / nbytes]
        printed = [float(v.replace(",", "")) for v in rows[split]]
        assert printed[:3] == expected[:3], split
        for got, want, digits in zip(printed[3:], expected[3:], (4, 3, 3, 4)):   # as printed: .4f, .3f, .3f, .4f
            assert abs(got - want) <= 0.5 * 10 ** -digits + 1e-5 * want, (split, got, want)
    assert "é" in text and nbytes > len(text)   # the test split's bytes are UTF-8 bytes, not characters


def test_split_counts_leave_the_eot_separators_out():
    """Words and bytes for bits per byte, counted from the decoded split when meta.json has none: the eot
    tokens between articles are not text (GPT-2's decodes to '<|endoftext|>', 13 bytes)."""
    from types import SimpleNamespace
    tok = SimpleNamespace(eot_token=0, decode=lambda ids: "".join("<|endoftext|>" if i == 0 else chr(i) for i in ids))
    data = [ord(c) for c in "ab cd"] + [0] + [ord(c) for c in " ef"]
    assert split_counts({}, "val", data, tok) == (3, 8, "counted from the decoded split")


# --- multiple choice: per-question results and the hints of its errors ------------------------------

def mc_checkpoint(tmp_path, meta, vocab_size):
    """A tiny random checkpoint recording a dataset folder that holds only `meta` (all --mc_file needs)."""
    data_dir = tmp_path / "data"
    data_dir.mkdir(exist_ok=True)
    (data_dir / "meta.json").write_text(json.dumps(meta))
    torch.manual_seed(0)
    m = GPT(GPTConfig(vocab_size=vocab_size, block_size=BLOCK, n_layer=1, n_head=2, n_embd=16))
    from safety_net.fileio import atomic_save
    atomic_save({"model": m.state_dict(), "model_args": dataclasses.asdict(m.config), "iter_num": 3,
                 "data_dir": str(data_dir)}, str(tmp_path / "out" / "ckpt.pt"))
    return str(tmp_path / "out"), m.eval()


def test_log_samples_writes_one_line_per_question(tmp_path, capsys):
    from tools import eval as evaluate
    from safety_net.tokenizers import CharTokenizer
    chars = list("abcdefgh ")
    out, model = mc_checkpoint(tmp_path, {"tokenizer": "char", "vocab_size": len(chars), "chars": chars}, len(chars))
    docs = [dict(context="abc", choices=["d", "ef", "gh"], label=1), dict(context="h ", choices=["a", "bbbb"], label=0),
            dict(context="ggg", choices=["hab", "c"], label=1)]
    task = tmp_path / "task.jsonl"
    task.write_text("".join(json.dumps(d) + "\n" for d in docs))
    log = tmp_path / "items.jsonl"
    with pytest.raises(SystemExit, match="--gpt2_ranks is read only for a GPT-2 BPE vocabulary"):   # char-level
        evaluate.main([f"--out_dir={out}", f"--mc_file={task}", f"--gpt2_ranks={task}", "--device=cpu"])
    evaluate.main([f"--out_dir={out}", f"--mc_file={task}", f"--log_samples={log}", "--device=cpu"])
    printed = capsys.readouterr().out
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    want = evaluate.score_multiple_choice(model, CharTokenizer(chars), docs, BLOCK)
    assert [line["doc_id"] for line in lines] == [0, 1, 2]
    for doc, line, lls in zip(docs, lines, want["lls"]):
        assert {k: line[k] for k in ("context", "choices", "label")} == doc
        assert line["loglikelihoods"] == pytest.approx(lls, abs=1e-6) and all(ll < 0 for ll in lls)
        assert line["prediction"] == int(np.argmax(lls))
        assert line["prediction_norm"] == int(np.argmax(np.array(lls) / [len(c) for c in doc["choices"]]))
    acc = np.mean([line["prediction"] == line["label"] for line in lines])
    assert f"| task.jsonl | 3 | {acc:.4f} ±" in printed and f"per-question results: {log}" in printed


def test_task_files_and_choices_at_their_bounds(tmp_path):
    """read_mc_file and mc_request at their edges (a hunt's changed lines each let one through wrong): a blank file
    has no questions; a blank last line is no question; an empty choice is refused; an empty context without an eot
    token and a choice over block_size are one line; a choice of exactly block_size tokens is scored."""
    from safety_net.configurator import UserError
    from safety_net.tokenizers import CharTokenizer
    from tools.eval import mc_request, read_mc_file
    task = tmp_path / "task.jsonl"
    task.write_text("\n")
    with pytest.raises(UserError, match="has no questions"):
        read_mc_file(task)
    task.write_text(json.dumps(dict(context="a", choices=["b", "c"], label=0)) + "\n\n")
    assert len(read_mc_file(task)) == 1
    task.write_text(json.dumps(dict(context="a", choices=["", "c"], label=1)) + "\n")
    with pytest.raises(UserError, match="line 1 is not a JSON object"):
        read_mc_file(task)
    tok = CharTokenizer(list("abcdefgh "))
    with pytest.raises(UserError, match="empty context"):
        mc_request(tok, "", "ab", BLOCK)
    tokens, n = mc_request(tok, "abc", "abcdefg", BLOCK)   # " abcdefg": block_size tokens
    assert n == BLOCK and len(tokens) == BLOCK + 1
    with pytest.raises(UserError, match=f"is {BLOCK + 1} tokens; it must be 1..{BLOCK}"):
        mc_request(tok, "abc", "abcdefgh", BLOCK)


def test_multiple_choice_compiles_when_asked(tmp_path, monkeypatch, capsys):
    """--compile was accepted with --mc_file and nothing compiled (a hunt). The compile itself is stood in for."""
    from model import GPT
    from tools import eval as evaluate
    chars = list("abcdefgh ")
    out, _ = mc_checkpoint(tmp_path, {"tokenizer": "char", "vocab_size": len(chars), "chars": chars}, len(chars))
    task = tmp_path / "task.jsonl"
    task.write_text(json.dumps(dict(context="abc", choices=["d", "ef"], label=1)) + "\n")
    compiled = []
    monkeypatch.setattr(GPT, "compile", lambda model: compiled.append(model))
    evaluate.main([f"--out_dir={out}", f"--mc_file={task}", "--device=cpu", "--compile=True"])
    assert len(compiled) == 1
    assert "--compile: the times include compiling" in capsys.readouterr().out   # not the compiled speed (a hunt)


@pytest.mark.parametrize("args, words", [
    (["--log_samples={tmp}/items.jsonl"], "--log_samples writes the per-question results of --mc_file"),
    (["--mc_file={tmp}/task.jsonl", "--log_samples={tmp}"], "is a folder"),
    (["--mc_file={tmp}/task.jsonl", "--log_samples={tmp}/task.jsonl/items.jsonl"], "is a file, not a folder"),
    # both were replaced by the results (a hunt): the task it read, a run's checkpoint
    (["--mc_file={tmp}/task.jsonl", "--log_samples={tmp}/task.jsonl"], "is the --mc_file it scores"),
    (["--mc_file={tmp}/task.jsonl", "--log_samples={tmp}/run/ckpt.pt"], "a training run's own ckpt.pt"),
    # a traceback (os.path.samefile) when the log existed and the task did not (a review)
    (["--mc_file={tmp}/no_task.jsonl", "--log_samples={tmp}/old.jsonl"], "does not exist"),
    # any file was replaced by the results (a hunt): one that --log_samples did not write is refused
    (["--mc_file={tmp}/task.jsonl", "--log_samples={tmp}/notes.md"], "is not a file this command wrote"),
    # --out_dir beside --init_from was dropped without a word (a hunt)
    (["--init_from={tmp}/hf", "--out_dir={tmp}/run"], "name two models"),
    # perplexity's options, accepted and ignored (a hunt)
    (["--mc_file={tmp}/task.jsonl", "--splits=test", "--stride=7"], "--splits is an option of perplexity's"),
])
def test_log_samples_refuses_bad_paths(tmp_path, args, words):
    from tools import eval as evaluate
    (tmp_path / "task.jsonl").write_text(json.dumps(dict(context="a", choices=["b", "c"], label=0)) + "\n")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "ckpt.pt").write_bytes(b"a run's checkpoint")
    (tmp_path / "old.jsonl").write_text('{"doc_id": 0, "context": "an earlier run\'s results"}\n')
    (tmp_path / "notes.md").write_text("my notes\n")
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(SystemExit) as e:
        evaluate.main([a.format(tmp=tmp_path) for a in args] + [f"--out_dir={tmp_path}/none", "--device=cpu"])
    assert str(e.value).startswith("error: ") and words in str(e.value) and "\n" not in str(e.value)
    assert sorted(os.listdir(tmp_path)) == before
    assert (tmp_path / "run" / "ckpt.pt").read_bytes() == b"a run's checkpoint"


def test_gpt2_vocabulary_errors_name_keys_eval_accepts(tmp_path, monkeypatch, capsys):
    """Offline without GPT2_TIKTOKEN_FILE the hint names GPT2_TIKTOKEN_FILE, which every script reads, and no key the
    script does not accept (it once named --gpt2_ranks, which eval.py then refused); eval.py's --gpt2_ranks works."""
    import re

    import tiktoken

    from tools import eval as evaluate
    out, _ = mc_checkpoint(tmp_path, {"tokenizer": "gpt2", "vocab_size": 50257}, 50257)
    task = tmp_path / "task.jsonl"
    task.write_text(json.dumps(dict(context="Hello", choices=["world", "there"], label=0)) + "\n")
    ranks = os.environ.get("GPT2_TIKTOKEN_FILE") or os.path.join(   # the local copy, for the last step
        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "shared", "data", "gpt2",
        "gpt2.tiktoken")
    monkeypatch.delenv("GPT2_TIKTOKEN_FILE", raising=False)
    monkeypatch.setattr(tiktoken, "get_encoding", lambda name: (_ for _ in ()).throw(ConnectionError("offline")))
    with pytest.raises(SystemExit) as e:
        evaluate.main([f"--out_dir={out}", f"--mc_file={task}", "--device=cpu"])
    keys = re.findall(r"--(\w+)", str(e.value))
    assert "GPT2_TIKTOKEN_FILE=PATH" in str(e.value) and all(k in evaluate.DEFAULTS for k in keys), str(e.value)
    with pytest.raises(SystemExit, match="--gpt2_ranks: .*missing.tiktoken is not a file"):
        evaluate.main([f"--out_dir={out}", f"--mc_file={task}", f"--gpt2_ranks={tmp_path}/missing.tiktoken"])
    if not os.path.isfile(ranks):
        pytest.skip("no GPT-2 ranks file: set GPT2_TIKTOKEN_FILE or provide ../shared/data/gpt2/gpt2.tiktoken")
    evaluate.main([f"--out_dir={out}", f"--mc_file={task}", f"--gpt2_ranks={ranks}", "--device=cpu"])
    assert capsys.readouterr().out.splitlines()[-1].startswith("| task.jsonl | 1 |")
    assert "GPT2_TIKTOKEN_FILE" not in os.environ   # set for the run only


def test_gpt2_ranks_is_read_by_gpt2s_vocabulary_only(tmp_path):
    """--gpt2_ranks beside a compact vocabulary (a BPE too) is refused, not read by nothing; beside a GPT-2
    checkpoint, a ranks file that cannot be read is named as such, not as a key this model does not read (a hunt:
    changed lines did each, and no test failed)."""
    from safety_net.configurator import UserError
    from safety_net.tokenizers import BPETokenizer, compact_encoding
    from tools import eval as evaluate
    compact = compact_encoding([bytes([i]) for i in range(256)])
    with pytest.raises(UserError, match="read only for a GPT-2 BPE vocabulary"):
        evaluate.check_ranks_read({"gpt2_ranks": "gpt2.tiktoken"}, BPETokenizer(compact, 257, 256))
    out, _ = mc_checkpoint(tmp_path, {"tokenizer": "gpt2", "vocab_size": 50257}, 50257)
    synthetic(40).tofile(tmp_path / "data" / "val.bin")
    with pytest.raises(SystemExit, match="could not read GPT-2 ranks file"):
        evaluate.main([f"--out_dir={out}", "--device=cpu", f"--gpt2_ranks={tmp_path / 'data' / 'meta.json'}"])


def test_a_bad_batch_size_names_a_fix_that_works(tmp_path, capsys):
    """--batch_size=0 was refused with --stride's fix, which left it refused; its own fix, followed, evaluates."""
    from conftest import one_error_line
    from tools import eval as evaluate
    chars = list("abcdefgh ")
    out, _ = mc_checkpoint(tmp_path, {"tokenizer": "char", "vocab_size": len(chars), "chars": chars}, len(chars))
    task = tmp_path / "task.jsonl"
    task.write_text(json.dumps(dict(context="abc", choices=["d", "ef"], label=0)) + "\n")
    args = [f"--out_dir={out}", f"--mc_file={task}", "--device=cpu"]
    message = one_error_line(evaluate.main, [*args, "--batch_size=0"], "--batch_size=0 must be >= 1")
    fix = message.split("(fix: ")[1].rstrip(")")
    evaluate.main([*args, fix])
    assert "| task.jsonl | 1 |" in capsys.readouterr().out
