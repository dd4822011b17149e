"""
Your config as one file: model.py specialised to one config or variant, a runnable model that computes exactly
what model.py computes for it, with model.py's comments and docstrings, in model.py's order.

    python -m tools.one_file gpt                                # print GPT in one file
    python -m tools.one_file lgpt --out=docs/models/lgpt.py     # write it
    python -m tools.one_file gpt --mlp_type=gated --activation=silu --out=/tmp/swiglu.py   # any flag: --key=value
    python -m tools.one_file lgpt --against=gpt                 # the diff of the two files: what lgpt adds
    python -m tools.one_file pgpt --keep_heaviest_branch       # generating with the heavier branch only
    python -m tools.one_file --all                              # rewrite docs/models/<variant>.py, every variant

The grammar is every command's (configurator), as tools/technique_lines.py's: the positional argument sets
config_or_variant; --out, --against, --keep_heaviest_branch and --all are the command's own keys (OPTIONS); every
other key is train.py's, set on the config before it is traced. `--help` lists them all.

What stays: what the config runs (traced as tools/technique_lines.py traces it, built small, every flag kept) in
one training step with its evaluation, then generation with and without the KV cache past a full window (sampled,
with and without top_k, and greedy) and tokens fed to the cache a few at a time (generate_more).
Of model.py it keeps the functions, classes and methods that ran (or that kept code names), the statements that
ran, of each `if` and `a if c else b` the arms that ran, of `config.f or b` (`and`) the operands that decided, and
of a module-level table read by a field (`ACTIVATIONS[config.activation]`) the entry. An `if` whose other arm never
ran becomes the arm that ran, where its condition has no side effects (names, attribute reads, comparisons, boolean
operators, len/isinstance, a tensor's size()) and reads no target of a for loop around it (`if layer in
with_attention` may go the other way at another depth); an `if` whose unrun arm only raises (a guard) stays
whole. A field at 1, its default (n_branches), is folded where it multiplies, divides or counts copies (`x * config.n_branches`:
x). Then what nothing kept reads goes, until nothing changes: module-level names and imports, GPTConfig fields,
stores of side-effect-free values (`self.x = None`, a local nothing reads) and a store the same block makes again
before reading it; a local that only names a value is read as it (`mask = None`, `shrink_cls = LinearShrink`, a
name the function never binds, `width = config.n_embd` read in the next statement, `x = ...` then `return x`); a
`self.x = ...` store counts as read only where the file reads self.x in that class, or y.x anywhere. A docstring
keeps the paragraphs and list items that name nothing removed (a field, an attribute, a string, function or class
whose name no English word spells, such as "first_layer", or a word of a technique the config has off:
TECHNIQUE_WORDS, "pgpt" where n_branches is 1); when its first paragraph names one it stays whole, marked. A
comment that names such a technique loses the parenthesis that does, or else goes (a trailing comment from its
line, a comment line with its wrapped neighbours); model.py's section titles lose the parts of their list that
name one (`3. Attention: causal, GQA, ...`: GQA), and a title above a definition the file leaves out goes over the
next one it keeps in that section (lgpt: section 6's, above ConvShrink).

GPTConfig keeps the fields kept code reads; the others, and those a removed condition read (`config.f`, or `f` of
a `self.x = config.f` it read), are ASSUMED at the values it ran with (a field it holds at one value only has
that value as its default). A field it holds but traced at a size the tool shrank stays free, except where a
removed condition read it against model.py's None (baseline's `mlp_hidden or mlp_ratio * width`): NOT_NONE, its
default the config's value. `config_from(model_args)` checks a checkpoint's model_args against them (one
ValueError naming the field) and builds the file's GPTConfig from the others. Both close the file, after the model.

Checked: before printing or writing, the command builds model.py's GPT and the file's from one checkpoint at the
traced sizes and compares them (`differs_from_model_py`); a file that computes anything otherwise is a bug of this
tool, refused in one error line, nothing written. A large preset is traced at fewer layers and heads
(tools/fingerprint.py's SMALL, unless a key of them is set): its file is checked again at the config's own layer
counts and heads (widths at most 8 per head; no generation), and a difference there is refused with the flags
that trace at them. Every file is also tried 1, 2, 4 and 8 layers deeper (where GPTConfig takes the depth),
without generation: where it computes otherwise there (a flag that does nothing at the traced depth, its code
folded away: cgpt's shrink_every=2 at 2 layers), the file assumes n_layer too (ASSUMED), so config_from refuses
a checkpoint of another depth.
"""
import ast
import collections
import dataclasses
import difflib
import functools
import importlib.util
import io
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import tokenize

import torch

from model import GPT, GPTConfig, KVCache
from tools import technique_lines
from tools.benchmarks.entries import starting_args
import train
import variants
from safety_net.build import model_args
from safety_net.configurator import UserError, run_command
from safety_net.fileio import atomic_open, check_out_file

ROOT = technique_lines.ROOT
MODEL = os.path.abspath(os.path.join(ROOT, "model.py"))
OUT_DIR = os.path.join(ROOT, "docs", "models")
# the calls a condition may make and still have no side effects: these functions, and x.size(...) (a shape)
PURE_CALLS = {"len", "isinstance"}
PURE_METHODS = {"size"}
COMMAND = "python -m tools.one_file"
OWN_MARK = "Do not edit: regenerate."   # in every file's docstring: an --out holding it may be replaced
# the command's own keys; train.py's keys follow them, set on the traced config
OPTIONS = dict(
    config_or_variant="",         # the positional argument: a variant (lgpt) or a config file
    out="",                       # write the file there ("": print it)
    against="",                   # a second variant or config file: print the diff of the two files instead
    keep_heaviest_branch=False,   # generate with the heavier branch only (pgpt's model.keep_heaviest_branch())
    all=False,                    # rewrite docs/models/<variant>.py for every variant (no other key with it)
)
DEFAULTS = {**OPTIONS, **train.DEFAULTS}
LISTED = (*OPTIONS, "variant", *technique_lines.MODEL_KEYS)   # what --help lists (technique_lines.LISTED)


class Traced(technique_lines.Tracer):
    """technique_lines' Tracer, also recording each frame's steps from one instruction to the next: which way
    an `if` went."""

    def __init__(self):
        super().__init__()
        self.edges = set()   # (code, offset, next offset)
        self.last = {}

    def call(self, frame, event, arg):   # model.py's frames only: train.py's lines are not this tool's
        if os.path.abspath(frame.f_code.co_filename) != MODEL and not self.checking:
            return None
        return super().call(frame, event, arg)

    def event(self, frame, event, arg):
        if event == "opcode":
            before = self.last.get(frame)
            if before is not None:
                self.edges.add((frame.f_code, before, frame.f_lasti))
            self.last[frame] = frame.f_lasti
        elif event == "return":
            self.last.pop(frame, None)
        return super().event(frame, event, arg)


def print_nothing(token):
    """generate's on_token in the traced run: sample.py prints each token there."""


def run(target, overrides=None, keep_heaviest_branch=False):
    """(Traced, the model's arguments as it ran, the full-size arguments) of one config or variant, with overrides
    ({key: value} of train.py's keys) set on it."""
    config, explicit = technique_lines.load(target, overrides)
    ran = {}

    def generate_more(model):
        """After technique_lines' sampled generation (top_k=5): a greedy one from a full window, which starts
        it again, one sampled without top_k, two tokens at once after cached ones (the cache's causal mask:
        without it, the file would attend wrongly there and say nothing), then sample.py's generation (on_token) and
        one without the cache from a full window: every argument of generate does what it says."""
        prompt = torch.zeros((1, model.config.block_size), dtype=torch.long)
        model.generate(prompt, 3, temperature=0)
        model.generate(prompt[:, :3], 1, top_k=None, generator=torch.Generator().manual_seed(0))
        cache = KVCache(model.config.block_size)
        with torch.no_grad():
            model(prompt[:, :2], cache=cache)
            model(prompt[:, 2:4], cache=cache)
        # sample.py's way (each token handed to on_token as it comes), and without the cache
        model.generate(prompt[:, :3], 2, on_token=print_nothing, generator=torch.Generator().manual_seed(0))
        model.generate(prompt, 2, use_kv_cache=False, generator=torch.Generator().manual_seed(0))   # a full window
        ran.update(dataclasses.asdict(model.config))
    tracer = technique_lines.trace(target, overrides, keep_heaviest_branch, tracer=Traced(), then=generate_more)
    full = model_args(config, explicit, base=starting_args(config, config["init_from"]))   # in train.py's order
    return tracer, ran, full


def span(node):
    return (node.lineno, node.col_offset), (node.end_lineno, node.end_col_offset)


def inside(pos, node):
    """Whether an instruction's position (line, end line, column, end column) lies within node."""
    (l1, c1), (l2, c2) = span(node)
    return (l1, c1) <= (pos[0], pos[2]) and (pos[1], pos[3]) <= (l2, c2)


def pure(node):
    """No side effects: names, constants, attribute reads, subscripts, comparisons, boolean and arithmetic
    operators, tuples, lists and dicts of them, len(), isinstance() and a tensor's size()."""
    if isinstance(node, ast.Call):
        method = isinstance(node.func, ast.Attribute) and node.func.attr in PURE_METHODS and pure(node.func.value)
        return ((method or isinstance(node.func, ast.Name) and node.func.id in PURE_CALLS) and not node.keywords
                and all(pure(a) for a in node.args))
    allowed = (ast.Name, ast.Constant, ast.Attribute, ast.Subscript, ast.Compare, ast.BoolOp, ast.UnaryOp,
               ast.BinOp, ast.Tuple, ast.List, ast.Dict, ast.Load, ast.operator, ast.cmpop, ast.boolop,
               ast.unaryop, ast.expr_context, ast.Slice)
    return isinstance(node, allowed) and all(pure(c) for c in ast.iter_child_nodes(node))


FIELDS = {f.name for f in dataclasses.fields(GPTConfig)}


def is_field(node, own=False):
    """A read of a GPTConfig field: config.f, c.f, self.config.f (in GPTConfig itself, own: self.f)."""
    if not isinstance(node, ast.Attribute) or node.attr not in FIELDS:
        return False
    value = node.value
    return (isinstance(value, ast.Name) and value.id in ("config", "c", "cfg") + ("self",) * own
            or isinstance(value, ast.Attribute) and value.attr == "config")


def field_reads(tree, own=False):
    """The GPTConfig fields tree reads."""
    return {n.attr for n in ast.walk(tree) if is_field(n, own) and not isinstance(n.ctx, ast.Store)}


def is_docstring(stmt, parent):
    return (parent is not None and parent.body and parent.body[0] is stmt and isinstance(stmt, ast.Expr)
            and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str))


def attr_loads(tree):
    """The attribute names read in tree, once per read (also getattr/hasattr's string, and x.a += ...)."""
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and not isinstance(node.ctx, ast.Store):
            names.append(node.attr)
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Attribute):
            names.append(node.target.attr)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in ("getattr", "hasattr") and len(node.args) > 1
              and isinstance(node.args[1], ast.Constant)):
            names.append(node.args[1].value)
    return names


def is_self(node):
    return isinstance(node, ast.Name) and node.id == "self"


def self_attr_loads(tree):
    """The attribute names read in tree as self.x, once per read (as attr_loads counts them)."""
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and not isinstance(node.ctx, ast.Store) and is_self(node.value):
            names.append(node.attr)
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Attribute) and is_self(
                node.target.value):
            names.append(node.target.attr)
    return names


def name_loads(tree):
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Store)}


def defined(tree):
    """The names tree defines: its functions, classes and methods where no English word spells them (with `_`,
    a digit or an inner capital: `deep_thinking`, not `attend`), its class fields and the attributes it stores."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            if not spells_a_word(node.name):
                names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.AnnAssign):
            names.add(node.target.id)
    return names


def spells_a_word(name):
    """Whether an English word could spell name: no `_` inside, no digit, no inner capital (`attend`, "learned",
    not `deep_thinking`, "first_layer")."""
    name = name.strip("_")
    return not ("_" in name or any(c.isdigit() for c in name) or any(c.isupper() for c in name[1:]))


@functools.lru_cache(maxsize=None)
def short_strings(text):
    """The strings in text's code that spell a name ("rope", "gated"); once per text (the fixed point of
    specialise tokenizes the same text again)."""
    tokens = tokenize.generate_tokens(io.StringIO(text).readline)
    return frozenset(t.string[1:-1] for t in tokens
                     if t.type == tokenize.STRING and re.fullmatch(r"[\"'][A-Za-z_][A-Za-z0-9_]*[\"']", t.string))


@functools.lru_cache(maxsize=None)
def identifiers(text):
    return frozenset(t.string for t in tokenize.generate_tokens(io.StringIO(text).readline)
                     if t.type == tokenize.NAME)


class Specialiser:
    """model.py's text, its AST and a trace; `module(drop)` writes the file, leaving out the nodes in drop."""

    def __init__(self, text, tracer):
        self.text = text
        self.lines = text.splitlines()
        self.tree = ast.parse(text)
        model = os.path.abspath(MODEL)
        self.ran = {}   # line -> positions of the instructions that ran starting on it
        self.codes = {}
        self.spans = {}
        self.memo = {}
        for code, offset, _ in tracer.ran:
            if os.path.abspath(code.co_filename) != model:
                continue
            pos = self.position(code, offset)
            if pos is not None:
                self.ran.setdefault(pos[0], []).append(pos)
        self.edges = {}   # code -> [(offset, next offset)]
        for code, a, b in tracer.edges:
            if os.path.abspath(code.co_filename) == model:
                self.edges.setdefault(code, []).append((a, b))
        self.parents = {}
        for node in ast.walk(self.tree):
            for child in ast.iter_child_nodes(node):
                self.parents[child] = node
        self.tests = []   # the conditions of the ifs and arms made into one arm
        self.values = {}   # the traced model's GPTConfig
        self.tables = {}   # module-level dicts of string keys: name -> {key: value node}
        for node in self.tree.body:
            if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                    and isinstance(node.value, ast.Dict) and all(
                        isinstance(k, ast.Constant) and isinstance(k.value, str) for k in node.value.keys)):
                self.tables[node.targets[0].id] = {k.value: v for k, v in zip(node.value.keys, node.value.values)}
        self.assumed_by = set()
        self.pinned = {}   # GPTConfig fields held at one value only: name -> that value
        self.needs_value = {}   # GPTConfig fields held free but never None: name -> the config's value
        self.defaults = {f.name: f.default for f in dataclasses.fields(GPTConfig)}
        self.folded = set()   # the fields of value 1 folded away (x * n_branches: x)
        self.words_off = None   # the words of the techniques the config has off (words_off)

    def class_of(self, node):
        """The class of model.py that node lies in (None at module level)."""
        while node is not None and not isinstance(node, ast.ClassDef):
            node = self.parents.get(node)
        return node

    def position(self, code, offset):
        positions = self.codes.get(code)
        if positions is None:
            positions = self.codes[code] = list(code.co_positions())
        pos = positions[offset // 2]
        return pos if None not in pos else None

    def lines_of_code(self, code):
        """(first, last) line of code's instructions."""
        if code not in self.spans:
            found = [pos[0] for pos in code.co_positions() if pos[0] is not None]
            self.spans[code] = min(found), max(found)
        return self.spans[code]

    def did_run(self, node):
        """Whether an instruction within node ran."""
        if node not in self.memo:
            self.memo[node] = self.ran_within(node)
        return self.memo[node]

    def ran_within(self, node):
        return any(inside(pos, node) for line in range(node.lineno, node.end_lineno + 1)
                   for pos in self.ran.get(line, ()))

    def ways(self, node):
        """(true, false): whether the if statement went into its body, and past it."""
        if ("ways", node) not in self.memo:
            self.memo[("ways", node)] = self.find_ways(node)
        return self.memo[("ways", node)]

    def find_ways(self, node):
        true, false = self.did_run(node.body[0]) or any(self.did_run(s) for s in node.body), False
        false = any(self.did_run(s) for s in node.orelse)
        if node.orelse:
            return true, false
        for code, steps in self.edges.items():
            lines = self.lines_of_code(code)
            if lines[1] < node.lineno or lines[0] > node.end_lineno:
                continue
            where = {}
            for i, pos in enumerate(code.co_positions()):
                if None not in pos and inside(pos, node):
                    where[2 * i] = "body" if any(inside(pos, s) for s in node.body) else "test"
            if not where:
                continue
            after_body = max([o for o, w in where.items() if w == "body"], default=-1)
            for a, b in steps:
                if where.get(a) != "test":
                    continue
                if where.get(b) == "body":
                    true = True
                elif where.get(b) is None or b > after_body:
                    false = True
        return true, false

    # --- text ---
    def col(self, line, col):
        """A character column from the AST's UTF-8 byte column."""
        return len(self.lines[line - 1].encode()[:col].decode())

    def segment(self, start, end):
        (l1, c1), (l2, c2) = start, end
        c1, c2 = self.col(l1, c1), self.col(l2, c2)
        if l1 == l2:
            return self.lines[l1 - 1][c1:c2]
        return "\n".join([self.lines[l1 - 1][c1:]] + self.lines[l1:l2 - 1] + [self.lines[l2 - 1][:c2]])

    def expr(self, node):
        """node's source with its conditional expressions made into the arm that ran."""
        edits = self.ifexp_edits(node)
        if not edits:
            return self.segment(*span(node))
        out, at = [], span(node)[0]
        for (start, end), text in edits:
            out += [self.segment(at, start), text]
            at = end
        out.append(self.segment(at, span(node)[1]))
        return "".join(out)

    def ifexp_edits(self, node, skip=()):
        """[((start, end), text)]: the outermost conditional expressions in node (not in the statements skip)
        that become one arm."""
        edits = []
        for child in ast.iter_child_nodes(node):
            if child in skip or isinstance(child, ast.stmt):
                continue
            kept = self.without_unit(child)
            if kept is not None:   # x * config.n_branches, n_branches 1: x
                where = span(child)
                atom = (ast.Name, ast.Attribute, ast.Call, ast.Subscript, ast.Constant)
                if isinstance(node, (ast.BinOp, ast.UnaryOp)) and isinstance(kept, atom):   # (n // 1): n
                    where = self.with_parentheses(where)
                edits.append((where, self.expr(kept) if isinstance(kept, ast.expr) else kept))
                continue
            if isinstance(child, ast.IfExp):
                body, other = self.did_run(child.body), self.did_run(child.orelse)
                if body != other and pure(child.test):
                    self.tests.append(child.test)
                    edits.append((span(child), self.expr(child.body if body else child.orelse)))
                    continue
            table = self.tables.get(getattr(child.value, "id", None)) if isinstance(child, ast.Subscript) else None
            if table and is_field(child.slice) and self.values.get(child.slice.attr) in table:
                self.tests.append(child.slice)   # ACTIVATIONS[config.activation]: the entry the config reads
                edits.append((span(child), self.expr(table[self.values[child.slice.attr]])))
                continue
            if isinstance(child, ast.BoolOp) and len(child.values) == 2 and self.did_run(child):
                first, second = child.values
                keep = None
                if not self.did_run(second):   # the first decided every time
                    keep = first
                elif is_field(first) and not self.short_circuited(child):   # config.f or default
                    keep = second
                if keep is not None and is_field(first):
                    self.tests.append(first)
                    edits.append((span(child), self.expr(keep)))
                    continue
            edits += self.ifexp_edits(child)
        return sorted(edits)

    def unit(self, node):
        """Whether node reads a field of value 1 in GPTConfig's defaults and in this config (n_branches)."""
        own = self.class_of(node) is not None and self.class_of(node).name == "GPTConfig"
        if not is_field(node, own) or self.defaults.get(node.attr) != 1 or self.values.get(node.attr) != 1:
            return False
        if isinstance(self.defaults[node.attr], bool):
            return False
        self.folded.add(node.attr)
        return True

    def without_unit(self, node):
        """What node reads as when its field of value 1 is folded: x of x * f, f * x, x // f, and the text
        [e] of [e for _ in range(f)]; None if node has none."""
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.FloorDiv)) and self.unit(node.right):
            return node.left
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult) and self.unit(node.left):
            return node.right
        if isinstance(node, ast.ListComp) and len(node.generators) == 1:
            loop = node.generators[0]
            if (isinstance(loop.target, ast.Name) and not loop.ifs and loop.target.id not in name_loads(node.elt)
                    and isinstance(loop.iter, ast.Call) and isinstance(loop.iter.func, ast.Name)
                    and loop.iter.func.id == "range" and len(loop.iter.args) == 1 and self.unit(loop.iter.args[0])):
                return "[" + self.expr(node.elt) + "]"
        return None

    def with_parentheses(self, where):
        """where, widened to the parentheses right around it."""
        (l1, c1), (l2, c2) = where
        before, after = self.lines[l1 - 1].encode()[:c1], self.lines[l2 - 1].encode()[c2:]
        if before.rstrip().endswith(b"(") and after.lstrip().startswith(b")"):
            return (l1, len(before.rstrip()) - 1), (l2, c2 + len(after) - len(after.lstrip()) + 1)
        return where

    def short_circuited(self, node):
        """Whether `a or b` (`a and b`) ever skipped b: a step from a to past node."""
        for code, steps in self.edges.items():
            lines = self.lines_of_code(code)
            if lines[1] < node.lineno or lines[0] > node.end_lineno:
                continue
            positions = list(code.co_positions())
            def where(offset):
                pos = positions[offset // 2]
                if None in pos or not inside(pos, node):
                    return "out"
                return "second" if inside(pos, node.values[1]) else "first"
            if any(where(a) == "first" and where(b) == "out" for a, b in steps):
                return True
        return False

    def lines_of(self, stmt, start_line, end_line, skip=()):
        """The source lines start_line..end_line of stmt, its conditional expressions (outside skip) made into
        one arm."""
        edits = [e for e in self.ifexp_edits(stmt, skip) if start_line <= e[0][0][0] and e[0][1][0] <= end_line]
        text = "\n".join(self.lines[start_line - 1:end_line])
        if edits:
            out, at = [], (start_line, 0)
            for (start, end), new in edits:
                out += [self.segment(at, start), new]
                at = end
            out.append(self.segment(at, (end_line, len(self.lines[end_line - 1].encode()))))
            text = "".join(out)
        return text.split("\n")

    def lead(self, stmt):
        """The first line of the comments and blank lines right above stmt (its decorators)."""
        first = stmt.decorator_list[0].lineno if getattr(stmt, "decorator_list", None) else stmt.lineno
        while first > 1 and (not self.lines[first - 2].strip() or self.lines[first - 2].lstrip().startswith("#")):
            first -= 1
        return first

    def start(self, stmt):
        return stmt.decorator_list[0].lineno if getattr(stmt, "decorator_list", None) else stmt.lineno

    # --- statements ---
    def block(self, stmts, shift, parent, drop):
        out = []
        for stmt in stmts:
            out += self.statement(stmt, shift, parent, drop)
        if not [line for line in out if line.strip() and not line.lstrip().startswith("#")]:
            out.append(" " * (stmts[0].col_offset - shift) + "pass")   # a loop that never went round
        return out

    def statement(self, stmt, shift, parent, drop):
        """The lines of stmt, shift columns to the left."""
        if stmt in drop:
            return []
        if is_docstring(stmt, parent):
            return dedent(self.docstring(stmt, drop), shift)
        if isinstance(stmt, ast.If):
            return self.if_statement(stmt, shift, "if", drop)
        if not self.did_run(stmt):
            return []
        head = dedent(self.lines[self.lead(stmt) - 1:self.start(stmt) - 1], shift)
        blocks = [b for b in ("body", "handlers", "orelse", "finalbody") if getattr(stmt, b, None)]
        if not blocks:
            return head + dedent(self.lines_of(stmt, self.start(stmt), stmt.end_lineno), shift)
        if isinstance(stmt, (ast.FunctionDef, ast.ClassDef)):
            return head + self.definition(stmt, shift, drop)
        # a loop, with or try: its header, then each block after the lines that open it
        out, line = [], self.start(stmt)
        inner = [s for b in blocks for s in getattr(stmt, b)]
        for b in blocks:
            first = getattr(stmt, b)[0]
            opening = self.lines_of(stmt, line, self.lead(first) - 1, skip=inner)
            out += dedent(opening, shift) + self.block(getattr(stmt, b), shift, stmt, drop)
            line = getattr(stmt, b)[-1].end_lineno + 1
        return head + out

    def definition(self, node, shift, drop):
        """A function or class: its header, then its body's statements that ran (its methods: those that ran
        or, in a class none of whose methods ran, all)."""
        header = self.lines_of(node, self.start(node), self.lead(node.body[0]) - 1, skip=node.body)
        body = []
        for stmt in node.body:
            if stmt in drop:
                continue
            if isinstance(stmt, (ast.FunctionDef, ast.ClassDef)):
                if self.did_run(stmt):
                    body += dedent(self.lines[self.lead(stmt) - 1:self.start(stmt) - 1], shift)
                    body += self.definition(stmt, shift, drop)
            elif isinstance(node, ast.ClassDef) and not is_docstring(stmt, node):
                # class-level fields and constants: kept unless dropped (their readers decide)
                body += dedent(self.lines[self.lead(stmt) - 1:stmt.end_lineno - 1] + [self.field(stmt)], shift)
            else:
                body += self.statement(stmt, shift, node, drop)
        if not [line for line in body if line.strip() and not line.strip().startswith("#")]:
            body.append(" " * (node.body[0].col_offset - shift) + "pass")
        return dedent(header, shift) + body

    def field(self, stmt):
        """A class-level line; a GPTConfig field the file holds at one value only (ASSUMED) gets that value as
        its default, and says so, as does one it needs set (NOT_NONE), the config's value: GPTConfig() then
        builds a model this file runs."""
        line = self.lines[stmt.end_lineno - 1]
        name = stmt.target.id if isinstance(stmt, ast.AnnAssign) else None
        if stmt.value is None or stmt.lineno != stmt.end_lineno:
            return line
        if name in self.pinned:
            value = repr(self.pinned[name])
            note = f"this file: {value} only"
        elif name in self.needs_value:
            value = repr(self.needs_value[name])
            note = "this file: not None"
        else:
            return line
        start, end = self.col(stmt.lineno, stmt.value.col_offset), self.col(stmt.lineno, stmt.value.end_col_offset)
        code, _, comment = line[end:].partition("#")
        # "0 = off", "None: mlp_ratio * width": not here
        kept = [part for part in comment.strip().split("; ") if part and "= off" not in part
                and not part.startswith("None")]
        comment = "; ".join(kept) + "; " if kept else ""
        if not code:   # a line without a comment: two spaces before the new one (PEP 8)
            code = "  "
        return f"{line[:start]}{value}{code}# {comment}{note}"

    def if_statement(self, node, shift, keyword, drop):
        """An if (keyword "if") or the elif of one (keyword "elif"): the arms that ran."""
        if not self.did_run(node.test):
            return []
        true, false = self.ways(node)
        indent = " " * (node.col_offset - shift)
        guard = not true and any(isinstance(s, ast.Raise) for s in node.body)
        elif_ = len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If) and self.lines[
            node.orelse[0].lineno - 1][self.col(node.orelse[0].lineno, node.orelse[0].col_offset):].startswith("elif")
        lead = dedent(self.lines[self.lead(node) - 1:node.lineno - 1], shift)
        body_shift = shift + node.body[0].col_offset - node.col_offset
        if guard or (true and false) or not pure(node.test) or self.varies_by_iteration(node.test):
            header = self.lines_of(node, node.lineno, self.lead(node.body[0]) - 1, skip=node.body + node.orelse)
            if keyword == "if" and header[0].lstrip().startswith("elif"):   # an elif that now comes first
                header[0] = header[0].replace("elif", "if", 1)
            out = lead + dedent(header, shift)
            if true:
                out += self.block(node.body, shift, node, drop)
            else:   # a guard, or a condition with side effects: the arm that never ran stays whole
                out += dedent(self.lines[self.lead(node.body[0]) - 1:node.body[-1].end_lineno], shift)
            if not node.orelse:
                return out
            if not false:
                return out + dedent(self.lines[node.body[-1].end_lineno:node.orelse[-1].end_lineno], shift)
            if elif_:
                return out + self.if_statement(node.orelse[0], shift, "elif", drop)
            opening = self.lines[node.body[-1].end_lineno:self.lead(node.orelse[0]) - 1]
            return out + dedent(opening, shift) + self.block(node.orelse, shift, node, drop)
        self.tests.append(node.test)
        if true:   # the body alone
            if keyword == "elif":
                return [indent + "else:"] + self.block(node.body, shift, node, drop)
            return lead + self.block(node.body, body_shift, node, drop)
        if not node.orelse:
            return []
        if elif_:   # the elif's arms, as an if (or still an elif)
            return lead + self.if_statement(node.orelse[0], shift, keyword, drop)
        if keyword == "elif":
            return [indent + "else:"] + self.block(node.orelse, shift, node, drop)
        else_shift = shift + node.orelse[0].col_offset - node.col_offset
        return lead + self.block(node.orelse, else_shift, node, drop)

    def varies_by_iteration(self, test):
        """Whether a condition reads the target of a for loop around it (`if layer in with_attention`): it can go
        one way at the traced depth and the other at another (n_attn_layers=1 of 1 layer), so it stays."""
        names = {n.id for n in ast.walk(test) if isinstance(n, ast.Name)}
        node = self.parents.get(test)
        while node is not None and not isinstance(node, ast.FunctionDef):
            if isinstance(node, ast.For) and names & {n.id for n in ast.walk(node.target) if isinstance(n, ast.Name)}:
                return True
            node = self.parents.get(node)
        return False

    def docstring(self, stmt, drop):
        """The docstring's lines, less its paragraphs and list items after the first that name removed code or a
        technique the config has off (TECHNIQUE_WORDS); a first paragraph that names one stays, marked."""
        lines = self.lines[stmt.lineno - 1:stmt.end_lineno]
        removed = getattr(self, "removed", set())
        base = stmt.col_offset
        closing = lines[-1].rstrip()[-3:]
        body = lines[:-1] if lines[-1].strip() == closing else lines[:-1] + [lines[-1].rstrip()[:-3]]
        units = []   # units: [kind, lines]; kind "prose", "item" or "blank"
        for i, line in enumerate(body):
            indent = base if i == 0 else len(line) - len(line.lstrip())
            if not line.strip():
                units.append(["blank", [line]])
            elif indent > base and units and units[-1][0] == "item" and indent > units[-1][2]:
                units[-1][1].append(line)   # an item's continuation
            elif indent > base:
                units.append(["item", [line], indent])
            elif units and units[-1][0] == "prose":
                units[-1][1].append(line)
            else:
                units.append(["prose", [line]])
        first = units[0]
        marked = self.names_left_out("\n".join(first[1]), removed)   # the first paragraph always stays
        kept = [first] + [u for u in units[1:]
                          if u[0] == "blank" or not self.names_left_out("\n".join(u[1]), removed)]
        out = []
        for unit in kept:
            if unit[0] == "blank" and (not out or not out[-1].strip()):
                continue
            out += unit[1]
        while len(out) > 1 and not out[-1].strip():
            out.pop()
        if lines[-1].strip() == closing:
            out.append(lines[-1])
        else:
            out[-1] += closing
        if marked:
            out.insert(0, " " * base + MARK)
        return out

    def names_left_out(self, text, removed):
        """Whether text names removed code (a name in removed) or a technique this config has off."""
        return names_any(text, removed) or names_technique(text, self.words_off)


MARK = "# model.py's docstring, shortened: its first lines also tell of code left out here"


def names_any(text, removed):
    words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text))
    return bool(words & removed)


# --- the prose words of the techniques ---
# model.py's comments and docstrings name techniques in prose ("pgpt", "Deep Thinking"), not only by the code's
# names. A file whose config has a technique off treats that technique's words as removed code: see
# Specialiser.docstring and without_left_out_comments. Each condition below says when its technique is off;
# config is the traced model's GPTConfig fields, as a dict.

def no_branches(config):
    return config["n_branches"] == 1


def no_thinking(config):
    return config["think_steps"] == 0


def no_gqa(config):
    return config["n_kv_head"] is None or config["n_kv_head"] == config["n_head"]


def no_rope(config):
    return config["pos_embedding"] != "rope"


def no_rmsnorm(config):
    return config["norm"] != "rmsnorm"


def no_post_norm(config):
    return config["norm_placement"] != "post"


def no_sinusoidal(config):
    return config["pos_embedding"] != "sinusoidal"


def not_gated(config):
    return config["mlp_type"] != "gated"


def gated(config):   # GPT-2's "standard" MLP is then off
    return config["mlp_type"] == "gated"


def no_swiglu(config):
    return config["mlp_type"] != "gated" or config["activation"] != "silu"


def no_shrink(config):
    return config["shrink_every"] == 0


def no_linear_shrink(config):
    return config["shrink_every"] == 0 or config["shrink_layer"] != "linear"


def no_conv_shrink(config):
    return config["shrink_every"] == 0 or config["shrink_layer"] != "conv"


def no_sharing(config):
    return config["share_group_size"] == 1


def no_shishulm(config):
    return config["n_attn_layers"] is None


def not_factorized(config):
    return config["embd_factor_dim"] is None


def no_enhanced_residual(config):
    return not config["enhanced_residual"]


def untied(config):
    return not config["tie_embeddings"]


def rmsnorm(config):   # GPT-2's LayerNorm is then off
    return config["norm"] == "rmsnorm"


def gpt2_init(config):
    return config["init_scheme"] == "gpt2"


# (the technique's words, the condition under which it is off). A word matches whole ("lgpt/cgpt" is not "cgpt")
# and in any case ("Shared"); a space in one matches any white space, a line break too ("Deep\n    Thinking").
# model.py's section titles (`# --- 8. The model: ...; pgpt, Deep Thinking, generation ---`) name techniques
# too; they keep their numbers (README.md's reading order names them) and lose the listed parts that name one.
TECHNIQUE_WORDS = [
    (["pgpt", "branch", "branches"], no_branches),
    (["Deep Thinking", "thinking", "think"], no_thinking),
    (["GQA", "grouped-query"], no_gqa),
    (["RoPE", "rotary"], no_rope),
    (["sinusoidal"], no_sinusoidal),
    (["RMSNorm"], no_rmsnorm),
    (["LayerNorm"], rmsnorm),
    (["post-norm"], no_post_norm),
    (["gated", "double up-projection"], not_gated),
    (["standard"], gated),
    (["SwiGLU"], no_swiglu),
    (["lgpt/cgpt", "shrink", "shrinks", "halve", "halved", "halving"], no_shrink),
    (["lgpt", "LinearGPT"], no_linear_shrink),
    (["cgpt", "ConvGPT"], no_conv_shrink),
    (["shared", "sharing", "layer sharing"], no_sharing),
    (["ShishuLM", "MLP-only"], no_shishulm),
    (["factorized", "factorization"], not_factorized),
    (["Enhanced Residual", "enhanced-residual", "alpha", "alphas"], no_enhanced_residual),
    (["tied", "tying"], untied),
    (["003's schemes"], gpt2_init),
]


def words_on(config):
    """The words of the techniques config has on: a docstring's paragraph that names one stays, also where the word
    is the name of folded code (a gated MLP's `self.gated`)."""
    return {word for words, off in TECHNIQUE_WORDS if not off(config) for word in words}


def words_off(config):
    """A pattern that matches the words of the techniques config has off (None if it has all of them on)."""
    words = [word for words, off in TECHNIQUE_WORDS if off(config) for word in words]
    if not words:
        return None
    spelled = [r"\s+".join(re.escape(part) for part in word.split()) for word in words]
    return re.compile(r"(?<![\w/-])(" + "|".join(spelled) + r")(?![\w/-])", re.IGNORECASE)


def names_technique(text, pattern):
    """Whether text names a word of pattern's techniques (pattern None: none is off)."""
    return pattern is not None and pattern.search(text) is not None


SECTION_TITLE = "# --- "   # model.py's section titles (shortened_title) and GPTConfig's groups (kept whole)


def without_left_out_comments(text, pattern):
    """text less the comments that tell of a technique its config has off (pattern: their words). A comment's
    parenthesis that names one goes first (`# width (of each pgpt branch)`: `# width`); a comment that still names
    one goes: a trailing comment from its line, a comment line with the comment lines right around it at its
    column (one comment, wrapped). The code stays as it is."""
    if pattern is None:
        return text
    lines = text.split("\n")
    comments = {}   # line -> column of its comment
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT:
            comments[token.start[0]] = token.start[1]
    whole = {n for n, col in comments.items() if not lines[n - 1][:col].strip()}   # comment lines
    gone = set()
    for n in sorted(comments):
        col = comments[n]
        if n in gone:
            continue
        if lines[n - 1][col:].startswith(SECTION_TITLE):
            if col == 0:   # a section's title, not a GPTConfig group's
                lines[n - 1] = shortened_title(lines[n - 1], pattern)
            continue
        block = [n]   # a comment line: the wrapped comment it belongs to
        while n in whole and block[0] - 1 in whole and comments[block[0] - 1] == col:
            block.insert(0, block[0] - 1)
        while n in whole and block[-1] + 1 in whole and comments[block[-1] + 1] == col:
            block.append(block[-1] + 1)
        if any(lines[m - 1][col:].startswith(SECTION_TITLE) for m in block):
            continue
        shorter = {m: without_parentheses_naming(lines[m - 1][col:], pattern) for m in block}
        if not any(names_technique(c, pattern) for c in shorter.values()):
            for m, comment in shorter.items():
                lines[m - 1] = lines[m - 1][:col] + comment
            continue
        gone.update(block)
        for m in block:
            if m in whole:
                lines[m - 1] = None
            else:
                lines[m - 1] = lines[m - 1][:col].rstrip()
    return "\n".join(line for line in lines if line is not None)


def shortened_title(line, pattern):
    """A model.py section title less the parts of its list that name a word of pattern, padded with dashes to its
    length: `# --- 3. Attention: causal, GQA, and the cache entry ---` without GQA is `# --- 3. Attention: causal,
    and the cache entry ---`; a title whose every listed part goes keeps what comes before its colon."""
    body = line[len(SECTION_TITLE):].rstrip("-").rstrip()
    head, colon, listed = body.partition(": ")
    if not colon:   # `5. The decoder stack; layer sharing ...`: the first part is the head
        head, listed = "", body
    kept = [(sep, part) for sep, part in listed_parts(listed) if not names_technique(part, pattern)]
    if not kept and not head:
        return line
    text = "".join(sep + part for sep, part in kept).removeprefix(", ").removeprefix("; ")
    if head:
        text = head + (": " + text if text else "")
    text = SECTION_TITLE + text + " "
    return text + "-" * max(3, len(line) - len(text))


def listed_parts(text):
    """[(separator, part)]: text cut at its ", " and "; " outside parentheses; the first separator is ""."""
    parts = []
    depth = 0
    start = 0
    sep = ""
    for i, char in enumerate(text):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif depth == 0 and text[i:i + 2] in (", ", "; "):
            parts.append((sep, text[start:i]))
            sep = text[i:i + 2]
            start = i + 2
    parts.append((sep, text[start:]))
    return parts


def without_parentheses_naming(comment, pattern):
    """comment less its parentheses (on its line) that name a word of pattern."""
    for group in re.findall(r" ?\([^()]*\)", comment):
        if names_technique(group, pattern):
            comment = comment.replace(group, "", 1)
    return comment


def dedent(lines, shift):
    out = []
    for line in lines:
        spaces = len(line) - len(line.lstrip(" "))
        out.append(line[min(spaces, shift):])
    return out


def specialise(text, tracer, ran_args, full_args, header, pin=()):
    """The file's text: model.py's text specialised to the trace; pin: held fields ASSUMED at their traced values
    as if a removed condition read them (make's n_layer)."""
    spec = Specialiser(text, tracer)
    spec.values = ran_args
    spec.words_off = words_off(ran_args)
    tree = spec.tree
    fields = {f.name for f in dataclasses.fields(GPTConfig)}
    config_class = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "GPTConfig")
    drop = set()
    spec.removed = set()
    stores = [node for node in ast.walk(tree) if isinstance(node, ast.Assign) and len(node.targets) == 1
              and isinstance(node.targets[0], ast.Attribute)]
    model_names, model_strings = defined(tree), short_strings(text)
    while True:
        spec.tests = []
        chunks = chunk_texts(spec, drop)
        trees = {node: parse(t) for node, t in chunks}
        reads = collections.Counter(a for t in trees.values() for a in attr_loads(t))
        more = set()
        loads = {node: name_loads(t) for node, t in trees.items()}
        users = collections.Counter(name for names in loads.values() for name in names)
        for node, t in chunks:   # module-level names nothing else reads
            def read(name):
                return users[name] > (name in loads[node])
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                if not spec.did_run(node) and not read(node.name) and node is not config_class:
                    more.add(node)
            elif isinstance(node, ast.Assign):
                if not any(read(n.id) for n in node.targets if isinstance(n, ast.Name)):
                    more.add(node)
        # who reads an attribute: self.x read in a class reads that class's x only; any other read, any x
        own_reads = collections.Counter()   # (class name, x)
        other_reads = collections.Counter(reads)   # x
        for node, t in trees.items():
            if isinstance(node, ast.ClassDef):
                for name in self_attr_loads(t):
                    own_reads[(node.name, name)] += 1
                    other_reads[name] -= 1
        for node in stores:   # stores of values without side effects that nothing reads
            if pure(node.value):
                name = node.targets[0].attr   # its own value's reads (self.x = config.x) do not count
                readers = reads[name]
                owner = spec.class_of(node)
                if owner is not None and is_self(node.targets[0].value):
                    readers = other_reads[name] + own_reads[(owner.name, name)]
                if readers <= (attr_loads(node.value).count(name) if spec.did_run(node) else 0):
                    more.add(node)
        read_fields = set().union(*(field_reads(t, node is config_class) for node, t in trees.items()))
        for stmt in config_class.body:
            if isinstance(stmt, ast.AnnAssign) and stmt.target.id not in read_fields:
                more.add(stmt)
        kept_code = "\n".join(t for _, t in chunks)
        names = identifiers(kept_code)
        values = {v for v in ran_args.values() if isinstance(v, str)}
        # a removed string an English word spells ("learned", "pre") is prose's word too: TECHNIQUE_WORDS name
        # the techniques such strings select ("rope": RoPE)
        strings = {string for string in model_strings if not spells_a_word(string)}
        spec.removed = (model_names - names) | (strings - short_strings(kept_code) - names - values)
        spec.removed -= words_on(ran_args)
        if more <= drop:
            break
        drop |= more
    # the fields left out, and those a removed condition read, are assumed
    tested, tested_own = set(spec.folded) | set(pin), set()   # attributes read; (class, x) of self.x read in that class
    for test in spec.tests:
        for n in ast.walk(test):
            if not isinstance(n, ast.Attribute):
                continue
            if isinstance(n.value, ast.Name) and n.value.id == "self" and n.attr not in FIELDS:
                tested_own.add((spec.class_of(n), n.attr))
            else:
                tested.add(n.attr)
    for node in stores:   # self.x = config.f: a condition on x (in x's class, or on any y.x) is one on f
        name = node.targets[0].attr
        if name in tested - FIELDS or (spec.class_of(node), name) in tested_own or node in drop:
            tested |= {n.attr for n in ast.walk(node.value) if isinstance(n, ast.Attribute)}
    held = {s.target.id for s in config_class.body if isinstance(s, ast.AnnAssign) and s not in drop}
    # (a size the tool shrank, such as ShishuLM's n_attn_layers, stays free where the file holds it)
    assumed = {name: ran_args[name] for name in sorted(fields) if name not in held
               or name in tested and full_args[name] == ran_args[name] and name != "vocab_size"}
    differ = [n for n in assumed if n != "vocab_size" and full_args[n] != ran_args[n]]
    if differ:
        raise UserError(f"the traced model's {', '.join(differ)} differ from the config's, and the file would "
                        f"assume them (fix: trace at the config's own sizes: add "
                        f"{' '.join(own_size_flags(ran_args, full_args))})")
    spec.pinned = {name: value for name, value in assumed.items() if name in held}
    # held fields a removed condition read at a size the tool shrank: free, but set, as traced. model.py's None
    # (mlp_hidden's `or mlp_ratio * width`) has no code here: GPTConfig() and a checkpoint's None ended in a
    # TypeError (a hunt)
    spec.needs_value = {name: full_args[name] for name in sorted(tested & held) if name not in assumed
                        and spec.defaults[name] is None and ran_args[name] is not None}
    chunks = chunk_texts(spec, drop)
    imports = imports_needed(spec, chunks, drop)
    out = [header, ""] + imports
    for node, t in chunks:
        out += ["", ""] + t.split("\n") if not t.startswith("\n") else t.split("\n")
    # last: what a reader of the model can skip
    title = "# --- This file only (skip it on a first read): GPTConfig from a checkpoint of model.py "
    out += ["", "", title + "-" * (88 - len(title)), ""] + assumptions(assumed, held, spec.needs_value).split("\n")
    return "\n".join(tidy(without_left_out_comments("\n".join(out), spec.words_off).split("\n"))) + "\n"


def chunk_texts(spec, drop):
    """[(node, text)]: model.py's top-level definitions and constants that stay, each specialised."""
    chunks = []
    title = None   # the section title above a left-out definition, for the next one kept in its section
    for node in spec.tree.body:
        lead = spec.lines[spec.lead(node) - 1:spec.start(node) - 1]
        titles = [line for line in lead if line.startswith(SECTION_TITLE)]
        if titles:
            title = titles[-1]
        if node in drop or isinstance(node, (ast.Import, ast.ImportFrom)) or is_docstring(node, spec.tree):
            continue
        if title is not None and not titles:   # lgpt: section 6's title, above ConvShrink, over LinearShrink
            lead = [title, ""] + [line for line in lead if line.strip()]
        title = None
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            if spec.did_run(node) or isinstance(node, ast.ClassDef) and any(
                    spec.did_run(s) for s in node.body if isinstance(s, ast.FunctionDef)):
                lines = spec.definition(node, 0, drop)
            else:   # named by kept code, never run: whole
                lines = spec.lines[spec.start(node) - 1:node.end_lineno]
        else:
            lines = spec.lines[spec.start(node) - 1:node.end_lineno]
        chunks.append((node, prune("\n".join(lead + lines))))
    return chunks


@functools.lru_cache(maxsize=None)
def parse(text):
    """ast.parse, once per text (the fixed point makes most chunks again unchanged)."""
    return ast.parse(text)


@functools.lru_cache(maxsize=None)
def prune(text):
    """text less its stores that nothing reads: a local assigned a value without side effects that its
    function never reads, and an attribute assigned such a value (or a call without arguments) that the
    same block assigns again before reading it (self.ln_f = nn.Identity(), then self.ln_f = ...). Then its
    locals that only name a value: one assigned a constant, or a name the function never binds, once
    (`mask = None`, `shrink_cls = LinearShrink`) is read as that value, and
    `x = f(...)` right before `return x`, x read nowhere else, becomes `return f(...)`."""
    while True:
        shorter = without_unread_store(text) or with_locals_folded(text)
        if shorter is None:
            return text
        text = shorter


def without_unread_store(text):
    """text less its first unread store (None if none, or if it was alone in its block)."""
    dead = next((s for s in unread_stores(parse(text))), None)
    if dead is None:
        return None
    lines = text.split("\n")
    first = dead.lineno
    while first > 1 and lines[first - 2].lstrip().startswith("#"):   # its comment goes with it
        first -= 1
    shorter = "\n".join(lines[:first - 1] + lines[dead.end_lineno:])
    try:
        parse(shorter)
    except SyntaxError:   # it was alone in its block
        return None
    return shorter


def with_locals_folded(text):
    """text with its first local that only names a value folded into its reads (None if none)."""
    lines = text.split("\n")
    for func in ast.walk(parse(text)):
        if not isinstance(func, ast.FunctionDef):
            continue
        stores = collections.Counter(n.id for n in ast.walk(func) if isinstance(n, ast.Name)
                                     and not isinstance(n.ctx, ast.Load))
        stores.update(a.arg for n in ast.walk(func) if isinstance(n, ast.arguments)
                      for a in n.posonlyargs + n.args + n.kwonlyargs + [n.vararg, n.kwarg] if a)
        stores.update(bound_otherwise(func))
        reads = [n for n in ast.walk(func) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)]
        for block in (getattr(n, f, None) for n in ast.walk(func) for f in ("body", "orelse")):
            if not isinstance(block, list):
                continue
            for i, stmt in enumerate(block):
                if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
                        and isinstance(stmt.targets[0], ast.Name) and stores[stmt.targets[0].id] == 1):
                    continue
                name = stmt.targets[0].id
                uses = [n for n in reads if n.id == name]
                after = block[i + 1] if i + 1 < len(block) else None
                # mask = None: read as None; shrink_cls = LinearShrink (a name the function never stores): as it
                named = isinstance(stmt.value, ast.Name) and stores[stmt.value.id] == 0
                if (isinstance(stmt.value, ast.Constant) or named) and block is func.body:
                    value = ast.get_source_segment(text, stmt.value)
                    for use in sorted(uses, key=lambda n: (n.lineno, n.col_offset), reverse=True):
                        line = lines[use.lineno - 1].encode()
                        lines[use.lineno - 1] = (line[:use.col_offset].decode() + value
                                                 + line[use.end_col_offset:].decode())
                    return without_lines(lines, stmt)
                if len(uses) == 1 and after is not None and once_in(after, uses[0], stmt.value):
                    # width = config.n_embd, or stacks = [...] before self.branches = nn.ModuleList(stacks)
                    value = ast.get_source_segment(text, stmt.value)
                    use = uses[0]
                    if needs_parentheses(func, use, stmt.value):   # n = a // b read in [x] * n
                        value = f"({value})"
                    line = lines[use.lineno - 1].encode()
                    lines[use.lineno - 1] = line[:use.col_offset].decode() + value + line[use.end_col_offset:].decode()
                    return "\n".join(lines[:stmt.lineno - 1] + lines[stmt.end_lineno:])   # its comment stays
                if (isinstance(after, ast.Return) and isinstance(after.value, ast.Name) and after.value.id == name
                        and len(uses) == 1 and after.lineno == stmt.end_lineno + 1):   # x = ...; return x
                    head = lines[stmt.lineno - 1].encode()
                    lines[stmt.lineno - 1] = (head[:stmt.col_offset].decode() + "return "
                                              + head[stmt.value.col_offset:].decode())
                    return "\n".join(lines[:after.lineno - 1] + lines[after.lineno:])
    return None


def bound_otherwise(func):
    """The names func (or a function inside it) binds other than by assignment or as an argument: nested def and
    class names, imports, `except ... as`, global and nonlocal names (a fold must not read one as its outer value)."""
    names = []
    for node in ast.walk(func):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node is not func:
            names.append(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names += [(a.asname or a.name).split(".")[0] for a in node.names]
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.append(node.name)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            names += node.names
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            names.append(node.name)
    return names


OPERATORS = (ast.BinOp, ast.BoolOp, ast.Compare, ast.UnaryOp, ast.IfExp)


def needs_parentheses(tree, use, value):
    """Whether value's text, put where the name `use` is read, needs parentheses to keep its meaning: an operator
    expression read as an operand, or as what an attribute, an index or a call applies to."""
    if not isinstance(value, OPERATORS):
        return False
    for node in ast.walk(tree):
        if isinstance(node, OPERATORS) and use in ast.iter_child_nodes(node):
            return True
        if isinstance(node, (ast.Attribute, ast.Subscript)) and node.value is use:
            return True
        if isinstance(node, ast.Call) and node.func is use:
            return True
    return False


def once_in(after, use, value):
    """Whether a local's one read, `use`, can take its value there: the read is in the next statement, after, and
    the value has no side effects (config.n_embd, q.size(1) != k.size(1)) or is a one-line list the next statement hands whole to a call
    (`self.branches = nn.ModuleList(stacks)`)."""
    if not (after.lineno <= use.lineno <= after.end_lineno) or value.lineno != value.end_lineno:
        return False
    if pure(value):   # evaluated later, but before any call of the next statement ends
        return not any(isinstance(n, ast.Call) and (n.end_lineno, n.end_col_offset) <= (use.lineno, use.col_offset)
                       for n in ast.walk(after))
    call = after.value if isinstance(after, ast.Assign) else None
    return (isinstance(value, ast.List) and isinstance(call, ast.Call) and call.args == [use] and not call.keywords
            and isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name))


def without_lines(lines, stmt):
    """The text of lines less stmt's, and the comment lines right above it."""
    first = stmt.lineno
    while first > 1 and lines[first - 2].lstrip().startswith("#"):
        first -= 1
    return "\n".join(lines[:first - 1] + lines[stmt.end_lineno:])


def unread_stores(tree):
    for func in ast.walk(tree):
        if not isinstance(func, ast.FunctionDef):
            continue
        loads = name_loads(func)
        for node in ast.walk(func):
            if isinstance(node, ast.Assign) and pure(node.value) and all(
                    isinstance(n, ast.Name) and n.id not in loads
                    for t in node.targets for n in (t.elts if isinstance(t, ast.Tuple) else [t])):
                yield node
        for node in ast.walk(func):
            for block in (getattr(node, f, None) for f in ("body", "orelse")):
                if isinstance(block, list):
                    yield from overwritten(block)


def overwritten(block):
    for i, stmt in enumerate(block):
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
                and isinstance(stmt.targets[0], ast.Attribute)):
            continue
        value = stmt.value
        if not (pure(value) or isinstance(value, ast.Call) and not value.args and not value.keywords):
            continue
        target = ast.dump(stmt.targets[0])
        for later in block[i + 1:]:
            if isinstance(later, (ast.Return, ast.Raise)) or stmt.targets[0].attr in attr_loads(later):
                break
            if isinstance(later, ast.Assign) and any(ast.dump(t) == target for t in later.targets):
                yield stmt
                break


def imports_needed(spec, chunks, drop):
    """model.py's imports of the names the kept code reads."""
    used = set().union(*(name_loads(parse(t)) for _, t in chunks))
    out = []
    for node in spec.tree.body:
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        names = [a for a in node.names if (a.asname or a.name).split(".")[0] in used]
        if not names:
            continue
        lead = [line for line in spec.lines[spec.lead(node) - 1:node.lineno - 1]]
        if len(names) == len(node.names):
            out += lead + spec.lines[node.lineno - 1:node.end_lineno]
        else:
            listed = ", ".join(a.name + (f" as {a.asname}" if a.asname else "") for a in names)
            out += lead + [f"from {node.module} import {listed}" if isinstance(node, ast.ImportFrom)
                           else f"import {listed}"]
    while out and not out[0].strip():
        out.pop(0)
    return out


def assumptions(assumed, held, needs_value=()):
    """ASSUMED, the values of the fields left out (and of those held that ran at one value only), NOT_NONE, the
    fields held that must be set (if any), and config_from, which checks them."""
    items = [f"{name!r}: {value!r}," for name, value in assumed.items()]   # one a line: a diff shows each
    checked = [n for n in assumed if n in held]
    note = (f"; those it holds but runs at one value only ({', '.join(checked)}, at that value in GPTConfig) too"
            if checked else "")
    comment = textwrap.wrap(f"model.py's GPTConfig fields this file leaves out{note}: the values it assumes", 96)
    text = ("\n".join("# " + line for line in comment) + "\n"
            "ASSUMED = {\n" + "\n".join("    " + line for line in items) + "\n}\n")
    check = ""
    takes = "GPTConfig takes the others"
    if needs_value:
        takes = "those in NOT_NONE a value; GPTConfig\n    takes the others"
        text += ("\n# model.py's fields this file holds but needs set: it has no code for their None\n"
                 f"NOT_NONE = {tuple(needs_value)!r}\n")
        check = ("    for name in NOT_NONE:\n"
                 "        if model_args.get(name) is None:\n"
                 "            raise ValueError(f\"{name}=None, but this file needs a value \"\n"
                 "                             f\"(fix: that config's file: python -m tools.one_file CONFIG)\")\n")
    return (text + "\n\n"
            "def config_from(model_args):\n"
            '    """GPTConfig from a checkpoint\'s model_args (model.py\'s fields): those in\n'
            f'    ASSUMED must hold its values; {takes}."""\n'
            "    for name, value in ASSUMED.items():\n"
            "        if model_args.get(name, value) != value:\n"
            "            raise ValueError(f\"{name}={model_args[name]!r}, but this file assumes {value!r} \"\n"
            "                             f\"(fix: that config's file: python -m tools.one_file CONFIG)\")\n"
            + check +
            "    return GPTConfig(**{k: v for k, v in model_args.items() if k not in ASSUMED})")


def tidy(lines):
    """At most two blank lines in a row, none at the start of a block or the end of the file."""
    out = []
    for line in lines:
        if not line.strip():
            if len(out) >= 2 and not out[-1].strip() and not out[-2].strip():
                continue
            if out and out[-1].rstrip().endswith(":") and not out[-1].lstrip().startswith("#"):
                continue
        out.append(line.rstrip())
    while out and not out[-1].strip():
        out.pop()
    return out


def commit():
    """model.py's last commit (the last that changed it: not HEAD's), and whether model.py has changes since."""
    def git(*args):
        p = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
        return p.stdout.strip() if p.returncode == 0 else ""
    sha = git("log", "-1", "--format=%h", "--", "model.py")
    if not sha:   # not a git checkout: "unknown", without a claim of its last change
        return "unknown"
    dirty = git("status", "--porcelain", "--", "model.py")
    return sha + (", its last change, plus uncommitted changes" if dirty else ", its last change")


def header(target, flags, out):
    """The file's docstring; flags: the command-line arguments it was made with (`--mlp_type=gated`)."""
    name = " ".join([target, *flags])
    command = " ".join([COMMAND, target, *flags] + ([f"--out={out}"] if out else []))
    return (f'"""\n{name}: model.py specialised to this config, one file. model.py is the source, with every\n'
            f"flag; this file holds only what {name} runs in a training step, an evaluation, generation with\n"
            f"and without the KV cache past a full window, and tokens fed to the cache a few at a time (the\n"
            f"classes, functions, branches and GPTConfig fields), in model.py's order, with its comments and\n"
            f"section numbers (a section this config does not run is left out), and computes exactly what\n"
            f"model.py computes for it. {OWN_MARK}\n\n"
            f"    made by:  {command}\n"
            f"    model.py as of commit {commit()}\n"
            f'"""')


def flags_of(overrides, keep_heaviest_branch):
    """The command-line arguments a file is made with, as its header and a diff name them."""
    return technique_lines.flag_texts(overrides or {}) + ["--keep_heaviest_branch"] * keep_heaviest_branch


def make(target, overrides=None, out=None, keep_heaviest_branch=False):
    """(the text of target's file, the model's arguments it was traced with), the file checked to compute what
    model.py computes before anything is printed or written."""
    tracer, ran_args, full_args = run(target, overrides, keep_heaviest_branch)
    with open(MODEL, encoding="utf-8") as f:
        model_py = f.read()
    flags = flags_of(overrides, keep_heaviest_branch)
    head = header(target, flags, out)
    text = specialise(model_py, tracer, ran_args, full_args, head)
    name = " ".join([target, *flags])
    module = module_of(text)
    # a flag that does nothing at the traced depth (cgpt's shrink_every=2 at 2 layers) has its code folded away:
    # the file computes as model.py at this depth only, so it assumes n_layer too (it took deeper checkpoints of
    # that config it could not compute: a differential fuzz)
    if not computes_deeper(module, ran_args, keep_heaviest_branch):
        text = specialise(model_py, tracer, ran_args, full_args, head, pin=("n_layer",))
        module = module_of(text)
    difference = differs_from_model_py(module, ran_args, keep_heaviest_branch)
    if difference:
        raise UserError(f"the file made for {name} gives other {difference} than model.py: a bug of this tool, "
                        f"nothing written (fix: read model.py's lines for it: python -m tools.technique_lines {name})")
    # a large preset was traced at fewer layers and heads: the file must compute the same at its own
    config, explicit = technique_lines.load(target, overrides)
    own = dict(technique_lines.small(config, explicit, small_layers=False), vocab_size=ran_args["vocab_size"])
    if own != ran_args:
        difference = differs_from_model_py(module, own, keep_heaviest_branch, generate=False)
        if difference:
            raise UserError(f"the file made for {name} at the traced sizes gives other {difference} than model.py "
                            f"at the config's own layer counts, nothing written (fix: trace at the config's own "
                            f"sizes: add {' '.join(own_size_flags(ran_args, full_args))})")
    return text, ran_args


def computes_deeper(module, args, keep=False):
    """Whether the file made at args computes as model.py 1, 2, 4 and 8 layers deeper, at each depth GPTConfig
    accepts (sharing's groups and lgpt's halvings refuse some) where config_from takes such a checkpoint."""
    for extra in (1, 2, 4, 8):
        deeper = dict(args, n_layer=args["n_layer"] + extra)
        if not (config_accepts(deeper) and file_takes(module, deeper)):
            continue
        try:
            if differs_from_model_py(module, deeper, keep, generate=False):
                return False
        except Exception:   # any failure there (a method the traced depth never called) is a difference
            return False
    return True


def config_accepts(args):
    try:
        GPTConfig(**args)
    except ValueError:
        return False
    return True


def file_takes(module, args):
    """Whether the file's config_from takes a checkpoint of args (ASSUMED may pin n_layer)."""
    try:
        module.config_from(dataclasses.asdict(GPTConfig(**args)))
    except ValueError:
        return False
    return True


def own_size_flags(ran_args, full_args):
    """The flags that trace a config at its own sizes (a large preset is traced at tools/fingerprint.py's SMALL
    ones; block_size and the vocabulary stay small)."""
    return technique_lines.flag_texts({k: v for k, v in full_args.items()
                                       if v != ran_args[k] and k not in ("vocab_size", "block_size")})


def module_of(text):
    """The module of a file's text, imported from a temporary copy."""
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "one_file.py")
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        spec = importlib.util.spec_from_file_location("one_file_made", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return module


def differs_from_model_py(module, args, keep=False, generate=True):
    """What differs between model.py's GPT and the file's ('' if nothing), both built from one checkpoint of
    model.py with arguments args: the initial weights from one seed; logits and loss in training and evaluation
    mode; logits through the KV cache (a prefill, one token a step, then the rest at once); with generate,
    sampled tokens past block_size with and without the cache, and greedy tokens handed to on_token."""
    torch.manual_seed(0)
    ref = GPT(GPTConfig(**args))
    config = ref.config
    torch.manual_seed(0)
    fresh = module.GPT(module.config_from(dataclasses.asdict(config))).state_dict()
    if fresh.keys() != ref.state_dict().keys() or not all(
            torch.equal(fresh[k], v) for k, v in ref.state_dict().items()):
        return "initial weights"
    with torch.no_grad():   # weights at std 0.3: attention far from uniform, so that a wrong mask shows
        for p in ref.parameters():
            p.copy_(torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())) * 0.3)
    checkpoint = {"model_args": dataclasses.asdict(config), "model": ref.state_dict()}
    mine = module.GPT(module.config_from(checkpoint["model_args"]))
    mine.load_state_dict(checkpoint["model"])
    idx = torch.randint(0, args["vocab_size"], (2, args["block_size"]), generator=torch.Generator().manual_seed(1))
    for mode in ("training", "evaluation"):
        ref.train(mode == "training")
        mine.train(mode == "training")
        torch.manual_seed(2)
        logits, loss = ref(idx, targets=idx)
        torch.manual_seed(2)
        logits2, loss2 = mine(idx, targets=idx)
        if not (torch.equal(logits, logits2) and torch.equal(loss, loss2)):
            return f"logits or loss in {mode} mode"
    if keep:
        ref.keep_heaviest_branch()
        mine.keep_heaviest_branch()
    # through the KV cache: a prefill of half the window, three tokens one a step, then the rest at once
    n = config.block_size
    half = max(1, n // 2)
    steps = [(0, half)] + [(p, p + 1) for p in range(half, min(half + 3, n))]
    if half + 3 < n:
        steps.append((half + 3, n))
    with torch.inference_mode():
        caches = [KVCache(n), module.KVCache(n)]
        for start, end in steps:
            a, b = (m(idx[:1, start:end], cache=c)[0] for m, c in zip((ref, mine), caches))
            if not torch.equal(a, b):
                return f"logits through the KV cache at position {start}"
    if not generate:
        return ""
    # past the window twice (it starts again), sampled: greedy tokens at these weights soon repeat one token
    prompt = idx[:1, :3]
    tokens = 2 * args["block_size"]
    for use_kv_cache in (True, False):
        a, b = (m.generate(prompt, tokens, use_kv_cache=use_kv_cache, generator=torch.Generator().manual_seed(3))
                for m in (ref, mine))
        if not torch.equal(a, b):
            return f"sampled tokens {'with' if use_kv_cache else 'without'} the KV cache"
    # greedy, sample.py's way: each token handed to on_token
    handed = ([], [])
    for m, got in zip((ref, mine), handed):
        m.generate(prompt, tokens, temperature=0, on_token=got.append)
    if handed[0] != handed[1] or len(handed[1]) != tokens:
        return "greedy tokens handed to on_token"
    return ""


def build(target, overrides=None, out=None, keep_heaviest_branch=False):
    """The text of target's file."""
    return make(target, overrides, out, keep_heaviest_branch)[0]


def diff(other, text, other_name, name):
    """The lines of a unified diff of two files: what `name` adds to `other_name`, in context."""
    return list(difflib.unified_diff(other.splitlines(), text.splitlines(), other_name, name, lineterm=""))


def main(argv=None):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)   # tiny models: one thread is fastest, and other work on the cores slows it tenfold
    try:
        return run_command(command, DEFAULTS, argv, positional="config_or_variant", listed=LISTED,
                           with_explicit=True)
    finally:
        torch.set_num_threads(threads)


def command(config, explicit):
    """Print config_or_variant's file, write it (--out), print its diff against another's (--against), or rewrite
    every docs/models/<variant>.py (--all); returns the file's text (None for --all)."""
    if config["all"]:
        return write_all(explicit)
    target = technique_lines.target_of(config, explicit, COMMAND)
    out = config["out"]
    against = config["against"]
    if out and against:
        raise UserError(f"--against prints the diff of two files, --out writes one: give one of them (fix: "
                        f"`{COMMAND} {target} --against={against} > FILE` writes the diff)")
    if out:
        # lgpt, config/lgpt_....py; an existing file only if this command wrote it
        check_out_file(out, os.path.basename(target).removesuffix(".py") + ".py", marker=OWN_MARK)
    overrides = technique_lines.train_keys(config, explicit)
    text = build(target, overrides, out or None, config["keep_heaviest_branch"])
    if against:
        other = build(against)
        name = " ".join([target, *flags_of(overrides, config["keep_heaviest_branch"])])   # the flags: not against's
        print("\n".join(diff(other, text, against, name)))
    elif out:
        with atomic_open(out) as f:
            f.write(text.encode("utf-8"))
    else:
        print(text, end="")
    return text


def write_all(explicit):
    """Rewrite docs/models/<variant>.py for every variant (--all, alone)."""
    others = sorted(explicit - {"all"})
    if others:
        raise UserError(f"--all rewrites docs/models/<variant>.py for every variant as it is; it takes no other key, "
                        f"got {', '.join(others)} (fix: `{COMMAND} --all` alone)")
    os.makedirs(OUT_DIR, exist_ok=True)
    for name in variants.available():
        path = os.path.join(OUT_DIR, f"{name}.py")
        text = build(name, None, os.path.relpath(path, ROOT))
        with atomic_open(path) as f:
            f.write(text.encode("utf-8"))
        print(f"wrote {os.path.relpath(path, ROOT)}")
    return None


if __name__ == "__main__":
    main(sys.argv[1:])
