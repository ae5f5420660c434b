"""The compute of one table's operation, from Spark's own status store, scoped to that table's work.

The table's work (its ``CALL`` and the reads after it) runs under a Spark *job tag* of its own
(``SparkContext.addJobTag``, PySpark 3.5+). A job group would not do: Iceberg's actions replace the
caller's job group with their own for each file group (``REWRITE-DATA-FILES-<n>``), while the tag is a
separate local property they leave alone, and their rewrite threads inherit it (Spark clones the local
properties into each child thread). After the work, the jobs carrying the tag
(``SparkStatusTracker.getJobIdsForTag``) and their stages are read from the status store, which Spark
keeps whether its UI is on or off; each stage is counted once (a job may list a stage another computed:
shuffle reuse), every attempt included (retries cost CPU too), skipped and pending ones left out.

What the figures cover: ``executorCpuTime`` and ``executorRunTime`` (task time, slot seconds) of the
tagged jobs, their ``inputBytes`` (what Iceberg's readers read: for a rewrite, about the bytes
rewritten) and ``outputBytes`` (Spark data-source writes: the new data files; manifests and metadata
files are written by Iceberg's FileIO, on the driver, and appear nowhere). An expiry's or an orphan
cleanup's deletes also run on the driver: the wall time holds them, the executor figures do not.

The store keeps ``spark.ui.retainedJobs``/``retainedStages`` (1000 each by default) completed jobs, so
the figures are read right after the table's work; an operation of more than about 900 Spark jobs (a
rewrite of that many file groups) would lose its first ones: raise those settings in ``spark.conf``.

Spark Connect: the server reports no executor CPU, task time or bytes for a ``CALL`` (only the plan's SQL
metrics, and the store lives in the server's JVM), so the figures are the wall time and a null with the
reason (core/runs/run_figures.CONNECT_UNAVAILABLE).
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any, Callable

from floe_dagster.core.runs.run_figures import CONNECT_UNAVAILABLE, SPARK, SPARK_CONNECT, Compute

log = logging.getLogger(__name__)

LISTENER_WAIT_MS = 10_000  # events reach the store asynchronously: wait (at most this) for the bus to drain
STAGE_SUMS = ("executorCpuTime", "executorRunTime", "inputBytes", "outputBytes")
NOT_RUN = ("SKIPPED", "PENDING")


class TableCompute:
    """A context around one table's Spark work: its own job tag while it runs, then :meth:`read`."""

    def __init__(self, spark: Any, connect: bool, clock: Callable[[], float] = time.monotonic):
        self.spark, self.connect, self.clock = spark, connect, clock
        self.tag = f"floe-{uuid.uuid4().hex}"  # unique per table's operation (a tag may hold no comma)
        self.wall_s = 0.0
        self._started = 0.0

    def __enter__(self) -> "TableCompute":
        if not self.connect:
            self.spark.sparkContext.addJobTag(self.tag)
        self._started = self.clock()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.wall_s = self.clock() - self._started
        if not self.connect:
            try:
                self.spark.sparkContext.removeJobTag(self.tag)
            except Exception:  # the JVM may be gone (an outage): the run's own error says so
                log.debug("the job tag %s could not be removed", self.tag, exc_info=True)

    def read(self) -> Compute:
        """The figures of the jobs that carried the tag; never raises (a figure it cannot read is None,
        with the reason)."""
        if self.connect:
            return Compute(SPARK_CONNECT, round(self.wall_s, 3), unavailable=CONNECT_UNAVAILABLE)
        try:
            sums = tagged_stage_sums(self.spark, self.tag)
        except Exception as exc:
            log.warning("Spark's status store could not be read for job tag %s", self.tag, exc_info=True)
            return Compute(SPARK, round(self.wall_s, 3),
                           unavailable=f"Spark's status store could not be read: {type(exc).__name__}: {exc}"[:500])
        return Compute(
            SPARK, round(self.wall_s, 3), executor_cpu_s=round(sums["executorCpuTime"] / 1e9, 3),
            task_s=round(sums["executorRunTime"] / 1e3, 3), bytes_read=sums["inputBytes"],
            bytes_written=sums["outputBytes"], jobs=sums["jobs"], stages=sums["stages"], tasks=sums["tasks"])


def tagged_stage_sums(spark: Any, tag: str) -> dict[str, int]:
    """Sums over the stages (each once, every attempt that ran) of the jobs carrying job tag ``tag``. The
    store's accessors are ``private[spark]`` in Scala but public in the bytecode py4j calls."""
    context = spark.sparkContext
    sc = context._jsc.sc()
    try:
        sc.listenerBus().waitUntilEmpty(LISTENER_WAIT_MS)
    except Exception:  # a bus that does not drain in time: read what the store holds
        log.debug("the listener bus did not drain", exc_info=True)
    store = sc.statusStore()
    no_tasks = context._jvm.java.util.ArrayList()
    no_quantiles = context._gateway.new_array(context._jvm.double, 0)
    job_ids = list(sc.statusTracker().getJobIdsForTag(tag))
    totals = {name: 0 for name in STAGE_SUMS}
    totals.update(jobs=len(job_ids), stages=0, tasks=0)
    seen: set[int] = set()
    for job_id in job_ids:
        stage_ids = store.job(job_id).stageIds()
        for i in range(stage_ids.size()):
            stage_id = stage_ids.apply(i)
            if stage_id in seen:
                continue
            seen.add(stage_id)
            attempts = store.stageData(stage_id, False, no_tasks, False, no_quantiles)
            for a in range(attempts.size()):
                stage = attempts.apply(a)
                if str(stage.status().toString()) in NOT_RUN:
                    continue
                totals["stages"] += 1
                totals["tasks"] += stage.numCompleteTasks() + stage.numFailedTasks()
                for name in STAGE_SUMS:
                    totals[name] += int(getattr(stage, name)())
    return totals


__all__ = ["TableCompute", "tagged_stage_sums"]
