"""eval.py's zero-shot multiple-choice scorer: log-likelihoods equal a direct unbatched computation,
acc / acc_norm follow lm-evaluation-harness's definitions, and a model whose answers are known by
construction gets them all right."""
import dataclasses
import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from model import GPT, GPTConfig
from tools import eval as evaluate
from safety_net.configurator import UserError
from safety_net.fileio import atomic_save
from safety_net.tokenizers import CharTokenizer

CHARS = "abcdefgh "          # vocabulary of the test models; the bigram model walks it cyclically
BLOCK = 16


pytestmark = pytest.mark.usefixtures("one_thread")   # conftest.py


def cyclic_bigram_model():
    """A GPT that predicts the next character of the cycle 'abcdefgh abcdefgh ...' with probability ~1, built by
    hand: attention and MLP outputs are zero, so the last hidden state is the one-hot embedding of the current
    character, and the head maps character i to character i + 1."""
    V = len(CHARS)
    model = GPT(GPTConfig(vocab_size=V, block_size=BLOCK, n_layer=1, n_head=1, n_embd=V, tie_embeddings=False))
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        model.tok_emb.wte.weight.copy_(torch.eye(V))
        model.ln_f.weight.fill_(1.0)
        model.lm_head.weight.copy_(20 * torch.roll(torch.eye(V), shifts=1, dims=0))   # row i+1 reads column i
    return model.eval()


def write_jsonl(path, docs):
    path.write_text("".join(json.dumps(d) + "\n" for d in docs))
    return str(path)


def test_known_answers_are_found():
    model, tok = cyclic_bigram_model(), CharTokenizer(CHARS)
    docs = [dict(context="abcdefgh", choices=["bcd", "abc"], label=1),
            dict(context="fgh", choices=["cab", "abc", "b"], label=1),
            dict(context="cdefgh", choices=["bb", "abcdefg", "ba", "hh"], label=1),
            dict(context="gh", choices=["aab", "abd", "abc"], label=2)]
    r = evaluate.score_multiple_choice(model, tok, docs, BLOCK, batch_size=3)
    assert r["acc"] == 1.0 and r["acc_norm"] == 1.0
    for doc, lls in zip(docs, r["lls"]):
        assert lls[doc["label"]] > -1e-3                       # the right continuation is (almost) certain
        assert max(ll for i, ll in enumerate(lls) if i != doc["label"]) < -5


@torch.no_grad()
def direct_loglikelihood(model, tok, context, choice):
    """log p(" " + choice | context) from one forward pass over exactly the (left-truncated) tokens."""
    ids = tok.encode(context + " " + choice)
    n = len(" " + choice)                                       # characters are tokens here
    ids = ids[-(BLOCK + 1):]
    logits, _ = model(torch.tensor(ids[:-1])[None], all_logits=True)
    logprobs = F.log_softmax(logits[0].double(), dim=-1)
    return float(sum(logprobs[len(ids) - 1 - n + j, ids[len(ids) - n + j]] for j in range(n)))


def random_docs(seed, n=12):
    rng = np.random.default_rng(seed)
    word = lambda k: "".join(rng.choice(list("abcdefgh"), k))  # noqa: E731
    docs = []
    for _ in range(n):
        context = " ".join(word(int(rng.integers(1, 6))) for _ in range(int(rng.integers(1, 8))))  # up to ~40 chars
        choices = [word(int(k)) for k in rng.integers(1, 9, size=int(rng.integers(2, 5)))]
        docs.append(dict(context=context, choices=choices, label=0))
    return docs


def test_loglikelihoods_and_accuracies_equal_a_direct_computation():
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=len(CHARS), block_size=BLOCK, n_layer=2, n_head=2, n_embd=16)).eval()
    with torch.no_grad():
        model.tok_emb.wte.weight.mul_(40)   # make choices clearly more or less likely than each other
    tok = CharTokenizer(CHARS)
    docs = random_docs(0)
    assert any(len(d["context"]) + 9 > BLOCK for d in docs)    # some requests get left-truncated
    direct = [[direct_loglikelihood(model, tok, d["context"], c) for c in d["choices"]] for d in docs]
    # labels: the length-normalised favourite, so acc_norm = 1 and acc counts where the raw favourite agrees
    for doc, lls in zip(docs, direct):
        doc["label"] = int(np.argmax(np.array(lls) / [len(c) for c in doc["choices"]]))
    r = evaluate.score_multiple_choice(model, tok, docs, BLOCK, batch_size=5)
    for got, want in zip(r["lls"], direct):
        assert np.allclose(got, want, atol=1e-4)
    agree = np.mean([int(np.argmax(lls)) == d["label"] for d, lls in zip(docs, direct)])
    assert 0 < agree < 1                                        # the two metrics really differ on this task
    assert r["acc_norm"] == 1.0 and r["acc"] == pytest.approx(agree)
    assert r["acc_stderr"] == pytest.approx(np.sqrt(agree * (1 - agree) / (len(docs) - 1)))


def test_trailing_space_of_the_context_moves_into_the_continuation():
    tok = CharTokenizer(CHARS)
    assert evaluate.mc_request(tok, "ab ", "cd", BLOCK) == (tok.encode("ab  cd"), 4)
    assert evaluate.mc_request(tok, "ab", "cd", BLOCK) == (tok.encode("ab cd"), 3)
    tokens, n = evaluate.mc_request(tok, "abcdefgh" * 4, "ab", 8)
    assert (tokens, n) == (tok.encode("abcdefgh" * 4 + " ab")[-9:], 3)   # left-truncated to block_size + 1


def test_eval_command_line_scores_a_task_file(tmp_path, capsys):
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    (data_dir / "meta.json").write_text(json.dumps({"dataset": "cycle", "tokenizer": "char",
                                                    "vocab_size": len(CHARS), "chars": list(CHARS)}))
    model = cyclic_bigram_model()
    atomic_save({"model": model.state_dict(), "model_args": dataclasses.asdict(model.config), "iter_num": 0,
                 "best_val_loss": 1.0, "config": {}, "data_dir": str(data_dir)}, str(tmp_path / "out" / "ckpt.pt"))
    task = write_jsonl(tmp_path / "task.jsonl", [dict(context="fgh", choices=["abc", "cab"], label=0),
                                                 dict(context="cdefgh", choices=["bb", "abcdefg"], label=0)])
    evaluate.main([f"--out_dir={tmp_path / 'out'}", f"--mc_file={task}", "--device=cpu"])
    table = capsys.readouterr().out.splitlines()[-1]
    assert table.startswith("| task.jsonl | 2 | 0.5000 ± 0.5000 | 0.5000 ± 0.5000 |")
    bad = write_jsonl(tmp_path / "bad.jsonl", [dict(context="a", choices=["b"], label=0)])
    with pytest.raises(SystemExit) as e:
        evaluate.main([f"--out_dir={tmp_path / 'out'}", f"--mc_file={bad}", "--device=cpu"])
    assert str(e.value).startswith("error:") and "line 1" in str(e.value) and "\n" not in str(e.value)


def test_an_empty_context_starts_from_the_eot_token():
    """lm-evaluation-harness's rule: with no context, the continuation is scored after the eot token."""
    from types import SimpleNamespace
    tok = SimpleNamespace(eot_token=99, encode=lambda text: [ord(c) for c in text])
    assert evaluate.mc_request(tok, "", "ab", 16) == ([99, ord(" "), ord("a"), ord("b")], 3)
    assert evaluate.mc_request(tok, "  ", "ab", 16) == ([99] + [ord(c) for c in "   ab"], 5)   # its spaces move on


@pytest.mark.parametrize("label", [True, False, 2, -1, 1.0, "1"])
def test_mc_file_refuses_labels_that_are_no_index(tmp_path, label):
    """A label is an integer index of a choice: true is not choice 1 (json's true is Python's True, an int)."""
    from tools.eval import read_mc_file
    path = tmp_path / "task.jsonl"
    path.write_text(json.dumps({"context": "a", "choices": ["b", "c"], "label": label}) + "\n")
    with pytest.raises(UserError, match="line 1 is not a JSON object with context") as e:
        read_mc_file(str(path))
    assert "\n" not in str(e.value)
    path.write_text(json.dumps({"context": "a", "choices": ["b", "c"], "label": 1}) + "\n")
    assert read_mc_file(str(path))[0]["label"] == 1
