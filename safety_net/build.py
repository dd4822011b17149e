"""
The model a config or a checkpoint describes: GPTConfig's arguments for the tools and tests (model_args: the
defaults <- a variant <- the keys set; train.py builds its own in setup), GPTConfig and GPT built with one-line
errors (model_config, build_model), refused before anything is built when it has too many layers or cannot fit
this machine's memory; a built model's depth in words (depth_summary).
"""

import difflib
import os

from safety_net.configurator import UserError


def model_config(model_args, source=None, device="cpu"):
    """GPTConfig(**model_args) with a one-line error for arguments this model.py refuses or does not know,
    or for a size it cannot build on `device` in reasonable time or memory (check_layer_count, check_memory).
    source: the checkpoint they come from (None: the user's config)."""
    from model import GPTConfig
    unknown = sorted(set(model_args) - set(gpt_config_defaults()))
    if unknown and source is not None:   # dropping them would build another model
        raise UserError(f"{source} has model_args this model.py does not know: {', '.join(unknown)} (a "
                        f"checkpoint of another code version) (fix: use the code version that wrote it)")
    check_layer_count(model_args)   # before GPTConfig, which lists every layer's width
    check_optional_types(model_args)
    try:
        config = GPTConfig(**model_args)
    except (TypeError, ValueError) as e:
        reason = str(e) if len(str(e)) <= 300 else str(e)[:297] + "..."   # e.g. a list of 1000 widths
        if source is None:
            raise UserError(f"invalid model configuration: {reason} (fix: correct the model keys)") from None
        raise UserError(f"the model_args of {source} do not fit this model.py: {reason} "
                        f"(fix: use the code version that wrote the checkpoint)") from None
    check_memory(config, device)
    return config


def check_optional_types(model_args):
    """One line for a GPTConfig field typed Optional[T] (n_kv_head, mlp_hidden, embd_factor_dim, n_attn_layers:
    Optional[int]) that holds neither None nor a T: the configurator takes any value for a key whose default is
    None, and True would build a model with one hidden unit, 4.5 fail with a traceback."""
    import dataclasses
    from model import GPTConfig
    for field in dataclasses.fields(GPTConfig):
        value = model_args.get(field.name)
        kind = optional_kind(field.type)
        if kind is None or fits(kind, value):
            continue
        what = "a whole number" if kind is int else f"a {kind.__name__}"
        raise UserError(f"{field.name}={value!r}: expected {what} or None (fix: e.g. --{field.name}=2, or leave "
                        f"it out for the default)")


def optional_kind(field_type):
    """T of a type Optional[T] (or T | None), else None."""
    import types
    import typing
    kinds = [t for t in typing.get_args(field_type) if t is not type(None)]
    if typing.get_origin(field_type) not in (typing.Union, types.UnionType) or len(kinds) != 1:
        return None
    return kinds[0]


def fits(kind, value):
    """Whether value is None or a `kind`: a bool is no number, an int is a float."""
    if value is None:
        return True
    if isinstance(value, bool) and kind is not bool:
        return False
    if kind is float:
        return isinstance(value, (int, float))
    return isinstance(value, kind)


def build_model(model_args, device="cpu", source=None):
    """GPT(GPTConfig(**model_args)), with model_config's one-line errors."""
    from model import GPT
    return GPT(model_config(model_args, source, device)).to(device)


MAX_LAYERS = 1000   # our limit: building a layer takes 10-20 ms on a 2-core CPU (1000: 10-20 s); presets have <= 60


def check_layer_count(model_args):
    """One line for a model of more than MAX_LAYERS layers. What GPTConfig refuses (negative, mistyped sizes) is
    left to its own message."""
    n_layer = model_args.get("n_layer", gpt_config_defaults()["n_layer"])
    if isinstance(n_layer, int) and n_layer > MAX_LAYERS:
        raise UserError(f"n_layer={n_layer:,}: more than {MAX_LAYERS:,} layers take too long to build (about 15 ms "
                        f"a layer on a CPU) (fix: --n_layer={MAX_LAYERS} or fewer)")


def check_memory(config, device="cpu"):
    """One line, before anything is built on a real device (not "meta"), for a model whose weights cannot fit
    this machine's memory: at least 4 bytes for each of the embedding's and the unique FFN layers' weights
    (weights_lower_bound) against the physical memory."""
    if str(device) == "meta":
        return
    weights = weights_lower_bound(config)
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if 4 * weights > memory:
        raise UserError(f"this model has at least {weights:,} weights: {4 * weights / 2**30:,.0f} GiB in float32, "
                        f"more than this machine's {memory / 2**30:,.0f} GiB of memory (fix: lower --n_layer, "
                        f"--n_embd or --vocab_size)")


def check_batch_memory(config, batch_size, device, training=True, eval_iters=0, dtype="float32"):
    """One line, before out_dir changes, for a micro-batch whose step cannot fit this machine's memory on a CPU,
    where the kernel kills the process without a word (a GPU's allocator refuses in one line: train.py). What a
    step needs is counted low (batch_bytes_lower_bound): a batch refused cannot fit, while one a little smaller
    than the bound may still not. Also for estimate_loss's vector of eval_iters float32 losses, first."""
    if not str(device).startswith("cpu"):
        return
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if 4 * eval_iters > memory:
        raise UserError(f"--eval_iters={eval_iters} needs {4 * eval_iters / 2**30:,.0f} GiB for its vector of losses "
                        f"alone, more than this machine's {memory / 2**30:,.0f} GiB of memory (fix: a smaller "
                        f"--eval_iters, e.g. the default 200)")
    needed = batch_bytes_lower_bound(config, batch_size, training, dtype)
    if needed > memory:
        raise UserError(f"a micro-batch of {batch_size} x {config.block_size} tokens needs at least "
                        f"{needed / 2**30:,.0f} GiB for its logits and activations, more than this machine's "
                        f"{memory / 2**30:,.0f} GiB of memory (fix: lower --batch_size and raise "
                        f"--gradient_accumulation_steps, or lower --block_size)")


def batch_bytes_lower_bound(config, batch_size, training=True, dtype="float32"):
    """check_batch_memory's bound, in bytes: per token, the logits (in dtype) and their float32 log-softmax (the
    loss's); training, also what each layer keeps for the backward, at least: its FFN's input and its norm's
    input (2 x width) and one hidden activation; with attention, also its norm's input and output, the queries
    and the attention's output (4 x width), in every branch and every Deep Thinking pass. Activations count 2
    bytes under bf16 or fp16 autocast, else 4."""
    value = 4 if dtype == "float32" else 2
    per_token = (value + 4) * config.vocab_size
    if training:
        # the values a token keeps in the layers of one branch, one pass; the layers with attention counted
        # here, not by config.attention_layers(): called here, it would run in every quickstart and count in
        # model.py's plain-GPT path (tools.technique_lines gpt)
        widths = config.widths()
        n_attention = len(widths)
        if config.n_attn_layers is not None:   # ShishuLM
            n_attention = config.n_attn_layers + config.n_top_attn_layers
        kept = 4 * min(widths) * n_attention
        for width in widths:
            hidden = config.mlp_hidden or int(config.mlp_ratio * width)
            kept += 2 * width + hidden
        per_token += value * kept * config.n_branches * (config.think_steps + 1)
    return batch_size * config.block_size * per_token


def weights_lower_bound(config):
    """A lower bound of the model's parameters, from its GPTConfig alone (nothing built): the token embedding and
    the FFN matrices of its unique layers (at least two of width x hidden each, as MLP sizes them)."""
    widths = config.widths()
    hidden = [config.mlp_hidden or int(config.mlp_ratio * w) for w in widths]
    ffn = sum(2 * w * h for w, h in zip(widths, hidden)) * config.n_branches // config.share_group_size
    # n_embd * n_branches spelled out: embd_width() called here would run in every quickstart and count in
    # model.py's plain-GPT path (tools.technique_lines gpt)
    embedding = config.vocab_size * (config.embd_factor_dim or config.n_embd * config.n_branches)
    return ffn + embedding


def depth_summary(model):
    """Effective depth vs unique weights, e.g. '60 layers applied, from 30 unique attention and 30 unique FFN
    sub-layers'."""
    stack = model.branches[0]
    branches = ""
    if model.config.n_branches > 1:
        branches = f" x {model.config.n_branches} branches"
    passes = ""
    if model.config.think_steps:
        passes = f", {model.config.think_steps + 1} passes (Deep Thinking)"
    layers = model.config.n_layer // model.config.n_branches   # per branch
    return (f"{layers} layers applied{branches}, from {len(stack.attn)} unique attention and "
            f"{len(stack.mlp)} unique FFN sub-layers{passes}")


# --- GPTConfig's arguments: defaults, a variant, the keys set -------------------------------------------

def gpt_config_defaults():
    """{field: default} for every GPTConfig field."""
    import dataclasses
    from model import GPTConfig
    return {f.name: f.default for f in dataclasses.fields(GPTConfig)}


def load_variant(name, fields=None):
    """variants.load(name) as a dict of GPTConfig fields, with one-line errors."""
    import variants
    names = variants.available()
    listing = ", ".join(names) if names else "none found"
    if name not in names:
        close = difflib.get_close_matches(str(name), names, n=1)   # --variants=1: a number (a hunt)
        hint = f"did you mean --variant={close[0]}? " if close else ""
        raise UserError(f"unknown variant '{name}' (fix: {hint}use one of: {listing})")
    try:
        cfg = dict(variants.load(name))
    except (KeyError, ValueError, ImportError) as e:
        raise UserError(f"unknown variant '{name}': {e} (fix: use one of: {listing})") from None
    if fields is None:
        fields = gpt_config_defaults()
    bad = sorted(k for k in cfg if k not in fields)
    if bad:
        raise UserError(f"variant '{name}' sets unknown model keys {bad} (fix: edit variants/{name}.py)")
    return cfg


def model_args(config, explicit, base=None, vocab_size=None):
    """GPTConfig keyword arguments: base (default: GPTConfig defaults) <- variant <- explicitly-set keys.
    base: the arguments to start from instead of GPTConfig's defaults (tools.executorch.bench: its llama_10m
    shape); vocab_size (the dataset's, from meta.json) replaces the preset's unless the user set vocab_size."""
    fields = gpt_config_defaults()
    args = dict(fields)
    if base:
        args.update({k: v for k, v in base.items() if k in fields})
    name = config.get("variant", "")
    if name:
        args.update(load_variant(name, fields))
    if vocab_size is not None:
        args["vocab_size"] = vocab_size
    given = {k: config[k] for k in explicit if k in fields}
    check_mlp_ratio_applies(args, given)
    args.update(given)
    check_model_keys_read(args, given)
    return args


def check_model_keys_read(args, given):
    """One line for a model key the user set (`given`) that the model of `args` (given applied) never reads: it
    acts only under another field, which is off (tools/support.py's DEPENDS), so it was accepted and changed
    nothing (a hunt). Not the sharing keys: --share_group_size=1 unshares a ShishuLM preset, which keeps its
    share_from_layer. train.py (StartingPoint.check_model), model_args, tools.plan and tools.bench ask it."""
    # key: (whether the field it acts under is on, that technique, the flag that turns it on)
    acts_under = {
        "rope_base": (args["pos_embedding"] == "rope", "RoPE", "--pos_embedding=rope"),
        "think_eta": (args["think_steps"] > 0, "Deep Thinking", "--think_steps=3"),
        "think_memory": (args["think_steps"] > 0, "Deep Thinking", "--think_steps=3"),
        "residual_logit_init": (args["enhanced_residual"], "the enhanced residual", "--enhanced_residual=True"),
        "shrink_layer": (args["shrink_every"] > 0, "lgpt/cgpt's width halving", "--shrink_every=2"),
    }
    defaults = gpt_config_defaults()
    for key in sorted(set(given) & set(acts_under)):
        on, technique, flag = acts_under[key]
        if not on and given[key] != defaults[key]:   # (a tool may hand over every key, at its default)
            raise UserError(f"{key}={given[key]!r} is read only with {technique} ({flag}), which this model does "
                            f"not use (fix: drop {key}, or add {flag})")


def check_mlp_ratio_applies(args, given):
    """One line when `given` (the model keys the user set) changes mlp_ratio from its value in `args` (what they
    apply over: GPTConfig's defaults, a checkpoint's, a preset's) but an mlp_hidden, given too or in args, sizes the
    FFN (GPTConfig: mlp_hidden None = mlp_ratio * width): `--variant=baseline --mlp_ratio=2` trained baseline's
    FFN without a word (a hunt). train.py (StartingPoint.check_model), model_args (tools.compare, tools.bench,
    tools.plan) and tools.bench's presets ask it."""
    hidden = given.get("mlp_hidden", args.get("mlp_hidden"))
    if given.get("mlp_ratio", args["mlp_ratio"]) != args["mlp_ratio"] and hidden is not None:
        raise UserError(f"mlp_ratio={given['mlp_ratio']} changes nothing: mlp_hidden={hidden} sizes the FFN (fix: "
                        f"set mlp_hidden=None too, to size it by mlp_ratio, or drop mlp_ratio)")
