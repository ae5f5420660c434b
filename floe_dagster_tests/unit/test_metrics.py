"""``GET /metrics``, ``/health/live`` and ``/health/ready`` over real HTTP, without Spark: the FastAPI
application on uvicorn, a real PyIceberg SQLite catalog, a real Dagster instance and coordination
database, API keys configured (the probes and /metrics need none). The scrape is parsed with
prometheus_client's own parser. The counters move when the real ``run_tick`` admits work (recorded
by ``tick_stats.record_tick`` exactly as the debt-score sensor does), when the ledger refuses a
duplicate, when a run records its outcome and when a manual trigger queues runs; retention deleting
rows never lowers them. Plus the tick summary (pure) and the counters' arithmetic."""

from __future__ import annotations

import socket
from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest
import requests
from dagster import DagsterEvent, DagsterEventType, DagsterRunStatus
from dagster._core.test_utils import create_run_for_test
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import create_engine

from floe_dagster.api.app import create_app
from floe_dagster.api.auth import KeyStore
from floe_dagster.api.metric_counters import OutcomeTally, SinceStart
from floe_dagster.api.metric_runs import AdmissionWindow
from floe_dagster.coordination.database import Coordination
from floe_dagster.core.runs import run_tags as T
from floe_dagster.core.policies.conditions import ConditionResult
from floe_dagster.core.runs.history import CONFLICT, LOCK_HELD, OUTAGE, Outcome
from floe_dagster.core.operations import Operation
from floe_dagster.core.plan.planner import Decision, Plan
from floe_dagster.core.runs.run_decision import RunDecision
from floe_dagster.core.basics.tables import TableName
from floe_dagster.demo import _create, rows
from floe_dagster.iceberg.catalog import open_catalog
from floe_dagster.scheduling.tick import TickResult, run_tick
from floe_dagster.scheduling.tick_stats import read_tick_stats, record_tick, summarize
from floe_dagster_tests.unit import test_api_http
from floe_dagster_tests.unit.test_api_http import OPERATOR_KEY, start_server

api = test_api_http.api  # its lakehouse, server and instance: a fixture of this module too
# The lakehouse of test_api_http's ``api`` fixture (its policies: sales with smallFileCountAbove 3, nested,
# nothing-configured), plus sales.quiet, created here.
ORDERS, QUIET, CLICKS = (TableName("demo", ("sales",), "orders"), TableName("demo", ("sales",), "quiet"),
                         TableName("demo", ("lake", "raw"), "clicks"))
RDF, EXPIRE = Operation.REWRITE_DATA_FILES, Operation.EXPIRE_SNAPSHOTS
FLOE_TYPES = {  # Floe's names (section 6 of its FloeMetrics) and their types
    "floe_operation_executions": "counter",
    "floe_operation_duration_seconds": "summary",
    "floe_maintenance_triggers": "counter",
    "floe_maintenance_success": "counter",
    "floe_maintenance_failures": "counter",
    "floe_active_policies": "gauge",
    "floe_running_operations": "gauge",
    "floe_trigger_evaluations": "counter",
    "floe_trigger_conditions_met": "counter",
    "floe_trigger_conditions_not_met": "counter",
    "floe_trigger_blocked_by_interval": "counter",
    "floe_trigger_forced_by_critical_pipeline": "counter",
    "floe_trigger_evaluations_by_operation": "counter",
}
FLOE_DAGSTER_TYPES = {
    "floe_tick_decisions": "gauge",
    "floe_tick_timestamp_seconds": "gauge",
    "floe_tick_duration_seconds": "gauge",
    "floe_tick_runs_requested": "gauge",
    "floe_tables_in_backoff": "gauge",
    "floe_tables_throttled": "gauge",
    "floe_ledger_duplicates_refused": "counter",
    "floe_queued_runs": "gauge",
    "floe_trigger_to_run_latency_seconds": "summary",
    "floe_run_queue_wait_seconds": "summary",
    "floe_bytes_rewritten": "counter",
    "floe_operation_failures": "counter",
    "floe_operation_conflicts": "counter",
    "floe_metrics_source_up": "gauge",
}


def scrape(url: str) -> dict:
    response = requests.get(url + "/metrics", timeout=60)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    return {family.name: family for family in text_string_to_metric_families(response.text)}


def value(families: dict, name: str, sample: str | None = None, **labels) -> float:
    """One sample's value (0 when the series is absent); ``sample`` defaults to the family's own
    (``_total`` for a counter)."""
    family = families[name]
    wanted = sample or (name + "_total" if family.type == "counter" else name)
    found = [s.value for s in family.samples if s.name == wanted and all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(found) <= 1, (name, labels, found)
    return found[0] if found else 0.0


# -- probes ------------------------------------------------------------------------------------------------


def test_live_and_ready_answer_floes_shape_without_a_key(api):
    live = requests.get(api["url"] + "/health/live", timeout=30)
    assert live.status_code == 200 and live.headers["content-type"] == "application/json"
    assert live.json() == {"status": "UP", "checks": []}
    ready = requests.get(api["url"] + "/health/ready", timeout=30)
    assert ready.status_code == 200
    assert ready.json() == {"status": "UP", "checks": [{"name": "dagster-instance", "status": "UP"},
                                                       {"name": "catalog", "status": "UP"}]}
    health = requests.get(api["url"] + "/health", timeout=30).json()  # unchanged
    assert set(health) == {"status", "checks", "timestamp"} and health["status"] == "UP"


def test_ready_is_503_naming_the_catalog_when_it_cannot_be_reached_and_metrics_still_answer(api, tmp_path):
    settings = api["settings"]
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    unreachable = {"type": "rest", "uri": f"http://127.0.0.1:{port}"}  # a REST catalog that is down
    broken = replace(settings, catalog=replace(settings.catalog, properties=unreachable))
    app = create_app(broken, KeyStore(settings.api), api["instance"])
    server, thread, url = start_server(app)
    try:
        ready = requests.get(url + "/health/ready", timeout=30)
        assert ready.status_code == 503
        assert ready.json() == {"status": "DOWN", "checks": [{"name": "dagster-instance", "status": "UP"},
                                                             {"name": "catalog", "status": "DOWN"}]}
        assert requests.get(url + "/health/live", timeout=30).json() == {"status": "UP", "checks": []}
        # The metrics need no catalog; a coordination database that cannot be read is left out, said so.
        app.state.service.coordination.engine = create_engine(f"sqlite:///{tmp_path}/no/such/folder/c.db")
        families = scrape(url)
        assert value(families, "floe_metrics_source_up", source="coordination") == 0
        assert value(families, "floe_metrics_source_up", source="instance") == 1
        assert "floe_operation_executions" not in families and "floe_running_operations" in families
    finally:
        server.should_exit = True
        thread.join(20)


# -- /metrics ----------------------------------------------------------------------------------------------


def test_metrics_need_no_key_and_carry_floes_names_and_types(api):
    families = scrape(api["url"])  # no X-API-Key, though keys are configured
    for name, kind in {**FLOE_TYPES, **FLOE_DAGSTER_TYPES}.items():
        if name in families:
            assert families[name].type == kind, name
    always = {"floe_maintenance_triggers", "floe_maintenance_success", "floe_maintenance_failures",
              "floe_active_policies", "floe_running_operations", "floe_trigger_evaluations",
              "floe_trigger_conditions_met", "floe_trigger_conditions_not_met", "floe_trigger_blocked_by_interval",
              "floe_trigger_forced_by_critical_pipeline", "floe_queued_runs", "floe_run_queue_wait_seconds",
              "floe_trigger_to_run_latency_seconds", "floe_metrics_source_up"}
    assert always <= set(families), always - set(families)
    assert value(families, "floe_active_policies") == 3
    assert families["floe_maintenance_triggers"].documentation == "Total number of maintenance operations triggered"
    assert families["floe_trigger_conditions_met"].documentation == \
        "Total evaluations where trigger conditions were met"
    assert {s.labels["source"]: s.value for s in families["floe_metrics_source_up"].samples} == {
        "coordination": 1, "instance": 1, "policies": 1}
    assert "process_cpu_seconds" in families  # the process's own, as Floe's process_*
    for path in ("/metrics", "/health/live", "/health/ready"):
        assert requests.post(api["url"] + path, timeout=30).status_code == 405
    document = requests.get(api["url"] + "/api/v1/openapi.json", headers={"X-API-Key": OPERATOR_KEY}, timeout=30)
    assert not {"/metrics", "/health/live", "/health/ready"} & set(document.json()["paths"])


def test_counters_move_when_a_tick_admits_work_and_never_go_down(api, monkeypatch):
    url, settings, instance = api["url"], api["settings"], api["instance"]
    _create(open_catalog(settings.catalog), "sales.quiet").append(rows(0, 10))  # one small file: not met
    monkeypatch.setattr(OutcomeTally, "LAG", timedelta(0))  # count an outcome at the next scrape, not a minute on
    before = scrape(url)
    now = datetime.now(timezone.utc)
    # Another launcher admits the first item between this tick's plan and its admission: the ledger's
    # unique key refuses it here (the tick leaves it out).
    real_admit = Coordination.admit

    def racing_admit(self, items, when, launcher=""):
        items = list(items)
        real_admit(self, items[:1], when, "sensor:other-replica")
        return real_admit(self, items, when, launcher)

    with monkeypatch.context() as race:
        race.setattr(Coordination, "admit", racing_admit)
        loaded = frozenset({ORDERS, QUIET, CLICKS})
        coordination = Coordination(settings.coordination_url)
        result = run_tick(settings, instance, coordination, now, "sensor:default", loaded)
    record_tick(instance, "default", result, now)  # as the debt-score sensor does after run_tick
    assert result.skipped_tick is None and result.admitted
    planned = {(d.table, d.operation) for d in result.plan.admitted}
    # orders' expire waits for its rewrite (one operation per table at a time)
    assert planned == {(ORDERS, RDF), (CLICKS, Operation.REWRITE_MANIFESTS)}
    assert len(result.admitted) == len(planned) - 1

    after = scrape(url)
    triggers = {s.labels["reason"]: s.value for s in after["floe_tick_decisions"].samples
                if s.labels["outcome"] == "admitted" and s.labels["scope"] == "default"}
    assert sum(triggers.values()) == len(result.admitted) == 1
    assert value(after, "floe_tick_decisions", scope="default", outcome="refused", reason="duplicate") == 1
    skipped = {s.labels["reason"]: s.value for s in after["floe_tick_decisions"].samples
               if s.labels["outcome"] == "skipped"}
    # quiet: one small file, for both of its operations; late: in the catalog, not loaded
    assert skipped == {"conditions_unmet": 2, "not_loaded": 2, "in_flight": 1}
    assert sum(s.value for s in after["floe_tick_decisions"].samples) == len(result.plan.decisions)
    assert value(after, "floe_tick_runs_requested", scope="default") == len(result.batches)
    assert abs(value(after, "floe_tick_timestamp_seconds", scope="default") - now.timestamp()) < 1e-3

    def moved(name, **labels):
        return value(after, name, **labels) - value(before, name, **labels)

    assert moved("floe_ledger_duplicates_refused", scope="default") == 1
    # Floe's trigger counters: orders' two operations met the conditions, quiet's two did not;
    # clicks' policy has none (not an evaluation).
    assert moved("floe_trigger_evaluations") == 4
    assert moved("floe_trigger_conditions_met") == 2 and moved("floe_trigger_conditions_not_met") == 2
    assert moved("floe_trigger_blocked_by_interval") == 0 and moved("floe_trigger_forced_by_critical_pipeline") == 0
    assert moved("floe_trigger_evaluations_by_operation", operation="rewrite_data_files", result="triggered") == 1
    assert moved("floe_trigger_evaluations_by_operation", operation="expire_snapshots", result="skipped") == 1

    # The next tick: everything admitted is in flight; the counters only grow, the gauges are this tick's.
    later = now + timedelta(seconds=60)
    second = run_tick(settings, instance, coordination, later, "sensor:default", loaded)
    record_tick(instance, "default", second, later)
    third = scrape(url)
    assert value(third, "floe_tick_decisions", scope="default", outcome="refused", reason="duplicate") == 0
    assert value(third, "floe_tick_decisions", scope="default", outcome="skipped", reason="in_flight") == 3
    assert value(third, "floe_ledger_duplicates_refused", scope="default") == \
        value(after, "floe_ledger_duplicates_refused", scope="default")
    # The condition gate comes before in_flight: all four are evaluated again.
    assert value(third, "floe_trigger_evaluations") - value(after, "floe_trigger_evaluations") == 4

    # The daemon creates the batch's run (tagged with its batch key) and starts it: latency and queue wait.
    batch = result.batches[0]
    run = create_run_for_test(instance, job_name="floe_maintenance", status=DagsterRunStatus.NOT_STARTED,
                              tags={T.BATCH_KEY: batch.batch_key, T.OPERATION: batch.operation.value,
                                    T.TRIGGER: batch.decisions[0].trigger})
    coordination.attach_run(batch.batch_key, run.run_id)
    queued = scrape(url)
    assert value(queued, "floe_queued_runs") == value(after, "floe_queued_runs") + 1
    latency = value(queued, "floe_trigger_to_run_latency_seconds", "floe_trigger_to_run_latency_seconds_count")
    assert latency == 1
    assert 0 <= value(queued, "floe_trigger_to_run_latency_seconds", "floe_trigger_to_run_latency_seconds_sum") < 60
    instance.report_dagster_event(DagsterEvent(DagsterEventType.RUN_START.value, job_name="floe_maintenance"),
                                  run_id=run.run_id)
    started = scrape(url)
    assert value(started, "floe_running_operations") == value(after, "floe_running_operations") + 1
    assert value(started, "floe_run_queue_wait_seconds", "floe_run_queue_wait_seconds_count") == \
        value(after, "floe_run_queue_wait_seconds", "floe_run_queue_wait_seconds_count") + 1

    # The run records each table's outcome: executions, duration, bytes; a failure by its kind.
    coordination = Coordination(settings.coordination_url)
    first = batch.decisions[0]
    begun = datetime.now(timezone.utc) - timedelta(seconds=90)
    coordination.record_outcome(Outcome(run.run_id, first.table.qualified, first.operation, begun,
                                        begun + timedelta(seconds=90), True, first.trigger or "", changed=True,
                                        bytes_rewritten=4096))
    coordination.record_outcome(Outcome("run-outage", CLICKS.qualified, Operation.REWRITE_MANIFESTS,
                                        begun + timedelta(seconds=87), begun + timedelta(seconds=90), False,
                                        "interval", failure_kind=OUTAGE))
    coordination.record_outcome(Outcome("run-conflict", CLICKS.qualified, Operation.REWRITE_MANIFESTS,
                                        begun + timedelta(seconds=88), begun + timedelta(seconds=90), False,
                                        "interval", failure_kind=CONFLICT, message="lost a commit race"))
    done = scrape(url)
    op = first.operation.value.lower()

    def grew(name, sample=None, **labels):
        return value(done, name, sample, **labels) - value(started, name, sample, **labels)

    assert grew("floe_operation_executions", operation=op, status="succeeded") == 1
    assert grew("floe_operation_executions", operation="rewrite_manifests", status="failed") == 1
    assert grew("floe_operation_duration_seconds", "floe_operation_duration_seconds_count", operation=op) == 1
    assert grew("floe_operation_duration_seconds", "floe_operation_duration_seconds_sum", operation=op) == \
        pytest.approx(90, abs=1e-3)
    assert grew("floe_bytes_rewritten", operation=op) == (4096 if first.operation == RDF else 0)
    assert grew("floe_operation_failures", operation="rewrite_manifests", kind="outage") == 1
    assert grew("floe_operation_failures", operation="rewrite_manifests", kind="error") == 0
    # A lost commit race is a conflict, not a failure.
    assert grew("floe_operation_conflicts", operation="rewrite_manifests") == 1
    assert grew("floe_operation_executions", operation="rewrite_manifests", status="conflict") == 1
    assert grew("floe_operation_failures", operation="rewrite_manifests", kind="conflict") == 0

    # Retention deletes the rows: the stored totals drop, the counters do not.
    coordination.prune(datetime.now(timezone.utc) + timedelta(days=1), datetime.now(timezone.utc) - timedelta(days=30))
    pruned = scrape(url)
    for name, labels in (("floe_operation_executions", {"operation": op, "status": "succeeded"}),
                         ("floe_operation_failures", {"operation": "rewrite_manifests", "kind": "outage"}),
                         ("floe_bytes_rewritten", {"operation": op})):
        assert value(pruned, name, **labels) == value(done, name, **labels), name

    # A manual trigger queues its runs: Floe's maintenance counters.
    body = {"catalog": "demo", "namespace": "sales", "table": "orders", "operations": ["EXPIRE_SNAPSHOTS"]}
    response = requests.post(url + "/api/v1/maintenance/trigger", json=body, headers={"X-API-Key": OPERATOR_KEY},
                             timeout=120)
    assert response.status_code == 202, response.text
    triggered = scrape(url)
    assert value(triggered, "floe_maintenance_triggers") == value(pruned, "floe_maintenance_triggers") + 1
    assert value(triggered, "floe_maintenance_success") == value(pruned, "floe_maintenance_success")
    assert value(triggered, "floe_queued_runs") == value(pruned, "floe_queued_runs") + 1
    assert read_tick_stats(instance)["default"]["totals"]["ticks"] == 2  # what the scrapes read


# -- the tick summary and the counters' arithmetic (pure) -----------------------------------------------------

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=timezone.utc)


def decision(table, op, verdict="run", reason="interval: due", trigger="interval", conditions=None) -> Decision:
    return Decision(table=table, operation=op, policy="p", decision=verdict, why=(reason,), trigger=trigger,
                    debt_score=1.0, debt_breakdown={}, bytes_estimate=0, next_eligible=None,
                    rank=1 if verdict == "run" else None, slot="s", condition_result=conditions)


def test_summarize_counts_decisions_by_outcome_and_adds_the_totals():
    met = ConditionResult(True)
    forced = ConditionResult(True, forced=True)
    interval = ConditionResult(False, blocked_code="min_interval")
    unmet = ConditionResult(False, blocked_code="conditions_unmet")
    off = ConditionResult(True, evaluated=False)
    a, b, c = TableName("demo", ("s",), "a"), TableName("demo", ("s",), "b"), TableName("demo", ("s",), "c")
    decisions = [
        decision(a, RDF, conditions=met, trigger="condition"),
        decision(a, EXPIRE, conditions=forced, trigger="critical"),
        decision(b, RDF, conditions=off),  # refused by the ledger below
        decision(b, EXPIRE, "skip", "min_interval: 5 min", conditions=interval),
        decision(c, RDF, "skip", "conditions_unmet: none", conditions=unmet),
        decision(c, EXPIRE, "skip", "failure_backoff: 3 consecutive failure(s)"),
        decision(c, Operation.ORPHAN_CLEANUP, "skip", "failure_backoff: 3 consecutive failure(s)"),
        decision(b, Operation.ORPHAN_CLEANUP, "skip", "zero_change_throttle: 5 runs changed nothing"),
    ]
    result = TickResult(Plan(NOW, decisions), admitted=decisions[:2], seconds=0.25)
    first = summarize(result, NOW)
    assert first["admitted"] == {"condition": 1, "critical": 1} and first["refused"] == 1
    assert first["skipped"] == {"min_interval": 1, "conditions_unmet": 1, "failure_backoff": 2,
                                "zero_change_throttle": 1}
    assert (first["tables_in_backoff"], first["tables_throttled"]) == (1, 1)  # c twice counts once
    assert first["totals"] == {"ticks": 1, "duplicates_refused": 1, "evaluations": 4, "conditions_met": 2,
                               "conditions_not_met": 2, "blocked_by_interval": 1, "forced_by_critical": 1,
                               "by_operation": {"expire_snapshots": {"triggered": 1, "skipped": 1},
                                                "rewrite_data_files": {"triggered": 1, "skipped": 1}}}
    second = summarize(result, NOW + timedelta(minutes=1), first)
    assert second["totals"]["duplicates_refused"] == 2 and second["totals"]["evaluations"] == 8
    assert second["totals"]["by_operation"]["rewrite_data_files"] == {"triggered": 2, "skipped": 2}

    # A tick that planned nothing keeps the last plan's decisions and says why; the totals count the tick.
    held = summarize(TickResult(None, skipped_tick="lock_held: another launcher is planning"), NOW, second)
    assert held["skipped_tick"] == "lock_held" and held["admitted"] == second["admitted"]
    assert held["planned_at"] == second["planned_at"] and held["totals"]["ticks"] == 3
    assert held["totals"]["evaluations"] == 8
    # An open circuit plans nothing (scheduling/tick.py checks it before gathering): the same.
    circuit = summarize(TickResult(None, skipped_tick="circuit_open: an outage failed runs"), NOW, held)
    assert circuit["skipped_tick"] == "circuit_open" and circuit["skipped"] == second["skipped"]
    assert circuit["admitted"] == second["admitted"] and circuit["refused"] == second["refused"]


def test_counters_start_at_zero_and_carry_what_deleted_rows_counted():
    counters = SinceStart()
    key, other = ("x_total", ("a",)), ("x_total", ("b",))
    assert counters.counted("s", {key: 10}) == {key: 0}
    assert counters.counted("s", {key: 13, other: 2}) == {key: 3, other: 2}  # a new series counts from 0
    assert counters.counted("s", {key: 4, other: 2}) == {key: 3, other: 2}  # 9 rows pruned
    assert counters.counted("s", {key: 6}) == {key: 5, other: 2}  # other's rows all pruned
    assert counters.counted("t", {key: 7}) == {key: 0}  # each source has its own start


def test_the_outcome_tally_counts_each_outcome_once_from_its_first_read(tmp_path):
    coordination = Coordination(f"sqlite:///{tmp_path / 'c.db'}")
    tally = OutcomeTally()
    lag = OutcomeTally.LAG

    def outcome(run_id, finished, ok=True, kind=None, size=0):
        coordination.record_outcome(Outcome(run_id, "demo.s.a", RDF, finished - timedelta(seconds=30), finished, ok,
                                            "interval", failure_kind=kind, bytes_rewritten=size))

    def read(at):
        totals = tally.read(coordination.engine, at)
        return (totals[("floe_operation_executions_total", ("rewrite_data_files", "succeeded"))],
                totals[("floe_operation_executions_total", ("rewrite_data_files", "failed"))],
                totals[("floe_operation_failures_total", ("rewrite_data_files", "lock_held"))],
                round(totals[("floe_operation_duration_seconds_sum", ("rewrite_data_files",))], 3),
                totals[("floe_bytes_rewritten_total", ("rewrite_data_files",))])

    outcome("before", NOW - timedelta(hours=1), size=7)
    assert read(NOW) == (0, 0, 0, 0, 0)  # what was stored before the first read happened before the server
    outcome("r1", NOW + timedelta(seconds=10), size=100)
    outcome("r2", NOW + timedelta(seconds=20), ok=False, kind=LOCK_HELD)
    assert read(NOW + timedelta(seconds=15) + lag) == (1, 0, 0, 30, 100)  # r2 finished within the lag
    assert read(NOW + timedelta(seconds=30) + lag) == (1, 1, 1, 60, 100)
    assert read(NOW + timedelta(seconds=40) + lag) == (1, 1, 1, 60, 100)  # each outcome once
    # Retention deletes every row: nothing is taken back; an earlier clock counts nothing again.
    coordination.prune(NOW + timedelta(days=1), NOW + timedelta(days=1))
    assert read(NOW + timedelta(minutes=5)) == (1, 1, 1, 60, 100)
    assert read(NOW) == (1, 1, 1, 60, 100)


def test_the_admission_window_reads_the_last_days_rows_from_the_first_one(tmp_path):
    coordination = Coordination(f"sqlite:///{tmp_path / 'c.db'}")
    window = AdmissionWindow()

    def admit(table, at, run_id):
        name = TableName.parse(table, "demo")
        [item] = coordination.admit([RunDecision(name, RDF, "interval", "due", slot=at.isoformat())], at)
        coordination.attach_run(item.item_key, run_id)

    admit("demo.s.old", NOW - timedelta(days=3), "r-old")
    admit("demo.s.a", NOW - timedelta(hours=2), "r-a")
    admit("demo.s.b", NOW - timedelta(hours=1), "r-a")  # the same batch run: its first admission counts
    assert window.read(coordination.engine, NOW - timedelta(days=1)) == {"r-a": NOW - timedelta(hours=2)}
    admit("demo.s.c", NOW + timedelta(minutes=1), "r-c")
    assert set(window.read(coordination.engine, NOW - timedelta(days=1))) == {"r-a", "r-c"}
    # A day on, the window moves past a and c; retention deleting old rows changes nothing.
    coordination.prune(NOW, NOW - timedelta(days=2))
    assert window.read(coordination.engine, NOW + timedelta(days=1, minutes=2)) == {}
    admit("demo.s.d", NOW + timedelta(days=1, minutes=3), "r-d")
    assert set(window.read(coordination.engine, NOW + timedelta(days=1, minutes=2))) == {"r-d"}
