"""
Parameter inheritance (paper 003, PanGu-pi Pro, 3.2): start a small model from the most important
layers and neurons of a trained larger one instead of from random numbers.

    python -m tools.pangu.inherit --init_from=out-big --out_dir=out-small --n_layer=3 --n_embd=64
    python -m tools.pangu.inherit --init_from=out-big --out_dir=out-small --n_layer=3 --layers=loss --neurons=taylor --calib_batches=16
    python -m tools.pangu.inherit --init_from=out-big --out_dir=out-small --n_layer=3 --neurons=learned --mask_steps=200
    python -m tools.pangu.inherit --init_from=out-gpt2 --out_dir=out-small --n_layer=3 --target_data_dir=data/shakespeare_v4096
    python -m tools.pangu.inherit --init_from=out-big --out_dir=out-small --n_kv_head=2        # MHA -> GQA (Appendix A)
    python train.py config/pangu_char_cpu.py --init_from=out-small/ckpt.pt   # then train the small model

(train.py builds the model from the inherited checkpoint's model_args, and a shape key set on the command line
or in the config file overrides it: set none, or the same values (config/pangu_char_cpu.py sets those of the
first command, cutting config/pangu_big_cpu.py's model). A shape that differs is refused in one line;
--allow_partial_init=True then copies the tensors whose names and shapes match and starts the others from random
numbers, and none matching is refused still.)

Two steps, as in the paper: "we firstly select important layers and then recognize critical neurons in
the selected layers".

1. Important layers selection, --layers (K = --n_layer of the L source layers):
   first_last  keep a prefix of ceil(K/2) and a suffix of floor(K/2) layers, i.e. drop one contiguous block of
               L-K layers from the middle (6 -> 3: [0, 1, 5]; 32 -> 21: 0..10 and 22..31). The paper (Fig. 5,
               3.2) finds that skipping "the initial two to three layers" or the deep layers hurts most, while
               for the intermediate layers "redundancy occurs within these layers. These layers are tend to be
               removed when inheriting parameters"; its final models inherit "after removing intermediate
               redundant layers" (5). How many kept layers go to the prefix and how many to the suffix it does
               not say. Ours: half each, the prefix getting the odd one (the paper stresses the first layers).
   spread      keep round(linspace(0, L-1, K)): first and last layer, the others dropped evenly over the depth
               (this repository's earlier rule; kept to reproduce the README's measurements).
   loss        Delta_l = loss(model with layer l skipped) - loss(model) on calibration batches (a skipped
               layer is the identity); the K layers with the largest Delta_l are kept, in their original order.

2. Intra-layer parameters selection, --neurons: every structure s gets a score, the top ones are kept
   l1      I(s) = sum_{w in s} |w|
   l2      I(s) = ||s||_2 = sqrt(sum_{w in s} w^2)       (ranked by sum w^2: same order)
   taylor  I(s) = sum_{batches} sum_{w in s} |w * dL/dw|   first-order Taylor estimate of the loss change
   learned learnable masks (the paper's final choice, 3.2: "binary masks, which are automatically learned
           during the training process", citing Xia et al. 2023 and Tang et al. 2020; it gives no formulation).
           Ours, after Xia et al. (Sheared LLaMA): one hard-concrete gate z_s in [0, 1] per structure that has to
           shrink (Louizos et al. 2018: z = clamp(sigmoid((log u - log(1-u) + log_alpha_s) / beta) * (zeta - gamma)
           + gamma, 0, 1), u ~ U(0, 1), beta = 2/3, gamma = -0.1, zeta = 1.1), multiplied into the frozen model:
           residual channels where a norm reads the stream, FFN neurons before `down`, heads before `out_proj`.
           --mask_steps Adam steps (lr 0.1) on the calibration batches minimise
               task loss + 10 * sum_{kind, layer} (mean_s P(z_s != 0) - target)^2,
           the target falling linearly from 1 to the kept fraction (e.g. n_embd_small / n_embd) over the first
           half of the steps. I(s) = P(z_s != 0) = sigmoid(log_alpha_s - beta * log(-gamma / zeta)).
           (Xia et al. use Lagrange multipliers instead of the fixed quadratic penalty.)
   Structures (the small model's sizes say how many are kept):
     FFN neuron j (per layer)     row j of up (and gate) and their biases, column j of down -> mlp_hidden
     query head h (per layer)     its head_dim rows of q in qkv_proj, its head_dim columns of out_proj
     key/value group (per layer)  its k and v rows of qkv_proj plus its query heads -> n_kv_head groups, then
                                  the best n_head/n_kv_head query heads inside each kept group (GQA stays exact)
     residual channel c (global)  entry c of everything that reads or writes the residual stream: token and
                                  position embeddings, every norm, qkv/up/gate columns, out_proj/down rows and
                                  biases, ln_f, lm_head -> n_embd, the same channel subset everywhere
   Heads are kept whole, so the head size n_embd/n_head stays the source's.

3. MHA -> GQA (paper 003 Appendix A, Table 10: "mean-pooling (Ainslie et al., 2023) the KV heads in each
   group"): when the small model has more query heads per kv head than the source, step 2 keeps
   n_head / (source group size) kv heads, and then every m = (small group) / (source group) consecutive kept
   kv heads are averaged into one (the rows of k and v in qkv_proj and their biases), as Ainslie et al. pool
   neighbouring heads. MHA is the case of source groups of one head.

4. A compact vocabulary. PanGu-pi-1B Pro (48k tokenizer, 2.1 and 5) inherits from PanGu-pi-7B (100,883
   tokens, 2.1); how the embedding rows are carried over the paper does not say. Ours, by token identity:
   --target_data_dir=<dataset made by `python -m tools.pangu.compact_vocab ... --vocab_size K`>. Its meta.json
   lists the GPT-2 id of every compact token but the last, <|endoftext|> (gpt2_ids); row i of the small
   model's token embedding (and untied head) is the source's row of the same GPT-2 token. Works from a GPT-2
   vocabulary or any compact one that holds the target's tokens; a target token the source lacks is an error.
   The output records the target dataset, so sample.py uses the compact tokenizer with it (pass
   --dataset=<target> to train.py).

Supported sources: single-branch GPT / LLaMA-style models (MHA or GQA, standard or gated FFN, any norm and
position embedding, tied, untied or factorized embeddings, enhanced residual, Deep Thinking). Layer sharing,
ShishuLM MLP-only layers, post-norm blocks, pgpt branches and lgpt/cgpt width shrinking raise a clear error.

Output: out_dir/ckpt.pt (out_dir a folder of its own: one that holds another run's ckpt.pt or last.pt is
refused; an earlier inherit's ckpt.pt alone is replaced, the same command run again; locked while it is
written) in train.py's format (model, model_args, config, iter_num=0, dataset, data_dir) with
weights only (optimizer=None) and an 'inherit' entry recording what was kept.
"""

import dataclasses
import math
import os
import re
import shlex
import sys
from dataclasses import dataclass
from functools import partial
from typing import Optional

import torch

from model import GPT, GPTConfig
from tools.sizes import ffn_hidden, head_dim, kv_heads
from tools.support import refuse_undeclared
from train import get_batch
from safety_net.build import check_optional_types
from safety_net.checkpoint import (CKPT_NAME, LAST_NAME, clean_state_dict, load_checkpoint, load_model,
                                   save_checkpoint)
from safety_net.configurator import UserError, run_command
from safety_net.dataset import load_meta, resolve_data_dir, split_path, tokenizer_id
from safety_net.dataset import split_tokens
from safety_net.fileio import check_out_dir, lock_dir, remove_stale_temp_files, unused_name
from safety_net.runtime import check_num_threads, check_seed
from safety_net.tokenizers import Vocabulary

DEFAULTS = {
    "init_from": "",           # the big model: its run folder (ckpt.pt, else last.pt) or a checkpoint file
    "out_dir": "",             # where the small model's ckpt.pt goes
    "n_layer": 0,              # small model sizes; 0 = the source's (n_head: n_embd / source head size)
    "n_embd": 0,
    "n_head": 0,
    "n_kv_head": 0,            # 0 = keep the source's query heads per kv group (MHA stays MHA)
    "mlp_hidden": 0,           # 0 = source mlp_hidden, or mlp_ratio * n_embd
    "mlp_ratio": 0.0,          # 0 = the source's
    "layers": "first_last",    # first_last | spread | loss
    "neurons": "taylor",       # l1 | l2 | taylor | learned
    "mask_steps": 100,         # --neurons=learned: optimisation steps of the masks (cycling the calibration batches)
    "target_data_dir": "",     # dataset the small model will train on (a compact vocabulary); '' = the source's
    "calib_batches": 8,        # calibration batches for --layers=loss and --neurons=taylor|learned
    "calib_batch_size": 0,     # 0 = the source run's batch_size
    "data_dir": "",            # calibration data; '' = the source checkpoint's dataset
    "seed": 1337,
    "num_threads": 0,          # CPU threads (inheritance runs on the CPU); 0 = torch's default
}
LAYER_METHODS = ("first_last", "spread", "loss")
NEURON_CRITERIA = ("l1", "l2", "taylor", "learned")

# What each dimension of a state-dict tensor indexes (None: kept whole).
CH, FFN, HEAD, QKV, VOCAB = "channel", "ffn", "head", "qkv", "vocab"   # HEAD: attention inner dim (n_head * head_dim)
TOP_AXES = {
    "tok_emb.wte.weight": (VOCAB, CH), "tok_emb.proj.weight": (CH, None), "pos_emb.weight": (None, CH),
    "ln_f.weight": (CH,), "ln_f.bias": (CH,), "lm_head.weight": (VOCAB, CH),
    "lm_head.bias": (VOCAB,), "tied_head_bias": (VOCAB,),   # head_bias, untied and tied
}
SUBLAYER_AXES = {
    "norm.weight": (CH,), "norm.bias": (CH,), "alpha_logit": (),
    "inner.qkv_proj.weight": (QKV, CH), "inner.qkv_proj.bias": (QKV,),
    "inner.out_proj.weight": (CH, HEAD), "inner.out_proj.bias": (CH,),
    "inner.up.weight": (FFN, CH), "inner.up.bias": (FFN,), "inner.gate.weight": (FFN, CH), "inner.gate.bias": (FFN,),
    "inner.down.weight": (CH, FFN), "inner.down.bias": (CH,),
}
LAYER_KEY = re.compile(r"^branches\.0\.(attn|mlp)\.(\d+)\.(.+)$")


@dataclass
class Plan:
    """What the small model keeps of the source (all index tensors sorted, except q_heads: grouped by kv head)."""
    layers: list        # source layer of each small-model layer
    channels: torch.Tensor
    ffn: list           # per small-model layer: kept FFN neurons
    q_heads: list       # per small-model layer: kept query heads, kv group by kv group
    kv_heads: list      # per small-model layer: kept key/value heads
    vocab: Optional[torch.Tensor] = None   # source row of each small-model token; None = the same vocabulary
    kv_pool: int = 1    # MHA -> GQA: this many consecutive kept kv heads are averaged into one


# ----------------------------------------------------------------------------------------------
# shapes

# every layer has attention and none is shared (check_supported), said so at any depth: a source's n_attn_layers=4
# of its 4 layers was refused for a model of 2 layers, with a fix naming other keys (a hunt)
EVERY_LAYER = dict(n_attn_layers=None, n_top_attn_layers=0, share_from_layer=0)


def at_depth(cfg, n_layer):
    """cfg with n_layer layers (EVERY_LAYER)."""
    return dataclasses.replace(cfg, n_layer=n_layer, **EVERY_LAYER)


def check_supported(cfg):
    """Refuse the sources whose weights do not follow the plain one-branch layout sliced here, or that set a
    field tools/support.py does not declare."""
    refuse_undeclared(cfg, "inheritance")
    problems = []
    if cfg.n_branches != 1:
        problems.append(f"pgpt branches (n_branches={cfg.n_branches})")
    if cfg.shrink_every:
        problems.append(f"lgpt/cgpt width shrinking (shrink_every={cfg.shrink_every})")
    if cfg.share_group_size != 1:
        problems.append(f"layer sharing (share_group_size={cfg.share_group_size})")
    if len(cfg.attention_layers()) != cfg.layers_per_branch():   # per branch: a pgpt source has none MLP-only
        problems.append(f"MLP-only layers (n_attn_layers={cfg.n_attn_layers})")
    if cfg.norm_placement != "pre":   # the learned masks gate where each pre-norm reads the residual stream
        problems.append("post-norm blocks (norm_placement='post')")
    if problems:
        raise UserError(f"inherit supports single-branch GPT/LLaMA-style sources only; this one uses "
                         f"{', '.join(problems)} (fix: inherit from a plain gpt/llama-style checkpoint)")


# The helpers below take the source's head size hd and kv head count src_kv as numbers: tools.sizes builds a model
# to derive each, too slow to repeat for every candidate.

def kv_choices(src, src_kv, n_head):
    """The n_kv_head values a small model with n_head query heads can inherit from src with: a divisor of n_head,
    no more kv heads than the source has (each is one of the source's, kept or mean-pooled, never split), and
    query groups that either cut the source's groups (at most its group size) or merge whole ones (a multiple)."""
    group = src.n_head // src_kv
    choices = []
    for kv in range(1, min(n_head, src_kv) + 1):
        if n_head % kv != 0:
            continue
        new_group = n_head // kv
        if new_group <= group or new_group % group == 0:
            choices.append(kv)
    return choices


def heads_fit(src, src_kv, n_head, n_kv_head=0):
    """Whether n_head query heads (and n_kv_head kv heads, 0: the default) can inherit from src."""
    if n_kv_head:
        return n_kv_head in kv_choices(src, src_kv, n_head)
    if src.n_kv_head is None:   # MHA stays MHA
        return True
    return n_head % (src.n_head // src_kv) == 0   # the default keeps the source's group size


def width_fix(src, hd, src_kv, n_embd, n_head=0, n_kv_head=0):
    """The flags of a width that inherits from src, as close to n_embd as allowed: a multiple of the source's kv
    group width (query heads per kv head x head size), whose heads the default n_kv_head fits. n_head, n_kv_head:
    the values given (0: none); the fix names them too when given, as the old values would refuse the new width."""
    unit = src.n_head // src_kv * hd
    width = max(1, min(n_embd, src.n_embd) // unit) * unit   # src.n_embd is a multiple of unit
    flags = [f"--n_embd={width}"]
    if n_head:
        flags.append(f"--n_head={width // hd}")
    if n_kv_head and not heads_fit(src, src_kv, width // hd, n_kv_head):
        flags.append(f"--n_kv_head={width // unit}")   # the source's group size again
    return " ".join(flags)


def gqa_fix(src, hd, src_kv, n_embd, n_head=0, n_kv_head=0):
    """The fix for a small model of width n_embd whose query heads do not fit the source's kv groups: the
    --n_kv_head that fits, nearest the one given (else the most kv heads), or, when none fits these heads, a
    width whose heads do (width_fix). n_head, n_kv_head: the values given (0: none)."""
    choices = kv_choices(src, src_kv, n_embd // hd)
    if not choices:
        return width_fix(src, hd, src_kv, n_embd, n_head, n_kv_head)
    best = choices[-1]
    if n_kv_head:
        for kv in choices:   # ascending, so on a tie the larger one wins
            if abs(kv - n_kv_head) <= abs(best - n_kv_head):
                best = kv
    others = "" if len(choices) == 1 else f"; any of {', '.join(map(str, choices))} works"
    return f"--n_kv_head={best}{others}"


def target_config(src, n_layer=0, n_embd=0, n_head=0, n_kv_head=0, hidden=0, mlp_ratio=0.0, vocab_size=0):
    """GPTConfig of the small model: the source's, with the given sizes (0 = derived, see DEFAULTS). The fix of a
    refused width or head count names values that fit together with the other sizes given."""
    def need(ok, msg):
        if not ok:
            raise UserError(msg)

    hd, src_kv = head_dim(src), kv_heads(src)
    group = src.n_head // src_kv
    n_layer, n_embd = n_layer or src.n_layer, n_embd or src.n_embd
    need(1 <= n_layer <= src.n_layer, f"n_layer must be in [1, {src.n_layer}] (the source's), got {n_layer} "
         f"(fix: e.g. --n_layer={max(1, src.n_layer // 2)})")
    # a GQA source's widths come in whole kv groups (the default n_kv_head keeps its group size), an MHA one's in heads
    unit = f"{group} query heads per kv head x the head size {hd}" if group > 1 else f"the head size {hd}"
    need(1 <= n_embd <= src.n_embd, f"n_embd must be in [1, {src.n_embd}] (the source's), got {n_embd} "
         f"(fix: a multiple of {unit}, e.g. {width_fix(src, hd, src_kv, src.n_embd // 2, n_head, n_kv_head)})")
    need(n_embd % hd == 0, f"n_embd={n_embd} is not a whole number of heads of size {hd}: heads are kept whole "
         f"(fix: {width_fix(src, hd, src_kv, n_embd, n_head, n_kv_head)})")
    # fixed sin/cos positions are a table of the model's width: a narrower one gives each kept channel another
    # frequency, and its inherited weights read a position signal they never saw (a hunt; learned ones are sliced)
    need(src.pos_embedding != "sinusoidal" or n_embd == src.n_embd,
         f"n_embd={n_embd}: the source's sinusoidal positions are a table of its width {src.n_embd}, and a narrower "
         f"table gives the kept channels other frequencies (fix: --n_embd={src.n_embd}, or inherit from a model "
         f"with learned or RoPE positions)")
    heads = n_embd // hd
    if n_head and n_head != heads:
        # the head count n_embd implies, unless those heads would be refused next: then a width whose heads fit
        if heads_fit(src, src_kv, heads, n_kv_head):
            fix = f"--n_head={heads}"
        else:
            fix = width_fix(src, hd, src_kv, n_embd, n_head, n_kv_head)
        raise UserError(f"n_head={n_head} gives head size {n_embd / n_head:g}, but inherited heads keep the "
                        f"source's {hd} (fix: {fix})")
    given_n_head, n_head = n_head, heads
    if n_kv_head:
        fix = gqa_fix(src, hd, src_kv, n_embd, given_n_head, n_kv_head)
        need(n_kv_head >= 1 and n_head % n_kv_head == 0,
             f"n_kv_head={n_kv_head} must divide n_head={n_head} (fix: {fix})")
        need(n_kv_head <= src_kv,
             f"n_kv_head={n_kv_head} exceeds the source's {src_kv} kv heads (its n_head={src.n_head}, "
             f"n_kv_head={src_kv}): each kv head is one of the source's, kept or mean-pooled, never split (fix: {fix})")
        new_group = n_head // n_kv_head
        need(new_group <= group or new_group % group == 0,
             f"n_head={n_head}, n_kv_head={n_kv_head} needs {new_group} query heads per kv group, but the source "
             f"groups have {group} (its n_head={src.n_head}, n_kv_head={src_kv}): kv heads can only be merged "
             f"whole, in groups of a multiple of {group} (fix: {fix})")
    elif src.n_kv_head is not None:   # not given: the source's groups of query heads
        need(n_head % group == 0, f"n_head={n_head} does not split into the source's GQA groups of {group} query "
             f"heads (fix: {gqa_fix(src, hd, src_kv, n_embd, given_n_head)})")
        n_kv_head = n_head // group
    else:
        n_kv_head = None   # not given, MHA source: no GQA, as in the source
    args = dataclasses.asdict(src)
    args.update(EVERY_LAYER)
    args.update(n_layer=n_layer, n_embd=n_embd, n_head=n_head, n_kv_head=n_kv_head,
                vocab_size=vocab_size or src.vocab_size)
    need(not (hidden and mlp_ratio), f"--mlp_ratio={mlp_ratio} changes nothing beside --mlp_hidden={hidden}, which "
         f"sizes the FFN (fix: give one of them)")   # accepted and dropped (a hunt)
    if mlp_ratio:
        args.update(mlp_ratio=mlp_ratio, mlp_hidden=None)
    if hidden:
        args.update(mlp_hidden=hidden)
    check_optional_types(args)
    try:
        cfg = GPTConfig(**args)
    except ValueError as e:   # GPTConfig's
        raise UserError(f"{e} (fix: correct --mlp_hidden/--mlp_ratio/--n_kv_head)") from None
    need(ffn_hidden(cfg) <= ffn_hidden(src),
         f"FFN hidden size {ffn_hidden(cfg)} exceeds the source's {ffn_hidden(src)} "
         f"(fix: lower --mlp_hidden/--mlp_ratio)")
    return cfg


def before_pooling(dst, src):
    """The small model as step 2 cuts it: dst, but with the source's kv group size where dst merges groups
    (MHA -> GQA, Appendix A); pool_kv_heads then averages each m consecutive kv heads. Returns (config, m)."""
    group, new_group = src.n_head // kv_heads(src), dst.n_head // kv_heads(dst)
    if new_group <= group:
        return dst, 1
    return dataclasses.replace(dst, n_kv_head=dst.n_head // group), new_group // group


def pool_kv_heads(state, cfg, m):
    """Mean-pool every m consecutive kv heads (their k and v rows of qkv_proj, weights and biases) into one."""
    hd, n_kv = head_dim(cfg), kv_heads(cfg)
    out = {}
    for name, t in state.items():
        if name.endswith("inner.qkv_proj.weight") or name.endswith("inner.qkv_proj.bias"):
            q, k, v = t.split([cfg.n_embd, n_kv * hd, n_kv * hd])
            k, v = (x.reshape(n_kv // m, m, hd, *x.shape[1:]).mean(1).reshape(n_kv // m * hd, *x.shape[1:])
                    for x in (k, v))
            t = torch.cat([q, k, v])
        out[name] = t
    return out


# ----------------------------------------------------------------------------------------------
# vocabularies (the datasets' meta.json)

def read_meta(data_dir):
    path = os.path.join(data_dir, "meta.json")
    if not os.path.isfile(path):
        raise UserError(f"{path} is missing, so its tokenizer is unknown (fix: prepare that dataset, "
                         f"or point --data_dir/--target_data_dir at a prepared dataset)")
    return load_meta(data_dir)   # one-line errors for a damaged file


def vocab_rows(src_meta, dst_meta):
    """Source row of each target token: the source token with the same GPT-2 id (paper 003 2.1 and 3.2)."""
    src_vocab, dst_vocab = Vocabulary(src_meta), Vocabulary(dst_meta)
    src, dst = src_vocab.gpt2_ids(), dst_vocab.gpt2_ids()
    if src is None or dst is None:
        raise UserError(f"cannot map a {src_vocab.kind!r} vocabulary onto a {dst_vocab.kind!r} "
                         f"one: only GPT-2-based tokenizers (gpt2, compact) share token ids (fix: drop "
                         f"--target_data_dir to keep the source's vocabulary)")
    index = {g: i for i, g in enumerate(src)}
    missing = [g for g in dst if g not in index]
    if missing:
        raise UserError(f"{len(missing)} target tokens are not in the source's vocabulary (first: GPT-2 id "
                         f"{missing[0]}) (fix: make the target vocabulary a subset of the source's, e.g. "
                         f"--vocab_size K of tools.pangu.compact_vocab or tools.wikitext103 on the source's text)")
    return torch.tensor([index[g] for g in dst])


# ----------------------------------------------------------------------------------------------
# slicing a state dict by a plan

def tensor_axes(name, cfg):
    """(layer or None, axes): the source layer of tensor `name` and what each of its dimensions indexes."""
    m = LAYER_KEY.match(name)
    layer, axes = (int(m.group(2)), SUBLAYER_AXES.get(m.group(3))) if m else (None, TOP_AXES.get(name))
    if name == "tok_emb.wte.weight" and cfg.embd_factor_dim:
        axes = (VOCAB, None)  # factorized: wte is vocab x E; the channels are the rows of tok_emb.proj
    if axes is None:
        raise UserError(f"inherit: no slicing rule for tensor '{name}' (fix: extend tensor_axes in tools/pangu/inherit.py)")
    return layer, axes


def head_rows(heads, hd):
    """The rows (or columns) of whole heads of size hd."""
    return (heads[:, None] * hd + torch.arange(hd)).reshape(-1)


def axis_index(kind, plan, j, cfg):
    """Kept indices along one dimension of kind `kind` for small-model layer j (None: all)."""
    if kind == VOCAB:
        return plan.vocab
    if kind == CH:
        return plan.channels
    if kind == FFN:
        return plan.ffn[j]
    hd = head_dim(cfg)
    q = head_rows(plan.q_heads[j], hd)
    if kind == HEAD:
        return q
    kv = head_rows(plan.kv_heads[j], hd)
    n_q, n_kv = cfg.n_embd, kv_heads(cfg) * hd   # qkv_proj rows: [q | k | v]
    return torch.cat([q, n_q + kv, n_q + n_kv + kv])


def extract(state, cfg, plan):
    """The small model's state dict: source layer plan.layers[j] becomes layer j, and every tensor keeps
    the plan's channels / FFN neurons / heads along each dimension."""
    out = {}
    for name, t in state.items():
        layer, axes = tensor_axes(name, cfg)
        j = None
        if layer is not None:
            if layer not in plan.layers:
                continue
            j = plan.layers.index(layer)
            name = LAYER_KEY.sub(lambda m: f"branches.0.{m.group(1)}.{j}.{m.group(3)}", name)
        for dim, kind in enumerate(axes):
            index = None if kind is None else axis_index(kind, plan, j, cfg)
            if index is not None:
                t = t.index_select(dim, index)
        out[name] = t.detach().clone()
    return out


def full_plan(cfg, layers):
    """Keep every channel, neuron and head of the given layers."""
    n = len(layers)
    return Plan(list(layers), torch.arange(cfg.n_embd), [torch.arange(ffn_hidden(cfg))] * n,
                [torch.arange(cfg.n_head)] * n, [torch.arange(kv_heads(cfg))] * n)


def build(cfg, state):
    model = GPT(cfg)
    model.load_state_dict(state)   # strict: every tensor must be there with the small model's shape
    return model.eval()


# ----------------------------------------------------------------------------------------------
# step 1: important layers

def first_last_layers(n_src, k):
    """A prefix of ceil(k/2) and a suffix of floor(k/2) layers: one contiguous middle block is dropped."""
    head = (k + 1) // 2
    return list(range(head)) + list(range(n_src - (k - head), n_src))


def spread_layers(n_src, k):
    """keep = round(linspace(0, L-1, K)): first and last layer kept, intermediate ones dropped evenly."""
    if k == 1:
        return [0]
    return sorted({round(i * (n_src - 1) / (k - 1)) for i in range(k)})


@torch.no_grad()
def calibration_loss(model, batches):
    model.eval()
    return sum(model(x, y)[1].item() for x, y in batches) / len(batches)


def layer_importance(model, batches):
    """Delta_l = loss(layer l skipped) - loss(full model) on the calibration batches, for every layer l."""
    cfg, state = model.config, clean_state_dict(model.state_dict())
    base = calibration_loss(model, batches)
    skipped_cfg = at_depth(cfg, cfg.n_layer - 1)
    deltas = []
    for skip in range(cfg.n_layer):
        keep = [i for i in range(cfg.n_layer) if i != skip]
        skipped = build(skipped_cfg, extract(state, cfg, full_plan(cfg, keep)))
        deltas.append(calibration_loss(skipped, batches) - base)
    return torch.tensor(deltas)


def choose_layers(model, k, method, batches=None):
    """The k source layers to keep (in order), by 'first_last', 'spread' or the 'loss' ranking."""
    n = model.config.n_layer
    if k == n:
        return list(range(n))
    if method == "first_last":
        return first_last_layers(n, k)
    if method == "spread":
        return spread_layers(n, k)
    if method == "loss":
        return sorted(top_k(layer_importance(model, batches), k).tolist())
    raise UserError(f"unknown layer selection '{method}' (fix: --layers={' or '.join(LAYER_METHODS)})")


# ----------------------------------------------------------------------------------------------
# step 2: important neurons, heads and channels

def element_importance(model, criterion, batches=None):
    """Per-weight importance: |w| (l1), w^2 (l2), or sum over batches of |w * dL/dw| (taylor)."""
    params = dict(model.named_parameters())
    if criterion == "l1":
        return {n: p.detach().abs() for n, p in params.items()}
    if criterion == "l2":
        return {n: p.detach().pow(2) for n, p in params.items()}
    if criterion != "taylor":
        raise UserError(f"unknown neuron criterion '{criterion}' (fix: --neurons={' or '.join(NEURON_CRITERIA)})")
    model.eval()   # no dropout while measuring
    scores = {n: torch.zeros_like(p) for n, p in params.items()}
    for x, y in batches:
        model.zero_grad(set_to_none=True)
        with torch.enable_grad():
            model(x, y)[1].backward()
        for n, p in params.items():
            if p.grad is not None:
                scores[n] += (p.detach() * p.grad).abs()
    model.zero_grad(set_to_none=True)
    return scores


class HardConcrete(torch.nn.Module):
    """One hard-concrete gate per structure (Louizos et al. 2018, as used by Xia et al. 2023); see the module
    docstring. forward() samples the gates, kept() is P(gate != 0), differentiable in log_alpha."""
    BETA, GAMMA, ZETA = 2 / 3, -0.1, 1.1

    def __init__(self, n, init=3.0):
        super().__init__()
        self.log_alpha = torch.nn.Parameter(torch.full((n,), init))

    def forward(self):
        u = torch.rand_like(self.log_alpha).clamp(1e-6, 1 - 1e-6)
        s = torch.sigmoid((u.log() - (-u).log1p() + self.log_alpha) / self.BETA)
        return (s * (self.ZETA - self.GAMMA) + self.GAMMA).clamp(0, 1)

    def kept(self):
        return torch.sigmoid(self.log_alpha - self.BETA * math.log(-self.GAMMA / self.ZETA))


def mask_hooks(model, gates):
    """Multiply the gates in `gates` (a dict, read at every forward) into the model: {(CH, None): (n_embd,)}
    where a norm reads the residual stream, {(FFN, l): (hidden,)} before down, {("q", l): (n_head,)} and
    {("kv", l): (n_kv_head,)} on the heads before out_proj. Returns the hook handles (call .remove())."""
    cfg, stack = model.config, model.branches[0]
    hd, group = head_dim(cfg), cfg.n_head // kv_heads(cfg)

    def channels(module, args):
        z = gates.get((CH, None))
        return None if z is None else (args[0] * z,) + args[1:]

    def neurons(layer, module, args):
        z = gates.get((FFN, layer))
        return None if z is None else (args[0] * z,) + args[1:]

    def heads(layer, module, args):
        z_q, z_kv = gates.get(("q", layer)), gates.get(("kv", layer))
        if z_q is None and z_kv is None:
            return None
        z = torch.ones(cfg.n_head, device=args[0].device)
        z = z if z_q is None else z * z_q
        z = z if z_kv is None else z * z_kv.repeat_interleave(group)
        x = args[0]
        return ((x.view(*x.shape[:-1], cfg.n_head, hd) * z[:, None]).view(x.shape),) + args[1:]

    handles = [sub.norm.register_forward_pre_hook(channels) for sub in (*stack.attn, *stack.mlp)]
    handles.append(model.ln_f.register_forward_pre_hook(channels))
    for layer, (attn, mlp) in enumerate(zip(stack.attn, stack.mlp)):
        handles.append(mlp.inner.down.register_forward_pre_hook(partial(neurons, layer)))
        handles.append(attn.inner.out_proj.register_forward_pre_hook(partial(heads, layer)))
    return handles


def learned_mask_scores(model, dst, batches, steps, lr=0.1, penalty=10.0):
    """Scores like structure_scores' from learned hard-concrete masks: P(gate != 0) of every structure that
    shrinks from model.config to dst (0 for the others, which are all kept). See the module docstring."""
    cfg = model.config
    group = cfg.n_head // kv_heads(cfg)
    sizes = [((CH, None), cfg.n_embd, dst.n_embd)]   # (kind, layer), structures in the source, kept
    for l in range(cfg.n_layer):
        sizes += [((FFN, l), ffn_hidden(cfg), ffn_hidden(dst)), (("q", l), cfg.n_head, dst.n_head)]
        if group > 1:   # MHA: a query head's gate already gates its own key/value head
            sizes.append((("kv", l), kv_heads(cfg), kv_heads(dst)))
    masks = {key: (HardConcrete(n), k / n) for key, n, k in sizes if k < n}   # (gates, fraction to keep)
    params = list(model.parameters())
    trainable = [p.requires_grad for p in params]
    for p in params:
        p.requires_grad_(False)
    gates = {}
    handles = mask_hooks(model, gates)
    model.eval()   # no dropout
    opt = torch.optim.Adam([m.log_alpha for m, _ in masks.values()], lr=lr)
    try:
        for step in range(steps):
            ramp = min(1.0, step / max(1, steps // 2))   # the target falls from 1 to the kept fraction
            x, y = batches[step % len(batches)]
            gates.update({key: m() for key, (m, _) in masks.items()})
            loss = model(x, y)[1]
            for m, frac in masks.values():
                loss = loss + penalty * (m.kept().mean() - (1 - ramp * (1 - frac))) ** 2
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    finally:
        for h in handles:
            h.remove()
        for p, t in zip(params, trainable):
            p.requires_grad_(t)
    L = cfg.n_layer
    scores = {CH: torch.zeros(cfg.n_embd), FFN: [torch.zeros(ffn_hidden(cfg)) for _ in range(L)],
              "q": [torch.zeros(cfg.n_head) for _ in range(L)], "kv": [torch.zeros(kv_heads(cfg)) for _ in range(L)]}
    for (kind, layer), (m, _) in masks.items():
        kept = m.kept().detach().double()   # float64: no ties from rounding near 1
        if layer is None:
            scores[kind] = kept
        else:
            scores[kind][layer] = kept
    return scores


def structure_scores(elem, cfg):
    """Sum the per-weight importances over each structure: residual channels, and per layer the FFN neurons,
    query heads and key/value heads."""
    hd, n_kv, L = head_dim(cfg), kv_heads(cfg), cfg.n_layer
    scores = {CH: torch.zeros(cfg.n_embd), FFN: [torch.zeros(ffn_hidden(cfg)) for _ in range(L)],
              "q": [torch.zeros(cfg.n_head) for _ in range(L)], "kv": [torch.zeros(n_kv) for _ in range(L)]}
    for name, e in elem.items():
        layer, axes = tensor_axes(name, cfg)
        for dim, kind in enumerate(axes):
            if kind in (None, VOCAB):
                continue
            v = e.sum(dim=[d for d in range(e.dim()) if d != dim]) if e.dim() > 1 else e
            if kind == CH:
                scores[CH] += v
            elif kind == FFN:
                scores[FFN][layer] += v
            elif kind == HEAD:
                scores["q"][layer] += v.view(cfg.n_head, hd).sum(1)
            else:   # QKV rows: [q | k | v]
                q, k, val = v.split([cfg.n_embd, n_kv * hd, n_kv * hd])
                scores["q"][layer] += q.view(cfg.n_head, hd).sum(1)
                scores["kv"][layer] += (k + val).view(n_kv, hd).sum(1)
    return scores


def top_k(scores, k):
    """Indices of the k highest scores, in increasing index order (ties: the lower index wins)."""
    return torch.argsort(scores, descending=True, stable=True)[:k].sort().values


def choose_heads(q, kv, src, dst):
    """(q_heads, kv_heads): the best dst-n_kv_head groups by the score of the whole group (its k, v rows and
    its query heads), then the best dst group-size query heads inside each. Query head h of the small model
    uses kv head h // group, as in the source, so GQA stays exact."""
    group, new_group = src.n_head // kv_heads(src), dst.n_head // kv_heads(dst)
    kept_kv = top_k(kv + q.view(-1, group).sum(1), kv_heads(dst))
    q_heads = torch.cat([g * group + top_k(q[g * group:(g + 1) * group], new_group) for g in kept_kv.tolist()])
    return q_heads, kept_kv


def width_plan(scores, src, dst):
    """Keep the top-scored channels, FFN neurons and heads for the small shape dst (same depth as src)."""
    heads = [choose_heads(q, kv, src, dst) for q, kv in zip(scores["q"], scores["kv"])]
    return Plan(list(range(src.n_layer)), top_k(scores[CH], dst.n_embd),
                [top_k(s, ffn_hidden(dst)) for s in scores[FFN]], [h[0] for h in heads], [h[1] for h in heads])


# ----------------------------------------------------------------------------------------------
# the whole recipe

def same_width(a, b):
    return (a.n_embd, a.n_head, kv_heads(a), ffn_hidden(a)) == (b.n_embd, b.n_head, kv_heads(b), ffn_hidden(b))


def inherit(model, dst, layers="first_last", neurons="taylor", batches=None, vocab=None, mask_steps=100):
    """(small GPT with config dst, Plan in source indices): paper 003 3.2, important layers first, then the
    important neurons, heads and channels of the depth-pruned model; kv heads mean-pooled where dst has fewer
    (Appendix A); with `vocab` (source row of each dst token) the embedding and head rows follow it."""
    src = model.config
    check_supported(src)
    if layers not in LAYER_METHODS:
        raise UserError(f"unknown layer selection '{layers}' (fix: --layers={' or '.join(LAYER_METHODS)})")
    if neurons not in NEURON_CRITERIA:
        raise UserError(f"unknown neuron criterion '{neurons}' (fix: --neurons={' or '.join(NEURON_CRITERIA)})")
    n_tokens = src.vocab_size if vocab is None else len(vocab)
    if dst.vocab_size != n_tokens:
        raise UserError(f"the small model's vocab_size {dst.vocab_size} does not match its {n_tokens} tokens "
                         f"(fix: target_config(..., vocab_size={n_tokens}))")
    keep = choose_layers(model, dst.n_layer, layers, batches)
    deep_cfg = at_depth(src, dst.n_layer)
    deep = build(deep_cfg, extract(clean_state_dict(model.state_dict()), src, full_plan(src, keep)))
    cut, pool = before_pooling(dst, src)
    if same_width(deep_cfg, cut):
        plan = full_plan(deep_cfg, range(dst.n_layer))
    elif neurons == "learned":
        plan = width_plan(learned_mask_scores(deep, cut, batches, mask_steps), deep_cfg, cut)
    else:
        plan = width_plan(structure_scores(element_importance(deep, neurons, batches), deep_cfg), deep_cfg, cut)
    plan.vocab, plan.kv_pool = vocab, pool
    state = extract(deep.state_dict(), deep_cfg, plan)
    if pool > 1:
        state = pool_kv_heads(state, cut, pool)
    small = build(dst, state)
    plan.layers = keep
    return small, plan


def needs_data(src, dst, layers, neurons):
    cut, _ = before_pooling(dst, src)
    return (layers == "loss" and dst.n_layer < src.n_layer) or (
        neurons in ("taylor", "learned") and not same_width(src, cut))


def note_unread_calibration_keys(opts, needs):
    """A note for calibration keys that no cut here reads (they changed nothing without a word; a hunt). A note,
    not a refusal: one command over the --layers x --neurons grid (config/ablation_pangu_inherit.py) gives them."""
    read = {"calib_batches": needs, "calib_batch_size": needs, "mask_steps": needs and opts["neurons"] == "learned",
            "data_dir": needs or bool(opts["target_data_dir"])}
    unread = [f"--{key}" for key, used in read.items() if not used and opts[key] != DEFAULTS[key]]
    if unread:
        print(f"note: {', '.join(unread)} not read by this inheritance (calibration data: --layers=loss with fewer "
              f"layers, or --neurons=taylor|learned with a narrower width; --mask_steps: --neurons=learned)",
              file=sys.stderr)


def calibration_batches(data_dir, n, batch_size, block_size, seed, vocab_size=None):
    """n fixed training batches (seeded), as train.py draws them. vocab_size: the model's, to check the
    token file against first (one-line errors instead of an index error deep in the model)."""
    path = split_path(data_dir, "train")
    if not os.path.isfile(path):
        raise UserError(f"no calibration data: {path} is missing (fix: --data_dir=<prepared dataset>)")
    if vocab_size is not None:
        split_tokens(data_dir, "train", vocab_size, block_size)
    gen = torch.Generator()
    batches = []
    for i in range(n):
        gen.manual_seed(seed + i)
        batches.append(get_batch(path, batch_size, block_size, gen))
    return batches


def checkpoints_in(folder):
    """The checkpoints train.py writes (ckpt.pt, last.pt) that `folder` holds; a link counts, even a broken one."""
    return [name for name in (CKPT_NAME, LAST_NAME) if os.path.lexists(os.path.join(folder, name))]


def earlier_inherit(path):
    """Whether the checkpoint file `path` is an earlier inherit's output (its 'inherit' record), read lazily."""
    try:
        return "inherit" in load_checkpoint(path, mmap=True)
    except UserError:   # damaged, or not a checkpoint: not one to replace without a word
        return False


def refuse_used_out_dir(out_dir):
    """One line when out_dir holds another run's checkpoints: the small model's ckpt.pt would replace that run's
    best checkpoint, and the folder would then mix two models. An earlier inherit's ckpt.pt alone is replaced (the
    same command run again, e.g. with other --neurons)."""
    found = checkpoints_in(out_dir)
    if found == [CKPT_NAME] and earlier_inherit(os.path.join(out_dir, CKPT_NAME)):
        return
    if found:
        raise UserError(f"--out_dir={out_dir} already holds another run's {' and '.join(found)}, which the small "
                        f"model's ckpt.pt would replace or sit beside (fix: "
                        f"--out_dir={unused_name(os.path.normpath(out_dir) + '-small')}, a folder of its own)")


def refuse_hf_folder(source):
    """One line for --init_from=<a Hugging Face model folder> (config.json, none of our checkpoints): inherit reads
    our checkpoints, which tools.huggingface.convert import writes from such a folder."""
    if os.path.isfile(os.path.join(source, "config.json")) and not checkpoints_in(source):
        converted = unused_name(os.path.normpath(source), ".pt")
        raise UserError(f"--init_from={source} is a Hugging Face model folder (config.json), not a checkpoint of "
                        f"ours (fix: python -m tools.huggingface.convert import {source} --out={converted}, then "
                        f"--init_from={converted})")


def run(opts):
    """pangu.inherit's command: load --init_from, build the small model, write out_dir/ckpt.pt. Returns its path."""
    if not opts["init_from"] or not opts["out_dir"]:
        raise UserError("both --init_from (the big model's run) and --out_dir are needed "
                         "(fix: python -m tools.pangu.inherit --init_from=out-big --out_dir=out-small --n_layer=...)")
    if opts["calib_batches"] < 1:
        raise UserError(f"calib_batches must be >= 1, got {opts['calib_batches']} (fix: --calib_batches=8)")
    if opts["calib_batch_size"] < 0:
        raise UserError(f"calib_batch_size must be >= 0 (0 = the source run's batch_size), got "
                         f"{opts['calib_batch_size']} (fix: --calib_batch_size=0)")
    if opts["mask_steps"] < 1:
        raise UserError(f"mask_steps must be >= 1, got {opts['mask_steps']} (fix: --mask_steps=100)")
    check_out_dir(opts["out_dir"])   # a file or a read-only folder: one line now, not after the work
    check_num_threads(opts["num_threads"])
    check_seed(opts["seed"])
    if opts["num_threads"] > 0:
        torch.set_num_threads(opts["num_threads"])
    refuse_hf_folder(opts["init_from"])
    model, ckpt = load_model(opts["init_from"], "cpu")
    # realpath: an --out_dir linked to the source's folder replaced its checkpoint (a hunt)
    if os.path.realpath(os.path.dirname(ckpt["path"])) == os.path.realpath(opts["out_dir"]):
        raise UserError(f"--out_dir={opts['out_dir']} is the source's folder (fix: pick a new --out_dir)")
    refuse_used_out_dir(opts["out_dir"])   # now, not after the work
    src = model.config
    check_supported(src)
    vocab, dataset, target_dir = None, ckpt.get("dataset", ""), ckpt.get("data_dir", "")
    if opts["data_dir"] and not target_dir:   # a source that records none (an import): --data_dir, checked, is the
        target_dir = resolve_data_dir(ckpt, opts["data_dir"])   # output's, and the next command names it (a hunt)
        dataset = load_meta(target_dir, ckpt).get("dataset") or os.path.basename(os.path.normpath(target_dir))
    if opts["target_data_dir"]:
        target_dir = opts["target_data_dir"]
        target_meta = read_meta(target_dir)
        # the source's vocabulary: its meta.json, or GPT-2's for a nanoGPT GPT-2 run's folder of token files only,
        # as its calibration reads it (load_meta; refused here alone, a hunt)
        vocab = vocab_rows(load_meta(resolve_data_dir(ckpt, opts["data_dir"]), ckpt), target_meta)
        dataset = target_meta.get("dataset") or os.path.basename(os.path.normpath(target_dir))
    dst = target_config(src, opts["n_layer"], opts["n_embd"], opts["n_head"], opts["n_kv_head"],
                        opts["mlp_hidden"], opts["mlp_ratio"], 0 if vocab is None else len(vocab))
    batches = None
    needs = needs_data(src, dst, opts["layers"], opts["neurons"])
    note_unread_calibration_keys(opts, needs)
    if needs:
        bs = opts["calib_batch_size"] or (ckpt.get("config") or {}).get("batch_size", 8)
        # the source's data (its tokenizer: refused otherwise), which the source model scores
        batches = calibration_batches(resolve_data_dir(ckpt, opts["data_dir"]), opts["calib_batches"], bs,
                                      src.block_size, opts["seed"], src.vocab_size)
    torch.manual_seed(opts["seed"])
    small, plan = inherit(model, dst, opts["layers"], opts["neurons"], batches, vocab, opts["mask_steps"])
    report(model, small, plan, None if vocab is not None else batches)
    info = dict(source=ckpt["path"], layers_method=opts["layers"], neurons=opts["neurons"], layers=plan.layers,
                channels=plan.channels.tolist(), ffn=[t.tolist() for t in plan.ffn],
                q_heads=[t.tolist() for t in plan.q_heads], kv_heads=[t.tolist() for t in plan.kv_heads],
                kv_pool=plan.kv_pool, vocab=None if vocab is None else vocab.tolist())
    args = dataclasses.asdict(dst)
    config = dict(ckpt.get("config") or {}, **args, out_dir=opts["out_dir"], init_from=ckpt["path"],
                  dataset=dataset, data_dir=target_dir)
    # the target vocabulary's tokenizer (compact: the target dataset's), else the source checkpoint's
    tokenizer = tokenizer_id(target_meta) if opts["target_data_dir"] else ckpt.get("tokenizer_id")
    path = os.path.join(opts["out_dir"], CKPT_NAME)
    with lock_dir(opts["out_dir"]):   # the one writer of out_dir, as train.py is of its own (creates the folder)
        refuse_used_out_dir(opts["out_dir"])   # again: another writer may have filled it during the work
        remove_stale_temp_files(opts["out_dir"], (CKPT_NAME,))
        save_checkpoint(path, small.state_dict(), args, optimizer=None, scaler=None, iter_num=0,
                        best_val_loss=float("inf"), config=config, rng=None, dataset=dataset, data_dir=target_dir,
                        inherit=info, tokenizer_id=tokenizer)
    data = f" --data_dir={shlex.quote(target_dir)}" if target_dir else ""   # else train.py's default dataset
    print(f"wrote {path} (continue with: python train.py ... --init_from={shlex.quote(path)}{data})")
    return path


def report(big, small, plan, batches):
    c, s = big.config, small.config
    print(f"source: {c.n_layer} layers, n_embd {c.n_embd}, {c.n_head} heads ({kv_heads(c)} kv), FFN {ffn_hidden(c)}, "
          f"{big.get_num_params(False) / 1e6:.3f}M params")
    print(f"small:  {s.n_layer} layers, n_embd {s.n_embd}, {s.n_head} heads ({kv_heads(s)} kv), FFN {ffn_hidden(s)}, "
          f"{small.get_num_params(False) / 1e6:.3f}M params; source layers kept: {plan.layers}")
    if plan.kv_pool > 1:
        print(f"kv heads: every {plan.kv_pool} kept kv heads mean-pooled into one "
              f"({'MHA' if kv_heads(c) == c.n_head else 'GQA'} -> GQA)")   # from GQA too: not "MHA" (a hunt)
    if plan.vocab is not None:
        print(f"vocabulary: {c.vocab_size} -> {s.vocab_size} tokens (rows picked by GPT-2 id)")
    if batches:
        print(f"calibration loss: source {calibration_loss(big, batches):.4f}, "
              f"inherited {calibration_loss(small, batches):.4f} "
              f"(random init ~ ln(vocab) = {math.log(c.vocab_size):.4f})")


def main(argv=None):
    return run_command(run, DEFAULTS, argv)


if __name__ == "__main__":
    main()
