"""tools/support.py (issue 56, point 1): every GPTConfig field is declared for every path, and a field nobody declared
is refused, in one line and before anything is written, by each tool path that uses a model: the compiled decoder,
the Hugging Face, ExecuTorch and GGUF exports, parameter inheritance, the FLOPs count and the layer plan.

The declarations are checked: every path declared to compute a field is tested with it, that is some configuration
of the path's equivalence test (read from that test module's own table) sets the field to a non-default value,
unless tools/support.py says why not (the path refuses the field or the field it acts under, DEPENDS; or the field
cannot change what the path computes, NO_EFFECT). And every field is in the README's Techniques table."""
import dataclasses
import os
import re

import pytest

from model import GPT, GPTConfig
from tools import fast_sample, flops, plan
from tools.executorch import export as executorch_export
from tools.huggingface import convert
from tools.llamacpp import export as llamacpp_export
from tools.pangu import inherit
from tools.support import DEPENDS, NO_EFFECT, PATHS, SUPPORT, TOOL_PATHS, must_be_tested, no_effect_reason
from safety_net.configurator import UserError

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
    inherit.inherit(model, model.config)   # refused before any slicing, whatever the target's size


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


# --- every path declared to compute a field is tested with it ---------------------------------------------------
# Each function returns the configurations (GPTConfig keyword arguments) that a path's equivalence test runs, read
# from that test module's own table; a module skipped for a missing package (transformers, gguf) skips its path.

def model_test_configs():
    """tests/test_model.py's FLAGS on its TINY: causality, KV cache = full forward, every weight used, learning."""
    import test_model
    return [{**test_model.TINY, **flags} for flags in test_model.FLAGS.values()]


def compiled_decoder_configs():
    """tests/test_compile.py: the static-cache decoder's families (test_static_cache_decode_same_tokens_...)."""
    import test_compile
    import test_model
    return [{**test_model.TINY, **test_compile.FAMILIES[family]} for family in test_compile.STATIC_DECODE]


def huggingface_configs():
    """tests/test_huggingface.py's OURS: the exports transformers loads and runs to equal outputs."""
    import test_huggingface
    return list(test_huggingface.OURS.values())


def executorch_configs():
    """tests/test_executorch.py: the presets and random flag sets whose traced modules equal the eager model."""
    import test_executorch
    return test_executorch.default_run_configs("every_preset") + test_executorch.default_run_configs("random_flags")


def gguf_configs():
    """tests/test_llamacpp.py's FORWARD_SHAPES: the files llama.cpp's equations run to our logits."""
    import test_llamacpp
    return [dict(shape, vocab_size=len(test_llamacpp.CHARS)) for shape in test_llamacpp.FORWARD_SHAPES.values()]


def inheritance_configs():
    """tests/test_pangu.py's SAME_SHAPE: inheritance that drops nothing reproduces the logits exactly."""
    import test_pangu
    return [{**test_pangu.SAME_SHAPE_BASE, **flags} for flags in test_pangu.SAME_SHAPE]


def plan_configs():
    """tests/test_plan.py's SHAPES (of FLAGS): FLOPs and KV cache against torch's FlopCounterMode and the real
    modules (its random combinations are left out: a field covered by chance is not covered)."""
    import test_plan
    return [test_plan.TINY_CONFIGS[f"flag:{name}"] for name in test_plan.SHAPES]


EQUIVALENCE_CONFIGS = {"training": model_test_configs, "kv_cache": model_test_configs,
                       "compiled_decoder": compiled_decoder_configs, "huggingface": huggingface_configs,
                       "executorch": executorch_configs, "gguf": gguf_configs, "inheritance": inheritance_configs,
                       "flops": plan_configs, "plan": plan_configs}
DEFAULTS = {f.name: f.default for f in dataclasses.fields(GPTConfig)}


def test_exceptions_are_declared_for_known_fields_and_paths():
    assert sorted(EQUIVALENCE_CONFIGS) == sorted(PATHS)
    for child, parent in DEPENDS.items():
        assert child in SUPPORT and parent in SUPPORT, (child, parent)
    for field, paths, reason in NO_EFFECT:
        assert field in SUPPORT and set(paths) <= set(PATHS), (field, paths)
        assert reason and "\n" not in reason, field
        refusing = [path for path in paths if path in SUPPORT[field]]
        assert not refusing, f"{field}: NO_EFFECT lists {refusing}, which SUPPORT says refuse it"


def untested_fields(path, configs):
    """The fields `path` must be tested with (tools/support.py) that no configuration in `configs` sets."""
    missing = []
    for field in DEFAULTS:
        if not must_be_tested(field, path):
            continue
        if not any(config.get(field, DEFAULTS[field]) != DEFAULTS[field] for config in configs):
            missing.append(field)
    return missing


@pytest.mark.parametrize("path", PATHS)
def test_every_computed_field_is_tested_on_every_path(path):
    """A path declared to compute a field (tools/support.py's SUPPORT does not list the path for it) runs, in its
    equivalence test, some configuration that sets the field. Forgetting a new field in a test table fails here."""
    missing = untested_fields(path, EQUIVALENCE_CONFIGS[path]())
    assert not missing, (f"{path}: no configuration of its equivalence test sets {missing} (fix: add a tiny "
                         f"config to that test's table, or say in tools/support.py why the path need not: SUPPORT "
                         f"if it refuses the field, DEPENDS or NO_EFFECT)")


def test_a_field_left_out_of_a_table_is_found():
    """The check itself: the KV cache's configurations without rope_base's entry miss rope_base."""
    import test_model
    configs = [{**test_model.TINY, **flags} for name, flags in test_model.FLAGS.items() if name != "rope_base"]
    assert untested_fields("kv_cache", configs) == ["rope_base"]
    assert no_effect_reason("dropout", "kv_cache") and not no_effect_reason("dropout", "training")


def readme_flag_fields():
    """The names in the "Flag(s)" column of README.md's Techniques table."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "README.md"), encoding="utf-8") as f:
        text = f.read()
    table = text.split("## Techniques", 1)[1].split("\n\n## ", 1)[0]
    names = set()
    for line in table.splitlines():
        cells = line.split("|")
        if len(cells) > 3 and cells[1].strip() not in ("Technique", "---"):
            names.update(re.findall(r"`([a-z_]+)", cells[2]))
    return names


GPT2_BASELINE = ("block_size", "vocab_size", "n_layer", "n_head", "n_embd", "dropout", "bias")


def test_every_field_is_in_the_readme_techniques_table():
    listed = readme_flag_fields()
    missing = [name for name in DEFAULTS if name not in listed and name not in GPT2_BASELINE]
    assert not missing, f"README.md's Techniques table lists no row with {missing} in its Flag(s) column"


# --- every path declared to refuse a field refuses it -----------------------------------------------------------

def refusals():
    """(field, tool path) for every refusal SUPPORT declares on a tool path."""
    return [(field, path) for field, paths in SUPPORT.items() for path in paths if path in TOOLS]


def fewest_flags_setting(field):
    """tests/test_model.py's FLAGS entry that sets `field` with the fewest other changes (so that a refusal is
    the field's, not a neighbour's)."""
    import test_model
    entries = [flags for flags in test_model.FLAGS.values() if flags.get(field, DEFAULTS[field]) != DEFAULTS[field]]
    return {**test_model.TINY, **min(entries, key=len)}


@pytest.mark.parametrize("field, path", refusals())
def test_a_declared_refusal_is_real(field, path, tmp_path):
    """SUPPORT's refusals are checked, not trusted: the path refuses a model that sets the field, in one line,
    before anything is written."""
    model = GPT(GPTConfig(**fewest_flags_setting(field)))
    with pytest.raises(UserError) as e:
        TOOLS[path](model, tmp_path)
    assert "\n" not in str(e.value), str(e.value)
    assert not (tmp_path / "out").exists()


def test_the_new_technique_page_names_real_tests_and_tables():
    """docs/new_technique.md, the steps of adding a field in order, names the tests that enforce them and the
    tables they read: each test is defined under tests/, each table is in the file the page puts it in."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "docs", "new_technique.md"), encoding="utf-8") as f:
        page = f.read()
    defined = set()
    for name in os.listdir(os.path.join(root, "tests")):
        if name.endswith(".py"):
            with open(os.path.join(root, "tests", name), encoding="utf-8") as f:
                defined |= set(re.findall(r"^def (test_\w+)", f.read(), re.MULTILINE))
    named = set(re.findall(r"`(test_\w+)`", page))
    assert len(named) >= 10 and not named - defined, f"docs/new_technique.md names no such test: {named - defined}"
    tables = {"tests/test_model.py": ("INVALID", "ANY_VALUE", "FLAGS", "STRUCTURAL", "INIT_ONLY", "OFF"),
              "tests/test_plan.py": ("DEPTH_CASES",),
              "tests/test_compile.py": ("FAMILIES", "STATIC_DECODE"),
              "tools/plan.py": ("PARTS",),
              "tools/support.py": ("SUPPORT", "DEPENDS", "NO_EFFECT"),
              "tests/mutation.py": ("MUTANTS", "FIELD_MUTANTS"),
              "tools/one_file.py": ("TECHNIQUE_WORDS",),
              "tests/test_one_file.py": ("NO_TECHNIQUE_WORDS", "NOT_PLAIN", "VALUE_ONLY"),
              "model.py": ("CHOICES",)}
    for path, names in tables.items():
        with open(os.path.join(root, path), encoding="utf-8") as f:
            text = f.read()
        for name in names:
            assert f"`{name}`" in page and re.search(rf"^{name} = ", text, re.MULTILINE), (path, name)


def test_every_field_is_set_by_a_flag_set():
    """Every GPTConfig field but the sizes every config sets is off its default in some test_model.FLAGS entry,
    whatever tools/support.py declares: the checks run over FLAGS (the weights bound, the plan's parts, the
    bench's label, the one-file words) then see the field."""
    import test_model
    set_by_flags = {name for flags in test_model.FLAGS.values() for name in flags if flags[name] != DEFAULTS[name]}
    missing = sorted(set(DEFAULTS) - set_by_flags - {"block_size", "vocab_size"})
    assert not missing, f"fields no FLAGS entry sets: {missing} (fix: add a flag set to tests/test_model.py's FLAGS)"


def test_device_runners_default_as_sample_py():
    """tools.executorch.run and tools.llamacpp.run take sample.py's defaults for the keys they share with it (they
    printed 1 sample of 200 tokens where sample.py prints 10 of 500, without a word; a hunt)."""
    import sample
    from tools.executorch import run as et_run
    from tools.llamacpp import run as lc_run
    for runner in (et_run, lc_run):
        shared = set(runner.DEFAULTS) & set(sample.DEFAULTS)
        assert {"start", "max_new_tokens"} <= shared
        assert {k: runner.DEFAULTS[k] for k in shared} == {k: sample.DEFAULTS[k] for k in shared}


def test_no_field_shadows_a_commands_own_key():
    """A GPTConfig field named as a key of train.py, tools.bench, tools.compare, tools.one_file or
    tools.technique_lines would silently take or hide that key (train.py merges the two dicts)."""
    import train
    from tools import bench, compare, one_file, technique_lines
    commands = {"train.py": train.TRAIN_DEFAULTS, "tools.bench": bench.BENCH_DEFAULTS,
                "tools.compare": compare.COMPARE_DEFAULTS, "tools.one_file": one_file.OPTIONS,
                "tools.technique_lines": technique_lines.OPTIONS}
    shared = {name: sorted(set(keys) & set(DEFAULTS)) for name, keys in commands.items()}
    assert not any(shared.values()), f"GPTConfig fields that are also a command's key: {shared}"
