# Paper 004's comparison (Table 1, Figure 6, samples) with the paper's sizes and recipe, one GPU:
# gpt (10.8M), pgpt (10.9M), lgpt and cgpt (4.9M): 6 layers, width 384, 6 heads, context 256 (the sizes
# come from variants/<name>.py, so no model keys here), char-level Shakespeare (65 tokens).
# Recipe (paper 004 5.1.2): batch 64, dropout 0.2, AdamW beta 0.9/0.95, weight decay 1e-2, lr warmup to
# 3e-4 over 500 steps then cosine decay to 3e-5 at step 5000, evaluation every 200 steps.
# Time: roughly 3-6 minutes per model on an H100 (about 20 minutes for all four): an ESTIMATE, never run.
#   python -m tools.compare config/compare_shakespeare.py
# Re-running the same command skips finished models and resumes an interrupted one.

variants = ["gpt", "pgpt", "lgpt", "cgpt"]
compare_dir = "out-compare-shakespeare"
prompts = ["Oh God, ", "Her affability ", "War is "]
sample_temperature = 0.3
sample_tokens = 300
samples_per_prompt = 1
bench_iters = 50

dataset = "shakespeare_char"
eval_interval = 200
eval_iters = 200
log_interval = 50

batch_size = 64
gradient_accumulation_steps = 1
dropout = 0.2

learning_rate = 3e-4
max_iters = 5000
lr_decay_iters = 5000
min_lr = 3e-5
warmup_iters = 500
weight_decay = 1e-2
beta1 = 0.9
beta2 = 0.95

device = "auto"
dtype = "auto"
compile = True
