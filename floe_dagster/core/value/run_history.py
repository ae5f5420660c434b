"""A (table, operation)'s kept outcome rows as the learned ranking and a kind's own cadence read them
(:class:`RecordedRun`, from ``Coordination.recorded_runs``), and each as the ranking counts it: a
(compute seconds, benefit) pair, :class:`~floe_dagster.core.value.learned_ranking.LearningRun`.

The figures are the ones the run recorded (core/runs/run_figures.py, the outcome row's ``figures``: one
declaration). **Compute** is the executor CPU seconds Spark's status store measured for the table's own
jobs (``Compute.executor_cpu_s``, source ``spark``); only where no executor figure can exist (a Spark
Connect server, source ``spark-connect``, or a kind that commits without Spark, source ``none``) the wall
seconds around the work (``wall_s``), which on a busy cluster also count waiting. A Spark run whose
executor CPU was not measured is left out. **Benefit** is the table's shape before and after
(core/runs/run_figures.Benefit): data and delete files removed, and the scan-cost proxy's files and bytes.

A failed run recorded no figures: it spent its wall seconds (its row's start to finish) and bought nothing,
unless the failure was not the table's (the lock was held, something was down), which teaches nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from floe_dagster.core.runs.history import NOT_THE_TABLES_FAULT
from floe_dagster.core.value.learned_ranking import LearningRun
from floe_dagster.core.runs.run_figures import NO_SPARK, SPARK, SPARK_CONNECT, Benefit, Compute

# The compute sources a run's compute seconds may come from, as ``explain`` names them.
EXECUTOR_CPU = "executor_cpu"
WALL = "wall"


@dataclass(frozen=True)
class RecordedRun:
    """One outcome row: when, whether it succeeded, and what it cost and bought (None: a failure, or a row
    recorded before runs recorded figures)."""

    started_at: datetime
    finished_at: datetime
    succeeded: bool
    failure_kind: str | None = None
    bytes_rewritten: int = 0
    compute: Compute | None = None
    benefit: Benefit | None = None


def compute_seconds(compute: Compute | None) -> tuple[float, str] | None:
    """The run's compute seconds and where they come from (``executor_cpu`` or ``wall``); None: none usable."""
    if compute is None:
        return None
    if compute.source == SPARK:
        cpu = compute.executor_cpu_s
        return (float(cpu), EXECUTOR_CPU) if cpu is not None and cpu > 0 else None
    if compute.source in (SPARK_CONNECT, NO_SPARK) and compute.wall_s > 0:
        return float(compute.wall_s), WALL
    return None


def learning_run(run: RecordedRun) -> LearningRun | None:
    """The run as the learned ranking counts it; None: nothing to learn from (see the module)."""
    if not run.succeeded:
        if run.failure_kind in NOT_THE_TABLES_FAULT:
            return None
        seconds = (run.finished_at - run.started_at).total_seconds()
        return LearningRun(run.finished_at, seconds, succeeded=False) if seconds > 0 else None
    measured = compute_seconds(run.compute)
    if measured is None:
        return None
    benefit = run.benefit
    if benefit is None:
        return LearningRun(run.finished_at, measured[0], bytes_rewritten=run.bytes_rewritten)
    before, after = benefit.before, benefit.after
    return LearningRun(
        run.finished_at, measured[0], bytes_rewritten=run.bytes_rewritten,
        data_files_removed=max(0, before.data_files - after.data_files),
        delete_files_removed=max(0, before.delete_files - after.delete_files),
        scan_files_before=before.scan_files, scan_files_after=after.scan_files,
        scan_bytes_before=before.scan_bytes, scan_bytes_after=after.scan_bytes)


def compute_source(runs: list[RecordedRun]) -> str | None:
    """Where the compute seconds of these runs come from: ``executor_cpu``, ``wall``, ``mixed`` or None."""
    sources = {measured[1] for r in runs if r.succeeded and (measured := compute_seconds(r.compute))}
    return None if not sources else sources.pop() if len(sources) == 1 else "mixed"


__all__ = ["RecordedRun", "EXECUTOR_CPU", "WALL", "compute_seconds", "learning_run", "compute_source"]
