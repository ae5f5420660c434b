"""The compute budget: floe.yaml's ``scheduler.max-compute-hours-per-hour``, the Spark time maintenance may
spend over a rolling hour, beside the byte budget (``max-bytes-per-hour``). Off unless set.

**The measure** is the one the learned ranking and the value report count (core/value/run_history.py's
:func:`compute_seconds`): the executor CPU seconds Spark's status store measured for the table's own jobs,
and the wall seconds around the work only where no executor figure can exist (a Spark Connect server, a
kind that commits without Spark). Executor CPU is what a shared cluster's users pay for in the end (the
cores kept busy); it does not grow when the cluster is busy and a task waits, as wall time does.

**Admitted on an estimate.** Each decision offered is charged its compute estimate
(core/value/learned_ranking.py's :func:`estimate_compute`, through
:class:`~floe_dagster.core.plan.learned_plan.LearnedView`):
the table's own compute per GiB of its byte estimate (per run for kinds that rewrite nothing), shrunk
toward the fleet's (else a default) while its history is short.

**Checked against the real figures.** What the window has used is what the runs that *finished* in the
last hour recorded (their outcome rows' figures; a run without a usable figure is charged its row's
duration), plus the estimates of the admissions not finished yet. So once a run finishes its estimate is
replaced by what it really spent: an under-estimate is charged on the next tick, and a window spent past
its limit admits nothing until it drains (``explain``, ``/metrics``' ``floe_compute_budget_*`` gauges).

Pure: the clock is the caller's ``now``; the recorded runs and admissions come with the plan's input.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Iterable, Mapping, Sequence

from floe_dagster.core.plan.learned_plan import LearnedView
from floe_dagster.core.value.learned_ranking import ComputeEstimate, RankingSettings
from floe_dagster.core.basics.localtime import as_utc, naive_as_utc
from floe_dagster.core.operations import Operation
from floe_dagster.core.value.run_history import RecordedRun, compute_seconds
from floe_dagster.core.basics.validation import Location, describe

SETTING = "max-compute-hours-per-hour"
WINDOW = timedelta(hours=1)


def compute_hours_problem(value: object) -> str | None:
    """Why a ``max-compute-hours-per-hour`` value is refused (None: a usable budget, or unset)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        return (f"{SETTING}: expected compute hours per hour, a number > 0 (leave it out, or null, for no compute "
                f"budget), got {describe(value)}")
    return None


def read_compute_hours(at: Location, raw: object) -> object:
    """floe.yaml's (or the environment's) ``max-compute-hours-per-hour``: a number > 0, written as a number
    or as text; anything else is refused with the setting's name."""
    value = raw
    if isinstance(raw, str):
        try:
            value = float(raw.strip())
        except ValueError:
            value = raw
    problem = compute_hours_problem(value)
    if problem:
        at.error(problem.partition(": ")[2])
        return None
    return float(value)


@dataclass(frozen=True)
class InFlightAdmission:
    """A live admission whose run has not finished (the ledger's): its estimate counts until it does."""

    table: str  # qualified name
    operation: Operation
    estimated_bytes: int = 0


def spent_seconds(run: RecordedRun) -> float:
    """What a finished run spent: its measured compute, else its row's duration (a failure, a run whose
    figures were not measured: it held the cluster that long)."""
    measured = compute_seconds(run.compute)
    if measured is not None:
        return measured[0]
    return max(0.0, (run.finished_at - run.started_at).total_seconds())


@dataclass(frozen=True)
class ComputeWindow:
    """The budget's rolling hour at ``now``: the limit, the real compute of the runs that finished in it,
    and the estimates of the admissions still running."""

    limit_s: float
    recorded_s: float
    recorded_runs: int
    in_flight_s: float = 0.0
    in_flight_runs: int = 0

    @property
    def used_s(self) -> float:
        return self.recorded_s + self.in_flight_s

    @property
    def over_spent(self) -> bool:
        return self.recorded_s > self.limit_s

    def describe(self, admitted_s: float = 0.0) -> str:
        """``1.20 of 2 compute hours used in the last hour (0.80 spent by 3 finished runs, 0.40 estimated for
        1 in flight)``, with what this tick admitted."""
        used = self.used_s + admitted_s
        told = (f"{_hours(used)} of {_hours(self.limit_s)} compute hours used in the last hour "
                f"({_hours(self.recorded_s)} spent by {self.recorded_runs} finished run(s), "
                f"{_hours(self.in_flight_s)} estimated for {self.in_flight_runs} in flight")
        told += f", {_hours(admitted_s)} admitted this tick)" if admitted_s else ")"
        return told + (" — over-spent: the runs spent more than the budget" if self.over_spent else "")

    def to_json(self) -> dict[str, object]:
        return {"limitSeconds": round(self.limit_s, 1), "spentSeconds": round(self.recorded_s, 1),
                "finishedRuns": self.recorded_runs, "inFlightSeconds": round(self.in_flight_s, 1),
                "inFlightRuns": self.in_flight_runs, "overSpent": self.over_spent}


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.3g}"


def spent_in_window(runs: Mapping[Any, Sequence[RecordedRun]] | Iterable[RecordedRun], now: datetime,
                    ) -> tuple[float, int]:
    """(compute seconds, runs) of the recorded runs that finished in the hour before ``now``."""
    now = as_utc(now)
    since = now - WINDOW
    every = (run for group in runs.values() for run in group) if isinstance(runs, Mapping) else runs
    spent, counted = 0.0, 0
    for run in every:
        if since < naive_as_utc(run.finished_at) <= now:
            spent += spent_seconds(run)
            counted += 1
    return spent, counted


class ComputeBudget:
    """One admission pass's compute budget: the window at the pass's start and each decision's estimate."""

    def __init__(self, limit_hours: float, runs: Mapping[tuple[str, Operation], Sequence[RecordedRun]],
                 in_flight: Iterable[InFlightAdmission], now: datetime, ranking: RankingSettings,
                 view: LearnedView | None = None) -> None:
        self.view = view if view is not None else LearnedView.of(runs, now, ranking)
        recorded, finished = spent_in_window(runs, now)
        pending = list(in_flight)
        estimated = sum(self.estimate(a.table, a.operation, a.estimated_bytes).seconds for a in pending)
        self.window = ComputeWindow(limit_hours * 3600.0, recorded, finished, estimated, len(pending))

    def estimate(self, table: str, operation: Operation, estimated_bytes: int) -> ComputeEstimate:
        return self.view.compute(table, operation, estimated_bytes if operation.rewrites_data else 0)

    @property
    def left_s(self) -> float:
        """What the window has left at the pass's start."""
        return max(0.0, self.window.limit_s - self.window.used_s)


def compute_budget(data: Any, view: LearnedView | None = None) -> ComputeBudget | None:
    """The pass's compute budget from the plan's input (a :class:`~floe_dagster.core.plan.decisions.PlanInput`),
    estimating with the plan's ``view`` of the same recorded runs when given; None when
    ``max-compute-hours-per-hour`` is not set."""
    limit = data.limits.max_compute_hours_per_hour
    if not limit:
        return None
    return ComputeBudget(limit, data.recorded_runs, data.admissions_in_flight, data.now, data.ranking, view)


__all__ = ["SETTING", "WINDOW", "compute_hours_problem", "read_compute_hours", "InFlightAdmission",
           "spent_seconds", "ComputeWindow", "spent_in_window", "ComputeBudget", "compute_budget"]
