"""
Summarise paper 000's CPU ladder (runs of config/paper000_cpu.py, one out_dir per model and seed, named
<model>-s<seed>) into this folder: README.md (tables), loss_curves.png and alphas.png (Figure 7).

    python results/paper000_cpu/summarize.py --runs=out-000

Per model: mean and standard deviation over seeds of the final and best in-run val loss (20 fixed batches),
training FLOPs per token (model.flops_per_token(): every shared-layer application and every Deep Thinking
pass counted), and the val loss at equal compute: each run's eval curve read at the compute of the cheapest
model's full run, linearly interpolated between eval points.
"""

import argparse
import os
import re
import statistics
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))

from checkpoint import load_checkpoint  # noqa: E402
from model import GPT, GPTConfig  # noqa: E402
from plots import plot_alphas, plot_loss_curves, read_log  # noqa: E402


def load_runs(root):
    """{model: {seed: dict(log, flops_per_iter, params, alphas, wall_s)}} from root/<model>-s<seed>/."""
    runs = {}
    for name in sorted(os.listdir(root)):
        match = re.fullmatch(r"(.+)-s(\d+)", name)
        out_dir = os.path.join(root, name)
        if not match or not os.path.exists(os.path.join(out_dir, "done")):
            continue
        ckpt = load_checkpoint(os.path.join(out_dir, "last.pt"))
        with torch.device("meta"):
            model = GPT(GPTConfig(**ckpt["model_args"]))
        model.load_state_dict(ckpt["model"], assign=True)
        cfg = ckpt["config"]
        tokens_per_iter = cfg["batch_size"] * cfg["gradient_accumulation_steps"] * model.config.block_size
        runs.setdefault(match.group(1), {})[int(match.group(2))] = dict(
            log=read_log(out_dir), flops_per_token=model.flops_per_token(),
            flops_per_iter=model.flops_per_token() * tokens_per_iter, params=model.get_num_params(False),
            alphas=(model.residual_alphas()[::model.config.share_group_size]   # unique blocks
                    if model.config.enhanced_residual else None),
            iters=cfg["max_iters"], wall_s=float(open(os.path.join(out_dir, "done")).read()))
    return runs


def loss_at_compute(run, flops):
    """Val loss when the run had spent `flops` training FLOPs (linear between eval points; None if past the end)."""
    points = [(row["iter"] * run["flops_per_iter"], row["val_loss"]) for row in run["log"]["eval"]]
    for (f0, l0), (f1, l1) in zip(points, points[1:]):
        if f0 <= flops <= f1:
            return l0 + (l1 - l0) * (flops - f0) / (f1 - f0)
    return None


def mean_std(values):
    values = [v for v in values if v is not None]
    if not values:
        return "n/a"
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.4f} ± {std:.4f}"


def table(runs):
    budget = min(r["flops_per_iter"] * r["iters"] for seeds in runs.values() for r in seeds.values())
    lines = ["| model | seeds | params | GFLOPs/token | iterations | val loss at end | best val loss | "
             f"val loss at {budget:.3g} FLOPs (equal compute) | wall time per run |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, seeds in runs.items():
        rs = list(seeds.values())
        lines.append(f"| {name} | {len(rs)} | {rs[0]['params']:,} | {rs[0]['flops_per_token'] / 1e9:.4f} | "
                     f"{rs[0]['iters']} | {mean_std([r['log']['eval'][-1]['val_loss'] for r in rs])} | "
                     f"{mean_std([min(e['val_loss'] for e in r['log']['eval']) for r in rs])} | "
                     f"{mean_std([loss_at_compute(r, budget) for r in rs])} | "
                     f"{statistics.mean(r['wall_s'] for r in rs) / 60:.1f} min |")
    return "\n".join(lines)


def alpha_table(runs):
    lines = ["| model | layer | alpha_1 (attention), mean ± std | alpha_2 (FFN), mean ± std |", "|---|---:|---:|---:|"]
    for name, seeds in runs.items():
        per_seed = [r["alphas"] for r in seeds.values() if r["alphas"]]
        for layer in range(len(per_seed[0]) if per_seed else 0):
            a1 = mean_std([a[layer][0] for a in per_seed])
            a2 = mean_std([a[layer][1] for a in per_seed])
            lines.append(f"| {name} | {layer + 1} | {a1} | {a2} |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--runs", default="out-000", help="folder holding <model>-s<seed> run folders")
    args = parser.parse_args()
    runs = load_runs(args.runs)
    if not runs:
        sys.exit(f"error: no finished runs in {args.runs} (fix: run the commands in {HERE}/README.md first)")
    plot_loss_curves({f"{n} (seed {s})": r["log"] for n, seeds in runs.items() for s, r in seeds.items()},
                     os.path.join(HERE, "loss_curves.png"), title="paper 000 ladder, char-level Shakespeare (CPU)")
    alphas = {}
    for name, seeds in runs.items():
        first = seeds[min(seeds)]["alphas"]
        if first:   # Figure 7: the unique blocks' alphas (shared blocks counted once), lowest seed
            alphas[f"{name} (seed {min(seeds)})"] = first
    plot_alphas(alphas, os.path.join(HERE, "alphas.png"))
    print(table(runs))
    print()
    print(alpha_table(runs))


if __name__ == "__main__":
    main()
