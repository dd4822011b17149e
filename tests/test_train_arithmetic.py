"""train.py's arithmetic, computed here independently and compared (issue 38): the batches the seed formula names,
gradient accumulation, the learning rate, clipping, the printed parameter counts, and which iteration's weights
ckpt.pt and last.pt hold. Only through what a redesign of train.py keeps: train.train and its callback, log.csv,
stdout, the checkpoint files, GPT.forward (wrapped to record its inputs) and torch.optim.AdamW.step (wrapped to
record the lr, weights and gradients each step starts from). Tiny models on a synthetic dataset."""
import csv
import math
import os
import re

import numpy as np
import pytest
import torch

from conftest import tiny_config
from model import GPT, GPTConfig
import train
from safety_net.checkpoint import load_checkpoint
from safety_net.text_dataset import write_bin

SEED = train.DEFAULTS["seed"]
TRAIN_SPLIT, EVAL_SPLIT = 0, 1000   # the split part of a batch's seed: training batches, evaluation batches + code
SPLIT_CODE = {"train": 0, "val": 1}


def run(config, callback=None):
    return train.train({**train.DEFAULTS, **config}, explicit=set(config), callback=callback)


def seed_formula(*parts):
    """A batch's seed as train.py documents it: splitmix64's mixing of (seed, split, iteration, micro-step) into
    one 64-bit state, part by part, kept to 63 bits."""
    mask = 2**64 - 1
    state = 0
    for part in parts:
        state = (state + 0x9E3779B97F4A7C15 + part) & mask
        state = ((state ^ (state >> 30)) * 0xBF58476D1CE4E5B9) & mask
        state = ((state ^ (state >> 27)) * 0x94D049BB133111EB) & mask
        state = state ^ (state >> 31)
    return state >> 1


def tokens(data_dir, split):
    return np.fromfile(os.path.join(data_dir, f"{split}.bin"), dtype=np.uint16).astype(np.int64).tolist()


def windows(ids, seed, batch_size, block_size, segments=None):
    """(x, y) the seed names: batch_size window starts drawn by torch.randint from a generator seeded with `seed`
    (over every position, or over the allowed starts `segments`); x the block_size tokens at each start, y the
    block_size tokens one further."""
    generator = torch.Generator().manual_seed(seed)
    if segments is None:
        starts = torch.randint(len(ids) - block_size, (batch_size,), generator=generator).tolist()
    else:
        starts = [segments[i] for i in torch.randint(len(segments), (batch_size,), generator=generator).tolist()]
    x = torch.tensor([ids[s:s + block_size] for s in starts])
    y = torch.tensor([ids[s + 1:s + block_size + 1] for s in starts])
    return x, y


def step_batch(data_dir, it, micro_steps, batch_size, block_size):
    """The training batch of iteration `it` as one batch: its micro-steps' windows stacked."""
    ids = tokens(data_dir, "train")
    parts = [windows(ids, seed_formula(SEED, TRAIN_SPLIT, it, m), batch_size, block_size) for m in range(micro_steps)]
    return torch.cat([x for x, _ in parts]), torch.cat([y for _, y in parts])


@pytest.fixture
def forwards(monkeypatch):
    """Every GPT forward with targets: (training mode, x, y), in call order."""
    seen = []
    real = GPT.forward

    def forward(self, idx, targets=None, *args, **kwargs):
        if targets is not None:
            seen.append((self.training, idx.clone(), targets.clone()))
        return real(self, idx, targets, *args, **kwargs)

    monkeypatch.setattr(GPT, "forward", forward)
    return seen


@pytest.fixture
def steps(monkeypatch):
    """Every AdamW step: the lr of each parameter group, and each parameter's weight and gradient as the step
    receives them (by id(parameter); names_of maps them to names)."""
    seen = []
    real = torch.optim.AdamW.step

    def step(self, *args, **kwargs):
        params = [p for group in self.param_groups for p in group["params"]]
        seen.append({"lrs": [group["lr"] for group in self.param_groups],
                     "weights": {id(p): p.detach().clone() for p in params},
                     "grads": {id(p): p.grad.detach().clone() for p in params if p.grad is not None}})
        return real(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.AdamW, "step", step)
    return seen


class FinalModel:
    """Callback keeping the trained model (its parameters are the objects the optimizer stepped)."""

    def __init__(self):
        self.model = None

    def __call__(self, event, info):
        if event == "end":
            self.model = info["model"]


def by_name(model, tensors_by_id):
    return {name: tensors_by_id[id(p)] for name, p in model.named_parameters() if id(p) in tensors_by_id}


def read_log(out_dir):
    with open(os.path.join(out_dir, "log.csv"), newline="") as f:
        return list(csv.DictReader(f))


# --- the batches -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("segments", [False, True], ids=["every_position", "data_segments"])
def test_batches_are_the_windows_the_seed_formula_names(tiny_data, tmp_path, forwards, segments):
    """Training x, y of every micro-step of every iteration, and the fixed evaluation batches of both splits at
    every evaluation, equal the windows their seeds name: (seed, 0, iteration, micro-step) for training,
    (seed, 1000 + split, k) for evaluation batch k."""
    batch_size, block_size, micro_steps = 4, 16, 2
    cfg = dict(tiny_config(tiny_data, tmp_path / "out"), gradient_accumulation_steps=micro_steps,
               batch_size=batch_size, max_iters=2, eval_interval=2, eval_iters=2)
    starts = None
    if segments:   # refine.npy: segment i starts at i * (block_size + 1); every 7th one is allowed
        starts = list(range(0, len(tokens(tiny_data, "train")) - 2 * block_size, 7 * (block_size + 1)))
        np.save(tmp_path / "refine.npy", np.array(starts, dtype=np.int64))
        cfg["data_segments"] = str(tmp_path / "refine.npy")
    run(cfg)
    ids = {split: tokens(tiny_data, split) for split in SPLIT_CODE}
    want_steps = [windows(ids["train"], seed_formula(SEED, TRAIN_SPLIT, it, m), batch_size, block_size, starts)
                  for it in range(2) for m in range(micro_steps)]
    want_eval = [windows(ids[split], seed_formula(SEED, EVAL_SPLIT + code, k), batch_size, block_size)
                 for split, code in SPLIT_CODE.items() for k in range(2)]
    # (the CPU-time note times a forward of one sequence: not a batch)
    trained = [(x, y) for training, x, y in forwards if training and len(x) == batch_size]
    evaluated = [(x, y) for training, x, y in forwards if not training]
    assert len(trained) == len(want_steps) and len(evaluated) == 2 * len(want_eval)   # evaluations at 0 and 2
    for (x, y), (want_x, want_y) in zip(trained + evaluated, want_steps + want_eval + want_eval):
        assert torch.equal(x, want_x) and torch.equal(y, want_y)


def test_get_batch_reads_the_ids_prepare_writes(tmp_path):
    """train.py's reader and text_dataset.write_bin (prepare.py's writer) agree on the token files' format: ids up to
    the largest one the format holds come back as written, in the windows the generator names."""
    ids = [(i * 7919) % 65536 for i in range(3000)] + [65535]
    write_bin(str(tmp_path / "train.bin"), ids)
    x, y = train.get_batch(str(tmp_path / "train.bin"), 5, 8, torch.Generator().manual_seed(3))
    want_x, want_y = windows(ids, 3, 5, 8)
    assert max(ids) == 65535 and torch.equal(x, want_x) and torch.equal(y, want_y)


# --- gradient accumulation -------------------------------------------------------------------------------------

def test_gradient_accumulation_divides_the_loss_by_the_micro_steps(tiny_data, tmp_path, steps):
    """With 4 micro-steps of 2 sequences and clipping off, each AdamW step receives the gradient of the mean loss
    over the 8 sequences as one batch (recomputed here from the same windows and the weights the step starts
    from). Not dividing by the micro-steps gives 4x that gradient, which AdamW nearly hides in the weights."""
    micro_steps, batch_size = 4, 2
    cfg = dict(tiny_config(tiny_data, tmp_path / "out"), gradient_accumulation_steps=micro_steps,
               batch_size=batch_size, grad_clip=0.0, init_std=0.3, max_iters=2, eval_interval=2, eval_iters=1)
    final = FinalModel()
    summary = run(cfg, callback=final)
    assert len(steps) == 2
    for it, step in enumerate(steps):
        model = GPT(GPTConfig(**summary["model_args"]))
        model.load_state_dict(by_name(final.model, step["weights"]), strict=False)
        x, y = step_batch(tiny_data, it, micro_steps, batch_size, cfg["block_size"])
        model(x, y)[1].backward()
        got = by_name(final.model, step["grads"])
        assert set(got) == {name for name, p in model.named_parameters()}
        for name, p in model.named_parameters():
            torch.testing.assert_close(got[name], p.grad, rtol=1e-4, atol=1e-6, msg=f"iteration {it}: {name}")


# --- the learning rate -----------------------------------------------------------------------------------------

def lr_formula(it, lr, min_lr, warmup, decay):
    """Linear warmup from lr / (warmup + 1), the peak lr at it = warmup, a cosine down to min_lr at it = decay,
    then min_lr."""
    if it < warmup:
        return lr * (it + 1) / (warmup + 1)
    if it >= decay:
        return min_lr
    return min_lr + (lr - min_lr) * (1 + math.cos(math.pi * (it - warmup) / (decay - warmup))) / 2


@pytest.mark.parametrize("decay_lr", [True, False])
def test_lr_of_each_step_in_warmup_cosine_and_after_decay(tiny_data, tmp_path, steps, decay_lr):
    """The lr every AdamW step runs with (every parameter group), and the lr log.csv records, at every iteration:
    warmup (0-2), cosine (3-8), after the decay (9-10); decay_lr=False: learning_rate throughout."""
    lr, min_lr, warmup, decay = 1e-2, 1e-3, 3, 8
    cfg = dict(tiny_config(tiny_data, tmp_path / "out"), n_layer=1, n_embd=16, learning_rate=lr, min_lr=min_lr,
               warmup_iters=warmup, lr_decay_iters=decay, decay_lr=decay_lr, max_iters=11, eval_interval=11,
               eval_iters=1)
    run(cfg)
    want = [lr_formula(it, lr, min_lr, warmup, decay) if decay_lr else lr for it in range(11)]
    assert len(steps) == 11
    for it, step in enumerate(steps):
        assert step["lrs"] == pytest.approx([want[it]] * len(step["lrs"]), rel=1e-12), it
    logged = {int(r["iter"]): float(r["lr"]) for r in read_log(cfg["out_dir"]) if r["kind"] == "train"}
    assert logged == pytest.approx(dict(enumerate(want)), rel=1e-5)


# --- clipping --------------------------------------------------------------------------------------------------

def global_norm(grads):
    return math.sqrt(sum(float(g.double().pow(2).sum()) for g in grads.values()))


def test_clipping_scales_the_unscaled_gradient_to_grad_clip(tiny_data, tmp_path, steps):
    """fp16 (the GradScaler multiplies the loss by 65536): the gradient AdamW receives is the true one unclipped
    (grad_clip=0), unchanged when its norm is below grad_clip, and scaled to norm grad_clip when above, by
    grad_clip / (norm + 1e-6) as torch's clip_grad_norm_ does. Clipping before unscaling clips the scaled
    gradient instead, 65536 times too much."""
    def first_step_grads(grad_clip, name):
        cfg = dict(tiny_config(tiny_data, tmp_path / name), dtype="float16", grad_clip=grad_clip, max_iters=1,
                   eval_interval=1, eval_iters=1)
        steps.clear()
        final = FinalModel()
        run(cfg, callback=final)
        assert len(steps) == 1   # (a step the scaler skips for an overflow would not reach AdamW)
        return by_name(final.model, steps[0]["grads"])

    true = first_step_grads(0.0, "off")
    norm = global_norm(true)
    assert norm > 0.1
    below = first_step_grads(10 * norm, "below")
    clip = norm / 4
    above = first_step_grads(clip, "above")
    assert below.keys() == above.keys() == true.keys()
    for name, g in true.items():
        torch.testing.assert_close(below[name], g, rtol=1e-6, atol=0, msg=name)
        torch.testing.assert_close(above[name], g * (clip / (norm + 1e-6)), rtol=1e-5, atol=1e-9, msg=name)
    assert global_norm(above) == pytest.approx(clip, rel=1e-5)


# --- parameter counts ------------------------------------------------------------------------------------------

def test_printed_parameter_counts_are_exact(tiny_data, tmp_path, capsys):
    """A 2-layer GPT of width C=32, vocab V=16, context T=16, with biases, pre-LayerNorm, a 4C MLP and the head
    tied to the token embedding: each layer has two LayerNorms (4C), qkv (3C^2 + 3C), the attention output
    (C^2 + C), the MLP (4C^2 + 4C and 4C^2 + C); then V*C token and T*C position embeddings and the final
    LayerNorm (2C). Non-embedding leaves out the position embeddings (nanoGPT's convention)."""
    c, vocab, block, layers = 32, 16, 16, 2
    cfg = dict(tiny_config(tiny_data, tmp_path / "out"), n_layer=layers, n_embd=c, n_head=2, block_size=block,
               bias=True, norm="layernorm", norm_placement="pre", mlp_type="standard", mlp_ratio=4.0,
               tie_embeddings=True, head_bias=False, pos_embedding="learned", max_iters=0, eval_iters=1)
    summary = run(cfg)
    total = layers * (12 * c * c + 13 * c) + vocab * c + block * c + 2 * c
    printed = re.findall(r"^number of parameters: ([\d,]+) \(non-embedding: ([\d,]+)\)$", capsys.readouterr().out,
                         re.M)
    assert printed == [(f"{total:,}", f"{total - block * c:,}")]
    assert (summary["num_params"], summary["num_params_non_embedding"]) == (total, total - block * c)


# --- what ckpt.pt and last.pt hold -----------------------------------------------------------------------------

@pytest.mark.parametrize("always_save", [False, True])
def test_checkpoints_hold_the_best_and_the_latest_evaluation(tiny_data, tmp_path, always_save):
    """An evaluation every iteration at a learning rate where the val loss goes up and down. last.pt holds the
    weights of the last evaluation; ckpt.pt those of the latest evaluation after iteration 0 whose val loss beat
    every earlier one (always_save_checkpoint: of the latest evaluation after 0), with the best val loss up to it.
    The val losses are log.csv's; the weights at each evaluation are recorded by the callback."""
    cfg = dict(tiny_config(tiny_data, tmp_path / "out"), n_layer=1, n_embd=16, learning_rate=0.1, decay_lr=False,
               max_iters=5, eval_interval=1, always_save_checkpoint=always_save)
    weights, val_losses = {}, {}

    def record(event, info):
        if event == "eval":
            weights[info["iter_num"]] = {k: v.clone() for k, v in info["model"].state_dict().items()}
            val_losses[info["iter_num"]] = info["val_loss"]

    run(cfg, callback=record)
    logged = {int(r["iter"]): float(r["val_loss"]) for r in read_log(cfg["out_dir"]) if r["kind"] == "eval"}
    assert logged == pytest.approx(val_losses, rel=1e-5) and sorted(logged) == list(range(6))
    best, best_after, ckpt_iter = math.inf, {}, None
    for it in sorted(val_losses):
        improved = val_losses[it] < best
        best = min(best, val_losses[it])
        best_after[it] = best
        if it > 0 and (improved or always_save):
            ckpt_iter = it
    # the run this test needs: worse evaluations after a better one, and the last one not the best
    assert always_save or 0 < ckpt_iter < 5 and min(val_losses.values()) == val_losses[ckpt_iter]
    assert sum(val_losses[it] > best_after[it - 1] for it in range(1, 6)) >= 2
    for name, it in (("ckpt.pt", ckpt_iter), ("last.pt", 5)):
        ckpt = load_checkpoint(os.path.join(cfg["out_dir"], name))
        assert ckpt["iter_num"] == it and ckpt["best_val_loss"] == best_after[it], name
        assert ckpt["model"].keys() == weights[it].keys()
        for key, w in weights[it].items():
            assert torch.equal(ckpt["model"][key], w), (name, key)
