"""Benchmark 5: what maintenance buys. One table of 1,000 small data files (100 rows each, the demo's
schema, added with ``add_files``) before and after ``rewrite_data_files`` (run through the engine,
as a floe run does):

* data files (from the snapshot summary);
* a full scan with Spark: ``SELECT count(*), sum(hash(id, kind, amount, region, at))`` (hashing every
  column defeats Iceberg's aggregate push-down, so every data file is read), median of ``--repeat``
  after one warm-up query;
* a full scan with PyIceberg: ``table.scan().to_arrow()``, median of ``--repeat``;
* the rows and their checksum are the same after the rewrite.

    python benchmarks/bench_compaction_value.py [--files 1000] [--rows-per-file 100] [--repeat 3]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import embedded_settings, ensure_java, fragmented_table, machine, table  # noqa: E402

POLICY = """
- name: bench
  tablePattern: "demo.bench.*"
  rewriteDataFiles: {}
  rewriteDataFilesSchedule: {interval: PT1H}
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--rows-per-file", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(machine())
    ensure_java()
    from floe_dagster.core.operation_kinds.rewrite_data_files import RewriteDataFilesConfig
    from floe_dagster.core.operations import Operation
    from floe_dagster.core.basics.tables import TableName
    from floe_dagster.iceberg.catalog import open_catalog, table_counts
    from floe_dagster.spark.engine import IcebergSparkEngine
    from floe_dagster.spark.procedures import spark_table_reference

    root = Path(tempfile.mkdtemp(prefix="floe-bench-compaction-"))
    try:
        _, settings = embedded_settings(root, POLICY)
        catalog = open_catalog(settings.catalog)
        started = time.perf_counter()
        fragmented_table(catalog, "bench.small_files", args.files, args.rows_per_file)
        print(f"built bench.small_files ({args.files} files) in {time.perf_counter() - started:.1f} s", flush=True)
        name = TableName("demo", ("bench",), "small_files")
        ref = spark_table_reference(name)
        engine = IcebergSparkEngine.from_settings(settings)
        query = f"SELECT count(*) AS n, sum(hash(id, kind, amount, region, at)) AS h FROM {ref}"

        def spark_scan() -> tuple[float, tuple]:
            with engine.unit_of_work() as spark:
                spark.sql(query).collect()  # warm-up: plan caches, JIT, catalog load
                times, row = [], None
                for _ in range(args.repeat):
                    t0 = time.perf_counter()
                    row = spark.sql(query).collect()[0]
                    times.append(time.perf_counter() - t0)
            return statistics.median(times), (row["n"], row["h"])

        def pyiceberg_scan() -> tuple[float, int, str]:
            times, data = [], None
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                data = catalog.load_table(name.identifier).scan().to_arrow()
                times.append(time.perf_counter() - t0)
            ordered = data.sort_by([("id", "ascending")])
            import hashlib

            digest = hashlib.sha256()
            for column in ordered.columns:
                digest.update(str(column.to_pylist()).encode())
            return statistics.median(times), data.num_rows, digest.hexdigest()[:16]

        t0 = time.perf_counter()
        with engine.unit_of_work() as spark:
            spark.sql("SELECT 1").collect()
        session_s = time.perf_counter() - t0
        print(f"Spark session started in {session_s:.1f} s", flush=True)

        files_before = table_counts(catalog.load_table(name.identifier))["data_files"]
        spark_before, spark_sum_before = spark_scan()
        py_before, rows_before, digest_before = pyiceberg_scan()
        print(f"before: {files_before} files; Spark scan {spark_before:.3f} s; PyIceberg scan {py_before:.3f} s", flush=True)

        t0 = time.perf_counter()
        outcome = engine.maintain(name, Operation.REWRITE_DATA_FILES, RewriteDataFilesConfig(), datetime.now(timezone.utc))
        rewrite_s = time.perf_counter() - t0
        print(f"rewrite_data_files: {outcome.result.numbers} in {rewrite_s:.1f} s (row check {outcome.row_check.method})",
              flush=True)

        files_after = table_counts(catalog.load_table(name.identifier))["data_files"]
        spark_after, spark_sum_after = spark_scan()
        py_after, rows_after, digest_after = pyiceberg_scan()
        print(f"after: {files_after} files; Spark scan {spark_after:.3f} s; PyIceberg scan {py_after:.3f} s", flush=True)
        assert spark_sum_before == spark_sum_after, (spark_sum_before, spark_sum_after)
        assert (rows_before, digest_before) == (rows_after, digest_after)
        engine.stop()

        print()
        print(table([
            ("data files", files_before, files_after, f"{files_before / files_after:.0f}x fewer"),
            ("Spark full scan s (median)", f"{spark_before:.3f}", f"{spark_after:.3f}", f"{spark_before / spark_after:.1f}x faster"),
            ("PyIceberg full scan s (median)", f"{py_before:.3f}", f"{py_after:.3f}", f"{py_before / py_after:.1f}x faster"),
            ("rows / checksum", f"{rows_before} / {digest_before}", f"{rows_after} / {digest_after}", "same"),
        ], ["", "before", "after rewrite_data_files", "ratio"]))
        print(f"\nthe rewrite itself took {rewrite_s:.1f} s (Spark session start {session_s:.1f} s not included); "
              f"it pays for itself after {rewrite_s / max(1e-9, spark_before - spark_after):.0f} Spark scans or "
              f"{rewrite_s / max(1e-9, py_before - py_after):.0f} PyIceberg scans")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
