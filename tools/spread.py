"""
Comparisons with several seeds and at equal compute, from the eval curves train.py logs (log.csv):
mean and sample standard deviation over seeds, the val loss every run had reached at the compute of the
cheapest run (linear between evaluations), and whether two rows differ beyond their spread.
Used by compare.py and results scripts.
"""

import math
import statistics

NOISE_T = 2.0   # noise_verdict: |Welch's t| above this is a difference


def val_loss_at(curve, it):
    """The val loss an eval curve [(iteration, val loss)] had reached at iteration `it` (fractional),
    linearly interpolated between the two evaluations around it. The evaluation at iteration 0 (the
    untrained model) is not used: None when `it` comes before the first evaluation after it, or after
    the last one."""
    points = sorted({i: v for i, v in curve if i > 0 and v is not None}.items())
    if not points or it < points[0][0] or it > points[-1][0] * (1 + 1e-9):
        return None
    for (i0, v0), (i1, v1) in zip(points, points[1:]):
        if it <= i1:
            return v0 + (v1 - v0) * (it - i0) / (i1 - i0)
    return points[-1][1]


def add_equal_compute(rows, curves):
    """The compute budget is the cheapest run's training FLOPs; every run row gets the iteration at which
    it had spent that budget and its val loss there (val_loss_at its eval curve). Returns the budget
    and the cheapest run's row."""
    cheapest = min(rows, key=lambda r: r["train_flops"])
    budget = cheapest["train_flops"]
    for r, curve in zip(rows, curves):
        r["equal_compute_iter"] = budget / r["flops_per_iter"]
        r["val_loss_equal_compute"] = val_loss_at(curve, r["equal_compute_iter"])
    return budget, cheapest


def mean_std(values):
    """(mean, sample standard deviation, n-1 in the denominator); both None if a value is missing, the
    std None for a single value."""
    if not values or any(v is None for v in values):
        return None, None
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else None)


def noise_verdict(a, b, key):
    """Whether row b's mean of `key` (a loss: lower is better) differs from row a's beyond the spread over
    seeds: Welch's statistic t = (mean_b - mean_a) / sqrt(std_a^2 / n_a + std_b^2 / n_b). |t| > NOISE_T (2)
    gives ("better" or "worse", mean_b - mean_a), otherwise ("within noise", mean_b - mean_a). None when a
    row has no spread (fewer than 2 seeds) or no value."""
    ma, mb, sa, sb = a.get(key), b.get(key), a.get(key + "_std"), b.get(key + "_std")
    na, nb = a.get("n_seeds", 1), b.get("n_seeds", 1)
    if None in (ma, mb, sa, sb) or min(na, nb) < 2:
        return None
    diff = mb - ma
    if abs(diff) <= NOISE_T * math.sqrt(sa ** 2 / na + sb ** 2 / nb):
        return "within noise", diff
    return ("better" if diff < 0 else "worse"), diff


if __name__ == "__main__":   # run as a command, it would do nothing
    raise SystemExit("error: tools.spread is a library, not a command (fix: the commands are in docs/reference.md)")
