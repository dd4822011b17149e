"""
Paper 003 (PanGu-pi Pro), 4.1: the learning rate for a new batch size, for use in config files:

    from tools.pangu.scaled_lr import scaled_lr
    batch_size = 48
    learning_rate = scaled_lr(batch_size, 12, 1e-3)   # 2e-3

(config files run before command-line overrides: a --batch_size on the command line does not re-scale
the learning rate.) Used by config/pangu_lr_bs48_cpu.py.
"""


def scaled_lr(batch_size, base_batch_size, base_lr, r=0.5):
    """Learning rate for a new batch size (paper 003, PanGu-pi Pro, 4.1):

        lr = (bs / bs_0)^r * lr_0

    r is the increment rate: 0.5 (square-root scaling) or 1.0 (linear scaling). The paper (Fig. 7/8,
    bs_0 = 1M tokens, lr_0 = 1e-4) finds every r converges alike below ~4M-token batches, and the
    moderate r = 0.5 is preferable for larger ones; batches >= 16M tokens slow convergence anyway.
    Give bs and bs_0 in the same unit (tokens or sequences)."""
    if batch_size <= 0 or base_batch_size <= 0 or base_lr <= 0:
        raise ValueError(f"scaled_lr needs positive batch sizes and base_lr, got batch_size={batch_size}, "
                         f"base_batch_size={base_batch_size}, base_lr={base_lr}")
    return (batch_size / base_batch_size) ** r * base_lr


if __name__ == "__main__":   # run as a command, it would do nothing
    raise SystemExit("error: tools.pangu.scaled_lr is a library, not a command (fix: the commands are in docs/reference.md)")
