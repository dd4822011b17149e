"""layer_sharing: the "Layer Sharing" (LS) model of paper 000, sections 2.2-2.6 and Table 1: d_model 576,
d_hidden 1536, 9 heads, 3 KV heads, 30 layers, 135.4M.

Switched on, on top of a LLaMA-style decoder (RMSNorm, RoPE, no biases):
  double up-projection + SwiGLU (2.2, 2.3):  mlp_type='gated', activation='silu', mlp_hidden=1536
  embedding sharing (2.4):                   tie_embeddings=True
  GQA (2.5):                                 n_head=9, n_kv_head=3
  layer sharing (2.6):                       30 unique blocks, each applied twice in a row
                                             (n_layer=60 is the effective depth, share_group_size=2)
Vocabulary: GPT-2's 50257 (the baseline's tokenizer). Context: not given; 1024 as the baseline.

Parameters: 135,151,488 (135.2M) vs Table 1's 135.4M (0.2% off; the paper's count is not itemised).
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
)
