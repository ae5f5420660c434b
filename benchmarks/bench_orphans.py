"""Benchmark 9: orphan cleanup at 500,000 files (issue 21, items 4 and 5). One real small Iceberg table
(Spark-written, SQLite catalog) whose location also holds ``--files`` orphan files (empty, 10 days old,
in ``--folders`` partition-like folders under ``data/``), built once under ``/tmp/floe-bench/orphans``.
Each mode runs ``engine.maintain(ORPHAN_CLEANUP)`` as a floe run does, in its own process with its own
Spark driver JVM, and prints:

* the run's wall-clock time (Spark session start not included) and what it reported (files deleted,
  whether that count is exact, the cap and the backlog);
* the driver's peak RSS: ``VmHWM`` of the Spark driver JVM (``/proc/<pid>/status``; local mode, so the
  executors' listing and join run in that JVM too), and the Python process's own peak RSS;
* that every file the table references is still there, and the rows are the same.

Modes: ``unstreamed`` (``streamResults: false``: every orphan path comes back to the driver),
``streamed`` (the default from Iceberg 1.11) and ``capped`` (streamed, ``maxFilesToDelete: --cap``).
Before each mode the orphans are hard-linked back from a stash outside the table (same inodes, so the
same old mtimes), so each mode starts from the same warehouse.

    python benchmarks/bench_orphans.py [--files 500000] [--folders 500] [--cap 10000]
        [--driver-memory 4g] [--modes unstreamed,streamed,capped] [--rebuild]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import JARS_CACHE, ensure_java, machine, peak_rss_mib, table  # noqa: E402

ROOT = Path("/tmp/floe-bench/orphans")
TEN_DAYS_AGO = time.time() - 10 * 86400
POLICY = """
- name: bench
  tablePattern: "demo.bench.*"
  orphanCleanup: {retentionPeriodInDays: 3}
  orphanCleanupSchedule: {interval: P1D}
"""
MODES = {
    "unstreamed": {"streamResults": False},
    "streamed": {},
    "capped": {"maxFilesToDelete": None},  # --cap
}


def settings_for(driver_memory: str):
    from floe_dagster.settings import load_settings

    (ROOT / "policies").mkdir(parents=True, exist_ok=True)
    (ROOT / "policies" / "policies.yaml").write_text(POLICY)
    config = ROOT / "floe.yaml"
    config.write_text(f"data-dir: {ROOT / 'data'}\npolicies: [{ROOT / 'policies'}]\n"
                      f"spark:\n  jars-cache: {JARS_CACHE}\n  conf: {{spark.driver.memory: {driver_memory}}}\n")
    return load_settings(config, environ={})


def build(files: int, folders: int, driver_memory: str) -> None:
    """The table (three inserts), every file of it 10 days old, and ``files`` orphans in the stash."""
    from floe_dagster.core.basics.tables import TableName
    from floe_dagster.demo import local_path
    from floe_dagster.iceberg.catalog import load_table, open_catalog
    from floe_dagster.spark.engine import IcebergSparkEngine
    from floe_dagster.spark.procedures import spark_table_reference

    shutil.rmtree(ROOT, ignore_errors=True)
    settings = settings_for(driver_memory)
    catalog = open_catalog(settings.catalog)
    catalog.create_namespace("bench")
    name = TableName("demo", ("bench",), "events")
    engine = IcebergSparkEngine.from_settings(settings)
    with engine.unit_of_work() as spark:
        ref = spark_table_reference(name)
        spark.sql(f"CREATE TABLE {ref} (id BIGINT, kind STRING) USING iceberg")
        for start in (0, 1000, 2000):
            spark.sql(f"INSERT INTO {ref} SELECT id, 'k' || id FROM range({start}, {start + 1000})")
    engine.stop()
    location = local_path(load_table(catalog, name).location())
    referenced = sorted(str(p) for p in location.rglob("*") if p.is_file())
    for path in referenced:
        os.utime(path, (TEN_DAYS_AGO, TEN_DAYS_AGO))  # only being referenced protects them
    stash = ROOT / "stash"
    t0 = time.perf_counter()
    per_folder = -(-files // folders)
    made = 0
    for folder in range(folders):
        target = stash / f"orphan_part={folder:04d}"
        target.mkdir(parents=True)
        for i in range(min(per_folder, files - made)):
            path = target / f"00000-{folder}-{i:07d}-orphan.parquet"
            path.touch()
            os.utime(path, (TEN_DAYS_AGO, TEN_DAYS_AGO))
        made += min(per_folder, files - made)
    (ROOT / "built.json").write_text(json.dumps({"files": files, "folders": folders, "location": str(location),
                                                 "referenced": referenced}))
    print(f"built {files} orphan files in {folders} folders in {time.perf_counter() - t0:.0f} s; "
          f"the table has {len(referenced)} files", flush=True)


def restore(built: dict) -> None:
    """The orphans hard-linked into the table's data/ folder (leftovers of an earlier mode removed first)."""
    data = Path(built["location"]) / "data"
    for folder in data.glob("orphan_part=*"):
        shutil.rmtree(folder)
    subprocess.run(["cp", "-al", *[str(p) for p in sorted((ROOT / "stash").iterdir())], str(data)], check=True)


def driver_jvm_pid(spark) -> int:
    return int(spark._jvm.java.lang.ProcessHandle.current().pid())


def vm_hwm_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def run_mode(mode: str, cap: int, driver_memory: str) -> None:
    """One mode in this process: prints one JSON line with the figures."""
    from floe_dagster.core.operation_kinds.orphan_cleanup import OrphanCleanupConfig
    from floe_dagster.core.operations import Operation
    from floe_dagster.core.basics.tables import TableName
    from floe_dagster.iceberg.catalog import load_table, open_catalog
    from floe_dagster.spark.engine import IcebergSparkEngine

    built = json.loads((ROOT / "built.json").read_text())
    settings = settings_for(driver_memory)
    name = TableName("demo", ("bench",), "events")
    raw = dict(MODES[mode])
    if "maxFilesToDelete" in raw:
        raw["maxFilesToDelete"] = cap
    config = OrphanCleanupConfig.from_mapping(raw)
    engine = IcebergSparkEngine.from_settings(settings)
    with engine.unit_of_work() as spark:
        spark.sql("SELECT 1").collect()
        pid = driver_jvm_pid(spark)
    started_hwm = vm_hwm_mib(pid)
    t0 = time.perf_counter()
    outcome = engine.maintain(name, Operation.ORPHAN_CLEANUP, config, datetime.now(timezone.utc))
    seconds = time.perf_counter() - t0
    jvm_peak = vm_hwm_mib(pid)
    engine.stop()
    missing = [p for p in built["referenced"] if not os.path.exists(p)]
    left = sum(1 for _ in (Path(built["location"]) / "data").glob("orphan_part=*/*"))
    rows = load_table(open_catalog(settings.catalog), name).scan().to_arrow().num_rows
    print(json.dumps({"mode": mode, "seconds": seconds, "jvm_peak_mib": jvm_peak, "jvm_after_start_mib": started_hwm,
                      "python_peak_mib": peak_rss_mib(), "numbers": outcome.result.numbers,
                      "referenced_missing": len(missing), "orphans_left": left, "rows": rows}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=500_000)
    parser.add_argument("--folders", type=int, default=500)
    parser.add_argument("--cap", type=int, default=10_000)
    parser.add_argument("--driver-memory", default="4g")
    parser.add_argument("--modes", default="unstreamed,streamed,capped")
    parser.add_argument("--rebuild", action="store_true")
    parser.add_argument("--run-mode", help=argparse.SUPPRESS)
    args = parser.parse_args()
    ensure_java()
    if args.run_mode:
        run_mode(args.run_mode, args.cap, args.driver_memory)
        return
    print(machine())
    built_file = ROOT / "built.json"
    if args.rebuild or not built_file.exists() or json.loads(built_file.read_text())["files"] != args.files:
        build(args.files, args.folders, args.driver_memory)
    built = json.loads(built_file.read_text())
    print(f"warehouse: {built['files']} orphans + {len(built['referenced'])} table files under {built['location']}; "
          f"spark.driver.memory={args.driver_memory}", flush=True)
    results = []
    for mode in args.modes.split(","):
        t0 = time.perf_counter()
        restore(built)
        print(f"{mode}: orphans restored in {time.perf_counter() - t0:.0f} s", flush=True)
        done = subprocess.run([sys.executable, __file__, "--run-mode", mode, "--cap", str(args.cap),
                               "--driver-memory", args.driver_memory], capture_output=True, text=True)
        line = next((l for l in reversed(done.stdout.splitlines()) if l.startswith("{")), None)
        if done.returncode != 0 or line is None:
            print(f"{mode} failed (exit {done.returncode}):\n{done.stderr[-3000:]}", flush=True)
            continue
        result = json.loads(line)
        print(line, flush=True)
        results.append(result)
    rows = []
    for r in results:
        n = r["numbers"]
        count = f"{n['orphan_files_count']}" + ("" if n.get("orphan_files_count_exact", True) else " (at least)")
        backlog = n.get("orphan_backlog_files", 0)
        backlog_text = f"{backlog}" + ("" if n.get("orphan_backlog_exact", True) else " (at least)")
        rows.append((r["mode"], f"{r['seconds']:.0f}", f"{r['jvm_peak_mib']:.0f}", f"{r['python_peak_mib']:.0f}",
                     count, n.get("orphan_cap_reached", "-"), backlog_text, r["orphans_left"],
                     r["referenced_missing"], r["rows"]))
    print()
    print(table(rows, ["mode", "time s", "driver JVM peak RSS MiB", "Python peak RSS MiB", "deleted (reported)",
                       "cap reached", "backlog (reported)", "orphans left on disk", "referenced files missing",
                       "rows"]))


if __name__ == "__main__":
    main()
