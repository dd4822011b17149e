"""tools/llamacpp: GGUF files for llama.cpp.

Default run (needs the `gguf` package, seconds): what the file holds, read back with gguf's reader: every layer
application written out (shared weights repeated), q and k in llama.cpp's RoPE row order, Q8_0 within 0.57 of a
quantization step, the char vocabulary spelled in GPT-2's byte alphabet plus end-of-text; and llama.cpp's forward
pass, written out here in numpy from its conventions over the file's tensors and settings, computes our logits.
`-m slow`, when llama_cpp is installed (it builds llama.cpp from source, ~20 minutes on 2 cores): llama.cpp's
greedy text equals `sample.py --temperature=0` for a char-level and a GPT-2-BPE Llama-shaped checkpoint and a
char-level GPT-2-shaped one, with their logits within stated bounds (f32 and q8_0), and its tokenizer gives our ids
(on the prompts, and on all of tinyshakespeare).
"""
import dataclasses
import gc
import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

gguf = pytest.importorskip("gguf", reason="gguf is not installed (pip install -r requirements-dev.txt)")

from conftest import one_error_line
from model import GPT, GPTConfig
from tools.llamacpp import export
from safety_net.dataset import tokenizer_id
from safety_net.fileio import atomic_save

pytestmark = pytest.mark.usefixtures("one_thread")   # conftest.py

CHARS = list("\n !',.:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyzé")
LLAMA = dict(pos_embedding="rope", norm="rmsnorm", mlp_type="gated", activation="silu", bias=False, n_kv_head=2,
             share_group_size=2, n_layer=4, n_head=4, n_embd=64, mlp_hidden=96, block_size=32)
GPT2 = dict(n_layer=2, n_head=4, n_embd=64, block_size=32)
# the shapes whose file llamacpp_forward runs: settings far from the defaults (norm eps 0.05, RoPE base 500, GQA,
# shared layers) so that one written wrong shows (tests/test_support.py reads this table)
FORWARD_SHAPES = {"llama": dict(LLAMA, rope_base=500.0, norm_eps=0.05),
                  "gpt2": dict(GPT2, activation="gelu_tanh", norm_eps=0.05),
                  "llama_untied": dict(LLAMA, mlp_hidden=None, mlp_ratio=2.0, tie_embeddings=False,
                                       share_from_layer=2, share_sublayers="attn", norm_eps=0.05)}


def checkpoint(tmp_path, args, meta):
    """A random model (matrices at std 0.3) saved like train.py, on a dataset with `meta`: (out_dir, model)."""
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "meta.json").write_text(json.dumps(meta))
    torch.manual_seed(0)
    model = GPT(GPTConfig(**args)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p) * 0.3 if p.dim() >= 2 else p + 0.1 * torch.randn_like(p))
    atomic_save({"model": model.state_dict(), "model_args": dataclasses.asdict(model.config), "iter_num": 0,
                 "best_val_loss": 9.9, "config": {}, "dataset": meta["dataset"], "data_dir": str(tmp_path / "data"),
                 "tokenizer_id": tokenizer_id(meta)}, str(tmp_path / "out" / "ckpt.pt"))
    return tmp_path / "out", model


def char_meta():
    return {"dataset": "tinychars", "tokenizer": "char", "vocab_size": len(CHARS), "chars": CHARS}


def tensors(path):
    reader = gguf.GGUFReader(str(path))
    return reader, {t.name: gguf.quants.dequantize(t.data, t.tensor_type).reshape([int(n) for n in t.shape[::-1]])
                    for t in reader.tensors}


def llamacpp_rope_rows(n_heads, head_dim):
    """llama.cpp's row order of a q or k projection: in head h, its row 2i + j is our row j * head_dim / 2 + i
    (our RoPE, as transformers', pairs the two halves of a head; llama.cpp's pairs neighbouring rows)."""
    half = head_dim // 2
    return [h * head_dim + j * half + i for h in range(n_heads) for i in range(half) for j in range(2)]


def test_llama_file_holds_our_weights_and_char_vocabulary(tmp_path):
    out_dir, model = checkpoint(tmp_path, dict(LLAMA, vocab_size=len(CHARS)), char_meta())
    export.main([f"--out_dir={out_dir}", f"--gguf={tmp_path / 'f32.gguf'}"])
    export.main([f"--out_dir={out_dir}", f"--gguf={tmp_path / 'q8.gguf'}", "--quantize=q8_0"])
    assert sorted(p.name for p in tmp_path.glob("*.gguf*")) == ["f32.gguf", "q8.gguf"]   # no temp file left
    reader, f32 = tensors(tmp_path / "f32.gguf")
    _, q8 = tensors(tmp_path / "q8.gguf")
    sd = model.state_dict()
    qkv = sd["branches.0.attn.1.inner.qkv_proj.weight"].numpy()   # layers 2 and 3 apply shared weight set 1
    for layer in (2, 3):
        q = f32[f"blk.{layer}.attn_q.weight"]
        np.testing.assert_array_equal(q, qkv[:64][llamacpp_rope_rows(4, 16)])
        np.testing.assert_array_equal(f32[f"blk.{layer}.attn_k.weight"], qkv[64:96][llamacpp_rope_rows(2, 16)])
        np.testing.assert_array_equal(f32[f"blk.{layer}.ffn_gate.weight"], sd["branches.0.mlp.1.inner.gate.weight"])
    assert not np.array_equal(f32["blk.0.attn_q.weight"], f32["blk.2.attn_q.weight"])
    # Q8_0: one scale d = max |w| / 127 per 32 values, stored as f16 (relative error <= 2^-11): each value moves by
    # at most d / 2 + 127 * d * 2^-11 < 0.57 d
    for name, w in f32.items():
        if w.ndim == 2:
            blocks = w.reshape(-1, 32)
            step = np.abs(blocks).max(axis=1, keepdims=True) / 127
            assert (np.abs(q8[name].reshape(-1, 32) - blocks) <= 0.57 * step).all(), name
            assert not np.array_equal(q8[name], w), name
    tokens = [bytes(reader.fields["tokenizer.ggml.tokens"].parts[i]).decode() for i in
              reader.fields["tokenizer.ggml.tokens"].data]
    assert tokens[:3] == ["Ċ", "Ġ", "!"] and tokens[-2:] == ["Ã©", "<|endoftext|>"]
    assert reader.fields[export.MODEL_VOCAB_KEY].contents() == len(CHARS)   # run.py samples among these only
    assert f32["token_embd.weight"].shape == (len(CHARS) + 1, 64) and not f32["token_embd.weight"][-1].any()


def test_a_padded_vocabulary_is_drawn_among_the_tokenizers_ids(tmp_path):
    """A model with more rows than its char vocabulary (train.py --vocab_size=N): sample.py draws among the
    tokenizer's ids; the file named the model's rows, so tools.llamacpp.run's greedy pick could be a padding row,
    where sample.py --temperature=0 picks a character (a hunt)."""
    out_dir, _ = checkpoint(tmp_path, dict(GPT2, vocab_size=len(CHARS) + 7), char_meta())
    export.main([f"--out_dir={out_dir}", f"--gguf={tmp_path / 'm.gguf'}"])
    reader, _ = tensors(tmp_path / "m.gguf")
    assert reader.fields[export.MODEL_VOCAB_KEY].contents() == len(CHARS)
    assert len(reader.fields["tokenizer.ggml.tokens"].data) == len(CHARS) + 7 + 1   # padding rows, end-of-text


def test_char_vocabulary_merges_rebuild_each_multibyte_character():
    """llama.cpp's BPE rebuilds a character of 2 or 3 bytes (é, €) from its bytes, left to right, up to the
    character's one token; a vocabulary of one-byte characters gets the one inert merge llama.cpp requires of a BPE
    vocabulary (a hunt: a changed line did this, and no test failed)."""
    assert export.char_vocabulary(["é", "a"]) == (["Ã©", "a"], ["Ã ©"])
    assert export.char_vocabulary(["€"]) == (["âĤ¬"], ["â Ĥ", "âĤ ¬"])
    assert export.char_vocabulary(["a", "b"]) == (["a", "b"], ["ĠĠ ĠĠ"])


def test_gguf_header_holds_the_models_sizes_and_its_end_of_text(tmp_path, monkeypatch, capsys):
    """What llama.cpp reads from the header of a char model padded by 2 rows: its context and FFN sizes, the
    vocabulary size (characters, padding rows, end-of-text), end-of-text as both bos and eos with no bos added,
    padding rows and end-of-text typed control (3). The file is whole (the padding after its last tensor
    included) when it replaces the path; one line on stderr, nothing on stdout (a hunt: a changed line did this,
    and no test failed)."""
    args = dict(LLAMA, n_layer=1, share_group_size=1, n_head=3, n_kv_head=1, n_embd=36,   # a last tensor 36 wide
                vocab_size=len(CHARS) + 2)
    out_dir, _ = checkpoint(tmp_path, args, char_meta())
    sizes, replace = [], os.replace

    def sized_replace(src, dst):
        sizes.append(os.path.getsize(src))
        replace(src, dst)

    monkeypatch.setattr(os, "replace", sized_replace)
    path = tmp_path / "m.gguf"
    export.main([f"--out_dir={out_dir}", f"--gguf={path}"])
    gc.collect()   # a writer left open would write its last bytes here
    assert sizes == [path.stat().st_size]
    out, err = capsys.readouterr()
    eot = len(CHARS) + 2
    assert out == "" and err == f"wrote {path} ({path.stat().st_size / 1e6:.2f} MB, llama, f32, {eot + 1} tokens)\n"
    fields = gguf.GGUFReader(str(path)).fields
    tokens = fields["tokenizer.ggml.tokens"].contents()
    assert len(tokens) == eot + 1 == fields["llama.vocab_size"].contents() and tokens[eot] == "<|endoftext|>"
    assert tokens[-4:-1] == ["Ã©", f"<unused{len(CHARS)}>", f"<unused{len(CHARS) + 1}>"]
    assert fields["tokenizer.ggml.token_type"].contents()[-4:] == [1, 3, 3, 3]
    assert fields["tokenizer.ggml.bos_token_id"].contents() == fields["tokenizer.ggml.eos_token_id"].contents() == eot
    assert fields["tokenizer.ggml.add_bos_token"].contents() is False
    assert fields["llama.context_length"].contents() == 32 and fields["llama.feed_forward_length"].contents() == 96


def test_a_q8_0_file_names_the_matrices_it_keeps_in_f32(tmp_path, capsys):
    """--quantize=q8_0 of a GPT-2 shape 48 wide: the header says Q8_0 (file type 7), the matrices whose rows are a
    multiple of 32 wide are Q8_0, and the line on stderr names the others, kept f32 (not the norms and biases, f32 in
    every file), with the file's size in MB (a hunt: a changed line did this, and no test failed)."""
    out_dir, _ = checkpoint(tmp_path, dict(GPT2, n_layer=1, n_embd=48, vocab_size=len(CHARS)), char_meta())
    path = tmp_path / "m.gguf"
    export.main([f"--out_dir={out_dir}", f"--gguf={path}", "--quantize=q8_0"])
    kept = ("blk.0.attn_qkv.weight, blk.0.attn_output.weight, blk.0.ffn_up.weight, token_embd.weight, "
            "position_embd.weight, output.weight")
    mb = path.stat().st_size / 1e6
    line = f"wrote {path} ({mb:.2f} MB, gpt2, q8_0, 63 tokens); f32, not a multiple of 32 wide: {kept}\n"
    assert capsys.readouterr().err == line
    reader = gguf.GGUFReader(str(path))
    assert reader.fields["general.file_type"].contents() == gguf.LlamaFileType.MOSTLY_Q8_0 == 7
    types = {t.name: t.tensor_type.name for t in reader.tensors}
    assert types["blk.0.ffn_down.weight"] == "Q8_0"
    assert types["output.weight"] == types["blk.0.attn_norm.weight"] == "F32"


def test_export_refuses_a_gguf_path_or_a_checkpoint_without_a_tokenizer(tmp_path):
    """One line each, nothing written: --gguf not ending in .gguf; --gguf inside a "folder" that is a file (said
    before the model loads); a checkpoint that records no dataset, so its tokenizer is unknown (a hunt: a changed
    line did this, and no test failed)."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(**dict(GPT2, n_layer=1, vocab_size=len(CHARS))))
    atomic_save({"model": model.state_dict(), "model_args": dataclasses.asdict(model.config), "iter_num": 0,
                 "best_val_loss": 9.9, "config": {}}, str(tmp_path / "out" / "ckpt.pt"))   # no dataset recorded
    out_dir = f"--out_dir={tmp_path / 'out'}"
    one_error_line(export.main, [out_dir, f"--gguf={tmp_path / 'modelgguf'}"],
                   f"--gguf must name a .gguf file, got '{tmp_path / 'modelgguf'}'")
    (tmp_path / "afile").write_text("not a folder")
    one_error_line(export.main, [out_dir, f"--gguf={tmp_path / 'afile' / 'm.gguf'}"],
                   f"{tmp_path / 'afile'} is a file, not a folder", "choose another --gguf")
    one_error_line(export.main, [out_dir, f"--gguf={tmp_path / 'm.gguf'}"],
                   f"{tmp_path / 'out' / 'ckpt.pt'} records no dataset, so its tokenizer is unknown", "--data_dir=")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "out"]


def test_export_replaces_only_a_gguf_file_it_wrote(tmp_path, capsys):
    """--gguf naming a file another program wrote (a user's notes, another model's GGUF) is one line naming a free
    name, the file left as it was; an earlier export's file is replaced (an exploration as a new user found it: the
    export wrote over any file)."""
    out_dir, _ = checkpoint(tmp_path, dict(GPT2, n_layer=1, vocab_size=len(CHARS)), char_meta())
    (tmp_path / "m.gguf").write_text("my notes")
    one_error_line(export.main, [f"--out_dir={out_dir}", f"--gguf={tmp_path / 'm.gguf'}"],
                   "exists and is not a file this command wrote", f"--gguf={tmp_path / 'm-2.gguf'}")
    assert (tmp_path / "m.gguf").read_text() == "my notes"
    for _ in range(2):   # the fix followed, then the same command again over its own file
        export.main([f"--out_dir={out_dir}", f"--gguf={tmp_path / 'm-2.gguf'}"])
    assert capsys.readouterr().err.count(f"wrote {tmp_path / 'm-2.gguf'}") == 2


def llamacpp_forward(path, ids):
    """Logits at every position, as llama.cpp computes them from the GGUF file (its tensors and settings only), in
    float64 numpy from llama.cpp's conventions: weights (out, in); llama: RMSNorm, RoPE rotating neighbouring pairs
    (2i, 2i+1) of a head by pos * base^(-2i / head size) (rope type NORM), query head h reading kv head
    h // (n_head / n_kv_head), SwiGLU; gpt2: LayerNorm, learned positions, fused qkv rows [q | k | v], tanh GELU."""
    reader, t = tensors(path)
    t = {k: v.astype(np.float64) for k, v in t.items()}
    arch = reader.fields["general.architecture"].contents()

    def setting(key):
        return reader.fields[f"{arch}.{key}"].contents()

    n_head = setting("attention.head_count")
    n_kv = setting("attention.head_count_kv") if arch == "llama" else n_head
    T = len(ids)
    causal = np.tril(np.ones((T, T), dtype=bool))

    def norm(x, name):
        if arch == "llama":
            return x / np.sqrt((x ** 2).mean(-1, keepdims=True) + setting("attention.layer_norm_rms_epsilon")) \
                * t[name + ".weight"]
        x = x - x.mean(-1, keepdims=True)
        return x / np.sqrt((x ** 2).mean(-1, keepdims=True) + setting("attention.layer_norm_epsilon")) \
            * t[name + ".weight"] + t[name + ".bias"]

    def linear(x, name):
        return x @ t[name + ".weight"].T + t.get(name + ".bias", 0.0)

    def rope(x, heads):
        x = x.reshape(T, heads, -1).copy()
        n_rot = setting("rope.dimension_count")
        for i in range(n_rot // 2):
            angle = np.arange(T)[:, None] * setting("rope.freq_base") ** (-2 * i / n_rot)
            a = x[..., 2 * i].copy()
            b = x[..., 2 * i + 1].copy()
            x[..., 2 * i] = a * np.cos(angle) - b * np.sin(angle)
            x[..., 2 * i + 1] = a * np.sin(angle) + b * np.cos(angle)
        return x.reshape(T, -1)

    def attention(q, k, v):
        hd = q.shape[1] // n_head
        out = np.empty_like(q)
        for h in range(n_head):
            g = h // (n_head // n_kv)
            scores = q[:, h * hd:(h + 1) * hd] @ k[:, g * hd:(g + 1) * hd].T / np.sqrt(hd)
            scores = np.where(causal, scores, -np.inf)
            p = np.exp(scores - scores.max(-1, keepdims=True))
            out[:, h * hd:(h + 1) * hd] = (p / p.sum(-1, keepdims=True)) @ v[:, g * hd:(g + 1) * hd]
        return out

    x = t["token_embd.weight"][ids]
    if arch == "gpt2":
        x = x + t["position_embd.weight"][:T]
    for layer in range(setting("block_count")):
        b = f"blk.{layer}."
        h = norm(x, b + "attn_norm")
        if arch == "llama":
            q = rope(linear(h, b + "attn_q"), n_head)
            k = rope(linear(h, b + "attn_k"), n_kv)
            v = linear(h, b + "attn_v")
        else:
            q, k, v = np.split(linear(h, b + "attn_qkv"), 3, axis=-1)
        x = x + linear(attention(q, k, v), b + "attn_output")
        h = norm(x, b + "ffn_norm")
        if arch == "llama":
            gate = linear(h, b + "ffn_gate")
            h = gate / (1 + np.exp(-gate)) * linear(h, b + "ffn_up")
        else:
            h = linear(h, b + "ffn_up")
            h = 0.5 * h * (1 + np.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * h ** 3)))
        x = x + linear(h, b + "ffn_down")
    return linear(norm(x, "output_norm"), "output")


@pytest.mark.parametrize("shape", FORWARD_SHAPES)
def test_gguf_file_computes_our_logits_by_llamacpps_conventions(tmp_path, shape):
    """The f32 file, read back and run by llama.cpp's equations (llamacpp_forward), gives our model's logits on the
    char vocabulary, and 0 for the end-of-text the file appends (FORWARD_SHAPES)."""
    out_dir, model = checkpoint(tmp_path, dict(FORWARD_SHAPES[shape], vocab_size=len(CHARS)), char_meta())
    export.main([f"--out_dir={out_dir}", f"--gguf={tmp_path / 'm.gguf'}"])
    ids = torch.randint(0, len(CHARS), (20,), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ours = model(ids[None], all_logits=True)[0][0].double().numpy()
    theirs = llamacpp_forward(tmp_path / "m.gguf", ids.numpy())
    assert theirs.shape == (20, len(CHARS) + 1) and np.all(theirs[:, -1] == 0) and np.abs(ours).max() > 1
    np.testing.assert_allclose(theirs[:, :-1], ours, rtol=0, atol=1e-4 * np.abs(ours).max())


def test_refusals_are_one_line(tmp_path):
    out_dir, _ = checkpoint(tmp_path, dict(GPT2, vocab_size=len(CHARS), n_branches=2, tie_embeddings=False),
                            char_meta())
    # the refusal names llama.cpp, the runtime asked for (it said transformers; a hunt)
    one_error_line(export.main, [f"--out_dir={out_dir}", f"--gguf={tmp_path / 'm.gguf'}"], "pgpt",
                   "llama.cpp has no equivalent")
    one_error_line(export.main, [f"--out_dir={out_dir}", f"--gguf={tmp_path / 'm.gguf'}", "--quantize=q4"], "q8_0")
    # a folder named *.gguf: "cannot write it: Is a directory (fix: free disk space, ...)" (a hunt)
    (tmp_path / "f.gguf").mkdir()
    one_error_line(export.main, [f"--out_dir={out_dir}", f"--gguf={tmp_path / 'f.gguf'}"], "is a folder",
                   f"--gguf={tmp_path / 'f.gguf' / 'model.gguf'}")
    from tools.llamacpp import run
    # nor is such a folder a file to run (a hunt: a changed line did this, and no test failed)
    one_error_line(run.main, [f"--gguf={tmp_path / 'f.gguf'}"], f"no file {tmp_path / 'f.gguf'}")
    (tmp_path / "f.gguf").rmdir()
    assert not list(tmp_path.glob("*.gguf"))
    one_error_line(run.main, [f"--gguf={tmp_path / 'm.gguf'}"], "no file")
    one_error_line(run.main, [f"--gguf={tmp_path / 'm.gguf'}", "--max_new_tokens=-1"], "max_new_tokens")
    one_error_line(run.main, [f"--gguf={tmp_path / 'm.gguf'}", "--num_threads=-1"], "num_threads")
    # --start=FILE:path is read as sample.py reads it (it was sampled as the literal text "FILE:...")
    one_error_line(run.main, [f"--gguf={tmp_path / 'm.gguf'}", f"--start=FILE:{tmp_path / 'none.txt'}"],
                   "cannot read the start file")


@pytest.mark.parametrize("shape, activation", [("llama", "gelu"), ("llama", "relu"), ("gpt2", "silu"),
                                               ("gpt2", "relu")])
def test_an_activation_llamacpps_graph_does_not_apply_is_refused(tmp_path, shape, activation):
    """llama.cpp's llama graph applies SiLU and its gpt2 graph tanh GELU whatever the model used, and a GGUF file has
    no key for it: these files loaded and gave logits 6-39% off (a differential fuzz), llama with GPTConfig's
    default GELU among them. They are refused in one line, nothing written."""
    out_dir, _ = checkpoint(tmp_path, dict(FORWARD_SHAPES[shape], activation=activation, vocab_size=len(CHARS)),
                            char_meta())
    one_error_line(export.main, [f"--out_dir={out_dir}", f"--gguf={tmp_path / 'm.gguf'}"],
                   f"cannot export activation='{activation}' for llama.cpp: its {shape} graph applies "
                   f"{export.LLAMACPP_ACTIVATIONS[shape][0]} to every FFN", "Hugging Face export")
    assert not list(tmp_path.glob("*.gguf*"))
    from tools.huggingface import ConversionError   # what tools/executorch/bench.py marks "no GGUF"
    with pytest.raises(ConversionError):
        export.llamacpp_arch(GPTConfig(**dict(FORWARD_SHAPES[shape], activation=activation)))


def test_exact_gelu_exports_as_gpt2_within_llamacpps_bound(tmp_path):
    """GPTConfig's default, exact GELU (the quickstart's), is written for llama.cpp's tanh GELU: its logits by
    llama.cpp's equations stay within the f32 gpt2 bound that llama.cpp itself is held to (BOUNDS, below)."""
    out_dir, model = checkpoint(tmp_path, dict(FORWARD_SHAPES["gpt2"], activation="gelu", vocab_size=len(CHARS)),
                                char_meta())
    export.main([f"--out_dir={out_dir}", f"--gguf={tmp_path / 'm.gguf'}"])
    ids = torch.randint(0, len(CHARS), (20,), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ours = model(ids[None], all_logits=True)[0][0].double().numpy()
    theirs = llamacpp_forward(tmp_path / "m.gguf", ids.numpy())[:, :-1]
    np.testing.assert_allclose(theirs, ours, rtol=0, atol=BOUNDS[("f32", "gpt2")] * np.abs(ours).max())


# --- -m slow: llama.cpp itself ------------------------------------------------------------------------------

def llamacpp_text(path, start, n, capsys):
    """(llama.cpp's ids of start, the text `python -m tools.llamacpp.run` prints: streamed as it is generated)."""
    from tools.llamacpp import run
    ids = run.load(str(path)).tokenize(start.encode("utf-8"), add_bos=False, special=False)
    capsys.readouterr()
    run.main([f"--gguf={path}", f"--start={start}", f"--max_new_tokens={n}"])
    return ids, capsys.readouterr().out


def llamacpp_logits(path, ids, n_vocab):
    from tools.llamacpp.run import load
    llm = load(str(path))
    llm.eval(ids)
    return np.array(llm.scores[:len(ids), :n_vocab])


# llama.cpp's logits on a prompt vs ours, relative to our largest logit, at std-0.3 weights (measured with
# llama-cpp-python 0.3.36: llama f32 3.7e-6, gpt2 f32 5.9e-4 (llama.cpp's CPU GELU reads an f16 table: 4.2e-4 even
# against our gelu_tanh), q8_0 0.13 for both (its matmuls quantize the activations to 8 bits too)
BOUNDS = {("f32", "llama"): 1e-4, ("f32", "gpt2"): 2e-3, ("q8_0", "llama"): 0.25, ("q8_0", "gpt2"): 0.25}


@pytest.mark.slow
@pytest.mark.parametrize("shape", ["llama_char", "gpt2_char", "llama_gpt2_bpe"])
def test_llamacpp_greedy_text_equals_sample_py(shape, tmp_path, capsys, request):
    pytest.importorskip("llama_cpp", reason="llama_cpp is not installed (pip install llama-cpp-python: a source build)")
    import sample
    from safety_net.tokenizers import tokenizer_from_meta
    if shape.endswith("bpe"):
        request.getfixturevalue("gpt2_file")
        meta = {"dataset": "gpt2text", "tokenizer": "gpt2", "vocab_size": 50257}
        args = dict(LLAMA, vocab_size=50257)
    else:
        meta = char_meta()
        args = dict(LLAMA if shape.startswith("llama") else GPT2, vocab_size=len(CHARS))
    out_dir, model = checkpoint(tmp_path, args, meta)
    start = "War is é" if shape.endswith("char") else "War is peace, and"
    prompt = tokenizer_from_meta(meta).encode(start * 3)
    with torch.no_grad():
        ours = model(torch.tensor([prompt]), torch.tensor([prompt]))[0][0].numpy()
    for qtype in ("f32", "q8_0"):
        export.main([f"--out_dir={out_dir}", f"--gguf={tmp_path / qtype}.gguf", f"--quantize={qtype}"])
        err = np.abs(llamacpp_logits(tmp_path / f"{qtype}.gguf", prompt, args["vocab_size"]) - ours).max()
        assert err <= BOUNDS[qtype, shape.split("_")[0]] * np.abs(ours).max(), (qtype, err)
    from tools.llamacpp.run import load, model_vocab
    assert model_vocab(load(str(tmp_path / "f32.gguf"))) == args["vocab_size"]   # a char file's end-of-text left out
    ids, text = llamacpp_text(tmp_path / "f32.gguf", start, 60, capsys)   # past block_size 32: re-primes
    assert ids == tokenizer_from_meta(meta).encode(start)
    sample.main([f"--out_dir={out_dir}", f"--start={start}", "--max_new_tokens=60", "--temperature=0",
                 "--num_samples=1", "--device=cpu"])
    assert capsys.readouterr().out == text + "---------------\n"


@pytest.mark.slow
def test_llamacpp_tokenizes_tinyshakespeare_as_we_do(tmp_path):
    """All of the shipped tinyshakespeare through llama.cpp's tokenizer (a char vocabulary of one-byte characters,
    so its merges list holds only the inert one) gives our char ids: the text's runs of spaces ("And  \\n") once lost
    two ids to a merge whose result was no token."""
    pytest.importorskip("llama_cpp", reason="llama_cpp is not installed (pip install llama-cpp-python: a source build)")
    from safety_net.tokenizers import tokenizer_from_meta
    from tools.llamacpp.run import load
    text = (Path(__file__).parent.parent / "data" / "tinyshakespeare" / "input.txt").read_text(encoding="utf-8")
    chars = sorted(set(text))
    meta = {"dataset": "shakespeare_char", "tokenizer": "char", "vocab_size": len(chars), "chars": chars}
    out_dir, _ = checkpoint(tmp_path, dict(GPT2, n_layer=1, vocab_size=len(chars)), meta)
    export.main([f"--out_dir={out_dir}", f"--gguf={tmp_path / 'm.gguf'}"])
    llm = load(str(tmp_path / "m.gguf"))
    assert llm.tokenize(text.encode("utf-8"), add_bos=False, special=False) == tokenizer_from_meta(meta).encode(text)


def test_the_commands_that_run_llama_cpp_say_in_one_line_that_it_is_missing(tmp_path):
    """llama_cpp is optional (a source build, never in CI): tools.llamacpp.run and step_time's --gguf say so in
    one line before anything is built (step_time's was a ModuleNotFoundError traceback)."""
    import importlib.util
    from conftest import one_error_line
    from safety_net.configurator import UserError
    from tools.executorch import step_time
    from tools.llamacpp import run
    if importlib.util.find_spec("llama_cpp") is not None:
        pytest.skip("llama_cpp is installed here")
    path = tmp_path / "m.gguf"
    path.write_bytes(b"")
    one_error_line(step_time.main, [f"--out_dir={tmp_path / 'none'}", f"--gguf={path}"],
                   "llama_cpp is not installed", "pip install llama-cpp-python")
    with pytest.raises(UserError, match="llama_cpp is not installed"):
        run.require_llama_cpp()
    # --max_new_tokens=0 passes its check, as sample.py's (it was refused: "must be a positive integer"; a hunt)
    out_dir, _ = checkpoint(tmp_path, dict(GPT2, n_layer=1, vocab_size=len(CHARS)), char_meta())
    export.main([f"--out_dir={out_dir}", f"--gguf={path}"])
    one_error_line(run.main, [f"--gguf={path}", "--max_new_tokens=0"], "llama_cpp is not installed")
    one_error_line(run.main, [f"--gguf={path}", "--max_new_tokens=-1"], "--max_new_tokens must be an integer >= 0")
