"""Benchmark 12: what the safety envelope costs a run (issue 26, core/policies/envelope.py, defs/envelope_check.py).

The envelope adds to every maintenance run one pure check of the operation's config, and, only when
the config names a location (``orphanCleanup.location``), one PyIceberg load of the table's metadata to
read its real location. This measures, in one process and one run:

* the pure check (``check_operation``) per call, for a compaction config (no location) and for an
  orphan cleanup config with a relative and an absolute location;
* the run's first step (``within_envelope``) on a real table (SQLite catalog, ``--snapshots`` commits, so
  its metadata.json is not trivial), for a compaction (no catalog read) and for an orphan cleanup with a
  location (one metadata load);
* the orphan cleanup it guards: ``engine.maintain(ORPHAN_CLEANUP)`` over ``--files`` orphan files (empty,
  10 days old, in ``--folders`` folders under ``data/``), with the location the envelope resolved, Spark
  session start not included.

The ratio printed last is the envelope's run step over that cleanup. A compaction pays only the pure
check (no I/O); compare it with any rewrite's seconds (benchmark 10: 2 GB in 2,400 files).

    python benchmarks/bench_envelope.py [--files 100000] [--folders 100] [--snapshots 100]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import JARS_CACHE, ensure_java, machine, repeat, table  # noqa: E402

ROOT = Path("/tmp/floe-bench/envelope")
TEN_DAYS_AGO = time.time() - 10 * 86400
POLICY = """
- name: bench
  tablePattern: "demo.bench.events"
  orphanCleanup: {retentionPeriodInDays: 3, location: data}
  orphanCleanupSchedule: {interval: P1D}
"""


def lake(snapshots: int, files: int, folders: int):
    """The settings and the table: ``snapshots`` appends, every file 10 days old, ``files`` orphans."""
    from floe_dagster.core.basics.tables import TableName
    from floe_dagster.demo import _create, local_path, rows
    from floe_dagster.iceberg.catalog import open_catalog
    from floe_dagster.settings import load_settings

    shutil.rmtree(ROOT, ignore_errors=True)
    (ROOT / "policies").mkdir(parents=True)
    (ROOT / "policies" / "policies.yaml").write_text(POLICY)
    config = ROOT / "floe.yaml"
    config.write_text(f"data-dir: {ROOT / 'data'}\npolicies: [{ROOT / 'policies'}]\nspark:\n  jars-cache: {JARS_CACHE}\n")
    settings = load_settings(config, environ={})
    catalog = open_catalog(settings.catalog)
    catalog.create_namespace("bench")
    created = _create(catalog, "bench.events")
    started = time.perf_counter()
    for start in range(snapshots):
        created.append(rows(start * 10, 10))
    location = local_path(created.location())
    for path in location.rglob("*"):
        if path.is_file():
            os.utime(path, (TEN_DAYS_AGO, TEN_DAYS_AGO))
    per_folder = -(-files // folders)
    for index in range(files):
        folder = location / "data" / f"orphan_part={index // per_folder:04d}"
        folder.mkdir(exist_ok=True)
        path = folder / f"{index:07d}-orphan.parquet"
        path.touch()
        os.utime(path, (TEN_DAYS_AGO, TEN_DAYS_AGO))
    print(f"built {snapshots} commits and {files} orphans in {time.perf_counter() - started:.0f} s", flush=True)
    return settings, TableName("demo", ("bench",), "events"), created.location()


def micros(seconds: list[float], calls: int) -> str:
    return f"{statistics.median(seconds) / calls * 1e6:.1f} µs"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--folders", type=int, default=100)
    parser.add_argument("--snapshots", type=int, default=100)
    args = parser.parse_args()
    ensure_java()
    print(machine(), flush=True)

    from floe_dagster.core.policies.envelope import check_operation
    from floe_dagster.core.operation_kinds.orphan_cleanup import OrphanCleanupConfig
    from floe_dagster.core.operation_kinds.rewrite_data_files import RewriteDataFilesConfig
    from floe_dagster.core.operations import Operation
    from floe_dagster.defs.envelope_check import within_envelope
    from floe_dagster.iceberg.catalog import open_catalog
    from floe_dagster.policies import resolve_operation
    from floe_dagster.spark.engine import IcebergSparkEngine

    settings, name, location = lake(args.snapshots, args.files, args.folders)
    orphan, rewrite = Operation.ORPHAN_CLEANUP, Operation.REWRITE_DATA_FILES
    calls = 10_000
    pure = {
        "compaction (no location)": (rewrite, RewriteDataFilesConfig()),
        "orphan cleanup, relative location": (orphan, OrphanCleanupConfig(location="data")),
        "orphan cleanup, absolute location": (orphan, OrphanCleanupConfig(location=location + "/data")),
    }
    rows = []
    for label, (op, config) in pure.items():
        times = repeat(lambda: [check_operation("bench", op, config, location) for _ in range(calls)], 5)
        rows.append((f"pure check: {label}", micros(times, calls), "-"))

    catalog = open_catalog(settings.catalog)
    resolved = resolve_operation(settings, name, orphan)
    compaction = replace(resolved, config=RewriteDataFilesConfig())
    step_compaction = repeat(lambda: within_envelope(catalog, name, rewrite, compaction), 30)
    step_orphan = repeat(lambda: within_envelope(catalog, name, orphan, resolved), 30)
    used = within_envelope(catalog, name, orphan, resolved).config

    engine = IcebergSparkEngine.from_settings(settings)
    with engine.unit_of_work() as spark:
        spark.sql("SELECT 1").collect()  # session start, not counted
    started = time.perf_counter()
    outcome = engine.maintain(name, orphan, used, datetime.now(timezone.utc))
    cleanup = time.perf_counter() - started
    engine.stop()
    left = sum(1 for _ in (Path(location.removeprefix("file://")) / "data").glob("orphan_part=*/*"))

    step = statistics.median(step_orphan)
    rows += [
        ("run step (within_envelope): compaction", micros(step_compaction, 1), "-"),
        ("run step (within_envelope): orphan cleanup with a location", f"{step * 1000:.1f} ms", "-"),
        (f"orphan cleanup of {args.files:,} files (location {used.location})", f"{cleanup:.1f} s",
         f"{outcome.result.numbers.get('orphan_files_count')} reported, {left} left"),
    ]
    print(table(rows, ["what", "time (median)", "result"]))
    print(f"envelope / orphan cleanup: {step / cleanup * 100:.3f} % (target ≤ 2 %)")


if __name__ == "__main__":
    main()
