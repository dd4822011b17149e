"""
The models a benchmark measures, one "entry" each: {name, args (GPTConfig kwargs), batch_size}, built from a
variants/ preset or a train.py config file, with the command line's model overrides and --scale applied.
Used by tools/bench.py and tools/plan.py (config_file_model).
"""

import os

from model import GPTConfig
from prepare import DATASETS
from safety_net.build import check_mlp_ratio_applies, check_model_keys_read, check_optional_types, gpt_config_defaults
from safety_net.build import load_variant
from safety_net.build import model_args
from safety_net.checkpoint import CKPT_NAME, LAST_NAME, is_hf_source, load_checkpoint
from safety_net.configurator import UserError, load_config
from safety_net.dataset import dataset_vocab_size, default_data_dir
from safety_net.text_dataset import tool_command


def variant_entry(name, cfg, cli_model):
    args = gpt_config_defaults()
    args.update(load_variant(name))
    return finish_entry(name, args, cfg, cli_model, None)


def config_file_model(path):
    """(GPTConfig keyword arguments, train.py's config) of the model a train.py config file trains, in train.py's
    order: GPTConfig's defaults <- the checkpoint it starts from (starting_args) <- its variant <- the vocab_size
    (resume: the checkpoint's; else the dataset's, refused in one line before the dataset is prepared unless the
    file sets vocab_size) <- the file's model keys. Used by tools.bench and tools.plan."""
    import train
    tcfg, texplicit = load_config(train.DEFAULTS, [path])
    base = starting_args(tcfg, path)
    if tcfg["init_from"] == "resume":
        vocab = base["vocab_size"]
    else:
        vocab = dataset_vocab_size(tcfg)   # as train.py: the dataset's vocab
    if vocab is None and "vocab_size" not in texplicit:   # else GPTConfig's 50304: another model's size
        how = tool_command(tcfg["dataset"])   # wikitext103, shakespeare_v4096: a tool's, which takes no --input
        if how is None:
            how = f"python prepare.py {tcfg['dataset']}"
            if tcfg["dataset"] not in DATASETS:   # prepare.py knows no text by that name: it needs yours (a hunt)
                how += " --input=YOUR_TEXT.txt"
        raise UserError(f"{path}: its dataset {default_data_dir(tcfg)} is not prepared, so the vocab_size that sizes "
                        f"its model is unknown (fix: {how}, from this folder, or set vocab_size)")
    return model_args(tcfg, texplicit, base=base, vocab_size=vocab), tcfg


def starting_args(tcfg, path):
    """The model_args of the checkpoint a config file's run starts from (init_from: resume, out_dir's last.pt else
    ckpt.pt; or a checkpoint file, read lazily), None from scratch. A Hugging Face start is one line: its size is
    known only once imported, which is train.py's work."""
    init_from = tcfg["init_from"]
    if init_from == "scratch":
        return None
    if is_hf_source(init_from):
        raise UserError(f"{path}: init_from={init_from} is a Hugging Face model, whose size is known only once it is "
                        f"imported (fix: python -m tools.huggingface.convert import {init_from} --out=model.pt, then "
                        f"init_from='model.pt' in the file)")
    if init_from == "resume":
        ckpt = load_checkpoint(tcfg["out_dir"], prefer=(LAST_NAME, CKPT_NAME), mmap=True)
    else:
        ckpt = load_checkpoint(init_from, mmap=True)
    return ckpt["model_args"]


def file_entry(path, cfg, cli_model, batch_explicit):
    """One model from a train.py config file (config_file_model)."""
    args, tcfg = config_file_model(path)
    batch = None if batch_explicit else tcfg.get("batch_size")
    return finish_entry(os.path.splitext(os.path.basename(path))[0], args, cfg, cli_model, batch)


def finish_entry(name, args, cfg, cli_model, batch):
    if cfg["scale"] != 1 or cfg["depth_scale"] not in (0, 1):
        args = scale_args(args, cfg["scale"], cfg["depth_scale"] or cfg["scale"])
    check_mlp_ratio_applies(args, cli_model)
    args.update(cli_model)  # explicit overrides win over presets and scaling
    check_model_keys_read(args, cli_model)
    check_optional_types(args)
    try:
        GPTConfig(**args)
    except ValueError as e:
        raise UserError(f"{name}: {e} (fix: correct the model keys)") from None
    return dict(name=name, args=args, batch_size=batch or cfg["batch_size"])


# --- scaling big presets down to CPU size --------------------------------------------------------

# every GPTConfig field as scale_args treats it (tests/test_plan.py fails on a field missing here, and on a depth
# field depth_args does not scale): times the width scale, times the depth scale, or kept (heads, ratios, choices,
# rates, the vocabulary and the context)
WIDTH_FIELDS = ("n_embd", "mlp_hidden", "embd_factor_dim")
DEPTH_FIELDS = ("n_layer", "n_attn_layers", "n_top_attn_layers", "share_from_layer", "shrink_every")
KEPT_FIELDS = ("block_size", "vocab_size", "n_head", "n_kv_head", "dropout", "bias", "norm", "norm_eps",
               "norm_placement", "pos_embedding", "rope_base", "mlp_type", "activation", "mlp_ratio",
               "tie_embeddings", "head_bias", "share_group_size", "share_sublayers", "enhanced_residual",
               "residual_logit_init", "think_steps", "think_eta", "think_memory", "n_branches", "shrink_layer",
               "shrink_kernel", "init_scheme", "init_std")


def scale_args(args, width_scale, depth_scale):
    """Shrink width by width_scale and depth by depth_scale, keeping the preset's structure (heads,
    GQA ratio, ShishuLM's attention/MLP-only split, sharing groups, lgpt's number of halvings); the nearest
    valid configuration is taken."""
    args = dict(depth_args(args, depth_scale))
    return width_args(args, width_scale)


def _valid(args):
    try:
        GPTConfig(**args)
        return True
    except ValueError:
        return False


def _nearest(target, lo=1, span=4096):
    """Integers >= lo ordered by distance to target (ties: the smaller first)."""
    base = int(round(target))
    return sorted(range(max(lo, base - span), base + span + 1), key=lambda x: (abs(x - target), x))


def depth_args(args, s):
    """n_layer * s, and for ShishuLM-like presets n_attn_layers (and share_from_layer) in proportion;
    the attention split gives way first, so models compared side by side keep the same depth."""
    if s == 1:
        return args
    n0, a0 = args["n_layer"], args.get("n_attn_layers")
    top0 = args.get("n_top_attn_layers", 0)
    same_start = a0 is not None and args.get("share_from_layer") == a0
    for n in _nearest(n0 * s, lo=args.get("n_branches", 1), span=n0):
        top = max(1, round(top0 * n / n0)) if top0 else 0
        attn_options = [None] if a0 is None else _nearest(a0 * n / n0, lo=0, span=n)
        for a in attn_options:
            if a is not None and a + top > n:
                continue
            cand = dict(args, n_layer=n, n_attn_layers=a, n_top_attn_layers=top)
            if args.get("shrink_every"):   # as many halvings: a shrink after every k layers but the last
                cand["shrink_every"] = max(1, round(args["shrink_every"] * n / n0))
            if same_start:
                cand["share_from_layer"] = a
            elif args.get("share_from_layer"):
                cand["share_from_layer"] = round(args["share_from_layer"] * n / n0)
            if _valid(cand):
                return cand
    raise UserError(f"no valid depth near {n0 * s:.1f} layers (fix: pass --n_layer explicitly)")


def width_args(args, s):
    if s == 1:
        return args
    w0, head = args["n_embd"], args["n_head"]
    for mult in _nearest(w0 * s / head, span=w0):
        w = mult * head
        cand = dict(args, n_embd=w)
        for key in WIDTH_FIELDS[1:]:
            if args.get(key):
                cand[key] = max(1, round(args[key] * w / w0))
        if _valid(cand):
            return cand
    raise UserError(f"no valid width near {w0 * s:.0f} (fix: pass --n_embd explicitly)")


if __name__ == "__main__":   # run as a command, it would do nothing
    raise SystemExit("error: tools.benchmarks.entries is a library, not a command (fix: the commands are in docs/reference.md)")
