# Ablation set 2 (issue 15): paper 001's attention budget (its Table 9) at a CPU size, 3 seeds. A MobileLLM-
# style model (RMSNorm, RoPE, SwiGLU, GQA, tied embeddings, no biases) of 12 layers, width 96, 4 query / 2 kv
# heads, FFN 256 (MobileLLM's 8/3 ratio): 1.23M parameters with attention in every layer. Then attention only
# in the first 2/3, 1/2, 1/3 and 1/6 of the layers, the MLP-only layers after it shared in pairs as ShishuLM
# (section 4.4): 0.97M, 0.84M, 0.71M, 0.58M parameters. Char-level Shakespeare. Does "up to 2/3 of attention
# can go" hold here? Read the best val loss and its "vs attn_all" column.
#   python -m tools.compare config/ablation_001_attention.py
#   python -m tools.compare config/ablation_001_attention.py --dry_run=True
# Time measured: 78 min for the first 5 models, 21 min for the two Table 10 splits, with 2-4 other jobs on the 2 cores.
#
# Table 10 (where the 1/3 budget goes): 4 attention layers as n at the bottom + m at the top, the MLP-only layers
# between them shared in pairs: attn_1_3 is 4 + 0, attn_1_3_top1 is 3 + 1, attn_1_3_top2 is 2 + 2.

variants = ["attn_all", "attn_2_3", "attn_1_2", "attn_1_3", "attn_1_6", "attn_1_3_top1", "attn_1_3_top2"]
custom_variants = {
    "attn_all": dict(variant="mobilellm_125m"),
    # shishulm_125: attention in the first n_attn_layers, then MLP-only layers shared in pairs
    "attn_2_3": dict(variant="shishulm_125", n_attn_layers=8, share_from_layer=8),
    "attn_1_2": dict(variant="shishulm_125", n_attn_layers=6, share_from_layer=6),
    "attn_1_3": dict(variant="shishulm_125", n_attn_layers=4, share_from_layer=4),
    "attn_1_6": dict(variant="shishulm_125", n_attn_layers=2, share_from_layer=2),
    "attn_1_3_top1": dict(variant="shishulm_125", n_attn_layers=3, n_top_attn_layers=1, share_from_layer=3),
    "attn_1_3_top2": dict(variant="shishulm_125", n_attn_layers=2, n_top_attn_layers=2, share_from_layer=2),
}
seeds = 3
compare_dir = "out-ablation-001-attention"
prompts = ["War is "]
sample_tokens = 200
bench_iters = 0

dataset = "shakespeare_char"
eval_interval = 100
eval_iters = 20
log_interval = 50

# the CPU size for every model (the presets keep their technique flags: norm, RoPE, SwiGLU, tying, ...)
n_layer = 12
n_embd = 96
n_head = 4
n_kv_head = 2
mlp_hidden = 256
block_size = 64
dropout = 0.0

batch_size = 12
learning_rate = 1e-3
max_iters = 1200
lr_decay_iters = 1200
min_lr = 1e-4
warmup_iters = 100
weight_decay = 0.1
beta1 = 0.9
beta2 = 0.99

device = "cpu"
dtype = "float32"
compile = False
num_threads = 1
