"""Benchmark 13: orphan quarantine against plain deletion at 100,000 files (issue 26: the quarantine may
cost at most 2 % of an orphan cleanup of 100,000 files). The lakehouse is benchmark 9's (a real
Spark-written table, SQLite catalog, every file 10 days old), built by its code under
``/tmp/floe-bench/quarantine`` with ``--files`` empty orphans, 10 days old, in ``--folders`` folders.

Modes, each one ``engine.maintain(ORPHAN_CLEANUP)`` as a floe run makes it (with the run's context: the
table's location, its PyIceberg FileIO, a run id, the table's version), in its own process and driver
JVM, timed from the call to its return (the session is started and warmed first, not timed):

* ``delete``: the policy's default delete mode: one streamed ``remove_orphan_files`` (and the purge's
  look at the quarantine folder, empty here);
* ``quarantine``: ``quarantine: {enabled: true}``: an unstreamed dry run lists every orphan, floe reads
  each file's size and time, and moves it into ``_floe_quarantine/<run>/``;
* ``listing``: the quarantine's dry run alone (``dryRun: true, streamResults: false``), which shows what
  of the quarantine's time is Iceberg's listing and what is floe's moving.

The modes run in turn, ``--pairs`` times (delete, quarantine, listing, delete, …: side by side, so a
drifting machine moves them together), the orphans hard-linked back from the stash (same inodes, same
old times) and the quarantine emptied before each. Every run checks that the table's referenced files
are all there, its rows unchanged, and that no orphan is left in ``data/`` (delete, quarantine) or
every one is in the quarantine (quarantine).

    python benchmarks/bench_quarantine.py [--files 100000] [--folders 100] [--pairs 3] [--rebuild]
    python benchmarks/bench_quarantine.py --once quarantine   # one mode, its lakehouse reset first (timing
                                                               # whole processes: reset, JVM start and all)
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_orphans as lake  # noqa: E402  (benchmark 9's lakehouse, in a folder of this benchmark's)
from _common import ensure_java, machine, peak_rss_mib, table  # noqa: E402

lake.ROOT = Path("/tmp/floe-bench/quarantine")
MODES = {
    "delete": {"retentionPeriodInDays": 3, "quarantine": {"enabled": False}},
    "quarantine": {"retentionPeriodInDays": 3, "quarantine": {"enabled": True}},
    "listing": {"retentionPeriodInDays": 3, "dryRun": True, "streamResults": False},
}
QUARANTINE = "_floe_quarantine"


def reset(built: dict) -> None:
    """The orphans back in data/ (benchmark 9's restore), the quarantine empty."""
    shutil.rmtree(Path(built["location"]) / QUARANTINE, ignore_errors=True)
    lake.restore(built)


def built_lake(files: int, folders: int, rebuild: bool) -> dict:
    """Benchmark 9's lakehouse with ``files`` orphans, built unless it already is."""
    built_file = lake.ROOT / "built.json"
    if rebuild or not built_file.exists() or json.loads(built_file.read_text())["files"] != files:
        lake.build(files, folders, "1g")
    return json.loads(built_file.read_text())


def run_mode(mode: str) -> None:
    """One mode in this process: prints one JSON line with its figures and checks."""
    from floe_dagster.core.operation_kinds.orphan_cleanup import OrphanCleanupConfig
    from floe_dagster.core.operations import Operation
    from floe_dagster.core.basics.tables import TableName
    from floe_dagster.iceberg.catalog import load_table, open_catalog
    from floe_dagster.spark.engine import IcebergSparkEngine
    from floe_dagster.spark.orphan_runs import orphan_context

    built = json.loads((lake.ROOT / "built.json").read_text())
    settings = lake.settings_for("1g")
    name = TableName("demo", ("bench",), "events")
    catalog = open_catalog(settings.catalog)
    iceberg_table = load_table(catalog, name)
    engine = IcebergSparkEngine.from_settings(settings)
    with engine.unit_of_work() as spark:
        spark.sql("SELECT 1").collect()
    context = orphan_context(catalog, iceberg_table, name, str(uuid.uuid4()))
    config = OrphanCleanupConfig.from_mapping(MODES[mode])
    t0 = time.perf_counter()
    outcome = engine.maintain(name, Operation.ORPHAN_CLEANUP, config, datetime.now(timezone.utc),
                              table_properties=iceberg_table.properties, orphans=context)
    seconds = time.perf_counter() - t0
    engine.stop()
    location = Path(built["location"])
    left = sum(1 for _ in (location / "data").glob("orphan_part=*/*"))
    held = sum(1 for p in (location / QUARANTINE).rglob("*.parquet")) if (location / QUARANTINE).exists() else 0
    missing = sum(1 for p in built["referenced"] if not Path(p).exists())
    rows = load_table(open_catalog(settings.catalog), name).scan().to_arrow().num_rows
    print(json.dumps({"mode": mode, "seconds": seconds, "python_peak_mib": peak_rss_mib(),
                      "removed": outcome.result.numbers.get("orphan_files_count"),
                      "exact": outcome.result.numbers.get("orphan_files_count_exact"),
                      "left_in_data": left, "in_quarantine": held, "referenced_missing": missing, "rows": rows}),
          flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for flag, default in (("--files", 100_000), ("--folders", 100), ("--pairs", 3)):
        parser.add_argument(flag, type=int, default=default)
    parser.add_argument("--modes", default="delete,quarantine,listing")
    parser.add_argument("--rebuild", action="store_true")
    # --once MODE: reset the lakehouse and run one mode in this process (for timing whole processes).
    parser.add_argument("--once", choices=list(MODES))
    parser.add_argument("--run-mode", help=argparse.SUPPRESS)
    args = parser.parse_args()
    ensure_java()
    if args.run_mode or args.once:
        if args.once:
            reset(json.loads((lake.ROOT / "built.json").read_text()))
        run_mode(args.run_mode or args.once)
        return
    print(machine(), flush=True)
    built = built_lake(args.files, args.folders, args.rebuild)
    print(f"warehouse: {built['files']} orphans + {len(built['referenced'])} table files under {built['location']}",
          flush=True)
    results: dict[str, list[dict]] = {mode: [] for mode in args.modes.split(",")}
    for pair in range(args.pairs):
        for mode in results:
            reset(built)
            done = subprocess.run([sys.executable, __file__, "--run-mode", mode], capture_output=True, text=True)
            line = next((l for l in reversed(done.stdout.splitlines()) if l.startswith("{")), None)
            if done.returncode != 0 or line is None:
                raise SystemExit(f"{mode} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
            print(f"pair {pair + 1}: {line}", flush=True)
            results[mode].append(json.loads(line))
    reset(built)
    summarize(results)


def summarize(results: dict[str, list[dict]]) -> None:
    rows = []
    for mode, runs in results.items():
        times = [r["seconds"] for r in runs]
        last = runs[-1]
        rows.append((mode, f"{statistics.median(times):.2f}", f"{min(times):.2f}-{max(times):.2f}",
                     last["removed"], last["left_in_data"], last["in_quarantine"], last["referenced_missing"],
                     last["rows"], f"{max(r['python_peak_mib'] for r in runs):.0f}"))
    print()
    print(table(rows, ["mode", "median s", "range s", "files removed (reported)", "orphans left in data/",
                       "files in quarantine", "referenced files missing", "rows", "Python peak RSS MiB"]))
    if "delete" in results and "quarantine" in results:
        ratios = [q["seconds"] / d["seconds"] for d, q in zip(results["delete"], results["quarantine"])]
        extra = (statistics.median(ratios) - 1) * 100
        print(f"\nquarantine ÷ delete, pair by pair: {', '.join(f'{r:.3f}' for r in ratios)}; median "
              f"{statistics.median(ratios):.3f}: the quarantine costs {extra:+.1f} % of the orphan cleanup "
              f"(target ≤ 2 %: {'met' if extra <= 2 else 'missed'})")
    if "listing" in results and "quarantine" in results:
        moving = [q["seconds"] - l["seconds"] for l, q in zip(results["listing"], results["quarantine"])]
        print(f"quarantine − its listing alone (floe's reading and moving), pair by pair: "
              f"{', '.join(f'{m:.2f} s' for m in moving)}")


if __name__ == "__main__":
    main()
