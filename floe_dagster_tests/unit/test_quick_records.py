"""core/basics/quick_records.quick_init: a frozen record made by the quicker __init__ is the record the generated one makes."""

from __future__ import annotations

import dataclasses
import pickle
from dataclasses import dataclass, field

import pytest

from floe_dagster.core.policies.conditions import ConditionCheck, ConditionResult
from floe_dagster.core.facts.health_assessment import HealthIssue, IssueType, Severity
from floe_dagster.core.basics.quick_records import quick_init
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
