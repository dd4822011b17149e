"""
Initialisation schemes (paper 003, PanGu-pi Pro, 3.1, Table 4, Appendix B; text in ../shared/papers/): the std of
every attention and FFN weight, as a function of the layer's depth. GPTConfig.init_scheme picks one; GPT._init_plan
and GPT._init_weights in model.py draw the weights with these stds.
"""

import math


INIT_SCHEMES = ("gpt2", "constant", "internlm", "depth_adaptive")


def init_stds(config, depth):
    """Std of each attention (q, k, v, out) and FFN (up, gate, down) weight of a layer at relative depth
    `depth` = l / (L - 1) (0 = first layer, 1 = last; L = layers per branch; 0 when L = 1). sigma = init_std,
    N = 2 * n_layer (residual sub-layers; a shared or MLP-only layer still counts two, as this repository's gpt2
    scheme always did). Embeddings, the head and lgpt/cgpt shrink layers always use sigma.
      constant        sigma everywhere. Paper 003 3.1/Table 4: the best of its three and its recommendation
                      for tiny models; paper 001 5: "mean = 0 and standard deviation = 0.02".
      gpt2            out, down: sigma / sqrt(N) (GPT-2's code: the projections that write into the residual
                      stream). Paper 003 3.1 describes GPT-2 as scaling "all linear layer parameters" by
                      1/sqrt(N); we follow GPT-2's code.
      internlm        out and gate: sigma / sqrt(N). Paper 003 3.1: InternLM applies the same scale "only to
                      ... the out projection in MHA layers and the gate projection in MLP layers". Ours: a
                      standard (ungated) FFN has no gate, so its up projection, the one the activation reads,
                      takes the gate's scale.
      depth_adaptive  paper 003 Appendix B (Table 11, "Ours"): q, k "decrease from sqrt(2) sigma to sigma",
                      v, out "increase from sigma / sqrt(2) to sigma" as the layer index grows; FFN sigma.
                      The paper gives only the end points; linear in depth is ours:
                        q, k:    sigma * (sqrt(2) - (sqrt(2) - 1) * depth)
                        v, out:  sigma * (1/sqrt(2) + (1 - 1/sqrt(2)) * depth)
    """
    sigma, scheme = config.init_std, config.init_scheme
    std = dict.fromkeys(("q", "k", "v", "out", "up", "gate", "down"), sigma)
    scaled = sigma / math.sqrt(2 * config.n_layer)
    if scheme == "gpt2":
        std.update(out=scaled, down=scaled)
    elif scheme == "internlm":
        std.update({"out": scaled, "gate" if config.mlp_type == "gated" else "up": scaled})
    elif scheme == "depth_adaptive":
        qk = sigma * (math.sqrt(2) - (math.sqrt(2) - 1) * depth)
        vo = sigma * (1 / math.sqrt(2) + (1 - 1 / math.sqrt(2)) * depth)
        std.update(q=qk, k=qk, v=vo, out=vo)
    return std


def merge_blocks(blocks):
    """[(rows, std), ...] with neighbouring blocks of the same std joined (one draw, as for a plain Linear)."""
    merged = []
    for rows, std in blocks:
        if merged and merged[-1][1] == std:
            rows += merged.pop()[0]
        merged.append((rows, std))
    return merged
