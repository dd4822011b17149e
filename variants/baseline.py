"""baseline: the GPT-2 baseline of paper 000 (Yu, "Efficient parameter optimization for compact
language models"), section 2.1 and Table 1: d_model 768, d_hidden 1536, 12 heads, 12 layers, 134.0M.

A GPT-2 decoder: LayerNorm, plain GELU MLP (hidden 1536 = 2x, not GPT-2's 4x), biases, multi-head
attention, GPT-2 vocabulary (50257) and untied input/output embeddings (2.4 says sharing them saves
~25M, i.e. the baseline has two). Positions are fixed sinusoids, which have no parameters: that is the
only choice that lands on 134.0M (learned positions would add 0.8M). The paper does not give the
context length; block_size=1024 is GPT-2's.

Parameters: 133,920,768 (133.9M) vs Table 1's 134.0M.
"""

CONFIG = dict(
    vocab_size=50257,
    block_size=1024,
    n_layer=12,
    n_head=12,
    n_embd=768,
    bias=True,
    norm="layernorm",
    pos_embedding="sinusoidal",
    mlp_type="standard",
    activation="gelu",
    mlp_hidden=1536,
    tie_embeddings=False,
)
