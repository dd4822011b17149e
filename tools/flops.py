"""
Training FLOPs per token of a model, for equal-compute comparisons (tools/compare.py, tools/paper000_summary.py).

    from tools.flops import flops_per_token
    flops_per_token(GPT(config))
    with torch.device("meta"):            # no weights allocated, as tools/paper000_summary.py counts
        flops = flops_per_token(GPT(config))

Forward + backward = 3 x forward: 6 FLOPs per weight application plus the attention score/value matmuls,
counting every application of a shared layer, every Deep Thinking pass and every pgpt branch (only the kept
one with model.keep_branch). Evaluations are not counted.

Deep Thinking's passes between the first and the test pass attend over [memory; keys], 2T keys; this count gives
every pass T keys, the accounting results/paper000_cpu was measured with (tools/plan.py counts the 2T, checked against
torch's FlopCounterMode; tests/test_plan.py holds the two apart by exactly the memory's keys). The undercount:
4.1% at results/paper000_cpu's size (0.0579 vs 0.0602 GFLOPs/token), 1.9% for the deep_thinking preset.
"""
from tools.layers import layer_sets
from tools.support import refuse_undeclared


def flops_per_token(model, seq_len=None):
    """Training FLOPs per token at sequence length seq_len (default: the model's block_size)."""
    refuse_undeclared(model.config, "flops")
    cfg, T = model.config, seq_len or model.config.block_size
    widths = cfg.widths()
    per_pass = 0
    for stack in model.branches if model.keep_branch is None else [model.branches[model.keep_branch]]:
        for layer, (a, m, s) in enumerate(layer_sets(stack)):
            per_pass += matmul_params(stack.mlp[m])
            if a is not None:
                per_pass += matmul_params(stack.attn[a]) + 2 * widths[layer] * T
            if s is not None:
                per_pass += matmul_params(stack.shrink[s])
    head = cfg.vocab_size * cfg.final_width()
    E = cfg.embd_factor_dim
    if E:   # factorized: the E -> width input projection; a tied head goes back through it (h P) W_e^T
        head = E * cfg.embd_width() + (E * cfg.embd_width() + cfg.vocab_size * E if cfg.tie_embeddings else head)
    return 6 * ((cfg.think_steps + 1) * per_pass + head)   # every Deep Thinking pass applies the layers


def matmul_params(module):
    """The weights of a module that multiply an activation (>= 2-D: matmuls, convolutions)."""
    return sum(p.numel() for p in module.parameters() if p.dim() >= 2)


if __name__ == "__main__":   # run as a command, it would do nothing
    raise SystemExit("error: tools.flops is a library, not a command (fix: the commands are in docs/reference.md)")
