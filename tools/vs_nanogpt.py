"""
The CPU quickstart's whole process against nanoGPT's same recipe, paired on this machine: wall time of
`python train.py config/gpt_shakespeare_cpu.py --max_iters=N` here and of nanoGPT's README CPU command with the
same sizes and schedule (4 x 128, block 64, batch 12, eval_iters 20, dropout 0, lr 1e-3 -> 1e-4), rounds
alternating which runs first. Ours keeps GPT-2's biases, which nanoGPT's train.py turns off: a little more work
here. Both datasets are prepared before timing; start-up, imports, evaluations, checkpoints and (ours) log.csv and
loss.png are in the time.

    python -m tools.vs_nanogpt --nanogpt=path/to/nanoGPT [--iters=500] [--rounds=5] [--num_threads=1]

--iters is best a multiple of eval_interval (250): nanoGPT evaluates only at multiples of it (and trains one
iteration more), this repository also at the last iteration, so other counts give the two different work.

nanoGPT is not part of this repository: pass a checkout of karpathy/nanoGPT (its data/shakespeare_char/prepare.py
needs `requests`). Prints each pair and the median ratio (ours / nanoGPT; <= 1.00 means at least as fast).
"""
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from safety_net.configurator import UserError, run_command
from safety_net.runtime import check_num_threads

DEFAULTS = dict(nanogpt="", iters=500, rounds=5, num_threads=0, input="")
# the warmup_iters of both recipes (config/gpt_shakespeare_cpu.py, nanoGPT's train_shakespeare_char.py): train.py
# refuses a warmup longer than the decay, which --iters sets, so a shorter run failed after the preparing (a hunt)
WARMUP_ITERS = 100
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def timed(cmd, cwd, env):
    t0 = time.perf_counter()
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    if r.returncode != 0:   # a run killed by a signal: a negative code, often no output ("failed in DIR:  "; a hunt)
        why = f"killed by signal {-r.returncode}" if r.returncode < 0 else f"exit status {r.returncode}"
        said = (r.stderr or r.stdout).strip()[-300:]
        raise UserError(f"{' '.join(cmd[:3])} ... failed in {cwd} ({why}){': ' + said if said else ''} "
                        f"(fix: run it by hand to see why)")
    return time.perf_counter() - t0


def run(cfg):
    nano = cfg["nanogpt"]
    # its train.py and the prepare.py it runs (a checkout without them was a FileNotFoundError; a hunt)
    needed = ("train.py", os.path.join("data", "shakespeare_char", "prepare.py"))
    if not nano or not all(os.path.isfile(os.path.join(nano, name)) for name in needed):
        raise UserError(f"--nanogpt must be a checkout of karpathy/nanoGPT (with {' and '.join(needed)}), got "
                        f"{nano!r} (fix: --nanogpt=path/to/nanoGPT)")
    if cfg["iters"] < WARMUP_ITERS or cfg["rounds"] < 1:
        raise UserError(f"--iters must be >= {WARMUP_ITERS} (the recipe's warmup_iters) and --rounds >= 1 (fix: "
                        f"e.g. --iters=300 --rounds=3)")
    check_num_threads(cfg["num_threads"])   # as every command checks it
    text = cfg["input"] or os.environ.get("SHAKESPEARE_INPUT", "") or os.path.join(ROOT, "data", "tinyshakespeare",
                                                                                     "input.txt")   # the shipped copy
    if not os.path.isfile(text):
        raise UserError(f"tinyshakespeare input.txt not found: {text!r} (fix: --input=path or SHAKESPEARE_INPUT)")
    env = dict(os.environ, SHAKESPEARE_INPUT=os.path.abspath(text))
    if cfg["num_threads"]:
        env["OMP_NUM_THREADS"] = str(cfg["num_threads"])
    n = cfg["iters"]
    with tempfile.TemporaryDirectory() as tmp:
        ours_dir, nano_dir = os.path.join(tmp, "ours"), os.path.join(tmp, "nanogpt")
        shutil.copytree(ROOT, ours_dir, ignore=shutil.ignore_patterns(".git", ".venv", "data", "out*", "__pycache__"))
        shutil.copytree(nano, nano_dir, ignore=shutil.ignore_patterns(".git", "out*"))
        shutil.copy(text, os.path.join(nano_dir, "data", "shakespeare_char", "input.txt"))
        timed([sys.executable, "prepare.py", "shakespeare_char"], ours_dir, env)
        timed([sys.executable, "data/shakespeare_char/prepare.py"], nano_dir, env)
        ours = [sys.executable, "train.py", "config/gpt_shakespeare_cpu.py", f"--max_iters={n}", f"--lr_decay_iters={n}"]
        theirs = [sys.executable, "train.py", "config/train_shakespeare_char.py", "--device=cpu", "--compile=False",
                  "--eval_iters=20", "--log_interval=10", "--block_size=64", "--batch_size=12", "--n_layer=4",
                  "--n_head=4", "--n_embd=128", f"--max_iters={n}", f"--lr_decay_iters={n}", "--dropout=0.0"]
        if cfg["num_threads"]:
            ours.append(f"--num_threads={cfg['num_threads']}")
        ratios = []
        for r in range(cfg["rounds"]):
            pair = {}
            for name in (("ours", "nanogpt") if r % 2 == 0 else ("nanogpt", "ours")):
                cmd, cwd = (ours, ours_dir) if name == "ours" else (theirs, nano_dir)
                shutil.rmtree(os.path.join(cwd, "out"), ignore_errors=True)
                shutil.rmtree(os.path.join(cwd, "out-shakespeare-char"), ignore_errors=True)
                pair[name] = timed(cmd, cwd, env)
            ratios.append(pair["ours"] / pair["nanogpt"])
            print(f"round {r + 1}: ours {pair['ours']:.2f} s, nanoGPT {pair['nanogpt']:.2f} s, "
                  f"ratio {ratios[-1]:.3f}", flush=True)
    print(f"{n} iterations, {cfg['rounds']} rounds: median ratio ours / nanoGPT = {statistics.median(ratios):.3f} "
          f"(min {min(ratios):.3f}, max {max(ratios):.3f})")
    return ratios


def main(argv=None):
    return run_command(run, DEFAULTS, argv)


if __name__ == "__main__":
    main(sys.argv[1:])
