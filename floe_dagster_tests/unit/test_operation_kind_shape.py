"""The shape of an operation kind (core/operation_kinds/spec.py): a base class whose data every kind has
and whose hooks are methods with no-op defaults, so that a cross-cutting feature adds a method, never a
field, and a new kind is one class in one module declaring only the data it must."""

from __future__ import annotations

import sys
import textwrap

import pytest

from floe_dagster.core import operation_kinds
from floe_dagster.core.operation_kinds import SPECS
from floe_dagster.core.operation_kinds.spec import ExplainView, OperationSpec

# A kind declaring only what every kind must: its names, order, config and docs' words.
MINIMAL_KIND = '''
from dataclasses import dataclass

from floe_dagster.core.operation_config import OperationConfig, at_least, option
from floe_dagster.core.operation_kinds.spec import OperationSpec


@dataclass(frozen=True)
class TidyConfig(OperationConfig):
    min_input_files: int | None = option(at_least(1))


class Tidy(OperationSpec):
    name = "TIDY"
    policy_key = "tidy"
    procedure = "tidy"
    order = 55
    config_type = TidyConfig
    docs_row = "| `TIDY` | `tidy` | `tidy`: `minInputFiles` |"
    no_change = "`TIDY` changed nothing when it tidied nothing."


SPEC = Tidy()
'''


def _shared_data() -> list[str]:
    """The base's data with a default (the data without one is what every kind declares)."""
    return [name for name in OperationSpec.__annotations__ if name in vars(OperationSpec)]


def test_the_base_holds_data_only_and_no_hook_is_a_field_tested_for_none():
    annotations = OperationSpec.__annotations__
    assert not [name for name, kind in annotations.items() if "Callable" in str(kind) or "None" in str(kind)]
    hooks = ("parse", "read_first", "check", "byte_estimate", "changed", "explain", "cadence")
    assert all(callable(vars(OperationSpec)[hook]) for hook in hooks)


def test_no_shared_field_of_the_base_is_used_by_exactly_one_kind():
    """A field one kind sets belongs to that kind (a property or method of the base with a default, which
    the kind overrides): the base grows no field per feature."""
    users = {name: [spec.name for spec in SPECS if getattr(spec, name) != getattr(OperationSpec, name)]
             for name in _shared_data()}
    assert {name: kinds for name, kinds in users.items() if len(kinds) == 1} == {}
    assert "rewrites_data" in users and "scopes_partitions" not in users  # the check sees the fields


def test_a_minimal_kind_is_discovered_and_gets_every_default(tmp_path, monkeypatch):
    package = tmp_path / "kinds"
    package.mkdir()
    (package / "tidy.py").write_text(textwrap.dedent(MINIMAL_KIND))
    monkeypatch.setattr(operation_kinds, "__path__", [*operation_kinds.__path__, str(package)])
    try:
        tidy = next(spec for spec in operation_kinds._discover() if spec.name == "TIDY")
    finally:
        sys.modules.pop("floe_dagster.core.operation_kinds.tidy", None)
    assert tidy.config_type.from_mapping({"minInputFiles": 3}).min_input_files == 3
    assert tidy.config_is_fields and tidy.schedule_key == "tidySchedule" and tidy.fields == ("minInputFiles",)
    assert not (tidy.rewrites_data or tidy.needs_gc or tidy.scopes_partitions or tidy.applies_ref_retention
                or tidy.reclaims_orphans or tidy.location_fields or tidy.withheld_fields)
    assert tidy.own_condition is None and tidy.byte_estimate(None, None) is None
    assert tidy.cadence(None, (), None) is None and tidy.explain(ExplainView(None, None, None, None, lambda: None)) == {}
    # The planner calls a cadence only where a kind has one (ORPHAN_CLEANUP's adaptive cadence).
    assert not tidy.has_cadence and [spec.name for spec in SPECS if spec.has_cadence] == ["ORPHAN_CLEANUP"]
    assert tidy.changed({"files": 0}) is False and tidy.changed({"files": 2}) is True
    with pytest.raises(ValueError, match="invalid tidy config: .*minInputFile"):
        tidy.config_type.from_mapping({"minInputFile": 3})
    assert tidy.read_first(None, {}) == {} and tidy.check(None, None) is None


def test_a_kind_leaving_out_what_every_kind_declares_is_refused():
    class Unnamed(OperationSpec):
        policy_key = "unnamed"
        order = 99

    with pytest.raises(TypeError, match="the operation kind Unnamed must declare name, procedure, config_type, "
                                        "docs_row, no_change"):
        Unnamed()
