"""cgpt: ConvGPT, paper 004 section 3.3, sized as Table 1 (n_layers=6, d_model=384, n_heads=6,
context 256, char vocabulary 65).

Switched on: shrink_every=2, shrink_layer='conv', shrink_kernel=1. Like lgpt, but the width-halving
layers are Conv1d over the sequence. Table 1 gives cgpt exactly lgpt's parameter count, which only a
kernel of size 1 does (a per-token dense layer); shrink_kernel=k>1 gives a causal convolution that
mixes k neighbouring positions, at (k-1) * C * C/2 extra weights per shrink layer.
With kernel 1 the model is the same function as lgpt, and since a (C/2, C, 1) Conv1d weight and a
(C/2, C) Linear weight draw the same numbers at initialisation, cgpt and lgpt trained with the same seed
give the same losses (up to float rounding); --shrink_kernel=3 gives a ConvGPT that differs.
tie_embeddings=False (head 96 wide, embedding 384).

Parameters: 4,884,480 (4.88M) vs Table 1's 4.87M.
"""

from variants.gpt import CONFIG as GPT

CONFIG = dict(
    GPT,
    shrink_every=2,
    shrink_layer="conv",
    shrink_kernel=1,
    tie_embeddings=False,
)
