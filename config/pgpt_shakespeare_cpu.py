# CPU twin of config/pgpt_shakespeare.py: a laptop-sized pgpt with 4 layers and 4 heads
# (two parallel 2-block decoders of width 128 on a 256-wide embedding),
# context 64, batch 12, 2000 steps, no dropout.
# Sizes and optimizer settings are those of config/gpt_shakespeare_cpu.py, so the four CPU runs compare
# like for like. Not paper 004's lr 3e-4 -> 3e-5: in only 2000 small steps it underfits (gpt: val loss
# 2.08 instead of 1.88 with lr 1e-3).
#   python train.py config/pgpt_shakespeare_cpu.py
#   python sample.py --out_dir=out-pgpt-shakespeare-cpu --start "War is "

variant = "pgpt"
out_dir = "out-pgpt-shakespeare-cpu"
eval_interval = 250
eval_iters = 20       # fewer eval batches: evaluation is slow on a CPU
log_interval = 10
always_save_checkpoint = False

dataset = "shakespeare_char"
gradient_accumulation_steps = 1
batch_size = 12
block_size = 64

n_layer = 4
n_head = 4
n_embd = 128
dropout = 0.0

learning_rate = 1e-3
max_iters = 2000
lr_decay_iters = 2000
min_lr = 1e-4
beta2 = 0.99
warmup_iters = 100

device = "cpu"
compile = False
