"""The gate stage's memo (core/plan/gate_memo.py): a decision kept from the last tick and reused is the decision a
fresh tick makes, field by field as users read it, tick after tick, with a clock that crosses interval ends, cron
slots, windows, allowed days, backoffs, minimum intervals and the critical force, and with tables that change
between ticks. Pure: the clock is injected."""

from __future__ import annotations

import dataclasses
import random
from datetime import datetime, timedelta, timezone

import pytest

from floe_dagster.core.facts.measurements import TableMetrics
from floe_dagster.core.operations import ALL_OPERATIONS
from floe_dagster.core.plan import gate_memo
from floe_dagster.core.plan.planner import Plan, PlanInput, SchedulerSettings, plan
from floe_dagster.core.policies.policy import parse_policies_text
from floe_dagster.core.runs.history import OperationHistory
from floe_dagster.core.basics.tables import TableName

UTC = timezone.utc
START = datetime(2026, 11, 20, 21, 50, tzinfo=UTC)  # a Friday evening: windows open, days change within the ticks
MIB = 1024 * 1024

POLICIES = """
- name: thresholds
  tablePattern: "lake.*.*"
  rewriteDataFiles: {}
  rewriteDataFilesSchedule: {interval: PT1H}
  expireSnapshots: {}
  expireSnapshotsSchedule: {cronExpression: "15 * * * *"}
  orphanCleanup: {}
  orphanCleanupSchedule: {interval: PT6H}
  rewriteManifests: {}
  rewriteManifestsSchedule: {interval: PT2H, sla: {maxAge: PT3H}}
  computeStatistics: {}
  computeStatisticsSchedule: {interval: P1D}
  tableProperties: {write.metadata.previous-versions-max: 20}
  tablePropertiesSchedule: {}
  triggerConditions: {smallFilePercentageAbove: 20, snapshotCountAbove: 20, minIntervalMinutes: 30}
- name: critical
  tablePattern: "lake.gold.*"
  priority: 10
  rewriteDataFiles: {}
  rewriteDataFilesSchedule: {interval: PT30M}
  expireSnapshots: {}
  expireSnapshotsSchedule: {cronExpression: "*/20 * * * *", timezone: Europe/Berlin}
  rewritePositionDeleteFiles: {}
  rewritePositionDeleteFilesSchedule: {}
  rewriteManifests: {}
  rewriteManifestsSchedule: {interval: PT1H, quietFor: PT10M}
  triggerConditions: {criticalPipeline: true, criticalPipelineMaxDelayMinutes: 90, minIntervalMinutes: 15}
- name: nightly
  tablePattern: "lake.night.*"
  priority: 5
  rewriteDataFiles: {}
  rewriteDataFilesSchedule: {cronExpression: "30 2 * * *", windowStart: "22:00", windowEnd: "06:00", enforceWindowEnd: true}
  orphanCleanup: {}
  orphanCleanupSchedule: {interval: P1D, allowedDays: [SATURDAY, SUNDAY]}
  expireSnapshots: {}
  expireSnapshotsSchedule: {interval: PT12H, enabled: false}
  triggerConditions: {snapshotAgeAboveDays: 3}
- name: shadow
  tablePattern: "lake.shadow.*"
  priority: 5
  mode: shadow
  rewriteDataFiles: {}
  rewriteDataFilesSchedule: {interval: PT45M}
  expireSnapshots: {}
  expireSnapshotsSchedule: {cronExpression: "5 */2 * * *"}
"""
# Clock steps between ticks (a repeated 0: the same clock twice), crossing slots, windows, midnight and days.
STEPS = (0, 0, 20, 7 * 60, 13 * 60, 0, 29 * 60, 3600, 2 * 3600 - 60, 3 * 3600, 6 * 3600, 11 * 3600, 86_400, 0, 1)


def tables() -> list[TableName]:
    return [TableName("lake", (ns,), f"t{i:02d}") for ns in ("gold", "night", "sales", "shadow") for i in range(12)]


def metrics(t: TableName, rng: random.Random, now: datetime, version: int = 1) -> TableMetrics:
    now_ms = int(now.timestamp() * 1000)
    sizes = tuple(rng.choice((rng.randint(100_000, 4 * MIB), 120 * MIB)) for _ in range(rng.randint(3, 30)))
    return TableMetrics(
        qualified_name=t.qualified, metadata_location=f"file:///w/{t.qualified}/metadata/{version:05d}.metadata.json",
        tier="full", collected_at_ms=now_ms, data_file_count=len(sizes), total_data_bytes=sum(sizes),
        record_count=len(sizes) * 100, data_file_sizes=sizes, delete_file_count=0, snapshot_count=rng.randint(1, 40),
        oldest_snapshot_ms=now_ms - rng.randint(1, 5) * 86_400_000, newest_snapshot_ms=now_ms - rng.randint(0, 9_000_000),
        manifest_count=3, manifest_total_bytes=10_000, partition_count=1, max_files_per_partition=len(sizes),
        current_snapshot_id=rng.randint(1, 2**40), properties={"gc.enabled": "false"} if rng.random() < 0.1 else {},
        data_file_groups=(("[]", sizes, ()),),
    )


def history(rng: random.Random, now: datetime, snapshot: int | None) -> OperationHistory:
    kind, start = rng.random(), now - timedelta(minutes=rng.randint(1, 900))
    if kind < 0.25:
        return OperationHistory()
    if kind < 0.55:
        return OperationHistory(last_run_start=start, last_run_succeeded=True, last_success_start=start, runs=5)
    if kind < 0.75:
        return OperationHistory(last_run_start=start, last_run_succeeded=False, last_success_start=start - timedelta(
            hours=3), last_failure_at=start, consecutive_failures=rng.randint(1, 5), runs=9, failures=4)
    if kind < 0.85:
        return OperationHistory(last_run_start=start, last_run_succeeded=True, last_success_start=start,
                                consecutive_conflicts=rng.randint(1, 3), last_conflict_at=now - timedelta(minutes=3))
    return OperationHistory(last_run_start=start, last_run_succeeded=True, last_success_start=start,
                            consecutive_zero_change=rng.randint(4, 9), last_snapshot_after=snapshot, runs=12)


def lakehouse(seed: int) -> PlanInput:
    rng = random.Random(seed)
    listed = tables()
    records = {t: metrics(t, rng, START) for t in listed}
    histories = {(t.qualified, op): history(rng, START, records[t].current_snapshot_id)
                 for t in listed for op in ALL_OPERATIONS}
    return PlanInput(now=START, catalog_tables=listed[:-1], loaded_tables=frozenset(listed[1:]),
                     policies=parse_policies_text(POLICIES, "test"), limits=SchedulerSettings(max_run_requests_per_tick=4),
                     metrics=records, history=histories, queued_runs=1, estimate_bytes=lambda *args: 1_000)


def changed(data: PlanInput, rng: random.Random, now: datetime) -> PlanInput:
    """A few tables changed since the last tick: a new record, a success, a run in flight, a ledger attempt."""
    records, histories = dict(data.metrics), dict(data.history)
    in_flight, attempts = set(data.in_flight), dict(data.last_attempts)
    for t in rng.sample(sorted(records, key=lambda t: t.qualified), 3):
        records[t] = metrics(t, rng, now, version=rng.randint(2, 99))
        op = rng.choice(ALL_OPERATIONS)
        histories[(t.qualified, op)] = OperationHistory(last_run_start=now, last_run_succeeded=True,
                                                        last_success_start=now, runs=7)
        in_flight.add((t.qualified, rng.choice(ALL_OPERATIONS)))
    for d in rng.sample(_runs(data), min(2, len(_runs(data)))):
        attempts[(d.table.qualified, d.operation, d.slot)] = 0
    return dataclasses.replace(data, metrics=records, history=histories, in_flight=frozenset(in_flight),
                               last_attempts=attempts, busy_tables=frozenset(q for q, _ in list(in_flight)[:1]))


def _runs(data: PlanInput) -> list:
    """The run decisions the memo keeps."""
    return [d for entry in gate_memo.MEMO.tables.values() for d in entry.decisions if d.decision == "run"]


def read(result: Plan) -> list:
    """Every field of every decision as users read it, the notes and the plan's JSON."""
    found = []
    for d in result.decisions:
        fields = {f.name: repr(getattr(d, f.name)) for f in dataclasses.fields(d) if f.name not in ("why",)}
        found.append((fields, d.reasons, d.estimated_bytes, d.conditions, d.item_key, d.held_back, d.to_json(),
                      d.sla.to_json() if d.sla else None, d.quiet.detail if d.quiet else None))
    return [found, result.notes, result.to_json()]


def fresh(data: PlanInput) -> Plan:
    """The plan with nothing kept: the memo put aside, then put back."""
    context, kept = gate_memo.MEMO.context, gate_memo.MEMO.tables
    gate_memo.forget()
    try:
        return plan(data)
    finally:
        gate_memo.MEMO.context, gate_memo.MEMO.tables = context, kept


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_reused_decision_is_the_decision_a_fresh_tick_makes(seed):
    gate_memo.forget()
    rng = random.Random(seed * 101)
    data, now, reused = lakehouse(seed), START, 0
    previous: set[int] = set()
    for tick, step in enumerate(STEPS):
        now += timedelta(seconds=step)
        if tick in (4, 9, 12):
            data = changed(data, rng, now)
        # A new policy set each tick, as the sensor loads it: equal policies keep the memo.
        data = dataclasses.replace(data, now=now, policies=parse_policies_text(POLICIES, "test"))
        result = plan(data)
        assert read(result) == read(fresh(data)), f"tick {tick} at {now.isoformat()}"
        reused += sum(id(d) in previous for d in result.decisions)
        previous = {id(d) for d in result.decisions}
    assert reused > 100  # the memo was read: the same decisions, as objects, tick after tick


def test_a_change_of_policies_or_settings_forgets_every_table():
    gate_memo.forget()
    data = lakehouse(5)
    plan(data)
    assert gate_memo.MEMO.tables
    kept = gate_memo.MEMO.tables
    other = dataclasses.replace(data, limits=SchedulerSettings(failure_backoff_threshold=1, max_run_requests_per_tick=4))
    assert gate_memo.begin(other) == {} and gate_memo.MEMO.tables is not kept
    assert read(plan(other)) == read(fresh(other))
    stricter = POLICIES.replace("minIntervalMinutes: 30", "minIntervalMinutes: 600")
    changed_policies = dataclasses.replace(data, policies=parse_policies_text(stricter, "test"))
    assert read(plan(changed_policies)) == read(fresh(changed_policies))
    same = dataclasses.replace(changed_policies, policies=parse_policies_text(stricter, "test"))
    assert gate_memo.begin(same) is gate_memo.MEMO.tables and gate_memo.MEMO.tables  # equal policies: kept


def test_a_clock_that_goes_back_reuses_nothing():
    gate_memo.forget()
    data = lakehouse(7)
    plan(dataclasses.replace(data, now=START + timedelta(hours=5)))
    earlier = dataclasses.replace(data, now=START)
    assert read(plan(earlier)) == read(fresh(earlier))


def test_a_table_with_writers_is_never_kept():
    # Its writers' runs and first writes are read anew each tick: nothing of it is compared, so nothing is kept.
    data = lakehouse(9)
    table = sorted(data.metrics, key=lambda t: t.qualified)[0]
    ops = data.policies.effective_policy(table).configured_operations()
    args = (table, True, True, ops, table.qualified, frozenset(), gate_memo.table_histories(data, table.qualified))
    assert gate_memo.table_inputs(data, *args) is not None
    with_writer = dataclasses.replace(data, writers={table.qualified: ("a writer",)})
    assert gate_memo.table_inputs(with_writer, *args) is None


def test_a_ledger_attempt_at_the_same_clock_makes_the_next_attempt():
    # Nothing else changed and the clock is the same: the table's kept decisions are reused whole, unless the
    # ledger now holds an attempt of a kept run's slot (another launcher admitted it): then it is its next attempt.
    gate_memo.forget()
    data = lakehouse(11)
    plan(data)
    kept = _runs(data)[0]
    assert kept.attempt == 0
    attempted = dataclasses.replace(data, last_attempts={(kept.table.qualified, kept.operation, kept.slot): 0})
    result = plan(attempted)
    again = next(d for d in result.decisions if (d.table, d.operation) == (kept.table, kept.operation))
    assert again.attempt == 1 and read(result) == read(fresh(attempted))
