"""
Checkpoint files: the one format, written by one function, and safe loading of ours (any version), nanoGPT's and
an imported Hugging Face model's; for train.py, the weights of another checkpoint that fit and the optimizer's
state.

A checkpoint is a torch.save'd dict of one format (FORMAT_VERSION, CHECKPOINT_FIELDS), built by
checkpoint_dict and written by save_checkpoint (atomically: fileio.py), the one way every writer writes one
(train.py, tools.pangu.inherit, tools.huggingface.convert import, tools.executorch.bench); every reader goes
through load_checkpoint, which migrates an earlier version (migrate_checkpoint). nanoGPT's ckpt.pt is read as one
(the section "nanoGPT's checkpoints").
train.py writes two of them into out_dir:
  ckpt.pt  - the best validation loss so far (what sample.py / eval.py load by default); at every evaluation
             with always_save_checkpoint, and at the first save into an out_dir of an earlier run's checkpoints
  last.pt  - the latest state, written at every eval after iteration 0 and on Ctrl-C (what init_from='resume' loads)
both by train.py's save_checkpoints.

Loading uses torch.load(weights_only=True) only, with no way around it: checkpoints travel (shared files,
out*/ folders in cloned repositories), and the full unpickler runs whatever code a file names.
"""

import os
import pickle
import re
import subprocess
import sys
import tempfile
import warnings
import zipfile

import numpy as np
import torch

from safety_net import REPO_ROOT
from safety_net.build import build_model, gpt_config_defaults, model_config
from safety_net.configurator import UserError
from safety_net.fileio import RUN_CHECKPOINTS, atomic_save

CKPT_NAME, LAST_NAME = RUN_CHECKPOINTS   # "ckpt.pt", "last.pt"
ORIG_MOD_PREFIX = "_orig_mod."   # added to state_dict keys by torch.compile
DDP_PREFIX = "module."           # added by DistributedDataParallel


# --- the checkpoint format -----------------------------------------------------------------------------------
# Version 1 (this code): format_version, then the fields below. Version 0: every checkpoint written before the
# field existed (tests/fixtures/ckpt_before_issue24.pt is one); the same fields without format_version, which
# migrate_checkpoint adds. An older layout still (weights under other names, written by a model.py before issue
# 24's redesign) has no fixture and no migration: it stays refused in one line ("do not fit its own model_args").

FORMAT_VERSION = 1
CHECKPOINT_FIELDS = (
    "model",          # the weights: state_dict of GPT(GPTConfig(**model_args)), without compile/DDP prefixes
    "model_args",     # GPTConfig's fields
    "iter_num",       # train.py: the iteration it resumes at (0 for weights only)
    "best_val_loss",  # train.py: the best val loss so far (inf, or nan, when none)
    "optimizer",      # train.py: AdamW's state_dict (None or absent: weights only, nothing to resume)
    "scaler",         # train.py: fp16's GradScaler state_dict, or None
    "config",         # the run's whole config
    "rng", "rng_ranks",   # train.py: this rank's RNG states, and every rank's under DDP (an exact resume)
    "dataset", "data_dir", "tokenizer_id",   # the data it was trained on; tokenizer_id: dataset.tokenizer_id
    "inherit",        # tools.pangu.inherit: what was inherited from which checkpoint
    "source",         # weights not trained here: the Hugging Face model (tools.huggingface.convert import),
                      # or tools.executorch.bench's model of a shape at its initialisation
)


def checkpoint_dict(model, model_args, **fields):
    """The one builder of a checkpoint dict: format_version, the weights, GPTConfig's fields and any of
    CHECKPOINT_FIELDS (another name is a programming error, refused)."""
    unknown = sorted(set(fields) - set(CHECKPOINT_FIELDS))
    if unknown:
        raise TypeError(f"checkpoint_dict: fields outside the checkpoint format: {unknown}")
    return {"format_version": FORMAT_VERSION, "model": model, "model_args": dict(model_args), **fields}


def save_checkpoint(path, model, model_args, **fields):
    """checkpoint_dict(model, model_args, **fields) written to `path` atomically (atomic_save): how every
    writer writes a checkpoint."""
    atomic_save(checkpoint_dict(model, model_args, **fields), path)


def migrate_checkpoint(ckpt, path):
    """A loaded checkpoint dict in this code's format: version 0 (no format_version) becomes version 1 by adding
    the field; a version newer than this code's is refused in one line."""
    version = ckpt.get("format_version", 0)
    if not isinstance(version, int) or isinstance(version, bool) or version < 0:
        raise UserError(f"'{path}' is damaged: 'format_version' is {version!r} (fix: retrain, or use a "
                        f"ckpt.pt/last.pt written by train.py)")
    if version > FORMAT_VERSION:
        raise UserError(f"'{path}' has checkpoint format {version}, newer than this code's {FORMAT_VERSION} "
                        f"(fix: use the code version that wrote it)")
    if version == 0:   # the same fields: only the version is new
        ckpt["format_version"] = 1
    return ckpt


def latest_out_dir(root="."):
    """The out*/ folder under `root` whose checkpoint was written most recently, i.e. the run train.py
    just finished; 'out' when there is none. sample.py and eval.py use it when --out_dir is not given."""
    found = [os.path.join(root, d, name) for d in os.listdir(root) if d.startswith("out")
             for name in (CKPT_NAME, LAST_NAME) if os.path.isfile(os.path.join(root, d, name))]
    if not found:
        return os.path.normpath(os.path.join(root, "out"))
    return os.path.normpath(os.path.dirname(max(found, key=os.path.getmtime)))


def resolve_path(path_or_out_dir, prefer=(CKPT_NAME, LAST_NAME)):
    """A checkpoint file path: the argument itself if it is a file, else the first of `prefer` found in
    that directory. Raises UserError telling the user to train first."""
    p = os.fspath(path_or_out_dir)
    if os.path.isfile(p):
        return p
    if os.path.isdir(p):
        for name in prefer:
            candidate = os.path.join(p, name)
            if os.path.isfile(candidate):
                return candidate
        if os.path.isfile(os.path.join(p, "config.json")):   # its fix was to train into it (a hunt)
            raise UserError(f"'{p}' holds a Hugging Face model, not a run of ours (fix: --init_from={p}, which "
                            f"python -m tools.huggingface.sample, tools.eval and train.py take)")
        raise UserError(f"no checkpoint ({' or '.join(prefer)}) in '{p}' (fix: run train.py with --out_dir={p} "
                        f"first, or name a run folder or checkpoint file that exists)")
    # the option that named it: --out_dir (sample.py, eval, the exports), --init_from (train.py, inherit), ...
    raise UserError(f"checkpoint '{p}' does not exist (fix: run train.py first, or name a run folder or "
                    f"checkpoint file that exists)")


# torch.save's older format: a pickle whose first object is torch.serialization.MAGIC_NUMBER (a pickle's LONG1)
LEGACY_MAGIC = b"\x8a\x0a" + (0x1950a86a20f9469cfc6c).to_bytes(10, "little")


def written_by_torch_save(path):
    """Whether the file starts as torch.save's files do: a zip archive, or (older ones) a pickle of torch's magic
    number first; not another pickle (pickle.dump's: torch.load warned of its protocol, then its unpickler said
    'Unsupported operand 149'; an exploration). An unreadable file is left to torch.load, whose error names why."""
    try:
        with open(path, "rb") as f:
            head = f.read(32)
    except OSError:
        return True
    return head.startswith(b"PK\x03\x04") or (head.startswith(b"\x80") and LEGACY_MAGIC in head)


def cut_short(path):
    """Whether the file is the start of a zip archive without its end (a copy or a write cut short)."""
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"PK\x03\x04" and not zipfile.is_zipfile(f)
    except OSError:   # left to torch.load, whose error names why
        return False


def load_checkpoint(path_or_out_dir, device="cpu", prefer=(CKPT_NAME, LAST_NAME), mmap=False):
    """Load a checkpoint dict. A directory means its ckpt.pt (falling back to last.pt); "" means the out*/ folder
    with the newest checkpoint (the run train.py just finished), announced on stderr. Only the safe loader
    (weights_only) is used: checkpoints are shared and cloned with repositories, and the full unpickler runs
    whatever code a file names. A file that needs it is refused (unsafe_pickle_error). The dict it returns is
    this code's format (migrate_checkpoint), its weights without key prefixes, finite and fitting its own
    model_args (check_weights), so GPT(GPTConfig(**ckpt["model_args"])).load_state_dict(ckpt["model"]) takes
    them. mmap: tensors are read only when used, and the weights are not checked (a check of the file that
    costs no memory)."""
    newest = not path_or_out_dir
    if newest:
        path_or_out_dir = latest_out_dir()
    path = resolve_path(path_or_out_dir, prefer)   # none there: one line, train first
    if newest:
        print(f"loading the newest checkpoint: {path_or_out_dir} (choose another with --out_dir)", file=sys.stderr)
    if not written_by_torch_save(path):
        raise UserError(f"cannot read checkpoint '{path}': it is not a file torch.save writes, so no checkpoint of "
                        f"this project (fix: point at a ckpt.pt or last.pt written by train.py; a damaged one: "
                        f"re-run train.py to rewrite it)")
    if cut_short(path):   # torch said "[Errno 22] Invalid argument"
        raise UserError(f"cannot read checkpoint '{path}': it is cut short (a zip archive without its end), not a "
                        f"complete checkpoint (fix: copy it again whole, or re-run train.py to rewrite it)")
    try:
        # what train.py writes holds only tensors and plain python values, which this loads
        # torch maps only its zip format; an older file (a pickle, as sample.py reads it) is read whole (a hunt)
        with warnings.catch_warnings():   # of an older file's pickle protocol, before its one line (an exploration)
            warnings.filterwarnings("ignore", message="Detected pickle protocol")
            ckpt = torch.load(path, map_location=device, weights_only=True, mmap=mmap and zipfile.is_zipfile(path))
    except Exception as e:   # a damaged file: the unpickler also raises IndexError, KeyError, UnicodeDecodeError, ...
        refused = unsafe_pickle_error(e, path)
        if refused is not None:
            raise refused from None
        # the safe loader's own reason, not its advice to load the file unsafely
        text = str(e).split("WeightsUnpickler error:", 1)[-1].strip()
        msg = text.splitlines()[0] if text else type(e).__name__
        raise UserError(f"cannot read checkpoint '{path}': {msg} (fix: re-run train.py to rewrite it)") from None
    if not isinstance(ckpt, dict) or "model" not in ckpt or "model_args" not in ckpt:
        raise UserError(f"'{path}' is not a train.py checkpoint (no 'model'/'model_args') "
                              f"(fix: point at a ckpt.pt or last.pt written by train.py)")
    weights = ckpt["model"]
    if isinstance(weights, dict) and all(isinstance(k, str) for k in weights):
        # the weights without torch.compile's and DDP's key prefixes: model.load_state_dict takes them as they are
        ckpt["model"] = clean_state_dict(weights)
        if is_nanogpt_checkpoint(ckpt, ckpt["model"]):
            ckpt = from_nanogpt(ckpt, ckpt["model"], path)
    ckpt = migrate_checkpoint(ckpt, path)
    damaged = damaged_fields(ckpt)
    if damaged:
        raise UserError(f"'{path}' is damaged: {damaged} (fix: the file was edited or written by other code: "
                        f"retrain, or use a ckpt.pt/last.pt written by train.py)")
    # a GPTConfig field added after the file was written takes its default, which is the model as it was before
    # the field existed (a technique off: the rule in tools/support.py), so a resume compares like with like
    ckpt["model_args"] = {**gpt_config_defaults(), **ckpt["model_args"]}
    # its model_args build a GPTConfig (sample.py builds one plainly); "meta": the weights are already in memory
    model_config(ckpt["model_args"], path, device="meta")
    ckpt.setdefault("path", path)
    if not mmap:   # (mmap: the weights are never read)
        check_weights(ckpt)
    return ckpt


def load_init_checkpoint(init_from, device="cpu", master=True):
    """The checkpoint train.py --init_from=<...> starts from: a checkpoint file (ours or nanoGPT's), or a Hugging
    Face model (nanoGPT's 'gpt2' ... 'gpt2-xl', or a local transformers folder) imported by
    `python -m tools.huggingface.convert import` in a subprocess, into a temporary file: the import (a folder's
    safetensors or shards, a hub download) is that tool's job, and the safety net never imports tools/. Only the
    master (DDP's rank 0) says what it imports."""
    if not is_hf_source(init_from):
        return load_checkpoint(init_from, device)
    source = init_from if init_from in GPT2_NAMES else os.path.abspath(init_from)
    with tempfile.TemporaryDirectory(prefix="init_from.") as tmp:
        out = os.path.join(tmp, "imported.pt")
        if master:
            print(f"importing {init_from}: python -m tools.huggingface.convert import {source} --out={out}", flush=True)
        done = subprocess.run([sys.executable, "-m", "tools.huggingface.convert", "import", source, "--out", out],
                              cwd=REPO_ROOT, stderr=subprocess.PIPE, text=True)
        said = [line for line in done.stderr.splitlines() if line.strip()]
        if done.returncode != 0:
            reason = said[-1].removeprefix("error: ") if said else f"exit code {done.returncode}"
            fix = "" if "(fix: " in reason else " (fix: a local transformers folder, or a connection to the hub)"
            raise UserError(f"--init_from={init_from}: the Hugging Face import failed: {reason}{fix}")
        if master:
            print(said[0] if said else f"imported {init_from}", flush=True)
        ckpt = load_checkpoint(out, device)
    ckpt["path"] = init_from
    return ckpt


def unsafe_pickle_error(e, path, fix="re-save it with tensors and plain Python values only, or re-run train.py"):
    """The UserError for a file the safe loader refused because its pickle names a global outside the allowed
    tensors and plain values (a class, or a function such as os.system that unpickling would call); None when
    `e` is another error. There is no way around it on purpose: loading such a file runs code from it."""
    if not isinstance(e, pickle.UnpicklingError):
        return None
    found = re.search(r"GLOBAL ([\w.]+)", str(e))
    if found is None:   # not a refused global: a damaged file, reported as such
        return None
    return UserError(f"refusing to load '{path}': it holds objects the safe loader refuses ({found.group(1)}); "
                     f"loading them would run code from the file (fix: only load files you trust; for one of your "
                     f"own, written by other code, {fix})")


WEIGHT_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


def damaged_fields(ckpt):
    """What is wrong with the fields of a checkpoint dict that scripts rely on ("" when nothing)."""
    if not isinstance(ckpt["model"], dict) or not all(torch.is_tensor(v) for v in ckpt["model"].values()):
        return "'model' is not a dict of tensors"
    # every weight of ours is floating point; load_state_dict would turn integers into floats without a word
    integer = [k for k, v in ckpt["model"].items() if not v.is_floating_point() and not v.is_complex()]
    if integer:
        return f"'model' holds integer tensors where weights are floating point (e.g. {integer[0]})"
    # fp8 or sparse weights ended in a traceback (isfinite has no kernel for them), complex ones were "integer" (a hunt)
    odd = [k for k, v in ckpt["model"].items() if v.dtype not in WEIGHT_DTYPES or v.layout != torch.strided]
    if odd:
        v = ckpt["model"][odd[0]]
        return (f"'model' holds a tensor no weight of ours is ({odd[0]}: {str(v.dtype).replace('torch.', '')}, "
                f"{str(v.layout).replace('torch.', '')}; weights are dense float32, float16, bfloat16 or float64)")
    if not isinstance(ckpt["model_args"], dict):
        return f"'model_args' is a {type(ckpt['model_args']).__name__}, not a dict"
    if not all(isinstance(k, str) for k in ckpt["model_args"]):   # its names are read as text (a traceback)
        return "'model_args' has a name that is not a string"
    for key in ("data_dir", "dataset", "tokenizer_id"):   # paths and names: text or absent
        if ckpt.get(key) is not None and not isinstance(ckpt[key], str):
            return f"'{key}' is {ckpt[key]!r}, not a string"
    iter_num = ckpt.get("iter_num", 0)   # below 0: a resume ran from there (a hunt)
    if not isinstance(iter_num, int) or isinstance(iter_num, bool) or iter_num < 0:
        return f"'iter_num' is {ckpt['iter_num']!r}, not an integer >= 0"
    if not isinstance(ckpt.get("best_val_loss", 0.0), (int, float)):
        return f"'best_val_loss' is {ckpt['best_val_loss']!r}, not a number"
    return ""


def clean_state_dict(state_dict):
    """Strip the torch.compile ('_orig_mod.') and DDP ('module.') key prefixes."""
    out = {}
    for k, v in state_dict.items():
        stripped = True
        while stripped:
            stripped = False
            for prefix in (ORIG_MOD_PREFIX, DDP_PREFIX):
                if k.startswith(prefix):
                    k, stripped = k[len(prefix):], True
        out[k] = v
    return out


def check_finite(state_dict, path, fix="retrain with a lower --learning_rate"):
    """UserError if any floating tensor holds NaN or inf (the weights of a diverged run)."""
    bad = [k for k, v in state_dict.items() if torch.is_tensor(v) and v.is_floating_point()
           and not torch.isfinite(v).all()]
    if bad:
        raise UserError(f"{path} holds non-finite weights ({len(bad)} tensors, e.g. {bad[0]}): the run that wrote "
                        f"them diverged (fix: {fix})")


def load_model(path_or_out_dir="", device="cpu"):
    """(model in eval mode on `device`, checkpoint dict): what eval.py, compare.py and pangu/ run (sample.py
    writes the same steps out). A directory means its ckpt.pt (else last.pt); "" means the out*/ folder with the
    newest checkpoint (load_checkpoint)."""
    ckpt = load_checkpoint(path_or_out_dir, device)
    model = build_model(ckpt["model_args"], device, source=ckpt["path"])
    model.load_state_dict(ckpt["model"])   # checked by load_checkpoint
    model.eval()
    return model, ckpt


def check_weights(ckpt):
    """One line for weights that a model built from the checkpoint's own model_args cannot take: non-finite (a
    diverged run), or missing, unexpected or of another shape (an edited or damaged file, or another model.py).
    The model is built on the "meta" device: shapes only, no memory."""
    from model import GPT, GPTConfig
    check_finite(ckpt["model"], ckpt["path"])
    with torch.device("meta"):
        own = GPT(GPTConfig(**ckpt["model_args"])).state_dict()
    theirs = ckpt["model"]
    missing = [k for k in own if k not in theirs]
    unexpected = [k for k in theirs if k not in own]
    reshaped = [f"{k} {tuple(theirs[k].shape)} instead of {tuple(own[k].shape)}" for k in own
                if k in theirs and theirs[k].shape != own[k].shape]
    problems = [f"{len(names)} {what} (e.g. {names[0]})" for what, names in
                (("missing", missing), ("unexpected", unexpected), ("of another shape", reshaped)) if names]
    if problems:
        raise UserError(f"the weights in '{ckpt['path']}' do not fit its own model_args: {', '.join(problems)} "
                        f"(fix: the file is damaged or was edited: retrain, or load it with the code version that "
                        f"wrote it)")


def load_matching_weights(model, state_dict, source, allow_partial):
    """Initialize `model` from another checkpoint: every tensor whose name and shape match is copied. Nothing
    matching is an error; a partial match (either side has tensors the other lacks) needs allow_partial."""
    own, theirs = model.state_dict(), clean_state_dict(state_dict)
    matched = {k: v for k, v in theirs.items() if k in own and own[k].shape == v.shape}
    fresh, unused = [k for k in own if k not in matched], [k for k in theirs if k not in matched]
    if not matched:
        raise UserError(f"--init_from={source}: none of its {len(theirs)} tensors fits this model (names or shapes "
                        f"differ) (fix: drop the model overrides that change its shape, or --init_from=scratch)")
    if (fresh or unused) and not allow_partial:
        def listed(names):
            return ", ".join(names[:3]) + (f", ... ({len(names)} in all)" if len(names) > 3 else "")
        detail = (f"; starting fresh: {listed(fresh)}" if fresh else "") + \
            (f"; unused from the checkpoint: {listed(unused)}" if unused else "")
        fix = "--allow_partial_init=True to go on, or match the checkpoint's shape"
        rows = theirs["tok_emb.wte.weight"].size(0) if "tok_emb.wte.weight" in unused else 0
        if rows > own["tok_emb.wte.weight"].size(0):   # e.g. nanoGPT's GPT-2 checkpoints: 50257 padded to 50304
            fix = (f"--vocab_size={rows}, the checkpoint's, if it was trained on this data's tokenizer (nanoGPT pads "
                   f"GPT-2's 50257 tokens to 50304); --allow_partial_init=True would train the token embedding "
                   f"afresh")
        raise UserError(f"--init_from={source} fits {len(matched)} of this model's {len(own)} tensors{detail} "
                        f"(fix: {fix})")
    model.load_state_dict(matched, strict=False)
    return len(matched), len(own)


def load_optimizer_state(optimizer, ckpt):
    """The checkpoint's optimizer state (AdamW's moments and step counts) into `optimizer`, with a one-line error
    when it does not fit the model (e.g. a checkpoint of a code version that grouped the parameters differently).
    Its settings stay this run's (lr, betas, weight_decay: the command line's, as the resume note says):
    optimizer.load_state_dict alone put the checkpoint's back, and a resume's --weight_decay or --beta2 changed
    nothing (a hunt). nanoGPT's resume keeps the checkpoint's: ours differs on purpose, as its note says."""
    settings = [{k: v for k, v in group.items() if k != "params"} for group in optimizer.param_groups]
    try:
        optimizer.load_state_dict(ckpt["optimizer"])
    except (ValueError, KeyError, TypeError) as e:
        raise UserError(f"the optimizer state in '{ckpt['path']}' does not fit the model ({e}) (fix: start a new "
                        f"run from its weights: --init_from={ckpt['path']})") from None
    for group, own in zip(optimizer.param_groups, settings):
        group.update(own)


def plain_values(obj):
    """obj with numpy scalars (e.g. from a config file that computes a value with numpy) turned into Python
    numbers, through dicts, lists and tuples, so the safe loader reads the checkpoint it goes into."""
    if isinstance(obj, dict):
        return {k: plain_values(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(plain_values(v) for v in obj)
    if isinstance(obj, np.generic):
        return obj.item()
    return obj


# --- nanoGPT's checkpoints, read as ours (docs/training.md: Coming from nanoGPT) -------------------------
# Its ckpt.pt (model, optimizer, model_args, iter_num, best_val_loss as a 0-d tensor, config), with or without
# torch.compile's `_orig_mod.` prefix, is mapped onto our `gpt` architecture, the same network
# (tests/test_nanogpt.py); its init_from='gpt2*' too (backend: train.py's train(); W&B: wandb_log.py).

# nanoGPT's GPT is our `gpt` architecture with these settings (its model.py: LayerNorm eps 1e-5 with an optional
# bias, learned positions, nn.GELU() (exact, not tanh) in a 4x MLP, lm_head tied to wte); the rest of its
# model_args (n_layer, n_head, n_embd, block_size, bias, vocab_size, dropout) keep their names here
ARCHITECTURE = dict(norm="layernorm", norm_eps=1e-5, norm_placement="pre", pos_embedding="learned",
                    mlp_type="standard", activation="gelu", mlp_ratio=4.0, mlp_hidden=None, tie_embeddings=True,
                    head_bias=False)
MODEL_ARGS = ("n_layer", "n_head", "n_embd", "block_size", "bias", "vocab_size")
GPT2_NAMES = ("gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl")   # nanoGPT's init_from='gpt2*'
DEFAULT_DATASET = "openwebtext"   # nanoGPT's train.py default, for a checkpoint whose config names none


def is_nanogpt_checkpoint(ckpt, state_dict):
    """True for a checkpoint dict written by nanoGPT's train.py (state_dict: its weights without key prefixes)."""
    return isinstance(ckpt.get("model_args"), dict) and "transformer.wte.weight" in state_dict


def from_nanogpt(ckpt, state_dict, path):
    """A nanoGPT checkpoint as ours: weights mapped onto the `gpt` architecture, model_args as GPTConfig fields,
    best_val_loss a number, dataset and data_dir from its config (data/<dataset>, as nanoGPT reads it). Its
    optimizer state is not kept: nanoGPT groups the parameters under its own names, so --init_from starts a
    new run from the weights (as from any checkpoint file)."""
    fix = "(fix: point at the ckpt.pt nanoGPT's train.py wrote, unedited)"
    args = ckpt["model_args"]
    missing = [k for k in MODEL_ARGS if k not in args]
    if missing:
        raise UserError(f"'{path}' looks like a nanoGPT checkpoint but its model_args lack {', '.join(missing)} {fix}")
    model_args = dict(ARCHITECTURE, **{k: args[k] for k in MODEL_ARGS}, dropout=args.get("dropout", 0.0))
    if not isinstance(args["n_layer"], int) or not isinstance(args["bias"], bool):
        raise UserError(f"'{path}': nanoGPT's model_args n_layer={args['n_layer']!r}, bias={args['bias']!r} are not "
                        f"an integer and a bool {fix}")
    try:
        model, left = gpt2_layout_state_dict(state_dict, args["n_layer"], args["bias"], conv1d=False)
    except UserError as e:
        raise UserError(f"'{path}' (nanoGPT): {e}") from None
    head = left.pop("lm_head.weight", None)   # nanoGPT ties lm_head to wte: state_dict holds both names
    if head is not None and not torch.equal(head, model["tok_emb.wte.weight"]):
        raise UserError(f"'{path}' (nanoGPT) has an lm_head.weight that differs from transformer.wte.weight; "
                        f"nanoGPT ties them {fix}")
    if left:
        raise UserError(f"'{path}' (nanoGPT) has {len(left)} tensors its GPT does not have, e.g. "
                        f"{', '.join(sorted(left)[:3])} {fix}")
    best = ckpt.get("best_val_loss", float("inf"))
    if torch.is_tensor(best):   # nanoGPT saves losses['val'], a 0-d tensor
        if best.numel() != 1:
            raise UserError(f"'{path}' (nanoGPT): best_val_loss is a tensor of shape {tuple(best.shape)} {fix}")
        best = best.item()
    config = ckpt.get("config") if isinstance(ckpt.get("config"), dict) else {}
    dataset = config.get("dataset") if isinstance(config.get("dataset"), str) and config.get("dataset") \
        else DEFAULT_DATASET
    return {"model": model, "model_args": model_args, "optimizer": None, "iter_num": ckpt.get("iter_num", 0),
            "best_val_loss": best, "config": config, "dataset": dataset, "data_dir": os.path.join("data", dataset),
            "format": "nanogpt"}


def gpt2_layout_state_dict(tensors, n_layer, bias, conv1d):
    """Our `gpt` state_dict from weights named as GPT-2's: [transformer.]wte, wpe, h.N.ln_1, h.N.attn.c_attn,
    h.N.attn.c_proj, h.N.ln_2, h.N.mlp.c_fc, h.N.mlp.c_proj, ln_f. nanoGPT keeps these names in nn.Linear's
    (out, in) layout; Hugging Face's GPT2LMHeadModel in Conv1D's (in, out) layout (conv1d=True transposes).
    bias=False: no bias tensors (nanoGPT's bias=False model). The causal-mask buffers (.attn.bias,
    .attn.masked_bias) are dropped. Returns (state_dict, the tensors not used, e.g. lm_head.weight)."""
    left = {k.removeprefix("transformer."): v for k, v in tensors.items()
            if not k.endswith((".attn.bias", ".attn.masked_bias"))}
    sd = {"tok_emb.wte.weight": _take(left, "wte.weight"), "pos_emb.weight": _take(left, "wpe.weight")}
    for i in range(n_layer):
        h, a, m = f"h.{i}.", f"branches.0.attn.{i}.", f"branches.0.mlp.{i}."
        pairs = ((a + "norm", h + "ln_1", False), (a + "inner.qkv_proj", h + "attn.c_attn", True),
                 (a + "inner.out_proj", h + "attn.c_proj", True), (m + "norm", h + "ln_2", False),
                 (m + "inner.up", h + "mlp.c_fc", True), (m + "inner.down", h + "mlp.c_proj", True))
        for ours, theirs, linear in pairs:
            weight = _take(left, theirs + ".weight")
            sd[ours + ".weight"] = weight.t() if linear and conv1d else weight
            if bias:
                sd[ours + ".bias"] = _take(left, theirs + ".bias")
    sd["ln_f.weight"] = _take(left, "ln_f.weight")
    if bias:
        sd["ln_f.bias"] = _take(left, "ln_f.bias")
    return sd, left


def _take(tensors, key):
    if key not in tensors:
        raise UserError(f"the weights have no '{key}' (fix: use the complete checkpoint)")
    return tensors.pop(key)


def is_hf_source(init_from):
    """init_from that names a Hugging Face model: nanoGPT's 'gpt2*' hub names, or a local transformers folder."""
    return init_from in GPT2_NAMES or os.path.isfile(os.path.join(init_from, "config.json"))
