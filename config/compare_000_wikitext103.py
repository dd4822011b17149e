# Paper 000's four models on WikiText-103 (GPT-2 BPE tokens), one GPU: Table 2's perplexities (here
# exp(best val loss) in results.md) and Figure 7's enhanced-residual alphas (alphas.png).
#   baseline           post-LN GPT, 12 layers, width 768, ReLU FFN 1536                   134.0M
#   layer_sharing      + SwiGLU, tied embeddings, GQA 9/3, 30 blocks each applied twice   135.4M
#   enhanced_residual  + alpha * x + (1 - alpha) * F(x) residuals                         135.4M
#   deep_thinking      + 3 thinking passes, then the test pass (4 forward passes)         135.4M
# The sizes come from variants/<name>.py (no model keys here); the recipe is paper 000's 3.1 where it
# says something (lr 2e-3, weight decay 0.1), our choice where it does not (context 1024, 16 sequences
# per step, 5000 steps = 82M tokens, about 0.7 epoch of WikiText-103's 117M training tokens).
# Time on one H100 (bf16, compile; an ESTIMATE, never run: no GPU): training FLOPs per token are 0.68 G (baseline), 1.87 G (layer_sharing
# and enhanced_residual: 60 layer applications) and 6.97 G (deep_thinking: 4 passes), i.e. 5.6e16,
# 1.5e17, 1.5e17 and 5.7e17 FLOPs for 5000 steps. At 20-35% of the H100's bf16 peak that is roughly
# 3-8 min for baseline, 10-25 min each for layer_sharing and enhanced_residual and 30-60 min for
# deep_thinking: 1-2 hours in all (the run prints an overall ETA; --max_iters=1000 for a first look).
# First run prepares data/wikitext103 (needs the WikiText-103 zip: downloaded, or
# `python -m tools.wikitext103 --source PATH` beforehand).
#   python -m tools.compare config/compare_000_wikitext103.py
#   python -m tools.compare config/compare_000_wikitext103.py --dry_run=True      # sizes and FLOPs, no training
# Re-running the same command skips finished models and resumes an interrupted one.

variants = ["baseline", "layer_sharing", "enhanced_residual", "deep_thinking"]
compare_dir = "out-compare-000-wikitext103"
prompts = ["The history of the", "In 1914 , the", "The album was released"]   # WikiText's spacing
sample_temperature = 0.3
sample_tokens = 300
samples_per_prompt = 1
bench_iters = 20

dataset = "wikitext103"
block_size = 1024     # our choice (the authors' code: 128)
eval_interval = 250
eval_iters = 100
log_interval = 10

# 16 sequences of 1024 tokens per step: 8 per micro-step x 2 (deep_thinking's 4 passes over 60 layers
# keep a lot of activations; 8 x 1024 fits an 80 GB GPU)
batch_size = 8
gradient_accumulation_steps = 2
dropout = 0.0

learning_rate = 2e-3   # paper 000 3.1
weight_decay = 0.1     # paper 000 3.1
max_iters = 5000
lr_decay_iters = 5000
min_lr = 2e-4
warmup_iters = 200
beta1 = 0.9
beta2 = 0.95
grad_clip = 1.0

device = "auto"
dtype = "auto"
compile = True
