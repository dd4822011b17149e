"""mobilellm_600m: MobileLLM-600M (Liu et al., ICML 2024), the parent model of ShishuLM 600 in paper 001
(ShishuLM), Table 7 (configuration) and Table 2 (603,188,352 parameters).

A LLaMA-style decoder: RMSNorm (eps 1e-5), RoPE, no biases, SwiGLU FFN (hidden 3072), GQA with 18 query
and 6 key/value heads, width 1152, 40 layers (no layer sharing), tied input/output embeddings,
vocabulary 32000 (the MobileLLM tokenizer; train.py replaces it by the dataset's vocab_size unless
--vocab_size is given) and MobileLLM's context of 2048 (001 section 5).

Parameters: 603,188,352 vs Table 2's 603,188,352 (exact).
"""

from variants.mobilellm_125m import CONFIG as MOBILELLM_125M

CONFIG = dict(
    MOBILELLM_125M,
    n_layer=40,
    n_head=18,
    n_kv_head=6,
    n_embd=1152,
    mlp_hidden=3072,
)
