"""
What users of karpathy/nanoGPT bring, read here as it is, with no conversion step:

    checkpoints   its ckpt.pt (model, optimizer, model_args, iter_num, best_val_loss as a 0-d tensor, config),
                  with or without torch.compile's `_orig_mod.` prefix: checkpoint.load_checkpoint recognises one
                  and maps it onto our `gpt` architecture (the same network: tests/test_nanogpt.py)
    meta.pkl      the char vocabulary its data/shakespeare_char/prepare.py writes ({vocab_size, itos, stoi}), read
                  as data (dataset.load_meta); a data folder with neither meta.json nor meta.pkl is GPT-2 BPE for a
                  nanoGPT checkpoint, as nanoGPT's sample.py assumes
    config keys   wandb_log / wandb_project / wandb_run_name (WandbLog), backend (ddp_backend), and
                  init_from='gpt2' | 'gpt2-medium' | 'gpt2-large' | 'gpt2-xl' (checkpoint.load_init_checkpoint)

Imports nothing of the project but configurator (checkpoint.py and dataset.py import it).
"""

import os
import pickle

import torch

from configurator import UserError

# nanoGPT's GPT is our `gpt` architecture with these settings (its model.py: LayerNorm eps 1e-5 with an optional
# bias, learned positions, nn.GELU() (exact, not tanh) in a 4x MLP, lm_head tied to wte); the rest of its
# model_args (n_layer, n_head, n_embd, block_size, bias, vocab_size, dropout) keep their names here
ARCHITECTURE = dict(norm="layernorm", norm_eps=1e-5, norm_placement="pre", pos_embedding="learned",
                    mlp_type="standard", activation="gelu", mlp_ratio=4.0, mlp_hidden=None, tie_embeddings=True,
                    head_bias=False)
MODEL_ARGS = ("n_layer", "n_head", "n_embd", "block_size", "bias", "vocab_size")
GPT2_NAMES = ("gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl")   # nanoGPT's init_from='gpt2*'
DEFAULT_DATASET = "openwebtext"   # nanoGPT's train.py default, for a checkpoint whose config names none


# --- checkpoints ------------------------------------------------------------------------------------

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


# --- meta.pkl: nanoGPT's char vocabulary, read as data --------------------------------------------------

class PlainDataUnpickler(pickle.Unpickler):
    """Unpickles plain containers, strings and numbers only. A pickle that names any global (a class, or a
    function such as os.system that unpickling would call) is refused before anything of it runs."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"it names {module}.{name}")


PLAIN_TYPES = (dict, list, tuple, str, int, float, bool, type(None))


def read_meta_pkl(path):
    """Our meta (tokenizer 'char', vocab_size, chars) from nanoGPT's meta.pkl ({vocab_size, itos, stoi})."""
    fix = "(fix: re-run nanoGPT's data/<dataset>/prepare.py, or prepare the dataset here with prepare.py)"
    try:
        with open(path, "rb") as f:
            meta = PlainDataUnpickler(f).load()
    except pickle.UnpicklingError as e:
        if str(e).startswith("it names "):
            raise UserError(f"refusing to read {path}: {e}, and unpickling it would run code; a meta.pkl holds plain "
                            f"data only (fix: only use data folders you trust; re-create it with nanoGPT's "
                            f"prepare.py)") from None
        raise UserError(f"cannot read {path}: {e} {fix}") from None
    except (OSError, EOFError, ValueError, TypeError, KeyError, IndexError, AttributeError) as e:
        raise UserError(f"cannot read {path}: {type(e).__name__}: {e} {fix}") from None
    if not _plain(meta):
        raise UserError(f"{path} holds values other than plain containers, strings and numbers {fix}")
    itos = meta.get("itos") if isinstance(meta, dict) else None
    size = meta.get("vocab_size") if isinstance(meta, dict) else None
    if not (isinstance(itos, dict) and isinstance(size, int) and not isinstance(size, bool) and size >= 1
            and set(itos) == set(range(size)) and all(isinstance(c, str) and c for c in itos.values())):
        raise UserError(f"{path} is not nanoGPT's char vocabulary (vocab_size and itos: id -> character for "
                        f"ids 0..vocab_size-1) {fix}")
    return {"tokenizer": "char", "vocab_size": size, "chars": [itos[i] for i in range(size)],
            "dataset": os.path.basename(os.path.dirname(os.path.abspath(path))), "source": "meta.pkl"}


def _plain(value, depth=0):
    if depth > 20 or not isinstance(value, PLAIN_TYPES):
        return False
    if isinstance(value, dict):
        return all(_plain(k, depth + 1) and _plain(v, depth + 1) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return all(_plain(v, depth + 1) for v in value)
    return True


# --- config keys: init_from='gpt2*', backend, wandb_* ------------------------------------------------------

def is_hf_source(init_from):
    """init_from that names a Hugging Face model: nanoGPT's 'gpt2*' hub names, or a local transformers folder."""
    return init_from in GPT2_NAMES or os.path.isfile(os.path.join(init_from, "config.json"))


def ddp_backend(config, device):
    """torch.distributed's backend: nanoGPT's `backend` key on a GPU (nccl, or gloo); gloo on a CPU, where nccl
    does not run."""
    if config["backend"] not in ("nccl", "gloo"):
        raise UserError(f"backend must be nccl or gloo, got {config['backend']!r} (fix: --backend=nccl for GPUs, "
                        f"gloo otherwise)")
    return config["backend"] if device.type == "cuda" else "gloo"


class WandbLog:
    """nanoGPT's Weights & Biases logging: with wandb_log=True, each evaluation logs what nanoGPT's train.py logs
    that we have: iter, train/loss, val/loss, lr (nanoGPT also logs mfu, an estimate we do not make). wandb is
    imported here, before anything on disk changes, so a missing package is a one-line error; the W&B run
    (wandb.init with wandb_project, wandb_run_name and the config, as nanoGPT) starts at the first evaluation.
    Only the master process logs. WANDB_MODE=offline keeps it on this machine."""

    def __init__(self, config, master=True):
        self.config, self.wandb, self.run = config, None, None
        if not (config.get("wandb_log") and master):
            return
        try:
            import wandb
        except ImportError:
            raise UserError("wandb_log=True logs to Weights & Biases, but the wandb package is not installed "
                            "(fix: pip install wandb, or --wandb_log=False)") from None
        self.wandb = wandb

    def log(self, row):
        """Log one evaluation row of train.py (iter, loss, val_loss, lr)."""
        if self.wandb is None:
            return
        if self.run is None:
            self.run = self.wandb.init(project=self.config["wandb_project"],
                                       name=self.config["wandb_run_name"] or None, config=dict(self.config))
        self.run.log({"iter": row["iter"], "train/loss": row["loss"], "val/loss": row["val_loss"], "lr": row["lr"]})
