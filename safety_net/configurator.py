"""
Config files + command-line overrides, shared by every script (train.py, sample.py, prepare.py, tools/), and
the one exception type for bad input, UserError (one_line: an exception's text for its message). Imports
nothing of the project but variants/, on demand (a missing config file's fix names a preset).

    python train.py config/gpt_shakespeare_cpu.py --n_layer=6 --dropout 0.1

Positional arguments are config files: plain python, executed in order; their top-level assignments
(names not starting with '_') set config keys (a key assigned only inside a block, if, for, while, with, try
or match, is refused in one line: it would not be read). Then every `--key=value` / `--key value` override is
applied, so the command line always wins over config files. Values are parsed with ast.literal_eval
(falling back to the raw text) and must match the type of the key's default. load_config also returns
the keys set explicitly: model keys set explicitly win over a variant's preset (train.py's setup).

A key whose default is a list takes a python list, a comma list (`--variants=gpt,lgpt`) or one number
(`--seq_lens=256`) on the command line, a python list in a config file; the keys of
`one_item` take plain text as a list of that one item (a prompt may hold commas). A command whose positional
arguments are values rather than config files names the key they set (`positional`): the dataset name of
prepare.py and tools.pangu.compact_vocab, the config files tools.bench measures one by one.

Bad input never produces a traceback in scripts: every check raises UserError (a ValueError) with a
one-line message naming the problem and the fix; run_command, every command's main(), turns it into
`error: ...` and exit code 1, and Ctrl-C into exit code 130. Output piped into a reader that stops early
(`python train.py ... | head`) ends the command quietly with exit code 141, as SIGPIPE ends a Unix tool.
"""

import ast
import difflib
import os
import re
import select
import sys

import numpy as np


class UserError(ValueError):
    """Bad input from the user (config, data, checkpoint, paths). The message is one line that names the
    problem and ends with `(fix: ...)`; entry points print it as `error: <message>` and exit non-zero."""


def one_line(err):
    """A short single-line description of an exception (or a text), for one-line error messages: an exception
    without a message by its type, an empty or blank text as '' (--max_iters= was "--max_iters=str"; a hunt)."""
    text = " ".join(str(err).split()) or (type(err).__name__ if isinstance(err, BaseException) else "''")
    return text if len(text) <= 200 else text[:197] + "..."


def load_config(defaults, argv, positional=None, one_item=(), listed=None):
    """defaults: dict of every known key -> default value. argv: e.g. sys.argv[1:]. A key whose default is a
    bool may also be given bare, in every command (`--no_kv_cache` means `--no_kv_cache=True`; each command
    listed its own, so `--compile` was bare in one and refused in the next). positional: None (positional
    arguments are config files), or the key they set instead: all of them when its default is a list, else
    at most one. one_item: list keys whose plain text is a list of that one item.
    Returns (config, explicit): the final dict and the set of keys set by config files or the CLI."""
    argv = expand_bool_flags(list(argv), [k for k, v in defaults.items() if isinstance(v, bool)])
    if _asks_for_help(argv):
        shown = defaults if listed is None else {k: v for k, v in defaults.items() if k in listed}
        print(usage(shown, positional))
        raise SystemExit(0)
    config = dict(defaults)
    explicit = set()
    files, overrides = _split_argv(argv, defaults, listed)
    if positional is not None:
        if files:
            config[positional] = _positional_value(positional, files, defaults[positional])
            explicit.add(positional)
        files = []
    for path in files:
        for key, value in _read_config_file(path, config).items():
            config[key] = _check_value(key, value, defaults, source=path)
            explicit.add(key)
    given = config[positional] if positional in explicit else None
    for key, text in overrides:
        key = _check_key(key.replace("-", "_"), defaults, source="on the command line", listed=listed)
        config[key] = _parse_override(key, text, defaults[key], key in one_item)
        check_home_path(key, config[key])
        explicit.add(key)
        # `prepare.py shakespeare_char --dataset=shakespeare` prepared shakespeare without a word (a hunt)
        if key == positional and given is not None and config[key] != given:
            raise UserError(f"{key} given twice: {one_line(given)} as the argument and --{key}={one_line(text)} "
                            f"(fix: give it once)")
    return config, explicit


def check_home_path(key, value):
    """One line for a path given as --key=~/...: the shell expands ~ only at the start of a word, so the command
    got the ~ itself, and wrote a folder named ~ in the current one (an exploration as a new user). --start is
    text, not a path."""
    if key != "start" and isinstance(value, str) and (value == "~" or value.startswith("~/")):
        raise UserError(f"--{key}={value}: the shell leaves ~ after = as it is (fix: --{key} {value}, a space in "
                        f"place of =, or --{key}=$HOME{value[1:]})")


def run_command(command, defaults, argv=None, errors=UserError, positional=None, one_item=(), listed=None,
                with_explicit=False, memory_fix="lower the sizes, counts or batch sizes you gave"):
    """A script's whole main(): the config from argv (sys.argv[1:] when None; the options of load_config), then
    command(config), or command(config, explicit) with with_explicit=True. Bad input (`errors`, UserError by
    default) ends here as one line `error: ...` and exit code 1; nowhere else. So does a size this machine
    cannot hold (e.g. --calib_batch_size=10**12), which ended in the allocator's traceback (memory_fix: the
    fix that line names). Ctrl-C (and
    SIGTERM during an atomic write, fileio.atomic_path) ends it with the line `interrupted` and exit code
    130, as train.py's interruption: no traceback; what was printed stays, a file being written is left as it
    was. stdout's reader gone (`| head`): exit code 141, quietly. Every command ends here: train.py,
    sample.py, prepare.py and tools/ (tests/test_commands.py)."""
    try:
        argv = sys.argv[1:] if argv is None else list(argv)
        config, explicit = load_config(defaults, argv, positional, one_item, listed)
        if with_explicit:
            return command(config, explicit)
        return command(config)
    except errors as e:
        raise SystemExit(f"error: {e}") from None
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr, flush=True)   # on a line of its own after the text printed so far
        raise SystemExit(130) from None
    except BrokenPipeError:
        if not stdout_closed():   # another pipe (a subprocess's): not the reader of our output
            raise
        # the reader of the output has gone (`| head`): end quietly, as a Unix tool that SIGPIPE ends (exit 141);
        # stdout goes to devnull so that Python's flush at exit does not fail again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise SystemExit(141) from None
    except (MemoryError, RuntimeError) as e:
        if not out_of_memory(e):
            raise
        raise SystemExit(f"error: {out_of_memory(e)} (fix: {memory_fix})") from None


def stdout_closed():
    """Whether stdout is a pipe whose reader has gone: poll reports an error on its write end (POSIX; False
    where poll is missing)."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(event & select.POLLERR for _, event in poller.poll(0))
    except (AttributeError, OSError, ValueError):   # no select.poll (Windows), no file descriptor
        return False


def out_of_memory(e):
    """'out of memory ...' when `e` is a failed allocation (Python's MemoryError, torch's OutOfMemoryError or its
    CPU allocator's RuntimeError, matched by name and text: this module imports no torch), else ''."""
    if not (isinstance(e, MemoryError) or type(e).__name__ == "OutOfMemoryError"
            or isinstance(e, RuntimeError) and "can't allocate memory" in str(e)):
        return ""
    tried = re.search(r"allocate (\d+) bytes", str(e))
    return "out of memory" + (f" (it needed {int(tried.group(1)) / 1e9:,.0f} GB at once)" if tried else "")


def expand_bool_flags(argv, flags):
    """Turn a bare `--flag` into `--flag=True` for the given boolean keys. `--key value` pairs are read as
    one setting, so a bare `--no_kv_cache` would swallow the next argument (or fail when it is the last
    one); `--flag True|False|1|0` and `--flag=...` are left unchanged, and so is `--flag yes|no|on|off`, refused
    as a bool's value (`--no_kv_cache yes` was "config file 'yes' not found"; a hunt)."""
    out = []
    for i, arg in enumerate(argv):
        key = arg[2:].replace("-", "_") if arg.startswith("--") else None
        if key in flags:
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            if nxt is None or nxt.lower() not in ("true", "false", "1", "0", "yes", "no", "on", "off"):
                arg = f"--{key}=True"
        out.append(arg)
    return out


def usage(defaults, positional=None):
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)   # set under `python -m tools.pangu.inherit`
    prog = f"-m {spec.name}" if spec is not None else \
        os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "script.py"
    if positional is None:
        first = "[config/file.py ...]"
    elif isinstance(defaults[positional], (list, tuple)):   # several values (_positional_value)
        first = f"[{positional} ...]"
    else:
        first = f"[{positional}]"
    lines = [f"usage: python {prog} {first} [--key=value | --key value ...]", "", "keys (default):"]
    width = max((len(k) for k in defaults), default=0)
    lines += [f"  --{k:<{width}}  {_shown(v)}" for k, v in defaults.items()]
    return "\n".join(lines)


def _shown(value):
    """A default as the usage shows it: repr, and for a text that repr escapes (sample.py's '\\n') how a shell
    passes it, since --start='\\n' is a backslash and an n (a hunt)."""
    shown = repr(value)
    if isinstance(value, str) and shown[1:-1] != value:
        shown += f"  (in bash: $'{value.encode('unicode_escape').decode('ascii')}')"
    return shown


# --- argv ------------------------------------------------------------------------------------------

def _asks_for_help(argv):
    """-h or --help as an argument of its own, not as the value of `--key value` (`--start -h` is a prompt: it
    printed the usage and exit code 0, the command not run)."""
    i = 0
    while i < len(argv):
        if argv[i] in ("-h", "--help"):
            return True
        bare_key = argv[i].startswith("--") and "=" not in argv[i]
        if bare_key and i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            i += 1   # its value, as _split_argv reads it
        i += 1
    return False


def _split_argv(argv, defaults, listed=None):
    files, overrides = [], []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("--"):
            body = arg[2:]
            if "=" in body:
                key, text = body.split("=", 1)
            else:
                # `--key value`: the value is the next argument (it may itself start with '-', e.g. -1)
                if i + 1 >= len(argv) or argv[i + 1].startswith("--"):
                    # an unknown key is named as such first: its fix, a value, led to a second error (a hunt)
                    _check_key(body.replace("-", "_"), defaults, source="on the command line", listed=listed)
                    raise UserError(f"missing value for --{body} (fix: write --{body}=VALUE or --{body} VALUE)")
                key, text = body, argv[i + 1]
                i += 1
            if not key:
                raise UserError(f"malformed argument '{arg}' (fix: write --key=value)")
            overrides.append((key, text))
        elif arg.startswith("-") and len(arg) > 1:
            raise UserError(f"unknown option '{arg}' (fix: overrides look like --key=value; see --help)")
        else:
            files.append(arg)
        i += 1
    return files, overrides


# nanoGPT's config files: its users type them here (a hunt)
NANOGPT_CONFIGS = ("train_shakespeare_char.py", "train_gpt2.py", "finetune_shakespeare.py", "eval_gpt2.py",
                   "eval_gpt2_medium.py", "eval_gpt2_large.py", "eval_gpt2_xl.py")


def missing_file_fix(path, config):
    """The fix for a config file not found: an override with one dash, a preset's name (a command with a variant
    key or a variants list), nanoGPT's config file, else the path."""
    import variants
    name = os.path.basename(path)
    preset = name.removesuffix(".py")
    if "=" in path:
        return "overrides need two dashes, e.g. --key=value"
    if name in NANOGPT_CONFIGS and "max_iters" in config:   # train.py's keys: a training config
        return (f"{name} is nanoGPT's: give it from nanoGPT's folder after config/nanogpt.py, e.g. python train.py "
                f"config/nanogpt.py ../nanoGPT/config/{name}; this repository's recipes are in config/")
    for key in ("variant", "variants"):
        if preset in variants.available() and key in config:
            return f"the preset variants/{preset}.py is --{key}={preset}"
    return "check the path; config files live in config/"


def _read_config_file(path, config):
    """Execute a config file and return its top-level assignments. The file sees the current config
    values as globals (so `max_iters = 2 * eval_interval` works), and may import modules."""
    if os.path.isdir(path):
        raise UserError(f"config file '{path}' is a folder (fix: name a python file in it, e.g. "
                        f"config/gpt_shakespeare_cpu.py)")
    if not os.path.isfile(path):
        raise UserError(f"config file '{one_line(path)}' not found (fix: {missing_file_fix(path, config)})")
    try:   # utf-8-sig: a byte-order mark, as Windows Notepad writes, is dropped, as Python does for a source file
        with open(path, encoding="utf-8-sig") as f:
            source = f.read()
    except UnicodeDecodeError:
        raise UserError(f"cannot read config file {path}: it is not UTF-8 text (fix: save it as a UTF-8 python "
                        f"file)") from None
    except OSError as e:
        raise UserError(f"cannot read config file {path}: {e.strerror} (fix: make it readable, or copy it to a "
                        f"file you can read)") from None
    try:
        tree = ast.parse(source, filename=path)
    except SyntaxError as e:
        where = f" line {e.lineno}" if e.lineno else ""   # none for a NUL byte
        raise UserError(f"syntax error in config file {path}{where}: {one_line(e.msg)} "
                        f"(fix: it must be valid python)") from None
    except (MemoryError, RecursionError):   # was reported as out of memory, with a fix about batch sizes
        raise UserError(f"config file {path} is nested too deeply for Python's parser (fix: write its "
                        f"values plainly)") from None
    assigned = _top_level_names(tree)
    _refuse_nested_assignments(tree, assigned, config, path)
    namespace = dict(config)
    namespace["__file__"] = os.path.abspath(path)
    try:
        exec(compile(tree, path, "exec"), namespace)
    except Exception as e:  # a config file is user input: report it in one line
        fix = "correct the file"
        # nanoGPT runs a config file among train.py's imports; here it imports what it uses (a hunt)
        if isinstance(e, NameError) and e.name in ("torch", "np", "os", "math", "time", "pickle"):
            module = "numpy as np" if e.name == "np" else e.name
            fix = f"import {module} at the file's top: nanoGPT's train.py lends its imports, this one does not"
        raise UserError(f"config file {path} failed: {type(e).__name__}: {one_line(e)} (fix: {fix})") from None
    values = {name: namespace[name] for name in assigned if name in namespace}
    _refuse_unread_keys(path, config, namespace, values)
    return values


def _refuse_unread_keys(path, config, namespace, values):
    """One line for a key the file sets other than by a top-level assignment (exec of another file, `from x import
    *`, a loop's target): it would be dropped without a word (nanoGPT's exec applies it; a hunt)."""
    unread = [key for key in config if key not in values and _changed(namespace.get(key, _UNSET), config[key])]
    if unread:
        raise UserError(f"config file {path} sets {', '.join(unread)} other than by a top-level assignment (exec, "
                        f"import *, a loop), where it is not read (fix: assign it at the top level; or drop that "
                        f"line and give the other config file first on the command line: OTHER.py {path})")


_UNSET = object()   # a key the file deleted


def _changed(value, before):
    """Whether a key's value after a config file is another than before it. The same object is not (a NaN, a numpy
    array of an earlier file: `!=` said changed, or raised; a review); an equal value is not either."""
    if value is before:
        return False
    try:
        return bool(value != before)
    except (TypeError, ValueError):   # an array's truth value
        return True


def _top_level_names(tree):
    """Names bound by top-level assignment statements (in order), skipping private '_names'."""
    names = []
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            names += [name for name in _assigned_names(node) if name not in names]
    return names


def _assigned_names(node):
    """The public names an assignment statement binds (`a, b = ...` binds both)."""
    targets = list(node.targets) if isinstance(node, ast.Assign) else [node.target]
    names = []
    while targets:
        t = targets.pop(0)
        if isinstance(t, ast.Name) and not t.id.startswith("_"):
            names.append(t.id)
        elif isinstance(t, (ast.Tuple, ast.List)):
            targets += t.elts
    return names


def _refuse_nested_assignments(tree, top_level, keys, path):
    """One line for a config key assigned only inside a block (if, for, while, with, try, match) of a config file:
    only top-level assignments are read, so it would be dropped without a word (nanoGPT's exec applies it). A name
    that is no key is the file's helper if the file reads it, else a misspelt key (one line, as at the top level)."""
    read = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}
    for line, name, block in _nested_assignments(tree.body):
        if name in top_level or name not in keys and name in read:
            continue
        _check_key(name, keys, f"in config file {path} line {line}")   # a misspelt key: did you mean ...
        fix = f"{name} = ... if CONDITION else {name}"
        if not isinstance(block, ast.If):
            fix = f"_{name} = ... inside the block, then {name} = _{name}"
        raise UserError(f"config file {path} line {line} assigns {name} inside a block, where it is not read: "
                        f"only top-level assignments are (fix: assign it at the top level, e.g. {fix})")


def _nested_assignments(statements, block=None):
    """(line, name, the top-level block it is in) of the assignments inside the blocks of these statements, not in
    functions or classes."""
    found = []
    for node in statements:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            for child in getattr(node, field, []):
                if isinstance(child, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                    found += [(child.lineno, name, block or node) for name in _assigned_names(child)]
                found += _nested_assignments([child], block or node)
    return found


# --- keys and values -------------------------------------------------------------------------------

# nanoGPT's sample.py keys that a sampling command here (one with --start) lacks: where they are taken
NANOGPT_SAMPLE_KEYS = {
    "init_from": "a checkpoint is --out_dir=FOLDER_OR_FILE here (nanoGPT's 'resume'); GPT-2 and other Hugging Face "
                 "models: python -m tools.huggingface.sample --init_from=gpt2 (or a local folder)",
    "compile": "sampling here does not compile, as nanoGPT's default (drop it); python -m tools.fast_sample "
               "samples a checkpoint of ours with a compiled decode step",
    "out_dir": "a run of ours is sampled by python sample.py --out_dir=FOLDER_OR_FILE; this command reads "
               "another model (see --help)",
}


def _check_key(key, defaults, source, listed=None):
    """key, if it is one of defaults; else one line, with the close matches among the keys --help lists (listed:
    tools.technique_lines took train.py's keys only to refuse them, and suggested them; an exploration)."""
    if key in defaults:
        return key
    close = difflib.get_close_matches(key, list(defaults if listed is None else listed), n=3, cutoff=0.6)
    # each close key as it is written where the misspelt one was: --n_layer, or n_layer in a config file
    prefix = "--" if source == "on the command line" else ""
    hint = f"did you mean {' or '.join(prefix + c for c in close)}?" if close else "see --help for the list of keys"
    # --out_dir's close match, --data_dir, was never what was meant (tools.huggingface.sample; a hunt)
    if key in NANOGPT_SAMPLE_KEYS and "start" in defaults and (not close or key == "out_dir"):
        hint = f"nanoGPT's sample.py key: {NANOGPT_SAMPLE_KEYS[key]}"
    if source != "on the command line":
        hint += "; helper variables in config files must start with '_'"
    # prepare.py's --input given to train.py, as if it read a text (a new user's try; the Left list of a note)
    if key == "input" and "dataset" in defaults and source == "on the command line":
        hint = "prepare the text first: python prepare.py --input=FILE writes data/NAME; then --dataset=NAME"
    # a comparison's config given to train.py: "did you mean --variant?" led on to its other keys (a hunt)
    if key == "variants" and "variant" in defaults and source.startswith("in "):
        hint = f"this file runs several models: python -m tools.compare {source[3:]}"
    raise UserError(f"unknown config key '{one_line(key)}' {source} (fix: {hint})")


def _check_value(key, value, defaults, source):
    """Type-check a python value (from a config file) against the key's default."""
    _check_key(key, defaults, f"in {source}")
    ok, value = _coerce(value, defaults[key])
    if not ok:
        raise UserError(f"{source}: {key} = {one_line(repr(value))} is a {type(value).__name__}, expected "
                          f"{_type_name(defaults[key])} (fix: e.g. {key} = {defaults[key]!r})")
    return value


def _positional_value(key, args, default):
    """The value of the positional arguments for `key`: the list of them when its default is a list or a
    tuple, else the one argument."""
    if isinstance(default, (list, tuple)):
        return type(default)(args)
    if len(args) > 1:
        raise UserError(f"one {key} at most, got {' '.join(args)} (fix: give one {key}, options as --key=value)")
    return args[0]


def _parse_override(key, text, default, one_item=False):
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        value = text
    is_text_list = isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)
    if isinstance(default, (list, tuple)) and one_item and not is_text_list:
        return type(default)([text])   # one item: a prompt may hold commas (--prompts=1,2 too)
    if isinstance(default, (list, tuple)) and isinstance(value, str):
        return type(default)(t.strip() for t in text.split(",") if t.strip())   # a comma list: --variants=gpt,lgpt
    if isinstance(default, list) and isinstance(value, (int, float)) and not isinstance(value, bool):
        return [value]   # one number: --seq_lens=256 (a tuple, such as betas, has its own length)
    if isinstance(default, str):
        # any text is fine for a string key; quotes are optional (--init_from=resume == --init_from="'resume'")
        return value if isinstance(value, str) else text
    if isinstance(default, bool) and isinstance(value, str) and value.lower() in ("true", "false"):
        value = value.lower() == "true"
    ok, coerced = _coerce(value, default)
    if not ok:
        raise UserError(f"--{key}={one_line(text)}: expected {_type_name(default)} (fix: e.g. --{key}={default!r})")
    return coerced


def _coerce(value, default):
    """(ok, value converted to the default's type); a numpy scalar (a config file may compute with numpy) is read
    as the Python number it holds."""
    if isinstance(value, np.generic):
        value = value.item()
    if default is None:
        return True, value
    if isinstance(default, bool):
        if isinstance(value, bool):
            return True, value
        if isinstance(value, int) and value in (0, 1):
            return True, bool(value)
        return False, value
    if isinstance(default, int):
        return (isinstance(value, int) and not isinstance(value, bool)), value
    if isinstance(default, float):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return True, float(value)
        return False, value
    if isinstance(default, (list, tuple)):
        if isinstance(value, (list, tuple)):
            return True, type(default)(value)
        return False, value
    return isinstance(value, type(default)), value


def _type_name(default):
    if isinstance(default, bool):
        return "a bool (True/False/1/0)"
    if isinstance(default, float):
        return "a number"
    if isinstance(default, int):
        return "an integer"
    return f"a {type(default).__name__}"
