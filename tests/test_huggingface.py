"""huggingface/: weights in and out of transformers, checked against transformers itself.

Every model is randomly initialised (no download) with every parameter randomised, norms and biases included,
so a wrong mapping of any tensor shows up in the logits. fp32, max abs difference <= 1e-4; greedy decoding
with our KV cache must produce exactly transformers' generate(do_sample=False).
"""
import dataclasses
import json
import os
import shutil
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")
from safetensors.torch import load_file, save_file  # noqa: E402
from transformers import (AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel, LlamaConfig,  # noqa: E402
                          LlamaForCausalLM)

from conftest import gpt2_ranks_file, one_error_line  # noqa: E402
from model import GPT, GPTConfig  # noqa: E402
from tools import support  # noqa: E402
from tools.huggingface import convert  # noqa: E402
from tools.huggingface.convert import ConversionError, export, from_pretrained, gpt_config_from_hf  # noqa: E402
from safety_net.fileio import atomic_save   # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOL = 1e-4
NEW_TOKENS = 20
QUIET = dict(bos_token_id=None, eos_token_id=None, pad_token_id=None)   # no early stop in generate()

# odd sizes on purpose: head sizes 9, 4, 8 and 10, hidden sizes that are no multiple of the width; norm epsilons far
# from the defaults (0.05: a mapping that drops one changes the logits), attention and MLP biases each alone
HF_MODELS = {
    "gpt2_tied": lambda: GPT2LMHeadModel(GPT2Config(
        vocab_size=61, n_positions=48, n_embd=36, n_layer=3, n_head=4, activation_function="gelu_new",
        layer_norm_epsilon=1e-5, **QUIET)),
    "gpt2_untied": lambda: GPT2LMHeadModel(GPT2Config(
        vocab_size=53, n_positions=40, n_embd=20, n_layer=2, n_head=5, n_inner=52, activation_function="gelu",
        layer_norm_epsilon=0.05, tie_word_embeddings=False, **QUIET)),
    "llama_gqa_tied": lambda: LlamaForCausalLM(LlamaConfig(
        vocab_size=59, hidden_size=48, intermediate_size=76, num_hidden_layers=3, num_attention_heads=6,
        num_key_value_heads=2, max_position_embeddings=48, rope_theta=500.0, rms_norm_eps=1e-5,
        tie_word_embeddings=True, mlp_bias=True, **QUIET)),
    "llama_gqa_untied_bias": lambda: LlamaForCausalLM(LlamaConfig(
        vocab_size=47, hidden_size=40, intermediate_size=60, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=1, max_position_embeddings=40, rms_norm_eps=0.05, tie_word_embeddings=False,
        attention_bias=True, mlp_bias=False, **QUIET)),
}


pytestmark = pytest.mark.usefixtures("one_thread")   # conftest.py


def randomize(model, seed):
    """Every parameter random: matrices N(0, 0.15^2), norm weights 1 + N(0, 0.1^2), biases N(0, 0.1^2)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            if p.dim() >= 2:
                p.copy_(0.15 * noise)
            elif name.endswith("bias"):
                p.copy_(0.1 * noise)
            else:
                p.copy_(1 + 0.1 * noise)
    return model.eval()


@pytest.fixture(scope="module")
def hf_dirs(tmp_path_factory):
    """{name: (transformers model, its save_pretrained directory)}"""
    out = {}
    for i, (name, build) in enumerate(HF_MODELS.items()):
        torch.manual_seed(i)
        model = randomize(build(), seed=100 + i)
        path = tmp_path_factory.mktemp(name)
        model.save_pretrained(path)
        out[name] = (model, str(path))
    return out


def tokens(vocab, shape, seed=0):
    return torch.randint(0, vocab, shape, generator=torch.Generator().manual_seed(seed))


def assert_same_function(ours, theirs, vocab):
    x = tokens(vocab, (2, 23))
    with torch.no_grad():
        expected = theirs(x).logits
        got, _ = ours(x, all_logits=True)
    assert expected.abs().max() > 1.0   # the random weights give logits far from uniform
    assert (got - expected).abs().max().item() <= TOL
    prompt = tokens(vocab, (1, 6), seed=1)
    want = theirs.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=NEW_TOKENS,
                           do_sample=False, pad_token_id=0)
    have = ours.generate(prompt, NEW_TOKENS, temperature=0)           # our KV-cache path
    assert have.shape == (1, 6 + NEW_TOKENS)
    assert torch.equal(have, want)


# --- import -------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(HF_MODELS))
def test_import_matches_transformers(hf_dirs, name, capsys):
    theirs, path = hf_dirs[name]
    ours = from_pretrained(path)
    assert f"imported {type(theirs).__name__}" in capsys.readouterr().err
    c = ours.config
    assert c.tie_embeddings == theirs.config.tie_word_embeddings
    if name.startswith("llama"):
        assert (c.pos_embedding, c.norm, c.mlp_type, c.n_kv_head) == ("rope", "rmsnorm", "gated",
                                                                      theirs.config.num_key_value_heads)
    extra = 0   # attention_bias or mlp_bias alone: our single bias flag gives the other side zero biases
    if name.startswith("llama"):
        assert c.bias == (theirs.config.attention_bias or theirs.config.mlp_bias)
        zero_side = ".attn." if theirs.config.mlp_bias else ".mlp."
        filled = [p for n, p in ours.named_parameters() if zero_side in n and n.endswith("bias")]
        assert filled and all(torch.all(p == 0) for p in filled)
        extra = sum(p.numel() for p in filled)
    assert ours.get_num_params(False) == sum(p.numel() for p in theirs.parameters()) + extra
    assert_same_function(ours, theirs, c.vocab_size)


def test_import_pytorch_model_bin_and_old_gpt2_keys(hf_dirs, tmp_path):
    """Old GPT-2 files: pytorch_model.bin, keys without 'transformer.', the causal-mask buffers stored."""
    theirs, path = hf_dirs["gpt2_tied"]
    tensors = {k.removeprefix("transformer."): v for k, v in load_file(os.path.join(path, "model.safetensors")).items()}
    n = theirs.config.n_positions
    for i in range(theirs.config.n_layer):
        tensors[f"h.{i}.attn.bias"] = torch.tril(torch.ones(n, n)).view(1, 1, n, n)
    torch.save(tensors, tmp_path / "pytorch_model.bin")
    (tmp_path / "config.json").write_text(open(os.path.join(path, "config.json")).read())
    ours = from_pretrained(str(tmp_path), verbose=False)
    assert_same_function(ours, theirs, theirs.config.vocab_size)


@pytest.mark.parametrize("name", list(HF_MODELS))
def test_import_takes_transformers_defaults_for_keys_config_json_leaves_out(hf_dirs, name, tmp_path):
    """A config.json without the keys whose values are the config class's defaults (as hand-written or older files
    are) is the same model to transformers, and to the import: each default of the mapping is transformers' own
    (e.g. GPT-2's tied head and gelu_new, Llama's untied head)."""
    import shutil
    theirs, path = hf_dirs[name]
    config = json.loads(open(os.path.join(path, "config.json")).read())
    defaults = type(theirs.config)().to_dict()
    kept = {k: v for k, v in config.items()
            if k not in defaults or defaults[k] != v or k in ("architectures", "model_type")}
    assert len(kept) < len(config) - 3
    shutil.copy(os.path.join(path, "model.safetensors"), tmp_path)
    (tmp_path / "config.json").write_text(json.dumps(kept))
    x = tokens(theirs.config.vocab_size, (2, 23))
    with torch.no_grad():
        expected = theirs(x).logits
        again = AutoModelForCausalLM.from_pretrained(str(tmp_path)).eval()
        assert torch.equal(again(x).logits, expected)   # the keys left out were defaults: the same model
        ours = from_pretrained(str(tmp_path), verbose=False)
        assert (ours(x, all_logits=True)[0] - expected).abs().max().item() <= TOL


@pytest.mark.parametrize("name", list(HF_MODELS))
def test_imported_checkpoint_file_computes_transformers_logits(hf_dirs, name, tmp_path):
    """`convert import` writes a checkpoint file; loaded by sample.py's loader and by train.py --init_from=<file>'s
    steps it computes transformers' logits. A tied head is the embedding (zeroing a token's row zeroes its logit,
    as in transformers, whose lm_head is the embedding tensor); an untied one is the file's own lm_head."""
    from safety_net.checkpoint import load_model
    from test_checkpoint import train_init
    theirs, path = hf_dirs[name]
    tied = theirs.config.tie_word_embeddings
    assert (theirs.lm_head.weight.data_ptr() == theirs.get_input_embeddings().weight.data_ptr()) == tied
    convert.main(["import", path, "--out", str(tmp_path / "imported.pt")])
    x = tokens(theirs.config.vocab_size, (2, 23))
    with torch.no_grad():
        expected = theirs(x).logits
        for ours in (load_model(str(tmp_path / "imported.pt"))[0], train_init(str(tmp_path / "imported.pt"))):
            assert (ours(x, all_logits=True)[0] - expected).abs().max().item() <= TOL
            assert hasattr(ours, "lm_head") != tied
            ours.tok_emb.wte.weight[3] = 0.0
            assert torch.all(ours(x, all_logits=True)[0][..., 3] == 0) == tied


def mobilellm_dir(tmp_path, model, layer_sharing):
    """A directory laid out like facebook/MobileLLM-*: model_type mobilellm, share_embedding, layer_sharing
    (their modeling_mobilellm.py applies each stored block twice in a row), weights of the stored blocks only."""
    cfg = model.config
    stored = cfg.num_hidden_layers // 2 if layer_sharing else cfg.num_hidden_layers
    config = dict(architectures=["MobileLLMForCausalLM"], model_type="mobilellm", vocab_size=cfg.vocab_size,
                  hidden_size=cfg.hidden_size, intermediate_size=cfg.intermediate_size, num_hidden_layers=stored,
                  num_attention_heads=cfg.num_attention_heads, num_key_value_heads=cfg.num_key_value_heads,
                  head_dim=cfg.head_dim, hidden_act="silu", max_position_embeddings=cfg.max_position_embeddings,
                  rms_norm_eps=cfg.rms_norm_eps, rope_theta=cfg.rope_parameters["rope_theta"], rope_scaling=None,
                  attention_bias=False, mlp_bias=False, share_embedding=True, tie_word_embeddings=False,
                  layer_sharing=layer_sharing)
    step = 2 if layer_sharing else 1
    tensors = {}
    for k, v in model.state_dict().items():
        if k.startswith("model.layers."):
            i = int(k.split(".")[2])
            if i % step:
                continue
            k = k.replace(f"model.layers.{i}.", f"model.layers.{i // step}.")
        if k != "lm_head.weight":
            tensors[k] = v.clone()
    save_file(tensors, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps(config))
    return str(tmp_path)


def test_mobilellm_layer_sharing_matches_repeated_llama(tmp_path):
    """MobileLLM's layer_sharing = every block twice in a row: a 6-layer Llama whose layers 2i and 2i+1 are
    equal is the same function as our share_group_size=2 import of the 3 stored blocks."""
    torch.manual_seed(7)
    llama = randomize(LlamaForCausalLM(LlamaConfig(   # MobileLLM's config.json has rope_theta at the top level
        vocab_size=43, hidden_size=24, intermediate_size=40, num_hidden_layers=6, num_attention_heads=6,
        num_key_value_heads=2, max_position_embeddings=40, rms_norm_eps=0.05, rope_theta=300.0,
        tie_word_embeddings=True, **QUIET)), 7)
    with torch.no_grad():
        for i in range(0, 6, 2):
            llama.model.layers[i + 1].load_state_dict(llama.model.layers[i].state_dict())
    ours = from_pretrained(mobilellm_dir(tmp_path, llama, layer_sharing=True), verbose=False)
    c = ours.config
    assert (c.n_layer, c.share_group_size, c.tie_embeddings) == (6, 2, True)
    assert len(ours.branches[0].attn) == 3 and len(ours.branches[0].mlp) == 3
    assert_same_function(ours, llama, 43)


# MobileLLM's published config.json files (huggingface.co/facebook/MobileLLM-125M and -600M; the
# -layer-share repositories differ only in layer_sharing=true)
MOBILELLM_125M = dict(
    architectures=["MobileLLMForCausalLM"], model_type="mobilellm", attention_bias=False, attention_dropout=0.0,
    bos_token_id=1, eos_token_id=2, head_dim=64, hidden_act="silu", hidden_size=576, initializer_range=0.02,
    intermediate_size=1536, layer_sharing=False, max_position_embeddings=2048, mlp_bias=False,
    num_attention_heads=9, num_hidden_layers=30, num_key_value_heads=3, pretraining_tp=1, rms_norm_eps=1e-5,
    rope_scaling=None, rope_theta=10000.0, share_embedding=True, tie_word_embeddings=False,
    torch_dtype="float16", use_cache=True, vocab_size=32000)
MOBILELLM_600M = dict(MOBILELLM_125M, hidden_size=1152, intermediate_size=3072, num_attention_heads=18,
                      num_hidden_layers=40, num_key_value_heads=6)


@pytest.mark.parametrize("hf, variant, n_params, n_layer", [
    (MOBILELLM_125M, "mobilellm_125m", 124_635_456, 30),
    (MOBILELLM_600M, "mobilellm_600m", 603_188_352, 40),
    (dict(MOBILELLM_125M, layer_sharing=True), "mobilellm_125m", 124_635_456, 60),
])
def test_mobilellm_configs_convert_with_exact_counts(hf, variant, n_params, n_layer):
    import variants
    config = gpt_config_from_hf(hf)
    with torch.device("meta"):
        model = GPT(config)
    assert model.get_num_params(non_embedding=False) == n_params     # paper 001 Table 2
    assert config.n_layer == n_layer
    if n_layer == hf["num_hidden_layers"]:   # the same model as our preset of paper 001 Table 7
        preset = {k: v for k, v in variants.load(variant).items() if not k.startswith("init_")}  # init: training only
        assert {k: getattr(config, k) for k in preset} == preset


@pytest.mark.parametrize("change, words", [
    (dict(rope_scaling={"rope_type": "linear", "factor": 2.0}), ["rope scaling", "linear"]),
    (dict(rope_parameters={"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0}), ["rope scaling", "yarn"]),
    (dict(head_dim=32), ["head_dim=32"]),
    (dict(architectures=["BertForMaskedLM"], model_type="bert"), ["unknown architecture", "BertForMaskedLM"]),
    (dict(hidden_act="gelu_fast"), ["activation", "gelu_fast"]),
])
def test_import_refuses_with_one_line_reason(change, words):
    with pytest.raises(ConversionError) as e:
        gpt_config_from_hf(dict(MOBILELLM_125M, **change))
    msg = str(e.value)
    assert "\n" not in msg and all(w in msg for w in words)


def test_import_refuses_bad_directories(hf_dirs, tmp_path):
    with pytest.raises(ConversionError, match="no config.json"):
        from_pretrained(str(tmp_path))
    theirs, path = hf_dirs["gpt2_untied"]
    (tmp_path / "config.json").write_text(open(os.path.join(path, "config.json")).read())
    with pytest.raises(ConversionError, match="no weights"):
        from_pretrained(str(tmp_path))
    tensors = load_file(os.path.join(path, "model.safetensors"))
    save_file({k: v for k, v in tensors.items() if k != "lm_head.weight"}, str(tmp_path / "model.safetensors"))
    with pytest.raises(ConversionError, match="no lm_head.weight"):
        from_pretrained(str(tmp_path))
    save_file(dict(tensors, extra=torch.zeros(2)), str(tmp_path / "model.safetensors"))
    with pytest.raises(ConversionError, match="does not know"):
        from_pretrained(str(tmp_path))


def damaged_copy(hf_dirs, tmp_path, config=None, files=None, tensors=None):
    """A copy of the gpt2_tied folder: config.json updated with `config`, files written ({name: text}; None
    removes), model.safetensors rewritten as tensors(its tensors)."""
    import shutil
    path = tmp_path / "hf"
    shutil.copytree(hf_dirs["gpt2_tied"][1], path)
    if config:
        (path / "config.json").write_text(json.dumps(dict(json.loads((path / "config.json").read_text()), **config)))
    if tensors:
        save_file(tensors(load_file(str(path / "model.safetensors"))), str(path / "model.safetensors"))
    for name, text in (files or {}).items():
        (path / name).unlink() if text is None else (path / name).write_text(text)
    return str(path)


def index_for(hf_dirs, shard):
    """model.safetensors.index.json text naming `shard` for every tensor of gpt2_tied."""
    names = load_file(os.path.join(hf_dirs["gpt2_tied"][1], "model.safetensors"))
    return json.dumps({"metadata": {}, "weight_map": {n: shard for n in names}})


def untyped(w):
    return {k: (v * 100).to(torch.int32) for k, v in w.items()}


def three_d(w):
    return dict(w, **{"transformer.h.0.attn.c_attn.weight": w["transformer.h.0.attn.c_attn.weight"][None].clone()})


@pytest.mark.parametrize("damage, words", [
    (dict(files={"config.json": "[1, 2]"}), ["is not a JSON object"]),   # was an AttributeError traceback
    (dict(config=dict(n_embd="sixteen")), ["a whole number", 'n_embd="sixteen"']),   # was a TypeError traceback
    (dict(config=dict(n_layer=1.5)), ["not whole numbers", "n_layer=1.5"]),
    # sizes of terabytes: refused from the shapes, before the model is built (an allocator traceback before)
    (dict(config=dict(vocab_size=10**12)), ["another shape", "(1000000000000, 36)"]),
    (dict(config=dict(n_positions=10**12)), ["another shape", "pos_emb.weight"]),
    (dict(tensors=untyped), ["integer tensors", "int32"]),   # silently loaded as floats before
    (dict(tensors=three_d), ["do not fit its config.json", "2 dimensions"]),   # a RuntimeError traceback of t()
    # a damaged index of shards (json, KeyError and AttributeError tracebacks before)
    (dict(files={"model.safetensors.index.json": "{oops", "model.safetensors": None}), ["cannot read"]),
    (dict(files={"model.safetensors.index.json": "{}", "model.safetensors": None}), ["no weight_map"]),
    (dict(files={"model.safetensors.index.json": '{"weight_map": ["a"]}', "model.safetensors": None}),
     ["no weight_map"]),
    # an empty weight_map: read as no tensors at all, "the weights have no 'transformer.wte.weight'", when a
    # changed line let it through and no test failed (a hunt)
    (dict(files={"model.safetensors.index.json": '{"weight_map": {}}', "model.safetensors": None}),
     ["no weight_map"]),
])
def test_damaged_or_unusual_folders_are_one_line(hf_dirs, tmp_path, damage, words):
    with pytest.raises(ConversionError) as e:
        from_pretrained(damaged_copy(hf_dirs, tmp_path, **damage))
    msg = str(e.value)
    assert "\n" not in msg and "(fix: " in msg and all(w in msg for w in words), msg


def test_a_shard_outside_the_folder_is_not_read(hf_dirs, tmp_path):
    """An index naming ../elsewhere/x.safetensors loaded weights from outside the model folder; refused, as is an
    absolute path. A shard beside the index still loads."""
    path = damaged_copy(hf_dirs, tmp_path)
    shard = "model-00001-of-00001.safetensors"
    os.makedirs(tmp_path / "elsewhere")
    os.replace(os.path.join(path, "model.safetensors"), tmp_path / "elsewhere" / shard)
    for name in (f"../elsewhere/{shard}", str(tmp_path / "elsewhere" / shard)):
        with open(os.path.join(path, "model.safetensors.index.json"), "w") as f:
            f.write(index_for(hf_dirs, name))
        with pytest.raises(ConversionError, match="names a shard outside its folder"):
            from_pretrained(path)
    os.replace(tmp_path / "elsewhere" / shard, os.path.join(path, shard))
    with open(os.path.join(path, "model.safetensors.index.json"), "w") as f:
        f.write(index_for(hf_dirs, shard))
    assert from_pretrained(path, verbose=False).config.vocab_size == 61


def test_every_import_refusal_names_a_fix(hf_dirs, tmp_path):
    """Refusals of what the mapping cannot represent said why but not what to do; each now ends with a fix."""
    for change in (dict(architectures=["BertForMaskedLM"], model_type="bert"), dict(activation_function="swish2"),
                   dict(scale_attn_weights=False), dict(n_head=-2)):
        with pytest.raises(ConversionError, match=r"\(fix: "):
            gpt_config_from_hf(dict(json.loads(open(os.path.join(hf_dirs["gpt2_tied"][1], "config.json")).read()),
                                    **change))


def test_sample_refuses_a_dataset_of_a_smaller_vocabulary(hf_dirs, tiny_data):
    """--data_dir whose tokenizer has fewer tokens than the model samples: decoding ended in an IndexError."""
    from tools.huggingface import sample
    with pytest.raises(SystemExit) as e:
        sample.main([f"--init_from={hf_dirs['gpt2_tied'][1]}", f"--data_dir={tiny_data}", "--start=a", "--device=cpu",
                     "--max_new_tokens=2", "--num_samples=1"])
    msg = str(e.value)
    assert msg.startswith("error: ") and "fewer than the model's 61" in msg and "(fix: " in msg


def test_sample_without_init_from_or_with_out_dir_is_one_line():
    """No --init_from says it is required; --out_dir (sample.py's key) names sample.py (a hunt: a changed line did
    this, and no test failed)."""
    from tools.huggingface import sample
    one_error_line(sample.main, [], "--init_from is required")
    one_error_line(sample.main, ["--out_dir=x", "--init_from=y"], "unknown config key 'out_dir'",
                   "python sample.py --out_dir=")


def test_keep_heaviest_branch_with_a_hugging_face_model_is_one_line(tmp_path):
    """--keep_heaviest_branch with a Hugging Face model (tools.huggingface.sample, tools.eval --init_from) is one
    error line, before the model is looked for: such a model has one branch (an exploration as a new user found it:
    the flag was accepted, the model loaded, and a note said it was ignored)."""
    from tools import eval as evaluate
    from tools.huggingface import sample
    hf = f"--init_from={tmp_path / 'any-hf-model'}"
    for main in (sample.main, evaluate.main):
        one_error_line(main, [hf, "--keep_heaviest_branch", "--device=cpu"], "--keep_heaviest_branch",
                       "a Hugging Face model has one branch", "fix: drop it")


@pytest.fixture
def stub_hf_sample(monkeypatch, tmp_path):
    """(stub, written): stub(model_vocab, tokenizer_vocab) is tools.huggingface.sample's main with a stub model
    of model_vocab ids (no tokenizer_id recorded) and --data_dir's tokenizer of tokenizer_vocab characters; written
    gets the prompt's ids of each sampling (write_samples)."""
    from tools.huggingface import sample
    from safety_net.tokenizers import CharTokenizer
    written = []

    def stub(model_vocab, tokenizer_vocab):
        model = SimpleNamespace(config=SimpleNamespace(vocab_size=model_vocab))
        tok = CharTokenizer([chr(0x100 + i) for i in range(tokenizer_vocab)])
        checked = (torch.device("cpu"), torch.float32)
        monkeypatch.setattr(sample, "setup_sampling", lambda cfg: (*checked, cfg["start"], []))
        monkeypatch.setattr(sample, "load_pretrained", lambda path, device: (model, {"source": path, "hf_config": {}}))
        monkeypatch.setattr(sample, "checked_data_dir", lambda info, data_dir: data_dir)
        monkeypatch.setattr(sample, "load_tokenizer", lambda data_dir: tok)
        monkeypatch.setattr(sample.sample, "write_samples", lambda model, tok, text, ids, *rest: written.append(ids))
        return sample.main
    return stub, written


def test_sample_checks_a_data_dirs_vocabulary_against_the_models(stub_hf_sample):
    """--data_dir of a tokenizer as large as the model's vocabulary samples; a prompt character it lacks names the
    data_dir; a prompt id beyond the model's vocabulary is one line (a hunt: a changed line did this, and no test
    failed)."""
    stub, written = stub_hf_sample
    args = ["--init_from=hf", "--data_dir=data/mydata"]
    stub(100, 100)([*args, f"--start={chr(0x100 + 60)}"])
    assert written == [[60]]
    one_error_line(stub(100, 100), [*args, "--start=x"], "characters not in the vocabulary: 'x'",
                   "(the model was trained on data/mydata)")
    one_error_line(stub(50, 100), [*args, f"--start={chr(0x100 + 60)}"],
                   "the prompt encodes to token id 60, beyond the model's vocabulary of 50")


# --- export -------------------------------------------------------------------------------------

OURS = {
    "gpt2_tied_nobias": dict(vocab_size=57, block_size=40, n_layer=2, n_head=3, n_embd=27, bias=False,
                             activation="gelu_tanh"),
    "gpt2_untied": dict(vocab_size=50, block_size=40, n_layer=3, n_head=2, n_embd=20, mlp_hidden=44,
                        activation="gelu", tie_embeddings=False, norm_eps=1e-6),
    "gpt2_mlp_ratio": dict(vocab_size=50, block_size=40, n_layer=1, n_head=2, n_embd=20, mlp_ratio=3.0),
    "llama_gqa_tied": dict(vocab_size=61, block_size=40, n_layer=3, n_head=6, n_kv_head=3, n_embd=36,
                           bias=False, norm="rmsnorm", pos_embedding="rope", rope_base=300.0, mlp_type="gated",
                           activation="silu", mlp_hidden=50),
    "llama_untied_bias": dict(vocab_size=45, block_size=40, n_layer=2, n_head=4, n_kv_head=2, n_embd=32,
                              bias=True, norm="rmsnorm", pos_embedding="rope", mlp_type="gated",
                              activation="silu", tie_embeddings=False),
    "llama_layer_sharing": dict(vocab_size=41, block_size=40, n_layer=6, n_head=4, n_kv_head=1, n_embd=24,
                                bias=False, norm="rmsnorm", pos_embedding="rope", mlp_type="gated",
                                activation="silu", share_group_size=2, share_from_layer=2, share_sublayers="attn"),
}


def test_an_export_stopped_midway_leaves_the_old_export_whole(tmp_path, monkeypatch):
    """Each file was replaced on its own, the weights first: an export killed after them left one model's weights
    beside another's config.json and tokenizer, which imported and trained without a word (a hunt). Stopped at
    its last file now (Ctrl-C and SIGTERM raise KeyboardInterrupt), every file is the old export's."""
    torch.manual_seed(0)
    old = randomize(GPT(GPTConfig(**OURS["gpt2_mlp_ratio"])), seed=3)
    export(old, str(tmp_path))
    before = {name: (tmp_path / name).read_bytes() for name in os.listdir(tmp_path)}
    new = randomize(GPT(GPTConfig(**dict(OURS["gpt2_mlp_ratio"], norm_eps=1e-6))), seed=4)
    real_dump = json.dump

    def stopped_at_the_config(content, f, **kw):
        if "architectures" in content:
            raise KeyboardInterrupt
        return real_dump(content, f, **kw)

    monkeypatch.setattr(convert.json, "dump", stopped_at_the_config)
    with pytest.raises(KeyboardInterrupt):
        export(new, str(tmp_path))
    assert {name: (tmp_path / name).read_bytes() for name in os.listdir(tmp_path)} == before


@pytest.mark.parametrize("name", list(OURS))
def test_export_loads_in_transformers_with_equal_outputs(name, tmp_path, capsys):
    torch.manual_seed(0)
    ours = randomize(GPT(GPTConfig(**OURS[name])), seed=3)
    export(ours, str(tmp_path))
    said = capsys.readouterr().err
    assert ("layer sharing written out as repeated weights" in said) == (name == "llama_layer_sharing")
    theirs = AutoModelForCausalLM.from_pretrained(str(tmp_path)).eval()   # no trust_remote_code: plain classes
    expected = "GPT2LMHeadModel" if name.startswith("gpt2") else "LlamaForCausalLM"
    assert type(theirs).__name__ == expected
    # tied: transformers' head is the embedding tensor itself (a written-out copy would be trained apart)
    tied = theirs.lm_head.weight.data_ptr() == theirs.get_input_embeddings().weight.data_ptr()
    assert tied == ours.config.tie_embeddings
    assert_same_function(ours, theirs, ours.config.vocab_size)


REFUSED = {
    "pgpt": (dict(n_branches=2, n_layer=4, tie_embeddings=False), "pgpt"),
    "lgpt": (dict(shrink_every=1, tie_embeddings=False), "lgpt/cgpt"),
    "cgpt": (dict(shrink_every=1, shrink_layer="conv", tie_embeddings=False), "lgpt/cgpt"),
    "enhanced_residual": (dict(enhanced_residual=True), "enhanced residual"),
    "deep_thinking": (dict(think_steps=2), "Deep Thinking"),
    "shishumlp": (dict(n_attn_layers=1), "ShishuLM"),
    "factorized_embedding": (dict(embd_factor_dim=8), "factorized embedding"),
    "sinusoidal": (dict(pos_embedding="sinusoidal"), "pos_embedding='sinusoidal'"),
    "gqa_gpt2": (dict(n_kv_head=1), "GQA"),
    "rope_layernorm": (dict(pos_embedding="rope"), "norm='layernorm'"),
    "post_norm": (dict(norm_placement="post"), "post-norm"),
    "head_bias": (dict(head_bias=True), "head_bias"),
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_export_refuses_our_only_techniques(name, tmp_path):
    change, words = REFUSED[name]
    model = GPT(GPTConfig(**{**dict(vocab_size=16, block_size=8, n_layer=2, n_head=2, n_embd=16), **change}))
    with pytest.raises(ConversionError) as e:
        export(model, str(tmp_path / "hf"))
    assert "\n" not in str(e.value) and words in str(e.value)
    assert not os.path.exists(tmp_path / "hf")   # refused before anything is written


def test_export_refuses_flags_it_does_not_know(monkeypatch):
    """A flag added to GPTConfig later is refused when set, until the exporter learns it."""
    monkeypatch.delitem(support.SUPPORT, "init_std")
    convert.export_plan(GPTConfig(vocab_size=16, block_size=8, n_layer=2, n_head=2, n_embd=16))
    with pytest.raises(ConversionError, match="the Hugging Face export does not know init_std=0.5"):
        convert.export_plan(GPTConfig(vocab_size=16, block_size=8, n_layer=2, n_head=2, n_embd=16, init_std=0.5))


def test_export_refuses_a_folder_of_other_files(tmp_path, capsys):
    """--out naming a folder of the user's own files (no model files among them) is one line naming a new folder in
    it, the folder left as it was; that folder is written (an exploration as a new user found it: the export's
    files were written in among the user's)."""
    model = GPT(GPTConfig(vocab_size=16, block_size=8, n_layer=1, n_head=2, n_embd=16))
    ckpt = tmp_path / "out" / "ckpt.pt"
    atomic_save({"model": model.state_dict(), "model_args": dataclasses.asdict(model.config), "iter_num": 1,
                 "best_val_loss": 1.0, "config": {}}, str(ckpt))
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "letter.txt").write_text("dear")
    one_error_line(convert.main, ["export", f"--out_dir={ckpt}", f"--out={mine}"],
                   "a folder of other files (letter.txt)", f"--out={mine / 'hf-out'}")
    assert os.listdir(mine) == ["letter.txt"]
    convert.main(["export", f"--out_dir={ckpt}", f"--out={mine / 'hf-out'}"])   # the fix followed
    assert "config.json" in os.listdir(mine / "hf-out") and "load it with" in capsys.readouterr().err


def test_export_command_line(tmp_path, capsys):
    torch.manual_seed(0)
    ours = randomize(GPT(GPTConfig(**OURS["llama_gqa_tied"])), seed=5)
    ckpt = tmp_path / "out" / "ckpt.pt"
    atomic_save({"model": ours.state_dict(), "model_args": dataclasses.asdict(ours.config), "iter_num": 1,
                 "best_val_loss": 1.0, "config": {}}, str(ckpt))
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "tokenizer.json").write_text("{}")   # another program's: refused, left as it was (a hunt)
    (tmp_path / "hf" / "config.json").write_text('{"model_type": "gpt2"}')
    one_error_line(convert.main, ["export", f"--out_dir={ckpt}", f"--out={tmp_path / 'hf'}"],
                   "which no export of ours wrote", "another --out")
    assert (tmp_path / "hf" / "config.json").read_text() == '{"model_type": "gpt2"}'
    # an earlier export's folder, whose tokenizer this export (with none) removes
    (tmp_path / "hf" / "config.json").write_text('{"compact_gpt_export": true}')
    convert.main(["export", "--out_dir", str(ckpt), "--out", str(tmp_path / "hf")])
    assert "no tokenizer written" in capsys.readouterr().err   # the checkpoint records no dataset
    assert sorted(os.listdir(tmp_path / "hf")) == ["config.json", "generation_config.json", "model.safetensors"]
    theirs = AutoModelForCausalLM.from_pretrained(str(tmp_path / "hf")).eval()
    x = tokens(61, (1, 12))
    with torch.no_grad():
        assert (ours(x, all_logits=True)[0] - theirs(x).logits).abs().max() <= TOL
    bad = GPT(GPTConfig(vocab_size=16, block_size=8, n_layer=2, n_head=2, n_embd=16, think_steps=2))
    atomic_save({"model": bad.state_dict(), "model_args": dataclasses.asdict(bad.config)}, str(ckpt))
    with pytest.raises(SystemExit) as e:
        convert.main(["export", "--out_dir", str(ckpt), "--out", str(tmp_path / "bad")])
    assert str(e.value).startswith("error: cannot export Deep Thinking")


def test_export_reads_the_run_as_sample_py_does(tmp_path, monkeypatch, capsys):
    """--out_dir names the run, "" the newest out*/ folder, as sample.py and the GGUF and ExecuTorch exporters
    read it (the export took --ckpt, and no default)."""
    monkeypatch.chdir(tmp_path)
    for name, seed in (("out", 1), ("out-new", 2)):
        ours = randomize(GPT(GPTConfig(**OURS["gpt2_untied"])), seed=seed)
        atomic_save({"model": ours.state_dict(), "model_args": dataclasses.asdict(ours.config), "iter_num": 1,
                     "best_val_loss": 1.0, "config": {}}, os.path.join(name, "ckpt.pt"))
    os.utime(os.path.join("out", "ckpt.pt"), (1, 1))   # the older run
    convert.main(["export", "--out=hf"])
    assert "loading the newest checkpoint: out-new" in capsys.readouterr().err
    theirs = AutoModelForCausalLM.from_pretrained("hf").eval()
    x = tokens(50, (1, 12))
    with torch.no_grad():
        assert (ours(x, all_logits=True)[0] - theirs(x).logits).abs().max() <= TOL   # out-new's weights


# --- the tokenizer of the checkpoint's dataset, exported beside the model ------------------------------

def shakespeare_file():
    env = os.environ.get("SHAKESPEARE_INPUT")
    fallback = os.path.join(os.path.dirname(ROOT), "shared", "data", "tinyshakespeare", "input.txt")
    return env if env and os.path.isfile(env) else (fallback if os.path.isfile(fallback) else None)


def test_gpt2_byte_table_and_recovered_merges():
    """GPT-2's byte -> printable character table, and merges recovered from ranks alone: each multi-byte token's
    two parts are what BPE (lowest-ranked pair first) reaches one merge before the token."""
    from tools.huggingface.tokenizer import bpe_vocab_and_merges, gpt2_byte_to_unicode
    table = gpt2_byte_to_unicode()
    assert len(set(table.values())) == 256 and all(not ch.isspace() and ch.isprintable() for ch in table.values())
    assert (table[ord("A")], table[ord(" ")], table[ord("\n")], table[0], table[0xFF]) == ("A", "Ġ", "Ċ", "Ā", "ÿ")
    singles = [bytes([b]) for b in range(256)]
    # "bc" ranks below "ab", so BPE on "abc" merges b+c first: its parents are (a, bc), not (ab, c)
    vocab, merges = bpe_vocab_and_merges(singles + [b"bc", b"ab", b"abc", b" a"])
    assert merges == [["b", "c"], ["a", "b"], ["a", "bc"], ["Ġ", "a"]]
    assert vocab["abc"] == 258 and vocab["Ġa"] == 259 and len(vocab) == 260
    ranks = gpt2_ranks_file()
    if ranks is None:
        pytest.skip("no GPT-2 ranks file: set GPT2_TIKTOKEN_FILE or provide ../shared/data/gpt2/gpt2.tiktoken")
    from safety_net.tokenizers import get_gpt2_encoding
    enc = get_gpt2_encoding(ranks)
    vocab, merges = bpe_vocab_and_merges([enc.decode_single_token_bytes(i) for i in range(50256)])
    assert len(vocab) == 50256 and len(merges) == 50000            # GPT-2's merges.txt has 50,000 lines
    assert merges[0] == ["Ġ", "t"] and vocab["Ġthe"] == 262
    assert all(vocab[a + b] == 256 + i and vocab[a] < 256 + i and vocab[b] < 256 + i for i, (a, b) in enumerate(merges))


def export_for_dataset(kind, root):
    """tinyshakespeare prepared as `kind` (char, gpt2: prepare.py; compact with 1,024 tokens: its tool), a tiny
    random model of its vocabulary saved as train.py does (recording data_dir), exported by the command line."""
    import prepare
    from tools.pangu import compact_vocab
    dataset, extra = {"char": ("shakespeare_char", {}), "gpt2": ("shakespeare", {}),
                      "compact": ("shakespeare_v1024", dict(plot=False))}[kind]
    make = compact_vocab.prepare if kind == "compact" else prepare.prepare
    data_dir = make(dataset, out_dir=str(root / "data"), input_path=shakespeare_file(), **extra)
    meta = json.loads((root / "data" / "meta.json").read_text(encoding="utf-8"))
    llama = kind == "compact"   # both architectures carry the tokenizer's end-of-text id
    torch.manual_seed(0)
    model = randomize(GPT(GPTConfig(vocab_size=meta["vocab_size"], block_size=32, n_layer=1, n_head=2, n_embd=16,
                                    **(dict(norm="rmsnorm", pos_embedding="rope", mlp_type="gated",
                                            activation="silu", bias=False) if llama else {}))), seed=1)
    ckpt = root / "out" / "ckpt.pt"
    atomic_save({"model": model.state_dict(), "model_args": dataclasses.asdict(model.config), "iter_num": 1,
                 "data_dir": data_dir}, str(ckpt))
    convert.main(["export", "--out_dir", str(ckpt), "--out", str(root / "hf")])
    return str(root / "hf"), data_dir, meta, model


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """export(kind) -> (folder, data_dir, meta, model), built once per kind for this module."""
    if shakespeare_file() is None or gpt2_ranks_file() is None:
        pytest.skip("needs tinyshakespeare and the GPT-2 ranks file (SHAKESPEARE_INPUT / GPT2_TIKTOKEN_FILE or "
                    "../shared/data)")
    done = {}

    def get(kind):
        if kind not in done:
            with pytest.MonkeyPatch.context() as mp:
                mp.setenv("GPT2_TIKTOKEN_FILE", gpt2_ranks_file())
                done[kind] = export_for_dataset(kind, tmp_path_factory.mktemp(kind))
        return done[kind]
    return get


@pytest.mark.parametrize("kind", ["char", "gpt2", "compact"])
def test_exported_tokenizer_gives_the_token_files_ids(exported, kind, monkeypatch, capsys):
    """AutoTokenizer on the export, offline and without the GPT-2 ranks file, turns each split's text into exactly
    the ids prepare.py wrote (the whole of tinyshakespeare) and decodes them back to the text; end-of-text is
    bos/eos/pad where the vocabulary has one, and pipeline("text-generation") runs on the folder."""
    from transformers import AutoTokenizer, pipeline

    import numpy as np
    import prepare
    folder, data_dir, meta, model = exported(kind)
    assert "tokenizer: " + {"char": "char-level, 65 characters", "gpt2": "GPT-2 BPE, 50,257 tokens",
                            "compact": "compact GPT-2 BPE (paper 003), 1,024 tokens"}[kind] in capsys.readouterr().err
    monkeypatch.setenv("GPT2_TIKTOKEN_FILE", os.path.join(folder, "missing.tiktoken"))
    tok = AutoTokenizer.from_pretrained(folder)
    assert len(tok) == meta["vocab_size"]
    texts = dict(zip(("train", "val"), prepare.split_text(open(shakespeare_file(), encoding="utf-8").read())))
    counts = 0
    for split, text in texts.items():
        ids = tok.encode(text, add_special_tokens=False)
        assert ids == np.fromfile(os.path.join(data_dir, f"{split}.bin"), dtype=np.uint16).tolist()
        counts += len(ids)
    if kind == "gpt2":
        assert counts == 338_025     # a tokenizer with another split pattern gives 330,837
    assert tok.decode(ids) == text   # no clean-up of spaces, no special tokens added
    eot = meta.get("eot_token")
    assert (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) == (eot, eot, eot)
    if eot is not None:
        assert tok.decode(tok.encode("a<|endoftext|>b", add_special_tokens=False)[1:2]) == "<|endoftext|>"
    config = json.loads(open(os.path.join(folder, "config.json")).read())
    generation = json.loads(open(os.path.join(folder, "generation_config.json")).read())
    assert (config["bos_token_id"], config["eos_token_id"], generation.get("eos_token_id")) == (eot, eot, eot)
    generate = pipeline("text-generation", model=folder, device="cpu")
    out = generate("ROMEO:", max_new_tokens=6, do_sample=False)[0]["generated_text"]
    greedy = model.generate(torch.tensor([tok.encode("ROMEO:")]), 6, temperature=0)[0].tolist()
    assert eot not in greedy and out == tok.decode(greedy)   # our greedy tokens, through transformers


def test_export_refuses_a_tokenizer_it_cannot_write(tmp_path, capsys):
    """Before anything is written: a vocabulary bigger than the model's, a tokenizer kind it does not know, a
    recorded dataset that is gone; one line each."""
    model = GPT(GPTConfig(vocab_size=3, block_size=8, n_layer=1, n_head=2, n_embd=8))
    ckpt = tmp_path / "out" / "ckpt.pt"
    data = tmp_path / "data"
    data.mkdir()
    cases = [({"tokenizer": "char", "vocab_size": 4, "chars": list("abcd")},
              "has 4 tokens, the model in"),
             ({"tokenizer": "sentencepiece", "vocab_size": 3}, "names tokenizer 'sentencepiece'"),
             (None, "meta.json not found")]
    for meta, words in cases:
        if meta is None:
            os.remove(data / "meta.json")
        else:
            (data / "meta.json").write_text(json.dumps(meta))
        atomic_save({"model": model.state_dict(), "model_args": dataclasses.asdict(model.config),
                     "data_dir": str(data)}, str(ckpt))
        with pytest.raises(SystemExit) as e:
            convert.main(["export", "--out_dir", str(ckpt), "--out", str(tmp_path / "hf")])
        assert str(e.value).startswith("error: ") and words in str(e.value) and "\n" not in str(e.value)
        assert not os.path.exists(tmp_path / "hf")


def test_import_reads_the_folders_own_tokenizer(exported, tmp_path, monkeypatch, capsys):
    """An export imported back samples (char) and evaluates (GPT-2 BPE) with the folder's tokenizer: the GPT-2
    ranks file is missing and tiktoken cannot download."""
    import tiktoken

    from tools import eval as evaluate
    from tools.huggingface import sample
    from tools.huggingface.convert import load_pretrained
    from tools.huggingface.tokenizer import TransformersTokenizer, tokenizer_for
    char_folder, _, meta, model = exported("char")
    gpt2_folder = exported("gpt2")[0]
    monkeypatch.setenv("GPT2_TIKTOKEN_FILE", os.path.join(char_folder, "missing.tiktoken"))
    monkeypatch.setattr(tiktoken, "get_encoding", lambda name: (_ for _ in ()).throw(ConnectionError("offline")))
    tok = tokenizer_for(load_pretrained(gpt2_folder, say=lambda msg: None)[1])
    assert isinstance(tok, TransformersTokenizer) and tok.eot_token == 50256
    assert tok.encode("Hello world") == [15496, 995] and tok.decode([15496, 995]) == "Hello world"
    capsys.readouterr()   # what preparing the datasets printed
    sample.main([f"--init_from={char_folder}", "--start=ROMEO:", "--num_samples=1", "--max_new_tokens=5",
                 "--device=cpu", "--temperature=0"])
    prompt = torch.tensor([[meta["chars"].index(c) for c in "ROMEO:"]])
    greedy = model.generate(prompt, 5, temperature=0)[0].tolist()   # the exported model's, by meta.json's characters
    assert capsys.readouterr().out.split("---------------")[0] == "".join(meta["chars"][i] for i in greedy) + "\n"
    with pytest.raises(SystemExit) as e:   # a character-level vocabulary checks prompts as ours does
        sample.main([f"--init_from={char_folder}", "--start=ROMEO~", "--device=cpu", "--max_new_tokens=1"])
    assert str(e.value).startswith("error: characters not in the vocabulary: '~'")
    task = tmp_path / "task.jsonl"
    task.write_text(json.dumps(dict(context="To be, or not to be:", choices=["that is", "the question"], label=0)))
    evaluate.main([f"--init_from={gpt2_folder}", f"--mc_file={task}", "--device=cpu"])
    assert capsys.readouterr().out.splitlines()[-1].startswith("| task.jsonl | 1 |")


def test_folder_tokenizer_without_transformers(exported, monkeypatch):
    """Without transformers a GPT-2-vocabulary folder falls back to the built-in GPT-2 BPE; any other folder's
    tokenizer files are a one-line error naming what to install."""
    from tools.huggingface.convert import load_pretrained
    from tools.huggingface.tokenizer import tokenizer_for
    from safety_net.tokenizers import BPETokenizer
    gpt2_info = load_pretrained(exported("gpt2")[0], say=lambda msg: None)[1]
    char_info = load_pretrained(exported("char")[0], say=lambda msg: None)[1]
    monkeypatch.setenv("GPT2_TIKTOKEN_FILE", gpt2_ranks_file())
    monkeypatch.setitem(sys.modules, "transformers", None)   # import transformers -> ImportError
    tok = tokenizer_for(gpt2_info)
    assert isinstance(tok, BPETokenizer) and tok.encode("Hello world") == [15496, 995]
    with pytest.raises(ConversionError, match="needs transformers \\(fix: pip install transformers"):
        tokenizer_for(char_info)


def test_tokenizer_files_that_load_empty_are_refused(tmp_path):
    """transformers turns a tokenizer_config.json without vocabulary files into a GPT-2 tokenizer of one token,
    which encodes every text to []: refused in one line instead of sampling from nothing."""
    from tools.huggingface.tokenizer import tokenizer_for
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "GPT2Tokenizer"}))
    info = dict(architecture="llama", hf_config={"vocab_size": 59}, directory=str(tmp_path), source=str(tmp_path))
    with pytest.raises(ConversionError) as e:
        tokenizer_for(info)
    assert "hold 1 token(s), which do not fit the model's vocabulary (fix: " in str(e.value)


# --- tools.huggingface.sample / train.py from a converted Hugging Face model ------------------------------------------------

def test_sample_prints_text_from_a_gpt2_directory(tmp_path):
    """The command's greedy text is transformers' greedy continuation of the prompt's GPT-2 ids (tiktoken's GPT-2,
    built from the ranks file), decoded."""
    from test_prepare import reference_gpt2
    ranks = gpt2_ranks_file()
    if ranks is None:
        pytest.skip("no GPT-2 ranks file: set GPT2_TIKTOKEN_FILE or provide ../shared/data/gpt2/gpt2.tiktoken")
    torch.manual_seed(0)
    model = randomize(GPT2LMHeadModel(GPT2Config(vocab_size=50257, n_positions=32, n_embd=8, n_layer=1, n_head=2,
                                                 **QUIET)), seed=9)
    model.save_pretrained(tmp_path)
    env = dict(os.environ, OMP_NUM_THREADS="1", GPT2_TIKTOKEN_FILE=ranks)
    r = subprocess.run([sys.executable, "-m", "tools.huggingface.sample", f"--init_from={tmp_path}",
                        "--start=Hello world", "--num_samples=1", "--max_new_tokens=8", "--temperature=0",
                        "--device=cpu"], capture_output=True, text=True, cwd=ROOT, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    enc = reference_gpt2(ranks)
    prompt = torch.tensor([enc.encode_ordinary("Hello world")])
    want = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=8, do_sample=False,
                          pad_token_id=0)
    assert r.stdout.split("---------------\n")[0] == enc.decode(want[0].tolist()) + "\n"
    assert "imported GPT2LMHeadModel" in r.stderr


def test_sample_without_a_tokenizer_says_what_is_needed(hf_dirs, capsys):
    from tools.huggingface import sample
    with pytest.raises(SystemExit) as e:
        sample.main([f"--init_from={hf_dirs['llama_gqa_tied'][1]}", "--device=cpu", "--max_new_tokens=1"])
    msg = str(e.value)
    assert msg.startswith("error: no tokenizer") and "fix:" in msg and "\n" not in msg


def llama_for_tiny_data(path):
    """A Llama with the sizes of conftest's tiny_config (vocab 16, width 32, 2 layers, 2 heads, block 16),
    transformers' own initialisation (near-uniform predictions: finite perplexities)."""
    torch.manual_seed(0)
    theirs = LlamaForCausalLM(LlamaConfig(
        vocab_size=16, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, max_position_embeddings=16, **QUIET))
    theirs.save_pretrained(path)
    return str(path)


def test_eval_init_from_hf_directory(tiny_data, tmp_path, capsys):
    from tools import eval as evaluate
    path = llama_for_tiny_data(tmp_path / "hf")
    with pytest.raises(SystemExit, match="needs token files: --data_dir"):
        evaluate.main([f"--init_from={path}", "--device=cpu"])
    evaluate.main([f"--init_from={path}", f"--data_dir={tiny_data}", "--device=cpu"])
    out = capsys.readouterr().out
    assert "checkpoint: " + path in out and out.splitlines()[-1].startswith("| val | 3,999 |")
    task = tmp_path / "task.jsonl"
    task.write_text(json.dumps(dict(context="abc", choices=["d", "ef"], label=1)) + "\n")
    with pytest.raises(SystemExit, match="cannot encode the question 'abc'"):   # tiny_data's vocabulary has no " "
        evaluate.main([f"--init_from={path}", f"--data_dir={tiny_data}", f"--mc_file={task}", "--device=cpu"])
    spaced = tmp_path / "spaced"
    spaced.mkdir()
    (spaced / "meta.json").write_text(json.dumps(dict(tokenizer="char", vocab_size=16, chars=list("abcdefghijklmno "))))
    evaluate.main([f"--init_from={path}", f"--data_dir={spaced}", f"--mc_file={task}", "--device=cpu"])
    assert capsys.readouterr().out.splitlines()[-1].startswith("| task.jsonl | 1 |")
    # token files of a larger vocabulary than the model's: one line (an IndexError traceback without the check)
    larger = dict(tokenizer="char", vocab_size=20, chars=list("abcdefghijklmnopqrs "))
    (spaced / "meta.json").write_text(json.dumps(larger))
    shutil.copy(os.path.join(tiny_data, "val.bin"), spaced / "val.bin")
    with pytest.raises(SystemExit, match="has a vocabulary of 20 tokens, more than the model's 16"):
        evaluate.main([f"--init_from={path}", f"--data_dir={spaced}", "--device=cpu"])


def test_train_init_from_hf_directory_copies_every_tensor(tiny_train_config, capsys):
    """convert import, then train.py --init_from=<file>: the run starts from the imported weights (vocab and sizes fit
    the data). train.py --init_from=<the folder> itself, which runs the same import in a subprocess, is
    tests/test_nanogpt.py's test_init_from_a_hugging_face_gpt2 (logits compared)."""
    import train
    from tools.huggingface.convert import main as convert_main
    hf_dir = llama_for_tiny_data(tiny_train_config["out_dir"] + "-hf")
    ours = from_pretrained(hf_dir, verbose=False)
    path = tiny_train_config["out_dir"] + "-hf.pt"
    convert_main(["import", hf_dir, f"--out={path}"])
    n = len(ours.state_dict())
    got = {}
    config = dict(tiny_train_config, init_from=path, max_iters=0)
    train.train({**train.DEFAULTS, **config}, explicit=set(config),
                callback=lambda event, info: got.update(model=info["model"]) if event == "end" else None)
    assert f"initialized {n}/{n} tensors from {path}" in capsys.readouterr().out
    trained = got["model"].state_dict()
    assert all(torch.equal(v, trained[k].cpu()) for k, v in ours.state_dict().items())


def test_an_export_records_its_tokenizer_so_training_on_another_is_refused(exported, tmp_path, capsys):
    """Our export writes its dataset's tokenizer_id into config.json, and import carries it into the checkpoint:
    train.py --init_from=<it> on data of another tokenizer of the same size (the same characters, reordered) is
    refused as for our own checkpoints, and starts from every tensor on the data it was exported with."""
    import shutil
    import train
    from conftest import one_error_line
    from safety_net.checkpoint import load_checkpoint
    from safety_net.dataset import tokenizer_id
    folder, data_dir, meta, model = exported("char")
    path = str(tmp_path / "imported.pt")
    convert.main(["import", folder, f"--out={path}"])
    assert load_checkpoint(path)["tokenizer_id"] == tokenizer_id(meta)
    # exported again (the import records no dataset, so no tokenizer is written): the id was dropped (a hunt)
    convert.main(["export", f"--out_dir={path}", f"--out={tmp_path / 'again'}"])
    assert json.loads((tmp_path / "again" / "config.json").read_text())["tokenizer_id"] == tokenizer_id(meta)
    other = tmp_path / "other"
    shutil.copytree(data_dir, other)
    (other / "meta.json").write_text(json.dumps(dict(meta, chars=meta["chars"][::-1])), encoding="utf-8")
    args = [f"--init_from={path}", "--max_iters=1", "--eval_iters=1", "--batch_size=2", "--device=cpu",
            "--num_threads=1"]
    one_error_line(train.main, [*args, f"--data_dir={other}", f"--out_dir={tmp_path / 'refused'}"],
                   "trained with another tokenizer")
    assert not (tmp_path / "refused").exists()
    train.main([*args, f"--data_dir={data_dir}", f"--out_dir={tmp_path / 'run'}"])
    n = len(model.state_dict())
    assert f"initialized {n}/{n} tensors from {path}" in capsys.readouterr().out


def test_eval_of_an_export_on_another_tokenizers_data_is_refused(exported, tmp_path, capsys):
    """tools.eval --init_from=<our export> --data_dir=<data of another tokenizer> scored ids that mean other text (the
    same model and data through --out_dir were refused): the export's recorded tokenizer_id is checked as a
    checkpoint's; on its own data it scores."""
    import shutil
    from conftest import one_error_line
    from tools import eval as eval_tool
    folder, data_dir, meta, model = exported("char")
    other = tmp_path / "other"
    shutil.copytree(data_dir, other)
    (other / "meta.json").write_text(json.dumps(dict(meta, chars=meta["chars"][::-1])), encoding="utf-8")
    args = [f"--init_from={folder}", "--device=cpu", "--batch_size=2"]
    message = one_error_line(eval_tool.main, [*args, f"--data_dir={other}"], "another tokenizer",
                             "(fix: --data_dir=<a dataset of that tokenizer>)")
    assert "None" not in message   # it said "(dataset None)", and "or drop it", which eval refuses for an export
    eval_tool.main([*args, f"--data_dir={data_dir}"])
    assert "ppl" in capsys.readouterr().out


def test_transformers_tokenizer_decodes_as_it_streams(exported):
    """TransformersTokenizer.decode gave 'Hello<|endoftext|> world' where its streamed bytes (TokenBytes, what
    tools.huggingface.sample prints) gave 'Hello world' (a hunt): both skip special tokens."""
    from transformers import AutoTokenizer
    from tools.huggingface.tokenizer import TransformersTokenizer
    folder, data_dir, meta, model = exported("gpt2")
    tok = TransformersTokenizer(AutoTokenizer.from_pretrained(folder))
    ids = tok.encode("Hello") + [meta["eot_token"]] + tok.encode(" world")
    assert tok.decode(ids) == b"".join(tok.token_bytes(i) for i in ids).decode("utf-8") == "Hello world"


def test_a_missing_folder_or_a_checkpoint_file_gets_a_fix_that_works(tmp_path):
    """tools.huggingface.sample --init_from=<our ckpt.pt> said "use --out_dir", which it refuses (sample.py and
    tools.eval take it); a mistyped local folder was reported as a failed hub download (a hunt)."""
    from conftest import one_error_line
    from tools.huggingface import sample
    (tmp_path / "ckpt.pt").write_bytes(b"x")
    one_error_line(sample.main, [f"--init_from={tmp_path / 'ckpt.pt'}"], "is a file", "sample.py or tools.eval")
    for missing in (str(tmp_path / "nope"), "./nope"):
        one_error_line(sample.main, [f"--init_from={missing}"], f"'{missing}' does not exist")
    # a run folder of ours, and a Hugging Face folder given to sample.py: each fix named the other's training
    # ("save_pretrained", "run train.py first"; a hunt)
    one_error_line(sample.main, [f"--init_from={tmp_path}"], "is a run of ours", f"--out_dir={tmp_path}")
    import sample as our_sample
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text("{}")
    one_error_line(our_sample.main, [f"--out_dir={hf}"], "holds a Hugging Face model", f"--init_from={hf}")


def test_sample_of_an_export_on_another_tokenizers_data_is_refused(exported, tmp_path, capsys):
    """tools.huggingface.sample --data_dir=<data of another tokenizer> read the export's ids through that vocabulary
    and printed its text, exit code 0 (tools.eval refused the same pair; a hunt): the recorded tokenizer_id is
    checked; on its own data it samples."""
    import shutil
    from conftest import one_error_line
    from tools.huggingface import sample
    folder, data_dir, meta, model = exported("char")
    other = tmp_path / "other"
    shutil.copytree(data_dir, other)
    (other / "meta.json").write_text(json.dumps(dict(meta, chars=meta["chars"][::-1])), encoding="utf-8")
    args = [f"--init_from={folder}", "--device=cpu", "--start=ab", "--num_samples=1", "--max_new_tokens=3"]
    one_error_line(sample.main, [*args, f"--data_dir={other}"], "another tokenizer")
    capsys.readouterr()
    sample.main([*args, f"--data_dir={data_dir}"])
    assert capsys.readouterr().out.startswith("ab")


def test_sample_of_a_padded_export_takes_its_own_data(exported, tmp_path, capsys):
    """An export of a model with a padded vocab_size (80 rows for 65 characters) was refused with its own dataset
    ("fewer than the model's 80", its fix naming that very folder; a hunt): with the tokenizer_id checked, the
    tokenizer's ids are drawn, as sample.py draws them."""
    from safety_net.dataset import tokenizer_id
    from tools.huggingface import sample
    _, data_dir, meta, _ = exported("char")
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=meta["vocab_size"] + 15, block_size=32, n_layer=1, n_head=2, n_embd=16))
    atomic_save({"model": model.state_dict(), "model_args": dataclasses.asdict(model.config), "iter_num": 1,
                 "data_dir": data_dir, "tokenizer_id": tokenizer_id(meta)}, str(tmp_path / "ckpt.pt"))
    convert.main(["export", "--out_dir", str(tmp_path / "ckpt.pt"), "--out", str(tmp_path / "hf")])
    capsys.readouterr()
    sample.main([f"--init_from={tmp_path / 'hf'}", f"--data_dir={data_dir}", "--device=cpu", "--start=ab",
                 "--num_samples=1", "--max_new_tokens=5"])
    assert capsys.readouterr().out.startswith("ab")


def test_a_gpt2_vocabulary_model_refuses_data_of_another_tokenizer(tiny_data, tmp_path, capsys):
    """A Hugging Face GPT-2 (no tokenizer_id: not our export) reads GPT-2 BPE ids; tools.eval scored a char
    dataset's ids as GPT-2 tokens (loss 10.8, exit code 0; a hunt), and tools.huggingface.sample would decode
    with the wrong vocabulary: both refuse such a --data_dir in one line, before any scoring."""
    from conftest import one_error_line
    from tools import eval as eval_tool
    from tools.huggingface import sample
    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(vocab_size=50257, n_positions=32, n_embd=8, n_layer=1, n_head=2,
                               **QUIET)).save_pretrained(tmp_path / "gpt2")
    args = [f"--init_from={tmp_path / 'gpt2'}", f"--data_dir={tiny_data}", "--device=cpu"]
    for main in (eval_tool.main, sample.main):
        one_error_line(main, args, "is tokenized with the char tokenizer", "reads GPT-2 BPE ids")
    assert "| val |" not in capsys.readouterr().out


def test_training_an_imported_gpt2_on_char_data_is_refused_and_the_fix_trains(tiny_data, tmp_path, capsys):
    """An imported GPT-2 (no tokenizer_id) started on a char dataset: one line naming a dataset of GPT-2 BPE, also
    with --vocab_size=50257; on a GPT-2 BPE dataset it starts from every tensor. (an exploration as a new user
    found it: the refusal's fix said --vocab_size=50257, which trained GPT-2's weights on character ids)"""
    import train
    from safety_net.tokenizers import gpt2_meta
    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(vocab_size=50257, n_positions=16, n_embd=8, n_layer=1, n_head=2,
                               **QUIET)).save_pretrained(tmp_path / "gpt2")
    path = str(tmp_path / "gpt2.pt")
    convert.main(["import", str(tmp_path / "gpt2"), f"--out={path}"])
    args = [f"--init_from={path}", "--max_iters=0", "--eval_iters=1", "--batch_size=2", "--device=cpu"]
    for more in ([], ["--vocab_size=50257"]):
        one_error_line(train.main, [*args, *more, f"--data_dir={tiny_data}", f"--out_dir={tmp_path / 'no'}"],
                       "reads GPT-2 BPE ids", "char tokenizer", "--dataset=shakespeare", "--tokenizer=gpt2")
    assert not (tmp_path / "no").exists()
    bpe = tmp_path / "bpe"
    shutil.copytree(tiny_data, bpe)
    (bpe / "meta.json").write_text(json.dumps(dict(gpt2_meta(), dataset="bpe")), encoding="utf-8")
    train.main([*args, f"--data_dir={bpe}", f"--out_dir={tmp_path / 'run'}"])
    assert "initialized 16/16 tensors" in capsys.readouterr().out


@pytest.mark.parametrize("trailing", ["", os.sep])
def test_import_to_a_folder_is_refused_before_the_import_and_its_fix_works(hf_dirs, tmp_path, monkeypatch, trailing):
    """--out=<a folder> was found out after the whole import, with a disk-space hint; now one line first, naming
    a file in it, and that fix, followed, writes the checkpoint there."""
    from conftest import one_error_line
    from safety_net.checkpoint import load_checkpoint
    folder = tmp_path / "somedir"
    folder.mkdir()
    (folder / "hf.pt").write_bytes(b"an earlier import")   # the fix names another file
    calls = []
    monkeypatch.setattr(convert, "save_imported", lambda *a, **k: calls.append(a))
    message = one_error_line(convert.main, ["import", hf_dirs["gpt2_tied"][1], f"--out={folder}{trailing}"],
                             "is a folder")
    assert not calls and os.listdir(folder) == ["hf.pt"]
    monkeypatch.undo()
    fix = message.split("e.g. ")[1].rstrip(")")
    convert.main(["import", hf_dirs["gpt2_tied"][1], fix])
    assert fix == f"--out={folder / 'hf-2.pt'}" and "model" in load_checkpoint(str(folder / "hf-2.pt"))
    assert (folder / "hf.pt").read_bytes() == b"an earlier import"


def test_import_over_a_runs_checkpoint_or_a_text_is_refused_before_the_import(hf_dirs, tmp_path, monkeypatch):
    """convert import --out=<run>/ckpt.pt replaced the run's best checkpoint with a model it never trained (sample.py
    and tools.eval read it by default), and --out=notes.txt replaced a text: both are one line now, before the
    import; an earlier import is still replaced, as before."""
    from conftest import one_error_line
    import torch
    run = tmp_path / "run"
    run.mkdir()
    torch.save({"model": {}}, run / "ckpt.pt")
    (tmp_path / "notes.txt").write_text("my notes")
    calls = []
    monkeypatch.setattr(convert, "save_imported", lambda *a, **k: calls.append(a))
    src = hf_dirs["gpt2_tied"][1]
    one_error_line(convert.main, ["import", src, f"--out={run / 'ckpt.pt'}"], "training run's own ckpt.pt")
    one_error_line(convert.main, ["import", src, f"--out={tmp_path / 'notes.txt'}"], "is not a checkpoint")
    assert not calls and (tmp_path / "notes.txt").read_text() == "my notes"
    torch.save({"model": {}}, tmp_path / "hf.pt")   # an earlier import: replaced
    convert.main(["import", src, f"--out={tmp_path / 'hf.pt'}"])
    assert calls


# --- config.json variants, hub and run folders, and the command line's edges (a hunt) ----------------------------

def edited_copy(hf_dirs, tmp_path, name, edit=None, tensors=None):
    """A copy of hf_dirs[name]'s folder: edit(config dict) changes config.json in place, tensors(dict) the weights."""
    path = tmp_path / name
    shutil.copytree(hf_dirs[name][1], path)
    config = json.loads((path / "config.json").read_text())
    if edit:
        edit(config)
    (path / "config.json").write_text(json.dumps(config))
    if tensors:
        weights = load_file(str(path / "model.safetensors"))
        tensors(weights)
        save_file(weights, str(path / "model.safetensors"))
    return str(path)


def no_architectures(model_type=None, **more):
    def edit(config):
        del config["architectures"]
        config.update(more, **({"model_type": model_type} if model_type else {}))
    return edit


def n_ctx_only(config):
    config["n_ctx"] = config.pop("n_positions")


def mobilellm_without_share_embedding(config):
    config.update(architectures=["MobileLLMForCausalLM"], model_type="mobilellm", tie_word_embeddings=False)
    assert "share_embedding" not in config


def with_inv_freq(weights):
    weights.pop("lm_head.weight", None)
    weights["model.layers.0.self_attn.rotary_emb.inv_freq"] = torch.ones(4)   # older Llama files store the buffer


@pytest.mark.parametrize("name, edit, tensors", [
    pytest.param("gpt2_tied", no_architectures(), None, id="gpt2_without_architectures"),
    pytest.param("gpt2_tied", n_ctx_only, None, id="gpt2_with_only_n_ctx"),
    pytest.param("llama_gqa_tied", no_architectures("mobilellm", share_embedding=True, tie_word_embeddings=False),
                 None, id="mobilellm_without_architectures"),
    pytest.param("llama_gqa_tied", mobilellm_without_share_embedding, None, id="mobilellm_without_share_embedding"),
    pytest.param("llama_gqa_tied", None, with_inv_freq, id="llama_with_rotary_inv_freq"),
])
def test_config_json_variants_import_with_transformers_logits(hf_dirs, tmp_path, name, edit, tensors):
    """Older or hand-written folders (no architectures, only n_ctx, MobileLLM's tied head by default, a stored
    rotary_emb.inv_freq) import, in eval mode, with the logits of the transformers model saved there (a hunt: a
    changed line refused each as unknown or incomplete, and no test failed)."""
    theirs = hf_dirs[name][0]
    ours = from_pretrained(edited_copy(hf_dirs, tmp_path, name, edit, tensors), verbose=False)
    assert not ours.training   # from_pretrained's model is ready to sample, as transformers' is
    x = tokens(theirs.config.vocab_size, (2, 23))
    with torch.no_grad():
        assert (ours(x, all_logits=True)[0] - theirs(x).logits).abs().max().item() <= TOL


GPT2_SMALL = dict(architectures=["GPT2LMHeadModel"], model_type="gpt2", vocab_size=61, n_positions=48, n_embd=36,
                  n_layer=3, n_head=4)


@pytest.mark.parametrize("hf, words", [
    pytest.param(dict(GPT2_SMALL, scale_attn_by_inverse_layer_idx=True), ["scale_attn_by_inverse_layer_idx=true"],
                 id="gpt2_scaled_by_inverse_layer"),
    pytest.param(dict(GPT2_SMALL, n_layer=True), ["not whole numbers", "n_layer=True"], id="gpt2_n_layer_true"),
    pytest.param(dict(GPT2_SMALL, n_layer=1001), ["n_layer=1,001", "more than 1,000 layers"],
                 id="gpt2_past_the_layer_limit"),   # a billion hung in GPTConfig's checks (an exploration)
    pytest.param(dict(MOBILELLM_125M, rope_scaling={"type": "linear", "factor": 4.0}), ["rope scaling 'linear'"],
                 id="old_style_rope_scaling_type"),
])
def test_config_json_we_cannot_represent_is_refused(hf, words):
    """A GPT-2 scaling attention by 1/layer, `n_layer: true` and the old rope_scaling {"type": "linear"} are one
    line with a fix (a hunt: a changed line imported them, with other logits, as one layer, as plain RoPE, and no
    test failed)."""
    with pytest.raises(ConversionError) as e:
        gpt_config_from_hf(hf)
    msg = str(e.value)
    assert "\n" not in msg and "(fix: " in msg and all(w in msg for w in words), msg


@pytest.mark.parametrize("hf, words", [
    pytest.param(dict(GPT2_SMALL, layer_norm_epsilon=None), ["layer_norm_epsilon=null", "must be a number"],
                 id="eps_null"),
    pytest.param(dict(GPT2_SMALL, layer_norm_epsilon="1e-5"), ['layer_norm_epsilon="1e-5"'], id="eps_string"),
    pytest.param(dict(GPT2_SMALL, layer_norm_epsilon=True), ["layer_norm_epsilon=true"], id="eps_true"),
    pytest.param(dict(GPT2_SMALL, n_embd=None), ["n_embd=null", "must be a whole number"], id="gpt2_width_null"),
    pytest.param(dict(MOBILELLM_125M, rms_norm_eps=None), ["rms_norm_eps=null"], id="llama_eps_null"),
    pytest.param(dict(MOBILELLM_125M, rope_theta="big"), ['rope_theta="big"'], id="llama_rope_theta_string"),
    pytest.param(dict(MOBILELLM_125M, hidden_size="wide"), ['hidden_size="wide"', "whole number"], id="llama_width"),
])
def test_a_config_json_number_that_is_null_or_a_string_is_named(hf, words):
    """A number field of config.json that is null or a string (an epsilon: or true) is one line naming the field,
    as config.json spells it, and what it must be. (an exploration as a new user found it: "'<' not supported
    between instances of 'int' and 'NoneType'", and true imported as norm_eps=True)"""
    with pytest.raises(ConversionError) as e:
        gpt_config_from_hf(hf)
    msg = str(e.value)
    assert "\n" not in msg and "(fix: " in msg and all(w in msg for w in words), msg


def test_a_hub_repo_of_pytorch_model_bin_imports(hf_dirs, tmp_path, monkeypatch):
    """A hub repository with only pytorch_model.bin (no safetensors): the download falls back to *.bin, and the
    model has transformers' logits (a stand-in for huggingface_hub; a hunt: with the fallback off it was refused
    as having no weights, and no test failed)."""
    import fnmatch
    import types
    theirs, path = hf_dirs["gpt2_tied"]
    repo = tmp_path / "repo"
    repo.mkdir()
    shutil.copy(os.path.join(path, "config.json"), repo)
    torch.save(load_file(os.path.join(path, "model.safetensors")), repo / "pytorch_model.bin")
    downloads = []

    def snapshot_download(name, allow_patterns):
        local = tmp_path / f"snapshot{len(downloads)}"
        local.mkdir()
        downloads.append(name)
        for f in os.listdir(repo):
            if any(fnmatch.fnmatch(f, p) for p in allow_patterns):
                shutil.copy(repo / f, local)
        return str(local)

    monkeypatch.setitem(sys.modules, "huggingface_hub", types.SimpleNamespace(snapshot_download=snapshot_download))
    ours = from_pretrained("someorg/old-gpt2", verbose=False)
    x = tokens(61, (2, 23))
    with torch.no_grad():
        assert (ours(x, all_logits=True)[0] - theirs(x).logits).abs().max().item() <= TOL


def test_a_run_folder_with_only_last_pt_is_named_a_run_of_ours(tmp_path):
    """A run folder holding last.pt alone (no ckpt.pt yet) is named a run of ours, with the tools that read it
    (a hunt: a changed line made it 'no config.json', and no test failed)."""
    (tmp_path / "last.pt").write_bytes(b"x")
    with pytest.raises(ConversionError) as e:
        from_pretrained(str(tmp_path))
    assert "is a run of ours" in str(e.value) and f"sample.py or tools.eval --out_dir={tmp_path}" in str(e.value)


def save_run(model, path):
    atomic_save({"model": model.state_dict(), "model_args": dataclasses.asdict(model.config), "iter_num": 1,
                 "best_val_loss": 1.0, "config": {}}, str(path))


def test_export_command_line_refuses_typos_and_replaces_another_format(tmp_path, capsys):
    """`export typo ...` and --format=onnx are one line each, writing nothing; --format=bin over a safetensors
    export leaves the new weights alone (a model.safetensors left beside them is what transformers loads), and a
    killed export's temporary file is removed (a hunt: a changed line undid each, and no test failed)."""
    torch.manual_seed(0)
    small = dict(vocab_size=50, block_size=16, n_layer=1, n_head=2, n_embd=16)
    ckpt, hf = tmp_path / "out" / "ckpt.pt", tmp_path / "hf"
    save_run(randomize(GPT(GPTConfig(**small)), seed=1), ckpt)
    args = [f"--out_dir={ckpt}", f"--out={hf}"]
    one_error_line(convert.main, ["export", "typo", *args], "no argument after export, got export typo")
    one_error_line(convert.main, ["export", *args, "--format=onnx"], "--format=onnx", "one of auto, safetensors, bin")
    assert not hf.exists()
    convert.main(["export", *args])
    assert (hf / "model.safetensors").is_file()
    # left by a killed export of the other format (this export's own file name cleans its own temporary files)
    (hf / ".model.safetensors.x8f2k.tmp").write_bytes(b"0" * 1000)
    new = randomize(GPT(GPTConfig(**small, norm_eps=0.3)), seed=2)
    save_run(new, ckpt)
    capsys.readouterr()
    convert.main(["export", *args, "--format=bin"])
    assert "removed 1 temporary file(s)" in capsys.readouterr().err
    assert sorted(os.listdir(hf)) == ["config.json", "generation_config.json", "pytorch_model.bin"]
    theirs = AutoModelForCausalLM.from_pretrained(str(hf)).eval()
    x = tokens(50, (1, 12))
    with torch.no_grad():
        assert (new(x, all_logits=True)[0] - theirs(x).logits).abs().max() <= TOL


def test_export_without_a_tokenizer_ends_and_stops_generation(tmp_path):
    """Without a tokenizer: a model of GPT-2's 50,257 tokens has GPT-2's end-of-text id, and generation_config.json
    holds max_length, the context length, which transformers 4's generate() reads (else 20 tokens, past a shorter
    context; 5 derives it). A hunt: a `>` for `>=`, and the key dropped, failed no test."""
    from transformers import GenerationConfig
    gpt2_vocab = GPT(GPTConfig(vocab_size=50257, block_size=8, n_layer=1, n_head=2, n_embd=8))
    export(gpt2_vocab, str(tmp_path / "gpt2"), say=lambda msg: None)
    config = json.loads((tmp_path / "gpt2" / "config.json").read_text())
    generation = json.loads((tmp_path / "gpt2" / "generation_config.json").read_text())
    assert config["eos_token_id"] == config["bos_token_id"] == generation["eos_token_id"] == 50256
    torch.manual_seed(0)
    small = randomize(GPT(GPTConfig(vocab_size=50, block_size=12, n_layer=1, n_head=2, n_embd=16)), seed=3)
    export(small, str(tmp_path / "small"), say=lambda msg: None)
    theirs = AutoModelForCausalLM.from_pretrained(str(tmp_path / "small")).eval()
    prompt = tokens(50, (1, 2))
    out = theirs.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False)
    assert out.shape == (1, 12) and GenerationConfig.from_pretrained(str(tmp_path / "small")).max_length == 12
    assert torch.equal(out, small.generate(prompt, 10, temperature=0))


def test_export_data_dir_writes_the_tokenizer_for_a_checkpoint_recording_none(tiny_data, tmp_path, capsys):
    """export --data_dir=D of a checkpoint recording no dataset writes D's tokenizer, and AutoTokenizer reads its
    characters' ids (a hunt: a changed line ignored --data_dir there, and no test failed)."""
    from transformers import AutoTokenizer
    ckpt = tmp_path / "out" / "ckpt.pt"
    save_run(GPT(GPTConfig(vocab_size=16, block_size=8, n_layer=1, n_head=2, n_embd=16)), ckpt)
    convert.main(["export", f"--out_dir={ckpt}", f"--out={tmp_path / 'hf'}", f"--data_dir={tiny_data}"])
    assert "no tokenizer written" not in capsys.readouterr().err
    assert {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"} <= set(os.listdir(tmp_path / "hf"))
    assert AutoTokenizer.from_pretrained(str(tmp_path / "hf")).encode("abc", add_special_tokens=False) == [0, 1, 2]


def test_import_command_line_refuses_export_keys_and_a_missing_folder_and_fills_an_empty_file(hf_dirs, tmp_path,
                                                                                             monkeypatch):
    """`import SRC --out=hf.pt --data_dir=D` and --out=new/ (a folder not made yet) are one line each before the
    import, the latter's fix naming new/hf.pt; an existing empty --out file is written (a hunt: changed lines
    ignored --data_dir, ran the whole import before failing, refused the empty file, and no test failed)."""
    from safety_net.checkpoint import load_checkpoint
    src = hf_dirs["gpt2_tied"][1]
    calls = []
    monkeypatch.setattr(convert, "save_imported", lambda *a, **k: calls.append(a))
    one_error_line(convert.main, ["import", src, f"--out={tmp_path / 'hf.pt'}", "--data_dir=data/x"],
                   "import takes one source and --out only")
    new = tmp_path / "new"
    one_error_line(convert.main, ["import", src, f"--out={new}{os.sep}"], "ends in a folder's '/'",
                   f"--out={new / 'hf.pt'}")
    assert not calls and not new.exists()
    monkeypatch.undo()
    empty = tmp_path / "empty.pt"
    empty.write_bytes(b"")   # e.g. made by `touch`, or left by a full disk
    convert.main(["import", src, f"--out={empty}"])
    assert "model" in load_checkpoint(str(empty))
