"""
layer_sharing: model.py specialised to this config, one file. model.py is the source, with every
flag; this file holds only what layer_sharing runs in a training step, an evaluation, generation with
and without the KV cache past a full window, and tokens fed to the cache a few at a time (the
classes, functions, branches and GPTConfig fields), in model.py's order, with its comments and
section numbers (a section this config does not run is left out), and computes exactly what
model.py computes for it. Do not edit: regenerate.

    made by:  python -m tools.one_file layer_sharing --out=docs/models/layer_sharing.py
    model.py as of commit 25d2981, its last change
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
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768               # width
    dropout: float = 0.0
    bias: bool = True               # in Linears and norms (GPT-2: True, LLaMA: False)
    norm_eps: float = 1e-5
    # --- GQA (000 2.5): key/value heads, dividing n_head; None = n_head ---
    n_kv_head: Optional[int] = 3  # this file: not None
    mlp_hidden: Optional[int] = 1536  # this file: not None
    # --- layer sharing (000 2.6, 002 3.0.2, 001 4.4): build_shared_layers, section 5 ---
    share_group_size: int = 2       # k consecutive layers, one set of weights; this file: 2 only
    share_from_layer: int = 0       # layers below are never shared
    share_sublayers: str = "both"   # "both" | "attn" | "mlp"
    n_top_attn_layers: int = 0      # ... and in the last m (001 Table 10's "n + m")
    init_std: float = 0.02

    # --- derived sizes ---
    def layers_per_branch(self):
        return self.n_layer

    def attention_layers(self):
        """The layers with attention."""
        n = self.layers_per_branch()
        return list(range(n))

    def embd_width(self):
        return self.n_embd

    def widths(self):
        """The width of each layer, from n_embd."""
        return [self.n_embd] * self.n_layer


# --- 2. Building blocks: norms, sinusoidal positions, MLP -----------------------------

def make_norm(config, dim):
    """The norm:
      LayerNorm (GPT-2; bias if `bias`)"""
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


class MLP(nn.Module):
    """Feed-forward network.

      gated (double up-projection):  down(act(gate x) * up x)    (000 2.2)
      gated + silu = SwiGLU:         down(silu(gate x) * up x)   (000 2.3)
    act is on the gate only (000's public code has it on both).
    """

    def __init__(self, config, width):
        super().__init__()
        hidden = config.mlp_hidden
        self.up = nn.Linear(width, hidden, bias=config.bias)
        self.gate = nn.Linear(width, hidden, bias=config.bias)
        self.down = nn.Linear(hidden, width, bias=config.bias)
        self.act = F.silu
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x, cache=None):   # cache: attention's; an MLP keeps none
        h = self.act(self.gate(x)) * self.up(x)
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
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=start == 0,
                                          dropout_p=dropout_p, enable_gqa=q.size(1) != k.size(1))


class KVCache:
    """The KV cache of incremental decoding: cache[i] is the entry of the stack's
    sub-layer i. The cache interface, what the model calls on a cache (also the
    static ones of tools/fast_sample.py and tools/executorch/export.py):
      length: the tokens already cached
      positions(T, device): the positions of the T new tokens
      cache[key]: an entry; its attend(q, k, v) stores k, v at the new
          positions and returns the attention of q over every cached key
      advance(T): after the forward, the T new tokens are cached
      reset(): start a new sequence at position 0, keeping the buffers
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
    """Sub-layer i's entry: keys and values (B, H_kv, max_len, D)."""

    def __init__(self, cache):
        self.cache = cache
        self.keys = None
        self.values = None

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


class CausalSelfAttention(nn.Module):
    """Causal self-attention, n_head heads.

    Grouped-query attention (paper 000, 2.5): the query heads share n_kv_head
    key/value heads, in groups."""

    def __init__(self, config, width):
        super().__init__()
        self.n_head = config.n_head
        self.n_kv_head = config.n_kv_head
        self.head_dim = width // config.n_head
        self.kv_width = self.n_kv_head * self.head_dim
        # one matmul: the queries (width), then the keys and values (kv_width each)
        self.qkv_proj = nn.Linear(width, width + 2 * self.kv_width, bias=config.bias)
        self.out_proj = nn.Linear(width, width, bias=config.bias)
        self.dropout = config.dropout
        self.resid_dropout = nn.Dropout(config.dropout)

    def forward(self, x, cache=None):
        """cache: this layer's entry of the KV cache (above), which stores
        k, v and attends; else None."""
        B, T, C = x.shape
        # q (B, H, T, D), k and v (B, H_kv, T, D): from one projection
        q, k, v = self.qkv_proj(x).split([C, self.kv_width, self.kv_width], dim=2)
        q = q.view(B, T, self.n_head, self.head_dim).transpose(1, 2)
        k = k.view(B, T, self.n_kv_head, self.head_dim).transpose(1, 2)
        v = v.view(B, T, self.n_kv_head, self.head_dim).transpose(1, 2)
        if cache is None:
            y = causal_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0)
        else:
            y = cache.attend(q, k, v)
        y = self.out_proj(y.transpose(1, 2).reshape(B, T, C))
        return self.resid_dropout(y)


# --- 4. Residual sub-layers: pre- or post-norm ------------------------------------------

class ResidualSubLayer(nn.Module):
    """The residual around one attention or FFN sub-layer F (`inner`): pre-norm
    x + F(norm(x)) (GPT-2, LLaMA).

    Post-norm: norm(x + F(x)) (paper 000's code).
    """

    def __init__(self, config, width, inner):
        super().__init__()
        self.norm = make_norm(config, width)
        self.inner = inner

    def forward(self, x, cache=None):
        return self.norm(self.mix(x, self.inner(x, cache)))

    def mix(self, x, fx):
        return x + fx


# --- 5. The decoder stack; layer sharing ----------------------------------------------

class DecoderStack(nn.Module):
    """The layers: attention, then the FFN, each in its residual. `layers`:
    the sub-layers as applied; `attn`, `mlp`: the modules, each once."""

    def __init__(self, config):
        super().__init__()
        self.attn = nn.ModuleList()
        self.mlp = nn.ModuleList()
        self.layers = []
        build_shared_layers(self, config)   # below

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


# --- 7. Initialisation: GPT-2's --------------------------------------------------------

def init_gpt2(model, config):
    """GPT-2's init, as nanoGPT's: every Linear, Conv1d and Embedding weight
    ~ N(0, init_std), biases 0, in module order; the projections back into the
    residual stream (out_proj, down) at init_std / sqrt(2 * n_layer)."""
    scaled = config.init_std / math.sqrt(2 * config.n_layer)
    for name, module in model.named_modules():
        if isinstance(module, (nn.Linear, nn.Conv1d, nn.Embedding)):
            std = scaled if name.endswith(("out_proj", "down")) else config.init_std
            nn.init.normal_(module.weight, mean=0.0, std=std)
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)


# --- 8. The model: embeddings, the layers, the head, generation ------------------------

class TokenEmbedding(nn.Module):
    """Token embedding, vocab -> width.

    Tied (paper 000, 2.4), the head reuses them: logits = h @ W_e^T."""

    def __init__(self, config):
        super().__init__()
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)

    def forward(self, idx):
        return self.wte(idx)

    def tied_logits(self, h):
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
        table = sinusoidal_positions(config.block_size, config.embd_width())
        self.register_buffer("pos_table", table, persistent=False)
        self.drop = nn.Dropout(config.dropout)
        self.branches = nn.ModuleList([DecoderStack(config)])
        # post-norm: every sub-layer already ends in a norm (paper 000's code)
        self.ln_f = nn.Identity()
        self.tied_head_bias = nn.Parameter(torch.zeros(config.vocab_size))
        init_gpt2(self, config)   # section 7

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
        x = x + self.pos_table[pos]
        x = self.drop(x)
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

        Tied (paper 000, 2.4): through the token embedding."""
        logits = self.tok_emb.tied_logits(h)
        return logits + self.tied_head_bias

    def configure_optimizers(self, weight_decay, learning_rate, betas, device_type):
        """AdamW; weight decay on >= 2-D weights only, not on norms and biases."""
        params = [p for p in self.parameters() if p.requires_grad]
        decay = [p for p in params if p.dim() >= 2]
        no_decay = [p for p in params if p.dim() < 2]
        groups = [{"params": decay, "weight_decay": weight_decay},
                  {"params": no_decay, "weight_decay": 0.0}]
        return torch.optim.AdamW(groups, lr=learning_rate, betas=betas,
                                 fused=device_type == "cuda")

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


# --- This file only (skip it on a first read): GPTConfig from a checkpoint of model.py ---

# model.py's GPTConfig fields this file leaves out; those it holds but runs at one value only
# (share_group_size, at that value in GPTConfig) too: the values it assumes
ASSUMED = {
    'activation': 'silu',
    'embd_factor_dim': None,
    'enhanced_residual': False,
    'head_bias': True,
    'init_scheme': 'gpt2',
    'mlp_ratio': 4.0,
    'mlp_type': 'gated',
    'n_attn_layers': None,
    'n_branches': 1,
    'norm': 'layernorm',
    'norm_placement': 'post',
    'pos_embedding': 'sinusoidal',
    'residual_logit_init': 0.0,
    'rope_base': 10000.0,
    'share_group_size': 2,
    'shrink_every': 0,
    'shrink_kernel': 1,
    'shrink_layer': 'linear',
    'think_eta': 0.01,
    'think_memory': 'own',
    'think_steps': 0,
    'tie_embeddings': True,
}

# model.py's fields this file holds but needs set: it has no code for their None
NOT_NONE = ('mlp_hidden', 'n_kv_head')


def config_from(model_args):
    """GPTConfig from a checkpoint's model_args (model.py's fields): those in
    ASSUMED must hold its values; those in NOT_NONE a value; GPTConfig
    takes the others."""
    for name, value in ASSUMED.items():
        if model_args.get(name, value) != value:
            raise ValueError(f"{name}={model_args[name]!r}, but this file assumes {value!r} "
                             f"(fix: that config's file: python -m tools.one_file CONFIG)")
    for name in NOT_NONE:
        if model_args.get(name) is None:
            raise ValueError(f"{name}=None, but this file needs a value "
                             f"(fix: that config's file: python -m tools.one_file CONFIG)")
    return GPTConfig(**{k: v for k, v in model_args.items() if k not in ASSUMED})
