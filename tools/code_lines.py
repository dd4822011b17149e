"""
Lines of code, as a reader meets them: every line of the given files, the lines that hold code (not blank, not
only a comment, not a docstring), and the reading load as ../shared/tools/reading_path.py counts it: code tokens
(Python's tokens less comments, triple-quoted strings and layout) and the words of comments and triple-quoted
strings.

    python -m tools.code_lines model.py sample.py safety_net/*.py
    python -m tools.code_lines docs/models/gpt.py docs/models/lgpt.py     # the one-config files of tools.one_file
"""
import ast
import io
import os
import sys
import tokenize

from safety_net.configurator import UserError, run_command

SKIP = (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER)


def count(path):
    """(all lines, code lines) of a Python file."""
    with open(path, encoding="utf-8") as f:
        source = f.read()
    docstrings = set()
    for node in ast.walk(ast.parse(source)):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body and \
                isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and \
                isinstance(body[0].value.value, str):
            docstrings.update(range(body[0].lineno, body[0].end_lineno + 1))
    code = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type not in SKIP:
            code.update(line for line in range(tok.start[0], tok.end[0] + 1) if line not in docstrings)
    return len(io.StringIO(source).readlines()), len(code)   # a last line without "\n" counts, as a reader sees it


def reading_load(path):
    """(code tokens, comment and docstring words) of a Python file, reading_path.py's rule."""
    with open(path, encoding="utf-8") as f:
        source = f.read()
    tokens = words = 0
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        prose = tok.type == tokenize.STRING and tok.string.lstrip("rbuRBU").startswith(('"""', "'''"))
        if tok.type == tokenize.COMMENT or prose:
            words += len(tok.string.split())
        elif tok.type not in SKIP:
            tokens += 1
    return tokens, words


DEFAULTS = dict(paths=[])   # the positional arguments: the Python files to count


def main(argv=None):
    return run_command(run, DEFAULTS, argv, positional="paths")


def run(config):
    paths = config["paths"]
    if not paths:
        raise UserError("no file given (fix: e.g. python -m tools.code_lines model.py)")
    missing = [p for p in paths if not os.path.exists(p)]
    if missing:
        raise UserError(f"no such file: {', '.join(missing)} (fix: name Python files, e.g. python -m tools.code_lines "
                        f"model.py)")
    rows = [counted(path) for path in paths]   # every file read before a row is printed: bad input is one line
    total = [0, 0, 0, 0]
    for path, row in zip(paths, rows):
        total = [a + b for a, b in zip(total, row)]
        print_row(row, path)
    print_row(total, "total")


def counted(path):
    """count(path) + reading_load(path), or one line for what is not a Python file in UTF-8."""
    if os.path.isdir(path):
        raise UserError(f"{path} is a folder (fix: name its Python files, e.g. {os.path.join(path, '*.py')})")
    try:
        return count(path) + reading_load(path)
    except (UnicodeDecodeError, SyntaxError, tokenize.TokenError, MemoryError) as e:
        # MemoryError: CPython's parser gives up so on a long line of words (it said "out of memory"; a hunt)
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise UserError(f"cannot count {path}: not Python source in UTF-8 ({reason}) (fix: name Python "
                        f"files)") from None


def print_row(row, name):
    lines, code, tokens, words = row
    print(f"{lines:6d} lines {code:6d} code {tokens:7,d} code tokens {words:6,d} comment words  {name}")


if __name__ == "__main__":
    main(sys.argv[1:])
