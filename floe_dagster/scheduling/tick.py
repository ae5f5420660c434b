"""One scheduling tick, shared by the debt-score sensor and the cron schedules: under the scheduler
lock, gather the planner's inputs (scheduling/inputs.py), plan, and admit the decisions into the
trigger ledger. ``floe-dagster plan`` and ``explain`` gather and plan the same way without admitting.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Callable

from dagster import DagsterInstance

from floe_dagster.coordination.database import Admission, Coordination
from floe_dagster.coordination.locks import scheduler_lock_name
from floe_dagster.core.batches import batch_key
from floe_dagster.core.planner import Decision, Plan, PlanInput, plan
from floe_dagster.core.scopes import DEFAULT_SCOPE, Scope
from floe_dagster.core.tables import TableName
from floe_dagster.errors import CatalogUnavailable, LockHeld
from floe_dagster.scheduling.inputs import gather
from floe_dagster.settings import Settings

# After runs failed because Spark or the catalog was down, launches pause this long.
CIRCUIT_PAUSE = timedelta(minutes=5)


@dataclass(frozen=True)
class RunBatch:
    """One run to request: admitted decisions of one operation, in rank order, and the batch's key
    (the run key; the ledger rows of its tables carry it)."""

    key: str
    decisions: list[Decision]

    @property
    def operation(self):
        return self.decisions[0].operation


@dataclass
class TickResult:
    plan: Plan | None
    admitted: list[Decision] = field(default_factory=list)
    skipped_tick: str | None = None  # lock_held, catalog_unavailable, scheduler_disabled
    dead_runs: list[str] = field(default_factory=list)
    health_missing: int = 0
    health_reported: int = 0  # tables whose health observation and check result this tick recorded
    seconds: float = 0.0
    inputs: PlanInput | None = None  # what was planned from (the sensor reports health from it)
    batches: list[RunBatch] = field(default_factory=list)  # the admitted decisions, one run each

    def summary(self) -> str:
        if self.skipped_tick:
            return f"tick skipped: {self.skipped_tick}"
        assert self.plan is not None
        considered = len(self.plan.decisions)
        top = ", ".join(f"{code} ×{n}" for code, n in list(self.plan.reason_counts().items())[:5])
        text = f"considered {considered}, admitted {len(self.admitted)}"
        if self.batches and len(self.batches) != len(self.admitted):
            text += f" in {len(self.batches)} run(s)"
        if self.health_reported:
            text += f", health recorded for {self.health_reported} changed table(s)"
        return text + (f"; skipped: {top}" if top else "")


def run_tick(
    settings: Settings,
    instance: DagsterInstance,
    now: datetime,
    launcher: str,
    loaded_tables: frozenset[TableName] | None,
    scope: Callable[[Decision], bool] | None = None,
    table_scope: Scope = DEFAULT_SCOPE,
) -> TickResult:
    """Plan and admit under the scheduler lock; the admitted decisions are in the ledger on return."""
    started = time.monotonic()
    if not settings.scheduler.enabled:
        return TickResult(None, skipped_tick="scheduler_disabled: scheduler.enabled is false")
    coordination = Coordination(settings.coordination_url)
    try:
        with coordination.locks.hold(scheduler_lock_name(table_scope.name)):
            inputs = gather(settings, instance, now, loaded_tables, scope, coordination, mark_dead=True,
                            table_scope=table_scope)
            dead = inputs.dead_runs
            result = plan(inputs.plan_input)
            breaker = coordination.outage_circuit(now, CIRCUIT_PAUSE)
            if breaker is not None:
                # Spark or the catalog failed runs recently and nothing has succeeded since: pause
                # launches (no table is blamed) until the pause ends, then let one run probe.
                if now < breaker:
                    return TickResult(result, [], skipped_tick=f"circuit_open: an outage failed runs; launches "
                                      f"resume at {breaker.isoformat()}", dead_runs=dead,
                                      seconds=time.monotonic() - started)
                result = Plan(result.at, _only_first_admitted(result.decisions), result.notes
                              + ["circuit half-open after an outage: one run probes"])
            admissions = {d.run_key: d for d in result.admitted}
            ledger_items = [
                Admission(d.table.qualified, d.operation, d.slot or "", d.attempt, d.trigger or "",
                          "; ".join(d.reasons), d.debt_score, d.estimated_bytes, batch_key=key)
                for key, members in _keyed(result.batches())
                for d in members
            ]
            accepted = coordination.admit(ledger_items, now, launcher)
            admitted = [admissions[item.run_key] for item in accepted]
            # What another launcher admitted first is left out; each batch keeps its key (its run key).
            keys = {item.run_key: item.batch_key for item in accepted}
            batches = [RunBatch(keys[members[0].run_key], members) for members in result.batches(admitted)]
    except LockHeld:
        return TickResult(None, skipped_tick="lock_held: another launcher is planning")
    except CatalogUnavailable as exc:
        return TickResult(None, skipped_tick=f"catalog_unavailable: {exc}")
    return TickResult(result, admitted, dead_runs=dead, health_missing=inputs.health_missing,
                      seconds=time.monotonic() - started, inputs=inputs.plan_input, batches=batches)


def _keyed(batches: list[list[Decision]]) -> list[tuple[str, list[Decision]]]:
    return [(batch_key([d.run_key for d in members]), members) for members in batches]


def _only_first_admitted(decisions: list[Decision]) -> list[Decision]:
    return [d if d.decision != "run" or d.rank == 1 else
            replace(d, decision="skip", rank=None, reasons=("circuit_open: probing with one run after an outage",
                                                           *d.reasons))
            for d in decisions]
