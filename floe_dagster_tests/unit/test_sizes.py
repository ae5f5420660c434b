"""Size limits of the package (issue 27): no module of floe_dagster over 500 lines, no function over 60
(from its first decorator to its last line, methods and nested functions included). Line length (120)
is ruff's (pyproject.toml, run by ``./dev test``).

Today's offenders are listed below with their current size, each owned by the issue-27 helper who is
splitting it: an entry may not grow, and one that is back under the limit must be removed from the
list (the test says so), so the list only shrinks."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "floe_dagster"
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60

# Modules over MAX_MODULE_LINES today: path below floe_dagster/ -> its lines now (the most it may have).
MODULES_OVER = {
}
# Functions over MAX_FUNCTION_LINES today: "module:qualified name" -> its lines now (the most it may have).
FUNCTIONS_OVER = {
}
# Functions allowed over the limit for good, each with why (issue 27: "a parser table may be the
# exception, and is named"). None today.
NAMED_EXCEPTIONS: dict[str, str] = {}


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _name(path: Path) -> str:
    return path.relative_to(PACKAGE).as_posix()


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _functions(tree: ast.AST) -> dict[str, int]:
    """Every function in ``tree``, nested ones and methods included: its qualified name -> its lines."""
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    found: dict[str, int] = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names, up = [node.name], parents.get(node)
            while up is not None:
                if isinstance(up, _SCOPES):
                    names.append(up.name)
                up = parents.get(up)
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            found[".".join(reversed(names))] = node.end_lineno - first + 1
    return found


@cache
def _module_sizes() -> dict[str, int]:
    return {_name(path): len(path.read_text().splitlines()) for path in _modules()}


@cache
def _function_sizes() -> dict[str, int]:
    return {f"{_name(path)}:{name}": lines for path in _modules()
            for name, lines in _functions(ast.parse(path.read_text())).items()}


def test_no_module_is_over_the_limit():
    sizes = _module_sizes()
    over = {name: lines for name, lines in sizes.items()
            if lines > MAX_MODULE_LINES and lines > MODULES_OVER.get(name, 0)}
    assert not over, (f"modules over {MAX_MODULE_LINES} lines (split them by concern; a listed one may not grow): "
                      f"{over}")


def test_no_function_is_over_the_limit():
    sizes = _function_sizes()
    over = {name: lines for name, lines in sizes.items()
            if lines > MAX_FUNCTION_LINES and name not in NAMED_EXCEPTIONS and lines > FUNCTIONS_OVER.get(name, 0)}
    assert not over, (f"functions over {MAX_FUNCTION_LINES} lines (name their steps as functions of their own; a "
                      f"listed one may not grow): {over}")


@pytest.mark.parametrize("listed, sizes, limit", [
    (MODULES_OVER, _module_sizes, MAX_MODULE_LINES),
    (FUNCTIONS_OVER, _function_sizes, MAX_FUNCTION_LINES),
], ids=["modules", "functions"])
def test_the_list_of_offenders_only_shrinks(listed, sizes, limit):
    now = sizes()
    stale = sorted(name for name in listed if now.get(name, 0) <= limit)
    assert not stale, f"no longer over {limit} lines (or gone): remove them from the list in this test: {stale}"


def test_the_named_exceptions_exist():
    assert set(NAMED_EXCEPTIONS) <= set(_function_sizes()), "a named exception names no function"


def test_the_size_rules_can_fail():
    """The measure itself: a decorated method counts from its decorator, a nested function is named
    inside its parent."""
    tree = ast.parse("class C:\n    @property\n    def f(self):\n        def g():\n            return 1\n"
                     "        return g()\n")
    assert _functions(tree) == {"C.f": 5, "C.f.g": 2}
