"""
Config files + command-line overrides, shared by every script (train.py, sample.py, eval.py, bench.py,
compare.py, prepare.py, pangu/), and the one exception type for bad input, UserError.

    python train.py config/gpt_shakespeare_cpu.py --n_layer=6 --dropout 0.1

Positional arguments are config files: plain python, executed in order; their top-level assignments
(names not starting with '_') set config keys. Then every `--key=value` / `--key value` override is
applied, so the command line always wins over config files. Values are parsed with ast.literal_eval
(falling back to the raw text) and must match the type of the key's default.

Bad input never produces a traceback in scripts: every check raises UserError (a ValueError) with a
one-line message naming the problem and the fix; only the scripts' main() turns it into
`error: ...` and a non-zero exit code.

Model variants: a config key `variant = "lgpt"` selects variants/lgpt.py. The model arguments are
    GPTConfig defaults  <-  variants.load(variant)  <-  model keys set explicitly (files or CLI)
which is what model_args() computes; that is why load_config also returns the explicitly-set keys.
train.py's own checks live here too: check_train_config (its values) and train_model_args (its model:
fresh, resumed or from a checkpoint).
"""

import argparse
import ast
import dataclasses
import difflib
import importlib
import math
import os
import pkgutil
import sys


class UserError(ValueError):
    """Bad input from the user (config, data, checkpoint, paths). The message is one line that names the
    problem and ends with `(fix: ...)`; entry points print it as `error: <message>` and exit non-zero."""


class ArgumentParser(argparse.ArgumentParser):
    """argparse for the tools that use it (prepare.py, huggingface.convert): a bad argument is the same
    one-line `error: ... (fix: ...)` as every other bad input, not argparse's usage block."""

    def error(self, message):
        raise SystemExit(f"error: {message} (fix: see `{self.prog} --help`)")


def load_config(defaults, argv, bool_flags=()):
    """defaults: dict of every known key -> default value. argv: e.g. sys.argv[1:]. bool_flags: boolean keys
    that may also be given bare (`--no_kv_cache` means `--no_kv_cache=True`).
    Returns (config, explicit): the final dict and the set of keys set by config files or the CLI."""
    if any(a in ("-h", "--help") for a in argv):
        print(usage(defaults))
        raise SystemExit(0)
    config = dict(defaults)
    explicit = set()
    files, overrides = _split_argv(expand_bool_flags(list(argv), bool_flags))
    for path in files:
        for key, value in _read_config_file(path, config).items():
            config[key] = _check_value(key, value, defaults, source=path)
            explicit.add(key)
    for key, text in overrides:
        key = _check_key(key.replace("-", "_"), defaults, source="on the command line")
        config[key] = _parse_override(key, text, defaults[key])
        explicit.add(key)
    return config, explicit


def run_command(command, defaults, argv=None, bool_flags=(), errors=UserError):
    """A script's whole main(): the config from argv (sys.argv[1:] when None), then command(config). Bad input
    (`errors`, UserError by default) ends here as one line `error: ...` and exit code 1; nowhere else."""
    try:
        config, _ = load_config(defaults, sys.argv[1:] if argv is None else list(argv), bool_flags)
        return command(config)
    except errors as e:
        raise SystemExit(f"error: {e}") from None


def expand_bool_flags(argv, flags):
    """Turn a bare `--flag` into `--flag=True` for the given boolean keys. `--key value` pairs are read as
    one setting, so a bare `--no_kv_cache` would swallow the next argument (or fail when it is the last
    one); `--flag True|False|1|0` and `--flag=...` are left unchanged."""
    out = []
    for i, arg in enumerate(argv):
        key = arg[2:].replace("-", "_") if arg.startswith("--") else None
        if key in flags:
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            if nxt is None or nxt.lower() not in ("true", "false", "1", "0"):
                arg = f"--{key}=True"
        out.append(arg)
    return out


def usage(defaults):
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)   # set under `python -m pangu.inherit`
    prog = f"-m {spec.name}" if spec is not None else \
        os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "script.py"
    lines = [f"usage: python {prog} [config/file.py ...] [--key=value | --key value ...]", "", "keys (default):"]
    width = max((len(k) for k in defaults), default=0)
    lines += [f"  --{k:<{width}}  {v!r}" for k, v in defaults.items()]
    return "\n".join(lines)


# --- argv ------------------------------------------------------------------------------------------

def _split_argv(argv):
    files, overrides = [], []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("--"):
            body = arg[2:]
            if "=" in body:
                key, text = body.split("=", 1)
            else:
                # `--key value`: the value is the next argument (it may itself start with '-', e.g. -1)
                if i + 1 >= len(argv) or argv[i + 1].startswith("--"):
                    raise UserError(f"missing value for --{body} (fix: write --{body}=VALUE or --{body} VALUE)")
                key, text = body, argv[i + 1]
                i += 1
            if not key:
                raise UserError(f"malformed argument '{arg}' (fix: write --key=value)")
            overrides.append((key, text))
        elif arg.startswith("-") and len(arg) > 1:
            raise UserError(f"unknown option '{arg}' (fix: overrides look like --key=value; see --help)")
        else:
            files.append(arg)
        i += 1
    return files, overrides


def _read_config_file(path, config):
    """Execute a config file and return its top-level assignments. The file sees the current config
    values as globals (so `max_iters = 2 * eval_interval` works), and may import modules."""
    if not os.path.isfile(path):
        hint = " (fix: overrides need two dashes, e.g. --key=value)" if "=" in path else \
            " (fix: check the path; config files live in config/)"
        raise UserError(f"config file '{path}' not found{hint}")
    try:
        with open(path, encoding="utf-8") as f:
            source = f.read()
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) else "it is not UTF-8 text"
        raise UserError(f"cannot read config file {path}: {reason} (fix: save it as a UTF-8 python file)") from None
    try:
        tree = ast.parse(source, filename=path)
    except SyntaxError as e:
        raise UserError(f"syntax error in config file {path} line {e.lineno}: {e.msg} (fix: it must be valid python)") from None
    assigned = _top_level_names(tree)
    namespace = dict(config)
    namespace["__file__"] = os.path.abspath(path)
    try:
        exec(compile(tree, path, "exec"), namespace)
    except Exception as e:  # a config file is user input: report it in one line
        raise UserError(f"config file {path} failed: {type(e).__name__}: {e} (fix: correct the file)") from None
    return {name: namespace[name] for name in assigned if name in namespace}


def _top_level_names(tree):
    """Names bound by top-level assignment statements (in order), skipping private '_names'."""
    names = []

    def add_target(t):
        if isinstance(t, ast.Name):
            if not t.id.startswith("_") and t.id not in names:
                names.append(t.id)
        elif isinstance(t, (ast.Tuple, ast.List)):
            for elt in t.elts:
                add_target(elt)

    for node in tree.body:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                add_target(target)
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            add_target(node.target)
    return names


# --- keys and values -------------------------------------------------------------------------------

def _check_key(key, defaults, source):
    if key in defaults:
        return key
    close = difflib.get_close_matches(key, list(defaults), n=3, cutoff=0.6)
    hint = f"did you mean {' or '.join('--' + c for c in close)}?" if close else "see --help for the list of keys"
    if source != "on the command line":
        hint += "; helper variables in config files must start with '_'"
    raise UserError(f"unknown config key '{key}' {source} (fix: {hint})")


def _check_value(key, value, defaults, source):
    """Type-check a python value (from a config file) against the key's default."""
    _check_key(key, defaults, f"in {source}")
    ok, value = _coerce(value, defaults[key])
    if not ok:
        raise UserError(f"{source}: {key} = {value!r} is a {type(value).__name__}, expected "
                          f"{_type_name(defaults[key])} (fix: e.g. {key} = {defaults[key]!r})")
    return value


def _parse_override(key, text, default):
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        value = text
    if isinstance(default, str):
        # any text is fine for a string key; quotes are optional (--init_from=resume == --init_from="'resume'")
        return value if isinstance(value, str) else text
    if isinstance(default, bool) and isinstance(value, str) and value.lower() in ("true", "false"):
        value = value.lower() == "true"
    ok, coerced = _coerce(value, default)
    if not ok:
        raise UserError(f"--{key}={text}: expected {_type_name(default)} (fix: e.g. --{key}={default!r})")
    return coerced


def _coerce(value, default):
    """(ok, value converted to the default's type)."""
    if default is None:
        return True, value
    if isinstance(default, bool):
        if isinstance(value, bool):
            return True, value
        if isinstance(value, int) and value in (0, 1):
            return True, bool(value)
        return False, value
    if isinstance(default, int):
        return (isinstance(value, int) and not isinstance(value, bool)), value
    if isinstance(default, float):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return True, float(value)
        return False, value
    if isinstance(default, (list, tuple)):
        if isinstance(value, (list, tuple)):
            return True, type(default)(value)
        return False, value
    return isinstance(value, type(default)), value


def _type_name(default):
    if isinstance(default, bool):
        return "a bool (True/False/1/0)"
    if isinstance(default, float):
        return "a number"
    if isinstance(default, int):
        return "an integer"
    return f"a {type(default).__name__}"


# --- train.py's values -----------------------------------------------------------------------------

# seeds of train.py and sample.py: numpy's range (train.py also seeds it); a larger one used to end in torch's
# "Overflow when unpacking long long" traceback
MAX_SEED = 2**32


def check_train_config(c, world=1):
    """train.py's keys: fill the schedule's None defaults and refuse values that make no sense, naming the
    key. world: the number of DDP ranks. Runs before anything is read or written."""
    def need(ok, key, rule, fix):
        if not ok:
            raise UserError(f"{key} must be {rule}, got {c[key]!r} (fix: {fix})")

    def integer(v):
        return isinstance(v, int) and not isinstance(v, bool)

    def number(v):
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)

    for key in ("batch_size", "eval_interval", "log_interval", "eval_iters", "gradient_accumulation_steps"):
        need(integer(c[key]) and c[key] >= 1, key, "an integer >= 1", f"--{key}=1 or more")
    for key in ("max_iters", "num_threads"):
        need(integer(c[key]) and c[key] >= 0, key, "an integer >= 0", f"--{key}=0 or more")
    need(integer(c["seed"]) and 0 <= c["seed"] < MAX_SEED, "seed", f"an integer in [0, {MAX_SEED - 1}]", "--seed=1337")
    need(number(c["learning_rate"]) and c["learning_rate"] > 0, "learning_rate", "> 0", "--learning_rate=1e-3")
    need(number(c["weight_decay"]) and c["weight_decay"] >= 0, "weight_decay", ">= 0", "--weight_decay=0.1")
    for key, usual in (("beta1", 0.9), ("beta2", 0.95)):
        need(number(c[key]) and 0 <= c[key] < 1, key, "in [0, 1)", f"--{key}={usual}")
    need(number(c["grad_clip"]) and c["grad_clip"] >= 0, "grad_clip", ">= 0 (0 = off)", "--grad_clip=1.0")
    c["lr_decay_iters"] = c["max_iters"] if c["lr_decay_iters"] is None else c["lr_decay_iters"]
    need(number(c["lr_decay_iters"]) and c["lr_decay_iters"] >= 0, "lr_decay_iters", "a number >= 0",
         f"--lr_decay_iters={c['max_iters']}")
    c["min_lr"] = c["learning_rate"] / 10 if c["min_lr"] is None else c["min_lr"]
    need(number(c["min_lr"]) and 0 <= c["min_lr"] <= c["learning_rate"], "min_lr",
         f"in [0, learning_rate={c['learning_rate']:g}]", f"--min_lr={c['learning_rate'] / 10:g}")
    c["warmup_iters"] = min(100, int(c["lr_decay_iters"]) // 10) if c["warmup_iters"] is None else c["warmup_iters"]
    need(integer(c["warmup_iters"]) and 0 <= c["warmup_iters"] <= (c["lr_decay_iters"] if c["decay_lr"] else math.inf),
         "warmup_iters", f"an integer in [0, lr_decay_iters={c['lr_decay_iters']}]",
         f"--warmup_iters={int(c['lr_decay_iters']) // 10}, or leave it out: it defaults to min(100, lr_decay_iters // 10)")
    accum = c["gradient_accumulation_steps"]
    if accum % world:
        raise UserError(f"gradient_accumulation_steps={accum} must be divisible by the {world} DDP ranks; each "
                        f"rank runs gradient_accumulation_steps/{world} micro-steps "
                        f"(fix: --gradient_accumulation_steps={max(world, accum // world * world)})")
    need(c["dataset"] != "", "dataset", "a dataset name", "--dataset=shakespeare_char")
    need(c["out_dir"] != "", "out_dir", "a folder", "--out_dir=out")
    from huggingface.convert import is_hf_dir
    if c["init_from"] not in ("scratch", "resume") and not os.path.exists(c["init_from"]):
        raise UserError(f"init_from '{c['init_from']}' does not exist (fix: write it first, e.g. with train.py or "
                        f"pangu.inherit as its config says, or --init_from=scratch)")
    need(c["init_from"] in ("scratch", "resume") or os.path.isfile(c["init_from"]) or is_hf_dir(c["init_from"]),
         "init_from", "'scratch', 'resume', an existing checkpoint file or a Hugging Face model directory",
         "--init_from=scratch|resume|path/to/ckpt.pt|path/to/hf-dir")


# --- processes, 'auto' device and dtype -------------------------------------------------------------

def distributed_env():
    """(rank, local_rank, world_size) from torchrun's environment, or None when not launched by it."""
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        return None
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    return rank, int(os.environ.get("LOCAL_RANK", rank)), world


def resolve_device(name, local_rank=None):
    """torch.device for --device: 'auto' = cuda > mps > cpu; under DDP one GPU per local rank."""
    import torch
    mps = getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "mps" if mps else "cpu"
    kind = name.split(":")[0]
    try:   # 'cuda:x' is not a device; 'cpu:3' is to torch, but every map_location to it fails
        index = torch.device(name).index
    except RuntimeError:
        index = -1
    if kind not in ("cpu", "cuda", "mps") or index is not None and (index < 0 or kind != "cuda" and index != 0):
        raise UserError(f"unknown device '{name}' (fix: --device=auto|cpu|cuda|cuda:N|mps)")
    if (kind == "cuda" and not torch.cuda.is_available()) or (kind == "mps" and not mps):
        raise UserError(f"device '{name}' requested but {kind.upper()} is not available "
                        f"(fix: --device=cpu or --device=auto)")
    if kind == "cuda" and index is not None and index >= torch.cuda.device_count():
        raise UserError(f"device '{name}' does not exist: this machine has {torch.cuda.device_count()} GPU(s) "
                        f"(fix: --device=cuda:0 to cuda:{torch.cuda.device_count() - 1}, or --device=cuda)")
    if kind == "cuda" and local_rank is not None:
        name = f"cuda:{local_rank}"
    return torch.device(name)


def resolve_dtype(name, device):
    """'float32' | 'bfloat16' | 'float16' for --dtype: 'auto' = bf16 on CUDA if supported, else fp16;
    float32 elsewhere."""
    if name not in ("auto", "float32", "bfloat16", "float16"):
        raise UserError(f"unknown dtype '{name}' (fix: --dtype=auto|float32|bfloat16|float16)")
    if name != "auto":
        return name
    import torch
    if str(device).startswith("cuda"):
        return "bfloat16" if torch.cuda.is_bf16_supported() else "float16"
    return "float32"


def autocast(device, dtype):
    """The autocast context for a resolved dtype, by name or torch.dtype (none for float32)."""
    import contextlib
    import torch
    dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    if dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device_type=str(device).split(":")[0], dtype=dtype)


# --- model arguments and variants ------------------------------------------------------------------

def gpt_config_defaults():
    """{field: default} for every GPTConfig field (imported lazily so configurator has no torch import)."""
    from model import GPTConfig
    out = {}
    for f in dataclasses.fields(GPTConfig):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
        else:
            out[f.name] = None
    return out


def model_args(config, explicit, base=None, vocab_size=None):
    """GPTConfig keyword arguments: base (default: GPTConfig defaults) <- variant <- explicitly-set keys.
    base lets train.py start from a checkpoint's model_args (init_from=<path>); vocab_size (the dataset's,
    from meta.json) replaces the preset's unless the user set vocab_size."""
    fields = gpt_config_defaults()
    args = dict(fields)
    if base:
        args.update({k: v for k, v in base.items() if k in fields})
    name = config.get("variant", "")
    if name:
        args.update(load_variant(name, fields))
    if vocab_size is not None:
        args["vocab_size"] = vocab_size
    args.update({k: config[k] for k in explicit if k in fields})
    return args


def train_model_args(config, explicit, meta, device, say):
    """train.py's model: (model_args, checkpoint or None) for init_from = scratch | resume | <path>. Refuses
    a checkpoint of another tokenizer, with non-finite weights, or (resume) of another architecture."""
    from huggingface.convert import checkpoint_dict, is_hf_dir
    from runfiles.checkpoint import CKPT_NAME, LAST_NAME, check_finite, load_checkpoint
    from runfiles.dataset import tokenizer_id
    init_from, ckpt = config["init_from"], None
    if init_from == "scratch":
        args = model_args(config, explicit, vocab_size=meta["vocab_size"])
    elif init_from == "resume":
        out_dir = config["out_dir"]
        if not any(os.path.isfile(os.path.join(out_dir, n)) for n in (LAST_NAME, CKPT_NAME)):
            raise UserError(f"nothing to resume: no {LAST_NAME} or {CKPT_NAME} in '{out_dir}' (fix: pass the "
                            f"out_dir of an earlier run, or start one with --init_from=scratch)")
        ckpt = load_checkpoint(out_dir, device, prefer=(LAST_NAME, CKPT_NAME))
        if ckpt.get("optimizer") is None:
            raise UserError(f"{ckpt['path']} has weights only (e.g. from pangu.inherit), nothing to resume "
                            f"(fix: --init_from={ckpt['path']} to start a new run from it)")
        say(f"resuming from {ckpt['path']} at iteration {ckpt['iter_num']}")
        args = dict(ckpt["model_args"])
        # dropout may change between sessions; anything else changes the architecture. vocab_size came
        # from meta.json, not the variant's preset, unless the user set it
        wanted = model_args(config, explicit, base=args)
        wanted["vocab_size"] = wanted["vocab_size"] if "vocab_size" in explicit else args["vocab_size"]
        for key in sorted(k for k in wanted if k != "dropout" and wanted[k] != args.get(k)):
            raise UserError(f"resume: {key}={wanted[key]!r} differs from the checkpoint's {key}={args.get(key)!r} "
                            f"(fix: drop that override, or start a new run from its weights: --init_from={ckpt['path']} "
                            f"--allow_partial_init=True)")
        args["dropout"] = wanted["dropout"]
    else:
        ckpt = checkpoint_dict(init_from, say=say) if is_hf_dir(init_from) else load_checkpoint(init_from, device)
        # model_args() keeps only the keys GPTConfig knows: dropping the others would train another model
        unknown = sorted(set(ckpt["model_args"]) - set(gpt_config_defaults()))
        if unknown:
            raise UserError(f"{ckpt['path']} has model_args this model.py does not know: {', '.join(unknown)} (a "
                            f"checkpoint of another code version) (fix: use the code version that wrote it, or "
                            f"--init_from=scratch)")
        args = model_args(config, explicit, base=ckpt["model_args"], vocab_size=meta["vocab_size"])
    if ckpt is not None:   # first: another tokenizer's data also shows up as a vocab_size mismatch below
        check_finite(ckpt["model"], ckpt["path"])
        if ckpt.get("tokenizer_id") not in (None, tokenizer_id(meta)):   # older checkpoints record none
            raise UserError(f"{ckpt['path']} was trained with another tokenizer than {config['data_dir']}'s (its "
                            f"dataset: {ckpt.get('dataset')}) (fix: --dataset/--data_dir of that run, or --init_from=scratch)")
    if args["vocab_size"] < meta["vocab_size"]:
        raise UserError(f"vocab_size {args['vocab_size']} is smaller than the dataset's {meta['vocab_size']} tokens "
                        f"(fix: drop --vocab_size, it is read from meta.json)")
    return args, ckpt


def available_variants():
    """Names of variants/<name>.py modules, or None if the variants package cannot be inspected."""
    try:
        variants = importlib.import_module("variants")
    except ImportError:
        return None
    if hasattr(variants, "available"):
        return sorted(variants.available())
    if hasattr(variants, "__path__"):
        return sorted(m.name for m in pkgutil.iter_modules(variants.__path__) if not m.name.startswith("_"))
    return None


def load_variant(name, fields=None):
    """variants.load(name) as a dict of GPTConfig fields, with one-line errors."""
    try:
        variants = importlib.import_module("variants")
    except ImportError:
        raise UserError(f"variant '{name}' requested but the variants/ package is missing "
                          f"(fix: run from the repository root, or drop --variant)") from None
    names = available_variants()
    listing = ", ".join(names) if names else "none found"
    if names is not None and name not in names:
        raise UserError(f"unknown variant '{name}' (fix: use one of: {listing})")
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
