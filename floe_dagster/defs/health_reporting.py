"""When Dagit's health events are recorded for a table: :func:`report_health_events`, called by the
debt-score sensor's tick with the health it has just gathered, reports a table only when what Dagit
shows for it would change:

* its fingerprint changed: the table's metadata file (any commit), the metrics' tier, the status,
  the issues (type and severity) or the thresholds. So an unchanged table is never reported again,
  and a status that changes with time alone (stale metadata, old snapshots) is reported once;
* or a maintenance run of it succeeded since the last report (from the coordination history): its
  materialization would hide the last result, even when the run committed nothing (orphan cleanup
  never commits). It is reported once the run's materialization is in the event log.

What was last reported is kept per table (defs/last_reported.py). Writes are bounded by a time
budget, most severe tables first; the rest follow on the next tick.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime, timedelta
from typing import Any, Iterable, Mapping, NamedTuple, Sequence

from dagster import AssetKey, DagsterInstance
from dagster._core.definitions.asset_checks.asset_check_evaluation import (  # the record's type; not exported
    AssetCheckEvaluationTargetMaterializationData,
)

from floe_dagster.core.facts.debt import DebtWeights
from floe_dagster.core.facts.health_assessment import CRITICAL, HEALTHY, WARNING, HealthAssessment
from floe_dagster.core.policies.health_record import assess_table, thresholds_for
from floe_dagster.core.runs.history import OperationHistory
from floe_dagster.core.basics.localtime import naive_as_utc
from floe_dagster.core.facts.measurements import TableMetrics
from floe_dagster.core.operations import Operation
from floe_dagster.core.policies.policy import Policy, PolicySet
from floe_dagster.core.basics.tables import TableName
from floe_dagster.defs.health_events import assessment_events, fingerprint
from floe_dagster.defs.last_reported import Reported, read_reported, write_reported
from floe_dagster.defs.names import asset_key_for
from floe_dagster.iceberg.health_collector import HealthSnapshot

log = logging.getLogger(__name__)

_READ_CHUNK = 500  # asset records per read


def _newest_successes(history: Mapping[Any, Any] | None) -> dict[str, datetime]:
    newest: dict[str, datetime] = {}
    for key, past in (history or {}).items():
        started = getattr(past, "last_success_start", None)
        if started is None:
            continue
        started = naive_as_utc(started)
        qualified = key[0]
        if qualified not in newest or started > newest[qualified]:
            newest[qualified] = started
    return newest


def latest_materializations(
    instance: DagsterInstance, tables: Sequence[TableName]
) -> dict[AssetKey, AssetCheckEvaluationTargetMaterializationData]:
    """The latest materialization of each table's asset (any partition), in batched reads."""
    found: dict[AssetKey, AssetCheckEvaluationTargetMaterializationData] = {}
    keys = [asset_key_for(t) for t in tables]
    for start in range(0, len(keys), _READ_CHUNK):
        for record in instance.get_asset_records(keys[start:start + _READ_CHUNK]):
            entry = record.asset_entry
            last = entry.last_materialization_record
            if last is not None:
                found[entry.asset_key] = AssetCheckEvaluationTargetMaterializationData(
                    storage_id=last.storage_id, run_id=last.run_id, timestamp=last.timestamp)
    return found


_SEVERITY_ORDER = {CRITICAL: 0, WARNING: 1, HEALTHY: 2}
# How long a report waits for a successful run's materialization to land before reporting anyway.
MATERIALIZATION_WAIT = timedelta(minutes=10)


class _Candidate(NamedTuple):
    """A table whose health may be reported this call."""

    table: TableName
    assessment: HealthAssessment
    policy: Policy | None
    state: Reported  # what will be remembered once it is reported


def report_health_events(
    instance: DagsterInstance,
    snapshot_or_metrics_by_table: HealthSnapshot | Mapping[TableName, TableMetrics],
    policies: PolicySet,
    now: datetime,
    only: Iterable[TableName] | None = None,
    *,
    history: Mapping[tuple[str, Operation], OperationHistory] | None = None,
    debt_weights: DebtWeights | None = None,
    time_budget_s: float | None = None,
    timer=time.monotonic,
) -> int:
    """Record an observation and a ``health`` check evaluation for each table whose health changed
    since it was last reported; returns how many tables were reported (two events each).

    ``snapshot_or_metrics_by_table``: a :class:`~floe_dagster.iceberg.health_collector.HealthSnapshot` or a
    mapping TableName → TableMetrics. ``only``: consider only these tables (e.g. ``snapshot.computed``, or
    the code location's assets, so that no event names an asset Dagit does not know); None: every
    table given. A candidate is reported when its :func:`fingerprint` differs from the last one
    reported (new metadata, tier, status, issues or thresholds), or when a maintenance run of it
    succeeded since (``history``: ``Coordination.all_history()``): Dagit shows a check result only
    if it is newer than the asset's latest materialization, so after each maintenance run, even one
    that changed nothing (orphan cleanup never commits), the result is recorded again once the run's
    materialization is in the event log. ``debt_weights``: ``settings.debt``. With
    ``time_budget_s``, reporting stops when it is used up, most severe tables first; the rest keep
    their old state and are reported by the next call that considers them.
    """
    metrics_by_table = (snapshot_or_metrics_by_table.metrics
                        if isinstance(snapshot_or_metrics_by_table, HealthSnapshot) else snapshot_or_metrics_by_table)
    if only is None:
        candidates = list(metrics_by_table)
    else:
        candidates = [t for t in dict.fromkeys(only) if t in metrics_by_table]
    if not candidates:
        return 0
    started = timer()
    due, awaiting = _changed(instance, candidates, metrics_by_table, policies, now, history)
    # Each result names the asset's latest materialization (Dagit shows it as the result for that
    # materialization); after a run, only once the run's materialization is stored.
    latest = latest_materializations(instance, [item.table for item in (*due, *awaiting)])
    due += [item for item in awaiting if _materialized_or_waited(item, latest, now)]
    due.sort(key=lambda item: (_SEVERITY_ORDER.get(item.assessment.status, 3), item.table.qualified))
    reported: dict[str, Reported] = {}
    try:
        for table, report, policy, state in due:
            if time_budget_s is not None and reported and timer() - started >= time_budget_s:
                log.info("health reporting: time budget used up; %d of %d tables left for the next tick",
                         len(due) - len(reported), len(due))
                break
            events = assessment_events(table, report, policy, now, history, debt_weights,
                                       latest.get(asset_key_for(table)))
            instance.report_runless_asset_event(events.observation)
            instance.report_runless_asset_event(events.evaluation)
            reported[table.qualified] = state
    finally:
        if reported:
            write_reported(instance, reported)
    return len(reported)


def _changed(
    instance: DagsterInstance,
    candidates: Sequence[TableName],
    metrics_by_table: Mapping[TableName, TableMetrics],
    policies: PolicySet,
    now: datetime,
    history: Mapping[tuple[str, Operation], OperationHistory] | None,
) -> tuple[list[_Candidate], list[_Candidate]]:
    """The candidates to report: (due: the fingerprint changed, awaiting: a run of it succeeded since the
    last report, due once its materialization is stored)."""
    stored = read_reported(instance, candidates)
    successes = _newest_successes(history)
    due: list[_Candidate] = []
    awaiting: list[_Candidate] = []
    for table in candidates:
        policy, thresholds = thresholds_for(policies, table)
        report = assess_table(metrics_by_table[table], thresholds, now, history, policy)
        last = stored.get(table.qualified, Reported())
        state = Reported(fingerprint(report), last.run)
        newest_run = successes.get(table.qualified)
        if newest_run is not None and (last.run is None or newest_run > last.run):
            awaiting.append(_Candidate(table, report, policy, Reported(state.fingerprint, newest_run)))
        elif state.fingerprint != last.fingerprint:
            due.append(_Candidate(table, report, policy, state))
    return due, awaiting


def _materialized_or_waited(item: _Candidate, latest: Mapping[AssetKey, AssetCheckEvaluationTargetMaterializationData],
                            now: datetime) -> bool:
    """A table awaiting its run's materialization: stored now, or waited for long enough."""
    run = item.state.run
    assert run is not None
    materialized = latest.get(asset_key_for(item.table))
    return (materialized is not None and materialized.timestamp >= run.timestamp()) or now - run >= MATERIALIZATION_WAIT


__all__ = ["report_health_events", "latest_materializations", "MATERIALIZATION_WAIT"]
