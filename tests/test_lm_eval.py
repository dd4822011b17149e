"""lm-evaluation-harness on an export of ours, offline: the folder's own tokenizer (no tokenizer argument), a
local task file, and the same per-item log-likelihoods and acc / acc_norm as eval.py --mc_file --log_samples."""
import dataclasses
import json
import os

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("safetensors")

from conftest import gpt2_ranks_file  # noqa: E402
from model import GPT, GPTConfig  # noqa: E402
from tools.huggingface import convert  # noqa: E402
from safety_net.fileio import atomic_save   # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BLOCK = 24

# contexts with trailing spaces (they move into the continuation), an empty one (scored after end-of-text),
# one longer than the block (left-truncated), non-ASCII choices (acc_norm divides by characters)
DOCS = [
    dict(context="The capital of France is", choices=["Paris", "London", "a big city"], label=0),
    dict(context="ROMEO: ", choices=["Wherefore art thou", "hello"], label=0),
    dict(context="", choices=["yes", "no"], label=1),
    dict(context="To be, or not to be, that is the question: " * 4, choices=["Whether", "whether 'tis nobler"],
         label=1),
    dict(context="2 + 2 =", choices=["4", "five", "22"], label=0),
    dict(context="Café au", choices=["lait", "naïve résumé"], label=0),
    dict(context="First Citizen:\n", choices=["Before we proceed", "Speak, speak."], label=1),
    dict(context="It's", choices=["raining", "they'll see", "   spaced"], label=2),
]

TASK_YAML = """task: tiny_mc
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
  cache_dir: {cache}
test_split: test
output_type: multiple_choice
doc_to_text: context
doc_to_choice: choices
doc_to_target: label
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
  - metric: acc_norm
    aggregation: mean
    higher_is_better: true
"""


@pytest.mark.usefixtures("one_thread")
def test_lm_eval_agrees_with_eval_py_on_an_export(tmp_path, monkeypatch, capsys):
    try:
        import lm_eval
        from lm_eval.tasks import TaskManager
    except ImportError:
        pytest.skip("lm-evaluation-harness is not installed (pip install -r requirements-dev.txt)")
    ranks = gpt2_ranks_file()
    if ranks is None:
        pytest.skip("no GPT-2 ranks file: set GPT2_TIKTOKEN_FILE or provide ../shared/data/gpt2/gpt2.tiktoken")
    from tools import eval as evaluate
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("GPT2_TIKTOKEN_FILE", ranks)
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    (data_dir / "meta.json").write_text(json.dumps({"tokenizer": "gpt2", "vocab_size": 50257, "eot_token": 50256}))
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=50257, block_size=BLOCK, n_layer=2, n_head=2, n_embd=16))
    with torch.no_grad():   # sharper predictions than the initialisation's near-uniform ones
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(0, 0.3)
    atomic_save({"model": model.state_dict(), "model_args": dataclasses.asdict(model.config),
                 "data_dir": str(data_dir)}, str(tmp_path / "out" / "ckpt.pt"))
    folder = tmp_path / "hf"
    convert.main(["export", "--out_dir", str(tmp_path / "out"), "--out", str(folder)])

    task = tmp_path / "task.jsonl"
    task.write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in DOCS), encoding="utf-8")
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "tiny_mc.yaml").write_text(TASK_YAML.format(data=task, cache=tmp_path / "cache"))
    result = lm_eval.simple_evaluate(
        model="hf", model_args=f"pretrained={folder},dtype=float32", tasks=["tiny_mc"], device="cpu",
        batch_size=8, log_samples=True,
        task_manager=TaskManager(include_path=str(tmp_path / "tasks"), include_defaults=False))
    theirs = sorted(result["samples"]["tiny_mc"], key=lambda s: s["doc_id"])

    log = tmp_path / "items.jsonl"
    monkeypatch.delenv("GPT2_TIKTOKEN_FILE")   # eval.py, too, reads the folder's own tokenizer
    evaluate.main([f"--init_from={folder}", f"--mc_file={task}", f"--log_samples={log}", "--device=cpu"])
    ours = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
    assert len(theirs) == len(ours) == len(DOCS)
    for mine, their in zip(ours, theirs):
        lls = [ll for ll, _ in their["filtered_resps"]]
        assert mine["loglikelihoods"] == pytest.approx(lls, abs=1e-4)
        assert [mine["prediction"] == mine["label"], mine["prediction_norm"] == mine["label"]] == \
               [their["acc"], their["acc_norm"]]
    spread = [max(d["loglikelihoods"]) - min(d["loglikelihoods"]) for d in ours]
    assert min(spread) > 1e-2   # the choices are told apart: equal answers are no accident of ties
    scores = result["results"]["tiny_mc"]
    table = capsys.readouterr().out.splitlines()[-2]
    assert table.startswith(f"| task.jsonl | {len(DOCS)} | {scores['acc,none']:.4f} ± {scores['acc_stderr,none']:.4f} "
                            f"| {scores['acc_norm,none']:.4f} ± {scores['acc_norm_stderr,none']:.4f} |")


@pytest.mark.usefixtures("one_thread")
def test_lm_eval_on_a_char_export_with_the_documented_prefix_token(tmp_path, monkeypatch):
    """A char vocabulary has no end-of-text token, and the harness stopped on the export with a TypeError about its
    prefix token (a hunt); docs/sampling_and_eval.md's prefix_token_id=0 runs it, the same log-likelihoods as
    eval.py's (the prefix only starts an empty context, and these contexts are not empty)."""
    try:
        import lm_eval
        from lm_eval.tasks import TaskManager
    except ImportError:
        pytest.skip("lm-evaluation-harness is not installed (pip install -r requirements-dev.txt)")
    from conftest import write_char_checkpoint
    from tools import eval as evaluate
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    chars = sorted(set("\nROMEO:JULIET ayesno"))
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=len(chars), block_size=BLOCK, n_layer=1, n_head=2, n_embd=16))
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(0, 0.3)
    out = write_char_checkpoint(tmp_path, model, chars)
    folder = tmp_path / "hf"
    convert.main(["export", f"--out_dir={out}", f"--out={folder}"])
    docs = [dict(context="ROMEO:", choices=[" yes", " no"], label=0),
            dict(context="JULIET:", choices=[" ay", " nay"], label=1)]
    task = tmp_path / "task.jsonl"
    task.write_text("".join(json.dumps(d) + "\n" for d in docs))
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "tiny_mc.yaml").write_text(TASK_YAML.format(data=task, cache=tmp_path / "cache"))
    result = lm_eval.simple_evaluate(
        model="hf", model_args=f"pretrained={folder},dtype=float32,prefix_token_id=0", tasks=["tiny_mc"],
        device="cpu", batch_size=8, log_samples=True,
        task_manager=TaskManager(include_path=str(tmp_path / "tasks"), include_defaults=False))
    theirs = sorted(result["samples"]["tiny_mc"], key=lambda s: s["doc_id"])
    log = tmp_path / "items.jsonl"
    evaluate.main([f"--init_from={folder}", f"--mc_file={task}", f"--log_samples={log}", "--device=cpu"])
    ours = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(theirs) == len(ours) == len(docs)
    for mine, their in zip(ours, theirs):
        assert mine["loglikelihoods"] == pytest.approx([float(ll) for ll, _ in their["filtered_resps"]], abs=1e-4)
