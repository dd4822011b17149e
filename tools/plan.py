"""
A model's plan, read from the built model: one row per layer application and branch (the weights it uses, attention
or MLP-only, its MLP, its width, the shrink layer after it, the residual form, its KV cache), then the totals; and
the same plan as a picture.

    python -m tools.plan --variant=lgpt                          # a preset, variants/lgpt.py
    python -m tools.plan config/lgpt_shakespeare_cpu.py          # the model a train.py config file trains
    python -m tools.plan --n_layer=8 --n_attn_layers=2           # GPTConfig flags (on top of --variant, if given)
    python -m tools.plan --out_dir=out                           # the model a train.py checkpoint describes
    python -m tools.plan --variant=pgpt --png=pgpt.png           # ... and its picture
    python -m tools.plan --gallery=docs/architectures            # every preset's picture (docs/architectures.md)

A flag that changes no plan (tools/support.py's NO_EFFECT: dropout, init_scheme, init_std, norm_eps, rope_base) is
refused in one line, and --help leaves it out.

The model is built on the meta device (shapes only: no memory, and initialising it writes nothing), so a 600M
preset takes seconds (the whole command: 4.9 s for mobilellm_600m on a 2-core CPU, most of it importing torch).
Everything is read from the built modules and the layers each DecoderStack applies (tools/layers.py), never from a
second description of the architectures:
  weight sets  attn a, mlp m: the index of the attention / FFN module that application uses; applications with the
               same index use the same weights (layer sharing)
  KV cache     per token and attention application: keys and values, 2 x n_kv_head x head_dim x 4 bytes (float32);
               Deep Thinking keeps keys/values and a memory for each of its T thinking passes (2T; the test pass
               reads the memory only), as the model's KVCache allocates them
  FLOPs        forward, per token, at the full context T (block_size): 2 per matmul weight applied (every
               application, branch and pass; the embedding projection and the head) plus 4 x width x keys per
               attention application (QK^T and AV over `keys` positions: T, or 2T in the Deep Thinking passes that
               attend over [memory; keys]); training costs 3x the forward (nanoGPT's and PaLM's convention)
"""

import dataclasses
import functools
import os
from typing import Optional

import torch
import torch.nn as nn

from model import GPTConfig
from tools.benchmarks.entries import config_file_model
from tools.flops import matmul_params
from tools.layers import layer_sets
from tools.support import no_effect_reason, refuse_undeclared
import variants
from safety_net.build import build_model, check_mlp_ratio_applies, check_model_keys_read, gpt_config_defaults
from safety_net.build import load_variant
from safety_net.build import model_args as checkpoint_model_args
from safety_net.checkpoint import load_checkpoint
from safety_net.configurator import UserError, run_command
from safety_net.fileio import atomic_open, check_out_dir, check_out_file, check_own_file, holds_marker, unused_name

MODEL_FIELDS = gpt_config_defaults()
DEFAULTS = dict(
    config="",       # the positional argument: a train.py config file, the model it trains (as tools.bench reads it)
    variant="",      # a variants/<name>.py preset; GPTConfig flags given on the command line win over it
    out_dir="",      # a train.py checkpoint (its folder or file): its model, instead of a preset and flags
    png="",          # also draw the plan into this .png file
    gallery="",      # draw every preset into this folder (<name>.png) and print nothing else
    **MODEL_FIELDS,
)
PNG_MARK = "tools.plan"   # the Software text of every picture drawn here (check_png_path)


# --- the plan, read from the model ----------------------------------------------------------------------------

@dataclasses.dataclass
class Application:
    """One layer application in one branch."""
    branch: int
    layer: int
    attn_set: Optional[int]   # index of the attention weights it uses (None: MLP-only)
    mlp_set: int              # index of the FFN weights it uses
    n_head: int               # 0 when MLP-only
    n_kv_head: int
    mlp: str                  # "SwiGLU", "GELU", "gated GELU", ...
    hidden: int
    width_in: int
    width_out: int            # after the shrink layer, if any
    shrink: str               # "" or "linear" / "conv k=3"
    residual: str             # e.g. "pre-LayerNorm", "post-LayerNorm, enhanced"
    kv_bytes: int             # KV cache bytes per token for this application, all Deep Thinking passes together
    weights: int              # matmul weights applied per token and pass: attention + FFN + shrink layer


@dataclasses.dataclass
class Plan:
    name: str
    config: GPTConfig
    rows: list                # [Application] in branch, layer order
    params: dict              # unique parameters by part: embedding, positions, attention, FFN, shrink, head, ...
    embedding: str            # one-line descriptions
    head: str
    embed_dim: int            # width of the token embedding table (< the model's width when factorized)
    embed_weights: int        # matmul weights applied per token by the embedding (its factorized projection)
    head_weights: int         # ... and by the head
    passes: int               # forward passes over the layers: think_steps + 1
    conv_state_bytes: int     # cgpt with kernel k > 1: the last k-1 inputs per shrink layer, per sequence

    @property
    def unique_params(self):
        return sum(self.params.values())

    @property
    def weights_per_token(self):
        return self.passes * sum(r.weights for r in self.rows) + self.embed_weights + self.head_weights

    @property
    def kv_bytes_per_token(self):
        return sum(r.kv_bytes for r in self.rows)

    def attention_flops(self):
        """Forward attention FLOPs per token at context T: QK^T and AV, 2 x width x keys each, per application and
        pass; the Deep Thinking passes between the first and the test pass attend over [memory; keys] (2T keys)."""
        T, steps = self.config.block_size, self.passes - 1
        keys = sum(2 * T if 0 < p < steps else T for p in range(steps + 1))
        return sum(4 * r.width_in * keys for r in self.rows if r.n_head)

    def flops_per_token(self):
        return 2 * self.weights_per_token + self.attention_flops()


def residual_form(sub):
    form = f"{'post' if sub.post_norm else 'pre'}-{type(sub.norm).__name__}"
    return form + (", enhanced" if sub.alpha_logit is not None else "")


def mlp_name(config, mlp):
    act = config.activation.replace("gelu_tanh", "GELU (tanh)").replace("gelu", "GELU").replace("silu", "SiLU")
    act = act.replace("relu", "ReLU")
    if not mlp.gated:
        return act
    return "SwiGLU" if config.activation == "silu" else f"gated {act}"


def shrink_layer(module):
    """('linear' | 'conv k=K', width out) of a shrink module, read from its Linear or Conv1d."""
    for m in module.modules():
        if isinstance(m, nn.Linear):
            return "linear", m.out_features
        if isinstance(m, nn.Conv1d):
            return f"conv k={m.kernel_size[0]}", m.out_channels
    raise ValueError(f"no Linear or Conv1d in the shrink layer {module}")


def read_applications(model):
    cfg = model.config
    steps = cfg.think_steps
    rows = []
    for b, stack in enumerate(model.branches):
        for layer, (a, m, s) in enumerate(layer_sets(stack)):
            ffn = stack.mlp[m]
            width = ffn.inner.up.in_features
            weights = matmul_params(ffn)
            n_head = n_kv_head = kv_bytes = 0
            if a is not None:
                attn = stack.attn[a].inner
                n_head, n_kv_head = attn.n_head, attn.n_kv_head
                weights += matmul_params(stack.attn[a])
                # keys and values of this application; Deep Thinking: and a memory, for each thinking pass
                per_pass = 2 * n_kv_head * attn.head_dim * attn.qkv_proj.weight.element_size()
                kv_bytes = per_pass * (2 * steps if steps else 1)
            shrink, width_out = "", width
            if s is not None:
                module = stack.shrink[s]
                shrink, width_out = shrink_layer(module)
                weights += matmul_params(module)
            rows.append(Application(b, layer, a, m, n_head, n_kv_head, mlp_name(cfg, ffn.inner),
                                    ffn.inner.up.out_features, width, width_out, shrink, residual_form(ffn), kv_bytes,
                                    weights))
    return rows


PARTS = {"tok_emb": "embedding", "pos_emb": "positions", "attn": "attention", "mlp": "FFN", "shrink": "shrink",
         "branch_logits": "branch mixing", "ln_f": "final norm", "lm_head": "head", "tied_head_bias": "head"}


def param_parts(model):
    """Unique parameters (shared weights once) by part of the model, from the parameter names."""
    parts = {}
    for name, p in model.named_parameters():
        keys = name.split(".")
        part = PARTS.get(keys[2] if keys[0] == "branches" else keys[0], "other")
        parts[part] = parts.get(part, 0) + p.numel()
    return parts


def read_plan(model, name):
    refuse_undeclared(model.config, "plan")
    cfg = model.config
    emb = model.tok_emb
    V, W = emb.wte.num_embeddings, cfg.embd_width()
    if emb.proj is None:
        embedding, embed_weights = f"token embedding {V} x {W}", 0
    else:
        E = emb.wte.embedding_dim
        embedding, embed_weights = f"factorized: {V} x {E}, then a projection {E} -> {W}", emb.proj.weight.numel()
    embedding += {"learned": f" + learned positions {cfg.block_size} x {W}", "sinusoidal": " + sinusoidal positions",
                  "rope": " (RoPE positions inside attention)", "none": " (no positions)"}[cfg.pos_embedding]
    if not cfg.tie_embeddings:
        head_weights = model.lm_head.weight.numel()
        head = f"own weights: {model.lm_head.in_features} -> {model.lm_head.out_features}"
    else:
        head_weights = emb.wte.weight.numel() + (0 if emb.proj is None else emb.proj.weight.numel())
        head = f"tied to the token embedding: {cfg.final_width()} -> {V}" + \
            (" (back through the projection, then the embedding)" if emb.proj is not None else "")
    head += " + bias" if cfg.head_bias else ""
    convs = [m for m in model.branches.modules() if isinstance(m, nn.Conv1d)]
    conv_state = sum((m.kernel_size[0] - 1) * m.in_channels * m.weight.element_size() for m in convs)
    return Plan(name, cfg, read_applications(model), param_parts(model), embedding, head, emb.wte.embedding_dim,
                embed_weights, head_weights, cfg.think_steps + 1, conv_state)


# --- which model ------------------------------------------------------------------------------------------------

def model_args(cfg, explicit):
    """(name, GPTConfig keyword arguments, checkpoint path or None): a checkpoint's own, or GPTConfig defaults <-
    variant <- explicit flags (train.py's rule: build.model_args)."""
    flags = {k: cfg[k] for k in MODEL_FIELDS if k in explicit}
    unread = [k for k in flags if no_effect_reason(k, "plan")]   # tools/support.py's NO_EFFECT
    if unread:   # accepted, and named in the header as if the plan were another's (an exploration as a new user)
        raise UserError(f"--{unread[0]} changes nothing in the plan: {no_effect_reason(unread[0], 'plan')} "
                        f"(fix: drop --{unread[0]})")
    with_flags = ""
    if flags:
        with_flags = " with " + ", ".join(f"{k}={v!r}" for k, v in flags.items())
    if cfg["config"]:
        if cfg["out_dir"] or cfg["variant"]:
            raise UserError(f"{cfg['config']} names its model, so it takes no --out_dir or --variant (fix: drop them, "
                            f"or drop the config file)")
        args, _ = config_file_model(cfg["config"])
        check_mlp_ratio_applies(args, flags)
        args.update(flags)   # the command line's flags win, as train.py's
        check_model_keys_read(args, flags)
        return cfg["config"] + with_flags, args, None
    if cfg["out_dir"]:
        if cfg["variant"] or flags:
            raise UserError("--out_dir shows the model its checkpoint describes, so it takes no --variant or model "
                            "flags (fix: drop them, or drop --out_dir)")
        ckpt = load_checkpoint(cfg["out_dir"], mmap=True)   # safe loader; mmap: the weights are never read
        return ckpt["path"], ckpt["model_args"], ckpt["path"]
    name = (cfg["variant"] or "GPTConfig") + with_flags
    return name, checkpoint_model_args(cfg, explicit), None


def build_meta(args, source=None):
    """GPT(GPTConfig(**args)) on the meta device (shapes only, no memory), with build.build_model's one-line
    errors (source: the checkpoint the arguments come from)."""
    with torch.device("meta"):
        return build_model(args, "meta", source)


def plan_of(args, name, source=None):
    return read_plan(build_meta(args, source), name)


# --- the plan as text -------------------------------------------------------------------------------------------

def format_plan(plan):
    cfg = plan.config
    lines = [f"{plan.name}: {cfg.layers_per_branch()} layer applications x {cfg.n_branches} branch"
             f"{'es' if cfg.n_branches > 1 else ''}, context {cfg.block_size}, vocabulary {cfg.vocab_size}", ""]
    head = f"{'branch':>6} {'layer':>5} {'attn':>4} {'mlp':>4}  {'attention':<16} {'MLP':<16} {'width':>11}  " \
           f"{'shrink after':<20} {'residual':<24} {'KV B/token':>10}"
    lines += [head, "-" * len(head)]
    for r in plan.rows:
        attn = f"{r.n_head} heads, {r.n_kv_head} kv" if r.n_head else "MLP-only"
        shrink = f"{r.shrink} {r.width_in}->{r.width_out}" if r.shrink else "-"
        lines.append(f"{r.branch:>6} {r.layer:>5} {'-' if r.attn_set is None else r.attn_set:>4} {r.mlp_set:>4}  "
                     f"{attn:<16} {r.mlp + ' ' + str(r.hidden):<16} {f'{r.width_in}->{r.width_out}':>11}  "
                     f"{shrink:<20} {r.residual:<24} {r.kv_bytes:>10,}")
    p, T, kv = plan.params, cfg.block_size, plan.kv_bytes_per_token
    parts = ", ".join(f"{k} {v:,}" for k, v in p.items() if v)
    every = " and ".join(["branch"] * (cfg.n_branches > 1) + ["pass"] * (plan.passes > 1))
    every = f" in every {every}" if every else ""
    conv = f"; plus {plan.conv_state_bytes:,} bytes of ConvShrink inputs per sequence" if plan.conv_state_bytes else ""
    if plan.passes > 1:
        conv += f"; Deep Thinking: keys/values and a memory for each of the {plan.passes - 1} thinking passes"
    flops = plan.flops_per_token()
    totals = [
        ("embedding", plan.embedding),
        ("head", plan.head),
        ("parameters", f"{plan.unique_params:,} unique ({parts}); get_num_params() = "
                       f"{plan.unique_params - p.get('positions', 0):,} (without learned positions)"),
        ("weights applied", f"{plan.weights_per_token:,} per token: the matmul weights of every application{every}, "
                            f"the embedding projection and the head"),
        ("KV cache", f"{kv:,} bytes per token (float32, batch 1); {kv * T:,} bytes ({kv * T / 2**20:,.1f} MiB) at "
                     f"the full context of {T} tokens{conv}"),
        ("FLOPs per token", f"forward {flops:,} at context {T} (matmuls {2 * plan.weights_per_token:,} + attention "
                            f"{plan.attention_flops():,}); training 3x: {3 * flops:,}"),
        ("Deep Thinking", f"{plan.passes} passes over the layers: {plan.passes - 1} thinking + the test pass"
                          if plan.passes > 1 else "off (1 pass)")]
    if cfg.n_branches > 1:
        totals.append(("branch mixing", f"sum_i w_i * branch_i(chunk i of the embedding), w = softmax of "
                                        f"{cfg.n_branches} learned logits"))
    lines += [""] + [f"{label:<16} {text}" for label, text in totals]
    return "\n".join(lines)


# --- the plan as a picture ---------------------------------------------------------------------------------------

GREY_ATTN, GREY_MLP = "#d3e1ef", "#b5b8bc"     # weights used by one application only
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22")
EMBED, HEAD_OWN, MIX, TIE, LOOP, ENHANCED = "#8fd19e", "#f4a582", "#ffe680", "#2e7d32", "#c62828", "#e6550d"
SHRINK = {"linear": ("#6a51a3", None), "conv": ("#1b9e77", "||||")}   # (fill, hatch) of lgpt's and cgpt's


def tint(color, amount):
    """color mixed with white (amount 0 = color, 1 = white)."""
    from matplotlib.colors import to_rgb
    return tuple(c + (1 - c) * amount for c in to_rgb(color))


def set_colors(plan):
    """{(branch, 'attn' | 'mlp', set): colour}: grey for weights one application uses, else one colour per shared set;
    an attention set and an FFN set used by the same applications (a whole block shared) get the same colour."""
    uses = {}
    for r in plan.rows:
        if r.attn_set is not None:
            uses.setdefault((r.branch, "attn", r.attn_set), []).append(r.layer)
        uses.setdefault((r.branch, "mlp", r.mlp_set), []).append(r.layer)
    colors, by_layers = {}, {}
    for key, layers in uses.items():
        if len(layers) == 1:
            colors[key] = GREY_ATTN if key[1] == "attn" else GREY_MLP
        else:
            group = (key[0], tuple(layers))
            by_layers.setdefault(group, PALETTE[len(by_layers) % len(PALETTE)])
            colors[key] = by_layers[group]
    return colors


def si(x):
    """1234567 -> '1.23M'."""
    for div, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if x >= div:
            return f"{x / div:.3g}{unit}"
    return f"{x:g}"


def runs(rows):
    """Consecutive applications that look alike (attention, MLP, width, residual): [(first, last), ...]."""
    key = [(r.n_head, r.n_kv_head, r.mlp, r.hidden, r.width_in, r.residual) for r in rows]
    out = []
    for i in range(len(rows)):
        if out and key[i] == key[out[-1][1]] and not rows[i - 1].shrink:
            out[-1] = (out[-1][0], i)
        else:
            out.append((i, i))
    return out


def draw(plan, path, dpi=100):
    """The plan as a picture, bottom to top: the embedding, one column per branch with one box per application (width
    to scale; lower half attention, upper half MLP), the shrink layers between boxes, pgpt's mixing, the head."""
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import FancyArrowPatch, Patch, Polygon, Rectangle

    cfg, rows = plan.config, plan.rows
    U, nb, W, F = cfg.n_embd, cfg.n_branches, cfg.embd_width(), cfg.final_width()
    gap = 0.3 * U
    span = nb * U + (nb - 1) * gap
    X0 = span / 2
    colors = set_colors(plan)
    enhanced = any("enhanced" in r.residual for r in rows)
    n_layers = cfg.layers_per_branch()
    n_shrink = sum(1 for r in rows if r.shrink and r.branch == 0)
    units = n_layers * 1.3 + n_shrink * 0.8 + 6.5
    unit_in = min(0.42, max(0.13, 10.0 / units))
    fig_h = units * unit_in + 0.9
    fig = Figure(figsize=(9.5, fig_h))
    ax = fig.add_axes((0.0, 0.0, 0.68, 1 - 0.8 / fig_h))
    ax.set_axis_off()
    fs = max(5.5, min(8.5, unit_in * 72 * 0.45))   # a font that fits a box one unit high
    x_text = span + 0.05 * U                        # labels right of the columns

    def rect(x, y, w, h, **kw):
        ax.add_patch(Rectangle((x, y), w, h, ec=kw.pop("ec", "black"), lw=kw.pop("lw", 0.6), **kw))

    def text(x, y, s, **kw):
        ax.text(x, y, s, fontsize=kw.pop("fontsize", fs), va="center", **kw)

    def line(xs, ys, **kw):
        ax.add_line(Line2D(xs, ys, color=kw.pop("color", "black"), lw=kw.pop("lw", 0.8), **kw))

    # the embedding (bottom)
    pos = {"learned": " + learned positions", "sinusoidal": " + sinusoidal positions", "rope": " (RoPE in attention)",
           "none": " (no positions)"}[cfg.pos_embedding]
    E = plan.embed_dim
    rect(X0 - E / 2, 0, E, 1, fc=EMBED)
    big = max(fs, 7.5)   # the embedding's and the head's labels stay readable beside 60 thin boxes
    text(x_text, 0.5, f"token embedding {cfg.vocab_size} x {E}" + (" (factorized)" if E != W else "") + pos,
         fontsize=big)
    y = 1.0
    if E != W:   # factorized: the projection widens the narrow table to the model's width
        ax.add_patch(Polygon([(X0 - E / 2, y), (X0 + E / 2, y), (X0 + W / 2, y + 0.8), (X0 - W / 2, y + 0.8)],
                             fc=tint(EMBED, 0.4), ec="black", lw=0.6))
        text(x_text, y + 0.4, f"projection {E} -> {W}", fontsize=big)
        y += 0.8
    embed_top = y
    y += 0.7 if nb > 1 else 0.35
    if nb > 1:
        text(X0, y - 0.35, f"split into {nb} chunks of {U}", ha="center", style="italic")
    stack_bottom = y

    # one column per branch, one box per application
    col_x = [b * (U + gap) + U / 2 for b in range(nb)]
    tops = []
    for b, cx in enumerate(col_x):
        line([X0 if nb == 1 else cx, cx], [embed_top, stack_bottom], zorder=0)
        branch = [r for r in rows if r.branch == b]
        ys = []
        yy = stack_bottom
        for r in branch:
            ys.append(yy)
            x = cx - r.width_in / 2
            if r.attn_set is None:   # MLP-only: an empty, hatched place where the attention would be
                rect(x, yy, r.width_in, 0.42, fc="white", ec="#888888", ls="--", hatch="////")
            else:
                c = colors[(b, "attn", r.attn_set)]
                rect(x, yy, r.width_in, 0.42, fc=c if c == GREY_ATTN else tint(c, 0.45))
            rect(x, yy + 0.42, r.width_in, 0.58, fc=colors[(b, "mlp", r.mlp_set)])
            if b == 0:   # which weights: the set ids left of the first column
                ids = f"m{r.mlp_set}" if r.attn_set is None else \
                    (f"#{r.mlp_set}" if r.attn_set == r.mlp_set else f"a{r.attn_set} m{r.mlp_set}")
                text(cx - U / 2 - 0.03 * U, yy + 0.5, ids, ha="right", fontsize=fs * 0.85, color="#444444")
            yy += 1
            if r.shrink:
                kind = r.shrink.split()[0]
                ax.add_patch(Polygon([(cx - r.width_in / 2, yy + 0.1), (cx + r.width_in / 2, yy + 0.1),
                                      (cx + r.width_out / 2, yy + 0.7), (cx - r.width_out / 2, yy + 0.7)],
                                     fc=SHRINK[kind][0], hatch=SHRINK[kind][1], ec="black", lw=0.6))
                if b == nb - 1:
                    what = "Linear" if kind == "linear" else \
                        f"Conv1d over the sequence, kernel {r.shrink.split('=')[1]}"
                    text(x_text, yy + 0.4, f"{what}: {r.width_in} -> {r.width_out}", color=SHRINK[kind][0],
                         weight="bold")
                yy += 0.8
            else:
                yy += 0.3
        line([cx, cx], [stack_bottom, yy], zorder=-1, **(dict(color=ENHANCED, lw=2.5) if enhanced else {}))
        tops.append(yy)
        if b == nb - 1:   # what the applications are, one label per run of alike ones, right of the last column
            for first, last in runs(branch):
                r = branch[first]
                lo, hi = ys[first] + 0.05, ys[last] + 0.95
                line([x_text, x_text], [lo, hi], color="#666666")
                layers = (f"L{first}" if first == last else f"L{first}-L{last}") + " (each branch)" * (nb > 1)
                attn = f"attention {r.n_head} heads, {r.n_kv_head} kv" if r.n_head else "MLP-only (no attention)"
                size = 8 if (hi - lo) * unit_in * 72 > 24 else fs * 0.9   # a tall run has room for a larger font
                text(x_text + 0.04 * U, (lo + hi) / 2, f"{layers}: {attn}\n{r.mlp} {r.hidden}, width {r.width_in}, "
                     f"{r.residual}", fontsize=size, linespacing=1.1)
    stack_top = y = max(tops)

    if nb > 1:   # pgpt: the branches' outputs mixed by learned weights
        y += 0.4
        for cx, top in zip(col_x, tops):
            line([cx, cx], [top, y], zorder=0)
        rect(-0.2 * U, y, span + 0.4 * U, 0.9, fc=MIX)
        ws = " + ".join(f"w{i}·branch{i}" for i in range(nb))
        text(X0, y + 0.45, f"mix: {ws},  w = softmax(learned)", ha="center")
        y += 0.9
    # the final norm and the head (top)
    line([X0, X0], [y, y + 0.35], zorder=0)
    y += 0.35
    if cfg.norm_placement == "pre":
        rect(X0 - F / 2, y, F, 0.3, fc="#eeeeee")
        text(x_text, y + 0.15, "final norm", fontsize=fs * 0.9)
        y += 0.45
    tied = cfg.tie_embeddings
    rect(X0 - F / 2, y, F, 1, fc=EMBED if tied else HEAD_OWN, hatch=".." if tied else None)
    head = f"head {F} -> {cfg.vocab_size} logits: " + ("tied to the embedding" if tied else "own weights")
    text(x_text, y + 0.5, head + (" + bias" if cfg.head_bias else ""), fontsize=big)
    if tied:   # a dashed line from the head down to the embedding whose weights it reuses
        x_tie = -0.3 * U
        line([X0 - F / 2, x_tie, x_tie, X0 - E / 2], [y + 0.5, y + 0.5, 0.5, 0.5], color=TIE, lw=1.3, ls="--")
        text(x_tie - 0.04 * U, y + 0.5, "same\nweights", ha="right", color=TIE, fontsize=fs * 0.9)
    y += 1

    if plan.passes > 1:   # Deep Thinking: the stack applied again, T thinking passes and the test pass
        x_loop, left = -0.6 * U, col_x[0] - U / 2
        line([left, x_loop, x_loop], [stack_top - 0.15, stack_top - 0.15, stack_bottom + 0.15], color=LOOP, lw=2.2)
        ax.add_patch(FancyArrowPatch((x_loop, stack_bottom + 0.15), (left, stack_bottom + 0.15), arrowstyle="-|>",
                                     mutation_scale=16, color=LOOP, lw=2.2))
        text(x_loop - 0.05 * U, (stack_top + stack_bottom) / 2, f"x {plan.passes}\nT = {plan.passes - 1}\nthinking\n"
             f"passes,\nthen the\ntest pass", ha="right", color=LOOP, fontsize=9, weight="bold")

    ax.set_xlim(-1.25 * U if plan.passes > 1 else -0.75 * U, span + 2.1 * U)
    ax.set_ylim(-0.2, y + 0.2)
    fig.suptitle(f"{plan.name}: {n_layers} layer applications{f' x {nb} branches' if nb > 1 else ''}, "
                 f"{si(plan.unique_params)} unique parameters, {si(plan.weights_per_token)} weights applied per token\n"
                 f"KV cache {plan.kv_bytes_per_token:,} B/token · {si(plan.flops_per_token())} FLOPs/token "
                 f"(forward, context {cfg.block_size})", fontsize=10, y=1 - 0.1 / fig_h)

    # the legend: the marks this picture uses
    handles = [Patch(fc=GREY_ATTN, ec="black", label="attention (lower half of a box)"),
               Patch(fc=GREY_MLP, ec="black", label="MLP (upper half)"),
               Patch(fc="none", ec="none", label="grey: weights that only this\napplication uses")]
    shared = [c for c in PALETTE if c in colors.values()]
    if shared:
        handles.append(Patch(fc=shared[0], ec="black", label="colour: one weight set, applied\nseveral times "
                             "(same colour = same\nweights; left: the set id #n, or the\nattention a / MLP m set)"))
    if any(r.attn_set is None for r in rows):
        handles.append(Patch(fc="white", ec="#888888", ls="--", hatch="////", label="MLP-only block: no attention"))
    if any(r.shrink for r in rows):
        for kind, what in (("linear", "Linear"), ("conv", "Conv1d")):
            if any(r.shrink.startswith(kind) for r in rows):
                handles.append(Patch(fc=SHRINK[kind][0], hatch=SHRINK[kind][1], ec="black",
                                     label=f"shrink layer ({what}): halves the width"))
    handles.append(Patch(fc=EMBED, ec="black", label="token embedding" + (" (factorized)" if E != W else "")))
    handles.append(Patch(fc=EMBED, ec="black", hatch="..", label="head tied to the embedding") if tied else
                   Patch(fc=HEAD_OWN, ec="black", label="head with its own weights"))
    if nb > 1:
        handles.append(Patch(fc=MIX, ec="black", label="branch mixing (learned weights)"))
    if plan.passes > 1:
        handles.append(Line2D([], [], color=LOOP, lw=2.2, label="Deep Thinking: the stack looped"))
    handles.append(Line2D([], [], color="black", lw=0.8, label="residual stream\nbox width = layer width"))
    if enhanced:
        handles.append(Line2D([], [], color=ENHANCED, lw=2.5, label="enhanced residual at every sub-layer:\n"
                              "alpha x + (1 - alpha) F(x), alpha learned"))
    legend_ax = fig.add_axes((0.69, 0.0, 0.31, 1 - 0.8 / fig_h))
    legend_ax.set_axis_off()
    legend_ax.legend(handles=handles, loc="upper left", fontsize=8, frameon=False)
    save_png(fig, path, dpi)


def save_png(fig, path, dpi):
    """The figure as a PNG of 64 colours: flat boxes need no more, and the gallery's files stay small (a third)."""
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from PIL import Image
    from PIL.PngImagePlugin import PngInfo
    fig.set_dpi(dpi)
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    image = Image.fromarray(np.asarray(canvas.buffer_rgba())).convert("RGB").quantize(colors=64)
    info = PngInfo()
    info.add_text("Software", PNG_MARK)   # near the file's start: --png replaces only a picture of ours
    with atomic_open(path) as f:   # whatever the path turns out to be: one line, and no half-written file
        image.save(f, format="PNG", optimize=True, pnginfo=info)


# --- the command --------------------------------------------------------------------------------------------------

def check_png_path(path):
    if not path.lower().endswith(".png") or os.path.isdir(path):
        raise UserError(f"--png={path}: the picture is a PNG file (fix: --png=FILE.png)")
    folder = os.path.dirname(os.path.abspath(path))
    check_out_dir(folder, key="png")   # a file on the way, or not writable
    if not os.path.isdir(folder):
        raise UserError(f"--png={path}: the folder {folder} does not exist (fix: create it, or write elsewhere)")
    check_out_file(path, unused_name(os.path.splitext(path)[0], ".png"), marker=PNG_MARK, key="png")


def gallery(folder):
    """Every preset's picture into folder/<name>.png (the gallery of docs/architectures.md)."""
    check_out_dir(folder, key="gallery")
    paths = {name: os.path.join(folder, f"{name}.png") for name in variants.available()}
    for path in paths.values():   # another program's file there: refused before any is drawn (a review)
        check_own_file(path, functools.partial(holds_marker, marker=PNG_MARK), unused_name(folder), key="gallery")
    os.makedirs(folder, exist_ok=True)
    for name, path in paths.items():
        draw(plan_of({**MODEL_FIELDS, **load_variant(name)}, name), path)
        print(f"wrote {path} ({os.path.getsize(path) / 1024:.0f} KB)")


def run(cfg, explicit):
    if cfg["gallery"]:
        others = sorted(k for k in explicit if k != "gallery")
        if others:
            raise UserError(f"--gallery draws every preset, so it takes no {', '.join('--' + k for k in others)} "
                            f"(fix: drop them, or use --png for one model)")
        return gallery(cfg["gallery"])
    if cfg["png"]:
        check_png_path(cfg["png"])
    name, args, source = model_args(cfg, explicit)
    plan = plan_of(args, name, source)
    print(format_plan(plan))
    if cfg["png"]:
        draw(plan, cfg["png"])
        print(f"\nwrote {cfg['png']}")


def main(argv=None):
    listed = [key for key in DEFAULTS if not no_effect_reason(key, "plan")]   # --help: the keys read
    return run_command(run, DEFAULTS, argv, positional="config", listed=listed, with_explicit=True)


if __name__ == "__main__":
    main()
