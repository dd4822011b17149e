"""
A GPT-2- or Llama-shaped checkpoint -> a GGUF file for llama.cpp, written with the `gguf` package (llama.cpp's own
GGUF writer), tokenizer included:

    python -m tools.llamacpp.export --out_dir=out --gguf=model.gguf              # f32
    python -m tools.llamacpp.export --out_dir=out --gguf=model-q8.gguf --quantize=q8_0
    llama-cli -m model.gguf -p "War is " -n 200 --temp 0                         # or llama_cpp.Llama(model_path=...)

The shapes are tools/huggingface/convert.py's (export_plan: GPT-2 = learned positions + LayerNorm + standard MLP,
Llama = RoPE + RMSNorm + gated MLP, GQA allowed; MobileLLM's shared layers written out once per application), and
so are the tensors (hf_state_dict_for), renamed to llama.cpp's names. Llama's q and k rows are reordered as
llama.cpp's converter does (its RoPE rotates neighbouring pairs, ours and transformers' the two halves of a head).
The activation must be the one llama.cpp's graph of the shape applies (GPT-2: GELU, Llama: SiLU; llamacpp_arch).

Tokenizers, as llama.cpp's GPT-2 BPE ("gpt2" model, "gpt-2" pre-tokenizer):
  gpt2, compact   the byte-level BPE vocabulary and merges of tools/huggingface/tokenizer.py
  char            each character spelled in GPT-2's byte-level alphabet (so '\\n' is 'Ċ', ' ' is 'Ġ'), and merges
                  only to rebuild multi-byte characters: BPE then yields one token per character. A GGUF vocabulary
                  needs an end-of-text token (llama.cpp otherwise takes id 11, a character here), so ours appends
                  one, id vocab_size, with an all-zero embedding and head row: its logit is always 0, so a sampler
                  can pick it, and greedy decoding does when every character's logit is negative (our choice).
--quantize=q8_0 stores every matrix whose rows are a multiple of 32 wide in llama.cpp's Q8_0 (blocks of 32 int8 and a
scale); other matrices stay f32 (each named on stderr), and so do norms and biases.
"""
import os
import sys

import numpy as np
import torch

from tools.sizes import head_dim, kv_heads
from tools.support import refuse_undeclared
from safety_net.configurator import UserError, run_command
from safety_net.tokenizers import GPT2_EOT, Vocabulary

DEFAULTS = dict(
    out_dir="",             # directory with ckpt.pt / last.pt, or a checkpoint file; "" = the newest out*/ folder
    data_dir="",            # dataset folder whose meta.json gives the tokenizer; "" = the one the checkpoint records
    gguf="model.gguf",      # the file to write
    quantize="f32",         # f32 (none) | q8_0: the name tools.executorch.export gives its own
)
TYPES = ("f32", "q8_0")
Q8_BLOCK = 32
# the tokenizer's ids, which sample.py draws among: not a padded model's other rows, nor the end-of-text a char
# vocabulary's file appends
MODEL_VOCAB_KEY = "compact_gpt.vocab_size"
# the activations of ours that llama.cpp's graph of each architecture computes, first the one it applies to every
# FFN whatever the file says (a GGUF file has no key for it): gpt2 tanh GELU, and our exact GELU within
# tests/test_llamacpp.py's bound; llama SiLU
LLAMACPP_ACTIVATIONS = {"gpt2": ("gelu_tanh", "gelu"), "llama": ("silu",)}


def llamacpp_arch(config):
    """export_plan's architecture for `config`, refused in one line when llama.cpp's graph of it would apply another
    activation than the model's (the file would load and compute something else). ConversionError, as
    export_plan's: tools/executorch/bench.py marks such a model "no GGUF"."""
    from tools.huggingface import ConversionError
    from tools.huggingface.convert import export_plan
    arch = export_plan(config, runtime="llama.cpp")
    if config.activation not in LLAMACPP_ACTIVATIONS[arch]:
        applies = LLAMACPP_ACTIVATIONS[arch][0]
        raise ConversionError(f"cannot export activation={config.activation!r} for llama.cpp: its {arch} graph "
                              f"applies {applies} to every FFN, so the file would compute something else (fix: a "
                              f"model trained with --activation={applies}, or the Hugging Face export, which names "
                              f"any: python -m tools.huggingface.convert export)")
    return arch


def permute_rope(w, n_heads):
    """Rows of a q or k projection from half-split RoPE order (ours, transformers') to llama.cpp's interleaved pairs:
    what llama.cpp's convert_hf_to_gguf.py does to q_proj and k_proj."""
    return w.reshape(n_heads, 2, w.shape[0] // n_heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def gguf_tensors(model, arch):
    """{llama.cpp name: float32 array} of the model (layers written out per application)."""
    import gguf
    from tools.huggingface.convert import hf_state_dict_for
    c = model.config
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.GPT2 if arch == "gpt2" else gguf.MODEL_ARCH.LLAMA, c.n_layer)
    out = {}
    for hf_name, t in hf_state_dict_for(model, arch).items():
        if arch == "gpt2" and hf_name.endswith((".c_attn.weight", ".c_proj.weight", ".c_fc.weight")):
            t = t.t()   # transformers' GPT-2 Conv1D stores (in, out); llama.cpp wants (out, in)
        if arch == "llama" and ".q_proj." in hf_name:
            t = permute_rope(t, c.n_head)
        if arch == "llama" and ".k_proj." in hf_name:
            t = permute_rope(t, kv_heads(c))
        name = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        if name is None:
            raise UserError(f"no llama.cpp name for {hf_name} (fix: extend tools/llamacpp/export.py)")
        out[name] = t.float().contiguous().numpy()
    if "output.weight" not in out and c.tie_embeddings:
        out["output.weight"] = out["token_embd.weight"]   # written out: a padded char vocabulary pads both
    return out


def char_vocabulary(chars):
    """(tokens, merges) of llama.cpp's byte-level BPE for a character vocabulary: character i is token i, spelled
    in GPT-2's byte-level alphabet; a multi-byte character is rebuilt by merges of its bytes, left to right (the
    partial spellings need no token: their merges always go on to the whole character, which is one)."""
    from tools.huggingface.tokenizer import gpt2_byte_to_unicode
    table = gpt2_byte_to_unicode()
    tokens, merges = [], []
    for ch in chars:
        parts = [table[b] for b in ch.encode("utf-8")]
        tokens.append("".join(parts))
        for i in range(1, len(parts)):
            merges.append(f"{''.join(parts[:i])} {parts[i]}")
    if not merges:   # llama.cpp refuses a BPE vocabulary without merges; this one never applies: its parts are
        space = table[ord(" ")]   # two-space symbols, which no merge makes (a merge whose result is no token loses
        merges.append(f"{space * 2} {space * 2}")   # the text: llama.cpp drops it, bytes and all)
    return tokens, merges


def write_tokenizer(writer, meta, config, source, tensors):
    """The tokenizer's GGUF keys; pads the vocabulary of a char model with end-of-text (tensors change in place)."""
    from tools.huggingface.tokenizer import tokenizer_files
    files, eot = tokenizer_files(meta, config.vocab_size, config.block_size, source)   # checks, one-line errors
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    vocabulary = Vocabulary(meta, source)   # checked by tokenizer_files above
    if vocabulary.is_char_level:
        tokens, merges = char_vocabulary(vocabulary.chars())
        tokens += [f"<unused{i}>" for i in range(len(tokens), config.vocab_size)] + [GPT2_EOT]
        eot = config.vocab_size
        for name in ("token_embd.weight", "output.weight"):
            tensors[name] = np.concatenate([tensors[name], np.zeros_like(tensors[name][:1])])
    else:
        bpe = files["tokenizer.json"]["model"]
        vocab = dict(bpe["vocab"], **{GPT2_EOT: eot})
        tokens = [None] * config.vocab_size
        for text, i in vocab.items():
            tokens[i] = text
        tokens = [t if t is not None else f"<unused{i}>" for i, t in enumerate(tokens)]   # model padding rows
        merges = [" ".join(pair) for pair in bpe["merges"]]
    types = [3 if t == GPT2_EOT or t.startswith("<unused") else 1 for t in tokens]   # 3: control, 1: normal
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(eot)
    writer.add_eos_token_id(eot)
    writer.add_add_bos_token(False)
    return len(tokens)


def write_gguf(model, path, qtype, meta, source, say=print):
    refuse_undeclared(model.config, "gguf")
    import gguf
    from safety_net.fileio import atomic_path
    from tools.huggingface.convert import hf_config_for
    arch, c = llamacpp_arch(model.config), model.config
    hf = hf_config_for(model, arch, eot=None)
    hidden = hf["n_inner"] if arch == "gpt2" else hf["intermediate_size"]
    tensors = gguf_tensors(model, arch)
    with atomic_path(path) as tmp:   # gguf writes to a path: a temporary one, which replaces `path` when complete
        writer = gguf.GGUFWriter(tmp, arch)
        writer.add_block_count(c.n_layer)
        writer.add_context_length(c.block_size)
        writer.add_embedding_length(c.n_embd)
        writer.add_feed_forward_length(hidden)
        writer.add_head_count(c.n_head)
        if arch == "gpt2":
            writer.add_layer_norm_eps(c.norm_eps)
        else:
            writer.add_head_count_kv(kv_heads(c))
            writer.add_layer_norm_rms_eps(c.norm_eps)
            writer.add_rope_freq_base(c.rope_base)
            writer.add_rope_dimension_count(head_dim(c))
        n_vocab = write_tokenizer(writer, meta, c, source, tensors)
        writer.add_vocab_size(n_vocab)
        writer.add_uint32(MODEL_VOCAB_KEY, meta["vocab_size"])   # tools/llamacpp/run.py samples among these only
        writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0 if qtype == "q8_0" else gguf.LlamaFileType.ALL_F32)
        kept = []
        for name, data in tensors.items():
            if qtype == "q8_0" and data.ndim == 2 and data.shape[1] % Q8_BLOCK == 0:
                q = gguf.quants.quantize(data, gguf.GGMLQuantizationType.Q8_0)
                writer.add_tensor(name, q, raw_shape=q.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
            else:
                kept += [name] if qtype == "q8_0" and data.ndim == 2 else []
                writer.add_tensor(name, data)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
    note = f"; f32, not a multiple of {Q8_BLOCK} wide: {', '.join(kept)}" if kept else ""
    say(f"wrote {path} ({os.path.getsize(path) / 1e6:.2f} MB, {arch}, {qtype}, {n_vocab} tokens){note}")


def written_here(path):
    """Whether `path` is a GGUF file of this export (it holds MODEL_VOCAB_KEY), which --gguf may replace."""
    import gguf
    try:
        return MODEL_VOCAB_KEY in gguf.GGUFReader(path).fields
    except Exception:   # not GGUF, or damaged: the reader raises ValueError, KeyError, struct and numpy errors
        return False


def run(cfg):
    from safety_net.checkpoint import load_model
    from safety_net.fileio import check_not_a_folder, check_out_dir, check_own_file, unused_name
    from tools.huggingface.convert import checkpoint_meta
    if cfg["quantize"] not in TYPES:
        raise UserError(f"--quantize must be one of {'|'.join(TYPES)}, got {cfg['quantize']!r} (fix: --quantize=q8_0 "
                        f"for 8 bits)")
    if not cfg["gguf"].endswith(".gguf"):
        raise UserError(f"--gguf must name a .gguf file, got {cfg['gguf']!r} (fix: e.g. --gguf=model.gguf)")
    check_not_a_folder(cfg["gguf"], "model.gguf", key="gguf")
    check_out_dir(os.path.dirname(os.path.abspath(cfg["gguf"])), key="gguf")
    check_own_file(cfg["gguf"], written_here, unused_name(cfg["gguf"].removesuffix(".gguf"), ".gguf"), key="gguf")
    model, ckpt = load_model(cfg["out_dir"], "cpu")
    llamacpp_arch(model.config)   # refuses what llama.cpp's GPT-2 and Llama cannot compute, in one line
    meta, source = checkpoint_meta(ckpt, cfg["data_dir"])
    if meta is None:
        raise UserError(f"{ckpt['path']} records no dataset, so its tokenizer is unknown "
                        f"(fix: --data_dir=<the dataset folder it was trained on>)")
    with torch.no_grad():
        write_gguf(model, cfg["gguf"], cfg["quantize"], meta, source, say=lambda m: print(m, file=sys.stderr))


def main(argv=None):
    return run_command(run, DEFAULTS, argv)


if __name__ == "__main__":
    main(sys.argv[1:])
