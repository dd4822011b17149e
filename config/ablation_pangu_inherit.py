# Ablation set 4b (issue 15): paper 003's parameter inheritance (results/README.md "PanGu-π Pro", (b)) with 3 seeds. One
# source model (config/pangu_big_cpu.py: 6 layers, width 128, 1500 iterations, seed 1337) is cut to the small
# model (3 layers, width 64) by four criteria; each inherited start and a random start then train 1000
# iterations with 3 seeds. The spread covers the small runs' training (batches, and the random model's init),
# not the source model. Run the steps first (from the repository root, OMP_NUM_THREADS=1):
#   python train.py config/pangu_char_cpu.py config/pangu_big_cpu.py --out_dir=out-ablation-pangu-src
#   python -m tools.pangu.inherit --init_from=out-ablation-pangu-src --out_dir=out-ablation-pangu-src/inh-first_last-l1 --n_layer=3 --n_embd=64 --layers=first_last --neurons=l1 --calib_batches=16 --num_threads=1
#   python -m tools.pangu.inherit --init_from=out-ablation-pangu-src --out_dir=out-ablation-pangu-src/inh-first_last-l2 --n_layer=3 --n_embd=64 --layers=first_last --neurons=l2 --calib_batches=16 --num_threads=1
#   python -m tools.pangu.inherit --init_from=out-ablation-pangu-src --out_dir=out-ablation-pangu-src/inh-first_last-taylor --n_layer=3 --n_embd=64 --layers=first_last --neurons=taylor --calib_batches=16 --num_threads=1
#   python -m tools.pangu.inherit --init_from=out-ablation-pangu-src --out_dir=out-ablation-pangu-src/inh-loss-taylor --n_layer=3 --n_embd=64 --layers=loss --neurons=taylor --calib_batches=16 --num_threads=1
#   python -m tools.compare config/ablation_pangu_inherit.py
# The question: do the four criteria differ beyond the noise (the README's single runs ended within 0.005)?
# The source's 1500 iterations are not in the compute columns (they count the small runs only).
# Time measured: 14 min, the source's 4.5 included, with 2-4 other jobs on the 2 cores.

variants = ["random", "inh_first_last_l1", "inh_first_last_l2", "inh_first_last_taylor", "inh_loss_taylor"]
_src = "out-ablation-pangu-src"
custom_variants = {
    "random": dict(variant="gpt"),
    "inh_first_last_l1": dict(variant="gpt", init_from=f"{_src}/inh-first_last-l1/ckpt.pt"),
    "inh_first_last_l2": dict(variant="gpt", init_from=f"{_src}/inh-first_last-l2/ckpt.pt"),
    "inh_first_last_taylor": dict(variant="gpt", init_from=f"{_src}/inh-first_last-taylor/ckpt.pt"),
    "inh_loss_taylor": dict(variant="gpt", init_from=f"{_src}/inh-loss-taylor/ckpt.pt"),
}
seeds = 3
compare_dir = "out-ablation-pangu-inherit"
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
