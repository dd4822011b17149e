"""
Hugging Face checkpoints in and out of our GPT, with logits equal to `transformers` (tests/test_huggingface.py).

Import (from_pretrained; tools.huggingface.sample and tools.eval --init_from=<dir or name>; `import` writes a
checkpoint for train.py --init_from=<file>):
    a local directory with config.json + model.safetensors | pytorch_model.bin (sharded or not), or a hub
    name such as "gpt2" (downloaded with huggingface_hub when it is installed and you are online), of
      GPT2LMHeadModel        LayerNorm, learned positions, fused c_attn (Conv1D: weights stored transposed),
                             MLP c_fc -> act -> c_proj, head tied to wte unless tie_word_embeddings=false
      LlamaForCausalLM       RMSNorm, rotate-half RoPE, GQA, SwiGLU (gate/up/down), optional biases
      MobileLLMForCausalLM   a Llama whose config.json adds share_embedding (tied head) and layer_sharing
                             (each block applied twice in a row: our share_group_size=2 over 2x the layers)
    Anything we cannot represent exactly is refused with a one-line reason (ConversionError).

Export (python -m tools.huggingface.convert export --out_dir=out --out=hf-out/ [--data_dir=data/<dataset>]):
    our GPT -> a directory (config.json + model.safetensors, or pytorch_model.bin without safetensors) that
    transformers loads with AutoModelForCausalLM.from_pretrained and no custom code, plus generation_config.json
    and the tokenizer of the checkpoint's dataset (char, GPT-2 BPE or compact: tokenizer.json, tokenizer_config.json,
    special_tokens_map.json; tools/huggingface/tokenizer.py), which AutoTokenizer.from_pretrained loads offline:
      learned positions + LayerNorm + plain MLP + multi-head attention  ->  GPT2LMHeadModel
      RoPE + RMSNorm + gated MLP (SwiGLU), GQA allowed                  ->  LlamaForCausalLM
    Layer sharing is written out as repeated weights (same function, bigger file). Our-only techniques
    (pgpt, lgpt, cgpt, enhanced residual, Deep Thinking, ShishuLM MLP-only blocks, factorized embedding,
    post-norm, a head bias) have no transformers equivalent and are refused with the reason.

Our mapping choices (not from any paper): RoPE conventions agree (our apply_rope rotates the (first half,
second half) pairs of a head exactly like transformers' rotate_half), so q/k weights copy unpermuted;
GPT-2's missing biases are written as zeros when our model has bias=False; Llama's attention_bias and
mlp_bias become our single `bias` flag, with zeros for the side that has none.
"""

import contextlib
import dataclasses
import json
import os
import sys

import torch

from tools.huggingface import ConversionError, _first_line, refuse
from tools.huggingface.tokenizer import tokenizer_files
from tools.layers import layer_sets
from tools.sizes import head_dim, kv_heads
from tools.support import refuse_undeclared
from safety_net.build import MAX_LAYERS, depth_summary
from safety_net.configurator import UserError, run_command
from safety_net.tokenizers import GPT2_EOT_ID, GPT2_VOCAB_SIZE, Vocabulary

GPT2_ARCHS = ("GPT2LMHeadModel",)
LLAMA_ARCHS = ("LlamaForCausalLM", "MobileLLMForCausalLM")
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json",
                "pytorch_model.bin", "pytorch_model.bin.index.json")
# what export writes beside the weights and config.json (tools/huggingface/tokenizer.py builds the first three)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json")
EXPORT_MARK = "compact_gpt_export"   # a key of our config.json: a folder an export of ours wrote, written again freely
# transformers' activation names <-> ours (gelu_new and gelu_pytorch_tanh are both the tanh approximation)
ACT_FROM_HF = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu",
               "relu": "relu", "silu": "silu", "swish": "silu"}
ACT_TO_HF = {"gelu_tanh": "gelu_new", "gelu": "gelu", "relu": "relu", "silu": "silu"}


# ----------------------------------------------------------------------------------------------
# reading a Hugging Face directory (or downloading one)
# ----------------------------------------------------------------------------------------------

def resolve_source(name_or_dir):
    """A local directory holding config.json: the argument itself, or a hub snapshot downloaded into the
    Hugging Face cache (needs huggingface_hub and a connection)."""
    path = os.fspath(name_or_dir)
    if os.path.isdir(path):
        ours = any(os.path.isfile(os.path.join(path, name)) for name in ("ckpt.pt", "last.pt"))
        refuse(not ours, f"'{path}' is a run of ours, not a Hugging Face model directory (fix: sample.py or "
               f"tools.eval --out_dir={path}; train.py --init_from takes it too)")   # named neither (a hunt)
        refuse(os.path.isfile(os.path.join(path, "config.json")),
               f"'{path}' has no config.json, so it is not a Hugging Face model directory "
               f"(fix: pass the directory that transformers' save_pretrained wrote)")
        return path
    refuse(not os.path.exists(path), f"'{path}' is a file, not a Hugging Face model directory "
           f"(fix: pass the directory with config.json; our own checkpoints: sample.py or tools.eval --out_dir=...)")
    # a hub name is "name" or "org/name": a path from / . or ~ is a folder that is missing, not one to download
    refuse(not path.startswith(("/", ".", "~")), f"'{path}' does not exist (fix: pass the directory with "
           f"config.json that transformers' save_pretrained wrote, or a hub name such as gpt2)")
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise ConversionError(f"'{path}' is not a local directory, and downloading it by hub name needs the "
                              f"huggingface_hub package (fix: pip install huggingface_hub, or pass a local "
                              f"directory with config.json and the weights)") from None
    patterns = ["*.json", "*.model", "*.txt", "*.tiktoken"]
    try:
        local = snapshot_download(path, allow_patterns=patterns + ["*.safetensors"])
        if not any(os.path.isfile(os.path.join(local, f)) for f in WEIGHT_FILES):
            local = snapshot_download(path, allow_patterns=patterns + ["*.bin"])
    except Exception as e:  # offline, unknown repo, gated repo, ...: one line, not a stack trace
        raise ConversionError(f"cannot download '{path}' from the Hugging Face hub: {_first_line(e)} "
                              f"(fix: check the name and the connection, or pass a local directory)") from None
    return local


def read_config(directory):
    path = os.path.join(directory, "config.json")
    try:
        with open(path, encoding="utf-8") as f:
            hf = json.load(f)
    except (OSError, ValueError) as e:
        raise ConversionError(f"cannot read {path}: {_first_line(e)} (fix: re-download or re-save the model)") from None
    refuse(isinstance(hf, dict), f"{path} is not a JSON object of settings (fix: re-download or re-save the model)")
    return hf


def read_weights(directory):
    """All tensors of the checkpoint (one file or the shards listed in an *.index.json)."""
    name = next((f for f in WEIGHT_FILES if os.path.isfile(os.path.join(directory, f))), None)
    refuse(name is not None, f"no weights in '{directory}' (expected one of {', '.join(WEIGHT_FILES)}) "
           f"(fix: save the model with save_pretrained, or download its weights too)")
    files = [name]
    if name.endswith(".index.json"):
        files = shard_files(os.path.join(directory, name))
    tensors = {}
    for file in files:
        tensors.update(_read_weight_file(os.path.join(directory, file)))
    return tensors


def shard_files(index):
    """The shard files an *.index.json names (its weight_map: tensor name -> file), with one-line errors for a
    damaged index. A shard is a file beside the index: a name that leaves the folder (../x, /x) would read weights
    from elsewhere, and is refused."""
    try:
        with open(index, encoding="utf-8") as f:
            content = json.load(f)
    except (OSError, ValueError) as e:
        raise ConversionError(f"cannot read {index}: {_first_line(e)} (fix: re-download or re-save the model)") \
            from None
    weight_map = content.get("weight_map") if isinstance(content, dict) else None
    refuse(isinstance(weight_map, dict) and weight_map and all(isinstance(f, str) for f in weight_map.values()),
           f"{index} has no weight_map of tensor names to shard files (fix: re-download or re-save the model)")
    files = sorted(set(weight_map.values()))
    outside = [f for f in files if os.path.basename(f) != f or f in ("", ".", "..")]
    if outside:
        raise ConversionError(f"{index} names a shard outside its folder ({outside[0]!r}): shards are files beside "
                              f"it (fix: put the shards in that folder and name them only by file name)")
    return files


def _read_weight_file(path):
    try:
        if path.endswith(".safetensors"):
            try:
                from safetensors.torch import load_file  # optional: only needed for .safetensors files
            except ImportError:
                raise ConversionError(f"'{path}' is a .safetensors file and the optional package safetensors "
                                      f"is not installed (fix: pip install safetensors)") from None
            return load_file(path)
        return torch.load(path, map_location="cpu", weights_only=True)
    except ConversionError:
        raise
    except Exception as e:
        from safety_net.checkpoint import unsafe_pickle_error
        refused = unsafe_pickle_error(e, path, fix="save it as model.safetensors (save_pretrained's default)")
        if refused is not None:
            raise ConversionError(str(refused)) from None
        raise ConversionError(f"cannot read weights '{path}': {_first_line(e)} (fix: re-download the file)") from None


# ----------------------------------------------------------------------------------------------
# config.json -> GPTConfig
# ----------------------------------------------------------------------------------------------

def architecture(hf):
    """'gpt2' or 'llama' for a transformers config dict; refuses anything else."""
    archs = hf.get("architectures") or []
    kind = hf.get("model_type")
    if any(a in GPT2_ARCHS for a in archs) or (not archs and kind == "gpt2"):
        return "gpt2"
    if any(a in LLAMA_ARCHS for a in archs) or (not archs and kind in ("llama", "mobilellm")):
        return "llama"
    found = ", ".join(archs) or f"model_type {kind!r}"
    raise ConversionError(f"unknown architecture {found} (supported: {', '.join(GPT2_ARCHS + LLAMA_ARCHS)}) "
                          f"(fix: convert a GPT-2, Llama or MobileLLM model)")


# the sizes of a mapped config (GPTConfig's names), which must be whole numbers
SIZE_FIELDS = ("vocab_size", "block_size", "n_layer", "n_head", "n_kv_head", "n_embd", "mlp_hidden", "share_group_size")


# config.json's number fields (its names) that are read: real numbers, and sizes (null: refused; n_inner, head_dim
# and num_key_value_heads, which transformers leaves null for its default, are not listed)
HF_REALS = ("layer_norm_epsilon", "rms_norm_eps", "rope_theta")
HF_SIZES = ("vocab_size", "n_positions", "n_layer", "n_head", "n_embd", "hidden_size", "num_attention_heads",
            "num_hidden_layers", "max_position_embeddings", "intermediate_size", "layer_sharing_repeats")


def check_numbers(hf, fix):
    """One line naming a number field of config.json that is null or a string (a real one: or true/false), as
    config.json spells it: Python's comparison or arithmetic error was printed (an exploration). Sizes of another
    type (1.5, true): gpt_config_from_hf."""
    for key in HF_REALS + HF_SIZES:
        value = hf.get(key, 0)
        if key in HF_SIZES:
            ok = value is not None and not isinstance(value, str)
        else:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        refuse(ok, f"config.json gives {key}={json.dumps(value)}: it must be a "
               f"{'whole number' if key in HF_SIZES else 'number'} {fix}")


def gpt_config_from_hf(hf):
    """The GPTConfig whose model computes the same function as the transformers model of config dict `hf`."""
    from model import GPTConfig
    fix = "(fix: use the config.json that transformers saved with these weights)"
    check_numbers(hf, fix)
    try:   # TypeError: a value of another type ("n_embd": "sixteen") meets arithmetic or a comparison
        args = gpt2_args(hf) if architecture(hf) == "gpt2" else llama_args(hf)
        sizes = {k: args[k] for k in SIZE_FIELDS if args.get(k) is not None}
        odd = {k: v for k, v in sizes.items() if not isinstance(v, int) or isinstance(v, bool)}
        refuse(not odd, f"config.json gives sizes that are not whole numbers (our names): "
               f"{', '.join(f'{k}={v!r}' for k, v in odd.items())} {fix}")
        # GPTConfig's checks list every layer's width: a billion layers hung there (an exploration)
        refuse(sizes.get("n_layer", 0) <= MAX_LAYERS, f"config.json gives n_layer={sizes.get('n_layer', 0):,}: more "
               f"than {MAX_LAYERS:,} layers take too long to build {fix}")
        return GPTConfig(dropout=0.0, **args)
    except ConversionError:
        raise
    except (TypeError, ValueError) as e:
        raise ConversionError(f"the checkpoint's config does not fit our GPTConfig: {e} {fix}") from None


def activation_from_hf(name):
    refuse(name in ACT_FROM_HF, f"activation {name!r} is not implemented here (supported: {', '.join(ACT_FROM_HF)}) "
           f"(fix: convert a model with one of these)")
    return ACT_FROM_HF[name]


def gpt2_args(hf):
    """GPT2LMHeadModel (defaults are GPT2Config's)."""
    refuse(hf.get("scale_attn_weights", True), "scale_attn_weights=false (attention without the 1/sqrt(head "
           "size) scale) is not implemented here (fix: convert a model with the usual scale)")
    refuse(not hf.get("scale_attn_by_inverse_layer_idx", False), "scale_attn_by_inverse_layer_idx=true "
           "(attention scaled by 1/layer) is not implemented here (fix: convert a model without it)")
    refuse(not hf.get("add_cross_attention", False), "cross-attention (add_cross_attention=true) is not "
           "implemented here: ours is a decoder-only model (fix: convert a decoder-only model)")
    width = hf.get("n_embd", 768)
    return dict(
        vocab_size=hf.get("vocab_size", GPT2_VOCAB_SIZE), block_size=hf.get("n_positions", hf.get("n_ctx", 1024)),
        n_layer=hf.get("n_layer", 12), n_head=hf.get("n_head", 12), n_embd=width, bias=True,
        norm="layernorm", norm_eps=hf.get("layer_norm_epsilon", 1e-5), pos_embedding="learned",
        mlp_type="standard", activation=activation_from_hf(hf.get("activation_function", "gelu_new")),
        mlp_hidden=hf.get("n_inner") or 4 * width, tie_embeddings=bool(hf.get("tie_word_embeddings", True)))


def llama_args(hf):
    """LlamaForCausalLM (defaults are LlamaConfig's) and MobileLLM's variant of it."""
    width, heads = hf.get("hidden_size", 4096), hf.get("num_attention_heads", 32)
    head_dim = hf.get("head_dim") or width // heads
    refuse(head_dim * heads == width, f"head_dim={head_dim} x {heads} heads != hidden_size={width}: our "
           f"attention's head size is always width / n_head (fix: convert a model with head_dim = hidden_size / "
           f"num_attention_heads)")
    mobilellm = hf.get("model_type") == "mobilellm"
    tied = hf.get("tie_word_embeddings", False) or hf.get("share_embedding", mobilellm)
    repeats = hf.get("layer_sharing_repeats", 2) if hf.get("layer_sharing", False) else 1
    return dict(
        vocab_size=hf.get("vocab_size", 32000), block_size=hf.get("max_position_embeddings", 2048),
        n_layer=hf.get("num_hidden_layers", 32) * repeats, share_group_size=repeats,
        n_head=heads, n_kv_head=hf.get("num_key_value_heads") or heads, n_embd=width,
        bias=bool(hf.get("attention_bias", False) or hf.get("mlp_bias", False)),
        norm="rmsnorm", norm_eps=hf.get("rms_norm_eps", 1e-6), pos_embedding="rope", rope_base=rope_base(hf),
        mlp_type="gated", activation=activation_from_hf(hf.get("hidden_act", "silu")),
        mlp_hidden=hf.get("intermediate_size", 11008), tie_embeddings=bool(tied))


def rope_base(hf):
    """rope_theta from config.json: transformers 5 writes rope_parameters, older versions rope_theta and
    rope_scaling. Only plain RoPE is implemented here; any scaling is refused."""
    params = hf.get("rope_parameters") or {}
    scaling = hf.get("rope_scaling") or {}
    for spec in (params, scaling):
        kind = spec.get("rope_type") or spec.get("type") or "default"
        refuse(kind == "default", f"rope scaling {kind!r} is not implemented here (fix: use a checkpoint with "
               f"plain RoPE, i.e. rope_scaling null)")
        refuse(spec.get("partial_rotary_factor", 1.0) == 1.0, "partial rotary embeddings are not implemented here "
               "(fix: convert a model with RoPE on the whole head)")
    return float(params.get("rope_theta", hf.get("rope_theta", 10000.0)))


# ----------------------------------------------------------------------------------------------
# transformers weights -> our state_dict
# ----------------------------------------------------------------------------------------------

class Tensors:
    """The checkpoint's tensors; take() removes what the mapping used, so leftovers can be reported."""

    def __init__(self, tensors):
        self.tensors = dict(tensors)

    def take(self, key):
        refuse(key in self.tensors, f"the weights have no '{key}' (fix: use the complete checkpoint)")
        return self.tensors.pop(key)

    def take_or_zeros(self, key, size):
        return self.tensors.pop(key) if key in self.tensors else torch.zeros(size)

    def check_all_used(self):
        left = sorted(self.tensors)
        refuse(not left, f"the weights have {len(left)} tensors this mapping does not know, e.g. "
               f"{', '.join(left[:3])}; converting would drop them (fix: convert a plain GPT-2, Llama or MobileLLM "
               f"model, or the weights its config.json describes)")


def gpt2_state_dict(tensors, config):
    """Our state_dict from GPT2LMHeadModel tensors: GPT-2's names, mapped as nanoGPT checkpoints are
    (checkpoint.gpt2_layout_state_dict); Conv1D stores weights as (in, out): transposed."""
    from safety_net.checkpoint import gpt2_layout_state_dict
    try:
        sd, left = gpt2_layout_state_dict(tensors, config.n_layer, bias=True, conv1d=True)
    except UserError as e:
        raise ConversionError(str(e)) from None
    return with_head(sd, Tensors(left), config)


def llama_state_dict(tensors, config):
    """Our state_dict from LlamaForCausalLM tensors: q, k, v rows concatenate into our fused qkv_proj."""
    t = Tensors({k: v for k, v in tensors.items() if not k.endswith("rotary_emb.inv_freq")})
    width, kv_width = config.n_embd, kv_heads(config) * head_dim(config)
    sd = {"tok_emb.wte.weight": t.take("model.embed_tokens.weight")}
    for i in range(config.n_layer // config.share_group_size):   # one entry per unique (stored) block
        h, a, m = f"model.layers.{i}.", f"branches.0.attn.{i}.", f"branches.0.mlp.{i}."
        qkv = [h + f"self_attn.{p}_proj" for p in "qkv"]
        sd[a + "norm.weight"] = t.take(h + "input_layernorm.weight")
        sd[a + "inner.qkv_proj.weight"] = torch.cat([t.take(k + ".weight") for k in qkv])
        sd[a + "inner.out_proj.weight"] = t.take(h + "self_attn.o_proj.weight")
        sd[m + "norm.weight"] = t.take(h + "post_attention_layernorm.weight")
        hidden = None
        for ours, theirs in (("gate", "gate_proj"), ("up", "up_proj"), ("down", "down_proj")):
            sd[m + f"inner.{ours}.weight"] = w = t.take(h + f"mlp.{theirs}.weight")
            hidden = hidden or w.size(0)
        if config.bias:   # attention_bias and mlp_bias are separate there: a missing side is zeros
            sizes = (width, kv_width, kv_width)
            sd[a + "inner.qkv_proj.bias"] = torch.cat([t.take_or_zeros(k + ".bias", n) for k, n in zip(qkv, sizes)])
            sd[a + "inner.out_proj.bias"] = t.take_or_zeros(h + "self_attn.o_proj.bias", width)
            for ours, theirs, n in (("gate", "gate_proj", hidden), ("up", "up_proj", hidden), ("down", "down_proj", width)):
                sd[m + f"inner.{ours}.bias"] = t.take_or_zeros(h + f"mlp.{theirs}.bias", n)
    sd["ln_f.weight"] = t.take("model.norm.weight")
    return with_head(sd, t, config)


def with_head(sd, t, config):
    """sd with lm_head.weight when the model is untied (tied: transformers ignores a stored copy, so do we), after
    checking that every tensor of the checkpoint was used."""
    head = t.tensors.pop("lm_head.weight", None)
    if not config.tie_embeddings:
        refuse(head is not None, "config.json says the embeddings are untied but the weights have no lm_head.weight "
               "(fix: re-download the weights, or the config.json saved with them)")
        sd["lm_head.weight"] = head
    t.check_all_used()
    return sd


# ----------------------------------------------------------------------------------------------
# import: the entry points
# ----------------------------------------------------------------------------------------------

def refuse_keep_heaviest_branch(keep_heaviest_branch):
    """One line for --keep_heaviest_branch with a Hugging Face model (tools.huggingface.sample, tools.eval
    --init_from): pgpt's branches have no transformers form (tools/support.py: the export refuses n_branches), so the
    model has one branch and the flag changes nothing (it was accepted, then noted as ignored once the model loaded;
    an exploration as a new user)."""
    if keep_heaviest_branch:
        raise UserError("--keep_heaviest_branch: a Hugging Face model has one branch (pgpt's branches have no "
                        "transformers form), so it changes nothing (fix: drop it)")


def load_pretrained(name_or_dir, device="cpu", say=None):
    """(our GPT in eval mode, info) for a Hugging Face directory or hub name. info: source, directory,
    hf_config, architecture. `say` (default: print to stderr) gets one line on what was mapped."""
    from model import GPT
    say = say or (lambda msg: print(msg, file=sys.stderr))
    directory = resolve_source(name_or_dir)
    hf = read_config(directory)
    config = gpt_config_from_hf(hf)
    arch = architecture(hf)
    tensors = read_weights(directory)
    fix = "(fix: use the config.json saved with these weights, or download or export the model again)"
    try:
        sd = (gpt2_state_dict if arch == "gpt2" else llama_state_dict)(tensors, config)
    except RuntimeError as e:   # a tensor of another rank than the mapping transposes or concatenates
        raise ConversionError(f"the weights of '{name_or_dir}' do not fit its config.json: {_first_line(e)} {fix}") \
            from None
    check_weights(sd, config, name_or_dir, fix)   # before the model is built: its sizes may be terabytes
    from safety_net.checkpoint import check_finite
    check_finite(sd, name_or_dir, fix="download or export the model again")   # NaN weights sample nothing sane
    model = GPT(config)
    try:
        model.load_state_dict(sd)
    except RuntimeError as e:
        raise ConversionError(f"the weights of '{name_or_dir}' do not fit the mapped config: "
                              f"{_first_line(e)} {fix}") from None
    model.to(device).eval()
    say(f"imported {(hf.get('architectures') or [arch])[0]} from {name_or_dir}: "
        f"{model.get_num_params(False):,} parameters, {depth_summary(model)}; GPTConfig({describe(config)})")
    return model, dict(source=os.fspath(name_or_dir), directory=directory, hf_config=hf, architecture=arch)


def check_weights(sd, config, source, fix):
    """The mapped weights against the shapes of the model config.json describes, built on the meta device (no
    memory): a config.json of another model, or of sizes that would allocate terabytes, is refused before the
    model is built; so are integer tensors, which load_state_dict would quietly turn into floats."""
    from model import GPT
    integer = [f"{k}: {str(v.dtype).replace('torch.', '')}" for k, v in sd.items() if not v.is_floating_point()]
    if integer:
        raise ConversionError(f"'{source}' holds integer tensors where weights are floating point (e.g. {integer[0]}) "
                              f"(fix: download or export the model again)")
    with torch.device("meta"):
        shapes = {k: v.shape for k, v in GPT(config).state_dict().items()}
    reshaped = [f"{k} {tuple(v.shape)} instead of {tuple(shapes[k])}" for k, v in sd.items()
                if k in shapes and v.shape != shapes[k]]
    if reshaped:
        raise ConversionError(f"the weights of '{source}' do not fit its config.json: {len(reshaped)} tensor(s) of "
                              f"another shape (e.g. {reshaped[0]}) {fix}")


def from_pretrained(name_or_dir, device="cpu", verbose=True):
    """Our GPT (eval mode) of a Hugging Face directory or hub name; `verbose` prints what was mapped."""
    model, _ = load_pretrained(name_or_dir, device, say=None if verbose else (lambda msg: None))
    return model


def save_imported(name_or_dir, out, say=None):
    """A Hugging Face model as a checkpoint file `out` (weights, model_args, source: checkpoint.save_checkpoint),
    for train.py --init_from=<file> (weights only), written by `import`."""
    from safety_net.checkpoint import save_checkpoint
    model, info = load_pretrained(name_or_dir, say=say)
    save_checkpoint(out, model.state_dict(), dataclasses.asdict(model.config), source=info["source"],
                    tokenizer_id=recorded_tokenizer_id(info))


def recorded_tokenizer_id(info):
    """The tokenizer_id our exports record in config.json (export), from load_pretrained's info; None for other
    models. With it, train.py and tools.eval refuse data of another tokenizer."""
    recorded = info["hf_config"].get("tokenizer_id")
    return recorded if isinstance(recorded, str) else None


def checked_data_dir(info, data_dir):
    """--data_dir for a Hugging Face model (tools.eval, tools.huggingface.sample), refused in one line when its ids
    are not the model's: our export's recorded tokenizer_id is checked as a checkpoint's (resolve_data_dir); a
    GPT-2-vocabulary model without one reads GPT-2 BPE ids, so a char or compact dataset is refused (its ids
    meant other text, scored and sampled without a word)."""
    from safety_net.dataset import load_meta, resolve_data_dir
    ckpt = {"path": info["source"], "tokenizer_id": recorded_tokenizer_id(info)}
    data_dir = resolve_data_dir(ckpt, data_dir)
    kind = load_meta(data_dir).get("tokenizer")
    gpt2 = info["architecture"] == "gpt2" and info["hf_config"].get("vocab_size", 0) >= GPT2_VOCAB_SIZE
    if ckpt["tokenizer_id"] is None and gpt2 and kind != "gpt2":
        raise UserError(f"{data_dir} is tokenized with the {kind} tokenizer, but {info['source']} reads GPT-2 BPE "
                        f"ids (fix: --data_dir=<a dataset prepared with the gpt2 tokenizer>, e.g. data/wikitext103)")
    return data_dir


def describe(config):
    """The GPTConfig fields that differ from the defaults, as k=v."""
    from model import GPTConfig
    defaults = GPTConfig()
    return ", ".join(f"{f.name}={getattr(config, f.name)!r}" for f in dataclasses.fields(config)
                     if getattr(config, f.name) != getattr(defaults, f.name))


# ----------------------------------------------------------------------------------------------
# export: our GPT -> a transformers directory
# ----------------------------------------------------------------------------------------------

def export_plan(config, runtime="transformers"):
    """'gpt2' or 'llama': the transformers architecture that computes exactly what `config` computes.
    Raises ConversionError naming the technique that has no equivalent in `runtime` (llama.cpp's export reads
    the same architectures: a refusal of its files named transformers; a hunt)."""
    no_equivalent = [
        (config.n_branches > 1, "pgpt (n_branches > 1): parallel decoder branches"),
        (config.shrink_every > 0, "lgpt/cgpt (shrink_every > 0): width-halving layers between blocks"),
        (config.enhanced_residual, "enhanced residual: the learned alpha * x + (1 - alpha) * F(x) mix"),
        (config.think_steps > 0, "Deep Thinking (think_steps > 0): repeated passes with a KV memory"),
        (len(config.attention_layers()) < config.layers_per_branch(),
         "ShishuLM MLP-only blocks (n_attn_layers < n_layer)"),
        (config.embd_factor_dim is not None, "factorized embedding (embd_factor_dim)"),
        (getattr(config, "norm_placement", "pre") != "pre", "post-norm (norm_placement != 'pre')"),
        (getattr(config, "head_bias", False), "a bias on the output head (head_bias)"),
    ]
    for bad, what in no_equivalent:
        refuse(not bad, f"cannot export {what}: {runtime} has no equivalent of it, so a loaded model "
               f"would compute something else (fix: export a model without it; ours loads with sample.py)")
    refuse_undeclared(config, "huggingface", ConversionError)   # a field added later, until declared
    refuse(config.activation in ACT_TO_HF, f"activation {config.activation!r} has no transformers name here "
           f"(fix: export a model with one of {', '.join(ACT_TO_HF)})")
    if (config.pos_embedding, config.norm, config.mlp_type) == ("learned", "layernorm", "standard"):
        refuse(kv_heads(config) == config.n_head,
               "cannot export GQA in GPT-2 style: GPT2LMHeadModel has no grouped-query attention "
               "(fix: n_kv_head = n_head, or a RoPE + RMSNorm + gated MLP model, which exports as Llama)")
        return "gpt2"
    if (config.pos_embedding, config.norm, config.mlp_type) == ("rope", "rmsnorm", "gated"):
        return "llama"
    raise ConversionError(
        f"cannot export pos_embedding={config.pos_embedding!r}, norm={config.norm!r}, mlp_type={config.mlp_type!r}: "
        f"transformers' GPT-2 is learned + layernorm + standard, its Llama is rope + rmsnorm + gated (fix: export a "
        f"model of one of these two layouts)")


def hf_config_for(model, arch, eot="gpt2"):
    """config.json. eot: the end-of-text id of the exported tokenizer (bos = eos), None for none; "gpt2" (no
    tokenizer exported): GPT-2's 50256 for a GPT-2-style model of GPT-2's vocabulary size, else none."""
    c = model.config
    hidden = model.branches[0].mlp[0].inner.up.weight.size(0)
    common = dict(vocab_size=c.vocab_size, tie_word_embeddings=c.tie_embeddings, torch_dtype="float32",
                  use_cache=True)
    if eot == "gpt2":   # GPT-2 BPE: <|endoftext|> = 50256 is both bos and eos
        eot = GPT2_EOT_ID if arch == "gpt2" and c.vocab_size >= GPT2_VOCAB_SIZE else None
    if arch == "gpt2":
        return dict(architectures=["GPT2LMHeadModel"], model_type="gpt2", n_positions=c.block_size,
                    n_embd=c.n_embd, n_layer=c.n_layer, n_head=c.n_head, n_inner=hidden,
                    activation_function=ACT_TO_HF[c.activation], layer_norm_epsilon=c.norm_eps,
                    resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, scale_attn_weights=True,
                    bos_token_id=eot, eos_token_id=eot, **common)
    return dict(architectures=["LlamaForCausalLM"], model_type="llama", hidden_size=c.n_embd,
                intermediate_size=hidden, num_hidden_layers=c.n_layer, num_attention_heads=c.n_head,
                num_key_value_heads=kv_heads(c), head_dim=head_dim(c),
                hidden_act=ACT_TO_HF[c.activation], max_position_embeddings=c.block_size,
                rms_norm_eps=c.norm_eps, attention_bias=c.bias, mlp_bias=c.bias, attention_dropout=0.0,
                # transformers >= 5 reads rope_parameters, older versions rope_theta (+ rope_scaling)
                rope_theta=c.rope_base, rope_scaling=None,
                rope_parameters={"rope_type": "default", "rope_theta": c.rope_base},
                bos_token_id=eot, eos_token_id=eot, pretraining_tp=1, **common)


def generation_config_for(model, eot):
    """generation_config.json: end-of-text (when the vocabulary has one) ends, starts and pads generation, so
    pipeline("text-generation") stops there; by default generation stops at the model's context length."""
    special = {} if eot is None else dict(bos_token_id=eot, eos_token_id=eot, pad_token_id=eot)
    return dict(special, max_length=model.config.block_size)


def hf_state_dict_for(model, arch):
    """transformers tensors for our model; layer l gets the weights its (possibly shared) sub-layers use."""
    sd = {k: v.detach().float() for k, v in model.state_dict().items()}
    stack = model.branches[0]

    def bias(key, n):
        return sd[key] if key in sd else torch.zeros(n)   # bias=False: zeros are the same function

    out = {}
    width = model.config.n_embd
    for layer, (ai, mi, _) in enumerate(layer_sets(stack)):
        a, m = f"branches.0.attn.{ai}.", f"branches.0.mlp.{mi}."
        qkv, qkv_b = sd[a + "inner.qkv_proj.weight"], bias(a + "inner.qkv_proj.bias", sd[a + "inner.qkv_proj.weight"].size(0))
        up = sd[m + "inner.up.weight"]
        if arch == "gpt2":
            h = f"transformer.h.{layer}."
            for ours, theirs, n in ((a + "norm", h + "ln_1", width), (m + "norm", h + "ln_2", width)):
                out[theirs + ".weight"], out[theirs + ".bias"] = sd[ours + ".weight"], bias(ours + ".bias", n)
            for ours, theirs, n in ((a + "inner.qkv_proj", h + "attn.c_attn", qkv.size(0)),
                                    (a + "inner.out_proj", h + "attn.c_proj", width),
                                    (m + "inner.up", h + "mlp.c_fc", up.size(0)),
                                    (m + "inner.down", h + "mlp.c_proj", width)):
                out[theirs + ".weight"] = sd[ours + ".weight"].t()      # Conv1D: (in, out)
                out[theirs + ".bias"] = bias(ours + ".bias", n)
        else:
            h = f"model.layers.{layer}."
            kv = (qkv.size(0) - width) // 2
            for p, w, b in zip("qkv", qkv.split([width, kv, kv]), qkv_b.split([width, kv, kv])):
                out[h + f"self_attn.{p}_proj.weight"] = w
                if model.config.bias:
                    out[h + f"self_attn.{p}_proj.bias"] = b
            names = [(a + "inner.out_proj", h + "self_attn.o_proj"), (m + "inner.gate", h + "mlp.gate_proj"),
                     (m + "inner.up", h + "mlp.up_proj"), (m + "inner.down", h + "mlp.down_proj")]
            for ours, theirs in names:
                out[theirs + ".weight"] = sd[ours + ".weight"]
                if model.config.bias:
                    out[theirs + ".bias"] = sd[ours + ".bias"]
            out[h + "input_layernorm.weight"] = sd[a + "norm.weight"]
            out[h + "post_attention_layernorm.weight"] = sd[m + "norm.weight"]
    if arch == "gpt2":
        out["transformer.wte.weight"], out["transformer.wpe.weight"] = sd["tok_emb.wte.weight"], sd["pos_emb.weight"]
        out["transformer.ln_f.weight"], out["transformer.ln_f.bias"] = sd["ln_f.weight"], bias("ln_f.bias", width)
    else:
        out["model.embed_tokens.weight"], out["model.norm.weight"] = sd["tok_emb.wte.weight"], sd["ln_f.weight"]
    if not model.config.tie_embeddings:
        out["lm_head.weight"] = sd["lm_head.weight"]
    # own contiguous copies: shared layers must not alias (safetensors refuses shared storage)
    return {k: v.contiguous().clone() for k, v in out.items()}


def export(model, out_dir, say=None, weights_format="auto", meta=None, meta_source="meta.json", recorded_id=None):
    """Write `model` as a transformers directory. weights_format: auto (safetensors when installed,
    else pytorch_model.bin) | safetensors | bin. meta: the meta.json (read from meta_source) of the dataset
    the model was trained on, whose tokenizer is written beside it (tokenizer.json & co); None: weights and
    configs only; recorded_id: the checkpoint's tokenizer_id, recorded when meta is None (an import's checkpoint
    records no dataset: its export dropped the id, and tools.eval then scored data of another tokenizer; a
    hunt). Returns the list of files written."""
    say = say or (lambda msg: print(msg, file=sys.stderr))
    arch = export_plan(model.config)
    files, eot, kind = {}, "gpt2", "none"
    if meta is not None:   # built (and checked) before anything is written
        files, eot = tokenizer_files(meta, model.config.vocab_size, model.config.block_size, meta_source)
        kind = Vocabulary(meta, meta_source).describe()
    config, tensors = hf_config_for(model, arch, eot), hf_state_dict_for(model, arch)
    config[EXPORT_MARK] = True   # ours, not transformers' (check_export_folder)
    if meta is not None:   # ours, not transformers': import reads it back, for train.py's tokenizer check
        from safety_net.dataset import tokenizer_id
        config["tokenizer_id"] = tokenizer_id(meta)
    elif recorded_id:
        config["tokenizer_id"] = recorded_id
    files["generation_config.json"] = generation_config_for(model, config["eos_token_id"])
    if weights_format == "auto":
        try:
            import safetensors.torch  # noqa: F401
            weights_format = "safetensors"
        except ImportError:
            weights_format = "bin"
    # every file goes through a temporary file: a full disk or read-only folder is one line, never half a file
    from safety_net.fileio import atomic_open, check_out_dir, remove_stale_temp_files
    check_out_dir(out_dir, key="out")
    if os.path.isdir(out_dir):   # what a killed export left behind (the weights' can be gigabytes)
        remove_stale_temp_files(out_dir, WEIGHT_FILES + ("config.json",) + TOKENIZER_FILES, say)
    weights = os.path.join(out_dir, "model.safetensors" if weights_format == "safetensors" else "pytorch_model.bin")
    written = [weights]
    # and they replace the old ones together, each on disk first: a kill between the weights and the config left
    # one model's weights beside another's config and tokenizer, read without a word (a hunt)
    with contextlib.ExitStack() as together:
        for name, content in [("config.json", config)] + sorted(files.items()):
            path = os.path.join(out_dir, name)
            f = together.enter_context(atomic_open(path, "w"))
            # ensure_ascii=False: the vocabularies stay readable (UTF-8)
            json.dump(content, f, indent=2 if name != "tokenizer.json" else None, ensure_ascii=False)
            on_disk(f)
            written.append(path)
        f = together.enter_context(atomic_open(weights, "wb"))
        if weights_format == "safetensors":
            from safetensors.torch import save
            f.write(save(tensors, metadata={"format": "pt"}))
        else:
            torch.save(tensors, f)
        on_disk(f)
    for stale in WEIGHT_FILES:   # a leftover file of another format would be loaded instead
        path = os.path.join(out_dir, stale)
        if path != weights and os.path.isfile(path):
            os.remove(path)
    for stale in TOKENIZER_FILES:   # another model's tokenizer must not stay beside this one
        path = os.path.join(out_dir, stale)
        if stale not in files and os.path.isfile(path):
            os.remove(path)
    stack = model.branches[0]
    shared = (f"; layer sharing written out as repeated weights ({model.config.n_layer} layers from "
              f"{len(stack.attn)} unique attention and {len(stack.mlp)} unique FFN sub-layers)"
              if len(stack.attn) + len(stack.mlp) < 2 * model.config.n_layer else "")
    say(f"exported as {config['architectures'][0]} to {out_dir} ({os.path.basename(weights)}, "
        f"{sum(t.numel() for t in tensors.values()):,} stored parameters){shared}; tokenizer: {kind}")
    return written


def on_disk(f):
    """Flush and fsync an open file: its atomic_open then replaces the old file at once, without waiting."""
    f.flush()
    os.fsync(f.fileno())


# ----------------------------------------------------------------------------------------------
# command line
# ----------------------------------------------------------------------------------------------

DEFAULTS = dict(
    action=[],        # the positional arguments: `export`, or `import SOURCE` (a local GPT-2 / Llama / MobileLLM
                      # directory, or a hub name)
    out_dir="",       # export: the run, a folder with ckpt.pt / last.pt, or a checkpoint file; "" = the newest
                      # out*/ folder (as sample.py)
    out="",           # export: the directory to write (created if needed); import: the checkpoint file, e.g. hf.pt
    format="auto",    # export: the weights file, auto (safetensors when installed, else pytorch_model.bin),
                      # safetensors or bin
    data_dir="",      # export: the dataset folder whose tokenizer (meta.json) is written too ("" = the one the
                      # checkpoint records)
)
FORMATS = ("auto", "safetensors", "bin")


def main(argv=None):
    """Our checkpoints to Hugging Face transformers directories and back."""
    return run_command(run, DEFAULTS, argv, positional="action", with_explicit=True)


def run(config, explicit):
    action = config["action"]
    if not action or action[0] not in ("export", "import"):
        raise UserError(f"no command {' '.join(action)!r} (fix: python -m tools.huggingface.convert export "
                        f"--out_dir=out --out=hf-out/, or import gpt2 --out=hf.pt)")
    if action[0] == "import":
        return run_import(action[1:], config, explicit)
    if not config["out"] or len(action) > 1:
        given = "required: --out" if not config["out"] else f"no argument after export, got {' '.join(action)}"
        raise UserError(f"export takes --out_dir and --out, {given} (fix: python -m tools.huggingface.convert export "
                        f"--out_dir=out --out=hf-out/)")
    if config["format"] not in FORMATS:
        raise UserError(f"--format={config['format']} (fix: one of {', '.join(FORMATS)})")
    from safety_net.fileio import check_not_a_run_folder
    # a Hugging Face folder beside a checkpoint: tools read it as either
    check_not_a_run_folder(config["out"], "out", "--out=hf-out, a folder of its own")
    check_export_folder(config["out"])
    from safety_net.checkpoint import load_model
    model, ckpt = load_model(config["out_dir"])
    meta, source = checkpoint_meta(ckpt, config["data_dir"])
    out = config["out"]
    export(model, out, weights_format=config["format"], meta=meta, meta_source=source,
           recorded_id=ckpt.get("tokenizer_id"))
    if meta is None:
        print(f"no tokenizer written: {ckpt['path']} records no dataset (to include it: --data_dir=<the dataset "
              f"folder it was trained on>)", file=sys.stderr)
    print(f"load it with: AutoModelForCausalLM.from_pretrained({out!r})"
          + ("" if meta is None else f" and AutoTokenizer.from_pretrained({out!r})"), file=sys.stderr)


def run_import(sources, config, explicit):
    """`import SOURCE --out=FILE`: a Hugging Face model -> a checkpoint file for train.py --init_from."""
    export_keys = sorted(explicit & {"out_dir", "format", "data_dir"})
    if len(sources) != 1 or not config["out"] or export_keys:
        raise UserError("import takes one source and --out only (fix: python -m tools.huggingface.convert import "
                        "gpt2 --out=hf.pt)")
    from safety_net.checkpoint import written_by_torch_save
    from safety_net.fileio import check_not_a_run_file, check_out_dir, unused_name
    out = config["out"]
    # before the import, which can take minutes; a missing folder is made
    if os.path.isdir(out) or out.endswith(os.sep):
        what = "is a folder" if os.path.isdir(out) else "ends in a folder's '/'"
        name = unused_name(os.path.join(out, "hf"), ".pt")   # not over a file already there
        raise UserError(f"--out={out} {what} (fix: name a file in it, e.g. --out={name})")
    check_out_dir(os.path.dirname(os.path.abspath(out)), key="out")
    check_not_a_run_file(out, "out")   # a run's ckpt.pt would become a model it never trained
    if os.path.isfile(out) and os.path.getsize(out) > 0 and not written_by_torch_save(out):
        raise UserError(f"--out={out} exists and is not a checkpoint: it would be replaced (fix: another --out, "
                        f"e.g. --out={unused_name(os.path.join(os.path.dirname(out), 'hf'), '.pt')})")
    save_imported(sources[0], out)
    print(f"wrote {out}: start a run from it with python train.py ... --init_from={out}", file=sys.stderr)


def check_export_folder(out):
    """One line when folder `out` holds model or tokenizer files that no export of ours wrote (its config.json
    lacks EXPORT_MARK): another program's config.json and tokenizer were replaced without a word (a hunt); or
    other files only (a user's: the export's would mix with them). Hidden names (.lock, a killed write's
    temporary files) do not count."""
    present = [name for name in ("config.json",) + WEIGHT_FILES + TOKENIZER_FILES
               if os.path.exists(os.path.join(out, name))]
    if not present:
        others = sorted(name for name in os.listdir(out) if not name.startswith(".")) if os.path.isdir(out) else []
        if others:
            from safety_net.fileio import unused_name
            raise UserError(f"--out={out} is a folder of other files ({', '.join(others[:3])}"
                            f"{', ...' if len(others) > 3 else ''}), not an export's: the export's files would mix "
                            f"with them (fix: a new folder, e.g. --out={unused_name(os.path.join(out, 'hf-out'))})")
        return
    try:
        with open(os.path.join(out, "config.json"), encoding="utf-8") as f:
            ours = json.load(f).get(EXPORT_MARK) is True
    except (OSError, ValueError, AttributeError):   # none, not JSON, not an object
        ours = False
    if not ours:
        raise UserError(f"--out={out} holds {', '.join(present)}, which no export of ours wrote: they would be "
                        f"replaced (fix: another --out, a folder of its own)")


def checkpoint_meta(ckpt, data_dir=""):
    """(meta.json, its path) of the dataset a checkpoint was trained on (data_dir overrides the recorded one;
    either is checked to have the checkpoint's tokenizer), or (None, None) when neither names one."""
    if not data_dir and not ckpt.get("data_dir"):
        return None, None
    from safety_net.dataset import load_meta, resolve_data_dir
    folder = resolve_data_dir(ckpt, data_dir)
    return load_meta(folder, ckpt), os.path.join(folder, "meta.json")   # ckpt: a nanoGPT one's GPT-2 BPE


if __name__ == "__main__":
    main()
