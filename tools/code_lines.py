"""
Lines of code, as a reader meets them: every line of the given files, and the lines that hold code (not blank,
not only a comment, not a docstring).

    python -m tools.code_lines model.py sample.py configurator.py checkpoint.py dataset.py
"""
import ast
import io
import os
import sys
import tokenize

from configurator import UserError, run_command

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
    return source.count("\n"), len(code)


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
    total = [0, 0]
    for path in paths:
        lines, code = count(path)
        total = [total[0] + lines, total[1] + code]
        print(f"{lines:6d} lines {code:6d} code  {path}")
    print(f"{total[0]:6d} lines {total[1]:6d} code  total")


if __name__ == "__main__":
    main(sys.argv[1:])
