"""The PySpark maintenance engine: a Dagster resource that runs Iceberg's procedures, each kind's as its
step renders and runs it (``spark/operation_steps/``).

It wraps dagster-pyspark's ``LazyPySparkResource`` (the session starts on first use, so runs that
do nothing start no JVM) and adds what that resource lacks: after each unit of work it closes the
Iceberg catalog inside Spark. Iceberg 1.10's JdbcCatalog leaves result sets open, and on SQLite a
live Spark catalog keeps a read lock that makes every PyIceberg commit fail with "database is
locked"; closing the catalog and resetting Spark's catalog manager frees it, and the next use opens
a fresh catalog. (Iceberg 1.11 closes those result sets; the release stays, since 1.10.x remains
selectable with ``spark.iceberg-version``.) The JVM handles used here (``_jsparkSession``) exist on
classic sessions of PySpark 3.5 and 4.x alike; a Spark Connect session has none and skips them.

Secrets stay out of the resources' config, which Dagit shows and Dagster stores in every job snapshot
(spark/session.py). One operation on one table (:meth:`IcebergSparkEngine.maintain`) is named steps:
the call rendered (before Spark starts), the snapshots before, the call run, then the reads after it
(its changes have landed): the snapshots it committed and the row check of a rewrite. That work runs
under a Spark job tag of its own, and its compute is read from Spark's status store after it
(spark/compute_metrics.py).
"""

from __future__ import annotations

import logging
import os
import time
from contextlib import ExitStack, contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping

from dagster import ConfigurableResource, InitResourceContext
from dagster_pyspark import LazyPySparkResource
from pydantic import PrivateAttr

from floe_dagster.coordination.locks import file_locks
from floe_dagster.core.runs.commit_conflicts import commit_race
from floe_dagster.core.operation_config import OperationConfig
from floe_dagster.core.operations import Operation
from floe_dagster.core.rewrites.partition_scope import RewriteScope
from floe_dagster.core.basics.phase_timer import PhaseTimer
from floe_dagster.core.rewrites.row_check import Prove
from floe_dagster.core.basics.secrets import mask_text
from floe_dagster.core.basics.tables import TableName
from floe_dagster.errors import (
    CommitConflict,
    EngineUnavailable,
    FailedAfterCommit,
    FloeError,
    MaintenanceFailed,
    RowCountMismatch,
    unreachable,
)
from floe_dagster.settings import Settings
from floe_dagster.spark.catalog_conf import spark_catalog_conf
from floe_dagster.spark.compute_metrics import TableCompute
from floe_dagster.spark.driver_restart import watching_spark_process
from floe_dagster.spark.engine_outcome import EngineOutcome
from floe_dagster.spark.jars import resolve_jars
from floe_dagster.spark.operation_steps import step_of, summarize_result
from floe_dagster.spark.operation_steps.step import EngineJob, OperationStep, Ran
from floe_dagster.spark.orphan_runs import ListedHook
from floe_dagster.spark.procedures import ProcedureCall, spark_table_reference
from floe_dagster.spark.row_check import RowCheck, check_rows
from floe_dagster.spark.runtime import effective_iceberg_version, installed_spark_line, spark_packages
from floe_dagster.spark.session import (
    SQLITE_CATALOG_WAIT_S,
    ICEBERG_EXTENSIONS,
    FloeSparkSession,
    check_reachable,
    close_spark_catalog,
    first_line,
    free_sqlite_read_locks,
    held_back,
    secret_entries,
    sqlite_catalog_lock,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)
Snapshots = Callable[[], list[dict[str, Any]]]


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
    # The Iceberg Spark runtime's version (spark.iceberg-version, else the default for the Spark line):
    # orphan cleanup streams from 1.11 on.
    iceberg_version: str | None = None
    # The Spark line the procedures run on ("3.5", "4.1"): whether rewrite_manifests takes sort_by.
    spark_line: str | None = None
    # maintenance.quarantine-location: where orphan quarantines live (None: inside each table's location).
    quarantine_location: str | None = None

    _started: bool = PrivateAttr(default=False)
    _orphans_listed: ListedHook | None = PrivateAttr(default=None)

    @classmethod
    def from_settings(cls, settings: Settings) -> "IcebergSparkEngine":
        shown_conf, shown_session, secret_conf = held_back(settings)
        return cls(
            pyspark=FloeSparkSession(spark_config=shown_conf, secret_conf=secret_conf),
            catalog_name=settings.catalog.name,
            java_home=settings.spark.java_home,
            jar_packages=spark_packages(settings),
            jars_cache=settings.spark.jars_cache,
            row_count_check_max_bytes=settings.maintenance.row_count_check_max_bytes,
            catalog_lock=sqlite_catalog_lock(settings),
            remote=mask_text(settings.spark.remote) if settings.spark.remote else None,
            session_conf=shown_session,
            secret_conf=secret_conf,
            file_io=spark_catalog_conf(settings.catalog)[0].get(
                f"spark.sql.catalog.{settings.catalog.name}.io-impl"),
            iceberg_version=effective_iceberg_version(settings),
            spark_line=installed_spark_line(),
            quarantine_location=settings.maintenance.quarantine_location,
        )

    def on_orphans_listed(self, hook: ListedHook | None) -> None:
        """A seam between an orphan run's listing and its removal (tests: a writer acts in between)."""
        self._orphans_listed = hook

    @property
    def orphans_listed_hook(self) -> ListedHook | None:
        return self._orphans_listed

    # -- session and catalog lifecycle ---------------------------------------------------------
    @property
    def spark(self) -> SparkSession:
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

    def _connect_session(self) -> SparkSession:
        """A Spark Connect session: no JVM and no jars on this side. On first use, check that the
        server can run Iceberg's procedures and set the catalog on this session."""
        try:
            if not self._started:
                # pyspark's Connect client retries an unreachable server for about 10 minutes (its
                # retry policy cannot be set from the session builder in 3.5): check the port first,
                # so that a server that is down is reported as an outage at once.
                check_reachable(self.remote)
            session = self.pyspark.spark_session
            if self._started:
                return session
            extensions = session.conf.get("spark.sql.extensions", "") or ""
        except Exception as exc:
            raise EngineUnavailable(
                f"the Spark Connect server at {self.remote} could not be reached: {first_line(exc)}. Check that "
                "it runs and that the client packages are installed (pip install 'floe-dagster[connect]')"
            ) from exc
        if ICEBERG_EXTENSIONS not in extensions:
            raise EngineUnavailable(
                f"the Spark Connect server at {self.remote} runs without Iceberg's SQL extensions, so it cannot run "
                f"Iceberg's procedures: start it with --conf spark.sql.extensions={ICEBERG_EXTENSIONS} and the "
                "Iceberg Spark runtime jar (and the catalog's JDBC driver) in --jars; a client cannot add them to a "
                "running server"
            )
        for key, value in {**self.session_conf, **secret_entries(self.secret_conf)}.items():
            try:
                session.conf.set(key, value)
            except Exception as exc:
                if key.startswith("spark.sql.catalog."):
                    raise EngineUnavailable(
                        f"the Spark Connect server at {self.remote} refused the catalog setting {key}: "
                        f"{first_line(exc)}"
                    ) from exc
                # Static or core conf from spark.conf in floe.yaml: only the server's own start-up sets it.
                log.warning("Spark Connect: %s cannot be set from a client (set it on the server): %s", key,
                            first_line(exc))
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
        close_spark_catalog(self.pyspark.spark_session, self.catalog_name)

    @contextmanager
    def unit_of_work(self) -> Iterator[SparkSession]:
        with ExitStack() as stack:
            if self.catalog_lock:
                # A SQLite catalog is a local file: a file lock beside the instance serializes its users.
                stack.enter_context(file_locks().wait_for(self.catalog_lock, timeout_s=SQLITE_CATALOG_WAIT_S))
            try:
                spark = self.spark
                if self.catalog_lock:
                    free_sqlite_read_locks(self.pyspark.spark_session, self.catalog_name)
                yield spark
            finally:
                self.release_catalog()

    def teardown_after_execution(self, context: InitResourceContext) -> None:
        self.release_catalog()

    def stop(self) -> None:
        if self._started:
            self.release_catalog()
            self.pyspark.spark_session.stop()
            self._started = False

    # -- maintenance ---------------------------------------------------------------------------
    def _snapshots(self, spark: SparkSession, table: TableName) -> list[dict[str, object]]:
        rows = spark.sql(
            f"SELECT snapshot_id, parent_id, operation, summary, committed_at "
            f"FROM {spark_table_reference(table)}.snapshots ORDER BY committed_at"
        ).collect()
        return [row.asDict() for row in rows]

    def _count(self, spark: SparkSession, table: TableName, snapshot_id: int) -> int:
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
        read_snapshots: Snapshots | None = None,
        scope: RewriteScope | None = None,
        row_proof: Prove | None = None,
        **inputs: object,
    ) -> EngineOutcome:
        """Run one operation on one table; verify rows after rewrites; always release the catalog.

        ``read_snapshots``: the table's snapshots (snapshot_id, parent_id, operation, summary) from
        Iceberg's metadata (iceberg.catalog.snapshot_facts through PyIceberg), so the only Spark
        query is the procedure itself; without it, Spark's ``snapshots`` metadata table is read.
        ``scope``: a partition-scoped rewrite's partitions and the table's spec (the CALL's ``where``).
        ``inputs``: what the kind's step prepared for it (``OperationStep.prepare``): for COMPUTE_STATISTICS,
        ``statistics``, the table's statistics files as its metadata registers them (without it, Spark reads
        the current snapshot and the partitioning); for ORPHAN_CLEANUP, ``orphans``, the table's location and
        store and the run (spark/orphan_runs.py; without it, no quarantine, and a capped run reads local
        files' times only). ``row_proof``: the row check's proof from the table's metadata (iceberg.row_proof
        through PyIceberg); without it, Spark counts where the snapshot summaries cannot decide. The time is
        split into phases (``EngineOutcome.phases``): the procedure's own ``call`` and floe's work around it."""
        step = step_of(op)
        job = EngineJob(op, table, config, now, dict(table_properties or {}), scope, inputs, self)
        call = step.render(job)  # the policy's config as SQL, before Spark starts
        started = time.monotonic()
        phases = PhaseTimer(time.monotonic)
        # Spark's process dying during this work is told apart (spark/driver_restart.py).
        with watching_spark_process(self, table, op) as spark, TableCompute(spark, connect=bool(self.remote)) as meter:
            phases.lap("session")
            snapshots_of = read_snapshots or (lambda: self._snapshots(spark, table))
            before = self._snapshot_ids(table, snapshots_of)
            phases.lap("snapshots_before")
            ran = self._call(spark, step, job, call, snapshots_of, before)
            result = ran.result if ran.result is not None else summarize_result(op, ran.rows or [])
            phases.lap("call")
            new, row_check = self._after_procedure(spark, table, op, snapshots_of, before, table_bytes, row_proof,
                                                   phases)
        phases.lap("release")
        done = ran.call or call
        return EngineOutcome(result=result, sql=done.sql, arguments=done.arguments,
                             new_snapshot_ids=tuple(s["snapshot_id"] for s in new), row_check=row_check,
                             duration_s=time.monotonic() - started, extra=ran.extra, metadata=ran.metadata,
                             compute=meter.read(), phases=phases.rounded())

    def _snapshot_ids(self, table: TableName, snapshots_of: Snapshots) -> set[int]:
        """The table's snapshots before the call (what the call commits is what is new after it)."""
        try:
            return {s["snapshot_id"] for s in snapshots_of()}
        except FloeError:
            raise
        except Exception as exc:
            raise _classify(exc, table) from exc

    def _call(self, spark: SparkSession, step: OperationStep, job: EngineJob, call: ProcedureCall,
              snapshots_of: Snapshots, before: set[int]) -> Ran:
        """The kind's step runs its call; a Spark error is told apart here: the Iceberg runtime missing, a
        lost commit race (naming the writer that won), an outage, or this table's failure."""
        table, op = job.table, job.op
        try:
            return step.run(spark, job, call)
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

    def _after_procedure(self, spark: SparkSession, table: TableName, op: Operation, snapshots_of: Snapshots,
                         before: set[int], table_bytes: int, row_proof: Prove | None = None,
                         phases: PhaseTimer | None = None) -> tuple[list[dict[str, Any]], RowCheck]:
        """The reads after the procedure returned (its changes have landed): the snapshots it committed,
        and the row check of a kind that rewrites rows. A RowCountMismatch names the bad snapshot (the
        caller may roll it back); any other error is FailedAfterCommit, which names what landed and what
        failed."""
        new: list[dict[str, Any]] = []
        stage = "reading the snapshots it committed"
        try:
            snapshots = snapshots_of()
            new = [s for s in snapshots if s["snapshot_id"] not in before]
            if phases is not None:
                phases.lap("snapshots_after")
            if not op.spec.checks_rows():
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

    def verify_rows(
        self, spark: SparkSession, table: TableName, new: list[dict], snapshots: list[dict], table_bytes: int,
        row_proof: Prove | None = None,
    ) -> RowCheck:
        """Each snapshot our rewrite committed must hold the same logical rows as its parent
        (spark/row_check.py): decided by the snapshot summaries, else by ``row_proof`` from the metadata,
        else by Spark's counts."""
        return check_rows(table, new, snapshots, table_bytes, self.row_count_check_max_bytes,
                          lambda snapshot_id: self._count(spark, table, snapshot_id), row_proof)


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


def _winner(snapshots_of: Callable[[], list[dict[str, object]]], before: set[int]) -> str | None:
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
    headline = _headline(exc)
    if unreachable(exc, _error_text(exc)):
        return EngineUnavailable(f"Spark or the catalog is unavailable while maintaining '{table.qualified}': "
                                 f"{headline}")
    if "Table or view not found" in text or "TABLE_OR_VIEW_NOT_FOUND" in text or "NoSuchTableException" in text:
        return MaintenanceFailed(f"table '{table.qualified}' was not found by Spark: {headline}")
    what = f"{op.procedure} on" if op else "reading"
    return MaintenanceFailed(f"{what} '{table.qualified}' failed: {headline}")


SPARK_CATALOG_CLASS = "org.apache.iceberg.spark.SparkCatalog"


def _missing_iceberg_runtime(spark: SparkSession, exc: Exception) -> str | None:
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
