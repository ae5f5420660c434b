"""What happened before to one (table, operation): the planner's view of past runs."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class OperationHistory:
    """What the planner needs to know about past runs of one (table, operation)."""

    last_run_start: datetime | None = None
    last_run_succeeded: bool | None = None
    last_run_trigger: str | None = None
    last_success_start: datetime | None = None
    last_failure_at: datetime | None = None
    consecutive_failures: int = 0
    consecutive_zero_change: int = 0
    last_snapshot_after: int | None = None
    runs: int = 0
    failures: int = 0

    @property
    def failure_rate(self) -> float:
        """Percent of this (table, operation)'s finished runs that failed (Floe's 0..100)."""
        return 100.0 * self.failures / self.runs if self.runs else 0.0
