"""compare.py: tables, figures, samples, status.json, skipping finished models, resuming an interrupted
one, and the three compare configs. Tiny models on a tiny char dataset: the file runs in seconds."""
import csv
import glob
import json
import math
import os
import shutil
import statistics

import pytest
import torch

from model import GPT, GPTConfig
import prepare
from tools import compare
from tools import spread
from tools.flops import flops_per_token
import train
from safety_net.configurator import UserError
from test_model import TINY

PROMPTS = ["Oh God, ", "War is "]
TEXT_LINES = ["Oh God, what is this war?", "War is a thing of kings and fools.", "Her affability is known.",
              "KING RICHARD III: Say that thou wert my friend.", "GLOUCESTER: Why, sir, the love of the world."]


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
    """Stands in for train.train: records each call's init_from (and out_dir in `dirs`); optionally
    interrupts call number `stop_call` after iteration `stop_at` (as Ctrl-C would: train.py saves last.pt
    and returns interrupted)."""

    def __init__(self, stop_at=None, stop_call=1):
        self.real, self.calls, self.dirs, self.stop_at, self.stop_call = train.train, [], [], stop_at, stop_call

    def __call__(self, config, explicit=None, callback=None):
        self.calls.append(config["init_from"])
        self.dirs.append(config["out_dir"])
        stop = self.stop_at if len(self.calls) == self.stop_call else None

        def cb(event, info):
            callback(event, info)
            if event == "iter" and info["iter_num"] == stop:
                raise KeyboardInterrupt

        return self.real(config, explicit, cb)


def test_compare_writes_tables_figures_samples_and_skips_finished(char_data, tmp_path, monkeypatch, one_thread):
    cdir = str(tmp_path / "cmp")
    counter = CountingTrain()
    monkeypatch.setattr(train, "train", counter)
    meta = json.loads(open(os.path.join(char_data, "meta.json")).read())
    with open(os.path.join(char_data, "meta.json"), "w") as f:   # --data_dir's own name, not the config's dataset
        json.dump(dict(meta, dataset="tiny_char"), f)
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
    assert "Dataset `tiny_char`;" in md   # it said shakespeare_char, the config's (a hunt)
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

    # the values, recomputed from the checkpoints they report on: parameters, best val loss, the branch weights
    # softmax(a) and the enhanced-residual alphas sigmoid(w) (2 layers = 1 shared block: one pair)
    from safety_net.checkpoint import load_model
    for row in table:
        model, ckpt = load_model(os.path.join(cdir, row["name"]))
        assert int(row["params"]) == model.get_num_params(non_embedding=False)
        assert float(row["best_val_loss"]) == pytest.approx(ckpt["best_val_loss"], rel=1e-5)   # csv: 6 digits
        report = status["models"][row["name"]]["report"]
        if row["name"] == "pgpt":
            logits = model.branch_logits.tolist()
            weights = [math.exp(a) / sum(math.exp(b) for b in logits) for a in logits]
            assert report["branch_weights"] == pytest.approx(weights, abs=1e-6)
            assert report["heaviest_branch"] == max(range(len(weights)), key=lambda i: weights[i])
        else:
            stack = model.branches[0]
            assert len(stack.attn) == len(stack.mlp) == 1
            sigmoid = [1 / (1 + math.exp(-sub.alpha_logit.item())) for sub in (stack.attn[0], stack.mlp[0])]
            assert report["alphas"] == [pytest.approx(sigmoid, abs=1e-6)]

    # one seed: no seed folders, no per-seed table, no noise column; the equal-compute table is there
    assert not os.path.exists(os.path.join(cdir, "results_per_seed.csv"))
    assert "## Equal compute" in md and "within noise" not in md
    assert float(pgpt["val_loss_equal_compute"]) > 0 and float(pgpt["flops_per_token"]) > 0

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
    assert "samples.md" not in open(os.path.join(cdir, "results.md"), encoding="utf-8").read()   # nor its link


def test_variants_and_prompts_on_the_command_line():
    config, _ = compare.parse(["--variants=gpt, lgpt", "--prompts", "Oh God, ", "--max_iters=5"])
    assert config["variants"] == ["gpt", "lgpt"] and config["prompts"] == ["Oh God, "]
    assert compare.parse(["--variants=['gpt']"])[0]["variants"] == ["gpt"]
    assert compare.parse(["--prompts=1,2"])[0]["prompts"] == ["1,2"]   # one item: it was the integers 1 and 2
    with pytest.raises(SystemExit, match="error: unknown variant 'nope'"):
        compare.main(["--variants=gpt,nope", "--dry_run=True"])
    with pytest.raises(UserError, match="twice"):
        compare.parse(["--variants=gpt,gpt"])


@pytest.mark.parametrize("cfg", ["config/compare_shakespeare_cpu.py", "config/compare_shakespeare.py",
                                 "config/compare_000_wikitext103.py"])
def test_compare_configs_dry_run(cfg, tmp_path, capsys):
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), cfg)
    assert compare.main([path, "--dry_run=True", f"--compare_dir={tmp_path / 'cmp'}"]) is None
    out = capsys.readouterr().out
    assert "[4/4]" in out and "to train" in out
    assert not os.path.exists(tmp_path / "cmp")


def test_compare_under_torchrun_is_refused(tmp_path, monkeypatch):
    """Its runs train one after another in one process: each torchrun rank would run the whole comparison."""
    from conftest import one_error_line
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    one_error_line(compare.main, ["--variants=gpt", "--dry_run=True", f"--compare_dir={tmp_path / 'cmp'}"],
                   "compare.py runs in one process", "not torchrun")


def test_a_dry_run_checks_every_runs_settings(tmp_path):
    """--dry_run skipped the training keys' checks: a plan for --learning_rate=-1 with exit code 0, and
    ZeroDivisionError or TypeError tracebacks for --batch_size=0, --eval_interval=0 or a custom variant's
    batch_size '8'; --max_iters=0 was that traceback with or without it (a hunt). One line each, as the run's.
    An unknown dataset was refused only when its run began, after compare_dir and status.json were written."""
    from conftest import one_error_line
    base = ["--variants=gpt", "--dry_run=True", f"--compare_dir={tmp_path / 'cmp'}"]
    for extra, words in ((["--learning_rate=-1"], "gpt: learning_rate must be > 0"),
                         (["--batch_size=0"], "gpt: batch_size must be an integer >= 1"),
                         (["--eval_interval=0"], "gpt: eval_interval must be an integer >= 1"),
                         (["--max_iters=0"], "gpt: max_iters=0: a comparison trains every model"),
                         (["--dataset=nothere"], "gpt: unknown dataset 'nothere'"),
                         (["--variants=gpt,t", "--custom_variants={'t': {'variant': 'baseline', 'mlp_ratio': 2}}"],
                          "t: mlp_ratio=2 changes nothing: mlp_hidden=1536"),
                         (["--dataset=nothere", "--dry_run=False"], "gpt: unknown dataset 'nothere'"),
                         (["--variants=gpt,t", "--custom_variants={'t': {'variant': 'gpt', 'batch_size': '8'}}"],
                          "t: batch_size must be an integer >= 1, got '8'")):
        one_error_line(compare.main, [*base, *extra], words)
    assert not os.path.exists(tmp_path / "cmp")


# -----------------------------------------------------------------------------------------------
# seeds, equal compute, noise


def test_val_loss_at_interpolates_between_evaluations():
    curve = [(0, 4.0), (20, 2.0), (10, 3.0), (30, 1.8), (40, None)]   # any order; a missing value skipped
    assert spread.val_loss_at(curve, 15) == pytest.approx(2.5)
    assert spread.val_loss_at(curve, 25) == pytest.approx(1.9)
    assert spread.val_loss_at(curve, 10) == pytest.approx(3.0)
    assert spread.val_loss_at(curve, 30) == pytest.approx(1.8)
    assert spread.val_loss_at(curve, 12.5) == pytest.approx(2.75)
    # before the first evaluation after iteration 0 (the untrained model is not an end point), or past the end
    assert spread.val_loss_at(curve, 5) is None
    assert spread.val_loss_at(curve, 31) is None
    assert spread.val_loss_at([(0, 4.0)], 0) is None


def test_equal_compute_budget_is_the_cheapest_full_run():
    rows = [dict(name="cheap", flops_per_iter=2.0, train_flops=2.0 * 30),
            dict(name="costly", flops_per_iter=4.0, train_flops=4.0 * 30),
            dict(name="sparse", flops_per_iter=20.0, train_flops=20.0 * 30)]
    curves = [[(10, 3.0), (20, 2.0), (30, 1.5)], [(10, 2.8), (20, 1.8), (30, 1.4)], [(10, 2.0), (30, 1.0)]]
    budget, cheapest = spread.add_equal_compute(rows, curves)
    assert budget == 60.0 and cheapest["name"] == "cheap"
    assert [r["equal_compute_iter"] for r in rows] == [30, 15, 3]
    assert rows[0]["val_loss_equal_compute"] == pytest.approx(1.5)   # its own last evaluation
    assert rows[1]["val_loss_equal_compute"] == pytest.approx(2.3)   # halfway between iterations 10 and 20
    assert rows[2]["val_loss_equal_compute"] is None                 # first evaluation (10) after the budget


def test_noise_verdict_is_welchs_two_standard_errors():
    a = dict(loss=2.0, loss_std=0.03, n_seeds=3)
    se = math.sqrt(0.03 ** 2 / 3 + 0.03 ** 2 / 3)
    assert spread.noise_verdict(a, dict(loss=2.0 - 2.1 * se, loss_std=0.03, n_seeds=3), "loss")[0] == "better"
    assert spread.noise_verdict(a, dict(loss=2.0 + 2.1 * se, loss_std=0.03, n_seeds=3), "loss")[0] == "worse"
    verdict, diff = spread.noise_verdict(a, dict(loss=2.0 + 1.9 * se, loss_std=0.03, n_seeds=3), "loss")
    assert verdict == "within noise" and diff == pytest.approx(1.9 * se)
    assert spread.noise_verdict(a, dict(loss=1.0, loss_std=None, n_seeds=1), "loss") is None   # no spread


def test_seeds_and_custom_variants_on_the_command_line(capsys):
    assert compare.parse(["--seeds=3", "--seed=7"])[0]["seeds"] == [7, 8, 9]
    assert compare.parse(["--seeds=5,1"])[0]["seeds"] == [5, 1]
    assert compare.parse([])[0]["seeds"] is None
    with pytest.raises(UserError, match="seed is not used when seeds lists the seeds"):   # it was ignored (a hunt)
        compare.parse(["--seeds=1,2", "--seed=7"])
    # a seed count or seed beyond train.py's range [0, 2**32) is refused before the list is made (10**12 seeds
    # used to fill the memory)
    for bad, match in (("--seeds=0", ">= 1"), ("--seeds=1,1", "twice"), ("--seeds=abc", "count or a list"),
                       ("--seeds=1000000000000", "at most 4294965959"), ("--seeds=[5, 4294967296]", "count or a list of seeds in")):
        with pytest.raises(UserError, match=match):
            compare.parse([bad])
    capsys.readouterr()
    # one defined but not listed was left out without a word (a hunt)
    compare.parse(["--variants=gpt", "--custom_variants={'cgpt_k3': {'variant': 'cgpt', 'shrink_kernel': 3}}"])
    assert "note: custom variants not in variants, not run: cgpt_k3" in capsys.readouterr().out
    with pytest.raises(UserError, match="out_dir, which is not a key"):
        compare.parse(["--custom_variants={'x': {'out_dir': 'y'}}"])
    with pytest.raises(UserError, match="unknown variant 'nope'"):
        compare.run(*compare.parse(["--variants=x", "--custom_variants={'x': {'variant': 'nope'}}", "--dry_run=True"]))
    # each variant trains into <compare_dir>/<name>: a custom name like ../../x trained and wrote outside it
    for bad in ("--variants=../../x", "--variants=a/b"):
        with pytest.raises(UserError, match="variant names are folder names inside compare_dir"):
            compare.parse([bad, "--custom_variants={'../../x': {'variant': 'gpt'}, 'a/b': {'variant': 'gpt'}}"])


@pytest.mark.parametrize("text", ['{"models": [1, 2]}', '{"models": {"gpt": 5}}'])
def test_a_status_json_of_another_shape_is_one_line(tmp_path, text):
    """A status.json that parses but is not {"models": {run: {...}}} was an AttributeError or TypeError traceback."""
    (tmp_path / "status.json").write_text(text)
    with pytest.raises(UserError, match="cannot read .*status.json.*not a dict of runs .*fix: another --compare_dir"):
        compare.load_status({"compare_dir": str(tmp_path)})


def test_a_planted_last_pt_is_refused_before_status_json_changes(char_data, tmp_path, monkeypatch, one_thread):
    """An interrupted run whose last.pt would run code when loaded (or is damaged) is refused before anything in
    compare_dir changes: status.json used to say 'running' before train.py refused the file."""
    import torch
    cdir = tmp_path / "cmp"
    monkeypatch.setattr(train, "train", CountingTrain(stop_at=4))
    argv = tiny_argv(char_data, str(cdir), "gpt", bench_iters=0, prompts="[]")
    with pytest.raises(SystemExit):
        compare.main(argv)
    last = cdir / "gpt" / "last.pt"
    marker = tmp_path / "ran"
    ckpt = torch.load(last, weights_only=True)
    ckpt["note"] = RunsCode(exec, f"open({str(marker)!r}, 'w').close()")
    torch.save(ckpt, last)
    status = (cdir / "status.json").read_bytes()
    with pytest.raises(SystemExit, match=r"error: gpt: refusing to load .*last.pt.*\(exec\)"):
        compare.main(argv)
    assert (cdir / "status.json").read_bytes() == status and not marker.exists()


class RunsCode:
    """Pickled, this becomes a call: the full unpickler would run func(*args)."""

    def __init__(self, func, *args):
        self.func, self.args = func, args

    def __reduce__(self):
        return self.func, self.args


def test_compare_with_seeds_mean_std_equal_compute_and_resume(char_data, tmp_path, monkeypatch, one_thread):
    """Two variants (gpt and a 4-layer gpt, about twice the FLOPs) x 2 seeds: the second run is
    interrupted, the next command resumes it and skips the finished one."""
    cdir = str(tmp_path / "cmp")
    counter = CountingTrain(stop_at=3, stop_call=2)
    monkeypatch.setattr(train, "train", counter)
    custom = repr({"deep": {"variant": "gpt", "n_layer": 4}})
    argv = tiny_argv(char_data, cdir, "gpt,deep", seeds=2, eval_interval=1, bench_iters=0, sample_tokens=4,
                     prompts="['War is ']", custom_variants=custom)
    with pytest.raises(SystemExit) as e:
        compare.main(argv)
    assert e.value.code == 130
    rows = compare.main(argv)
    assert counter.calls == ["scratch", "scratch", "resume", "scratch", "scratch"]
    assert [os.path.relpath(d, cdir) for d in counter.dirs] == [
        os.path.join("gpt", "seed1337"), os.path.join("gpt", "seed1338"), os.path.join("gpt", "seed1338"),
        os.path.join("deep", "seed1337"), os.path.join("deep", "seed1338")]
    compare.main(argv)                      # everything finished: nothing retrained
    assert len(counter.calls) == 5

    status = json.load(open(os.path.join(cdir, "status.json")))["models"]
    assert sorted(status) == ["deep/seed1337", "deep/seed1338", "gpt/seed1337", "gpt/seed1338"]
    assert all(v["state"] == "finished" and v["summary"]["iter_num"] == 6 for v in status.values())
    # only a variant's first seed is sampled
    assert "samples" in status["gpt/seed1337"]["report"] and "samples" not in status["gpt/seed1338"]["report"]

    # the seeds differ: already the first evaluation (untrained models, seeded init and eval batches), and the results
    first_loss = {k: next(csv.DictReader(open(os.path.join(cdir, k, "log.csv"))))["loss"] for k in status}
    assert first_loss["gpt/seed1337"] != first_loss["gpt/seed1338"]
    assert status["gpt/seed1337"]["summary"]["best_val_loss"] != status["gpt/seed1338"]["summary"]["best_val_loss"]

    # mean and std over the seeds come from the per-seed summaries
    with open(os.path.join(cdir, "results.csv"), newline="") as f:
        table = {r["name"]: r for r in csv.DictReader(f)}
    with open(os.path.join(cdir, "results_per_seed.csv"), newline="") as f:
        per_seed = list(csv.DictReader(f))
    assert [(r["name"], r["seed"]) for r in per_seed] == [("gpt", "1337"), ("gpt", "1338"), ("deep", "1337"),
                                                          ("deep", "1338")]
    for name in ("gpt", "deep"):
        losses = [status[f"{name}/seed{s}"]["summary"]["best_val_loss"] for s in (1337, 1338)]
        assert float(table[name]["best_val_loss"]) == pytest.approx(statistics.fmean(losses), rel=1e-5)
        assert float(table[name]["best_val_loss_std"]) == pytest.approx(statistics.stdev(losses), rel=1e-5)
        assert table[name]["n_seeds"] == "2" and table[name]["seeds"] == "1337 1338"
    assert rows[1]["best_val_loss"] == pytest.approx(statistics.fmean(
        [status[f"deep/seed{s}"]["summary"]["best_val_loss"] for s in (1337, 1338)]))

    # equal compute: gpt is the cheaper; deep's loss is read off its own eval curve at gpt's budget
    gpt, deep = table["gpt"], table["deep"]
    assert 1.5 < float(deep["flops_per_token"]) / float(gpt["flops_per_token"]) < 2.5
    it = float(gpt["train_flops"]) / float(deep["flops_per_iter"])
    assert float(deep["equal_compute_iter"]) == pytest.approx(it, rel=1e-5) and 2 < it < 5
    at_budget = []
    for s in (1337, 1338):
        evals = {int(r["iter"]): float(r["val_loss"]) for r in csv.DictReader(open(os.path.join(cdir, "deep", f"seed{s}",
                                                                                                  "log.csv")))
                 if r["kind"] == "eval"}
        lo = int(it)
        at_budget.append(evals[lo] + (evals[lo + 1] - evals[lo]) * (it - lo))
    assert float(deep["val_loss_equal_compute"]) == pytest.approx(statistics.fmean(at_budget), rel=1e-5)
    assert float(gpt["val_loss_equal_compute"]) == pytest.approx(statistics.fmean(
        [status[f"gpt/seed{s}"]["summary"]["final_val_loss"] for s in (1337, 1338)]), rel=1e-5)

    md = open(os.path.join(cdir, "results.md"), encoding="utf-8").read()
    assert "mean ± std over 2 seeds" in md and "| gpt | " in md and " ± " in md
    assert deep["best_val_loss_vs_first"].split(" (")[0] in ("better", "worse", "within noise")
    assert gpt["best_val_loss_vs_first"] == "(reference)"
    for png in ("loss_curves.png", "loss_vs_compute.png"):
        with open(os.path.join(cdir, png), "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n", png


ABLATIONS = sorted(glob.glob(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "config",
                                          "ablation_*.py")))


@pytest.mark.parametrize("cfg", ABLATIONS, ids=os.path.basename)
def test_ablation_configs_dry_run(cfg, tmp_path, capsys):
    assert compare.main([cfg, "--dry_run=True", f"--compare_dir={tmp_path / 'cmp'}"]) is None
    out = capsys.readouterr().out
    assert "seeds each" in out and "to train" in out
    if "tokenizer" not in cfg:   # per-token losses of different vocabularies are not compared at equal compute
        assert "note:" not in out, "too few evaluations before the equal-compute point"
    assert not os.path.exists(tmp_path / "cmp")


def test_noise_verdict_weighs_each_rows_own_spread_and_count():
    """Welch's standard error uses each row's own std and seed count, and the threshold is 2 exactly."""
    a = dict(loss=2.0, loss_std=0.01, n_seeds=3)
    assert spread.noise_verdict(a, dict(loss=2.05, loss_std=0.05, n_seeds=3), "loss")[0] == "within noise"  # b's std
    a2 = dict(loss=2.0, loss_std=0.05, n_seeds=2)
    assert spread.noise_verdict(a2, dict(loss=2.08, loss_std=0.05, n_seeds=10), "loss")[0] == "worse"  # b's n: 10
    se = math.sqrt(2 * 0.03 ** 2 / 3)
    b = dict(loss=2.0 + 1.98 * se, loss_std=0.03, n_seeds=3)
    assert spread.noise_verdict(dict(loss=2.0, loss_std=0.03, n_seeds=3), b, "loss")[0] == "within noise"   # not 1.96


def test_seed_statistics_and_the_verdicts_direction():
    mean, std = spread.mean_std([1.0, 1.1, 1.5])
    assert mean == pytest.approx(1.2) and std == pytest.approx(math.sqrt(0.14 / 2))   # sample std (n - 1)
    assert spread.mean_std([1.0, None, 1.5]) == (None, None)   # a missing seed is not averaged away
    rows = [dict(loss=2.0, loss_std=0.01, n_seeds=3), dict(loss=1.9, loss_std=0.01, n_seeds=3)]
    assert compare.verdict_text(rows, 1, "loss") == "better (-0.1000)"   # lower loss than the reference row
    # a loss per token of another tokenizer (the tokenizer ablation) was called better than GPT-2's (a hunt)
    rows = [dict(r, dataset=name) for r, name in zip(rows, ("shakespeare", "shakespeare_v1024"))]
    assert compare.verdict_text(rows, 1, "loss") == "n/a (another dataset)"
    assert "another dataset" in compare.seeds_note(dict(seeds=[1, 2, 3]), [dict(rows[0], name="a"), rows[1]])
    # round 2 of paper 003's multi-round training was "better at equal compute" with round 1 not counted (a hunt)
    rows = [dict(r, dataset="d", val_loss_equal_compute=r["loss"], val_loss_equal_compute_std=0.01) for r in rows]
    rows[1]["init_from"] = "out-r1/ckpt.pt"
    assert compare.verdict_text(rows, 1, "val_loss_equal_compute") == "n/a (starts trained)"
    assert compare.verdict_text(rows, 1, "loss") == "better (-0.1000)"   # its best val loss is still compared
    assert compare.tokens_per_iter(dict(batch_size=12, gradient_accumulation_steps=4), 64) == 12 * 4 * 64


def test_run_row_counts_the_compute_of_every_iteration_trained():
    """Equal compute starts from each run's training FLOPs: every iteration trained (iter_num), each of
    batch x accumulation x block tokens, not only those up to the best evaluation."""
    import dataclasses
    from types import SimpleNamespace
    from model import GPTConfig
    run = SimpleNamespace(name="x", config=dict(train.DEFAULTS, batch_size=4, gradient_accumulation_steps=2, max_iters=6,
                                                 eval_interval=3, eval_iters=2), seed=1)
    args = dataclasses.asdict(GPTConfig(n_layer=1, n_head=1, n_embd=8, block_size=8, vocab_size=16))
    entry = dict(summary=dict(model_args=args, iter_num=6, best_val_loss=1.0),
                 report=dict(params=1, weights_fp32_bytes=4, ckpt_bytes=8))
    log = dict(eval=[dict(iter=3, val_loss=1.0), dict(iter=6, val_loss=1.2)])
    row = compare.run_row(run, entry, log)
    assert row["best_iter"] == 3 and row["flops_per_iter"] == row["flops_per_token"] * 4 * 2 * 8
    assert row["train_flops"] == 6 * row["flops_per_iter"]
    # iteration 0, untrained, lower than every later one: train.py neither saves nor counts it, so ckpt.pt and
    # best_val_loss are iteration 3's; "Best at iter" said 0 (a hunt)
    log = dict(eval=[dict(iter=0, val_loss=0.5), dict(iter=3, val_loss=1.0), dict(iter=6, val_loss=1.2)])
    assert compare.run_row(run, entry, log)["best_iter"] == 3


def test_a_missing_starting_checkpoint_names_the_run_and_the_fix(char_data, tmp_path):
    """A custom variant that starts from a checkpoint its config's preparation steps write (the pangu
    ablations): before those steps, one line naming the run and the missing file (train.py's config check,
    which compare.py runs for every run before anything is written)."""
    missing = tmp_path / "src" / "ckpt.pt"
    custom = {"inh": {"variant": "gpt", "init_from": str(missing)}}
    argv = tiny_argv(char_data, tmp_path / "cmp", "inh", custom_variants=repr(custom))
    with pytest.raises(SystemExit, match=f"inh.*: init_from '{missing}' does not exist .*fix: write it first"):
        compare.main(argv)


def test_a_custom_variant_from_a_checkpoint_is_planned_as_its_model(char_data, tmp_path):
    """A custom variant with init_from trains that checkpoint's model (train.py: defaults <- it <- the variant <- the
    keys): the plan (and --dry_run) showed the variant's, and a start train.py refuses (lgpt's checkpoint under gpt's
    tied head) began after the other variants had trained (a hunt of the user tools). Now both show in the plan."""
    from safety_net.checkpoint import save_checkpoint
    import dataclasses

    def checkpoint(name, **flags):
        model = GPT(GPTConfig(vocab_size=65, block_size=16, n_layer=2, n_head=3, n_embd=24, **flags))
        path = tmp_path / name / "ckpt.pt"
        save_checkpoint(str(path), model.state_dict(), dataclasses.asdict(model.config), iter_num=0,
                        best_val_loss=9.9, config={})
        return str(path)

    custom = {"ft": {"variant": "gpt", "init_from": checkpoint("rms", norm="rmsnorm")}}
    argv = tiny_argv(char_data, tmp_path / "cmp", "gpt,ft", custom_variants=repr(custom), mlp_hidden=None)
    runs = compare.plan(*compare.parse(argv))
    assert [(run.name, run.args["norm"]) for run in runs] == [("gpt", "layernorm"), ("ft", "rmsnorm")]
    custom = {"ft": {"variant": "gpt", "init_from": checkpoint("lgpt", shrink_every=1, tie_embeddings=False)}}
    argv = tiny_argv(char_data, tmp_path / "cmp", "gpt,ft", custom_variants=repr(custom), mlp_hidden=None)
    with pytest.raises(UserError, match="variant ft with this config: GPTConfig: tie_embeddings needs"):
        compare.plan(*compare.parse(argv))
    assert not os.path.exists(tmp_path / "cmp")


def test_a_finished_run_started_otherwise_is_refused(char_data, tmp_path, monkeypatch, one_thread, capsys):
    """init_from decides what a model learns: a finished run of a custom variant that now starts from a checkpoint
    (or, trained from one, now from scratch) is refused, not reported with the old run's numbers."""
    cdir = str(tmp_path / "cmp")
    counter = CountingTrain()
    monkeypatch.setattr(train, "train", counter)
    scratch = {"ft": {"variant": "gpt"}}
    compare.main(tiny_argv(char_data, cdir, "ft", bench_iters=0, prompts="[]", custom_variants=repr(scratch)))
    src = tmp_path / "src.pt"
    shutil.copy(os.path.join(cdir, "ft", "ckpt.pt"), src)
    tuned = {"ft": {"variant": "gpt", "init_from": str(src)}}
    with pytest.raises(SystemExit, match=f"other settings \\(init_from: 'scratch' -> '{src}'\\)"):
        compare.main(tiny_argv(char_data, cdir, "ft", bench_iters=0, prompts="[]", custom_variants=repr(tuned)))
    assert counter.calls == ["scratch"]
    # from a checkpoint: said so when it starts
    capsys.readouterr()
    compare.main(tiny_argv(char_data, str(tmp_path / "cmp2"), "ft", bench_iters=0, prompts="[]",
                           custom_variants=repr(tuned)))
    assert f"from {src} -> " in capsys.readouterr().out


def test_a_run_without_its_record_is_refused_and_a_deleted_one_trains_again(char_data, tmp_path, monkeypatch,
                                                                            one_thread, capsys):
    """status.json holds the settings a run trained with. Deleted (its fix said so), a finished run was resumed
    under new settings and reported as of them; a deleted model folder was reported "finished earlier" with its
    old numbers (hunts). Without its record a run is refused; a deleted folder trains again."""
    cdir = tmp_path / "cmp"
    counter = CountingTrain()
    monkeypatch.setattr(train, "train", counter)
    argv = tiny_argv(char_data, str(cdir), "gpt", bench_iters=0, prompts="[]")
    compare.main(argv)
    (cdir / "status.json").unlink()
    with pytest.raises(SystemExit, match="holds a run that .*status.json does not record, .*fix: delete .*gpt"):
        compare.main(tiny_argv(char_data, str(cdir), "gpt", bench_iters=0, prompts="[]", learning_rate=5e-3,
                               max_iters=9, lr_decay_iters=9))
    assert counter.calls == ["scratch"]
    shutil.rmtree(cdir / "gpt")   # the fix it names: the run trains again, from scratch
    compare.main(argv)
    shutil.rmtree(cdir / "gpt")   # a finished run's folder deleted: trained again, not reported from status.json
    capsys.readouterr()
    compare.main(argv)
    assert counter.calls == ["scratch"] * 3 and "finished earlier" not in capsys.readouterr().out
    assert (cdir / "gpt" / "ckpt.pt").exists()


def test_a_compare_dir_that_is_a_file_is_one_line_before_the_plan(char_data, tmp_path, capsys):
    """Bad input is one line: a --compare_dir that is a file was refused after three lines of plan."""
    taken = tmp_path / "taken"
    taken.write_text("a file")
    with pytest.raises(SystemExit) as e:
        compare.main(tiny_argv(char_data, str(taken), "gpt"))
    assert e.value.code.startswith(f"error: compare_dir '{taken}'") and "(fix: " in e.value.code
    assert capsys.readouterr().out == "" and taken.read_text() == "a file"


def test_a_second_compare_into_a_compare_dir_is_refused(tmp_path):
    """One writer per compare_dir: while another process holds it, compare.py stops in one line naming the folder
    and that process, before it prepares data or writes anything; the lock dies with its holder (SIGKILL)."""
    from conftest import hold_lock
    cdir = tmp_path / "cmp"
    cdir.mkdir()
    holder = hold_lock(cdir)
    try:
        with pytest.raises(SystemExit) as e:
            compare.main(tiny_argv(str(tmp_path / "data"), str(cdir), "gpt"))
    finally:
        holder.kill()
        holder.wait()
    assert e.value.code.startswith(f"error: compare_dir '{cdir}' is being written by another process "
                                   f"(pid {holder.pid})") and "(fix: " in e.value.code
    assert os.listdir(cdir) == [".lock"] and not (tmp_path / "data").exists()
    compare.lock_dir(str(cdir)).close()   # free again


def test_an_interrupted_model_resumes_only_with_its_own_settings(char_data, tmp_path, monkeypatch, one_thread):
    """Resumed after Ctrl-C with another learning rate or batch size, a run would mix two recipes (and results.md
    would report the new one for all of it): refused as for a finished run, nothing changed. Keys that do not
    change what is learned (--num_threads) still resume."""
    cdir = str(tmp_path / "cmp")
    counter = CountingTrain(stop_at=4)
    monkeypatch.setattr(train, "train", counter)
    argv = tiny_argv(char_data, cdir, "gpt", bench_iters=0, prompts="[]")
    with pytest.raises(SystemExit):
        compare.main(argv)
    files = {name: open(os.path.join(cdir, name), "rb").read()
             for name in ("status.json", "gpt/last.pt", "gpt/log.csv")}
    for change, shown in (("--learning_rate=0.01", "learning_rate: 0.003 -> 0.01"),
                          ("--batch_size=8", "batch_size: 4 -> 8")):
        with pytest.raises(SystemExit) as e:
            compare.main(argv + [change])
        assert e.value.code.startswith("error: gpt in ") and "interrupted after training with other settings" in \
            e.value.code and shown in e.value.code and "(fix: " in e.value.code, e.value.code
        assert all(open(os.path.join(cdir, name), "rb").read() == data for name, data in files.items())
    assert compare.main(argv + ["--num_threads=1", "--wandb_run_name=again", "--backend=gloo"])[0]["iters"] == 6
    assert counter.calls == ["scratch", "resume"]


def test_a_dataset_that_a_tool_prepares_is_prepared_before_its_run(tmp_path, monkeypatch, capsys, one_thread):
    """compare.py trains in-process through train.train, whose first run prepares only prepare.py's datasets (for
    the others it names the tool's command): a compact or WikiText-103 dataset that is not prepared yet is prepared
    here with its tool. A preparation that fails is one line naming the run."""
    if not os.path.isfile(os.environ.get("GPT2_TIKTOKEN_FILE", "")):
        pytest.skip("needs the GPT-2 ranks file (GPT2_TIKTOKEN_FILE or ../shared/data)")
    monkeypatch.chdir(tmp_path)
    src = tmp_path / "input.txt"
    src.write_text("\n".join(TEXT_LINES[(7 * i) % len(TEXT_LINES)] for i in range(400)) + "\n", encoding="utf-8")
    monkeypatch.setenv("SHAKESPEARE_INPUT", str(src))
    rows = compare.main(tiny_argv("", "cmp", "gpt", dataset="shakespeare_v300", bench_iters=0, prompts="[]"))
    assert rows[0]["iters"] == 6
    assert "running python -m tools.pangu.compact_vocab shakespeare --vocab_size 300" in capsys.readouterr().out
    meta = json.load(open(os.path.join("data", "shakespeare_v300", "meta.json")))
    assert meta["tokenizer"] == "compact" and meta["vocab_size"] == 300

    monkeypatch.setenv("WIKITEXT103_SOURCE", str(tmp_path / "nope.zip"))
    with pytest.raises(SystemExit) as e:
        compare.main(tiny_argv("", "cmp2", "gpt", dataset="wikitext103_v300", bench_iters=0, prompts="[]"))
    assert e.value.code.startswith("error: gpt: preparing dataset 'wikitext103_v300' failed: WikiText-103 source "
                                   "not found: ") and "\n" not in e.value.code
    assert not os.path.exists(os.path.join("data", "wikitext103_v300"))


def test_flops_per_token_counts_the_factorized_embedding_path():
    """tools/flops.py: body FLOPs are the same; a tied factorized head costs (h P) W_e^T = E*width + vocab*E per
    token, plus the E -> width input projection, instead of vocab*width (6 FLOPs per weight per token)."""
    V, W, E = TINY["vocab_size"], TINY["n_embd"], 8
    plain = flops_per_token(GPT(GPTConfig(**TINY)))
    factorized = flops_per_token(GPT(GPTConfig(**TINY, embd_factor_dim=E)))
    assert factorized - plain == 6 * (2 * E * W + V * E - V * W)
    untied = flops_per_token(GPT(GPTConfig(**TINY, embd_factor_dim=E, tie_embeddings=False)))
    assert untied - plain == 6 * E * W


def test_a_finished_run_from_before_a_field_differs_when_the_field_is_set():
    """A run saved before a GPTConfig field existed had the field's default (the technique off): set now, the
    field is a difference (the finished run is not reused as the new configuration's); at its default it is none.
    A train key added since stays no difference."""
    old = {"model_args": {"n_layer": 4}, "train": {"max_iters": 10}}
    new = {"model_args": {"n_layer": 4, "think_steps": 2}, "train": {"max_iters": 10, "new_key": 1}}
    assert compare.differences(old, new) == ["think_steps: 0 -> 2"]
    assert compare.differences(old, {**new, "model_args": {"n_layer": 4, "think_steps": 0}}) == []


def test_the_setup_line_gives_the_schedule_the_runs_use():
    """warmup_iters, min_lr and lr_decay_iters left None are filled as train.py fills them (it said "warmup None")."""
    config = dict(compare.defaults(), max_iters=20, learning_rate=1e-3, variants=["gpt"], batch_size=4,
                  eval_interval=10, eval_iters=2)
    gpt = dict(name="gpt", block_size=256, dropout=0.0, **compare.own_settings(config))
    line = compare.setup_line(config, [gpt], "cpu", "float32")
    assert "(warmup 2, cosine to 0.0001 at iteration 20)" in line and "None" not in line
    # each model's own settings: it stated the config's for every model, block_size 1024 where the presets used
    # 256 and a custom variant's batch and evaluations as the others' (a hunt)
    assert "every model: 20 iterations of 4 x 256 tokens" in line and "every 10 iterations on 2 fixed" in line
    tiny = dict(gpt, name="tiny", block_size=16, batch_size=8, eval_interval=5)
    line = compare.setup_line(config, [gpt, tiny], "cpu", "float32")
    assert "20 iterations of (gpt: 4; tiny: 8) x (gpt: 256; tiny: 16) tokens" in line
    assert "evaluation every (gpt: 10; tiny: 5) iterations on 2 fixed batches" in line
    # a custom variant's lr, schedule and dataset, stated as the config's (a hunt)
    fast = dict(gpt, name="fast", **compare.own_settings(dict(config, learning_rate=4e-3, min_lr=4e-4,
                                                                   dataset="shakespeare")))
    line = compare.setup_line(config, [gpt, fast], "cpu", "float32")
    assert "Dataset `(gpt: shakespeare_char; fast: shakespeare)`" in line
    assert "AdamW lr (gpt: 0.001; fast: 0.004) (warmup 2, cosine to (gpt: 0.0001; fast: 0.0004)" in line
    assert compare.custom_text("none", {"variant": "efficio"}) == "none = efficio"   # it said "efficio with ;"


def test_paper000_summary_refuses_an_unknown_reference_before_its_figures(tiny_train_config, tmp_path, capsys):
    """--reference=<a typo> replaced the figures (by default results/paper000_cpu's), then ended in a StopIteration
    traceback (a hunt): one line first; a known one writes them and its table. alphas.png came only from runs of
    seed 1 (a hunt): here seed 2's."""
    from conftest import one_error_line
    from tools import paper000_summary
    runs = tmp_path / "runs"
    for name in ("small", "big"):
        cfg = dict(tiny_train_config, out_dir=str(runs / f"{name}-s2"), n_layer=1 if name == "small" else 2,
                   enhanced_residual=name == "big", gradient_accumulation_steps=2 if name == "small" else 1)
        train.train({**train.DEFAULTS, **cfg}, explicit=set(cfg))
    plots = tmp_path / "plots"
    one_error_line(paper000_summary.main, [f"--runs={runs}", f"--plot_dir={plots}", "--reference=smal"],
                   "--reference=smal is none of the models", "big, small")
    assert not plots.exists()
    capsys.readouterr()
    paper000_summary.main([f"--runs={runs}", f"--plot_dir={plots}", "--reference=small"])
    assert "| big |" in capsys.readouterr().out and (plots / "loss_curves.png").exists()
    assert (plots / "alphas.png").exists()
    # best val: as train.py's best_val_loss, without iteration 0's (counted there: a hunt), here made the lowest
    log = runs / "small-s2" / "log.csv"
    lines = log.read_text().splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("0,eval,"))
    cells = lines[first].split(",")
    lines[first] = ",".join(cells[:3] + ["0.001"] + cells[4:])
    log.write_text("\n".join(lines) + "\n")
    small = next(r for r in paper000_summary.load_runs(str(runs)) if r["name"] == "small")
    ckpt = torch.load(runs / "small-s2" / "last.pt", weights_only=True)
    assert small["best_val"] == pytest.approx(ckpt["best_val_loss"], rel=1e-5) and small["best_val"] > 1
    # the training tokens of an iteration count its gradient accumulation steps (2 here: a hunt: a changed line
    # dropped them, and no test failed)
    tokens = tiny_train_config["batch_size"] * 2 * tiny_train_config["block_size"]
    assert small["flops_per_iter"] == small["flops_per_token"] * tokens
    assert small["train_flops"] == small["flops_per_token"] * tokens * tiny_train_config["max_iters"]


def test_paper000_summary_tables_and_alphas_of_hand_made_runs(tmp_path, monkeypatch, capsys):
    """Three seeds per model, 600 s each: the wall column is the mean per run (10.0 min); the verdict against the
    reference follows the final val loss (b is better at the end, worse at its best); the alpha table numbers
    blocks from 1; alphas.png is drawn for the lowest seed's run (a hunt: a changed line did each, and no test
    failed: 30.0 min, the best loss's verdict, block 0, seed 3's alphas)."""
    from tools import paper000_summary
    rows = []
    for name, finals, bests in (("a", (2.0, 2.01, 1.99), (1.5, 1.51, 1.49)),
                                ("b", (1.9, 1.91, 1.89), (1.6, 1.61, 1.59))):
        for seed, final, best in zip((1, 2, 3), finals, bests):
            log = {"eval": [dict(iter=0, val_loss=4.0), dict(iter=10, val_loss=final)], "train": []}
            alphas = [(0.1 * seed, 0.5), (0.2, 0.6)] if name == "b" else None
            rows.append(dict(name=name, seed=seed, log=log, params=1000, flops_per_token=1e9, flops_per_iter=1e11,
                             iters=10, train_flops=1e12, final_val=final, best_val=best, alphas=alphas, wall_s=600.0))
    drawn = {}
    monkeypatch.setattr(paper000_summary, "load_runs", lambda root: rows)
    monkeypatch.setattr(paper000_summary, "plot_loss_curves", lambda *a, **k: None)
    monkeypatch.setattr(paper000_summary, "plot_loss_vs_compute", lambda *a, **k: None)
    monkeypatch.setattr(paper000_summary, "plot_alphas", lambda alphas, path: drawn.update(alphas))
    paper000_summary.main([f"--runs={tmp_path}", f"--plot_dir={tmp_path / 'plots'}", "--reference=a"])
    out = capsys.readouterr().out
    b_row = next(line for line in out.splitlines() if line.startswith("| b | 3 |"))
    assert "| better (-0.1000) |" in b_row and b_row.endswith("| 10.0 min |"), b_row
    assert "| b | 1 | 0.2000 ± 0.1000 | 0.5000 ± 0.0000 |" in out and "| b | 0 |" not in out
    assert list(drawn) == ["b (seed 1)"] and drawn["b (seed 1)"][0] == (0.1, 0.5)


def test_samples_draw_only_the_tokenizers_ids(tmp_path):
    """A model padded past its dataset's vocabulary (--vocab_size) drew padding ids, which the tokenizer cannot
    decode: an IndexError (a hunt). Only the tokenizer's ids are drawn, as in sample.py."""
    from conftest import write_char_checkpoint
    from model import GPT, GPTConfig
    from safety_net.checkpoint import load_model
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=64, block_size=16, n_layer=1, n_head=2, n_embd=16))
    from safety_net.checkpoint import save_checkpoint
    from safety_net.dataset import load_meta, tokenizer_id
    path = write_char_checkpoint(tmp_path, model, list("abcdefgh"))
    ckpt = torch.load(path / "ckpt.pt", weights_only=True)   # as train.py saves a padded model: its tokenizer
    del ckpt["format_version"]
    save_checkpoint(str(path / "ckpt.pt"), **ckpt, tokenizer_id=tokenizer_id(load_meta(tmp_path / "data")))
    model, ckpt = load_model(path)
    config = dict(compare.defaults(), prompts=["abc"], samples_per_prompt=2, sample_tokens=40,
                  sample_temperature=100.0, sample_top_k=0)
    out = compare.generate_samples(model, ckpt, config, "cpu", "float32")
    assert len(out) == 2 and all(set(o["text"]) <= set("abcdefgh") for o in out), out


def test_figure_titles_name_every_dataset_of_the_runs(tmp_path, monkeypatch):
    """The tokenizer ablation's runs train on four datasets; its figures were titled with the config's one."""
    import types
    titles = []

    def record_title(*args, title, **kwargs):
        titles.append(title)
        return False

    monkeypatch.setattr(compare.plots, "plot_loss_curves", record_title)
    config = {"data_dir": "", "dataset": "shakespeare_char", "compare_dir": str(tmp_path), "seeds": None}
    runs = [types.SimpleNamespace(name=d, key=d, first=True, config={"data_dir": "", "dataset": d})
            for d in ("shakespeare", "shakespeare_v1024")]
    status = {"models": {run.key: {"state": "finished"} for run in runs}}
    compare.write_figures(config, status, runs, {run.key: {"train": [], "eval": []} for run in runs}, [], None)
    assert titles == ["Loss comparison on 2 datasets (shakespeare, shakespeare_v1024)"]
    assert compare.datasets_of(config, runs[:1] * 2) == "shakespeare"
    assert compare.datasets_of(config, []) == "shakespeare_char"


# -----------------------------------------------------------------------------------------------
# edge cases of the checks, statistics and tables, called directly (no training)


def test_seeds_reach_the_last_seed_and_refuse_a_negative_one():
    """--seeds=N may end at MAX_SEED - 1; a listed seed below 0 is refused in one line (a hunt: a changed line
    did this, and no test failed)."""
    from safety_net.runtime import MAX_SEED
    assert compare.resolve_seeds(3, MAX_SEED - 3) == [MAX_SEED - 3, MAX_SEED - 2, MAX_SEED - 1]
    with pytest.raises(UserError, match="seeds must be a count or a list of seeds in"):
        compare.resolve_seeds([-1, 2], 0)


@pytest.mark.parametrize("arg, words", [
    ("--samples_per_prompt=0", "samples_per_prompt must be >= 1"),
    ("--sample_tokens=-1", "sample_tokens must be >= 0"),
    ("--bench_iters=-1", "bench_iters must be >= 0"),
    ("--compare_dir=", "compare_dir is empty"),
    ("--init_from=resume", "compare.py sets init_from itself"),
    ("--eval_only=True", "eval_only does not train"),
    ("--prompts=['War is ', '']", "prompts holds an empty prompt"),
])
def test_bad_compare_keys_are_one_line(arg, words):
    """Each of compare.py's own refusals (a hunt: a changed line did this, and no test failed)."""
    with pytest.raises(UserError, match=words):
        compare.parse([arg])


def test_init_from_scratch_as_nanogpts_config_files_set_it_is_accepted():
    """config/nanogpt.py (nanoGPT's defaults) sets init_from = "scratch", what compare.py sets itself: it was refused,
    and the only fix was to edit the repository's own file (a hunt of the user tools)."""
    config, _ = compare.parse([os.path.join(os.path.dirname(compare.__file__), "..", "config", "nanogpt.py")])
    assert config["init_from"] == "scratch"


def test_aggregate_means_stds_counts_and_first_seed_columns():
    """One row per variant: n_seeds and seeds of its own runs, mean and sample std over all of them, the other
    columns from its first seed (a hunt: a changed line did this, and no test failed)."""
    def row(name, seed, loss, weights):
        r = {k: 1.0 for k in compare.SEED_METRICS}
        return dict(r, name=name, seed=seed, best_val_loss=loss, branch_weights=weights)
    rows = [row("a", 1, 1.0, "0.6 0.4"), row("a", 2, 1.1, "0.5 0.5"), row("a", 3, 1.5, "0.5 0.5"),
            row("b", 1, 2.0, None), row("b", 2, 2.4, None)]
    a, b = compare.aggregate(rows)
    assert (a["n_seeds"], a["seeds"], b["n_seeds"], b["seeds"]) == (3, "1 2 3", 2, "1 2")
    assert a["best_val_loss"] == pytest.approx(statistics.fmean([1.0, 1.1, 1.5]))
    assert a["best_val_loss_std"] == pytest.approx(statistics.stdev([1.0, 1.1, 1.5]))
    assert b["best_val_loss"] == pytest.approx(2.2)
    assert b["best_val_loss_std"] == pytest.approx(statistics.stdev([2.0, 2.4]))
    assert a["branch_weights"] == "0.6 0.4" and "seed" not in a


def test_table_cells_and_number_formats():
    """fmt_si's units at their thresholds and for negative values, 'mean ± std' only for a seed metric with a
    value, markdown alignment (a hunt: a changed line did this, and no test failed)."""
    assert [compare.fmt_si(v) for v in (1e6, 1e3, -2e9, 999.0)] == ["1M", "1k", "-2G", "999"]
    seeds = [1, 2]
    with_std = dict(best_val_loss=1.23456, best_val_loss_std=0.01)
    assert compare.cell(with_std, "best_val_loss", ".4f", seeds) == "1.2346 ± 0.0100"
    assert compare.cell(dict(best_val_loss=None), "best_val_loss", ".4f", seeds) == "n/a"
    assert compare.cell(dict(params_m=1.5), "params_m", ".2f", seeds) == "1.50"
    assert compare.md_table(["a", "b", "c"], [[1, 2, 3]], left=2).splitlines()[1] == "|---|---|---:|"


def test_best_eval_skips_missing_losses_and_keeps_a_lone_iteration_0():
    """The best evaluation of a run: a row without a val loss is skipped, and a run evaluated only at iteration 0
    keeps that one (a hunt: a changed line did this, and no test failed)."""
    assert compare.best_eval(dict(eval=[dict(iter=0, val_loss=2.0)])) == dict(iter=0, val_loss=2.0)
    log = dict(eval=[dict(iter=0, val_loss=3.0), dict(iter=3, val_loss=None), dict(iter=6, val_loss=1.5)])
    assert compare.best_eval(log)["iter"] == 6


def test_run_row_reports_the_bench_timing_memory_and_total_train_time():
    """ms/iter and tokens/s from the bench when it ran, peak memory in decimal MB, the train time of every session,
    the ckpt size, no weaker-branch loss for a single-branch model, no ppl past exp(50) (a hunt: a changed line did
    this, and no test failed)."""
    import dataclasses
    from types import SimpleNamespace
    from model import GPTConfig
    run = SimpleNamespace(name="x", config=dict(train.DEFAULTS, batch_size=4, max_iters=6, eval_interval=3,
                                                 eval_iters=2), seed=1)
    args = dataclasses.asdict(GPTConfig(n_layer=1, n_head=1, n_embd=8, block_size=8, vocab_size=16))
    summary = dict(model_args=args, iter_num=6, best_val_loss=1.0, ms_per_iter=50.0, tokens_per_s=10.0,
                   train_time_s=3.0, train_time_total_s=9.0)
    report = dict(params=1, weights_fp32_bytes=4_000_000, ckpt_bytes=12_000_000, bench_ms=20.0, bench_tok_s=99.0,
                  peak_bytes=5_000_000)
    log = dict(eval=[dict(iter=3, val_loss=1.0, val_loss_heaviest=1.3)])
    row = compare.run_row(run, dict(summary=summary, report=report), log)
    assert (row["ms_per_iter"], row["tokens_per_s"], row["timing"]) == (20.0, 99.0, "bench")
    assert (row["train_ms_per_iter"], row["train_time_s"]) == (50.0, 9.0)
    assert (row["peak_memory_mb"], row["ckpt_mb"], row["size_mb_fp32_weights"]) == (5.0, 12.0, 4.0)
    assert row["val_loss_weaker_branch_dropped"] is None and row["best_val_ppl"] == pytest.approx(math.e)
    huge = compare.run_row(run, dict(summary=dict(summary, best_val_loss=60.0), report=report), log)
    assert huge["best_val_ppl"] is None


def test_csv_writes_none_empty_and_floats_to_six_digits(tmp_path):
    """results.csv: a missing value is an empty cell and a float has six significant digits (a hunt: a changed line
    did this, and no test failed)."""
    path = tmp_path / "r.csv"
    compare.write_csv(str(path), [dict(name="a", loss=1.234567891, peak=None, iters=6)])
    assert path.read_text().splitlines() == ["name,loss,peak,iters", "a,1.23457,,6"]


def _run(name, key, flops_scale, max_iters, accum=1, first=True):
    cfg = dict(batch_size=2, gradient_accumulation_steps=accum, max_iters=max_iters, eval_interval=10)
    return compare.Run(name=name, seed=3, key=key, out_dir="", config=cfg, explicit=set(), args=dict(block_size=4),
                       first=first)


def test_equal_compute_plan_reads_the_cheapest_runs_budget():
    """The plan's equal-compute iteration and evaluation count per variant, accumulation steps counted, and a
    seed run's label (a hunt: a changed line did this, and no test failed)."""
    a, b = _run("a", "a", 1, 100), _run("b", "b/seed3", 2, 100, accum=2)
    assert b.cost_per_iter(2.0) == 2.0 * 2 * 2 * 4 and (a.label, b.label) == ("a", "b seed 3")
    plan, cheapest = compare.equal_compute_plan([a, b], {"a": (0, 1.0), "b": (0, 2.0)})
    assert cheapest == "a" and plan == {"a": (100.0, 10), "b": (25.0, 2)}


def test_progress_eta_weighs_each_runs_remaining_iterations_by_its_cost(monkeypatch):
    """ETA = seconds per FLOP measured on the current run x every run's remaining iterations x its FLOPs per
    iteration; a finished run adds nothing (a hunt: a changed line did this, and no test failed)."""
    from types import SimpleNamespace
    clock = [0.0]
    monkeypatch.setattr(compare, "time", SimpleNamespace(time=lambda: clock[0]))
    a, b = _run("a", "a", 1, 10), _run("b", "b", 1, 10)
    p = compare.Progress([a, b], {"a": 2.0, "b": 4.0}, {"a": 10, "b": 10}, print_every_s=1e9)
    p.start(1, a, 0)
    clock[0] = 10.0
    p("iter", dict(iter_num=5))   # 10 s for 5 iterations of cost 2: 1 s per FLOP
    assert p.eta() == pytest.approx(5 * 2 + 10 * 4)
    p.finish(a)
    assert p.eta() == pytest.approx(10 * 4)


def test_equal_compute_table_and_seeds_note_numbers():
    """'x <first>' is each model's FLOPs/token over the first row's; the seeds note counts the seeds, not the rows
    (a hunt: a changed line did this, and no test failed)."""
    rows = [dict(name=n, flops_per_token=f, train_flops=f * 10, equal_compute_iter=i, iters=10,
                 val_loss_equal_compute=1.0, train_time_s=1.0, eval_interval=5, init_from="scratch")
            for n, f, i in (("a", 100.0, 10.0), ("b", 200.0, 5.0))]
    text = "\n".join(compare.equal_compute_lines({}, rows, 1000.0, rows[0], None))
    assert "| b | 200 | 2.00x |" in text and "| a | 100 | 1.00x |" in text
    note = compare.seeds_note(dict(seeds=[1, 2, 3]), [dict(rows[0]), dict(rows[1])])
    assert "mean ± std over 3 seeds" in note
