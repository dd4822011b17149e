"""
tools/one_file.py: model.py specialised to one config, checked to compute exactly what model.py computes.

Per preset (variants/), the file made now equals the committed docs/models/<preset>.py (less the commit line), and the
file, given a checkpoint of a model.py model (its model_args and state_dict, tiny: the sizes the tool traces), gives
bit-identical logits and losses (training and evaluation mode), logits through the KV cache, sampled tokens past
block_size with and without it, greedy tokens, and the same initial weights from the same seed: the check the command
runs on every file it makes (bugs planted in a file show in it). The same for one flag set per row of README.md's
Techniques table, set on a small gpt as tests/test_technique_lines.py sets it. A comment planted on a model.py line that only the
presets with one flag run changes only their files; the plain GPT file names none of the other techniques' code.
"""
import ast
import dataclasses
import functools
import importlib.util
import io
import os
import re
import tokenize

import pytest
import torch

import model
import variants
from conftest import one_error_line
from test_technique_lines import BASE, FIELDS, NAMED, PGPT, SAMPLE, table_rows
from tools import one_file, technique_lines

PRESETS = variants.available()


@functools.lru_cache(maxsize=None)
def made(target, overrides=(), keep=False):
    """(text, the model's arguments it was traced with, the trace, the full-size arguments); overrides: ((key, value),
    ...) of train.py's keys (a tuple: the cache's key)."""
    out = f"docs/models/{target}.py" if not overrides and not keep else None
    tracer, ran, full = one_file.run(target, dict(overrides), keep)
    flags = technique_lines.flag_texts(dict(overrides)) + ["--keep_heaviest_branch"] * keep
    header = one_file.header(target, flags, out)
    return one_file.specialise(model_text(), tracer, ran, full, header), ran, tracer, full


def model_text():
    with open(one_file.MODEL, encoding="utf-8") as f:
        return f.read()


def without_commit(text):
    return re.sub(r"(?m)^ *model\.py as of commit .*$", "", text)


def load_module(path, name):
    """The module of a file the tool wrote, imported from its path."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("preset", PRESETS)
def test_preset_file_is_up_to_date_and_computes_as_model_py(preset):
    text, args, _, _ = made(preset)
    with open(os.path.join(one_file.OUT_DIR, f"{preset}.py"), encoding="utf-8") as f:
        committed = f.read()
    assert without_commit(committed) == without_commit(text), (
        f"docs/models/{preset}.py is not what model.py makes now (fix: python -m tools.one_file --all)")
    assert one_file.differs_from_model_py(one_file.module_of(text), args) == ""


def row_flags(flags):
    """(((key, value), ...) overrides, keep_heaviest_branch) of a Flag(s) cell: its first alternative, on a small
    gpt."""
    settings = {}
    for part in re.findall(r"`([^`]*)`", flags):
        assignment = re.fullmatch(r"(\w+)=(.+)", part)
        if assignment and assignment.group(1) in FIELDS:
            key, text = assignment.groups()
            if key in settings:
                continue
            try:
                settings[key] = ast.literal_eval(text)
            except (ValueError, SyntaxError):
                settings[key] = NAMED[text]
                if text in FIELDS:   # share_from_layer=n_attn_layers: that flag too
                    settings[text] = SAMPLE[text]
        elif part in FIELDS:
            settings[part] = SAMPLE[part]
    keep = "--keep_heaviest_branch" in flags
    if keep:
        settings = dict(PGPT, **settings)
    if settings.get("shrink_every") or settings.get("n_branches", 1) > 1:
        settings.setdefault("tie_embeddings", False)
    return tuple({**BASE, **settings}.items()), keep


ROWS = sorted({row_flags(flags) for _, flags, _, _ in table_rows()})


def row_id(overrides, keep):
    """The flags past BASE's, as on a command line (`--mlp_type='gated'`), and ` keep`."""
    return " ".join(f"--{k}={v!r}" for k, v in overrides[1:]) + " keep" * keep or "gpt"


@pytest.mark.slow
@pytest.mark.parametrize("overrides,keep", ROWS, ids=[row_id(o, k) for o, k in ROWS])
def test_technique_row_file_computes_as_model_py(overrides, keep):
    text, args, _, _ = made("gpt", overrides, keep)
    assert one_file.differs_from_model_py(one_file.module_of(text), args, keep) == ""


# bugs planted in the plain GPT file, each where one of the check's quantities shows it first
PLANTED_BUGS = {
    "nn.init.zeros_(module.bias)": ("nn.init.ones_(module.bias)", "initial weights"),
    "return x + fx": ("return x + 0.9 * fx", "logits or loss in training mode"),
    "return k_pos <= q_pos": ("return k_pos < q_pos + 2", "logits through the KV cache at position 19"),
    "max(1, block_size // 2)": ("max(1, block_size // 4)", "sampled tokens with the KV cache"),
    "window = idx[:, window_start:]": ("window = idx[:, window_start + 1:]", "sampled tokens with the KV cache"),
    "return logits.argmax(dim=-1, keepdim=True)": ("return logits.argmin(dim=-1, keepdim=True)",
                                                   "greedy tokens handed to on_token"),
}


@pytest.mark.parametrize("line", PLANTED_BUGS)
def test_the_check_finds_a_bug_planted_in_the_file(line):
    """The command's own check (differs_from_model_py) names the first quantity a planted bug changes."""
    text, args, _, _ = made("gpt")
    bug, found = PLANTED_BUGS[line]
    assert text.count(line) == 1
    assert one_file.differs_from_model_py(one_file.module_of(text.replace(line, bug)), args) == found


def test_the_command_writes_no_file_that_computes_otherwise(tmp_path, monkeypatch):
    """A file the tool got wrong is refused in one line before it is written: the check runs on every file the
    command makes, not only on the presets' files tested here."""
    specialise = one_file.specialise

    def wrong(*args, **kwargs):
        return specialise(*args, **kwargs).replace("return x + fx", "return x + 0.9 * fx")

    monkeypatch.setattr(one_file, "specialise", wrong)
    out = tmp_path / "gpt.py"
    one_error_line(one_file.main, ["gpt", "--n_layer=2", f"--out={out}"], "gpt --n_layer=2 gives other logits",
                   "a bug of this tool", "nothing written")
    assert not out.exists()


def test_a_key_set_on_a_large_preset_is_traced_as_set():
    """A large preset is traced at smaller sizes (tools/fingerprint.py's SMALL), but not the keys set: with
    n_kv_head=None set on mobilellm_125m (SMALL: 2), the file once assumed GQA and crashed at the user's config."""
    text, args, _, _ = made("mobilellm_125m", (("n_kv_head", None),))
    assert args["n_kv_head"] is None
    config, explicit = technique_lines.load("mobilellm_125m", {"n_kv_head": None})
    own = dict(technique_lines.small(config, explicit, small_layers=False), vocab_size=args["vocab_size"])
    assert own["n_layer"] == 30 and own["n_kv_head"] is None
    assert one_file.differs_from_model_py(one_file.module_of(text), own, generate=False) == ""


def test_a_size_set_on_a_large_preset_takes_the_presets_own_sizes():
    """SMALL's sizes go together (its n_kv_head 2 divides its n_head 6 only): with n_head=3 set on mobilellm_125m,
    the two mixed into a config refused as if it were the user's ("n_kv_head (2) must divide n_head (3)")."""
    config, explicit = technique_lines.load("mobilellm_125m", {"n_head": 3})
    args = technique_lines.small(config, explicit)
    assert (args["n_layer"], args["n_head"], args["n_kv_head"], args["n_embd"]) == (30, 3, 3, 24)
    model.GPTConfig(**args)
    # block_size is capped at 32 whatever is set, so setting it keeps the small sizes (4 layers, not 30)
    config, explicit = technique_lines.load("mobilellm_125m", {"block_size": 16})
    args = technique_lines.small(config, explicit)
    assert (args["n_layer"], args["n_head"], args["n_kv_head"], args["block_size"]) == (4, 6, 2, 16)


def test_a_file_wrong_at_the_configs_own_layer_counts_is_refused(tmp_path, monkeypatch):
    """The file is checked at the traced sizes, then (a large preset) again at the config's own layer counts and
    heads, without generation: a difference there (planted: the check is the one the planted bugs above prove)
    is refused in one line that says how to trace at them, and nothing is written."""
    check = one_file.differs_from_model_py
    seen = []

    def differs_at_own_sizes(module, args, keep=False, generate=True):
        seen.append(args["n_layer"])
        return check(module, args, keep, generate) or ("initial weights" if args["n_layer"] == 12 else "")

    monkeypatch.setattr(one_file, "differs_from_model_py", differs_at_own_sizes)
    out = tmp_path / "efficio.py"
    one_error_line(one_file.main, ["efficio", f"--out={out}"], "gives other initial weights than model.py at the "
                   "config's own layer counts", "nothing written", "add --n_layer=12 --n_head=12")
    assert seen == [6, 8, 12, 4, 12] and not out.exists()   # tried deeper (computes_deeper), traced, own


def test_a_per_layer_condition_stays_so_a_large_preset_holds_at_its_own_depth():
    """mobilellm_125m --n_attn_layers=0 (no attention): traced at 4 layers, its per-layer `if layer in
    with_attention` went one way and was folded, and the file was refused at the preset's own 30 layers; a
    condition on a loop's target now stays, and the file computes as model.py at its own sizes."""
    text, args, _, _ = made("mobilellm_125m", (("n_attn_layers", 0),))
    assert "        if layer in with_attention:" in text
    config, explicit = technique_lines.load("mobilellm_125m", {"n_attn_layers": 0})
    own = dict(technique_lines.small(config, explicit, small_layers=False), vocab_size=args["vocab_size"])
    assert own["n_layer"] == 30
    assert one_file.differs_from_model_py(one_file.module_of(text), own, generate=False) == ""


def test_a_file_correct_at_its_depth_only_assumes_its_n_layer():
    """A flag that does nothing at the traced depth has its code folded away (shrink_every=1 of 1 layer: a shrink
    after every layer but the last; cgpt's shrink_every=2 at 2 layers), and its file took a deeper checkpoint of
    that config that it could not compute (a differential fuzz). The file is tried a few layers deeper; where it
    computes otherwise there, it assumes n_layer too: config_from refuses another depth in one line."""
    for target, overrides in (("gpt", (("n_layer", 1), ("n_head", 1), ("tie_embeddings", False), ("shrink_every", 1))),
                              ("cgpt", (("n_layer", 2),))):
        text, args = one_file.make(target, dict(overrides))
        module = one_file.module_of(text)
        assert module.ASSUMED["n_layer"] == args["n_layer"] and module.GPTConfig().n_layer == args["n_layer"]
        deeper = dataclasses.asdict(model.GPTConfig(**dict(args, n_layer=args["n_layer"] + 1)))
        with pytest.raises(ValueError, match=f"n_layer={args['n_layer'] + 1}, but this file assumes"):
            module.config_from(deeper)
    # a file that computes as model.py deeper too takes any depth (gpt: no n_layer in ASSUMED)
    text, args = one_file.make("gpt", {"n_layer": 1})
    assert "n_layer" not in one_file.module_of(text).ASSUMED


def test_rows_cover_the_techniques_table():
    assert len(table_rows()) >= 25 and len(ROWS) >= 20, "README.md's Techniques table not found"


def test_swiglu_file_computes_as_model_py():
    """One row in the default suite (every row: the slow test above; RoPE and GQA: the mobilellm presets)."""
    overrides = (("n_layer", 4), ("mlp_type", "gated"), ("activation", "silu"))
    text, args, _, _ = made("gpt", overrides)
    assert one_file.differs_from_model_py(one_file.module_of(text), args) == ""


# the identifiers of the techniques plain GPT does not run: none may appear in its file's code (ASSUMED names their
# fields in strings). model.py's plain path itself runs `branches[0]`, `n_branches` and `widths()`: they stay.
NOT_PLAIN = {
    "Deep Thinking": "think think_steps think_eta think_memory deep_thinking DeepThinking memory first_kv",
    "pgpt branches": "n_branches branch_weights branch_logits keep_branch heaviest_branch keep_heaviest_branch "
                     "BranchCache",
    "lgpt/cgpt shrink layers": "shrink shrinks shrink_every shrink_layer shrink_kernel add_shrinks LinearShrink "
                               "ConvShrink conv_window conv_tail",
    "layer sharing": "build_shared_layers share_group_size share_from_layer share_sublayers",
    "the enhanced residual's alpha": "enhanced_residual residual_logit_init alpha alpha_logit",
    "RoPE": "rope rope_base rope_tables apply_rope rope_cos rope_sin use_rope",
    "sinusoidal positions": "sinusoidal_positions pos_table",
    "the other init schemes": "init_scheme init_by_scheme redraw depth_adaptive internlm",
    "the factorized embedding": "embd_factor_dim proj",
    "ShishuLM's attention layers": "n_attn_layers n_top_attn_layers attention_layers",
    "the gated MLP": "gate gated mlp_type",
}


def code_names(text):
    return {t.string for t in tokenize.generate_tokens(io.StringIO(text).readline) if t.type == tokenize.NAME}


def test_plain_gpt_file_holds_no_other_technique():
    with open(os.path.join(one_file.OUT_DIR, "gpt.py"), encoding="utf-8") as f:
        names = code_names(f.read())
    found = {what: sorted(set(words.split()) & names) for what, words in NOT_PLAIN.items()}
    assert not any(found.values()), {what: words for what, words in found.items() if words}


# GPTConfig fields the plain GPT file may hold no word of, though no NOT_PLAIN entry names them: a value of theirs
# selects code that has no name of its own to look for (nn.RMSNorm, F.silu, the untied lm_head, the post-norm order)
VALUE_ONLY = {"norm", "norm_placement", "pos_embedding", "activation", "mlp_hidden", "tie_embeddings", "head_bias",
              "n_kv_head"}


def test_every_field_left_out_of_the_plain_file_is_looked_for():
    """Every GPTConfig field the plain GPT file does not hold is in a NOT_PLAIN entry (its code must not appear
    there) or in VALUE_ONLY: a new technique's field forgotten in both fails here, by name."""
    gpt = load_module(os.path.join(one_file.OUT_DIR, "gpt.py"), "one_file_gpt_fields")
    held = {field.name for field in dataclasses.fields(gpt.GPTConfig)}
    fields = {f.name for f in dataclasses.fields(model.GPTConfig)}
    listed = set(" ".join(NOT_PLAIN.values()).split())
    missing = sorted(fields - held - listed - VALUE_ONLY)
    assert not missing, f"fields the plain file neither holds nor looks for (fix: NOT_PLAIN, or VALUE_ONLY): {missing}"


# GPTConfig fields with no words of their own in tools/one_file.py's TECHNIQUE_WORDS: sizes, rates and settings,
# which a reader meets in no technique's prose
NO_TECHNIQUE_WORDS = {"block_size", "vocab_size", "n_layer", "n_head", "n_embd", "dropout", "bias", "norm_eps",
                      "rope_base", "activation", "mlp_hidden", "mlp_ratio", "head_bias", "share_from_layer",
                      "share_sublayers", "residual_logit_init", "think_eta", "think_memory", "n_top_attn_layers",
                      "shrink_kernel", "init_std"}


def test_every_technique_field_has_its_words():
    """A GPTConfig field that turns a technique on has words in TECHNIQUE_WORDS (a file without the technique drops
    or marks the prose that names it): some test_model.py FLAGS entry that sets the field changes which techniques
    are off. A field with none is declared in NO_TECHNIQUE_WORDS; a new field forgotten in both fails here."""
    from test_model import FLAGS
    defaults = {f.name: f.default for f in dataclasses.fields(model.GPTConfig)}

    def off(config):
        return [is_off(config) for _, is_off in one_file.TECHNIQUE_WORDS]

    silent = [name for name in defaults if name not in NO_TECHNIQUE_WORDS and not any(
        off({**defaults, **flags}) != off(defaults) for flags in FLAGS.values() if name in flags)]
    assert not silent, f"fields with no TECHNIQUE_WORDS entry (fix: add one, or NO_TECHNIQUE_WORDS): {silent}"


PLANTED = {"think_steps": 3, "pos_embedding": "rope"}   # Deep Thinking, RoPE


def test_a_change_in_one_technique_changes_only_its_files():
    """For each flag of PLANTED: a comment on the first line of model.py, in the body of an `if`, that exactly the
    presets with that flag run (their traces say); then every preset's file is made again."""
    runs = {}
    for preset in PRESETS:
        tracer = made(preset)[2]
        runs[preset] = {line for code, _, line in tracer.ran if os.path.abspath(code.co_filename) == one_file.MODEL}
    tree = ast.parse(model_text())
    in_if = sorted(s.lineno for node in ast.walk(tree) if isinstance(node, ast.If) for s in node.body
                   if s.lineno == s.end_lineno and not isinstance(s, ast.If))
    lines = model_text().split("\n")
    users = {}
    for flag, value in PLANTED.items():
        users[flag] = {p for p in PRESETS if made(p)[1][flag] == value}
        assert users[flag] and users[flag] != set(PRESETS)
        line = next((n for n in in_if if {p for p in PRESETS if n in runs[p]} == users[flag]), None)
        assert line, f"no line of model.py in an if's body runs only in the presets with {flag}={value!r}"
        lines[line - 1] += f"  # planted: {flag}"
    planted = "\n".join(lines)
    for preset in PRESETS:
        text, ran, tracer, full = made(preset)
        header = one_file.header(preset, [], f"docs/models/{preset}.py")
        new = one_file.specialise(planted, tracer, ran, full, header)
        assert re.sub(r"  # planted: \w+", "", new) == text, preset   # nothing else moved
        for flag in PLANTED:
            assert (f"# planted: {flag}" in new) == (preset in users[flag]), (preset, flag)


def test_config_from_refuses_another_configs_checkpoint():
    gpt = load_module(os.path.join(one_file.OUT_DIR, "gpt.py"), "one_file_gpt")
    lgpt = dataclasses.asdict(model.GPTConfig(**variants.load("lgpt")))
    name = next(k for k, v in gpt.ASSUMED.items() if lgpt[k] != v)
    with pytest.raises(ValueError, match=rf"^{name}={lgpt[name]!r}, but this file assumes {gpt.ASSUMED[name]!r}"):
        gpt.config_from(lgpt)
    assert gpt.config_from(dataclasses.asdict(model.GPTConfig(**variants.load("gpt")))).n_layer == 6


@pytest.mark.parametrize("preset", PRESETS)
def test_a_preset_file_builds_its_own_defaults_and_refuses_a_none_it_has_no_code_for(preset):
    """A field the file holds at a size the tool shrank (baseline's mlp_hidden), read by a condition the file left
    out (`or mlp_ratio * width`), kept model.py's None default: GPTConfig() and a checkpoint's None ended in a
    TypeError (a hunt). Such a field defaults to the config's value, and config_from refuses its None in one line."""
    module = load_module(os.path.join(one_file.OUT_DIR, f"{preset}.py"), f"one_file_defaults_{preset}")
    with torch.device("meta"):
        module.GPT(module.GPTConfig())
    args = dataclasses.asdict(model.GPTConfig(**variants.load(preset)))
    for name in getattr(module, "NOT_NONE", ()):
        assert getattr(module.GPTConfig(), name) == args[name]
        with pytest.raises(ValueError, match=rf"^{name}=None, but this file needs a value"):
            module.config_from(dict(args, **{name: None}))
    module.config_from(args)


def test_against_shows_what_one_technique_adds():
    """--against's diff (of the texts the preset test made): lgpt's shrink layers, and little else."""
    lgpt = made("lgpt")[0]
    diff = one_file.diff(made("gpt")[0], lgpt, "gpt", "lgpt")
    assert diff[:2] == ["--- gpt", "+++ lgpt"]
    added = [line for line in diff if line.startswith("+") and not line.startswith("+++")]
    assert any("shrink" in line for line in added) and len(added) < len(lgpt.splitlines()) / 8, added


def test_against_names_the_flags_of_its_file(monkeypatch, capsys):
    """`gpt --mlp_type=gated --against=gpt` labelled both sides of its diff "gpt": the flagged side is named with its
    flags, as its header names it."""
    monkeypatch.setattr(one_file, "build", lambda target, overrides=None, *args: f"{target} {overrides}\n")
    one_file.main(["gpt", "--mlp_type=gated", "--against=gpt"])
    assert capsys.readouterr().out.splitlines()[:2] == ["--- gpt", "+++ gpt --mlp_type=gated"]


def test_bad_input_is_one_error_line():
    one_error_line(one_file.main, ["no_such_model"], "unknown config or variant")
    one_error_line(one_file.main, ["gpt", "lgpt"], "one config_or_variant at most")
    one_error_line(one_file.main, [], "give one config or variant")
    one_error_line(one_file.main, ["--all", "--out=x.py"], "--all", "out")
    # an --out the file cannot be written to was a traceback after the trace; --out beside --against was ignored
    one_error_line(one_file.main, ["gpt", f"--out={one_file.OUT_DIR}"], "is a folder", "gpt.py")
    one_error_line(one_file.main, ["gpt", f"--out={one_file.MODEL}/gpt.py"], "does not exist or is not writable")
    one_error_line(one_file.main, ["lgpt", "--against=gpt", "--out=x.py"], "give one of them",
                   "--against=gpt > FILE")
    one_error_line(one_file.main, ["lgpt", "--keep_heaviest_branch"], "lgpt has one branch")


def test_out_replaces_only_a_file_it_wrote(tmp_path):
    """--out=model.py replaced model.py (exit 0, every later command a traceback), --out=<a run>/ckpt.pt a
    checkpoint (a hunt): an existing file is replaced only when it is one of this command's files."""
    source = tmp_path / "model.py"
    source.write_text("class GPT: ...\n")
    one_error_line(one_file.main, ["gpt", f"--out={source}"], "is not a file this command wrote", "--out=gpt.py")
    assert source.read_text() == "class GPT: ...\n"
    (tmp_path / "last.pt").write_bytes(b"a run's")
    one_error_line(one_file.main, ["gpt", f"--out={tmp_path / 'ckpt.pt'}"], "a training run's own ckpt.pt")
    assert not (tmp_path / "ckpt.pt").exists()
    own = tmp_path / "gpt.py"
    own.write_text("")   # empty (mktemp's): nothing to lose
    one_file.main(["gpt", f"--out={own}"])
    made = own.read_text()
    own.write_text(made.replace("import math", "import  math"))   # an older file of this command
    one_file.main(["gpt", f"--out={own}"])   # remade
    assert own.read_text() == made


MARK = one_file.MARK   # a docstring whose first lines tell of code left out


def unmarked_prose(text):
    """(line, text) of the file's comments and docstrings a reader takes as telling of this file's code: not the
    marked docstrings (MARK), not model.py's section titles (`# --- `), not the file's own
    header docstring."""
    tree = ast.parse(text)
    lines = text.split("\n")
    out = []
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if not isinstance(node, (ast.FunctionDef, ast.ClassDef)) or not body:
            continue
        first = body[0]
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(
                first.value.value, str) and lines[first.lineno - 2].strip() != MARK:
            out.append((first.lineno, first.value.value))
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT and not token.string.startswith(("# --- ", MARK)):
            out.append((token.start[0], token.string))
    return out


@pytest.mark.parametrize("preset", PRESETS)
def test_prose_names_no_technique_the_file_leaves_out(preset):
    """A technique the preset has off (tools/one_file.py's TECHNIQUE_WORDS) is named only in marked docstrings
    (MARK): every other comment and docstring tells of code the file holds."""
    with open(os.path.join(one_file.OUT_DIR, f"{preset}.py"), encoding="utf-8") as f:
        text = f.read()
    pattern = one_file.words_off(made(preset)[1])
    found = [(line, pattern.search(prose).group(0)) for line, prose in unmarked_prose(text)
             if one_file.names_technique(prose, pattern)]
    assert not found, f"docs/models/{preset}.py names left-out techniques at (line, word): {found}"


@pytest.mark.parametrize("preset", PRESETS)
def test_no_docstring_of_a_preset_file_is_marked(preset):
    """model.py's docstrings open with what every config runs, each technique in a paragraph or item of its own,
    so a preset's file drops what it does not run and marks nothing (MARK: a first paragraph telling of code the
    file leaves out)."""
    with open(os.path.join(one_file.OUT_DIR, f"{preset}.py"), encoding="utf-8") as f:
        marked = [i + 1 for i, line in enumerate(f.read().split("\n")) if line.strip() == MARK]
    assert not marked, (f"docs/models/{preset}.py marks the docstrings after lines {marked} (fix: in model.py, "
                        f"a first paragraph that tells only of what every config runs)")


@pytest.mark.parametrize("preset", PRESETS)
def test_a_file_keeps_the_explanation_of_what_it_runs(preset):
    """The items of make_norm's and MLP's docstrings that tell of the norm and FFN the preset runs stay, and only
    those: 7 preset files lost the gated FFN's and SwiGLU's lines (they named the folded `self.gated` and
    `proj`, and the assumed field `activation`), and the RMSNorm files opened make_norm's docstring with
    LayerNorm."""
    text, ran = made(preset)[:2]
    docs = {node.name: ast.get_docstring(node) for node in ast.parse(text).body
            if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
    rms = ran["norm"] == "rmsnorm"
    assert ("RMSNorm (LLaMA)" in docs["make_norm"]) == rms and ("LayerNorm" in docs["make_norm"]) != rms
    gated = ran["mlp_type"] == "gated"
    swiglu = gated and ran["activation"] == "silu"
    assert ("standard:" in docs["MLP"]) != gated and ("gated (double up-projection):" in docs["MLP"]) == gated
    assert ("SwiGLU:" in docs["MLP"]) == swiglu and ("on the gate only" in docs["MLP"]) == gated


def sections_of_definitions(text):
    """{top-level class, function or assigned name: the number of the section title above it} ("# --- 6. ..."
    is 6)."""
    section = None
    out = {}
    lines = text.split("\n")
    for node in ast.parse(text).body:
        first = node.decorator_list[0].lineno if getattr(node, "decorator_list", None) else node.lineno
        for line in lines[:first]:
            found = re.match(r"# --- (\d+)\. ", line)
            if found:
                section = int(found.group(1))
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            out[node.name] = section
        elif isinstance(node, ast.Assign):
            out.update((target.id, section) for target in node.targets if isinstance(target, ast.Name))
    return out


@pytest.mark.parametrize("preset", PRESETS)
def test_every_definition_sits_under_its_model_py_section(preset):
    """lgpt's LinearShrink once sat under section 5's title: section 6's title was above ConvShrink, which the file
    leaves out."""
    with open(model.__file__, encoding="utf-8") as f:
        sections = sections_of_definitions(f.read())
    with open(os.path.join(one_file.OUT_DIR, f"{preset}.py"), encoding="utf-8") as f:
        in_file = sections_of_definitions(f.read())
    moved = {name: (n, sections[name]) for name, n in in_file.items() if name in sections and n != sections[name]}
    assert not moved, f"docs/models/{preset}.py: (section in the file, in model.py) of {moved}"


def test_a_local_naming_a_class_is_read_as_it_unless_the_function_binds_that_name():
    folded = one_file.prune("def f(n):\n    cls = Shrink\n    for i in range(n):\n        use(cls(i))\n")
    assert folded == "def f(n):\n    for i in range(n):\n        use(Shrink(i))\n"
    for binding in ("from shrinks import Shrink", "Shrink = make()", "def Shrink():\n        pass",
                    "global Shrink"):
        text = f"def f(n):\n    {binding}\n    cls = Shrink\n    for i in range(n):\n        use(cls(i))\n"
        assert one_file.prune(text) == text, binding


def unread_attribute_stores(text):
    """(class, attribute) of the file's `self.x = ...` stores that nothing in the file reads: neither self.x in
    that class nor any y.x."""
    tree = ast.parse(text)
    any_reads = set()
    own_reads = set()
    for cls in tree.body:
        for node in ast.walk(cls):
            if isinstance(node, ast.Attribute) and not isinstance(node.ctx, ast.Store):
                if isinstance(node.value, ast.Name) and node.value.id == "self" and isinstance(cls, ast.ClassDef):
                    own_reads.add((cls.name, node.attr))
                else:
                    any_reads.add(node.attr)
            elif isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("getattr", "hasattr"):
                any_reads.update(a.value for a in node.args[1:2] if isinstance(a, ast.Constant))
    unread = []
    for cls in tree.body:
        if not isinstance(cls, ast.ClassDef):
            continue
        for node in ast.walk(cls):
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target = node.targets[0]
                if (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
                        and target.value.id == "self" and target.attr not in any_reads
                        and (cls.name, target.attr) not in own_reads):
                    unread.append((cls.name, target.attr))
    return unread


@pytest.mark.parametrize("preset", PRESETS)
def test_no_attribute_store_the_file_never_reads(preset):
    """lgpt's TokenEmbedding once kept model.py's `self.proj = None`, read only by the factorized embedding (and
    LinearShrink's own proj is another attribute)."""
    with open(os.path.join(one_file.OUT_DIR, f"{preset}.py"), encoding="utf-8") as f:
        text = f.read()
    assert unread_attribute_stores(text) == []


def test_code_lines_counts_the_reading_load_as_reading_path_does(tmp_path):
    """tools.code_lines' code tokens and comment words (how results/README.md sizes docs/models/*.py): a comment's and a
    docstring's words are prose, everything else but layout is a code token."""
    from tools import code_lines
    path = tmp_path / "f.py"
    path.write_text('"""two words"""\nx = f(1)  # three more words\n', encoding="utf-8")
    assert code_lines.reading_load(str(path)) == (6, 2 + 4)   # x = f ( 1 ); '"""two', 'words"""', '#', ...


def test_code_lines_leaves_out_every_line_of_a_docstring_and_prints_its_columns_in_order(tmp_path, capsys):
    """A two-line module docstring adds no code line; the printed row's code tokens and comment words are
    reading_load()'s, each in its column (a hunt: a changed line did each, and no test failed: the docstring's
    last line counted as code, the two columns swapped)."""
    from tools import code_lines
    path = tmp_path / "a.py"
    path.write_text('"""one\ntwo three"""\nx = 1  # a b c d e f g h\n', encoding="utf-8")
    assert code_lines.count(str(path)) == (3, 1)
    tokens, words = code_lines.reading_load(str(path))
    assert (tokens, words) == (3, 12)
    code_lines.main([str(path)])
    assert capsys.readouterr().out.splitlines()[0].split()[:8] == ["3", "lines", "1", "code", str(tokens), "code",
                                                                   "tokens", str(words)]


def test_code_lines_counts_a_last_line_and_refuses_what_is_not_python_in_one_line(tmp_path, capsys):
    """A file without a final newline had one line fewer than its code lines, and a folder, a syntax error or
    non-UTF-8 bytes were tracebacks (a hunt): the lines as a reader (and reading_path.py) counts them, and one line
    before any row is printed."""
    from tools import code_lines
    (tmp_path / "n.py").write_text("x = 1\ny = 2", encoding="utf-8")
    assert code_lines.count(str(tmp_path / "n.py")) == (2, 2)
    (tmp_path / "bad.py").write_text("def f(:\n", encoding="utf-8")
    (tmp_path / "latin.py").write_bytes(b'x = "\xff"\n')
    one_error_line(code_lines.main, [str(tmp_path / "n.py"), str(tmp_path)], "is a folder", "*.py")
    one_error_line(code_lines.main, [str(tmp_path / "n.py"), str(tmp_path / "bad.py")], "not Python source")
    one_error_line(code_lines.main, [str(tmp_path / "latin.py")], "not Python source in UTF-8")
    # a long line of words: CPython's parser raises MemoryError, which read "out of memory (fix: lower the sizes...)"
    (tmp_path / "words.txt").write_text("word " * 20000, encoding="utf-8")
    one_error_line(code_lines.main, [str(tmp_path / "words.txt")], "not Python source")
    assert capsys.readouterr().out == ""


def test_readme_gives_models_gpt_pys_length():
    """README's "What to read" names docs/models/gpt.py's length; regenerating the file must not leave it stale."""
    with open(os.path.join(one_file.ROOT, "README.md"), encoding="utf-8") as f:
        said = re.search(r"\[docs/models/gpt\.py\]\(docs/models/gpt\.py\), (\d+) lines", f.read())
    with open(os.path.join(one_file.OUT_DIR, "gpt.py"), encoding="utf-8") as f:
        lines = f.read().count("\n")
    assert said and int(said.group(1)) == lines, (said and said.group(1), lines)


def test_a_config_that_starts_from_a_checkpoint_is_traced_as_its_model(tmp_path, capsys):
    """A config file with init_from (a fine-tune) trains the checkpoint's model, in train.py's order: tools.plan
    showed it, but tools.technique_lines and tools.one_file traced GPTConfig's defaults, so a fine-tune of an lgpt run
    printed no line against gpt and its file refused the very checkpoint (a hunt of the user tools)."""
    from conftest import write_char_checkpoint
    from model import GPT, GPTConfig
    lgpt = GPT(GPTConfig(vocab_size=65, block_size=16, n_layer=4, n_head=2, n_embd=32, shrink_every=2,
                         tie_embeddings=False))
    run = write_char_checkpoint(tmp_path, lgpt, [chr(48 + i) for i in range(65)])
    config = tmp_path / "finetune.py"
    config.write_text(f"init_from = {str(run / 'ckpt.pt')!r}\nmax_iters = 20\n")
    technique_lines.main([str(config), "--against=gpt"])
    added = re.search(r"model\.py (\d+) code lines added", capsys.readouterr().out)
    assert added and int(added.group(1)) > 0
    _, ran, full = one_file.run(str(config))
    assert ran["shrink_every"] == full["shrink_every"] == 2 and ran["tie_embeddings"] is full["tie_embeddings"] is False
    path = tmp_path / "finetune_file.py"
    one_file.main([str(config), f"--out={path}"])
    ckpt = torch.load(run / "ckpt.pt", weights_only=True)
    made = load_module(path, "finetune_file")
    made.GPT(made.config_from(ckpt["model_args"])).load_state_dict(ckpt["model"])
