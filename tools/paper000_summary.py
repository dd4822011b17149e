"""
Summarise paper 000's CPU ladder (runs of config/paper000_cpu.py, one out_dir per model and seed, named
<model>-s<seed>; unfinished runs are skipped): tables on stdout, and loss_curves.png, loss_vs_compute.png and
alphas.png (paper 000 Figure 7) in --plot_dir (default: results/paper000_cpu, where its README cites them).

    python -m tools.paper000_summary --runs=out-000

Per model, mean and sample std over seeds (tools/spread.py): final and best in-run val loss (20 fixed
batches), and the val loss at equal compute: each run's eval curve read at the training FLOPs of the cheapest
model's full run (tools/flops.py's flops_per_token: every shared-layer application and Deep Thinking pass counted).
"""

import os
import re

import torch

from model import GPT, GPTConfig
from tools.flops import flops_per_token
from tools.plots import plot_alphas, plot_loss_curves, plot_loss_vs_compute, read_log, residual_alphas
from tools.spread import add_equal_compute, mean_std, noise_verdict
from safety_net.checkpoint import load_checkpoint
from safety_net.configurator import UserError, run_command

RESULTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "results", "paper000_cpu")


def load_runs(root):
    """One row per finished run: name, seed, log, sizes, FLOPs, final/best val loss, alphas, wall time."""
    rows = []
    for folder in sorted(os.listdir(root)):
        match = re.fullmatch(r"(.+)-s(\d+)", folder)
        out_dir = os.path.join(root, folder)
        if not match or not os.path.exists(os.path.join(out_dir, "last.pt")):
            continue
        ckpt = load_checkpoint(out_dir, prefer=("last.pt",))
        with torch.device("meta"):
            model = GPT(GPTConfig(**ckpt["model_args"]))
        model.load_state_dict(ckpt["model"], assign=True)
        cfg, log = ckpt["config"], read_log(out_dir)
        evals = [r for r in log["eval"] if r["val_loss"] is not None]
        if not evals or evals[-1]["iter"] < cfg["max_iters"]:
            continue   # still training
        tokens = cfg["batch_size"] * cfg["gradient_accumulation_steps"] * model.config.block_size
        trained = [r for r in evals if r["iter"] > 0] or evals   # train.py's best_val_loss leaves iteration 0 out
        unique = residual_alphas(model)[::model.config.share_group_size] if model.config.enhanced_residual else None
        rows.append(dict(name=match.group(1), seed=int(match.group(2)), log=log,
                         params=model.get_num_params(False), flops_per_token=flops_per_token(model),
                         flops_per_iter=flops_per_token(model) * tokens, iters=cfg["max_iters"],
                         train_flops=flops_per_token(model) * tokens * cfg["max_iters"],
                         final_val=evals[-1]["val_loss"], best_val=min(r["val_loss"] for r in trained),
                         alphas=unique, wall_s=evals[-1]["elapsed_s"]))
    return rows


def fmt(mean, std):
    return "n/a" if mean is None else f"{mean:.4f}" + ("" if std is None else f" ± {std:.4f}")


def summary(rows):
    """One row per model: means and stds over its seeds (the keys noise_verdict reads)."""
    out = []
    for name in dict.fromkeys(r["name"] for r in rows):
        group = [r for r in rows if r["name"] == name]
        agg = dict(name=name, n_seeds=len(group), params=group[0]["params"], iters=group[0]["iters"],
                   flops_per_token=group[0]["flops_per_token"], wall_min=sum(r["wall_s"] for r in group) / len(group) / 60)
        for key in ("final_val", "best_val", "val_loss_equal_compute"):
            agg[key], agg[key + "_std"] = mean_std([r[key] for r in group])
        out.append(agg)
    return out


def table(models, budget, reference):
    ref = next(m for m in models if m["name"] == reference)
    lines = [f"| model | seeds | params | GFLOPs/token | iterations | val loss at end | best val loss | "
             f"val loss at {budget:.3g} FLOPs | val at end vs {reference} | wall per run |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|"]
    for m in models:
        verdict = noise_verdict(ref, m, "final_val") if m is not ref else None
        lines.append(f"| {m['name']} | {m['n_seeds']} | {m['params']:,} | {m['flops_per_token'] / 1e9:.4f} | "
                     f"{m['iters']} | {fmt(m['final_val'], m['final_val_std'])} | {fmt(m['best_val'], m['best_val_std'])} | "
                     f"{fmt(m['val_loss_equal_compute'], m['val_loss_equal_compute_std'])} | "
                     f"{'-' if verdict is None else f'{verdict[0]} ({verdict[1]:+.4f})'} | {m['wall_min']:.1f} min |")
    return "\n".join(lines)


def alpha_table(rows):
    lines = ["| model | block | alpha_1 (attention) | alpha_2 (FFN) |", "|---|---:|---:|---:|"]
    for name in dict.fromkeys(r["name"] for r in rows if r["alphas"]):
        per_seed = [r["alphas"] for r in rows if r["name"] == name]
        for block in range(len(per_seed[0])):
            a1 = mean_std([a[block][0] for a in per_seed])
            a2 = mean_std([a[block][1] for a in per_seed])
            lines.append(f"| {name} | {block + 1} | {fmt(*a1)} | {fmt(*a2)} |")
    return "\n".join(lines)


DEFAULTS = dict(
    runs="out-000",              # folder holding the <model>-s<seed> run folders
    reference="layer_sharing",   # the row the noise verdicts compare with
    plot_dir=RESULTS,            # folder for the PNGs
)


def main(argv=None):
    return run_command(run, DEFAULTS, argv)


def run(config):
    rows = load_runs(config["runs"]) if os.path.isdir(config["runs"]) else []
    if not rows:
        raise UserError(f"no finished runs in {config['runs']} (fix: run the commands in {RESULTS}/README.md first)")
    names = list(dict.fromkeys(r["name"] for r in rows))
    if config["reference"] not in names:   # a StopIteration after the figures were replaced (a hunt)
        raise UserError(f"--reference={config['reference']} is none of the models in {config['runs']}: "
                        f"{', '.join(names)} (fix: --reference=<one of them>)")
    plot_dir = config["plot_dir"]
    os.makedirs(plot_dir, exist_ok=True)
    budget, cheapest = add_equal_compute(rows, [[(e["iter"], e["val_loss"]) for e in r["log"]["eval"]] for r in rows])
    logs = {}
    for r in rows:
        logs.setdefault(r["name"], []).append(r["log"])
    plot_loss_curves(logs, os.path.join(plot_dir, "loss_curves.png"), title="paper 000 ladder, char-level Shakespeare (CPU)")
    plot_loss_vs_compute(logs, {r["name"]: r["flops_per_iter"] for r in rows}, os.path.join(plot_dir, "loss_vs_compute.png"),
                         budget=budget)
    # each model's run of the lowest seed (seed 1 only: runs of other seeds drew no alphas.png; a hunt)
    lowest = {}
    for r in rows:
        if r["alphas"] and (r["name"] not in lowest or r["seed"] < lowest[r["name"]]["seed"]):
            lowest[r["name"]] = r
    plot_alphas({f"{r['name']} (seed {r['seed']})": r["alphas"] for r in lowest.values()},
                os.path.join(plot_dir, "alphas.png"))
    print(f"equal compute: {budget:.3g} training FLOPs, the full run of {cheapest['name']} (seed {cheapest['seed']})\n")
    print(table(summary(rows), budget, config["reference"]))
    print()
    print(alpha_table(rows))


if __name__ == "__main__":
    main()
