"""layer_sharing: the "Layer Sharing" (LS) model of paper 000, sections 2.2-2.6 and Table 1: d_model 576,
d_hidden 1536, 9 heads, 3 KV heads, 30 layers, 135.4M.

The baseline (see baseline.py: post-LayerNorm blocks with biases, sinusoidal positions, GPT-2 vocabulary,
context 128 from the authors' code) with the paper's techniques switched on:
  double up-projection + SwiGLU (2.2, 2.3)  mlp_type='gated', activation='silu', mlp_hidden=1536:
                                            down(silu(gate x) * up x), the paper's equation (the authors' code,
                                            `code/7. Layer Sharing_135.4M.py`, also applies silu to the up branch)
  embedding sharing (2.4)                   tie_embeddings=True; the head keeps its bias (code: the Linear's weight
                                            is tied to the embedding, its bias stays), head_bias=True
  GQA (2.5)                                 n_head=9, n_kv_head=3
  layer sharing (2.6)                       "each decoder block [is] repeated twice": 30 unique blocks applied
                                            twice in a row, n_layer=60 (effective depth), share_group_size=2
Parameters: 135,391,249 = Table 1's 135.4M.
"""

from variants.baseline import CONFIG as BASELINE

CONFIG = dict(
    BASELINE,
    n_layer=60,
    n_head=9,
    n_kv_head=3,
    n_embd=576,
    mlp_type="gated",
    activation="silu",
    mlp_hidden=1536,
    tie_embeddings=True,
    share_group_size=2,
)
