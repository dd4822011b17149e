"""checkpoint.py: a checkpoint of ours loads as the model that was saved, by sample.py's loader (load_model) and by
train.py's --init_from=<file> (load_init_checkpoint, model_args, build_model, load_matching_weights), with the
key prefixes of torch.compile and DDP; and pgpt's heaviest branch (keep_heaviest_branch) at branch weights that
differ. Weights at std 0.3, where a wrong mapping shows in the logits; an untied head that is a perturbed copy of
the embedding (a head tied by mistake shows); a tied head checked to be the embedding itself. nanoGPT's format is
tests/test_nanogpt.py's, Hugging Face's tests/test_huggingface.py's. The one checkpoint format (checkpoint_dict,
format_version) and the migration of version 0, the layout without it (tests/fixtures/ckpt_before_issue24.pt)."""
import dataclasses
import ast
import math
import os

import pytest
import torch

from model import GPT, GPTConfig
from safety_net import checkpoint
from safety_net.build import build_model, model_args
from safety_net.checkpoint import load_init_checkpoint, load_matching_weights, load_model
from safety_net.configurator import UserError
from safety_net.fileio import atomic_save

pytestmark = pytest.mark.usefixtures("one_thread")   # conftest.py

SMALL = dict(vocab_size=23, block_size=16, n_layer=2, n_head=2, n_embd=16)


def visible(model, seed=0):
    """Every parameter random at a scale where a wrong one shows: matrices N(0, 0.3^2), norm weights 1 + N(0, 0.3^2),
    biases and branch logits N(0, 0.3^2)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = 0.3 * torch.randn(p.shape, generator=g)
            is_norm_weight = name.endswith("norm.weight") or name == "ln_f.weight"
            p.copy_(1 + noise if is_norm_weight else noise)
    return model.eval()


def tokens(shape, vocab=SMALL["vocab_size"], seed=1):
    return torch.randint(0, vocab, shape, generator=torch.Generator().manual_seed(seed))


def train_init(path):
    """What train.py --init_from=<path> starts from: its loader, its model_args (the checkpoint's, nothing set on the
    command line), a fresh model, the matching weights copied (all of them: no partial init)."""
    ckpt = load_init_checkpoint(path)
    model = build_model(model_args({}, set(), base=ckpt["model_args"]))
    copied, total = load_matching_weights(model, ckpt["model"], path, allow_partial=False)
    assert copied == total
    return model.eval()


@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize("prefix", ["", "_orig_mod.", "module._orig_mod."])
def test_own_checkpoint_loads_with_the_saved_logits(tmp_path, tied, prefix):
    """A checkpoint of ours (its weights under torch.compile's and DDP's key prefixes too) gives the saved model's
    logits, to sample.py and to train.py --init_from. Untied: the head is a perturbed copy of the embedding, so a
    head tied by mistake shows; tied: the head is the embedding (zeroing a token's row zeroes its logit)."""
    source = visible(GPT(GPTConfig(**SMALL, tie_embeddings=tied, pos_embedding="rope", n_kv_head=1)))
    if not tied:
        with torch.no_grad():
            source.lm_head.weight.copy_(source.tok_emb.wte.weight + 0.3 * torch.randn_like(source.lm_head.weight))
    path = str(tmp_path / "ckpt.pt")
    atomic_save({"model": {prefix + k: v for k, v in source.state_dict().items()},
                 "model_args": dataclasses.asdict(source.config), "iter_num": 5, "best_val_loss": 2.5}, path)
    idx = tokens((2, SMALL["block_size"]))
    with torch.no_grad():
        want = source(idx, all_logits=True)[0]
        assert want.abs().max() > 1
        for model in (load_model(path)[0], train_init(path)):
            assert torch.equal(model(idx, all_logits=True)[0], want)
            assert hasattr(model, "lm_head") != tied
            model.tok_emb.wte.weight[7] = 0.0
            logit_7 = model(idx, all_logits=True)[0][..., 7]
            assert torch.all(logit_7 == 0) == tied


def test_a_checkpoint_in_torchs_older_format_loads_with_mmap_too(tmp_path):
    """torch.save's pre-zip format (a pickle) loads in sample.py; the tools that load with mmap (tools.plan,
    compare, inherit, bench) refused it: torch maps only the zip format. It is read whole there."""
    source = visible(GPT(GPTConfig(**SMALL)))
    path = tmp_path / "old.pt"
    torch.save({"model": source.state_dict(), "model_args": dataclasses.asdict(source.config), "iter_num": 5,
                "best_val_loss": 2.5}, path, _use_new_zipfile_serialization=False)
    for mmap in (False, True):
        ckpt = checkpoint.load_checkpoint(str(path), mmap=mmap)
        assert all(torch.equal(ckpt["model"][k], v) for k, v in source.state_dict().items())


@pytest.mark.parametrize("name", ["dict.pkl", "list.pkl", "half.pt", "damaged_old.pt"])
def test_a_pickle_or_a_checkpoint_cut_short_is_one_line_without_torchs_warnings(tmp_path, name):
    """pickle.dump's file (of a dict, of a list) or the first half of a ckpt.pt as --out_dir: one line saying it is
    no (complete) checkpoint of this project, and no warning of torch's (nor for a damaged file of torch.save's
    older format); that format, of pickle protocol 4 too, is still torch.save's. (an exploration as a new user
    found it: torch's pickle-protocol warning, then "Unsupported operand 149"; "[Errno 22] Invalid argument" for
    the half)"""
    import pickle
    import warnings
    source = GPT(GPTConfig(**SMALL))
    saved = {"model": source.state_dict(), "model_args": dataclasses.asdict(source.config), "iter_num": 0,
             "best_val_loss": 2.5}
    whole, path = tmp_path / "ckpt.pt", tmp_path / name
    atomic_save(saved, str(whole))
    if name == "half.pt":
        path.write_bytes(whole.read_bytes()[:whole.stat().st_size // 2])
    elif name == "damaged_old.pt":   # its protocol number is a garbage byte, which torch warned of
        path.write_bytes(b"\x80\x02" + checkpoint.LEGACY_MAGIC + b".\x80\x6enot a checkpoint")
    else:
        path.write_bytes(pickle.dumps({"a": 1} if name == "dict.pkl" else [1, 2, 3], protocol=4))
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # a warning of torch's would end the load
        with pytest.raises(UserError) as e:
            checkpoint.load_checkpoint(str(path))
    words = {"half.pt": "cut short", "damaged_old.pt": "cannot read checkpoint"}.get(name, "no checkpoint of this")
    assert words in str(e.value) and "(fix: " in str(e.value) and "\n" not in str(e.value), str(e.value)
    assert "pickle protocol" not in str(e.value), str(e.value)
    torch.save(saved, tmp_path / "old4.pt", _use_new_zipfile_serialization=False, pickle_protocol=4)
    assert checkpoint.written_by_torch_save(tmp_path / "old4.pt")


@pytest.mark.parametrize("branch_logits", [[0.2, 1.5, -0.4], [2.0, 0.1, 0.3], [-1.0, -2.0, 0.5]])
def test_keep_heaviest_branch_runs_the_branch_of_largest_weight_alone(branch_logits):
    """pgpt at inference (paper 004): the branch whose combination weight softmax(a)_i is largest, computed here
    from the formula, is the one kept; the model then computes exactly what a one-branch GPT holding that branch,
    its n_embd-wide chunk of the embeddings and the shared head computes, its stack's output times that weight
    (the term the branch had in the sum)."""
    cfg = GPTConfig(**dict(SMALL, n_layer=6), n_branches=3, tie_embeddings=False)
    model = visible(GPT(cfg))
    with torch.no_grad():
        model.branch_logits.copy_(torch.tensor(branch_logits))
    weights = [math.exp(a) / sum(math.exp(b) for b in branch_logits) for a in branch_logits]
    heaviest = max(range(3), key=lambda i: weights[i])
    assert model.heaviest_branch() == heaviest
    note = model.keep_heaviest_branch()
    assert model.keep_branch == heaviest
    assert note == f"running only branch {heaviest} of 3 (weights {', '.join(f'{w:.3f}' for w in weights)})"
    alone = GPT(dataclasses.replace(cfg, n_layer=2, n_branches=1)).eval()
    chunk = slice(heaviest * cfg.n_embd, (heaviest + 1) * cfg.n_embd)
    state = {k: v for k, v in model.state_dict().items() if not k.startswith("branches.") and k != "branch_logits"}
    state.update({"branches.0." + k.split(".", 2)[2]: v for k, v in model.state_dict().items()
                  if k.startswith(f"branches.{heaviest}.")})
    state["tok_emb.wte.weight"] = state["tok_emb.wte.weight"][:, chunk]
    state["pos_emb.weight"] = state["pos_emb.weight"][:, chunk]
    alone.load_state_dict(state)
    idx = tokens((2, SMALL["block_size"]))
    with torch.no_grad():
        kept = model(idx, all_logits=True)[0]
        x = alone.drop(alone.tok_emb(idx) + alone.pos_emb(torch.arange(idx.size(1))))
        expected = alone.head(alone.ln_f(weights[heaviest] * alone.branches[0](x)))
        torch.testing.assert_close(kept, expected, rtol=0, atol=1e-6)
        model.keep_branch = None
        assert not torch.allclose(model(idx, all_logits=True)[0], kept, atol=1e-2)   # all branches: another function


FIXTURE_V0 = os.path.join(os.path.dirname(__file__), "fixtures", "ckpt_before_issue24.pt")


def test_checkpoint_dict_is_the_one_format():
    """checkpoint_dict: format_version first, the weights and model_args, any field of CHECKPOINT_FIELDS; a field
    outside the format is refused (a writer that invents one fails here, not in a reader)."""
    model = GPT(GPTConfig(**SMALL))
    args = dataclasses.asdict(model.config)
    ckpt = checkpoint.checkpoint_dict(model.state_dict(), args, iter_num=3, source="gpt2")
    assert ckpt["format_version"] == checkpoint.FORMAT_VERSION == 1
    assert ckpt["model_args"] == args and ckpt["iter_num"] == 3 and ckpt["source"] == "gpt2"
    with pytest.raises(TypeError, match="outside the checkpoint format"):
        checkpoint.checkpoint_dict(model.state_dict(), args, iter_number=3)


# the torch.save calls outside the tests that write no checkpoint: (file, why)
NOT_CHECKPOINTS = {"safety_net/fileio.py": "atomic_save itself",
                   "tools/huggingface/convert.py": "the transformers folder's pytorch_model.bin",
                   "tools/compare.py": "a byte count of the weights, written to a counter, not a file"}


def test_checkpoints_are_written_only_by_save_checkpoint():
    """One writer: outside the tests, torch.save and atomic_save are called only by save_checkpoint (which builds
    the dict with checkpoint_dict) and the declared writers of other things; a new writer of its own fails here."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    found = set()
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in ("tests", "docs", "__pycache__")]
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                if writes_with_torch_save(path):
                    found.add(os.path.relpath(path, root).replace(os.sep, "/"))
    assert found - {"safety_net/checkpoint.py"} == set(NOT_CHECKPOINTS), found


def writes_with_torch_save(path):
    """Whether the module calls torch.save or atomic_save."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id == "atomic_save":
                return True
            if isinstance(func, ast.Attribute) and func.attr == "atomic_save":   # fileio.atomic_save(...)
                return True
            if isinstance(func, ast.Attribute) and func.attr == "save":
                if isinstance(func.value, ast.Name) and func.value.id == "torch":
                    return True
    return False


def test_version_0_migrates_and_newer_versions_are_refused(tmp_path):
    """Version 0 (no format_version: every checkpoint written before it, the fixture) loads as version 1 with its
    fields unchanged; migrate_checkpoint on a dict: adds the version only; a version newer than this code's, or one
    that is not a number, is one line."""
    raw = torch.load(FIXTURE_V0, weights_only=True)
    assert "format_version" not in raw
    ckpt = checkpoint.load_checkpoint(FIXTURE_V0)
    assert ckpt["format_version"] == 1 and ckpt["iter_num"] == 4 and ckpt["tokenizer_id"] == raw["tokenizer_id"]
    assert all(torch.equal(ckpt["model"][k], v) for k, v in raw["model"].items())
    assert checkpoint.migrate_checkpoint({"model": {}, "iter_num": 2}, "x.pt") == \
        {"model": {}, "iter_num": 2, "format_version": 1}
    for version, words in ((2, "newer than this code's 1"), ("1", "'format_version' is '1'"), (-1, "damaged")):
        path = tmp_path / f"v{version}.pt"
        atomic_save(dict(raw, format_version=version), path)
        with pytest.raises(UserError, match=words):
            checkpoint.load_checkpoint(path)


def test_weights_that_do_not_fit_stay_refused_in_one_line(tmp_path):
    """An older layout than version 0 (weights under other names) has no migration: load_checkpoint refuses it in
    one line naming what differs, as it refuses an edited file."""
    raw = torch.load(FIXTURE_V0, weights_only=True)
    renamed = {k.replace("branches.0.", "h."): v for k, v in raw["model"].items()}
    path = tmp_path / "old.pt"
    atomic_save(dict(raw, model=renamed), path)
    with pytest.raises(UserError, match="do not fit its own model_args: 12 missing"):
        checkpoint.load_checkpoint(path)
