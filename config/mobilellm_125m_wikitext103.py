# WikiText-103 (GPT-2 BPE) on one GPU: paper 001 parent model MobileLLM-125M (30 x 576, SwiGLU 1536, GQA 9/3, RMSNorm, RoPE, tied); vocab_size
# comes from the dataset (GPT-2 BPE, 50257) instead of MobileLLM's 32000, so it has 135.2M parameters here (124.6M with 32000).
# Paper 001 sec. 5: AdamW betas 0.9/0.999, warmup 5% of the steps, weight decay 5e-3, lr 1e-3 cosine, dropout 0.
#   python prepare.py wikitext103 && python train.py config/mobilellm_125m_wikitext103.py
#   torchrun --standalone --nproc_per_node=8 train.py config/mobilellm_125m_wikitext103.py   # same global batch on 8 GPUs
#   python eval.py --out_dir=out-mobilellm_125m-wikitext103 --splits=val,test
# Expected on one H100 (an ESTIMATE, not a measurement: the session that wrote this had no GPU):
# 135.2M parameters, model.flops_per_token() = 1.02 GFLOP per training token, 0.52B tokens
# -> ~20 min at the 45% MFU target. Peak memory not measured; if it does not fit, lower batch_size
# and raise gradient_accumulation_steps (same tokens per iteration).

out_dir = "out-mobilellm_125m-wikitext103"
variant = "mobilellm_125m"

dataset = "wikitext103"      # python prepare.py wikitext103 (GPT-2 BPE; run once, ~10 min on 16 cores)
block_size = 1024
batch_size = 16
gradient_accumulation_steps = 8   # 16 x 8 x 1024 = 131,072 tokens per iteration (divided over DDP ranks)
max_iters = 4000                  # 0.52B tokens, ~4.5 epochs of WikiText-103's ~117M training tokens
lr_decay_iters = 4000
warmup_iters = 200
learning_rate = 0.001
min_lr = 0.0001
weight_decay = 0.005
beta1 = 0.9
beta2 = 0.999
grad_clip = 1.0
dropout = 0.0
eval_interval = 500
eval_iters = 100
log_interval = 10
device = "cuda"
dtype = "bfloat16"
compile = True
