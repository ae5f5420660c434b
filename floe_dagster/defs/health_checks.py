"""Table health where users see it: Dagit's asset pages.

Two things per table asset, both recorded **without a run** (``instance.report_runless_asset_event``):

* an ``AssetObservation`` whose metadata are the health numbers as numbers (data files, small-file
  percent, delete-file ratio, snapshots, manifests, bytes, partition skew, debt score...), so the
  asset's plots show them over time, plus the status, tier and policy as text, and Dagster's
  standard table metadata (row count, columns, table name, location: defs/table_metadata.py);
* an ``AssetCheckEvaluation`` of the table's ``health`` check: passed when healthy, severity WARN
  for warnings, ERROR for critical issues, the issues listed in its metadata. It names the asset's
  latest materialization (``target_materialization_data``): Dagit shows a check result only when it
  belongs to the latest materialization.

When: :func:`report_health_events`, called by the debt-score sensor's tick with the health it has
just gathered, reports a table only when what Dagit shows for it would change:

* its fingerprint changed: the table's metadata file (any commit), the metrics' tier, the status,
  the issues (type and severity) or the thresholds. So an unchanged table is never reported again,
  and a status that changes with time alone (stale metadata, old snapshots) is reported once;
* or a maintenance run of it succeeded since the last report (from the coordination history): its
  materialization would hide the last result, even when the run committed nothing (orphan cleanup
  never commits). It is reported once the run's materialization is in the event log.

What was last reported is kept per table in the instance's key-value store (the daemon cursors'
table), so the answer is the same whichever process (sensor, schedule, CLI) collected the health
first. Writes are bounded by a time budget, most severe tables first; the rest follow on the next tick.

The checks: one ``health`` :class:`AssetCheckSpec` per table asset, declared in their own
checks definition (:func:`build_health_checks`), **not** as ``check_specs`` of the table
multi-asset: check specs there would plan the check in every maintenance run, which the maintenance
op does not evaluate, so each run would leave a "planned, never evaluated" execution as the check's
latest. Dagster stores a runless evaluation whether or not the check is declared, but Dagit lists
only declared checks. The checks definition can also be executed (Dagit's "Execute" on the Checks
tab): it collects the selected tables' health now and records the same observation and result. The
maintenance job must not select it (``AssetSelection.assets(...).without_checks()``), or every
maintenance run would run it too. ``health.checks: false`` in floe.yaml leaves the checks out (the
observations are still recorded): at 5,000 tables they add about 1.6 s to a code location load
(``dagster definitions validate`` 6.0 → 7.6 s, snapshot 9.1 → 12.9 MB; benchmarks/bench_health_checks.py).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Iterable, Mapping, NamedTuple, Sequence

from dagster import (
    AssetCheckEvaluation,
    AssetCheckResult,
    AssetChecksDefinition,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetKey,
    AssetObservation,
    DagsterInstance,
    In,
    MetadataValue,
    Nothing,
    Out,
    op,
)
from dagster._core.definitions.asset_checks.asset_check_evaluation import (  # the record's type; not exported
    AssetCheckEvaluationTargetMaterializationData,
)

from floe_dagster.defs.names import COORDINATION_RESOURCE
from floe_dagster.core.debt import DebtWeights
from floe_dagster.core.health import CRITICAL, HEALTHY, WARNING, HealthAssessment, assess_health
from floe_dagster.core.history import OperationHistory
from floe_dagster.core.localtime import naive_as_utc
from floe_dagster.core.metrics import TableMetrics
from floe_dagster.core.operations import Operation
from floe_dagster.core.policy import Policy, PolicySet
from floe_dagster.core.table_health import health_record, thresholds_for
from floe_dagster.core.tables import TableName
from floe_dagster.defs.names import asset_key_for, escaped_name, table_for_asset_key
from floe_dagster.defs.table_metadata import table_metadata
from floe_dagster.iceberg.catalog import open_catalog
from floe_dagster.iceberg.health_collector import HealthCollector, HealthSnapshot
from floe_dagster.policies import load_policy_set
from floe_dagster.settings import Settings

log = logging.getLogger(__name__)

HEALTH_CHECK_NAME = "health"
HEALTH_CHECKS_NAME = "iceberg_table_health"
KV_PREFIX = "floe/health-reported/"  # + qualified name → fingerprint of what was last reported
_KV_CHUNK = 500

# The numbers recorded as observation metadata: (record section, key). Floats stay floats, ints ints.
OBSERVED_NUMBERS: tuple[tuple[str, str], ...] = (
    ("derived", "data_file_count"),
    ("derived", "total_data_bytes"),
    ("metrics", "record_count"),
    ("derived", "small_file_count"),
    ("derived", "small_file_percent"),
    ("derived", "large_file_count"),
    ("derived", "large_file_percent"),
    ("derived", "avg_file_bytes"),
    ("derived", "delete_file_count"),
    ("metrics", "position_delete_file_count"),
    ("metrics", "equality_delete_file_count"),
    ("derived", "delete_file_ratio"),
    ("derived", "snapshot_count"),
    ("derived", "oldest_snapshot_age_days"),
    ("derived", "newest_snapshot_age_days"),
    ("derived", "manifest_count"),
    ("derived", "manifest_total_bytes"),
    ("derived", "partition_count"),
    ("derived", "partition_skew"),
)


# -- settings ------------------------------------------------------------------------------------------


def health_checks_enabled(settings: Settings) -> bool:
    """``health.checks`` in floe.yaml (default true)."""
    return settings.health.checks


# -- check specs and the checks definition ----------------------------------------------------------------


def _escaped(key: AssetKey) -> str:
    """A Dagster name (``[A-Za-z0-9_]+``) for an asset key, distinct for distinct keys."""
    return escaped_name(key.path)


def check_output_name(key: AssetKey) -> str:
    return f"health__{_escaped(key)}"


def health_check_specs(tables: Sequence[TableName]) -> list[AssetCheckSpec]:
    """One ``health`` check per table asset (unpartitioned: health is the table's, not an operation's)."""
    return [
        AssetCheckSpec(
            HEALTH_CHECK_NAME,
            asset=asset_key_for(table),
            description=(
                "Health under the effective policy's healthThresholds: passes when healthy, WARN on "
                "warnings, ERROR on critical issues. Reported by the debt-score sensor whenever the "
                "table's metadata or health changes (no run needed); Execute collects it now."
            ),
            blocking=False,
        )
        for table in tables
    ]


def build_health_checks(tables: Sequence[TableName], settings: Settings, *, with_deps: bool = False) -> AssetChecksDefinition:
    """The ``health`` checks of every table in one subsettable checks definition."""
    specs = health_check_specs(tables)
    outs = {check_output_name(spec.asset_key): Out(Nothing, is_required=False) for spec in specs}
    # No inputs: ``@multi_asset_check`` would give the op one input per checked asset, and Dagster's
    # job building then costs O(tables²) (asset_job.build_node_deps: 4 s more at 5,000 tables).
    # Health is read from the catalog, not from an upstream output, so nothing is lost but the
    # ordering after a maintenance step in a combined run.
    ins = {f"in__{_escaped(spec.asset_key)}": In(Nothing) for spec in specs} if with_deps else {}

    @op(name=HEALTH_CHECKS_NAME, ins=ins, out=outs, required_resource_keys={COORDINATION_RESOURCE},
        description="Collects the selected tables' health now and records it (observation and check result).")
    def iceberg_table_health(context):  # no annotation: Dagster reads it before `annotations` resolve
        yield from _evaluate_checks(context, settings)

    return AssetChecksDefinition.create(
        keys_by_input_name={name: key for name, key in zip(ins, (s.asset_key for s in specs))},
        node_def=iceberg_table_health,
        check_specs_by_output_name={check_output_name(spec.asset_key): spec for spec in specs},
        can_subset=True,
    )


def _evaluate_checks(context, settings: Settings):
    keys = sorted(context.selected_asset_check_keys, key=lambda k: k.asset_key.to_string())
    tables = [table_for_asset_key(key.asset_key) for key in keys]
    now = datetime.now(timezone.utc)
    policies = load_policy_set(settings)
    history = getattr(context.resources, COORDINATION_RESOURCE).coordination.all_history()
    with HealthCollector(open_catalog(settings.catalog), settings) as collector:
        snapshot = collector.collect(tables, tier="full")
    remembered: dict[str, str] = {}
    for table in tables:
        metrics = snapshot.metrics.get(table)
        if metrics is None:
            yield AssetCheckResult(
                asset_key=asset_key_for(table), check_name=HEALTH_CHECK_NAME, passed=False,
                severity=AssetCheckSeverity.WARN,
                description=f"no health: {snapshot.errors.get(table, 'not collected')}",
            )
            continue
        events = table_health_events(table, metrics, policies, now, history, settings.debt)
        yield events.observation
        evaluation = events.evaluation
        yield AssetCheckResult(
            asset_key=evaluation.asset_key, check_name=evaluation.check_name, passed=evaluation.passed,
            severity=evaluation.severity, metadata=evaluation.metadata, description=evaluation.description,
        )
        remembered[table.qualified] = events.fingerprint
    _remember_fingerprints(context.instance, remembered)


# -- events ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TableHealthEvents:
    table: TableName
    status: str
    fingerprint: str
    observation: AssetObservation
    evaluation: AssetCheckEvaluation


# Part of every fingerprint: bumped when the observation gains keys, so that each table is reported
# once more with them. 2: Dagster's standard table metadata.
OBSERVATION_FORMAT = 2


def fingerprint(report: HealthAssessment) -> str:
    """What Dagit shows for a table changes exactly when this does: the table's metadata file, the
    metrics' tier, the status, the issues (type and severity), the thresholds, or what an
    observation holds (:data:`OBSERVATION_FORMAT`)."""
    text = json.dumps([
        OBSERVATION_FORMAT, report.metrics.metadata_location, report.tier, report.status,
        sorted((issue.type.value, issue.severity.value) for issue in report.issues),
        report.thresholds.to_json(),
    ], sort_keys=True, separators=(",", ":"))
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


def _number(value: Any) -> MetadataValue | None:
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return MetadataValue.int(value)
    return MetadataValue.float(float(value))


def observation_metadata(record: Mapping[str, Any]) -> dict[str, Any]:
    """The observation's metadata: every health number as a number, then status and context as text."""
    metadata: dict[str, Any] = {}
    for section, key in OBSERVED_NUMBERS:
        value = _number(record[section].get(key))
        if value is not None:
            metadata[key] = value
    debt = record["debt"]
    metadata["debt_score"] = MetadataValue.float(float(debt["score"]))
    metadata["critical_issues"] = MetadataValue.int(debt["inputs"]["critical_issues"])
    metadata["warning_issues"] = MetadataValue.int(debt["inputs"]["warning_issues"])
    metadata["status"] = MetadataValue.text(record["status"])
    metadata["tier"] = MetadataValue.text(record["tier"])
    metadata["policy"] = MetadataValue.text(record["policy"] or "")
    snapshot_id = record["metrics"].get("current_snapshot_id")
    metadata["snapshot_id"] = MetadataValue.text("" if snapshot_id is None else str(snapshot_id))
    metadata["metadata_location"] = MetadataValue.text(record["metrics"].get("metadata_location") or "")
    # What the HTTP API's health history serves in Floe's shape (reports/health_report.py).
    for key in ("min_file_bytes", "max_file_bytes"):
        value = _number(record["metrics"].get(key))
        if value is not None:
            metadata[key] = value
    metadata["assessed_at"] = MetadataValue.text(record["assessed_at"])
    metadata["issues"] = MetadataValue.json(
        [{"type": i["type"], "severity": i["severity"], "message": i["message"]} for i in record["issues"]])
    metadata["thresholds"] = MetadataValue.json(record["thresholds"])
    return metadata


def _issue_line(issue: Mapping[str, Any]) -> str:
    return f"{issue['severity']}: {issue['message']}"


def check_evaluation(
    table: TableName, record: Mapping[str, Any], target: AssetCheckEvaluationTargetMaterializationData | None = None
) -> AssetCheckEvaluation:
    status = record["status"]
    issues = record["issues"]
    counted = [i for i in issues if i["severity"] in ("warning", "critical")]
    metadata: dict[str, Any] = {
        "status": MetadataValue.text(status),
        "critical_issues": MetadataValue.int(sum(1 for i in issues if i["severity"] == "critical")),
        "warning_issues": MetadataValue.int(sum(1 for i in issues if i["severity"] == "warning")),
        "debt_score": MetadataValue.float(float(record["debt"]["score"])),
        "thresholds_from": MetadataValue.text(record["thresholds_from"]),
        "issues": MetadataValue.json(issues),
    }
    for issue in issues:
        metadata[f"issue {issue['type']}"] = MetadataValue.text(_issue_line(issue))
    if status == HEALTHY:
        description = "healthy" + (f" ({'; '.join(_issue_line(i) for i in issues)})" if issues else "")
    else:
        description = f"{status}: " + "; ".join(_issue_line(i) for i in counted)
    return AssetCheckEvaluation(
        asset_key=asset_key_for(table),
        check_name=HEALTH_CHECK_NAME,
        passed=status == HEALTHY,
        severity=AssetCheckSeverity.ERROR if status == CRITICAL else AssetCheckSeverity.WARN,
        metadata=metadata,
        description=description[:2000],
        target_materialization_data=target,
    )


def table_health_events(
    table: TableName,
    metrics: TableMetrics,
    policies: PolicySet,
    now: datetime,
    history: Mapping[Any, Any] | None = None,
    debt_weights: DebtWeights | None = None,
) -> TableHealthEvents:
    policy, thresholds = thresholds_for(policies, table)
    report = assess_health(metrics, thresholds, now)
    return _events(table, report, policy, now, history, debt_weights)


def _events(table, report, policy, now, history, debt_weights, target=None) -> TableHealthEvents:
    record = health_record(report, policy, history, now, debt_weights)
    metrics = report.metrics
    observation = AssetObservation(
        asset_key=asset_key_for(table),
        description=f"health: {record['status']} ({record['tier']} tier)",
        metadata={**observation_metadata(record),
                  **table_metadata(table.qualified, metrics.location, metrics.record_count, metrics.columns)},
    )
    return TableHealthEvents(table, record["status"], fingerprint(report), observation,
                             check_evaluation(table, record, target))


# -- what was last reported, per table (the instance's key-value store) --------------------------------------


@dataclass(frozen=True)
class _Reported:
    fingerprint: str | None = None
    run: datetime | None = None  # the newest successful maintenance run it was reported after

    def dump(self) -> str:
        return json.dumps({"fp": self.fingerprint, "run": self.run.isoformat() if self.run else None},
                          separators=(",", ":"))

    @classmethod
    def load(cls, text: str | None) -> "_Reported":
        try:
            data = json.loads(text) if text else {}
            run = datetime.fromisoformat(data["run"]) if data.get("run") else None
            return cls(data.get("fp"), run)
        except (ValueError, TypeError, KeyError, AttributeError):
            return cls()


def _kv_key(table: TableName | str) -> str:
    return KV_PREFIX + (table if isinstance(table, str) else table.qualified)


def _read_reported(instance: DagsterInstance, tables: Iterable[TableName]) -> dict[str, _Reported]:
    keys = [_kv_key(t) for t in tables]
    found: dict[str, str] = {}
    for start in range(0, len(keys), _KV_CHUNK):
        found.update(instance.run_storage.get_cursor_values(set(keys[start:start + _KV_CHUNK])))
    return {key[len(KV_PREFIX):]: _Reported.load(value) for key, value in found.items()}


def _write_reported(instance: DagsterInstance, by_qualified: Mapping[str, _Reported]) -> None:
    items = [(_kv_key(q), state.dump()) for q, state in by_qualified.items()]
    for start in range(0, len(items), _KV_CHUNK):
        instance.run_storage.set_cursor_values(dict(items[start:start + _KV_CHUNK]))


def _remember_fingerprints(instance: DagsterInstance, fingerprints: Mapping[str, str]) -> None:
    """After a run evaluated the checks: keep each table's last run marker, update the fingerprint."""
    if not fingerprints:
        return
    before = _read_reported(instance, list(fingerprints))
    _write_reported(instance, {q: _Reported(fp, before.get(q, _Reported()).run) for q, fp in fingerprints.items()})


def forget_reported(instance: DagsterInstance, tables: Iterable[TableName]) -> None:
    """Make the next report record these tables again (e.g. after wiping their asset history)."""
    _write_reported(instance, {t.qualified: _Reported() for t in tables})


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


def _latest_materializations(
    instance: DagsterInstance, tables: Sequence[TableName]
) -> dict[AssetKey, AssetCheckEvaluationTargetMaterializationData]:
    """The latest materialization of each table's asset (any partition), in batched reads."""
    found: dict[AssetKey, AssetCheckEvaluationTargetMaterializationData] = {}
    keys = [asset_key_for(t) for t in tables]
    for start in range(0, len(keys), _KV_CHUNK):
        for record in instance.get_asset_records(keys[start:start + _KV_CHUNK]):
            entry = record.asset_entry
            last = entry.last_materialization_record
            if last is not None:
                found[entry.asset_key] = AssetCheckEvaluationTargetMaterializationData(
                    storage_id=last.storage_id, run_id=last.run_id, timestamp=last.timestamp)
    return found


# -- reporting -------------------------------------------------------------------------------------------------

_SEVERITY_ORDER = {CRITICAL: 0, WARNING: 1, HEALTHY: 2}
# How long a report waits for a successful run's materialization to land before reporting anyway.
MATERIALIZATION_WAIT = timedelta(minutes=10)


class _Candidate(NamedTuple):
    """A table whose health may be reported this call."""

    table: TableName
    assessment: HealthAssessment
    policy: Policy | None
    state: _Reported  # what will be remembered once it is reported


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

    ``snapshot_or_metrics_by_table``: a :class:`~floe_dagster.iceberg.health_collector.HealthSnapshot` or a mapping
    TableName → TableMetrics. ``only``: consider only these tables (e.g. ``snapshot.computed``, or
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
    metrics_by_table = (snapshot_or_metrics_by_table.metrics if isinstance(snapshot_or_metrics_by_table, HealthSnapshot)
                        else snapshot_or_metrics_by_table)
    if only is None:
        candidates = list(metrics_by_table)
    else:
        candidates = [t for t in dict.fromkeys(only) if t in metrics_by_table]
    if not candidates:
        return 0
    started = timer()
    stored = _read_reported(instance, candidates)
    successes = _newest_successes(history)
    due: list[_Candidate] = []
    awaiting: list[_Candidate] = []
    for table in candidates:
        policy, thresholds = thresholds_for(policies, table)
        report = assess_health(metrics_by_table[table], thresholds, now)
        last = stored.get(table.qualified, _Reported())
        state = _Reported(fingerprint(report), last.run)
        newest_run = successes.get(table.qualified)
        if newest_run is not None and (last.run is None or newest_run > last.run):
            awaiting.append(_Candidate(table, report, policy, _Reported(state.fingerprint, newest_run)))
        elif state.fingerprint != last.fingerprint:
            due.append(_Candidate(table, report, policy, state))
    # Each result names the asset's latest materialization (Dagit shows it as the result for that
    # materialization); after a run, only once the run's materialization is stored.
    latest = _latest_materializations(instance, [item.table for item in (*due, *awaiting)])
    for item in awaiting:
        run = item.state.run
        assert run is not None
        materialized = latest.get(asset_key_for(item.table))
        if (materialized is not None and materialized.timestamp >= run.timestamp()) or now - run >= MATERIALIZATION_WAIT:
            due.append(item)
    due.sort(key=lambda item: (_SEVERITY_ORDER.get(item.assessment.status, 3), item.table.qualified))
    reported: dict[str, _Reported] = {}
    try:
        for table, report, policy, state in due:
            if time_budget_s is not None and reported and timer() - started >= time_budget_s:
                log.info("health reporting: time budget used up; %d of %d tables left for the next tick",
                         len(due) - len(reported), len(due))
                break
            events = _events(table, report, policy, now, history, debt_weights, latest.get(asset_key_for(table)))
            instance.report_runless_asset_event(events.observation)
            instance.report_runless_asset_event(events.evaluation)
            reported[table.qualified] = state
    finally:
        if reported:
            _write_reported(instance, reported)
    return len(reported)


__all__ = [
    "HEALTH_CHECK_NAME", "HEALTH_CHECKS_NAME", "health_check_specs", "build_health_checks", "health_checks_enabled",
    "report_health_events", "table_health_events", "check_evaluation", "observation_metadata", "fingerprint",
    "forget_reported", "check_output_name", "MATERIALIZATION_WAIT",
]
