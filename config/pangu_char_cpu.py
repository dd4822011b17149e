# Paper 003 (PanGu-π Pro) experiments, the small char-level model: 3 layers, width 64, 2 heads of 32
# (0.16M parameters), context 64, batch 12. Used by the inheritance, multi-round and lr-rule runs
# (commands and results: results/README.md, "PanGu-π Pro"). ~30-60 ms/iter on one CPU thread, 1000 iterations.
#   python train.py config/pangu_char_cpu.py --out_dir=out-pangu-random
out_dir = "out-pangu-char"
eval_interval = 100
eval_iters = 20
log_interval = 50

dataset = "shakespeare_char"
batch_size = 12
block_size = 64

n_layer = 3
n_head = 2
n_embd = 64
dropout = 0.0

learning_rate = 1e-3
max_iters = 1000
lr_decay_iters = 1000
min_lr = 1e-4
beta2 = 0.99
warmup_iters = 100

device = "cpu"
compile = False
num_threads = 1
