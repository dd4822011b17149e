"""DDP on CPU: torchrun launches train.py's code on 2 gloo ranks. The ranks must stay in sync and the
run must match a single process with the same global batch (batches are a function of the global
micro-step, see train.py), with dropout 0 so both sides compute the same thing; each rank draws the windows
its global micro-steps' seeds name."""
import csv
import json
import os
import subprocess
import sys

import pytest
import torch

from conftest import ROOT, hold_lock
import train
from safety_net.configurator import UserError
from safety_net.run_dir import RunDir
from test_train_arithmetic import seed_formula, tokens, windows

WORKER = """
import json, os, sys
import torch, train
from model import GPT
cfg, param_dir = json.loads(sys.argv[1]), sys.argv[2]
batches, forward = [], GPT.forward

def record_batch(self, idx, targets=None, *args, **kwargs):   # the training batches this rank draws
    if targets is not None and self.training and len(idx) == cfg["batch_size"]:
        batches.append(torch.stack([idx, targets]))
    return forward(self, idx, targets, *args, **kwargs)

def save_params(event, info):
    if event == "end":
        params = {k: v.detach().clone() for k, v in info["model"].state_dict().items()}
        torch.save(params, os.path.join(param_dir, "rank%d.pt" % info["rank"]))
        torch.save(batches, os.path.join(param_dir, "batches%d.pt" % info["rank"]))

GPT.forward = record_batch
train.train({**train.DEFAULTS, **cfg}, explicit=set(cfg), callback=save_params)
"""


def train_losses(out_dir):
    with open(os.path.join(out_dir, "log.csv"), newline="") as f:
        return {int(r["iter"]): float(r["loss"]) for r in csv.DictReader(f) if r["kind"] == "train"}


def test_ddp_two_cpu_ranks_match_single_process(tiny_train_config, tmp_path):
    cfg = dict(tiny_train_config, gradient_accumulation_steps=4, batch_size=2, max_iters=6, eval_interval=6)

    single_params = {}

    def keep(event, info):
        if event == "end":
            single_params.update({k: v.detach().clone() for k, v in info["model"].state_dict().items()})

    single = train.train({**train.DEFAULTS, **cfg, "out_dir": str(tmp_path / "single")}, explicit=set(cfg),
                         callback=keep)

    ddp_cfg = dict(cfg, out_dir=str(tmp_path / "ddp"))
    param_dir = tmp_path / "params"
    param_dir.mkdir()
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=ROOT)   # the workers import train from the root
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                           str(script), json.dumps(ddp_cfg), str(param_dir)],
                          capture_output=True, text=True, timeout=240, env=env, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.count("step 6: train loss") == 1   # only rank 0 prints

    rank0 = torch.load(param_dir / "rank0.pt")
    rank1 = torch.load(param_dir / "rank1.pt")
    for k in rank0:
        assert torch.equal(rank0[k], rank1[k]), f"ranks diverged at {k}"
        torch.testing.assert_close(rank0[k], single_params[k], atol=2e-5, rtol=1e-4)

    ddp_losses, single_losses = train_losses(ddp_cfg["out_dir"]), train_losses(str(tmp_path / "single"))
    assert sorted(ddp_losses) == sorted(single_losses) == list(range(6))
    for it in single_losses:
        assert ddp_losses[it] == pytest.approx(single_losses[it], abs=1e-4)
    ddp_ckpt = torch.load(os.path.join(ddp_cfg["out_dir"], "last.pt"), weights_only=True)
    assert ddp_ckpt["best_val_loss"] == pytest.approx(single["best_val_loss"], abs=1e-4)
    assert len(ddp_ckpt["rng_ranks"]) == 2   # every rank's RNG state, for an exact DDP resume
    # each rank's share: 2 of the 4 micro-steps; rank r draws global micro-steps 2r and 2r + 1 of every iteration
    train_ids = tokens(cfg["data_dir"], "train")
    for rank in range(2):
        batches = torch.load(param_dir / f"batches{rank}.pt")
        assert len(batches) == 6 * 2
        for i, xy in enumerate(batches):
            seed = seed_formula(train.DEFAULTS["seed"], 0, i // 2, 2 * rank + i % 2)
            x, y = windows(train_ids, seed, cfg["batch_size"], cfg["block_size"])
            assert torch.equal(xy[0], x) and torch.equal(xy[1], y), (rank, i)


def test_ddp_accumulation_must_divide_by_world_size(tiny_train_config, monkeypatch):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    for steps in (3, 1):   # the fix names a multiple of the ranks, not 0
        with pytest.raises(UserError) as e:
            train.train({**train.DEFAULTS, **tiny_train_config, "gradient_accumulation_steps": steps})
        assert "divisible" in str(e.value) and "--gradient_accumulation_steps=2)" in str(e.value)


@pytest.mark.slow   # 9-15 s of the 5-minute suite; on_rank_zero's quiet exit: the lock case below, in process
def test_ddp_bad_input_seen_by_rank_0_alone_is_its_one_line(tiny_train_config, tmp_path):
    """Rank 0 alone prepares the data (and locks out_dir, below). When that failed, its line was printed, but
    rank 1, waiting in a collective, ended in a traceback of the broken connection (a hunt); now it exits
    quietly (safety_net/runtime.py's on_rank_zero)."""
    cfg = dict(tiny_train_config, gradient_accumulation_steps=2, batch_size=2, max_iters=2,
               data_dir=str(tmp_path / "afile"))
    (tmp_path / "afile").write_text("hi")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
               os.path.join(ROOT, "train.py")] + [f"--{k}={v}" for k, v in cfg.items()]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=240, env=env, cwd=str(tmp_path))
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0
    errors = [line for line in output.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "is a file" in errors[0], output[-3000:]
    assert "[rank1]" not in output and "RuntimeError" not in output, output[-3000:]


def test_a_lock_refused_on_rank_0_ends_the_other_ranks_quietly(tmp_path, monkeypatch):
    """RunDir: rank 0 alone takes out_dir's lock. Refused, rank 0's line is the run's; the other ranks went on to
    the first evaluation's all_reduce and ended in a traceback (a hunt). Now rank 0 tells them (a broadcast, stood
    in for here) and they exit 1 quietly."""
    told = []

    def broadcast(objects, src):
        if told:   # rank 1: hears rank 0's outcome
            objects[0] = told[0][0]
        else:      # rank 0: tells it
            told.append(list(objects))

    monkeypatch.setattr(torch.distributed, "broadcast_object_list", broadcast)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    config = dict(train.DEFAULTS, out_dir=str(out_dir), device="cpu", dtype="float32")
    holder = hold_lock(out_dir)
    try:
        with pytest.raises(UserError, match="another process"):
            with RunDir(config, 0, None, 0, 2, torch.device("cpu")):
                pass
        assert told == [[True]]
        with pytest.raises(SystemExit) as e:
            with RunDir(config, 0, None, 1, 2, torch.device("cpu")):
                pass
        assert e.value.code == 1
    finally:
        holder.kill()
        holder.wait()

STOP_WORKER = """
import json, os, signal, sys, time
import train
from safety_net.run_dir import RunDir
cfg, out = json.loads(sys.argv[1]), sys.argv[2]
saved = RunDir.saved

def slow_saved(self, iter_num, seconds):   # rank 0's writes after a save (log.csv's rows), slow as a big model's
    if self.master:
        time.sleep(1.5)
    saved(self, iter_num, seconds)
    if self.master:
        with open(os.path.join(out, "saved.json"), "w") as f:
            json.dump(time.time(), f)

def ask_on_rank1(event, info):
    if event == "iter" and info["rank"] == 1 and info["iter_num"] == 3:
        os.kill(os.getpid(), signal.SIGINT)   # as Ctrl-C or SIGTERM sent to this rank alone
    if event == "end":
        with open(os.path.join(out, "end%d.json" % info["rank"]), "w") as f:
            json.dump({"iter_num": info["iter_num"], "interrupted": info["interrupted"], "t": time.time()}, f)

RunDir.saved = slow_saved

train.train({**train.DEFAULTS, **cfg}, explicit=set(cfg), callback=ask_on_rank1)
"""


def test_ddp_a_stop_asked_on_one_rank_stops_both_at_the_same_boundary(tiny_train_config, tmp_path):
    """Rank 1 alone gets the signal at boundary 3; the vote there passes it to rank 0, so both stop at it, and
    last.pt holds that iteration (voted before its evaluation), rank 1 ending after it is written. A vote that needs
    every rank would run on to 10, and so did votes at log lines only (log_interval=100 here): under torchrun a
    stop could then outlast its 30 s before SIGKILL (a hunt)."""
    cfg = dict(tiny_train_config, gradient_accumulation_steps=2, batch_size=2, max_iters=10, eval_interval=3,
               log_interval=100)
    script = tmp_path / "worker.py"
    script.write_text(STOP_WORKER)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=ROOT)
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                           str(script), json.dumps(cfg), str(tmp_path)],
                          capture_output=True, text=True, timeout=240, env=env, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    ends = [json.loads((tmp_path / f"end{rank}.json").read_text()) for rank in range(2)]
    assert [{k: v for k, v in end.items() if k != "t"} for end in ends] == [{"iter_num": 3, "interrupted": True}] * 2
    # rank 1 waits for rank 0's last.pt and log.csv: exiting before them, torchrun stopped rank 0 mid-save, and
    # nothing was saved (a hunt)
    assert ends[1]["t"] >= json.loads((tmp_path / "saved.json").read_text())
    # the vote comes before boundary 3's evaluation: a long one ran to its end first, past torchrun's 30 s (a hunt)
    with open(os.path.join(cfg["out_dir"], "log.csv"), newline="") as f:
        assert [int(r["iter"]) for r in csv.DictReader(f) if r["kind"] == "eval"] == [0]
    assert "interrupted at iteration 3" in proc.stdout
    last = torch.load(os.path.join(cfg["out_dir"], "last.pt"), weights_only=True)
    assert last["iter_num"] == 3
    assert len(last["rng_ranks"]) == 2   # both ranks' RNG states: the stop was voted, no rank left early
