# Paper 004's comparison (Table 1, Figure 6, samples) of gpt, pgpt, lgpt and cgpt, CPU-sized:
# every model gets the same small size below (each keeps its technique: pgpt's two parallel 3-block
# decoders, lgpt/cgpt's width halving after every 2 blocks: 128 -> 64 -> 32), char-level Shakespeare.
# About 15-20 minutes for all four on 2 idle CPU cores (the run prints an overall ETA).
#   python -m tools.compare config/compare_shakespeare_cpu.py
#   python -m tools.compare config/compare_shakespeare_cpu.py --variants=gpt,lgpt --max_iters=500
# Re-running the same command skips finished models and resumes an interrupted one.

variants = ["gpt", "pgpt", "lgpt", "cgpt"]
compare_dir = "out-compare-shakespeare-cpu"
prompts = ["Oh God, ", "Her affability ", "War is "]   # paper 004's prompts
sample_temperature = 0.3
sample_tokens = 300
samples_per_prompt = 1
bench_iters = 20

dataset = "shakespeare_char"
eval_interval = 100
eval_iters = 20        # fewer eval batches: evaluation is slow on a CPU
log_interval = 20

# sizes for all four models (the papers' are 6 layers, width 384, 6 heads, context 256)
n_layer = 6
n_head = 4
n_embd = 128
block_size = 64
dropout = 0.0

batch_size = 12
gradient_accumulation_steps = 1
# nanoGPT's CPU recipe rather than the paper's 3e-4: with 2000 steps a larger learning rate is needed
learning_rate = 1e-3
max_iters = 2000
lr_decay_iters = 2000
min_lr = 1e-4
warmup_iters = 100
weight_decay = 1e-2    # paper 004
beta1 = 0.9
beta2 = 0.99

device = "cpu"
dtype = "float32"
compile = False
