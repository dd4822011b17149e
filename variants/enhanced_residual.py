"""enhanced_residual: the "Enhanced Residual" (ER) model of paper 000, section 2.7 and Table 1:
layer_sharing plus residuals alpha * x + (1 - alpha) * F(x), alpha = sigmoid(w), one learned w per
sub-layer (attention and FFN) of each of the 30 unique blocks: the 60 extra parameters 2.7 counts
(a block applied twice uses its alphas twice).

Switched on: everything of layer_sharing (RMSNorm, RoPE, no bias, SwiGLU hidden 1536, tied embeddings,
GQA 9/3 heads, 30 blocks each applied twice) + enhanced_residual=True.

Parameters: 135,151,548 (135.2M, = layer_sharing + 60) vs Table 1's 135.4M.
"""

from variants.layer_sharing import CONFIG as LAYER_SHARING

CONFIG = dict(
    LAYER_SHARING,
    enhanced_residual=True,
)
