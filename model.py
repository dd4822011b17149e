"""
One GPT, many compact variants. Every technique from the five papers is a flag of GPTConfig.

Read top to bottom:
  1. GPTConfig            - every flag, validated in __post_init__
  2. building blocks      - norms, positions (learned / sinusoidal / RoPE), MLP (plain / gated = SwiGLU)
  3. attention            - causal self-attention with GQA, a KV cache and Deep Thinking's KV memory
  4. residual sub-layers  - plain residual or Enhanced Residual (paper 000, 2.7)
  5. layer sharing plan   - one mechanism for MobileLLM repeats, ALBERT, groups, ShishuLM pairs
  6. DecoderStack         - the layers of one branch, with lgpt/cgpt width halving between groups
  7. GPT                  - embeddings (factorized or not), pgpt branches, Deep Thinking passes, head
  8. generation           - KV-cache sampler (and the plain path for comparison)

Papers (text in ../shared/papers/):
  000 MobileLLM-style compact model (double up-projection, SwiGLU, GQA, embedding sharing,
      layer sharing, enhanced residual, Deep Thinking)
  001 ShishuLM (attention only in the first blocks, MLP-only blocks after, paired weight sharing)
  002 GPT-Efficio (factorized embedding, cross-layer parameter sharing)
  003 PanGu-pi Pro (init, tokenizer, inheritance: see prepare.py / inherit.py)
  004 ParallelGPT / LinearGPT / ConvGPT
"""

import math
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn as nn
from torch.nn import functional as F


# ----------------------------------------------------------------------------------------------
# 1. Configuration
# ----------------------------------------------------------------------------------------------

@dataclass
class GPTConfig:
    # --- the GPT-2 baseline (nanoGPT's field names) ---
    block_size: int = 1024          # context length
    vocab_size: int = 50304         # GPT-2's 50257 padded up to a multiple of 64
    n_layer: int = 12               # effective depth: number of layer applications (shared or not)
    n_head: int = 12
    n_embd: int = 768               # width of the decoder (of each branch for pgpt)
    dropout: float = 0.0
    bias: bool = True               # biases in Linears and LayerNorms (GPT-2: True, LLaMA: False)
    # --- LLaMA-style options (000, 001) ---
    norm: str = "layernorm"         # "layernorm" | "rmsnorm"
    norm_eps: float = 1e-5
    pos_embedding: str = "learned"  # "learned" | "sinusoidal" | "rope" | "none"
    rope_base: float = 10000.0
    # --- attention: GQA (000 2.5) ---
    n_kv_head: Optional[int] = None  # None = n_head (multi-head attention); must divide n_head
    # --- FFN: double up-projection / SwiGLU (000 2.2-2.3) ---
    mlp_type: str = "standard"      # "standard": down(act(up x)) | "gated": down(act(gate x) * up x)
    activation: str = "gelu"        # "gelu" | "gelu_tanh" | "silu" | "relu"   (gated + silu = SwiGLU)
    mlp_hidden: Optional[int] = None  # hidden size; None = mlp_ratio * width
    mlp_ratio: float = 4.0
    # --- embeddings: sharing/tying (000 2.4) and factorization (002 3.0.1) ---
    tie_embeddings: bool = True
    embd_factor_dim: Optional[int] = None   # E: vocab -> E -> n_embd; None = no factorization
    # --- layer sharing (000 2.6, 002 3.0.2, 001 4.4): one general mechanism ---
    share_group_size: int = 1       # k consecutive layers use one set of weights (1 = no sharing)
    share_from_layer: int = 0       # layers before this one are never shared
    share_sublayers: str = "both"   # "both" | "attn" | "mlp": which sub-layers the group shares
    # --- Enhanced Residual (000 2.7) ---
    enhanced_residual: bool = False
    residual_logit_init: float = 0.0   # w at init (paper: 0, alpha = 0.5); e.g. 3.0 starts at alpha = 0.95
    # --- Deep Thinking (000 2.8) ---
    think_steps: int = 0            # T thinking passes before the final pass (paper: 3); 0 = off
    think_eta: float = 0.01         # memory update M = eta*K_t + (1-eta)*M
    # --- ShishuLM (001 4.1-4.4) ---
    n_attn_layers: Optional[int] = None  # only the first n_attn_layers have attention; None = all
    # --- ParallelGPT (004 3.1) ---
    n_branches: int = 1             # >1: embedding is n_branches*n_embd wide, split over parallel stacks
    # --- LinearGPT / ConvGPT (004 3.2-3.3) ---
    shrink_every: int = 0           # halve the width after every `shrink_every` layers; 0 = off
    shrink_layer: str = "linear"    # "linear" (lgpt) | "conv" (cgpt)
    shrink_kernel: int = 1          # Conv1d kernel size for cgpt; >1 is causal (left padding only)
    # --- initialisation (003 3.1) ---
    init_scheme: str = "gpt2"       # "gpt2": residual projections std/sqrt(2*n_layer) | "constant"
    init_std: float = 0.02

    def __post_init__(self):
        def check(ok, msg):
            if not ok:
                raise ValueError(f"GPTConfig: {msg}")
        for name in ("block_size", "vocab_size", "n_layer", "n_head", "n_embd", "n_branches"):
            check(getattr(self, name) >= 1, f"{name} must be >= 1, got {getattr(self, name)}")
        check(0.0 <= self.dropout < 1.0, f"dropout must be in [0, 1), got {self.dropout}")
        check(self.norm in ("layernorm", "rmsnorm"), f"norm must be 'layernorm' or 'rmsnorm', got {self.norm!r}")
        check(self.pos_embedding in ("learned", "sinusoidal", "rope", "none"),
              f"pos_embedding must be learned|sinusoidal|rope|none, got {self.pos_embedding!r}")
        check(self.mlp_type in ("standard", "gated"), f"mlp_type must be 'standard' or 'gated', got {self.mlp_type!r}")
        check(self.activation in ACTIVATIONS, f"activation must be one of {sorted(ACTIVATIONS)}, got {self.activation!r}")
        check(self.shrink_layer in ("linear", "conv"), f"shrink_layer must be 'linear' or 'conv', got {self.shrink_layer!r}")
        check(self.share_sublayers in ("both", "attn", "mlp"),
              f"share_sublayers must be both|attn|mlp, got {self.share_sublayers!r}")
        check(self.init_scheme in ("gpt2", "constant"), f"init_scheme must be 'gpt2' or 'constant', got {self.init_scheme!r}")
        self._check_widths(check)
        self._check_sharing(check)
        check(self.think_steps >= 0, f"think_steps must be >= 0, got {self.think_steps}")
        check(0.0 < self.think_eta <= 1.0, f"think_eta must be in (0, 1], got {self.think_eta}")
        check(self.think_steps == 0 or self.attn_layers_per_branch() > 0,
              "Deep Thinking needs attention layers (think_steps > 0 with n_attn_layers = 0)")
        check(self.shrink_kernel >= 1, f"shrink_kernel must be >= 1, got {self.shrink_kernel}")
        check(self.shrink_kernel == 1 or self.shrink_layer == "conv", "shrink_kernel > 1 needs shrink_layer='conv'")
        check(self.mlp_hidden is None or self.shrink_every == 0,
              "mlp_hidden is one size for all layers, but shrink_every changes the width; use mlp_ratio instead")
        check(not self.tie_embeddings or self.final_width() == self.embd_width(),
              f"tie_embeddings needs the head width ({self.final_width()}) to equal the embedding width "
              f"({self.embd_width()}); set tie_embeddings=False for pgpt/lgpt/cgpt")

    def _check_widths(self, check):
        check(self.n_layer % self.n_branches == 0,
              f"n_layer ({self.n_layer}) must divide evenly over n_branches ({self.n_branches})")
        kv = self.n_head if self.n_kv_head is None else self.n_kv_head
        check(kv >= 1 and self.n_head % kv == 0, f"n_kv_head ({kv}) must divide n_head ({self.n_head}) for GQA")
        for width in self.widths():
            check(width % self.n_head == 0,
                  f"width {width} must be divisible by n_head ({self.n_head}); "
                  f"with shrink_every every halved width must divide too (widths: {self.widths()})")
        head_dim = self.widths()[-1] // self.n_head
        check(self.pos_embedding != "rope" or head_dim % 2 == 0, f"RoPE needs an even head size, got {head_dim}")

    def _check_sharing(self, check):
        n, k, start = self.layers_per_branch(), self.share_group_size, self.share_from_layer
        check(k >= 1, f"share_group_size must be >= 1, got {k}")
        check(0 <= start <= n, f"share_from_layer must be in [0, {n}], got {start}")
        check((n - start) % k == 0,
              f"the {n - start} shared layers (n_layer/n_branches - share_from_layer) must split into groups of "
              f"share_group_size={k}")
        check(k == 1 or self.shrink_every == 0, "layer sharing cannot be combined with width shrinking (lgpt/cgpt)")
        a = self.attn_layers_per_branch()
        check(0 <= a <= n, f"n_attn_layers must be in [0, {n}], got {self.n_attn_layers}")
        check(k == 1 or a <= start or (a - start) % k == 0,
              "a sharing group would mix attention and MLP-only layers; set share_from_layer = n_attn_layers")

    # --- derived sizes (used by the model and by the checks above) ---
    def layers_per_branch(self):
        return self.n_layer // self.n_branches

    def attn_layers_per_branch(self):
        n = self.layers_per_branch()
        return n if self.n_attn_layers is None else self.n_attn_layers

    def embd_width(self):
        return self.n_embd * self.n_branches

    def widths(self):
        """Width of each layer of one branch: constant, or halved every `shrink_every` layers (lgpt/cgpt)."""
        n = self.layers_per_branch()
        if self.shrink_every == 0:
            return [self.n_embd] * n
        return [self.n_embd // 2 ** (i // self.shrink_every) for i in range(n)]

    def final_width(self):
        return self.widths()[-1]


# ----------------------------------------------------------------------------------------------
# 2. Building blocks: norms, positions, MLP
# ----------------------------------------------------------------------------------------------

class LayerNorm(nn.Module):
    """LayerNorm with an optional bias (PyTorch's has no bias=False before 2.1 on every path)."""

    def __init__(self, dim, bias, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim)) if bias else None
        self.eps = eps

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, self.eps)


class RMSNorm(nn.Module):
    """RMSNorm (LLaMA): x / rms(x) * g. No mean subtraction, no bias."""

    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return F.rms_norm(x, self.weight.shape, self.weight, self.eps)


def make_norm(config, dim):
    if config.norm == "rmsnorm":
        return RMSNorm(dim, config.norm_eps)
    return LayerNorm(dim, config.bias, config.norm_eps)


def sinusoidal_positions(n_positions, dim):
    """Fixed sin/cos positions of 'Attention is all you need' (used by the paper-000 baseline)."""
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
    """Rotate pairs (first half, second half) of each head by a position-dependent angle. x: (B, H, T, D)."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).type_as(x)


ACTIVATIONS = {
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,
    "relu": F.relu,
}


class MLP(nn.Module):
    """Feed-forward network.

    standard:                  down(act(up x))                       (GPT-2)
    gated (double up-proj.):   down(act(gate x) * up x)              (paper 000, 2.2)
    gated + silu = SwiGLU:     down(silu(gate x) * up x)             (paper 000, 2.3)
    The activation is applied to the gate branch only (000's public code wrongly applied it to both).
    """

    def __init__(self, config, width):
        super().__init__()
        hidden = config.mlp_hidden or int(config.mlp_ratio * width)
        self.gated = config.mlp_type == "gated"
        self.up = nn.Linear(width, hidden, bias=config.bias)
        self.gate = nn.Linear(width, hidden, bias=config.bias) if self.gated else None
        self.down = nn.Linear(hidden, width, bias=config.bias)
        self.down.is_residual_projection = True
        self.act = ACTIVATIONS[config.activation]
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x, ctx=None, slot=None):
        h = self.act(self.gate(x)) * self.up(x) if self.gated else self.act(self.up(x))
        return self.dropout(self.down(h))


# ----------------------------------------------------------------------------------------------
# 3. Attention: GQA, KV cache, Deep Thinking memory
# ----------------------------------------------------------------------------------------------

class KVCache:
    """Keys and values of one attention application, preallocated for `max_len` positions.

    GQA: only the n_kv_head heads are stored, so the cache shrinks by n_head / n_kv_head.
    """

    def __init__(self, max_len, static=False):
        self.max_len = max_len
        self.static = static
        self.k = self.v = None

    def _allocate(self, k, v):
        shape = (k.size(0), k.size(1), self.max_len, k.size(3))
        self.k, self.v = k.new_zeros(shape), v.new_zeros(shape)
        if self.static:
            _mark_static(self.k, self.v)

    def append(self, k, v, start):
        """Write k, v (B, H_kv, T, D) at positions start.. and return all keys/values up to there."""
        if self.k is None:
            self._allocate(k, v)
        end = start + k.size(2)
        self.k.narrow(2, start, k.size(2)).copy_(k)
        self.v.narrow(2, start, v.size(2)).copy_(v)
        return self.k.narrow(2, 0, end), self.v.narrow(2, 0, end)

    def write(self, k, v, positions):
        """Static cache: write k, v at `positions` (a tensor) and return the whole buffers; the caller masks
        the slots not written yet. No shape and no Python number changes from one decode step to the next."""
        if self.k is None:
            self._allocate(k, v)
        self.k.index_copy_(2, positions, k)
        self.v.index_copy_(2, positions, v)
        return self.k, self.v

    def nbytes(self):
        return 0 if self.k is None else 2 * self.k.numel() * self.k.element_size()


def _mark_static(*tensors):
    """Tell torch.compile (CUDA graphs) that these buffers keep their address from call to call."""
    import torch._dynamo
    for t in tensors:
        torch._dynamo.mark_static_address(t)


class InferenceCache:
    """Everything incremental decoding needs, keyed by the *application* of a layer.

    A slot is (branch, layer, pass, kind), so a shared block applied twice, each pgpt branch and each
    Deep Thinking pass get their own keys and values. `length` is the number of tokens already seen.

    static=True is the gpt-fast layout for a compiled decode step: keys/values are written at the positions
    of a tensor (`position` holds the next one) and attention reads the whole max_len buffer with a mask,
    so every step has the same shapes and no Python number changes, and torch.compile (with CUDA graphs)
    reuses one graph for the whole generation. `length` is not kept then. Deep Thinking is not supported.
    """

    def __init__(self, max_len, static=False):
        self.max_len = max_len
        self.static = static
        self.length = 0
        self.position = None   # static: LongTensor (1,), created at the first forward on the model's device
        self.slots = {}

    def kv(self, slot):
        if slot not in self.slots:
            self.slots[slot] = KVCache(self.max_len, self.static)
        return self.slots[slot]

    def conv_window(self, slot, x, n_past, start):
        """cgpt's causal Conv1d (ConvShrink): x (B, T, C) preceded by the n_past inputs before it (zeros
        before position 0); the last n_past inputs are kept for the next call (in place when static)."""
        past = self.slots.get(slot)
        if past is None or (not self.static and start == 0):
            past = x.new_zeros(x.size(0), n_past, x.size(2))
            if self.static:
                _mark_static(past)
                self.slots[slot] = past
        window = torch.cat([past, x], dim=1)
        if self.static:
            past.copy_(window[:, window.size(1) - n_past:])
        else:
            self.slots[slot] = window[:, window.size(1) - n_past:]
        return window

    def start_positions(self, length, device):
        """Static: positions of the next `length` tokens as a tensor (the position buffer is made on first use)."""
        if self.position is None:
            self.position = torch.zeros(1, dtype=torch.long, device=device)
            _mark_static(self.position)
        return self.position + torch.arange(length, device=device)

    def advance(self, n):
        """Count n more tokens as seen (static: in place on the position tensor, inside a compiled step)."""
        if self.static:
            self.position.add_(n)
        else:
            self.length += n

    def reset(self):
        """Start a new sequence, keeping the allocated buffers (a compiled step keeps its graph)."""
        self.length = 0
        if self.static and self.position is not None:
            self.position.zero_()
            for c in self.slots.values():
                if torch.is_tensor(c):
                    c.zero_()   # cgpt's conv window: zeros before position 0

    def nbytes(self):
        return sum(c.nbytes() for c in self.slots.values() if isinstance(c, KVCache))


class ForwardContext:
    """Per-call state shared by all layers: where the new tokens start, the cache, the Deep Thinking pass."""

    def __init__(self, start, length, cache, device):
        self.start = start              # absolute position of the first new token (None with a static cache)
        self.length = length            # number of new tokens
        self.cache = cache              # InferenceCache or None (training / full forward)
        self.device = device
        self.branch = 0
        self.think_pass = 0             # 0 .. think_steps (the last one is the final pass)
        self.memory = {}                # Deep Thinking memory without a cache: (branch, layer, pass) -> (k, v)
        self.static = cache is not None and cache.static
        if self.static:
            self.positions = cache.start_positions(length, device)
            # (T, max_len): the query at position p sees cache slots <= p (later ones are not written yet)
            self.key_mask = torch.arange(cache.max_len, device=device) <= self.positions[:, None]
        else:
            self.positions = torch.arange(start, start + length, device=device)

    def causal_mask(self):
        """Boolean (T, start+T) mask: query i (absolute start+i) sees keys at positions <= start+i."""
        q_pos = torch.arange(self.start, self.start + self.length, device=self.device)[:, None]
        k_pos = torch.arange(self.start + self.length, device=self.device)[None, :]
        return k_pos <= q_pos


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention with grouped-query attention (paper 000, 2.5).

    GQA: n_head query heads share n_kv_head key/value heads (n_head / n_kv_head queries per group).

    Deep Thinking (paper 000, 2.8, after Yang et al. 2024): with think_steps = T the whole model runs
    T thinking passes and a final pass over the same input embeddings. Every layer keeps a KV memory:
        pass 1:       M_1 = K_1                                 (the layer's own keys, same for V)
        pass t > 1:   attend over [M_{t-1} ; K_t],  then  M_t = eta * K_t + (1 - eta) * M_{t-1}
    Both halves of [M ; K] are causally masked: query i sees memory positions <= i and keys <= i,
    so no pass ever looks at a future token, and memory is per sequence (never mixed across the batch).
    """

    def __init__(self, config, width):
        super().__init__()
        self.n_head = config.n_head
        self.n_kv_head = config.n_kv_head or config.n_head
        self.head_dim = width // config.n_head
        # one matmul for queries, keys and values (GQA: fewer key/value heads than query heads)
        self.qkv_proj = nn.Linear(width, width + 2 * self.n_kv_head * self.head_dim, bias=config.bias)
        self.out_proj = nn.Linear(width, width, bias=config.bias)
        self.out_proj.is_residual_projection = True
        self.dropout = config.dropout
        self.resid_dropout = nn.Dropout(config.dropout)
        self.think_steps, self.think_eta = config.think_steps, config.think_eta
        self.use_rope = config.pos_embedding == "rope"
        if self.use_rope:
            cos, sin = rope_tables(config.block_size, self.head_dim, config.rope_base)
            self.register_buffer("rope_cos", cos, persistent=False)
            self.register_buffer("rope_sin", sin, persistent=False)

    def forward(self, x, ctx, slot):
        B, T, C = x.shape
        # q (B, H, T, D), k and v (B, H_kv, T, D): views of the one projection, 3 ops (a lean decode step)
        q, k, v = self.qkv_proj(x).view(B, T, -1, self.head_dim).transpose(1, 2).split(
            [self.n_head, self.n_kv_head, self.n_kv_head], dim=1)
        if self.use_rope:
            cos, sin = self.rope_cos[ctx.positions], self.rope_sin[ctx.positions]
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        keys, values = k, v
        if ctx.static:
            keys, values = ctx.cache.kv(slot + ("kv",)).write(k, v, ctx.positions)
        elif ctx.cache is not None:
            keys, values = ctx.cache.kv(slot + ("kv",)).append(k, v, ctx.start)
        if self.think_steps and ctx.think_pass > 0:
            y = self._attend_with_memory(q, keys, values, ctx, slot)
        else:
            y = self._attend(q, keys, values, ctx)
        if self.think_steps and ctx.think_pass < self.think_steps:
            self._update_memory(k, v, ctx, slot)
        y = self.out_proj(y.transpose(1, 2).reshape(B, T, C))
        return self.resid_dropout(y) if self.training else y   # eval: no module call for a no-op (decode speed)

    def _sdpa(self, q, k, v, mask=None, is_causal=False):
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=is_causal, dropout_p=self.dropout if self.training else 0.0,
            enable_gqa=self.n_kv_head != self.n_head)

    def _attend(self, q, k, v, ctx):
        if ctx.static:
            return self._sdpa(q, k, v, mask=ctx.key_mask)
        if ctx.start == 0:
            return self._sdpa(q, k, v, is_causal=True)  # the fast (flash) path for training
        if q.size(2) == 1:
            return self._sdpa(q, k, v)                  # one new token sees every cached key
        return self._sdpa(q, k, v, mask=ctx.causal_mask())

    def _attend_with_memory(self, q, k, v, ctx, slot):
        mem_k, mem_v = self._read_memory(ctx, slot)
        mask = ctx.causal_mask()
        return self._sdpa(q, torch.cat([mem_k, k], dim=2), torch.cat([mem_v, v], dim=2),
                          mask=torch.cat([mask, mask], dim=-1))

    def _read_memory(self, ctx, slot):
        """Memory of the previous pass for all positions seen so far (cached ones and the new ones)."""
        prev = slot[:2] + (ctx.think_pass - 1,)
        if ctx.cache is not None:
            c = ctx.cache.kv(prev + ("memory",))
            end = ctx.start + ctx.length
            return c.k[:, :, :end], c.v[:, :, :end]
        return ctx.memory[prev]

    def _update_memory(self, k, v, ctx, slot):
        """M_t = K_t after the first pass, then M_t = eta * K_t + (1 - eta) * M_{t-1} (new positions only)."""
        if ctx.think_pass > 0:
            mem_k, mem_v = self._read_memory(ctx, slot)
            new = slice(ctx.start, ctx.start + ctx.length)
            eta = self.think_eta
            k = eta * k + (1 - eta) * mem_k[:, :, new]
            v = eta * v + (1 - eta) * mem_v[:, :, new]
        if ctx.cache is not None:
            ctx.cache.kv(slot + ("memory",)).append(k, v, ctx.start)
        else:
            ctx.memory[slot] = (k, v)


# ----------------------------------------------------------------------------------------------
# 4. Residual sub-layers: plain and Enhanced Residual (paper 000, 2.7)
# ----------------------------------------------------------------------------------------------

class ResidualSubLayer(nn.Module):
    """x -> x + F(norm(x)), the pre-norm residual around one attention or FFN.

    Enhanced Residual (paper 000, 2.7):  x -> alpha * x + (1 - alpha) * F(norm(x)),  alpha = sigmoid(w),
    one learned w per sub-layer, starting at w = 0 (alpha = 0.5; `residual_logit_init` changes that).
    w is a 0-d tensor, so the optimizer's ">= 2-D gets weight decay" rule leaves it undecayed.
    Note: with alpha = 0.5 everywhere the input of the first layer reaches the last one scaled by
    0.5 ** (2 * n_layer), so a deep stack starts without the current token's identity (see README).
    """

    def __init__(self, config, width, inner):
        super().__init__()
        self.norm = make_norm(config, width)
        self.inner = inner
        self.alpha_logit = None
        if config.enhanced_residual:
            self.alpha_logit = nn.Parameter(torch.full((), float(config.residual_logit_init)))

    def forward(self, x, ctx, slot):
        fx = self.inner(self.norm(x), ctx, slot)
        if self.alpha_logit is None:
            return x + fx
        alpha = torch.sigmoid(self.alpha_logit)
        return alpha * x + (1 - alpha) * fx

    def alpha(self):
        return None if self.alpha_logit is None else torch.sigmoid(self.alpha_logit).item()


# ----------------------------------------------------------------------------------------------
# 5. Layer sharing: one plan for every scheme
# ----------------------------------------------------------------------------------------------

def sharing_plan(config):
    """Which attention / FFN weights each layer of a branch uses: (attn_index, mlp_index) lists.

    Layers from `share_from_layer` on form groups of `share_group_size` consecutive layers; a group shares
    the sub-layers named by `share_sublayers`. One mechanism covers:
      MobileLLM immediate block-wise repeat (000 2.6):  share_group_size=2            -> 0 0 1 1 2 2 ...
      ALBERT all-layer sharing (002 3.0.2):             share_group_size=n_layer      -> 0 0 0 0 ...
      G groups (002 3.0.2):                             share_group_size=n_layer/G
      per sub-layer sharing (002 3.0.2):                share_sublayers="attn" or "mlp"
      ShishuLM paired MLP-only blocks (001 4.4):        share_from_layer=n_attn_layers, share_group_size=2
    attn_index[l] is None for ShishuLM's MLP-only layers.
    """
    n, k, start = config.layers_per_branch(), config.share_group_size, config.share_from_layer
    group = [layer if layer < start else start + (layer - start) // k for layer in range(n)]
    shared_attn = config.share_sublayers in ("both", "attn")
    shared_mlp = config.share_sublayers in ("both", "mlp")
    attn_keys = [group[l] if shared_attn else l for l in range(config.attn_layers_per_branch())]
    mlp_keys = [group[l] if shared_mlp else l for l in range(n)]
    return _compact(attn_keys) + [None] * (n - len(attn_keys)), _compact(mlp_keys)


def _first_uses(index):
    """For weight sets 0, 1, 2, ... of a plan, the first layer that uses each (None entries skipped)."""
    return [index.index(i) for i in range(max((i for i in index if i is not None), default=-1) + 1)]


def _compact(keys):
    """Renumber keys 0, 1, 2, ... in order of first appearance."""
    index = {}
    return [index.setdefault(key, len(index)) for key in keys]


# ----------------------------------------------------------------------------------------------
# 6. A decoder stack, with lgpt/cgpt width halving (paper 004, 3.2-3.3)
# ----------------------------------------------------------------------------------------------

class ConvShrink(nn.Module):
    """ConvGPT (paper 004, 3.3): a Conv1d over the sequence axis maps width C -> C/2.

    Kernel 1 is a per-token dense layer (the paper's parameter count). Kernel k > 1 is made causal by
    padding k-1 positions on the left only; when decoding, the cache keeps the last k-1 inputs.
    """

    def __init__(self, config, width):
        super().__init__()
        self.kernel = config.shrink_kernel
        self.conv = nn.Conv1d(width, width // 2, self.kernel, bias=config.bias)

    def forward(self, x, ctx, slot):
        if ctx.cache is None:
            window = torch.cat([x.new_zeros(x.size(0), self.kernel - 1, x.size(2)), x], dim=1)
        else:
            window = ctx.cache.conv_window(slot, x, self.kernel - 1, ctx.start)
        return self.conv(window.transpose(1, 2)).transpose(1, 2)


class LinearShrink(nn.Module):
    """LinearGPT (paper 004, 3.2): after every two blocks a dense layer maps width C -> C/2 (eq. 5)."""

    def __init__(self, config, width):
        super().__init__()
        self.proj = nn.Linear(width, width // 2, bias=config.bias)

    def forward(self, x, ctx, slot):
        return self.proj(x)


class DecoderStack(nn.Module):
    """The layers of one branch. Layer l applies attention sub-layer attn[attn_index[l]] (if any), then
    FFN sub-layer mlp[mlp_index[l]], then a width-halving layer if l ends a group of `shrink_every`."""

    def __init__(self, config):
        super().__init__()
        self.attn_index, self.mlp_index = sharing_plan(config)
        widths = config.widths()
        # one module per unique weight set, built at the width of the first layer that uses it
        # (a sharing group never spans a width change: GPTConfig forbids sharing with shrinking)
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
                slot = (ctx.branch, layer, ctx.think_pass, "shrink")
                x = self.shrink[self.shrink_after.index(layer)](x, ctx, slot)
        return x

    def residual_alphas(self):
        """Enhanced-residual alphas per layer: [(alpha_attn or None, alpha_mlp), ...] (paper 000, Fig. 7)."""
        return [(None if a is None else self.attn[a].alpha(), self.mlp[m].alpha())
                for a, m in zip(self.attn_index, self.mlp_index)]


# ----------------------------------------------------------------------------------------------
# 7. The model
# ----------------------------------------------------------------------------------------------

class TokenEmbedding(nn.Module):
    """Token embedding, optionally factorized (paper 002, 3.0.1): vocab -> E -> width, V*E + E*width
    parameters instead of V*width. With tie_embeddings (paper 000, 2.4) the head reuses these weights:
    logits = (h @ P) @ W_e^T, going back through the projection P when factorized."""

    def __init__(self, config):
        super().__init__()
        width = config.embd_width()
        self.wte = nn.Embedding(config.vocab_size, config.embd_factor_dim or width)
        self.proj = nn.Linear(config.embd_factor_dim, width, bias=False) if config.embd_factor_dim else None

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
            self.register_buffer("pos_table", sinusoidal_positions(config.block_size, width), persistent=False)
        self.drop = nn.Dropout(config.dropout)
        self.branches = nn.ModuleList([DecoderStack(config) for _ in range(config.n_branches)])
        if config.n_branches > 1:
            self.branch_logits = nn.Parameter(torch.zeros(config.n_branches))
        self.keep_branch = None   # pgpt at inference: index of the only branch to run (None = all)
        self.ln_f = make_norm(config, config.final_width())
        if not config.tie_embeddings:
            self.lm_head = nn.Linear(config.final_width(), config.vocab_size, bias=False)
        self.apply(self._init_weights)

    # --- initialisation (GPT-2 / paper 003 3.1) ---
    def _init_weights(self, module):
        """Normal(0, init_std) everywhere; with init_scheme='gpt2' the projections that write into the
        residual stream use std / sqrt(2 * n_layer), so the stream's variance does not grow with depth."""
        if isinstance(module, (nn.Linear, nn.Conv1d, nn.Embedding)):
            std = self.config.init_std
            if self.config.init_scheme == "gpt2" and getattr(module, "is_residual_projection", False):
                std = std / math.sqrt(2 * self.config.n_layer)
            nn.init.normal_(module.weight, mean=0.0, std=std)
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)

    # --- sizes ---
    def get_num_params(self, non_embedding=True):
        """Unique parameters (shared weights counted once). non_embedding=True leaves out the learned
        position embeddings, as nanoGPT does (token embeddings stay: they double as the head when tied)."""
        n = sum(p.numel() for p in self.parameters())
        if non_embedding and hasattr(self, "pos_emb"):
            n -= self.pos_emb.weight.numel()
        return n

    def depth_summary(self):
        """Effective depth vs unique weights, e.g. '60 layers applied per branch, from 30 unique attention
        and 30 unique FFN sub-layers' (layer sharing reuses weights; ShishuLM has fewer attention layers)."""
        stack = self.branches[0]
        n_attn = len({a for a in stack.attn_index if a is not None})
        branches = f" x {self.config.n_branches} branches" if self.config.n_branches > 1 else ""
        passes = f", {self.config.think_steps + 1} passes (Deep Thinking)" if self.config.think_steps else ""
        return (f"{len(stack.mlp_index)} layers applied{branches}, from {n_attn} unique attention and "
                f"{len(stack.mlp)} unique FFN sub-layers{passes}")

    # --- ParallelGPT (paper 004, 3.1) ---
    def branch_weights(self):
        """pgpt combination weights: softmax of learned logits (positive, summing to 1; start equal).
        For two branches this is w = sigmoid(a1 - a2) and 1 - w, the paper's eq. 3."""
        if self.config.n_branches == 1:
            return torch.ones(1, device=self.ln_f.weight.device)
        return F.softmax(self.branch_logits, dim=0)

    def heaviest_branch(self):
        return int(self.branch_weights().argmax())

    def residual_alphas(self):
        return self.branches[0].residual_alphas()

    # --- forward ---
    def embed(self, idx, positions):
        x = self.tok_emb(idx)
        if self.config.pos_embedding == "learned":
            x = x + self.pos_emb(positions)
        elif self.config.pos_embedding == "sinusoidal":
            x = x + self.pos_table[positions]
        return self.drop(x)

    def forward(self, idx, targets=None, cache=None, all_logits=False):
        """idx (B, T) -> (logits, loss). With targets: logits at every position and the mean cross-entropy.
        Without: logits of the last position only, unless all_logits=True. With an InferenceCache the
        tokens continue the cached sequence (positions cache.length ..) and the cache is extended."""
        B, T = idx.shape
        if cache is not None and cache.static:   # position in a tensor, bounds kept by the caller (generate)
            if self.config.think_steps:
                raise ValueError("a static cache does not support Deep Thinking (fix: use model.new_cache())")
            ctx = ForwardContext(None, T, cache, idx.device)
        else:
            start = cache.length if cache is not None else 0
            if start + T > self.config.block_size:
                raise ValueError(f"sequence of {start + T} tokens exceeds block_size {self.config.block_size}")
            ctx = ForwardContext(start, T, cache, idx.device)
        x = self.embed(idx, ctx.positions)
        # Deep Thinking (paper 000, 2.8): think_steps passes that only build the KV memory, then the
        # final pass; all start from the same embeddings x. Without Deep Thinking this is one pass.
        for think_pass in range(self.config.think_steps + 1):
            ctx.think_pass = think_pass
            h = self.run_branches(x, ctx)
        if cache is not None:
            cache.advance(T)
        h = self.ln_f(h)
        if targets is None and not all_logits:
            h = h[:, -1:, :]
        logits = self.tok_emb.tied_logits(h) if self.config.tie_embeddings else self.lm_head(h)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.reshape(-1), ignore_index=-1)
        return logits, loss

    def run_branches(self, x, ctx):
        """One branch: the decoder stack. pgpt: branch i gets the i-th n_embd-wide chunk of the
        embedding and the outputs are mixed as sum_i w_i * decoder_i(x_i) (paper 004, eq. 1-3); with
        keep_branch set only that branch runs, the paper's inference-time drop of the weaker branch."""
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
        groups = [
            {"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
        ]
        fused = device_type == "cuda"
        return torch.optim.AdamW(groups, lr=learning_rate, betas=betas, fused=fused)

    def flops_per_token(self, seq_len=None):
        """Training FLOPs per token (forward + backward = 3 x forward): 6 per weight application plus the
        attention score/value matmuls, counting every application of a shared layer and every pass."""
        cfg, T = self.config, seq_len or self.config.block_size
        n_passes = cfg.think_steps + 1
        widths = cfg.widths()
        per_pass = 0
        for stack in self.branches if self.keep_branch is None else [self.branches[self.keep_branch]]:
            for layer, (a, m) in enumerate(zip(stack.attn_index, stack.mlp_index)):
                per_pass += _matmul_params(stack.mlp[m])
                if a is not None:
                    per_pass += _matmul_params(stack.attn[a]) + 2 * widths[layer] * T
            per_pass += sum(_matmul_params(s) for s in stack.shrink)
        head = cfg.vocab_size * cfg.final_width()
        return 6 * (n_passes * per_pass + head)

    def estimate_mfu(self, fwdbwd_per_iter, dt, peak_flops):
        """Model FLOPs utilisation: achieved training FLOP/s as a fraction of the device's peak."""
        tokens = fwdbwd_per_iter * self.config.block_size
        return self.flops_per_token() * tokens / dt / peak_flops

    # --- 8. generation ---
    def new_cache(self, static=False):
        return InferenceCache(self.config.block_size, static)

    def decode_step(self, idx, cache):
        """Logits (B, 1, V) after one more token per sequence, idx (B, 1), continuing the cached ones."""
        return self(idx, cache=cache)[0]

    def compiled_decode_step(self, backend="inductor"):
        """decode_step through torch.compile, made once per model (gpt-fast style): with a static cache every
        step has the same shapes, so one graph serves the whole generation; inductor's "reduce-overhead"
        replays it as a CUDA graph on GPUs (on the CPU it is plain inductor code)."""
        if getattr(self, "_compiled_decode_step", None) is None:
            options = dict(mode="reduce-overhead") if backend == "inductor" else {}
            self._compiled_decode_step = torch.compile(self.decode_step, backend=backend, fullgraph=True, **options)
        return self._compiled_decode_step

    def static_cache(self, batch_size):
        """The model's reusable static cache for compiled decoding (same buffers -> the compiled step is reused
        across generate calls without recompiling or re-recording)."""
        device = self.ln_f.weight.device
        autocast = torch.get_autocast_dtype(device.type) if torch.is_autocast_enabled(device.type) else None
        key = (batch_size, device, autocast)   # the buffers take the dtype of the keys: autocast's
        kept = getattr(self, "_static_cache", None)
        if kept is None or kept[0] != key:
            kept = self._static_cache = (key, self.new_cache(static=True))
        return kept[1]

    @torch.inference_mode()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None, use_kv_cache=True, generator=None,
                 compile=False):
        """Sample max_new_tokens tokens after idx (B, T).

        With the KV cache each step feeds one token through the cached keys/values. When the window is
        full (block_size tokens) it is re-primed with the most recent block_size // 2 tokens: positions
        restart at 0, which keeps learned/RoPE positions inside what the model was trained on. The
        plain path (use_kv_cache=False) feeds the very same window each step, so both paths compute
        the same logits and, with the same generator, produce the same text.
        compile=True (for GPUs): the single-token steps run compiled_decode_step over a static cache.
        """
        was_training = self.training
        self.eval()
        cache = None
        if use_kv_cache:
            cache = self.static_cache(idx.size(0)) if compile else self.new_cache()
            step = self.compiled_decode_step() if compile else self.decode_step
        window_start, prime = 0, True
        for _ in range(max_new_tokens):
            if idx.size(1) - window_start > self.config.block_size:  # window full: keep the recent half
                window_start = idx.size(1) - max(1, self.config.block_size // 2)
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
        self.train(was_training)
        return idx


def sample_next(logits, temperature=1.0, top_k=None, generator=None):
    """Pick the next token from last-position logits (B, V): greedy at temperature 0, else top-k sampling."""
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True)
    logits = logits.float() / temperature
    if top_k is not None and top_k < logits.size(-1):   # top_k >= vocabulary: nothing to cut
        kth = torch.topk(logits, top_k).values[:, [-1]]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = F.softmax(logits, dim=-1)
    return torch.multinomial(probs, num_samples=1, generator=generator)


def _matmul_params(module):
    return sum(p.numel() for p in module.parameters() if p.dim() >= 2)
