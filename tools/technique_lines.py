"""
The lines of model.py and train.py that one model runs, or that a technique adds over another model: a reading
path per config, traced from the running code, so it never drifts from it.

    python -m tools.technique_lines lgpt --against=gpt                   # the lines LinearGPT adds to GPT
    python -m tools.technique_lines config/pgpt_shakespeare_cpu.py       # every line pgpt runs
    python -m tools.technique_lines gpt --mlp_type=gated --against=gpt   # one flag: --key=value, as train.py
    python -m tools.technique_lines pgpt --keep_heaviest_branch --against=pgpt

The grammar is every command's (configurator): the one positional argument, a variant or a config file, sets the
key config_or_variant (it is what is traced, not a config file of this command); --against and
--keep_heaviest_branch are the command's own keys (OPTIONS); every other key is train.py's (`--mlp_type=gated`),
set on the traced config after its file or variant. `--help` lists them all.

A variant or a config file, built small (every flag kept), runs train.train on a tiny random dataset up to the
end of its first step (an evaluation, forward, backward, the optimizer step), then model.generate through the KV
cache, under sys.settrace with opcode events (GPTConfig's checks left out). With --against, a line is printed when
the first runs an instruction of it that the second never runs (`x if c else y` counts; `~`: the second runs
another part of it). A flag that only changes numbers (GQA's head count, a sharing group's size) adds no line.
The lines between are folded: "... 3 lines not run: GPT.think". Only lines in functions are printed: GPTConfig's
fields, module-level names (model.py's ACTIVATIONS) and imports run at import, for every config.
"""
import ast
import contextlib
import io
import json
import os
import shlex
import sys
import tempfile
import tokenize

import numpy as np
import torch

from tools.fingerprint import SMALL
import train
import variants
from safety_net.build import check_optional_types, model_args, model_config
from safety_net.configurator import UserError, load_config, run_command
from tools.benchmarks.entries import starting_args

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PATHS = {name: os.path.join(ROOT, name) for name in ("model.py", "train.py")}
# one step after one evaluation batch, on the CPU in float32, from a tiny dataset written here
RUN = dict(max_iters=1, eval_interval=1, eval_iters=1, log_interval=1, batch_size=2, eval_only=False,
           gradient_accumulation_steps=1, device="cpu", dtype="float32", compile=False,
           init_from="scratch", wandb_log=False, data_segments="", dataset="random")
# what the trace also sets itself: its dataset and out_dir in a temporary folder, the dataset's vocabulary
OWN = dict(data_dir="a temporary folder", out_dir="a temporary folder", vocab_size="its dataset's 65")
NEW_TOKENS = 4
DEFS = (ast.FunctionDef, ast.ClassDef)
NOT_CODE = (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER)
# the command's own keys; train.py's keys follow them, set on the traced config
OPTIONS = dict(
    config_or_variant="",         # the positional argument: a variant (lgpt) or a config file
    against="",                   # a second variant or config file: print only the lines the first adds to it
    keep_heaviest_branch=False,   # generate with the heavier branch only (pgpt's model.keep_heaviest_branch())
)
DEFAULTS = {**OPTIONS, **train.DEFAULTS}
# what --help lists: the model's keys the trace takes; train.py's others are taken only to be refused (train_keys)
MODEL_KEYS = tuple(key for key in train.MODEL_DEFAULTS if key not in OWN)
LISTED = (*OPTIONS, "variant", *MODEL_KEYS)


class Source:
    """A file's code lines in functions, each with unit[line]: the first line of its statement (a compound
    statement: of its header; `else:` and `try:` go with the next), and where[line]: its function's name."""

    def __init__(self, name):
        self.name = name
        with open(PATHS[name], encoding="utf-8") as f:
            text = f.read()
        self.lines = text.splitlines()
        code = set()
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type not in NOT_CODE:
                code.update(range(token.start[0], token.end[0] + 1))
        self.unit = {}
        self.where = {}
        self.defs = {}
        tree = ast.parse(text)
        for node in ast.walk(tree):   # outer statements first: inner ones overwrite them
            body = getattr(node, "body", None)
            if isinstance(node, DEFS + (ast.Module,)) and ast.get_docstring(node) is not None:
                code.difference_update(range(body[0].lineno, body[0].end_lineno + 1))
            if isinstance(node, (ast.stmt, ast.ExceptHandler)):
                last = body[0].lineno - 1 if isinstance(body, list) else node.end_lineno
                self.unit.update(dict.fromkeys(range(node.lineno, last + 1), node.lineno))
        self.name_functions(tree, "")
        # GPTConfig's checks (__post_init__ and their section): they run, but the Tracer leaves them out
        title = "The config's checks"   # by its title: a renumbering moved it from section 10 to 9
        start = next((n + 1 for n, line in enumerate(self.lines) if line.startswith("# --- ") and title in line),
                     len(self.lines))
        self.checks = {name for name, line in self.defs.items() if line > start} | {"GPTConfig.__post_init__"}
        self.code = sorted(code & set(self.where))   # the lines outside functions run at import
        following = None
        for line in reversed(self.code):
            following = self.unit.setdefault(line, following)

    def name_functions(self, node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, DEFS):
                name = prefix + child.name
                if isinstance(child, ast.FunctionDef):
                    self.defs[name] = child.lineno
                    self.where.update(dict.fromkeys(range(child.lineno, child.end_lineno + 1), name))
                self.name_functions(child, name + ".")

    def lines_of(self, units):
        return [line for line in self.code if self.unit[line] in units]


class Tracer:
    """ran = {(code, offset, line)}: the instructions of model.py and train.py that ran. GPTConfig's checks
    (__post_init__ and what it calls) are left out: they compute nothing a reader of a technique needs."""

    def __init__(self):
        self.ran = set()
        self.checking = False

    def call(self, frame, event, arg):   # sys.settrace's function: a new frame
        if frame.f_code.co_filename not in PATHS.values() or self.checking:
            return None
        if frame.f_code.co_name == "__post_init__":
            self.checking = True
            return self.checked
        frame.f_trace_opcodes = True
        return self.event

    def event(self, frame, event, arg):
        if event == "opcode":
            self.ran.add((frame.f_code, frame.f_lasti, frame.f_lineno))
        return self.event

    def checked(self, frame, event, arg):
        self.checking = event != "return"
        return self.checked

    def in_file(self, name):
        return {key for key in self.ran if key[0].co_filename == PATHS[name]}


class Done(Exception):
    """Raised by the callback after the first step; its args: the model."""


def stop_after_one_step(event, info):
    if event == "iter":
        raise Done(info["model"])


def load(target, overrides=None):
    """train.py's (config, explicit keys) for a variant or a config file, then the overrides ({key: value} of
    train.py's keys, as the command line gives them) set on it."""
    if target.endswith(".py") or "/" in target:
        argv = [target]
    elif target in variants.available():
        argv = [f"--variant={target}"]
    else:
        raise UserError(f"unknown config or variant '{target}' (fix: a config file such as "
                        f"config/gpt_shakespeare_cpu.py, or a variant: {', '.join(variants.available())})")
    config, explicit = load_config(train.DEFAULTS, argv)
    overrides = overrides or {}
    config.update(overrides)
    return config, explicit | set(overrides)


def target_of(config, explicit, command):
    """The config file or variant to trace: the positional argument. --variant sets a config file's preset, as
    train.py reads it; alone it was refused as no target, and beside a variant it traced its own preset in the
    first one's name (a hunt)."""
    target = config["config_or_variant"]
    variant = config["variant"]
    if variant and not target:
        raise UserError(f"a variant is the first argument, not --variant (fix: {command} {variant})")
    if variant and target in variants.available() and variant != target:
        raise UserError(f"{target} is a variant, and --variant={variant} another: one model (fix: {command} "
                        f"{variant}, or drop --variant)")
    if not target:
        raise UserError(f"give one config or variant (fix: e.g. `{command} lgpt --against=gpt`)")
    return target


def train_keys(config, explicit):
    """{key: value} of train.py's keys set on the command line, in train.py's order: the traced config's
    overrides. A key the trace sets itself (RUN, OWN) is refused in one line: it would not change what runs
    (--data_dir, --out_dir and --vocab_size were dropped, and named in the header as if they applied; a hunt); so
    is every other key of train.py's own but --variant."""
    fixed = [key for key in (*RUN, *OWN) if key in explicit]
    if fixed:
        given = ", ".join(f"--{key}" for key in fixed)
        values = [f"{key}={RUN[key]!r}" if key in RUN else f"{key}: {OWN[key]}" for key in fixed]
        raise UserError(f"the trace runs one tiny CPU step of its own ({', '.join(values)}), "
                        f"so {given} would change nothing (fix: drop {given})")
    # train.py's other settings (the optimizer, the schedule, logging, seed) run no other line of model.py: they
    # were accepted, dropped, and named in the header as if they applied (a hunt)
    unread = [key for key in train.TRAIN_DEFAULTS if key in explicit and key != "variant"]
    if unread:
        given = ", ".join(f"--{key}" for key in unread)
        raise UserError(f"{given}: train.py's settings, which change no line of model.py that a config runs; "
                        f"the variant and GPTConfig's fields choose them (fix: drop {given})")
    return {key: config[key] for key in train.DEFAULTS if key in explicit}


def flag_texts(overrides):
    """The overrides as command-line arguments (`--mlp_type=gated`), quoted where a shell needs it."""
    texts = []
    for key, value in overrides.items():
        text = value if isinstance(value, str) else repr(value)
        texts.append(shlex.quote(f"--{key}={text}"))
    return texts


def small(config, explicit, small_layers=True):
    """The model's arguments (GPTConfig's defaults, the checkpoint init_from names, the variant, the keys set) at a
    size where a step takes a moment, every flag kept: a large preset at its SMALL sizes, unless a key of them is
    set (they go together: SMALL's n_kv_head divides SMALL's n_head only) or small_layers is False
    (tools/one_file.py's second check); every width at most 8 per head (the first more where lgpt/cgpt halve it more
    than 3 times), block_size at most 32."""
    variant = config["variant"]
    if variant and variant not in variants.available():
        raise UserError(f"unknown variant '{variant}' (fix: one of {', '.join(variants.available())})")
    # a config file's init_from: that run's model (a fine-tune of an lgpt run was traced as plain GPT; a hunt)
    base = starting_args(config, config["init_from"])
    # train.py's one line for the model as given, before it is traced small (--n_head=5 traced at width 40; a hunt)
    model_config(model_args(config, explicit, base=base), device="meta")
    args = model_args(config, set(), base=base)   # GPTConfig's defaults, that checkpoint's, the variant's
    sizes = SMALL.get(variant, {})
    if small_layers and not explicit & (set(sizes) - {"block_size", "vocab_size"}):
        args.update(sizes)   # the large presets' small sizes
    args.update({k: config[k] for k in explicit if k in args})
    check_optional_types(args)   # --mlp_hidden=abc: a traceback below (a hunt)
    # every halved width (lgpt/cgpt) a multiple of n_head too: 8 per head left lgpt --n_layer=10 a width of 3 (a hunt)
    halvings = 0
    if args["shrink_every"]:
        halvings = (args["n_layer"] // args["n_branches"] - 1) // args["shrink_every"]
    per_head = max(8, 2 ** halvings)
    args.update(n_embd=min(args["n_embd"], per_head * args["n_head"]), block_size=min(args["block_size"], 32))
    if args["mlp_hidden"]:
        args["mlp_hidden"] = min(args["mlp_hidden"], 4 * args["n_embd"])
    return {k: v for k, v in args.items() if k != "vocab_size"}   # the data's


def trace(target, overrides=None, keep_heaviest_branch=False, new_tokens=NEW_TOKENS, tracer=None, then=None):
    """The Tracer (a new one, or `tracer`) of one training step and one generation of `target`; then(model), if
    given, runs traced after them (tools/one_file.py's greedy generation)."""
    config, explicit = load(target, overrides)
    args = small(config, explicit)
    tracer = tracer or Tracer()
    with tempfile.TemporaryDirectory() as tmp:
        ids = np.random.default_rng(0).integers(0, 65, 4000).astype(np.uint16)
        ids[:3000].tofile(os.path.join(tmp, "train.bin"))
        ids[3000:].tofile(os.path.join(tmp, "val.bin"))
        with open(os.path.join(tmp, "meta.json"), "w") as f:
            json.dump({"tokenizer": "char", "vocab_size": 65, "chars": [chr(48 + i) for i in range(65)]}, f)
        config.update(RUN, **args, data_dir=tmp, out_dir=os.path.join(tmp, "out"))
        before = sys.gettrace()
        sys.settrace(tracer.call)
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                train.train(config, explicit | set(args), callback=stop_after_one_step)
            raise UserError("train.py took no step (fix: a config that trains)")
        except Done as done:
            model = done.args[0]
            if keep_heaviest_branch and model.config.n_branches == 1:
                raise UserError(f"--keep_heaviest_branch: {target} has one branch, so it changes nothing "
                                f"(fix: drop it; it is for pgpt's branches, n_branches > 1)")
            if keep_heaviest_branch:
                model.keep_heaviest_branch()
            if new_tokens:
                prompt = torch.zeros((1, 3), dtype=torch.long)
                model.generate(prompt, new_tokens, top_k=5, generator=torch.Generator().manual_seed(0))
            if then is not None:
                then(model)
        finally:
            sys.settrace(before)
    return tracer


def statements(source, ran, other=None):
    """{unit: whether `other` runs it too} of the units in which `ran` runs an instruction (with other: one that
    other never runs). A function's header goes with its body, unless other runs that function too."""
    theirs = {(code, offset) for code, offset, _ in other or ()}
    units = {source.unit[line] for code, offset, line in ran
             if line in source.unit and (code, offset) not in theirs}
    entered = {source.where.get(line) for _, _, line in other or ()}
    units |= {source.defs[source.where[u]] for u in units if source.where[u] not in entered}
    also = {source.unit.get(line) for _, _, line in other or ()}
    return {unit: unit in also for unit in units}


def report(source, units, against):
    """The lines of `units`, grouped by function; the code lines between them folded (with against: only within a
    function)."""
    out = []
    shown = source.lines_of(units)
    scope = None
    for before, line in zip([0] + shown, shown + [len(source.lines) + 1]):
        skipped = [n for n in source.code if before < n < line]
        if against:
            skipped = [n for n in skipped if source.where[n] == scope == source.where.get(line)]
        if skipped:
            names = list(dict.fromkeys(source.where[n] for n in skipped))
            more = f" and {len(names) - 3} more" if len(names) > 3 else ""
            verb = "not added" if against else "not run"
            checks = [name for name in names if name in source.checks]
            if not against and checks:
                verb = "not traced (GPTConfig's checks)" if checks == names else "not run, or checks not traced"
            plural = "s" if len(skipped) > 1 else ""
            out.append(f"      ... {len(skipped)} line{plural} {verb}: {', '.join(names[:3])}{more}")
        if line not in source.where:   # the end of the file
            break
        if source.where[line] != scope:
            scope = source.where[line]
            out.append(f"# {scope}")
        mark = "~" if units[source.unit[line]] else " "
        out.append(f"{source.name}:{line:<4} {mark} {source.lines[line - 1]}")
    return out


def main(argv=None):
    return run_command(command, DEFAULTS, argv, positional="config_or_variant", listed=LISTED, with_explicit=True)


def command(config, explicit):
    """Print the lines config_or_variant runs (with --against: adds); returns {file: (lines printed, code lines)}."""
    target = target_of(config, explicit, "python -m tools.technique_lines")
    against = config["against"]
    overrides = train_keys(config, explicit)
    keep = config["keep_heaviest_branch"]
    name = " ".join([target, *flag_texts(overrides)] + ["--keep_heaviest_branch"] * keep)
    if against:
        load(against)   # a bad name fails before the first trace
    ran = trace(target, overrides, keep)
    other = trace(against) if against else None
    if against:
        print(f"# the lines {name} runs and {against} does not (~: {against} runs another part of them)")
    else:
        print(f"# the lines {name} runs: one training step, {NEW_TOKENS} tokens through the KV cache")
    print("# (lines in functions only: GPTConfig's fields and the other lines run at import are not printed)")
    total = {}
    for file in PATHS:
        source = Source(file)
        units = statements(source, ran.in_file(file), other and other.in_file(file))
        lines = report(source, units, bool(against))
        if lines:
            print("\n".join(lines))
        total[file] = (len(lines), len(source.lines_of(units)))
    verb = "added" if against else "run"
    print(f"# {name}: " + "; ".join(f"{file} {code} code lines {verb} ({printed} printed)"
                                    for file, (printed, code) in total.items()))
    return total


if __name__ == "__main__":
    main(sys.argv[1:])
