"""Benchmark 11: the planner tick at scale with fair shares and shadow policies, against benchmark
1's tick in the same run.

Benchmark 1's inputs (``bench_planner.plan_input``: N tables in 20 namespaces × 5 operations, four
policies, full-tier health, a history per (table, operation), the real byte estimator), planned
under two sets of budgets, each with fair shares off (benchmark 1 itself) and on (``by: namespace``,
two namespaces weighted): **benchmark 1's budgets** (Floe's unlimited defaults: only the tick cap of
25 run requests binds) and **scarce budgets** (500 tables, 500 operations and 50 GiB a tick, 100 run
requests, batches of 20 tables: every budget binds, so the fair order does the most work). Cold and
warm ticks as in benchmark 1; wall and CPU time (median of ``--repeat``), and each variant's ratio to
fair shares off under the same budgets.

With shadow policies (``mode: shadow``, a second budget pass after the live one): five of the 20
namespaces onboarded by shadow policies (``SHADOW_POLICIES``), alone and with fair shares under
scarce budgets.

    python benchmarks/bench_fair_shares.py [--tables 10000] [--repeat 3]
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import describe, peak_rss_mib, table  # noqa: E402
from bench_planner import cold_and_warm, planner_variants_setup  # noqa: E402
from bench_planner import POLICIES  # noqa: E402

from floe_dagster.core.plan.batches import BatchSettings  # noqa: E402
from floe_dagster.core.plan.fair_shares import FairShareSettings  # noqa: E402
from floe_dagster.core.plan.planner import PlanInput, SchedulerSettings  # noqa: E402

GIB = 1024**3
BY_NAMESPACE = FairShareSettings(by="namespace", weights={"ns000": 3, "ns001": 2})
SCARCE = {"limits": SchedulerSettings(max_tables_per_poll=500, max_operations_per_poll=500,
                                      max_bytes_per_hour=50 * GIB, max_run_requests_per_tick=100),
          "batching": BatchSettings(max_tables=20)}
# Five namespaces (a quarter of the tables) onboarded by shadow policies: the most specific match, so
# these tables' decisions all go through the shadow pass (a budget pass of its own after the live one).
SHADOW_POLICIES = "".join(f"""
- name: onboarding-ns00{n}
  mode: shadow
  tablePattern: "lake.ns00{n}.*"
  priority: 20
  rewriteDataFiles: {{strategy: BINPACK, targetFileSizeBytes: 268435456, minInputFiles: 10}}
  rewriteDataFilesSchedule: {{interval: PT2H}}
  expireSnapshots: {{retainLast: 10}}
  expireSnapshotsSchedule: {{interval: PT1H}}
""" for n in range(5, 10))
# label → (budgets, changes to benchmark 1's PlanInput, policies YAML); each variant is compared to
# the first one with the same budgets.
VARIANTS = {
    "benchmark 1": ("benchmark 1's", {}, POLICIES),
    "fair shares": ("benchmark 1's", {"fair_shares": BY_NAMESPACE}, POLICIES),
    "benchmark 1, scarce budgets": ("scarce", SCARCE, POLICIES),
    "fair shares, scarce budgets": ("scarce", {**SCARCE, "fair_shares": BY_NAMESPACE}, POLICIES),
    "shadow policies": ("benchmark 1's", {}, POLICIES + SHADOW_POLICIES),
    "fair shares + shadow policies, scarce budgets": ("scarce", {**SCARCE, "fair_shares": BY_NAMESPACE},
                                                      POLICIES + SHADOW_POLICIES),
}


def main() -> None:
    args, base = planner_variants_setup(__doc__)
    print(f"{args.tables:,} tables × 5 operations, {len({t.namespace for t in base.catalog_tables})} namespaces",
          flush=True)
    medians: dict[tuple[str, str], tuple[float, float]] = {}
    rows = []
    for label, (budgets, changes, policies) in VARIANTS.items():
        data = PlanInput(**{**base.__dict__, **changes})
        for tick, walls, cpus, result in cold_and_warm(data, args.repeat, policies):
            medians[(label, tick)] = (statistics.median(walls), statistics.median(cpus))
            reference = next(name for name, (b, _, _) in VARIANTS.items() if b == budgets)
            wall0, cpu0 = medians[(reference, tick)]
            namespaces = sorted({d.table.namespace_str for d in result.admitted})
            per_namespace = [sum(1 for d in result.admitted if d.table.namespace_str == ns) for ns in namespaces]
            print(f"  {label}, {tick}: wall {describe(walls)}; CPU {describe(cpus)}; {len(result.admitted)} admitted "
                  f"in {len(result.batches())} runs, {len(result.shadowed)} shadow decisions, per namespace {min(per_namespace, default=0)}–"
                  f"{max(per_namespace, default=0)}; skips {result.reason_counts()}", flush=True)
            wall, cpu = medians[(label, tick)]
            rows.append((label, budgets, tick, f"{wall:.3f}", f"{cpu:.3f}", f"{wall / wall0:.2f}", f"{cpu / cpu0:.2f}",
                         len(result.admitted), len(result.batches()), len(result.shadowed)))
    print()
    print(table(rows, ["variant", "budgets", "tick", "wall s (median)", "CPU s (median)", "wall ÷ off",
                       "CPU ÷ off", "admitted", "runs", "shadow"]))
    print(f"peak RSS {peak_rss_mib():.0f} MiB")


if __name__ == "__main__":
    main()
