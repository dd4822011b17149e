"""Correctness proofs for every architecture flag: causality, no batch leakage, KV-cache decoding equal to
the full forward pass (also past block_size), save/load round trip, learning, and clear config errors.

The leak checks (causality, batch leakage, cache = full forward, generation with and without the cache, the
reference equations) run where a leak shows: every weight at std 0.3 (visible_weights; at init's 0.02 attention is
nearly uniform and a leak moved the logits by 2e-7 to 1e-5, issue 34), in float64, against NOISE. tests/mutation.py puts
realistic bugs into the code and checks that these tests fail."""
import dataclasses
import io
import math

import pytest
import torch
from torch.nn import functional as F

from model import GPT, GPTConfig, KVCache, sinusoidal_positions
from tools.layers import layer_sets
from tools.plots import residual_alphas
from tools.sizes import ffn_hidden, head_dim, kv_heads
from safety_net.build import depth_summary

TINY = dict(vocab_size=37, block_size=16, n_layer=4, n_head=2, n_embd=16, dropout=0.0)
LLAMA = dict(norm="rmsnorm", pos_embedding="rope", bias=False, mlp_type="gated", activation="silu")

# every flag, each on its own and in the combinations the papers use
FLAGS = {
    "gpt": {},
    "no_bias": dict(bias=False),
    "pgpt": dict(n_branches=2, tie_embeddings=False),
    "pgpt3": dict(n_layer=6, n_branches=3, tie_embeddings=False),
    "lgpt": dict(shrink_every=2, n_embd=32, tie_embeddings=False),
    "cgpt_k1": dict(shrink_every=2, shrink_layer="conv", n_embd=32, tie_embeddings=False),
    "cgpt_k3": dict(shrink_every=1, shrink_layer="conv", shrink_kernel=3, n_embd=32, tie_embeddings=False),
    # lgpt over ShishuLM's MLP-only layers: a rewrite of add_shrinks that assumed attention everywhere broke it
    "lgpt_mlp_only": dict(shrink_every=2, n_embd=32, tie_embeddings=False, n_attn_layers=2),
    "swiglu": dict(mlp_type="gated", activation="silu", mlp_hidden=24),
    "gated_gelu": dict(mlp_type="gated", activation="gelu"),
    "gqa": dict(n_head=4, n_kv_head=2),
    "mqa": dict(n_head=4, n_kv_head=1),
    "untied": dict(tie_embeddings=False),
    "factorized": dict(embd_factor_dim=8),
    "factorized_untied": dict(embd_factor_dim=8, tie_embeddings=False),
    "repeat2": dict(share_group_size=2),
    "albert": dict(share_group_size=4),
    "share_attn": dict(share_group_size=2, share_sublayers="attn"),
    "share_mlp": dict(share_group_size=2, share_sublayers="mlp"),
    "enhanced_residual": dict(enhanced_residual=True),
    "enhanced_residual_init": dict(enhanced_residual=True, residual_logit_init=3.0),
    "deep_thinking": dict(think_steps=2, think_eta=0.3),
    "deep_thinking_first_layer": dict(think_steps=2, think_eta=0.3, think_memory="first_layer"),
    "deep_thinking_first_layer_1": dict(think_steps=1, think_eta=0.3, think_memory="first_layer"),
    "post_norm": dict(norm_placement="post"),
    "post_norm_enhanced": dict(norm_placement="post", enhanced_residual=True),
    "head_bias": dict(head_bias=True),
    "head_bias_untied": dict(head_bias=True, tie_embeddings=False),
    "shishu": dict(n_attn_layers=2, share_from_layer=2, share_group_size=2, **LLAMA),
    "shishu_bottom_top": dict(n_attn_layers=1, n_top_attn_layers=1, share_from_layer=1, share_group_size=2, **LLAMA),
    "attn_top_only": dict(n_layer=3, n_attn_layers=0, n_top_attn_layers=1),
    "rmsnorm": dict(norm="rmsnorm"),
    "rope": dict(pos_embedding="rope"),
    "sinusoidal": dict(pos_embedding="sinusoidal"),
    "no_pos": dict(pos_embedding="none"),
    "rope_base": dict(pos_embedding="rope", rope_base=100.0),
    "relu": dict(activation="relu"),
    "gelu_tanh": dict(activation="gelu_tanh"),
    "mlp_ratio": dict(mlp_ratio=2.0),
    "norm_eps": dict(norm_eps=0.1),
    "constant_init": dict(init_scheme="constant"),
    "init_std": dict(init_std=0.05),
    "dropout": dict(dropout=0.1),
    "internlm_init": dict(init_scheme="internlm", **LLAMA),
    "depth_adaptive_init": dict(init_scheme="depth_adaptive", n_head=4, n_kv_head=2),
    "mobilellm": dict(n_layer=4, n_head=4, n_kv_head=2, share_group_size=2, enhanced_residual=True, **LLAMA),
    "mobilellm_dt": dict(n_head=4, n_kv_head=2, share_group_size=2, enhanced_residual=True, think_steps=2,
                         think_eta=0.5, **LLAMA),
    "post_norm_pgpt_cgpt": dict(n_branches=2, shrink_every=1, n_embd=32, norm_placement="post",
                                shrink_layer="conv", shrink_kernel=2, tie_embeddings=False),
    # paper 000's models as its code runs them: post-LayerNorm with biases, sinusoidal positions, head bias
    "paper000_baseline": dict(norm_placement="post", pos_embedding="sinusoidal", activation="relu",
                              tie_embeddings=False, head_bias=True),
    "paper000_dt": dict(n_head=4, n_kv_head=2, share_group_size=2, enhanced_residual=True, think_steps=3,
                        think_eta=0.3, norm_placement="post", pos_embedding="sinusoidal", mlp_type="gated",
                        activation="silu", head_bias=True),
    "paper000_dt_first_layer": dict(n_head=4, n_kv_head=2, share_group_size=2, enhanced_residual=True,
                                    think_steps=3, think_eta=0.3, think_memory="first_layer",
                                    norm_placement="post", pos_embedding="rope", mlp_type="gated",
                                    activation="silu", head_bias=True),
    "shishu_dt_post": dict(n_attn_layers=2, share_from_layer=2, share_group_size=2, think_steps=2,
                           norm_placement="post", **LLAMA),
}


def make_model(name, seed=0, **extra):
    torch.manual_seed(seed)
    model = GPT(GPTConfig(**{**TINY, **FLAGS[name], **extra}))
    # Randomise the zero-initialised parameters (biases, alphas, branch logits) so the tests see them act.
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() < 2:
                p.add_(0.3 * torch.randn_like(p))
    return model.eval()


# Two computations that must agree (a cut batch row and the uncut one, cached decoding and the full forward, the
# model and the reference equations) may differ by float rounding only: max|a - b| <= NOISE * max|a|. The floor
# measured on this CPU in float64 at std-0.3 weights, over every flag and preset: exactly 0 for causality and batch
# leakage (rows of one batch), up to 7e-14 for cached decoding against the full forward (different matmul shapes;
# Deep Thinking's passes add up the rounding), 1e-15 against the reference. In float32 the cache floor was 2.4e-5
# (Deep Thinking with post-norm), about what the old tolerance of 1e-4 was: so these checks run in float64.
# 1e-10 leaves a 1000x margin for other CPUs' kernels; every bug of tests/mutation.py is caught at it.
NOISE = 1e-10
# a position after a cut "changes" if its logits move by more than this fraction of their scale: 10^6 x NOISE, and
# below the smallest change a cut made at std 0.3 on this CPU (7e-3 relative, a scaled-down preset)
VISIBLE = 1e-4


def assert_same(a, b, what):
    """a and b are the same logits up to float rounding (NOISE, relative to the scale of a)."""
    err, scale = (a - b).abs().max().item(), a.abs().max().item()
    assert err <= NOISE * scale, f"{what}: max|a - b| = {err:.2e}, {err / scale:.1e} of the logits' scale"


def tokens(batch, length, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, TINY["vocab_size"], (batch, length), generator=g)


# --- checks shared with tests/test_variants.py ---------------------------------------------------

def check_causal(model):
    """At every cut i of a full block, changing the tokens after i leaves the logits at positions <= i unchanged
    (within NOISE) and changes the logits at every later position (so the check is not vacuous). The cuts are the
    rows of one batch: row 0 the tokens, row i + 1 the tokens changed after position i. Weights at std 0.3, float64."""
    model = visible_weights(model).double()
    T, V = model.config.block_size, model.config.vocab_size
    idx = tokens(1, T)[0]
    rows = [idx] + [torch.cat([idx[:i + 1], (idx[i + 1:] + 7) % V]) for i in range(T - 1)]
    with torch.no_grad():
        logits, _ = model(torch.stack(rows), all_logits=True)
    scale = logits[0].abs().max()
    for i in range(T - 1):
        assert_same(logits[0, :i + 1], logits[i + 1, :i + 1], f"tokens changed after position {i}")
        moved = (logits[i + 1, i + 1:] - logits[0, i + 1:]).abs().amax(-1)
        assert (moved > VISIBLE * scale).all(), f"tokens changed after position {i}: a later position kept its logits"


def check_kv_cache(model, length):
    """Cached decoding gives the logits of the full forward pass over the same window, at every step, within
    NOISE (weights at std 0.3, float64). One full forward per window, all positions' logits: the logits at
    position t of a window are those of the window cut after t (causality, proven by check_causal)."""
    model = visible_weights(model).double()
    seq = tokens(2, length)
    with torch.no_grad():
        steps = cached_logits(model, seq, prefill=3)
        full = {}   # window start -> the full forward's logits over the window's longest extent
        for t, start, logits in steps:
            if start not in full:
                end = max(u for u, s, _ in steps if s == start)
                full[start] = model(seq[:, start:end], all_logits=True)[0]
            assert_same(full[start][:, t - 1 - start], logits, f"token {t} (window from {start})")


def check_save_load(model):
    """A checkpoint round trip (state_dict + config through torch.save/load) gives identical logits."""
    buf = io.BytesIO()
    torch.save({"model": model.state_dict(), "model_args": dataclasses.asdict(model.config)}, buf)
    buf.seek(0)
    ckpt = torch.load(buf, weights_only=True)
    clone = GPT(GPTConfig(**ckpt["model_args"])).eval()
    clone.load_state_dict(ckpt["model"])
    idx = tokens(2, 16)
    assert torch.equal(model(idx, all_logits=True)[0], clone(idx, all_logits=True)[0])


def check_learns(model, steps):
    """At most `steps` AdamW steps on one batch lower the loss by more than 0.5 nats. The steps stop at the first
    loss that low, since more steps prove nothing more (most flags get there in 10-20 steps, the slowest, the
    factorized embedding and MobileLLM with Deep Thinking, in about 35 of test_model.py's 40): a model that does
    not learn still runs every step and fails."""
    model.train()
    opt = model.configure_optimizers(0.1, 1e-2, (0.9, 0.95), "cpu")
    idx = tokens(4, 17, seed=5)
    x, y = idx[:, :-1], idx[:, 1:]
    first = model(x, y)[1].item()
    for _ in range(steps):
        _, loss = model(x, y)
        if loss.item() < first - 0.5:
            break
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert model(x, y)[1].item() < first - 0.5


# --- every flag -----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", FLAGS)
def test_causality(name):
    check_causal(make_model(name))


@pytest.mark.parametrize("name", FLAGS)
def test_no_leakage_across_batch(name):
    model = visible_weights(make_model(name)).double()
    idx = tokens(3, 12)
    changed = idx.clone()
    changed[1] = (changed[1] + 3) % TINY["vocab_size"]
    with torch.no_grad():
        logits, _ = model(idx, all_logits=True)
        logits2, _ = model(changed, all_logits=True)
    assert_same(logits[[0, 2]], logits2[[0, 2]], "rows 0 and 2 after changing row 1")
    assert (logits2[1] - logits[1]).abs().max() > VISIBLE * logits.abs().max()


def cached_logits(model, seq, prefill):
    """Decode seq with the KV cache (prefill tokens at once, then one by one), re-priming the window the way
    generate() does; return, for each step, (cached logits, window start)."""
    bs = model.config.block_size
    out, start, cache = [], 0, None
    for t in range(prefill, seq.size(1) + 1):
        if t - start > bs:
            start, cache = t - 1 - max(1, bs // 2) + 1, None
        if cache is None:
            cache = KVCache(model.config.block_size)
            logits, _ = model(seq[:, start:t], cache=cache)
        else:
            logits, _ = model(seq[:, t - 1:t], cache=cache)
        out.append((t, start, logits[:, -1]))
    return out


@pytest.mark.parametrize("name", FLAGS)
def test_kv_cache_equals_full_forward(name):
    check_kv_cache(make_model(name), 2 * TINY["block_size"] + 5)


@pytest.mark.parametrize("name", ["gpt", "pgpt", "gqa", "deep_thinking", "cgpt_k3", "shishu", "shishu_bottom_top",
                                  "mobilellm_dt", "rope", "lgpt"])
def test_generate_same_tokens_with_and_without_cache(name):
    """Greedy and sampled tokens, past two re-primed windows, at std-0.3 weights in float64: the next token depends
    strongly on the context, so a cache that loses or shifts a position changes the tokens. 5 + 26 tokens: the
    window fills at 16 tokens, starts again from the recent 8 at 17 and again at 26, then decodes 4 more steps."""
    model = visible_weights(make_model(name)).double()
    prompt = tokens(2, 5)
    a = model.generate(prompt, 26, temperature=0.0, use_kv_cache=True)
    b = model.generate(prompt, 26, temperature=0.0, use_kv_cache=False)
    assert a.shape == (2, 31) and torch.equal(a, b)
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    c = model.generate(prompt, 26, temperature=1.0, top_k=5, generator=g1)
    d = model.generate(prompt, 26, temperature=1.0, top_k=5, use_kv_cache=False, generator=g2)
    assert torch.equal(c, d)


def test_pgpt_branch_drop_kv_cache_and_weights():
    model = make_model("pgpt")
    w = model.branch_weights()
    assert torch.all(w > 0) and abs(float(w.sum().detach()) - 1) < 1e-6
    assert torch.allclose(GPT(GPTConfig(**{**TINY, **FLAGS["pgpt"]})).branch_weights(), torch.tensor([0.5, 0.5]))
    full, _ = model(tokens(1, 10), all_logits=True)
    model.keep_branch = model.heaviest_branch()
    dropped, _ = model(tokens(1, 10), all_logits=True)
    assert not torch.allclose(full, dropped)
    check_kv_cache(model, 2 * TINY["block_size"] + 3)   # the kept branch alone, cached


@pytest.mark.parametrize("name", FLAGS)
def test_save_load_round_trip(name):
    check_save_load(make_model(name))


@pytest.mark.parametrize("name", FLAGS)
def test_training_lowers_loss(name):
    check_learns(make_model(name), steps=40)


def sharing_indices(stack):
    """(attn_index, mlp_index): the weight set of each layer's attention (None: none) and FFN."""
    rows = layer_sets(stack)
    return [a for a, _, _ in rows], [m for _, m, _ in rows]


def sharing_plan(cfg):
    """(attn_index, mlp_index) of the model cfg builds: the weight set each layer applies."""
    return sharing_indices(GPT(cfg).branches[0])


def test_sharing_plan_schemes():
    cfg = lambda **kw: GPTConfig(**{**TINY, "n_layer": 6, **kw})
    assert sharing_plan(cfg()) == ([0, 1, 2, 3, 4, 5], [0, 1, 2, 3, 4, 5])
    assert sharing_plan(cfg(share_group_size=2)) == ([0, 0, 1, 1, 2, 2], [0, 0, 1, 1, 2, 2])
    assert sharing_plan(cfg(share_group_size=6)) == ([0] * 6, [0] * 6)
    assert sharing_plan(cfg(share_group_size=3, share_sublayers="attn")) == ([0, 0, 0, 1, 1, 1], list(range(6)))
    assert sharing_plan(cfg(share_group_size=2, share_sublayers="mlp")) == (list(range(6)), [0, 0, 1, 1, 2, 2])
    shishu = cfg(n_attn_layers=2, share_from_layer=2, share_group_size=2)
    assert sharing_plan(shishu) == ([0, 1, None, None, None, None], [0, 1, 2, 2, 3, 3])
    bottom_top = cfg(n_attn_layers=1, n_top_attn_layers=1, share_from_layer=1, share_group_size=2)
    assert sharing_plan(bottom_top) == ([0, None, None, None, None, 1], [0, 1, 1, 2, 2, 3])
    assert sharing_plan(cfg(n_attn_layers=2, n_top_attn_layers=2)) == ([0, 1, None, None, 2, 3], list(range(6)))
    assert sharing_plan(cfg(n_attn_layers=0, n_top_attn_layers=1)) == ([None] * 5 + [0], list(range(6)))
    # repeat-2 sharing stops below the top attention layers, which keep their own weights
    assert sharing_plan(cfg(n_attn_layers=2, n_top_attn_layers=2, share_group_size=2)) == \
        ([0, 0, None, None, 1, 2], [0, 0, 1, 1, 2, 3])


def test_table10_attention_budgets_are_valid_configs():
    """Paper 001 Table 10: 10 attention layers of 30, n at the bottom and m at the top, the 20 MLP-only layers
    in between shared in pairs; the '10 + 0' row is the ShishuLM preset."""
    for bottom in (0, 2, 4, 6, 8, 10):
        top = 10 - bottom
        cfg = GPTConfig(**{**TINY, "n_layer": 30, "n_attn_layers": bottom, "n_top_attn_layers": top,
                           "share_from_layer": bottom, "share_group_size": 2})
        attn, mlp = sharing_plan(cfg)
        has_attn = [a is not None for a in attn]
        assert has_attn == [True] * bottom + [False] * 20 + [True] * top
        assert len(set(mlp)) == 10 + 10 and len(set(a for a in attn if a is not None)) == 10


def test_attention_placement_changes_the_function():
    """Same weights, same FFN per layer, attention moved from layer 1 to the top: different logits (the
    placement is not a relabelling of the same computation)."""
    bottom = make_model("gpt", n_attn_layers=2, **LLAMA)                         # A A - -, FFN 0 1 2 3
    top = make_model("gpt", n_attn_layers=1, n_top_attn_layers=1, **LLAMA)       # A - - A, FFN 0 1 2 3
    assert sharing_indices(bottom.branches[0])[1] == sharing_indices(top.branches[0])[1]
    top.load_state_dict(visible_weights(bottom).state_dict())   # the same tensors under the same names
    idx = tokens(2, 16)
    assert relative_change(bottom(idx, all_logits=True)[0], top(idx, all_logits=True)[0]) > 1e-2


def test_sharing_counts_unique_params_once():
    plain, shared = GPT(GPTConfig(**TINY)), GPT(GPTConfig(**TINY, share_group_size=2))
    emb = TINY["vocab_size"] * 16 + 16 * 16 + 2 * 16
    assert shared.get_num_params(False) - emb == (plain.get_num_params(False) - emb) // 2


def test_enhanced_residual_alphas_start_at_half_and_are_not_decayed():
    model = GPT(GPTConfig(**TINY, enhanced_residual=True))
    assert residual_alphas(model) == [(0.5, 0.5)] * 4
    opt = model.configure_optimizers(0.1, 1e-3, (0.9, 0.95), "cpu")
    no_decay = {id(p) for g in opt.param_groups if g["weight_decay"] == 0 for p in g["params"]}
    alphas = [m.alpha_logit for m in model.modules() if getattr(m, "alpha_logit", None) is not None]
    assert len(alphas) == 8 and all(id(a) in no_decay for a in alphas)


def test_enhanced_residual_init_is_a_flag():
    model = GPT(GPTConfig(**TINY, enhanced_residual=True, residual_logit_init=3.0))
    alpha = 1 / (1 + math.exp(-3.0))
    assert all(a == pytest.approx(alpha) and m == pytest.approx(alpha) for a, m in residual_alphas(model))


def test_swiglu_applies_silu_to_gate_only():
    model = GPT(GPTConfig(**TINY, mlp_type="gated", activation="silu"))
    mlp = model.branches[0].mlp[0].inner
    x = torch.randn(3, 16)
    expected = mlp.down(torch.nn.functional.silu(mlp.gate(x)) * mlp.up(x))
    torch.testing.assert_close(mlp(x), expected)


def test_rmsnorm_divides_by_the_root_mean_square():
    """norm="rmsnorm" (LLaMA; paper 001): x / sqrt(mean(x^2) + eps) * g, written out here. No mean is subtracted
    and there is no bias: the inputs have a mean far from 0, so a LayerNorm without bias would show."""
    model = make_model("rmsnorm", norm_eps=0.1)   # make_model has randomised the gains g
    norm = model.branches[0].attn[0].norm
    x = torch.randn(3, 5, 16, generator=torch.Generator().manual_seed(2)) + 2.0
    expected = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 0.1) * norm.weight
    torch.testing.assert_close(norm(x), expected)
    assert [name for name, _ in norm.named_parameters()] == ["weight"]


def test_tool_sizes_are_the_built_modules():
    """tools.sizes reads kv heads, head size and FFN hidden size from the modules model.py builds: None n_kv_head
    is n_head, mlp_hidden wins over mlp_ratio, and each agrees with a real model's first layer."""
    small = dict(block_size=8, vocab_size=16, n_layer=1, n_head=4, n_embd=32)
    cases = [(dict(), (4, 8, 128)), (dict(n_kv_head=2, pos_embedding="rope"), (2, 8, 128)),
             (dict(mlp_hidden=40, mlp_ratio=2.0, mlp_type="gated"), (4, 8, 40)), (dict(mlp_ratio=2.5), (4, 8, 80))]
    for extra, expected in cases:
        config = GPTConfig(**small, **extra)
        layer = GPT(config).branches[0]
        attn, mlp = layer.attn[0].inner, layer.mlp[0].inner
        assert (kv_heads(config), head_dim(config), ffn_hidden(config)) == expected
        assert expected == (attn.n_kv_head, attn.head_dim, mlp.up.out_features)


def test_gqa_cache_stores_only_kv_heads():
    model = make_model("gqa")
    cache = KVCache(model.config.block_size)
    model(tokens(1, 4), cache=cache)
    kv = [(entry.keys, entry.values) for entry in cache.entries.values() if entry.keys is not None]
    assert len(kv) == 4 and all(k.shape[1] == v.shape[1] == 2 for k, v in kv)


def test_cache_slot_per_application():
    # Deep Thinking (T=2, 4 layers): keys/values for the 2 thinking passes, memories after each of them;
    # the test pass reads memory only
    for name, kv, memory in [("repeat2", 4, 0), ("deep_thinking", 8, 8), ("shishu", 2, 0), ("shishu_bottom_top", 2, 0),
                             ("pgpt", 4, 0)]:
        model = make_model(name)
        cache = KVCache(model.config.block_size)
        model(tokens(1, 3), cache=cache)
        kinds = [key[0] if isinstance(key, tuple) and isinstance(key[0], str) else "kv"
                 for key, entry in cache.entries.items() if entry.keys is not None]
        assert (kinds.count("kv"), kinds.count("memory")) == (kv, memory), name


def test_lgpt_widths_and_no_config_mutation():
    cfg = GPTConfig(**{**TINY, "n_layer": 6, "n_embd": 64, "n_head": 2, "shrink_every": 2, "tie_embeddings": False})
    before = dataclasses.asdict(cfg)
    model = GPT(cfg)
    assert cfg.widths() == [64, 64, 32, 32, 16, 16] and dataclasses.asdict(cfg) == before
    assert model.ln_f.weight.shape == (16,) and model.lm_head.weight.shape == (37, 16)
    assert len(model.branches[0].shrink) == 2


# bad configs and the words of check_config's one-line refusal
INVALID = [
    (dict(n_embd=30, n_head=4), "multiple of n_head"),
    (dict(n_head=4, n_kv_head=3), "must divide n_head"),
    (dict(n_kv_head=0), "must divide n_head"),
    (dict(n_branches=3), "n_branches"),
    (dict(n_branches=2), "tie_embeddings"),
    (dict(shrink_every=1, n_embd=16, n_head=4, tie_embeddings=False), "multiple of n_head"),
    # found by a differential fuzz: accepted, then a model that ignores its input, crashes or has an FFN of 0 units
    (dict(shrink_every=1, n_embd=1, n_head=1, n_layer=2, tie_embeddings=False), "width 0 must be a positive multiple"),
    (dict(shrink_every=1, n_embd=5, n_head=1, n_layer=2, pos_embedding="rope", tie_embeddings=False),
     "even head size, got 5 \\(width 5\\)"),   # the narrowest width's head (2) was the only one checked
    (dict(n_embd=8, n_head=1, n_layer=1, mlp_ratio=0.1), "FFN of width 8 has no unit"),
    (dict(shrink_every=1, n_embd=4, n_head=1, n_layer=3, mlp_ratio=0.5, tie_embeddings=False),
     "FFN of width 1 has no unit"),
    (dict(shrink_every=2), "tie_embeddings"),
    (dict(shrink_kernel=3, shrink_every=2, tie_embeddings=False), "shrink_layer='conv'"),
    (dict(shrink_kernel=3, shrink_layer="conv"), "shrink_every > 0"),   # no shrink layer: a kernel that does nothing
    (dict(share_group_size=3), "groups of"),
    (dict(share_group_size=2, shrink_every=2, tie_embeddings=False), "width shrinking"),
    (dict(n_attn_layers=1, share_group_size=2), "mix attention"),
    (dict(n_attn_layers=5), "n_attn_layers"),
    (dict(think_steps=2, n_attn_layers=0), "Deep Thinking"),
    (dict(think_steps=1), "think_steps=1"),
    (dict(think_steps=2, n_branches=2, tie_embeddings=False), "as wide as the embedding"),
    (dict(think_steps=2, shrink_every=2, tie_embeddings=False), "as wide as the embedding"),
    (dict(think_memory="last"), "think_memory"),
    (dict(norm_placement="sandwich"), "norm_placement"),
    (dict(mlp_hidden=-4), "mlp_hidden must be >= 1"),
    (dict(embd_factor_dim=0), "embd_factor_dim must be >= 1"),
    (dict(mlp_ratio=-1.0), "mlp_ratio must be > 0"),
    (dict(init_std=-0.02), "init_std must be > 0"),
    (dict(init_std=math.inf), "init_std must be > 0 and finite"),   # NaN weights: the first eval "diverged"
    (dict(norm_eps=math.inf), "norm_eps must be > 0 and finite"),   # e.g. a config.json's Infinity: a constant model
    (dict(n_attn_layers=3, n_top_attn_layers=2), "exceeds"),
    (dict(n_top_attn_layers=1), "needs n_attn_layers"),
    (dict(n_attn_layers=1, n_top_attn_layers=-1), "n_top_attn_layers"),
    (dict(n_attn_layers=1, n_top_attn_layers=2, share_from_layer=1, share_group_size=2), "groups of"),
    (dict(n_attn_layers=1, n_top_attn_layers=1, share_from_layer=4), "share_from_layer"),
    (dict(think_eta=0.0), "think_eta"),
    # each bound of check_config a hunt dropped without a failing test: accepted, then a traceback or a wrong model
    (dict(think_steps=2, think_eta=1.5), "think_eta must be in \\(0, 1\\], got 1.5"),
    (dict(dropout=-0.1), "dropout must be in \\[0, 1\\), got -0.1"),
    (dict(n_branches=0), "n_branches must be >= 1, got 0"),   # ZeroDivisionError
    (dict(n_layer=3, n_attn_layers=-1), "n_attn_layers must be in \\[0, 3\\], got -1"),   # no attention at all
    (dict(n_layer=3, share_group_size=2, share_from_layer=-1), "share_from_layer must be in \\[0, 3\\]"),
    (dict(norm="batchnorm"), "norm"),
    (dict(pos_embedding="alibi"), "pos_embedding"),
    (dict(activation="tanh"), "activation"),
    (dict(mlp_type="moe"), "mlp_type"),
    (dict(share_sublayers="norm"), "share_sublayers"),
    (dict(init_scheme="xavier"), "init_scheme"),
    (dict(dropout=1.0), "dropout"),
    (dict(pos_embedding="rope", n_embd=18, n_head=2), "even head size"),
    (dict(mlp_hidden=32, shrink_every=2, tie_embeddings=False), "mlp_ratio"),
    (dict(shrink_every=-1, tie_embeddings=False), "shrink_every must be >= 0"),   # was: 'negative shift count'
    (dict(think_steps=-1), "think_steps must be >= 0"),
    (dict(residual_logit_init=math.nan, enhanced_residual=True), "residual_logit_init must be finite"),
    (dict(block_size=0), "block_size must be >= 1"),
    (dict(vocab_size=0), "vocab_size must be >= 1"),
    (dict(n_layer=0), "n_layer must be >= 1"),
    (dict(n_embd=0), "n_embd must be >= 1"),
    (dict(n_kv_head=3), "n_kv_head"),
    (dict(rope_base=0.0), "rope_base must be > 0"),
    (dict(share_group_size=0), "share_group_size must be >= 1"),
    (dict(shrink_kernel=0), "shrink_kernel must be >= 1"),
    (dict(shrink_layer="pool"), "shrink_layer"),
]
# the fields no value of their type makes wrong: a bool is on or off
ANY_VALUE = {"bias", "tie_embeddings", "head_bias", "enhanced_residual"}


@pytest.mark.parametrize("kwargs, message", INVALID)
def test_invalid_configs_raise_clear_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        GPTConfig(**{**TINY, **kwargs})


def test_every_field_has_a_refused_value():
    """check_config refuses a bad value of every GPTConfig field: INVALID holds a case that sets the field and
    whose refusal names it. A new field without one fails here (a string choice left out of CHOICES would take
    a default branch on a typo; a size without a range would build a broken model)."""
    refused = {name for kwargs, message in INVALID for name in kwargs if name in message}
    missing = [f.name for f in dataclasses.fields(GPTConfig) if f.name not in refused | ANY_VALUE]
    assert not missing, (f"GPTConfig fields without a refused value: {missing} (fix: check it in model.py's "
                         f"check_config or CHOICES, and add a case to tests/test_model.py's INVALID)")


def test_init_schemes_follow_their_formulas():
    """Empirical std of every attention / FFN weight (and of each of q, k, v inside the fused qkv_proj) against
    the formulas of paper 003 (3.1 and Appendix B), written out here independently of model.py's redraw."""
    L = 5
    size = dict(vocab_size=64, block_size=8, n_layer=L, n_head=4, n_kv_head=2, n_embd=128, mlp_hidden=256)
    n_res = 2 * L
    schemes = ("constant", "gpt2", "internlm", "depth_adaptive")
    for scheme, s in [(scheme, s) for scheme in schemes for s in (0.02, 0.05)]:   # s: init_std
        for mlp in (dict(), dict(mlp_type="gated", activation="silu")):
            torch.manual_seed(0)
            model = GPT(GPTConfig(**size, **mlp, init_scheme=scheme, init_std=s))
            for l in range(L):
                attn, ffn = model.branches[0].attn[l].inner, model.branches[0].mlp[l].inner
                q, k, v = attn.qkv_proj.weight.split([128, 64, 64])
                expected = dict(q=s, k=s, v=s, out=s, up=s, gate=s, down=s)
                if scheme == "gpt2":
                    expected.update(out=s / math.sqrt(n_res), down=s / math.sqrt(n_res))
                elif scheme == "internlm":
                    expected.update({"out": s / math.sqrt(n_res), "gate" if mlp else "up": s / math.sqrt(n_res)})
                elif scheme == "depth_adaptive":   # sqrt(2) s -> s and s / sqrt(2) -> s, linear in l / (L - 1)
                    t = l / (L - 1)
                    expected.update(q=s * (math.sqrt(2) + t * (1 - math.sqrt(2))),
                                    k=s * (math.sqrt(2) + t * (1 - math.sqrt(2))),
                                    v=s * (1 / math.sqrt(2) + t * (1 - 1 / math.sqrt(2))),
                                    out=s * (1 / math.sqrt(2) + t * (1 - 1 / math.sqrt(2))))
                weights = dict(q=q, k=k, v=v, out=attn.out_proj.weight, up=ffn.up.weight, down=ffn.down.weight)
                if mlp:
                    weights["gate"] = ffn.gate.weight
                for name, w in weights.items():
                    assert w.std().item() == pytest.approx(expected[name], rel=0.03), (scheme, l, name)
                    assert abs(w.mean().item()) < 0.05 * expected[name]
            assert model.tok_emb.wte.weight.std().item() == pytest.approx(s, rel=0.03)
    ends = [GPT(GPTConfig(**size, init_scheme="depth_adaptive")).branches[0].attn[l].inner for l in (0, L - 1)]
    assert ends[0].qkv_proj.weight[:128].std() > 1.3 * ends[1].qkv_proj.weight[:128].std()   # q shrinks with depth
    assert ends[0].out_proj.weight.std() < 0.8 * ends[1].out_proj.weight.std()               # out grows with depth



def test_init_schemes_give_a_shared_layer_the_depth_of_its_first_application():
    """Block-wise sharing (k = 2, 6 layers): the weight sets are applied at layers 0-1, 2-3 and 4-5, so
    depth_adaptive draws them at relative depths 0, 2/5 and 4/5 (their first layer), not 1/5, 3/5 and 1."""
    s, L = 0.02, 6
    size = dict(vocab_size=64, block_size=8, n_layer=L, n_head=4, n_embd=128, mlp_hidden=256)
    torch.manual_seed(0)
    model = GPT(GPTConfig(**size, share_group_size=2, init_scheme="depth_adaptive", init_std=s))
    attn_sets = model.branches[0].attn
    assert len(attn_sets) == 3
    for i, sub in enumerate(attn_sets):
        t = 2 * i / (L - 1)   # the first layer applying set i
        q = sub.inner.qkv_proj.weight[:128]
        out = sub.inner.out_proj.weight
        assert q.std().item() == pytest.approx(s * (math.sqrt(2) + t * (1 - math.sqrt(2))), rel=0.02), i
        assert out.std().item() == pytest.approx(s * (1 / math.sqrt(2) + t * (1 - 1 / math.sqrt(2))), rel=0.02), i

def test_depth_adaptive_counts_the_depth_within_a_branch_and_past_mlp_only_layers():
    """A layer's relative depth is its index among its branch's layers: pgpt's branches each start at depth 0
    and end at 1 (it counted n_layer over all branches), and ShishuLM's MLP-only layers count (it counted
    attention layers only, putting the top attention layer at 1/3)."""
    s, d = 0.02, 256
    size = dict(vocab_size=64, block_size=8, n_head=4, n_embd=d, init_scheme="depth_adaptive", init_std=s)

    def q_std(attention):
        return attention.inner.qkv_proj.weight[:d].std().item()

    torch.manual_seed(0)
    pgpt = GPT(GPTConfig(**size, n_layer=4, n_branches=2, tie_embeddings=False))
    for stack in pgpt.branches:   # 2 layers a branch: depths 0 and 1
        assert q_std(stack.attn[0]) == pytest.approx(s * math.sqrt(2), rel=0.03)
        assert q_std(stack.attn[1]) == pytest.approx(s, rel=0.03)
    torch.manual_seed(0)
    shishu = GPT(GPTConfig(**size, n_layer=4, n_attn_layers=1, n_top_attn_layers=1))
    top = shishu.branches[0].attn[-1]   # layer 3 of 4: depth 1
    assert q_std(top) == pytest.approx(s, rel=0.03)


def test_bias_false_leaves_no_bias_anywhere_and_init_draws_every_weight():
    """bias=False: no norm, projection or shrink layer (lgpt's Linear, cgpt's Conv1d) has a bias. GPT-2's init
    draws every weight at init_std, cgpt's convolution too (it kept PyTorch's default, 5x larger, and its bias)."""
    for name in ("gpt", "lgpt", "cgpt_k3", "pgpt", "swiglu", "factorized", "shishu", "deep_thinking"):
        model = make_model(name, bias=False)
        assert [n for n, _ in model.named_parameters() if n.endswith("bias")] == [], name
    torch.manual_seed(0)
    cgpt = GPT(GPTConfig(**{**TINY, **FLAGS["cgpt_k3"], "n_embd": 128, "n_head": 2}))
    conv = next(m for m in cgpt.modules() if isinstance(m, torch.nn.Conv1d))
    assert conv.weight.std().item() == pytest.approx(cgpt.config.init_std, rel=0.05)
    assert torch.count_nonzero(conv.bias) == 0


def test_pgpt_mixes_each_branch_by_its_own_weight():
    """The output is sum_i w_i * branch_i (paper 004, eq. 1-3), each branch's own weight: with unequal weights,
    the mixed logits equal the mix of each branch run alone (keep_branch) through the final norm and head."""
    model = make_model("pgpt").double()
    with torch.no_grad():
        model.branch_logits.copy_(torch.tensor([2.0, -1.0]))
    idx = tokens(2, 16)
    x = model.drop(model.tok_emb(idx) + model.pos_emb(torch.arange(16)))
    chunks = x.split(model.config.n_embd, dim=-1)
    w = model.branch_weights()
    mixed = sum(w[i] * model.branches[i](chunks[i]) for i in range(2))
    expected = model.head(model.ln_f(mixed))
    torch.testing.assert_close(model(idx, all_logits=True)[0], expected)


def test_pgpt_keeps_the_heaviest_branchs_term_of_the_sum():
    """keep_branch drops the other branches' terms (paper 004: the block with the lesser weight can be dropped): the
    kept one stays w_k * decoder_k(x_k). Post-norm has no final norm, so an unscaled branch (as kept before) gave
    logits 1/w_k as large, a lower temperature."""
    model = make_model("pgpt", norm_placement="post").double()
    with torch.no_grad():
        model.branch_logits.copy_(torch.tensor([2.0, -1.0]))
    model.keep_branch = model.heaviest_branch()
    idx = tokens(2, 16)
    x = model.drop(model.tok_emb(idx) + model.pos_emb(torch.arange(16)))
    kept = model.branches[0](x.split(model.config.n_embd, dim=-1)[0])
    expected = model.head(model.ln_f(model.branch_weights()[0] * kept))
    torch.testing.assert_close(model(idx, all_logits=True)[0], expected)


def test_forward_rejects_too_long_sequence():
    with pytest.raises(ValueError, match="block_size"):
        make_model("gpt")(tokens(1, 17))


def test_depth_summary_reports_effective_depth_and_unique_sublayers():
    assert depth_summary(make_model("repeat2")) == \
        "4 layers applied, from 2 unique attention and 2 unique FFN sub-layers"
    assert depth_summary(make_model("shishu")) == \
        "4 layers applied, from 2 unique attention and 3 unique FFN sub-layers"
    assert depth_summary(make_model("shishu_bottom_top")) == \
        "4 layers applied, from 2 unique attention and 3 unique FFN sub-layers"
    assert depth_summary(make_model("deep_thinking")).endswith("3 passes (Deep Thinking)")


# --- non-degeneracy: switching a technique on changes the function --------------------------------------

INIT_ONLY = {"constant_init": "init_scheme changes only the initial weights (tested by test_init_schemes)",
             "enhanced_residual_init": "residual_logit_init changes only the initial alphas (tested above)",
             "init_std": "init_std changes only the initial weights (tested by test_init_schemes)",
             "dropout": "dropout acts in training only (test_dropout_acts_in_training_only); these models evaluate"}


# each flag against the same model with the flag switched off: the config with the flag's keys at their
# GPTConfig defaults (the model's size keys n_layer, n_head, n_embd kept), except where "off" means something else
OFF = {"rope": dict(pos_embedding="none"), "sinusoidal": dict(pos_embedding="none"),
       "rope_base": dict(pos_embedding="rope", rope_base=10000.0),
       "attn_top_only": dict(n_attn_layers=None, n_top_attn_layers=0)}
SIZE_KEYS = ("n_layer", "n_head", "n_embd")
# flags that change the weights themselves (their shapes, or how many there are): the same weights cannot go
# into both models, so these are proven used by test_every_weight_is_used and counted by test_variants.py
STRUCTURAL = {"pgpt", "pgpt3", "lgpt", "cgpt_k1", "cgpt_k3", "lgpt_mlp_only", "swiglu", "gated_gelu", "gqa", "mqa", "factorized",
              "factorized_untied", "repeat2", "albert", "share_attn", "share_mlp", "mlp_ratio", "shishu",
              "shishu_bottom_top", "internlm_init", "depth_adaptive_init", "mobilellm", "mobilellm_dt",
              "post_norm_pgpt_cgpt", "paper000_baseline", "paper000_dt", "paper000_dt_first_layer", "shishu_dt_post"}
# the few flags whose change is small by nature (the default threshold is 1e-2 relative)
SMALL_CHANGE = {"gelu_tanh": 1e-5}   # GELU's tanh approximation is within 1e-3 of GELU (measured 1.8e-4 here)


def relative_change(a, b):
    return ((a - b).norm() / a.norm()).item()


def flag_off(name):
    defaults = {f.name: f.default for f in dataclasses.fields(GPTConfig)}
    off = {k: defaults[k] for k in FLAGS[name] if k not in SIZE_KEYS}
    return {**off, **OFF.get(name, {})}


def visible_weights(model, std=0.3):
    """Matmul weights at N(0, 0.3^2) (as test_huggingface.py; make_model has randomised the vectors): at init's
    0.02 attention is nearly uniform and a technique, or a leak, can move the logits by less than 1e-4."""
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(0, std)
    return model


def test_visible_weights_make_attention_far_from_uniform():
    """Why the leak checks redraw the weights: the first layer's attention, computed here from its q and k, is close
    to uniform over the visible keys at init (a leaked key gets ~1/(i+1) of the weight, like every other) and far
    from it at std 0.3. Distance: half the L1 distance to the uniform row (0 = uniform, 1 = disjoint), averaged."""
    def distance_from_uniform(model):
        T = TINY["block_size"]
        with torch.no_grad():
            sub = model.branches[0].attn[0]
            x = sub.norm(model.tok_emb(tokens(2, T)) + model.pos_emb(torch.arange(T)))
            q, k, _ = sub.inner.qkv_proj(x).view(2, T, -1, sub.inner.head_dim).transpose(1, 2).split(TINY["n_head"], 1)
            causal = torch.ones(T, T).tril().bool()
            p = (q @ k.transpose(-1, -2)).masked_fill(~causal, float("-inf")).div(math.sqrt(k.size(-1))).softmax(-1)
        return (0.5 * (p - causal / causal.sum(-1, keepdim=True)).abs().sum(-1))[..., 1:].mean().item()
    assert distance_from_uniform(make_model("gpt")) < 0.05
    assert distance_from_uniform(visible_weights(make_model("gpt"))) > 0.25


def test_flag_tables_are_consistent():
    assert STRUCTURAL | INIT_ONLY.keys() | {"gpt"} <= FLAGS.keys() and OFF.keys() | SMALL_CHANGE.keys() <= FLAGS.keys()


@pytest.mark.parametrize("name", [n for n in FLAGS if n != "gpt" and n not in INIT_ONLY and n not in STRUCTURAL])
def test_every_flag_changes_the_function(name):
    """The model with the flag and the same config with the flag off share every matmul weight (one of them
    may have a few weights more: a separate head, learned positions); switching the flag must move the
    logits by more than 1e-2 relative (SMALL_CHANGE: less for a few)."""
    on = visible_weights(make_model(name))
    off = make_model("gpt", **{**FLAGS[name], **flag_off(name)})
    mats = lambda m: {k: v.shape for k, v in m.state_dict().items() if v.dim() >= 2}   # noqa: E731
    small, large = sorted([mats(on), mats(off)], key=len)
    assert small.items() <= large.items(), f"{name}: the weights differ in shape; list it in STRUCTURAL"
    own = off.state_dict()
    off.load_state_dict({k: v for k, v in on.state_dict().items() if k in own and own[k].shape == v.shape},
                        strict=False)
    idx = tokens(2, 16)
    assert relative_change(off(idx, all_logits=True)[0], on(idx, all_logits=True)[0]) > SMALL_CHANGE.get(name, 1e-2)


@pytest.mark.parametrize("name", FLAGS)
def test_every_weight_is_used(name):
    """Every parameter gets a gradient, and so does every conv tap and every embedding column (a pgpt
    branch's half of the embedding): a weight the forward never reads is a technique implemented as a no-op."""
    model = make_model(name)
    V, T = TINY["vocab_size"], TINY["block_size"]
    idx = torch.cat([torch.arange(V), tokens(1, 3 * T - V)[0]]).view(3, T)   # every token, every position
    logits, _ = model(idx, all_logits=True)
    (logits * torch.randn_like(logits)).sum().backward()

    def unused(param_name, g):
        if g is None or not g.any():
            return True
        if g.dim() == 3:   # Conv1d (out, in, kernel): each tap
            return not g.abs().sum((0, 1)).all()
        return param_name.endswith("wte.weight") and not g.abs().sum(0).all()
    assert not [n for n, p in model.named_parameters() if unused(n, p.grad)]


def test_mlp_ratio_sets_the_hidden_width():
    """mlp_ratio is STRUCTURAL (it changes the FFN's shapes), so its proof is the width it gives."""
    ffn = make_model("mlp_ratio").branches[0].mlp[0].inner
    assert ffn.up.out_features == ffn.down.in_features == 2 * TINY["n_embd"]


def test_dropout_acts_in_training_only():
    """Also on the attention weights alone (the nn.Dropout modules set to 0: SDPA's dropout_p still acts)."""
    model = make_model("gpt", dropout=0.2)
    idx = tokens(2, 16)
    torch.testing.assert_close(model(idx)[0], model(idx)[0])
    model.train()
    assert not torch.allclose(model(idx)[0], model(idx)[0])
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    assert not torch.allclose(model(idx)[0], model(idx)[0])


@pytest.mark.parametrize("name", ["gpt", "deep_thinking", "pgpt", "cgpt_k3", "shishu"])
def test_every_dropout_acts_in_training_and_none_in_evaluation(name, monkeypatch):
    """Each nn.Dropout the model holds runs in a training forward, and every attention (Deep Thinking's passes too)
    gets dropout_p = dropout; in evaluation every dropout_p is 0. One dropout dropped (the MLP's output, the
    embeddings', a thinking pass's) left test_dropout_acts_in_training_only passing: another still acted."""
    model = make_model(name, dropout=0.3)
    ran = set()
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.register_forward_hook(lambda m, args, out: ran.add(id(m)))
    sdpa = torch.nn.functional.scaled_dot_product_attention
    dropout_ps = []

    def recording_sdpa(*args, dropout_p=0.0, **kwargs):
        dropout_ps.append(dropout_p)
        return sdpa(*args, dropout_p=dropout_p, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", recording_sdpa)
    idx = tokens(2, 16)
    model.eval()
    model(idx, idx)
    assert dropout_ps and set(dropout_ps) == {0.0}   # (an nn.Dropout in eval mode passes its input on)
    dropout_ps.clear()
    ran.clear()
    model.train()
    model(idx, idx)
    dropouts = {id(m) for m in model.modules() if isinstance(m, torch.nn.Dropout)}
    assert ran == dropouts and set(dropout_ps) == {0.3}


def test_generation_details_a_user_meets():
    """generate leaves a model in training mode as it found it (dropout went off without a word), hands on_token
    the first sequence's tokens, and decodes at block_size 1 (its window restarts from 1 token, not 0); the loss
    skips targets of -1 (nanoGPT's ignore_index); keep_heaviest_branch on one branch says so."""
    model = make_model("gpt")
    model.train()
    seen = []
    generator = torch.Generator().manual_seed(0)
    out = model.generate(torch.tensor([[1], [1]]), 5, generator=generator,
                         on_token=lambda token: seen.append(int(token)))
    assert model.training and seen == out[0, 1:].tolist() and out[0].tolist() != out[1].tolist()
    tiny = make_model("gpt", block_size=1).eval()
    with_cache = tiny.generate(torch.tensor([[1]]), 4, temperature=0)
    assert with_cache.shape == (1, 5)
    assert torch.equal(with_cache, tiny.generate(torch.tensor([[1]]), 4, temperature=0, use_kv_cache=False))
    idx = tokens(1, 8)
    targets = idx.clone()
    targets[0, 3:] = -1
    _, loss = model.eval()(idx, targets)
    logits, _ = model(idx, all_logits=True)
    expected = torch.nn.functional.cross_entropy(logits[0, :3], targets[0, :3])
    torch.testing.assert_close(loss, expected)
    assert "one branch" in model.keep_heaviest_branch()


def test_sinusoidal_positions_of_an_odd_width():
    """An odd n_embd is a valid config: the table's last column is a sine without its cosine."""
    model = make_model("gpt", pos_embedding="sinusoidal", n_embd=17, n_head=1)
    logits, _ = model(tokens(2, 16))
    assert torch.isfinite(logits).all()


@pytest.mark.parametrize("memory", ["own", "first_layer"])
def test_deep_thinking_at_the_papers_eta_changes_the_function(memory):
    """Paper 000, 3.2: T = 3, eta = 0.01, on top of enhanced residual; same weights with and without thinking,
    in float64. With own-layer memory the test pass reads M_3 = 0.98 K_1 + 0.0099 K_2 + 0.01 K_3, almost pass
    1's keys, so at initialisation the logits move only ~6e-5 relative (measured): far above float noise (the
    old no-op implementation differed by 3e-8 in float32), but small. first_layer memory moves them far more."""
    base = dict(enhanced_residual=True, norm_placement="post")
    plain = make_model("gpt", **base).double()
    model = make_model("gpt", **base, think_steps=3, think_eta=0.01, think_memory=memory).double()
    model.load_state_dict(plain.state_dict())
    idx = tokens(2, 16)
    change = relative_change(plain(idx, all_logits=True)[0], model(idx, all_logits=True)[0])
    assert change > (1e-5 if memory == "own" else 1e-3)


def test_deep_thinking_memory_modes_differ():
    own = make_model("deep_thinking")
    first = make_model("deep_thinking", think_memory="first_layer")
    first.load_state_dict(own.state_dict())
    idx = tokens(2, 16)
    assert relative_change(own(idx, all_logits=True)[0], first(idx, all_logits=True)[0]) > 1e-3


# --- reference implementations written from the equations, without the model's attention/residual code ---

def reference_forward(model, idx):
    """Paper 000's equations with explicit loops and masks, for a plain (unshared, single-branch, standard-MLP,
    LayerNorm, learned-position) model: pre- or post-norm, plain or enhanced residual, Deep Thinking with
    own-layer or first-layer memory (2.7, 2.8; eq. numbers as in the paper's text)."""
    cfg = model.config
    stack = model.branches[0]
    H, Hkv = cfg.n_head, stack.attn[0].inner.n_kv_head   # the GQA heads as built: GQA's own test checks them
    D, T = cfg.n_embd // H, idx.size(1)
    x0 = model.tok_emb.wte.weight[idx] + model.pos_emb.weight[:T]
    causal = torch.ones(T, T).tril().bool()

    def attention(q, keys, values, mask):
        scores = q @ keys.transpose(-1, -2) / math.sqrt(D)
        return scores.masked_fill(~mask, float("-inf")).softmax(-1) @ values

    def heads(t, n):
        return t.view(t.size(0), T, n, D).transpose(1, 2)

    def sublayer(sub, x, f):
        alpha = torch.sigmoid(sub.alpha_logit) if sub.alpha_logit is not None else None
        mix = (lambda a, b: a + b) if alpha is None else (lambda a, b: alpha * a + (1 - alpha) * b)
        if cfg.norm_placement == "post":
            return sub.norm(mix(x, f(x)))
        return mix(x, f(sub.norm(x)))

    def run_pass(x, p, memory):
        first = None
        for layer in range(cfg.n_layer):
            att, mlp = stack.attn[layer], stack.mlp[layer]

            def attend(h):
                nonlocal first
                W, b = att.inner.qkv_proj.weight, att.inner.qkv_proj.bias
                q = heads(h @ W[:cfg.n_embd].T + b[:cfg.n_embd], H)
                k = heads(h @ W[cfg.n_embd:cfg.n_embd + Hkv * D].T + b[cfg.n_embd:cfg.n_embd + Hkv * D], Hkv)
                v = heads(h @ W[cfg.n_embd + Hkv * D:].T + b[cfg.n_embd + Hkv * D:], Hkv)
                k, v = k.repeat_interleave(H // Hkv, 1), v.repeat_interleave(H // Hkv, 1)
                eta = cfg.think_eta
                if cfg.think_steps == 0:
                    y = attention(q, k, v, causal)
                elif p == cfg.think_steps:                      # test stage: accumulated K~_T, V~_T only
                    y = attention(q, *memory[layer], causal)
                elif p == 0:                                    # thinking pass 1: own keys, K~_1 = K_1
                    y = attention(q, k, v, causal)
                    if cfg.think_memory == "first_layer":
                        first = first or (k, v)
                        k, v = eta * k + (1 - eta) * first[0], eta * v + (1 - eta) * first[1]
                    memory[layer] = (k, v)
                else:                                           # X_t = F(Attn({K~_{t-1} || K_t}, ...))
                    mk, mv = memory[layer]
                    y = attention(q, torch.cat([mk, k], 2), torch.cat([mv, v], 2), torch.cat([causal, causal], 1))
                    memory[layer] = (eta * k + (1 - eta) * mk, eta * v + (1 - eta) * mv)
                y = y.transpose(1, 2).reshape(h.size(0), T, cfg.n_embd)
                return att.inner.out_proj(y)

            x = sublayer(att, x, attend)
            x = sublayer(mlp, x, lambda h: mlp.inner.down(F.gelu(mlp.inner.up(h))))
        return x

    memory, h = {}, x0
    for p in range(cfg.think_steps):
        h = run_pass(h, p, memory)      # thinking pass t > 1 reads the output of pass t - 1
    h = run_pass(x0, cfg.think_steps, memory)
    return model.head(model.ln_f(h))


@pytest.mark.parametrize("flags", [
    {}, dict(norm_placement="post"), dict(enhanced_residual=True),
    dict(enhanced_residual=True, norm_placement="post", n_head=4, n_kv_head=2),
    dict(think_steps=2, think_eta=0.3), dict(think_steps=3, think_eta=0.3, norm_placement="post", enhanced_residual=True),
    dict(think_steps=2, think_eta=0.3, think_memory="first_layer", n_head=4, n_kv_head=2),
    dict(think_steps=1, think_eta=0.3, think_memory="first_layer", norm_placement="post"),
], ids=lambda f: ",".join(f"{k}={v}" for k, v in f.items()) or "plain")
def test_matches_reference_equations(flags):
    model = visible_weights(make_model("gpt", **flags)).double()
    idx = tokens(2, 16)
    with torch.no_grad():
        assert_same(reference_forward(model, idx), model(idx, all_logits=True)[0], "model against the reference")


def test_post_norm_has_no_final_norm_and_head_bias_counts():
    post = GPT(GPTConfig(**TINY, norm_placement="post", head_bias=True))
    pre = GPT(GPTConfig(**TINY))
    assert isinstance(post.ln_f, torch.nn.Identity)
    assert post.get_num_params(False) == pre.get_num_params(False) - 2 * 16 + TINY["vocab_size"]


def test_post_norm_enhanced_residual_at_half_is_the_plain_residual():
    """norm(0.5 x + 0.5 F(x)) = norm(x + F(x)) up to the norm's eps: with post-norm (the authors' code) enhanced
    residual starts as exactly the plain model and can only learn a gain (1 - alpha) / alpha per sub-layer."""
    plain = GPT(GPTConfig(**TINY, norm_placement="post")).eval()
    enhanced = GPT(GPTConfig(**TINY, norm_placement="post", enhanced_residual=True)).eval()
    enhanced.load_state_dict(plain.state_dict(), strict=False)
    idx = tokens(2, 16)
    torch.testing.assert_close(enhanced(idx, all_logits=True)[0], plain(idx, all_logits=True)[0], rtol=1e-4, atol=1e-4)


def test_sinusoidal_positions_follow_attention_is_all_you_need():
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d)), written out with loops,
    and GPT.forward adds exactly that to the token embedding: the first layer's input."""
    n, d = 12, 16
    expected = torch.tensor([[math.sin(pos / 10000 ** (j / d)) if j % 2 == 0 else math.cos(pos / 10000 ** ((j - 1) / d))
                              for j in range(d)] for pos in range(n)])
    torch.testing.assert_close(sinusoidal_positions(n, d), expected, rtol=0, atol=1e-5)
    model = make_model("sinusoidal")
    idx = tokens(1, 16)
    inputs = []

    def record_input(layer, args):
        inputs.append(args[0])
    model.branches[0].layers[0].register_forward_pre_hook(record_input)
    model(idx)
    torch.testing.assert_close(inputs[0], model.tok_emb(idx) + sinusoidal_positions(16, 16))


@pytest.mark.parametrize("use_kv_cache", [False, True])
def test_generation_windows_fill_block_size_then_keep_the_recent_half(use_kv_cache):
    """The window grows to block_size (16) tokens; the next token starts a new window of the recent
    block_size // 2 (the plain path feeds it whole, the cached path primes the cache with it)."""
    model, seen = make_model("gpt"), []
    model.register_forward_pre_hook(lambda module, args: seen.append(args[0].size(1)))
    with torch.no_grad():
        model.generate(tokens(1, 1), 40, temperature=0.0, use_kv_cache=use_kv_cache)
    if use_kv_cache:
        assert seen[:17] == [1] * 16 + [8] and seen[17:25] == [1] * 8 and seen[25] == 8
    else:
        assert seen[:16] == list(range(1, 17)) and seen[16:25] == list(range(8, 17)) and max(seen) == 16
