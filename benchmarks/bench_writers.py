"""Benchmark 14: the planner tick at scale with writer mappings (issue 28), against benchmark 1's tick in the
same run.

Benchmark 1's inputs (``bench_planner.plan_input``), then every table given a writer: one floe.yaml rule
(``writers: [{tables: "lake.*.*", asset: "warehouse/{namespace}/{table}"}]``) merged with one learned writer
per table (``dagster/table_name``) as the coordination database would hand them (``writers_by_table``, the
part of ``gather`` the writers add, timed on its own), and a tenth of the writers with a run started now (the
gate ``writer_running`` holds their tables' rewrites and expiries). Two variants: **writers** (the writer
hold only) and **writers + afterWrite** (every policy's rewrite schedule also ``afterWrite: {}``, settle
PT5M, half of the writers with a materialization 10 minutes old). Cold and warm ticks as in benchmark 1,
in ``--repeat`` rounds that each tick every variant once (so the shared machine's changing load falls on
all of them alike); wall and CPU time (median of the rounds), each variant's ratio to benchmark 1, and the
median of the rounds' ratios.

    python benchmarks/bench_writers.py [--tables 10000] [--repeat 3]
"""

from __future__ import annotations

import statistics
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import PLANNER_NOW, describe, peak_rss_mib, table  # noqa: E402
from bench_planner import cold_and_warm, planner_variants_setup  # noqa: E402
from bench_planner import POLICIES  # noqa: E402

from floe_dagster.core.plan.planner import PlanInput  # noqa: E402
from floe_dagster.core.basics.validation import standalone  # noqa: E402
from floe_dagster.core.schedules.writers import SOURCE_TABLE_NAME, Writer, WriterRun, read_writer_rules, writers_by_table  # noqa: E402

# Every policy's rewrite schedule keeps its cron or interval and is also due after writes.
AFTER_WRITE_POLICIES = POLICIES.replace("rewriteDataFilesSchedule: {", "rewriteDataFilesSchedule: {afterWrite: {}, ")


def with_writers(base: PlanInput, now: datetime) -> tuple[PlanInput, float]:
    """Every table with a rule's writer and a learned one; a tenth of the rule writers running now, half of
    them written 10 minutes ago. Returns the input and the seconds ``writers_by_table`` took."""
    rules = read_writer_rules(standalone(), [{"tables": "lake.*.*", "asset": "warehouse/{namespace}/{table}"}])
    learned = {}
    for i, t in enumerate(base.catalog_tables):
        written = now - timedelta(minutes=10) if i % 2 else now - timedelta(days=3)
        learned[t.qualified] = (Writer(("warehouse", t.namespace_str, t.name), "rule", i, f"run-{i}", written),
                                Writer(("etl", t.name), SOURCE_TABLE_NAME, i + 10**6, f"etl-{i}", written))
    t0 = time.perf_counter()
    writers = writers_by_table(base.catalog_tables, rules, learned)
    seconds = time.perf_counter() - t0
    running = {}
    for i, t in enumerate(base.catalog_tables):
        if i % 10 == 0:
            key = ("warehouse", t.namespace_str, t.name)
            running[key] = (WriterRun(f"run-{i}", "STARTED", key),)
    return PlanInput(**{**base.__dict__, "writers": writers, "writer_runs": running}), seconds


def main() -> None:
    args, base = planner_variants_setup(__doc__)
    mapped, merge_s = with_writers(base, PLANNER_NOW)
    print(f"{args.tables:,} tables × 5 operations; writers_by_table (rules + learned rows): {merge_s:.3f} s",
          flush=True)
    variants = {"benchmark 1": (base, POLICIES), "writers": (mapped, POLICIES),
                "writers + afterWrite": (mapped, AFTER_WRITE_POLICIES)}
    # Round robin: each round ticks every variant once (cold, then warm), so a change in the machine's load
    # (shared: other processes come and go) falls on every variant alike, pair by pair.
    walls: dict[tuple[str, str], list[float]] = {}
    cpus: dict[tuple[str, str], list[float]] = {}
    results = {}
    for _ in range(args.repeat):
        for label, (data, policies) in variants.items():
            for tick, wall, cpu, result in cold_and_warm(data, 1, policies):
                walls.setdefault((label, tick), []).extend(wall)
                cpus.setdefault((label, tick), []).extend(cpu)
                results[(label, tick)] = result
    rows = []
    for (label, tick), times in walls.items():
        result, cpu_times = results[(label, tick)], cpus[(label, tick)]
        wall, cpu = statistics.median(times), statistics.median(cpu_times)
        wall0, cpu0 = statistics.median(walls[("benchmark 1", tick)]), statistics.median(cpus[("benchmark 1", tick)])
        pairs = [c / c0 for c, c0 in zip(cpu_times, cpus[("benchmark 1", tick)])]
        print(f"  {label}, {tick}: wall {describe(times)}; CPU {describe(cpu_times)}; CPU ÷ benchmark 1 round by "
              f"round {', '.join(f'{r:.2f}' for r in pairs)}; {len(result.admitted)} admitted; "
              f"skips {result.reason_counts()}", flush=True)
        rows.append((label, tick, f"{wall:.3f}", f"{cpu:.3f}", f"{wall / wall0:.2f}", f"{cpu / cpu0:.2f}",
                     f"{statistics.median(pairs):.2f}", len(result.admitted)))
    print()
    print(table(rows, ["variant", "tick", "wall s (median)", "CPU s (median)", "wall ÷ bench 1", "CPU ÷ bench 1",
                       "CPU ÷ bench 1, median of the rounds' ratios", "admitted"]))
    print(f"peak RSS {peak_rss_mib():.0f} MiB")


if __name__ == "__main__":
    main()
