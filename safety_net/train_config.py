"""
train.py's config, checked before anything is read or written (check_train_config): unknown keys and bad values
refused in one line (full_config, check_settings; tools/compare.py checks its runs' settings with the same
check_settings), device and dtype resolved.
"""

import difflib
import math
import os


from safety_net.build import gpt_config_defaults, load_variant
from safety_net.checkpoint import GPT2_NAMES, is_hf_source, plain_values
from safety_net.configurator import UserError
from safety_net.dataset import default_data_dir, is_prepared
from safety_net.fileio import check_out_dir, is_run_folder
from safety_net.runtime import check_cpu_compiler, check_num_threads, check_seed, resolve_device, resolve_dtype
from safety_net.wandb_log import check_wandb


def _need(c, ok, key, rule, fix):
    if not ok:
        raise UserError(f"{key} must be {rule}, got {c[key]!r} (fix: {fix})")


def _integer(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def full_config(config, explicit, defaults):
    """(defaults updated with config, the keys the user set). Unknown keys are refused; numpy scalars (a config file
    may compute with numpy) become Python numbers, as the safe loader refuses them in a checkpoint. explicit None
    (train() called as a library): the model keys that differ from GPTConfig's defaults win over a variant."""
    unknown = sorted(set(config) - set(defaults))
    if unknown:
        raise UserError(f"unknown config keys {unknown} (fix: see `python train.py --help` for the keys)")
    config = plain_values({**defaults, **config})
    if explicit is None:
        explicit = {k for k, v in gpt_config_defaults().items() if config[k] != v}
    return config, set(explicit)


def check_train_config(config, explicit, defaults, world=1, local_rank=None):
    """train.py's checks before anything runs: (config over defaults, the keys the user set, torch.device, dtype
    name). Refuses unknown keys (full_config) and values that make no sense (check_settings) in one line; resolves
    device and dtype ('auto': cuda > mps > cpu; bf16, else fp16, on cuda; float32 elsewhere)."""
    config, explicit = full_config(config, explicit, defaults)
    check_settings(config, world)
    device = resolve_device(config["device"], local_rank)
    if config["compile"]:
        check_cpu_compiler(device)
    return config, explicit, device, resolve_dtype(config["dtype"], device)


def check_settings(c, world=1):
    """train.py's keys as the user set them (the schedule's None defaults, which train.py fills,
    fit by construction): refuse values that make no sense, naming the key. world: DDP's ranks."""
    _check_train_settings(c)
    _check_schedule(c)
    _check_run_settings(c, world)


def _check_train_settings(c):
    for key in ("batch_size", "eval_interval", "log_interval", "eval_iters", "gradient_accumulation_steps"):
        _need(c, _integer(c[key]) and c[key] >= 1, key, "an integer >= 1", f"--{key}=1 or more")
    _need(c, _integer(c["max_iters"]) and c["max_iters"] >= 0, "max_iters", "an integer >= 0", "--max_iters=0 or more")
    check_num_threads(c["num_threads"])
    check_seed(c["seed"])
    _need(c, _number(c["learning_rate"]) and c["learning_rate"] > 0, "learning_rate", "> 0", "--learning_rate=1e-3")
    _need(c, _number(c["weight_decay"]) and c["weight_decay"] >= 0, "weight_decay", ">= 0", "--weight_decay=0.1")
    for key, usual in (("beta1", 0.9), ("beta2", 0.95)):
        _need(c, _number(c[key]) and 0 <= c[key] < 1, key, "in [0, 1)", f"--{key}={usual}")
    _need(c, _number(c["grad_clip"]) and c["grad_clip"] >= 0, "grad_clip", ">= 0 (0 = off)", "--grad_clip=1.0")
    if c["lr_decay_iters"] is not None:
        _need(c, _number(c["lr_decay_iters"]) and c["lr_decay_iters"] >= 0, "lr_decay_iters", "a number >= 0",
              f"--lr_decay_iters={c['max_iters']}")


def _check_schedule(c):
    """min_lr and warmup_iters fit learning_rate and lr_decay_iters (whose None is max_iters)."""
    decay = c["max_iters"] if c["lr_decay_iters"] is None else c["lr_decay_iters"]
    lr = c["learning_rate"]
    if c["min_lr"] is not None:
        top = lr if c["decay_lr"] else math.inf   # never read without decay (nanoGPT's fine-tune sets it above)
        _need(c, _number(c["min_lr"]) and 0 <= c["min_lr"] <= top, "min_lr",
              f"in [0, learning_rate={lr:g}]", f"--min_lr={lr / 10:g}")
    if c["warmup_iters"] is not None:
        longest = decay if c["decay_lr"] else math.inf
        _need(c, _integer(c["warmup_iters"]) and 0 <= c["warmup_iters"] <= longest,
              "warmup_iters", f"an integer in [0, lr_decay_iters={decay}]",
              f"--warmup_iters={int(decay) // 10}, or leave it out: it defaults to "
              f"min(100, lr_decay_iters // 10)")


def _check_run_settings(c, world):
    """The rest of train.py's keys: DDP ranks, variant, dataset, out_dir, init_from."""
    accum = c["gradient_accumulation_steps"]
    if accum % world:
        raise UserError(f"gradient_accumulation_steps={accum} must be divisible by the {world} DDP ranks; each "
                        f"rank runs gradient_accumulation_steps/{world} micro-steps "
                        f"(fix: --gradient_accumulation_steps={max(world, accum // world * world)})")
    _need(c, c["backend"] in ("nccl", "gloo"), "backend", "nccl or gloo", "--backend=nccl for GPUs, gloo otherwise")
    if c["wandb_log"]:
        check_wandb()
    if c["variant"]:   # train.py then loads it with variants.load
        load_variant(c["variant"])
    if c["allow_partial_init"] and c["init_from"] in ("scratch", "resume"):   # accepted and dropped (a hunt)
        raise UserError(f"--allow_partial_init copies the fitting part of another checkpoint, and "
                        f"--init_from={c['init_from']} copies none (fix: drop --allow_partial_init, or "
                        f"--init_from=PATH of a checkpoint)")
    _need(c, c["dataset"] != "", "dataset", "a dataset name", "--dataset=shakespeare_char")
    _need(c, c["out_dir"] != "", "out_dir", "a folder", "--out_dir=out")
    check_out_dir(c["out_dir"])   # before the data is prepared
    # this run's dataset folder (a link to it too), or another prepared one (a hunt)
    if os.path.realpath(c["out_dir"]) == os.path.realpath(default_data_dir(c)) or is_prepared(c["out_dir"]):
        name = os.path.basename(os.path.realpath(c["out_dir"]))
        raise UserError(f"out_dir {c['out_dir']} is a dataset's folder: the checkpoints and the token files would "
                        f"mix (fix: --out_dir=out-{name}, a folder of its own)")
    names = ("scratch", "resume", *GPT2_NAMES)
    if c["init_from"] not in names and not os.path.exists(c["init_from"]):
        close = difflib.get_close_matches(c["init_from"].lower(), names, n=1, cutoff=0.8)
        fix = (f"write it first, e.g. with train.py or tools.pangu.inherit as its config says, or one of: "
               f"{', '.join(names)}")
        if close:
            fix = f"did you mean --init_from={close[0]}?"
        raise UserError(f"init_from '{c['init_from']}' does not exist (fix: {fix})")
    # a run's folder too: its ckpt.pt, else last.pt, as sample.py's --out_dir (it was refused; a hunt)
    init = c["init_from"]
    _need(c, init in ("scratch", "resume") or os.path.isfile(init) or is_run_folder(init) or is_hf_source(init),
          "init_from", "'scratch', 'resume', a checkpoint file or its run's folder, gpt2* or a Hugging Face folder",
          "--init_from=scratch|resume|path/to/ckpt.pt|gpt2")
