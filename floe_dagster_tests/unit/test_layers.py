"""The package's layering, as docs/layout.md states it: imports only go down.

core <- redaction, errors, file_locks, instance, settings, policies, policy_store <- iceberg, spark, coordination <- scheduling <- defs
<- launching <- reports <- api, mcp_server, cli, foreign_import, definitions, component, shards, demo, demo_writers. The pure core imports only the
standard library, PyYAML and itself. Function-level imports of the package's own modules are kept
for what is truly expensive to import (Spark). Inside the core, the parts stand on floors (CORE_FLOORS):
basics <- storage, operation_config <- facts <- rewrites, schedules <- operation_kinds <- operations <- runs
<- value, policies <- plan, foreign.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "floe_dagster"

LAYERS = {
    "core": 0,
    "redaction": 1, "errors": 1, "file_locks": 1, "instance": 1, "settings_schema": 1, "settings": 1, "policies": 1, "policy_store": 1,
    "iceberg": 2, "spark": 2, "coordination": 2,
    "scheduling": 3,
    "defs": 4,
    "launching": 5,
    "reports": 6,
    "api": 7, "mcp_server": 7, "cli": 7, "migration": 7, "foreign_import": 7, "definitions": 7, "component": 7, "shards": 7, "demo": 7, "demo_writers": 7,
}
# Within layer 1, what each foundation module may import besides the core.
FOUNDATION = {"redaction": set(), "errors": {"redaction"}, "file_locks": {"errors"}, "instance": {"redaction"},
              "settings_schema": set(), "settings": {"errors", "settings_schema", "redaction"},
              "policies": {"errors", "settings"}, "policy_store": {"errors", "file_locks", "settings", "policies"}}
# The core's own floors (docs/layout.md): a part of the core imports only from the floors below its own.
CORE_FLOORS = {
    "basics": 0, "storage": 1, "operation_config": 1, "facts": 2, "rewrites": 3, "schedules": 3,
    "operation_kinds": 4, "operations": 5, "runs": 6, "value": 7, "policies": 7, "plan": 8, "foreign": 8,
}
# Function-level imports of the package's own modules allowed outside the cli package (issue 13: at most 10).
MAX_FUNCTION_LEVEL_IMPORTS = 10


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def _top(path: Path) -> str:
    return path.relative_to(PACKAGE).parts[0].removesuffix(".py")


def _own_imports(tree: ast.AST) -> list[tuple[ast.AST, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] if node.module != "floe_dagster" else [f"floe_dagster.{a.name}" for a in node.names]
            found += [(node, name) for name in names if name.startswith("floe_dagster.")]
        elif isinstance(node, ast.Import):
            found += [(node, a.name) for a in node.names if a.name.startswith("floe_dagster.")]
    return found


def test_every_module_has_a_layer():
    assert {_top(p) for p in _modules() if p.name != "__init__.py" or p.parent != PACKAGE} <= set(LAYERS)


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_only_go_down(path: Path):
    source = _top(path)
    for node, name in _own_imports(ast.parse(path.read_text())):
        target = name.split(".")[1]
        if target == source:
            continue
        where = f"{path.relative_to(PACKAGE)}:{node.lineno} imports {name}"
        assert LAYERS[target] <= LAYERS[source], f"{where}: an import that goes up"
        if LAYERS[source] == LAYERS[target] == 1:
            assert target in FOUNDATION[source], f"{where}: foundation modules import only what FOUNDATION says"


def test_the_core_is_pure():
    allowed = set(sys.stdlib_module_names) | {"yaml", "croniter", "floe_dagster"}  # croniter: pure cron arithmetic
    for path in (PACKAGE / "core").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                roots = [node.module.split(".")[0]]
            elif isinstance(node, ast.Import):
                roots = [a.name.split(".")[0] for a in node.names]
            else:
                continue
            for root in roots:
                assert root in allowed, f"{path.relative_to(PACKAGE)}:{node.lineno} imports {root}"
            if roots == ["floe_dagster"]:
                assert node.module.startswith("floe_dagster.core"), f"{path.relative_to(PACKAGE)} leaves the core"


def _core_part(module: str) -> str:
    return module.split(".")[2]


def test_every_part_of_the_core_has_a_floor():
    parts = {p.relative_to(PACKAGE / "core").parts[0].removesuffix(".py") for p in (PACKAGE / "core").rglob("*.py")}
    assert parts - {"__init__"} == set(CORE_FLOORS)


@pytest.mark.parametrize("path", sorted((PACKAGE / "core").rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_the_core_imports_only_from_floors_below(path: Path):
    """Type-only imports too: a part that names a higher one's type would tie the two in a circle."""
    source = path.relative_to(PACKAGE / "core").parts[0].removesuffix(".py")
    for node, name in _own_imports(ast.parse(path.read_text())):
        if name.startswith("floe_dagster.core.") and _core_part(name) != source:
            assert CORE_FLOORS[_core_part(name)] < CORE_FLOORS[source], \
                f"{path.relative_to(PACKAGE)}:{node.lineno} imports {name}: a floor that is not below core/{source}"


def test_few_function_level_imports_of_our_own_modules():
    found = []
    for path in _modules():
        if _top(path) == "cli":  # the CLI (the cli package) imports per command, to start fast
            continue
        tree = ast.parse(path.read_text())
        for function in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
            for node, name in _own_imports(function):
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {name}")
    assert len(set(found)) <= MAX_FUNCTION_LEVEL_IMPORTS, "\n".join(sorted(set(found)))
