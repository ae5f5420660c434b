"""Benchmark 4: what running maintenance through floe-dagster costs over calling the procedures.

20 fragmented tables (``--files`` small files each) per variant, compacted with
``rewrite_data_files`` (the same ``CALL`` text floe builds):

``direct``           one SparkSession, one unit of work, 20 ``CALL``s: the floor (measured first and
                     again last; the smaller counts). Before any measurement, a warm-up set of 20
                     tables is compacted directly, since a cold JVM makes the first calls much slower
``floe, in process`` ``manual.trigger_table`` per table (one Dagster run each, ``execute_in_process``
                     in this process, so the Spark session is shared): the run machinery, locks,
                     before/after counts, the engine's snapshot queries and row-count check, the
                     catalog closed and reopened per unit of work
``floe, one run``    one run over the 20 tables (what a backfill run does: one job execution, one
                     lock per table, one materialization per table)
``floe, process per run``  ``floe-dagster trigger`` in a new process per table (``--process-runs``
                     tables): what a daemon-launched run costs with the default run launcher, a
                     fresh Python and a fresh JVM each time; and, to split it, a fresh process that
                     only imports the code location and starts a SparkSession

and the cost of a run process importing the code location (``python -c "import
floe_dagster.definitions"``) with a table cache of 0, 1,000 and 5,000 tables.

Each floe run records the engine's own time (``duration_s`` in the materialization), which splits the
overhead into "engine checks" (engine duration - direct CALL) and "run machinery" (the rest).

    python benchmarks/bench_orchestration.py [--tables 20] [--files 30] [--process-runs 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    embedded_settings,
    ensure_java,
    fragmented_table,
    machine,
    make_code_location,
    run_timed,
    table,
    use_dagster_home,
)

POLICY = """
- name: bench
  tablePattern: "demo.*.*"
  rewriteDataFiles: {}
  rewriteDataFilesSchedule: {interval: PT1H}
"""


def import_cost(sizes: list[int], repeat: int) -> list[tuple]:
    rows = []
    for n in sizes:
        root = Path(tempfile.mkdtemp(prefix="floe-bench-import-"))
        try:
            config = make_code_location(root, n)
            home = use_dagster_home(root)
            env = {**os.environ, "FLOE_CONFIG": str(config), "DAGSTER_HOME": str(home), "PYTHONWARNINGS": "ignore"}
            times = [run_timed([sys.executable, "-c", "import floe_dagster.definitions"], env=env, cwd=str(root))[0]
                     for _ in range(repeat)]
            rows.append((n, statistics.median(times)))
            print(f"  import floe_dagster.definitions with {n} cached tables: {statistics.median(times):.2f} s", flush=True)
        finally:
            shutil.rmtree(root, ignore_errors=True)
    base = [run_timed([sys.executable, "-c", "import dagster, pyiceberg.catalog.sql, pyspark.sql"])[0] for _ in range(repeat)]
    rows.insert(0, ("baseline: import dagster, pyiceberg, pyspark", statistics.median(base)))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tables", type=int, default=20)
    parser.add_argument("--files", type=int, default=30)
    parser.add_argument("--process-runs", type=int, default=3)
    parser.add_argument("--import-sizes", type=int, nargs="+", default=[0, 1000, 5000])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(machine())
    ensure_java()

    root = Path(tempfile.mkdtemp(prefix="floe-bench-orchestration-"))
    try:
        home = use_dagster_home(root)
        config, settings = embedded_settings(root, POLICY)
        os.environ["FLOE_CONFIG"] = str(config)
        from dagster import DagsterInstance

        from floe_dagster.core.runs import run_tags as T
        from floe_dagster.core.operation_kinds.rewrite_data_files import RewriteDataFilesConfig
        from floe_dagster.core.operations import Operation
        from floe_dagster.core.basics.tables import TableName
        from floe_dagster.defs.build import MAINTENANCE_JOB, build_definitions
        from floe_dagster.defs.names import asset_key_for
        from floe_dagster.iceberg.catalog import open_catalog, table_counts
        from floe_dagster.iceberg.table_cache import refresh_table_cache
        from floe_dagster.launching.manual import trigger_table
        from floe_dagster.spark.engine import IcebergSparkEngine
        from floe_dagster.spark.operation_steps import build_procedure_call

        catalog = open_catalog(settings.catalog)
        variants = {"direct": args.tables, "floe": args.tables, "batch": args.tables, "proc": args.process_runs,
                    "direct2": args.tables, "warmup": args.tables}
        started = time.perf_counter()
        for namespace, count in variants.items():
            for i in range(count):
                fragmented_table(catalog, f"{namespace}.t{i:02d}", args.files, 20, start_id=i * 100_000)
        refresh_table_cache(settings)
        print(f"built {sum(variants.values())} tables of {args.files} files in {time.perf_counter() - started:.0f} s",
              flush=True)

        def names(namespace: str) -> list[TableName]:
            return [TableName("demo", (namespace,), f"t{i:02d}") for i in range(variants[namespace])]

        def files_of(tables: list[TableName]) -> list[int]:
            return [table_counts(catalog.load_table(t.identifier))["data_files"] for t in tables]

        engine = IcebergSparkEngine.from_settings(settings)
        t0 = time.perf_counter()
        with engine.unit_of_work() as spark:
            spark.sql("SELECT 1").collect()
        session_s = time.perf_counter() - t0
        print(f"Spark session start: {session_s:.1f} s", flush=True)

        # direct: one session, one unit of work, the same CALL text floe builds; measured first and
        # again last (``direct2``), since the JVM warms up over the run: the floor is the smaller.
        def direct(namespace: str) -> float:
            now = datetime.now(timezone.utc)
            t0 = time.perf_counter()
            with engine.unit_of_work() as spark:
                for t in names(namespace):
                    spark.sql(build_procedure_call(Operation.REWRITE_DATA_FILES, t, RewriteDataFilesConfig(), now).sql).collect()
            seconds = time.perf_counter() - t0
            assert set(files_of(names(namespace))) == {1}
            print(f"direct ({namespace}): {seconds:.1f} s for {len(names(namespace))} tables", flush=True)
            return seconds

        # The JVM's JIT warms up over the first few dozen procedure calls (a cold direct pass measured
        # 2.6x a warm one): compact a warm-up set first, unmeasured, so every variant runs warm.
        direct("warmup")
        direct_first_s = direct("direct")

        with DagsterInstance.get() as instance:
            # floe, in process: one run per table, the Spark session shared (getOrCreate)
            t0 = time.perf_counter()
            engine_s = []
            for t in names("floe"):
                summary = trigger_table(settings, t.qualified, ["REWRITE_DATA_FILES"], reason="bench", actor="bench",
                                        trigger_id=f"bench-{t.name}", instance=instance)
                assert summary.succeeded, summary.lines()
                engine_s.append(float(summary.outcomes[0].metadata["duration_s"]))
            floe_s = time.perf_counter() - t0
            assert set(files_of(names("floe"))) == {1}
            print(f"floe in process: {floe_s:.1f} s (engine {sum(engine_s):.1f} s)", flush=True)

            # floe, one run over all tables (a backfill run's shape)
            t0 = time.perf_counter()
            tables = names("batch")
            # The maintenance job excludes the health checks (they are reported without runs); a plain
            # asset_selection would add them back, so subset it as manual.trigger_table does.
            job = build_definitions(settings, tables=tables).resolve_job_def(MAINTENANCE_JOB).get_subset(
                asset_selection={asset_key_for(t) for t in tables}, asset_check_selection=set())
            result = job.execute_in_process(
                instance=instance, partition_key=Operation.REWRITE_DATA_FILES.value,
                tags={T.TRIGGER: "manual", T.REASON: "bench", T.ACTOR: "bench"}, raise_on_error=False)
            batch_s = time.perf_counter() - t0
            assert result.success
            batch_engine_s = sum(
                float(e.event_specific_data.materialization.metadata["duration_s"].value)
                for e in result.all_events if e.event_type_value == "ASSET_MATERIALIZATION")
            assert set(files_of(tables)) == {1}
            print(f"floe one run: {batch_s:.1f} s (engine {batch_engine_s:.1f} s)", flush=True)
        direct_last_s = direct("direct2")
        direct_s = min(direct_first_s, direct_last_s)
        engine.stop()

        # floe, process per run: the CLI, as a daemon-launched run starts a new process
        cli = str(Path(sys.executable).parent / "floe-dagster")
        env = {**os.environ, "FLOE_CONFIG": str(config), "DAGSTER_HOME": str(home)}
        per_process = []
        for t in names("proc"):
            seconds, _ = run_timed([cli, "trigger", t.qualified, "--operation", "REWRITE_DATA_FILES"], env=env)
            per_process.append(seconds)
            print(f"  process per run: {t.qualified} {seconds:.1f} s", flush=True)
        assert set(files_of(names("proc"))) == {1}
        # what a fresh run process pays before any maintenance: imports, the code location, a JVM and
        # a SparkSession with the Iceberg catalog (one trivial query)
        start_script = ("import floe_dagster.definitions\n"
                        "from floe_dagster.settings import load_settings\n"
                        "from floe_dagster.spark.engine import IcebergSparkEngine\n"
                        f"engine = IcebergSparkEngine.from_settings(load_settings({str(config)!r}))\n"
                        "with engine.unit_of_work() as spark:\n"
                        "    spark.sql('SHOW NAMESPACES IN demo').collect()\n"
                        "engine.stop()\n")
        process_start = [run_timed([sys.executable, "-c", start_script], env=env)[0] for _ in range(len(per_process))]
        print(f"  fresh process, code location + Spark session only: {statistics.median(process_start):.1f} s",
              flush=True)

        print("import cost of a run process:", flush=True)
        imports = import_cost(args.import_sizes, args.repeat)

        n = args.tables
        direct_per = direct_s / n
        rows = [
            ("direct CALLs, one session", f"{direct_s:.1f}", f"{direct_per:.2f}", "1.0",
             f"first {direct_first_s:.1f} s, last {direct_last_s:.1f} s: the smaller is the floor"),
            ("floe, in process (run per table, shared session)", f"{floe_s:.1f}", f"{floe_s / n:.2f}",
             f"{floe_s / direct_s:.1f}", f"engine {sum(engine_s):.1f} s, run machinery {floe_s - sum(engine_s):.1f} s"),
            ("floe, one run over all tables", f"{batch_s:.1f}", f"{batch_s / n:.2f}", f"{batch_s / direct_s:.1f}",
             f"engine {batch_engine_s:.1f} s, run machinery {batch_s - batch_engine_s:.1f} s"),
            (f"floe, process per run (CLI, {len(per_process)} runs)", "-", f"{statistics.mean(per_process):.2f}",
             f"{statistics.mean(per_process) / direct_per:.1f}",
             f"of which a fresh process's imports + code location + Spark session: {statistics.median(process_start):.1f} s "
             f"({statistics.median(process_start) / statistics.mean(per_process):.0%})"),
        ]
        print()
        print(f"Spark session start (once, not in the totals): {session_s:.1f} s")
        print(table(rows, ["variant", f"total s ({n} tables)", "s per table", "÷ direct", "split"]))
        print()
        print(table([(name if isinstance(name, str) else f"import floe_dagster.definitions, {name:,} tables",
                      f"{s:.2f}") for name, s in imports], ["run process start", "s (median)"]))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
