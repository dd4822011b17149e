"""configurator.py: config files, both override forms, type checks, one-line errors, variant precedence."""
import glob
import importlib
import os
import sys
import types

import pytest

from model import GPTConfig
import train
import variants
from safety_net import build
from safety_net.build import model_args
from safety_net.configurator import UserError, load_config, usage

DEFAULTS = dict(out_dir="out", batch_size=12, learning_rate=6e-4, compile=False, lr_decay_iters=None,
                n_layer=12, dropout=0.0, betas=(0.9, 0.95), variant="")


def test_both_override_forms():
    cfg, explicit = load_config(DEFAULTS, ["--batch_size=4", "--n_layer", "3", "--out_dir", "runs/a"])
    assert cfg["batch_size"] == 4 and cfg["n_layer"] == 3 and cfg["out_dir"] == "runs/a"
    assert explicit == {"batch_size", "n_layer", "out_dir"}
    assert cfg["learning_rate"] == 6e-4 and DEFAULTS["batch_size"] == 12   # defaults untouched


def test_values_and_types():
    cfg, _ = load_config(DEFAULTS, ["--learning_rate=1", "--dropout", "0.1", "--lr_decay_iters=-5",
                                    "--betas=(0.8, 0.9)", "--out_dir='quoted'"])
    assert cfg["learning_rate"] == 1.0 and isinstance(cfg["learning_rate"], float)   # int accepted for float
    assert cfg["dropout"] == 0.1 and cfg["lr_decay_iters"] == -5 and cfg["betas"] == (0.8, 0.9)
    assert cfg["out_dir"] == "quoted"
    cfg, _ = load_config(DEFAULTS, ["--out_dir=123", "--lr_decay_iters=abc"])
    assert cfg["out_dir"] == "123"              # a str default takes any text
    assert cfg["lr_decay_iters"] == "abc"       # a None default takes anything


@pytest.mark.parametrize("text,value", [("True", True), ("false", False), ("true", True), ("1", True),
                                        ("0", False), ("False", False)])
def test_bool_parsing(text, value):
    cfg, _ = load_config(DEFAULTS, [f"--compile={text}"])
    assert cfg["compile"] is value


@pytest.mark.parametrize("argv,words", [
    (["--compile=yes"], ["compile", "bool"]),
    (["--batch_size=2.5"], ["batch_size", "integer"]),
    (["--n_layer=four"], ["n_layer", "integer"]),
    (["--learning_rate=fast"], ["learning_rate", "number"]),
    (["--betas=0.9"], ["betas", "tuple"]),
])
def test_wrong_type_is_one_line_error(argv, words):
    with pytest.raises(UserError) as e:
        load_config(DEFAULTS, argv)
    msg = str(e.value)
    assert "\n" not in msg and all(w in msg for w in words) and "fix" in msg


def test_unknown_key_suggests_close_match():
    with pytest.raises(UserError) as e:
        load_config(DEFAULTS, ["--n_layers=2"])
    assert "n_layers" in str(e.value) and "--n_layer" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(UserError, match="--help"):
        load_config(DEFAULTS, ["--zzzzzz=1"])


def test_missing_value_and_bad_options():
    with pytest.raises(UserError, match="missing value"):
        load_config(DEFAULTS, ["--batch_size"])
    with pytest.raises(UserError, match="missing value"):
        load_config(DEFAULTS, ["--batch_size", "--n_layer=2"])
    with pytest.raises(UserError, match="unknown option"):
        load_config(DEFAULTS, ["-x"])
    # an unknown key without a value: unknown, with its hint ("missing value"'s fix led to a second error; a hunt)
    with pytest.raises(UserError, match="unknown config key 'n_layers'.*did you mean --n_layer"):
        load_config(DEFAULTS, ["--n_layers"])


def test_a_home_path_after_equals_is_one_line(tmp_path, monkeypatch):
    """--out_dir=~/run: the shell left the ~, and prepare.py wrote ./~/run; one line with the fix, before anything
    is written; --out_dir ~/run (the shell's expansion) and a --start of text beginning with ~ are taken (an
    exploration as a new user found it: a folder named ~ in the current one)."""
    import prepare
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit, match=r"^error: --out_dir=~/run: the shell leaves ~ after = .*\(fix: --out_dir ~/run, a "
                                        r"space in place of =, or --out_dir=\$HOME/run\)$"):
        prepare.main(["--input=notes.txt", "--out_dir=~/run"])
    assert os.listdir(tmp_path) == []
    assert load_config(DEFAULTS, ["--out_dir", os.path.expanduser("~/run")])[0]["out_dir"].startswith("/")
    assert load_config(dict(DEFAULTS, start=""), ["--start=~/a prompt"])[0]["start"] == "~/a prompt"


@pytest.mark.parametrize("argv", [["gpt", "--max_iter=5"], ["gpt", "--learning_rat", "0.1"], ["gpt", "--max_iter"]])
def test_did_you_mean_names_only_keys_the_command_takes(argv):
    """A mistyped key of tools.technique_lines is refused with the keys its --help lists, never train.py's that it
    takes only to refuse them. (an exploration as a new user found it: "did you mean --max_iters or --eval_iters or
    --warmup_iters?", each then refused as train.py's settings)"""
    from conftest import one_error_line
    from tools import technique_lines
    message = one_error_line(technique_lines.main, argv, "unknown config key")
    assert not any(f"--{key}" in message for key in train.TRAIN_DEFAULTS), message


def test_config_file_then_overrides(tmp_path):
    f = tmp_path / "exp.py"
    f.write_text("import math\n_helper = 3\nbatch_size = 2 * _helper\nn_layer = int(math.sqrt(16))\n"
                 "learning_rate = 1\nout_dir = 'from_file'\n")
    # the command line wins over the file wherever it appears
    cfg, explicit = load_config(DEFAULTS, ["--n_layer=2", str(f)])
    assert cfg["batch_size"] == 6 and cfg["n_layer"] == 2 and cfg["out_dir"] == "from_file"
    assert cfg["learning_rate"] == 1.0
    assert explicit == {"batch_size", "n_layer", "learning_rate", "out_dir"}   # not _helper, not math


def test_later_config_file_wins_and_sees_earlier_values(tmp_path):
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("batch_size = 5\n")
    b.write_text("n_layer = batch_size + 1\n")
    cfg, _ = load_config(DEFAULTS, [str(a), str(b)])
    assert cfg["n_layer"] == 6


def test_config_file_errors(tmp_path):
    with pytest.raises(UserError, match="not found"):
        load_config(DEFAULTS, [str(tmp_path / "missing.py")])
    with pytest.raises(UserError, match="two dashes"):
        load_config(DEFAULTS, ["batch_size=3"])
    with pytest.raises(UserError, match=r"--max_iters='': expected an integer"):   # it said --max_iters=str
        load_config(train.DEFAULTS, ["--max_iters="])
    # a positional argument and its key: the key won without a word (a hunt)
    defaults = dict(dataset="", force=False)
    with pytest.raises(UserError, match="dataset given twice: shakespeare_char as the argument and "
                                        "--dataset=shakespeare"):
        load_config(defaults, ["shakespeare_char", "--dataset=shakespeare"], positional="dataset")
    cfg, _ = load_config(defaults, ["shakespeare", "--dataset=shakespeare"], positional="dataset")
    assert cfg["dataset"] == "shakespeare"   # the same twice: taken
    # a preset's name, and nanoGPT's config file: "check the path; config files live in config/" (a hunt)
    for name in ("lgpt", "lgpt.py"):
        with pytest.raises(UserError, match=r"fix: the preset variants/lgpt.py is --variant=lgpt\)"):
            load_config(DEFAULTS, [name])
    with pytest.raises(UserError, match=r"nanoGPT's: .* python train.py config/nanogpt.py ../nanoGPT/config/train_gpt2"):
        load_config(train.DEFAULTS, ["config/train_gpt2.py"])
    bad = tmp_path / "bad.py"
    bad.write_text("n_layr = 3\n")
    with pytest.raises(UserError, match="did you mean n_layer.*'_'"):   # as a config file writes it
        load_config(DEFAULTS, [str(bad)])
    bad.write_text("batch_size = 'big'\n")
    with pytest.raises(UserError, match="batch_size"):
        load_config(DEFAULTS, [str(bad)])
    # nanoGPT runs config files among train.py's imports: "correct the file" said nothing of it (a hunt)
    bad.write_text("device = 'cuda' if torch.cuda.is_available() else 'cpu'\n")
    with pytest.raises(UserError, match="fix: import torch at the file's top: nanoGPT's train.py lends its imports"):
        load_config(train.DEFAULTS, [str(bad)])
    bad.write_text("batch_size = (\n")
    with pytest.raises(UserError, match="syntax error"):
        load_config(DEFAULTS, [str(bad)])
    # a fuzz of the commands: a NUL byte said "line None", a folder "not found"
    bad.write_text("batch_size = 3\0\n")
    with pytest.raises(UserError, match=r"^syntax error in config file \S+bad.py: source code"):
        load_config(DEFAULTS, [str(bad)])
    with pytest.raises(UserError, match="is a folder .*config/gpt_shakespeare_cpu.py"):
        load_config(DEFAULTS, [str(tmp_path)])


def test_a_comparison_config_given_to_train_names_tools_compare(capsys):
    """train.py config/compare_shakespeare_cpu.py said "did you mean --variant?", whose fix led on to the file's
    other keys (a hunt): every config/ file with `variants` is tools.compare's, and the fix names it."""
    import train
    from conftest import one_error_line
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for name in ("compare_shakespeare_cpu.py", "ablation_004.py"):
        path = os.path.join(root, "config", name)
        one_error_line(train.main, [path], f"(fix: this file runs several models: python -m tools.compare {path})")


def test_an_assignment_inside_a_block_of_a_config_file_is_never_dropped(tmp_path):
    """`if ...:` / `    learning_rate = 3e-3` in a config file was dropped without a word (only top-level assignments
    are read), where nanoGPT's exec applies it: now one line with a fix that works. A name also assigned at the top
    level is read as before (its final value); helpers ('_x', a for loop's target) and functions' names are not
    keys."""
    f = tmp_path / "exp.py"
    f.write_text("import os\nif os.cpu_count() >= 1:\n    learning_rate = 3e-3\n")
    with pytest.raises(UserError, match=r"exp.py line 3 assigns learning_rate inside a block, where it is not read"):
        load_config(DEFAULTS, [str(f)])
    f.write_text("import os\nlearning_rate = 3e-3 if os.cpu_count() >= 1 else learning_rate\n")   # the fix
    assert load_config(DEFAULTS, [str(f)])[0]["learning_rate"] == 3e-3
    f.write_text("n_layer = 2\nfor _i in range(3):\n    n_layer += 1\n    _seen = _i\n"
                 "try:\n    pass\nexcept OSError:\n    pass\nelse:\n    batch_size = 7\n")
    with pytest.raises(UserError, match="line 10 assigns batch_size inside a block"):
        load_config(DEFAULTS, [str(f)])
    f.write_text("n_layer = 2\nfor _i in range(3):\n    n_layer += 1\n\ndef _f():\n    batch_size = 1\n"
                 "    return batch_size\n")
    cfg, explicit = load_config(DEFAULTS, [str(f)])
    assert cfg["n_layer"] == 5 and explicit == {"n_layer"}
    # a misspelt key in a block is an unknown key, as at the top level; a with block's fix uses a helper
    f.write_text("if True:\n    n_layers = 4\n")
    with pytest.raises(UserError, match="unknown config key 'n_layers' .* line 2 .*did you mean n_layer"):
        load_config(DEFAULTS, [str(f)])
    f.write_text(f"with open({str(f)!r}) as _f:\n    out_dir = _f.name\n")
    with pytest.raises(UserError, match=r"e.g. _out_dir = ... inside the block, then out_dir = _out_dir\)"):
        load_config(DEFAULTS, [str(f)])
    f.write_text(f"with open({str(f)!r}) as _f:\n    _out_dir = _f.name\nout_dir = _out_dir\n")   # the fix
    assert load_config(DEFAULTS, [str(f)])[0]["out_dir"] == str(f)
    # a helper (not a key) set inside a block and read at the top level is the file's own, as before
    f.write_text("import os\ntry:\n    cores = os.cpu_count()\nexcept Exception:\n    cores = 1\n"
                 "batch_size = 4 * cores\n")
    assert load_config(DEFAULTS, [str(f)])[0]["batch_size"] == 4 * os.cpu_count()


def test_a_key_set_other_than_by_an_assignment_is_never_dropped(tmp_path, monkeypatch):
    """exec(open(BASE).read()), `from base import *` and a loop's target set keys that were dropped without a word
    (only top-level assignments are read; nanoGPT's exec applies them; a hunt). One line, with a fix that works."""
    base = tmp_path / "base_cfg.py"
    base.write_text("n_layer = 7\nlearning_rate = 0.5\n")
    f = tmp_path / "mine.py"
    monkeypatch.syspath_prepend(str(tmp_path))
    for text in (f"exec(open({str(base)!r}).read())\n", "from base_cfg import *\n", "for n_layer in [7]:\n    pass\n"):
        f.write_text(text + "batch_size = 3\n")
        with pytest.raises(UserError, match=f"mine.py sets (learning_rate, )?n_layer other than by a "
                                            f"top-level assignment.*command line: OTHER.py {f}"):
            load_config(DEFAULTS, [str(f)])
    f.write_text("batch_size = 3\n")   # the fix
    cfg, explicit = load_config(DEFAULTS, [str(base), str(f)])
    assert (cfg["n_layer"], cfg["learning_rate"], cfg["batch_size"]) == (7, 0.5, 3)
    # values are compared, not objects: the exec left in, after the other file, sets nothing new (a review)
    f.write_text(f"exec(open({str(base)!r}).read())\nbatch_size = 3\n")
    assert load_config(DEFAULTS, [str(base), str(f)])[0]["learning_rate"] == 0.5
    f.write_text("from math import *\nbatch_size = 3\n")   # names that are no keys: the file's own
    assert load_config(DEFAULTS, [str(f)])[1] == {"batch_size"}
    # an earlier file's NaN or numpy array, untouched by this one: not set here (`!=` said so, or raised; a review)
    base.write_text("import numpy\nlearning_rate = float('nan')\nlr_decay_iters = numpy.array([1, 2])\n")
    cfg, explicit = load_config(DEFAULTS, [str(base), str(f)])
    assert explicit == {"learning_rate", "lr_decay_iters", "batch_size"} and cfg["batch_size"] == 3


def test_numpy_scalars_in_a_config_file_are_read_as_numbers(tmp_path):
    """A config file may compute with numpy (nanoGPT's users do): np.int64 and np.float32 were refused as "a
    int64, expected an integer" (only np.float64, a float, passed)."""
    f = tmp_path / "np.py"
    f.write_text("import numpy as np\nn_layer = np.int64(3)\nlearning_rate = np.float32(0.5)\ncompile = np.bool_(0)\n")
    cfg, _ = load_config(DEFAULTS, [str(f)])
    assert (cfg["n_layer"], cfg["learning_rate"], cfg["compile"]) == (3, 0.5, False)
    assert type(cfg["n_layer"]) is int and type(cfg["learning_rate"]) is float and type(cfg["compile"]) is bool


def test_help_lists_keys(capsys):
    with pytest.raises(SystemExit) as e:
        load_config(DEFAULTS, ["--help"])
    assert e.value.code == 0 and "--batch_size" in capsys.readouterr().out


def test_help_usage_shows_how_many_positional_values():
    """`[dataset]` where one value is taken (prepare.py refuses two), `[paths ...]` where a list is."""
    assert "[dataset] [--key" in usage(dict(dataset="shakespeare_char"), positional="dataset")
    assert "[paths ...] [--key" in usage(dict(paths=[]), positional="paths")
    assert "[config/file.py ...] [--key" in usage(DEFAULTS)


@pytest.fixture
def fake_variants(monkeypatch):
    fake = types.ModuleType("variants")
    presets = {"wide": dict(n_embd=64, n_layer=3, n_head=4), "broken": dict(not_a_field=1)}
    fake.available = lambda: sorted(presets)
    fake.load = lambda name: dict(presets[name])
    monkeypatch.setitem(sys.modules, "variants", fake)
    return fake


def test_variant_precedence(fake_variants, tmp_path):
    from train import DEFAULTS as TRAIN_DEFAULTS
    f = tmp_path / "exp.py"
    f.write_text("variant = 'wide'\nn_layer = 5\n")
    cfg, explicit = load_config(TRAIN_DEFAULTS, [str(f), "--block_size=32"])
    args = model_args(cfg, explicit)
    defaults = build.gpt_config_defaults()
    assert args["n_embd"] == 64 and args["n_head"] == 4     # variant beats GPTConfig defaults
    assert args["n_layer"] == 5 and args["block_size"] == 32  # explicit keys beat the variant
    assert args["bias"] == defaults["bias"]                  # untouched keys keep GPTConfig defaults
    # a base (e.g. another checkpoint's model_args) sits below the variant
    args = model_args(cfg, explicit, base=dict(defaults, n_embd=16, mlp_ratio=2.0))
    assert args["n_embd"] == 64 and args["mlp_ratio"] == 2.0


def test_unknown_variant_lists_available(fake_variants):
    with pytest.raises(UserError) as e:
        model_args({"variant": "wdie"}, set())
    assert "wdie" in str(e.value) and "broken, wide" in str(e.value)
    with pytest.raises(UserError, match="not_a_field"):
        model_args({"variant": "broken"}, set())


def test_real_variants_load():
    """Every file of variants/ is a preset: load_variant gives its CONFIG, which GPTConfig accepts."""
    names = variants.available()
    assert len(names) == len(glob.glob(os.path.join(os.path.dirname(variants.__file__), "[!_]*.py")))
    for name in names:
        cfg = build.load_variant(name)
        assert cfg == importlib.import_module(f"variants.{name}").CONFIG
        GPTConfig(**cfg)


def test_train_main_reports_config_errors_in_one_line():
    import train
    with pytest.raises(SystemExit) as e:
        train.main(["--n_layr=2"])
    assert str(e.value).startswith("error: unknown config key 'n_layr'") and "\n" not in str(e.value)


# --- the command grammar, one for every command (a hunt) ---------------------------------------------------------

def test_every_bool_key_may_be_given_bare(tmp_path):
    """Each command listed its own bare-able keys: `--compile` was bare in tools.bench and refused by train.py,
    `--dry_run` bare in tools.gpu_check and refused by tools.compare. Every key whose default is a bool now."""
    f = tmp_path / "cfg.py"
    f.write_text("batch_size = 3\n")
    cfg, explicit = load_config(DEFAULTS, ["--compile", str(f)])
    assert cfg["compile"] is True and cfg["batch_size"] == 3 and explicit == {"compile", "batch_size"}
    assert load_config(DEFAULTS, ["--compile", "False"])[0]["compile"] is False
    assert load_config(DEFAULTS, ["--batch_size=2", "--compile"])[0]["compile"] is True
    # a word for yes or no after a bare flag is its value, refused: it was read as a config file (a hunt)
    with pytest.raises(UserError, match="--compile=yes: expected a bool"):
        load_config(DEFAULTS, ["--compile", "yes"])


def test_every_list_key_is_a_list_in_every_command():
    """tools.bench's --variants, --measure, --seq_lens, tools.executorch.bench's --shapes, --out_dirs, --num_threads and
    tools.eval's --splits were comma text that each command split itself, where tools.compare's --variants is a
    list: one grammar now, a comma list, a python list or one item alike (one number too: --seq_lens=256)."""
    from tools import bench, compare, eval as evaluate
    from tools.executorch import bench as device_bench
    for defaults, key in ((bench.defaults(), "variants"), (bench.defaults(), "measure"),
                          (compare.defaults(), "variants"), (device_bench.DEFAULTS, "shapes"),
                          (device_bench.DEFAULTS, "out_dirs"), (evaluate.DEFAULTS, "splits")):
        assert isinstance(defaults[key], list), key
        for text in ("a,b", "['a', 'b']", " a , b "):
            assert load_config(defaults, [f"--{key}={text}"])[0][key] == ["a", "b"]
        assert load_config(defaults, [f"--{key}=a"])[0][key] == ["a"]
    for defaults, key in ((bench.defaults(), "seq_lens"), (device_bench.DEFAULTS, "num_threads")):
        assert isinstance(defaults[key], list), key
        for text in ("1,2", "[1, 2]"):
            assert load_config(defaults, [f"--{key}={text}"])[0][key] == [1, 2]
        assert load_config(defaults, [f"--{key}=2"])[0][key] == [2]
    cfg, entries = bench.parse(["--variants=gpt,lgpt", "--seq_lens=64", "--measure=train", "--dry_run"])
    assert cfg["seq_lens"] == [64] and cfg["measure"] == ["train"] and len(entries) == 2
    with pytest.raises(UserError, match="--seq_lens needs lengths >= 1"):
        bench.parse(["--seq_lens=64,x"])
    with pytest.raises(UserError, match=r"is --variants=lgpt\)"):   # train.py's --variant, which bench lacks
        bench.parse(["lgpt", "--dry_run"])


def test_help_is_an_argument_of_its_own(capsys):
    """`--start -h` printed the usage and exit code 0 instead of taking -h as the value (the grammar allows a value
    that starts with '-')."""
    defaults = dict(DEFAULTS, start="\n")
    assert load_config(defaults, ["--out_dir", "-h"])[0]["out_dir"] == "-h"
    for argv in (["-h"], ["--compile", "-h"], ["--out_dir=x", "--help"], ["--out_dir", "--help"]):
        with pytest.raises(SystemExit) as e:
            load_config(defaults, argv)
        assert e.value.code == 0 and "--batch_size" in capsys.readouterr().out


def test_config_file_errors_are_one_line_and_read_as_python_does(tmp_path):
    """A byte-order mark (Windows Notepad) was a syntax error; an exception or a value over several lines made
    the error several lines; a file nested too deeply was reported as out of memory, with a fix about batch
    sizes."""
    bom = tmp_path / "bom.py"
    bom.write_bytes(b"\xef\xbb\xbfbatch_size = 5\n")
    assert load_config(DEFAULTS, [str(bom)])[0]["batch_size"] == 5
    cases = {"raises.py": ('raise ValueError("first\\nsecond")\n', "ValueError: first second"),
             "array.py": ("import numpy as np\nn_layer = np.zeros((2, 2))\n", "is a ndarray"),
             "deep.py": ("n_layer = " + "-" * 100000 + "1\n", "nested too deeply")}
    for name, (text, words) in cases.items():
        (tmp_path / name).write_text(text)
        with pytest.raises(UserError, match=words) as e:
            load_config(DEFAULTS, [str(tmp_path / name)])
        assert "\n" not in str(e.value) and "(fix: " in str(e.value)
    for argv in (["--n_layer=2\n3"], ["a\nb.py"], ["--n_lay\ner=2"]):
        with pytest.raises(UserError) as e:
            load_config(DEFAULTS, argv)
        assert "\n" not in str(e.value)


# --- values the command line gives, each kind at its edges (untested until a hunt changed configurator.py) -----

@pytest.mark.parametrize("arg, words", [
    ("--max_iters=True", "--max_iters=True: expected an integer"),   # a bool is no count
    ("--dropout=True", "--dropout=True: expected a number"),
    ("--compile=2", "--compile=2: expected a bool"),             # 0 and 1 are bools, 2 is not
])
def test_a_value_of_another_kind_is_refused(arg, words):
    from safety_net.configurator import UserError, load_config
    with pytest.raises(UserError, match=words):   # (read only: train.main would train on a value let through)
        load_config(train.DEFAULTS, [arg])


def test_list_values_from_the_command_line():
    from safety_net.configurator import UserError, _parse_override, _positional_value
    assert _parse_override("variants", "gpt,,lgpt,", ["gpt"]) == ["gpt", "lgpt"]   # empty items dropped
    with pytest.raises(UserError, match="expected a list"):
        _parse_override("seq_lens", "True", [256])
    with pytest.raises(UserError, match="one out_dir at most, got a b"):
        _positional_value("out_dir", ["a", "b"], "")
