"""The shape of an operation kind (core/operation_kinds/spec.py): a base class whose only data is the seven
facts every kind has and whose hooks are methods with neutral defaults, so that a cross-cutting feature
adds a method, never a field, and a new kind is one class in one module declaring only the data it must
and overriding only the hooks where it differs."""

from __future__ import annotations

import re
import sys
import textwrap
from functools import cached_property
from pathlib import Path

import pytest

import floe_dagster
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


# The base's data: the facts every kind has, and nothing else. Fixed: a fact only some kinds have (a flag, a
# mapping of their config's fields, a rule) is a method with a neutral default, which those kinds override;
# a field here would be one more thing every kind carries for a feature most of them lack.
EVERY_KINDS_FACTS = {"name", "policy_key", "procedure", "order", "config_type", "docs_row", "no_change"}
ROOT = Path(floe_dagster.__file__).parent


def _base_data() -> set[str]:
    """The base's public attributes that are neither a method nor a property: its data."""
    return {name for name, value in vars(OperationSpec).items() if not name.startswith("_")
            and not callable(value) and not isinstance(value, (property, cached_property))} \
        | {name for name in OperationSpec.__annotations__ if not name.startswith("_")}


def _hooks() -> list[str]:
    """The base's methods a kind overrides (its derived properties are not hooks)."""
    return [name for name, value in vars(OperationSpec).items() if not name.startswith("_") and callable(value)]


def test_the_base_holds_the_facts_every_kind_has_and_nothing_else():
    assert _base_data() == EVERY_KINDS_FACTS and set(OperationSpec._REQUIRED) == EVERY_KINDS_FACTS
    assert not [name for name in EVERY_KINDS_FACTS if name in vars(OperationSpec)]  # no default: each kind says it
    assert all(name in vars(type(spec)) for spec in SPECS for name in EVERY_KINDS_FACTS)


def test_a_kind_overrides_hooks_with_methods_and_its_own_data_is_its_own():
    """A kind setting a plain value over a hook of the base would make the hook a field again (and its
    callers, who call it, would fail); a kind's own data (not a hook) is named privately or in its module."""
    hooks = set(_hooks()) | {name for name, value in vars(OperationSpec).items() if isinstance(value, property)}
    for spec in SPECS:
        own = {name: value for cls in reversed(type(spec).__mro__[:type(spec).__mro__.index(OperationSpec)])
               for name, value in vars(cls).items() if not name.startswith("_")}
        assert not [name for name, value in own.items() if name in hooks and not callable(value)], spec.name
        assert not set(own) - hooks - EVERY_KINDS_FACTS, spec.name


def test_every_hook_of_the_base_is_some_kinds_and_its_default_is_neutral():
    """No hook is dead (a kind overrides each); the no-op defaults are what a kind without it means."""
    overridden = {name: [spec.name for spec in SPECS if getattr(type(spec), name) is not getattr(OperationSpec, name)]
                  for name in _hooks()}
    assert [name for name, kinds in overridden.items() if not kinds] == []
    assert {name for name, kinds in overridden.items() if len(kinds) == 1} >= {"scopes_partitions", "due", "cadence"}


def test_a_trait_is_one_answer_that_several_kinds_share():
    """A trait (a base a kind lists: RewritesData, NeedsGc...) says yes to one hook; one kind alone saying yes
    does so in its own class, so a trait has at least two kinds."""
    traits = [cls for cls in OperationSpec.__subclasses__() if cls.__module__ == OperationSpec.__module__]
    assert {cls.__name__ for cls in traits} >= {"RewritesData", "NeedsGc", "HoldsForWriters"}
    for trait in traits:
        says = [name for name in vars(trait) if not name.startswith("_")]
        assert len(says) == 1 and says[0] in _hooks(), trait
        assert len([spec for spec in SPECS if isinstance(spec, trait)]) >= 2, trait
    assert [spec.name for spec in SPECS if spec.needs_gc()] == ["EXPIRE_SNAPSHOTS", "ORPHAN_CLEANUP"]


# A hook read without its call is a bound method, always true: ``if op.spec.needs_gc:`` would hold for every kind.
UNCALLED = re.compile(r"\bspec\.(" + "|".join(_hooks()) + r")\b(?!\()")


def test_no_caller_reads_a_hook_without_calling_it():
    found = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}" for path in sorted(ROOT.rglob("*.py"))
             for number, line in enumerate(path.read_text().splitlines(), 1)
             if UNCALLED.search(line) and "type(self)" not in line]
    assert found == []
    assert UNCALLED.search("if not op.spec.checks_rows:") and not UNCALLED.search("op.spec.checks_rows()")


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
    assert not (tidy.rewrites_data() or tidy.needs_gc() or tidy.checks_rows() or tidy.floe_native()
                or tidy.holds_for_writers() or tidy.scopes_partitions() or tidy.applies_ref_retention()
                or tidy.reclaims_orphans() or tidy.location_fields() or tidy.withheld_fields())
    assert not (tidy.defaults() or tidy.ignored() or tidy.policy_only_fields() or tidy.loader().nested)
    assert not tidy.has_own_condition and tidy.due(None, None) is None and tidy.byte_estimate(None, None) is None
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


def test_a_kind_with_a_due_condition_of_its_own_must_say_when_it_runs():
    class Drifting(OperationSpec):
        name, policy_key, procedure, order = "DRIFTING", "drifting", "drifting", 99
        config_type, docs_row, no_change = type("DriftingConfig", (), {}), "| row |", "nothing"

        def due(self, config, metrics):
            return None

    with pytest.raises(TypeError, match="has a due condition of its own .* must say when it runs"):
        Drifting()
    assert [spec.name for spec in SPECS if spec.has_own_condition] == ["APPLY_TABLE_PROPERTIES"]
