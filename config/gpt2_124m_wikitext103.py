# WikiText-103 (GPT-2 BPE) on one GPU: GPT-2 124M reference (12 x 768, 12 heads, learned positions, tied, GELU MLP).
#   python -m tools.wikitext103 && python train.py config/gpt2_124m_wikitext103.py
#   torchrun --standalone --nproc_per_node=4 train.py config/gpt2_124m_wikitext103.py   # same global batch on 4 GPUs
#   python -m tools.eval --out_dir=out-gpt2_124m-wikitext103 --splits=val,test
# Expected on one H100 (an ESTIMATE, not a measurement: the session that wrote this had no GPU):
# 124.5M parameters, flops_per_token(model) = 0.85 GFLOP per training token, 0.52B tokens
# -> ~17 min at the 45% MFU target. Peak memory not measured; if it does not fit, lower batch_size
# and raise gradient_accumulation_steps (same tokens per iteration).

out_dir = "out-gpt2_124m-wikitext103"
n_layer = 12
n_head = 12
n_embd = 768
bias = True
vocab_size = 50304   # GPT-2's 50257 padded to a multiple of 64: faster matmuls, unused rows never scored

dataset = "wikitext103"      # python -m tools.wikitext103 (GPT-2 BPE; run once, ~10 min on 16 cores)
block_size = 1024
batch_size = 32
gradient_accumulation_steps = 4   # 32 x 4 x 1024 = 131,072 tokens per iteration (divided over DDP ranks)
max_iters = 4000                  # 0.52B tokens, ~4.5 epochs of WikiText-103's ~117M training tokens
lr_decay_iters = 4000
warmup_iters = 200
learning_rate = 0.0006
min_lr = 5.9999999999999995e-05
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
