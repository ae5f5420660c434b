"""The PySpark maintenance engine: a Dagster resource that runs Iceberg's procedures.

It wraps dagster-pyspark's ``LazyPySparkResource`` (the session starts on first use, so runs that
do nothing start no JVM) and adds what that resource lacks: after each unit of work it closes the
Iceberg catalog inside Spark. Iceberg 1.10's JdbcCatalog leaves result sets open, and on SQLite a
live Spark catalog keeps a read lock that makes every PyIceberg commit fail with "database is
locked"; closing the catalog and resetting Spark's catalog manager frees it, and the next use opens
a fresh catalog. (Iceberg 1.11 closes those result sets; the release stays, since 1.10.x remains
selectable with ``spark.iceberg-version``.) The JVM handles used here (``_jsparkSession``) exist on
classic sessions of PySpark 3.5 and 4.x alike; a Spark Connect session has none and skips them.

Secrets stay out of the resources' config, which Dagit shows and Dagster stores in every job snapshot:
the Spark conf entries that hold one (the catalog's password, ``header.*``, S3 keys, a Connect URL's
token; core/secrets.py decides) are shown masked, and their real values reach the session through one
``EnvVar`` (a JSON object in a variable floe-dagster sets in its own process, redaction.secret_variable).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping
from urllib.parse import urlparse

from dagster import ConfigurableResource, EnvVar, InitResourceContext
from dagster_pyspark import LazyPySparkResource
from dagster_pyspark.resources import spark_session_from_config
from pydantic import PrivateAttr

from floe_dagster.coordination.locks import file_locks
from floe_dagster.core.commit_conflicts import commit_race
from floe_dagster.core.operation_config import ComputeStatisticsConfig, OperationConfig, OrphanCleanupConfig
from floe_dagster.core.operations import Operation
from floe_dagster.core.partition_scope import RewriteScope
from floe_dagster.core.phase_timer import PhaseTimer
from floe_dagster.core.row_check import Prove, RowCheck, RowsChanged, check_commits
from floe_dagster.core.secrets import mask_text, split_secret_entries
from floe_dagster.core.statistics import StatisticsState, statistics_work
from floe_dagster.core.tables import TableName
from floe_dagster.errors import (
    CommitConflict,
    EngineUnavailable,
    FailedAfterCommit,
    FloeError,
    MaintenanceFailed,
    RowCountMismatch,
    unreachable,
)
from floe_dagster.iceberg.snapshot_summary import commit_rows, exact_live_rows
from floe_dagster.redaction import secret_variable
from floe_dagster.settings import Settings
from floe_dagster.spark.catalog_conf import spark_catalog_conf
from floe_dagster.spark.jars import jar_file_name, resolve_jars
from floe_dagster.spark.orphan_runs import ListedHook, OrphanCleanup, OrphanContext
from floe_dagster.spark.runtime import installed_spark_line, spark_packages
from floe_dagster.spark.procedures import (
    ProcedureCall,
    ProcedureResult,
    build_procedure_call,
    partition_statistics_call,
    spark_table_reference,
    summarize_result,
    summarize_statistics,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EngineOutcome:
    result: ProcedureResult
    sql: str
    arguments: dict[str, Any]
    new_snapshot_ids: tuple[int, ...]
    row_check: RowCheck
    duration_s: float
    extra: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)  # for the materialization (orphan quarantine)
    # Seconds per phase of duration_s: session (lock, session, catalog), snapshots_before, call (the
    # procedure's own statements), snapshots_after, row_check, release (the catalog closed in Spark).
    phases: dict[str, float] = field(default_factory=dict)

    @property
    def call_s(self) -> float:
        return self.phases.get("call", 0.0)

    @property
    def overhead_s(self) -> float:
        """The engine's time besides the procedure: floe's own reads and checks around the CALL."""
        return max(self.duration_s - self.call_s, 0.0)


ICEBERG_EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
# Session-level SQL conf: the only kind a Spark Connect client may set on its server session.
SESSION_CONF = {"spark.sql.shuffle.partitions": "4", "spark.sql.session.timeZone": "UTC"}


def spark_conf_for(settings: Settings) -> dict[str, str]:
    """The whole Spark conf: defaults, the catalog's mapping, jars from the cache, then user conf.

    With Spark Connect (``spark.remote``) only ``spark.remote`` itself: the server was started with
    its jars, extensions and memory, which a client cannot change (Spark refuses to modify static and
    core conf at runtime); the engine sets the catalog per session (``connect_session_conf``).
    """
    if settings.spark.remote:
        return {"spark.remote": settings.spark.remote}
    catalog_conf = spark_catalog_conf(settings.catalog)[0]
    conf = {
        "spark.sql.extensions": ICEBERG_EXTENSIONS,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.memory": "1g",
        "spark.app.name": "floe-dagster",
        **SESSION_CONF,
        "spark.master": settings.spark.master,
    }
    conf.update(catalog_conf)
    packages = spark_packages(settings)
    # Paths only: the download happens when a session starts, so loading the code location stays cheap.
    jars = [str(Path(settings.spark.jars_cache) / jar_file_name(p)) for p in packages] + list(settings.spark.jars)
    if jars:
        conf["spark.jars"] = ",".join(jars)
    conf.update(settings.spark.conf)
    return conf


def connect_session_conf(settings: Settings) -> dict[str, str]:
    """What a Spark Connect client sets on its server session: ``spark.sql.catalog.<name>.*`` is
    session conf (Spark reads it when the session first uses the catalog), so the server needs no
    catalog of its own, only the Iceberg runtime (and the catalog's JDBC driver) and extensions."""
    if not settings.spark.remote:
        return {}
    return {**SESSION_CONF, **spark_catalog_conf(settings.catalog)[0], **settings.spark.conf}


def _secret_entries(secret_conf: str | None) -> dict[str, str]:
    """The conf entries held back from the resources' config (an EnvVar until Dagster resolves it)."""
    if not secret_conf:
        return {}
    return json.loads(secret_conf.get_value() if isinstance(secret_conf, EnvVar) else secret_conf)


class FloeSparkSession(LazyPySparkResource):
    """dagster-pyspark's lazy session, whose ``spark_config`` is shown with its secrets masked: the
    session starts with those entries from ``secret_conf`` (an EnvVar, see the module's doc)."""

    secret_conf: str | None = None

    @classmethod
    def _is_dagster_maintained(cls) -> bool:
        return False

    def _init_session(self) -> None:
        if self._spark_session is None:
            self._spark_session = spark_session_from_config({**self.spark_config, **_secret_entries(self.secret_conf)})


def _held_back(settings: Settings) -> tuple[dict[str, str], dict[str, str], str | None]:
    """The Spark conf and the Connect session conf as shown, and the EnvVar holding what they mask."""
    shown_conf, secret_conf = split_secret_entries(spark_conf_for(settings))
    shown_session, secret_session = split_secret_entries(connect_session_conf(settings))
    secrets = {**secret_conf, **secret_session}
    if not secrets:
        return shown_conf, shown_session, None
    name = secret_variable("SPARK_CONF", f"{settings.source}\0{settings.catalog.name}", json.dumps(secrets, sort_keys=True))
    return shown_conf, shown_session, EnvVar(name)


class IcebergSparkEngine(ConfigurableResource):
    """Runs Iceberg maintenance procedures with PySpark. ``pyspark`` is dagster-pyspark's resource."""

    pyspark: LazyPySparkResource  # a FloeSparkSession (from_settings)
    catalog_name: str
    java_home: str | None = None
    jar_packages: list[str] = []
    jars_cache: str = ""
    # Tables up to this many bytes are counted with Spark after a rewrite too (0: only where the
    # snapshot summaries cannot decide).
    row_count_check_max_bytes: int = 0
    # For a SQLite catalog: a lock that serializes Spark's units of work across runs. Each JdbcCatalog
    # holds a read transaction until it is closed, and SQLite refuses (at once, whatever the busy
    # timeout) to let one of two readers upgrade to a writer, so two runs committing at once fail.
    catalog_lock: str | None = None
    # Spark Connect: the server's URL (masked), and the conf set on each new session (connect_session_conf,
    # masked; the masked entries' values are in secret_conf, as the session's).
    remote: str | None = None
    session_conf: dict[str, str] = {}
    secret_conf: str | None = None
    # The catalog's FileIO class in Spark (io-impl; None: Iceberg's default): how orphan cleanup lists.
    file_io: str | None = None
    # The Iceberg Spark runtime's version (spark.iceberg-version): orphan cleanup streams from 1.11 on.
    iceberg_version: str | None = None
    # The Spark line the procedures run on ("3.5", "4.1"): rewrite_manifests takes sort_by on 4.1 only.
    spark_line: str | None = None
    # maintenance.quarantine-location: where orphan quarantines live (None: inside each table's location).
    quarantine_location: str | None = None

    _started: bool = PrivateAttr(default=False)
    _orphans_listed: ListedHook | None = PrivateAttr(default=None)

    @classmethod
    def from_settings(cls, settings: Settings) -> "IcebergSparkEngine":
        shown_conf, shown_session, secret_conf = _held_back(settings)
        return cls(
            pyspark=FloeSparkSession(spark_config=shown_conf, secret_conf=secret_conf),
            catalog_name=settings.catalog.name,
            java_home=settings.spark.java_home,
            jar_packages=spark_packages(settings),
            jars_cache=settings.spark.jars_cache,
            row_count_check_max_bytes=settings.maintenance.row_count_check_max_bytes,
            catalog_lock=_sqlite_catalog_lock(settings),
            remote=mask_text(settings.spark.remote) if settings.spark.remote else None,
            session_conf=shown_session,
            secret_conf=secret_conf,
            file_io=spark_catalog_conf(settings.catalog)[0].get(f"spark.sql.catalog.{settings.catalog.name}.io-impl"),
            iceberg_version=settings.spark.iceberg_version,
            spark_line=installed_spark_line(),
            quarantine_location=settings.maintenance.quarantine_location,
        )

    def on_orphans_listed(self, hook: ListedHook | None) -> None:
        """A seam between an orphan run's listing and its removal (tests: a writer acts in between)."""
        self._orphans_listed = hook

    # -- session and catalog lifecycle ---------------------------------------------------------
    @property
    def spark(self) -> Any:
        if self.remote:
            return self._connect_session()
        if self.java_home:
            os.environ["JAVA_HOME"] = self.java_home
        try:
            if not self._started and self.jar_packages:
                resolve_jars(self.jar_packages, self.jars_cache)  # fetched once into the cache
            session = self.pyspark.spark_session
        except Exception as exc:
            master = (self.pyspark.spark_config or {}).get("spark.master")
            raise EngineUnavailable(
                f"Spark could not start (spark.master {master!r}): {exc}. Check that Java 17 (or 11) is installed "
                "and JAVA_HOME points "
                "at it, and that spark.master in floe.yaml is reachable"
            ) from exc
        self._started = True
        return session

    def _connect_session(self) -> Any:
        """A Spark Connect session: no JVM and no jars on this side. On first use, check that the
        server can run Iceberg's procedures and set the catalog on this session."""
        try:
            if not self._started:
                # pyspark's Connect client retries an unreachable server for about 10 minutes (its
                # retry policy cannot be set from the session builder in 3.5): check the port first,
                # so that a server that is down is reported as an outage at once.
                _check_reachable(self.remote)
            session = self.pyspark.spark_session
            if self._started:
                return session
            extensions = session.conf.get("spark.sql.extensions", "") or ""
        except Exception as exc:
            raise EngineUnavailable(
                f"the Spark Connect server at {self.remote} could not be reached: {_first_line(exc)}. Check that it "
                "runs and that the client packages are installed (pip install 'floe-dagster[connect]')"
            ) from exc
        if ICEBERG_EXTENSIONS not in extensions:
            raise EngineUnavailable(
                f"the Spark Connect server at {self.remote} runs without Iceberg's SQL extensions, so it cannot run "
                f"Iceberg's procedures: start it with --conf spark.sql.extensions={ICEBERG_EXTENSIONS} and the Iceberg "
                "Spark runtime jar (and the catalog's JDBC driver) in --jars; a client cannot add them to a running server"
            )
        for key, value in {**self.session_conf, **_secret_entries(self.secret_conf)}.items():
            try:
                session.conf.set(key, value)
            except Exception as exc:
                if key.startswith("spark.sql.catalog."):
                    raise EngineUnavailable(
                        f"the Spark Connect server at {self.remote} refused the catalog setting {key}: {_first_line(exc)}"
                    ) from exc
                # Static or core conf from spark.conf in floe.yaml: only the server's own start-up sets it.
                log.warning("Spark Connect: %s cannot be set from a client (set it on the server): %s", key,
                            _first_line(exc))
        self._started = True
        return session

    def release_catalog(self) -> None:
        """Close the Iceberg catalog inside Spark so it holds no connection (and no SQLite lock)."""
        if not self._started:
            return
        if self.remote:
            # Spark Connect: the catalog lives in the server's JVM, which a client cannot reach, and
            # Spark SQL has no statement that closes a catalog (RESET only changes conf). Nothing to
            # do, so settings refuse a SQLite catalog with spark.remote (the server's JdbcCatalog
            # would keep its read lock); PostgreSQL and REST catalogs need no release.
            return
        session = self.pyspark.spark_session
        jvm_session = getattr(session, "_jsparkSession", None)
        if jvm_session is None:  # a Connect session all the same (SPARK_REMOTE set outside floe.yaml)
            return
        try:
            manager = jvm_session.sessionState().catalogManager()
            if manager.isCatalogRegistered(self.catalog_name):
                spark_catalog = manager.catalog(self.catalog_name)
                iceberg_catalog = spark_catalog.icebergCatalog()
                if hasattr(iceberg_catalog, "close"):
                    iceberg_catalog.close()
                manager.reset()
        except Exception as exc:  # never hide the error of the work itself behind a cleanup error
            log.warning("could not close the Iceberg catalog %s inside Spark: %s", self.catalog_name, exc)

    @contextmanager
    def unit_of_work(self) -> Iterator[Any]:
        with ExitStack() as stack:
            if self.catalog_lock:
                # A SQLite catalog is a local file: a file lock beside the instance serializes its users.
                stack.enter_context(file_locks().wait_for(self.catalog_lock, timeout_s=SQLITE_CATALOG_WAIT_S))
            try:
                spark = self.spark
                if self.catalog_lock:
                    self._free_sqlite_read_locks()
                yield spark
            finally:
                self.release_catalog()

    def _free_sqlite_read_locks(self) -> None:
        """Iceberg 1.10's JdbcCatalog.initialize() leaves two metadata result sets open on a pooled SQLite
        connection: a read lock for the whole unit of work. A PyIceberg writer's commit then waits for
        the unit to end, and Spark's own commit, finding that writer waiting, fails at once with
        SQLITE_BUSY (SQLite's deadlock rule skips the busy timeout). Resetting the catalog
        connection's statements right after initialization ends that read transaction. (1.11 closes
        them itself; resetting a finished statement is harmless.)"""
        jvm_session = getattr(self.pyspark.spark_session, "_jsparkSession", None)
        if jvm_session is None:  # Spark Connect: the server owns the catalog
            return
        try:
            iceberg_catalog = jvm_session.sessionState().catalogManager().catalog(self.catalog_name).icebergCatalog()
            pool_field = iceberg_catalog.getClass().getDeclaredField("connections")
            pool_field.setAccessible(True)
            pool = pool_field.get(iceberg_catalog)
            clients_field = pool.getClass().getSuperclass().getDeclaredField("clients")  # ClientPoolImpl
            clients_field.setAccessible(True)
            for connection in clients_field.get(pool).toArray():
                database = connection.getDatabase()  # org.sqlite.core.DB
                statements_field = database.getClass().getSuperclass().getDeclaredField("stmts")
                statements_field.setAccessible(True)
                for statement in statements_field.get(database).toArray():
                    pointer_field = statement.getClass().getDeclaredField("ptr")
                    pointer_field.setAccessible(True)
                    database.reset(pointer_field.getLong(statement))
        except Exception as exc:  # another Iceberg or driver version: PyIceberg writers wait, as before
            log.warning("could not free the SQLite catalog's read lock inside Spark: %s", exc)

    def teardown_after_execution(self, context: InitResourceContext) -> None:
        self.release_catalog()

    def stop(self) -> None:
        if self._started:
            self.release_catalog()
            self.pyspark.spark_session.stop()
            self._started = False

    # -- maintenance ---------------------------------------------------------------------------
    def _snapshots(self, spark: Any, table: TableName) -> list[dict[str, Any]]:
        rows = spark.sql(
            f"SELECT snapshot_id, parent_id, operation, summary, committed_at "
            f"FROM {spark_table_reference(table)}.snapshots ORDER BY committed_at"
        ).collect()
        return [row.asDict() for row in rows]

    def _count(self, spark: Any, table: TableName, snapshot_id: int) -> int:
        return spark.sql(
            f"SELECT count(*) AS n FROM {spark_table_reference(table)} VERSION AS OF {int(snapshot_id)}"
        ).collect()[0]["n"]

    def maintain(
        self,
        table: TableName,
        op: Operation,
        config: OperationConfig,
        now: datetime,
        table_properties: Mapping[str, str] | None = None,
        table_bytes: int = 0,
        read_snapshots: Callable[[], list[dict[str, Any]]] | None = None,
        scope: RewriteScope | None = None,
        statistics: StatisticsState | None = None,
        orphans: OrphanContext | None = None,
        row_proof: Prove | None = None,
    ) -> EngineOutcome:
        """Run one operation on one table; verify rows after rewrites; always release the catalog.

        ``read_snapshots``: the table's snapshots (snapshot_id, parent_id, operation, summary) from
        Iceberg's metadata (iceberg.catalog.snapshot_facts through PyIceberg), so the only Spark
        query is the procedure itself; without it, Spark's ``snapshots`` metadata table is read.
        ``scope``: a partition-scoped rewrite's partitions and the table's spec (the CALL's ``where``).
        ``statistics``: for COMPUTE_STATISTICS, the table's statistics files as its metadata registers them
        (iceberg.table_statistics through PyIceberg); without it, Spark reads the current snapshot and
        the partitioning, and the statistics are computed whatever exists. ``orphans``: for ORPHAN_CLEANUP,
        the table's location and store and the run (spark/orphan_runs.py): quarantine, purge, the files'
        real times; without it, no quarantine, and a capped run reads local files' times only. ``row_proof``:
        the row check's proof from the table's metadata (iceberg.row_proof through PyIceberg); without it,
        Spark counts where the snapshot summaries cannot decide."""
        call = build_procedure_call(op, table, config, now, table_properties, self.file_io,  # the policy's config as SQL
                                    scope=scope, iceberg_version=self.iceberg_version, spark_line=self.spark_line,
                                    snapshot_id=statistics.current_snapshot_id if statistics else None)
        extra: dict[str, Any] = {}
        metadata: dict[str, Any] = {}
        started = time.monotonic()
        phases = PhaseTimer(time.monotonic)
        with self.unit_of_work() as spark:
            phases.lap("session")
            snapshots_of = read_snapshots or (lambda: self._snapshots(spark, table))
            try:
                before = {s["snapshot_id"] for s in snapshots_of()}
                phases.lap("snapshots_before")
            except FloeError:
                raise
            except Exception as exc:
                raise _classify(exc, table) from exc
            try:
                if isinstance(config, OrphanCleanupConfig):
                    cleanup = OrphanCleanup(spark, table, config, now, table_properties, self.file_io,
                                            self.iceberg_version, orphans, self.quarantine_location,
                                            self._orphans_listed)
                    result, sql, metadata = cleanup.run(call)
                    call = replace(call, sql=sql)
                elif isinstance(config, ComputeStatisticsConfig):
                    result, call, extra = self._compute_statistics(spark, table, config, now, statistics)
                else:
                    rows = [row.asDict() for row in spark.sql(call.sql).collect()]
            except FloeError:
                raise
            except Exception as exc:
                missing = _missing_iceberg_runtime(spark, exc)
                if missing:
                    raise MaintenanceFailed(f"{op.procedure} on '{table.qualified}' failed: {missing}") from exc
                race = commit_race(_error_text(exc))
                if race is not None:
                    raise CommitConflict(f"{op.procedure} on '{table.qualified}' "
                                         f"{race.describe(_winner(snapshots_of, before))}") from exc
                raise _classify(exc, table, op) from exc
            phases.lap("call")
            if op not in (Operation.ORPHAN_CLEANUP, Operation.COMPUTE_STATISTICS):
                result = summarize_result(op, rows)
            new, row_check = self._after_procedure(spark, table, op, snapshots_of, before, table_bytes, row_proof,
                                                   phases)
        phases.lap("release")
        return EngineOutcome(
            result=result,
            sql=call.sql,
            arguments=call.arguments,
            new_snapshot_ids=tuple(s["snapshot_id"] for s in new),
            row_check=row_check,
            duration_s=time.monotonic() - started,
            extra=extra,
            metadata=metadata,
            phases=phases.rounded(),
        )

    def _after_procedure(self, spark: Any, table: TableName, op: Operation,
                         snapshots_of: Callable[[], list[dict[str, Any]]], before: set[int],
                         table_bytes: int, row_proof: Prove | None = None,
                         phases: PhaseTimer | None = None) -> tuple[list[dict[str, Any]], RowCheck]:
        """The reads after the procedure returned (its changes have landed): the snapshots it committed,
        and the row check of a rewrite. A RowCountMismatch names the bad snapshot (the caller may roll
        it back); any other error is FailedAfterCommit, which names what landed and what failed."""
        new: list[dict[str, Any]] = []
        stage = "reading the snapshots it committed"
        try:
            snapshots = snapshots_of()
            new = [s for s in snapshots if s["snapshot_id"] not in before]
            if phases is not None:
                phases.lap("snapshots_after")
            if op not in (Operation.REWRITE_DATA_FILES, Operation.REWRITE_MANIFESTS,
                          Operation.REWRITE_POSITION_DELETE_FILES):
                return new, RowCheck("not-applicable")
            stage = "the row check"
            try:
                return new, self.verify_rows(spark, table, new, snapshots, table_bytes, row_proof)
            finally:
                if phases is not None:
                    phases.lap("row_check")
        except RowCountMismatch:
            raise
        except Exception as exc:
            # A Spark error is classified here, with its whole Java cause chain (an outage only when unreachable).
            after = exc if isinstance(exc, FloeError) else _classify(exc, table, op)
            raise FailedAfterCommit.of(f"{op.procedure} on '{table.qualified}'", [s["snapshot_id"] for s in new], stage,
                                       after, str(exc) if isinstance(exc, FloeError) else _headline(exc)) from exc

    def _compute_statistics(
        self, spark: Any, table: TableName, config: ComputeStatisticsConfig, now: datetime,
        statistics: StatisticsState | None,
    ) -> tuple[ProcedureResult, ProcedureCall, dict[str, Any]]:
        """compute_table_stats, then compute_partition_stats on a partitioned table, each only where the
        current snapshot lacks its file (core/statistics.statistics_work: neither is the no-change run).
        Neither commits a snapshot: Iceberg registers the files in the table metadata, so no rows change
        and the row check does not apply. Returns the result, the call (SQL of what ran) and the reasons."""
        state = statistics or self._statistics_state(spark, table)
        work = statistics_work(state, config.columns, config.wants_partition_stats)
        call = build_procedure_call(Operation.COMPUTE_STATISTICS, table, config, now,
                                    snapshot_id=state.current_snapshot_id)
        statements: list[str] = []
        table_rows: list[dict[str, Any]] = []
        partition_rows: list[dict[str, Any]] = []
        if work.table_stats:
            table_rows = [row.asDict() for row in spark.sql(call.sql).collect()]
            statements.append(call.sql)
        if work.partition_stats:
            partitions = partition_statistics_call(table, state.current_snapshot_id)
            partition_rows = [row.asDict() for row in spark.sql(partitions.sql).collect()]
            statements.append(partitions.sql)
        sql = ";\n".join(statements) if statements else "-- nothing to compute: " + "; ".join(work.reasons)
        arguments = {**call.arguments, "partition_stats": work.partition_stats}
        return (summarize_statistics(table_rows, partition_rows), replace(call, sql=sql, arguments=arguments),
                {"statistics_reasons": list(work.reasons)})

    def _statistics_state(self, spark: Any, table: TableName) -> StatisticsState:
        """Without the table's metadata from PyIceberg: the current snapshot (``history``) and whether the
        table is partitioned (its ``partitions`` table has a ``partition`` column only then)."""
        reference = spark_table_reference(table)
        current = spark.sql(f"SELECT snapshot_id FROM {reference}.history WHERE is_current_ancestor "
                            "ORDER BY made_current_at DESC LIMIT 1").collect()
        partitioned = "partition" in spark.table(f"{reference}.partitions").columns
        return StatisticsState(current[0]["snapshot_id"] if current else None, partitioned, None, None, None)


    def verify_rows(
        self, spark: Any, table: TableName, new: list[dict], snapshots: list[dict], table_bytes: int,
        row_proof: Prove | None = None,
    ) -> RowCheck:
        """Each snapshot our rewrite committed must hold the same logical rows as its parent.

        Only our ``replace`` commits are compared with their own parents, so a concurrent append (its
        own snapshot) and deletes applied during the rewrite (same logical rows) do not confuse it.
        Each is decided by the snapshot summaries, else by ``row_proof`` from the metadata, else by
        Spark's counts (core/row_check.py); tables up to row_count_check_max_bytes are always counted.
        A catalog that keeps only the current snapshot in the metadata (Nessie) leaves no parent to
        compare with: such a commit is checked against its own summary (rows removed = rows added),
        when that can decide; when it cannot (delete files), nothing is left to count and the check
        says so ("parent-not-kept") instead of passing silently.
        """
        by_id = {s["snapshot_id"]: s for s in snapshots}
        replaces = [s for s in new if s["operation"] == "replace"]
        if replaces and all(s["parent_id"] not in by_id for s in replaces):
            return _check_without_parents(table, replaces)
        ours = [s for s in replaces if s["parent_id"] is not None]
        if not ours:
            return RowCheck("not-applicable")
        count_always = table_bytes <= self.row_count_check_max_bytes
        try:
            return check_commits(ours, by_id, exact_rows=exact_live_rows, prove=row_proof, count_always=count_always,
                                 count=lambda snapshot_id: self._count(spark, table, snapshot_id))
        except RowsChanged as changed:
            raise RowCountMismatch(changed.message(table.qualified), changed.snapshot_id, changed.ours) from None


def _check_without_parents(table: TableName, ours: list[dict]) -> RowCheck:
    """The row check of rewrite commits whose parents the metadata does not hold (Nessie keeps only the
    current snapshot): each commit's own summary, rows removed against rows added (the rows checked are
    the sums over the commits: the rows the rewrite moved)."""
    removed_total = added_total = 0
    for snapshot in ours:
        rows = commit_rows(snapshot.get("summary"))
        if rows is None:  # delete files: only a count could tell, and the parent is gone
            return RowCheck("parent-not-kept", tuple(s["snapshot_id"] for s in ours))
        before, after = rows
        if after != before:
            raise RowCountMismatch(
                f"table '{table.qualified}': snapshot {snapshot['snapshot_id']} written by this run removed {before} "
                f"rows and added {after}; the rewrite changed the table's contents",
                snapshot["snapshot_id"], [s["snapshot_id"] for s in ours])
        removed_total, added_total = removed_total + before, added_total + after
    return RowCheck("commit-summary", tuple(s["snapshot_id"] for s in ours), removed_total, added_total)


SQLITE_CATALOG_WAIT_S = 3600.0


def _sqlite_catalog_lock(settings: Settings) -> str | None:
    uri = spark_catalog_conf(settings.catalog)[0].get(f"spark.sql.catalog.{settings.catalog.name}.uri", "")
    return f"floe-sqlite-catalog:{uri.split('?', 1)[0]}" if uri.startswith("jdbc:sqlite:") else None


def _error_text(exc: Exception, with_causes: bool = True) -> str:
    """The Java error's own message (Py4J's is only "An error occurred while calling o51.sql"),
    followed, ``with_causes``, by Py4J's text, which carries the Java cause chain ("Caused by: …")."""
    text = str(exc)
    java = getattr(exc, "java_exception", None)
    if java is None:
        return text
    try:
        own = str(java.toString())
    except Exception:  # the JVM may be gone: keep Py4J's message
        return text
    return f"{own}\n{text}" if with_causes else own


def _winner(snapshots_of: Callable[[], list[dict[str, Any]]], before: set[int]) -> str | None:
    """The newest commit that landed while the operation ran (ours failed, so it is another writer's),
    for the conflict's message; None when it cannot be read."""
    try:
        landed = [s for s in snapshots_of() if s["snapshot_id"] not in before]
    except Exception:  # the message is still right without it
        return None
    if not landed:
        return None
    newest = landed[-1]
    at = newest.get("committed_at")
    when = f" at {at.isoformat()}" if hasattr(at, "isoformat") else ""
    more = f", and {len(landed) - 1} more" if len(landed) > 1 else ""
    return f"snapshot {newest['snapshot_id']} ({newest.get('operation') or 'unknown operation'}){when}{more}"


def _classify(exc: Exception, table: TableName, op: Operation | None = None) -> FloeError:
    """Tell an outage (Spark, the catalog or the storage cannot be reached: the one rule,
    errors.unreachable over the Java error's whole cause chain) from a failure of this table's operation."""
    text = _error_text(exc, with_causes=False)
    first_line = _headline(exc)
    if unreachable(exc, _error_text(exc)):
        return EngineUnavailable(f"Spark or the catalog is unavailable while maintaining '{table.qualified}': {first_line}")
    if "Table or view not found" in text or "TABLE_OR_VIEW_NOT_FOUND" in text or "NoSuchTableException" in text:
        return MaintenanceFailed(f"table '{table.qualified}' was not found by Spark: {first_line}")
    what = f"{op.procedure} on" if op else "reading"
    return MaintenanceFailed(f"{what} '{table.qualified}' failed: {first_line}")


SPARK_CATALOG_CLASS = "org.apache.iceberg.spark.SparkCatalog"


def _missing_iceberg_runtime(spark: Any, exc: Exception) -> str | None:
    """Why Spark could not parse ``CALL``, when that is the Iceberg Spark runtime missing from its
    classpath (its SQL extensions cannot load either): the procedure is the first statement a run
    sends, so this is where a deployment without the jar shows."""
    if "PARSE_SYNTAX_ERROR" not in str(exc) or getattr(spark, "_jvm", None) is None:
        return None
    try:
        spark._jvm.java.lang.Class.forName(SPARK_CATALOG_CLASS)
        return None
    except Exception:
        return (f"class {SPARK_CATALOG_CLASS} not found: the Iceberg Spark runtime jar is not on Spark's classpath, "
                "so neither its catalog nor its SQL extensions (CALL) load; add "
                "the runtime for the installed PySpark (floe-dagster adds it unless spark.packages or spark.jars "
                "replace it; see `floe-dagster setup`)")


def _headline(exc: Exception) -> str:
    """The first line of the error's own message (a Java error's, not Py4J's "An error occurred while calling")."""
    text = _error_text(exc, with_causes=False).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _check_reachable(remote: str, timeout_s: float = 10.0) -> None:
    """Open (and close) a TCP connection to a Spark Connect URL's host and port (sc://host:port/;...)."""
    parsed = urlparse("http://" + remote.split("://", 1)[-1].split("/", 1)[0])
    with socket.create_connection((parsed.hostname or "localhost", parsed.port or 15002), timeout=timeout_s):
        pass
