"""enhanced_residual: the "Enhanced Residual" (ER) model of paper 000, section 2.7 and Table 1:
layer_sharing with every residual  x + F(x)  replaced by  alpha * x + (1 - alpha) * F(x),  alpha = sigmoid(w),
one w per sub-layer (attention and FFN) of each of the 30 unique blocks: the 60 extra parameters 2.7 counts
(a block applied twice uses its alphas twice).

Where the paper is silent, the authors' code (`code/8. Enhanced Residual_135.4M.py`): w = 0 at init
(alpha = 0.5) and post-norm blocks, x <- LayerNorm(alpha * x + (1 - alpha) * F(x)) (inherited from
layer_sharing's norm_placement='post').

Parameters: 135,391,309 (layer_sharing + 60) = Table 1's 135.4M.
"""

from variants.layer_sharing import CONFIG as LAYER_SHARING

CONFIG = dict(
    LAYER_SHARING,
    enhanced_residual=True,
    residual_logit_init=0.0,
)
