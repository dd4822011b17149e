# Ablation set 3 (issue 15): paper 002's (GPT-Efficio) sharing schemes and factorized embedding at a CPU
# size, 3 seeds. A GPT-2-style decoder (LayerNorm, GELU, biases, learned positions, tied embeddings) of
# 6 layers, width 96, 4 heads, context 64, on Shakespeare with a compact 4096-token BPE vocabulary
# (data/shakespeare_v4096: tools.compare prepares it on first use with tools.pangu.compact_vocab): with 65
# characters a factorized embedding would save nothing, with 4096 tokens the embedding is 37% of the model.
#   none          no sharing, no factorization                              1.07M parameters
#   all           one block for all 6 layers (ALBERT-style)                0.51M
#   groups2       2 groups of 3 layers, one block per group                0.62M
#   groups3       3 groups of 2 layers                                     0.74M
#   attn_shared   one attention for all layers, 6 FFNs                     0.88M
#   ffn_shared    one FFN for all layers, 6 attentions                     0.70M
#   embd_e32      factorized embedding E=32 (4096 -> 32 -> 96), no sharing 0.81M
#   embd_e64      factorized embedding E=64                                0.95M
#   none_2l       no sharing, 2 layers: the unique parameters of groups2 (0.62M), a third of the layers
# groups2 vs none_2l is the comparison at equal unique parameters (the same 2 blocks applied 3 times or
# once); the equal-compute column compares every model at none_2l's budget.
#   python -m tools.compare config/ablation_002_sharing.py
#   python -m tools.compare config/ablation_002_sharing.py --dry_run=True
# Time measured: 78 min with 2-3 other jobs on the 2 cores. flops_per_token(model) counts a factorized
# embedding's tied head as vocab x E + E x width (and the E -> width input projection); none_2l (a third of
# the layers) is the cheapest model and sets the equal-compute budget.

variants = ["none", "all", "groups2", "groups3", "attn_shared", "ffn_shared", "embd_e32", "embd_e64", "none_2l"]
custom_variants = {
    "none": dict(variant="efficio"),
    "all": dict(variant="efficio", share_group_size=6),
    "groups2": dict(variant="efficio", share_group_size=3),
    "groups3": dict(variant="efficio", share_group_size=2),
    "attn_shared": dict(variant="efficio", share_group_size=6, share_sublayers="attn"),
    "ffn_shared": dict(variant="efficio", share_group_size=6, share_sublayers="mlp"),
    "embd_e32": dict(variant="efficio", embd_factor_dim=32),
    "embd_e64": dict(variant="efficio", embd_factor_dim=64),
    "none_2l": dict(variant="efficio", n_layer=2),
}
seeds = 3
compare_dir = "out-ablation-002-sharing"
prompts = ["War is "]
sample_tokens = 100
bench_iters = 0

dataset = "shakespeare_v4096"
eval_interval = 50            # the cheapest model's budget comes early for the others: enough evaluations before it
eval_iters = 20
log_interval = 50

# every model: the efficio preset's GPT-2 blocks at this size, no sharing and no factorization unless the
# variant sets them (the preset's own E=128 and 2 groups of 6 are for its 12-layer GPT-2-small size)
n_layer = 6
n_embd = 96
n_head = 4
block_size = 64
embd_factor_dim = None
share_group_size = 1
dropout = 0.0

batch_size = 12
learning_rate = 1e-3
max_iters = 700               # 1.6 epochs of the 327k training tokens
lr_decay_iters = 700
min_lr = 1e-4
warmup_iters = 70
weight_decay = 0.1
beta1 = 0.9
beta2 = 0.99

device = "cpu"
dtype = "float32"
compile = False
num_threads = 1
