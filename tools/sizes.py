"""
The sizes model.py derives from a GPTConfig, for the tools that hold a config but no model: the key/value heads
(n_kv_head, or n_head without GQA), the head size, and the FFN's hidden size (mlp_hidden, or mlp_ratio * width).

Each is read from the module model.py builds with it, built on the meta device (shapes only: no memory, no
weights), so each derivation has one home, the model's own line (CausalSelfAttention.__init__, MLP.__init__), and
a tool cannot drift from what the model computes. They are not GPTConfig methods because model.py's plain-GPT
path would then read their lines too, and that path is at its budget (../shared/tools/reading_path.py: 2,404
code tokens; methods called by the attention and the MLP measured 2,431).
"""
import torch

from model import MLP, CausalSelfAttention


def full_width_attention(config):
    """The attention of a full-width layer (n_embd), on the meta device."""
    with torch.device("meta"):
        return CausalSelfAttention(config, config.n_embd)


def kv_heads(config):
    """Key/value heads: n_kv_head, or n_head when the model has no GQA."""
    return full_width_attention(config).n_kv_head


def head_dim(config):
    """The size of one attention head at the full width: n_embd // n_head."""
    return full_width_attention(config).head_dim


def ffn_hidden(config):
    """The FFN's hidden size at the full width: mlp_hidden, or mlp_ratio * n_embd."""
    with torch.device("meta"):
        return MLP(config, config.n_embd).up.out_features


if __name__ == "__main__":   # run as a command, it would do nothing
    raise SystemExit("error: tools.sizes is a library, not a command (fix: the commands are in docs/reference.md)")
