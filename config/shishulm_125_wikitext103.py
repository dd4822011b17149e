# WikiText-103 (GPT-2 BPE) on one GPU: paper 001 ShishuLM-125: MobileLLM-125M with attention only in the first 10 layers and 10 shared
# pairs of MLP-only layers after, N(0, 0.02) init (variants/shishulm_125.py).
# Recipe: paper 001 Appendix E (the paper's WikiText-103 ablations, Tables 9-10), with the same differences as
# config/mobilellm_125m_wikitext103.py (GPT-2 BPE tokenizer, ~5,360 steps for 3 epochs, min_lr 0, grad_clip 1.0: see there).
# Table 10's placements ("n + m": n attention layers at the bottom, m at the top, 10 in all), e.g. 8 + 2:
#   python train.py config/shishulm_125_wikitext103.py --n_attn_layers=8 --n_top_attn_layers=2 --share_from_layer=8 --out_dir=out-shishulm-8+2
# Table 9's budgets ("n + m": n decoder layers, then m MLP-only layers; 30 in all): --n_attn_layers=n --share_from_layer=n.
# Paired sharing needs an even m; Table 9 does not say whether its MLP-only layers are shared (25 + 5 has m = 5):
# --share_group_size=1 leaves them unshared.
#   python -m tools.wikitext103 && python train.py config/shishulm_125_wikitext103.py
#   torchrun --standalone --nproc_per_node=4 train.py config/shishulm_125_wikitext103.py   # same global batch on 4 GPUs
#   python -m tools.eval --out_dir=out-shishulm_125-wikitext103 --splits=val,test
# Expected on one H100 (an ESTIMATE, not a measurement: the session that wrote this had no GPU):
# 90.9M parameters, flops_per_token(model) = 0.78 GFLOP per training token, 0.35B tokens
# -> ~10 min at the 45% MFU target. Peak memory not measured; if it does not fit, lower batch_size
# and raise gradient_accumulation_steps (same tokens per iteration).

out_dir = "out-shishulm_125-wikitext103"
variant = "shishulm_125"

dataset = "wikitext103"      # python -m tools.wikitext103 (GPT-2 BPE; run once, ~10 min on 16 cores)
block_size = 1024
batch_size = 16
gradient_accumulation_steps = 4   # 16 x 4 = 64 sequences x 1024 = 65,536 tokens per step (Appendix E; divided over DDP ranks)
max_iters = 5360                  # 3 epochs (Appendix E) of WikiText-103's ~117M training tokens
lr_decay_iters = 5360
warmup_iters = 268                # warmup ratio 0.05
learning_rate = 0.001
min_lr = 0.0
weight_decay = 0.05
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
