"""lgpt: LinearGPT, paper 004 section 3.2 (eq. 4-5), sized as Table 1 (n_layers=6, d_model=384,
n_heads=6, context 256, char vocabulary 65).

Switched on: shrink_every=2, shrink_layer='linear'. After every two blocks a Linear layer halves the
width: blocks of width 384, 384, 192, 192, 96, 96 (6 heads throughout: head sizes 64, 32, 16). The head
reads 96-wide vectors, the embedding is 384 wide, so tie_embeddings=False.

Parameters: 4,884,480 (4.88M) vs Table 1's 4.87M (the paper's "54.4% fewer than gpt").
"""

from variants.gpt import CONFIG as GPT

CONFIG = dict(
    GPT,
    shrink_every=2,
    shrink_layer="linear",
    tie_embeddings=False,  # the head (96 wide) cannot reuse the 384-wide embedding
)
