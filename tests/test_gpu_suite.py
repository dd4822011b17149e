"""The one GPU command, `python bench.py --mode=gpu`, proven on the CPU: --smoke runs every part (checks,
training throughput, paper 001, decoding, the compile tests, paper 004 through compare.py) with toy models,
each as a child process, and writes the report. It measures nothing; it shows the command works."""
import csv
import json
import os
import subprocess
import sys

import pytest

import variants
from conftest import ROOT


def test_gpu_command_smoke(tmp_path, tiny_data):
    out = tmp_path / "gpu"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "bench.py", "--mode=gpu", "--smoke", f"--results_dir={out}",
                           f"--data_dir={tiny_data}"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"wrote {out / 'README.md'}" in proc.stdout
    status = json.loads((out / "raw" / "_status.json").read_text())
    assert {s["status"] for s in status.values()} == {"ok"}
    assert {j.split(":")[0] for j in status} == {"checks", "train", "paper001", "decode", "tests", "paper004"}
    for name in ("README.md", "measurements.csv", "throughput.png", "paper001.png", "decode.png",
                 "paper004_results.md", "paper004_loss_curves.png"):
        assert (out / name).stat().st_size > 0, name
    with open(out / "measurements.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    checks = [r for r in rows if r["part"] == "checks"]
    assert len(checks) == 2 * len(variants.available())   # every preset, float32 and bfloat16
    assert all(r["ok"] == "True" for r in checks)
    train = {r["model"]: float(r["tok_s"]) for r in rows if r["part"] == "train"}
    assert set(train) == {"plain_gpt2", "gpt2_124m", "mobilellm_125m", "shishulm_125", "layer_sharing",
                          "enhanced_residual", "deep_thinking"} and min(train.values()) > 0
    assert {r["seq"] for r in rows if r["part"] == "paper001"} == {"32", "64"}
    decode = [r for r in rows if r["part"] == "decode"]
    assert [r["model"] for r in decode] == ["gpt", "gpt2_124m"]
    assert all(float(r["argmax_agree"]) == 1 and float(r["logit_err"]) < 1e-4 for r in decode)
    report = (out / "README.md").read_text()
    assert "SMOKE RUN" in report and "| gpt2_124m |" in report and "Paper 001 Tables 3/4 layout" in report


def test_parts_name_parts_or_single_jobs(capsys):
    """--parts takes parts and single jobs (to split the suite into calls of a few minutes); a wrong name is a
    one-line error before anything runs."""
    from benchmarks import gpu_suite
    from configurator import UserError
    assert [j for j, _, _ in gpu_suite.plan(["train:layer_sharing", "checks"])] == ["checks", "train:layer_sharing"]
    assert len(gpu_suite.plan(["train"])) == len(gpu_suite.TRAIN_MODELS) + 1   # + the plain GPT-2 reference
    with pytest.raises(UserError, match=r"unknown --parts \['train:nope'\]"):
        gpu_suite.main(dict(job="", parts="checks,train:nope", smoke=True), [])
