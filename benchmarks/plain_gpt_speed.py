"""
Is our general model.py as fast per training step as a plain GPT-2 written only for that?

    python benchmarks/plain_gpt_speed.py                 # nanoGPT's CPU recipe size: 4 layers, 128 wide, 12 x 64 tokens
    python benchmarks/plain_gpt_speed.py --num_threads=2

`PlainGPT` below is the textbook GPT-2 block (pre-LayerNorm, fused qkv, SDPA causal attention, GELU MLP,
tied embeddings) with nothing else: no flags, no cache, no sharing. Both models take the same AdamW steps
(with gradient clipping, as train.py) on the same batch, alternating rounds so background load hits
both alike; the median ms/step of each is printed.
"""

import argparse
import os
import statistics
import sys
import time

import torch
import torch.nn as nn
from torch.nn import functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from model import GPT, GPTConfig  # noqa: E402


class PlainBlock(nn.Module):
    def __init__(self, width, n_head):
        super().__init__()
        self.n_head = n_head
        self.ln_1, self.ln_2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.attn_out = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.fc, self.fc_out = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.attn_out(y.transpose(1, 2).reshape(B, T, C))
        return x + self.fc_out(F.gelu(self.fc(self.ln_2(x))))


class PlainGPT(nn.Module):
    def __init__(self, vocab, block_size, n_layer, n_head, width):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, width), nn.Embedding(block_size, width)
        self.blocks = nn.ModuleList([PlainBlock(width, n_head) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(width)

    def forward(self, idx, targets):
        x = self.tok(idx) + self.pos(torch.arange(idx.size(1), device=idx.device))
        for block in self.blocks:
            x = block(x)
        logits = self.ln_f(x) @ self.tok.weight.t()
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def step_times(model, x, y, steps):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        times.append(time.perf_counter() - t0)
    return times[2:]  # the first steps allocate optimizer state


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n_layer", type=int, default=4)
    p.add_argument("--n_head", type=int, default=4)
    p.add_argument("--n_embd", type=int, default=128)
    p.add_argument("--block_size", type=int, default=64)
    p.add_argument("--batch_size", type=int, default=12)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--num_threads", type=int, default=1)
    a = p.parse_args()
    torch.set_num_threads(a.num_threads)
    torch.manual_seed(0)
    vocab = 65
    ours = GPT(GPTConfig(vocab_size=vocab, block_size=a.block_size, n_layer=a.n_layer, n_head=a.n_head,
                         n_embd=a.n_embd))
    plain = PlainGPT(vocab, a.block_size, a.n_layer, a.n_head, a.n_embd)
    x, y = torch.randint(vocab, (2, a.batch_size, a.block_size))
    times = {"plain GPT-2": [], "model.py GPT": []}
    for _ in range(a.rounds):
        times["plain GPT-2"] += step_times(plain, x, y, a.steps)
        times["model.py GPT"] += step_times(ours, x, y, a.steps)
    print(f"{a.n_layer} layers x {a.n_embd}, batch {a.batch_size} x {a.block_size}, {a.num_threads} thread(s), "
          f"torch {torch.__version__}")
    for name, t in times.items():
        print(f"  {name:14s} {1000 * statistics.median(t):7.2f} ms/step (median of {len(t)})")


if __name__ == "__main__":
    main()
