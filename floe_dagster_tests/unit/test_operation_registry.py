"""The operation registry (core/operation_kinds/, spark/operation_steps/): each kind declared once and
discovered, the enum, the API's names and Dagster's partitions built from it, the docs held to it, and
the package branching on a kind in at most 5 places outside the registry's modules."""

from __future__ import annotations

import ast
import re
import sys
import textwrap
from pathlib import Path

import pytest

from floe_dagster.api.models import OperationName
from floe_dagster.api.policy_models import FLOE_OPERATIONS, PolicyResponse
from floe_dagster.core import operation_kinds
from floe_dagster.core.operation_kinds import SPECS, spec_of
from floe_dagster.core.operations import ALL_OPERATIONS, CONFIG_TYPES, Operation
from floe_dagster.core.policies.policy import PolicyError, parse_policies_text
from floe_dagster.defs.assets import OPERATIONS_PARTITIONS
from floe_dagster.spark.operation_steps import STEPS, step_of

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "floe_dagster"
REGISTRY = ("core/operation_kinds", "spark/operation_steps")
MAX_KIND_BRANCHES = 5
FLOE_ORDER = ["REWRITE_DATA_FILES", "EXPIRE_SNAPSHOTS", "ORPHAN_CLEANUP", "REWRITE_MANIFESTS",
              "REWRITE_POSITION_DELETE_FILES", "EXPIRE_ROWS", "COMPUTE_STATISTICS", "APPLY_TABLE_PROPERTIES"]


# -- kind branches outside the registry ----------------------------------------------------------------------


def _is_kind(node: ast.AST) -> bool:
    """``Operation.X``: a member of the enum named in the code."""
    return (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "Operation"
            and node.attr.isupper())


def kind_branches(source: str) -> list[int]:
    """The lines comparing with a kind: ``is``/``is not``/``==``/``!=`` ``Operation.X``, or ``in``/``not in`` a
    tuple, list or set holding one."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        for op, right in zip(node.ops, node.comparators):
            sides = (node.left, right)
            if isinstance(op, (ast.Is, ast.IsNot, ast.Eq, ast.NotEq)) and any(map(_is_kind, sides)):
                found.append(node.lineno)
            elif isinstance(op, (ast.In, ast.NotIn)) and isinstance(right, (ast.Tuple, ast.List, ast.Set)) \
                    and any(map(_is_kind, right.elts)):
                found.append(node.lineno)
    return found


def test_the_counter_finds_every_form_of_a_kind_branch():
    source = textwrap.dedent("""
        a = op is Operation.REWRITE_DATA_FILES
        b = op is not Operation.EXPIRE_SNAPSHOTS
        c = Operation.ORPHAN_CLEANUP == op
        d = op in (Operation.REWRITE_MANIFESTS, Operation.COMPUTE_STATISTICS)
        e = op not in {Operation.APPLY_TABLE_PROPERTIES}
        f = op.spec.rewrites_data() and Operation.EXPIRE_SNAPSHOTS not in configs  # membership of a kind: not a branch
        g = op is other
    """)
    assert kind_branches(source) == [2, 3, 4, 5, 6]


def test_the_package_branches_on_a_kind_in_at_most_5_places_outside_the_registry():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if "__pycache__" in path.parts or relative.startswith(REGISTRY):
            continue
        found += [f"{relative}:{line}" for line in kind_branches(path.read_text())]
    assert len(found) <= MAX_KIND_BRANCHES, "\n".join(found)


# -- the registry --------------------------------------------------------------------------------------------


def test_the_kinds_are_discovered_in_floes_order_and_name_every_layer():
    assert [spec.name for spec in SPECS] == FLOE_ORDER
    assert [op.value for op in ALL_OPERATIONS] == FLOE_ORDER == list(OperationName.__args__)
    assert list(OPERATIONS_PARTITIONS.get_partition_keys()) == FLOE_ORDER
    assert set(STEPS) == set(FLOE_ORDER)
    for op in ALL_OPERATIONS:
        assert op.spec is spec_of(op.value) and step_of(op).kind == op.value
        assert CONFIG_TYPES[op].spec is op.spec  # the config class parses itself through its spec
        assert Operation.parse(op.spec.policy_key) is Operation.parse(op.spec.snake_key) is op
    assert [op.policy_key for op in FLOE_OPERATIONS] == ["rewriteDataFiles", "expireSnapshots", "orphanCleanup",
                                                         "rewriteManifests"]
    assert all(op.policy_key in PolicyResponse.model_fields for op in FLOE_OPERATIONS)


def test_the_order_of_operations_is_a_sort_key_only():
    """Orders leave room between kinds, so a new kind takes its place without renumbering the others."""
    orders = [spec.order for spec in SPECS]
    assert orders == sorted(orders) and all(b - a > 1 for a, b in zip(orders, orders[1:]))


def test_a_new_kind_module_is_discovered_and_its_policy_key_is_read(tmp_path, monkeypatch):
    """A kind added as one module (here a copy of an existing kind under another name, in a package laid
    over the real one) is found without editing a list: its spec, its config class, its policy key."""
    package = tmp_path / "floe_dagster" / "core" / "operation_kinds"
    package.mkdir(parents=True)
    source = (PACKAGE / "core" / "operation_kinds" / "rewrite_position_delete_files.py").read_text()
    source = (source.replace('"REWRITE_POSITION_DELETE_FILES"', '"COMPACT_DELETES"')
              .replace('"rewritePositionDeleteFiles"', '"compactDeletes"')
              .replace('"rewrite_position_delete_files"', '"compact_deletes"').replace("order = 50", "order = 55"))
    (package / "compact_deletes.py").write_text(source)
    monkeypatch.setattr(operation_kinds, "__path__", [*operation_kinds.__path__, str(package)])
    specs = operation_kinds._discover()
    assert [spec.name for spec in specs][4:6] == ["REWRITE_POSITION_DELETE_FILES", "COMPACT_DELETES"]
    added = specs[5]
    assert added.config_type.from_mapping({"minInputFiles": 3}).min_input_files == 3
    assert added.config_type.spec is added and added.schedule_key == "compactDeletesSchedule"
    sys.modules.pop("floe_dagster.core.operation_kinds.compact_deletes", None)



def test_a_kind_module_without_a_spec_and_two_kinds_with_one_name_are_refused(tmp_path, monkeypatch):
    package = tmp_path / "kinds"
    package.mkdir()
    (package / "half_written.py").write_text('"""A kind whose SPEC is still missing."""\n')
    monkeypatch.setattr(operation_kinds, "__path__", [*operation_kinds.__path__, str(package)])
    with pytest.raises(TypeError, match="half_written is an operation kind module and must define SPEC"):
        operation_kinds._discover()
    sys.modules.pop("floe_dagster.core.operation_kinds.half_written", None)
    (package / "half_written.py").unlink()
    source = (PACKAGE / "core" / "operation_kinds" / "rewrite_manifests.py").read_text().replace("order = 40", "order = 41")
    (package / "twin.py").write_text(source)
    with pytest.raises(TypeError, match="two operation kinds share the name REWRITE_MANIFESTS"):
        operation_kinds._discover()
    sys.modules.pop("floe_dagster.core.operation_kinds.twin", None)



def test_a_kinds_own_condition_replaces_the_every_tick_warning():
    """tableProperties' own condition (the table's drift) decides when it is due: no "every tick" warning,
    while another kind with the same schedule gets it."""
    policies = parse_policies_text("""
        name: p
        tablePattern: "db.*"
        tableProperties: {write.delete.mode: merge-on-read}
        tablePropertiesSchedule: {}
        rewriteManifests: {}
        rewriteManifestsSchedule: {}
    """)
    warnings = [w for w in policies.warnings if "every tick" in w]
    assert len(warnings) == 1 and "rewriteManifestsSchedule" in warnings[0]


def test_ref_retention_without_the_kind_that_applies_it_is_named_by_that_kind():
    policies = parse_policies_text("""
        name: p
        tablePattern: "db.*"
        rewriteManifests: {}
        refRetention: [{pattern: "*", maxAge: P30D}]
    """)
    assert any("refRetention: is applied by expireSnapshots runs, which this policy does not configure" in w
               for w in policies.warnings)
    with pytest.raises(PolicyError, match="unknown field"):
        parse_policies_text("name: p\ntablePattern: 'db.*'\nexpireRows: {}\n")


# -- the docs follow the registry ----------------------------------------------------------------------------


def test_the_operations_table_in_the_docs_is_the_registrys():
    lines = (ROOT / "docs" / "operations.md").read_text().splitlines()
    start = lines.index("| Operation | Iceberg procedure | Policy key and options |")
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append(line)
    assert rows == [spec.docs_row for spec in SPECS]


def test_the_zero_change_rules_in_the_docs_are_the_registrys():
    text = re.sub(r"\s+", " ", (ROOT / "docs" / "automation.md").read_text())
    missing = [spec.name for spec in SPECS if spec.no_change not in text]
    assert missing == []


def test_every_kind_has_one_step(tmp_path, monkeypatch):
    """A second step of a kind (or, as the discovery checks, a kind without one) stops the engine side loading."""
    from floe_dagster.spark import operation_steps

    package = tmp_path / "steps"
    package.mkdir()
    (package / "twin.py").write_text((PACKAGE / "spark" / "operation_steps" / "rewrite_manifests.py").read_text())
    monkeypatch.setattr(operation_steps, "__path__", [*operation_steps.__path__, str(package)])
    with pytest.raises(TypeError, match="two operation steps share a kind"):
        operation_steps._discover()
    sys.modules.pop("floe_dagster.spark.operation_steps.twin", None)
