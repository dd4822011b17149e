# LinearGPT (lgpt): a Linear layer halves the width after every two blocks (384, 192, 96).
# Paper 004's recipe (sections 5.1.1-5.1.2, Table 1): char-level Shakespeare (65 tokens), context 256,
# batch 64, dropout 0.2, AdamW (beta 0.9/0.95, weight decay 1e-2), lr warmup to 3e-4 over 500 steps then
# cosine decay to 3e-5 at step 5000, evaluation every 200 steps. Model sizes come from variants/lgpt.py.
#   python train.py config/lgpt_shakespeare.py
#   python sample.py --out_dir=out-lgpt-shakespeare --start "War is "

variant = "lgpt"
out_dir = "out-lgpt-shakespeare"
cpu_twin = "config/lgpt_shakespeare_cpu.py"   # named (with the time estimate) when run on a CPU
eval_interval = 200
eval_iters = 200
log_interval = 10

dataset = "shakespeare_char"
batch_size = 64
block_size = 256
dropout = 0.2

learning_rate = 3e-4
max_iters = 5000
lr_decay_iters = 5000
min_lr = 3e-5
warmup_iters = 500
weight_decay = 1e-2
beta1 = 0.9
beta2 = 0.95
