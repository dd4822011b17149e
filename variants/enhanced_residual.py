"""enhanced_residual: the "Enhanced Residual" (ER) model of paper 000, section 2.7 and Table 1:
layer_sharing plus residuals alpha * x + (1 - alpha) * F(x), alpha = sigmoid(w), one learned w per
sub-layer (attention and FFN) of each of the 30 unique blocks: the 60 extra parameters 2.7 counts
(a block applied twice uses its alphas twice).

Switched on: everything of layer_sharing (RMSNorm, RoPE, no bias, SwiGLU hidden 1536, tied embeddings,
GQA 9/3 heads, 30 blocks each applied twice) + enhanced_residual=True.

Parameters: 135,151,548 (135.2M, = layer_sharing + 60) vs Table 1's 135.4M.
"""

CONFIG = dict(
    vocab_size=50257,
    block_size=1024,
    n_layer=60,
    n_head=9,
    n_kv_head=3,
    n_embd=576,
    bias=False,
    norm="rmsnorm",
    pos_embedding="rope",
    mlp_type="gated",
    activation="silu",
    mlp_hidden=1536,
    tie_embeddings=True,
    share_group_size=2,
    enhanced_residual=True,
)
