"""Benchmark 10, the evolved row (issue 35, item 6): a capped rewrite on a copy of ``bench.big``'s shape
partitioned after the fact, run by the automation (the debt-score sensor, then the maintenance job)
until the sensor requests nothing more.

``bench.evolved`` has ``bench.big``'s schema and rows (the same generator), written in two halves: the
first half into the table while it is unpartitioned (one file a task, each holding every day), then
``days(at)`` is added (``--add-fields``: also ``region``) and the second half written as ``bench.big``
was (the fanout writer, one small file a task in every partition). The cap is an eighth of the table.
Per run: the bytes the planner charged, the bytes Iceberg rewrote (the procedure's count and the
snapshot's ``removed-files-size``, against which the estimate error is taken), the stage (the current
spec's partitions, then the older files alone: core/rewrites/older_specs.py) and how many files it
removed that an earlier run of the backlog had written (by the snapshot that added them).

    FLOE_BENCH_REAL_ROOT=/tmp/floe-bench/evolved .venv/bin/python benchmarks/bench_evolved_scope.py \
        [--gb 0.05] [--days 60] [--old-files 40] [--new-files-per-day 4] [--max-runs 40] \
        [--add-fields 'days(at);region']
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import ensure_java, machine  # noqa: E402
from bench_real_tables import (  # noqa: E402
    BASE, BYTES_PER_ROW, ROOT, SCHEMA, checksum, file_counts, fresh_instance, name_of, phase_settings, policy,
    sensor_and_run, spark_location,
)


def build(gb: float, days: int, old_files: int, new_files_per_day: int, fields: list[str]) -> None:
    from floe_dagster.iceberg.catalog import open_catalog
    from floe_dagster.spark.engine import IcebergSparkEngine
    from floe_dagster.spark.procedures import spark_table_reference

    settings = phase_settings("build-evolved", "", "2g")
    catalog = open_catalog(settings.catalog)
    if ("bench",) not in {tuple(n) for n in catalog.list_namespaces()}:
        catalog.create_namespace("bench")
    n = int(gb * 1e9 / BYTES_PER_ROW)
    engine = IcebergSparkEngine.from_settings(settings)
    with engine.unit_of_work() as spark:
        ref = spark_table_reference(name_of("evolved"))
        spark.sql(f"DROP TABLE IF EXISTS {ref}")
        spark.sql(f"CREATE TABLE {ref} ({SCHEMA}) USING iceberg LOCATION '{spark_location('evolved')}' "
                  "TBLPROPERTIES ('format-version'='2')")

        def rows(start: int, tasks: int):
            return spark.range(start, start + n // 2, 1, tasks).selectExpr(
                "id", "element_at(array('view', 'click', 'buy', 'refund'), CAST(id % 4 AS INT) + 1) AS kind",
                "round(rand(7) * 1000, 2) AS amount",
                "element_at(array('eu', 'us', 'apac'), CAST(id % 3 AS INT) + 1) AS region",
                f"timestamp_seconds({BASE} + (id % {days}) * 86400 + (id * 7919) % 86400) AS at",
                "concat(hex(xxhash64(id, 1)), hex(xxhash64(id, 2)), hex(xxhash64(id, 3)), "
                "hex(xxhash64(id, 4))) AS payload")

        rows(0, old_files).writeTo(ref).option("distribution-mode", "none").append()
        for added in fields:
            spark.sql(f"ALTER TABLE {ref} ADD PARTITION FIELD {added}")
        rows(n // 2, new_files_per_day).writeTo(ref).option("distribution-mode", "none") \
            .option("fanout-enabled", "true").append()
    engine.stop()


def written_by(settings) -> dict[str, int]:
    """Each live data file with the snapshot that added it."""
    from floe_dagster.iceberg.catalog import load_table, open_catalog

    entries = load_table(open_catalog(settings.catalog), name_of("evolved")).inspect.entries().to_pylist()
    return {e["data_file"]["file_path"]: e["snapshot_id"] for e in entries if e["status"] != 2}


def spec_counts(settings) -> dict[int, int]:
    from floe_dagster.iceberg.catalog import load_table, open_catalog

    counts: dict[int, int] = {}
    for f in load_table(open_catalog(settings.catalog), name_of("evolved")).inspect.files().to_pylist():
        counts[f["spec_id"]] = counts.get(f["spec_id"], 0) + 1
    return counts


def run(max_runs: int) -> dict:
    from floe_dagster.iceberg.catalog import load_table, open_catalog
    from floe_dagster.iceberg.table_cache import refresh_table_cache
    from floe_dagster.spark.engine import IcebergSparkEngine
    from floe_dagster.spark.procedures import spark_table_reference

    settings = phase_settings("evolved", policy("evolved"), "2g")
    counts = file_counts(settings, "evolved")
    cap = counts["total_bytes"] // 8
    settings = phase_settings("evolved", policy("evolved", f"maxBytesPerRun: {cap}"), "2g")
    refresh_table_cache(settings)
    engine = IcebergSparkEngine.from_settings(settings)
    ref = spark_table_reference(name_of("evolved"))
    with engine.unit_of_work() as spark:
        before = checksum(spark, ref)
    print(f"bench.evolved: {counts}, files by spec {spec_counts(settings)}, cap {cap:,}", flush=True)
    runs, ours = [], set()
    with fresh_instance("evolved") as instance:
        for _ in range(max_runs):
            files = written_by(settings)
            facts, _, _ = sensor_and_run(settings, instance, "evolved")
            if facts is None:
                break
            snapshot = load_table(open_catalog(settings.catalog), name_of("evolved")).current_snapshot()
            after = written_by(settings)
            removed = set(files) - set(after)
            call = facts.get("procedure_call", "")
            facts.update(removed_files_size=int(snapshot.summary.get("removed-files-size", 0)),
                         retaken=sum(files[p] in ours for p in removed), specs=spec_counts(settings),
                         where="where =>" in call, stage=_stage(call))
            ours.add(snapshot.snapshot_id)
            facts.pop("procedure_call", None)
            runs.append(facts)
            print(f"run {len(runs)}: " + json.dumps({k: facts.get(k) for k in (
                "stage", "estimated_bytes", "bytes_rewritten", "removed_files_size", "estimate_error_pct", "retaken",
                "rewritten_data_files_count", "added_data_files_count", "backlog_bytes", "specs", "run_s")}),
                flush=True)
    with engine.unit_of_work() as spark:
        after_sum = checksum(spark, ref)
    engine.stop()
    return {"cap": cap, "counts_before": counts, "runs": runs, "drained": len(runs) < max_runs,
            "checksum_before": before, "checksum_after": after_sum, "counts_after": file_counts(settings, "evolved")}


def _stage(call: str) -> str:
    """Which stage of a backlog on a table partitioned after the fact the run was (core/rewrites/older_specs.py)."""
    if "min-file-size-bytes" in call:
        return "partitions (older files left out by size)"
    if "min-input-files" in call:
        return "older files alone (min-input-files)"
    if "NOT IN" in call:
        return "older files alone (their where)"
    return "scoped" if "max-files-to-rewrite" in call or "where =>" in call else "whole table"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gb", type=float, default=0.05)
    parser.add_argument("--days", type=int, default=60)
    parser.add_argument("--old-files", type=int, default=40)
    parser.add_argument("--new-files-per-day", type=int, default=4)
    parser.add_argument("--max-runs", type=int, default=40)
    parser.add_argument("--add-fields", default="days(at)", help="the fields added after the first half, ';'-separated")
    args = parser.parse_args()
    ensure_java()
    print(machine(), flush=True)
    shutil.rmtree(ROOT, ignore_errors=True)
    ROOT.mkdir(parents=True)
    t0 = time.perf_counter()
    build(args.gb, args.days, args.old_files, args.new_files_per_day, args.add_fields.split(";"))
    print(f"built in {time.perf_counter() - t0:.0f} s", flush=True)
    report = run(args.max_runs)
    (ROOT / "evolved-report.json").write_text(json.dumps(report, indent=1, default=str))
    total = sum(r["bytes_rewritten"] for r in report["runs"])
    errors = [abs(r["estimated_bytes"] - r["removed_files_size"]) / max(r["removed_files_size"], 1)
              for r in report["runs"]]
    print(f"runs {len(report['runs'])} (drained: {report['drained']}), bound ceil(table / cap) + 2 = "
          f"{-(-report['counts_before']['total_bytes'] // report['cap']) + 2}; rewritten {total:,} bytes "
          f"({total / report['counts_before']['total_bytes']:.2f}x the table); worst estimate error "
          f"{max(errors, default=0):.1%}; files retaken {sum(r['retaken'] for r in report['runs'])}; rows/checksum "
          f"{'same' if report['checksum_before'] == report['checksum_after'] else 'DIFFERENT'}; data files "
          f"{report['counts_before'].get('data_files')} -> {report['counts_after'].get('data_files')}", flush=True)


if __name__ == "__main__":
    main()
