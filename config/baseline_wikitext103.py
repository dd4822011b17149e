# WikiText-103 (GPT-2 BPE) on one GPU: paper 000 Baseline (Table 1: 134.0M; ours 133,969,489): 12 x 768, ReLU FFN 1536,
# post-LayerNorm, biases, sinusoidal positions, untied head with bias (variants/baseline.py says where each comes from).
# Paper 000 sec. 3.1: lr 2e-3, weight decay 0.1 (Adam), batch 4 sequences on a TitanXP; we keep lr/wd and use a GPU batch.
#   python -m tools.wikitext103 && python train.py config/baseline_wikitext103.py
#   torchrun --standalone --nproc_per_node=4 train.py config/baseline_wikitext103.py   # same global batch on 4 GPUs
#   python -m tools.eval --out_dir=out-baseline-wikitext103 --splits=val,test
# Expected on one H100 (an ESTIMATE, not a measurement: the session that wrote this had no GPU):
# 134.0M parameters, flops_per_token(model) = 0.68 GFLOP per training token, 0.52B tokens
# -> ~13 min at the 45% MFU target. Peak memory not measured; if it does not fit, lower batch_size
# and raise gradient_accumulation_steps (same tokens per iteration).

out_dir = "out-baseline-wikitext103"
variant = "baseline"

dataset = "wikitext103"      # python -m tools.wikitext103 (GPT-2 BPE; run once, ~10 min on 16 cores)
block_size = 1024             # our choice (the authors' code uses 128; sinusoids have no parameters)
batch_size = 32
gradient_accumulation_steps = 4   # 32 x 4 x 1024 = 131,072 tokens per iteration (divided over DDP ranks)
max_iters = 4000                  # 0.52B tokens, ~4.5 epochs of WikiText-103's ~117M training tokens
lr_decay_iters = 4000
warmup_iters = 200
learning_rate = 0.002
min_lr = 0.0002
weight_decay = 0.1
beta1 = 0.9
beta2 = 0.95
grad_clip = 1.0
dropout = 0.0
eval_interval = 500
eval_iters = 100
log_interval = 10
device = "cuda"
dtype = "bfloat16"
compile = True
