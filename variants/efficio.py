"""efficio: GPT-Efficio, paper 002 (section 3.0.1 embedding layer factorization, 3.0.2 parameter sharing
across layers).

Switched on, on a GPT-2 decoder (LayerNorm, GELU MLP 4x, biases, learned positions, tied embeddings):
  factorized embedding (3.0.1):       vocab -> E=128 -> width, V*E + E*H parameters instead of V*H;
                                      the tied head goes back through the same projection
  sharing in groups (3.0.2, item 3):  2 groups of 6 consecutive layers, each group one set of weights
                                      (share_group_size=6; 12 = ALBERT-style all layers, 1 = none;
                                      share_sublayers='attn'|'mlp' shares only one kind of sub-layer)

Sizes are OUR choice: the paper gives only d_model and totals (Table 4: d_model 2048 -> 950M,
1536 -> 660M, 1024 -> 290M), no depth, heads, vocabulary, embedding size E or group count, so its
numbers cannot be reproduced. We use GPT-2-small sizes (12 layers, 12 heads, width 768, context 1024,
GPT-2 vocabulary 50257), ALBERT's E=128 and the paper's own example of 2 groups.

Parameters: 21,494,912 (21.5M; GPT-2 small without factorization or sharing: 124.4M). The paper has no
count for a model of this size.
"""

CONFIG = dict(
    vocab_size=50257,
    block_size=1024,
    n_layer=12,
    n_head=12,
    n_embd=768,
    bias=True,
    norm="layernorm",
    pos_embedding="learned",
    mlp_type="standard",
    activation="gelu",
    tie_embeddings=True,
    embd_factor_dim=128,
    share_group_size=6,
)
