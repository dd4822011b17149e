"""gpt: the baseline of paper 004 (Suresh & P, "Towards smaller, faster decoder-only transformers"),
Table 1: n_layers=6, d_model=384, n_heads=6, context_length=256, char-level vocabulary of 65 (5.1.1).
It is nanoGPT's "baby GPT" for Shakespeare: GPT-2 blocks (LayerNorm, GELU MLP 4x, biases, learned
positions, tied input/output embeddings); nanoGPT's train.py turns the biases off (bias=False).

Parameters: 10,770,816 (10.77M; 10,672,512 without the learned position embeddings, which is what
nanoGPT prints with --bias=True; 10,646,784 with its default bias=False) vs Table 1's 10.7M.
Training recipe: config/gpt_shakespeare.py (nanoGPT's GPU recipe: dropout 0.2, lr 1e-3);
config/gpt_shakespeare_cpu.py is the CPU quickstart's smaller model, not this one.
"""

CONFIG = dict(
    vocab_size=65,
    block_size=256,
    n_layer=6,
    n_head=6,
    n_embd=384,
    bias=True,
    tie_embeddings=True,
)
