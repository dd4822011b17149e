"""
One GPT, many compact variants. Every technique from the five papers is a flag of GPTConfig.

Read top to bottom:
  1. GPTConfig            - every flag, validated in __post_init__
  2. building blocks      - norms, positions (learned / sinusoidal / RoPE), MLP (plain / SwiGLU)
  3. attention            - causal self-attention with GQA, a cache's case, Deep Thinking's memory
  4. residual sub-layers  - pre- or post-norm, plain residual or Enhanced Residual (paper 000, 2.7)
  5. layer sharing plan   - one mechanism for MobileLLM repeats, ALBERT, groups, ShishuLM pairs
  6. DecoderStack         - the layers of one branch, with lgpt/cgpt width halving between groups
  7. initialisation       - the std of every weight: GPT-2, constant, InternLM, PanGu's (paper 003)
  8. GPT                  - embeddings (factorized or not), pgpt branches, Deep Thinking, the head
  9. generation           - GPT.generate (the sampling loop), the KV cache it fills, sample_next
Generation comes last, after the model it runs (as in nanoGPT); attention (3) hands the cache its
keys and values through the small interface that KVCache's docstring lists.

Papers 000-004 are in ../shared/papers/; the README says what each contributes and where.
"""

import math
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn as nn
from torch.nn import functional as F


# --- 1. Configuration -----------------------------------------------------------------------------

@dataclass
class GPTConfig:
    # --- the GPT-2 baseline (nanoGPT's field names) ---
    block_size: int = 1024          # context length
    vocab_size: int = 50304         # GPT-2's 50257 padded up to a multiple of 64
    # layer applications over all branches (n_layer / n_branches per pgpt branch), a shared layer
    # counted each time it is applied; one Deep Thinking pass
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768               # width of the decoder (of each branch for pgpt)
    dropout: float = 0.0
    bias: bool = True               # biases in Linears and LayerNorms (GPT-2: True, LLaMA: False)
    # --- LLaMA-style options (000, 001) ---
    norm: str = "layernorm"         # "layernorm" | "rmsnorm"
    norm_eps: float = 1e-5
    # "pre": x + F(norm(x)) (GPT-2, LLaMA) | "post": norm(x + F(x)) (original Transformer; paper
    # 000's public code)
    norm_placement: str = "pre"
    pos_embedding: str = "learned"  # "learned" | "sinusoidal" | "rope" | "none"
    rope_base: float = 10000.0
    # --- attention: GQA (000 2.5) ---
    n_kv_head: Optional[int] = None  # None = n_head (multi-head attention); must divide n_head
    # --- FFN: double up-projection / SwiGLU (000 2.2-2.3) ---
    # "standard": down(act(up x)) | "gated": down(act(gate x) * up x)
    mlp_type: str = "standard"
    activation: str = "gelu"        # "gelu" | "gelu_tanh" | "silu" | "relu" (gated + silu = SwiGLU)
    mlp_hidden: Optional[int] = None  # hidden size; None = mlp_ratio * width
    mlp_ratio: float = 4.0
    # --- embeddings: sharing/tying (000 2.4) and factorization (002 3.0.1) ---
    tie_embeddings: bool = True
    head_bias: bool = False         # a bias on the output head (paper 000's code has one, tied too)
    embd_factor_dim: Optional[int] = None   # E: vocab -> E -> n_embd; None = no factorization
    # --- layer sharing (000 2.6, 002 3.0.2, 001 4.4): one general mechanism ---
    share_group_size: int = 1       # k consecutive layers use one set of weights (1 = no sharing)
    share_from_layer: int = 0       # layers before this one are never shared
    share_sublayers: str = "both"   # "both" | "attn" | "mlp": which sub-layers the group shares
    # --- Enhanced Residual (000 2.7) ---
    enhanced_residual: bool = False
    # w at init (authors' code: 0, alpha = 0.5); e.g. 3.0 starts at alpha = 0.95
    residual_logit_init: float = 0.0
    # --- Deep Thinking (000 2.8) ---
    think_steps: int = 0            # T thinking passes before the test pass (paper: 3); 0 = off
    think_eta: float = 0.01         # memory update M_t = eta*K_t + (1-eta)*M_{t-1}
    # memory after pass 1: "own" = the layer's own K_1, V_1 (our reading) | "first_layer" = seeded
    # from the first layer's K_1, V_1 (authors' code)
    think_memory: str = "own"
    # --- ShishuLM (001 4.1-4.4, Appendix E) ---
    n_attn_layers: Optional[int] = None  # only the first n_attn_layers have attention; None = all
    # ... and the last n_top_attn_layers too (001 Table 10's "n + m"); never shared
    n_top_attn_layers: int = 0
    # --- ParallelGPT (004 3.1) ---
    n_branches: int = 1             # >1: embedding is n_branches*n_embd wide, split over the stacks
    # --- LinearGPT / ConvGPT (004 3.2-3.3) ---
    shrink_every: int = 0           # halve the width after every k layers but the last; 0 = off
    shrink_layer: str = "linear"    # "linear" (lgpt) | "conv" (cgpt)
    shrink_kernel: int = 1          # Conv1d kernel size for cgpt; >1 is causal (left padding only)
    # --- initialisation (003 3.1, Table 4, Appendix B; formulas in init_stds, section 7) ---
    init_scheme: str = "gpt2"       # "gpt2" | "constant" | "internlm" | "depth_adaptive"
    init_std: float = 0.02

    def __post_init__(self):
        def check(ok, msg):
            if not ok:
                raise ValueError(f"GPTConfig: {msg}")
        for name in ("block_size", "vocab_size", "n_layer", "n_head", "n_embd", "n_branches",
                     "share_group_size", "shrink_kernel"):
            check(getattr(self, name) >= 1, f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("mlp_hidden", "embd_factor_dim"):
            check(getattr(self, name) is None or getattr(self, name) >= 1,
                  f"{name} must be >= 1 (or None), got {getattr(self, name)}")
        for name in ("mlp_ratio", "init_std", "norm_eps", "rope_base"):   # inf would give NaNs
            check(0 < getattr(self, name) < math.inf,
                  f"{name} must be > 0 and finite, got {getattr(self, name)}")
        check(0.0 <= self.dropout < 1.0, f"dropout must be in [0, 1), got {self.dropout}")
        # the fields that name a choice, and their allowed values
        choices = dict(norm=("layernorm", "rmsnorm"), norm_placement=("pre", "post"),
                       mlp_type=("standard", "gated"),
                       pos_embedding=("learned", "sinusoidal", "rope", "none"),
                       activation=tuple(ACTIVATIONS), shrink_layer=("linear", "conv"),
                       share_sublayers=("both", "attn", "mlp"), think_memory=("own", "first_layer"),
                       init_scheme=INIT_SCHEMES)
        for name, allowed in choices.items():
            value = getattr(self, name)
            check(value in allowed, f"{name} must be one of {'|'.join(allowed)}, got {value!r}")
        self._check_widths(check)
        self._check_attention_placement(check)
        self._check_sharing(check)
        self._check_thinking(check)
        check(self.shrink_kernel == 1 or self.shrink_layer == "conv",
              "shrink_kernel > 1 needs shrink_layer='conv'")
        check(self.mlp_hidden is None or self.shrink_every == 0,
              "mlp_hidden is one size for all layers, but shrink_every changes the width; "
              "use mlp_ratio instead")
        check(not self.tie_embeddings or self.final_width() == self.embd_width(),
              f"tie_embeddings needs the head width ({self.final_width()}) to equal the embedding "
              f"width ({self.embd_width()}); set tie_embeddings=False for pgpt/lgpt/cgpt")

    def _check_widths(self, check):
        check(self.n_layer % self.n_branches == 0,
              f"n_layer ({self.n_layer}) must divide evenly over n_branches ({self.n_branches})")
        kv = self.n_head if self.n_kv_head is None else self.n_kv_head
        check(kv >= 1 and self.n_head % kv == 0,
              f"n_kv_head ({kv}) must divide n_head ({self.n_head}) for GQA")
        widths = sorted(set(self.widths()), reverse=True)   # in layer order, each width once
        for width in widths:
            check(width % self.n_head == 0,
                  f"width {width} must be divisible by n_head ({self.n_head}); with shrink_every "
                  f"every halved width must divide too (widths: {widths})")
        head_dim = widths[-1] // self.n_head
        check(self.pos_embedding != "rope" or head_dim % 2 == 0,
              f"RoPE needs an even head size, got {head_dim}")

    def _check_attention_placement(self, check):
        n = self.layers_per_branch()
        bottom, top = self.n_attn_layers, self.n_top_attn_layers
        check(bottom is None or 0 <= bottom <= n,
              f"n_attn_layers must be in [0, {n}], got {bottom}")
        check(top >= 0, f"n_top_attn_layers must be >= 0, got {top}")
        check(top == 0 or bottom is not None,
              "n_top_attn_layers needs n_attn_layers, the number of attention layers at the bottom "
              "(fix: set n_attn_layers, 0 for attention at the top only)")
        check(bottom is None or bottom + top <= n,
              f"n_attn_layers + n_top_attn_layers = {(bottom or 0) + top} exceeds the {n} layers "
              f"per branch")

    def _check_sharing(self, check):
        n = self.layers_per_branch()
        k, start = self.share_group_size, self.share_from_layer
        end = n - self.n_top_attn_layers   # the top attention layers are never shared
        check(0 <= start <= end,
              f"share_from_layer must be in [0, {end}] (n_layer/n_branches - n_top_attn_layers), "
              f"got {start}")
        check((end - start) % k == 0,
              f"the {end - start} shared layers (n_layer/n_branches - share_from_layer - "
              f"n_top_attn_layers) must split into groups of share_group_size={k}")
        check(k == 1 or self.shrink_every == 0,
              "layer sharing cannot be combined with width shrinking (lgpt/cgpt)")
        bottom = n if self.n_attn_layers is None else self.n_attn_layers
        check(k == 1 or bottom <= start or (bottom - start) % k == 0,
              "a sharing group would mix attention and MLP-only layers; "
              "set share_from_layer = n_attn_layers")

    def _check_thinking(self, check):
        check(self.think_steps >= 0, f"think_steps must be >= 0, got {self.think_steps}")
        check(0.0 < self.think_eta <= 1.0, f"think_eta must be in (0, 1], got {self.think_eta}")
        if self.think_steps == 0:
            return
        check(self.attn_layers_per_branch() > 0,
              "Deep Thinking needs attention layers (n_attn_layers = 0)")
        check(self.n_branches == 1 and self.shrink_every == 0,
              "Deep Thinking feeds each pass's output into the next pass, so the output must be as "
              "wide as the embedding: not with pgpt branches or lgpt/cgpt shrinking")
        check(self.think_steps >= 2 or self.think_memory == "first_layer",
              "think_steps=1 with think_memory='own' computes exactly the function of "
              "think_steps=0 (the test pass re-reads the keys of an identical pass); "
              "use think_steps >= 2")

    # --- derived sizes (used by the model and by the checks above) ---
    def layers_per_branch(self):
        return self.n_layer // self.n_branches

    def attention_layers(self):
        """The layers of a branch that have attention: all, or the first n_attn_layers and the last
        n_top_attn_layers (ShishuLM, paper 001 4.2 and Table 10); the others are MLP-only."""
        n = self.layers_per_branch()
        if self.n_attn_layers is None:
            return list(range(n))
        return list(range(self.n_attn_layers)) + list(range(n - self.n_top_attn_layers, n))

    def attn_layers_per_branch(self):
        return len(self.attention_layers())

    def embd_width(self):
        return self.n_embd * self.n_branches

    def widths(self):
        """Width of each layer of one branch: constant, or halved every `shrink_every` layers
        (lgpt/cgpt)."""
        n = self.layers_per_branch()
        if self.shrink_every == 0:
            return [self.n_embd] * n
        # layer i: halved k = i // shrink_every times, n_embd // 2**k as a shift (fast for any k)
        return [self.n_embd >> (i // self.shrink_every) for i in range(n)]

    def final_width(self):
        return self.widths()[-1]


# --- 2. Building blocks: norms, positions, MLP ----------------------------------------------------

def make_norm(config, dim):
    """LayerNorm (GPT-2; its bias follows `bias`) or RMSNorm (LLaMA: x / rms(x) * g, no mean, no
    bias)."""
    if config.norm == "rmsnorm":
        return nn.RMSNorm(dim, eps=config.norm_eps)
    return nn.LayerNorm(dim, eps=config.norm_eps, bias=config.bias)


def sinusoidal_positions(n_positions, dim):
    """Fixed sin/cos positions of 'Attention is all you need' (the paper-000 baseline in its
    authors' code)."""
    pos = torch.arange(n_positions, dtype=torch.float32)[:, None]
    freq = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))
    table = torch.zeros(n_positions, dim)
    table[:, 0::2] = torch.sin(pos * freq)
    table[:, 1::2] = torch.cos(pos * freq[: dim // 2])
    return table


def rope_tables(n_positions, head_dim, base):
    """cos/sin tables of rotary position embeddings (RoPE), shape (n_positions, head_dim/2)."""
    inv_freq = 1.0 / base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    angles = torch.outer(torch.arange(n_positions, dtype=torch.float32), inv_freq)
    return angles.cos(), angles.sin()


def apply_rope(x, cos, sin):
    """Rotate pairs (first half, second half) of each head by a position-dependent angle.
    x: (B, H, T, D)."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).type_as(x)


def gelu_tanh(x):
    """GELU through its tanh approximation (GPT-2's original code)."""
    return F.gelu(x, approximate="tanh")


ACTIVATIONS = {"gelu": F.gelu, "gelu_tanh": gelu_tanh, "silu": F.silu, "relu": F.relu}


class MLP(nn.Module):
    """Feed-forward network.

    standard:                  down(act(up x))                       (GPT-2)
    gated (double up-proj.):   down(act(gate x) * up x)              (paper 000, 2.2)
    gated + silu = SwiGLU:     down(silu(gate x) * up x)             (paper 000, 2.3)
    The activation is applied to the gate branch only (000's public code wrongly applied it to
    both).
    """

    def __init__(self, config, width):
        super().__init__()
        hidden = config.mlp_hidden or int(config.mlp_ratio * width)
        self.gated = config.mlp_type == "gated"
        self.up = nn.Linear(width, hidden, bias=config.bias)
        self.gate = nn.Linear(width, hidden, bias=config.bias) if self.gated else None
        self.down = nn.Linear(hidden, width, bias=config.bias)
        self.act = ACTIVATIONS[config.activation]
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x, ctx=None, slot=None):
        h = self.act(self.gate(x)) * self.up(x) if self.gated else self.act(self.up(x))
        y = self.down(h)
        return self.dropout(y) if self.training else y   # eval: no module call for a no-op (speed)


# --- 3. Attention: causal, GQA; the cache's case (section 9) and Deep Thinking's memory -----------

class ForwardContext:
    """Per-call state shared by all layers: the new tokens' positions, the cache, the branch and
    the Deep Thinking pass."""

    def __init__(self, start, length, cache, device):
        self.start = start      # position of the first new token (cache.length; 0 without a cache)
        self.length = length    # number of new tokens
        self.cache = cache      # a cache (KVCache, section 9) or None (training, a full forward)
        if cache is None:
            self.positions = torch.arange(start, start + length, device=device)
        else:
            self.positions = cache.positions(length, device)   # the cache numbers the new tokens
        self.branch = 0
        self.think_pass = 0     # Deep Thinking: t - 1 in thinking pass t (M_t), T in the test pass
        self.memory = {}        # Deep Thinking memory without a cache: slot -> (k, v)
        self.first_kv = None    # think_memory="first_layer": pass-1 k, v of the first attention


def causal_mask(start, length, device):
    """Boolean (length, start+length): the query at position start+i sees keys at <= start+i."""
    q_pos = torch.arange(start, start + length, device=device)[:, None]
    k_pos = torch.arange(start + length, device=device)[None, :]
    return k_pos <= q_pos


def causal_attention(q, k, v, start=0, dropout_p=0.0):
    """Attention of the queries q (B, H, T, D) of positions start..start+T-1 over the keys and
    values k, v (B, H_kv, start+T, D) of positions 0..start+T-1: query at p sees keys at <= p."""
    # start 0: SDPA's own causal triangle (is_causal, training's fast path); one new token after
    # cached ones sees every key (no mask); several new tokens: the causal rule, written out
    mask = None
    if start > 0 and q.size(2) > 1:
        mask = causal_mask(start, q.size(2), q.device)
    gqa = q.size(1) != k.size(1)   # GQA: query head h reads kv head h // (n_head / n_kv_head)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=start == 0,
                                          dropout_p=dropout_p, enable_gqa=gqa)


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention with grouped-query attention (paper 000, 2.5).
    GQA: n_head query heads share n_kv_head key/value heads (n_head / n_kv_head queries per group).
    With think_steps > 0 it also does Deep Thinking's attention (see `deep_thinking`).
    """

    def __init__(self, config, width):
        super().__init__()
        self.n_head = config.n_head
        self.n_kv_head = config.n_kv_head or config.n_head
        self.head_dim = width // config.n_head
        # one matmul for queries, keys and values (GQA: fewer key/value heads than query heads)
        kv_width = self.n_kv_head * self.head_dim
        self.qkv_proj = nn.Linear(width, width + 2 * kv_width, bias=config.bias)
        self.out_proj = nn.Linear(width, width, bias=config.bias)
        self.dropout = config.dropout
        self.resid_dropout = nn.Dropout(config.dropout)
        self.think_steps = config.think_steps
        self.think_eta = config.think_eta
        self.think_memory = config.think_memory
        self.use_rope = config.pos_embedding == "rope"
        if self.use_rope:
            cos, sin = rope_tables(config.block_size, self.head_dim, config.rope_base)
            self.register_buffer("rope_cos", cos, persistent=False)
            self.register_buffer("rope_sin", sin, persistent=False)

    def forward(self, x, ctx, slot):
        B, T, C = x.shape
        # q (B, H, T, D), k and v (B, H_kv, T, D): views of one projection (a lean decode step)
        qkv = self.qkv_proj(x).view(B, T, -1, self.head_dim).transpose(1, 2)
        q, k, v = qkv.split([self.n_head, self.n_kv_head, self.n_kv_head], dim=1)
        if self.use_rope:
            cos, sin = self.rope_cos[ctx.positions], self.rope_sin[ctx.positions]
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if self.think_steps:      # special case: Deep Thinking, below
            y = self.deep_thinking(q, k, v, ctx, slot)
        elif ctx.cache is None:   # training, a full forward: a token sees itself and those before
            y = causal_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0)
        else:                     # decoding: the cache stores k, v and attends (section 9)
            y = ctx.cache.attend(slot, q, k, v)
        y = self.out_proj(y.transpose(1, 2).reshape(B, T, C))
        return self.resid_dropout(y) if self.training else y   # eval: no module call for a no-op

    # --- Deep Thinking (paper 000, 2.8): a special case, its memory kept only by KVCache ---
    def deep_thinking(self, q, k, v, ctx, slot):
        """One layer of Deep Thinking. The paper counts thinking passes t = 1..T; the code's
        p = ctx.think_pass is t - 1 (the memory slot of pass p holds M_{p+1}); p = T: the test pass.

            thinking pass 1:       attend over own K_1           M_1 = K_1            (same for V)
            thinking pass t > 1:   attend over [M_{t-1} ; K_t]   M_t = eta*K_t + (1-eta)*M_{t-1}
            test pass:             attend over M_T only
        Both halves of [M ; K] are causally masked (query i sees memory and keys at positions <= i),
        so no pass sees a future token, and the memory is per sequence. M_1 = K_1 is our reading
        (2.8 leaves the first memory undefined); think_memory="first_layer" is the authors' code:
        M_1 = eta*K_1 + (1-eta)*K_1(first attention layer).
        """
        p, T = ctx.think_pass, q.size(2)
        dropout = self.dropout if self.training else 0.0
        prev = slot[:2] + (p - 1,)   # the slot of M_p, the memory of the pass before (t = p + 1)
        if p == self.think_steps:  # the test pass uses its queries only: keys/values from memory
            return causal_attention(q, *self.read_memory(ctx, prev), ctx.start, dropout)
        keys, values = k, v
        if ctx.cache is not None:   # and the keys/values of the cached positions before them
            keys, values = ctx.cache.store(ctx.cache.kv, slot, k, v)
        if p == 0:   # thinking pass 1
            y = causal_attention(q, keys, values, ctx.start, dropout)
            if self.think_memory == "first_layer":
                if ctx.first_kv is None:  # this is the first attention layer
                    ctx.first_kv = (k, v)
                k = self.think_eta * k + (1 - self.think_eta) * ctx.first_kv[0]
                v = self.think_eta * v + (1 - self.think_eta) * ctx.first_kv[1]
        else:
            mem_k, mem_v = self.read_memory(ctx, prev)
            mask = causal_mask(ctx.start, T, q.device)
            keys, values = torch.cat([mem_k, keys], dim=2), torch.cat([mem_v, values], dim=2)
            mask = torch.cat([mask, mask], dim=-1)
            y = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, dropout_p=dropout,
                                               enable_gqa=self.n_kv_head != self.n_head)
            new = slice(ctx.start, ctx.start + T)
            k = self.think_eta * k + (1 - self.think_eta) * mem_k[:, :, new]
            v = self.think_eta * v + (1 - self.think_eta) * mem_v[:, :, new]
        if ctx.cache is None:
            ctx.memory[slot] = (k, v)
        else:   # the memory of the new positions (cached positions keep theirs: memory is causal)
            ctx.cache.store(ctx.cache.memory, slot, k, v)
        return y

    def read_memory(self, ctx, slot):
        """Deep Thinking memory written by `slot` (a layer in a pass), at every position so far."""
        if ctx.cache is None:
            return ctx.memory[slot]
        keys, values = ctx.cache.memory[slot]
        end = ctx.start + ctx.length
        return keys[:, :, :end], values[:, :, :end]



# --- 4. Residual sub-layers: pre- or post-norm, plain or Enhanced Residual (paper 000, 2.7) -------

class ResidualSubLayer(nn.Module):
    """The residual around one attention or FFN sub-layer F (`inner`): pre-norm x -> x + F(norm(x))
    (GPT-2, LLaMA) or post-norm x -> norm(x + F(x)) (the original Transformer; paper 000's code).

    Enhanced Residual (paper 000, 2.7) replaces the sum by  alpha * x + (1 - alpha) * F(.),
    alpha = sigmoid(w), one learned 0-d w per sub-layer (so never decayed), w = 0 at init (alpha =
    0.5: the paper gives no init, its code 0; `residual_logit_init` changes it). Under pre-norm the
    mix shrinks the residual stream by alpha at every sub-layer with nothing to restore its scale.
    Under post-norm (the paper's code) a norm is scale-invariant, so the mix is norm(x + g * F(x)),
    g = (1 - alpha) / alpha: at alpha = 0.5 exactly the plain residual (up to eps), and training can
    only learn a gain per sub-layer.
    """

    def __init__(self, config, width, inner):
        super().__init__()
        self.norm = make_norm(config, width)
        self.inner = inner
        self.post_norm = config.norm_placement == "post"
        self.alpha_logit = None
        if config.enhanced_residual:
            self.alpha_logit = nn.Parameter(torch.full((), float(config.residual_logit_init)))

    def forward(self, x, ctx, slot):
        if self.post_norm:
            return self.norm(self.mix(x, self.inner(x, ctx, slot)))
        return self.mix(x, self.inner(self.norm(x), ctx, slot))

    def mix(self, x, fx):
        if self.alpha_logit is None:
            return x + fx
        alpha = torch.sigmoid(self.alpha_logit)
        return alpha * x + (1 - alpha) * fx


# --- 5. Layer sharing: one plan for every scheme --------------------------------------------------

def sharing_plan(config):
    """Which attention / FFN weights each layer of a branch uses: (attn_index, mlp_index) lists.

    Layers share_from_layer .. n - n_top_attn_layers - 1 form groups of `share_group_size`
    consecutive layers; a group shares the sub-layers named by `share_sublayers`. The layers before
    share_from_layer and the top attention layers keep their own weights. One mechanism covers:
      MobileLLM immediate block-wise repeat (000 2.6):  share_group_size=2        -> 0 0 1 1 2 2 ...
      ALBERT all-layer sharing (002 3.0.2):             share_group_size=n_layer  -> 0 0 0 0 ...
      G groups (002 3.0.2):                             share_group_size=n_layer/G
      only attention or only FFN shared (ours):         share_sublayers="attn" or "mlp"
      ShishuLM paired MLP-only blocks (001 4.4):        share_from_layer=n_attn_layers, group size 2
    attn_index[l] is None for ShishuLM's MLP-only layers. E.g. "2 + 1" (001 Table 10's n + m
    notation) in 7 layers (n_attn_layers=2, n_top_attn_layers=1, share_from_layer=2,
    share_group_size=2):
      layer       0   1   2   3   4   5   6
      attention   0   1   -   -   -   -   2      attention at the bottom and at the top
      FFN         0   1   2   2   3   3   4      the run of MLP-only layers shared in pairs
    """
    n = config.layers_per_branch()
    k, start = config.share_group_size, config.share_from_layer
    end = n - config.n_top_attn_layers
    group = [start + (layer - start) // k if start <= layer < end else layer for layer in range(n)]
    shared_attn = config.share_sublayers in ("both", "attn")
    shared_mlp = config.share_sublayers in ("both", "mlp")
    attn_layers = config.attention_layers()
    attn_keys = _compact([group[l] if shared_attn else l for l in attn_layers])
    attn_index = [None] * n
    for layer, key in zip(attn_layers, attn_keys):
        attn_index[layer] = key
    return attn_index, _compact([group[l] if shared_mlp else l for l in range(n)])


def _first_uses(index):
    """For weight sets 0, 1, 2, ... of a plan, the first layer that uses each (None skipped)."""
    n_sets = max((i for i in index if i is not None), default=-1) + 1
    return [index.index(i) for i in range(n_sets)]


def _compact(keys):
    """Renumber keys 0, 1, 2, ... in order of first appearance."""
    index = {}
    return [index.setdefault(key, len(index)) for key in keys]


# --- 6. A decoder stack, with lgpt/cgpt width halving (paper 004, 3.2-3.3) ------------------------

class ConvShrink(nn.Module):
    """ConvGPT (paper 004, 3.3): a Conv1d over the sequence axis maps width C -> C/2.

    Kernel 1 is a per-token dense layer (the paper's parameter count). Kernel k > 1 is made causal
    in forward (ours: 3.3 does not say how the convolution treats the sequence's ends).
    """

    def __init__(self, config, width):
        super().__init__()
        self.kernel = config.shrink_kernel
        self.conv = nn.Conv1d(width, width // 2, self.kernel, bias=config.bias)

    def forward(self, x, ctx, slot):
        # causal padding: k-1 inputs on the left only (zeros before position 0; when decoding, the
        # cache's last k-1 inputs), none on the right, and the Conv1d pads nothing: output t reads
        # inputs t-k+1 .. t
        if ctx.cache is None:
            window = torch.cat([x.new_zeros(x.size(0), self.kernel - 1, x.size(2)), x], dim=1)
        else:
            window = ctx.cache.conv_window(slot, x, self.kernel - 1)
        return self.conv(window.transpose(1, 2)).transpose(1, 2)


class LinearShrink(nn.Module):
    """LinearGPT (paper 004, 3.2, eq. 4-5): a dense layer maps width C -> C/2 (the paper: after
    every two decoder blocks of one width; here after every shrink_every layers but the last, see
    DecoderStack)."""

    def __init__(self, config, width):
        super().__init__()
        self.proj = nn.Linear(width, width // 2, bias=config.bias)

    def forward(self, x, ctx, slot):
        return self.proj(x)


class DecoderStack(nn.Module):
    """The layers of one branch. Layer l applies attention sub-layer attn[attn_index[l]] (if any),
    then FFN sub-layer mlp[mlp_index[l]], then a width-halving layer if l ends a group of
    `shrink_every` and is not the last layer (shrink_after; the last group goes to the head at its
    width). The indices are sharing_plan's (its table shows every scheme); e.g. MobileLLM's repeat,
    share_group_size=2, 4 layers:
        x -> attn[0] mlp[0] -> attn[0] mlp[0] -> attn[1] mlp[1] -> attn[1] mlp[1] -> output"""

    def __init__(self, config):
        super().__init__()
        self.attn_index, self.mlp_index = sharing_plan(config)
        widths = config.widths()
        # attn[i] / mlp[i]: one ResidualSubLayer (norm and residual around the attention / FFN in
        # .inner) per unique weight set, built at the width of the first layer that uses it (a
        # sharing group never spans a width change: GPTConfig forbids sharing with shrinking).
        # Named for what they wrap: the checkpoints' keys
        self.attn = nn.ModuleList([
            ResidualSubLayer(config, widths[layer], CausalSelfAttention(config, widths[layer]))
            for layer in _first_uses(self.attn_index)])
        self.mlp = nn.ModuleList([
            ResidualSubLayer(config, widths[layer], MLP(config, widths[layer]))
            for layer in _first_uses(self.mlp_index)])
        every = config.shrink_every
        shrink_cls = ConvShrink if config.shrink_layer == "conv" else LinearShrink
        self.shrink_after = [l for l in range(len(widths) - 1) if every and (l + 1) % every == 0]
        self.shrink = nn.ModuleList([shrink_cls(config, widths[l]) for l in self.shrink_after])

    def forward(self, x, ctx):
        for layer in range(len(self.mlp_index)):
            slot = (ctx.branch, layer, ctx.think_pass)
            if self.attn_index[layer] is not None:
                x = self.attn[self.attn_index[layer]](x, ctx, slot)
            x = self.mlp[self.mlp_index[layer]](x, ctx, slot)
            if layer in self.shrink_after:
                x = self.shrink[self.shrink_after.index(layer)](x, ctx, slot)
        return x


# --- 7. Initialisation (paper 003, PanGu-pi Pro, 3.1, Table 4, Appendix B) ------------------------

INIT_SCHEMES = ("gpt2", "constant", "internlm", "depth_adaptive")


def init_stds(config, depth):
    """Std of each attention (q, k, v, out) and FFN (up, gate, down) weight of a layer at relative
    depth `depth` = l / (L - 1) (0 = first layer, 1 = last; L = layers per branch; 0 when L = 1).
    sigma = init_std, N = 2 * n_layer (residual sub-layers; a shared or MLP-only layer still counts
    two, as this repository's gpt2 scheme always did). Embeddings, the head and lgpt/cgpt shrink
    layers always use sigma.
      constant        sigma everywhere. Paper 003 3.1/Table 4: the best of its three and its
                      recommendation for tiny models; paper 001 5: "mean = 0 and standard
                      deviation = 0.02".
      gpt2            out, down: sigma / sqrt(N) (GPT-2's code: the projections that write into the
                      residual stream). Paper 003 3.1 describes GPT-2 as scaling "all linear layer
                      parameters" by 1/sqrt(N); we follow GPT-2's code.
      internlm        out and gate: sigma / sqrt(N). Paper 003 3.1: InternLM applies the same scale
                      "only to ... the out projection in MHA layers and the gate projection in MLP
                      layers". Ours: a standard (ungated) FFN has no gate, so its up projection, the
                      one the activation reads, takes the gate's scale.
      depth_adaptive  paper 003 Appendix B (Table 11, "Ours"): q, k "decrease from sqrt(2) sigma to
                      sigma", v, out "increase from sigma / sqrt(2) to sigma" as the layer index
                      grows; FFN sigma. The paper gives only the end points; linear in depth (qk,
                      vo below) is ours.
    """
    sigma, scheme = config.init_std, config.init_scheme
    std = dict.fromkeys(("q", "k", "v", "out", "up", "gate", "down"), sigma)
    scaled = sigma / math.sqrt(2 * config.n_layer)
    if scheme == "gpt2":
        std.update(out=scaled, down=scaled)
    elif scheme == "internlm":
        std.update({"out": scaled, "gate" if config.mlp_type == "gated" else "up": scaled})
    elif scheme == "depth_adaptive":
        qk = sigma * (math.sqrt(2) - (math.sqrt(2) - 1) * depth)
        vo = sigma * (1 / math.sqrt(2) + (1 - 1 / math.sqrt(2)) * depth)
        std.update(q=qk, k=qk, v=vo, out=vo)
    return std


def merge_blocks(blocks):
    """[(rows, std), ...] with neighbouring blocks of the same std joined (one draw, as for a plain
    Linear)."""
    merged = []
    for rows, std in blocks:
        if merged and merged[-1][1] == std:
            rows += merged.pop()[0]
        merged.append((rows, std))
    return merged


# --- 8. The model ---------------------------------------------------------------------------------

class TokenEmbedding(nn.Module):
    """Token embedding, optionally factorized (paper 002, 3.0.1): vocab -> E -> width, V*E + E*width
    parameters instead of V*width. With tie_embeddings (paper 000, 2.4) the head reuses these
    weights: logits = (h @ P) @ W_e^T, going back through the projection P when factorized."""

    def __init__(self, config):
        super().__init__()
        width = config.embd_width()
        self.wte = nn.Embedding(config.vocab_size, config.embd_factor_dim or width)
        self.proj = None
        if config.embd_factor_dim:
            self.proj = nn.Linear(config.embd_factor_dim, width, bias=False)

    def forward(self, idx):
        x = self.wte(idx)
        return x if self.proj is None else self.proj(x)

    def tied_logits(self, h):
        if self.proj is not None:
            h = h @ self.proj.weight
        return h @ self.wte.weight.t()


class GPT(nn.Module):

    def __init__(self, config):
        super().__init__()
        self.config = config
        width = config.embd_width()
        self.tok_emb = TokenEmbedding(config)
        if config.pos_embedding == "learned":
            self.pos_emb = nn.Embedding(config.block_size, width)
        elif config.pos_embedding == "sinusoidal":
            table = sinusoidal_positions(config.block_size, width)
            self.register_buffer("pos_table", table, persistent=False)
        self.drop = nn.Dropout(config.dropout)
        self.branches = nn.ModuleList([DecoderStack(config) for _ in range(config.n_branches)])
        if config.n_branches > 1:
            self.branch_logits = nn.Parameter(torch.zeros(config.n_branches))
        self.keep_branch = None   # pgpt at inference: index of the only branch to run (None = all)
        # post-norm: every sub-layer already ends in a norm, so a final norm would only stack a
        # second one (the original Transformer and paper 000's code have none)
        self.ln_f = nn.Identity()
        if config.norm_placement == "pre":
            self.ln_f = make_norm(config, config.final_width())
        if not config.tie_embeddings:
            self.lm_head = nn.Linear(config.final_width(), config.vocab_size, bias=config.head_bias)
        elif config.head_bias:
            self.tied_head_bias = nn.Parameter(torch.zeros(config.vocab_size))
        plan = self._init_plan()

        def init_weights(module):
            self._init_weights(module, plan)
        self.apply(init_weights)   # children first, then their parent: the order of the draws

    # --- initialisation (paper 003 3.1, Table 4, Appendix B; section 7) ---
    def _init_weights(self, module, plan):
        """Every Linear, Conv1d and Embedding weight ~ N(0, std), biases 0. The std is init_std,
        except for the attention and FFN weights whose std init_stds sets (per block of rows for the
        fused qkv_proj)."""
        if isinstance(module, (nn.Linear, nn.Conv1d, nn.Embedding)):
            blocks = plan.get(module, [(module.weight.size(0), self.config.init_std)])
            start = 0
            for rows, std in blocks:
                nn.init.normal_(module.weight[start:start + rows], mean=0.0, std=std)
                start += rows
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)

    def _init_plan(self):
        """{module: [(rows, std), ...]} for the weights of every attention and FFN sub-layer, from
        init_stds at the depth of the first layer that uses them (neighbouring blocks of one std are
        drawn as one)."""
        plan = {}
        for stack in self.branches:
            last = max(1, len(stack.mlp_index) - 1)
            for layer, sub in zip(_first_uses(stack.attn_index), stack.attn):
                std, attn = init_stds(self.config, layer / last), sub.inner
                q, kv = attn.out_proj.in_features, attn.n_kv_head * attn.head_dim
                plan[attn.qkv_proj] = merge_blocks([(q, std["q"]), (kv, std["k"]), (kv, std["v"])])
                plan[attn.out_proj] = [(attn.out_proj.out_features, std["out"])]
            for layer, sub in zip(_first_uses(stack.mlp_index), stack.mlp):
                std, mlp = init_stds(self.config, layer / last), sub.inner
                for name in ("up", "gate", "down"):
                    if getattr(mlp, name) is not None:
                        plan[getattr(mlp, name)] = [(getattr(mlp, name).out_features, std[name])]
        return plan

    # --- sizes ---
    def get_num_params(self, non_embedding=True):
        """Unique parameters (shared weights counted once). non_embedding=True leaves out the
        learned position embeddings, as nanoGPT does (token embeddings stay: they double as the head
        when tied)."""
        n = sum(p.numel() for p in self.parameters())
        if non_embedding and hasattr(self, "pos_emb"):
            n -= self.pos_emb.weight.numel()
        return n

    def depth_summary(self):
        """Effective depth vs unique weights, e.g. '60 layers applied per branch, from 30 unique
        attention and 30 unique FFN sub-layers' (layer sharing reuses weights; ShishuLM has fewer
        attention layers)."""
        stack = self.branches[0]
        n_attn = len({a for a in stack.attn_index if a is not None})
        branches = ""
        if self.config.n_branches > 1:
            branches = f" x {self.config.n_branches} branches"
        passes = ""
        if self.config.think_steps:
            passes = f", {self.config.think_steps + 1} passes (Deep Thinking)"
        return (f"{len(stack.mlp_index)} layers applied{branches}, from {n_attn} unique attention "
                f"and {len(stack.mlp)} unique FFN sub-layers{passes}")

    # --- ParallelGPT (paper 004, 3.1) ---
    def branch_weights(self):
        """pgpt combination weights: softmax of learned logits (positive, summing to 1; start
        equal). For two branches this is w = sigmoid(a1 - a2) and 1 - w, the paper's eq. 3."""
        if self.config.n_branches == 1:
            return torch.ones(1, device=self.tok_emb.wte.weight.device)
        return F.softmax(self.branch_logits, dim=0)

    def heaviest_branch(self):
        return int(self.branch_weights().argmax())

    def keep_heaviest_branch(self):
        """pgpt at inference (paper 004): run only the branch of the largest weight; a note."""
        if self.config.n_branches == 1:
            return "keep_heaviest_branch ignored (the model has one branch)"
        self.keep_branch = self.heaviest_branch()
        weights = ", ".join(f"{w:.3f}" for w in self.branch_weights().tolist())
        n = self.config.n_branches
        return f"running only branch {self.keep_branch} of {n} (weights {weights})"

    # --- forward ---
    def embed(self, idx, positions):
        x = self.tok_emb(idx)
        if self.config.pos_embedding == "learned":
            x = x + self.pos_emb(positions)
        elif self.config.pos_embedding == "sinusoidal":
            x = x + self.pos_table[positions]
        return self.drop(x) if self.training else x

    def forward(self, idx, targets=None, cache=None, all_logits=False):
        """idx (B, T) -> (logits, loss). With targets: logits at every position and the mean
        cross-entropy. Without: logits of the last position only, unless all_logits=True. With a
        cache (section 9) the tokens continue the cached sequence (positions cache.length ..) and
        extend it."""
        B, T = idx.shape
        start = cache.length if cache is not None else 0
        if start + T > self.config.block_size:
            raise ValueError(f"sequence of {start + T} tokens exceeds block_size "
                             f"{self.config.block_size}")
        ctx = ForwardContext(start, T, cache, idx.device)
        x = self.embed(idx, ctx.positions)
        h = self.think(x, ctx) if self.config.think_steps else self.run_branches(x, ctx)
        if cache is not None:
            cache.advance(T)
        h = self.ln_f(h)
        if targets is None and not all_logits:
            h = h[:, -1:, :]
        logits = self.head(h)
        loss = None
        if targets is not None:
            logits_2d = logits.view(-1, logits.size(-1)).float()
            loss = F.cross_entropy(logits_2d, targets.reshape(-1), ignore_index=-1)
        return logits, loss

    def head(self, h):
        """Output logits: through the tied embedding (paper 000, 2.4) or a separate lm_head."""
        if not self.config.tie_embeddings:
            return self.lm_head(h)
        logits = self.tok_emb.tied_logits(h)
        return logits + self.tied_head_bias if self.config.head_bias else logits

    def think(self, x, ctx):
        """Deep Thinking (paper 000, 2.8): T thinking passes, then the test pass that gives the
        output. Thinking pass 1 reads the embeddings x, pass t > 1 reads the output of pass t-1 (the
        authors' code; the text only says that in pass t each layer reads the previous layer's
        output); each layer accumulates a KV memory (see CausalSelfAttention.deep_thinking). The
        test pass reads x again and attends over the memory M_T ("the accumulated matrices are used
        in the test stage"). Gradients flow through every pass.
        """
        h = x
        for think_pass in range(self.config.think_steps):
            ctx.think_pass = think_pass   # thinking pass t = think_pass + 1
            h = self.run_branches(h, ctx)
        ctx.think_pass = self.config.think_steps
        return self.run_branches(x, ctx)

    def run_branches(self, x, ctx):
        """One branch: the decoder stack. pgpt: branch i gets the i-th n_embd-wide chunk of the
        embedding and the outputs are mixed as sum_i w_i * decoder_i(x_i) (paper 004, eq. 1-3); with
        keep_branch set only that branch runs, the paper's inference-time drop of the weaker
        branch."""
        if self.config.n_branches == 1:
            return self.branches[0](x, ctx)
        chunks = x.split(self.config.n_embd, dim=-1)
        if self.keep_branch is not None:
            ctx.branch = self.keep_branch
            return self.branches[self.keep_branch](chunks[self.keep_branch], ctx)
        weights = self.branch_weights()
        out = 0
        for i, (stack, chunk) in enumerate(zip(self.branches, chunks)):
            ctx.branch = i
            out = out + weights[i] * stack(chunk, ctx)
        return out

    # --- training helpers ---
    def configure_optimizers(self, weight_decay, learning_rate, betas, device_type):
        """AdamW; weight decay only on >= 2-D weights (matmuls, embeddings, convs), never on norms,
        biases, enhanced-residual alphas or pgpt branch logits."""
        params = [p for p in self.parameters() if p.requires_grad]
        groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
                  {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
        fused = device_type == "cuda"
        return torch.optim.AdamW(groups, lr=learning_rate, betas=betas, fused=fused)

    # --- 9. Generation: the sampling loop, then the KV cache it fills and sample_next -------------
    def new_cache(self):
        return KVCache(self.config.block_size)

    def decode_step(self, idx, cache):
        """Logits (B, 1, V) after one more token per sequence, idx (B, 1), continuing the cached
        ones."""
        return self(idx, cache=cache)[0]

    @torch.inference_mode()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None, use_kv_cache=True,
                 generator=None, cache=None, step=None, on_token=None):
        """Sample max_new_tokens tokens after idx (B, T): one token a step through the KV cache, or
        the whole window (use_kv_cache=False; the same logits). A full window (block_size tokens)
        starts again from its recent half at position 0 (docs/sampling_and_eval.md). cache, step:
        another cache of KVCache's interface and the function of one decode step
        (tools/fast_sample.py: a static cache and a compiled step). on_token(id): called with
        each new token of the first sequence."""
        was_training = self.training
        self.eval()
        block_size = self.config.block_size
        if use_kv_cache:
            cache = cache if cache is not None else self.new_cache()
            step = step or self.decode_step
        else:
            cache = None
        window_start, prime = 0, True
        idx_next = None   # the token sampled last
        for _ in range(max_new_tokens):
            # window full: start again at position 0 from its recent half (positions past
            # block_size have no embedding; nanoGPT crops every step, a cache would then refill)
            if idx.size(1) - window_start > block_size:
                window_start = idx.size(1) - max(1, block_size // 2)
                prime = True
            if cache is None:
                logits, _ = self(idx[:, window_start:])
            elif prime:
                cache.reset()   # same buffers, positions from 0
                logits, _ = self(idx[:, window_start:], cache=cache)
                prime = False
            else:
                logits = step(idx_next, cache)   # the last token (B, 1): same strides every step
            idx_next = sample_next(logits[:, -1, :], temperature, top_k, generator)
            idx = torch.cat((idx, idx_next), dim=1)
            if on_token is not None:   # sample.py prints the text as it comes
                on_token(idx_next[0, 0])
        self.train(was_training)
        return idx


class KVCache:
    """The cache of incremental decoding (model.new_cache(); GPT.generate fills it).

    The cache interface, what GPT.forward and its layers call on a cache (this one; a static one in
    tools/fast_sample.py for a compiled step, and in tools/executorch/export.py for a program):
      length                       tokens already cached (GPT.forward's block_size check reads it)
      positions(T, device)         positions of the T new tokens (RoPE, position embeddings),
                                   asked once per forward, before any attend
      attend(slot, q, k, v)        store k, v (B, H_kv, T, D) at the new positions and return the
                                   attention of q (B, H, T, D) over every cached key up to them
      conv_window(slot, x, n_past) cgpt: x (B, T, C) after the n_past inputs before it (ConvShrink)
      advance(T)                   after the forward: the T new tokens are cached
      reset()                      start a new sequence at position 0, keeping the buffers
    A slot is one application of a layer, (branch, layer, think_pass): a shared layer applied twice,
    each pgpt branch and each Deep Thinking pass get their own. Deep Thinking is a special case
    only this cache serves: CausalSelfAttention.deep_thinking stores keys and its memory itself
    (`store`, `kv`, `memory`); the static caches refuse it. Here each slot's keys and values are
    buffers of max_len positions, read up to the newest one.
    """

    def __init__(self, max_len):
        self.max_len = max_len
        self.length = 0
        self.kv = {}          # slot -> (keys, values), each (B, H_kv, max_len, D): GQA, H_kv heads
        self.memory = {}      # Deep Thinking: slot -> its memory after that pass, as kv
        self.conv_tail = {}   # cgpt: slot -> the last kernel-1 inputs of its ConvShrink

    def positions(self, length, device):
        return torch.arange(self.length, self.length + length, device=device)

    def attend(self, slot, q, k, v):
        keys, values = self.store(self.kv, slot, k, v)
        return causal_attention(q, keys, values, start=self.length)

    def store(self, table, slot, k, v):
        """Write k, v (B, H_kv, T, D) at positions length.. of table[slot]; return all its keys and
        values up to them."""
        if slot not in table:
            shape = (k.size(0), k.size(1), self.max_len, k.size(3))
            table[slot] = (k.new_zeros(shape), v.new_zeros(shape))
        keys, values = table[slot]
        end = self.length + k.size(2)
        keys[:, :, self.length:end] = k
        values[:, :, self.length:end] = v
        return keys[:, :, :end], values[:, :, :end]

    def conv_window(self, slot, x, n_past):
        past = self.conv_tail.get(slot)
        if past is None or self.length == 0:   # zeros before position 0
            past = x.new_zeros(x.size(0), n_past, x.size(2))
        window = torch.cat([past, x], dim=1)
        self.conv_tail[slot] = window[:, window.size(1) - n_past:]
        return window

    def advance(self, n):
        self.length += n

    def reset(self):
        self.length = 0


def sample_next(logits, temperature=1.0, top_k=None, generator=None):
    """Pick the next token from last-position logits (B, V): greedy at temperature 0, else top-k
    sampling."""
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True)
    logits = logits.float() / temperature
    if top_k is not None and top_k < logits.size(-1):   # top_k >= vocabulary: nothing to cut
        kth = torch.topk(logits, top_k).values[:, [-1]]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = F.softmax(logits, dim=-1)
    return torch.multinomial(probs, num_samples=1, generator=generator)
