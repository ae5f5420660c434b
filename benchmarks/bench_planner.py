"""Benchmark 1: one planner tick at scale (the pure ``plan(PlanInput)``, no I/O).

N tables (1,000 and 10,000 by default) in 20 namespaces, each governed by one of four policies
(parsed with ``parse_policies_text``) that configure all 5 operations with a mix of interval and cron
rules, windows on some, trigger conditions and health thresholds; every table has full-tier
``TableMetrics`` (20-200 file sizes, estimate inputs) and an ``OperationHistory`` per operation
(some due, some recently run, some failing, some zero-change). The byte estimator is the real one
(``byte_estimates.estimate_operation_bytes``) as ``tick.gather`` passes it, and the debt weights are the raw
``debt:`` mapping as settings hold it.

Two ticks per size, as the debt-score sensor meets them (its code server keeps running between ticks):
``cold``, the first tick after the code server starts, or every table changed (the byte-estimate
cache and the policies' match memo empty, new metrics records that nothing was computed on yet), and
``warm``, no table changed since the last tick (the same metrics records, as the health collector
keeps one per metadata location: estimates come from the cache keyed on it, the clock-independent
health verdicts and file counts from the record, and, at the same clock, every decision of the gate stage
from the tick before: core/plan/gate_memo.py; ranking and admission run in full), and ``warm +30 s``, the
same with each tick's clock 30 s after the tick before's, as the sensor meets it (the verdicts that still hold
are reused, their debt made at the new clock; the others made afresh).
``no byte estimates`` is a cold tick without the estimator. Reports wall time per ``plan()`` call
(median of several) and the process's CPU time in the same calls (on a shared machine the CPU time
is the better measure of the work; wall includes waiting for the other processes), their ratios to
Dagster's 60 s sensor limit and to the 2 s target, and, at the largest size, a cProfile of one cold
call (top functions by cumulative and by own time) so you can see where the time goes.

``--kinds 8`` gives every policy all eight operation kinds (:data:`EXTRA_KINDS`): issue 35's row of 50,000
tables × 8 kinds, with the process's peak RSS. ``--vs CHECKOUT`` runs this script on this checkout and on
another (the code before a change) in turn, as whole processes (``--rounds`` pairs), and prints each figure's
medians and the ratio new ÷ old pair by pair.

    python benchmarks/bench_planner.py [--tables 1000 10000] [--kinds 5|8] [--repeat 3] [--no-profile]
    python benchmarks/bench_planner.py --tables 50000 --kinds 8 --repeat 2 --vs /tmp/before --rounds 2
"""

from __future__ import annotations

import argparse
import gc
import cProfile
import importlib
import dataclasses
import io
import json
import pstats
import random
import re
import statistics
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Iterator

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import PLANNER_NOW, describe, machine, peak_rss_mib, ratio_rows, table, versus  # noqa: E402

import floe_dagster.iceberg.byte_estimates as byte_estimates  # noqa: E402
from floe_dagster.core.operations import ALL_OPERATIONS  # noqa: E402
from floe_dagster.iceberg.byte_estimates import estimate_operation_bytes  # noqa: E402


def core_module(name: str):
    """A core module by its path in sub-packages (``plan.planner``), or by its last name in the flat ``core/`` of
    the code before issue 35's item 5 (``--vs`` runs this script on that tree too)."""
    try:
        return importlib.import_module(f"floe_dagster.core.{name}")
    except ModuleNotFoundError:
        return importlib.import_module(f"floe_dagster.core.{name.rpartition('.')[2]}")


planner = core_module("plan.planner")
policy_module = core_module("policies.policy_set")  # the policies' match memo
DebtWeights = core_module("facts.debt").DebtWeights
OperationHistory = core_module("runs.history").OperationHistory
TableMetrics = core_module("facts.measurements").TableMetrics
PlanInput, plan = planner.PlanInput, planner.plan
parse_policies_text = core_module("policies.policy").parse_policies_text
TableName = core_module("basics.tables").TableName
try:
    gate_memo = core_module("plan.gate_memo")
except ModuleNotFoundError:
    gate_memo = None

# The scheduler settings class the planner takes (renamed SchedulerLimits -> SchedulerSettings).
Limits = getattr(planner, "SchedulerSettings", None) or getattr(planner, "SchedulerLimits")

SENSOR_LIMIT_S = 60.0
TARGET_S = 2.0
NAMESPACES = 20

POLICIES = """
- name: default
  tablePattern: "lake.*.*"
  rewriteDataFiles: {strategy: BINPACK, targetFileSizeBytes: 134217728, minInputFiles: 5}
  rewriteDataFilesSchedule: {interval: PT1H, timeout: 2}
  expireSnapshots: {retainLast: 5, maxSnapshotAge: P1D}
  expireSnapshotsSchedule: {cronExpression: "15 * * * *", timezone: UTC}
  orphanCleanup: {retentionPeriodInDays: 3}
  orphanCleanupSchedule: {interval: PT6H}
  rewriteManifests: {}
  rewriteManifestsSchedule: {cronExpression: "0 0/30 * * * ?"}
  rewritePositionDeleteFiles: {rewriteAll: true}
  rewritePositionDeleteFilesSchedule: {interval: PT1H}
  triggerConditions:
    smallFilePercentageAbove: 20
    snapshotCountAbove: 20
    deleteFileCountAbove: 1
    manifestSizeAboveBytes: 1048576
    triggerLogic: OR
    minIntervalMinutes: 30
  healthThresholds: {smallFileSizeBytes: 8388608, snapshotCountWarning: 50, snapshotCountCritical: 100}
- name: gold
  tablePattern: "lake.ns00*.*"
  priority: 10
  rewriteDataFiles: {strategy: BINPACK}
  rewriteDataFilesSchedule: {interval: PT30M}
  expireSnapshots: {retainLast: 3}
  expireSnapshotsSchedule: {interval: PT1H}
  orphanCleanup: {retentionPeriodInDays: 5}
  orphanCleanupSchedule: {cronExpression: "0 */4 * * *", timezone: Europe/Berlin}
  rewriteManifests: {}
  rewriteManifestsSchedule: {interval: PT2H}
  rewritePositionDeleteFiles: {}
  rewritePositionDeleteFilesSchedule: {interval: PT1H}
  triggerConditions: {criticalPipeline: true, criticalPipelineMaxDelayMinutes: 720, minIntervalMinutes: 15}
- name: nightly
  tablePattern: "lake.ns01*.*"
  priority: 5
  rewriteDataFiles: {strategy: BINPACK}
  rewriteDataFilesSchedule: {cronExpression: "30 2 * * *", timezone: Europe/Berlin, windowStart: "22:00", windowEnd: "06:00", enforceWindowEnd: true}
  expireSnapshots: {}
  expireSnapshotsSchedule: {cronExpression: "0 3 * * *", timezone: America/New_York}
  orphanCleanup: {}
  orphanCleanupSchedule: {interval: P1D, allowedDays: [SATURDAY, SUNDAY]}
  rewriteManifests: {}
  rewriteManifestsSchedule: {interval: P1D}
  rewritePositionDeleteFiles: {}
  rewritePositionDeleteFilesSchedule: {interval: PT12H}
- name: one-table
  tablePattern: "lake.ns002.t00007"
  priority: 20
  rewriteDataFiles: {strategy: BINPACK}
  rewriteDataFilesSchedule: {interval: PT10M}
  expireSnapshots: {}
  expireSnapshotsSchedule: {interval: PT1H}
  orphanCleanup: {}
  orphanCleanupSchedule: {interval: P1D}
  rewriteManifests: {}
  rewriteManifestsSchedule: {interval: P1D}
  rewritePositionDeleteFiles: {}
  rewritePositionDeleteFilesSchedule: {interval: PT12H}
"""

# The three kinds beyond the five Floe knows, added to each policy for ``--kinds 8`` (issue 35's 50,000-table
# row: every operation kind the registry holds), with their schedules.
EXTRA_KINDS = """\
  computeStatistics: {}
  computeStatisticsSchedule: {interval: P1D}
  tableProperties: {write.metadata.delete-after-commit.enabled: true, write.metadata.previous-versions-max: 20}
  tablePropertiesSchedule: {}
  rowRetention: {column: event_ts, maxAge: P90D}
  rowRetentionSchedule: {interval: P1D}
"""


def policies_for(kinds: int) -> str:
    """Benchmark 1's policies with 5 kinds each (Floe's), or with all 8 (:data:`EXTRA_KINDS` after each
    policy's last schedule)."""
    if kinds == 5:
        return POLICIES
    return re.sub(r"(  rewritePositionDeleteFilesSchedule: [^\n]*\n)", lambda m: m.group(1) + EXTRA_KINDS, POLICIES)


MIB = 1024 * 1024


def synthetic(n_tables: int, now: datetime, seed: int = 7):
    rng = random.Random(seed)
    now_ms = int(now.timestamp() * 1000)
    tables = [TableName("lake", (f"ns{i % NAMESPACES:03d}",), f"t{i:05d}") for i in range(n_tables)]
    metrics: dict[TableName, TableMetrics] = {}
    history: dict[tuple[str, object], OperationHistory] = {}
    for t in tables:
        files = rng.randint(20, 200)
        sizes = tuple(rng.choice((rng.randint(100_000, 4 * MIB), rng.randint(100 * MIB, 140 * MIB))) for _ in range(files))
        deletes = rng.choice((0, 0, 0, 2, 7))
        metrics[t] = TableMetrics(
            qualified_name=t.qualified, metadata_location=f"file:///w/{t.qualified}/metadata/00042.metadata.json",
            tier="full", collected_at_ms=now_ms - 30_000,
            data_file_count=files, total_data_bytes=sum(sizes), record_count=files * 1000,
            data_file_sizes=sizes, delete_file_count=deletes, position_delete_file_count=deletes,
            equality_delete_file_count=0, snapshot_count=rng.randint(1, 150),
            oldest_snapshot_ms=now_ms - rng.randint(1, 30) * 86_400_000, newest_snapshot_ms=now_ms - rng.randint(0, 86_400_000),
            manifest_count=rng.randint(1, 40), manifest_total_bytes=rng.randint(10_000, 5 * MIB),
            partition_count=1, max_files_per_partition=files, current_snapshot_id=rng.randint(1, 2**62),
            properties={"write.target-file-size-bytes": str(128 * MIB)},
            data_file_groups=(("[]", sizes, ()),),
            position_delete_groups=(("[]", tuple(rng.randint(2_000, 50_000) for _ in range(deletes))),),
        )
        for op in ALL_OPERATIONS:
            kind = rng.random()
            if kind < 0.3:  # never ran: due
                h = OperationHistory()
            elif kind < 0.7:  # ran recently and succeeded
                start = now - timedelta(minutes=rng.randint(1, 300))
                h = OperationHistory(last_run_start=start, last_run_succeeded=True, last_run_trigger="interval",
                                     last_success_start=start, runs=rng.randint(1, 50))
            elif kind < 0.85:  # failing
                start = now - timedelta(minutes=rng.randint(1, 600))
                h = OperationHistory(last_run_start=start, last_run_succeeded=False, last_run_trigger="interval",
                                     last_success_start=start - timedelta(days=1), last_failure_at=start,
                                     consecutive_failures=rng.randint(1, 6), runs=20, failures=rng.randint(1, 10))
            else:  # zero-change streak
                start = now - timedelta(hours=rng.randint(1, 10))
                h = OperationHistory(last_run_start=start, last_run_succeeded=True, last_run_trigger="interval",
                                     last_success_start=start, consecutive_zero_change=rng.randint(1, 9),
                                     last_snapshot_after=metrics[t].current_snapshot_id, runs=30)
            history[(t.qualified, op)] = h
    return tables, metrics, history


def plan_input(n_tables: int, now: datetime, estimate: bool = True) -> PlanInput:
    tables, metrics, history = synthetic(n_tables, now)
    return PlanInput(
        now=now, catalog_tables=tables, loaded_tables=frozenset(tables),
        policies=parse_policies_text(POLICIES, "bench"), limits=Limits(),
        metrics=metrics, history=history, in_flight=frozenset(), last_attempts={},
        bytes_last_hour=0, queued_runs=3, debt_weights=DebtWeights(),  # as settings.debt
        estimate_bytes=estimate_operation_bytes if estimate else None,
    )


def forget_everything(data: PlanInput) -> PlanInput:
    """As for the first tick after the code server starts, or after every table changed: the byte
    estimates and the policies' matches forgotten, and new metrics records (as the health collector
    reads them), so nothing computed on them before is kept."""
    byte_estimates._ESTIMATES.clear()
    policy_module._EFFECTIVE_BY_PATTERNS.clear()
    if gate_memo is not None:  # the last tick's gate verdicts (the code before issue 35's item 8 has none)
        gate_memo.forget()
    return PlanInput(**{**data.__dict__, "metrics": {t: dataclasses.replace(m) for t, m in data.metrics.items()}})


def time_plan(data: PlanInput, repeat: int, estimates: bool = True, cold: bool = True, policies: str = POLICIES,
              step_s: float = 0.0) -> tuple[list[float], list[float], object]:
    """Wall and CPU seconds of ``repeat`` ticks under ``policies`` (YAML); ``cold`` forgets everything
    before each (:func:`forget_everything`, outside the timed call); ``step_s``: each tick's clock that many
    seconds after the tick before's (a warm tick as the sensor meets it, its clock moved on)."""
    times, cpu, result = [], [], None
    if not estimates:
        data = PlanInput(**{**data.__dict__, "estimate_bytes": None})
    if not cold:
        plan(PlanInput(**{**data.__dict__, "policies": parse_policies_text(policies, "bench")}))  # the tick before
    for tick in range(repeat):
        if cold:
            data = forget_everything(data)
        # A fresh PolicySet each tick, as the sensor loads it.
        data_i = PlanInput(**{**data.__dict__, "policies": parse_policies_text(policies, "bench"),
                              "now": data.now + timedelta(seconds=step_s * (tick + 1))})
        # The previous tick's garbage collected outside the timed call: otherwise a collection of it
        # lands in whichever variant runs next (±30 % between runs of the same variant).
        result = None
        gc.collect()
        t0, c0 = time.perf_counter(), time.process_time()
        result = plan(data_i)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return times, cpu, result


def profile(data: PlanInput, label: str, policies: str = POLICIES, top: int = 14) -> None:
    data = forget_everything(data)
    data = PlanInput(**{**data.__dict__, "policies": parse_policies_text(policies, "bench")})
    profiler = cProfile.Profile()
    profiler.enable()
    plan(data)
    profiler.disable()
    for order in ("tottime", "cumulative"):
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).strip_dirs().sort_stats(order).print_stats(top)
        text = out.getvalue()
        print(f"\ncProfile of one plan(), {label}, by {order} (cProfile inflates times 2-3x):")
        print(text[text.find("   ncalls"):].rstrip())


def planner_variants_setup(doc: str) -> tuple[argparse.Namespace, PlanInput]:
    """The set-up of the benchmarks that set variants of a planner tick against benchmark 1's in one run
    (11, 14; they import it from here): ``--tables`` and ``--repeat``, the machine line, and benchmark 1's
    input at :data:`PLANNER_NOW`."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tables", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(machine())
    return args, plan_input(args.tables, PLANNER_NOW)


def cold_and_warm(data: PlanInput, repeat: int, policies: str
                  ) -> Iterator[tuple[str, list[float], list[float], object]]:
    """Benchmark 1's cold tick, then its warm one, of ``data`` under ``policies``: (tick, wall seconds, CPU
    seconds, the last plan)."""
    for tick, cold in (("cold", True), ("warm", False)):
        yield (tick, *time_plan(data, repeat, cold=cold, policies=policies))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tables", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--kinds", type=int, choices=(5, 8), default=5)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-profile", action="store_true")
    parser.add_argument("--vs", metavar="CHECKOUT", help="another checkout (the code before a change): both run "
                        "in turn as whole processes, with the ratios new ÷ old pair by pair")
    parser.add_argument("--rounds", type=int, default=2, help="pairs of processes with --vs")
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.vs:
        return versus_main(args)
    if not args.json:
        print(machine())
    now = PLANNER_NOW
    policies = policies_for(args.kinds)
    sizes = sorted(set(args.tables))
    rows, walls, inputs = [], {}, {}
    for n in sizes:
        started = time.perf_counter()
        data = inputs[n] = plan_input(n, now)
        built = time.perf_counter() - started
        if not args.json:
            print(f"{n:,} tables × {args.kinds} kinds (inputs built in {built:.1f} s):", flush=True)
        walls[n] = measure_size(data, args, policies)
        for label in ("cold", "warm", "warm +30 s"):
            wall, cpu = walls[n][label]
            decisions = walls[n]["decisions"]
            rows.append((f"{n:,}", args.kinds, label, decisions, f"{wall:.3f}", f"{cpu:.3f}",
                         f"{wall / SENSOR_LIMIT_S:.4f}", f"{wall / TARGET_S:.2f}", f"{cpu / TARGET_S:.2f}",
                         "yes" if wall < TARGET_S else ("CPU only" if cpu < TARGET_S else "no"),
                         walls[n].get("no byte estimates", ("-",))[0], f"{wall / decisions * 1e6:.0f}"))
    if args.json:
        print(json.dumps({str(n): {k: ({"wall": v[0], "cpu": v[1]} if isinstance(v, tuple) else v)
                                   for k, v in walls[n].items()} for n in sizes} | {"peak_rss_mib": peak_rss_mib()}))
        return
    print()
    print(table(rows, ["tables", "kinds", "tick", "decisions", "wall s (median)", "CPU s (median)", "wall ÷ 60 s limit",
                       "wall ÷ 2 s target", "CPU ÷ 2 s target", "< 2 s", "no byte estimates, wall s",
                       "µs per decision (wall)"]))
    if len(sizes) > 1:
        n1, n2 = sizes[0], sizes[-1]
        for label in ("cold", "warm"):
            print(f"{label}: {n2 / n1:.1f}x the tables took {walls[n2][label][0] / walls[n1][label][0]:.1f}x the wall time, "
                  f"{walls[n2][label][1] / walls[n1][label][1]:.1f}x the CPU time (linear would be {n2 / n1:.1f}x)")
    for n in sizes:
        print(f"{n:,} tables: warm ÷ cold wall {walls[n]['warm'][0] / walls[n]['cold'][0]:.2f}, "
              f"no estimates ÷ cold wall {walls[n]['no byte estimates'][0] / walls[n]['cold'][0]:.2f}")
    print(f"peak RSS {peak_rss_mib():.0f} MiB")
    if not args.no_profile:
        profile(inputs[sizes[-1]], f"{sizes[-1]:,} tables", policies)


def measure_size(data: PlanInput, args: argparse.Namespace, policies: str) -> dict:
    """Median (wall, CPU) seconds of each tick of one size, its number of decisions, and the process's peak RSS
    after each (``--json``: the cold and the two warm ticks only)."""
    runs: dict = {}
    variants = [("cold", {"cold": True}), ("warm", {"cold": False}), ("warm +30 s", {"cold": False, "step_s": 30.0})]
    if not args.json:
        variants.append(("no byte estimates", {"estimates": False}))
    for label, kwargs in variants:
        times, cpu, result = time_plan(data, args.repeat, policies=policies, **kwargs)
        runs[label] = (statistics.median(times), statistics.median(cpu))
        runs["decisions"] = len(result.decisions)
        runs[f"peak RSS MiB after {label}"] = peak_rss_mib()  # the process's peak so far: which tick raised it
        if not args.json:
            print(f"  {label}: plan() wall {describe(times)}; CPU {describe(cpu)}; {len(result.decisions)} decisions, "
                  f"{len(result.admitted)} admitted; skips {result.reason_counts()}", flush=True)
        del result  # not held while the next variant's ticks run (a sensor keeps no plan of the tick before)
    return runs


def versus_main(args: argparse.Namespace) -> None:
    """This checkout against ``--vs`` (the code before), in turn as whole processes, ``--rounds`` pairs."""
    print(machine())
    argv = [__file__, "--json", "--no-profile", "--kinds", str(args.kinds), "--repeat", str(args.repeat),
            "--tables", *map(str, args.tables)]
    runs = versus(argv, args.vs, args.rounds)
    keys = [f"{n}/{tick}/{figure}" for n in sorted(set(args.tables)) for tick in ("cold", "warm", "warm +30 s")
            for figure in ("cpu", "wall")] + ["peak_rss_mib"]
    print()
    print(table(ratio_rows(runs, keys), ["figure (tables/tick/s)", "old (median)", "new (median)",
                                         "new ÷ old (median of pairs)", "pairs' range"]))


if __name__ == "__main__":
    main()
