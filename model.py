"""
One GPT, many compact variants: each model-side technique of the five papers is a
GPTConfig flag (paper 003's tokenizer, inheritance and training rules are tools/).

Read top to bottom; a technique's code runs only when its flag is on:
  1. GPTConfig       the flags, and the sizes derived from them
  2. blocks          norms, sinusoidal and RoPE positions, MLP (or SwiGLU)
  3. attention       causal, GQA; the KV cache (an entry per sub-layer applied)
  4. residuals       pre- or post-norm, plain or Enhanced Residual
  5. DecoderStack    the layers as applied; layer sharing, ShishuLM
  6. lgpt/cgpt       width halving
  7. init            GPT-2's; paper 003's schemes
  8. GPT             embeddings, sample_next, forward, head; pgpt, Deep
                     Thinking; generate
  9. checks          what GPTConfig rejects
Papers 000-004: ../shared/papers/; the README says what each brings, where.
"""

import math
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn as nn
from torch.nn import functional as F


# --- 1. Configuration -----------------------------------------------------------------

@dataclass
class GPTConfig:
    # --- the GPT-2 baseline (nanoGPT's field names) ---
    block_size: int = 1024
    vocab_size: int = 50304         # GPT-2's 50257 padded up to a multiple of 64
    # layers over all branches (n_layer / n_branches per pgpt branch); a shared
    # layer counts each time it is applied
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768               # width (of each pgpt branch)
    dropout: float = 0.0
    bias: bool = True               # in Linears and norms (GPT-2: True, LLaMA: False)
    # --- LLaMA-style options (000, 001) ---
    norm: str = "layernorm"         # "layernorm" | "rmsnorm"
    norm_eps: float = 1e-5
    # "pre": x + F(norm(x)) | "post": norm(x + F(x)) (paper 000's code)
    norm_placement: str = "pre"
    pos_embedding: str = "learned"  # "learned" | "sinusoidal" | "rope" | "none"
    rope_base: float = 10000.0
    # --- GQA (000 2.5): key/value heads, dividing n_head; None = n_head ---
    n_kv_head: Optional[int] = None
    # --- FFN, SwiGLU (000 2.2-2.3) ---
    mlp_type: str = "standard"      # "standard" | "gated" (MLP, section 2)
    activation: str = "gelu"        # "gelu" | "gelu_tanh" | "silu" | "relu"
    mlp_hidden: Optional[int] = None  # None: mlp_ratio * width
    mlp_ratio: float = 4.0
    # --- embeddings: tying (000 2.4), factorization (002 3.0.1) ---
    tie_embeddings: bool = True
    head_bias: bool = False         # a bias on the head (000's code)
    embd_factor_dim: Optional[int] = None   # E: vocab -> E -> width
    # --- layer sharing (000 2.6, 002 3.0.2, 001 4.4): build_shared_layers, section 5 ---
    share_group_size: int = 1       # k consecutive layers, one set of weights
    share_from_layer: int = 0       # layers below are never shared
    share_sublayers: str = "both"   # "both" | "attn" | "mlp"
    # --- Enhanced Residual (000 2.7) ---
    enhanced_residual: bool = False
    residual_logit_init: float = 0.0   # w at init (authors' code: 0, alpha = 0.5)
    # --- Deep Thinking (000 2.8) ---
    think_steps: int = 0            # thinking passes T (paper: 3); 0 = off
    think_eta: float = 0.01         # M_t = eta*K_t + (1-eta)*M_{t-1}
    think_memory: str = "own"       # M_1: "own" (ours) | "first_layer" (authors' code)
    # --- ShishuLM (001 4.1-4.4) ---
    n_attn_layers: Optional[int] = None   # attention in the first n only; None = all
    n_top_attn_layers: int = 0      # ... and in the last m (001 Table 10's "n + m")
    # --- ParallelGPT (004 3.1) ---
    n_branches: int = 1             # the embedding is n_branches * n_embd wide
    # --- LinearGPT / ConvGPT (004 3.2-3.3) ---
    shrink_every: int = 0           # halve the width every shrink_every layers; 0 = off
    shrink_layer: str = "linear"    # "linear" (lgpt) | "conv" (cgpt)
    shrink_kernel: int = 1          # cgpt's Conv1d kernel; > 1 is causal
    # --- initialisation (003 3.1, Appendix B; section 7) ---
    init_scheme: str = "gpt2"       # "gpt2" | "constant" | "internlm" | "depth_adaptive"
    init_std: float = 0.02

    def __post_init__(self):
        check_config(self)   # section 9, after the model it protects

    # --- derived sizes ---
    def layers_per_branch(self):
        return self.n_layer // self.n_branches

    def attention_layers(self):
        """The layers with attention.

        ShishuLM (001 4.2, Table 10): the first n_attn_layers and the last
        n_top_attn_layers; else all."""
        n = self.layers_per_branch()
        if self.n_attn_layers is None:
            return list(range(n))
        top = list(range(n - self.n_top_attn_layers, n))
        return list(range(self.n_attn_layers)) + top

    def embd_width(self):
        return self.n_embd * self.n_branches

    def widths(self):
        """The width of each layer, from n_embd.

        lgpt/cgpt: halved every shrink_every layers."""
        n = self.n_layer // self.n_branches
        if self.shrink_every == 0:
            return [self.n_embd] * n
        # layer i: halved i // shrink_every times
        return [self.n_embd // 2 ** (i // self.shrink_every) for i in range(n)]

    def final_width(self):
        return self.widths()[-1]


# --- 2. Building blocks: norms, sinusoidal positions, RoPE, MLP -----------------------

def make_norm(config, dim):
    """The norm:
      LayerNorm (GPT-2; bias if `bias`)
      RMSNorm (LLaMA): x / rms(x) * g"""
    if config.norm == "rmsnorm":
        return nn.RMSNorm(dim, eps=config.norm_eps)
    return nn.LayerNorm(dim, eps=config.norm_eps, bias=config.bias)


def sinusoidal_positions(n_positions, dim):
    """Fixed sin/cos positions ('Attention is all you need'; 000's code)."""
    pos = torch.arange(n_positions, dtype=torch.float32)[:, None]
    steps = torch.arange(0, dim, 2, dtype=torch.float32)
    freq = torch.exp(steps * (-math.log(10000.0) / dim))
    table = torch.zeros(n_positions, dim)
    table[:, 0::2] = torch.sin(pos * freq)
    table[:, 1::2] = torch.cos(pos * freq[: dim // 2])
    return table


def rope_tables(n_positions, head_dim, base):
    """cos, sin of rotary position embeddings (RoPE): (n_positions, head_dim/2)."""
    steps = torch.arange(0, head_dim, 2, dtype=torch.float32)
    inv_freq = 1.0 / base ** (steps / head_dim)
    positions = torch.arange(n_positions, dtype=torch.float32)
    angles = torch.outer(positions, inv_freq)
    return angles.cos(), angles.sin()


def apply_rope(x, cos, sin):
    """Rotate each head's pairs (first half, second half) by the position's
    angle. x: (B, H, T, D)."""
    x1, x2 = x.chunk(2, dim=-1)
    rotated = [x1 * cos - x2 * sin, x1 * sin + x2 * cos]
    return torch.cat(rotated, dim=-1).type_as(x)


def gelu_tanh(x):
    """GELU through its tanh approximation (GPT-2's original code)."""
    return F.gelu(x, approximate="tanh")


ACTIVATIONS = {"gelu": F.gelu, "gelu_tanh": gelu_tanh, "silu": F.silu, "relu": F.relu}


class MLP(nn.Module):
    """Feed-forward network.

      standard:                      down(act(up x))             (GPT-2)
      gated (double up-projection):  down(act(gate x) * up x)    (000 2.2)
      gated + silu = SwiGLU:         down(silu(gate x) * up x)   (000 2.3)
    act is on the gate only (000's public code has it on both).
    """

    def __init__(self, config, width):
        super().__init__()
        hidden = config.mlp_hidden or int(config.mlp_ratio * width)
        self.gated = config.mlp_type == "gated"
        self.up = nn.Linear(width, hidden, bias=config.bias)
        if self.gated:
            self.gate = nn.Linear(width, hidden, bias=config.bias)
        self.down = nn.Linear(hidden, width, bias=config.bias)
        self.act = ACTIVATIONS[config.activation]
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x, cache=None):   # cache: attention's; an MLP keeps none
        if self.gated:
            h = self.act(self.gate(x)) * self.up(x)
        else:
            h = self.act(self.up(x))
        return self.dropout(self.down(h))


# --- 3. Attention: causal, GQA, and the KV cache --------------------------------------

def causal_mask(start, length, device):
    """Boolean (length, start+length): query start+i sees the keys <= start+i."""
    q_pos = torch.arange(start, start + length, device=device)[:, None]
    k_pos = torch.arange(start + length, device=device)[None, :]
    return k_pos <= q_pos


def causal_attention(q, k, v, start=0, dropout_p=0.0):
    """Attention of the queries q (B, H, T, D) at positions start.. over the
    keys and values k, v (B, H_kv, start+T, D): query p sees keys <= p."""
    # start 0: SDPA's causal triangle (training's fast path); one new token sees
    # every key; several new tokens after cached ones: the mask written out
    mask = None
    if start > 0 and q.size(2) > 1:
        mask = causal_mask(start, q.size(2), q.device)
    # GQA: query head h reads kv head h // (H / H_kv)
    gqa = q.size(1) != k.size(1)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=start == 0,
                                          dropout_p=dropout_p, enable_gqa=gqa)


class KVCache:
    """The KV cache of incremental decoding: cache[i] is the entry of the stack's
    sub-layer i. The cache interface, what the model calls on a cache (also the
    static ones of tools/fast_sample.py and tools/executorch/export.py):
      length: the tokens already cached
      positions(T, device): the positions of the T new tokens
      cache[key]: an entry; its attend(q, k, v) stores k, v at the new
          positions and returns the attention of q over every cached key
      an entry's conv_window(x, n_past): cgpt: x after the n_past inputs before it
      an entry's positions(T, device): as the cache's (RoPE)
      advance(T): after the forward, the T new tokens are cached
      reset(): start a new sequence at position 0, keeping the buffers

    pgpt's branches and Deep Thinking key the entries by more; Deep Thinking
    uses their `store` itself, which the static caches refuse.
    """

    def __init__(self, max_len):
        self.max_len = max_len
        self.length = 0
        self.entries = {}

    def __getitem__(self, key):
        if key not in self.entries:
            self.entries[key] = CacheEntry(self)
        return self.entries[key]

    def positions(self, length, device):
        return torch.arange(self.length, self.length + length, device=device)

    def advance(self, n):
        self.length += n

    def reset(self):
        self.length = 0


class CacheEntry:
    """Sub-layer i's entry: keys and values (B, H_kv, max_len, D).

    cgpt: its last kernel-1 inputs."""

    def __init__(self, cache):
        self.cache = cache
        self.keys = None
        self.values = None
        self.conv_tail = None

    def positions(self, length, device):
        return self.cache.positions(length, device)

    def attend(self, q, k, v):
        keys, values = self.store(k, v)
        return causal_attention(q, keys, values, start=self.cache.length)

    def store(self, k, v):
        """Write k, v at positions length.. (the model advances length after its
        forward); return the keys and values up to them."""
        if self.keys is None:
            B, H, _, D = k.shape
            self.keys = k.new_zeros(B, H, self.cache.max_len, D)
            self.values = v.new_zeros(B, H, self.cache.max_len, D)
        start = self.cache.length
        end = start + k.size(2)
        self.keys[:, :, start:end] = k
        self.values[:, :, start:end] = v
        return self.keys[:, :, :end], self.values[:, :, :end]

    def conv_window(self, x, n_past):
        if self.conv_tail is None or self.cache.length == 0:   # zeros before position 0
            window = F.pad(x, (0, 0, n_past, 0))
        else:
            window = torch.cat([self.conv_tail, x], dim=1)
        self.conv_tail = window[:, window.size(1) - n_past:]
        return window


class CausalSelfAttention(nn.Module):
    """Causal self-attention, n_head heads.

    Grouped-query attention (paper 000, 2.5): the query heads share n_kv_head
    key/value heads, in groups."""

    def __init__(self, config, width):
        super().__init__()
        self.n_head = config.n_head
        self.n_kv_head = config.n_kv_head or config.n_head
        self.head_dim = width // config.n_head
        self.kv_width = self.n_kv_head * self.head_dim
        # one matmul: the queries (width), then the keys and values (kv_width each)
        self.qkv_proj = nn.Linear(width, width + 2 * self.kv_width, bias=config.bias)
        self.out_proj = nn.Linear(width, width, bias=config.bias)
        self.dropout = config.dropout
        self.resid_dropout = nn.Dropout(config.dropout)
        self.use_rope = config.pos_embedding == "rope"
        if self.use_rope:
            cos, sin = rope_tables(config.block_size, self.head_dim, config.rope_base)
            self.register_buffer("rope_cos", cos, persistent=False)
            self.register_buffer("rope_sin", sin, persistent=False)

    def forward(self, x, cache=None):
        """cache: this layer's entry of the KV cache (above), which stores
        k, v and attends; else None.

        Deep Thinking's entries (section 8) stand in likewise."""
        B, T, C = x.shape
        # q (B, H, T, D), k and v (B, H_kv, T, D): from one projection
        q, k, v = self.qkv_proj(x).split([C, self.kv_width, self.kv_width], dim=2)
        q = q.view(B, T, self.n_head, self.head_dim).transpose(1, 2)
        k = k.view(B, T, self.n_kv_head, self.head_dim).transpose(1, 2)
        v = v.view(B, T, self.n_kv_head, self.head_dim).transpose(1, 2)
        if self.use_rope:
            pos = torch.arange(T, device=x.device) if cache is None else cache.positions(T, x.device)
            cos, sin = self.rope_cos[pos], self.rope_sin[pos]
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if cache is None:
            y = causal_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0)
        else:
            y = cache.attend(q, k, v)
        y = self.out_proj(y.transpose(1, 2).reshape(B, T, C))
        return self.resid_dropout(y)


# --- 4. Residual sub-layers: pre- or post-norm, plain or Enhanced Residual (000, 2.7) ---

class ResidualSubLayer(nn.Module):
    """The residual around one attention or FFN sub-layer F (`inner`): pre-norm
    x + F(norm(x)) (GPT-2, LLaMA).

    Post-norm: norm(x + F(x)) (paper 000's code).

    Enhanced Residual (paper 000, 2.7) replaces the sum by
    alpha * x + (1 - alpha) * F(.), alpha = sigmoid(w), one learned scalar w per
    sub-layer (the paper gives no init; its code w = 0, alpha = 0.5). Under
    post-norm the norm is scale-invariant (up to its eps), so alpha = 0.5 is the
    plain residual.
    """

    def __init__(self, config, width, inner):
        super().__init__()
        self.norm = make_norm(config, width)
        self.inner = inner
        self.post_norm = config.norm_placement == "post"
        self.alpha_logit = None
        if config.enhanced_residual:
            w = torch.full((), float(config.residual_logit_init))
            self.alpha_logit = nn.Parameter(w)

    def forward(self, x, cache=None):
        if self.post_norm:
            return self.norm(self.mix(x, self.inner(x, cache)))
        return self.mix(x, self.inner(self.norm(x), cache))

    def mix(self, x, fx):
        if self.alpha_logit is None:
            return x + fx
        alpha = torch.sigmoid(self.alpha_logit)
        return alpha * x + (1 - alpha) * fx


# --- 5. The decoder stack; layer sharing; ShishuLM's layers ---------------------------

class DecoderStack(nn.Module):
    """The layers: attention, then the FFN, each in its residual. `layers`:
    the sub-layers as applied; `attn`, `mlp`: the modules, each once.

    lgpt/cgpt's shrinks are in `layers` too."""

    def __init__(self, config):
        super().__init__()
        self.attn = nn.ModuleList()
        self.mlp = nn.ModuleList()
        self.layers = []
        if config.share_group_size > 1 or config.n_attn_layers is not None:
            build_shared_layers(self, config)   # below
        else:
            for width in config.widths():   # lgpt/cgpt halve it (section 6)
                attn = ResidualSubLayer(config, width, CausalSelfAttention(config, width))
                mlp = ResidualSubLayer(config, width, MLP(config, width))
                self.attn.append(attn)
                self.mlp.append(mlp)
                self.layers += [attn, mlp]
        if config.shrink_every:
            add_shrinks(self, config)   # section 6

    def forward(self, x, cache=None):
        """Sub-layer i gets cache[i], its entry of a KV cache (section 3)."""
        for i, layer in enumerate(self.layers):
            x = layer(x, None if cache is None else cache[i])
        return x


def build_shared_layers(stack, config):
    """The stack's layers when some share weights or have no attention.

    Sharing: from share_from_layer up to the top attention layers (never
    shared), the layers are cut into groups of share_group_size (k); every
    layer of a group but its first applies the weights of the layer before,
    for the sub-layers share_sublayers names (ours; the papers share both):
      MobileLLM's block-wise repeat (000 2.6):  k = 2:        0 0 1 1 2 2 ...
      ALBERT's all-layer sharing (002 3.0.2):   k = n_layer:  0 0 0 0 ...
      G groups (002 3.0.2):                     k = n_layer / G
      ShishuLM's paired MLP-only blocks (001 4.4): k = 2 from n_attn_layers on
    ShishuLM (001 4.1-4.2): attention only in config.attention_layers().
    E.g. "2 + 1" in 001 Table 10's notation, 7 layers, share_from_layer=2, k=2
    (each layer's weight set):
      layer       0   1   2   3   4   5   6
      attention   0   1   -   -   -   -   2
      FFN         0   1   2   2   3   3   4
    """
    k, start = config.share_group_size, config.share_from_layer
    end = config.layers_per_branch() - config.n_top_attn_layers
    repeats = set(range(start, end)) - set(range(start, end, k))   # not a group's first
    share_attn = config.share_sublayers in ("both", "attn")
    share_mlp = config.share_sublayers in ("both", "mlp")
    with_attention = config.attention_layers()
    for layer, width in enumerate(config.widths()):
        if layer in with_attention:
            if layer not in repeats or not share_attn:
                attention = CausalSelfAttention(config, width)
                stack.attn.append(ResidualSubLayer(config, width, attention))
            stack.layers.append(stack.attn[-1])   # new, or a repeat's group's
        if layer not in repeats or not share_mlp:
            stack.mlp.append(ResidualSubLayer(config, width, MLP(config, width)))
        stack.layers.append(stack.mlp[-1])


# --- 6. lgpt/cgpt width halving (paper 004, 3.2-3.3) ----------------------------------

class ConvShrink(nn.Module):
    """ConvGPT (paper 004, 3.3): a Conv1d over the sequence maps width C -> C/2.
    Kernel 1 is per token (the paper's count); kernel k > 1 is causal (ours)."""

    def __init__(self, config, width):
        super().__init__()
        self.kernel = config.shrink_kernel
        self.conv = nn.Conv1d(width, width // 2, self.kernel, bias=config.bias)

    def forward(self, x, cache=None):
        # causal: output t reads the inputs t-k+1 .. t (zeros before position 0)
        if cache is None:
            window = F.pad(x, (0, 0, self.kernel - 1, 0))
        else:
            window = cache.conv_window(x, self.kernel - 1)
        return self.conv(window.transpose(1, 2)).transpose(1, 2)


class LinearShrink(nn.Module):
    """LinearGPT (paper 004, 3.2, eq. 4-5): a dense layer maps width C -> C/2."""

    def __init__(self, config, width):
        super().__init__()
        self.proj = nn.Linear(width, width // 2, bias=config.bias)

    def forward(self, x, cache=None):
        return self.proj(x)


def add_shrinks(stack, config):
    """A shrink wherever the width halves: after the FFN (mlp[layer]) of each
    layer whose next layer is narrower (4 layers, shrink_every=2: attn0 mlp0
    attn1 mlp1 shrink0 attn2 mlp2 attn3 mlp3); built last (init_gpt2 draws in
    module order).

    lgpt/cgpt's layers are never shared."""
    shrink_cls = ConvShrink if config.shrink_layer == "conv" else LinearShrink
    widths = config.widths()
    stack.shrink = nn.ModuleList()
    for layer in range(len(widths) - 1):
        if widths[layer + 1] < widths[layer]:
            stack.shrink.append(shrink_cls(config, widths[layer]))
            after = stack.layers.index(stack.mlp[layer])   # the layer's FFN
            stack.layers.insert(after + 1, stack.shrink[-1])


# --- 7. Initialisation: GPT-2's, and paper 003's schemes (PanGu-pi Pro, 3.1, App. B) ---

def init_gpt2(model, config):
    """GPT-2's init, as nanoGPT's: every Linear, Conv1d and Embedding weight
    ~ N(0, init_std), biases 0, in module order; the projections back into the
    residual stream (out_proj, down) at init_std / sqrt(2 * n_layer).

    init_scheme="constant": not scaled (003 3.1, Table 4; 001 5)."""
    if config.init_scheme == "constant":
        scaled = config.init_std
    else:
        scaled = config.init_std / math.sqrt(2 * config.n_layer)
    for name, module in model.named_modules():
        if isinstance(module, (nn.Linear, nn.Conv1d, nn.Embedding)):
            std = scaled if name.endswith(("out_proj", "down")) else config.init_std
            nn.init.normal_(module.weight, mean=0.0, std=std)
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)


def init_by_scheme(model, config):
    """internlm, depth_adaptive: after GPT-2's init, the attention and FFN
    weights these schemes set otherwise are drawn again, at the
    relative depth 0 (first) .. 1 (last) of the first layer applying them."""
    n = config.layers_per_branch()
    drawn = set()   # shared: the first layer's depth
    for stack in model.branches:
        layer = 0
        for sub in stack.layers:
            if not isinstance(sub, ResidualSubLayer):
                continue   # shrinks keep GPT-2's init
            if sub.inner not in drawn:
                drawn.add(sub.inner)
                redraw(sub.inner, config, layer / max(1, n - 1))
            if isinstance(sub.inner, MLP):
                layer += 1   # the FFN ends a layer


def redraw(inner, config, depth):
    """sigma = init_std, N = 2 * n_layer. GPT-2's init drew q, k, v, up and
    gate at sigma, out and down at sigma / sqrt(N); biases stay 0.
      internlm (003 3.1: only out, gate scaled): down at sigma, gate at
          sigma / sqrt(N) (ungated: up, ours)
      depth_adaptive (003 App. B, Table 11): down at sigma; q, k from
          sqrt(2) sigma down to sigma, v, out from sigma / sqrt(2) up to
          sigma, linear in depth (ours)
    """
    sigma = config.init_std
    if isinstance(inner, MLP):
        nn.init.normal_(inner.down.weight, std=sigma)
        if config.init_scheme == "internlm":
            scaled = sigma / math.sqrt(2 * config.n_layer)
            nn.init.normal_(inner.gate.weight if inner.gated else inner.up.weight, std=scaled)
    elif config.init_scheme == "depth_adaptive":
        qk = sigma * (math.sqrt(2) - (math.sqrt(2) - 1) * depth)
        vo = sigma * (1 / math.sqrt(2) + (1 - 1 / math.sqrt(2)) * depth)
        kv = inner.kv_width   # the fused projection: q and k, then v
        nn.init.normal_(inner.qkv_proj.weight[:-kv], std=qk)
        nn.init.normal_(inner.qkv_proj.weight[-kv:], std=vo)
        nn.init.normal_(inner.out_proj.weight, std=vo)


# --- 8. The model: embeddings, the layers, the head; pgpt, Deep Thinking, generation ---

class TokenEmbedding(nn.Module):
    """Token embedding, vocab -> width.

    Factorized (paper 002, 3.0.1): vocab -> E -> width, V*E + E*width
    parameters instead of V*width.

    Tied (paper 000, 2.4), the head reuses them: logits = h @ W_e^T."""

    def __init__(self, config):
        super().__init__()
        width = config.n_embd * config.n_branches
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


def sample_next(logits, temperature=1.0, top_k=None, generator=None):
    """The next token from last-position logits (B, V): greedy at temperature
    0, else sampled (from the top_k)."""
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True)
    logits = logits.float() / temperature
    if top_k is not None and top_k < logits.size(-1):
        kth = torch.topk(logits, top_k).values[:, [-1]]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = F.softmax(logits, dim=-1)
    return torch.multinomial(probs, num_samples=1, generator=generator)


class GPT(nn.Module):

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.tok_emb = TokenEmbedding(config)
        if config.pos_embedding == "learned":   # pgpt: all branches' chunks wide
            self.pos_emb = nn.Embedding(config.block_size, config.n_embd * config.n_branches)
        elif config.pos_embedding == "sinusoidal":
            table = sinusoidal_positions(config.block_size, config.embd_width())
            self.register_buffer("pos_table", table, persistent=False)
        self.drop = nn.Dropout(config.dropout)
        stacks = [DecoderStack(config) for _ in range(config.n_branches)]
        self.branches = nn.ModuleList(stacks)
        if config.n_branches > 1:
            self.branch_logits = nn.Parameter(torch.zeros(config.n_branches))
        self.keep_branch = None   # pgpt at inference: the only branch to run
        # post-norm: every sub-layer already ends in a norm (paper 000's code)
        self.ln_f = nn.Identity()
        if config.norm_placement == "pre":
            self.ln_f = make_norm(config, config.final_width())
        if not config.tie_embeddings:
            self.lm_head = nn.Linear(config.final_width(), config.vocab_size,
                                     bias=config.head_bias)
        elif config.head_bias:
            self.tied_head_bias = nn.Parameter(torch.zeros(config.vocab_size))
        init_gpt2(self, config)   # section 7
        if config.init_scheme in ("internlm", "depth_adaptive"):
            init_by_scheme(self, config)

    def get_num_params(self, non_embedding=True):
        """Parameters; non_embedding=True leaves out the learned positions,
        as nanoGPT does.

        Shared weights count once."""
        n = sum(p.numel() for p in self.parameters())
        if non_embedding and hasattr(self, "pos_emb"):
            n -= self.pos_emb.weight.numel()
        return n

    def forward(self, idx, targets=None, cache=None, all_logits=False):
        """idx (B, T) -> (logits, loss). Without targets: the last position's
        logits only, unless all_logits. With a cache (section 3) the tokens
        continue the cached ones."""
        B, T = idx.shape
        start = 0 if cache is None else cache.length
        if start + T > self.config.block_size:
            raise ValueError(f"sequence of {start + T} tokens exceeds block_size "
                             f"{self.config.block_size}")
        if cache is None:
            pos = torch.arange(T, device=idx.device)
        else:   # the cache numbers the tokens after the cached ones
            pos = cache.positions(T, idx.device)
        x = self.tok_emb(idx)
        if self.config.pos_embedding == "learned":
            x = x + self.pos_emb(pos)
        elif self.config.pos_embedding == "sinusoidal":
            x = x + self.pos_table[pos]
        x = self.drop(x)
        if self.config.think_steps:
            x = self.think(x, cache)
        elif self.config.n_branches > 1:
            x = self.run_branches(x, cache)
        else:
            x = self.branches[0](x, cache)
        if cache is not None:
            cache.advance(T)
        x = self.ln_f(x)
        if targets is None and not all_logits:
            x = x[:, -1:, :]
        logits = self.head(x)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)).float(),
                                   targets.reshape(-1), ignore_index=-1)
        return logits, loss

    def head(self, h):
        """The logits.

        Tied (paper 000, 2.4): through the token embedding.

        Untied: lm_head."""
        if not self.config.tie_embeddings:
            return self.lm_head(h)
        logits = self.tok_emb.tied_logits(h)
        return logits + self.tied_head_bias if self.config.head_bias else logits

    def configure_optimizers(self, weight_decay, learning_rate, betas, device_type):
        """AdamW; weight decay on >= 2-D weights only, not on norms and biases.

        Nor on enhanced-residual alphas or pgpt branch logits."""
        params = [p for p in self.parameters() if p.requires_grad]
        decay = [p for p in params if p.dim() >= 2]
        no_decay = [p for p in params if p.dim() < 2]
        groups = [{"params": decay, "weight_decay": weight_decay},
                  {"params": no_decay, "weight_decay": 0.0}]
        return torch.optim.AdamW(groups, lr=learning_rate, betas=betas,
                                 fused=device_type == "cuda")

    # --- ParallelGPT (paper 004, 3.1) ---
    def run_branches(self, x, cache):
        """pgpt: branch i reads the i-th n_embd-wide chunk, the outputs mixed as
        sum_i w_i * decoder_i(x_i) (paper 004, eq. 1-3); with keep_branch set
        only its term runs. Each branch keeps its own cache entries."""
        chunks = x.split(self.config.n_embd, dim=-1)
        keep = self.keep_branch
        if keep is not None:
            kept = self.branches[keep](chunks[keep], BranchCache(cache, keep))
            return self.branch_weights()[keep] * kept
        weights = self.branch_weights()
        out = 0
        for i, (stack, chunk) in enumerate(zip(self.branches, chunks)):
            out = out + weights[i] * stack(chunk, BranchCache(cache, i))
        return out

    def branch_weights(self):
        """pgpt's mixing weights: softmax of learned logits. Two branches:
        w = sigmoid(a1 - a2) and 1 - w, the paper's eq. 3."""
        return F.softmax(self.branch_logits, dim=0)

    def heaviest_branch(self):
        return int(self.branch_weights().argmax())

    def keep_heaviest_branch(self):
        """pgpt at inference (paper 004): only the heaviest branch runs; a note."""
        if self.config.n_branches == 1:
            return "keep_heaviest_branch ignored (the model has one branch)"
        self.keep_branch = self.heaviest_branch()
        weights = ", ".join(f"{w:.3f}" for w in self.branch_weights().tolist())
        n = self.config.n_branches
        return f"running only branch {self.keep_branch} of {n} (weights {weights})"

    # --- Deep Thinking (paper 000, 2.8) ---
    def think(self, x, cache):
        """T thinking passes, then the test pass (DeepThinking, below). Pass 1
        reads the embeddings x, pass t > 1 the output of pass t-1 (the authors'
        code); the test pass reads x again and attends over the memory M_T."""
        thinking = DeepThinking(self.config, cache, self.training)
        h = x
        for t in range(1, self.config.think_steps + 1):
            thinking.t = t
            h = self.branches[0](h, thinking)
        thinking.t = 0
        return self.branches[0](x, thinking)

    # --- generation ---
    @torch.inference_mode()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None,
                 use_kv_cache=True, generator=None, on_token=None, n_tokens=None):
        """Sample max_new_tokens tokens after idx (B, T): one token a step
        through the KV cache, or the whole window (use_kv_cache=False; the same
        logits). on_token(token): each new token (0-d) of the first sequence.
        n_tokens: only ids below it (a padded vocab_size)."""
        was_training = self.training
        self.eval()
        block_size = self.config.block_size
        cache = KVCache(block_size) if use_kv_cache else None
        window_start = 0
        for _ in range(max_new_tokens):
            # window full: start again at position 0 from its recent half (nanoGPT
            # crops every step; a cache would then refill every step)
            if idx.size(1) - window_start > block_size:
                window_start = idx.size(1) - max(1, block_size // 2)
                if cache is not None:
                    cache.reset()   # same buffers, positions from 0
            window = idx[:, window_start:]
            if cache is not None:   # the window's tokens the cache does not hold yet
                window = window[:, cache.length:]
            logits, _ = self(window, cache=cache)
            idx_next = sample_next(logits[:, -1, :n_tokens], temperature, top_k, generator)
            idx = torch.cat((idx, idx_next), dim=1)
            if on_token is not None:
                on_token(idx_next[0, 0])
        self.train(was_training)
        return idx


class BranchCache:
    """pgpt: one branch's entries of a cache, keyed (branch, i); None without one."""

    def __init__(self, cache, branch):
        self.cache = cache
        self.branch = branch

    def __getitem__(self, i):
        return None if self.cache is None else self.cache[self.branch, i]


class DeepThinking:
    """Deep Thinking (paper 000, 2.8) over one forward call: the pass t (1..T
    thinking, 0 the test pass) and each attention layer's key/value memory:

      pass 1:      attend over own K_1          M_1 = K_1    (the same for V)
      pass t > 1:  attend over [M_{t-1} ; K_t]  M_t = eta*K_t + (1-eta)*M_{t-1}
      test pass:   attend over M_T only
    Both halves of [M ; K] are causal. M_1 = K_1 is our reading (2.8 leaves
    it undefined); think_memory="first_layer" is the authors' code:
    M_1 = eta*K_1 + (1-eta)*K_1 of the first attention layer. It stands in
    for the cache (section 3): DecoderStack's cache[i] notes sub-layer i and
    returns this object."""

    def __init__(self, config, cache, training):
        self.eta = config.think_eta
        self.first_layer_rule = config.think_memory == "first_layer"
        self.cache = cache
        self.start = 0 if cache is None else cache.length
        self.dropout = config.dropout if training else 0.0
        self.t = 1
        self.sublayer = 0       # i of DecoderStack's cache[i]
        self.memory = {}        # sublayer -> (M_k, M_v) of the latest pass
        self.first_kv = None    # "first_layer": the first attention layer's K_1, V_1

    def __getitem__(self, sublayer):
        self.sublayer = sublayer
        return self

    def positions(self, length, device):
        return torch.arange(self.start, self.start + length, device=device)

    def attend(self, q, k, v):
        if self.t == 0:   # test pass
            mem_k, mem_v = self.memory[self.sublayer]
            return causal_attention(q, mem_k, mem_v, self.start, self.dropout)
        if self.t == 1:
            return self.first_pass(q, k, v)
        return self.later_pass(q, k, v)

    def first_pass(self, q, k, v):
        keys, values = self.with_cached("kv", k, v)
        y = causal_attention(q, keys, values, self.start, self.dropout)
        if self.first_layer_rule:
            if self.first_kv is None:   # the first attention layer
                self.first_kv = (k, v)
            k = self.blend(k, self.first_kv[0])
            v = self.blend(v, self.first_kv[1])
        self.memory[self.sublayer] = self.with_cached("memory", k, v)
        return y

    def later_pass(self, q, k, v):
        keys, values = self.with_cached("kv", k, v)
        mem_k, mem_v = self.memory[self.sublayer]   # M_{t-1}
        mask = causal_mask(self.start, q.size(2), q.device)
        mask = torch.cat([mask, mask], dim=-1)   # over [M ; K]
        keys = torch.cat([mem_k, keys], dim=2)
        values = torch.cat([mem_v, values], dim=2)
        gqa = q.size(1) != k.size(1)
        y = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask,
                                           dropout_p=self.dropout, enable_gqa=gqa)
        # M_{t-1} at the new positions
        k = self.blend(k, mem_k[:, :, self.start:])
        v = self.blend(v, mem_v[:, :, self.start:])
        self.memory[self.sublayer] = self.with_cached("memory", k, v)
        return y

    def blend(self, new, memory):
        """M_t = eta*K_t + (1-eta)*M_{t-1}, or of V."""
        return self.eta * new + (1 - self.eta) * memory

    def with_cached(self, kind, k, v):
        """k, v after those of the cached positions (a KV cache's entry)."""
        if self.cache is None:
            return k, v
        return self.cache[kind, self.t, self.sublayer].store(k, v)


# --- 9. The config's checks (GPTConfig.__post_init__ runs them) -----------------------

# the fields that name a choice, and their allowed values
CHOICES = dict(norm=("layernorm", "rmsnorm"), norm_placement=("pre", "post"),
               mlp_type=("standard", "gated"),
               pos_embedding=("learned", "sinusoidal", "rope", "none"),
               activation=tuple(ACTIVATIONS), shrink_layer=("linear", "conv"),
               share_sublayers=("both", "attn", "mlp"),
               think_memory=("own", "first_layer"),
               init_scheme=("gpt2", "constant", "internlm", "depth_adaptive"))


def require(ok, msg):
    if not ok:
        raise ValueError(f"GPTConfig: {msg}")


def check_config(c):
    """Reject, in one line, a config the model cannot build or would build wrong."""
    for name in ("block_size", "vocab_size", "n_layer", "n_head", "n_embd", "n_branches",
                 "share_group_size", "shrink_kernel"):
        value = getattr(c, name)
        require(value >= 1, f"{name} must be >= 1, got {value}")
    for name in ("mlp_hidden", "embd_factor_dim"):
        value = getattr(c, name)
        require(value is None or value >= 1,
                f"{name} must be >= 1 (or None), got {value}")
    for name in ("mlp_ratio", "init_std", "norm_eps", "rope_base"):   # inf: NaNs
        value = getattr(c, name)
        require(0 < value < math.inf, f"{name} must be > 0 and finite, got {value}")
    for name in ("shrink_every", "n_top_attn_layers", "think_steps"):
        value = getattr(c, name)
        require(value >= 0, f"{name} must be >= 0, got {value}")
    require(0.0 <= c.dropout < 1.0, f"dropout must be in [0, 1), got {c.dropout}")
    require(math.isfinite(c.residual_logit_init),
            f"residual_logit_init must be finite, got {c.residual_logit_init}")
    for name, allowed in CHOICES.items():
        value = getattr(c, name)
        require(value in allowed,
                f"{name} must be one of {'|'.join(allowed)}, got {value!r}")
    check_widths(c)
    check_attention_layers(c)
    check_sharing(c)
    check_thinking(c)
    require(c.shrink_kernel == 1 or (c.shrink_layer == "conv" and c.shrink_every > 0),
            "shrink_kernel > 1 is cgpt's: it needs shrink_layer='conv' and shrink_every > 0")
    require(c.mlp_hidden is None or c.shrink_every == 0,
            "mlp_hidden is one size for all layers, but shrink_every changes the width; "
            "use mlp_ratio instead")
    require(not c.tie_embeddings or c.final_width() == c.embd_width(),
            f"tie_embeddings needs the head width ({c.final_width()}) to equal the "
            f"embedding width ({c.embd_width()}); set tie_embeddings=False for "
            f"pgpt/lgpt/cgpt")


def check_widths(c):
    require(c.n_layer % c.n_branches == 0,
            f"n_layer ({c.n_layer}) must divide evenly over n_branches ({c.n_branches})")
    kv = c.n_head if c.n_kv_head is None else c.n_kv_head
    require(kv >= 1 and c.n_head % kv == 0,
            f"n_kv_head ({kv}) must divide n_head ({c.n_head}) for GQA")
    for width in c.widths():
        require(width > 0 and width % c.n_head == 0,
                f"width {width} must be a positive multiple of n_head ({c.n_head}); with "
                f"shrink_every every halved width must be too (widths: {c.widths()})")
        head_dim = width // c.n_head
        require(c.pos_embedding != "rope" or head_dim % 2 == 0,
                f"RoPE needs an even head size, got {head_dim} (width {width})")
        require(c.mlp_hidden or c.mlp_ratio * width >= 1,
                f"the FFN of width {width} has no unit (mlp_ratio * width < 1)")


def check_attention_layers(c):
    n = c.layers_per_branch()
    bottom, top = c.n_attn_layers, c.n_top_attn_layers
    require(bottom is None or 0 <= bottom <= n,
            f"n_attn_layers must be in [0, {n}], got {bottom}")
    require(top == 0 or bottom is not None,
            "n_top_attn_layers needs n_attn_layers, the number of attention layers at "
            "the bottom (fix: set n_attn_layers, 0 for attention at the top only)")
    require(bottom is None or bottom + top <= n,
            f"n_attn_layers + n_top_attn_layers = {(bottom or 0) + top} exceeds the {n} "
            f"layers per branch")


def check_sharing(c):
    n = c.layers_per_branch()
    k, start = c.share_group_size, c.share_from_layer
    end = n - c.n_top_attn_layers   # the top attention layers are never shared
    require(0 <= start <= end,
            f"share_from_layer must be in [0, {end}] (n_layer/n_branches - "
            f"n_top_attn_layers), got {start}")
    require((end - start) % k == 0,
            f"the {end - start} shared layers (n_layer/n_branches - share_from_layer - "
            f"n_top_attn_layers) must split into groups of share_group_size={k}")
    require(k == 1 or c.shrink_every == 0,
            "layer sharing cannot be combined with width shrinking (lgpt/cgpt)")
    bottom = n if c.n_attn_layers is None else c.n_attn_layers
    require(k == 1 or bottom <= start or (bottom - start) % k == 0,
            "a sharing group would mix attention and MLP-only layers; "
            "set share_from_layer = n_attn_layers")


def check_thinking(c):
    require(0.0 < c.think_eta <= 1.0, f"think_eta must be in (0, 1], got {c.think_eta}")
    if c.think_steps == 0:
        return
    require(len(c.attention_layers()) > 0,
            "Deep Thinking needs attention layers (n_attn_layers = 0)")
    require(c.n_branches == 1 and c.shrink_every == 0,
            "Deep Thinking feeds each pass's output into the next pass, so the output "
            "must be as wide as the embedding: not with pgpt branches or lgpt/cgpt "
            "shrinking")
    require(c.think_steps >= 2 or c.think_memory == "first_layer",
            "think_steps=1 with think_memory='own' computes exactly the function of "
            "think_steps=0 (the test pass re-reads the keys of an identical pass); "
            "use think_steps >= 2")
