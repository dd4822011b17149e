"""
tools/technique_lines.py, the lines each technique adds, checks README.md's Techniques table against the running
code: for every row, the places its "Where in model.py" column names are where the row's flags change what runs.

How a row is traced: the `key=value` flags of its "Flag(s)" cell set on the gpt preset (built small, as the tool
builds it), against plain gpt. A key without a value, or a value that is a name (`E`, `T`, `n_layer // G`), gets a
small value from SAMPLE or NAMED. A row that shrinks the width or has branches also unties the embeddings, as
GPTConfig requires. A cell listing alternatives (`"pre"` / `"post"`) traces each; an alternative plain gpt already
has (tied embeddings, pre-norm, learned positions) is traced against the other alternatives instead (a lone boolean:
against its negation), since the row names the code of each. Rows that are not flags:
  `--keep_heaviest_branch`: pgpt's flags, with model.keep_heaviest_branch() before generating, against gpt;
  the KV-cache row (`model.generate(..., use_kv_cache=True)`): gpt against gpt without its generation.

What "the row's lines include the place" means, for each name in backticks outside parentheses (parentheses hold
hints; names with a '/' are tools, outside model.py):
  a function, method or class of model.py: the row adds an instruction in it (what --against prints). A flag that
    only changes the values code shared with plain gpt computes with (GQA's head count, a sharing group's size, a
    hidden size, biases, an init scheme's stds) adds none there; then the place must run on the row's path and
    there read one of the row's flags, or run its lines another number of times per call (ShishuLM skips
    attention layers, sharing builds fewer sub-layers), or end a call with other values in its Python numbers,
    strings, booleans or lists of them (GQA's `gqa`, a cache's buffer shape; tensors count by type only);
  a module-level table (`ACTIVATIONS`): a line the row runs reads it;
  `Class.attribute` (`KVCache.memory`): a line the row adds reads `.attribute`.
test_wrong_place_fails shows the check can fail: `sample_next` is named for no row but the KV cache's.
"""
import ast
import collections
import dataclasses
import itertools
import os
import re

import pytest

from conftest import one_error_line
import model
import variants
from model import GPTConfig
from tools import technique_lines
from tools.technique_lines import Source, statements, trace

FIELDS = {f.name for f in dataclasses.fields(GPTConfig)}
SAMPLE = dict(mlp_hidden=96, mlp_ratio=2.0, n_kv_head=2, share_group_size=2, share_from_layer=2,
              share_sublayers="attn", norm_eps=1e-6, rope_base=500.0, residual_logit_init=3.0,
              think_eta=0.05, init_std=0.01, n_layer=4, n_attn_layers=2)
NAMED = {"E": 16, "T": 2, "n": 2, "m": 1, "n_layer": 4, "n_layer // G": 2, "n_attn_layers": 2}
BASE = dict(n_layer=4)   # gpt's 6 layers cut to 4: faster, as telling
GPT = {**{f.name: f.default for f in dataclasses.fields(GPTConfig)}, **variants.load("gpt"), **BASE}
PGPT = dict(n_branches=2, tie_embeddings=False)
MODEL = Source("model.py")


def summary(value, depth=0):
    """A small Python value, or lists of them; of anything else (tensors too) only its type."""
    if isinstance(value, (bool, int, float, str, type(None))):
        return value
    if isinstance(value, dict) and depth < 2:
        value = list(value.values())
    if isinstance(value, (list, tuple)) and depth < 2:
        return tuple(summary(v, depth + 1) for v in value)
    return type(value).__name__


def qualname(code):
    return code.co_qualname.replace(".<locals>", "")


class CallTracer(technique_lines.Tracer):
    """The tool's tracer, keeping also what each call of a function did: calls[qualified name] = {(the lines it
    entered and how often, the values it ended with)}."""

    def __init__(self):
        super().__init__()
        self.calls = collections.defaultdict(set)
        self.entered = {}   # frame -> Counter of its lines

    def event(self, frame, event, arg):
        if event == "line":
            self.entered.setdefault(frame, collections.Counter())[frame.f_lineno] += 1
        elif event == "return":
            lines = tuple(sorted(self.entered.pop(frame, {}).items()))
            values = tuple(summary(v) for _, v in sorted(frame.f_locals.items()))
            self.calls[qualname(frame.f_code)].add((lines, values))
        return super().event(frame, event, arg)


RUNS = {}


def run(settings, **options):
    """The CallTracer of gpt with `settings` (cached: rows share runs)."""
    key = (tuple(sorted(settings.items())), tuple(sorted(options.items())))
    if key not in RUNS:
        RUNS[key] = trace("gpt", {**BASE, **settings}, tracer=CallTracer(), **options)
    return RUNS[key]


def table_rows():
    """README.md's Techniques table: [(technique, flags, paper, where), ...]."""
    with open(os.path.join(technique_lines.ROOT, "README.md"), encoding="utf-8") as f:
        table = f.read().split("\n## Techniques", 1)[1].split("\n## ", 1)[0]
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in table.splitlines()
            if line.startswith("|")]
    return [r for r in rows[2:] if len(r) == 4]


def row_runs(flags):
    """[(run, the run it is compared with)] for a Flag(s) cell."""
    if " (or " in flags:   # `a` (or `b`): each on its own (mlp_ratio beside an mlp_hidden is refused: no effect)
        first, other = flags.split(" (or ", 1)
        return row_runs(first) + row_runs(other)
    alternatives = {}
    options = []
    key = None
    for part in re.findall(r"`([^`]*)`", flags):
        assignment = re.fullmatch(r"(\w+)=(.+)", part)
        if assignment and assignment.group(1) in FIELDS:
            key, text = assignment.groups()
            try:
                alternatives[key] = [ast.literal_eval(text)]
            except (ValueError, SyntaxError):
                alternatives[key] = [NAMED[text]]
                if text in FIELDS:   # share_from_layer=n_attn_layers: that flag too
                    alternatives[text] = [SAMPLE[text]]
        elif part in FIELDS:
            alternatives[part] = [SAMPLE[part]]
        elif key and re.fullmatch(r'"\w+"', part):
            alternatives[key].append(ast.literal_eval(part))
        else:
            options.append(part)
    if any("use_kv_cache=True" in o for o in options):
        return [(run({}), run({}, new_tokens=0))]
    base = {}
    extra = {}
    if "--keep_heaviest_branch" in options:
        base = PGPT
        extra = dict(keep_heaviest_branch=True)
    combos = [dict(base, **dict(zip(alternatives, values))) for values in itertools.product(*alternatives.values())]
    pairs = []
    for settings in combos:
        if settings.get("shrink_every") or settings.get("n_branches", 1) > 1:
            settings.setdefault("tie_embeddings", False)
        if all(GPT[k] == v for k, v in settings.items()):   # plain gpt's own setting: against the others
            others = [c for c in combos if c != settings] or [{k: not v for k, v in settings.items()}]
            pairs += [(run(settings), run(other)) for other in others]
        else:
            pairs.append((run(settings, **extra), run({})))
    return pairs


def functions_of(place):
    return [name for name in MODEL.defs if name == place or name.startswith(place + ".")]


def new_calls(mine, theirs, function):
    """The calls of `function` (and of its comprehensions) in one run that the other never makes."""
    names = [name for name in mine.calls if name == function or name.startswith(function + ".")]
    return set().union(*[mine.calls[name] - theirs.calls[name] for name in names])


def check_place(place, pairs, flags):
    """'' when the row's runs show `place`, else why not."""
    added = set()
    for mine, theirs in pairs:
        added |= set(statements(MODEL, mine.in_file("model.py"), theirs.in_file("model.py")))
    text = "\n".join(MODEL.lines[line - 1] for line in MODEL.lines_of(added))
    functions = functions_of(place)
    if not functions:
        cls, _, attribute = place.partition(".")
        if re.search(rf"self\.{attribute} = ", "\n".join(MODEL.lines[n - 1] for n in MODEL.code
                                                       if MODEL.where[n] == f"{cls}.__init__")):
            return "" if re.search(rf"\.{attribute}\b", text) else f"no added line reads .{attribute}"
        ran = set().union(*[statements(MODEL, mine.in_file("model.py")) for mine, _ in pairs])
        ran_text = "\n".join(MODEL.lines[line - 1] for line in MODEL.lines_of(ran))
        if hasattr(model, place):
            return "" if re.search(rf"\b{place}\b", ran_text) else "no line of the row's run reads it"
        return "names nothing in model.py"
    if any(MODEL.where[unit] in functions for unit in added):
        return ""
    source = "\n".join(MODEL.lines[line - 1] for line in MODEL.code if MODEL.where[line] in functions)
    reads = any(re.search(rf"\.{flag}\b", source) for flag in flags)
    for mine, theirs in pairs:
        for name in functions:
            if reads and mine.calls[name] or new_calls(mine, theirs, name):
                return ""
    return "the row's flags change nothing there"


def row_flags(flags):
    return {part.split("=")[0] for part in re.findall(r"`([^`]*)`", flags)} & FIELDS


def places(where):
    return [p for p in re.findall(r"`([^`]*)`", re.sub(r"\([^)]*\)", "", where)) if "/" not in p]


def test_every_technique_row_names_the_places_its_flags_run():
    rows = table_rows()
    assert len(rows) >= 25, "README.md's Techniques table not found"
    wrong = []
    for technique, flags, _, where in rows:
        pairs = row_runs(flags)
        for place in places(where):
            why = check_place(place, pairs, row_flags(flags))
            if why:
                wrong.append(f"{technique[:40]!r}: `{place}`: {why}")
    assert not wrong, "README.md's Techniques table names places its flags do not run:\n" + "\n".join(wrong)


def test_wrong_place_fails():
    """The check above can fail: sample_next is no row's place but the KV cache's."""
    for technique, flags, _, where in table_rows():
        if "sample_next" not in where:
            assert check_place("sample_next", row_runs(flags), row_flags(flags)), technique


def test_plain_gpt_path_holds_no_technique_code(capsys):
    """The lines a row runs and plain gpt never runs (pgpt's, lgpt's, cgpt's, Deep Thinking's, ShishuLM's, sharing's
    ...) are folded away ("... N lines not run") in the tool's print of gpt, which shows a batch, the learning rate,
    the forward and backward passes and decoding."""
    technique_lines.main(["gpt"])
    printed = capsys.readouterr().out
    shown = set(re.findall(r"^model\.py:(\d+)", printed, re.M))
    gpt = set(statements(MODEL, run({}).in_file("model.py")))
    for technique, flags, _, _ in table_rows():
        only = [unit for mine, theirs in row_runs(flags)
                for unit in statements(MODEL, mine.in_file("model.py"), theirs.in_file("model.py"))
                if unit not in gpt]
        assert not {str(line) for line in MODEL.lines_of(only)} & shown, technique
    for function in ("# get_batch", "# get_lr", "# GPT.forward", "# GPT.generate", "# sample_next"):
        assert function in printed
    assert ".backward()" in printed and "lines not run: " in printed


def test_lgpt_against_gpt_is_a_short_list(capsys):
    total = technique_lines.main(["lgpt", "--against=gpt"])
    out = capsys.readouterr().out
    # 23 lines since issue 53: lgpt's own builder (add_shrinks) and GPTConfig.widths, which plain gpt no longer runs
    assert 5 <= total["model.py"][1] <= 25 and total["train.py"][1] == 0, out
    assert "# LinearShrink.forward" in out and "# lgpt: model.py" in out


@pytest.mark.parametrize("args, words", [
    (["nogpt"], ["unknown config or variant 'nogpt'", "lgpt"]),
    (["config/nothing.py"], ["config/nothing.py", "not found"]),
    (["gpt", "--n_layerz=2"], ["n_layerz"]),
    (["gpt", "--n_kv_head=4"], ["n_kv_head"]),
    (["gpt", "--mlp_hidden=abc"], ["mlp_hidden='abc'", "whole number"]),   # a traceback (a hunt)
    # --variant alone was "give one config or variant"; beside a variant it traced its own (a hunt)
    (["--variant=lgpt"], ["a variant is the first argument", "technique_lines lgpt"]),
    (["lgpt", "--variant=cgpt"], ["lgpt is a variant, and --variant=cgpt another"]),
    ([], ["one config or variant"]),
    # was silent: the lines and the file of gpt, headed as if a flag had changed them
    (["gpt", "--keep_heaviest_branch"], ["--keep_heaviest_branch", "gpt has one branch", "fix: drop it"]),
    # was silent: the trace sets these itself, and printed the lines of gpt headed "gpt --dtype=bfloat16" (a hunt)
    (["gpt", "--dtype=bfloat16", "--against=gpt"], ["dtype='float32'", "so --dtype would change nothing",
                                                    "fix: drop --dtype"]),
    (["gpt", "--max_iters=0", "--device=cuda"], ["--max_iters, --device would change nothing"]),
    # was silent: train.py's other settings run no other line, and headed the file as if they did (a hunt)
    (["gpt", "--learning_rate=0.5", "--wandb_project=zzz"], ["--wandb_project, --learning_rate: train.py's settings",
                                                             "fix: drop --wandb_project, --learning_rate"]),
])
def test_bad_input_is_one_line(args, words):
    one_error_line(technique_lines.main, args, *words)


def test_one_file_refuses_what_the_trace_sets_itself(tmp_path):
    from tools import one_file
    one_error_line(one_file.main, ["gpt", "--eval_only=True"], "--eval_only would change nothing")
    one_error_line(one_file.main, ["gpt", "--seed=3", f"--out={tmp_path / 'x.py'}"], "--seed: train.py's settings")
    assert not (tmp_path / "x.py").exists()


def test_a_model_train_py_refuses_is_refused_before_the_trace(tmp_path):
    """--n_head=5 (768 or 384 wide: no multiple of 5) or a negative width: train.py's one line for that config, from
    both commands, before anything is traced or written (an exploration as a new user found it: the trace ran at its
    small width, 40 for 5 heads, and printed the lines of a model train.py refuses)."""
    from tools import one_file
    for args in (["gpt", "--n_head=5"], ["config/pgpt_shakespeare_cpu.py", "--n_head=5"], ["gpt", "--n_embd=-3"]):
        one_error_line(technique_lines.main, args, "invalid model configuration", "fix: correct the model keys")
    one_error_line(one_file.main, ["gpt", "--n_head=5", f"--out={tmp_path / 'x.py'}"],
                   "must be a positive multiple of n_head (5)")
    assert not (tmp_path / "x.py").exists()


def test_lgpt_halved_more_than_three_times_is_traced():
    """The trace's width, 8 per head, halved 4 times (lgpt --n_layer=10) was 3 with 6 heads: refused, as if the
    config were invalid (a hunt). Every halved width stays a multiple of n_head."""
    config, explicit = technique_lines.load("lgpt", {"n_layer": 10})
    args = technique_lines.small(config, explicit)
    widths = model.GPTConfig(**args, vocab_size=65).widths()
    assert len(set(widths)) == 5 and all(w % args["n_head"] == 0 for w in widths)


def test_the_keys_the_trace_sets_itself_are_refused():
    """--data_dir, --out_dir and --vocab_size were dropped, and named in the header as if they applied (a hunt)."""
    one_error_line(technique_lines.main, ["gpt", "--data_dir=/nonexistent/x", "--out_dir=/proc/x", "--against=gpt"],
                   "data_dir: a temporary folder", "so --data_dir, --out_dir would change nothing")
    one_error_line(technique_lines.main, ["gpt", "--vocab_size=100"], "vocab_size: its dataset's 65")


def test_help_lists_the_keys_taken_and_no_key_refused(capsys):
    """--help listed every key of train.py, and one_file and technique_lines refuse all but --variant and the model's
    (less vocab_size): each key --help lists is taken, each other key of theirs refused in one line."""
    from safety_net.configurator import UserError
    from tools import one_file
    for module in (technique_lines, one_file):
        with pytest.raises(SystemExit):
            module.main(["--help"])
        listed = set(re.findall(r"^  --(\w+)", capsys.readouterr().out, re.MULTILINE))
        assert "n_layer" in listed and "variant" in listed and "vocab_size" not in listed
        for key in set(module.DEFAULTS) - set(module.OPTIONS):
            if key in listed:
                technique_lines.train_keys(module.DEFAULTS, {key})
            else:
                with pytest.raises(UserError):
                    technique_lines.train_keys(module.DEFAULTS, {key})


# --- what `python -m tools.technique_lines PRESET` prints: exactly the lines that ran -------------------------

def printed_lines(text):
    """{file: the line numbers printed} of the tool's output (`model.py:123  ~ code`)."""
    out = collections.defaultdict(set)
    for match in re.finditer(r"^(model\.py|train\.py):(\d+)", text, re.MULTILINE):
        out[match[1]].add(int(match[2]))
    return out


@pytest.mark.parametrize("preset", variants.available())   # about half a second each
def test_prints_exactly_the_lines_that_ran(preset, monkeypatch, capsys):
    """The lines technique_lines prints for `preset` against the Tracer's own record of the lines that ran (its
    (code, offset, line) triples): every code line that ran is printed, and every printed line belongs to a
    statement that ran, or is the `def` header of a function that ran."""
    tracers = []
    real_trace = technique_lines.trace

    def keep_tracer(*args, **kwargs):
        tracer = real_trace(*args, **kwargs)
        tracers.append(tracer)
        return tracer
    monkeypatch.setattr(technique_lines, "trace", keep_tracer)
    technique_lines.main([preset])
    printed = printed_lines(capsys.readouterr().out)
    (tracer,) = tracers
    for name in technique_lines.PATHS:
        source = Source(name)
        ran = {line for _, _, line in tracer.in_file(name) if line in source.unit}
        ran_units = {source.unit[line] for line in ran}
        ran_functions = {source.where[line] for line in ran if line in source.where}
        assert ran, name
        not_printed = sorted(ran & set(source.code) - printed[name])
        assert not not_printed, f"{preset}: {name} lines ran but not printed: {not_printed[:10]}"
        never_ran = []
        for line in sorted(printed[name]):
            function = source.where[line]
            header = source.unit[line] == source.defs[function] and function in ran_functions
            if source.unit[line] not in ran_units and not header:
                never_ran.append(line)
        assert not never_ran, f"{preset}: {name} lines printed that never ran: {never_ran[:10]}"


def test_the_checks_section_is_found_and_left_out():
    """The Tracer leaves GPTConfig's checks out, found by their section's title (a hard-coded section number went
    stale when the sections were renumbered): every check function, and no model code."""
    check_functions = {name for name in MODEL.defs if name == "require" or name.startswith("check_")}
    assert check_functions and check_functions <= MODEL.checks
    assert not {"GPT.forward", "causal_attention", "KVCache.__init__"} & MODEL.checks
