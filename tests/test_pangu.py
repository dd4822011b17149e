"""Paper 003 (PanGu-pi Pro) formulas: parameter inheritance (pangu/inherit.py), data refining for multi-round
training (pangu/refine.py + train.py --data_segments) and the batch-size / learning-rate rule (pangu/scaled_lr.py).
Tiny models on the synthetic dataset of conftest.py; the whole file runs in a few seconds."""
import os

import numpy as np
import pytest
import torch

import runfiles.dataset
import train
from configurator import UserError, load_config
from pangu import inherit, refine
from pangu.scaled_lr import scaled_lr
from runfiles.checkpoint import load_checkpoint, load_model
from conftest import tiny_config, write_token_dataset
from model import GPT, ForwardContext, GPTConfig


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
    path.write_text("from pangu.scaled_lr import scaled_lr\n"
                    "batch_size = 48\n"
                    "learning_rate = scaled_lr(batch_size, 12, 1e-3)\n")
    config, explicit = load_config(train.DEFAULTS, [str(path)])
    assert config["learning_rate"] == pytest.approx(2e-3) and config["batch_size"] == 48
    assert explicit == {"batch_size", "learning_rate"}   # the imported helper is not a config key


# --- 3.2 parameter inheritance -------------------------------------------------------------------------

@pytest.mark.parametrize("kw", [
    dict(),
    dict(n_kv_head=2, mlp_type="gated", activation="silu", norm="rmsnorm", bias=False, pos_embedding="rope"),
    dict(embd_factor_dim=8, enhanced_residual=True),
    dict(tie_embeddings=False, pos_embedding="sinusoidal"),
])
def test_same_shape_inheritance_reproduces_logits_exactly(kw):
    torch.manual_seed(0)
    cfg = GPTConfig(block_size=16, vocab_size=16, n_layer=3, n_head=4, n_embd=32, **kw)
    src = GPT(cfg)
    small, plan = inherit.inherit(src, cfg, "loss", "taylor")   # nothing to drop: no data needed
    x = torch.randint(0, 16, (2, 16))
    assert plan.layers == [0, 1, 2]
    assert torch.equal(logits(small, x), logits(src, x))


def test_first_last_keeps_both_ends_and_drops_the_middle_evenly():
    assert inherit.first_last_layers(6, 3) == [0, 2, 5]
    assert inherit.first_last_layers(12, 4) == [0, 4, 7, 11]
    assert inherit.first_last_layers(5, 2) == [0, 4] and inherit.first_last_layers(5, 1) == [0]
    for n in range(2, 13):
        for k in range(2, n + 1):
            kept = inherit.first_last_layers(n, k)
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


def test_gqa_head_and_ffn_slicing_is_exact():
    """The small attention / FFN equals the source one with the dropped heads / neurons masked out, on an
    input that is zero in the dropped residual channels (checks the q-to-kv-group mapping of GQA)."""
    torch.manual_seed(0)
    src_cfg = GPTConfig(block_size=16, vocab_size=16, n_layer=1, n_head=8, n_kv_head=4, n_embd=64,
                        mlp_type="gated", activation="silu", pos_embedding="rope")
    dst_cfg = inherit.target_config(src_cfg, n_embd=32, n_kv_head=2)   # 4 query heads in 2 groups of 2
    assert (dst_cfg.n_head, dst_cfg.n_kv_head, inherit.mlp_hidden(dst_cfg)) == (4, 2, 128)
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
    ctx = ForwardContext(0, 16, None, torch.device("cpu"))
    src_attn, small_attn = src.branches[0].attn[0].inner, small.branches[0].attn[0].inner
    src_mlp, small_mlp = src.branches[0].mlp[0].inner, small.branches[0].mlp[0].inner
    with torch.no_grad():
        dropped_heads = [h for h in range(8) if h not in plan.q_heads[0].tolist()]
        src_attn.out_proj.weight[:, inherit.head_rows(torch.tensor(dropped_heads), 8)] = 0
        dropped = torch.ones(256, dtype=torch.bool)
        dropped[plan.ffn[0]] = False
        src_mlp.down.weight[:, dropped] = 0
        torch.testing.assert_close(small_attn(x_small, ctx, (0, 0, 0)), src_attn(x_full, ctx, (0, 0, 0))[..., ch])
        torch.testing.assert_close(small_mlp(x_small), src_mlp(x_full)[..., ch])


@pytest.mark.parametrize("layers,neurons", [("first_last", "l1"), ("first_last", "l2"), ("loss", "taylor")])
def test_inherited_small_model_starts_below_random_init(big, layers, neurons):
    out_dir, data, _ = big
    model, _ = load_model(out_dir)
    dst = inherit.target_config(model.config, n_layer=2, n_embd=16)
    small, plan = inherit.inherit(model, dst, layers, neurons, inherit.calibration_batches(data, 4, 8, 16, 0))
    assert len(plan.layers) == 2 and small.get_num_params() < model.get_num_params() / 3
    torch.manual_seed(0)
    held_out = inherit.calibration_batches(data, 4, 8, 16, 1000)
    assert inherit.calibration_loss(small, held_out) < inherit.calibration_loss(GPT(dst), held_out) - 0.2


def test_inherit_cli_then_train_continues_from_it(big, tmp_path, capsys):
    out_dir, data, cfg = big
    small_dir = str(tmp_path / "small")
    inherit.main([f"--from={out_dir}", f"--out_dir={small_dir}", "--n_layer=2", "--n_embd=16", "--layers=loss",
                  "--calib_batches=2"])
    assert "calibration loss" in capsys.readouterr().out
    ckpt = load_checkpoint(small_dir)
    assert ckpt["iter_num"] == 0 and ckpt["optimizer"] is None and ckpt["inherit"]["neurons"] == "taylor"
    assert (ckpt["model_args"]["n_layer"], ckpt["model_args"]["n_embd"], ckpt["model_args"]["n_head"]) == (2, 16, 2)
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
    with pytest.raises(ValueError, match=words):
        inherit.inherit(src, src.config)


@pytest.mark.parametrize("kw,words", [
    (dict(n_embd=20), "whole number of heads"),
    (dict(n_embd=16, n_head=4), "head size"),
    (dict(n_layer=5), "n_layer"),
    (dict(n_kv_head=1), "cannot be merged"),
    (dict(hidden=999), "FFN hidden"),
])
def test_bad_target_shapes_are_one_line_errors(kw, words):
    src = GPTConfig(block_size=8, vocab_size=16, n_layer=4, n_head=4, n_embd=32)
    with pytest.raises(ValueError, match=words) as e:
        inherit.target_config(src, **kw)
    assert "\n" not in str(e.value)


def test_inherit_cli_errors(big, tmp_path):
    out_dir, _, _ = big
    with pytest.raises(SystemExit, match="--from"):
        inherit.main([f"--out_dir={tmp_path}"])
    with pytest.raises(SystemExit, match="unknown layer selection"):
        inherit.main([f"--from={out_dir}", f"--out_dir={tmp_path / 's'}", "--n_layer=2", "--layers=middle"])


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
    assert len(refine.refine(losses, rate=0.25, parts=4, generator=torch.Generator().manual_seed(0))) == 250
    assert np.allclose(refine.sampling_probs([1.0, 2.0]), np.exp([1, 2]) / np.exp([1, 2]).sum())
    for bad in (dict(rate=0), dict(rate=1.5), dict(temperature=0), dict(parts=0)):
        with pytest.raises(ValueError):
            refine.refine(losses, **bad)


def test_segment_losses_match_the_model_loss():
    torch.manual_seed(0)
    model = GPT(GPTConfig(block_size=8, vocab_size=16, n_layer=1, n_head=2, n_embd=16)).eval()
    data = np.random.default_rng(0).integers(0, 16, 100).astype(np.uint16)
    starts = refine.segment_starts(len(data), 9)
    assert starts.tolist() == [0, 9, 18, 27, 36, 45, 54, 63, 72, 81, 90]
    losses = refine.segment_losses(model, data, starts, 9, batch_size=4)
    win = torch.from_numpy(data[starts[3]:starts[3] + 9].astype(np.int64))[None]
    assert losses[3] == pytest.approx(model(win[:, :-1], win[:, 1:])[1].item(), abs=1e-5)


def test_get_batch_draws_only_from_the_segments(tiny_data):
    path = runfiles.dataset.split_path(tiny_data, "train")
    data = np.memmap(path, dtype=np.uint16, mode="r")
    segments = np.array([17, 5000, 12345])
    x, y = runfiles.dataset.get_batch(path, 64, 16, torch.Generator().manual_seed(0), segments=segments)
    allowed = {tuple(data[s:s + 16].tolist()) for s in segments}
    assert {tuple(row.tolist()) for row in x} == allowed
    assert torch.equal(x[:, 1:], y[:, :-1])


def test_refine_cli_and_second_round(big, tmp_path, monkeypatch, capsys):
    out_dir, data, cfg = big
    path = refine.main([f"--out_dir={out_dir}", "--rate=0.25", "--batch_size=256"])
    assert path == os.path.join(out_dir, "refine.npy")
    starts = np.load(path)
    n_segments = 20000 // 17
    assert len(starts) == round(0.25 * n_segments) and np.all(starts % 17 == 0)
    assert "kept" in capsys.readouterr().out
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
    np.save(tmp_path / "bad.npy", np.array([10 ** 7]))
    with pytest.raises(UserError, match="outside the train split"):
        run_train(dict(cfg, out_dir=str(tmp_path / "bad"), data_segments=str(tmp_path / "bad.npy")))
    with pytest.raises(UserError, match="cannot read data_segments"):
        run_train(dict(cfg, out_dir=str(tmp_path / "bad"), data_segments=str(tmp_path / "missing.npy")))
