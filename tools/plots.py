"""
Plots drawn from the files train.py writes (out_dir/log.csv, read by read_log) and from
trained models: the comparison figures of tools/compare.py (train.py draws each run's loss.png itself).

    plot_loss_curves({name: log}, path)       paper 004 Figure 6: train and val loss of every model
                                              ({name: [log per seed]}: faint seeds and their mean)
    plot_loss_vs_compute({name: log}, {name: FLOPs per iteration}, path)   val loss against training FLOPs
    plot_branch_weights({name: log}, path)    pgpt: branch combination weights over training
    plot_alphas({name: [(a1, a2), ...]}, path) paper 000 Figure 7: enhanced-residual alphas per layer
                                              (residual_alphas(model) reads them from a model)

Every function writes a PNG atomically and returns its path (None when there is nothing to draw).
"""

import os

import torch

from safety_net.fileio import atomic_open
from safety_net.run_log import read_rows


def _float(text):
    return None if text in (None, "") else float(text)


def read_log(out_dir):
    """Rows of out_dir/log.csv: per-iteration train losses and the eval rows (iter, loss = train
    loss at eval, val_loss, val_loss_heaviest or None, elapsed_s, branch_weights list or None)."""
    log = {"train": [], "eval": []}
    for row in read_rows(os.path.join(out_dir, "log.csv")):
        it = int(row["iter"])
        if row.get("kind") == "train" and row.get("loss"):
            log["train"].append((it, float(row["loss"])))
        elif row.get("kind") == "eval":
            weights = row.get("branch_weights") or ""
            log["eval"].append(dict(iter=it, loss=_float(row.get("loss")), val_loss=_float(row.get("val_loss")),
                                    val_loss_heaviest=_float(row.get("val_loss_heaviest")),
                                    elapsed_s=_float(row.get("elapsed_s")),
                                    branch_weights=[float(w) for w in weights.split()] or None))
    return log


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")   # files only; works without a display
    import matplotlib.pyplot as plt
    return plt


def _save(fig, path, plt):
    fig.tight_layout()
    with atomic_open(path, "wb") as f:
        fig.savefig(f, format="png", dpi=110)
    plt.close(fig)
    return path


MARKERS = "osD^v<>ph*"
LINESTYLES = ["-", "--", "-.", (0, (1, 1.5))]


def _styles(names):
    """Colour, marker and line style per model, fixed by its position so a model looks the same in
    every figure. Different dash patterns keep identical curves visible (lgpt and cgpt with kernel 1
    learn the same function: the dashes show both colours)."""
    return {name: dict(color=f"C{i % 10}", marker=MARKERS[i % len(MARKERS)], markersize=4, linewidth=1.8,
                       linestyle=LINESTYLES[i % len(LINESTYLES)]) for i, name in enumerate(names)}


def _seed_logs(log):
    """A model's logs: one log, or a list of logs (one per seed)."""
    return log if isinstance(log, list) else [log]


def _mean_curve(evals, key):
    """(iterations, mean of `key`) over the seeds' eval rows, at the iterations every seed evaluated."""
    by_seed = [{r["iter"]: r[key] for r in ev if r.get(key) is not None} for ev in evals]
    common = sorted(set.intersection(*(set(d) for d in by_seed))) if by_seed else []
    return common, [sum(d[i] for d in by_seed) / len(by_seed) for i in common]


def _plot_seeds(ax, evals, key, xscale, label, style):
    """One model on one panel: a single run as one line; several seeds as a faint line per seed and
    their mean as the full line."""
    if len(evals) > 1:
        for ev in evals:
            pts = [(r["iter"] * xscale, r[key]) for r in ev if r.get(key) is not None]
            if pts:
                ax.plot(*zip(*pts), color=style["color"], linewidth=0.7, alpha=0.3)
        label = f"{label} (mean of {len(evals)} seeds)"
    its, values = _mean_curve(evals, key)
    if its:
        ax.plot([i * xscale for i in its], values, label=label, **style)


def plot_loss_curves(logs, path, title="Loss comparison"):
    """Two panels, one line per model: loss on the training split and on the validation split, both
    measured at the evaluations (the same fixed batches every time). pgpt's val loss with only its
    heaviest branch is a thin dotted line with x markers. logs: {name: log} or {name: [log per seed]};
    with several seeds each seed is a faint line and the mean the full one."""
    if not any(log["eval"] for logs_ in logs.values() for log in _seed_logs(logs_)):
        return None
    plt = _pyplot()
    styles = _styles(list(logs))
    fig, (ax_t, ax_v) = plt.subplots(1, 2, figsize=(12, 4.8), sharey=True)
    for name, log in logs.items():
        evals = [ev for ev in ([r for r in lg["eval"] if r["val_loss"] is not None] for lg in _seed_logs(log)) if ev]
        if not evals:
            continue
        _plot_seeds(ax_t, evals, "loss", 1, name, styles[name])
        _plot_seeds(ax_v, evals, "val_loss", 1, name, styles[name])
        its, heavy = _mean_curve(evals, "val_loss_heaviest")
        if heavy:
            ax_v.plot(its, heavy, color=styles[name]["color"], linewidth=1.0, alpha=0.7, marker="x",
                      markersize=4, linestyle=(0, (1, 1)), label=f"{name} (heaviest branch only)")
    for ax, split in ((ax_t, "train"), (ax_v, "val")):
        ax.set_title(f"{split} loss")
        ax.set_xlabel("iteration")
        ax.grid(alpha=0.3)
        ax.legend()
    ax_t.set_ylabel("cross-entropy loss")
    fig.suptitle(title)
    return _save(fig, path, plt)


def plot_loss_vs_compute(logs, flops_per_iter, path, budget=None, title="Val loss against training compute"):
    """Val loss at the evaluations against the training FLOPs spent so far (iteration x flops_per_iter[name]),
    one line per model (several seeds: faint per seed, the mean full). budget: a dotted vertical line, the
    cheapest model's full run, where compare.py reads the equal-compute losses."""
    if not any(log["eval"] for logs_ in logs.values() for log in _seed_logs(logs_)):
        return None
    plt = _pyplot()
    styles = _styles(list(logs))
    fig, ax = plt.subplots(figsize=(8, 5))
    for name, log in logs.items():
        # iteration 0 (no compute yet) has no place on the log axis
        evals = [ev for ev in ([r for r in lg["eval"] if r["val_loss"] is not None and r["iter"] > 0]
                               for lg in _seed_logs(log)) if ev]
        if evals:
            _plot_seeds(ax, evals, "val_loss", flops_per_iter[name], name, styles[name])
    if budget:
        ax.axvline(budget, color="gray", linewidth=1.0, linestyle=":", label="equal-compute budget")
    ax.set_xscale("log")
    ax.set_xlabel("training FLOPs (forward + backward), log scale")
    ax.set_ylabel("val loss")
    ax.set_title(title)
    ax.grid(alpha=0.3, which="both")
    ax.legend()
    return _save(fig, path, plt)


def plot_branch_weights(logs, path):
    """Weight of each pgpt branch at every evaluation (the softmax of the learned mixing logits)."""
    series = {name: [(r["iter"], r["branch_weights"]) for r in log["eval"] if r["branch_weights"]]
              for name, log in logs.items()}
    series = {k: v for k, v in series.items() if v}
    if not series:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    styles = ["-", "--", ":", "-."]
    for m, (name, points) in enumerate(series.items()):
        its = [p[0] for p in points]
        for b in range(len(points[0][1])):
            ax.plot(its, [p[1][b] for p in points], "o" + styles[b % len(styles)], color=f"C{m}", markersize=3,
                    label=f"{name}: branch {b} (decoder_{b + 1})")
    n = len(next(iter(series.values()))[0][1])
    ax.axhline(1 / n, color="gray", linewidth=0.8, linestyle=":")
    ax.set_xlabel("iteration")
    ax.set_ylabel("branch weight")
    ax.set_title("ParallelGPT branch weights during training")
    ax.grid(alpha=0.3)
    ax.legend()
    return _save(fig, path, plt)


def residual_alphas(model):
    """Enhanced-residual alphas per layer of the first branch, [(alpha_1 attention or None, alpha_2 FFN), ...]:
    alpha = sigmoid(w) of the ResidualSubLayers the layer applies (model.py section 4; paper 000, 2.7, Fig. 7)."""
    from tools.layers import layer_sets   # model.py's classes: only where a model is read
    stack = model.branches[0]

    def alpha(sub):
        return None if sub.alpha_logit is None else torch.sigmoid(sub.alpha_logit).item()
    return [(None if a is None else alpha(stack.attn[a]), alpha(stack.mlp[m]))
            for a, m, _ in layer_sets(stack)]


def plot_alphas(alphas, path):
    """alphas: {name: [(alpha_1 attention or None, alpha_2 FFN), ...]} per layer (unique block).
    One panel per model: alpha_1 and alpha_2 against the layer number, as paper 000 Figure 7."""
    alphas = {k: v for k, v in alphas.items() if v}
    if not alphas:
        return None
    plt = _pyplot()
    from matplotlib.ticker import MaxNLocator
    fig, axes = plt.subplots(1, len(alphas), figsize=(7 * len(alphas), 4.5), squeeze=False)
    for ax, (name, rows) in zip(axes[0], alphas.items()):
        layers = list(range(1, len(rows) + 1))
        attn = [(l, a) for l, (a, _) in zip(layers, rows) if a is not None]
        if attn:
            ax.plot(*zip(*attn), "o-", markersize=3, label="alpha_1 (attention)")
        ax.plot(layers, [m for _, m in rows], "s-", markersize=3, label="alpha_2 (FFN)")
        ax.axhline(0.5, color="gray", linewidth=0.8, linestyle=":")
        ax.set_xlabel("layer (a block shared by several layers counted once)")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel("alpha = sigmoid(w)")
        ax.set_title(f"{name}: enhanced-residual alphas")
        ax.grid(alpha=0.3)
        ax.legend()
    return _save(fig, path, plt)


if __name__ == "__main__":   # run as a command, it would do nothing
    raise SystemExit("error: tools.plots is a library, not a command (fix: the commands are in docs/reference.md)")
