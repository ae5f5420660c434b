"""Issue 35, item 6: a capped rewrite of a table partitioned after the fact by a time field (``days(at)``,
no identity field to set the older spec's files apart), run after run against a model of Iceberg's
planner: the backlog drains in at most ceil(table / cap) + 2 runs, each run's charge is within 25 % of
what the model rewrites, and no run takes a file an earlier run of the backlog wrote. The model applies
the run's ``where`` (an older file's column metrics span every day, so a day range scans all of them),
Iceberg's file rules with the run's options and ``max-files-to-rewrite`` over the groups in either order
(Iceberg's is a hash order). Pure: no Spark; the planner's clock is given."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone

import pytest

from floe_dagster.core.basics.tables import TableName
from floe_dagster.core.facts.measurements import TableMetrics
from floe_dagster.core.operations import Operation
from floe_dagster.core.plan.planner import PlanInput, SchedulerSettings, plan
from floe_dagster.core.policies.policy import parse_policies_text
from floe_dagster.core.rewrites.estimates import estimate_rewrite_data_files
from floe_dagster.core.rewrites.estimates import partition_group_indexes
from floe_dagster.core.rewrites.partition_scope import Backlog, PartitionSelection, plan_scope
from floe_dagster.core.rewrites.rewrite_rules import RewriteRules
from floe_dagster.core.runs.history import OperationHistory
from floe_dagster.spark.partition_predicates import partition_predicate

KB = 1024
RDF = Operation.REWRITE_DATA_FILES
AT_DAY = (2, "at", "day", "timestamptz")
FIRST_DAY = 20000


@dataclass
class _File:
    spec: int
    day: int | None  # None: an older spec's file, rows of every day
    size: int
    run: int | None = None  # the run of the backlog that wrote it


class _Lake:
    """Files of spec 0 (unpartitioned) and spec 1 (``day(at)``), rewritten as Iceberg would."""

    def __init__(self, files: list[_File], days: int, rules: RewriteRules, older_group_first: bool):
        self.files, self.days, self.rules, self.older_group_first = files, days, rules, older_group_first

    def metrics(self) -> TableMetrics:
        groups: dict[str, list[int]] = {}
        for f in self.files:
            groups.setdefault("0:[]" if f.spec == 0 else f"[{f.day}]", []).append(f.size)
        return TableMetrics(qualified_name="demo.bench.evolved", metadata_location="m", tier="full",
                            collected_at_ms=0, data_file_count=len(self.files),
                            total_data_bytes=sum(f.size for f in self.files), record_count=1,
                            data_file_groups=tuple((k, tuple(v), ()) for k, v in groups.items()),
                            partition_spec_id=1, partition_specs=((0, ()), (1, (AT_DAY,))), current_snapshot_id=1)

    def rewrite(self, scope: PartitionSelection, run: int) -> tuple[int, int]:
        """(bytes rewritten, files taken that an earlier run wrote)."""
        rules = replace(self.rules, min_file_size_bytes=scope.min_file_size or self.rules.min_file_size_bytes,
                        min_input_files=scope.min_input_files or self.rules.min_input_files)
        days = {int(k.strip("[]")) for k in scope.partitions} if scope.partitions else None
        scanned = [f for f in self.files if days is None or f.spec == 0 or f.day in days]
        older = [f for f in scanned if f.spec == 0]
        by_day = [[f for f in scanned if f.spec == 1 and f.day == d] for d in range(FIRST_DAY, FIRST_DAY + self.days)]
        groups = [older, *by_day] if self.older_group_first else [*by_day, older]
        left, taken = scope.max_files, []
        for group in groups:
            for indexes in partition_group_indexes([f.size for f in group], [False] * len(group), rules):
                kept = [group[i] for i in indexes][: left if left is not None else None]
                taken.extend(kept)
                left = None if left is None else left - len(kept)
        for f in taken:
            self.files.remove(f)
        new = [f for f in taken if f.spec == 1]
        for day in {f.day for f in new}:
            self.files.append(_File(1, day, sum(f.size for f in new if f.day == day), run))
        spread = sum(f.size for f in taken if f.spec == 0)
        if spread:  # an older file's rows land in every day
            self.files.extend(_File(1, d, spread // self.days, run) for d in range(FIRST_DAY, FIRST_DAY + self.days))
        return sum(f.size for f in taken), sum(f.run is not None for f in taken)


def _drain(lake: _Lake, cap: int, limit: int = 40) -> list[dict]:
    runs, older_first = [], False
    for run in range(limit):
        scope = plan_scope(lake.metrics(), lake.rules, cap, older_first=older_first)
        if scope is None:
            break
        rewritten, retaken = lake.rewrite(scope, run)
        runs.append({"charged": scope.bytes, "rewritten": rewritten, "retaken": retaken, "scope": scope})
        if scope.backlog_bytes == 0:
            break
        older_first = scope.min_input_files is not None  # the ledger's Backlog.older_first
    return runs


def _bench_shape(old_files: int, old_size: int, days: int, per_day: int, new_size: int) -> list[_File]:
    return ([_File(0, None, old_size) for _ in range(old_files)]
            + [_File(1, d, new_size) for d in range(FIRST_DAY, FIRST_DAY + days) for _ in range(per_day)])


@pytest.mark.parametrize("older_group_first", [True, False])
@pytest.mark.parametrize("shape", [
    (40, 625 * KB, 60, 4, 104 * KB),  # benchmark 10's evolved bench.big at 0.05 GB: 40 old files, 4 a day
    (90, 24 * KB, 23, 2, 12 * KB),  # the 90 old files and 46 new, the old ones written whole
])
def test_a_capped_backlog_on_a_table_partitioned_by_day_after_the_fact_stays_within_the_bound(
        shape, older_group_first):
    rules = RewriteRules.sized(512 * 1024 * KB, min_input_files=2)
    lake = _Lake(_bench_shape(*shape), shape[2], rules, older_group_first)
    table = sum(f.size for f in lake.files)
    cap = table // 8
    runs = _drain(lake, cap)
    assert runs and runs[-1]["scope"].backlog_bytes == 0
    assert len(runs) <= -(-table // cap) + 2, [(r["charged"], r["rewritten"]) for r in runs]
    for r in runs:
        assert r["charged"] <= cap and abs(r["charged"] - r["rewritten"]) <= 0.25 * r["rewritten"], r
        assert r["retaken"] == 0, r
    assert not [f for f in lake.files if f.spec == 0]  # the older spec drained
    # First the day partitions, whole, with the older files left out by their size; then the older files alone.
    stages = [r["scope"].min_input_files is not None for r in runs]
    assert stages == sorted(stages) and stages[-1]
    first = runs[0]["scope"]
    assert first.partitions and first.min_file_size == shape[1] and first.max_files is None
    assert partition_predicate(first.fields, first.partitions).startswith("`at` >= TIMESTAMP")
    assert "no file of an older spec is a candidate" in first.describe()
    last = runs[-1]["scope"]
    assert last.partitions == () and "the files of older partition specs alone (min-input-files" in last.describe()


def test_the_older_files_go_alone_when_no_day_partition_is_worth_a_run_without_them():
    """Old and new files of the same size: leaving every old file out by size leaves the day files out
    too, so the older files go first, alone, and what their runs write is not taken again."""
    rules = RewriteRules.sized(512 * 1024 * KB, min_input_files=2)
    lake = _Lake(_bench_shape(90, 12 * KB, 23, 2, 12 * KB), 23, rules, older_group_first=False)
    cap = sum(f.size for f in lake.files) // 8
    runs = _drain(lake, cap)
    assert all(r["scope"].min_input_files is not None and r["retaken"] == 0 for r in runs)
    assert all(abs(r["charged"] - r["rewritten"]) <= 0.25 * r["rewritten"] for r in runs)
    assert not [f for f in lake.files if f.spec == 0] and len(runs) <= 90 * 12 * KB // cap + 2


def test_the_stages_round_trip_through_the_ledger():
    for chosen in (PartitionSelection(("[20000]",), 10, 3, 2, 20, 12, min_file_size=5),
                   PartitionSelection((), 10, 3, 1, 20, 12, fields=(), max_files=3, min_input_files=4)):
        assert PartitionSelection.from_json(chosen.to_json()) == chosen


def test_a_backlog_at_the_older_files_stays_there_through_the_planner():
    """The ledger's backlog says its newest run took the older files alone: the next tick continues with
    them, though the day partitions now hold files that run wrote (two each, a run's worth); without it
    (a fresh slot), the planner would compact those partitions first."""
    now = datetime(2026, 11, 23, 12, 0, tzinfo=timezone.utc)
    files = [_File(0, None, 625 * KB) for _ in range(20)]
    files += [_File(1, d, size) for d in range(FIRST_DAY, FIRST_DAY + 10) for size in (416 * KB, 93 * KB)]
    record = _Lake(files, 10, RewriteRules.sized(512 * 1024 * KB), True).metrics()
    table = TableName("demo", ("bench",), "evolved")
    record = replace(record, qualified_name=table.qualified)
    policies = parse_policies_text(json.dumps([{
        "name": "p", "tablePattern": "demo.bench.*", "rewriteDataFiles": {"maxBytesPerRun": 4 * 1024 * KB,
                                                                          "minInputFiles": 2},
        "rewriteDataFilesSchedule": {"cronExpression": "0 0 * * *"}}]))
    slot, admitted = "2026-11-23T00:00:00+00:00", now - timedelta(minutes=30)
    history = {(table.qualified, RDF): OperationHistory(last_success_start=admitted + timedelta(minutes=1),
                                                       last_run_start=admitted + timedelta(minutes=1))}

    def decision(older_first: bool, continued: bool):
        backlogs = {(table.qualified, RDF): Backlog(slot, admitted, 1, 8 * 1024 * KB, False, older_first=older_first)}
        data = PlanInput(now=now, catalog_tables=(table,), loaded_tables=frozenset({table}), policies=policies,
                         limits=SchedulerSettings(), metrics={table: record},
                         history=history if continued else {}, last_attempts={(table.qualified, RDF, slot): 0},
                         backlogs=backlogs if continued else {},
                         estimate_bytes=lambda t, op, m, config: estimate_rewrite_data_files(m, config).bytes)
        [made] = [d for d in plan(data).decisions if d.operation is RDF]
        return made

    held = decision(older_first=True, continued=True)
    assert (held.decision, held.trigger) == ("run", "backlog") and held.scope.older_specs_alone
    assert held.scope.min_input_files == 3 and held.scope.partitions == () and held.scope.max_files == 6
    assert held.estimated_bytes == held.scope.bytes == 6 * 625 * KB
    fresh = decision(older_first=False, continued=False)
    assert fresh.scope.partitions and fresh.scope.min_file_size == 625 * KB and not fresh.scope.older_specs_alone
