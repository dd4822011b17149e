"""deep_thinking: the "Deep Thinking" (DT) model of paper 000, section 2.8, Table 1 and 3.2:
enhanced_residual plus T = 3 thinking passes with eta = 0.01 (3.2), then the test pass.

Data flow (2.8, and the authors' `code/9. Deep Thinking.py` where the text leaves it open): thinking pass 1
reads the token embeddings, pass t > 1 the output of pass t-1; every layer application accumulates a KV memory,
M_1 = K_1 (our reading: 2.8 leaves the first memory undefined) and M_t = eta * K_t + (1 - eta) * M_{t-1},
attending over [M_{t-1} ; K_t] in pass t; the test pass reads the embeddings again and attends over M_T only.
think_memory='first_layer' reproduces the authors' code, where every layer's memory starts from the first
layer's pass-1 K, V (not in the paper's text).

No new parameters; every forward runs T + 1 = 4 passes (4x the FLOPs), and decoding keeps keys/values for
the thinking passes plus their memories.

Parameters: 135,391,309 (as enhanced_residual) = Table 1's 135.4M.
"""

from variants.enhanced_residual import CONFIG as ENHANCED_RESIDUAL

CONFIG = dict(
    ENHANCED_RESIDUAL,
    think_steps=3,
    think_eta=0.01,
    think_memory="own",
)
