"""tools/support.py (issue 56, point 1): every GPTConfig field is declared for every path, and a field nobody declared
is refused, in one line and before anything is written, by each tool path that uses a model: the compiled decoder,
the Hugging Face, ExecuTorch and GGUF exports, parameter inheritance, the FLOPs count and the layer plan."""
import dataclasses

import pytest

from configurator import UserError
from model import GPT, GPTConfig
from tools import fast_sample, flops, plan
from tools.executorch import export as executorch_export
from tools.huggingface import convert
from tools.llamacpp import export as llamacpp_export
from tools.pangu import inherit
from tools.support import PATHS, SUPPORT, TOOL_PATHS

TINY = dict(vocab_size=16, block_size=8, n_layer=2, n_head=2, n_embd=16)
# a technique added to GPTConfig without a word in tools/support.py
WithNewFlag = dataclasses.make_dataclass("WithNewFlag", [("new_flag", int, 0)], bases=(GPTConfig,))


def test_every_gptconfig_field_is_declared():
    """Adding a field to GPTConfig fails here until tools/support.py says which paths refuse it."""
    fields = [f.name for f in dataclasses.fields(GPTConfig)]
    missing = [name for name in fields if name not in SUPPORT]
    assert not missing, f"declare {missing} in tools/support.py's SUPPORT (the paths that refuse them)"
    assert sorted(SUPPORT) == sorted(fields), "tools/support.py declares fields GPTConfig no longer has"
    for name, refused_by in SUPPORT.items():
        assert set(refused_by) <= set(PATHS), f"{name}: unknown paths {set(refused_by) - set(PATHS)}"


def model_with_new_flag(value):
    """A tiny model whose config is GPTConfig plus the undeclared field new_flag=value."""
    model = GPT(GPTConfig(**TINY))
    model.config = WithNewFlag(**TINY, new_flag=value)
    return model


def compiled_decoder(model, tmp_path):
    fast_sample.compiled_decode_step(model, backend="eager")


def huggingface(model, tmp_path):
    convert.export(model, str(tmp_path / "out"))


def executorch(model, tmp_path):
    executorch_export.refuse_unsupported(model.config)   # what run() checks before it loads the exporter


def gguf(model, tmp_path):
    pytest.importorskip("gguf", reason="gguf is not installed (pip install -r requirements-dev.txt)")
    llamacpp_export.write_gguf(model, str(tmp_path / "out"), "f32", None, None)


def inheritance(model, tmp_path):
    inherit.inherit(model, dataclasses.replace(model.config, n_layer=1))


def flops_count(model, tmp_path):
    flops.flops_per_token(model)


def layer_plan(model, tmp_path):
    plan.read_plan(model, "new")


TOOLS = {"compiled_decoder": compiled_decoder, "huggingface": huggingface, "executorch": executorch, "gguf": gguf,
         "inheritance": inheritance, "flops": flops_count, "plan": layer_plan}


def test_every_tool_path_is_tested():
    assert sorted(TOOLS) == sorted(TOOL_PATHS)


@pytest.mark.parametrize("path", sorted(TOOLS))
def test_an_undeclared_field_is_refused_by_every_tool_path(path, tmp_path):
    with pytest.raises(UserError) as e:
        TOOLS[path](model_with_new_flag(1), tmp_path)
    message = str(e.value)
    assert "\n" not in message and "new_flag=1" in message and "tools/support.py" in message, message
    assert TOOL_PATHS[path][0] in message, message
    assert not (tmp_path / "out").exists()   # refused before anything is written


@pytest.mark.parametrize("path", ["flops", "plan"])
def test_an_undeclared_field_left_at_its_default_is_accepted(path, tmp_path):
    """Only a value that changes the model is refused: an old checkpoint's config passes."""
    TOOLS[path](model_with_new_flag(0), tmp_path)
