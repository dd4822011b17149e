"""
Does a paper-000 model leave the unigram plateau? 200 AdamW steps of the CPU ladder's layer_sharing model
(6 blocks applied twice, width 128, char-level Shakespeare, batch 12 x 64) with one setting changed, printing
the training loss every 50 steps. The unigram loss of the characters is about 3.3.

    python results/paper000_cpu/plateau_check.py --norm_placement=post --pos_embedding=learned --warmup=50 --seed=2

Needs data/shakespeare_char (python prepare.py shakespeare_char).
"""

import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import variants  # noqa: E402
from model import GPT, GPTConfig  # noqa: E402
from runfiles.dataset import get_batch  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    p.add_argument("--norm_placement", default="post", choices=("pre", "post"))
    p.add_argument("--pos_embedding", default="sinusoidal", choices=("sinusoidal", "learned"))
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--data", default="data/shakespeare_char/train.bin")
    a = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(a.seed)
    gen = torch.Generator().manual_seed(a.seed)
    cfg = dict(variants.load("layer_sharing"), vocab_size=65, block_size=64, n_embd=128, n_head=4, n_kv_head=2,
               mlp_hidden=352, n_layer=12, norm_placement=a.norm_placement, pos_embedding=a.pos_embedding)
    model = GPT(GPTConfig(**cfg))
    opt = model.configure_optimizers(0.01, a.lr, (0.9, 0.99), "cpu")
    losses, t0 = [], time.time()
    for it in range(201):
        for group in opt.param_groups:
            group["lr"] = a.lr * min(1.0, (it + 1) / a.warmup)
        x, y = get_batch(a.data, 12, 64, gen)
        _, loss = model(x, y)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if it % 50 == 0:
            losses.append(f"{it}:{loss.item():.3f}")
    print(f"{a.norm_placement}-norm, {a.pos_embedding} positions, lr {a.lr:g}, warmup {a.warmup}, seed {a.seed}: "
          f"{' '.join(losses)} ({time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()
