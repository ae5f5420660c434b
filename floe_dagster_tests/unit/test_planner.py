"""The planner (docs/automation.md): decisions, gates and their reason codes, due, triggers, failure
backoff, no-change throttling, budgets and ranking; mirrors Floe's scheduler tests
(floe-inventory.md section 8). Pure and fast: ``now`` is injected; no Dagster, Spark or PyIceberg."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from floe_dagster.core.plan.batches import ONE_TABLE_PER_RUN, BatchSettings
from floe_dagster.core.plan.fair_shares import FAIR_SHARES_OFF, FairShareSettings
from floe_dagster.core.runs.history import OperationHistory
from floe_dagster.core.facts.measurements import TableMetrics
from floe_dagster.core.operations import ALL_OPERATIONS, Operation
from floe_dagster.core.plan.planner import (
    Decision,
    Plan,
    PlanInput,
    SchedulerSettings,
    backoff_delay,
    plan,
)
from floe_dagster.core.policies.policy import PolicySet, parse_policies_text
from floe_dagster.core.basics.tables import TableName
from floe_dagster.core.facts.table_properties import DELETE_AFTER_COMMIT

UTC = timezone.utc
NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)  # a Monday, noon
RDF = Operation.REWRITE_DATA_FILES
EXP = Operation.EXPIRE_SNAPSHOTS
ORPH = Operation.ORPHAN_CLEANUP
MAN = Operation.REWRITE_MANIFESTS
RPDF = Operation.REWRITE_POSITION_DELETE_FILES
ROWS = Operation.EXPIRE_ROWS
# The configs of the kinds that need more than {}: a declared property the helper's tables (:func:`metrics`)
# do not set, so it has drift to apply; a row retention's column and age.
MINIMAL_CONFIGS: dict[Operation, dict[str, Any]] = {
    Operation.APPLY_TABLE_PROPERTIES: {DELETE_AFTER_COMMIT: True},
    ROWS: {"column": "at", "maxAge": "P30D"},
}

GATE_CODES = (
    "schedule_disabled", "gc_disabled", "table_missing", "not_loaded", "window_closed", "day_not_allowed",
    "not_due", "failure_backoff", "zero_change_throttle", "conditions_unmet", "min_interval", "no_health",
    "in_flight", "budget_tables", "budget_operations", "budget_bytes", "tick_cap", "budget_share",
)


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def table(name: str, namespace: str = "sales", catalog: str = "demo") -> TableName:
    return TableName(catalog, (namespace,), name)


A, B, C = table("a"), table("b"), table("c")


def policy(
    name: str = "p",
    pattern: str = "demo.sales.*",
    schedules: dict[Operation, dict[str, Any] | None] | None = None,
    *,
    priority: int = 0,
    conditions: dict[str, Any] | None = None,
    thresholds: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A raw policy: each operation in ``schedules`` is configured ({}, or its MINIMAL_CONFIGS) with that
    schedule (None: no schedule). Default: rewrite data files every 6 hours."""
    raw: dict[str, Any] = {"name": name, "tablePattern": pattern, "priority": priority}
    for op, schedule in ({RDF: {"interval": "PT6H"}} if schedules is None else schedules).items():
        raw[op.policy_key] = MINIMAL_CONFIGS.get(op, {})
        if schedule is not None:
            raw[op.schedule_key] = schedule
    if conditions is not None:
        raw["triggerConditions"] = conditions
    if thresholds is not None:
        raw["healthThresholds"] = thresholds
    return raw


def policies(*raws: dict[str, Any]) -> PolicySet:
    """Through the real parser (JSON is YAML)."""
    return parse_policies_text(json.dumps(list(raws)))


def metrics(t: TableMetrics | TableName, **changes: Any) -> TableMetrics:
    """A healthy summary-tier record (no health issue, so a debt score of 0 at NOW)."""
    values: dict[str, Any] = dict(
        qualified_name=t.qualified, metadata_location=f"file:///w/{t.name}/metadata/v1.json", tier="summary",
        collected_at_ms=ms(NOW), data_file_count=10, total_data_bytes=10_000, record_count=1_000,
        snapshot_count=3, newest_snapshot_ms=ms(NOW), current_snapshot_id=100,
    )
    values.update(changes)
    return TableMetrics(**values)


def run(
    policy_set: PolicySet,
    tables: tuple[TableName, ...] = (A,),
    *,
    now: datetime = NOW,
    catalog: tuple[TableName, ...] | None = None,
    loaded: tuple[TableName, ...] | None = None,
    limits: SchedulerSettings | None = None,
    health: dict[TableName, TableMetrics | None] | None = None,
    history: dict[tuple[str, Operation], OperationHistory] | None = None,
    in_flight: tuple[tuple[str, Operation], ...] = (),
    last_attempts: dict[tuple[str, Operation, str], int] | None = None,
    bytes_last_hour: int = 0,
    queued_runs: int = 0,
    estimate: Any = None,
) -> Plan:
    catalog = tuple(tables) if catalog is None else catalog
    loaded = tuple(tables) if loaded is None else loaded
    found = {t: metrics(t) for t in {*catalog, *loaded}}
    for t, record in (health or {}).items():
        if record is None:
            found.pop(t, None)
        else:
            found[t] = record
    return plan(PlanInput(
        now=now, catalog_tables=list(catalog), loaded_tables=frozenset(loaded), policies=policy_set,
        limits=limits or SchedulerSettings(), metrics=found, history=history or {}, in_flight=frozenset(in_flight),
        last_attempts=last_attempts or {}, bytes_last_hour=bytes_last_hour, queued_runs=queued_runs,
        estimate_bytes=estimate,
    ))


def decision(result: Plan, t: TableName, op: Operation = RDF) -> Decision:
    found = [d for d in result.decisions if d.table == t and d.operation == op]
    assert len(found) == 1, f"expected one decision for {t} {op.value}, got {found}"
    return found[0]


def code(d: Decision) -> str:
    """The code a skip's first reason starts with (``code`` or ``code: detail``)."""
    assert d.decision == "skip", f"{d.table} {d.operation.value} was admitted: {d.reasons}"
    first = d.reasons[0]
    head = first.split(":")[0]
    assert first == head or first.startswith(head + ": ")
    return head


def hist(**values: Any) -> OperationHistory:
    return OperationHistory(**values)


def admitted(result: Plan) -> list[tuple[str, str, int]]:
    return [(d.table.name, d.operation.value, d.rank) for d in result.admitted]


# -- decisions ------------------------------------------------------------------------------------


def test_no_policies_no_decisions():
    result = run(parse_policies_text(""), (A, B))
    assert result.decisions == [] and result.notes == [] and result.at == NOW


def test_only_tables_matching_a_policy_get_decisions():
    other = table("a", namespace="hr")
    result = run(policies(policy(pattern="demo.sales.*")), (A, other))
    assert [(d.table, d.operation) for d in result.decisions] == [(A, RDF)]


def test_one_decision_per_configured_operation_and_one_operation_per_table_a_tick():
    # Two runs of one table admitted in one tick would meet at its table lock and one would skip it
    # (a wasted run start, and a successful run tagged with a failure): the first in Floe's order runs,
    # the others wait in_flight, naming it, and come one a tick after it.
    all_ops = {op: {"interval": "PT6H"} for op in ALL_OPERATIONS}
    result = run(policies(policy(schedules=all_ops)))
    assert [(d.operation, d.decision, d.rank) for d in result.decisions] == [
        (op, "run" if op is RDF else "skip", 1 if op is RDF else None) for op in ALL_OPERATIONS]
    for d in result.decisions[1:]:
        assert d.reasons[0] == ("in_flight: REWRITE_DATA_FILES of this table was admitted this tick "
                                "(one operation per table at a time)")
        assert d.reasons[1].startswith("interval: ")  # why it was due is kept
    then = run(policies(policy(schedules=all_ops)), in_flight=((A.qualified, RDF),),
               history={(A.qualified, RDF): hist(last_success_start=NOW)})
    assert [d.operation for d in then.admitted] == [EXP]


def test_one_operation_per_table_leaves_other_tables_alone():
    schedules = {RDF: {"interval": "PT1H"}, EXP: {"interval": "PT1H"}}
    result = run(policies(policy(schedules=schedules)), (A, B))
    assert admitted(result) == [("a", "REWRITE_DATA_FILES", 1), ("b", "REWRITE_DATA_FILES", 2)]
    assert [code(d) for d in result.decisions if d.decision == "skip"] == ["in_flight", "in_flight"]


def test_an_operation_a_budget_refuses_leaves_the_table_to_the_next_one():
    # Only admitted work holds the table: a rewrite over the byte budget lets expire run this tick.
    schedules = {RDF: {"interval": "PT1H"}, EXP: {"interval": "PT1H"}}
    result = run(policies(policy(schedules=schedules)), limits=SchedulerSettings(max_bytes_per_hour=500),
                 estimate=sized({A: 300}), bytes_last_hour=300)
    assert code(decision(result, A, RDF)) == "budget_bytes"
    assert admitted(result) == [("a", "EXPIRE_SNAPSHOTS", 1)]


def test_a_due_operation_runs_and_a_not_due_one_does_not():
    schedules = {RDF: {"interval": "PT6H"}, EXP: {"interval": "PT6H"}}
    history = {(A.qualified, EXP): hist(last_success_start=NOW - timedelta(hours=1), last_run_succeeded=True)}
    result = run(policies(policy(schedules=schedules)), history=history)
    rdf, exp = decision(result, A, RDF), decision(result, A, EXP)
    assert (rdf.decision, rdf.trigger, rdf.rank, rdf.next_eligible) == ("run", "interval", 1, NOW)
    assert rdf.reasons == ("interval: never run (interval PT6H)",)
    assert (code(exp), exp.next_eligible, exp.rank) == ("not_due", NOW + timedelta(hours=5), None)


# -- gates ----------------------------------------------------------------------------------------


def test_schedule_disabled_for_a_disabled_or_missing_schedule():
    result = run(policies(policy(schedules={RDF: {"interval": "PT6H", "enabled": False}, EXP: None})))
    rdf, exp = decision(result, A, RDF), decision(result, A, EXP)
    assert rdf.reasons == ("schedule_disabled: rewriteDataFilesSchedule is missing or disabled",)
    assert exp.reasons == ("schedule_disabled: expireSnapshotsSchedule is missing or disabled",)
    assert (rdf.enabled, rdf.next_eligible, rdf.trigger, rdf.rank) == (False, None, None, None)


@pytest.mark.parametrize("value", ["false", "FALSE", "False"])
def test_gc_disabled_only_for_expire_and_orphan_cleanup(value):
    schedules = {op: {"interval": "PT6H"} for op in ALL_OPERATIONS}
    result = run(policies(policy(schedules=schedules)), health={A: metrics(A, properties={"gc.enabled": value})})
    assert code(decision(result, A, EXP)) == "gc_disabled"
    assert code(decision(result, A, ORPH)) == "gc_disabled"
    assert decision(result, A, EXP).reasons == (
        "gc_disabled: the table sets gc.enabled=false: its catalog (e.g. Nessie) manages garbage collection, and "
        "gc.enabled=false forbids table maintenance to delete files, so EXPIRE_SNAPSHOTS never runs on it",)
    assert [d.operation for d in result.admitted] == [RDF]  # one operation per table a tick
    # every other kind (EXPIRE_ROWS too: a DELETE removes no file) waits for the rewrite only
    assert [code(d) for d in result.decisions if d.rank is None] == ["gc_disabled", "gc_disabled", "in_flight",
                                                                     "in_flight", "in_flight", "in_flight", "in_flight"]


def test_gc_enabled_true_does_not_block():
    result = run(policies(policy(schedules={EXP: {"interval": "PT6H"}})),
                 health={A: metrics(A, properties={"gc.enabled": "true"})})
    assert decision(result, A, EXP).decision == "run"


@pytest.mark.parametrize("value", [" False ", "no", "0", "true "])
def test_gc_disabled_reads_the_property_as_iceberg_does(value):
    # Iceberg's Boolean.parseBoolean: anything but "true" (any case) turns GC off, and the run checks
    # the same rule, so the planner never admits what the run (or Iceberg) would refuse.
    result = run(policies(policy(schedules={EXP: {"interval": "PT6H"}})),
                 health={A: metrics(A, properties={"gc.enabled": value})})
    assert code(decision(result, A, EXP)) == "gc_disabled"


def test_gc_enabled_in_any_case_does_not_block():
    result = run(policies(policy(schedules={EXP: {"interval": "PT6H"}})),
                 health={A: metrics(A, properties={"gc.enabled": "TRUE"})})
    assert decision(result, A, EXP).decision == "run"


def test_schedule_disabled_comes_before_gc_disabled_and_gc_disabled_before_table_missing():
    schedules = {RDF: {"interval": "PT6H"}, EXP: {"interval": "PT6H"}, ORPH: {"interval": "PT6H", "enabled": False}}
    result = run(policies(policy(schedules=schedules)), catalog=(), loaded=(A,),
                 health={A: metrics(A, properties={"gc.enabled": "false"})})
    assert code(decision(result, A, ORPH)) == "schedule_disabled"
    assert code(decision(result, A, EXP)) == "gc_disabled"
    assert code(decision(result, A, RDF)) == "table_missing"


def test_table_missing_when_loaded_but_dropped_from_the_catalog():
    closed = {RDF: {"interval": "PT6H", "windowStart": "01:00", "windowEnd": "02:00"}}  # also closed now
    result = run(policies(policy(schedules=closed)), catalog=(B,), loaded=(A, B))
    d = decision(result, A, RDF)
    assert d.reasons == ("table_missing: the table is no longer in the catalog",)
    assert (d.next_eligible, d.rank) == (None, None)
    assert code(decision(result, B, RDF)) == "window_closed"


def test_not_loaded_when_in_the_catalog_but_not_yet_an_asset():
    result = run(policies(policy()), catalog=(A, B), loaded=(B,))
    assert code(decision(result, A, RDF)) == "not_loaded"
    assert decision(result, A, RDF).reasons[0].startswith("not_loaded: in the catalog but not yet an asset")
    assert decision(result, B, RDF).decision == "run"


def test_window_closed_defers_to_the_next_opening():
    schedules = {RDF: {"interval": "PT6H", "windowStart": "01:00", "windowEnd": "05:00"}}
    d = decision(run(policies(policy(schedules=schedules))), A)
    assert code(d) == "window_closed"
    assert d.next_eligible == utc(2026, 11, 24, 1, 0)


def test_window_closed_comes_before_not_due():
    schedules = {RDF: {"interval": "P2D", "windowStart": "01:00", "windowEnd": "05:00"}}
    history = {(A.qualified, RDF): hist(last_success_start=NOW - timedelta(hours=1))}
    d = decision(run(policies(policy(schedules=schedules)), history=history), A)
    assert code(d) == "window_closed"
    # due again at 11:00 on the 25th, and the window next opens at 01:00 on the 26th
    assert d.next_eligible == utc(2026, 11, 26, 1, 0)


def test_day_not_allowed():
    schedules = {RDF: {"interval": "PT6H", "allowedDays": ["TUESDAY", "THU"]}}
    d = decision(run(policies(policy(schedules=schedules))), A)
    assert code(d) == "day_not_allowed"
    assert d.next_eligible == utc(2026, 11, 24, 0, 0)
    allowed_today = {RDF: {"interval": "PT6H", "allowedDays": "MON"}}
    assert decision(run(policies(policy(schedules=allowed_today))), A).decision == "run"


def test_window_closed_is_reported_before_day_not_allowed():
    schedules = {RDF: {"interval": "PT6H", "windowStart": "01:00", "windowEnd": "05:00", "allowedDays": ["SUN"]}}
    d = decision(run(policies(policy(schedules=schedules))), A)
    assert code(d) == "window_closed"
    assert d.next_eligible == utc(2026, 11, 29, 1, 0)  # Sunday 01:00


def test_enforce_window_end_cuts_the_maximum_runtime():
    cut = {RDF: {"interval": "PT6H", "windowStart": "10:00", "windowEnd": "14:00", "timeout": 4,
                 "enforceWindowEnd": True}}
    assert decision(run(policies(policy(schedules=cut))), A).max_runtime_s == 2 * 3600
    uncut = {RDF: {"interval": "PT6H", "windowStart": "10:00", "windowEnd": "14:00", "timeout": 4}}
    assert decision(run(policies(policy(schedules=uncut))), A).max_runtime_s == 4 * 3600


# -- due: cron, interval, condition-only ------------------------------------------------------------

CRON_2AM = {RDF: {"cronExpression": "0 2 * * *"}}
SLOT = utc(2026, 11, 23, 2, 0)


def test_cron_slot_already_run_by_a_success_at_the_slot_is_not_due():
    history = {(A.qualified, RDF): hist(last_success_start=SLOT, last_run_succeeded=True)}
    d = decision(run(policies(policy(schedules=CRON_2AM)), history=history), A)
    assert code(d) == "not_due"
    assert d.next_eligible == utc(2026, 11, 24, 2, 0)


def test_cron_slot_run_by_a_manual_success_after_it_is_not_due():
    history = {(A.qualified, RDF): hist(last_success_start=SLOT + timedelta(hours=3), last_run_trigger="manual")}
    assert code(decision(run(policies(policy(schedules=CRON_2AM)), history=history), A)) == "not_due"


def test_cron_slot_not_run_is_due_with_a_slot_item_key():
    history = {(A.qualified, RDF): hist(last_success_start=SLOT - timedelta(minutes=1))}
    d = decision(run(policies(policy(schedules=CRON_2AM)), history=history), A)
    assert (d.decision, d.trigger, d.slot, d.attempt, d.rank) == ("run", "cron", SLOT.isoformat(), 0, 1)
    assert d.item_key == "demo.sales.a|REWRITE_DATA_FILES|2026-11-23T02:00:00+00:00|attempt-0"
    assert d.reasons[0].startswith("cron: cron slot 2026-11-23T02:00:00+00:00")


def test_missed_cron_slots_coalesce_into_the_latest():
    history = {(A.qualified, RDF): hist(last_success_start=utc(2026, 11, 1, 2, 0))}
    result = run(policies(policy(schedules=CRON_2AM)), history=history)
    assert [(d.slot, d.decision) for d in result.decisions] == [(SLOT.isoformat(), "run")]


def test_a_failed_run_does_not_use_up_its_cron_slot_and_the_attempt_number_grows():
    history = {(A.qualified, RDF): hist(
        last_run_start=SLOT, last_run_succeeded=False, last_failure_at=SLOT + timedelta(minutes=10),
        consecutive_failures=1, last_success_start=SLOT - timedelta(days=1), runs=2, failures=1)}
    last_attempts = {(A.qualified, RDF, SLOT.isoformat()): 2}
    d = decision(run(policies(policy(schedules=CRON_2AM)), history=history, last_attempts=last_attempts), A)
    assert (d.decision, d.trigger, d.attempt) == ("run", "cron", 3)
    assert d.item_key == "demo.sales.a|REWRITE_DATA_FILES|2026-11-23T02:00:00+00:00|attempt-3"


def test_attempts_of_another_slot_do_not_count():
    last_attempts = {(A.qualified, RDF, utc(2026, 11, 22, 2, 0).isoformat()): 4}
    d = decision(run(policies(policy(schedules=CRON_2AM)), last_attempts=last_attempts), A)
    assert d.item_key.endswith("|2026-11-23T02:00:00+00:00|attempt-0")


@pytest.mark.parametrize("since, due", [(timedelta(hours=6), True), (timedelta(hours=5, minutes=59), False)])
def test_interval_due_when_now_reaches_last_success_plus_interval(since, due):
    history = {(A.qualified, RDF): hist(last_success_start=NOW - since)}
    d = decision(run(policies(policy()), history=history), A)
    if due:
        assert (d.decision, d.trigger, d.slot) == ("run", "interval", "interval:" + NOW.isoformat())
    else:
        assert code(d) == "not_due" and d.next_eligible == NOW + timedelta(minutes=1)


def test_never_run_interval_slot_key():
    d = decision(run(policies(policy())), A)
    assert d.item_key == "demo.sales.a|REWRITE_DATA_FILES|interval:first|attempt-0"


def test_condition_only_schedule_is_due_every_tick():
    history = {(A.qualified, RDF): hist(last_success_start=NOW - timedelta(minutes=1))}
    d = decision(run(policies(policy(schedules={RDF: {}})), history=history), A)
    assert (d.decision, d.trigger) == ("run", "condition")
    assert d.slot == "condition:" + (NOW - timedelta(minutes=1)).isoformat()


# -- failure backoff --------------------------------------------------------------------------------

BACKOFFS = [  # n → delay with the defaults (threshold 3, 6 hours)
    (1, timedelta(minutes=5)), (2, timedelta(minutes=10)), (3, timedelta(hours=6)), (4, timedelta(hours=12)),
    (5, timedelta(hours=24)), (6, timedelta(hours=48)), (7, timedelta(hours=96)), (8, timedelta(days=7)),
    (9, timedelta(days=7)), (40, timedelta(days=7)),
]


@pytest.mark.parametrize("n, delay", BACKOFFS)
def test_backoff_delay(n, delay):
    assert backoff_delay(n, 3, 6) == delay


def test_backoff_delay_edges():
    assert backoff_delay(0, 3, 6) == timedelta(0)
    assert backoff_delay(-1, 3, 6) == timedelta(0)
    assert backoff_delay(1, 1, 2) == timedelta(hours=2)  # from the threshold at once
    assert backoff_delay(3, 1, 2) == timedelta(hours=8)
    assert backoff_delay(2, 2, 0.5) == timedelta(minutes=30)
    assert backoff_delay(4, 10, 6) == timedelta(minutes=40)  # 5 min × 2^3, below the threshold
    assert backoff_delay(10_000, 3, 6) == timedelta(days=7)
    assert backoff_delay(10_000, 10_001, 6) == timedelta(days=7)


@given(st.integers(0, 60), st.integers(1, 10), st.floats(0.01, 200))
def test_backoff_delay_grows_and_is_capped(n, threshold, hours):
    now, later = backoff_delay(n, threshold, hours), backoff_delay(n + 1, threshold, hours)
    assert timedelta(0) <= now <= timedelta(days=7) and later <= timedelta(days=7)
    if n >= threshold:
        assert later >= now


@pytest.mark.parametrize("n, delay", BACKOFFS[:8])
def test_failure_backoff_gate(n, delay):
    failed = NOW - delay
    just_before = NOW - delay + timedelta(seconds=1)
    schedules = {RDF: {"interval": "PT1H"}}
    for last_failure, expected in ((failed, "run"), (just_before, "skip")):
        history = {(A.qualified, RDF): hist(
            last_success_start=NOW - timedelta(days=30), last_failure_at=last_failure, consecutive_failures=n,
            last_run_succeeded=False, runs=n + 1, failures=n)}
        d = decision(run(policies(policy(schedules=schedules)), history=history), A)
        assert d.decision == expected, (n, last_failure)
        if expected == "skip":
            assert code(d) == "failure_backoff"
            assert d.reasons[0].startswith(f"failure_backoff: {n} consecutive failure(s); retry at ")
            assert d.next_eligible == d.backoff_until == last_failure + delay


def test_failure_backoff_uses_the_configured_threshold_and_hours():
    limits = SchedulerSettings(failure_backoff_threshold=2, failure_backoff_hours=1)
    history = {(A.qualified, RDF): hist(last_failure_at=NOW - timedelta(minutes=30), consecutive_failures=3)}
    d = decision(run(policies(policy()), history=history, limits=limits), A)
    assert code(d) == "failure_backoff" and d.next_eligible == NOW + timedelta(minutes=90)  # 1 h × 2^(3−2)


def test_a_success_resets_the_backoff():
    history = {(A.qualified, RDF): hist(
        last_failure_at=NOW - timedelta(minutes=1), consecutive_failures=0, failures=5, runs=7,
        last_success_start=NOW - timedelta(hours=7), last_run_succeeded=True)}
    assert decision(run(policies(policy()), history=history), A).decision == "run"


def test_not_due_comes_before_failure_backoff():
    history = {(A.qualified, RDF): hist(
        last_success_start=NOW - timedelta(hours=1), last_failure_at=NOW - timedelta(minutes=1),
        consecutive_failures=5)}
    assert code(decision(run(policies(policy()), history=history), A)) == "not_due"


def test_backoff_is_per_operation():
    schedules = {RDF: {"interval": "PT1H"}, EXP: {"interval": "PT1H"}}
    history = {(A.qualified, RDF): hist(last_failure_at=NOW - timedelta(minutes=1), consecutive_failures=1)}
    result = run(policies(policy(schedules=schedules)), history=history)
    assert code(decision(result, A, RDF)) == "failure_backoff"
    assert decision(result, A, EXP).decision == "run"


# -- zero-change throttling ---------------------------------------------------------------------------


def zero_change_history(last: datetime, runs: int = 5, left: int | None = 100, op: Operation = RDF):
    return {(A.qualified, op): hist(last_success_start=last, last_run_succeeded=True, consecutive_zero_change=runs,
                                    last_snapshot_after=left, runs=runs)}


def test_zero_change_throttle_stretches_the_interval_to_the_minimum():
    # PT1H × 1.5 = 90 min < 6 h, so 6 h after the last success
    history = zero_change_history(NOW - timedelta(hours=2))
    d = decision(run(policies(policy(schedules={RDF: {"interval": "PT1H"}})), history=history), A)
    assert code(d) == "zero_change_throttle"
    assert d.reasons[0].startswith("zero_change_throttle: 5 runs changed nothing; next at ")
    assert d.next_eligible == d.throttled_until == NOW + timedelta(hours=4)


def test_zero_change_throttle_below_the_threshold_does_not_apply():
    history = zero_change_history(NOW - timedelta(hours=2), runs=4)
    assert decision(run(policies(policy(schedules={RDF: {"interval": "PT1H"}})), history=history), A).decision == "run"


@pytest.mark.parametrize("since, expected", [(timedelta(hours=36), "run"),
                                             (timedelta(hours=35, minutes=59), "zero_change_throttle")])
def test_zero_change_throttle_multiplies_a_long_interval(since, expected):
    history = zero_change_history(NOW - since)
    d = decision(run(policies(policy(schedules={RDF: {"interval": "P1D"}})), history=history), A)
    assert (d.decision if expected == "run" else code(d)) == expected
    if expected != "run":
        assert d.next_eligible == NOW - since + timedelta(hours=36)


def test_zero_change_throttle_settings():
    limits = SchedulerSettings(zero_change_threshold=2, zero_change_frequency_reduction_percent=100,
                             zero_change_min_interval_hours=1)
    history = zero_change_history(NOW - timedelta(hours=3), runs=2)
    d = decision(run(policies(policy(schedules={RDF: {"interval": "PT2H"}})), history=history, limits=limits), A)
    assert code(d) == "zero_change_throttle" and d.next_eligible == NOW + timedelta(hours=1)  # 2 h × 2
    off = SchedulerSettings(zero_change_threshold=0)
    assert decision(run(policies(policy(schedules={RDF: {"interval": "PT2H"}})), history=history,
                        limits=off), A).decision == "run"


def test_zero_change_throttle_of_a_cron_rule_uses_its_slot_gap():
    # daily cron: gap 24 h, × 1.5 = 36 h after yesterday's 02:00 run, i.e. today 14:00
    limits = SchedulerSettings(zero_change_min_interval_hours=1)
    history = zero_change_history(utc(2026, 11, 22, 2, 0))
    d = decision(run(policies(policy(schedules=CRON_2AM)), history=history, limits=limits), A)
    assert code(d) == "zero_change_throttle" and d.next_eligible == utc(2026, 11, 23, 14, 0)
    later = decision(run(policies(policy(schedules=CRON_2AM)), history=history, limits=limits,
                         now=utc(2026, 11, 23, 14, 0)), A)
    assert (later.decision, later.trigger, later.slot) == ("run", "cron", SLOT.isoformat())


def test_zero_change_throttle_of_an_hourly_cron_uses_the_minimum():
    history = zero_change_history(NOW - timedelta(hours=1))
    d = decision(run(policies(policy(schedules={RDF: {"cronExpression": "0 * * * *"}})), history=history), A)
    assert code(d) == "zero_change_throttle" and d.next_eligible == NOW + timedelta(hours=5)


def test_zero_change_throttle_ends_on_a_snapshot_newer_than_our_last_run_left():
    history = zero_change_history(NOW - timedelta(hours=2), left=100)
    d = decision(run(policies(policy(schedules={RDF: {"interval": "PT1H"}})), history=history,
                     health={A: metrics(A, current_snapshot_id=101)}), A)
    assert (d.decision, d.trigger) == ("run", "interval")


def test_zero_change_throttle_ignores_commits_of_our_own_runs():
    # our rewrite_manifests committed 101: not new data for the throttled rewrite_data_files
    history = {
        **zero_change_history(NOW - timedelta(hours=2), left=100),
        (A.qualified, MAN): hist(last_success_start=NOW - timedelta(hours=1), last_snapshot_after=101),
    }
    schedules = {RDF: {"interval": "PT1H"}, MAN: {"interval": "P7D"}}
    result = run(policies(policy(schedules=schedules)), history=history,
                 health={A: metrics(A, current_snapshot_id=101)})
    assert code(decision(result, A, RDF)) == "zero_change_throttle"


def test_failure_backoff_comes_before_zero_change_throttle_and_throttle_before_conditions():
    throttled = zero_change_history(NOW - timedelta(hours=2))
    key = (A.qualified, RDF)
    both = {key: replace(throttled[key], consecutive_failures=1, last_failure_at=NOW - timedelta(minutes=1))}
    schedules = {RDF: {"interval": "PT1H"}}
    assert code(decision(run(policies(policy(schedules=schedules)), history=both), A)) == "failure_backoff"
    # the critical force (last success 2 h ago ≥ 60 min) does not lift the throttle
    forced = policy(schedules=schedules, conditions={"criticalPipeline": True, "criticalPipelineMaxDelayMinutes": 60,
                                                     "snapshotCountAbove": 1000})
    assert code(decision(run(policies(forced), history=throttled), A)) == "zero_change_throttle"


# -- trigger conditions -------------------------------------------------------------------------------


def with_conditions(conditions: dict[str, Any], schedules=None, **kw) -> PolicySet:
    return policies(policy(schedules=schedules or {RDF: {"interval": "PT1M"}}, conditions=conditions, **kw))


def test_conditions_unmet_and_met():
    unmet = decision(run(with_conditions({"snapshotCountAbove": 50}), health={A: metrics(A, snapshot_count=49)}), A)
    assert code(unmet) == "conditions_unmet"
    assert unmet.reasons[0] == "conditions_unmet: conditions not met (OR): snapshotCountAbove 49 < 50"
    assert unmet.next_eligible == NOW + timedelta(seconds=60)
    met = decision(run(with_conditions({"snapshotCountAbove": 50}), health={A: metrics(A, snapshot_count=50)}), A)
    assert (met.decision, met.trigger) == ("run", "interval")  # measured ≥ threshold meets it


def test_or_and_logic():
    conditions = {"snapshotCountAbove": 50, "deleteFileCountAbove": 5}
    health = {A: metrics(A, snapshot_count=60, delete_file_count=1)}
    assert decision(run(with_conditions(conditions), health=health), A).decision == "run"
    d = decision(run(with_conditions({**conditions, "triggerLogic": "AND"}), health=health), A)
    assert code(d) == "conditions_unmet"


def test_conditions_apply_to_every_operation_of_the_policy():
    schedules = {RDF: {"interval": "PT1M"}, EXP: {"interval": "PT1M"}}
    result = run(with_conditions({"snapshotCountAbove": 50}, schedules), health={A: metrics(A, snapshot_count=1)})
    assert [code(d) for d in result.decisions] == ["conditions_unmet", "conditions_unmet"]


def test_min_interval_and_per_operation_override():
    schedules = {RDF: {"interval": "PT1M"}, EXP: {"interval": "PT1M"}}
    conditions = {"minIntervalMinutes": 60, "perOperationMinIntervalMinutes": {"REWRITE_DATA_FILES": 5}}
    last = NOW - timedelta(minutes=10)
    history = {(A.qualified, op): hist(last_success_start=last) for op in (RDF, EXP)}
    result = run(with_conditions(conditions, schedules), history=history)
    exp = decision(result, A, EXP)
    assert code(exp) == "min_interval" and exp.next_eligible == last + timedelta(minutes=60)
    assert decision(result, A, RDF).decision == "run"


def test_min_interval_is_reported_before_unmet_thresholds():
    # conditions.py evaluates in Floe's order (min interval first), as docs/automation.md's gate table lists them
    history = {(A.qualified, RDF): hist(last_success_start=NOW - timedelta(minutes=10))}
    d = decision(run(with_conditions({"minIntervalMinutes": 60, "snapshotCountAbove": 50}), history=history), A)
    assert code(d) == "min_interval"


def test_no_health_when_thresholds_are_set_but_not_collected():
    d = decision(run(with_conditions({"snapshotCountAbove": 50}), health={A: None}), A)
    assert code(d) == "no_health" and d.next_eligible == NOW + timedelta(seconds=60)
    # a full-tier threshold needs the full tier
    summary = decision(run(with_conditions({"smallFileCountAbove": 2}), health={A: metrics(A)}), A)
    assert code(summary) == "no_health"
    full = metrics(A, tier="full", data_file_sizes=(1, 2, 3) + (10**9,) * 7)
    assert decision(run(with_conditions({"smallFileCountAbove": 2}), health={A: full}), A).decision == "run"


def test_no_health_without_thresholds_still_runs():
    assert decision(run(policies(policy()), health={A: None}), A).decision == "run"
    assert decision(run(with_conditions({"minIntervalMinutes": 5}), health={A: None}), A).decision == "run"


CRITICAL = {"criticalPipeline": True, "criticalPipelineMaxDelayMinutes": 120, "minIntervalMinutes": 600,
            "snapshotCountAbove": 1000}


def test_critical_pipeline_force_bypasses_conditions_and_min_interval():
    history = {(A.qualified, RDF): hist(last_success_start=NOW - timedelta(hours=2))}
    d = decision(run(with_conditions(CRITICAL, {RDF: {"interval": "PT1H"}}), history=history), A)
    assert (d.decision, d.trigger, d.rank) == ("run", "critical", 1)
    assert d.conditions["forced"] is True
    assert d.to_json()["trigger"] == "critical"


def test_critical_pipeline_not_yet_late():
    history = {(A.qualified, RDF): hist(last_success_start=NOW - timedelta(minutes=119))}
    d = decision(run(with_conditions(CRITICAL, {RDF: {"interval": "PT1H"}}), history=history), A)
    assert code(d) == "min_interval" and d.next_eligible == NOW - timedelta(minutes=119) + timedelta(hours=10)


def test_critical_pipeline_never_run_is_not_forced():
    d = decision(run(with_conditions(CRITICAL, {RDF: {"interval": "PT1H"}})), A)
    assert code(d) == "conditions_unmet"


def test_critical_pipeline_does_not_bypass_not_due_backoff_or_in_flight():
    late = NOW - timedelta(hours=3)
    not_due = {(A.qualified, RDF): hist(last_success_start=late)}
    assert code(decision(run(with_conditions(CRITICAL, {RDF: {"interval": "P1D"}}), history=not_due), A)) == "not_due"
    backoff = {(A.qualified, RDF): hist(last_success_start=late, consecutive_failures=3,
                                        last_failure_at=NOW - timedelta(hours=1))}
    assert code(decision(run(with_conditions(CRITICAL, {RDF: {"interval": "PT1H"}}), history=backoff),
                         A)) == "failure_backoff"
    in_flight = decision(run(with_conditions(CRITICAL, {RDF: {"interval": "PT1H"}}), history=not_due,
                             in_flight=((A.qualified, RDF),)), A)
    assert code(in_flight) == "in_flight"


def test_condition_based_triggering_off_ignores_thresholds_min_intervals_and_the_force():
    off = SchedulerSettings(condition_based_triggering_enabled=False)
    recent = {(A.qualified, RDF): hist(last_success_start=NOW - timedelta(minutes=10))}
    late = {(A.qualified, RDF): hist(last_success_start=NOW - timedelta(hours=3))}
    for history in (recent, late, {}):
        d = decision(run(with_conditions(CRITICAL), history=history, limits=off,
                         health={A: metrics(A, snapshot_count=1)}), A)
        assert (d.decision, d.trigger) == ("run", "interval"), history
    d = decision(run(with_conditions({"snapshotCountAbove": 50}), limits=off, health={A: None}), A)
    assert d.decision == "run"


# -- next eligible ------------------------------------------------------------------------------------

WINDOWED = {RDF: {"interval": "PT1H", "windowStart": "10:00", "windowEnd": "13:00"}}
TOMORROW_10 = utc(2026, 11, 24, 10, 0)


def test_next_eligible_after_backoff_waits_for_the_window():
    history = {(A.qualified, RDF): hist(consecutive_failures=3, last_failure_at=utc(2026, 11, 23, 11, 0))}
    d = decision(run(policies(policy(schedules=WINDOWED)), history=history), A)
    assert code(d) == "failure_backoff"
    assert (d.backoff_until, d.next_eligible) == (utc(2026, 11, 23, 17, 0), TOMORROW_10)
    inside = {(A.qualified, RDF): hist(consecutive_failures=1, last_failure_at=utc(2026, 11, 23, 11, 58))}
    assert decision(run(policies(policy(schedules=WINDOWED)), history=inside), A).next_eligible == \
        utc(2026, 11, 23, 12, 3)


def test_next_eligible_after_throttling_waits_for_the_window():
    history = zero_change_history(utc(2026, 11, 23, 11, 0))
    d = decision(run(policies(policy(schedules=WINDOWED)), history=history), A)
    assert code(d) == "zero_change_throttle"
    assert (d.throttled_until, d.next_eligible) == (utc(2026, 11, 23, 17, 0), TOMORROW_10)


def test_next_eligible_after_the_condition_gate_waits_for_the_window():
    history = {(A.qualified, RDF): hist(last_success_start=utc(2026, 11, 23, 11, 0))}
    gated = policies(policy(schedules=WINDOWED, conditions={"minIntervalMinutes": 120}))
    d = decision(run(gated, history=history), A)
    assert code(d) == "min_interval" and d.next_eligible == TOMORROW_10  # 13:00 is the window's (exclusive) end
    unmet = policies(policy(schedules=WINDOWED, conditions={"snapshotCountAbove": 50}))
    late = decision(run(unmet, now=utc(2026, 11, 23, 12, 59, 30)), A)
    assert code(late) == "conditions_unmet" and late.next_eligible == TOMORROW_10
    early = decision(run(unmet), A)
    assert early.next_eligible == NOW + timedelta(seconds=60)


# -- in flight ---------------------------------------------------------------------------------------


def test_in_flight_blocks_only_that_table_and_operation():
    schedules = {RDF: {"interval": "PT1H"}, EXP: {"interval": "PT1H"}}
    result = run(policies(policy(schedules=schedules)), (A, B), in_flight=((A.qualified, RDF),))
    d = decision(result, A, RDF)
    assert d.reasons == ("in_flight: a run of this table and operation is queued or running",)
    assert d.to_json()["trigger"] is None and d.rank is None
    assert admitted(result) == [("a", "EXPIRE_SNAPSHOTS", 1), ("b", "REWRITE_DATA_FILES", 2)]


def test_conditions_come_before_in_flight():
    d = decision(run(with_conditions({"snapshotCountAbove": 50}), in_flight=((A.qualified, RDF),)), A)
    assert code(d) == "conditions_unmet"


def test_in_flight_items_use_no_budget():
    limits = SchedulerSettings(max_operations_per_poll=1)
    result = run(policies(policy()), (A, B), in_flight=((A.qualified, RDF),), limits=limits)
    assert admitted(result) == [("b", "REWRITE_DATA_FILES", 1)]


# -- budgets ------------------------------------------------------------------------------------------


def test_unlimited_budgets_admit_everything_due():
    assert admitted(run(policies(policy()), (A, B))) == [("a", "REWRITE_DATA_FILES", 1), ("b", "REWRITE_DATA_FILES", 2)]


def test_max_tables_one_admits_one_table():
    result = run(policies(policy()), (A, B), limits=SchedulerSettings(max_tables_per_poll=1))
    assert admitted(result) == [("a", "REWRITE_DATA_FILES", 1)]
    d = decision(result, B)
    assert d.reasons[0] == "budget_tables: max-tables-per-poll 1 reached"
    assert d.reasons[1].startswith("interval: ")  # why it was due is kept
    assert (d.rank, d.to_json()["trigger"], d.next_eligible) == (None, None, NOW)


def test_max_tables_counts_tables_not_operations():
    schedules = {RDF: {"interval": "PT1H"}, EXP: {"interval": "PT1H"}}
    result = run(policies(policy(schedules=schedules)), (A, B), limits=SchedulerSettings(max_tables_per_poll=1))
    assert admitted(result) == [("a", "REWRITE_DATA_FILES", 1)]
    assert code(decision(result, A, EXP)) == "in_flight"  # its table's one operation this tick, not a budget
    assert [code(d) for d in result.decisions if d.table == B] == ["budget_tables", "budget_tables"]


def test_max_operations_one_admits_one_operation():
    schedules = {RDF: {"interval": "PT1H"}, EXP: {"interval": "PT1H"}}
    result = run(policies(policy(schedules=schedules)), (A, B), limits=SchedulerSettings(max_operations_per_poll=1))
    assert admitted(result) == [("a", "REWRITE_DATA_FILES", 1)]
    skipped = [(d.table.name, d.operation, code(d)) for d in result.decisions if d.decision == "skip"]
    assert skipped == [("a", EXP, "in_flight"), ("b", RDF, "budget_operations"), ("b", EXP, "budget_operations")]
    assert decision(result, B).reasons[0] == "budget_operations: max-operations-per-poll 1 reached"


def test_budget_tables_is_reported_before_budget_operations():
    schedules = {RDF: {"interval": "PT1H"}, EXP: {"interval": "PT1H"}}
    limits = SchedulerSettings(max_tables_per_poll=1, max_operations_per_poll=1)
    result = run(policies(policy(schedules=schedules)), (A, B), limits=limits)
    assert [(d.table.name, d.operation, d.decision if d.rank else code(d)) for d in result.decisions] == [
        ("a", RDF, "run"), ("a", EXP, "in_flight"), ("b", RDF, "budget_tables"), ("b", EXP, "budget_tables")]


def sized(nbytes: dict[TableName, int]):
    return lambda t, op, m, config: nbytes[t]


def test_an_item_larger_than_the_byte_budget_is_admitted_alone_into_an_empty_window():
    limits = SchedulerSettings(max_bytes_per_hour=500)
    result = run(policies(policy()), (A, B), limits=limits, estimate=sized({A: 600, B: 10}))
    assert admitted(result) == [("a", "REWRITE_DATA_FILES", 1)]
    assert decision(result, A).estimated_bytes == 600
    assert result.notes == ["demo.sales.a REWRITE_DATA_FILES: estimated 600 bytes exceed the whole hourly "
                            "budget; admitted alone"]
    b = decision(result, B)
    assert b.reasons[0] == "budget_bytes: 600 of 500 bytes used in the last hour"


def test_an_oversized_item_is_refused_when_the_window_already_has_bytes():
    limits = SchedulerSettings(max_bytes_per_hour=500)
    result = run(policies(policy()), limits=limits, estimate=sized({A: 600}), bytes_last_hour=100)
    d = decision(result, A)
    assert d.reasons[0] == "budget_bytes: 100 of 500 bytes used in the last hour"
    assert result.admitted == [] and result.notes == []


@pytest.mark.parametrize("used, admitted_", [(400, False), (301, False), (300, True), (0, True)])
def test_the_byte_window_rolls(used, admitted_):
    # bytes_last_hour is the rolling 60 minutes: as old runs leave the window, work fits again
    limits = SchedulerSettings(max_bytes_per_hour=500)
    d = decision(run(policies(policy()), limits=limits, estimate=sized({A: 200}), bytes_last_hour=used), A)
    assert (d.decision == "run") is admitted_
    if not admitted_:
        assert code(d) == "budget_bytes"


def test_the_byte_budget_applies_to_rewriting_operations_only():
    schedules = {RDF: {"interval": "PT1H"}, EXP: {"interval": "PT1H"}, MAN: {"interval": "PT1H"},
                 RPDF: {"interval": "PT1H"}}
    limits = SchedulerSettings(max_bytes_per_hour=500)
    tables = (A, B, C, table("d"))
    result = run(policies(policy(schedules={op: schedules[op] for op in (RDF, EXP, MAN)})), (A, B),
                 limits=limits, estimate=sized({A: 300, B: 300}), bytes_last_hour=150)
    assert sorted((d.table.name, d.operation.order, d.estimated_bytes) for d in result.decisions) == [
        ("a", 0, 300), ("a", 1, 0), ("a", 3, 0), ("b", 0, 300), ("b", 1, 0), ("b", 3, 0)]
    # a's rewrite fits (450 of 500); b's does not, so b's next operation (expire, no bytes) runs instead
    assert admitted(result) == [("a", "REWRITE_DATA_FILES", 1), ("b", "EXPIRE_SNAPSHOTS", 2)]
    assert decision(result, B, RDF).reasons[0] == "budget_bytes: 450 of 500 bytes used in the last hour"
    one_each = {t: {op: schedules[op]} for t, op in zip(tables, schedules)}
    raws = [policy(f"p{t.name}", t.qualified, schedules=one_each[t]) for t in tables]
    result = run(policies(*raws), tables, limits=limits, estimate=sized(dict.fromkeys(tables, 300)),
                 bytes_last_hour=150)
    assert admitted(result) == [("a", "REWRITE_DATA_FILES", 1), ("b", "EXPIRE_SNAPSHOTS", 2),
                                ("c", "REWRITE_MANIFESTS", 3)]
    assert decision(result, table("d"), RPDF).reasons[0] == "budget_bytes: 450 of 500 bytes used in the last hour"


def test_tick_cap_with_unlimited_budgets():
    tables = (A, B, C)
    result = run(policies(policy()), tables, limits=SchedulerSettings(max_run_requests_per_tick=2))
    assert admitted(result) == [("a", "REWRITE_DATA_FILES", 1), ("b", "REWRITE_DATA_FILES", 2)]
    assert decision(result, C).reasons[0] == (
        "tick_cap: at most 2 run requests this tick (max-run-requests-per-tick 2, queued runs 0/100)")


def test_tick_cap_keeps_queued_runs_under_the_maximum():
    limits = SchedulerSettings(max_queued_runs=10)
    result = run(policies(policy()), (A, B, C), limits=limits, queued_runs=9)
    assert admitted(result) == [("a", "REWRITE_DATA_FILES", 1)]
    assert [code(d) for d in result.decisions if d.decision == "skip"] == ["tick_cap", "tick_cap"]
    full = run(policies(policy()), (A, B), limits=limits, queued_runs=12)
    assert full.admitted == [] and [code(d) for d in full.decisions] == ["tick_cap", "tick_cap"]


def test_no_note_for_an_oversized_item_the_tick_cap_refuses():
    limits = SchedulerSettings(max_bytes_per_hour=500, max_queued_runs=1)
    result = run(policies(policy()), limits=limits, estimate=sized({A: 600}), queued_runs=1)
    assert code(decision(result, A)) == "tick_cap"
    assert result.notes == []


def test_budget_checks_come_before_the_tick_cap():
    limits = SchedulerSettings(max_tables_per_poll=1, max_run_requests_per_tick=1)
    result = run(policies(policy()), (A, B), limits=limits)
    assert code(decision(result, B)) == "budget_tables"


# -- ranking ------------------------------------------------------------------------------------------


def test_the_critical_table_runs_first():
    health = {A: metrics(A), B: metrics(B, snapshot_count=600), C: metrics(C, snapshot_count=150)}
    result = run(policies(policy()), (A, B, C), health=health)
    assert admitted(result) == [("b", "REWRITE_DATA_FILES", 1), ("c", "REWRITE_DATA_FILES", 2),
                                ("a", "REWRITE_DATA_FILES", 3)]
    assert [decision(result, t).debt_score for t in (B, C, A)] == [100, 50, 0]
    only_one = run(policies(policy()), (A, B, C), health=health, limits=SchedulerSettings(max_operations_per_poll=1))
    assert admitted(only_one) == [("b", "REWRITE_DATA_FILES", 1)]


def test_debt_from_failures_ranks_within_a_table():
    schedules = {RDF: {"interval": "PT1H"}, EXP: {"interval": "PT1H"}}
    history = {(A.qualified, EXP): hist(consecutive_failures=1, runs=4, failures=1,
                                        last_failure_at=NOW - timedelta(hours=1))}
    result = run(policies(policy(schedules=schedules)), history=history)
    assert admitted(result) == [("a", "EXPIRE_SNAPSHOTS", 1)]  # then the rewrite, next tick
    assert decision(result, A, RDF).reasons[0].startswith("in_flight: EXPIRE_SNAPSHOTS of this table was admitted")
    assert decision(result, A, EXP).debt_score == 45  # 25 % failure rate + 20 per consecutive failure


def test_policy_priority_breaks_debt_ties():
    result = run(policies(policy("low", "demo.sales.*"), policy("high", "demo.sales.c", priority=5)), (A, B, C))
    assert [d.policy for d in result.admitted] == ["high", "low", "low"]
    assert admitted(result) == [("c", "REWRITE_DATA_FILES", 1), ("a", "REWRITE_DATA_FILES", 2),
                                ("b", "REWRITE_DATA_FILES", 3)]


def test_schedule_priority_breaks_policy_priority_ties():
    schedules = {RDF: {"interval": "PT1H"}, EXP: {"interval": "PT1H", "priority": 9}}
    result = run(policies(policy(schedules=schedules)), (A, B))
    assert admitted(result) == [("a", "EXPIRE_SNAPSHOTS", 1), ("b", "EXPIRE_SNAPSHOTS", 2)]


def test_debt_outranks_priorities():
    health = {A: metrics(A, snapshot_count=150)}
    result = run(policies(policy("low", "demo.sales.*"), policy("high", "demo.sales.c", priority=5)), (A, C),
                 health=health)
    assert admitted(result) == [("a", "REWRITE_DATA_FILES", 1), ("c", "REWRITE_DATA_FILES", 2)]


def test_skips_follow_runs_by_table_then_operation():
    schedules = {RDF: {"interval": "PT1H"}, EXP: {"interval": "PT1H", "enabled": False}}
    result = run(policies(policy(schedules=schedules)), (B, A), in_flight=((B.qualified, RDF),))
    assert [(d.table.name, d.operation, d.rank) for d in result.decisions] == [
        ("a", RDF, 1), ("a", EXP, None), ("b", RDF, None), ("b", EXP, None)]


def test_the_plan_orders_by_qualified_name_where_it_and_the_name_parts_disagree():
    # "demo.a-b.y" comes before "demo.a.x" by name ('-' before '.'), after it by the parts' tuple: equal debt,
    # the name breaks the tie, and the skipped decisions follow the name too.
    ax, aby = TableName("demo", ("a",), "x"), TableName("demo", ("a-b",), "y")
    schedules = {RDF: {"interval": "PT1H"}, EXP: {"interval": "PT1H", "enabled": False}}
    result = run(policies(policy(pattern="demo.*.*", schedules=schedules)), (ax, aby))
    assert [(d.table.qualified, d.operation, d.rank) for d in result.decisions] == [
        ("demo.a-b.y", RDF, 1), ("demo.a.x", RDF, 2), ("demo.a-b.y", EXP, None), ("demo.a.x", EXP, None)]
    capped = run(policies(policy(pattern="demo.*.*", schedules=schedules)), (ax, aby),
                 limits=SchedulerSettings(max_operations_per_poll=1))
    assert [(d.table.qualified, d.operation, d.code if d.decision == "skip" else None) for d in capped.decisions] == [
        ("demo.a-b.y", RDF, None), ("demo.a-b.y", EXP, "schedule_disabled"), ("demo.a.x", RDF, "budget_operations"),
        ("demo.a.x", EXP, "schedule_disabled")]


def test_two_tables_of_one_qualified_name_are_both_planned_in_the_plans_order():
    # A namespace part may hold a dot: ("a.b",) and ("a", "b") share "demo.a.b.t".
    flat, nested = TableName("demo", ("a.b",), "t"), TableName("demo", ("a", "b"), "t")
    schedules = {RDF: {"interval": "PT1H"}, EXP: {"interval": "PT1H", "enabled": False}}
    result = run(policies(policy(pattern="*", schedules=schedules)), (flat, nested),
                 limits=SchedulerSettings(max_operations_per_poll=1))
    assert len(result.decisions) == 4
    assert {(d.table, d.operation) for d in result.decisions} == {(t, op) for t in (flat, nested) for op in (RDF, EXP)}
    assert [d.rank for d in result.decisions] == [1, None, None, None]
    rest = [(d.table.qualified, d.operation.order) for d in result.decisions[1:]]
    assert rest == sorted(rest)


# -- JSON -----------------------------------------------------------------------------------------


def test_plan_to_json_shape():
    schedules = {RDF: {"interval": "PT1H"}, EXP: {"interval": "PT1H"}}
    health = {A: metrics(A, newest_snapshot_ms=ms(NOW - timedelta(days=1.2345)))}
    result = run(policies(policy("maint", schedules=schedules)), health=health, in_flight=((A.qualified, EXP),),
                 estimate=sized({A: 4096}))
    data = json.loads(json.dumps(result.to_json()))
    assert data == {
        "at": "2026-11-23T12:00:00+00:00",
        "decisions": [
            {"table": "demo.sales.a", "operation": "REWRITE_DATA_FILES", "policy": "maint", "decision": "run",
             "reasons": ["interval: never run (interval PT1H)"], "trigger": "interval", "debt_score": 0.62,
             "estimated_bytes": 4096, "next_eligible": "2026-11-23T12:00:00+00:00", "rank": 1},
            {"table": "demo.sales.a", "operation": "EXPIRE_SNAPSHOTS", "policy": "maint", "decision": "skip",
             "reasons": ["in_flight: a run of this table and operation is queued or running"], "trigger": None,
             "debt_score": 0.62, "estimated_bytes": 0, "next_eligible": None, "rank": None},
        ],
        "notes": [],
    }


def test_reason_counts():
    result = run(policies(policy()), (A, B, C), limits=SchedulerSettings(max_run_requests_per_tick=1),
                 in_flight=((C.qualified, RDF),))
    assert result.reason_counts() == {"tick_cap": 1, "in_flight": 1}


# -- properties -------------------------------------------------------------------------------------

PROPERTY_POLICIES = [
    policies(policy(pattern="demo.*.*", schedules={
        RDF: {"interval": "PT6H"}, EXP: {"cronExpression": "0 2 * * *"}, ORPH: {"interval": 1},
        MAN: {}, RPDF: {"cronExpression": "*/20 * * * *", "windowStart": "22:00", "windowEnd": "04:00"}})),
    policies(policy(pattern="demo.*.*", schedules={
        RDF: {"cronExpression": "30 1 * * 1-5", "timezone": "Europe/Berlin", "windowStart": "01:00",
              "windowEnd": "03:00", "allowedDays": ["MON", "WED", "FRI"]},
        EXP: {"interval": "PT30M", "allowedDays": "SAT,SUN"}, ORPH: {"interval": "P7D", "enabled": False}},
        conditions={"snapshotCountAbove": 100, "minIntervalMinutes": 45, "criticalPipeline": True,
                    "criticalPipelineMaxDelayMinutes": 600})),
    policies(policy(pattern="demo.*.*", schedules={RDF: {}, EXP: {"interval": "PT2H"},
                                                   MAN: {"cronExpression": "0 */4 * * *"}},
                    conditions={"smallFileCountAbove": 3, "deleteFileCountAbove": 2, "triggerLogic": "AND",
                                "perOperationMinIntervalMinutes": {"EXPIRE_SNAPSHOTS": 90}})),
]
PROPERTY_TABLES = (A, B, C, table("d", namespace="hr"), table("e", namespace="hr"))


@st.composite
def histories(draw, now: datetime):
    def moment(days: int = 20) -> datetime | None:
        return draw(st.none() | st.integers(-days * 86400, 3600).map(lambda s: now + timedelta(seconds=s)))

    found = {}
    for t in PROPERTY_TABLES:
        for op in ALL_OPERATIONS:
            if draw(st.booleans()):
                failures = draw(st.integers(0, 12))
                found[(t.qualified, op)] = OperationHistory(
                    last_success_start=moment(), last_failure_at=moment(9) if failures else None,
                    consecutive_failures=failures, consecutive_zero_change=draw(st.integers(0, 8)),
                    last_snapshot_after=draw(st.sampled_from([None, 1, 2])), runs=failures + 3, failures=failures)
    return found


@st.composite
def plan_inputs(draw):
    now = draw(st.datetimes(min_value=datetime(2026, 1, 1), max_value=datetime(2027, 1, 1),
                            timezones=st.just(UTC)))
    catalog = draw(st.lists(st.sampled_from(PROPERTY_TABLES), unique=True))
    loaded = draw(st.lists(st.sampled_from(PROPERTY_TABLES), unique=True))
    found = {}
    for t in PROPERTY_TABLES:
        if draw(st.booleans()):
            full = draw(st.booleans())
            found[t] = metrics(
                t, tier="full" if full else "summary", snapshot_count=draw(st.integers(0, 700)),
                delete_file_count=draw(st.integers(0, 10)), current_snapshot_id=draw(st.sampled_from([None, 1, 2, 3])),
                data_file_sizes=(1, 2, 10**9) if full else None,
                properties={"gc.enabled": draw(st.sampled_from(["true", "false"]))})
    limits = SchedulerSettings(
        condition_based_triggering_enabled=draw(st.booleans()),
        max_tables_per_poll=draw(st.integers(0, 3)), max_operations_per_poll=draw(st.integers(0, 4)),
        max_bytes_per_hour=draw(st.sampled_from([0, 500, 2000])),
        failure_backoff_threshold=draw(st.integers(1, 4)), failure_backoff_hours=draw(st.sampled_from([0.5, 6])),
        zero_change_threshold=draw(st.integers(0, 6)), max_run_requests_per_tick=draw(st.integers(1, 6)),
        max_queued_runs=draw(st.integers(0, 10)),
    )
    in_flight = draw(st.frozensets(st.tuples(st.sampled_from([t.qualified for t in PROPERTY_TABLES]),
                                             st.sampled_from(ALL_OPERATIONS)), max_size=4))
    sizes = draw(st.dictionaries(st.sampled_from(PROPERTY_TABLES), st.integers(0, 1500)))
    return PlanInput(
        now=now, catalog_tables=catalog, loaded_tables=frozenset(loaded),
        policies=draw(st.sampled_from(PROPERTY_POLICIES)), limits=limits, metrics=found,
        history=draw(histories(now)), in_flight=in_flight, bytes_last_hour=draw(st.sampled_from([0, 100, 600])),
        queued_runs=draw(st.integers(0, 8)), estimate_bytes=lambda t, op, m, config: sizes.get(t, 0),
        fair_shares=draw(st.sampled_from([FAIR_SHARES_OFF, FairShareSettings(by="namespace"),
                                          FairShareSettings(by="namespace", weights={"hr": 3}),
                                          FairShareSettings(by="tag:team", default_weight=0.5)])),
        batching=draw(st.sampled_from([ONE_TABLE_PER_RUN, BatchSettings(max_tables=2)])),
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan_inputs())
def test_plan_properties(data):
    result = plan(data)
    for d in result.decisions:
        assert d.next_eligible is None or d.next_eligible >= data.now, d
        if d.decision == "run":
            assert d.next_eligible == data.now and d.trigger in ("cron", "interval", "condition", "critical")
        else:
            assert code(d) in GATE_CODES and d.rank is None
            if code(d) in ("failure_backoff", "zero_change_throttle", "min_interval"):
                assert d.next_eligible > data.now
            if d.next_eligible is not None:  # a moment at which the work may start: window open, day allowed
                assert data.policies.effective_policy(d.table).schedule(d.operation).is_open(d.next_eligible), d
    # ranks are 1..n in admission order, which follows the ranking key (within each share)
    runs = result.admitted
    assert [d.rank for d in runs] == list(range(1, len(runs) + 1))
    assert [d for d in result.decisions if d.decision == "run"] == runs  # admitted first, in rank order
    shares = data.fair_shares
    for share in {shares.share_of(d.table.namespace_str, {}) if shares.enabled else "" for d in runs}:
        keys = [(-d.debt_score, -d.policy_priority, -d.schedule_priority, d.table.qualified, d.operation.order)
                for d in runs if not shares.enabled or shares.share_of(d.table.namespace_str, {}) == share]
        assert keys == sorted(keys)
    assert len({d.table for d in runs}) == len(runs)  # one operation per table a tick
    if any(code(d) == "budget_share" for d in result.decisions if d.decision == "skip"):
        assert shares.enabled and shares.by == "namespace"  # every table shares the untagged share otherwise
    # one decision per (table, configured operation) of the table's effective policy
    expected = sorted((t.qualified, op.order) for t in {*data.catalog_tables, *data.loaded_tables}
                      if (p := data.policies.effective_policy(t)) for op in p.configured_operations())
    assert sorted((d.table.qualified, d.operation.order) for d in result.decisions) == expected
    # the budgets hold
    limits = data.limits
    assert len(result.batches()) <= limits.max_run_requests_per_tick
    assert len(result.batches()) <= max(0, limits.max_queued_runs - data.queued_runs)
    if limits.max_operations_per_poll:
        assert len(runs) <= limits.max_operations_per_poll
    if limits.max_tables_per_poll:
        assert len({d.table for d in runs}) <= limits.max_tables_per_poll
    if limits.max_bytes_per_hour:
        rewritten = sum(d.estimated_bytes for d in runs if d.operation.rewrites_data)
        assert rewritten == 0 or data.bytes_last_hour + rewritten <= limits.max_bytes_per_hour or (
            data.bytes_last_hour == 0
            and len([d for d in runs if d.operation.rewrites_data and d.estimated_bytes]) == 1)
    assert len(result.notes) == len([d for d in runs if d.estimated_bytes > limits.max_bytes_per_hour > 0
                                     and d.operation.rewrites_data])
    json.dumps(result.to_json())


def test_a_tick_pauses_the_cyclic_collector_only_while_it_plans():
    """plan() turns the garbage collector off while it allocates its decisions and puts it back as it
    found it, also when planning fails."""
    import gc

    seen = []

    def estimate(*args: Any) -> int:
        seen.append(gc.isenabled())
        return 1

    assert gc.isenabled()
    run(policies(policy()), estimate=estimate)
    assert seen == [False] and gc.isenabled()

    def broken(*args: Any) -> int:
        raise RuntimeError("estimator down")

    with pytest.raises(RuntimeError):
        run(policies(policy()), estimate=broken)
    assert gc.isenabled()
    gc.disable()
    try:
        run(policies(policy()), estimate=estimate)
        assert not gc.isenabled()  # left as the caller had it
    finally:
        gc.enable()


# -- lost commit races (core/runs/commit_conflicts.py) -----------------------------------------------------


def test_a_conflict_waits_a_short_jittered_delay_and_never_backs_off():
    from floe_dagster.core.runs.commit_conflicts import conflict_retry_delay

    delay = conflict_retry_delay(A.qualified, RDF.value, 3)
    schedules = {RDF: {"interval": "PT1H"}}
    for lost_at, expected in ((NOW - delay, "run"), (NOW - delay + timedelta(seconds=1), "skip")):
        # Three lost races after a success 30 days ago: no failures, so no failure backoff.
        history = {(A.qualified, RDF): hist(last_success_start=NOW - timedelta(days=30), consecutive_conflicts=3,
                                            last_conflict_at=lost_at, last_run_succeeded=False, runs=4)}
        d = decision(run(policies(policy(schedules=schedules)), history=history), A)
        assert d.decision == expected
        if expected == "skip":
            assert code(d) == "conflict_retry"
            assert d.reasons[0].startswith("conflict_retry: 3 lost commit race(s) in a row (not failures: no backoff)")
            assert d.next_eligible == d.backoff_until == lost_at + delay
    assert timedelta(minutes=5) <= delay <= timedelta(minutes=15)


def test_failures_still_back_off_after_conflicts():
    history = {(A.qualified, RDF): hist(last_failure_at=NOW - timedelta(minutes=1), consecutive_failures=1,
                                        consecutive_conflicts=0, last_conflict_at=NOW - timedelta(hours=2))}
    assert code(decision(run(policies(policy()), history=history), A)) == "failure_backoff"
