"""The planner's inputs for the tables of one shard, gathered with a few batched reads: one catalog
listing, one in-flight query, one read of the coordination database (coordination/ledger_view.py: the
writers, the ledger and the history in one statement, the outcomes in another, on one connection), and the
health collector's tiers.

The ledger's arithmetic (:func:`ledger_state`) is pure, so it is tested without a catalog or Spark.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Callable, Iterable, Mapping

from dagster import DagsterInstance, RunsFilter
from pyiceberg.catalog import Catalog

from floe_dagster.coordination.database import ADMISSION_TTL, Coordination
from floe_dagster.coordination.ledger_view import OutcomeWindow, read_ledger_view, read_recorded_runs
from floe_dagster.coordination.runs import (
    QUEUED_STATUSES,
    RunInFlight,
    active_run_records,
    mark_dead_runs,
    runs_in_flight,
)
from floe_dagster.core.runs import run_tags as T
from floe_dagster.core.operations import ALL_OPERATIONS, Operation
from floe_dagster.core.plan.compute_budget import WINDOW as COMPUTE_WINDOW, InFlightAdmission
from floe_dagster.core.plan.decisions import SchedulerSettings
from floe_dagster.core.plan.fair_shares import USAGE_HORIZON, PastAdmission
from floe_dagster.core.value.learned_ranking import RankingSettings
from floe_dagster.core.rewrites.partition_scope import Backlog
from floe_dagster.core.plan.planner import Decision, PlanInput
from floe_dagster.core.policies.policy import PolicySet
from floe_dagster.core.runs.run_decision import LedgerRow
from floe_dagster.core.value.run_history import RecordedRun
from floe_dagster.core.basics.scopes import DEFAULT_SCOPE, Scope
from floe_dagster.core.basics.tables import TableName
from floe_dagster.core.schedules.writers import writers_by_table
from floe_dagster.iceberg.catalog import list_tables, open_catalog
from floe_dagster.iceberg.byte_estimates import estimate_operation_bytes
from floe_dagster.iceberg.health_collector import HealthCollector
from floe_dagster.policies import load_policy_set
from floe_dagster.scheduling.writer_facts import first_write_lookup, writer_runs
from floe_dagster.settings import Settings

# The health collection's share of a tick (Dagster's sensor limit is 60 s).
HEALTH_TIME_BUDGET_S = 20.0
# Ledger rows older than this cannot hold an attempt number the planner still needs (a slot's
# retries stop long before: backoff is capped at 7 days).
LEDGER_LOOKBACK = timedelta(days=8)


@dataclass(frozen=True)
class LedgerState:
    """What the recent ledger rows of one shard say, for the planner."""

    in_flight: frozenset[tuple[str, Operation]]  # queued or running runs, and fresh admissions
    last_attempts: Mapping[tuple[str, Operation, str], int]  # (table, operation, slot) -> last attempt
    # The admissions not finished yet, each with its estimate: the byte budget counts their bytes, the
    # compute budget their compute estimates.
    unfinished: tuple[InFlightAdmission, ...] = ()
    # (table, operation) -> what its newest admission left to do (a partition-scoped rewrite's backlog)
    backlogs: Mapping[tuple[str, Operation], Backlog] = field(default_factory=dict)
    shadow_bytes_last_hour: int = 0  # the shadow pass's budget: estimated bytes of the last hour's shadow rows
    # The live admissions of the fair shares' memory (core/plan/fair_shares.USAGE_HORIZON), oldest first.
    recent_admissions: tuple[PastAdmission, ...] = ()

    @property
    def bytes_in_flight(self) -> int:
        """Estimated bytes of the admissions not finished yet (the byte budget)."""
        return sum(admission.estimated_bytes for admission in self.unfinished)


def ledger_state(rows: Iterable[LedgerRow], now: datetime,
                 running: frozenset[tuple[str, Operation]]) -> LedgerState:
    """Fold the ledger rows of a shard with the runs in flight (``running``, from the instance).

    An admission whose run is not created yet holds its (table, operation) in flight and its bytes
    in the budget until :data:`ADMISSION_TTL` (the daemon failed to launch it); an admission whose
    run exists counts its estimate while that run is in flight. Shadow rows never have a run: they
    hold nothing in flight, are no attempt and leave no backlog; their estimates of the last hour
    are the shadow pass's own byte budget."""
    rows = list(rows)
    shadow_bytes = sum(row.estimated_bytes for row in rows
                       if row.shadow and row.operation.rewrites_data and now - row.admitted_at < timedelta(hours=1))
    rows = [row for row in rows if not row.shadow]
    in_flight = set(running)
    last_attempts: dict[tuple[str, Operation, str], int] = {}
    pending: list[InFlightAdmission] = []
    created = []
    for row in rows:
        item = (row.table_name, row.operation)
        key = (*item, row.slot)
        last_attempts[key] = max(last_attempts.get(key, -1), row.attempt)
        if row.run_id is None:
            if now - row.admitted_at < ADMISSION_TTL:
                in_flight.add(item)
                pending.append(InFlightAdmission(*item, row.estimated_bytes))
        else:
            created.append((item, row.estimated_bytes))
    pending += [InFlightAdmission(*item, estimate) for item, estimate in created if item in in_flight]
    return LedgerState(frozenset(in_flight), last_attempts, tuple(pending), backlogs_of(rows), shadow_bytes,
                       recent_admissions(rows, now))


def recent_admissions(rows: Iterable[LedgerRow], now: datetime) -> tuple[PastAdmission, ...]:
    """The live admissions the fair shares remember (every launcher's: each took its part of the budgets)."""
    return tuple(PastAdmission(row.table_name, row.admitted_at,
                               row.estimated_bytes if row.operation.rewrites_data else 0)
                 for row in sorted(rows, key=lambda r: (r.admitted_at, r.id))
                 if not row.shadow and now - row.admitted_at < USAGE_HORIZON)


def backlogs_of(rows: Iterable[LedgerRow]) -> dict[tuple[str, Operation], Backlog]:
    """The backlog of each (table, operation) whose newest admission was partition-scoped or continued
    a backlog (the planner decides whether it is still open, from the history)."""
    newest: dict[tuple[str, Operation], LedgerRow] = {}
    for row in rows:
        item = (row.table_name, row.operation)
        if item not in newest or (row.admitted_at, row.id) > (newest[item].admitted_at, newest[item].id):
            newest[item] = row
    return {item: Backlog(row.slot, row.admitted_at, row.scope.backlog_partitions if row.scope else 0,
                          row.scope.backlog_bytes if row.scope else 0, row.trigger == "backlog",
                          older_first=row.scope is not None and row.scope.older_specs_alone)
            for item, row in newest.items() if row.scope is not None or row.trigger == "backlog"}


@dataclass(frozen=True)
class TickInputs:
    """The planner's input and what gathering it found on the way."""

    plan_input: PlanInput
    dead_runs: list[str]  # runs found dead (and marked failed) while gathering
    health_missing: int  # tables whose full-tier health is not collected yet


def gather(
    settings: Settings,
    instance: DagsterInstance,
    coordination: Coordination,
    now: datetime,
    loaded_tables: frozenset[TableName] | None,
    launcher_filter: Callable[[Decision], bool] | None = None,
    mark_dead: bool = False,
    shard: Scope = DEFAULT_SCOPE,
) -> TickInputs:
    """The planner's inputs for the tables of one shard."""
    catalog = open_catalog(settings.catalog)
    tables = shard.select(list_tables(catalog))
    scoped = {t.qualified for t in tables}
    active = active_run_records(instance)  # one query: floe's runs in flight, and the writers' runs
    in_flight_runs = runs_in_flight(instance, active)
    dead = mark_dead_runs(instance, coordination, in_flight_runs, now) if mark_dead else []
    policies = load_policy_set(settings)
    # The coordination database, read once (after the dead runs' outcomes are recorded: the history has them).
    view = read_ledger_view(coordination, now - LEDGER_LOOKBACK,
                            outcome_window(policies, now, settings.ranking, settings.scheduler))
    writers = writers_by_table(tables, settings.writers, view.writers)
    running = frozenset((table, r.operation) for r in in_flight_runs
                        if r.run_id not in dead and r.operation for table in r.table_names)
    recent = _attach_created_runs(instance, coordination, view.admitted)
    ledger = ledger_state([row for row in recent if row.table_name in scoped], now, running)  # a shard's own
    metrics, health_missing = _health(catalog, settings, tables)
    rewritten = view.bytes_rewritten_by_table  # the last hour's
    data = PlanInput(
        now=now,
        catalog_tables=tables,
        loaded_tables=frozenset(tables) if loaded_tables is None else loaded_tables,
        policies=policies,
        limits=settings.scheduler,
        metrics=metrics,
        history=view.history,
        in_flight=ledger.in_flight,
        busy_tables=frozenset(table for table, _ in ledger.in_flight),
        last_attempts=ledger.last_attempts,
        bytes_last_hour=sum(n for name, n in rewritten.items() if name in scoped) + ledger.bytes_in_flight,
        queued_runs=queued_runs(in_flight_runs),
        debt_weights=settings.debt,
        launcher_filter=launcher_filter,
        estimate_bytes=estimate_operation_bytes,
        batching=settings.batching,
        backlogs=ledger.backlogs,
        shadow_bytes_last_hour=ledger.shadow_bytes_last_hour,
        fair_shares=settings.fair_shares,
        past_admissions=ledger.recent_admissions if settings.fair_shares.enabled else (),
        writers=writers,
        writer_runs=writer_runs(instance, active, writers),
        first_write_after=first_write_lookup(instance, shard.name),
        ranking=settings.ranking,
        admissions_in_flight=ledger.unfinished,
        recorded_runs={key: runs for key, runs in view.recorded_runs.items() if key[0] in scoped},
    )
    return TickInputs(data, dead, health_missing)


def _health(catalog: Catalog, settings: Settings, tables: list[TableName]) -> tuple[dict[TableName, Any], int]:
    """Summary health for every table (no file read for an unchanged one), then the full tier within a time
    budget: a cold start fills in over a few ticks instead of blowing the sensor's limit. With the number of
    tables whose full tier is not collected yet."""
    collector = HealthCollector(catalog, settings)
    summary = collector.collect(tables, tier="summary")
    health = collector.collect(tables, tier="full", time_budget_s=HEALTH_TIME_BUDGET_S)
    collector.close()
    return {**summary.metrics, **health.metrics}, len(health.missing)


def mark_dead_in_flight(instance: DagsterInstance, coordination: Coordination, now: datetime) -> list[str]:
    """Mark failed floe's in-flight runs whose process is gone (what :func:`gather` does with
    ``mark_dead``), without gathering anything else: a tick whose launches are paused."""
    return mark_dead_runs(instance, coordination, runs_in_flight(instance, active_run_records(instance)), now)


def recorded_runs(data: PlanInput, coordination: Coordination,
                  scoped: set[str]) -> dict[tuple[str, Operation], list[RecordedRun]]:
    """The recorded runs the plan learns from (:func:`outcome_window`), read on their own (explain's)."""
    found = read_recorded_runs(coordination, outcome_window(data.policies, data.now, data.ranking, data.limits))
    return {key: runs for key, runs in found.items() if key[0] in scoped}


def outcome_window(policies: PolicySet, now: datetime, ranking: RankingSettings, limits: SchedulerSettings
                   ) -> OutcomeWindow:
    """The outcome rows a tick reads: the byte budget's hour, and the recorded runs the plan learns from, read
    only when it does: the kinds with a cadence of their own that a policy turns on (every kept run), and with
    the learned ranking (or its shadow) every operation's runs of the last 8 half-lives (older ones weigh less
    than 0.4 %), and with the compute budget those too, at least the budget's hour (its window, and the
    history its estimates learn from)."""
    cadenced = tuple(op for op in ALL_OPERATIONS if op.spec.has_cadence and any(
        op.spec.cadence(policy.config(op), (), now) is not None for policy in policies.policies))
    half_life = ranking.history_half_life_days
    learned = bool(ranking.learned or ranking.shadow or limits.max_compute_hours_per_hour)
    since = min(now - timedelta(days=8 * half_life), now - COMPUTE_WINDOW) if half_life > 0 else None
    return OutcomeWindow(now - timedelta(hours=1), cadenced, learned, since)


def queued_runs(in_flight_runs: Iterable[RunInFlight]) -> int:
    """Floe runs waiting in the run queue (``max-queued-runs`` counts these)."""
    return sum(1 for r in in_flight_runs if r.status in QUEUED_STATUSES)


def _attach_created_runs(instance: DagsterInstance, coordination: Coordination,
                         recent: list[LedgerRow]) -> list[LedgerRow]:
    """The rows with the run id of admissions whose run the daemon has created since (one query),
    recorded in the ledger: a run carries its batch's key as the run tag dagster/floe.run-key."""
    pending = {row.batch_key for row in recent if row.run_id is None and not row.shadow}
    if not pending:
        return recent
    created: dict[str, str] = {}
    for record in instance.get_run_records(filters=RunsFilter(tags={T.BATCH_KEY: list(pending)})):
        key = record.dagster_run.tags.get(T.BATCH_KEY)
        if key in pending:
            coordination.attach_run(key, record.dagster_run.run_id)
            created[key] = record.dagster_run.run_id
    return [replace(row, run_id=created[row.batch_key]) if row.run_id is None and row.batch_key in created else row
            for row in recent]
