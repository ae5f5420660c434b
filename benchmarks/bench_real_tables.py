"""Benchmark 10: real tables (issue 21, item 5). Tables built once (cached) under ``/tmp/floe-bench/real``:

* ``bench.big``: a day-partitioned table of ``--gb`` GB (default 2.1) in ``--days`` x ``--files-per-day``
  files (default 60 x 40 = 2,400 files of ~0.9 MB): one Spark write with the fanout writer and no
  write distribution, so each of the ``--files-per-day`` tasks writes one small file into every day;
  six columns, among them 64 hex characters of hashes per row, so compaction has real bytes to read and write;
* ``bench.mor``: a format 2 merge-on-read table (same schema, 10 days x 20 files) after DELETE and
  UPDATE statements that wrote position delete files;
* ``bench.files_100000`` in ``/tmp/floe-bench/health-lake`` (benchmark 3's lake): 100,000 tiny data
  files, added with ``add_files`` in commits of 1,000 (100 manifests).

The tables that are maintained are identical copies of those masters, made before every run with
Iceberg's ``rewrite_table_path`` procedure (its rewritten metadata moved into the copy's folder, the
data and delete files hard-linked: the rewrites only add files), then registered in the catalog; the
masters are never maintained. Each measurement runs in its own process with its own driver JVM
(``local[2]``, ``spark.driver.memory`` ``--driver-memory``), after a warm-up query; Spark session start
is not included. Before each, the table's files are read once (page cache warm for every variant).

Printed:

1. **floe against the bare CALL**: a floe run as the automation runs it (the debt-score sensor plans
   it, with the full health tier and the byte estimate; the maintenance job executes it in process:
   table lock, PyIceberg metadata reads, the ``CALL``, the row check, the materialization) against
   the same ``CALL`` text in a bare ``spark.sql`` on an identical copy; for ``bench.big`` and
   ``bench.mor``. Target: at most 1.05x on the table of 2 GB or more.
2. **Estimated against actual bytes**: the materializations' ``estimated_bytes``, ``bytes_rewritten``
   and ``estimate_error_pct``. Target: within +-10 %.
3. **A cap of a quarter of the table** (``maxBytesPerRun``): the sensor and the job in a loop until no
   run is requested; bytes per run, runs until the backlog is done, and ``count(*)`` and a content
   checksum (``sum(xxhash64(all columns))``) with Spark before and after. Targets: every run at most
   1.1x the cap, at most 5 runs, no row lost.
4. **Health, full tier at 100,000 data files**: ``HealthCollector.collect(tier="full")`` with an empty
   cache in a fresh process: time and the process's peak RSS (``VmHWM``). Target: 10 s and 1 GiB.
5. **Orphan cleanup at 500,000 files** is benchmark 9 (``bench_orphans.py``); ``--orphans`` runs it
   after the rest.

    python benchmarks/bench_real_tables.py [--gb 2.1] [--days 60] [--files-per-day 40] [--health-files 100000]
        [--driver-memory 4g] [--only floe,capped,mor,health] [--rebuild] [--orphans]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import JARS_CACHE, ROOT as REPO, ensure_java, machine, table  # noqa: E402

ROOT = Path(os.environ.get("FLOE_BENCH_REAL_ROOT", "/tmp/floe-bench/real"))  # another root: a small trial run
HEALTH_LAKE = Path("/tmp/floe-bench/health-lake")
BASE = int(datetime(2026, 1, 1, tzinfo=timezone.utc).timestamp())
COLUMNS = "id, kind, amount, region, at, payload"
SCHEMA = "id BIGINT, kind STRING, amount DOUBLE, region STRING, at TIMESTAMP, payload STRING"
MOR_PROPERTIES = ("'format-version'='2', 'write.delete.mode'='merge-on-read', 'write.update.mode'='merge-on-read', "
                  "'write.merge.mode'='merge-on-read'")
COPIES = {"big_floe": "big", "big_bare": "big", "big_capped": "big", "mor_floe": "mor", "mor_bare": "mor",
          "mor_counts": "mor"}
BYTES_PER_ROW = 43.0  # zstd Parquet of the schema below, measured on a sample; the build prints the real size


# -- settings, one floe.yaml per phase over the one catalog ------------------------------------------------
def phase_settings(phase: str, policies: str, driver_memory: str):
    from floe_dagster.settings import load_settings

    folder = ROOT / "phases" / phase
    (folder / "policies").mkdir(parents=True, exist_ok=True)
    (folder / "policies" / "policies.yaml").write_text(policies)
    config = folder / "floe.yaml"
    config.write_text(f"data-dir: {ROOT / 'data'}\npolicies: [{folder / 'policies'}]\n"
                      f"spark:\n  master: local[2]\n  jars-cache: {JARS_CACHE}\n"
                      f"  conf: {{spark.driver.memory: {driver_memory}}}\n")
    os.environ["FLOE_CONFIG"] = str(config)
    return load_settings(config, environ={})


def policy(table_name: str, extra: str = "") -> str:
    return (f"- name: bench\n  tablePattern: \"demo.bench.{table_name}\"\n"
            f"  rewriteDataFiles: {{{extra}}}\n  rewriteDataFilesSchedule: {{interval: PT1H}}\n")


def name_of(table_name: str):
    from floe_dagster.core.basics.tables import TableName

    return TableName("demo", ("bench",), table_name)


def emit(result: dict) -> None:
    print("RESULT " + json.dumps(result, default=str), flush=True)


def vm_hwm_mib(pid: int | str = "self") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def checksum(spark, ref: str) -> tuple[int, str]:
    row = spark.sql(f"SELECT count(*) AS n, sum(CAST(xxhash64({COLUMNS}) AS DECIMAL(38, 0))) AS h FROM {ref}").collect()[0]
    return int(row["n"]), str(row["h"])


def file_counts(settings, table_name: str) -> dict:
    from floe_dagster.iceberg.catalog import load_table, open_catalog, table_counts

    return table_counts(load_table(open_catalog(settings.catalog), name_of(table_name)))


# -- build (once) -----------------------------------------------------------------------------------------
def build_spark_tables(gb: float, days: int, files_per_day: int, driver_memory: str) -> None:
    from floe_dagster.iceberg.catalog import open_catalog
    from floe_dagster.spark.engine import IcebergSparkEngine
    from floe_dagster.spark.procedures import spark_table_reference

    settings = phase_settings("build", "", driver_memory)
    catalog = open_catalog(settings.catalog)
    if ("bench",) not in {tuple(n) for n in catalog.list_namespaces()}:
        catalog.create_namespace("bench")
    engine = IcebergSparkEngine.from_settings(settings)
    built = json.loads((ROOT / "built.json").read_text()) if (ROOT / "built.json").exists() else {}

    def rows(spark, n: int, tasks: int, days_: int):
        return spark.range(0, n, 1, tasks).selectExpr(
            "id",
            "element_at(array('view', 'click', 'buy', 'refund'), CAST(id % 4 AS INT) + 1) AS kind",
            "round(rand(7) * 1000, 2) AS amount",
            "element_at(array('eu', 'us', 'apac'), CAST(id % 3 AS INT) + 1) AS region",
            f"timestamp_seconds({BASE} + (id % {days_}) * 86400 + (id * 7919) % 86400) AS at",
            "concat(hex(xxhash64(id, 1)), hex(xxhash64(id, 2)), hex(xxhash64(id, 3)), hex(xxhash64(id, 4))) AS payload")

    with engine.unit_of_work() as spark:
        if "big" not in built:
            ref = spark_table_reference(name_of("big"))
            spark.sql(f"DROP TABLE IF EXISTS {ref}")
            spark.sql(f"CREATE TABLE {ref} ({SCHEMA}) USING iceberg PARTITIONED BY (days(at)) "
                      f"LOCATION '{spark_location('big')}' TBLPROPERTIES ('format-version'='2')")
            n = int(gb * 1e9 / BYTES_PER_ROW)
            t0 = time.perf_counter()
            rows(spark, n, files_per_day, days).writeTo(ref).option("distribution-mode", "none") \
                .option("fanout-enabled", "true").append()
            built["big"] = {"rows": n, "seconds": round(time.perf_counter() - t0), "days": days,
                            "files_per_day": files_per_day}
            print(f"built bench.big: {n} rows in {built['big']['seconds']} s", flush=True)
            (ROOT / "built.json").write_text(json.dumps(built))
        if "mor" not in built:
            ref = spark_table_reference(name_of("mor"))
            spark.sql(f"DROP TABLE IF EXISTS {ref}")
            spark.sql(f"CREATE TABLE {ref} ({SCHEMA}) USING iceberg PARTITIONED BY (days(at)) "
                      f"LOCATION '{spark_location('mor')}' TBLPROPERTIES ({MOR_PROPERTIES})")
            n = min(3_000_000, int(gb * 1e9 / BYTES_PER_ROW) // 10)
            t0 = time.perf_counter()
            rows(spark, n, 20, 10).writeTo(ref).option("distribution-mode", "none") \
                .option("fanout-enabled", "true").append()
            statements = [
                f"DELETE FROM {ref} WHERE id % 97 = 3",
                f"UPDATE {ref} SET amount = amount + 1 WHERE id % 89 = 5",
                f"DELETE FROM {ref} WHERE id % 101 = 7",
                f"UPDATE {ref} SET kind = 'corrected' WHERE id % 83 = 11",
            ]
            for sql in statements:
                spark.sql(sql)
            built["mor"] = {"rows_written": n, "statements": statements, "seconds": round(time.perf_counter() - t0)}
            print(f"built bench.mor in {built['mor']['seconds']} s", flush=True)
            (ROOT / "built.json").write_text(json.dumps(built))
    engine.stop()
    for table_name in ("big", "mor"):
        counts = file_counts(settings, table_name)
        built[table_name]["counts"] = counts
        print(f"bench.{table_name}: {counts}", flush=True)
    (ROOT / "built.json").write_text(json.dumps(built))


def spark_location(table_name: str) -> str:
    """Spelled as Spark writes every path inside (``file:/``; the embedded catalog's warehouse default
    gives ``file:///`` for the location alone), so rewrite_table_path's one prefix matches all of them."""
    return f"file:{ROOT / 'data' / 'warehouse' / 'bench' / table_name}"


def build_health_table(files: int) -> None:
    from bench_health import build_table, catalog_at

    build_table(catalog_at(HEALTH_LAKE), f"files_{files}", files)


# -- copies (before every run) ----------------------------------------------------------------------------
def make_copies(driver_memory: str, copies: dict[str, str] = COPIES) -> None:
    """Each copy: drop the last one, rewrite_table_path from its master into a staging folder, move the
    rewritten metadata into the copy's folder, hard-link the data and delete files, register it."""
    from floe_dagster.demo import local_path
    from floe_dagster.iceberg.catalog import load_table, open_catalog
    from floe_dagster.spark.engine import IcebergSparkEngine
    from floe_dagster.spark.procedures import spark_table_reference

    settings = phase_settings("copies", "", driver_memory)
    catalog = open_catalog(settings.catalog)
    engine = IcebergSparkEngine.from_settings(settings)
    facts = {}
    for copy, master in copies.items():
        t0 = time.perf_counter()
        source = load_table(catalog, name_of(master)).metadata.location  # as written in the metadata
        target = source.rsplit("/", 1)[0] + "/" + copy
        if catalog.table_exists(("bench", copy)):
            catalog.drop_table(("bench", copy))
        shutil.rmtree(local_path(target), ignore_errors=True)
        staging = ROOT / "staging" / f"{copy}-{uuid.uuid4().hex[:8]}"
        with engine.unit_of_work() as spark:
            row = spark.sql(f"CALL demo.system.rewrite_table_path(table => 'bench.{master}', "
                            f"source_prefix => '{source}', target_prefix => '{target}', "
                            f"staging_location => 'file://{staging}/')").collect()[0]
            listing = [line.split(",", 1) for line in spark.read.text(row["file_list_location"]).toLocalIterator()
                       for line in [line["value"]] if line]
        latest = None
        linked = moved = 0
        for src, dst in listing:
            src_path, dst_path = local_path(src), local_path(dst)
            dst_path.parent.mkdir(parents=True, exist_ok=True)
            if str(src_path).startswith(str(staging)):
                shutil.copyfile(src_path, dst_path)
                moved += 1
                if dst_path.name.endswith(".metadata.json"):
                    latest = dst if latest is None or dst_path.name > local_path(latest).name else latest
            else:
                os.link(src_path, dst_path)
                linked += 1
        latest_name = str(row["latest_version"])
        latest = next(dst for _, dst in listing if dst.endswith("/" + latest_name)) if latest_name else latest
        catalog.register_table(("bench", copy), latest)
        shutil.rmtree(staging, ignore_errors=True)
        facts[copy] = {"seconds": round(time.perf_counter() - t0, 1), "metadata_files": moved, "linked": linked}
        print(f"copy bench.{copy} of bench.{master}: {moved} metadata files, {linked} data/delete files linked, "
              f"{facts[copy]['seconds']} s", flush=True)
    engine.stop()
    emit(facts)


def warm_page_cache(settings, table_name: str) -> None:
    from floe_dagster.demo import local_path
    from floe_dagster.iceberg.catalog import load_table, open_catalog

    location = local_path(load_table(open_catalog(settings.catalog), name_of(table_name)).location())
    for path in location.rglob("*"):
        if path.is_file():
            with open(path, "rb") as handle:
                while handle.read(1 << 22):
                    pass


# -- phases (each in its own process) ----------------------------------------------------------------------
def spark_session(settings):
    from floe_dagster.spark.engine import IcebergSparkEngine

    engine = IcebergSparkEngine.from_settings(settings)
    t0 = time.perf_counter()
    with engine.unit_of_work() as spark:
        spark.sql("SELECT 1").collect()
    return engine, time.perf_counter() - t0


def sensor_and_run(settings, instance, table_name: str, before_run=None):
    """One debt-score sensor tick, then the run it requests for the table (None when none); ``before_run``
    is called between them."""
    from dagster import build_sensor_context

    from floe_dagster.core.runs import run_tags as T
    from floe_dagster.defs.build import MAINTENANCE_JOB, build_definitions
    from floe_dagster.defs.sensors import SENSOR_NAME

    defs = build_definitions(settings)
    t0 = time.perf_counter()
    with build_sensor_context(instance=instance, definitions=defs, resources=defs.resources) as context:
        tick = defs.resolve_sensor_def(SENSOR_NAME).evaluate_tick(context)
    sensor_s = time.perf_counter() - t0
    requests = [r for r in tick.run_requests or [] if r.tags.get(T.TABLE) == name_of(table_name).qualified
                and r.partition_key == "REWRITE_DATA_FILES"]
    if not requests:
        return None, sensor_s, tick.skip_message
    [request] = requests
    # The run the daemon would launch for the request: its assets and its checks (none: the health checks are
    # reported without runs). A bare asset_selection would also run the health check step.
    job = defs.resolve_job_def(MAINTENANCE_JOB).get_subset(
        asset_selection=set(request.asset_selection), asset_check_selection=set(request.asset_check_keys or ()))
    if before_run is not None:
        before_run()
    t0 = time.perf_counter()
    result = job.execute_in_process(instance=instance, partition_key=request.partition_key, tags=request.tags,
                                    raise_on_error=False)
    run_s = time.perf_counter() - t0
    if not result.success:
        raise RuntimeError(f"the floe run failed: {[e.message for e in result.all_events if e.is_failure]}")
    [materialization] = result.asset_materializations_for_node("iceberg_tables")
    meta = {k: getattr(v, "value", v) for k, v in materialization.metadata.items()}
    keep = ("estimated_bytes", "bytes_rewritten", "estimate_error_pct", "duration_s", "row_check", "rows_checked",
            "rewritten_data_files_count", "added_data_files_count", "data_files_before", "data_files_after",
            "delete_files_before", "delete_files_after", "total_bytes_before", "scoped_partitions",
            "backlog_partitions", "backlog_bytes", "scope_cap_bytes", "scope_oversized", "procedure_call",
            "failed_data_files_count", "outcome", "partial_progress", "commits", "commits_lost", "new_snapshots",
            "file_groups_planned", "file_groups_left", "file_groups_rewritten", "data_files_left", "call_s",
            "overhead_s", "engine_phases", "row_check_fallback")
    facts = {k: meta[k] for k in keep if k in meta}
    facts.update(sensor_s=sensor_s, run_s=run_s, trigger=request.tags.get(T.TRIGGER),
                 attempt=request.tags.get(T.ATTEMPT))
    return facts, sensor_s, None


def fresh_instance(phase: str):
    from dagster import DagsterInstance

    home = ROOT / "phases" / phase / "dagster_home"
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    shutil.copyfile(REPO / "dagster.yaml", home / "dagster.yaml")
    os.environ["DAGSTER_HOME"] = str(home)
    return DagsterInstance.get()


def measured(settings, table_name: str, with_checksum: bool, work) -> dict:
    """A Spark session started and warmed up, the rows and checksum before (``with_checksum``), the table's
    files read once, ``work(engine)`` (its figures), the rows and checksum after, the file counts after."""
    from floe_dagster.spark.procedures import spark_table_reference

    engine, session_s = spark_session(settings)
    ref = spark_table_reference(name_of(table_name))
    sums = []
    if with_checksum:
        with engine.unit_of_work() as spark:
            sums.append(checksum(spark, ref))
    warm_page_cache(settings, table_name)
    figures = work(engine)
    if with_checksum:
        with engine.unit_of_work() as spark:
            sums.append(checksum(spark, ref))
    before, after = sums if sums else (None, None)
    return {**figures, "session_s": session_s, "checksum_before": before, "checksum_after": after,
            "counts_after": file_counts(settings, table_name), "python_peak_mib": vm_hwm_mib()}


def profile_the_step() -> dict[str, list[float]]:
    """Seconds of each call of the maintenance step's parts (wrapped here, the product code untouched), so the
    floe run's time outside the CALL can be placed: the step (table_run.maintain_table) holds the engine (maintain),
    whose phases the materialization records (engine_phases), and the step's own PyIceberg reads (each table load
    of its TableReads: iceberg.catalog.load_table). Nested: the run's first load inside whichever step reads the
    table first, TableReads.snapshots inside the engine (snapshots_before/after), the proof inside its row check."""
    import functools

    from floe_dagster.defs import assets, table_run
    from floe_dagster.iceberg import catalog
    from floe_dagster.iceberg.catalog import TableReads
    from floe_dagster.iceberg.row_proof import MetadataRowProof
    from floe_dagster.spark.engine import IcebergSparkEngine
    from floe_dagster.spark.operation_steps import rewrite_data_files

    seconds: dict[str, list[float]] = {}
    targets = [(assets, "maintain_table"), (table_run, "within_envelope"), (table_run, "_pre_checks"),
               (table_run, "table_counts"), (rewrite_data_files, "rewrite_progress"),
               (table_run, "_materialization"), (catalog, "load_table"), (TableReads, "snapshots"),
               (IcebergSparkEngine, "maintain"), (MetadataRowProof, "__call__")]
    for owner, attribute in targets:
        real = getattr(owner, attribute)

        def timed(*args, __real=real, __name=f"{getattr(owner, '__name__', owner)}.{attribute}", **kwargs):
            t0 = time.perf_counter()
            try:
                return __real(*args, **kwargs)
            finally:
                seconds.setdefault(__name.removeprefix("floe_dagster."), []).append(time.perf_counter() - t0)

        setattr(owner, attribute, functools.wraps(real)(timed))
    return seconds


def without_the_proof() -> None:
    """floe's row check as it was before the metadata proof: Spark counts every commit with delete files."""
    from floe_dagster.core.rewrites.row_proof import CannotProve
    from floe_dagster.iceberg.row_proof import MetadataRowProof

    def refuse(self, parent_id, snapshot_id):
        raise CannotProve("the proof is turned off by the benchmark")

    MetadataRowProof.__call__ = refuse


def phase_floe(table_name: str, driver_memory: str, with_checksum: bool) -> None:
    from floe_dagster.iceberg.table_cache import refresh_table_cache

    settings = phase_settings(f"floe-{table_name}", policy(table_name), driver_memory)
    refresh_table_cache(settings)
    if table_name.endswith("_counts"):
        without_the_proof()
    step = profile_the_step()

    def floe_run(engine) -> dict:
        with fresh_instance(f"floe-{table_name}") as instance:
            facts, _, skipped = sensor_and_run(settings, instance, table_name, before_run=step.clear)
        if facts is None:
            raise RuntimeError(f"the sensor requested no run for {table_name}: {skipped}")
        return {**facts, "step": {name: [round(x, 3) for x in calls] for name, calls in step.items()}}

    emit(measured(settings, table_name, with_checksum, floe_run))


def phase_bare(table_name: str, sql: str, driver_memory: str, with_checksum: bool) -> None:
    settings = phase_settings(f"bare-{table_name}", "", driver_memory)

    def bare_call(engine) -> dict:
        with engine.unit_of_work() as spark:
            t0 = time.perf_counter()
            rows = [r.asDict() for r in spark.sql(sql).collect()]
            return {"call_s": time.perf_counter() - t0, "rows": rows}

    emit(measured(settings, table_name, with_checksum, bare_call))


def phase_capped(table_name: str, cap: int, driver_memory: str, max_runs: int) -> None:
    from floe_dagster.iceberg.table_cache import refresh_table_cache
    from floe_dagster.spark.procedures import spark_table_reference

    settings = phase_settings(f"capped-{table_name}", policy(table_name, f"maxBytesPerRun: {cap}"), driver_memory)
    refresh_table_cache(settings)
    engine, session_s = spark_session(settings)
    ref = spark_table_reference(name_of(table_name))
    with engine.unit_of_work() as spark:
        before = checksum(spark, ref)
    counts_before = file_counts(settings, table_name)
    warm_page_cache(settings, table_name)
    runs = []
    last_skip = None
    with fresh_instance(f"capped-{table_name}") as instance:
        for _ in range(max_runs + 1):
            facts, sensor_s, last_skip = sensor_and_run(settings, instance, table_name)
            if facts is None:
                break
            facts.pop("procedure_call", None)
            runs.append(facts)
            print(f"run {len(runs)}: " + json.dumps(facts), flush=True)
    with engine.unit_of_work() as spark:
        after = checksum(spark, ref)
    emit({"cap": cap, "runs": runs, "checksum_before": before, "checksum_after": after, "counts_before": counts_before,
          "counts_after": file_counts(settings, table_name), "last_tick": last_skip})


def phase_health(files: int) -> None:
    import tempfile

    from bench_health import catalog_at

    from floe_dagster.core.basics.tables import TableName
    from floe_dagster.iceberg.health_collector import HealthCollector, forget_parsed_records

    catalog = catalog_at(HEALTH_LAKE)
    name = TableName("lake", ("bench",), f"files_{files}")
    after_imports = vm_hwm_mib()
    results = []
    for attempt in range(2):  # the first in a fresh process: the target; the second as a check of noise
        forget_parsed_records()
        folder = Path(tempfile.mkdtemp(prefix="floe-bench-health-"))
        t0 = time.perf_counter()
        collector = HealthCollector(catalog, folder)
        snapshot = collector.collect([name], tier="full")
        seconds = time.perf_counter() - t0
        metrics = snapshot.metrics[name]
        results.append({"seconds": seconds, "peak_mib": vm_hwm_mib(), "files_read": snapshot.files_read,
                        "data_files": metrics.data_file_count})
        collector.close()
        shutil.rmtree(folder, ignore_errors=True)
    emit({"after_imports_mib": after_imports, "runs": results})


# -- the driver ---------------------------------------------------------------------------------------------
def run_phase(*args: str) -> dict:
    load = "/".join(f"{x:.1f}" for x in os.getloadavg())
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, __file__, "--phase", *args], capture_output=True, text=True)
    lines = [line for line in done.stdout.splitlines() if not line.startswith("RESULT ")]
    for line in lines:
        print("    " + line, flush=True)
    result = next((line[7:] for line in reversed(done.stdout.splitlines()) if line.startswith("RESULT ")), None)
    if done.returncode != 0 or result is None:
        raise RuntimeError(f"phase {args} failed (exit {done.returncode}):\n{done.stderr[-5000:]}")
    print(f"  phase {' '.join(args[:2])}: {time.perf_counter() - t0:.0f} s (load average at its start {load})",
          flush=True)
    return {**json.loads(result), "load": f"{load} -> {os.getloadavg()[0]:.1f}"}


def side_by_side(pair: int, only: set[str], dm: list[str], report: dict) -> dict:
    """One pair of measurements on fresh copies: floe's run and the bare CALL on ``bench.big``, floe's run, floe's
    run with the row check's Spark counts (the check before the metadata proof) and the bare CALL on
    ``bench.mor``. The order turns by one each pair (floe first, then the bare CALL first, ...), so neither
    side always runs on a machine the other has just loaded; the bare SQL is the first floe run's (the same
    text every time, the table's name changed)."""
    wanted = [c for c, on in (("big_floe", "floe"), ("big_bare", "floe"), ("mor_floe", "mor"), ("mor_bare", "mor"),
                              ("mor_counts", "mor")) if on in only]
    if not wanted:
        return {}
    measured = {"copies": run_phase("copies", *dm, "--copies", *wanted)}
    sql = report.setdefault("sql", {})

    def floe(copy: str, checksum: str) -> None:
        measured[copy] = run_phase("floe", copy, checksum, *dm)
        sql.setdefault(copy.split("_")[0], measured[copy]["procedure_call"].replace(f"`{copy}`", "`{table}`"))

    def bare(copy: str, checksum: str) -> None:
        measured[copy] = run_phase("bare", copy, checksum, bare_sql(sql[copy.split("_")[0]], copy), *dm)

    if "floe" in only:
        steps = [lambda: floe("big_floe", "no-checksum"), lambda: bare("big_bare", "no-checksum")]
        for step in (steps if pair % 2 == 0 or "big" not in sql else steps[::-1]):
            step()
    if "mor" in only:
        steps = [lambda: floe("mor_floe", "checksum"), lambda: floe("mor_counts", "checksum"),
                 lambda: bare("mor_bare", "checksum")]
        turn = pair % 3 if "mor" in sql else 0
        for step in steps[turn:] + steps[:turn]:
            step()
    return measured


def bare_sql(procedure_call: str, bare_table: str) -> str:
    """floe's CALL (its table's name as ``{table}``) on ``bare_table``."""
    sql = procedure_call.strip().removeprefix("```sql").removesuffix("```").strip()
    assert "`{table}`" in sql, sql
    return sql.replace("`{table}`", f"`{bare_table}`")


def mib(n: float) -> str:
    return f"{n / 2**20:,.0f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gb", type=float, default=2.1)
    parser.add_argument("--days", type=int, default=60)
    parser.add_argument("--files-per-day", type=int, default=40)
    parser.add_argument("--health-files", type=int, default=100_000)
    parser.add_argument("--driver-memory", default="4g")
    parser.add_argument("--only", default="floe,capped,mor,health")
    parser.add_argument("--max-runs", type=int, default=8)
    parser.add_argument("--rebuild", action="store_true")
    parser.add_argument("--orphans", action="store_true", help="run bench_orphans.py (benchmark 9) afterwards")
    parser.add_argument("--pairs", type=int, default=1,
                        help="measurements side by side, each on fresh copies, the order turning each time")
    parser.add_argument("--phase", nargs="+", help=argparse.SUPPRESS)
    parser.add_argument("--copies", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    ensure_java()
    if args.phase:
        what, *rest = args.phase
        if what == "build":
            build_spark_tables(args.gb, args.days, args.files_per_day, args.driver_memory)
            emit({})
        elif what == "copies":
            make_copies(args.driver_memory, {copy: COPIES[copy] for copy in args.copies or COPIES})
        elif what == "floe":
            phase_floe(rest[0], args.driver_memory, with_checksum=rest[1] == "checksum")
        elif what == "bare":
            phase_bare(rest[0], rest[2], args.driver_memory, with_checksum=rest[1] == "checksum")
        elif what == "capped":
            phase_capped(rest[0], int(rest[1]), args.driver_memory, args.max_runs)
        elif what == "health":
            phase_health(int(rest[0]))
        return

    print(machine(), flush=True)
    free = shutil.disk_usage("/tmp").free
    print(f"/tmp free: {free / 2**30:.0f} GiB; spark local[2], spark.driver.memory={args.driver_memory}", flush=True)
    if args.rebuild:
        shutil.rmtree(ROOT, ignore_errors=True)
    ROOT.mkdir(parents=True, exist_ok=True)
    only = set(args.only.split(","))
    t0 = time.perf_counter()
    subprocess.run([sys.executable, __file__, "--phase", "build", "--gb", str(args.gb), "--days", str(args.days),
                    "--files-per-day", str(args.files_per_day), "--driver-memory", args.driver_memory], check=True)
    if "health" in only:
        build_health_table(args.health_files)
    print(f"tables ready in {time.perf_counter() - t0:.0f} s (cached under {ROOT} and {HEALTH_LAKE})", flush=True)
    built = json.loads((ROOT / "built.json").read_text())
    big, mor = built["big"]["counts"], built["mor"]["counts"]
    print(f"bench.big: {big['data_files']} data files, {big['total_bytes'] / 1e9:.2f} GB, {built['big']['days']} day "
          f"partitions, {built['big']['rows']:,} rows; bench.mor: {mor}", flush=True)
    dm = ["--driver-memory", args.driver_memory]
    report: dict = {}
    if "capped" in only:
        report["copies"] = run_phase("copies", *dm, "--copies", "big_capped")
    report["pairs"] = [side_by_side(i, only, dm, report) for i in range(args.pairs)]
    if "capped" in only:
        cap = big["total_bytes"] // 4
        report["capped"] = run_phase("capped", "big_capped", str(cap), *dm, "--max-runs", str(args.max_runs))
    if "health" in only:
        report["health"] = run_phase("health", str(args.health_files))
    (ROOT / "last-report.json").write_text(json.dumps(report, indent=1, default=str))
    print_report(report, big)
    if args.orphans:
        subprocess.run([sys.executable, str(Path(__file__).with_name("bench_orphans.py"))], check=True)
    else:
        print("\norphan cleanup at 500,000 files: benchmark 9 (benchmarks/bench_orphans.py, README section 9); "
              "--orphans runs it here")


ENGINE_PHASES = ("session", "snapshots_before", "call", "snapshots_after", "row_check", "release")


def print_report(report: dict, big: dict) -> None:
    print()
    rows, parts, est = [], [], []
    for n, pair in enumerate(report["pairs"]):
        for label, floe_keys, bare_key in (("bench.big", ("big_floe",), "big_bare"),
                                           ("bench.mor", ("mor_floe", "mor_counts"), "mor_bare")):
            for key in (k for k in floe_keys if k in pair):
                f, b = pair[key], pair[bare_key]
                bare_s = b["call_s"]
                rows.append((n + 1, label + (" (Spark counts)" if key.endswith("counts") else ""),
                             f"{f['data_files_before']} -> {f['counts_after']['data_files']}",
                             f"{f.get('delete_files_before', 0)} -> {f['counts_after']['delete_files']}",
                             f"{f['run_s']:.1f}", f"{f['duration_s']:.1f}", f"{f['call_s']:.1f}", f"{bare_s:.1f}",
                             f"{f['run_s'] / bare_s:.3f}", f"{f['duration_s'] / bare_s:.3f}",
                             f"{f['call_s'] / bare_s:.3f}", f["row_check"], f"{f['load']}", f"{b['load']}"))
                parts.append((n + 1, key, f"{f['run_s'] - f['duration_s']:.2f}",
                              *(f"{f['engine_phases'].get(p, 0):.2f}" for p in ENGINE_PHASES),
                              ", ".join(f"{name} {sum(calls):.2f}/{len(calls)}" for name, calls in f["step"].items())))
                if n == 0 and not key.endswith("counts"):
                    est.append((key.split("_")[0], f"{f['estimated_bytes']:,}", f"{f['bytes_rewritten']:,}",
                                f["estimate_error_pct"]))
    if rows:
        print("1. floe run against the bare CALL (same SQL, identical copies; fresh process and JVM each; the order "
              "turns each pair)")
        print(table(rows, ["pair", "table", "data files", "delete files", "floe run s (job)", "engine s",
                           "its CALL s", "bare CALL s", "run ÷ bare", "engine ÷ bare", "CALL ÷ bare", "row check",
                           "load (floe)", "load (bare)"]))
        print("\n   where floe's time besides the CALL goes (seconds): the run's machinery (job − engine), the "
              "engine's phases, the step's parts (total s / calls; nested, see profile_the_step)")
        print(table(parts, ["pair", "run", "job − engine", *ENGINE_PHASES, "step parts"]))
        print("\n2. estimated against actual bytes (whole-table runs)")
        print(table(est, ["table", "estimated_bytes", "bytes_rewritten", "estimate_error_pct"]))
        for n, pair in enumerate(report["pairs"]):
            for key in ("mor_floe", "mor_counts", "mor_bare"):
                if key in pair:
                    r = pair[key]
                    same = "same" if r["checksum_before"] == r["checksum_after"] else "DIFFERENT"
                    print(f"   pair {n + 1} {key}: rows/checksum before {r['checksum_before']} after "
                          f"{r['checksum_after']} ({same})")
    if "capped" in report:
        c = report["capped"]
        cap = c["cap"]
        rows = [(i + 1, r["trigger"], r["attempt"], r.get("scoped_partitions", "-"), mib(r["estimated_bytes"]),
                 mib(r["bytes_rewritten"]), f"{r['bytes_rewritten'] / cap:.3f}", r["estimate_error_pct"],
                 r.get("backlog_partitions", 0), mib(r.get("backlog_bytes", 0)), f"{r['run_s']:.0f}", r["row_check"])
                for i, r in enumerate(c["runs"])]
        print(f"\n3. cap of a quarter of the table: maxBytesPerRun {cap:,} bytes ({mib(cap)} MiB) of "
              f"{big['total_bytes']:,}")
        print(table(rows, ["run", "trigger", "attempt", "partitions", "estimated MiB", "rewritten MiB", "÷ cap",
                           "estimate error %", "backlog partitions", "backlog MiB", "run s", "row check"]))
        total = sum(r["bytes_rewritten"] for r in c["runs"])
        print(f"   runs: {len(c['runs'])}; rewritten in all {total:,} bytes ({total / big['total_bytes']:.3f} of the "
              f"table); data files {c['counts_before']['data_files']} -> {c['counts_after']['data_files']}; "
              f"rows/checksum before {c['checksum_before']} after {c['checksum_after']} "
              f"({'same' if c['checksum_before'] == c['checksum_after'] else 'DIFFERENT'}); last tick: {c['last_tick']}")
    if "health" in report:
        h = report["health"]
        print("\n4. health, full tier, fresh process, empty cache")
        print(table([(i + 1, r["data_files"], r["files_read"], f"{r['seconds']:.2f}", f"{r['peak_mib']:.0f}")
                     for i, r in enumerate(h["runs"])],
                    ["collection", "data files", "files read", "s", "process peak RSS MiB"]))
        print(f"   peak RSS after the imports, before collecting: {h['after_imports_mib']:.0f} MiB")


if __name__ == "__main__":
    main()
