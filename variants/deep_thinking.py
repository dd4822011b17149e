"""deep_thinking: the "Deep Thinking" (DT) model of paper 000, section 2.8, Table 1 and 3.2:
enhanced_residual plus T=3 thinking passes that build a per-layer KV memory
(M_t = eta * K_t + (1 - eta) * M_{t-1}, eta = 0.01) before the final pass attends over [M ; K].

Switched on: everything of enhanced_residual (RMSNorm, RoPE, no bias, SwiGLU hidden 1536, tied
embeddings, GQA 9/3 heads, 30 blocks each applied twice, enhanced residual) + think_steps=3,
think_eta=0.01. No new parameters, but every forward runs 4 passes (4x the FLOPs), and decoding keeps
keys/values for every pass plus the memories.

Parameters: 135,151,548 (135.2M, same as enhanced_residual) vs Table 1's 135.4M.
"""

from variants.enhanced_residual import CONFIG as ENHANCED_RESIDUAL

CONFIG = dict(
    ENHANCED_RESIDUAL,
    think_steps=3,
    think_eta=0.01,
)
