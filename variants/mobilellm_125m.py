"""mobilellm_125m: MobileLLM-125M (Liu et al., ICML 2024), the parent model of ShishuLM 125 in paper 001
(ShishuLM), Table 7 (configuration) and Table 2 (124,635,456 parameters).

A LLaMA-style decoder: RMSNorm (eps 1e-5), RoPE, no biases, SwiGLU FFN (hidden 1536), GQA with 9 query
and 3 key/value heads, width 576, 30 layers (no layer sharing), tied input/output embeddings,
vocabulary 32000 (the MobileLLM tokenizer; train.py replaces it by the dataset's vocab_size unless
--vocab_size is given) and MobileLLM's context of 2048 (001 section 5).

Initialisation: N(0, 0.02) for every weight, init_scheme="constant" (001 section 5: "Our model weights are
initialized from a Normal distribution with mean = 0 and standard deviation = 0.02"; the parents are trained
with the same configuration as the ShishuLMs). The mobilellm_600m and shishulm_* presets inherit it.

Parameters: 124,635,456 vs Table 2's 124,635,456 (exact).
"""

CONFIG = dict(
    vocab_size=32000,
    block_size=2048,
    n_layer=30,
    n_head=9,
    n_kv_head=3,
    n_embd=576,
    bias=False,
    norm="rmsnorm",
    norm_eps=1e-5,
    pos_embedding="rope",
    mlp_type="gated",
    activation="silu",
    mlp_hidden=1536,
    tie_embeddings=True,
    init_scheme="constant",
    init_std=0.02,
)
