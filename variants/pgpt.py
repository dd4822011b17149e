"""pgpt: ParallelGPT, paper 004 section 3.1 (eq. 1-3), sized as Table 1 (n_layers=6, d_model=384,
n_heads=6, context 256, char vocabulary 65).

Switched on: n_branches=2. The embedding is 2 * 384 = 768 wide; its halves go through two parallel
decoders of N/2 = 3 blocks each, whose outputs are mixed as w * dec1 + (1 - w) * dec2 with a learned w
(softmax of two logits), then the head. At inference the lighter branch can be dropped
(model.keep_branch = model.heaviest_branch()). The head is 384 wide, the embedding 768, so the
embeddings cannot be tied: tie_embeddings=False.

Parameters: 10,919,042 (10.92M) vs Table 1's 10.9M.
"""

from variants.gpt import CONFIG as GPT

CONFIG = dict(
    GPT,
    n_branches=2,
    tie_embeddings=False,  # the head (384 wide) cannot reuse the 768-wide embedding
)
