"""Files and functions a reader can hold in their head (issue 16's size rule).

1. No module of ``topics/`` or ``frontends/`` (Python or Cython, include files too) is over
   :data:`MAX_FILE_LINES` lines, except those in :data:`KNOWN_LARGE_FILES`.
2. No function is over :data:`MAX_FUNCTION_LINES` lines unless its docstring says why in a
   sentence that starts ``Kept whole:`` (a hot loop whose locals must stay local, a
   declarative table), except those in :data:`KNOWN_LONG_FUNCTIONS`. The docstring itself
   does not count: a public method's docstring is the API reference (topics/_facade.py),
   and what a reader has to hold in their head is the signature and the body.

Both lists are a ratchet: they hold exactly today's exceptions, so the test fails on a new
one and on a listed one that is gone (the list must shrink with the code).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 60
REASON = "Kept whole:"

#: Modules over the limit today (path relative to the repository).
KNOWN_LARGE_FILES: frozenset[str] = frozenset()

#: Functions over the limit today without a stated reason: (path, qualified name).
KNOWN_LONG_FUNCTIONS: frozenset[tuple[str, str]] = frozenset()


def _sources() -> list[Path]:
    out: list[Path] = []
    for package in ("topics", "frontends"):
        for path in sorted((ROOT / package).rglob("*")):
            rel = path.relative_to(ROOT)
            if package == "topics" and rel.parts[1:2] == ("frontends",):
                continue  # topics/frontends is a link to frontends/
            if path.suffix in (".py", ".pyx", ".pxd", ".pxi") and path.is_file():
                out.append(path)
    return out


def _functions(tree: ast.AST) -> list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    found: list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                found.append((prefix + child.name, child))
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(tree, "")
    return found


def long_files() -> set[str]:
    return {
        str(p.relative_to(ROOT))
        for p in _sources()
        if len(p.read_text().splitlines()) > MAX_FILE_LINES
    }


def _code_lines(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines from ``def`` to the end, less the docstring's (rule 2)."""
    assert fn.end_lineno is not None
    lines = fn.end_lineno - fn.lineno + 1
    first = fn.body[0]
    if ast.get_docstring(fn) is not None and isinstance(first, ast.Expr):
        assert first.end_lineno is not None
        lines -= first.end_lineno - first.lineno + 1
    return lines


def long_functions() -> set[tuple[str, str]]:
    """Functions over the limit whose docstring gives no reason (Python modules only)."""
    out = set()
    for path in _sources():
        if path.suffix != ".py":
            continue
        tree = ast.parse(path.read_text())
        for name, fn in _functions(tree):
            if _code_lines(fn) <= MAX_FUNCTION_LINES:
                continue
            if REASON in (ast.get_docstring(fn) or ""):
                continue
            out.add((str(path.relative_to(ROOT)), name))
    return out


def test_no_new_large_file() -> None:
    found = long_files()
    assert not found - KNOWN_LARGE_FILES, f"over {MAX_FILE_LINES} lines: split them"
    assert not KNOWN_LARGE_FILES - found, "now short enough: take them off the list"


def test_no_new_long_function_without_a_reason() -> None:
    found = long_functions()
    assert not found - KNOWN_LONG_FUNCTIONS, (
        f"over {MAX_FUNCTION_LINES} lines with no '{REASON}' sentence in the docstring"
    )
    assert not KNOWN_LONG_FUNCTIONS - found, "now short or explained: take them off the list"


def test_a_docstring_does_not_count_its_body_does() -> None:
    doc = "\n".join(['    """Reference.'] + ["    more"] * 80 + ['    """'])
    short = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES - 2))
    long = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    for body, expect in ((short, MAX_FUNCTION_LINES - 1), (long, MAX_FUNCTION_LINES + 1)):
        fn = ast.parse(f"def f():\n{doc}\n{body}\n").body[0]
        assert isinstance(fn, ast.FunctionDef)
        assert _code_lines(fn) == expect


def test_the_reason_marker_is_recognised() -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    explained = f'def f():\n    """{REASON} a table."""\n{body}\n'
    bare = f"def g():\n{body}\n    return 1\n"
    for source, expect in ((explained, True), (bare, False)):
        fn = ast.parse(source).body[0]
        assert isinstance(fn, ast.FunctionDef)
        assert (REASON in (ast.get_docstring(fn) or "")) is expect
