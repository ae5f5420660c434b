"""Benchmark 15: learned ranking against the static debt score, under one compute budget (issue 29).

1. **Calibration** (real Spark + Iceberg, ``_spark_costs.py``): a handful of ``rewrite_data_files`` and
   ``rewrite_position_delete_files`` runs on tables of different shapes, their executor CPU seconds
   read from Spark's status store, fitted into two cost models (printed with R² and the largest
   relative error). Cached in ``/tmp/floe-bench/learned/calibration.json``; ``--recalibrate`` measures again.
2. **Simulation** (``_lakehouse_sim.py``): a lakehouse of ``--tables`` tables of mixed shapes, ``--days``
   simulated days of hourly planner ticks. Each tick the real planner (``core/plan/planner.plan``, with
   the real health assessment, debt score and byte estimates) gives the candidates; the same compute
   budget per simulated hour (executor CPU seconds, ``--budget-share`` of what the whole fleet's due
   work would take in the first hour) is spent in each ranking's order: the static one (the debt
   score, as the planner ranks) and the learned one (debt score × the efficiency factor of
   ``core/value/learned_ranking.py``, learned from the simulated runs' figures). Admission is on the
   compute estimate of ``core/value/learned_ranking.py`` in both; each admitted run costs what the
   calibrated model says for the files it really rewrites, times the table's hidden schema cost and a
   lognormal noise; its benefit is what it really removes. Printed: files removed, scan cost saved,
   compute used, and small files removed per compute hour, for each ranking.

Target: the learned ranking removes at least 20 % more small files per compute hour than the static one.

    python benchmarks/bench_learned_ranking.py [--tables 1200] [--days 7] [--budget-share 0.25] [--seed 7]
        [--repeat 2] [--recalibrate] [--calibrate-only]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import JARS_CACHE, ensure_java, machine, table  # noqa: E402
from _lakehouse_sim import DATA, MIB, SHAPES, run_simulation  # noqa: E402

ROOT = Path(os.environ.get("FLOE_BENCH_LEARNED_ROOT", "/tmp/floe-bench/learned"))
CALIBRATION = ROOT / "calibration.json"


def phase_calibrate(repeat: int, only: set[str] | None) -> None:
    import _spark_costs as costs

    from floe_dagster.iceberg.catalog import open_catalog
    from floe_dagster.settings import load_settings
    from floe_dagster.spark.engine import IcebergSparkEngine

    root = Path(tempfile.mkdtemp(prefix="floe-bench-calibration-"))
    try:
        (root / "data").mkdir()
        config = root / "floe.yaml"
        config.write_text(f"data-dir: {root / 'data'}\npolicies: []\ncatalog:\n  name: demo\n  properties:\n"
                          f"    type: sql\n    uri: sqlite:///{root / 'data' / 'catalog.db'}\n"
                          f"    warehouse: file://{root / 'data' / 'warehouse'}\n"
                          f"spark:\n  master: local[2]\n  jars-cache: {JARS_CACHE}\n"
                          "  conf: {spark.driver.memory: 3g, spark.ui.retainedStages: '100000', "
                          "spark.ui.retainedJobs: '100000'}\n")
        settings = load_settings(config, environ={})
        open_catalog(settings.catalog)  # creates the SQLite catalog's tables
        engine = IcebergSparkEngine.from_settings(settings)
        load = "/".join(f"{x:.2f}" for x in os.getloadavg())
        t0 = time.perf_counter()
        runs = costs.calibrate(engine, f"file:{root / 'data' / 'warehouse'}", repeat, only)
        engine.stop()
        if only and CALIBRATION.exists():  # the other shapes' runs kept from the last calibration
            kept = json.loads(CALIBRATION.read_text())["runs"]
            runs = [r for r in kept if r["shape"] not in only and r["shape"] in costs.SHAPES] + runs
        payload = {"machine": machine(), "load_at_start": load, "load_at_end": "/".join(
            f"{x:.2f}" for x in os.getloadavg()), "seconds": round(time.perf_counter() - t0), "runs": runs,
            "fit": costs.fit(runs), "fit_jvm_cpu": costs.fit(runs, "jvm_cpu_s"), "fit_wall": costs.fit(runs, "wall_s")}
        costs.save(CALIBRATION, payload)
        print(f"calibration saved to {CALIBRATION}", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def print_calibration(payload: dict) -> None:
    print(f"calibration ({payload['machine']}; load {payload['load_at_start']} → {payload['load_at_end']}, "
          f"{payload['seconds']} s)")
    rows = [(r["shape"], r["operation"].replace("rewrite_", ""), r["attempt"], r["schema"], r["data_files"],
             f"{r['data_bytes'] / 2**20:.0f}", r["partitions"], r["delete_files"], f"{r['executor_cpu_s']:.1f}",
             f"{r['jvm_cpu_s']:.1f}", f"{r['wall_s']:.1f}") for r in payload["runs"]]
    print(table(rows, ["shape", "CALL", "#", "schema", "data files", "MiB", "partitions", "delete files",
                       "executor CPU s", "JVM CPU s", "wall s"]))
    for label, key in (("executor CPU s", "fit"), ("JVM CPU s", "fit_jvm_cpu"), ("wall s", "fit_wall")):
        for operation, model in payload[key].items():
            terms = ", ".join(f"{name} {value:.4g}" for name, value in model["terms"].items())
            print(f"fit {label} of {operation}: {terms} (R² {model['r2']:.3f}, largest relative error "
                  f"{model['max_rel_error']:.0%}, {model['runs']} runs)")


def small_per_hour(totals: dict[str, float]) -> float:
    small = totals.get("data_files_removed", 0) + totals.get("delete_files_removed", 0)
    return small / (totals["compute_s"] / 3600) if totals.get("compute_s") else 0.0


def by_shape(totals: dict[str, float], shape: str) -> str:
    runs, seconds = int(totals.get(f"runs_{shape}", 0)), totals.get(f"compute_{shape}", 0.0)
    per_hour = f"{totals.get(f'removed_{shape}', 0) * 3600 / seconds:,.0f}" if seconds else "-"
    return f"{runs} / {seconds / 3600:.2f} / {per_hour}"


def report(worlds: list) -> None:
    rows = []
    for label, pick in (("whole run", lambda w: w.totals), ("last third", lambda w: w.late)):
        for world in worlds:
            t = pick(world)
            hours = t.get("compute_s", 0) / 3600
            small = t.get("data_files_removed", 0) + t.get("delete_files_removed", 0)
            rows.append((label, world.variant.label, int(t.get("runs", 0)), f"{hours:.2f}",
                         int(t.get("data_files_removed", 0)), int(t.get("delete_files_removed", 0)), int(small),
                         f"{small_per_hour(t):,.0f}", f"{t.get('scan_cost_saved', 0):,.0f}",
                         f"{t.get('scan_cost_saved', 0) / hours:,.0f}" if hours else "-"))
    print()
    print(table(rows, ["period", "ranking", "runs", "compute h", "data files removed", "delete files removed",
                          "small files removed", "small files removed per compute h", "scan cost saved (file opens)",
                          "scan cost saved per compute h"]))
    static = worlds[0]
    for label, pick in (("whole run", lambda w: w.totals), ("last third", lambda w: w.late)):
        for world in worlds[1:]:
            base = small_per_hour(pick(static))
            gain = small_per_hour(pick(world)) / base - 1 if base else float("nan")
            print(f"{label}: {world.variant.label} removes {gain:+.1%} small files per compute hour against the static "
                  "ranking (target +20 %)")
    end = []
    for world in worlds:
        files = sum(len(s) for t in world.tables.values() for s in t.files.values())
        deletes = sum(len(s) for t in world.tables.values() for s in t.deletes.values())
        cost = sum(t.scan()[0] + t.scan()[1] / (4 * MIB) for t in world.tables.values())
        end.append((world.variant.label, files, deletes, f"{cost:,.0f}"))
    print("\nthe lakehouse at the end (fewer is better)")
    print(table(end, ["ranking", "data files", "delete files", "scan cost of a full scan of every table (file opens)"]))
    rows = []
    for shape, _ in SHAPES:
        debts = static.first_debt.get(shape, [0.0])
        factors = sorted(f for (name, op), f in worlds[1].last_factor.items()
                         if op is DATA and worlds[1].tables[name].shape == shape)
        rows.append((shape, f"{sum(debts) / len(debts):.0f}", f"{factors[len(factors) // 2]:.2f}" if factors else "-",
                     *(by_shape(w.totals, shape) for w in worlds)))
    print("\nby table shape: the mean debt score of the first tick's candidates, the median learned factor (rewrite "
          "data files) at the end, and in each world: runs / compute hours / small files removed per compute hour")
    print(table(rows, ["shape", "debt", "factor", *(w.variant.label for w in worlds)]))
    learned = worlds[1]
    moved = sum(s[1] for s in learned.shadow) / max(1, sum(s[0] for s in learned.shadow))
    print(f"\nshadow comparison in the learned world (compare_rankings each tick): {moved:.0%} of the admitted items "
          f"would not have been admitted by the static order under the same budget")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tables", type=int, default=1200)
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--budget-share", default="0.25,0.5", help="budgets, as shares of the hourly demand")
    parser.add_argument("--no-ablation", action="store_true", help="only the static and the learned ranking")
    parser.add_argument("--variants", help="indexes of the rankings to simulate besides the static one (1: learned, "
                        "2: byte-estimate prior only, 3: history only with the fleet's prior, as the planner ranks)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--recalibrate", action="store_true")
    parser.add_argument("--calibrate-only", action="store_true")
    parser.add_argument("--only", help=argparse.SUPPRESS)  # calibrate these shapes only (a trial)
    parser.add_argument("--phase", help=argparse.SUPPRESS)
    args = parser.parse_args()
    ensure_java()
    if args.phase == "calibrate":
        phase_calibrate(args.repeat, set(args.only.split(",")) if args.only else None)
        return
    print(machine(), flush=True)
    if args.recalibrate or not CALIBRATION.exists():
        command = [sys.executable, __file__, "--phase", "calibrate", "--repeat", str(args.repeat)]
        subprocess.run(command + (["--only", args.only] if args.only else []), check=True)
    payload = json.loads(CALIBRATION.read_text())
    print_calibration(payload)
    if args.calibrate_only:
        return
    for worlds in run_simulation(payload["fit"], tables=args.tables, days=args.days,
                                 budget_shares=[float(x) for x in args.budget_share.split(",")], seed=args.seed,
                                 ablation=not args.no_ablation,
                                 variants=[int(x) for x in args.variants.split(",")] if args.variants else None):
        report(worlds)


if __name__ == "__main__":
    main()
