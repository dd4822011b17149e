"""
deep_thinking: model.py specialised to this config, one file. model.py is the source, with every
flag; this file holds only what deep_thinking runs in a training step, an evaluation and a generation
through the KV cache (the classes, functions, branches and GPTConfig fields), in model.py's order,
with its comments, and computes exactly what model.py computes for it. Do not edit: regenerate.

    made by:  python -m tools.one_file deep_thinking --out=models/deep_thinking.py
    model.py of commit 2d307c1
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
    # --- GQA (000 2.5): key/value heads, dividing n_head; None = n_head ---
    n_kv_head: Optional[int] = None
    activation: str = "gelu"        # "gelu" | "gelu_tanh" | "silu" | "relu"
    mlp_hidden: Optional[int] = None  # None: mlp_ratio * width
    mlp_ratio: float = 4.0
    embd_factor_dim: Optional[int] = None   # E: vocab -> E -> n_embd
    # --- layer sharing (000 2.6, 002 3.0.2, 001 4.4): sharing_plan, section 5 ---
    share_group_size: int = 1       # k consecutive layers, one set of weights
    share_from_layer: int = 0       # layers below are never shared
    share_sublayers: str = "both"   # "both" | "attn" | "mlp"
    residual_logit_init: float = 0.0   # w at init (authors' code: 0, alpha = 0.5)
    # --- Deep Thinking (000 2.8) ---
    think_steps: int = 0            # thinking passes T (paper: 3); 0 = off
    think_eta: float = 0.01         # M_t = eta*K_t + (1-eta)*M_{t-1}
    n_top_attn_layers: int = 0      # ... and in the last m (001 Table 10's "n + m")
    # --- ParallelGPT (004 3.1) ---
    n_branches: int = 1             # the embedding is n_branches * n_embd wide
    # --- LinearGPT / ConvGPT (004 3.2-3.3) ---
    shrink_every: int = 0           # halve the width after every k layers; 0 = off
    # --- initialisation (003 3.1, Appendix B; init_stds, section 7) ---
    init_scheme: str = "gpt2"       # "gpt2" | "constant" | "internlm" | "depth_adaptive"
    init_std: float = 0.02

    # --- derived sizes ---
    def layers_per_branch(self):
        return self.n_layer // self.n_branches

    def attention_layers(self):
        # model.py's docstring, whole: it also tells of code left out here
        """The layers of a branch with attention: all, or the first n_attn_layers
        and the last n_top_attn_layers (ShishuLM, 001 4.2, Table 10)."""
        n = self.layers_per_branch()
        return list(range(n))

    def embd_width(self):
        return self.n_embd * self.n_branches

    def widths(self):
        # model.py's docstring, whole: it also tells of code left out here
        """The width of each layer: constant, or halved (lgpt/cgpt)."""
        n = self.layers_per_branch()
        return [self.n_embd] * n


# model.py's GPTConfig fields this file leaves out; bias, embd_factor_dim, n_branches, norm, shrink_every, think_steps it also holds, but runs only at the value below: the values it assumes
ASSUMED = dict(
    bias=True,
    embd_factor_dim=None,
    enhanced_residual=True,
    head_bias=True,
    mlp_type='gated',
    n_attn_layers=None,
    n_branches=1,
    norm='layernorm',
    norm_placement='post',
    pos_embedding='sinusoidal',
    rope_base=10000.0,
    shrink_every=0,
    shrink_kernel=1,
    shrink_layer='linear',
    think_memory='own',
    think_steps=3,
    tie_embeddings=True,
)


def config_from(model_args):
    """GPTConfig from a checkpoint's model_args (model.py's fields): those this
    file leaves out must hold the values it assumes."""
    for name, value in ASSUMED.items():
        if model_args.get(name, value) != value:
            raise ValueError(f"{name}={model_args[name]!r}, but this file assumes "
                             f"{value!r} (fix: the file of that config)")
    fields = GPTConfig.__dataclass_fields__
    return GPTConfig(**{k: v for k, v in model_args.items() if k in fields})


# --- 2. Building blocks: norms, positions, MLP ----------------------------------------

def make_norm(config, dim):
    """LayerNorm (GPT-2; bias if `bias`) or RMSNorm (LLaMA: x / rms(x) * g)."""
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


def gelu_tanh(x):
    """GELU through its tanh approximation (GPT-2's original code)."""
    return F.gelu(x, approximate="tanh")


ACTIVATIONS = {"gelu": F.gelu, "gelu_tanh": gelu_tanh, "silu": F.silu, "relu": F.relu}


class MLP(nn.Module):
    """Feed-forward network.

    The activation is on the gate only (000's public code has it on both).
    """

    def __init__(self, config, width, std):
        super().__init__()
        hidden = config.mlp_hidden or int(config.mlp_ratio * width)
        self.up = nn.Linear(width, hidden, bias=config.bias)
        self.gate = nn.Linear(width, hidden, bias=config.bias)
        self.down = nn.Linear(hidden, width, bias=config.bias)
        self.act = ACTIVATIONS[config.activation]
        self.dropout = nn.Dropout(config.dropout)
        self.std = std   # init_stds, section 7

    def forward(self, x, ctx=None, slot=None):   # ctx, slot: attention's, unused
        h = self.act(self.gate(x)) * self.up(x)
        y = self.down(h)
        return self.dropout(y) if self.training else y   # eval: skip a no-op call


# --- 3. Attention: causal, GQA, the cache's case and Deep Thinking's memory -----------

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


class ForwardContext:
    """What the layers of one forward call share, passed as `ctx`. Each sub-layer
    also gets its `slot`, (branch, layer, think_pass): the key under which the KV
    cache (section 9) and Deep Thinking keep its keys and values, one per
    application of a layer (a shared layer applied twice has two)."""

    def __init__(self, start, positions, cache):
        self.start = start          # the first new token's position (0: no cache)
        self.positions = positions  # the new tokens' positions
        self.cache = cache          # the KV cache (section 9), or None
        self.branch = 0             # pgpt: the branch that runs (GPT.run_branches)
        self.think_pass = 0         # Deep Thinking: t = 1..T; 0: the test pass
        self.memory = {}            # Deep Thinking: slot -> its memory


class CausalSelfAttention(nn.Module):
    """Causal self-attention with grouped-query attention (paper 000, 2.5):
    n_head query heads share n_kv_head key/value heads, in groups."""

    def __init__(self, config, width, std):
        super().__init__()
        self.n_head = config.n_head
        self.n_kv_head = config.n_kv_head or config.n_head
        self.head_dim = width // config.n_head
        self.kv_width = self.n_kv_head * self.head_dim
        # one matmul: the queries (width), then the keys and values (kv_width each)
        qkv_width = width + 2 * self.kv_width
        self.qkv_proj = nn.Linear(width, qkv_width, bias=config.bias)
        self.out_proj = nn.Linear(width, width, bias=config.bias)
        self.std = std   # init_stds, section 7
        self.dropout = config.dropout
        self.resid_dropout = nn.Dropout(config.dropout)
        self.think_steps = config.think_steps
        self.think_eta = config.think_eta

    def forward(self, x, ctx, slot):
        B, T, C = x.shape
        # q (B, H, T, D), k and v (B, H_kv, T, D): from one projection
        q, k, v = self.qkv_proj(x).split([C, self.kv_width, self.kv_width], dim=2)
        q = q.view(B, T, self.n_head, self.head_dim).transpose(1, 2)
        k = k.view(B, T, self.n_kv_head, self.head_dim).transpose(1, 2)
        v = v.view(B, T, self.n_kv_head, self.head_dim).transpose(1, 2)
        y = self.deep_thinking(q, k, v, ctx, slot)
        y = self.out_proj(y.transpose(1, 2).reshape(B, T, C))
        return self.resid_dropout(y) if self.training else y

    # --- Deep Thinking (paper 000, 2.8) ---
    def deep_thinking(self, q, k, v, ctx, slot):
        """One layer of Deep Thinking, in thinking pass t = 1..T or the test pass:
          pass 1:      attend over own K_1          M_1 = K_1    (the same for V)
          pass t > 1:  attend over [M_{t-1} ; K_t]  M_t = eta*K_t + (1-eta)*M_{t-1}
          test pass:   attend over M_T only
        """
        branch, layer, t = slot
        eta = self.think_eta
        dropout = self.dropout if self.training else 0.0
        if t == 0:   # the test pass: its queries over the memory M_T only
            mem_k, mem_v = ctx.memory[(branch, layer, self.think_steps)]
            return causal_attention(q, mem_k, mem_v, ctx.start, dropout)
        keys, values = k, v
        if ctx.cache is not None:   # K_t, V_t of the cached positions too
            keys, values = ctx.cache.store(ctx.cache.kv, slot, k, v)
        if t == 1:
            y = causal_attention(q, keys, values, ctx.start, dropout)
        else:
            mem_k, mem_v = ctx.memory[(branch, layer, t - 1)]
            mask = causal_mask(ctx.start, q.size(2), q.device)
            mask = torch.cat([mask, mask], dim=-1)   # over [M ; K]
            keys = torch.cat([mem_k, keys], dim=2)
            values = torch.cat([mem_v, values], dim=2)
            gqa = self.n_kv_head != self.n_head
            y = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask,
                                               dropout_p=dropout, enable_gqa=gqa)
            k = eta * k + (1 - eta) * mem_k[:, :, ctx.start:]
            v = eta * v + (1 - eta) * mem_v[:, :, ctx.start:]
        if ctx.cache is not None:   # M_t of the cached positions too
            k, v = ctx.cache.store(ctx.cache.memory, slot, k, v)
        ctx.memory[slot] = (k, v)
        return y


# --- 4. Residual sub-layers: pre- or post-norm, plain or Enhanced Residual (000, 2.7) ---

class ResidualSubLayer(nn.Module):
    # model.py's docstring, whole: it also tells of code left out here
    """The residual around one attention or FFN sub-layer F (`inner`): pre-norm
    x + F(norm(x)) (GPT-2, LLaMA) or post-norm norm(x + F(x)) (paper 000's code).
    """

    def __init__(self, config, width, inner):
        super().__init__()
        self.norm = make_norm(config, width)
        self.inner = inner
        w = torch.full((), float(config.residual_logit_init))
        self.alpha_logit = nn.Parameter(w)

    def forward(self, x, ctx, slot):
        return self.norm(self.mix(x, self.inner(x, ctx, slot)))

    def mix(self, x, fx):
        alpha = torch.sigmoid(self.alpha_logit)
        return alpha * x + (1 - alpha) * fx


# --- 5. Layer sharing: one plan for every scheme --------------------------------------

def sharing_plan(config):
    """The weight set of each layer's attention and FFN: (attn_index, mlp_index),
    numbered in order of first use; None: no attention (ShishuLM). From
    share_from_layer up to the top attention layers, groups of share_group_size
    (k) consecutive layers share the sub-layers share_sublayers names (ours; the
    papers share both):
      MobileLLM's block-wise repeat (000 2.6):  k = 2:        0 0 1 1 2 2 ...
      ALBERT's all-layer sharing (002 3.0.2):   k = n_layer:  0 0 0 0 ...
      G groups (002 3.0.2):                     k = n_layer / G
    E.g. ShishuLM's "2 + 1" (001 Table 10), 7 layers, share_from_layer=2, k=2:
      layer       0   1   2   3   4   5   6
      attention   0   1   -   -   -   -   2
      FFN         0   1   2   2   3   3   4
    """
    n = config.layers_per_branch()
    k, start = config.share_group_size, config.share_from_layer
    end = n - config.n_top_attn_layers   # the top attention layers are never shared
    share_attn = config.share_sublayers in ("both", "attn")
    share_mlp = config.share_sublayers in ("both", "mlp")
    attn_layers = config.attention_layers()
    attn_index, mlp_index = [], []
    for layer in range(n):
        # a group's layers after its first reuse the layer before's weights
        repeat = start < layer < end and (layer - start) % k != 0
        if repeat and share_attn:
            attn_index.append(attn_index[-1])
        else:   # a new set: numbered by the count so far
            attn_index.append(len(set(attn_index) - {None}))
        if repeat and share_mlp:
            mlp_index.append(mlp_index[-1])
        else:
            mlp_index.append(len(set(mlp_index)))
    return attn_index, mlp_index


class LinearShrink(nn.Module):
    """LinearGPT (paper 004, 3.2, eq. 4-5): a dense layer maps width C -> C/2."""

    def __init__(self, config, width):
        super().__init__()
        self.proj = nn.Linear(width, width // 2, bias=config.bias)

    def forward(self, x, ctx, slot):
        return self.proj(x)


class DecoderStack(nn.Module):
    """The layers of one branch. Layer l applies attn[attn_index[l]] (if any),
    then mlp[mlp_index[l]] (sharing_plan's indices), then halves the width
    if it ends a group of shrink_every layers and is not the last."""

    def __init__(self, config):
        super().__init__()
        self.attn_index, self.mlp_index = sharing_plan(config)
        widths = config.widths()
        # attn[i], mlp[i]: weight set i, built by the first layer that uses it
        self.attn = nn.ModuleList()
        self.mlp = nn.ModuleList()
        for layer, width in enumerate(widths):
            std = init_stds(config, layer / max(1, len(widths) - 1))   # section 7
            if self.attn_index[layer] == len(self.attn):   # a new weight set
                attn = CausalSelfAttention(config, width, std)
                self.attn.append(ResidualSubLayer(config, width, attn))
            if self.mlp_index[layer] == len(self.mlp):
                mlp = MLP(config, width, std)
                self.mlp.append(ResidualSubLayer(config, width, mlp))
        every = config.shrink_every
        shrink_cls = LinearShrink
        last = len(widths) - 1   # the last layer goes to the head at its width
        self.shrink_after = [l for l in range(last) if every and (l + 1) % every == 0]
        shrinks = [shrink_cls(config, widths[l]) for l in self.shrink_after]
        self.shrink = nn.ModuleList(shrinks)

    def forward(self, x, ctx):
        for layer in range(len(self.mlp_index)):
            slot = (ctx.branch, layer, ctx.think_pass)
            x = self.attn[self.attn_index[layer]](x, ctx, slot)
            x = self.mlp[self.mlp_index[layer]](x, ctx, slot)
        return x


# --- 7. Initialisation (paper 003, PanGu-pi Pro, 3.1, Table 4, Appendix B) ------------

def init_stds(config, depth):
    """The std of each attention (q, k, v, out) and FFN (up, gate, down) weight
    of a layer at relative depth 0 (first) .. 1 (last). sigma = init_std,
    N = 2 * n_layer; other weights take sigma (docs/architectures.md).
      gpt2        out, down: sigma / sqrt(N) (GPT-2's code)
    """
    sigma, scheme = config.init_std, config.init_scheme
    std = dict.fromkeys(("q", "k", "v", "out", "up", "gate", "down"), sigma)
    scaled = sigma / math.sqrt(2 * config.n_layer)
    std.update(out=scaled, down=scaled)
    return std


def normal(weight, std, bias=None):
    """weight ~ N(0, std), one draw; bias 0."""
    nn.init.normal_(weight, mean=0.0, std=std)
    if bias is not None:
        nn.init.zeros_(bias)


def init_weights(module, config):
    """Every Linear, Conv1d and Embedding weight ~ N(0, init_std), biases 0,
    drawn in module order; attention and FFN weights at their `.std`."""
    if isinstance(module, CausalSelfAttention):
        std = module.std
        qkv = module.qkv_proj
        # q and k share a std in every scheme; one draw where v's agrees
        normal(qkv.weight, std["q"], qkv.bias)
        normal(module.out_proj.weight, std["out"], module.out_proj.bias)
    elif isinstance(module, MLP):
        normal(module.up.weight, module.std["up"], module.up.bias)
        normal(module.gate.weight, module.std["gate"], module.gate.bias)
        normal(module.down.weight, module.std["down"], module.down.bias)
    elif isinstance(module, (nn.Linear, nn.Conv1d, nn.Embedding)):
        normal(module.weight, config.init_std, getattr(module, "bias", None))
    else:
        for child in module.children():
            init_weights(child, config)


# --- 8. The model ---------------------------------------------------------------------

class TokenEmbedding(nn.Module):
    """Token embedding, optionally factorized (paper 002, 3.0.1): vocab -> E ->
    width, V*E + E*width parameters instead of V*width. Tied (paper 000, 2.4),
    the head reuses them: logits = (h @ P) @ W_e^T."""

    def __init__(self, config):
        super().__init__()
        width = config.embd_width()
        self.wte = nn.Embedding(config.vocab_size, config.embd_factor_dim or width)
        self.proj = None

    def forward(self, idx):
        x = self.wte(idx)
        return x

    def tied_logits(self, h):
        return h @ self.wte.weight.t()


class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        width = config.embd_width()
        self.tok_emb = TokenEmbedding(config)
        table = sinusoidal_positions(config.block_size, width)
        self.register_buffer("pos_table", table, persistent=False)
        self.drop = nn.Dropout(config.dropout)
        stacks = [DecoderStack(config) for _ in range(config.n_branches)]
        self.branches = nn.ModuleList(stacks)
        # post-norm: every sub-layer already ends in a norm (paper 000's code)
        self.ln_f = nn.Identity()
        self.tied_head_bias = nn.Parameter(torch.zeros(config.vocab_size))
        init_weights(self, config)   # section 7

    # --- sizes ---
    def get_num_params(self, non_embedding=True):
        # model.py's docstring, whole: it also tells of code left out here
        """Unique parameters (shared weights once); non_embedding=True leaves
        out the learned positions, as nanoGPT does."""
        n = sum(p.numel() for p in self.parameters())
        if non_embedding and hasattr(self, "pos_emb"):
            n -= self.pos_emb.weight.numel()
        return n

    # --- forward ---
    def embed(self, idx, positions):
        x = self.tok_emb(idx)
        x = x + self.pos_table[positions]
        return self.drop(x) if self.training else x

    def forward(self, idx, targets=None, cache=None, all_logits=False):
        """idx (B, T) -> (logits, loss). Without targets: the last position's
        logits only, unless all_logits. With a cache (section 9) the tokens
        continue the cached ones."""
        B, T = idx.shape
        start = cache.length if cache is not None else 0
        if start + T > self.config.block_size:
            raise ValueError(f"sequence of {start + T} tokens exceeds block_size "
                             f"{self.config.block_size}")
        if cache is None:
            positions = torch.arange(T, device=idx.device)
        else:   # the cache numbers the tokens after the cached ones
            positions = cache.positions(T, idx.device)
        ctx = ForwardContext(start, positions, cache)
        x = self.embed(idx, positions)
        h = self.think(x, ctx)
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
        # model.py's docstring, whole: it also tells of code left out here
        """Logits: through the tied embedding (paper 000, 2.4) or lm_head."""
        logits = self.tok_emb.tied_logits(h)
        return logits + self.tied_head_bias

    def think(self, x, ctx):
        """Deep Thinking (paper 000, 2.8): T thinking passes, then the test pass.
        Pass 1 reads the embeddings x, pass t > 1 the output of pass t-1 (the
        authors' code); each layer keeps a KV memory (deep_thinking, section 3).
        The test pass reads x again and attends over the memory M_T."""
        h = x
        for t in range(1, self.config.think_steps + 1):
            ctx.think_pass = t
            h = self.run_branches(h, ctx)
        ctx.think_pass = 0   # the test pass
        return self.run_branches(x, ctx)

    def run_branches(self, x, ctx):
        # model.py's docstring, whole: it also tells of code left out here
        """The decoder stack. pgpt: branch i reads the i-th n_embd-wide chunk,
        the outputs mixed as sum_i w_i * decoder_i(x_i) (paper 004, eq. 1-3);
        with keep_branch set only that branch runs."""
        return self.branches[0](x, ctx)

    # --- training helpers ---
    def configure_optimizers(self, weight_decay, learning_rate, betas, device_type):
        """AdamW; weight decay on >= 2-D weights only (not on norms, biases,
        enhanced-residual alphas or pgpt branch logits)."""
        params = [p for p in self.parameters() if p.requires_grad]
        decay = [p for p in params if p.dim() >= 2]
        no_decay = [p for p in params if p.dim() < 2]
        groups = [{"params": decay, "weight_decay": weight_decay},
                  {"params": no_decay, "weight_decay": 0.0}]
        fused = device_type == "cuda"
        return torch.optim.AdamW(groups, lr=learning_rate, betas=betas, fused=fused)

    # --- 9. Generation: the sampling loop, then the KV cache it fills and sample_next ---
    def new_cache(self):
        return KVCache(self.config.block_size)

    def decode_step(self, idx, cache):
        """Logits (B, 1, V) of one more token per sequence, idx (B, 1)."""
        return self(idx, cache=cache)[0]

    @torch.inference_mode()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None,
                 use_kv_cache=True, generator=None, cache=None, step=None,
                 on_token=None):
        """Sample max_new_tokens tokens after idx (B, T): one token a step
        through the KV cache, or the whole window (use_kv_cache=False; the same
        logits). cache, step: another cache and decode step (tools/fast_sample.py).
        on_token(id): each new token of the first sequence, as it comes."""
        was_training = self.training
        self.eval()
        block_size = self.config.block_size
        cache = self.new_cache()
        step = step or self.decode_step
        window_start, prime = 0, True
        idx_next = None   # the token sampled last
        for _ in range(max_new_tokens):
            # window full: start again at position 0 from its recent half (nanoGPT
            # crops every step, but a cache would then refill at every step)
            if idx.size(1) - window_start > block_size:
                window_start = idx.size(1) - max(1, block_size // 2)
                prime = True
            if prime:
                cache.reset()   # same buffers, positions from 0
                logits, _ = self(idx[:, window_start:], cache=cache)
                prime = False
            else:
                logits = step(idx_next, cache)
            idx_next = sample_next(logits[:, -1, :], temperature, top_k, generator)
            idx = torch.cat((idx, idx_next), dim=1)
        self.train(was_training)
        return idx


class KVCache:
    """The KV cache of incremental decoding. The cache interface, what the model
    calls on a cache (also the static ones of tools/fast_sample.py and
    tools/executorch/export.py):
      length: the tokens already cached
      positions(T, device): the positions of the T new tokens
      attend(slot, q, k, v): store k, v at the new positions, return the
          attention of q over every cached key up to them
      advance(T): after the forward, the T new tokens are cached
      reset(): start a new sequence at position 0, keeping the buffers
    Each slot (ForwardContext) has its own keys and values. Deep Thinking uses
    `store`, `kv` and `memory` itself; the static caches refuse it.
    """

    def __init__(self, max_len):
        self.max_len = max_len
        self.length = 0
        self.kv = {}          # slot -> (keys, values), each (B, H_kv, max_len, D)
        self.memory = {}      # Deep Thinking: slot -> its memory, as kv

    def positions(self, length, device):
        return torch.arange(self.length, self.length + length, device=device)

    def store(self, table, slot, k, v):
        """Write k, v at positions length.. of table[slot]; return its keys
        and values up to them."""
        if slot not in table:
            shape = (k.size(0), k.size(1), self.max_len, k.size(3))
            table[slot] = (k.new_zeros(shape), v.new_zeros(shape))
        keys, values = table[slot]
        end = self.length + k.size(2)
        keys[:, :, self.length:end] = k
        values[:, :, self.length:end] = v
        return keys[:, :, :end], values[:, :, :end]

    def advance(self, n):
        self.length += n

    def reset(self):
        self.length = 0


def sample_next(logits, temperature=1.0, top_k=None, generator=None):
    """The next token from last-position logits (B, V): greedy at temperature
    0, else top-k sampling."""
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True)
    logits = logits.float() / temperature
    if top_k is not None and top_k < logits.size(-1):
        kth = torch.topk(logits, top_k).values[:, [-1]]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = F.softmax(logits, dim=-1)
    return torch.multinomial(probs, num_samples=1, generator=generator)
