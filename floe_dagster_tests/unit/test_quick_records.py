"""core/basics/quick_records: a frozen record made by quick_init's __init__ is the record the generated one makes;
kept_on and kept_property make a value once per record and leave its equality, hash and asdict alone."""

from __future__ import annotations

import dataclasses
import pickle
from dataclasses import dataclass, field

import pytest

from floe_dagster.core.policies.conditions import ConditionCheck, ConditionResult
from floe_dagster.core.facts.health_assessment import HealthIssue, IssueType, Severity
from floe_dagster.core.basics.quick_records import kept_on, quick_init
from floe_dagster.core.schedules.schedule_due import Due


@dataclass(frozen=True)
class _Plain:
    a: int
    b: str = "b"
    c: tuple = ()
    d: list = field(default_factory=list)


_Quick = quick_init(dataclass(frozen=True)(type("_Quick", (), {
    "__annotations__": dict(_Plain.__annotations__), "b": "b", "c": (), "d": field(default_factory=list)})))


@pytest.mark.parametrize("args, kwargs", [((1,), {}), ((1, "x"), {"d": [2]}), ((), {"a": 3, "c": (4,)})])
def test_the_quick_init_takes_the_generated_ones_arguments_and_fills_the_same_fields(args, kwargs):
    plain, quick = _Plain(*args, **kwargs), _Quick(*args, **kwargs)
    assert dataclasses.asdict(quick) == dataclasses.asdict(plain)
    assert quick == _Quick(*args, **kwargs) and hash(quick.c) == hash(plain.c)
    assert _Quick(1).d is not _Quick(1).d  # a fresh default from the factory each time
    with pytest.raises(dataclasses.FrozenInstanceError):
        quick.a = 2  # type: ignore[misc]
    with pytest.raises(TypeError):
        _Quick()  # type: ignore[call-arg]  # a field without a default is still required
    with pytest.raises(TypeError):
        _Quick(1, "x", (), [], "too many")  # type: ignore[call-arg]


def test_the_planners_records_stay_equal_hashable_and_picklable():
    due = Due(True, "interval", None, None, True, None, "never run", None)
    assert due == Due(due=True, trigger="interval", slot=None, next_eligible=None, rule_due=True, blocked=None,
                      told="never run") and due.detail == "never run" and due.slot_key == "interval:first"
    result = ConditionResult(False, blocked_code="conditions_unmet", unmet=(ConditionCheck("x", 1.0, 2.0),))
    assert pickle.loads(pickle.dumps(result)) == result and result.forced is False and result.logic == "OR"
    issue = HealthIssue(IssueType.TABLE_EMPTY, Severity.INFO, "empty")
    assert hash(issue) == hash(HealthIssue(IssueType.TABLE_EMPTY, Severity.INFO, "empty", None, None))


def test_a_record_whose_construction_does_more_is_refused():
    @dataclass(frozen=True)
    class Checked:
        a: int

        def __post_init__(self) -> None:
            assert self.a > 0

    with pytest.raises(TypeError, match="__post_init__"):
        quick_init(Checked)

    @dataclass
    class Mutable:
        a: int

    with pytest.raises(TypeError, match="not a frozen dataclass"):
        quick_init(Mutable)


def test_kept_on_makes_a_value_once_per_record_even_a_false_or_zero_one_and_leaves_the_record_equal():
    calls: list[tuple] = []

    def make(*args: object) -> object:
        calls.append(args)
        return args[0]

    first, second = Due(True, "interval", None, None, True, None, "never run"), \
        Due(True, "interval", None, None, True, None, "never run")
    assert kept_on(first, "_flag", make, False) is False and kept_on(first, "_flag", make, True) is False
    assert kept_on(first, "_count", make, 0) == 0 and kept_on(first, "_count", make, 5) == 0
    assert calls == [(False,), (0,)]  # neither made again: only None is "not kept yet"
    assert kept_on(second, "_flag", make, True) is True  # kept per record, not per class
    # What is kept is not a field: the two records differ in it and are still equal, with one hash.
    assert first == second and hash(first) == hash(second) and {first, second} == {first}


def test_a_metrics_records_sorted_sizes_are_kept_and_its_equality_ignores_them():
    from floe_dagster.core.facts.measurements import TableMetrics

    record = {"qualified_name": "c.n.t", "metadata_location": "file:///w/m.json", "tier": "full", "collected_at_ms": 0}
    sized = TableMetrics(**record, data_file_sizes=(30, 10, 20), data_file_count=3, total_data_bytes=60)
    unsized = TableMetrics(**record)
    assert (sized.min_file_bytes, sized.max_file_bytes, sized.small_file_count(25), sized.large_file_count(15)) == \
        (10, 30, 2, 2)
    assert sized._sorted_sizes is sized._sorted_sizes  # made once
    assert unsized.small_file_count(25) is None and unsized.min_file_bytes is None
    # The table cache writes and reads the record as JSON: what is kept stays out of it.
    assert TableMetrics.from_json(sized.to_json()) == sized and "_sorted_sizes" not in sized.to_json()
