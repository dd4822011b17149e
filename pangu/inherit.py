"""
Parameter inheritance (paper 003, PanGu-pi Pro, 3.2): start a small model from the most important
layers and neurons of a trained larger one instead of from random numbers.

    python -m pangu.inherit --from=out-big --out_dir=out-small --n_layer=3 --n_embd=64
    python -m pangu.inherit --from=out-big --out_dir=out-small --n_layer=3 --layers=loss --neurons=taylor --calib_batches=16
    python train.py config/x.py --init_from=out-small/ckpt.pt      # then train the small model as usual

(train.py builds the model from the inherited checkpoint's model_args, so do not set n_layer/n_embd/...
on that command line: an explicit shape key overrides the checkpoint's and only matching tensors are copied.)

Two steps, as in the paper: "we firstly select important layers and then recognize critical neurons in
the selected layers".

1. Important layers selection, --layers (K = --n_layer of the L source layers):
   first_last  keep = round(linspace(0, L-1, K)): the first and the last layer stay, intermediate ones are
               dropped evenly. Paper Fig. 5: skipping shallow or deep layers hurts most, the middle is redundant.
   loss        Delta_l = loss(model with layer l skipped) - loss(model) on calibration batches (a skipped
               layer is the identity); the K layers with the largest Delta_l are kept, in their original order.

2. Intra-layer parameters selection, --neurons: every structure s gets a score, the top ones are kept
   l1      I(s) = sum_{w in s} |w|
   l2      I(s) = ||s||_2 = sqrt(sum_{w in s} w^2)       (ranked by sum w^2: same order)
   taylor  I(s) = sum_{batches} sum_{w in s} |w * dL/dw|   first-order Taylor estimate of the loss change
   Structures (the small model's sizes say how many are kept):
     FFN neuron j (per layer)     row j of up (and gate) and their biases, column j of down -> mlp_hidden
     query head h (per layer)     its head_dim rows of q in qkv_proj, its head_dim columns of out_proj
     key/value group (per layer)  its k and v rows of qkv_proj plus its query heads -> n_kv_head groups, then
                                  the best n_head/n_kv_head query heads inside each kept group (GQA stays exact)
     residual channel c (global)  entry c of everything that reads or writes the residual stream: token and
                                  position embeddings, every norm, qkv/up/gate columns, out_proj/down rows and
                                  biases, ln_f, lm_head -> n_embd, the same channel subset everywhere
   Heads are kept whole, so the head size n_embd/n_head stays the source's. The paper's best criterion,
   learned binary masks, is not implemented (it needs a masked training run).

Supported sources: single-branch GPT / LLaMA-style models (MHA or GQA, standard or gated FFN, any norm and
position embedding, tied, untied or factorized embeddings, enhanced residual, Deep Thinking). Layer sharing,
ShishuLM MLP-only layers, pgpt branches and lgpt/cgpt width shrinking raise a clear error.

Output: out_dir/ckpt.pt in train.py's format (model, model_args, config, iter_num=0, dataset, data_dir) with
weights only (optimizer=None) and an 'inherit' entry recording what was kept.
"""

import dataclasses
import math
import os
import re
from dataclasses import dataclass

import torch

from configurator import run_command
from model import GPT, GPTConfig
from runfiles.checkpoint import CKPT_NAME, atomic_save, clean_state_dict, load_model
from runfiles.dataset import get_batch, split_path

DEFAULTS = {
    "from": "",                # source out_dir or checkpoint file (the big model)
    "out_dir": "",             # where the small model's ckpt.pt goes
    "n_layer": 0,              # small model sizes; 0 = the source's (n_head: n_embd / source head size)
    "n_embd": 0,
    "n_head": 0,
    "n_kv_head": 0,            # 0 = keep the source's query heads per kv group (MHA stays MHA)
    "mlp_hidden": 0,           # 0 = source mlp_hidden, or mlp_ratio * n_embd
    "mlp_ratio": 0.0,          # 0 = the source's
    "layers": "first_last",    # first_last | loss
    "neurons": "taylor",       # l1 | l2 | taylor
    "calib_batches": 8,        # calibration batches for --layers=loss and --neurons=taylor
    "calib_batch_size": 0,     # 0 = the source run's batch_size
    "data_dir": "",            # calibration data; '' = the source checkpoint's dataset
    "seed": 1337,
    "num_threads": 0,          # CPU threads (inheritance runs on the CPU); 0 = torch's default
}
LAYER_METHODS = ("first_last", "loss")
NEURON_CRITERIA = ("l1", "l2", "taylor")

# What each dimension of a state-dict tensor indexes (None: kept whole).
CH, FFN, HEAD, QKV = "channel", "ffn", "head", "qkv"   # HEAD: attention inner dim (n_head * head_dim)
TOP_AXES = {
    "tok_emb.wte.weight": (None, CH), "tok_emb.proj.weight": (CH, None), "pos_emb.weight": (None, CH),
    "ln_f.weight": (CH,), "ln_f.bias": (CH,), "lm_head.weight": (None, CH),
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


# ----------------------------------------------------------------------------------------------
# shapes

def n_kv_heads(cfg):
    return cfg.n_kv_head or cfg.n_head


def head_dim(cfg):
    return cfg.n_embd // cfg.n_head


def mlp_hidden(cfg):
    return cfg.mlp_hidden or int(cfg.mlp_ratio * cfg.n_embd)


def check_supported(cfg):
    """Refuse the sources whose weights do not follow the plain one-branch layout sliced here."""
    problems = []
    if cfg.n_branches != 1:
        problems.append(f"pgpt branches (n_branches={cfg.n_branches})")
    if cfg.shrink_every:
        problems.append(f"lgpt/cgpt width shrinking (shrink_every={cfg.shrink_every})")
    if cfg.share_group_size != 1:
        problems.append(f"layer sharing (share_group_size={cfg.share_group_size})")
    if cfg.attn_layers_per_branch() != cfg.n_layer:
        problems.append(f"MLP-only layers (n_attn_layers={cfg.n_attn_layers})")
    if problems:
        raise ValueError(f"inherit supports single-branch GPT/LLaMA-style sources only; this one uses "
                         f"{', '.join(problems)} (fix: inherit from a plain gpt/llama-style checkpoint)")


def target_config(src, n_layer=0, n_embd=0, n_head=0, n_kv_head=0, hidden=0, mlp_ratio=0.0):
    """GPTConfig of the small model: the source's, with the given sizes (0 = derived, see DEFAULTS)."""
    def need(ok, msg):
        if not ok:
            raise ValueError(msg)

    hd, src_kv = head_dim(src), n_kv_heads(src)
    group = src.n_head // src_kv
    n_layer, n_embd = n_layer or src.n_layer, n_embd or src.n_embd
    need(1 <= n_layer <= src.n_layer, f"n_layer must be in [1, {src.n_layer}] (the source's), got {n_layer}")
    need(1 <= n_embd <= src.n_embd, f"n_embd must be in [1, {src.n_embd}] (the source's), got {n_embd}")
    need(n_embd % hd == 0, f"n_embd={n_embd} is not a whole number of heads of size {hd}: heads are kept whole "
         f"(fix: --n_embd={max(1, n_embd // hd) * hd})")
    n_head = n_head or n_embd // hd
    need(n_head * hd == n_embd, f"n_head={n_head} gives head size {n_embd / n_head:g}, but inherited heads keep the "
         f"source's {hd} (fix: --n_head={n_embd // hd})")
    if not n_kv_head and src.n_kv_head is not None:
        need(n_head % group == 0, f"n_head={n_head} does not split into the source's GQA groups of {group} "
             f"query heads (fix: set --n_kv_head)")
        n_kv_head = n_head // group
    kv = n_kv_head or n_head
    need(n_head % kv == 0, f"n_kv_head={kv} must divide n_head={n_head}")
    need(kv <= src_kv and n_head // kv <= group,
         f"n_head={n_head}, n_kv_head={kv} needs {n_head // kv} query heads per kv group, but the source groups "
         f"have {group} (its n_head={src.n_head}, n_kv_head={src_kv}): kv heads cannot be merged "
         f"(fix: --n_kv_head={max(1, n_head // group)})")
    args = dataclasses.asdict(src)
    args.update(n_layer=n_layer, n_embd=n_embd, n_head=n_head, n_kv_head=n_kv_head or None)
    if mlp_ratio:
        args.update(mlp_ratio=mlp_ratio, mlp_hidden=None)
    if hidden:
        args.update(mlp_hidden=hidden)
    cfg = GPTConfig(**args)
    need(mlp_hidden(cfg) <= mlp_hidden(src),
         f"FFN hidden size {mlp_hidden(cfg)} exceeds the source's {mlp_hidden(src)} "
         f"(fix: lower --mlp_hidden/--mlp_ratio)")
    return cfg


# ----------------------------------------------------------------------------------------------
# slicing a state dict by a plan

def tensor_axes(name, cfg):
    """(layer or None, axes): the source layer of tensor `name` and what each of its dimensions indexes."""
    m = LAYER_KEY.match(name)
    layer, axes = (int(m.group(2)), SUBLAYER_AXES.get(m.group(3))) if m else (None, TOP_AXES.get(name))
    if name == "tok_emb.wte.weight" and cfg.embd_factor_dim:
        axes = (None, None)   # factorized: wte is vocab x E; the channels are the rows of tok_emb.proj
    if axes is None:
        raise ValueError(f"inherit: no slicing rule for tensor '{name}' (fix: extend tensor_axes in pangu/inherit.py)")
    return layer, axes


def head_rows(heads, hd):
    """The rows (or columns) of whole heads of size hd."""
    return (heads[:, None] * hd + torch.arange(hd)).reshape(-1)


def axis_index(kind, plan, j, cfg):
    """Kept indices along one dimension of kind `kind` for small-model layer j."""
    if kind == CH:
        return plan.channels
    if kind == FFN:
        return plan.ffn[j]
    hd = head_dim(cfg)
    q = head_rows(plan.q_heads[j], hd)
    if kind == HEAD:
        return q
    kv = head_rows(plan.kv_heads[j], hd)
    n_q, n_kv = cfg.n_embd, n_kv_heads(cfg) * hd   # qkv_proj rows: [q | k | v]
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
            if kind is not None:
                t = t.index_select(dim, axis_index(kind, plan, j, cfg))
        out[name] = t.detach().clone()
    return out


def full_plan(cfg, layers):
    """Keep every channel, neuron and head of the given layers."""
    n = len(layers)
    return Plan(list(layers), torch.arange(cfg.n_embd), [torch.arange(mlp_hidden(cfg))] * n,
                [torch.arange(cfg.n_head)] * n, [torch.arange(n_kv_heads(cfg))] * n)


def build(cfg, state):
    model = GPT(cfg)
    model.load_state_dict(state)   # strict: every tensor must be there with the small model's shape
    return model.eval()


# ----------------------------------------------------------------------------------------------
# step 1: important layers

def first_last_layers(n_src, k):
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
    skipped_cfg = dataclasses.replace(cfg, n_layer=cfg.n_layer - 1)
    deltas = []
    for skip in range(cfg.n_layer):
        keep = [i for i in range(cfg.n_layer) if i != skip]
        skipped = build(skipped_cfg, extract(state, cfg, full_plan(cfg, keep)))
        deltas.append(calibration_loss(skipped, batches) - base)
    return torch.tensor(deltas)


def choose_layers(model, k, method, batches=None):
    """The k source layers to keep (in order), by 'first_last' or by the 'loss' ranking."""
    n = model.config.n_layer
    if k == n:
        return list(range(n))
    if method == "first_last":
        return first_last_layers(n, k)
    if method == "loss":
        return sorted(top_k(layer_importance(model, batches), k).tolist())
    raise ValueError(f"unknown layer selection '{method}' (fix: --layers={' or '.join(LAYER_METHODS)})")


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
        raise ValueError(f"unknown neuron criterion '{criterion}' (fix: --neurons={' or '.join(NEURON_CRITERIA)})")
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


def structure_scores(elem, cfg):
    """Sum the per-weight importances over each structure: residual channels, and per layer the FFN neurons,
    query heads and key/value heads."""
    hd, n_kv, L = head_dim(cfg), n_kv_heads(cfg), cfg.n_layer
    scores = {CH: torch.zeros(cfg.n_embd), FFN: [torch.zeros(mlp_hidden(cfg)) for _ in range(L)],
              "q": [torch.zeros(cfg.n_head) for _ in range(L)], "kv": [torch.zeros(n_kv) for _ in range(L)]}
    for name, e in elem.items():
        layer, axes = tensor_axes(name, cfg)
        for dim, kind in enumerate(axes):
            if kind is None:
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
    group, new_group = src.n_head // n_kv_heads(src), dst.n_head // n_kv_heads(dst)
    kv_heads = top_k(kv + q.view(-1, group).sum(1), n_kv_heads(dst))
    q_heads = torch.cat([g * group + top_k(q[g * group:(g + 1) * group], new_group) for g in kv_heads.tolist()])
    return q_heads, kv_heads


def width_plan(scores, src, dst):
    """Keep the top-scored channels, FFN neurons and heads for the small shape dst (same depth as src)."""
    heads = [choose_heads(q, kv, src, dst) for q, kv in zip(scores["q"], scores["kv"])]
    return Plan(list(range(src.n_layer)), top_k(scores[CH], dst.n_embd),
                [top_k(s, mlp_hidden(dst)) for s in scores[FFN]], [h[0] for h in heads], [h[1] for h in heads])


# ----------------------------------------------------------------------------------------------
# the whole recipe

def same_width(a, b):
    return (a.n_embd, a.n_head, n_kv_heads(a), mlp_hidden(a)) == (b.n_embd, b.n_head, n_kv_heads(b), mlp_hidden(b))


def inherit(model, dst, layers="first_last", neurons="taylor", batches=None):
    """(small GPT with config dst, Plan in source indices): paper 003 3.2, important layers first, then the
    important neurons, heads and channels of the depth-pruned model."""
    src = model.config
    check_supported(src)
    if layers not in LAYER_METHODS:
        raise ValueError(f"unknown layer selection '{layers}' (fix: --layers={' or '.join(LAYER_METHODS)})")
    if neurons not in NEURON_CRITERIA:
        raise ValueError(f"unknown neuron criterion '{neurons}' (fix: --neurons={' or '.join(NEURON_CRITERIA)})")
    keep = choose_layers(model, dst.n_layer, layers, batches)
    deep_cfg = dataclasses.replace(src, n_layer=dst.n_layer)
    deep = build(deep_cfg, extract(clean_state_dict(model.state_dict()), src, full_plan(src, keep)))
    if same_width(deep_cfg, dst):
        plan = full_plan(deep_cfg, range(dst.n_layer))
    else:
        plan = width_plan(structure_scores(element_importance(deep, neurons, batches), deep_cfg), deep_cfg, dst)
    small = build(dst, extract(deep.state_dict(), deep_cfg, plan))
    plan.layers = keep
    return small, plan


def needs_data(src, dst, layers, neurons):
    return (layers == "loss" and dst.n_layer < src.n_layer) or (neurons == "taylor" and not same_width(src, dst))


def calibration_batches(data_dir, n, batch_size, block_size, seed):
    """n fixed training batches (seeded), as train.py draws them."""
    path = split_path(data_dir, "train")
    if not os.path.isfile(path):
        raise ValueError(f"no calibration data: {path} is missing (fix: --data_dir=<prepared dataset>)")
    gen = torch.Generator()
    batches = []
    for i in range(n):
        gen.manual_seed(seed + i)
        batches.append(get_batch(path, batch_size, block_size, gen))
    return batches


def run(opts):
    """pangu.inherit's command: load --from, build the small model, write out_dir/ckpt.pt. Returns its path."""
    if not opts["from"] or not opts["out_dir"]:
        raise ValueError("both --from (the big model's out_dir) and --out_dir are needed "
                         "(fix: python -m pangu.inherit --from=out-big --out_dir=out-small --n_layer=...)")
    if opts["calib_batches"] < 1:
        raise ValueError(f"calib_batches must be >= 1, got {opts['calib_batches']}")
    if opts["num_threads"] > 0:
        torch.set_num_threads(opts["num_threads"])
    model, ckpt = load_model(opts["from"], "cpu")
    if os.path.abspath(os.path.dirname(ckpt["path"])) == os.path.abspath(opts["out_dir"]):
        raise ValueError(f"--out_dir={opts['out_dir']} is the source's folder (fix: pick a new --out_dir)")
    src = model.config
    check_supported(src)
    dst = target_config(src, opts["n_layer"], opts["n_embd"], opts["n_head"], opts["n_kv_head"],
                        opts["mlp_hidden"], opts["mlp_ratio"])
    batches = None
    if needs_data(src, dst, opts["layers"], opts["neurons"]):
        data_dir = opts["data_dir"] or ckpt.get("data_dir", "")
        bs = opts["calib_batch_size"] or (ckpt.get("config") or {}).get("batch_size", 8)
        batches = calibration_batches(data_dir, opts["calib_batches"], bs, src.block_size, opts["seed"])
    torch.manual_seed(opts["seed"])
    small, plan = inherit(model, dst, opts["layers"], opts["neurons"], batches)
    report(model, small, plan, batches)
    info = dict(source=ckpt["path"], layers_method=opts["layers"], neurons=opts["neurons"], layers=plan.layers,
                channels=plan.channels.tolist(), ffn=[t.tolist() for t in plan.ffn],
                q_heads=[t.tolist() for t in plan.q_heads], kv_heads=[t.tolist() for t in plan.kv_heads])
    args = dataclasses.asdict(dst)
    config = dict(ckpt.get("config") or {}, **args, out_dir=opts["out_dir"], init_from=ckpt["path"])
    out = {"model": small.state_dict(), "model_args": args, "optimizer": None, "scaler": None, "iter_num": 0,
           "best_val_loss": float("inf"), "config": config, "rng": None, "dataset": ckpt.get("dataset", ""),
           "data_dir": ckpt.get("data_dir", ""), "inherit": info}
    os.makedirs(opts["out_dir"], exist_ok=True)
    path = os.path.join(opts["out_dir"], CKPT_NAME)
    atomic_save(out, path)
    print(f"wrote {path} (continue with: python train.py ... --init_from={path})")
    return path


def report(big, small, plan, batches):
    c, s = big.config, small.config
    print(f"source: {c.n_layer} layers, n_embd {c.n_embd}, {c.n_head} heads ({n_kv_heads(c)} kv), FFN {mlp_hidden(c)}, "
          f"{big.get_num_params(False) / 1e6:.3f}M params")
    print(f"small:  {s.n_layer} layers, n_embd {s.n_embd}, {s.n_head} heads ({n_kv_heads(s)} kv), FFN {mlp_hidden(s)}, "
          f"{small.get_num_params(False) / 1e6:.3f}M params; source layers kept: {plan.layers}")
    if batches:
        print(f"calibration loss: source {calibration_loss(big, batches):.4f}, "
              f"inherited {calibration_loss(small, batches):.4f} "
              f"(random init ~ ln(vocab) = {math.log(c.vocab_size):.4f})")


def main(argv=None):
    return run_command(run, DEFAULTS, argv, errors=ValueError)   # ValueError: bad sizes or methods, see above


if __name__ == "__main__":
    main()
