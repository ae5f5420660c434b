"""Floe's trigger status for one table (``floe-dagster explain``, the HTTP API's trigger-status):
the planner's decision now for each operation, with conditions, debt, backoff and throttle state.
Every operation is listed, as Floe does: one that no policy matches or the policy does not
configure is disabled, with Floe's message. Conditions are Floe's strings; the structured checks
stay under ``metConditionDetails`` and ``unmetConditionDetails``.

A shadow policy's operation never triggers (``shouldTrigger`` false): ``shadow`` is true and
``shadowDecision`` says whether it would run now, and when the ledger last recorded it.

``sla`` is the operation's SLA contract now (core/schedules/sla.py): maxAge, severity, owner, breached, since when,
measured from the last success or the table's first data; a breach admits the operation with trigger
``sla`` (``forcedBySla``), past the conditions and minimum intervals.

``envelope`` is the safety envelope's verdict on each configured operation (core/policies/envelope.py): ok,
refused (each field and why: the run would fail before any engine call), or unchecked (an absolute
location while the table's location is not known yet); ``floe-dagster plan`` shows the same per decision.

An operation kind adds its own keys (its spec's ``explain``, core/operation_kinds/): ``propertyDrift``
(APPLY_TABLE_PROPERTIES), ``refs`` (EXPIRE_SNAPSHOTS), the orphans its last run left as ``backlog``
(ORPHAN_CLEANUP; the others' backlog is a partition-scoped rewrite's).

``efficiency`` is each operation's measured-efficiency factor (core/value/learned_ranking.py) with its why,
its compute estimate and how the plan ranks (``ranking``); ``cadence`` an adaptive orphan cleanup's
expected next run and why (core/schedules/orphan_cadence.py)."""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any, Callable, Mapping

from dagster import AssetRecordsFilter, DagsterInstance

from floe_dagster.coordination.database import Coordination
from floe_dagster.core.runs.commit_conflicts import conflict_retry_delay
from floe_dagster.core.plan.compute_budget import compute_budget
from floe_dagster.core.policies.conditions import NO_MATCHING_POLICY, OPERATION_DISABLED, floe_condition_strings
from floe_dagster.core.policies.envelope import Verdict, check_operation, own_location_check
from floe_dagster.core.plan.gates import gate_before
from floe_dagster.core.runs.history import OperationHistory
from floe_dagster.core.plan.learned_plan import LearnedView, ranked_by
from floe_dagster.core.operation_kinds.spec import ExplainView, LastRun
from floe_dagster.core.operations import ALL_OPERATIONS, Operation
from floe_dagster.core.policies.owner_overrides import KEYS, PREFIX, OwnerOverrides, with_overrides
from floe_dagster.core.plan.planner import Decision, PlanInput, plan
from floe_dagster.core.runs.run_decision import LedgerRow, shadow_summary
from floe_dagster.core.runs.run_figures import RunFigures, figures_json
from floe_dagster.core.storage.table_location import KnownLocations
from floe_dagster.core.basics.tables import TableName
from floe_dagster.defs.names import asset_key_for
from floe_dagster.iceberg.catalog import existing_table, open_catalog
from floe_dagster.iceberg.known_locations import known_locations
from floe_dagster.iceberg.table_cache import read_cached_tables
from floe_dagster.instance import get_instance
from floe_dagster.scheduling.inputs import gather, recorded_runs
from floe_dagster.settings import Settings


def explain_table(settings: Settings, coordination: Coordination, table_text: str, now: datetime,
                  instance=None) -> dict[str, object]:
    table = existing_table(settings.catalog, table_text)
    cached = read_cached_tables(settings)
    instance = instance or get_instance()
    data = gather(settings, instance, coordination, now,
                  frozenset(cached) if cached is not None else None).plan_input
    if not (data.ranking.learned or data.ranking.shadow):  # the factor is shown while the plan ranks statically:
        # the runs the plan would learn from if it ranked by it (the same window, and the fleet's runs too,
        # which the factor's prior reads), so explain shows the factor the learned ranking would use
        shown = replace(data, ranking=replace(data.ranking, learned=True))
        scoped = {t.qualified for t in data.catalog_tables}
        data = replace(data, recorded_runs=recorded_runs(shown, coordination, scoped))
    policy = data.policies.effective_policy(table)
    decisions = {d.operation: d for d in plan(data).decisions if d.table == table}
    recorded: dict[Operation, LedgerRow] = {}  # each shadow decision's newest ledger row
    for op, decision in decisions.items():
        if decision.shadow:
            newest = coordination.shadow_rows(table.qualified, limit=1, operation=op)[1]
            if newest:
                recorded[op] = newest[0]
    learned = LearnedView.of(data.recorded_runs, now, data.ranking)
    known = functools.cache(lambda: lake_around(settings, data))  # read once, when an envelope check needs it
    view = _TableView(data, table, policy, now, instance, settings.envelope.allowed_table_properties, learned,
                      coordination.latest_figures(table.qualified), known)
    statuses: dict[str, object] = {}
    # Every operation, as Floe lists them: the ones no policy configures are shown disabled (a view:
    # the planner decides only for configured operations).
    for op in ALL_OPERATIONS:
        decision = decisions.get(op)
        if decision is None:
            statuses[op.value] = _not_decided(op, NO_MATCHING_POLICY if policy is None else OPERATION_DISABLED)
        else:
            statuses[op.value] = _status(view, op, decision, recorded.get(op))
    return {
        "catalog": table.catalog,
        "namespace": table.namespace_str,
        "table": table.name,
        "qualifiedName": table.qualified,
        "policyName": policy.name if policy else None,
        "conditionBasedTriggeringEnabled": data.limits.condition_based_triggering_enabled,
        "at": now.isoformat(),
        # The assets that write the table (docs/beside-pipelines.md): a floe.yaml rule's or learned from
        # their materializations' dagster/table_name, each with its newest materialization floe read.
        "writers": [writer.to_json() for writer in data.writers.get(table.qualified, ())],
        "computeBudget": _compute_window(data),
        "operationStatuses": statuses,
    }


def _compute_window(data: PlanInput) -> dict[str, object] | None:
    """The compute budget's window as the plan charged it (core/plan/compute_budget.py); None: no budget."""
    budget = compute_budget(data)
    return {**budget.window.to_json(), "summary": budget.window.describe()} if budget is not None else None


@dataclass(frozen=True)
class _TableView:
    """What every operation's status of one table is made from."""

    data: PlanInput
    table: TableName
    policy: Any  # the effective policy (None: none)
    now: datetime
    instance: DagsterInstance
    allowed: tuple[str, ...]  # floe.yaml's envelope.allowed-table-properties
    learned: LearnedView  # the recorded runs' totals: each operation's efficiency factor
    latest_figures: Mapping[Operation, RunFigures]  # each operation's last run's compute and benefit
    known: Callable[[], KnownLocations]  # the lake around the table, read once when an envelope check needs it


def _status(view: _TableView, op: Operation, decision: Decision, recorded: LedgerRow | None) -> dict[str, object]:
    """One operation's trigger status: its own verdict (the gates'), the wait this tick's admission adds when
    it holds the operation back, the conditions in Floe's words, and the
    operation kind's own keys (its spec's ``explain``: ``propertyDrift``, ``refs``, an orphan ``backlog``)."""
    data, table, policy, now = view.data, view.table, view.policy, view.now
    history = data.history.get((table.qualified, op))
    result = decision.condition_result
    if result is None and policy is not None and decision.enabled:
        # An earlier gate (the schedule not due yet, a backoff...) stopped the planner before the
        # conditions; Floe's trigger status evaluates them regardless of schedules (its minimum
        # interval, for one): the view evaluates them too, the decision stays the planner's.
        result = policy.evaluate_conditions(op, data.metrics.get(table),
                                            history.last_success_start if history else None, now,
                                            data.limits.condition_based_triggering_enabled)
    met, unmet = floe_condition_strings(result, now)
    if not decision.enabled:
        met, unmet = [], [OPERATION_DISABLED]
    head = {
        "operationType": op.value,
        "shouldTrigger": decision.passed_gates and not decision.shadow,
        "enabled": decision.enabled,
        "reasons": list(decision.reasons[1:] if decision.held_back else decision.reasons),
        "waitsThisTick": decision.reasons[0] if decision.held_back else None,
        "trigger": decision.trigger if decision.passed_gates else None,
        "conditionsMet": result.passed if result is not None else True,
        "metConditions": met,
        "unmetConditions": unmet,
        "metConditionDetails": [c.to_json() for c in result.met] if result is not None else [],
        "unmetConditionDetails": [c.to_json() for c in result.unmet] if result is not None else [],
        "forcedByCriticalPipeline": bool(result is not None and result.forced),
        "forcedBySla": decision.passed_gates and decision.trigger == "sla",
    }
    return _with_add_ons(head, _status_tail(view, op, decision, history, recorded), _add_ons(view, op, decision))


def _status_tail(view: _TableView, op: Operation, decision: Decision, history: OperationHistory | None,
                 recorded: LedgerRow | None) -> dict[str, object]:
    """The status after the conditions: quiet, SLA, debt, backoff, conflicts, throttle, backlog, last run, shadow."""
    return {
        "quiet": _quiet(decision, view.policy),
        # The SLA contract's verdict now (core/schedules/sla.py): every decision carries it, whichever gate decided.
        "sla": decision.sla.to_json() if decision.sla is not None else None,
        "writerHold": decision.writer_hold.to_json() if decision.writer_hold is not None else None,
        "nextEligibleTime": decision.next_eligible.isoformat() if decision.next_eligible else None,
        "debtScore": decision.debt_score,
        "debtBreakdown": dict(decision.debt_breakdown),
        "backoff": {
            "consecutiveFailures": history.consecutive_failures if history else 0,
            "until": decision.backoff_until.isoformat() if decision.backoff_until else None,
        },
        "conflicts": _conflicts(view.table, op, history, decision.backoff_until),
        "throttle": {
            "consecutiveZeroChangeRuns": history.consecutive_zero_change if history else 0,
            "until": decision.throttled_until.isoformat() if decision.throttled_until else None,
        },
        "backlog": _backlog(decision),
        "refs": None,
        "lastRun": {
            "start": history.last_run_start.isoformat() if history and history.last_run_start else None,
            "succeeded": history.last_run_succeeded if history else None,
            "trigger": history.last_run_trigger if history else None,
            **_last_figures(view, op),
        },
        "efficiency": view.learned.to_json(
            view.table.qualified, op, decision.efficiency, decision.estimated_bytes, ranked_by(view.data.ranking),
            view.data.metrics.get(view.table),
            with_overrides(decision.owner_overrides, op, view.policy.config(op) if view.policy is not None else None)),
        "cadence": decision.cadence.to_json() if decision.cadence is not None else None,
        "shadow": decision.shadow,
        "shadowDecision": _shadow(decision, recorded, view.now) if decision.shadow else None,
        "envelope": _json(envelope_verdict(view.data, view.table, op, decision.policy, view.allowed,
                                           view.known() if op.needs_gc else None)),
        # The table's floe.* properties under its policy: the options applied, the ones ignored and why.
        "ownerOverrides": decision.owner_overrides.to_json(op) if decision.owner_overrides is not None else None,
    }


def _add_ons(view: _TableView, op: Operation, decision: Decision) -> Mapping[str, object]:
    """The operation kind's own keys (its spec's ``explain`` hook), from the health the plan used, the
    options the table's owner overrides set and, when the kind asks, its last materialization."""
    policy = view.policy
    return op.spec.explain(ExplainView(policy, policy.config(op) if policy is not None else None,
                                       view.data.metrics.get(view.table), view.now,
                                       lambda: _last_run(view.instance, view.table, op),
                                       applied_overrides(decision.owner_overrides, op)))


def applied_overrides(owner: OwnerOverrides | None, op: Operation) -> dict[str, tuple[str, object]]:
    """The config fields the table's ``floe.*`` properties set on ``op``: field → (property, value)."""
    applied = owner.applied.get(op, {}) if owner is not None else {}
    names = {key.field: PREFIX + name for name, key in KEYS.items() if key.operation is op}
    return {field: (names.get(field, PREFIX + field), value) for field, value in applied.items()}


def _with_add_ons(head: dict[str, object], tail: dict[str, object], add_ons: Mapping[str, object]) -> dict[str, object]:
    """A kind's keys set in the status where the status has them (``backlog``, ``refs``), its new ones after
    the conditions (``propertyDrift``), so every answer keeps its keys' order."""
    status = {**head, **{k: v for k, v in add_ons.items() if k not in tail and k not in head}, **tail}
    status.update({k: v for k, v in add_ons.items() if k in tail})
    return status


def envelope_verdict(data: PlanInput, table: TableName, op: Operation, policy_name: str | None,
                     allowed_properties: tuple[str, ...], known: KnownLocations | None = None) -> Verdict | None:
    """The safety envelope's verdict on a policy's operation for one table, against the table's location
    as the plan's health read it (a run reads it again from the table's metadata); None: not configured.
    ``known``: the lake around the table (iceberg/known_locations.py), which the table's own location is
    checked against for a kind that lists, deletes or moves files."""
    policy = data.policies.get(policy_name) if policy_name else None
    config = policy.config(op) if policy is not None else None
    if config is None:
        return None
    metrics = data.metrics.get(table)
    location = metrics.location if metrics else None
    return check_operation(policy.name, op, config, location, allowed_properties, table.qualified,
                           own_location_check(table, op, config, location, known))


def lake_around(settings: Settings, data: PlanInput) -> KnownLocations:
    """What ``plan`` and ``explain`` check a table's own location against: the catalog's warehouse and
    namespaces, the SQL catalog's tables, and every table the plan's health knows."""
    return known_locations(open_catalog(settings.catalog), settings, data.metrics)


def _json(verdict: Verdict | None) -> dict[str, object] | None:
    return verdict.to_json() if verdict is not None else None


def _shadow(decision: Decision, last: LedgerRow | None, now: datetime) -> dict[str, object]:
    """A shadow policy's decision: whether it would run now and why, and the ledger's last record of it."""
    would_run = decision.decision == "run"
    return {
        "wouldRun": would_run,
        "wouldRunAt": now.isoformat() if would_run else None,
        "summary": shadow_summary("; ".join(decision.reasons), now) if would_run else None,
        "lastRecordedAt": last.admitted_at.isoformat() if last else None,
        "lastRecordedSlot": last.slot if last else None,
        "lastRecordedReason": last.reason if last else None,
    }


def _quiet(decision, policy) -> dict[str, object] | None:
    """The quiet gate's state: its verdict once the decision reached it, else only the period (an earlier
    gate decided); None when the operation's schedule has no quiet period."""
    if decision.quiet is not None:
        return {"evaluated": True, **decision.quiet.to_json()}
    schedule = policy.schedule(decision.operation) if policy is not None else None
    if schedule is None or schedule.quiet is None:
        return None
    return {"evaluated": False, **schedule.quiet.to_json(),
            "detail": f"not checked yet: an earlier gate decided (the quiet period is checked after the "
                      f"{gate_before('quiet').name})"}


def _backlog(decision: Decision) -> dict[str, object] | None:
    """A partition-scoped rewrite's backlog: what this decision would leave (when it scopes now), else
    what the newest admission left while it is open; None: no backlog."""
    if decision.scope is not None:
        scope = decision.scope
        return {"partitions": scope.backlog_partitions, "bytes": scope.backlog_bytes,
                "scopedPartitions": len(scope.partitions), "scopedBytes": scope.bytes, "capBytes": scope.cap,
                "oversized": scope.oversized}
    if decision.backlog is not None:
        return {"partitions": decision.backlog.partitions, "bytes": decision.backlog.bytes,
                "slot": decision.backlog.slot}
    return None


def _last_run(instance: DagsterInstance, table: TableName, op: Operation) -> LastRun | None:
    """The newest materialization of the table's operation partition (its metadata as plain values)."""
    records = instance.fetch_materializations(
        AssetRecordsFilter(asset_key=asset_key_for(table), asset_partitions=[op.value]), limit=1).records
    if not records or records[0].asset_materialization is None:
        return None
    record = records[0]
    found = {name: getattr(value, "value", value) for name, value in record.asset_materialization.metadata.items()}
    return LastRun(found, record.run_id, datetime.fromtimestamp(record.timestamp, timezone.utc))


def _last_figures(view: _TableView, op: Operation) -> dict[str, object]:
    """The newest successful run's compute and benefit (core/runs/run_figures.py; None: no such run recorded)."""
    newest = view.latest_figures.get(op)
    figures = figures_json(newest.compute, newest.benefit) if newest else None
    return {"figuresRunId": newest.run_id if newest else None,
            "compute": figures["compute"] if figures else None, "benefit": figures["benefit"] if figures else None}


def _not_decided(op: Operation, why: str) -> dict[str, object]:
    """An operation the planner makes no decision for, in Floe's shape: disabled, never triggers."""
    return {
        "operationType": op.value, "shouldTrigger": False, "enabled": False, "reasons": [why], "waitsThisTick": None,
        "trigger": None,
        "conditionsMet": False, "metConditions": [], "unmetConditions": [why], "metConditionDetails": [],
        "unmetConditionDetails": [], "forcedByCriticalPipeline": False, "forcedBySla": False, "quiet": None,
        "sla": None, "writerHold": None, "nextEligibleTime": None,
        "debtScore": 0.0, "debtBreakdown": {},
        "backoff": {"consecutiveFailures": 0, "until": None},
        "conflicts": {"consecutiveConflicts": 0, "lastConflictAt": None, "retryAt": None, "writerOperation": None,
                      "countsAsFailure": False},
        "throttle": {"consecutiveZeroChangeRuns": 0, "until": None},
        "backlog": None,
        "refs": None,
        "lastRun": {"start": None, "succeeded": None, "trigger": None, "figuresRunId": None, "compute": None,
                    "benefit": None},
        "efficiency": None, "cadence": None,
        "shadow": False, "shadowDecision": None, "envelope": None, "ownerOverrides": None,
    }


def _conflicts(table: TableName, op: Operation, history: OperationHistory | None,
               backoff_until: datetime | None = None) -> dict[str, object]:
    """Lost commit races in a row and when the next attempt may start: a short jittered delay, or,
    from the CONFLICT_STREAK-th in a row on (``countsAsFailure``), the failure backoff when it is later."""
    streak = history.consecutive_conflicts if history else 0
    last = history.last_conflict_at if history else None
    retry = last + conflict_retry_delay(table.qualified, op.value, streak) if streak and last else None
    counts = bool(history and history.conflicts_back_off)
    if counts and retry is not None and backoff_until is not None:
        retry = max(retry, backoff_until)
    return {"consecutiveConflicts": streak, "lastConflictAt": last.isoformat() if last else None,
            "retryAt": retry.isoformat() if retry else None,
            "writerOperation": history.last_conflict_writer if history and streak else None,
            "countsAsFailure": counts}
