"""
Where does an eager decode step spend its time beyond the weight-streaming floor? A diagnostic for the
1.3x target of `bench.py --mode=decode`:

    OMP_NUM_THREADS=1 python benchmarks/decode_overhead.py --repeats=11

The 6 x 384 gpt of paper 004 (variants/gpt.py, random weights), batch 1, one thread, CPU time, `--tokens`
tokens from one token with sample.py's sampling (temperature 0.8, top-k 200), in alternating rounds:

  floor            one F.linear per weight matrix on a 1-token input (as bench.py --mode=decode)
  model            GPT.generate: what sample.py runs
  model, direct    the same, with nn.Module.__call__ replaced by a plain call of forward (no hook checks)
  model, dict      the same, with every submodule, parameter and buffer also put in its module's __dict__,
                   so that `self.attn` or `self.weight` skips nn.Module.__getattr__
  model, both      both of the above
  textbook         a textbook GPT-2 of nn.Modules (one Block per layer, as nanoGPT) with a KV cache, nothing else
  module-free      one function over the model's weight tensors (F.linear, F.layer_norm, SDPA), no nn.Module:
                   what the least Python a step can have looks like

Each ratio is the median of each round's time over that round's floor. The three "model, ..." rows patch
torch.nn.Module for the length of one run; they measure the cost of nn.Module's machinery and change
nothing outside this script. "textbook" and "module-free" use the model's weights and sampler, and the
script says whether they produced the model's tokens.
"""

import argparse
import contextlib
import os
import statistics
import sys
import time

import torch
import torch.nn as nn
from torch.nn import functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.measure import weight_matrices  # noqa: E402
from configurator import load_variant  # noqa: E402
from decoding.generate import sample_next  # noqa: E402
from model import GPT, GPTConfig  # noqa: E402


class TextbookBlock(nn.Module):
    """A GPT-2 block with a KV cache and nothing else, holding the weights of one of our layers."""

    def __init__(self, attn, mlp, max_len):
        super().__init__()
        self.n_head, self.head_dim = attn.inner.n_head, attn.inner.head_dim
        self.ln_1, self.qkv, self.attn_out = attn.norm, attn.inner.qkv_proj, attn.inner.out_proj
        self.ln_2, self.fc, self.fc_out = mlp.norm, mlp.inner.up, mlp.inner.down
        self.k = torch.zeros(1, self.n_head, max_len, self.head_dim)
        self.v = torch.zeros_like(self.k)

    def forward(self, x, pos):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln_1(x)).view(B, T, 3 * self.n_head, self.head_dim).transpose(1, 2).split(
            self.n_head, dim=1)
        self.k[:, :, pos:pos + T], self.v[:, :, pos:pos + T] = k, v
        y = F.scaled_dot_product_attention(q, self.k[:, :, :pos + T], self.v[:, :, :pos + T])
        x = x + self.attn_out(y.transpose(1, 2).reshape(B, T, C))
        return x + self.fc_out(F.gelu(self.fc(self.ln_2(x))))


class TextbookGPT(nn.Module):
    def __init__(self, model):
        super().__init__()
        stack = model.branches[0]
        self.wte, self.wpe, self.ln_f = model.tok_emb.wte, model.pos_emb, model.ln_f
        self.blocks = nn.ModuleList([TextbookBlock(stack.attn[a], stack.mlp[m], model.config.block_size)
                                     for a, m in zip(stack.attn_index, stack.mlp_index)])

    def forward(self, idx, pos):
        x = self.wte(idx) + self.wpe(torch.arange(pos, pos + idx.size(1)))
        for block in self.blocks:
            x = block(x, pos)
        return F.linear(self.ln_f(x), self.wte.weight)


def module_free_step(model):
    """The same decode step as one function of tensors: no module, no attribute lookup, no cache object."""
    stack, cfg = model.branches[0], model.config
    layers = [(a.norm.weight, a.norm.bias, a.inner.qkv_proj.weight, a.inner.qkv_proj.bias, a.inner.out_proj.weight,
               a.inner.out_proj.bias, m.norm.weight, m.norm.bias, m.inner.up.weight, m.inner.up.bias,
               m.inner.down.weight, m.inner.down.bias)
              for a, m in ((stack.attn[i], stack.mlp[j]) for i, j in zip(stack.attn_index, stack.mlp_index))]
    wte, wpe, lnf_w, lnf_b = model.tok_emb.wte.weight, model.pos_emb.weight, model.ln_f.weight, model.ln_f.bias
    C, H, eps = cfg.n_embd, cfg.n_head, cfg.norm_eps
    keys = [torch.zeros(1, H, cfg.block_size, C // H) for _ in layers]
    values = [torch.zeros_like(k) for k in keys]

    def step(tok, pos):
        x = wte[tok] + wpe[pos]
        for (n1w, n1b, qkv_w, qkv_b, out_w, out_b, n2w, n2b, up_w, up_b, down_w, down_b), K, V in zip(
                layers, keys, values):
            q, k, v = F.linear(F.layer_norm(x, (C,), n1w, n1b, eps), qkv_w, qkv_b).view(1, 1, 3 * H, -1).transpose(
                1, 2).split(H, dim=1)
            K[:, :, pos], V[:, :, pos] = k[:, :, 0], v[:, :, 0]
            y = F.scaled_dot_product_attention(q, K[:, :, :pos + 1], V[:, :, :pos + 1])
            x = x + F.linear(y.view(1, 1, C), out_w, out_b)
            x = x + F.linear(F.gelu(F.linear(F.layer_norm(x, (C,), n2w, n2b, eps), up_w, up_b)), down_w, down_b)
        return F.linear(F.layer_norm(x, (C,), lnf_w, lnf_b, eps), wte)
    return step


@contextlib.contextmanager
def plain_module_calls():
    """nn.Module.__call__ -> forward directly (skips the hook checks of _call_impl)."""
    call = nn.Module.__call__
    nn.Module.__call__ = lambda self, *args, **kwargs: self.forward(*args, **kwargs)
    try:
        yield
    finally:
        nn.Module.__call__ = call


@contextlib.contextmanager
def attributes_in_dict(model):
    """Every submodule, parameter and buffer also in its module's __dict__: found there without __getattr__."""
    added = []
    for module in model.modules():
        for table in (module._modules, module._parameters, module._buffers):
            for name, value in table.items():
                module.__dict__[name] = value
                added.append((module, name))
    try:
        yield
    finally:
        for module, name in added:
            del module.__dict__[name]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=255, help="tokens per decode run (at most block_size - 1)")
    parser.add_argument("--repeats", type=int, default=11, help="timed rounds (after 2 warm-up rounds)")
    parser.add_argument("--num_threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.num_threads)
    torch.manual_seed(0)
    model = GPT(GPTConfig(**load_variant("gpt"), dropout=0.0)).eval()
    if not 1 <= args.tokens < model.config.block_size:
        parser.error(f"--tokens={args.tokens} must be 1 .. {model.config.block_size - 1} (fix: a smaller --tokens)")
    mats = weight_matrices(model)
    inputs = [torch.zeros(1, 1, w.size(1)) for w, _ in mats]
    textbook, module_free = TextbookGPT(model), module_free_step(model)
    start = torch.zeros((1, 1), dtype=torch.long)

    def floor():
        for _ in range(args.tokens):
            for x, (w, b) in zip(inputs, mats):
                F.linear(x, w, b)

    def generate(*patches):
        with contextlib.ExitStack() as stack:
            for patch in patches:
                stack.enter_context(patch)
            gen = torch.Generator().manual_seed(0)
            return model.generate(start, args.tokens, temperature=0.8, top_k=200, generator=gen)

    def own_loop(step):   # GPT.generate's loop without re-priming (the window never fills here)
        gen, idx = torch.Generator().manual_seed(0), start
        for pos in range(args.tokens):
            logits = step(idx[:, -1:], pos)
            idx = torch.cat((idx, sample_next(logits[:, -1, :], 0.8, 200, gen)), dim=1)
        return idx

    runs = {"floor": floor,
            "model": lambda: generate(),
            "model, direct": lambda: generate(plain_module_calls()),
            "model, dict": lambda: generate(attributes_in_dict(model)),
            "model, both": lambda: generate(plain_module_calls(), attributes_in_dict(model)),
            "textbook": lambda: own_loop(textbook),
            "module-free": lambda: own_loop(module_free)}
    times, ratios, tokens = {k: [] for k in runs}, {k: [] for k in runs}, {}
    with torch.inference_mode():
        for r in range(2 + args.repeats):
            for name, run in runs.items():
                t0 = time.process_time()
                tokens[name] = run()
                dt = (time.process_time() - t0) / args.tokens
                if name == "floor":
                    floor_dt = dt   # each run is paired with the floor of its own round
                if r >= 2:
                    times[name].append(dt)
                    ratios[name].append(dt / floor_dt)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), {args.tokens} tokens, "
          f"median of {args.repeats} rounds, CPU time\n")
    print("| step | ms/token | / floor | same tokens as model |\n|---|---:|---:|---|")
    for name in runs:
        same = "" if name == "floor" else "yes" if torch.equal(tokens[name], tokens["model"]) else "no"
        ms, ratio = statistics.median(times[name]) * 1e3, statistics.median(ratios[name])
        print(f"| {name} | {ms:.3f} | {ratio:.3f}x | {same} |")


if __name__ == "__main__":
    main()
