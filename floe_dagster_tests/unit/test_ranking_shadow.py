"""The static and the learned ranking side by side (core/value/ranking_shadow.py): the static order is the
planner's own (checked against ``plan()``), the learned one multiplies the debt score by each item's
factor, and one compute budget spent in each order tells what each would admit."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone

from floe_dagster.core.runs.history import OperationHistory
from floe_dagster.core.facts.measurements import TableMetrics
from floe_dagster.core.operations import Operation
from floe_dagster.core.plan.planner import PlanInput, SchedulerSettings, plan
from floe_dagster.core.policies.policy import parse_policies_text
from floe_dagster.core.value.ranking_shadow import (
    admit_within_compute,
    both_orders,
    compare_rankings,
    learned_rank_key,
    static_rank_key,
)
from floe_dagster.core.basics.tables import TableName

NOW = datetime(2026, 11, 26, 12, 0, tzinfo=timezone.utc)
RDF, EXP = Operation.REWRITE_DATA_FILES, Operation.EXPIRE_SNAPSHOTS


@dataclass(frozen=True)
class Item:
    table: TableName
    operation: Operation
    debt_score: float
    policy_priority: int = 0
    schedule_priority: int = 0


def item(name: str, debt: float, op: Operation = RDF, **more) -> Item:
    return Item(TableName("demo", ("sales",), name), op, debt, **more)


def names(items) -> list[str]:
    return [f"{i.table.name}:{i.operation.value[:3]}" for i in items]


def test_the_static_order_is_the_planners():
    # Tables of several debt scores (days since their last write), two policies of different
    # priorities, two operations each: plan() ranks its admitted candidates; the key gives the same.
    policy = {"rewriteDataFiles": {}, "rewriteDataFilesSchedule": {"interval": "PT1H", "priority": 3},
              "expireSnapshots": {}, "expireSnapshotsSchedule": {"interval": "PT1H"}}
    policies = parse_policies_text(json.dumps([{"name": "low", "tablePattern": "demo.sales.*", **policy},
                                               {"name": "high", "tablePattern": "demo.sales.t1*", "priority": 5,
                                                **policy}]))
    tables = [TableName("demo", ("sales",), f"t{i:02d}") for i in range(30)]
    metrics = {t: TableMetrics(qualified_name=t.qualified, metadata_location=f"file:///w/{t.name}/v1.json",
                               tier="summary", collected_at_ms=0, data_file_count=10, total_data_bytes=10_000,
                               snapshot_count=3,
                               newest_snapshot_ms=int((NOW - timedelta(days=i % 7)).timestamp() * 1000),
                               current_snapshot_id=1) for i, t in enumerate(tables)}
    result = plan(PlanInput(now=NOW, catalog_tables=tables, loaded_tables=frozenset(tables), policies=policies,
                            limits=SchedulerSettings(max_run_requests_per_tick=1000), metrics=metrics,
                            history={(t.qualified, EXP): OperationHistory(consecutive_failures=i % 3, runs=3,
                                                                           failures=i % 3)
                                     for i, t in enumerate(tables)}))
    candidates = [d for d in result.decisions if d.decision == "run" or d.reasons[0].startswith("in_flight")]
    assert len(candidates) == 60 and len({d.debt_score for d in candidates}) > 5
    first_per_table = []
    for decision in sorted(candidates, key=static_rank_key):
        if decision.table not in {d.table for d in first_per_table}:
            first_per_table.append(decision)
    assert [(d.table, d.operation) for d in first_per_table] == [(d.table, d.operation) for d in result.admitted]
    orders = both_orders(candidates, lambda d: 1.0)  # a factor of 1 everywhere: the learned order is the static one
    assert orders.learned == orders.static == tuple(sorted(candidates, key=static_rank_key))


def test_the_learned_order_multiplies_the_debt_by_the_factor():
    items = [item("a", 100), item("b", 100), item("c", 50), item("d", 20)]
    factors = {"a": 0.1, "b": 1.0, "c": 4.0, "d": 1.0}
    orders = both_orders(items, lambda i: factors[i.table.name])
    assert names(orders.static) == ["a:REW", "b:REW", "c:REW", "d:REW"]
    assert names(orders.learned) == ["c:REW", "b:REW", "d:REW", "a:REW"]  # 200, 100, 20, 10
    assert orders.moves(lambda i: i.table.name) == {"c": (3, 1), "b": (2, 2), "d": (4, 3), "a": (1, 4)}
    # Equal learned scores break ties as the planner does: priorities, then the table's name.
    tied = [item("z", 10, policy_priority=1), item("y", 20), item("x", 5, policy_priority=1)]
    assert sorted(tied, key=lambda i: learned_rank_key(i, 1.0 if i.debt_score != 20 else 0.5)) == [tied[0], tied[1],
                                                                                                    tied[2]]


def test_the_budget_is_spent_in_order_one_operation_per_table():
    order = [item("a", 9), item("a", 8, EXP), item("b", 7), item("c", 6), item("d", 5)]
    cost = {"a": 40, "b": 70, "c": 30, "d": 30}
    admitted = admit_within_compute(order, 100, lambda i: cost[i.table.name])
    assert names(admitted) == ["a:REW", "c:REW", "d:REW"]  # b does not fit after a; the smaller ones behind do
    assert names(admit_within_compute(order, 100, lambda i: cost[i.table.name], used_s=80)) == []
    assert names(admit_within_compute(order, None, lambda i: cost[i.table.name])) == ["a:REW", "b:REW", "c:REW",
                                                                                       "d:REW"]
    # A first item larger than the whole budget runs alone, into an unused budget only.
    huge = [item("a", 9), item("b", 8)]
    assert names(admit_within_compute(huge, 10, lambda i: 500)) == ["a:REW"]
    assert names(admit_within_compute(huge, 10, lambda i: 500, used_s=1)) == []


def test_the_comparison_tells_what_each_order_would_admit():
    items = [item("big", 100), item("tiny", 50), item("mid", 50)]
    factor = {"big": 0.2, "tiny": 5.0, "mid": 1.0}
    cost = {"big": 90, "tiny": 10, "mid": 40}
    benefit = {"big": 100, "tiny": 500, "mid": 80}
    comparison = compare_rankings(items, lambda i: factor[i.table.name], lambda i: cost[i.table.name],
                                  lambda i: benefit[i.table.name], budget_s=100)
    assert names(comparison.static_admitted) == ["big:REW", "tiny:REW"]
    assert names(comparison.learned_admitted) == ["tiny:REW", "mid:REW"]
    assert names(comparison.only_learned) == ["mid:REW"] and names(comparison.only_static) == ["big:REW"]
    assert (comparison.static_compute_s, comparison.learned_compute_s) == (100, 50)
    assert comparison.summary() == ("ranking shadow: static admits 2, learned 2 (1 only by learned, 1 only by static);"
                                    " expected file opens saved per compute hour: static 21,600, learned 41,760")
    assert comparison.to_json(lambda i: i.table.name)["onlyLearned"] == ["mid"]
    empty = compare_rankings([], lambda i: 1, lambda i: 1, lambda i: 1, budget_s=None)
    assert empty.summary().endswith("static -, learned -")


def test_a_factor_that_is_no_number_counts_as_one():
    items = [replace(item(f"t{i:02d}", (i * 37) % 11), policy_priority=i % 2) for i in range(40)]
    weird = {1: float("inf"), 2: -3.0, 3: float("nan")}
    orders = both_orders(items, lambda i: weird.get(int(i.table.name[1:]) % 5, 1.0))
    assert orders.learned == orders.static  # every factor is 1 or counts as 1
    owing = [item(f"t{i:02d}", 1 + i) for i in range(10)]  # every debt above 0
    zero = both_orders(owing, lambda i: 0.0 if i.table.name == "t05" else 1.0)
    assert zero.learned[-1].table.name == "t05" and sorted(names(zero.learned)) == sorted(names(owing))
