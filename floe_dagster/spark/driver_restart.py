"""Spark's own process dying during one table's work ("Blast radius" in docs/security.md).

In local mode (floe's default Spark) the driver's JVM is a child process PySpark started, and the
tasks run inside it: a task of one table's rewrite that runs out of memory ends the whole JVM (Spark
exits the process on a fatal error in a task). The run then sees the Py4J gateway gone, which by its
text alone is an outage. So around each table's work the engine notes whether Spark answered as the
work began; when the work fails as an outage and Spark no longer answers, it forgets the dead JVM and
starts a fresh session. If that one answers, the death was the table's job's doing: its failure
(:class:`~floe_dagster.errors.SparkProcessDied`, with backoff), and the batch goes on with the fresh
Spark. If not, or if Spark was gone before the work began, it is an outage, as before. The rule is
``core/runs/outages.py``'s ``spark_death_kind``; a Spark Connect server is a service that is never
restarted by its client.
"""

from __future__ import annotations

import logging
import subprocess
import warnings
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING, ContextManager, Iterator, Protocol

from floe_dagster.core.operations import Operation
from floe_dagster.core.runs.outages import SparkProcessFacts, spark_death_kind
from floe_dagster.core.basics.tables import TableName
from floe_dagster.errors import OUTAGE, EngineUnavailable, FailedAfterCommit, SparkProcessDied, failure_kind
from floe_dagster.spark.session import first_line

if TYPE_CHECKING:
    from dagster_pyspark import LazyPySparkResource
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


class WatchedEngine(Protocol):
    """What the watch reads of the engine (spark/engine.py's IcebergSparkEngine, which calls the watch: named
    here so that this module never imports it)."""

    remote: str | None  # Spark Connect's URL: no JVM here to watch
    pyspark: LazyPySparkResource  # holds the session a fresh Spark replaces

    @property
    def spark(self) -> SparkSession: ...

    def unit_of_work(self) -> ContextManager[SparkSession]: ...

JVM_EXIT_WAIT_S = 30.0
MEMORY_HINT = ("in local mode a task out of memory ends Spark's JVM: give the table's rewrite less to hold "
               "(rewriteDataFiles.maxFileGroupSizeBytes) or Spark more memory (spark.driver.memory in spark.conf)")


def spark_answers(spark: object) -> bool:
    """Spark's JVM answers a call through its Py4J gateway (a Spark Connect session has no gateway: False)."""
    jvm = getattr(spark, "_jvm", None)
    if jvm is None:
        return False
    try:
        jvm.java.lang.System.nanoTime()
        return True
    except Exception:
        return False


@contextmanager
def watching_spark_process(engine: WatchedEngine, table: TableName, op: Operation) -> Iterator[SparkSession]:
    """``engine.unit_of_work()`` around one table's work: Spark found gone as it begins is an outage;
    Spark's process dying during it is told apart (the module's doc)."""
    local = answered = False
    try:
        with engine.unit_of_work() as spark:
            # A Spark Connect session (spark.remote, or SPARK_REMOTE set outside floe.yaml) has no JVM here.
            local = not engine.remote and getattr(spark, "_jsparkSession", None) is not None
            answered = local and spark_answers(spark)
            if local and not answered:
                raise EngineUnavailable(f"Spark's JVM gateway is gone: it did not answer as the work on "
                                        f"'{table.qualified}' began")
            yield spark
    except Exception as exc:
        if failure_kind(exc) != OUTAGE:
            raise
        facts = SparkProcessFacts(local, answered, answers_after=answered and spark_answers(spark))
        if not facts.died_during_the_work:
            raise
        raise _after_spark_died(engine, exc, facts, table, op) from exc


def _after_spark_died(engine: WatchedEngine, exc: Exception, facts: SparkProcessFacts, table: TableName,
                      op: Operation) -> Exception:
    """The error to record once Spark's process died during the table's work: the table's failure once a
    fresh Spark answers, else an outage saying so (core/runs/outages.py's ``spark_death_kind``)."""
    what, seen = f"{op.procedure} on '{table.qualified}'", first_line(exc)
    log.warning("%s: Spark's process died during the table's work (%s); starting a fresh Spark", what, seen)
    fresh_error = start_fresh_spark(engine)
    if spark_death_kind(facts, fresh_error is None) == OUTAGE:
        return EngineUnavailable(f"{what}: Spark's process died during the table's work ({seen}), and a fresh "
                                 f"Spark could not be started: {fresh_error}")
    died = SparkProcessDied(f"{what} failed: Spark's process died during this table's work ({seen}); a fresh Spark "
                            f"was started and the run goes on with it ({MEMORY_HINT})")
    if isinstance(exc, FailedAfterCommit):  # its commit had landed: keep saying which snapshots
        return FailedAfterCommit(f"{exc} (Spark's process died: the table's failure, a fresh Spark was started)",
                                 exc.snapshot_ids, died)
    return died


def start_fresh_spark(engine: WatchedEngine) -> str | None:
    """Forget the dead JVM and start a fresh session; None once it answers, else why it could not start.

    PySpark keeps its gateway, its context and its sessions in class attributes, so ``getOrCreate``
    would hand back the dead session: they are cleared first (the dead context stopped as far as it
    can be, the JVM's process ended and reaped if it lingers)."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession, SQLContext

    with SparkContext._lock:
        context, gateway = SparkContext._active_spark_context, SparkContext._gateway
        if context is not None:
            with suppress(Exception), warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "Unable to cleanly shutdown Spark JVM process"
                context.stop()
        if gateway is not None:
            with suppress(Exception):
                gateway.close()
            _end_process(getattr(gateway, "proc", None))
        SparkContext._gateway = SparkContext._jvm = SparkContext._active_spark_context = None
    SparkSession._instantiatedSession = SparkSession._activeSession = None
    SQLContext._instantiatedContext = None
    engine.pyspark._spark_session = None
    try:
        fresh = engine.spark
    except Exception as exc:
        return first_line(exc)
    return None if spark_answers(fresh) else "the fresh Spark does not answer"


def _end_process(process: subprocess.Popen | None) -> None:
    """End (if it lingers) and reap the JVM's process PySpark started (None: floe did not start it)."""
    if process is None:
        return
    with suppress(Exception):
        if process.poll() is None:
            process.kill()
        process.wait(timeout=JVM_EXIT_WAIT_S)


__all__ = ["MEMORY_HINT", "spark_answers", "start_fresh_spark", "watching_spark_process"]
