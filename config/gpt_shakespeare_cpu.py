# Character-level Shakespeare on a laptop CPU: nanoGPT's CPU recipe (~0.8M parameters, 4 layers).
# Val loss 1.88 after 2000 iterations; 1-2 minutes on an idle 2-core VM (33-57 ms/iter, see results/README.md).
#   python train.py config/gpt_shakespeare_cpu.py
#   python train.py config/gpt_shakespeare_cpu.py --num_threads=1   # when other jobs share the cores (2 busy threads thrash)
#   python sample.py --start "War is "        (reads the newest out*/ folder's ckpt.pt: this one, right after)

out_dir = "out"       # sample.py without --out_dir reads the newest out*/ folder: this one, after this run
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
