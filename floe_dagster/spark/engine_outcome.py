"""What the engine's unit of work on one table returns (spark/engine.py makes it, a step's ``summarise`` and
defs/table_run.py read it): its own module so that the operation steps name it without importing the engine."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from floe_dagster.core.rewrites.row_check import RowCheck
from floe_dagster.core.runs.run_figures import Compute
from floe_dagster.spark.procedures import ProcedureResult


@dataclass(frozen=True)
class EngineOutcome:
    result: ProcedureResult
    sql: str
    arguments: dict[str, Any]
    new_snapshot_ids: tuple[int, ...]
    row_check: RowCheck
    duration_s: float
    extra: dict[str, object] = field(default_factory=dict)
    metadata: dict[str, object] = field(default_factory=dict)  # for the materialization (orphan quarantine)
    compute: Compute | None = None  # the table's own Spark work (spark/compute_metrics.py)
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
