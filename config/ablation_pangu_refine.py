# Ablation set 4c (issue 15): paper 003's multiple-round training with data refining (results/README.md "PanGu-π Pro",
# (c)) with 3 seeds. Every schedule spends 2000 iterations of 12 x 64 tokens: one round of 2000, or round 1
# (1000, seed 1337, shared by all round-2 runs) + a fresh 1000-iteration round 2 on all data or on the refined
# 50% (tau = 1, the paper; tau = 0.1). Run the steps first (repository root, OMP_NUM_THREADS=1):
#   python train.py config/pangu_char_cpu.py --out_dir=out-ablation-pangu-r1
#   cp -r out-ablation-pangu-r1 out-ablation-pangu-r1-t01
#   python -m tools.pangu.refine --out_dir=out-ablation-pangu-r1 --rate=0.5 --num_threads=1 --batch_size=128
#   python -m tools.pangu.refine --out_dir=out-ablation-pangu-r1-t01 --rate=0.5 --temperature=0.1 --num_threads=1 --batch_size=128
#   python -m tools.compare config/ablation_pangu_refine.py
# The compute columns count what tools.compare trained: round 1 (1000 iterations) is not in them, so the
# round-2 rows look half as costly. All four schedules cost the same; read the best val loss column.
# The spread covers the round-2 runs (and the single-round runs), not round 1.
# Time measured: 15 min, round 1 and refining included, with 2-4 other jobs on the 2 cores.

variants = ["single_round", "r2_all", "r2_refined_t1", "r2_refined_t01"]
custom_variants = {
    "single_round": dict(variant="gpt", max_iters=2000, lr_decay_iters=2000, warmup_iters=200),
    "r2_all": dict(variant="gpt", init_from="out-ablation-pangu-r1/ckpt.pt"),
    "r2_refined_t1": dict(variant="gpt", init_from="out-ablation-pangu-r1/ckpt.pt",
                          data_segments="out-ablation-pangu-r1/refine.npy"),
    "r2_refined_t01": dict(variant="gpt", init_from="out-ablation-pangu-r1-t01/ckpt.pt",
                           data_segments="out-ablation-pangu-r1-t01/refine.npy"),
}
seeds = 3
compare_dir = "out-ablation-pangu-refine"
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
