"""Paper 003 (PanGu-pi Pro) formulas: parameter inheritance (tools/pangu/inherit.py), data refining for multi-round
training (tools/pangu/refine.py + train.py --data_segments) and the batch-size / learning-rate rule (tools/pangu/scaled_lr.py).
Tiny models on the synthetic dataset of conftest.py; the whole file runs in a few seconds."""
import dataclasses
import json
import math
import os
import re

import numpy as np
import pytest
import torch

from conftest import tiny_config, write_token_dataset
from model import GPT, GPTConfig
from tools.pangu import inherit, refine
from tools.pangu.scaled_lr import scaled_lr
from tools.sizes import ffn_hidden
import train
from safety_net import dataset
from safety_net.checkpoint import load_checkpoint, load_model
from safety_net.configurator import UserError, load_config
from test_checkpoint import visible


def run_train(config, callback=None):
    return train.train({**train.DEFAULTS, **config}, explicit=set(config), callback=callback)


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    """A briefly trained 4-layer source model (width 32, 4 heads of 8) and its data dir."""
    root = tmp_path_factory.mktemp("pangu")
    data = write_token_dataset(root / "data")
    cfg = dict(tiny_config(data, root / "big"), n_layer=4, n_head=4, n_embd=32, max_iters=60, eval_interval=60,
               log_interval=100)
    run_train(cfg)
    return str(root / "big"), data, cfg


def logits(model, x):
    return model.eval()(x, all_logits=True)[0]


# --- 4.1 batch size & learning rate ------------------------------------------------------------------

def test_scaled_lr_rule():
    assert scaled_lr(48, 12, 1e-3) == pytest.approx(2e-3)           # r = 0.5: 4x batch -> 2x lr
    assert scaled_lr(48, 12, 1e-3, r=1.0) == pytest.approx(4e-3)    # linear rule
    assert scaled_lr(3, 12, 1e-3) == pytest.approx(5e-4)            # smaller batch -> smaller lr
    assert scaled_lr(4096, 4096, 3e-4) == 3e-4 and scaled_lr(8, 1, 1e-3, r=0) == 1e-3
    with pytest.raises(ValueError, match="positive"):
        scaled_lr(0, 12, 1e-3)


def test_scaled_lr_in_a_config_file(tmp_path):
    path = tmp_path / "lr.py"
    path.write_text("from tools.pangu.scaled_lr import scaled_lr\n"
                    "batch_size = 48\n"
                    "learning_rate = scaled_lr(batch_size, 12, 1e-3)\n")
    config, explicit = load_config(train.DEFAULTS, [str(path)])
    assert config["learning_rate"] == pytest.approx(2e-3) and config["batch_size"] == 48
    assert explicit == {"batch_size", "learning_rate"}   # the imported helper is not a config key


# --- 3.2 parameter inheritance -------------------------------------------------------------------------

SAME_SHAPE_BASE = dict(block_size=16, vocab_size=16, n_layer=3, n_head=4, n_embd=32)
# the flags inheritance is checked on (tests/test_support.py reads this table)
SAME_SHAPE = [
    dict(),
    dict(n_kv_head=2, mlp_type="gated", activation="silu", norm="rmsnorm", bias=False, pos_embedding="rope"),
    dict(embd_factor_dim=8, enhanced_residual=True),
    dict(tie_embeddings=False, pos_embedding="sinusoidal"),
    dict(norm_eps=0.1, pos_embedding="rope", rope_base=500.0, mlp_hidden=48, head_bias=True, enhanced_residual=True,
         residual_logit_init=1.0),
    dict(mlp_ratio=2.0, think_steps=2, think_eta=0.3, think_memory="first_layer"),
]


@pytest.mark.parametrize("kw", SAME_SHAPE)
def test_same_shape_inheritance_reproduces_logits_exactly(kw):
    torch.manual_seed(0)
    cfg = GPTConfig(**SAME_SHAPE_BASE, **kw)
    src = GPT(cfg)
    small, plan = inherit.inherit(src, cfg, "loss", "taylor")   # nothing to drop: no data needed
    x = torch.randint(0, 16, (2, 16))
    assert plan.layers == [0, 1, 2]
    assert torch.equal(logits(small, x), logits(src, x))


def test_first_last_keeps_a_prefix_and_a_suffix_and_drops_one_middle_block():
    assert inherit.first_last_layers(6, 3) == [0, 1, 5]
    assert inherit.first_last_layers(32, 21) == list(range(11)) + list(range(22, 32))
    assert inherit.first_last_layers(12, 4) == [0, 1, 10, 11]
    assert inherit.first_last_layers(5, 2) == [0, 4] and inherit.first_last_layers(5, 1) == [0]
    for n in range(1, 13):
        for k in range(1, n + 1):
            kept = inherit.first_last_layers(n, k)
            dropped = sorted(set(range(n)) - set(kept))
            assert len(kept) == k and kept[0] == 0 and (k == 1 or kept[-1] == n - 1)
            assert dropped == list(range(dropped[0], dropped[0] + len(dropped))) if dropped else k == n  # contiguous
            assert kept[:(k + 1) // 2] == list(range((k + 1) // 2))    # the prefix gets the odd one


def test_spread_keeps_both_ends_and_drops_the_middle_evenly():
    assert inherit.spread_layers(6, 3) == [0, 2, 5]
    assert inherit.spread_layers(12, 4) == [0, 4, 7, 11]
    assert inherit.spread_layers(5, 2) == [0, 4] and inherit.spread_layers(5, 1) == [0]
    for n in range(2, 13):
        for k in range(2, n + 1):
            kept = inherit.spread_layers(n, k)
            assert len(kept) == k and kept[0] == 0 and kept[-1] == n - 1


def test_loss_ranking_drops_a_layer_that_does_nothing():
    torch.manual_seed(0)
    cfg = GPTConfig(block_size=16, vocab_size=16, n_layer=4, n_head=4, n_embd=32)
    src = GPT(cfg)
    with torch.no_grad():   # layer 2 writes nothing into the residual stream: skipping it changes nothing
        for sub in (src.branches[0].attn[2], src.branches[0].mlp[2]):
            proj = sub.inner.out_proj if hasattr(sub.inner, "out_proj") else sub.inner.down
            proj.weight.zero_()
            proj.bias.zero_()
        for sub in src.branches[0].attn:   # make the other layers matter
            sub.inner.out_proj.weight.mul_(20)
    xs = [torch.randint(0, 16, (4, 16)) for _ in range(2)]
    batches = [(x, logits(src, x).argmax(-1)) for x in xs]   # targets the full model gets right
    deltas = inherit.layer_importance(src, batches)
    assert deltas[2].abs() < 1e-6 and (deltas[[0, 1, 3]] > 1e-3).all()
    assert inherit.choose_layers(src, 3, "loss", batches) == [0, 1, 3]


def random_batches(n, batch_size, block_size, vocab_size, seed=1):
    gen = torch.Generator().manual_seed(seed)
    return [(torch.randint(0, vocab_size, (batch_size, block_size), generator=gen),
             torch.randint(0, vocab_size, (batch_size, block_size), generator=gen)) for _ in range(n)]


def test_inherit_keeps_the_layers_whose_removal_costs_most():
    """--layers=loss, recomputed here: Delta_l = the calibration loss with layer l skipped (its two sub-layers made the
    identity by forward hooks) minus the full model's; the kept layers are the n_layer largest, in order, and the
    small model computes what the source computes with the others skipped."""
    src = visible(GPT(GPTConfig(block_size=8, vocab_size=16, n_layer=5, n_head=2, n_embd=16)))
    batches = random_batches(2, 3, 8, 16)
    stack = src.branches[0]

    def identity(module, args, out):
        return args[0]

    @torch.no_grad()
    def skipping(layers, x, y=None):
        handles = [sub.register_forward_hook(identity) for l in layers for sub in (stack.attn[l], stack.mlp[l])]
        try:
            return src(x, y, all_logits=True)
        finally:
            for h in handles:
                h.remove()

    def loss_without(layers):
        return sum(skipping(layers, x, y)[1].item() for x, y in batches) / len(batches)

    deltas = [loss_without([l]) - loss_without([]) for l in range(5)]
    keep = sorted(sorted(range(5), key=lambda l: -deltas[l])[:3])
    small, plan = inherit.inherit(src, inherit.target_config(src.config, n_layer=3), "loss", "taylor", batches)
    assert plan.layers == keep and keep != inherit.first_last_layers(5, 3)
    x = batches[0][0]
    dropped = [l for l in range(5) if l not in keep]
    torch.testing.assert_close(logits(small, x), skipping(dropped, x)[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("criterion", ["l1", "l2", "taylor"])
def test_inherit_keeps_the_units_each_criterion_ranks_highest(criterion):
    """Width pruning, recomputed here for a GPT-2-style source (biases, tied embedding, learned positions, 4 heads of
    8): each weight's importance |w|, w^2 or the sum over the calibration batches of |w * dL/dw|; an FFN neuron's score
    sums it over its row of up (and bias) and its column of down; a head's over its q, k and v rows of qkv_proj (and
    biases) and its columns of out_proj; a residual channel's over its entry of everything that reads or writes the
    stream. The top-scored ones are kept, and the small model holds the source's weights at exactly those indices."""
    cfg = GPTConfig(block_size=8, vocab_size=16, n_layer=2, n_head=4, n_embd=32, mlp_hidden=24)
    src = visible(GPT(cfg))
    batches = random_batches(2, 3, 8, 16)
    small, plan = inherit.inherit(src, inherit.target_config(cfg, n_embd=16, hidden=10), "first_last", criterion,
                                  batches)
    params = dict(src.named_parameters())
    if criterion == "taylor":
        imp = {n: torch.zeros_like(p) for n, p in params.items()}
        for x, y in batches:
            src.zero_grad()
            src(x, y)[1].backward()
            for n, p in params.items():
                imp[n] += (p.detach() * p.grad).abs()
    else:
        imp = {n: p.detach().abs() if criterion == "l1" else p.detach() ** 2 for n, p in params.items()}
    channel = imp["tok_emb.wte.weight"].sum(0) + imp["pos_emb.weight"].sum(0) + imp["ln_f.weight"] + imp["ln_f.bias"]
    ffn = []
    heads = []
    for l in range(2):
        a = f"branches.0.attn.{l}."
        m = f"branches.0.mlp.{l}."
        qkv = imp[a + "inner.qkv_proj.weight"]   # rows: q | k | v
        qkv_bias = imp[a + "inner.qkv_proj.bias"]
        out = imp[a + "inner.out_proj.weight"]
        up = imp[m + "inner.up.weight"]
        down = imp[m + "inner.down.weight"]
        for norm in (a + "norm", m + "norm"):
            channel = channel + imp[norm + ".weight"] + imp[norm + ".bias"]
        channel = channel + qkv.sum(0) + out.sum(1) + imp[a + "inner.out_proj.bias"] + up.sum(0) + down.sum(1) \
            + imp[m + "inner.down.bias"]
        ffn.append(up.sum(1) + imp[m + "inner.up.bias"] + down.sum(0))
        score = [sum(qkv[32 * part + 8 * h:32 * part + 8 * (h + 1)].sum()
                     + qkv_bias[32 * part + 8 * h:32 * part + 8 * (h + 1)].sum() for part in range(3))
                 + out[:, 8 * h:8 * (h + 1)].sum() for h in range(4)]
        heads.append(torch.stack(score))

    def best(scores, k):
        return sorted(torch.argsort(scores, descending=True)[:k].tolist())

    assert plan.channels.tolist() == best(channel, 16)
    assert [f.tolist() for f in plan.ffn] == [best(s, 10) for s in ffn]
    assert [q.tolist() for q in plan.q_heads] == [k.tolist() for k in plan.kv_heads] == [best(s, 2) for s in heads]
    ch = plan.channels
    sd = src.state_dict()
    torch.testing.assert_close(small.tok_emb.wte.weight, sd["tok_emb.wte.weight"][:, ch], rtol=0, atol=0)
    up = small.branches[0].mlp[1].inner.up.weight
    torch.testing.assert_close(up, sd["branches.0.mlp.1.inner.up.weight"][plan.ffn[1]][:, ch], rtol=0, atol=0)
    q_cols = torch.cat([torch.arange(8 * h, 8 * (h + 1)) for h in plan.q_heads[0].tolist()])
    out_proj = small.branches[0].attn[0].inner.out_proj.weight
    torch.testing.assert_close(out_proj, sd["branches.0.attn.0.inner.out_proj.weight"][ch][:, q_cols], rtol=0, atol=0)


def test_gqa_head_and_ffn_slicing_is_exact():
    """The small attention / FFN equals the source one with the dropped heads / neurons masked out, on an
    input that is zero in the dropped residual channels (checks the q-to-kv-group mapping of GQA)."""
    torch.manual_seed(0)
    src_cfg = GPTConfig(block_size=16, vocab_size=16, n_layer=1, n_head=8, n_kv_head=4, n_embd=64,
                        mlp_type="gated", activation="silu", pos_embedding="rope")
    dst_cfg = inherit.target_config(src_cfg, n_embd=32, n_kv_head=2)   # 4 query heads in 2 groups of 2
    assert (dst_cfg.n_head, dst_cfg.n_kv_head, ffn_hidden(dst_cfg)) == (4, 2, 128)
    src = GPT(src_cfg).eval()
    scores = {"channel": torch.rand(64), "ffn": [torch.rand(256)], "kv": [torch.tensor([0., 5, 0, 5])],
              "q": [torch.tensor([0., 0, 0, 0, 1, 0, 0, 1])]}
    plan = inherit.width_plan(scores, src_cfg, dst_cfg)
    assert plan.kv_heads[0].tolist() == [1, 3] and plan.q_heads[0].tolist() == [2, 3, 6, 7]
    small = inherit.build(dst_cfg, inherit.extract(src.state_dict(), src_cfg, plan))
    ch = plan.channels
    x_small = torch.randn(2, 16, 32)
    x_full = torch.zeros(2, 16, 64)
    x_full[..., ch] = x_small
    src_attn, small_attn = src.branches[0].attn[0].inner, small.branches[0].attn[0].inner
    src_mlp, small_mlp = src.branches[0].mlp[0].inner, small.branches[0].mlp[0].inner
    with torch.no_grad():
        dropped_heads = [h for h in range(8) if h not in plan.q_heads[0].tolist()]
        src_attn.out_proj.weight[:, inherit.head_rows(torch.tensor(dropped_heads), 8)] = 0
        dropped = torch.ones(256, dtype=torch.bool)
        dropped[plan.ffn[0]] = False
        src_mlp.down.weight[:, dropped] = 0
        torch.testing.assert_close(small_attn(x_small), src_attn(x_full)[..., ch])
        torch.testing.assert_close(small_mlp(x_small), src_mlp(x_full)[..., ch])


@pytest.mark.parametrize("layers,neurons", [("first_last", "l1"), ("spread", "l2"), ("loss", "taylor"),
                                            ("first_last", "learned")])
def test_inherited_small_model_starts_below_random_init(big, layers, neurons):
    out_dir, data, _ = big
    model, _ = load_model(out_dir)
    dst = inherit.target_config(model.config, n_layer=2, n_embd=16)
    small, plan = inherit.inherit(model, dst, layers, neurons, inherit.calibration_batches(data, 4, 8, 16, 0),
                                  mask_steps=40)
    assert len(plan.layers) == 2 and small.get_num_params() < model.get_num_params() / 3
    torch.manual_seed(0)
    held_out = inherit.calibration_batches(data, 4, 8, 16, 1000)
    assert inherit.calibration_loss(small, held_out) < inherit.calibration_loss(GPT(dst), held_out) - 0.2


def test_mask_hooks_with_binary_gates_remove_the_gated_structures():
    """A gate of 0 on an FFN neuron, a query head or a kv group computes exactly what the model computes with
    that neuron's / those heads' columns of down / out_proj zeroed (which test_gqa_head_and_ffn_slicing_is_exact
    shows equal to slicing them away); residual-channel gates of 1 change nothing."""
    torch.manual_seed(0)
    cfg = GPTConfig(block_size=16, vocab_size=16, n_layer=2, n_head=8, n_kv_head=4, n_embd=64, mlp_hidden=48,
                    mlp_type="gated", activation="silu", pos_embedding="rope", bias=False, norm="rmsnorm")
    model, zeroed = GPT(cfg).eval(), GPT(cfg).eval()
    zeroed.load_state_dict(model.state_dict())
    gates = {(inherit.CH, None): torch.ones(64)}
    with torch.no_grad():
        for l, (dead_ffn, dead_q, dead_kv) in enumerate([([1, 5, 40], [0, 7], [2]), ([0, 47], [3], [0, 1])]):
            gates[(inherit.FFN, l)] = torch.ones(48).index_fill(0, torch.tensor(dead_ffn), 0.0)
            gates[("q", l)] = torch.ones(8).index_fill(0, torch.tensor(dead_q), 0.0)
            gates[("kv", l)] = torch.ones(4).index_fill(0, torch.tensor(dead_kv), 0.0)
            dead_heads = torch.tensor(sorted(set(dead_q) | {2 * g + i for g in dead_kv for i in range(2)}))
            zeroed.branches[0].mlp[l].inner.down.weight[:, dead_ffn] = 0
            zeroed.branches[0].attn[l].inner.out_proj.weight[:, inherit.head_rows(dead_heads, 8)] = 0
    x = torch.randint(0, 16, (2, 16))
    plain = logits(model, x)
    handles = inherit.mask_hooks(model, gates)
    try:
        masked = logits(model, x)
    finally:
        for h in handles:
            h.remove()
    torch.testing.assert_close(masked, logits(zeroed, x))
    assert not torch.allclose(plain, masked) and torch.equal(logits(model, x), plain)   # hooks removed


def test_learned_masks_drop_neurons_that_do_nothing(big):
    """Half of the FFN neurons of every layer write nothing (their down columns are zero): the learned masks
    keep the other half."""
    out_dir, data, _ = big
    model, _ = load_model(out_dir)
    hidden = ffn_hidden(model.config)
    dead = torch.arange(hidden) % 2 == 1
    with torch.no_grad():
        for sub in model.branches[0].mlp:
            sub.inner.down.weight[:, dead] = 0
    dst = inherit.target_config(model.config, hidden=hidden // 2)
    torch.manual_seed(0)
    scores = inherit.learned_mask_scores(model, dst, inherit.calibration_batches(data, 4, 8, 16, 0), steps=60)
    assert all(p.requires_grad for p in model.parameters())     # the source is left as it was
    for layer_scores in scores[inherit.FFN]:
        kept = inherit.top_k(layer_scores, hidden // 2)
        assert (~dead[kept]).float().mean() > 0.8   # chance: 0.5
    assert (scores[inherit.CH] == 0).all() and all((q == 0).all() for q in scores["q"])   # nothing else shrinks


def test_mha_to_gqa_mean_pools_kv_heads_within_each_group():
    torch.manual_seed(0)
    cfg = GPTConfig(block_size=16, vocab_size=16, n_layer=2, n_head=4, n_embd=32, pos_embedding="rope")
    src = GPT(cfg).eval()
    dst = inherit.target_config(cfg, n_kv_head=2)           # MHA -> GQA, groups of 2 (Appendix A)
    small, plan = inherit.inherit(src, dst, "loss", "taylor")   # nothing pruned: no data needed
    assert plan.kv_pool == 2 and small.config.n_kv_head == 2
    for l in range(2):
        w_src = src.branches[0].attn[l].inner.qkv_proj
        w_dst = small.branches[0].attn[l].inner.qkv_proj
        for part in (1, 2):   # k rows, then v rows: 4 heads of 8 -> 2 heads of 8, each the mean of two neighbours
            heads = w_src.weight[32 * part:32 * (part + 1)].view(4, 8, 32)
            torch.testing.assert_close(w_dst.weight[32 + 16 * (part - 1):32 + 16 * part].view(2, 8, 32),
                                       heads.view(2, 2, 8, 32).mean(1))
            torch.testing.assert_close(w_dst.bias[32 + 16 * (part - 1):32 + 16 * part].view(2, 8),
                                       w_src.bias[32 * part:32 * (part + 1)].view(2, 2, 8).mean(1))
        torch.testing.assert_close(w_dst.weight[:32], w_src.weight[:32])   # queries untouched
    # a source whose neighbouring kv heads are already equal is a GQA model: pooling reproduces it exactly
    with torch.no_grad():
        for sub in src.branches[0].attn:
            w = sub.inner.qkv_proj.weight
            for part in (1, 2):
                rows = w[32 * part:32 * (part + 1)].view(2, 2, 8, 32)
                rows[:, 1] = rows[:, 0]
            sub.inner.qkv_proj.bias[32:].view(4, 2, 8)[:, 1] = sub.inner.qkv_proj.bias[32:].view(4, 2, 8)[:, 0]
    small, _ = inherit.inherit(src, dst, "loss", "taylor")
    x = torch.randint(0, 16, (2, 16))
    torch.testing.assert_close(logits(small, x), logits(src, x))


def test_mha_to_gqa_with_width_pruning(big):
    out_dir, data, _ = big
    model, _ = load_model(out_dir)                           # 4 heads, MHA
    dst = inherit.target_config(model.config, n_layer=2, n_embd=16, n_kv_head=1)   # 2 heads sharing one kv head
    small, plan = inherit.inherit(model, dst, "first_last", "taylor", inherit.calibration_batches(data, 4, 8, 16, 0))
    assert plan.kv_pool == 2 and [len(h) for h in plan.kv_heads] == [2, 2] and small.config.n_kv_head == 1
    held_out = inherit.calibration_batches(data, 4, 8, 16, 1000)
    torch.manual_seed(0)
    assert inherit.calibration_loss(small, held_out) < inherit.calibration_loss(GPT(dst), held_out) - 0.2


def gpt2_meta(vocab_size=50257):
    return {"tokenizer": "gpt2", "vocab_size": vocab_size}


def compact_meta(ids):
    """prepare.py's meta.json of a compact vocabulary: GPT-2 ids of all tokens but the last, <|endoftext|>."""
    return {"dataset": "toy_compact", "tokenizer": "compact", "vocab_size": len(ids) + 1, "gpt2_ids": list(ids)}


@pytest.mark.parametrize("kw", [dict(), dict(tie_embeddings=False), dict(embd_factor_dim=8)])
def test_compact_vocabulary_rows_follow_the_gpt2_ids(kw):
    """The inherited compact model computes the source's logits on the mapped tokens, restricted to the
    compact vocabulary's columns (paper 003: a 48k model inherits from a 100k one)."""
    torch.manual_seed(0)
    cfg = GPTConfig(block_size=8, vocab_size=50304, n_layer=2, n_head=2, n_embd=16, **kw)   # padded GPT-2 size
    src = GPT(cfg).eval()
    ids = [0, 1, 2, 100, 256, 50255, 13, 7000]
    rows = inherit.vocab_rows(gpt2_meta(), compact_meta(ids))
    assert rows.tolist() == ids + [50256]
    dst = inherit.target_config(cfg, vocab_size=len(rows))
    small, plan = inherit.inherit(src, dst, "loss", "taylor", vocab=rows)
    assert small.config.vocab_size == 9 and torch.equal(plan.vocab, rows)
    x = torch.randint(0, 9, (2, 8))
    torch.testing.assert_close(logits(small, x), logits(src, rows[x])[..., rows])
    # a smaller compact vocabulary inherits from a larger one through the GPT-2 ids
    sub = inherit.vocab_rows(compact_meta(ids), compact_meta([13, 0, 7000]))
    assert sub.tolist() == [6, 0, 7, 8]
    with pytest.raises(ValueError, match="not in the source's vocabulary"):
        inherit.vocab_rows(compact_meta(ids), compact_meta([13, 99]))
    with pytest.raises(ValueError, match="only GPT-2-based"):
        inherit.vocab_rows({"tokenizer": "char", "vocab_size": 65}, compact_meta(ids))
    with pytest.raises(ValueError, match="vocab_size"):
        inherit.inherit(src, cfg, vocab=rows)


def test_inherit_cli_into_a_compact_vocabulary(tmp_path, capsys):
    """--target_data_dir: the output has the compact vocabulary and records the target dataset."""
    from safety_net.fileio import atomic_save
    torch.manual_seed(0)
    cfg = GPTConfig(block_size=8, vocab_size=50257, n_layer=3, n_head=2, n_embd=16)
    src_data, dst_data = tmp_path / "gpt2data", tmp_path / "compact"
    for folder, meta in ((src_data, gpt2_meta()), (dst_data, compact_meta([5, 6, 7, 300]))):
        os.makedirs(folder)
        (folder / "meta.json").write_text(json.dumps(meta))
    atomic_save({"model": GPT(cfg).state_dict(), "model_args": dataclasses.asdict(cfg), "iter_num": 10,
                 "config": {}, "dataset": "gpt2data", "data_dir": str(src_data)}, str(tmp_path / "big" / "ckpt.pt"))
    inherit.main([f"--init_from={tmp_path / 'big'}", f"--out_dir={tmp_path / 'small'}", "--n_layer=2",
                  f"--target_data_dir={dst_data}", "--layers=first_last"])
    assert "vocabulary: 50257 -> 5 tokens" in capsys.readouterr().out
    model, ckpt = load_model(str(tmp_path / "small"))
    assert model.config.vocab_size == 5 and ckpt["data_dir"] == str(dst_data) and ckpt["dataset"] == "toy_compact"
    assert ckpt["inherit"]["vocab"] == [5, 6, 7, 300, 50256] and ckpt["inherit"]["layers"] == [0, 2]
    # train.py takes vocab_size 5 from the compact dataset and copies every inherited tensor
    ids = np.random.default_rng(0).integers(0, 5, 2000).astype(np.uint16)
    ids.tofile(dst_data / "train.bin")
    ids[:500].tofile(dst_data / "val.bin")
    run_cfg = {k: v for k, v in tiny_config(dst_data, tmp_path / "run").items()
               if k not in ("n_layer", "n_head", "n_embd")}   # the shape comes from the inherited checkpoint
    run_train(dict(run_cfg, block_size=8, init_from=str(tmp_path / "small" / "ckpt.pt"), max_iters=2, eval_interval=2))
    n_tensors = len(ckpt["model"])
    assert f"initialized {n_tensors}/{n_tensors} tensors" in capsys.readouterr().out


def test_inherit_into_a_compact_vocabulary_from_a_nanogpt_gpt2_run(tmp_path, capsys):
    """A nanoGPT GPT-2 run's data folder holds its token files only; inherit calibrates on it as GPT-2's tokens,
    and --target_data_dir refused it ('meta.json is missing, so its tokenizer is unknown'; a hunt)."""
    from test_nanogpt import ARGS, write_nanogpt_checkpoint
    write_nanogpt_checkpoint(str(tmp_path / "out-gpt2"), dict(ARGS, vocab_size=50304))
    src_data, dst_data = tmp_path / "shakespeare", tmp_path / "compact"
    os.makedirs(src_data)
    np.random.default_rng(0).integers(0, 50257, 400).astype(np.uint16).tofile(src_data / "train.bin")
    os.makedirs(dst_data)
    (dst_data / "meta.json").write_text(json.dumps(compact_meta([5, 6, 7, 300])))
    inherit.main([f"--init_from={tmp_path / 'out-gpt2'}", f"--out_dir={tmp_path / 'small'}", "--n_layer=1",
                  f"--target_data_dir={dst_data}", f"--data_dir={src_data}", "--layers=first_last"])
    assert "vocabulary: 50304 -> 5 tokens" in capsys.readouterr().out


def test_inherit_records_the_data_dir_a_source_without_one_is_given(tmp_path, capsys):
    """A source that records no dataset (tools.huggingface.convert import's): --data_dir, as inherit's own error
    asks, was checked and calibrated on, but the output recorded none and its next command named none, so train.py
    read the default dataset's tokens and refused them (a hunt). Now the output records it."""
    from safety_net.fileio import atomic_save
    from conftest import write_char_checkpoint
    torch.manual_seed(0)
    chars = [chr(48 + i) for i in range(40)]
    cfg = GPTConfig(block_size=8, vocab_size=len(chars), n_layer=3, n_head=2, n_embd=16)
    write_char_checkpoint(tmp_path, GPT(cfg), chars, "run")   # tmp_path/data: its dataset
    ckpt = torch.load(tmp_path / "run" / "ckpt.pt", weights_only=True)
    imported = {k: v for k, v in ckpt.items() if k not in ("dataset", "data_dir")}
    atomic_save(imported, str(tmp_path / "imported" / "ckpt.pt"))
    inherit.main([f"--init_from={tmp_path / 'imported'}", f"--out_dir={tmp_path / 'small'}", "--n_layer=2",
                  f"--data_dir={tmp_path / 'data'}", "--layers=first_last"])
    assert f"--data_dir={tmp_path / 'data'})" in capsys.readouterr().out
    _, small = load_model(str(tmp_path / "small"))
    assert small["data_dir"] == str(tmp_path / "data") and small["dataset"] == "tinychars"


def test_inherit_cli_then_train_continues_from_it(big, tmp_path, capsys):
    out_dir, data, cfg = big
    small_dir = str(tmp_path / "small")
    inherit.main([f"--init_from={out_dir}", f"--out_dir={small_dir}", "--n_layer=2", "--n_embd=16", "--layers=loss",
                  "--calib_batches=2"])
    printed = capsys.readouterr().out
    assert "calibration loss" in printed and f"--init_from={small_dir}/ckpt.pt --data_dir={data})" in printed
    ckpt = load_checkpoint(small_dir)
    assert ckpt["iter_num"] == 0 and ckpt["optimizer"] is None and ckpt["inherit"]["neurons"] == "taylor"
    assert (ckpt["model_args"]["n_layer"], ckpt["model_args"]["n_embd"], ckpt["model_args"]["n_head"]) == (2, 16, 2)
    assert ckpt["tokenizer_id"] is not None and ckpt["tokenizer_id"] == load_checkpoint(out_dir)["tokenizer_id"]
    first = {}

    def grab(event, info):
        if event == "eval" and not first:
            first["val"] = info["val_loss"]

    shape_keys = ("n_layer", "n_head", "n_embd")   # the shape comes from the inherited checkpoint
    run_cfg = {k: v for k, v in cfg.items() if k not in shape_keys}
    summary = run_train(dict(run_cfg, out_dir=str(tmp_path / "cont"), init_from=os.path.join(small_dir, "ckpt.pt"),
                             max_iters=4, eval_interval=4), callback=grab)
    out = capsys.readouterr().out
    n_tensors = len(ckpt["model"])
    assert f"initialized {n_tensors}/{n_tensors} tensors" in out
    assert summary["model_args"]["n_layer"] == 2 and summary["model_args"]["n_embd"] == 16
    assert first["val"] < 2.6   # starts from the inherited weights, not from ln(16) = 2.77
    with pytest.raises(UserError, match="weights only"):
        run_train(dict(run_cfg, out_dir=small_dir, init_from="resume"))


@pytest.mark.parametrize("kw,words", [
    (dict(n_branches=2, tie_embeddings=False), "pgpt"),
    (dict(shrink_every=1, tie_embeddings=False), "shrinking"),
    (dict(share_group_size=2), "layer sharing"),
    (dict(n_attn_layers=1), "MLP-only"),
])
def test_unsupported_sources_are_refused(kw, words):
    src = GPT(GPTConfig(block_size=8, vocab_size=16, n_layer=2, n_head=2, n_embd=16, **kw))
    with pytest.raises(ValueError, match=words) as e:
        inherit.inherit(src, src.config)
    # only its own reason: a pgpt source was also said to have MLP-only layers (n_attn_layers=None; a hunt)
    assert str(e.value).count("(") - str(e.value).count("(fix:") == 1, str(e.value)


@pytest.mark.parametrize("kw,words", [
    (dict(n_embd=20), "whole number of heads"),
    (dict(n_embd=16, n_head=4), "head size"),
    (dict(n_layer=5), "n_layer"),
    (dict(hidden=999), "FFN hidden"),
])
def test_bad_target_shapes_are_one_line_errors(kw, words):
    src = GPTConfig(block_size=8, vocab_size=16, n_layer=4, n_head=4, n_embd=32)
    with pytest.raises(ValueError, match=words) as e:
        inherit.target_config(src, **kw)
    assert "\n" not in str(e.value)


def test_kv_groups_merge_only_whole():
    src = GPTConfig(block_size=8, vocab_size=16, n_layer=2, n_head=6, n_kv_head=3, n_embd=48)   # groups of 2
    assert inherit.target_config(src, n_kv_head=1).n_kv_head == 1            # 3 groups -> 1 (groups of 6)
    with pytest.raises(ValueError, match="merged whole") as e:
        inherit.target_config(src, n_kv_head=2)                              # groups of 3: not whole groups
    assert "\n" not in str(e.value) and "fix:" in str(e.value)


def test_inherit_cli_errors(big, tmp_path):
    out_dir, _, _ = big
    with pytest.raises(SystemExit, match="--init_from"):
        inherit.main([f"--out_dir={tmp_path}"])
    with pytest.raises(SystemExit, match="mask_steps"):
        inherit.main([f"--init_from={out_dir}", f"--out_dir={tmp_path / 's'}", "--neurons=learned", "--mask_steps=0"])
    with pytest.raises(SystemExit, match="unknown layer selection"):
        inherit.main([f"--init_from={out_dir}", f"--out_dir={tmp_path / 's'}", "--n_layer=2", "--layers=middle"])


def fix_of(message):
    """The fix a one-line error names: the text after '(fix: ' up to its last ')'."""
    return message.split("(fix: ", 1)[1].rsplit(")", 1)[0]


def small_args(out_dir, source, *more):
    return [f"--init_from={source}", f"--out_dir={out_dir}", "--n_layer=2", "--n_embd=16", "--neurons=l1", *more]


@pytest.mark.parametrize("names", [("ckpt.pt", "last.pt"), ("last.pt",), ("ckpt.pt",)])
def test_inherit_refuses_an_out_dir_with_another_runs_checkpoints(big, tmp_path, capsys, names):
    """ckpt.pt there would replace that run's best checkpoint (or sit beside its last.pt: two models in one
    folder): one line, before the work and before anything is written; its fix, followed literally, works."""
    out_dir, _, _ = big
    victim = tmp_path / "out-victim"
    victim.mkdir()
    for name in names:
        (victim / name).write_bytes(f"another run's {name}".encode())
    with pytest.raises(SystemExit) as e:
        inherit.main(small_args(victim, out_dir))
    message = str(e.value)
    assert message.startswith("error: ") and "\n" not in message and "another run's" in message
    assert capsys.readouterr().out == ""   # refused before the work, not after it
    assert sorted(os.listdir(victim)) == sorted(names)   # nothing written, not even the lock
    for name in names:
        assert (victim / name).read_bytes() == f"another run's {name}".encode()
    fix = fix_of(message)
    assert fix.startswith("--out_dir=") and fix.endswith(", a folder of its own")
    new_dir = fix[len("--out_dir="):-len(", a folder of its own")]
    assert not os.path.exists(new_dir)
    assert inherit.main(small_args(new_dir, out_dir)) == os.path.join(new_dir, "ckpt.pt")


def test_inherit_run_again_replaces_its_own_earlier_output(big, tmp_path):
    """The same command run again (here with other --neurons) replaces the ckpt.pt an earlier inherit wrote: only
    another run's checkpoints are refused."""
    out_dir, _, _ = big
    small = tmp_path / "small"
    inherit.main(small_args(small, out_dir))
    first = load_checkpoint(str(small / "ckpt.pt"))["inherit"]
    inherit.main([*small_args(small, out_dir), "--neurons=l2"])
    assert sorted(name for name in os.listdir(small) if name != ".lock") == ["ckpt.pt"]
    again = load_checkpoint(str(small / "ckpt.pt"))["inherit"]
    assert first["neurons"] != again["neurons"] == "l2"


def test_inherit_refuses_an_out_dir_linked_to_its_source(big, tmp_path):
    """An inherit's output inherited again into a link to its own folder replaced the source checkpoint: the
    folders were compared by their paths, not where they lead (a hunt)."""
    out_dir, _, _ = big
    small = tmp_path / "small"
    inherit.main(small_args(small, out_dir))
    link = tmp_path / "link"
    link.symlink_to(small)
    before = (small / "ckpt.pt").read_bytes()
    with pytest.raises(SystemExit, match="is the source's folder"):
        inherit.main(small_args(link, small))
    assert (small / "ckpt.pt").read_bytes() == before


def test_inherit_writes_out_dir_as_its_one_writer(big, tmp_path, monkeypatch):
    """inherit holds out_dir's lock (lock_dir) while it writes: another writer's lock refuses it, and a checkpoint
    that another run put there during the work is not replaced."""
    from conftest import hold_lock
    out_dir, _, _ = big
    small = tmp_path / "small"
    small.mkdir()
    holder = hold_lock(str(small))
    try:
        with pytest.raises(SystemExit, match="being written by another process") as e:
            inherit.main(small_args(small, out_dir))
        assert "\n" not in str(e.value)
    finally:
        holder.kill()
        holder.wait()
    assert not (small / "ckpt.pt").exists()
    real_inherit = inherit.inherit

    def meanwhile(*args, **kwargs):   # another run writes its checkpoint while the small model is built
        (small / "last.pt").write_bytes(b"another run's last.pt")
        return real_inherit(*args, **kwargs)

    monkeypatch.setattr(inherit, "inherit", meanwhile)
    with pytest.raises(SystemExit, match="already holds another run's last.pt"):
        inherit.main(small_args(small, out_dir))
    assert sorted(os.listdir(small)) == [".lock", "last.pt"]
    assert (small / "last.pt").read_bytes() == b"another run's last.pt"


GQA_SOURCE = dict(n_head=4, n_kv_head=2, n_embd=64, mlp_type="gated", activation="silu", norm="rmsnorm",
                  pos_embedding="rope", bias=False)   # heads of 16, 2 query heads per kv head


@pytest.mark.parametrize("kw,fix", [(dict(n_kv_head=4), "--n_kv_head=2; any of 1, 2 works"),
                                    (dict(n_embd=48, n_kv_head=3), "--n_embd=32 --n_kv_head=1")])
def test_more_kv_heads_than_the_source_has_is_one_line(kw, fix):
    """The source's kv heads are kept or mean-pooled, never split: asking for more was accepted and ended in
    load_state_dict's traceback."""
    src = GPTConfig(block_size=8, vocab_size=16, n_layer=2, **GQA_SOURCE)
    with pytest.raises(UserError, match="exceeds the source's 2 kv heads") as e:
        inherit.target_config(src, **kw)
    assert "\n" not in str(e.value) and fix_of(str(e.value)) == fix


@pytest.mark.parametrize("kw", [dict(n_head=4, n_embd=32),              # MHA, heads of 8
                                GQA_SOURCE,                             # groups of 2, heads of 16
                                dict(n_head=6, n_kv_head=3, n_embd=48),  # groups of 2, 3 kv heads
                                dict(n_head=8, n_kv_head=2, n_embd=32)])  # groups of 4, heads of 4
def test_every_refused_width_names_a_fix_that_works(kw):
    """Over widths (whole heads or not, too wide), head counts and kv head counts: a refused shape's fix, its flags
    put in place of the given values, is accepted; every accepted shape inherits (no traceback from the build)."""
    src = GPTConfig(block_size=8, vocab_size=16, n_layer=2, **kw)
    model = GPT(src)
    hd, src_kv = src.n_embd // src.n_head, src.n_kv_head or src.n_head
    widths = [0, hd + 1, src.n_embd + hd] + list(range(hd, src.n_embd + 1, hd))   # 0: the source's
    built = set()
    for n_embd in widths:
        for n_head in sorted({0, n_embd // hd, 3}):   # the default, the one n_embd implies, and one more
            for n_kv_head in sorted(set(range(src_kv + 2)) | {src.n_head}):   # 0: the default
                given = dict(n_embd=n_embd, n_head=n_head, n_kv_head=n_kv_head)
                try:
                    dst = inherit.target_config(src, **given)
                except UserError as e:
                    message = str(e)
                    assert "\n" not in message
                    fix = fix_of(message).split(";")[0]   # after ';': a remark
                    flags = {key: int(value) for key, value in re.findall(r"--(\w+)=(\d+)", fix)}
                    assert flags, message
                    dst = inherit.target_config(src, **dict(given, **flags))
                shape = (dst.n_embd, dst.n_head, dst.n_kv_head)
                if shape not in built:
                    built.add(shape)
                    small, _ = inherit.inherit(model, dst, "first_last", "l1")
                    assert (small.config.n_embd, small.config.n_head, small.config.n_kv_head) == shape
    if kw is GQA_SOURCE:   # the tester's: 48 = 3 heads of 16, which no n_kv_head splits into groups of 2
        with pytest.raises(UserError) as e:
            inherit.target_config(src, n_embd=48)
        assert fix_of(str(e.value)) == "--n_embd=32"


def test_inherit_from_a_hugging_face_folder_names_the_import(tmp_path):
    """--init_from=<a transformers folder>: the fix is tools.huggingface.convert import; followed literally, it works."""
    from tools.huggingface import convert
    cfg = GPTConfig(block_size=8, vocab_size=16, n_layer=2, **dict(GQA_SOURCE, n_embd=32))   # heads of 8
    hf_dir = tmp_path / "hf"
    convert.export(GPT(cfg), str(hf_dir), say=lambda *a: None)
    (tmp_path / "hf.pt").write_bytes(b"a file the fix must not overwrite")
    with pytest.raises(SystemExit) as e:
        inherit.main(small_args(tmp_path / "small", hf_dir))
    message = str(e.value)
    assert "\n" not in message and "Hugging Face" in message
    command, then = fix_of(message).split(", then ")
    converted = str(tmp_path / "hf-2.pt")
    assert command == f"python -m tools.huggingface.convert import {hf_dir} --out={converted}"
    assert then == f"--init_from={converted}"
    convert.main(command.split()[3:])
    assert inherit.main(small_args(tmp_path / "small", converted)) == str(tmp_path / "small" / "ckpt.pt")
    assert (tmp_path / "hf.pt").read_bytes() == b"a file the fix must not overwrite"


# --- 4.2 multiple-round training with data refining ------------------------------------------------------

def test_refine_prefers_high_loss_segments_and_respects_the_rate():
    losses = np.array([0.0] * 500 + [3.0] * 500)   # p is e^3 ~ 20x higher for the second half
    keep = refine.refine(losses, rate=0.5, generator=torch.Generator().manual_seed(0))
    assert len(keep) == 500 and len(set(keep.tolist())) == 500 and np.all(np.diff(keep) > 0)
    assert (keep >= 500).mean() > 0.85
    again = refine.refine(losses, rate=0.5, generator=torch.Generator().manual_seed(0))
    assert np.array_equal(keep, again)   # deterministic with a seeded generator
    flat = refine.refine(losses, rate=0.5, temperature=1e6, generator=torch.Generator().manual_seed(0))
    assert 0.4 < (flat >= 500).mean() < 0.6   # a huge temperature samples uniformly
    quarters = refine.refine(losses, rate=0.25, parts=4, generator=torch.Generator().manual_seed(0))
    assert len(set(quarters.tolist())) == 250   # parts: each quarter of the data gives a quarter of the kept
    assert np.histogram(quarters, [0, 250, 500, 750, 1000])[0].tolist() == [62, 63, 63, 62]
    assert len(refine.refine(np.zeros(3), rate=0.5)) == 2   # N0 = round(0.5 * 3), not int()
    assert np.allclose(refine.sampling_probs([1.0, 2.0]), np.exp([1, 2]) / np.exp([1, 2]).sum())
    # an infinite tau samples uniformly (refining silently off), a tiny one overflows l / tau
    for bad in (dict(rate=0), dict(rate=1.5), dict(temperature=0), dict(temperature=math.inf),
                dict(temperature=1e-320), dict(parts=0)):
        with pytest.raises(ValueError):
            refine.refine(losses, **bad)
    # a small accepted tau underflowed most p_i to 0, and the rest of N0 came from the first such segments in text
    # order: at 1e-6 exactly the last half of the text, whatever the losses (a hunt); too few left is one line
    varied = np.random.default_rng(0).uniform(3.0, 4.0, 1000)
    sharp = refine.refine(varied, rate=0.5, temperature=1e-3, generator=torch.Generator().manual_seed(0))
    assert len(set(sharp.tolist()) & set(np.argsort(varied)[500:].tolist())) > 490   # the highest half, nearly
    with pytest.raises(UserError, match="leaves 1 segment.* fewer than the 500 to draw"):
        refine.refine(varied, rate=0.5, temperature=1e-6)


def test_refine_edges_of_rate_and_parts_are_kept():
    """rate=1 keeps every segment, a rate below 1/N still keeps one, --parts may equal N, and parts that get no share
    of N0 are skipped (a hunt: a changed line did this, and no test failed)."""
    assert refine.refine(np.zeros(5), rate=1.0).tolist() == [0, 1, 2, 3, 4]
    assert len(refine.refine(np.zeros(10), rate=0.01)) == 1
    assert len(refine.refine(np.arange(4.0), rate=0.5, parts=4)) == 2
    assert len(refine.refine(np.zeros(10), rate=0.1, parts=10)) == 1


def tiny_refine_run(tmp_path, n_train):
    """A checkpoint (block_size 16, its tokenizer_id recorded) on a dataset of n_train train tokens: its out_dir."""
    from safety_net.fileio import atomic_save
    data = write_token_dataset(tmp_path / "data", n_train=n_train, n_val=100)
    model = visible(GPT(GPTConfig(block_size=16, vocab_size=16, n_layer=1, n_head=2, n_embd=16)))
    tok = dataset.tokenizer_id(dataset.load_meta(data))
    atomic_save({"model": model.state_dict(), "model_args": dataclasses.asdict(model.config), "iter_num": 1,
                 "best_val_loss": 3.0, "config": {}, "data_dir": data, "tokenizer_id": tok},
                str(tmp_path / "out" / "ckpt.pt"))
    return str(tmp_path / "out"), data, model, tok


def test_refine_scores_the_last_whole_window_and_prints_its_numbers(tmp_path, capsys):
    """A train split of exactly 12 windows gives 12 segments; refine.json names the dataset and tokenizer; the
    summary's loss mean/min/max, kept count, tau, kept mean loss and next-round --init_from are the real ones
    (a hunt: a changed line did this, and no test failed)."""
    out_dir, data, model, tok = tiny_refine_run(tmp_path, 17 * 12)
    path = refine.main([f"--out_dir={out_dir}", "--rate=0.5", "--temperature=2", "--seed=3"])
    tokens = np.fromfile(os.path.join(data, "train.bin"), dtype=np.uint16)
    starts = np.arange(12) * 17
    losses = refine.segment_losses(model, tokens, starts, 17)
    keep = np.load(path)
    assert len(keep) == 6 and set(keep.tolist()) <= set(starts.tolist())
    with open(dataset.segments_info_path(path)) as f:
        info = json.load(f)
    assert (info["train_tokens"], info["data_dir"], info["tokenizer_id"]) == (17 * 12, data, tok)
    printed = capsys.readouterr().out
    assert (f"12 segments of 17 tokens in {os.path.join(data, 'train.bin')}: loss mean {losses.mean():.4f} "
            f"(min {losses.min():.4f}, max {losses.max():.4f})") in printed
    assert (f"kept 6 (50%) with p = softmax(l / 2): their mean loss {losses[keep // 17].mean():.4f}") in printed
    assert f"--init_from={os.path.join(out_dir, 'ckpt.pt')} --data_dir=" in printed


def test_refine_refuses_bad_batch_size_and_train_splits_in_one_line(tmp_path):
    """--batch_size=0, a train split holding an id beyond the model's vocabulary and one shorter than a window are
    each one error line (a hunt: a changed line did this, and no test failed)."""
    from conftest import one_error_line
    out_dir, data, _, _ = tiny_refine_run(tmp_path, 17 * 4)
    one_error_line(refine.main, [f"--out_dir={out_dir}", "--batch_size=0"], "batch_size must be >= 1")
    train_bin = os.path.join(data, "train.bin")
    np.array([0, 1, 99] * 20, dtype=np.uint16).tofile(train_bin)
    one_error_line(refine.main, [f"--out_dir={out_dir}"], "token id 99", "vocab_size is 16")
    np.arange(10, dtype=np.uint16).tofile(train_bin)
    one_error_line(refine.main, [f"--out_dir={out_dir}"], "has 10 tokens, not enough for block_size=16")
    assert not os.path.exists(os.path.join(out_dir, "refine.npy"))


def test_segment_losses_match_the_model_loss():
    torch.manual_seed(0)
    model = GPT(GPTConfig(block_size=8, vocab_size=16, n_layer=1, n_head=2, n_embd=16)).eval()
    data = np.random.default_rng(0).integers(0, 16, 100).astype(np.uint16)
    starts = refine.segment_starts(len(data), 9)
    assert starts.tolist() == [0, 9, 18, 27, 36, 45, 54, 63, 72, 81, 90]
    losses = refine.segment_losses(model, data, starts, 9, batch_size=4)
    win = torch.from_numpy(data[starts[3]:starts[3] + 9].astype(np.int64))[None]
    assert losses[3] == pytest.approx(model(win[:, :-1], win[:, 1:])[1].item(), abs=1e-5)


def test_refine_saves_exactly_the_windows_its_criterion_selects(tmp_path):
    """refine.npy, read back, holds the starts of the windows the criterion selects, recomputed here: the train split
    cut into whole windows of block_size + 1 tokens, each one's mean next-token loss under the checkpoint's model (one
    forward per window), p = softmax(loss / tau), N0 = round(rate * N) drawn without replacement by torch.multinomial
    with a generator seeded by --seed; refine.json records the train split and block_size they index."""
    from safety_net.fileio import atomic_save
    data = write_token_dataset(tmp_path / "data", n_train=17 * 40 + 9, n_val=100)
    model = visible(GPT(GPTConfig(block_size=16, vocab_size=16, n_layer=1, n_head=2, n_embd=16)))
    atomic_save({"model": model.state_dict(), "model_args": dataclasses.asdict(model.config), "iter_num": 1,
                 "best_val_loss": 3.0, "config": {}, "data_dir": data}, str(tmp_path / "out" / "ckpt.pt"))
    path = refine.main([f"--out_dir={tmp_path / 'out'}", "--rate=0.25", "--temperature=0.5", "--seed=5",
                        "--batch_size=7"])
    tokens = np.fromfile(os.path.join(data, "train.bin"), dtype=np.uint16).astype(np.int64)
    starts = [17 * i for i in range(len(tokens) // 17)]
    losses = []
    with torch.no_grad():
        for s in starts:
            window = torch.from_numpy(tokens[s:s + 17])
            out = model(window[None, :-1], all_logits=True)[0][0]
            losses.append(torch.nn.functional.cross_entropy(out, window[1:]).item())
    p = torch.softmax(torch.tensor(losses, dtype=torch.float64) / 0.5, dim=0)
    picks = torch.multinomial(p, round(0.25 * len(starts)), replacement=False,
                              generator=torch.Generator().manual_seed(5))
    assert max(losses) - min(losses) > 1   # windows the criterion tells apart
    assert np.load(path).tolist() == sorted(starts[i] for i in picks.tolist())
    with open(dataset.segments_info_path(path)) as f:
        info = json.load(f)
    assert (info["train_tokens"], info["block_size"]) == (len(tokens), 16)


def test_get_batch_draws_only_from_the_segments(tiny_data):
    path = dataset.split_path(tiny_data, "train")
    data = np.memmap(path, dtype=np.uint16, mode="r")
    segments = np.array([17, 5000, 12345])
    x, y = train.get_batch(path, 64, 16, torch.Generator().manual_seed(0), segments=segments)
    allowed = {tuple(data[s:s + 16].tolist()) for s in segments}
    assert {tuple(row.tolist()) for row in x} == allowed
    assert torch.equal(x[:, 1:], y[:, :-1])


def test_refine_takes_the_newest_run_as_sample_py_does(big, tmp_path, monkeypatch, capsys):
    """Without --out_dir refine scored out/, whatever ran last, where sample.py and tools.eval take the newest run
    (a hunt)."""
    import shutil
    out_dir, data, cfg = big
    monkeypatch.chdir(tmp_path)
    shutil.copytree(out_dir, "out")
    shutil.copytree(out_dir, "out-new")
    os.utime(os.path.join("out", "ckpt.pt"), (1, 1))   # the older run
    path = refine.main(["--rate=0.25", "--batch_size=256"])
    assert path == os.path.join("out-new", "refine.npy") and not os.path.exists(os.path.join("out", "refine.npy"))
    assert "loading the newest checkpoint: out-new" in capsys.readouterr().err


def test_refine_cli_and_second_round(big, tmp_path, monkeypatch, capsys):
    out_dir, data, cfg = big
    path = refine.main([f"--out_dir={out_dir}", "--rate=0.25", "--batch_size=256"])
    assert path == os.path.join(out_dir, "refine.npy")
    starts = np.load(path)
    n_segments = 20000 // 17
    assert len(starts) == round(0.25 * n_segments) and np.all(starts % 17 == 0)
    printed = capsys.readouterr().out
    # the next round's command names the dataset: without it train.py prepared its default one, then refused it
    assert "kept" in printed and f"--data_dir={data} --data_segments={path})" in printed
    seen = []
    real_get_batch = train.get_batch

    def spy(path, batch_size, block_size, generator, device=torch.device("cpu"), segments=None):
        x, y = real_get_batch(path, batch_size, block_size, generator, device, segments)
        if path.endswith("train.bin"):
            seen.append(segments)
        return x, y

    monkeypatch.setattr(train, "get_batch", spy)
    run_train(dict(cfg, out_dir=str(tmp_path / "round2"), init_from=os.path.join(out_dir, "ckpt.pt"),
                   data_segments=path, max_iters=3, eval_interval=3))
    training = [s for s in seen if s is not None]   # evaluation batches of the train split pass no segments
    assert len(training) == 4 and all(np.array_equal(s, starts) for s in training)   # first batch + 3 steps
    assert "training windows start only at" in capsys.readouterr().out
    np.save(tmp_path / "bad.npy", np.array([17 * 10 ** 6]))
    with pytest.raises(UserError, match="outside the train split"):
        run_train(dict(cfg, out_dir=str(tmp_path / "bad"), data_segments=str(tmp_path / "bad.npy")))
    np.save(tmp_path / "other_block.npy", starts + 1)   # windows of another block_size do not start at i * 17
    with pytest.raises(UserError, match="another block_size"):
        run_train(dict(cfg, out_dir=str(tmp_path / "bad"), data_segments=str(tmp_path / "other_block.npy")))
    with pytest.raises(UserError, match="cannot read data_segments"):
        run_train(dict(cfg, out_dir=str(tmp_path / "bad"), data_segments=str(tmp_path / "missing.npy")))


def test_segments_made_for_a_larger_block_size_are_refused_though_its_windows_divide_theirs(tmp_path):
    """refine.npy made at block_size 32 starts its windows at multiples of 33, which windows of 10 (11 divides 33)
    would also pass: refine.json's block_size tells them apart, and the fix names it."""
    path = str(tmp_path / "refine.npy")
    np.save(path, np.arange(0, 33 * 20, 33))
    with open(tmp_path / "refine.json", "w") as f:
        json.dump({"train_tokens": 1000, "block_size": 32, "data_dir": "data/x"}, f)
    assert len(dataset.load_segments(path, 1000, 32)) == 20
    with pytest.raises(UserError, match=r"another block_size \(32\) than 10 .*--block_size=32\)"):
        dataset.load_segments(path, 1000, 10)
    os.remove(tmp_path / "refine.json")   # without it, only the windows' starts can be checked
    assert len(dataset.load_segments(path, 1000, 10)) == 20


# --- the importance scores behind width pruning (003 3.2): each weight counts for its own structure ---------

def test_element_importance_formulas():
    torch.manual_seed(0)
    model = GPT(GPTConfig(block_size=8, vocab_size=16, n_layer=1, n_head=2, n_embd=16))
    x = torch.randint(16, (2, 8))
    l1, l2 = inherit.element_importance(model, "l1"), inherit.element_importance(model, "l2")
    taylor = inherit.element_importance(model, "taylor", [(x, x)])
    model(x, x)[1].backward()
    for n, p in model.named_parameters():
        torch.testing.assert_close(l1[n], p.detach().abs())
        torch.testing.assert_close(l2[n], p.detach() ** 2)
        torch.testing.assert_close(taylor[n], (p.detach() * p.grad).abs())


def test_structure_scores_credit_each_weight_to_its_structure():
    """One large importance at a time, in a GQA model (8 query heads, 2 kv heads of size 8): residual channel
    20 through the token embedding, key head 1 and value head 0 through their qkv rows, query head 5, FFN
    neuron 7. Every other score stays 0."""
    cfg = GPTConfig(block_size=8, vocab_size=16, n_layer=1, n_head=8, n_kv_head=2, n_embd=64)
    params = dict(GPT(cfg).named_parameters())
    qkv, up = "branches.0.attn.0.inner.qkv_proj.weight", "branches.0.mlp.0.inner.up.weight"
    cases = [("tok_emb.wte.weight", (slice(None), 20), "channel", 20), (qkv, (64 + 8 + 3, 0), "kv", 1),
             (qkv, (64 + 16 + 2, 0), "kv", 0), (qkv, (5 * 8 + 1, 0), "q", 5), (up, (7, 0), "ffn", 7)]
    for name, where, kind, index in cases:
        elem = {n: torch.zeros_like(p) for n, p in params.items()}
        elem[name][where] = 100.0
        scores = inherit.structure_scores(elem, cfg)
        for k in ("channel", "ffn", "q", "kv"):
            s = scores[k] if k == "channel" else scores[k][0]
            expected = torch.zeros_like(s)
            if k == kind:
                expected[index] = s[index]
                assert s[index] > 0, (name, kind)
            if k != "channel" or kind == "channel":   # a qkv/up weight also counts for its input channel
                torch.testing.assert_close(s, expected, msg=f"{name} -> {k}")


def test_choose_heads_scores_whole_groups_then_heads_inside_them():
    src = GPTConfig(block_size=8, vocab_size=16, n_layer=1, n_head=8, n_kv_head=4, n_embd=64)
    # kv groups of 2 query heads; the kv rows score 0, so the groups' query heads decide: groups 1 and 3
    q_heads, kv_heads = inherit.choose_heads(torch.tensor([0., 0, 9, 9, 0, 0, 9, 9]), torch.zeros(4), src,
                                             inherit.target_config(src, n_embd=32, n_kv_head=2))
    assert kv_heads.tolist() == [1, 3] and q_heads.tolist() == [2, 3, 6, 7]
    src = GPTConfig(block_size=8, vocab_size=16, n_layer=1, n_head=8, n_kv_head=2, n_embd=64)
    # 2 groups of 4 query heads cut to groups of 2: the best 2 inside each group
    q_heads, kv_heads = inherit.choose_heads(torch.tensor([0., 0, 5, 5, 5, 0, 5, 0]), torch.zeros(2), src,
                                             inherit.target_config(src, n_embd=32, n_kv_head=2))
    assert kv_heads.tolist() == [0, 1] and q_heads.tolist() == [2, 3, 4, 6]


def test_inheritance_refuses_narrower_sinusoidal_positions_and_carries_no_op_layer_fields():
    """Sinusoidal positions are a table of the width: a narrower small model rebuilt its own, so each kept channel
    read another frequency (a hunt); refused in one line, learned positions are sliced as before. A source saying
    'attention in all 4 layers' (n_attn_layers=4), or sharing from a layer without sharing, was refused at 2
    layers with a fix naming other keys: these fields are carried as their defaults, and the small model is the
    one the plain source gives."""
    torch.manual_seed(0)
    sinus = GPT(GPTConfig(vocab_size=16, block_size=16, n_layer=2, n_head=2, n_embd=32, pos_embedding="sinusoidal"))
    with pytest.raises(UserError, match="sinusoidal positions are a table of its width 32.*--n_embd=32"):
        inherit.target_config(sinus.config, n_embd=16)
    # --mlp_ratio beside --mlp_hidden was accepted and dropped (a hunt)
    with pytest.raises(UserError, match="--mlp_ratio=2 changes nothing beside --mlp_hidden=40"):
        inherit.target_config(sinus.config, n_layer=1, hidden=40, mlp_ratio=2)
    assert inherit.target_config(sinus.config, n_layer=1).pos_embedding == "sinusoidal"   # same width: the same table
    batches = [(torch.randint(0, 16, (2, 8)), torch.randint(0, 16, (2, 8)))]
    plain_args = dict(vocab_size=16, block_size=16, n_layer=4, n_head=2, n_embd=32)
    torch.manual_seed(1)
    plain = GPT(GPTConfig(**plain_args)).eval()
    for extra in (dict(n_attn_layers=4), dict(share_from_layer=3), dict(n_attn_layers=2, n_top_attn_layers=2)):
        src = GPT(GPTConfig(**plain_args, **extra)).eval()
        src.load_state_dict(plain.state_dict())
        for layers in ("first_last", "loss"):
            small, _ = inherit.inherit(src, inherit.target_config(src.config, n_layer=2), layers, "l1", batches=batches)
            want, _ = inherit.inherit(plain, inherit.target_config(plain.config, n_layer=2), layers, "l1",
                                      batches=batches)
            assert small.config == want.config, (extra, layers)
            assert all(torch.equal(a, b) for a, b in zip(small.state_dict().values(), want.state_dict().values()))


def test_inherit_notes_the_calibration_keys_no_cut_reads(big, tmp_path, capsys):
    """--neurons=l1 reads no calibration data: --calib_batches and --mask_steps changed nothing without a word (a
    hunt). A note, as the ablation's one command over the --neurons grid gives them."""
    out_dir, _, _ = big
    inherit.main(small_args(tmp_path / "s1", out_dir, "--calib_batches=3", "--mask_steps=7"))
    err = capsys.readouterr().err
    assert "note: --calib_batches, --mask_steps not read by this inheritance" in err
    inherit.main(small_args(tmp_path / "s2", out_dir))
    assert "not read" not in capsys.readouterr().err


# --- inherit's edges that no test saw (a hunt: each changed line below passed every test) -------------------

def save_source(path, cfg, **extra):
    """A checkpoint of a random GPT(cfg) at path/ckpt.pt, as the compact vocabulary test writes one."""
    from safety_net.fileio import atomic_save
    torch.manual_seed(0)
    atomic_save({"model": GPT(cfg).state_dict(), "model_args": dataclasses.asdict(cfg), "iter_num": 10,
                 "config": {}, **extra}, str(path / "ckpt.pt"))
    return str(path)


def bad_ids_data(big, tmp_path):
    """A copy of big's dataset whose train.bin holds ids past its vocab_size of 16."""
    bad = tmp_path / "bad_ids"
    bad.mkdir()
    (bad / "meta.json").write_text(open(os.path.join(big[1], "meta.json")).read())
    np.arange(2000, dtype=np.uint16).tofile(bad / "train.bin")
    np.arange(500, dtype=np.uint16).tofile(bad / "val.bin")
    return str(bad)


@pytest.mark.parametrize("more,words", [
    (["--n_embd=16", "--neurons=l1", "--layers=middle"], "unknown layer selection 'middle'"),    # same depth
    (["--n_layer=2", "--neurons=tylor"], "unknown neuron criterion 'tylor'"),                    # same width
    (["--n_embd=16", "--calib_batch_size=-1"], "calib_batch_size must be >= 0"),
    (["--n_embd=16", "--calib_batches=0"], "calib_batches must be >= 1"),
    (["--n_embd=16", "--data_dir={bad}"], "holds token id 1999, but meta.json's vocab_size is 16"),
])
def test_bad_inherit_options_are_one_line_and_write_nothing(big, tmp_path, capsys, more, words):
    """An unknown --layers or --neurons that this cut does not use, a negative --calib_batch_size, --calib_batches=0
    and calibration data with ids past the vocabulary: otherwise a checkpoint (of all-zero Taylor scores for
    --calib_batches=0) or a traceback when a changed line let them through (a hunt: no test failed)."""
    out_dir = tmp_path / "small"
    more = [arg.format(bad=bad_ids_data(big, tmp_path)) if "{bad}" in arg else arg for arg in more]
    with pytest.raises(SystemExit) as e:
        inherit.main([f"--init_from={big[0]}", f"--out_dir={out_dir}", *more])
    message = str(e.value)
    assert message.startswith("error: ") and "\n" not in message and words in message, message
    assert "wrote" not in capsys.readouterr().out and not out_dir.exists()


def test_inherit_into_a_compact_vocabulary_records_the_target_tokenizer(tmp_path, capsys):
    """--target_data_dir: the output records the compact dataset's tokenizer, not the source's (with the source's,
    train.py --init_from=<it> on the compact data refuses it as trained with another tokenizer), and --data_dir
    (the source's vocabulary) is read: no note that it is not (a hunt: a changed line did each, and no test
    failed)."""
    src_data, dst_data = tmp_path / "gpt2data", tmp_path / "compact"
    for folder, meta in ((src_data, gpt2_meta()), (dst_data, compact_meta([5, 6, 7, 300]))):
        os.makedirs(folder)
        (folder / "meta.json").write_text(json.dumps(meta))
    cfg = GPTConfig(block_size=8, vocab_size=50257, n_layer=2, n_head=2, n_embd=16)
    source = save_source(tmp_path / "big", cfg, tokenizer_id=dataset.tokenizer_id(gpt2_meta()), dataset="gpt2data",
                         data_dir=str(src_data))
    inherit.main([f"--init_from={source}", f"--out_dir={tmp_path / 'small'}", "--n_layer=1",
                  f"--target_data_dir={dst_data}", f"--data_dir={src_data}"])
    assert "not read" not in capsys.readouterr().err
    ckpt = load_checkpoint(str(tmp_path / "small"))
    assert ckpt["tokenizer_id"] == dataset.tokenizer_id(compact_meta([5, 6, 7, 300])) != dataset.tokenizer_id(
        gpt2_meta())


def test_ffn_sizes_given_as_mlp_hidden_or_mlp_ratio_are_the_small_models(big, tmp_path):
    """--mlp_hidden alone narrows the FFN, and --mlp_ratio replaces a source's mlp_hidden (a hunt: changed lines
    ended the first in load_state_dict's size-mismatch traceback and kept the source's FFN in the second, and no
    test failed)."""
    inherit.main([f"--init_from={big[0]}", f"--out_dir={tmp_path / 'small'}", "--mlp_hidden=64", "--neurons=l1"])
    model, ckpt = load_model(str(tmp_path / "small"))
    assert ffn_hidden(model.config) == 64 and [len(f) for f in ckpt["inherit"]["ffn"]] == [64] * 4
    src = GPTConfig(block_size=8, vocab_size=16, n_layer=2, n_head=4, n_embd=32, mlp_hidden=48)
    assert ffn_hidden(inherit.target_config(src, mlp_ratio=1.0)) == 32
    assert ffn_hidden(inherit.target_config(src, n_embd=16, mlp_ratio=2.0)) == 32


def test_loss_ranking_at_the_same_depth_reads_no_data(big, tmp_path, capsys):
    """--layers=loss keeping every layer ranks nothing: it reads no calibration data, so a --data_dir without a
    meta.json is no error, only noted as not read (a hunt: a changed line failed on the missing meta.json, and no
    test failed)."""
    empty = tmp_path / "empty"
    empty.mkdir()
    path = inherit.main([f"--init_from={big[0]}", f"--out_dir={tmp_path / 'small'}", "--layers=loss",
                         "--neurons=l1", "--n_embd=16", f"--data_dir={empty}"])
    assert path == str(tmp_path / "small" / "ckpt.pt") and os.path.isfile(path)
    assert "note: --data_dir not read" in capsys.readouterr().err


@pytest.mark.parametrize("state", ["inherit_and_last", "dangling_ckpt_link"])
def test_inherit_refuses_an_out_dir_with_an_earlier_output_beside_another_run(big, tmp_path, state):
    """An earlier inherit's ckpt.pt beside another run's last.pt, and a ckpt.pt that is a link to nothing, are not
    the same command's output alone: one line, nothing replaced (a hunt: a changed line wrote into the folder, and
    no test failed)."""
    small = tmp_path / "small"
    if state == "inherit_and_last":
        inherit.main(small_args(small, big[0]))
        (small / "last.pt").write_bytes(b"another run's last.pt")
    else:
        small.mkdir()
        (small / "ckpt.pt").symlink_to(tmp_path / "nowhere.pt")
    def contents():
        return {name: os.readlink(small / name) if os.path.islink(small / name) else (small / name).read_bytes()
                for name in os.listdir(small) if name != ".lock"}

    before = contents()
    with pytest.raises(SystemExit, match="already holds another run's") as e:
        inherit.main(small_args(small, big[0], "--neurons=l2"))
    assert "\n" not in str(e.value) and contents() == before


def test_a_run_folder_with_a_config_json_is_a_source_not_a_hugging_face_folder(big, tmp_path):
    """A run folder that also holds a config.json (ours: it holds ckpt.pt) is a source, not a Hugging Face model
    folder (a hunt: a changed line refused it as one, and no test failed)."""
    import shutil
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    shutil.copy(os.path.join(big[0], "ckpt.pt"), run_dir / "ckpt.pt")
    (run_dir / "config.json").write_text("{}")
    assert inherit.main(small_args(tmp_path / "small", run_dir)) == str(tmp_path / "small" / "ckpt.pt")


def test_calibration_batches_differ_and_learned_masks_repeat(big, tmp_path):
    """calibration_batches draws each batch with its own seed, and the same --neurons=learned command run twice in
    one process keeps the same structures (a hunt: changed lines made one batch n times, and other channels
    without the global seed, and no test failed)."""
    batches = inherit.calibration_batches(big[1], 4, 8, 16, 0)
    assert len({x.numpy().tobytes() for x, _ in batches}) == 4
    kept = []
    for name in ("a", "b"):
        inherit.main(small_args(tmp_path / name, big[0], "--neurons=learned", "--mask_steps=5", "--calib_batches=2"))
        info = load_checkpoint(str(tmp_path / name))["inherit"]
        kept.append((info["channels"], info["ffn"], info["q_heads"]))
    assert kept[0] == kept[1]


def test_a_gqa_source_records_its_kv_heads_and_reports_their_pooling(tmp_path, capsys):
    """A GQA source (8 heads, 4 kv heads of 4): the recorded kv_heads are the kept kv heads, no pooling line where
    none pools, and "(GQA -> GQA)" where kv heads are pooled (a hunt: changed lines recorded the query heads and
    said MHA, and no test failed; the first reached main for one commit, 5ae5ef2)."""
    cfg = GPTConfig(block_size=8, vocab_size=16, n_layer=2, n_head=8, n_kv_head=4, n_embd=32)
    source = save_source(tmp_path / "gqa", cfg)
    model, _ = load_model(source)
    for kv, pooled in ((0, False), (1, True)):
        small = tmp_path / f"small{kv}"
        inherit.main([f"--init_from={source}", f"--out_dir={small}", "--n_embd=16", f"--n_kv_head={kv}",
                      "--neurons=l1"])
        out = capsys.readouterr().out
        _, plan = inherit.inherit(model, inherit.target_config(cfg, n_embd=16, n_kv_head=kv), "first_last", "l1")
        info = load_checkpoint(str(small))["inherit"]
        assert info["kv_heads"] == [t.tolist() for t in plan.kv_heads] and [len(h) for h in info["kv_heads"]] == [2, 2]
        assert info["q_heads"] == [t.tolist() for t in plan.q_heads] and [len(h) for h in info["q_heads"]] == [4, 4]
        assert ("kv heads: every 2 kept kv heads mean-pooled into one (GQA -> GQA)" in out) == pooled
        assert ("kv heads:" in out) == pooled


@pytest.mark.parametrize("src_kw,kw,fix", [
    (dict(n_head=8, n_embd=32), dict(n_embd=32, n_kv_head=3), "--n_kv_head=4; any of 1, 2, 4, 8 works"),   # a tie
    (dict(n_head=8, n_kv_head=4, n_embd=32), dict(n_embd=20, n_kv_head=1), "--n_embd=16"),   # 1 kv head fits 16
])
def test_the_fix_for_a_refused_kv_head_count_is_the_nearest_that_fits(src_kw, kw, fix):
    """Of two kv head counts as near to the one given, the fix names the larger; a width fix names --n_kv_head only
    when the given one does not fit the new width (a hunt: a changed line did this, and no test failed)."""
    src = GPTConfig(block_size=8, vocab_size=16, n_layer=2, **src_kw)
    with pytest.raises(UserError) as e:
        inherit.target_config(src, **kw)
    assert "\n" not in str(e.value) and fix_of(str(e.value)) == fix


def test_a_channel_gated_zero_is_read_by_no_norm_the_final_one_included():
    """Residual channels gated 0 by mask_hooks are read by no norm, ln_f included: other values of them in the
    token embedding change no logit (a hunt: with ln_f's gate deleted, learned masks scored channels the small
    model drops by a model that still used them, and no test failed)."""
    torch.manual_seed(0)
    cfg = GPTConfig(block_size=16, vocab_size=16, n_layer=2, n_head=4, n_embd=32, pos_embedding="rope", bias=False,
                    norm="rmsnorm")
    model, other = GPT(cfg).eval(), GPT(cfg).eval()
    other.load_state_dict(model.state_dict())
    dead = torch.tensor([1, 4, 9, 20, 31])
    with torch.no_grad():
        other.tok_emb.wte.weight[:, dead] = torch.randn(16, len(dead)) * 3
    gates = {(inherit.CH, None): torch.ones(32).index_fill(0, dead, 0.0)}
    x = torch.randint(0, 16, (2, 16))
    out = []
    for m in (model, other):
        handles = inherit.mask_hooks(m, gates)
        try:
            out.append(logits(m, x))
        finally:
            for h in handles:
                h.remove()
    torch.testing.assert_close(out[0], out[1])
    assert not torch.allclose(logits(model, x), logits(other, x))   # without the gates they differ
