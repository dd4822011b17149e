"""compare.py: tables, figures, samples, status.json, skipping finished models, resuming an interrupted
one, and the three compare configs. Tiny models on a tiny char dataset: the file runs in seconds."""
import csv
import json
import os

import pytest
import torch

import compare
import prepare
import train

PROMPTS = ["Oh God, ", "War is "]
TEXT_LINES = ["Oh God, what is this war?", "War is a thing of kings and fools.", "Her affability is known.",
              "KING RICHARD III: Say that thou wert my friend.", "GLOUCESTER: Why, sir, the love of the world."]


@pytest.fixture
def one_thread():
    """One torch thread: tiny models are faster so, and other processes on the machine matter less."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture
def char_data(tmp_path):
    """A small shakespeare_char-format dataset made by prepare.py from a generated text."""
    lines = [TEXT_LINES[(7 * i) % len(TEXT_LINES)] for i in range(400)]
    src = tmp_path / "input.txt"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "data"
    prepare.prepare("shakespeare_char", out_dir=str(out), input_path=str(src))
    return str(out)


def tiny_argv(data_dir, compare_dir, variants, **extra):
    args = dict(variants=variants, compare_dir=compare_dir, data_dir=data_dir, dataset="shakespeare_char",
                device="cpu", dtype="float32", n_layer=2, n_head=3, n_embd=24, mlp_hidden=48, block_size=16,
                batch_size=4, dropout=0.0, max_iters=6, eval_interval=3, eval_iters=2, log_interval=1,
                learning_rate=3e-3, warmup_iters=1, lr_decay_iters=6, min_lr=3e-4, sample_tokens=12,
                bench_iters=1, prompts=repr(PROMPTS))
    args.update(extra)
    return [f"--{k}={v}" for k, v in args.items()]


class CountingTrain:
    """Stands in for train.train: records each call's init_from; optionally interrupts the first call
    after iteration `stop_at` (as Ctrl-C would: train.py saves last.pt and returns interrupted)."""

    def __init__(self, stop_at=None):
        self.real, self.calls, self.stop_at = train.train, [], stop_at

    def __call__(self, config, explicit=None, callback=None):
        self.calls.append(config["init_from"])
        stop = self.stop_at if len(self.calls) == 1 else None

        def cb(event, info):
            callback(event, info)
            if event == "iter" and info["iter_num"] == stop:
                raise KeyboardInterrupt

        return self.real(config, explicit, cb)


def test_compare_writes_tables_figures_samples_and_skips_finished(char_data, tmp_path, monkeypatch, one_thread):
    cdir = str(tmp_path / "cmp")
    counter = CountingTrain()
    monkeypatch.setattr(train, "train", counter)
    argv = tiny_argv(char_data, cdir, "pgpt,enhanced_residual")
    rows = compare.main(argv)
    assert counter.calls == ["scratch", "scratch"]
    assert [r["name"] for r in rows] == ["pgpt", "enhanced_residual"]

    # results.csv / results.md in the layout of paper 004's Table 1
    with open(os.path.join(cdir, "results.csv"), newline="") as f:
        table = list(csv.DictReader(f))
    assert [r["name"] for r in table] == ["pgpt", "enhanced_residual"]
    for col in ("params_m", "size_mb_fp32_weights", "ms_per_iter", "tokens_per_s", "peak_memory_mb",
                "best_val_loss", "val_loss_weaker_branch_dropped", "ckpt_mb", "train_time_s"):
        assert col in table[0], col
    pgpt, er = table
    assert float(pgpt["val_loss_weaker_branch_dropped"]) > 0 and er["val_loss_weaker_branch_dropped"] == ""
    assert float(pgpt["params_m"]) > 0 and float(pgpt["best_val_loss"]) < 5
    # fp32 weights only: about 4 bytes per parameter, well under the checkpoint with AdamW state
    assert 4 * int(pgpt["params"]) <= float(pgpt["size_mb_fp32_weights"]) * 1e6 < float(pgpt["ckpt_mb"]) * 1e6
    md = open(os.path.join(cdir, "results.md"), encoding="utf-8").read()
    assert ("| Name | Params (M) | Size (MB), fp32 weights | ms/iter | tokens/s | Peak memory (MB) | Best val loss "
            "| Val loss, weaker branch dropped |") in md
    er_row = next(line for line in md.splitlines() if line.startswith("| enhanced_residual |"))
    assert er_row.rstrip(" |").endswith("n/a")

    # figures: loss curves always, branch weights for pgpt, alphas for enhanced_residual
    for png in ("loss_curves.png", "branch_weights.png", "alphas.png"):
        with open(os.path.join(cdir, png), "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n", png

    # samples: one per model and prompt, each starting with its prompt; pgpt runs one branch
    samples = open(os.path.join(cdir, "samples.md"), encoding="utf-8").read()
    for prompt in PROMPTS:
        assert samples.count("````text\n" + prompt) == 2
    assert "pgpt is sampled with only its heaviest branch" in samples

    status = json.load(open(os.path.join(cdir, "status.json")))
    assert {k: v["state"] for k, v in status["models"].items()} == {"pgpt": "finished", "enhanced_residual": "finished"}
    assert status["models"]["pgpt"]["summary"]["iter_num"] == 6
    assert len(status["models"]["enhanced_residual"]["report"]["alphas"]) == 1   # 2 layers = 1 shared block

    # the same command again: nothing is retrained, the report is rewritten
    os.remove(os.path.join(cdir, "results.md"))
    compare.main(argv)
    assert len(counter.calls) == 2
    assert os.path.exists(os.path.join(cdir, "results.md"))

    # a training key changed for a finished model: a clear error instead of a mixed table
    with pytest.raises(SystemExit, match="other settings .*max_iters: 6 -> 8"):
        compare.main(tiny_argv(char_data, cdir, "pgpt,enhanced_residual", max_iters=8))


def test_compare_resumes_an_interrupted_model(char_data, tmp_path, monkeypatch, one_thread):
    cdir = str(tmp_path / "cmp")
    counter = CountingTrain(stop_at=4)
    monkeypatch.setattr(train, "train", counter)
    argv = tiny_argv(char_data, cdir, "gpt", bench_iters=0, prompts="[]")
    with pytest.raises(SystemExit) as e:
        compare.main(argv)
    assert e.value.code == 130
    status = json.load(open(os.path.join(cdir, "status.json")))
    assert status["models"]["gpt"]["state"] == "interrupted"
    assert os.path.exists(os.path.join(cdir, "gpt", "last.pt"))

    rows = compare.main(argv)
    assert counter.calls == ["scratch", "resume"]
    assert rows[0]["iters"] == 6 and rows[0]["ms_per_iter"] is not None   # bench_iters=0: the loop's timing
    status = json.load(open(os.path.join(cdir, "status.json")))
    assert status["models"]["gpt"]["state"] == "finished"
    assert not os.path.exists(os.path.join(cdir, "samples.md"))   # no prompts, no samples


def test_variants_and_prompts_on_the_command_line():
    argv = compare.normalize_argv(["--variants=gpt, lgpt", "--prompts", "Oh God, ", "--max_iters=5"])
    assert argv == ["--variants=['gpt', 'lgpt']", "--prompts=['Oh God, ']", "--max_iters=5"]
    assert compare.normalize_argv(["--variants=['gpt']"]) == ["--variants=['gpt']"]
    with pytest.raises(SystemExit, match="unknown variant 'nope'"):
        compare.run(*compare.parse(["--variants=gpt,nope", "--dry_run=True"]))
    with pytest.raises(SystemExit, match="twice"):
        compare.parse(["--variants=gpt,gpt"])


@pytest.mark.parametrize("cfg", ["config/compare_shakespeare_cpu.py", "config/compare_shakespeare.py",
                                 "config/compare_000_wikitext103.py"])
def test_compare_configs_dry_run(cfg, tmp_path, capsys):
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), cfg)
    assert compare.main([path, "--dry_run=True", f"--compare_dir={tmp_path / 'cmp'}"]) is None
    out = capsys.readouterr().out
    assert "[4/4]" in out and "to train" in out
    assert not os.path.exists(tmp_path / "cmp")
