"""Benchmark 7: maintenance throughput of the automation, against a bare loop of ``CALL``s.

N fragmented tiny tables (``--tables 40``, ``--files`` small files each) on a fresh lakehouse per
variant, and a policy that makes every one of them due (``rewriteDataFiles`` every hour, never run):

``bare loop``       one SparkSession (its start included) and N ``CALL ... rewrite_data_files`` in one
                    unit of work: the floor
``batched``         the real ``dagster-daemon`` with the queued run coordinator and the default run
                    launcher as ``dagster.yaml`` ships them (two runs at a time), the debt-score sensor
                    on, and floe.yaml's default ``batching`` (up to 20 tables per run)
``one per run``     the same with ``batching: {max-tables: 1}``: one run, one process and one JVM per
                    table (the shape before batches)
``production``      batched, with a PostgreSQL catalog and a long-lived Spark Connect server (started
                    before the measurement, as in production): runs attach to it and start no JVM

Measured for each automation variant: from the sensor's first admission (the ledger's first
``admitted_at``) until every table's compaction has succeeded (the last outcome's ``finished_at``),
the number of Dagster runs created, and the share of materializations whose decision metadata is
complete (trigger, reason, policy and version, debt score, slot, attempt, estimated bytes, ledger row).
Printed: tables per minute and the ratio to the bare loop (each variant on its own lakehouse, all in
one run of this script).

    python benchmarks/bench_throughput.py [--tables 40] [--files 8] [--variants bare batched one-per-run production]

The production variant needs PostgreSQL on 127.0.0.1:5432 with the ``floe`` role that ``./dev test``
creates (``FLOE_TEST_PG_URL`` to change it).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from contextlib import ExitStack, contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import JARS_CACHE, ROOT, ensure_java, fragmented_table, machine, table, use_dagster_home  # noqa: E402

POLICY = """
- name: bench
  tablePattern: "demo.*.*"
  rewriteDataFiles: {}
  rewriteDataFilesSchedule: {interval: PT1H}
"""
DECISION_KEYS = ("trigger", "reason", "policy", "policy_version", "debt_score", "slot", "attempt", "estimated_bytes",
                 "ledger_row")
BIN = Path(sys.executable).parent
TIMEOUT_S = 3600


def write_config(root: Path, extra: str) -> Path:
    """floe.yaml for an embedded lakehouse under ``root``, plus ``extra`` sections (a ``spark:`` section
    there replaces the default one)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "policies").mkdir(exist_ok=True)
    (root / "policies" / "policies.yaml").write_text(textwrap.dedent(POLICY))
    config = root / "floe.yaml"
    spark = "" if "spark:" in extra else f"spark:\n  jars-cache: {JARS_CACHE}\n"
    config.write_text(f"data-dir: {root / 'data'}\npolicies: [{root / 'policies'}]\n{spark}{textwrap.dedent(extra)}")
    return config


def build_tables(settings, n: int, files: int) -> list:
    from floe_dagster.core.basics.tables import TableName
    from floe_dagster.iceberg.catalog import open_catalog
    from floe_dagster.iceberg.table_cache import refresh_table_cache

    catalog = open_catalog(settings.catalog)
    names = []
    for i in range(n):
        identifier = f"ns{i % 4}.t{i:03d}"
        fragmented_table(catalog, identifier, files, rows_per_file=50, start_id=i * files * 50)
        names.append(TableName(settings.catalog.name, (f"ns{i % 4}",), f"t{i:03d}"))
    refresh_table_cache(settings)
    return names


def bare_loop(settings, tables) -> float:
    from floe_dagster.core.operation_kinds.rewrite_data_files import RewriteDataFilesConfig
    from floe_dagster.core.operations import Operation
    from floe_dagster.spark.engine import IcebergSparkEngine
    from floe_dagster.spark.operation_steps import build_procedure_call

    engine = IcebergSparkEngine.from_settings(settings)
    now = datetime.now(timezone.utc)
    calls = [build_procedure_call(Operation.REWRITE_DATA_FILES, t, RewriteDataFilesConfig(), now).sql for t in tables]
    started = time.perf_counter()
    with engine.unit_of_work() as spark:  # the session starts here
        for sql in calls:
            spark.sql(sql).collect()
    elapsed = time.perf_counter() - started
    engine.stop()
    return elapsed


@contextmanager
def daemon(root: Path, config: Path, home: Path) -> Iterator[subprocess.Popen]:
    env = {**os.environ, "FLOE_CONFIG": str(config), "DAGSTER_HOME": str(home), "PYTHONWARNINGS": "ignore"}
    log = open(root / "daemon.log", "w")
    process = subprocess.Popen([str(BIN / "dagster-daemon"), "run", "-w", "workspace.yaml"], cwd=ROOT, env=env,
                               stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield process
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        log.close()


def automation(label: str, root: Path, extra: str, args) -> dict:
    from dagster import DagsterInstance

    from floe_dagster.coordination.database import Coordination
    from floe_dagster.core.basics.localtime import naive_as_utc
    from floe_dagster.core.operations import Operation
    from floe_dagster.defs.names import asset_key_for
    from floe_dagster.settings import load_settings

    home = use_dagster_home(root)
    config = write_config(root, extra)
    settings = load_settings(config, environ={})
    print(f"{label}: building {args.tables} tables ...", flush=True)
    tables = build_tables(settings, args.tables, args.files)
    coordination = Coordination(settings.coordination_url)
    wanted = {t.qualified for t in tables}
    print(f"{label}: starting dagster-daemon (the sensor admits the work at its first tick)", flush=True)
    with daemon(root, config, home):
        deadline = time.monotonic() + TIMEOUT_S
        done: dict[str, datetime] = {}
        while time.monotonic() < deadline:
            for name in wanted - set(done):
                succeeded = [o["finished_at"] for o in coordination.outcomes_for(name)
                             if o["succeeded"] and o["operation"] == Operation.REWRITE_DATA_FILES.value]
                if succeeded:
                    done[name] = min(succeeded)
            if len(done) == len(wanted):
                break
            time.sleep(2)
        else:
            raise RuntimeError(f"{label}: only {len(done)} of {len(wanted)} compactions succeeded in {TIMEOUT_S} s; "
                               f"see {root / 'daemon.log'}")
    admitted = [row.admitted_at for row in coordination.ledger_rows()]
    seconds = (naive_as_utc(max(done.values())) - min(admitted)).total_seconds()  # ledger rows read back in UTC
    with DagsterInstance.from_config(str(home)) as instance:
        runs = instance.get_runs_count()
        events = instance.get_latest_materialization_events([asset_key_for(t) for t in tables])
        complete = sum(
            1 for event in events.values()
            if event is not None and all(
                key in event.asset_materialization.metadata
                and event.asset_materialization.metadata[key].value not in (None, "")
                for key in DECISION_KEYS)
        )
    print(f"{label}: {len(done)} compactions in {seconds:.1f} s, {runs} Dagster runs, "
          f"decision metadata complete in {complete}/{len(tables)} materializations", flush=True)
    return {"seconds": seconds, "runs": runs, "complete": complete, "tables": len(tables)}


def postgres_catalog(stack: ExitStack) -> str:
    """A fresh PostgreSQL database for the catalog (dropped at the end): its SQLAlchemy URL."""
    import sqlalchemy

    base = os.environ.get("FLOE_TEST_PG_URL", "postgresql://floe:floe@127.0.0.1:5432")
    name = f"floe_bench_{uuid.uuid4().hex[:8]}"
    admin = sqlalchemy.create_engine(f"{base}/postgres", isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(sqlalchemy.text(f"CREATE DATABASE {name}"))

    def drop() -> None:
        with admin.connect() as connection:
            connection.execute(sqlalchemy.text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        admin.dispose()

    stack.callback(drop)
    return f"{base.replace('postgresql://', 'postgresql+psycopg2://')}/{name}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tables", type=int, default=40)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--variants", nargs="+", default=["bare", "batched", "one-per-run", "production"])
    args = parser.parse_args()
    print(machine())
    ensure_java()
    root = Path(tempfile.mkdtemp(prefix="floe-bench-throughput-"))
    results: dict[str, dict] = {}
    try:
        with ExitStack() as stack:
            if "bare" in args.variants:
                from floe_dagster.settings import load_settings

                settings = load_settings(write_config(root / "bare", ""), environ={})
                tables = build_tables(settings, args.tables, args.files)
                seconds = bare_loop(settings, tables)
                results["bare loop (one session, N CALLs)"] = {"seconds": seconds, "runs": 0, "complete": None,
                                                                "tables": len(tables)}
                print(f"bare loop: {len(tables)} CALLs in {seconds:.1f} s (session start included)", flush=True)
            if "batched" in args.variants:
                results["batched runs (embedded default)"] = automation("batched", root / "batched", "", args)
            if "one-per-run" in args.variants:
                results["one table per run"] = automation("one per run", root / "one", "batching: {max-tables: 1}\n",
                                                          args)
            if "production" in args.variants:
                from floe_dagster.settings import DEFAULT_POSTGRES_JDBC
                from floe_dagster.spark.jars import resolve_jars
                from floe_dagster_tests.servers import run_spark_connect

                url = postgres_catalog(stack)
                driver = [str(p) for p in resolve_jars([DEFAULT_POSTGRES_JDBC], JARS_CACHE)]
                connect = stack.enter_context(run_spark_connect(root / "connect", driver))
                extra = (f"catalog:\n  name: demo\n  properties:\n    type: sql\n    uri: \"{url}\"\n"
                         f"    warehouse: \"file://{root / 'production' / 'warehouse'}\"\n"
                         f"spark:\n  remote: \"{connect.remote}\"\n  jars-cache: {JARS_CACHE}\n")
                results["production (PostgreSQL catalog, Spark Connect)"] = automation(
                    "production", root / "production", extra, args)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    bare = next((r["seconds"] for k, r in results.items() if k.startswith("bare")), None)
    rows = []
    for name, r in results.items():
        per_minute = r["tables"] / r["seconds"] * 60
        ratio = f"{r['seconds'] / bare:.2f}x" if bare else "-"
        complete = "-" if r["complete"] is None else f"{100 * r['complete'] / r['tables']:.0f}%"
        rows.append((name, r["tables"], f"{r['seconds']:.1f}", f"{per_minute:.1f}", ratio, r["runs"], complete))
    print()
    print(table(rows, ["variant", "tables", "seconds", "tables/min", "vs bare loop", "Dagster runs",
                       "decision metadata complete"]))


if __name__ == "__main__":
    main()
