"""One scheduling tick, shared by the debt-score sensor and the cron schedules: under the scheduler
lock, gather the planner's inputs (scheduling/inputs.py), plan, and admit the decisions into the
trigger ledger. ``floe-dagster plan`` and ``explain`` gather and plan the same way without admitting.

The shadow policies' decisions that would run are recorded in the ledger as shadow rows
(:attr:`TickResult.shadow`) and are in no batch: no run request is ever made of them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Callable

from dagster import DagsterInstance

from floe_dagster.coordination.database import Coordination
from floe_dagster.coordination.locks import scheduler_lock_name
from floe_dagster.core.plan.batches import batch_key
from floe_dagster.core.plan.circuit import only_the_probe
from floe_dagster.core.plan.planner import Decision, Plan, PlanInput, plan
from floe_dagster.core.policies.policy import PolicySet
from floe_dagster.core.runs.run_decision import RunDecision
from floe_dagster.core.runs.run_tags import PolicyFacts
from floe_dagster.core.basics.scopes import DEFAULT_SCOPE, Scope
from floe_dagster.core.basics.tables import TableName
from floe_dagster.errors import CatalogUnavailable, LockHeld
from floe_dagster.policies import policy_facts
from floe_dagster.scheduling.inputs import gather, mark_dead_in_flight
from floe_dagster.settings import Settings

# After a run recorded an outage (errors.failure_kind's one rule: Spark, the catalog, the storage or the
# coordination database could not be reached), launches pause this long. A table's own failure never trips it.
CIRCUIT_PAUSE = timedelta(minutes=5)


@dataclass(frozen=True)
class RunBatch:
    """One run to request: admitted decisions of one operation, in rank order, the batch's key (the
    run key; the ledger rows of its tables carry it), and each table's effective policy as the
    planner found it (for the run's tags)."""

    batch_key: str
    decisions: list[RunDecision]
    policies: dict[TableName, PolicyFacts]

    @property
    def operation(self):
        return self.decisions[0].operation


@dataclass
class TickResult:
    plan: Plan | None
    admitted: list[Decision] = field(default_factory=list)
    skipped_tick: str | None = None  # lock_held, catalog_unavailable, scheduler_disabled, circuit_open
    dead_runs: list[str] = field(default_factory=list)
    health_missing: int = 0
    health_reported: int = 0  # tables whose health observation and check result this tick recorded
    seconds: float = 0.0
    inputs: PlanInput | None = None  # what was planned from (the sensor reports health from it)
    batches: list[RunBatch] = field(default_factory=list)  # the admitted decisions, one run each
    shadow: list[Decision] = field(default_factory=list)  # shadow decisions this tick recorded (no run)

    def summary(self) -> str:
        if self.skipped_tick:
            return f"tick skipped: {self.skipped_tick}"
        assert self.plan is not None
        considered = len(self.plan.decisions)
        top = ", ".join(f"{code} ×{n}" for code, n in list(self.plan.reason_counts().items())[:5])
        text = f"considered {considered}, admitted {len(self.admitted)}"
        if self.batches and len(self.batches) != len(self.admitted):
            text += f" in {len(self.batches)} run(s)"
        if self.shadow:
            text += f", {len(self.shadow)} shadow decision(s) recorded (no run)"
        if self.health_reported:
            text += f", health recorded for {self.health_reported} changed table(s)"
        return text + (f"; skipped: {top}" if top else "")


def run_tick(
    settings: Settings,
    instance: DagsterInstance,
    coordination: Coordination,
    now: datetime,
    launcher: str,
    loaded_tables: frozenset[TableName] | None,
    launcher_filter: Callable[[Decision], bool] | None = None,
    shard: Scope = DEFAULT_SCOPE,
) -> TickResult:
    """Plan and admit under the scheduler lock; the admitted decisions are in the ledger on return."""
    started = time.monotonic()
    if not settings.scheduler.enabled:
        return TickResult(None, skipped_tick="scheduler_disabled: scheduler.enabled is false")
    try:
        with coordination.locks.hold(scheduler_lock_name(shard.name)):
            # Spark or the catalog failed runs recently and nothing has succeeded since: pause launches (no
            # table is blamed) until the pause ends, then let one run probe, on a table other than those whose
            # runs met the outage (core/plan/circuit.py). While it is open nothing is gathered or planned: only the
            # dead runs are marked (their outcomes are never outages, so they cannot move the circuit).
            circuit = coordination.outage_circuit(now, CIRCUIT_PAUSE)
            if circuit is not None and circuit.is_open(now):
                return TickResult(None, [], skipped_tick=f"circuit_open: an outage failed runs; launches "
                                  f"resume at {circuit.resume_at.isoformat()}",
                                  dead_runs=mark_dead_in_flight(instance, coordination, now),
                                  seconds=time.monotonic() - started)
            inputs = gather(settings, instance, coordination, now, loaded_tables, launcher_filter, mark_dead=True,
                            shard=shard)
            dead = inputs.dead_runs
            result = plan(inputs.plan_input)
            if circuit is not None:  # half-open: the probe is picked from the plan
                result = Plan(result.at, only_the_probe(result.decisions, circuit.tripped_by), result.notes
                              + ["circuit half-open after an outage: one run probes"])
            admissions = {d.item_key: d for d in (*result.admitted, *result.shadowed)}
            accepted = {item.item_key: item for item in coordination.admit(_admissions(result), now, launcher)}
            admitted = [admissions[key] for key in accepted if not admissions[key].shadow]
            shadow = [admissions[key] for key in accepted if admissions[key].shadow]
            # What another launcher admitted first is left out; each batch keeps its key.
            policies = inputs.plan_input.policies
            batches = [_run_batch([accepted[d.item_key] for d in members], members, settings, policies)
                       for members in result.batches(admitted)]
    except LockHeld:
        return TickResult(None, skipped_tick="lock_held: another launcher is planning")
    except CatalogUnavailable as exc:
        return TickResult(None, skipped_tick=f"catalog_unavailable: {exc}")
    return TickResult(result, admitted, dead_runs=dead, health_missing=inputs.health_missing,
                      seconds=time.monotonic() - started, inputs=inputs.plan_input, batches=batches, shadow=shadow)


def _admissions(result: Plan) -> list[RunDecision]:
    """The admitted decisions as the ledger records them, each with its batch's key; then the shadow
    decisions, each its own key (no run ever carries it)."""
    admissions = []
    for members in result.batches():
        key = batch_key([d.item_key for d in members])
        admissions += [RunDecision.admitted(d, key) for d in members]
    return admissions + [RunDecision.admitted(d) for d in result.shadowed]


def _run_batch(admitted: list[RunDecision], members: list[Decision], settings: Settings,
               policies: PolicySet) -> RunBatch:
    """One run request's batch, with the policies the planner chose (looked up by name: the tables'
    policies are not resolved again)."""
    return RunBatch(admitted[0].batch_key or admitted[0].item_key, admitted,
                    {d.table: policy_facts(settings, policies.get(d.policy) if d.policy else None, d.operation)
                     for d in members})

