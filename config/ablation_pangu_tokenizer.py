# Ablation set 4a (issue 15): paper 003's compact tokenizer (results/README.md "PanGu-π Pro", (a)) with 3 seeds. One
# model body (4 layers, width 64, 4 heads, tied embeddings) on Shakespeare with the full GPT-2 BPE (50257)
# and compact 8192 / 4096 / 1024-token vocabularies (tools.compare prepares them on first use with
# tools.pangu.compact_vocab), 200 iterations of 8 x 64 tokens;
# plus the 4096 model for 2000 iterations (about the 50257 model's wall time).
#   python -m tools.compare config/ablation_pangu_tokenizer.py
# Losses per token are NOT comparable across vocabularies (a token is a different amount of text), and
# neither is the "vs" column nor the equal-compute column of results.md. Compare bits per byte over the whole
# val split, per run:
#   for d in out-ablation-pangu-tokenizer/*/seed*; do python -m tools.eval --out_dir=$d/last.pt --splits=val --batch_size=8; done
# Time measured: 22 min, 9 of them the 50257 model, plus 2 min for the tools.eval runs, with 2-4 other jobs on the 2 cores.

variants = ["v50257", "v8192", "v4096", "v1024", "v4096_2000it"]
custom_variants = {
    "v50257": dict(variant="gpt", dataset="shakespeare"),
    "v8192": dict(variant="gpt", dataset="shakespeare_v8192"),
    "v4096": dict(variant="gpt", dataset="shakespeare_v4096"),
    "v1024": dict(variant="gpt", dataset="shakespeare_v1024"),
    "v4096_2000it": dict(variant="gpt", dataset="shakespeare_v4096", max_iters=2000, lr_decay_iters=2000,
                         warmup_iters=200, eval_interval=100),
}
seeds = 3
compare_dir = "out-ablation-pangu-tokenizer"
prompts = []
bench_iters = 0

dataset = "shakespeare_v4096"
eval_interval = 50
eval_iters = 10
log_interval = 50

n_layer = 4
n_head = 4
n_embd = 64
block_size = 64
dropout = 0.0

batch_size = 8
learning_rate = 2e-3
max_iters = 200
lr_decay_iters = 200
min_lr = 2e-4
warmup_iters = 20
beta2 = 0.99

device = "cpu"
dtype = "float32"
compile = False
num_threads = 1
