# Ablation set 1 (issue 15): paper 004's Table 1 / Figure 6 at the CPU size, 3 seeds: gpt, pgpt (both
# branches; its "weaker branch dropped" column is the heavier branch alone), lgpt, cgpt with kernel 1
# (the paper's, which is lgpt's function) and cgpt with kernel 3 (a real causal convolution). Every model
# 6 layers, width 128, 4 heads, context 64 (config/compare_shakespeare_cpu.py's sizes and recipe), char-level
# Shakespeare. The tables give equal iterations (best val loss) and equal compute (lgpt's full run).
#   python -m tools.compare config/ablation_004.py
#   python -m tools.compare config/ablation_004.py --dry_run=True      # the plan: sizes, FLOPs, what is done
# Time measured: 73 min, with 2-4 other jobs on the 2 cores. Re-running the command resumes after a kill.

variants = ["gpt", "pgpt", "lgpt", "cgpt", "cgpt_k3"]
custom_variants = {"cgpt_k3": dict(variant="cgpt", shrink_kernel=3)}
seeds = 3                     # 1337, 1338, 1339
compare_dir = "out-ablation-004"
prompts = ["War is "]
sample_tokens = 200
bench_iters = 0               # ms/iter from the training loop: no extra timed steps

dataset = "shakespeare_char"
eval_interval = 100           # lgpt's budget is gpt's iteration ~680: 6 evaluations before it
eval_iters = 20
log_interval = 50

n_layer = 6
n_head = 4
n_embd = 128
block_size = 64
dropout = 0.0

batch_size = 12
learning_rate = 1e-3
max_iters = 1500
lr_decay_iters = 1500
min_lr = 1e-4
warmup_iters = 100
weight_decay = 1e-2           # paper 004
beta1 = 0.9
beta2 = 0.99

device = "cpu"
dtype = "float32"
compile = False
num_threads = 1               # 1 thread: faster when other jobs share the cores
