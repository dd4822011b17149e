# Ablation set 4d (issue 15): paper 003's batch-size / learning-rate rule lr = (bs / bs_0)^r * lr_0 (results/README.md
# "PanGu-π Pro", (d)) with 3 seeds. The small char model, every run 1600 x 12 x 64 = 1.23M training tokens:
# batch 12 with lr_0 = 1e-3 for 1600 iterations, and batch 48 for 400 iterations with r = 0 (1e-3), 0.5 (the
# paper, 2e-3) and 1 (linear, 4e-3). Warmup 10% and min_lr = lr / 10 in every run. Equal tokens and equal
# FLOPs: the two compute views agree here.
#   python -m tools.compare config/ablation_pangu_lr.py
# Evaluation: 80 batches of 12 windows for batch 12, 20 batches of 48 for batch 48 (train.py evaluates with
# the training batch size), so every model is scored on 960 windows (different ones: a small extra noise).
# Time measured: 14 min, with 2-4 other jobs on the 2 cores.
from tools.pangu.scaled_lr import scaled_lr


def _bs48(r):
    lr = scaled_lr(48, 12, 1e-3, r)
    return dict(variant="gpt", batch_size=48, learning_rate=lr, min_lr=lr / 10, max_iters=400, lr_decay_iters=400,
                warmup_iters=40, eval_interval=25, eval_iters=20)


variants = ["bs12", "bs48_r0", "bs48_r0.5", "bs48_r1"]
custom_variants = {
    "bs12": dict(variant="gpt", max_iters=1600, lr_decay_iters=1600, warmup_iters=160, eval_iters=80),
    "bs48_r0": _bs48(0.0),
    "bs48_r0.5": _bs48(0.5),
    "bs48_r1": _bs48(1.0),
}
seeds = 3
compare_dir = "out-ablation-pangu-lr"
prompts = []
bench_iters = 0

dataset = "shakespeare_char"
eval_interval = 100
eval_iters = 20
log_interval = 50

# config/pangu_char_cpu.py's small char model: 3 layers, width 64, 2 heads of 32 (0.16M parameters)
n_layer = 3
n_head = 2
n_embd = 64
block_size = 64
dropout = 0.0

batch_size = 12
learning_rate = 1e-3
max_iters = 1000
lr_decay_iters = 1000
min_lr = 1e-4
warmup_iters = 100
beta2 = 0.99

device = "cpu"
dtype = "float32"
compile = False
num_threads = 1
