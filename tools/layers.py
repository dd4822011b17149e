"""
The layers of a built model as its DecoderStacks apply them, for the tools that describe or convert a model (plan,
FLOPs, plots, the Hugging Face export): model.py keeps only `stack.layers`, the sub-layers in the order applied, and
each weight set once in `stack.attn`, `stack.mlp` (and `stack.shrink` for lgpt/cgpt).
"""
from model import MLP, CausalSelfAttention, ResidualSubLayer


def index_of(modules, module):
    """The position of `module` (the same object) in a ModuleList."""
    for i, m in enumerate(modules):
        if m is module:
            return i
    raise ValueError("the sub-layer is not one of the stack's weight sets")


def layer_sets(stack):
    """Per layer of a DecoderStack, in order: (its attention weight set, an index into stack.attn, or None for a
    layer without attention (ShishuLM); its FFN weight set, into stack.mlp; its shrink, into stack.shrink, or None).
    Layers that apply the same weights (layer sharing) have the same index."""
    rows = []
    attn = None
    for sub in stack.layers:
        if isinstance(sub, ResidualSubLayer) and isinstance(sub.inner, CausalSelfAttention):
            attn = index_of(stack.attn, sub)
        elif isinstance(sub, ResidualSubLayer) and isinstance(sub.inner, MLP):   # the FFN ends a layer
            rows.append([attn, index_of(stack.mlp, sub), None])
            attn = None
        else:   # lgpt/cgpt: the shrink after the layer
            rows[-1][2] = index_of(stack.shrink, sub)
    return [tuple(row) for row in rows]


if __name__ == "__main__":   # run as a command, it would do nothing
    raise SystemExit("error: tools.layers is a library, not a command (fix: the commands are in docs/reference.md)")
