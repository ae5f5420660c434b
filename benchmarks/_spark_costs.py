"""Benchmark 15's calibration: what ``rewrite_data_files`` and ``rewrite_position_delete_files`` cost on
this machine, measured with real Spark + Iceberg (local[2], the embedded SQLite catalog), and fitted.

Tables of a handful of shapes are written with Spark (one file per write task and partition, as
``bench_real_tables.py`` builds them): unpartitioned ones of 100 to 1,600 files at one size and of
100 files at 4x and 16x the bytes; partitioned ones of 50 and 200 partitions; a narrow schema (four
numeric columns) beside the wide one (six columns, 64 hex characters of hashes per row); and
merge-on-read tables after 4 and 12 ``DELETE`` statements (position delete files, one per data file
and statement). Each ``CALL`` runs ``--repeat`` times on the same files: between repeats the table is
rolled back to its snapshot before the ``CALL`` (``rollback_to_snapshot``; no file is removed), after
one warm-up ``CALL`` on a table of its own so the JVM's JIT is warm.

Measured per ``CALL``, from Spark's own status store (the stages the ``CALL`` ran): executor CPU
seconds (``executorCpuTime``, the compute figure of issue 29) and executor run time; the driver
JVM's process CPU seconds (``/proc/<pid>/stat``: driver planning and commit included); wall
seconds. Fitted by non-negative least squares:

* ``rewrite_data_files``: executor CPU s = a + b·files + c·GiB(wide) + d·GiB(narrow) + e·partitions
  + f·delete files;
* ``rewrite_position_delete_files``: executor CPU s = a + b·delete files + c·partitions.

The merge-on-read tables write partition-scoped position deletes (``write.delete.granularity`` =
``partition``), as the simulation's merge-on-read tables do: each ``DELETE`` adds one delete file per
partition it touches.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
WIDE = ("id BIGINT, kind STRING, amount DOUBLE, region STRING, at TIMESTAMP, payload STRING", [
    "id", "element_at(array('view', 'click', 'buy', 'refund'), CAST(id % 4 AS INT) + 1) AS kind",
    "round(rand(7) * 1000, 2) AS amount", "element_at(array('eu', 'us', 'apac'), CAST(id % 3 AS INT) + 1) AS region",
    "timestamp_seconds(1767225600 + (id % {parts}) * 86400 + (id * 7919) % 86400) AS at",
    "concat(hex(xxhash64(id, 1)), hex(xxhash64(id, 2)), hex(xxhash64(id, 3)), hex(xxhash64(id, 4))) AS payload"])
NARROW = ("id BIGINT, a BIGINT, b DOUBLE, at TIMESTAMP", [
    "id", "id * 31 % 1000003 AS a", "rand(11) * 1000 AS b",
    "timestamp_seconds(1767225600 + (id % {parts}) * 86400 + (id * 7919) % 86400) AS at"])
SCHEMAS = {"wide": WIDE, "narrow": NARROW}
# Partition-scoped position deletes: each DELETE writes one delete file per partition it touches, so they
# pile up until rewrite_position_delete_files merges them (with Iceberg's default, file-scoped ones, a
# write merges a data file's deletes itself and there is only ever one per data file to rewrite).
MOR = ("'format-version'='2', 'write.delete.mode'='merge-on-read', 'write.update.mode'='merge-on-read', "
       "'write.delete.granularity'='partition'")

# name: (schema, partitions, write tasks (files per partition), rows, DELETE statements)
SHAPES: dict[str, tuple[str, int, int, int, int]] = {
    "warmup": ("wide", 1, 50, 200_000, 0),
    "u_files100": ("wide", 1, 100, 400_000, 0),
    "u_files400": ("wide", 1, 400, 400_000, 0),
    "u_files1600": ("wide", 1, 1600, 400_000, 0),
    "u_bytes4x": ("wide", 1, 100, 1_600_000, 0),
    "u_bytes16x": ("wide", 1, 100, 6_400_000, 0),
    "n_files400": ("narrow", 1, 400, 1_600_000, 0),
    "n_bytes16x": ("narrow", 1, 100, 6_400_000, 0),
    "p_parts50": ("wide", 50, 8, 400_000, 0),
    "p_parts200": ("wide", 200, 8, 400_000, 0),
    "m_deletes4": ("wide", 10, 10, 1_000_000, 4),
    "m_deletes16": ("wide", 10, 10, 1_000_000, 16),
    "m_parts40": ("wide", 40, 5, 1_000_000, 8),
}


def jvm_cpu_s(spark) -> float:
    pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime + stime


def stage_ids(spark) -> set[int]:
    """Every stage of every job Spark's status store keeps (Iceberg's actions run theirs in job groups)."""
    jobs = spark.sparkContext._jsc.sc().statusStore().jobsList(None)
    found: set[int] = set()
    for i in range(jobs.size()):
        stages = jobs.apply(i).stageIds()
        found.update(stages.apply(j) for j in range(stages.size()))
    return found


def stage_figures(spark, stages: set[int]) -> tuple[float, float]:
    """Executor CPU s and executor run s of ``stages``, from Spark's status store (every attempt)."""
    store = spark.sparkContext._jsc.sc().statusStore()
    cpu_ns = run_ms = 0
    for stage in stages:
        attempts = store.stageData(stage, False, None, False, None)
        for i in range(attempts.size()):
            data = attempts.apply(i)
            cpu_ns += data.executorCpuTime()
            run_ms += data.executorRunTime()
    return cpu_ns / 1e9, run_ms / 1e3


def build(spark, ref: str, location: str, shape: tuple[str, int, int, int, int]) -> None:
    schema_name, parts, tasks, rows, deletes = shape
    columns, exprs = SCHEMAS[schema_name]
    spark.sql(f"DROP TABLE IF EXISTS {ref}")
    partitioned = "PARTITIONED BY (days(at))" if parts > 1 else ""
    props = MOR if deletes else "'format-version'='2'"
    spark.sql(f"CREATE TABLE {ref} ({columns}) USING iceberg {partitioned} LOCATION '{location}' "
              f"TBLPROPERTIES ({props})")
    frame = spark.range(0, rows, 1, tasks).selectExpr(*[e.format(parts=parts) for e in exprs])
    frame.writeTo(ref).option("distribution-mode", "none").option("fanout-enabled", "true").append()
    for k in range(deletes):
        spark.sql(f"DELETE FROM {ref} WHERE id % {97 + 2 * k} = {k + 1}")


def table_facts(spark, ref: str, partitioned: bool) -> dict[str, int]:
    partitions = "count(DISTINCT partition)" if partitioned else "1"
    row = spark.sql(f"SELECT count(*) AS files, coalesce(sum(file_size_in_bytes), 0) AS bytes, "
                    f"{partitions} AS partitions FROM {ref}.data_files").collect()[0]
    deletes = spark.sql(f"SELECT count(*) AS files, coalesce(sum(file_size_in_bytes), 0) AS bytes "
                        f"FROM {ref}.delete_files").collect()[0]
    return {"data_files": row["files"], "data_bytes": row["bytes"], "partitions": row["partitions"],
            "delete_files": deletes["files"], "delete_bytes": deletes["bytes"]}


def current_snapshot(spark, ref: str) -> int:
    return spark.sql(f"SELECT snapshot_id FROM {ref}.history WHERE is_current_ancestor ORDER BY made_current_at DESC "
                     "LIMIT 1").collect()[0][0]


def measure_call(spark, sql: str) -> dict[str, Any]:
    before_stages, before_cpu = stage_ids(spark), jvm_cpu_s(spark)
    t0 = time.perf_counter()
    rows = [r.asDict() for r in spark.sql(sql).collect()]
    wall = time.perf_counter() - t0
    cpu, run = stage_figures(spark, stage_ids(spark) - before_stages)
    return {"executor_cpu_s": cpu, "executor_run_s": run, "jvm_cpu_s": jvm_cpu_s(spark) - before_cpu,
            "wall_s": wall, "result": rows[0] if rows else {}}


def calibrate(engine, warehouse: str, repeat: int, only: set[str] | None = None) -> list[dict[str, Any]]:
    """Every shape built, each CALL measured ``repeat`` times (rolled back in between)."""
    from floe_dagster.core.operations import Operation  # noqa: F401  (the package must import)

    runs: list[dict[str, Any]] = []
    with engine.unit_of_work() as spark:
        spark.sql("CREATE NAMESPACE IF NOT EXISTS demo.calib")
        for name, shape in SHAPES.items():
            if only and name not in only and name != "warmup":
                continue
            ref = f"demo.calib.{name}"
            t0 = time.perf_counter()
            build(spark, ref, f"{warehouse}/calib/{name}", shape)
            facts = table_facts(spark, ref, shape[1] > 1)
            print(f"  built {name} in {time.perf_counter() - t0:.0f} s: {facts}", flush=True)
            calls = [("rewrite_data_files", f"CALL demo.system.rewrite_data_files(table => 'calib.{name}')")]
            if shape[4]:
                calls.insert(0, ("rewrite_position_delete_files",
                                 f"CALL demo.system.rewrite_position_delete_files(table => 'calib.{name}', "
                                 "options => map('rewrite-all', 'true'))"))
            start = current_snapshot(spark, ref)
            for operation, sql in calls:
                for attempt in range(1 if name == "warmup" else repeat):
                    figures = measure_call(spark, sql)
                    if current_snapshot(spark, ref) != start:
                        spark.sql(f"CALL demo.system.rollback_to_snapshot('calib.{name}', {start})")
                    run = {"shape": name, "schema": shape[0], "operation": operation, "attempt": attempt, **facts,
                           **figures, "load": round(os.getloadavg()[0], 2)}
                    print(f"    {operation} #{attempt}: executor CPU {figures['executor_cpu_s']:.1f} s, JVM CPU "
                          f"{figures['jvm_cpu_s']:.1f} s, wall {figures['wall_s']:.1f} s; {figures['result']}",
                          flush=True)
                    if name != "warmup":
                        runs.append(run)
            spark.sql(f"DROP TABLE {ref} PURGE")
    return runs


# -- the fit ------------------------------------------------------------------------------------------------
DATA_TERMS = ("intercept", "files", "gib_wide", "gib_narrow", "partitions", "delete_files")
DELETE_TERMS = ("intercept", "delete_files", "partitions")


def data_features(files: int, gib: float, narrow: bool, partitions: int, delete_files: int) -> list[float]:
    return [1.0, files, 0.0 if narrow else gib, gib if narrow else 0.0, partitions, delete_files]


def delete_features(delete_files: int, partitions: int) -> list[float]:
    return [1.0, delete_files, partitions]


def nnls(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least squares with every coefficient ≥ 0: drop the most negative term and refit until none is."""
    active = list(range(x.shape[1]))
    while True:
        coef = np.zeros(x.shape[1])
        solved, *_ = np.linalg.lstsq(x[:, active], y, rcond=None)
        coef[active] = solved
        if (solved >= 0).all():
            return coef
        active.pop(int(np.argmin(solved)))


def fit(runs: list[dict[str, Any]], target: str = "executor_cpu_s") -> dict[str, Any]:
    """Both models' coefficients, with R² and the largest relative error over the calibration runs."""
    fitted: dict[str, Any] = {}
    for operation, terms, features in (
            ("rewrite_data_files", DATA_TERMS, lambda r: data_features(
                r["data_files"], r["data_bytes"] / 2**30, r["schema"] == "narrow", r["partitions"], r["delete_files"])),
            ("rewrite_position_delete_files", DELETE_TERMS, lambda r: delete_features(r["delete_files"],
                                                                                    r["partitions"]))):
        chosen = [r for r in runs if r["operation"] == operation]
        if not chosen:
            continue
        x = np.array([features(r) for r in chosen], dtype=float)
        y = np.array([r[target] for r in chosen], dtype=float)
        coef = nnls(x, y)
        predicted = x @ coef
        residual = float(((y - predicted) ** 2).sum())
        total = float(((y - y.mean()) ** 2).sum()) or 1.0
        fitted[operation] = {"terms": dict(zip(terms, map(float, coef))), "r2": 1 - residual / total,
                             "max_rel_error": float(np.max(np.abs(predicted - y) / np.maximum(y, 1e-9))),
                             "runs": len(chosen)}
    return fitted


def save(path: Path, payload: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=1, default=str))
