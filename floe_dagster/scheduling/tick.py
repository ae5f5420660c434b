"""One scheduling tick, shared by the debt-score sensor, the cron schedules, ``floe-dagster plan`` and
``explain``: gather the planner's inputs with a few batched reads, plan, and (for launchers) admit
the decisions into the trigger ledger under the scheduler lock.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Callable

from dagster import DagsterInstance, RunsFilter

from floe_dagster.iceberg.catalog import list_tables, open_catalog
from floe_dagster.errors import CatalogUnavailable
from floe_dagster.coordination.database import ADMISSION_TTL, Admission, Coordination
from floe_dagster.core.localtime import naive_as_utc
from floe_dagster.core.operations import Operation
from floe_dagster.core.planner import Decision, Plan, PlanInput, plan
from floe_dagster.core.scopes import DEFAULT_SCOPE, Scope
from floe_dagster.core.tables import TableName
from floe_dagster.core import run_tags as T
from floe_dagster.coordination.locks import hold_lock, scheduler_lock_name
from floe_dagster.errors import LockHeld
from floe_dagster.policies import load_policy_set
from floe_dagster.coordination.runs import mark_dead_runs, runs_in_flight
from floe_dagster.settings import Settings

log = logging.getLogger(__name__)

# The health collection's share of a tick (Dagster's sensor limit is 60 s).
HEALTH_TIME_BUDGET_S = 20.0
# After runs failed because Spark or the catalog was down, launches pause this long.
CIRCUIT_PAUSE = timedelta(minutes=5)


@dataclass
class TickResult:
    plan: Plan | None
    admitted: list[Decision] = field(default_factory=list)
    skipped_tick: str | None = None  # lock_held, catalog_unavailable, scheduler_disabled
    dead_runs: list[str] = field(default_factory=list)
    health_missing: int = 0
    health_reported: int = 0  # tables whose health observation and check result this tick recorded
    seconds: float = 0.0

    def summary(self) -> str:
        if self.skipped_tick:
            return f"tick skipped: {self.skipped_tick}"
        assert self.plan is not None
        considered = len(self.plan.decisions)
        top = ", ".join(f"{code} ×{n}" for code, n in list(self.plan.reason_counts().items())[:5])
        text = f"considered {considered}, admitted {len(self.admitted)}"
        if self.health_reported:
            text += f", health recorded for {self.health_reported} changed table(s)"
        return text + (f"; skipped: {top}" if top else "")


def gather(
    settings: Settings,
    instance: DagsterInstance,
    now: datetime,
    loaded_tables: frozenset[TableName] | None,
    scope: Callable[[Decision], bool] | None = None,
    coordination: Coordination | None = None,
    mark_dead: bool = False,
    table_scope: Scope = DEFAULT_SCOPE,
) -> tuple[PlanInput, list[str], int]:
    """The planner's inputs for the tables of one scope: one catalog listing, one history read, one
    in-flight query."""
    from floe_dagster.iceberg.health_collector import HealthCollector, estimate_operation_bytes

    coordination = coordination or Coordination(settings.coordination_url)
    catalog = open_catalog(settings.catalog)
    tables = table_scope.select(list_tables(catalog))
    scoped = {t.qualified for t in tables}
    in_flight_runs = runs_in_flight(instance)
    dead = mark_dead_runs(instance, coordination, in_flight_runs, now, settings.coordination_url) if mark_dead else []
    in_flight = {(r.table_name, r.operation) for r in in_flight_runs if r.run_id not in dead and r.table_name and r.operation}
    recent = coordination.admitted_since(now - timedelta(days=8))
    _attach_created_runs(instance, coordination, recent)
    last_attempts: dict[tuple[str, Operation, str], int] = {}
    pending_bytes = 0
    recent = [row for row in recent if row["table_name"] in scoped]  # each shard has its own budgets
    for row in recent:
        key = (row["table_name"], Operation(row["operation"]), row["slot"])
        last_attempts[key] = max(last_attempts.get(key, -1), row["attempt"])
        admitted_at = row["admitted_at"]
        if row["run_id"] is None and now - naive_as_utc(admitted_at) < ADMISSION_TTL:
            in_flight.add((row["table_name"], Operation(row["operation"])))
            pending_bytes += row["estimated_bytes"] or 0
    estimated_in_flight = sum(
        row["estimated_bytes"] or 0 for row in recent
        if row["run_id"] is not None and (row["table_name"], Operation(row["operation"])) in in_flight
    )
    # Summary health for every table (no file read for an unchanged one), then the full tier within
    # a time budget: a cold start fills in over a few ticks instead of blowing the sensor's limit.
    collector = HealthCollector(catalog, settings)
    summary = collector.collect(tables, tier="summary")
    health = collector.collect(tables, tier="full", time_budget_s=HEALTH_TIME_BUDGET_S)
    collector.close()
    health_metrics = {**summary.metrics, **health.metrics}
    data = PlanInput(
        now=now,
        catalog_tables=tables,
        loaded_tables=frozenset(tables) if loaded_tables is None else loaded_tables,
        policies=load_policy_set(settings),
        limits=settings.scheduler,
        metrics=health_metrics,
        history=coordination.all_history(),
        in_flight=frozenset(in_flight),
        last_attempts=last_attempts,
        bytes_last_hour=sum(n for name, n in coordination.bytes_rewritten_by_table_since(now - timedelta(hours=1)).items()
                            if name in scoped) + pending_bytes + estimated_in_flight,
        queued_runs=sum(1 for r in in_flight_runs if r.status.value in ("QUEUED", "NOT_STARTED")),
        debt_weights=settings.debt,
        scope=scope,
        estimate_bytes=estimate_operation_bytes,
    )
    return data, dead, len(health.missing)


def _attach_created_runs(instance: DagsterInstance, coordination: Coordination, recent: list[dict]) -> None:
    """Fill in the run id of admissions whose run the daemon has created since (one query)."""
    pending = {row["run_key"]: row for row in recent if row["run_id"] is None}
    if not pending:
        return
    records = instance.get_run_records(filters=RunsFilter(tags={T.RUN_KEY: list(pending)}))
    for record in records:
        key = record.dagster_run.tags.get(T.RUN_KEY)
        if key in pending:
            coordination.attach_run(key, record.dagster_run.run_id)
            pending[key]["run_id"] = record.dagster_run.run_id



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
    try:
        with hold_lock(scheduler_lock_name(table_scope.name), settings.coordination_url):
            coordination = Coordination(settings.coordination_url)
            data, dead, missing = gather(settings, instance, now, loaded_tables, scope, coordination, mark_dead=True,
                                         table_scope=table_scope)
            result = plan(data)
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
            admissions = {
                d.run_key: d for d in result.admitted
            }
            ledger_items = [
                Admission(d.table.qualified, d.operation, d.slot or "", d.attempt, d.trigger or "",
                          "; ".join(d.reasons), d.debt_score, d.estimated_bytes)
                for d in result.admitted
            ]
            accepted = coordination.admit(ledger_items, now, launcher)
            admitted = [admissions[item.run_key] for item in accepted]
    except LockHeld:
        return TickResult(None, skipped_tick="lock_held: another launcher is planning")
    except CatalogUnavailable as exc:
        return TickResult(None, skipped_tick=f"catalog_unavailable: {exc}")
    # After the lock is released: Dagit's view of table health (the sensor only, not the schedules).
    reported = report_tick_health(settings, instance, data, now) if launcher.startswith("sensor") else 0
    return TickResult(result, admitted, dead_runs=dead, health_missing=missing, health_reported=reported,
                      seconds=time.monotonic() - started)


def _only_first_admitted(decisions: list[Decision]) -> list[Decision]:
    from dataclasses import replace

    return [d if d.decision != "run" or d.rank == 1 else
            replace(d, decision="skip", rank=None, reasons=("circuit_open: probing with one run after an outage",
                                                           *d.reasons))
            for d in decisions]


def report_tick_health(settings: Settings, instance: DagsterInstance, data: PlanInput, now: datetime) -> int:
    """Observations and ``health`` check results for the code location's tables whose full-tier
    health changed (or that a maintenance run materialized), within the time budget. Never fails
    the tick: an error is logged and the tables are reported by a later tick."""
    from floe_dagster.defs.health_checks import report_health_events

    full = {table: metrics for table, metrics in data.metrics.items() if metrics.tier == "full"}
    health = getattr(settings, "health", None)
    try:
        return report_health_events(
            instance, full, data.policies, now, only=data.loaded_tables, history=data.history,
            debt_weights=settings.debt, time_budget_s=getattr(health, "report_time_budget_s", 10.0),
        )
    except Exception:  # the event log is down, a bad record...: planning already happened
        log.warning("health events could not be recorded this tick", exc_info=True)
        return 0
