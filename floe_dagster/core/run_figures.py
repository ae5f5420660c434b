"""A finished run's measured figures, once: reduced from its materialization's metadata when the run
is recorded (the outcome row's ``figures``), and read back by the learned ranking
(core/learned_ranking.py, :class:`~floe_dagster.core.learned_ranking.RunFigures`) and the adaptive
orphan cadence (core/orphan_cadence.py, ``recorded_cleanups``).

**Compute.** The executor CPU seconds of the table's work when the run recorded them (the first of
:data:`COMPUTE_KEYS` in its metadata: issue 29's compute per run, recorded by the engine); until
then the run's ``duration_s``, the wall seconds of the engine's unit of work, which on a busy
cluster also counts waiting. ``compute_source`` says which (``executor_cpu`` or ``wall``), and
``explain`` shows it. Another source plugs in through :func:`learning_figures`' input, a
:class:`RecordedRun` whose ``figures`` hold ``compute_s`` and the benefit's counts, or directly through
:meth:`RunFigures.measured <floe_dagster.core.learned_ranking.RunFigures.measured>` (a run as a
(compute seconds, benefit) pair).

**Benefit.** Data and delete files before and after (the snapshot summary's totals, read by every
run), and the bytes: the scan-cost proxy's files and bytes before and after.

**Orphans.** The bytes an orphan cleanup found: what it moved into the quarantine when it did (exact),
else its files (deleted, listed by a dry run, or left as backlog by a cap) × the table's mean file
size after the run (``orphan_bytes_estimated``: Iceberg's procedure names the files, not their sizes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Mapping

from floe_dagster.core.history import NOT_THE_TABLES_FAULT
from floe_dagster.core.learned_ranking import RunFigures

# Executor CPU seconds of the table's work, as the compute recording names them (first found wins).
COMPUTE_KEYS = ("executor_cpu_s", "executor_cpu_seconds", "compute_executor_cpu_s")
WALL_KEY = "duration_s"


@dataclass(frozen=True)
class RecordedRun:
    """One outcome row as the planner reads it: when, whether it succeeded, and its figures (None: a
    row recorded before runs recorded figures, or a failure, which measured nothing)."""

    started_at: datetime
    finished_at: datetime
    succeeded: bool
    failure_kind: str | None = None
    bytes_rewritten: int = 0
    figures: Mapping[str, Any] | None = field(default=None, compare=False)


def _number(metadata: Mapping[str, Any], key: str) -> float | None:
    value = getattr(metadata.get(key), "value", metadata.get(key))
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def figures_from_metadata(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The figures of one successful run, from its materialization's metadata (see the module)."""
    found: dict[str, Any] = {}
    compute = next((v for key in COMPUTE_KEYS if (v := _number(metadata, key)) is not None and v >= 0), None)
    if compute is not None:
        found.update(compute_s=compute, compute_source="executor_cpu")
    elif (wall := _number(metadata, WALL_KEY)) is not None and wall >= 0:
        found.update(compute_s=wall, compute_source="wall")
    counts = {name: _number(metadata, name) for name in (
        "data_files_before", "data_files_after", "delete_files_before", "delete_files_after",
        "total_bytes_before", "total_bytes_after")}
    if None not in counts.values():
        found.update(
            data_files_removed=max(0, int(counts["data_files_before"] - counts["data_files_after"])),
            delete_files_removed=max(0, int(counts["delete_files_before"] - counts["delete_files_after"])),
            scan_files_before=int(counts["data_files_before"] + counts["delete_files_before"]),
            scan_files_after=int(counts["data_files_after"] + counts["delete_files_after"]),
            scan_bytes_before=int(counts["total_bytes_before"]), scan_bytes_after=int(counts["total_bytes_after"]))
    found.update(_orphans(metadata, counts))
    return found


def _orphans(metadata: Mapping[str, Any], counts: Mapping[str, float | None]) -> dict[str, Any]:
    files = _number(metadata, "orphan_files_count")
    if files is None:
        return {}
    files += _number(metadata, "orphan_backlog_files") or 0
    quarantined = _number(metadata, "quarantined_bytes")
    if quarantined is not None and quarantined > 0:
        return {"orphan_files": int(files), "orphan_bytes": int(quarantined), "orphan_bytes_estimated": False}
    table_files = (counts.get("data_files_after") or 0) + (counts.get("delete_files_after") or 0)
    mean = (counts.get("total_bytes_after") or 0) / table_files if table_files else 0
    return {"orphan_files": int(files), "orphan_bytes": int(files * mean), "orphan_bytes_estimated": True}


def learning_figures(run: RecordedRun) -> RunFigures | None:
    """The run as the learned ranking counts it; None: nothing to learn from (no compute recorded, or a
    failure that was not the table's: the lock was held, something was down)."""
    if not run.succeeded:
        if run.failure_kind in NOT_THE_TABLES_FAULT:
            return None
        # A failure spent its time and bought nothing (its wall seconds: it recorded no figures).
        seconds = (run.finished_at - run.started_at).total_seconds()
        return RunFigures(run.finished_at, seconds, succeeded=False) if seconds > 0 else None
    figures = run.figures or {}
    compute = figures.get("compute_s")
    if not isinstance(compute, (int, float)) or compute <= 0:
        return None
    return RunFigures(
        run.finished_at, float(compute), bytes_rewritten=run.bytes_rewritten,
        data_files_removed=int(figures.get("data_files_removed", 0)),
        delete_files_removed=int(figures.get("delete_files_removed", 0)),
        scan_files_before=figures.get("scan_files_before"), scan_files_after=figures.get("scan_files_after"),
        scan_bytes_before=figures.get("scan_bytes_before"), scan_bytes_after=figures.get("scan_bytes_after"))


def compute_source(runs: list[RecordedRun]) -> str | None:
    """Where the compute figures of these runs come from: ``executor_cpu``, ``wall``, ``mixed`` or None."""
    sources = {r.figures.get("compute_source") for r in runs if r.figures and r.figures.get("compute_source")}
    return None if not sources else sources.pop() if len(sources) == 1 else "mixed"


__all__ = ["RecordedRun", "COMPUTE_KEYS", "figures_from_metadata", "learning_figures",
           "compute_source"]
