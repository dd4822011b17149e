"""One command grammar and one entry wrapper (issue 56): every command, the story files train.py, sample.py and
prepare.py as every command under tools/, parses `--key=value` with configurator.load_config and ends in
configurator.run_command, so `--help` prints the keys, a bad option is one line `error: ... (fix: ...)` with exit
code 1, and Ctrl-C ends it with exit code 130, the line `interrupted` and no traceback. The verification harness
beside the tests (tests/fault_trial.py, tests/mutation.py: no user commands, the same grammar) is tested here too.

Ctrl-C is a real SIGINT. In-process, for every command: a config file given on its command line raises SIGINT in
the process while the command reads it (signal.raise_signal: Python raises KeyboardInterrupt at once, as on a key
press); a command whose positional arguments are not config files gets it from the first function of its work.
In a subprocess, started as a user starts it (`python -m tools.plan`, `python prepare.py`), a command gets SIGINT
from outside once it is running: a config file that sleeps, or a FIFO it reads (tools.code_lines, prepare.py's
--input); every command under `-m slow`, three by default.
"""
import ast
import os
import runpy
import signal
import subprocess
import sys
import threading
import time

import pytest

from conftest import ROOT, one_error_line

# the commands whose positional arguments are values, not config files: (argv, the function of the command's work
# that gets SIGINT in-process)
POSITIONAL = {
    "tools.code_lines": (["model.py"], "count"),
    "tools.pangu.compact_vocab": (["shakespeare", "--vocab_size=300"], "prepare"),
    "tools.wikitext103": (["wikitext103"], "prepare"),
    "tools.huggingface.convert": (["import", "gpt2", "--out=hf.pt"], "save_imported"),
    "tools.technique_lines": (["gpt"], "trace"),
    "tools.one_file": (["gpt"], "build"),
    "prepare": (["shakespeare_char"], "prepare"),
}
SIGINT_CONFIG = "import signal\nsignal.raise_signal(signal.SIGINT)\n"
# short sleeps: Python runs a handler for a signal that came before a sleep started only once that sleep ends
SLEEP_CONFIG = ("import sys\nimport time\nprint('running', file=sys.stderr, flush=True)\n"
                "for _ in range(600):\n    time.sleep(0.1)\n")


def main_guard(path):
    """The module's top-level `if __name__ == "__main__":` (either quotes, either order), or None."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Compare):
            sides = [node.test.left] + node.test.comparators
            if any(isinstance(side, ast.Name) and side.id == "__name__" for side in sides):
                return node
    return None


def runs_as_main(path):
    """Whether the module is a command: a main guard that is not a library's (below)."""
    guard = main_guard(path)
    return guard is not None and not says_library(guard)


def says_library(guard):
    """A library's main guard: only `raise SystemExit("error: ... is a library ...")`."""
    if len(guard.body) != 1 or not isinstance(guard.body[0], ast.Raise):
        return False
    return "is a library" in ast.unparse(guard.body[0])


def modules(top, keep):
    """Every module under the folder `top` whose path `keep` accepts (tests/: not the test files)."""
    found = []
    for folder, _, files in os.walk(os.path.join(ROOT, top)):
        for name in sorted(files):
            if not name.endswith(".py") or name.startswith(("test_", "conftest")):
                continue
            if keep(os.path.join(folder, name)):
                found.append(os.path.relpath(os.path.join(folder, name[:-3]), ROOT).replace(os.sep, "."))
    return sorted(found)


def commands(top):
    """Every module under the folder `top` that runs as `python -m`."""
    return modules(top, runs_as_main)


def is_library(path):
    guard = main_guard(path)
    return guard is not None and says_library(guard)


def is_silent(path):
    """A module that `python -m` would run without a word: no main guard, not a package's __init__."""
    return main_guard(path) is None and not path.endswith("__init__.py")


# the commands of the verification harness, beside the tests (`python -m tests.fault_trial`)
HARNESS = commands("tests")
# the story files, commands too (`python train.py`): the same grammar, the same tests
STORY = ["train", "sample", "prepare"]
COMMANDS = commands("tools") + HARNESS + STORY
# the commands the subprocess test blocks in reading a FIFO that nobody writes (no config file to sleep in)
FIFO_READERS = ("tools.code_lines", "prepare")


def command_main(module):
    __import__(module)
    return sys.modules[module].main


def test_every_tool_is_found():
    """The search above finds the commands (a broken search would make the tests below test nothing)."""
    assert len(COMMANDS) >= 25
    for module in ("tools.bench", "tools.plan", "tools.huggingface.convert", "tools.pangu.compact_vocab"):
        assert module in COMMANDS
    assert HARNESS == ["tests.fault_trial", "tests.mutation"]
    for module in STORY:   # outside tools/: still a command, found by its path
        path = os.path.join(ROOT, *module.split(".")) + ".py"
        assert os.path.isfile(path) and runs_as_main(path), module


def test_a_tool_run_as_a_command_does_something():
    """`python -m tools.X` of a library is one error line, exit code 1 (it did nothing, silently): every module
    under tools/ but a package's __init__ is a command or says it is a library."""
    libraries = modules("tools", is_library)
    assert "tools.plots" in libraries and "tools.flops" in libraries
    assert modules("tools", is_silent) == []
    for module in libraries:
        with pytest.raises(SystemExit) as e:
            runpy.run_module(module, run_name="__main__")
        fix = "(fix: the commands are in docs/reference.md)"
        assert e.value.code == f"error: {module} is a library, not a command {fix}"


def test_a_main_guard_is_found_however_written(tmp_path):
    for guard, found in [("if __name__ == '__main__':", True), ('if "__main__" == __name__:', True),
                         ("if __name__ == '__main__' :", True), ("def main():", False)]:
        path = tmp_path / "tool.py"
        path.write_text(f"{guard}\n    pass\n")
        assert runs_as_main(str(path)) == found, guard


@pytest.mark.parametrize("module", COMMANDS)
def test_help_lists_the_keys(module, capsys):
    with pytest.raises(SystemExit) as e:
        command_main(module)(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: python ") and "keys (default):" in out, out


@pytest.mark.parametrize("module", COMMANDS)
def test_a_bad_option_is_one_error_line(module):
    one_error_line(command_main(module), ["--no_such_option=1"], "no_such_option")


@pytest.mark.parametrize("module", COMMANDS)
def test_ctrl_c_ends_with_130_and_no_traceback(module, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    main = command_main(module)
    if module in POSITIONAL:
        argv, work = POSITIONAL[module]
        monkeypatch.setattr(sys.modules[module], work, raise_sigint)
    else:
        path = tmp_path / "ctrl_c.py"
        path.write_text(SIGINT_CONFIG)
        argv = [str(path)]
    try:
        main(argv)
    except KeyboardInterrupt:   # caught here, or pytest would stop the whole run
        pytest.fail(f"Ctrl-C left {module}.main as KeyboardInterrupt: a traceback (fix: end in run_command)")
    except SystemExit as e:
        assert e.code == 130, e.code
    else:
        pytest.fail(f"{module} went on after Ctrl-C")
    err = capsys.readouterr().err
    assert "interrupted" in err and "Traceback" not in err, err


def raise_sigint(*args, **kwargs):
    signal.raise_signal(signal.SIGINT)


def subprocess_cases():
    """(module, marks): two commands by default, every one under `-m slow` (about 4 s each, most of it importing
    torch)."""
    cases = []
    for module in COMMANDS:
        if module in POSITIONAL and module not in FIFO_READERS:
            continue   # no config file to sleep in, no FIFO they read before their checks: in-process above
        marks = () if module in ("tools.plan", *FIFO_READERS) else (pytest.mark.slow,)
        cases.append(pytest.param(module, marks=marks))
    return cases


@pytest.mark.parametrize("module", subprocess_cases())
def test_ctrl_c_of_a_running_command(module, tmp_path):
    """`python -m <module>` (`python prepare.py` for a story file) gets SIGINT once it runs: it reads a config file
    that sleeps (and says so first), or tools.code_lines and prepare.py (--input) read a FIFO that nobody writes
    (open() blocks until the test opens the other end)."""
    if module in FIFO_READERS:
        path = tmp_path / "fifo.py"
        os.mkfifo(path)
    else:
        path = tmp_path / "sleep.py"
        path.write_text(SLEEP_CONFIG)
    proc = subprocess.Popen(command_line(module, path, tmp_path), cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    watchdog = threading.Timer(120, proc.kill)   # a command that never gets there fails the test, not the suite
    watchdog.start()
    try:
        if module in FIFO_READERS:
            writer = wait_for_reader(path, proc)
        else:
            assert proc.stderr.readline() == "running\n"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate()
        if module in FIFO_READERS:
            os.close(writer)
    finally:
        watchdog.cancel()
        proc.kill()
    assert proc.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err, err


def command_line(module, path, tmp_path):
    """The command as a user types it, reading `path`: a story file as `python prepare.py`, a tool as `python -m`;
    prepare.py's positional argument is the dataset name, so the file is its --input (into a folder of the test)."""
    if module == "prepare":
        return [sys.executable, "prepare.py", f"--input={path}", f"--out_dir={tmp_path / 'data'}"]
    if module in STORY:
        return [sys.executable, f"{module}.py", str(path)]
    return [sys.executable, "-m", module, str(path)]


def wait_for_reader(path, proc):
    """The write end of the FIFO, opened once the command has opened its read end (before that, opening it without
    blocking fails with ENXIO): the command then waits in open() or read()."""
    while proc.poll() is None:
        try:
            return os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"the command ended before reading the FIFO: {proc.communicate()}")


def test_every_import_of_a_project_name_finds_it():
    """A command imports much of the project lazily, inside the function that needs it, so a name moved or removed
    elsewhere breaks it only when that option runs (tools.executorch.export --keep_heaviest_branch imported a helper
    removed from safety_net.build; the fault trial found it, the suite did not). Every `from <project module> import
    name`, in every tracked file, and every `module.name` of a `from safety_net import module`, names what exists."""
    import ast
    import importlib.util
    import types
    tracked = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True)
    project = ("safety_net", "model", "train", "sample", "prepare", "variants", "tools")
    missing = []
    for path in tracked.stdout.split():
        with open(os.path.join(ROOT, path), encoding="utf-8") as f:
            tree = ast.parse(f.read())
        modules = {}
        for node in ast.walk(tree):
            if not (isinstance(node, ast.ImportFrom) and not node.level and node.module
                    and node.module.split(".")[0] in project):
                continue
            module = importlib.import_module(node.module)
            for alias in node.names:
                if hasattr(module, alias.name):
                    modules[alias.asname or alias.name] = getattr(module, alias.name)
                elif not hasattr(module, "__path__") or importlib.util.find_spec(f"{node.module}.{alias.name}") is None:
                    missing.append(f"{path}:{node.lineno} {node.module}.{alias.name}")
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                module = modules.get(node.value.id)
                is_net_module = isinstance(module, types.ModuleType) and module.__name__.startswith("safety_net.")
                if is_net_module and not hasattr(module, node.attr):
                    missing.append(f"{path}:{node.lineno} {module.__name__}.{node.attr}")
    assert not missing, missing


def test_help_shows_how_a_shell_passes_a_default_with_an_escape(capsys, tmp_path):
    """sample.py's --help showed --start '\\n', and --start='\\n', copied, is a backslash and an n: refused for a char
    model ('\\\\' not in the vocabulary), and a GPT-2 model prompted with them (a hunt). The usage adds bash's
    $'\\n', which passes a newline."""
    import subprocess
    import sample
    with pytest.raises(SystemExit):
        sample.main(["--help"])
    line = next(line for line in capsys.readouterr().out.splitlines() if line.strip().startswith("--start"))
    assert line.endswith("'\\n'  (in bash: $'\\n')"), line
    shell = subprocess.run(["bash", "-c", "printf %s $'\\n'"], capture_output=True, text=True)
    assert shell.stdout == sample.DEFAULTS["start"]   # what the usage says bash passes is the default
