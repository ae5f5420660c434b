"""Benchmark 8: one ``GET /metrics`` scrape at 10,000 tables × 5 operations (target < 100 ms).

A temporary DAGSTER_HOME (the project's SQLite instance) and its SQLite coordination database filled
as the automation leaves them: one ``floe_outcomes`` and one ``floe_ledger`` row per (table,
operation) a day for ``--days`` days (1; 30 is what the default 30-day retention keeps of daily
maintenance), the last day's outcomes spread over the day and its runs in batches of 50 tables
(1,000 runs, created in the instance and started, 100 more manual-trigger runs), and the debt-score
sensor's tick summary of a 50,000-decision plan in the instance's key-value store. Then the real
collector (``floe_dagster.api.prometheus.metrics_registry``, as ``GET /metrics`` builds it) is scraped
with ``prometheus_client.generate_latest``: the first scrape, then the median of ``--repeat``; and
each source's query alone (median of the same count).

    python benchmarks/bench_metrics.py [--tables 10000] [--days 1] [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, machine, repeat, table  # noqa: E402

TARGET_S = 0.100
BATCH = 50
POLICIES = """
- name: all
  tablePattern: "demo.*.*"
  rewriteDataFiles: {}
  rewriteDataFilesSchedule: {interval: P1D}
  expireSnapshots: {}
  expireSnapshotsSchedule: {interval: P1D}
  orphanCleanup: {}
  orphanCleanupSchedule: {interval: P1D}
  rewriteManifests: {}
  rewriteManifestsSchedule: {interval: P1D}
  rewritePositionDeleteFiles: {}
  rewritePositionDeleteFilesSchedule: {interval: P1D}
"""


def build(root: Path, tables: int, days: int):
    os.environ["DAGSTER_HOME"] = str(root / "dagster_home")
    (root / "dagster_home").mkdir(parents=True)
    shutil.copyfile(ROOT / "dagster.yaml", root / "dagster_home" / "dagster.yaml")
    (root / "policies").mkdir()
    (root / "policies" / "policies.yaml").write_text(POLICIES)
    (root / "floe.yaml").write_text(f"data-dir: {root / 'data'}\npolicies: [{root / 'policies'}]\n")

    from dagster import DagsterEvent, DagsterEventType, DagsterInstance, DagsterRunStatus
    from dagster._core.test_utils import create_run_for_test

    from floe_dagster.coordination.database import Coordination
    from floe_dagster.coordination.schema import ledger, outcomes
    from floe_dagster.core.runs import run_tags as T
    from floe_dagster.core.operations import ALL_OPERATIONS
    from floe_dagster.core.plan.planner import Decision, Plan
    from floe_dagster.core.runs.run_tags import run_key
    from floe_dagster.core.basics.tables import TableName
    from floe_dagster.scheduling.tick import TickResult
    from floe_dagster.scheduling.tick_stats import record_tick
    from floe_dagster.settings import load_settings

    settings = load_settings(str(root / "floe.yaml"), environ={})
    instance = DagsterInstance.get()
    coordination = Coordination(settings.coordination_url)
    now = datetime.now(timezone.utc)
    names = [f"demo.ns{i % 20:02d}.t{i:05d}" for i in range(tables)]
    items = [(name, op) for op in ALL_OPERATIONS for name in names]  # a batch run is of one operation
    started = time.perf_counter()

    # The runs of the last day, 50 tables of one operation each, created and started in the instance.
    run_ids = {}  # (operation, batch) → run id
    for op in ALL_OPERATIONS:
        for batch in range(0, tables, BATCH):
            run = create_run_for_test(instance, job_name="floe_maintenance", status=DagsterRunStatus.NOT_STARTED,
                                      tags={T.OPERATION: op.value, T.TRIGGER: "interval",
                                            T.BATCH_KEY: f"{op.value}-{batch}"})
            instance.report_dagster_event(DagsterEvent(DagsterEventType.RUN_START.value, job_name="floe_maintenance"),
                                          run_id=run.run_id)
            run_ids[(op, batch // BATCH)] = run.run_id
    for _ in range(100):
        create_run_for_test(instance, job_name="floe_maintenance", status=DagsterRunStatus.SUCCESS,
                            tags={T.TRIGGER: "manual", T.OPERATION: "EXPIRE_SNAPSHOTS"})

    # Day 0 is the last day (its ledger rows name the runs above); older days are what retention keeps.
    ledger_count = outcome_count = 0
    for day in reversed(range(days)):  # oldest first, as they were admitted (the ledger's ids follow time)
        ledger_rows, outcome_rows = [], []
        for index, (name, op) in enumerate(items):
            batch = (index % tables) // BATCH
            run_id = run_ids[(op, batch)] if day == 0 else f"old-{day}-{op.value}-{batch}"
            admitted = now - timedelta(days=day, seconds=5 + index % 60)  # just before the run was created
            slot = admitted.isoformat()
            ledger_rows.append(dict(table_name=name, operation=op.value, slot=slot, attempt=0,
                                    run_key=run_key(name, op, slot, 0), trigger="interval", reason="interval: due",
                                    debt_score=1.0, estimated_bytes=1000, admitted_at=admitted.replace(tzinfo=None),
                                    launcher="sensor:default", run_id=run_id,
                                    batch_key=f"{op.value}-{batch * BATCH}-{day}"))
            finished = now - timedelta(days=day, seconds=120 + index * 86_000 // len(items))  # spread over the day
            failed = index % 10 == 0
            outcome_rows.append(dict(
                run_id=run_id, table_name=name, operation=op.value, trigger="interval",
                started_at=(finished - timedelta(seconds=30 + index % 90)).replace(tzinfo=None),
                finished_at=finished.replace(tzinfo=None), succeeded=not failed,
                failure_kind=("outage" if index % 30 == 0 else None) if failed else None,
                message="", changed=True, bytes_rewritten=0 if failed else 1_000_000, snapshot_after=None))
        with coordination.engine.begin() as connection:
            for start in range(0, len(items), 10_000):
                connection.execute(ledger.insert(), ledger_rows[start:start + 10_000])
                connection.execute(outcomes.insert(), outcome_rows[start:start + 10_000])
        ledger_count += len(ledger_rows)
        outcome_count += len(outcome_rows)

    # The sensor's summary of a tick over every (table, operation): 1 % admitted, the rest skipped.
    reasons = ["not_due: next slot later", "failure_backoff: 3 consecutive failure(s)", "in_flight: queued",
               "zero_change_throttle: 5 runs changed nothing", "conditions_unmet: none"]
    decisions = []
    for index, (name, op) in enumerate(items):
        table_name = TableName.parse(name, "demo")
        run = index % 100 == 0
        decisions.append(Decision(table=table_name, operation=op, policy="all", decision="run" if run else "skip",
                                  why=("interval: due",) if run else (reasons[index % len(reasons)],),
                                  trigger="interval" if run else None, debt_score=1.0, debt_breakdown={},
                                  bytes_estimate=0, next_eligible=None, rank=index if run else None, slot="s"))
    result = TickResult(Plan(now, decisions), admitted=[d for d in decisions if d.decision == "run"])
    summarize_started = time.perf_counter()
    record_tick(instance, "default", result, now)
    summarize_s = time.perf_counter() - summarize_started
    print(f"built in {time.perf_counter() - started:.1f} s: {outcome_count:,} outcomes, {ledger_count:,} "
          f"ledger rows, {len(run_ids) + 100:,} runs; the sensor's record_tick of {len(decisions):,} decisions took "
          f"{summarize_s * 1000:.1f} ms", flush=True)
    return settings, instance, coordination, outcome_count, summarize_s


def median_of(fn, times: int) -> float:
    return statistics.median(repeat(fn, times))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=10_000)
    parser.add_argument("--days", type=int, default=1,
                        help="days of outcome and ledger rows, one per (table, operation) a day (30: a month)")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(machine(), flush=True)
    root = Path(tempfile.mkdtemp(prefix="floe-bench-metrics-"))
    try:
        settings, instance, coordination, outcome_count, _ = build(root, args.tables, args.days)
        from prometheus_client import generate_latest

        from floe_dagster.api.metric_counters import outcome_totals
        from floe_dagster.api.metric_runs import WINDOW, AdmissionWindow, run_totals
        from floe_dagster.api.prometheus import metrics_registry
        from floe_dagster.scheduling.tick_stats import read_tick_stats

        registry = metrics_registry(settings, instance, coordination)
        started = time.perf_counter()
        text = generate_latest(registry)
        first_s = time.perf_counter() - started
        scrape_s = median_of(lambda: generate_latest(registry), args.repeat)
        now = datetime.now(timezone.utc)
        window = AdmissionWindow()
        started = time.perf_counter()
        window.read(coordination.engine, now - WINDOW)  # the first read finds the day's first row
        first_window_s = time.perf_counter() - started
        parts = {
            "outcomes (GROUP BY over the last 15 s)": median_of(
                lambda: outcome_totals(coordination.engine, now - timedelta(seconds=75), now - timedelta(seconds=60)),
                args.repeat),
            "ledger (first admission per run of the last day)": median_of(
                lambda: window.read(coordination.engine, now - WINDOW), args.repeat),
            "runs (in flight, manual, last day)": median_of(lambda: run_totals(instance, now - WINDOW), args.repeat),
            "tick summary (key-value store)": median_of(lambda: read_tick_stats(instance), args.repeat),
        }
        print(table([[name, f"{seconds * 1000:.1f}"] for name, seconds in parts.items()], ["source", "median ms"]))
        print(f"the ledger's first read (finding the day's first row): {first_window_s * 1000:.1f} ms")
        samples = sum(1 for line in text.decode().splitlines() if line and not line.startswith("#"))
        print(f"\nscrape at {args.tables:,} tables × 5 operations ({outcome_count:,} outcome rows, {samples} samples, "
              f"{len(text):,} bytes): first {first_s * 1000:.1f} ms, median of {args.repeat} {scrape_s * 1000:.1f} ms; "
              f"÷ {TARGET_S * 1000:.0f} ms target = {scrape_s / TARGET_S:.2f} ({'met' if scrape_s < TARGET_S else 'MISSED'})")
        instance.dispose()
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
