"""Trigger conditions (a policy's ``triggerConditions``): a gate on every operation of the policy.

Evaluated in Floe's order (``TriggerEvaluator``):

1. the toggle ``condition-based-triggering-enabled`` is off, or the policy has no conditions → pass;
2. critical pipeline (``criticalPipeline`` with ``criticalPipelineMaxDelayMinutes``): forced when
   now ≥ last successful run + delay; a table that never ran is never forced. The force bypasses only
   this gate (the conditions and the minimum intervals);
3. ``minIntervalMinutes``, overridden per operation by ``perOperationMinIntervalMinutes``
   (``{REWRITE_DATA_FILES: 60}``) → blocked ``min_interval`` until last success + interval;
4. no thresholds → pass;
5. no health collected yet, or a threshold needs a value only a full health scan gives and the metrics
   lack it → blocked ``no_health``;
6. each threshold is met when measured ≥ threshold (despite the "Above" names, as in Floe), combined
   by ``triggerLogic`` OR (default: any met) or AND (all met) → else blocked ``conditions_unmet``.
   The stale-statistics thresholds (``statsStaleSnapshots``, ``statsStaleRowsPercent``) are also met
   by a table that has data and no statistics file at all.

Small files are files below the policy's ``healthThresholds.smallFileSizeBytes``.

An operation kind may have a condition of its own instead of the thresholds and the critical force
(its spec's ``due``; APPLY_TABLE_PROPERTIES: the table's drift from the policy's
``tableProperties``, blocked ``no_drift`` without). The minimum intervals still hold before it, and
with the toggle off only the kind's own condition decides.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Callable, Mapping

from floe_dagster.core.facts.health_assessment import DEFAULT_SMALL_FILE_SIZE_BYTES
from floe_dagster.core.basics.localtime import as_utc
from floe_dagster.core.facts.measurements import TableMetrics
from floe_dagster.core.operations import Operation
from floe_dagster.core.basics.quick_records import kept_property, quick_init
from floe_dagster.core.basics.validation import (
    Location,
    check_mapping,
    check_unknown,
    describe,
    get_bool,
    get_enum,
    get_number,
    raise_if_errors,
    standalone,
)

if TYPE_CHECKING:
    from floe_dagster.core.operation_kinds.spec import DueVerdict

# How soon unmet conditions are looked at again: the debt-score sensor's tick.
CONDITION_RECHECK = timedelta(seconds=60)


@dataclass(frozen=True)
class _Threshold:
    description: str
    full_tier: bool  # needs a value that only a full health scan (manifests read) provides
    maximum: float | None
    measure: Callable[[TableMetrics, int, datetime], float | None]
    # Met whatever the threshold when this holds (a table with data and no statistics at all is stale).
    met_anyway: Callable[[TableMetrics], bool] | None = None


def _small_count(m: TableMetrics, small: int, now: datetime) -> float | None:
    return m.small_file_count(small)


def _small_percent(m: TableMetrics, small: int, now: datetime) -> float | None:
    count = m.small_file_count(small)
    if count is None:
        return None
    return count * 100.0 / m.data_file_count if m.data_file_count else 0.0


def _oldest_age(m: TableMetrics, small: int, now: datetime) -> float | None:
    return TableMetrics.age_days(m.oldest_snapshot_ms, int(now.timestamp() * 1000))


def _without_statistics(m: TableMetrics) -> bool:
    return m.statistics_snapshot_id is None and (m.data_file_count > 0 or m.record_count > 0)


def _stats_snapshots_behind(m: TableMetrics, small: int, now: datetime) -> float | None:
    """Commits since the newest statistics file; without one, every snapshot is behind."""
    return m.snapshot_count if m.statistics_snapshot_id is None else m.statistics_snapshots_behind


def _stats_rows_percent(m: TableMetrics, small: int, now: datetime) -> float | None:
    """Rows changed since the newest statistics file, % of the table's rows; without one, all of them."""
    if m.statistics_snapshot_id is None:
        return 100.0 if _without_statistics(m) else 0.0
    return m.statistics_rows_changed_percent


THRESHOLDS: dict[str, _Threshold] = {
    "smallFilePercentageAbove": _Threshold("small files %", True, 100, _small_percent),
    "smallFileCountAbove": _Threshold("small files", True, None, _small_count),
    "totalFileSizeAboveBytes": _Threshold("total data bytes", False, None, lambda m, s, n: m.total_data_bytes),
    "deleteFileCountAbove": _Threshold("delete files", False, None, lambda m, s, n: m.delete_file_count),
    "deleteFileRatioAbove": _Threshold("delete files per data file", False, None, lambda m, s, n: m.delete_file_ratio),
    "snapshotCountAbove": _Threshold("snapshots", False, None, lambda m, s, n: m.snapshot_count),
    "snapshotAgeAboveDays": _Threshold("oldest snapshot age (days)", False, None, _oldest_age),
    "partitionCountAbove": _Threshold("partitions", True, None, lambda m, s, n: m.partition_count),
    "partitionSkewAbove": _Threshold("partition skew", True, None, lambda m, s, n: m.partition_skew),
    "manifestSizeAboveBytes": _Threshold("manifest bytes", True, None, lambda m, s, n: m.manifest_total_bytes),
    # Stale statistics (core/facts/statistics.py): met at this many commits, or this % of rows changed, since
    # the newest statistics file, and always on a table with data and no statistics at all.
    "statsStaleSnapshots": _Threshold("snapshots since the statistics", False, None, _stats_snapshots_behind,
                                      _without_statistics),
    "statsStaleRowsPercent": _Threshold("rows changed since the statistics (%)", False, None, _stats_rows_percent,
                                        _without_statistics),
}
# The raw field a full-tier threshold reads: None there means "not collected", not "nothing".
_FULL_TIER_SOURCES = {
    "smallFilePercentageAbove": ("data_file_sizes",),
    "smallFileCountAbove": ("data_file_sizes",),
    "partitionCountAbove": ("partition_count",),
    "partitionSkewAbove": ("partition_count", "max_files_per_partition"),
    "manifestSizeAboveBytes": ("manifest_total_bytes",),
}
GATE_FIELDS = (
    "minIntervalMinutes", "perOperationMinIntervalMinutes", "criticalPipeline", "criticalPipelineMaxDelayMinutes",
    "triggerLogic",
)
TRIGGER_CONDITION_FIELDS = tuple(THRESHOLDS) + GATE_FIELDS


@dataclass(frozen=True)
class TriggerConditions:
    thresholds: Mapping[str, float] = field(default_factory=dict)  # Floe's names → value
    min_interval_minutes: float | None = None
    per_operation_min_interval_minutes: Mapping[Operation, float] = field(default_factory=dict)
    critical_pipeline: bool = False
    critical_pipeline_max_delay_minutes: float | None = None
    trigger_logic: str = "OR"

    @classmethod
    def from_mapping(cls, raw: Mapping[str, object]) -> "TriggerConditions":
        at = standalone()
        conditions = parse_trigger_conditions(at, raw)
        raise_if_errors(at, "trigger conditions")
        return conditions

    def min_interval(self, operation: Operation) -> timedelta | None:
        # Kept on the (frozen) conditions, per operation: every decision that reaches the gate asks.
        kept = self.__dict__.setdefault("_min_intervals", {})  # not a field: equality and to_json ignore it
        if operation in kept:
            return kept[operation]
        minutes = self.per_operation_min_interval_minutes.get(operation, self.min_interval_minutes)
        found = kept[operation] = timedelta(minutes=minutes) if minutes else None
        return found

    @kept_property  # kept on the (frozen) conditions, as min_interval's: read for every decision of a tick
    def critical_delay(self) -> timedelta | None:
        if not self.critical_pipeline or self.critical_pipeline_max_delay_minutes is None:
            return None
        return timedelta(minutes=self.critical_pipeline_max_delay_minutes)

    def to_json(self) -> dict[str, object]:
        data: dict[str, object] = dict(self.thresholds)
        if self.min_interval_minutes is not None:
            data["minIntervalMinutes"] = self.min_interval_minutes
        if self.per_operation_min_interval_minutes:
            data["perOperationMinIntervalMinutes"] = {
                op.value: minutes for op, minutes in self.per_operation_min_interval_minutes.items()}
        if self.critical_pipeline:
            data["criticalPipeline"] = True
        if self.critical_pipeline_max_delay_minutes is not None:
            data["criticalPipelineMaxDelayMinutes"] = self.critical_pipeline_max_delay_minutes
        data["triggerLogic"] = self.trigger_logic
        return data


@quick_init  # a tick makes tens of thousands
@dataclass(frozen=True)
class ConditionCheck:
    name: str
    measured: float | None
    threshold: float

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "measured": self.measured, "threshold": self.threshold}


@quick_init  # a tick makes tens of thousands
@dataclass(frozen=True)
class ConditionResult:
    """The gate's verdict. ``passed`` lets the work through (``forced`` says the critical-pipeline
    deadline did); otherwise ``blocked_code`` is ``min_interval``, ``no_health`` or
    ``conditions_unmet`` and ``next_eligible`` says when to look again."""

    passed: bool
    forced: bool = False
    blocked_code: str | None = None
    detail: str = ""
    met: tuple[ConditionCheck, ...] = ()
    unmet: tuple[ConditionCheck, ...] = ()
    skipped: tuple[str, ...] = ()  # thresholds with nothing to measure (e.g. the age of no snapshot)
    next_eligible: datetime | None = None
    logic: str = "OR"
    evaluated: bool = True  # False when the toggle is off or there are no conditions
    drift: tuple[Any, ...] = ()  # a kind's own condition's facts (the declared properties the table lacks)
    floe_met: tuple[str, ...] = ()  # a kind's own condition in Floe's words (metConditions / unmetConditions)
    floe_unmet: tuple[str, ...] = ()

    def to_json(self) -> dict[str, object]:
        return {
            "passed": self.passed,
            "forced": self.forced,
            "blocked": self.blocked_code,
            "detail": self.detail,
            "logic": self.logic,
            "met": [c.to_json() for c in self.met],
            "unmet": [c.to_json() for c in self.unmet],
            "skipped": list(self.skipped),
            "next_eligible": self.next_eligible.isoformat() if self.next_eligible else None,
            **({"drift": [d.to_json() for d in self.drift]} if self.drift else {}),
        }


def evaluate_conditions(
    conditions: TriggerConditions | None,
    operation: Operation,
    metrics: TableMetrics | None,
    last_success_start: datetime | None,
    now: datetime,
    *,
    small_file_size_bytes: int = DEFAULT_SMALL_FILE_SIZE_BYTES,
    enabled: bool = True,
    own_condition: Callable[[TableMetrics | None], "DueVerdict"] | None = None,
) -> ConditionResult:
    """The trigger-condition gate for one (table, operation); see the module docstring for the order.

    ``last_success_start``: when the last successful run of this (table, operation) started.
    ``enabled``: the scheduler's ``condition-based-triggering-enabled`` toggle.
    ``own_condition``: the operation kind's own condition (its spec's ``due`` with the policy's
    config), in place of the thresholds and the critical force.
    """
    now = as_utc(now)
    if own_condition is not None:
        return _own_condition(conditions if enabled else None, operation, own_condition, metrics,
                              last_success_start, now)
    if not enabled:
        return _TRIGGERING_DISABLED
    if conditions is None:
        return _NO_CONDITIONS
    logic = conditions.trigger_logic
    last = as_utc(last_success_start) if last_success_start is not None else None

    delay = conditions.critical_delay
    if delay is not None and last is not None and now >= last + delay:
        return ConditionResult(True, forced=True, logic=logic,
                               detail=f"critical pipeline: last success {last.isoformat()} is more than "
                                      f"{conditions.critical_pipeline_max_delay_minutes:g} minutes ago")

    waiting = _min_interval_wait(conditions, operation, last, now)
    if waiting is not None:
        return waiting

    if not conditions.thresholds:
        return _NO_THRESHOLDS.get(logic) or ConditionResult(True, logic=logic, detail="no thresholds")
    if metrics is None:
        return ConditionResult(False, blocked_code="no_health", next_eligible=now + CONDITION_RECHECK, logic=logic,
                               detail="thresholds are set but the table's health has not been collected yet")
    missing = [name for name in conditions.thresholds
               if any(getattr(metrics, source) is None for source in _FULL_TIER_SOURCES.get(name, ()))]
    if missing:
        return ConditionResult(False, blocked_code="no_health", next_eligible=now + CONDITION_RECHECK, logic=logic,
                               detail=f"{', '.join(missing)} need(s) a full health scan; only the "
                                      f"{metrics.tier} tier was collected")

    return _thresholds(conditions, metrics, small_file_size_bytes, now)


# The verdicts that read nothing of the table or the clock: one record each (immutable), not one per decision.
_TRIGGERING_DISABLED = ConditionResult(True, detail="condition-based triggering is disabled", evaluated=False)
_NO_CONDITIONS = ConditionResult(True, detail="no trigger conditions", evaluated=False)
_NO_THRESHOLDS = {logic: ConditionResult(True, logic=logic, detail="no thresholds") for logic in ("OR", "AND")}


def _thresholds(conditions: TriggerConditions, metrics: TableMetrics, small_file_size_bytes: int,
                now: datetime) -> ConditionResult:
    """Each threshold measured and met (measured ≥ threshold), combined by ``triggerLogic``."""
    logic = conditions.trigger_logic
    met, unmet, skipped, unconditional = [], [], [], set()
    for name, threshold in conditions.thresholds.items():
        spec = THRESHOLDS[name]
        measured = spec.measure(metrics, small_file_size_bytes, now)
        if measured is None:
            skipped.append(name)
            continue
        check = ConditionCheck(name, round(float(measured), 6), threshold)
        if measured < threshold and spec.met_anyway is not None and spec.met_anyway(metrics):
            unconditional.add(name)
        (met if measured >= threshold or name in unconditional else unmet).append(check)
    passed = bool(met) if logic == "OR" else not unmet
    summary = ", ".join(f"{c.name}: the table has data and no statistics" if c.name in unconditional
                        else f"{c.name} {c.measured:g} ≥ {c.threshold:g}" for c in met) or "none"
    if passed:
        return ConditionResult(True, logic=logic, met=tuple(met), unmet=tuple(unmet), skipped=tuple(skipped),
                               detail=f"conditions met ({logic}): {summary}")
    missed = ", ".join(f"{c.name} {c.measured:g} < {c.threshold:g}" for c in unmet) or "nothing measurable"
    return ConditionResult(False, blocked_code="conditions_unmet", next_eligible=now + CONDITION_RECHECK, logic=logic,
                           met=tuple(met), unmet=tuple(unmet), skipped=tuple(skipped),
                           detail=f"conditions not met ({logic}): {missed}")


def _min_interval_wait(conditions: TriggerConditions, operation: Operation, last: datetime | None,
                       now: datetime) -> ConditionResult | None:
    """Blocked ``min_interval`` while the operation's minimum interval since its last success runs."""
    min_interval = conditions.min_interval(operation)
    if min_interval is None or last is None or last + min_interval <= now:
        return None
    until = last + min_interval
    return ConditionResult(False, blocked_code="min_interval", next_eligible=until, logic=conditions.trigger_logic,
                           detail=f"minimum interval {min_interval.total_seconds() / 60:g} min since the last "
                                  f"success at {last.isoformat()}; eligible at {until.isoformat()}")


def _own_condition(conditions: TriggerConditions | None, operation: Operation,
                   check: Callable[[TableMetrics | None], "DueVerdict"], metrics: TableMetrics | None,
                   last_success_start: datetime | None, now: datetime) -> ConditionResult:
    """A kind's own gate: the minimum intervals, then the kind's condition (core/operation_kinds)."""
    if conditions is not None:
        last = as_utc(last_success_start) if last_success_start is not None else None
        waiting = _min_interval_wait(conditions, operation, last, now)
        if waiting is not None:
            return waiting
    verdict = check(metrics)
    if not verdict.due:
        return ConditionResult(False, blocked_code=verdict.code, next_eligible=now + CONDITION_RECHECK,
                               detail=verdict.detail, floe_unmet=verdict.floe_unmet)
    return ConditionResult(True, drift=verdict.facts, detail=verdict.detail, floe_met=verdict.floe_met)


def parse_trigger_conditions(at: Location, raw: object) -> TriggerConditions | None:
    mapping = check_mapping(at, raw)
    if mapping is None:
        return None
    check_unknown(at, mapping, TRIGGER_CONDITION_FIELDS)
    thresholds: dict[str, float] = {}
    for name, spec in THRESHOLDS.items():
        value = get_number(at, mapping, name, None, minimum=0, maximum=spec.maximum)
        if value is not None:
            thresholds[name] = value
    min_interval = get_number(at, mapping, "minIntervalMinutes", None, minimum=0)
    per_operation: dict[Operation, float] = {}
    raw_per_op = mapping.get("perOperationMinIntervalMinutes")
    if raw_per_op is not None:
        here = at.child("perOperationMinIntervalMinutes")
        if not isinstance(raw_per_op, Mapping):
            here.error(f"expected a mapping of operation name to minutes, got {describe(raw_per_op)}")
        else:
            for key in raw_per_op:
                try:
                    op = Operation.parse(str(key))
                except ValueError as exc:
                    here.child(str(key)).error(str(exc))
                    continue
                minutes = get_number(here, raw_per_op, key, None, minimum=0)
                if minutes is not None:
                    per_operation[op] = minutes
    critical = get_bool(at, mapping, "criticalPipeline", False)
    delay = get_number(at, mapping, "criticalPipelineMaxDelayMinutes", None, above=0)
    if critical and delay is None and "criticalPipelineMaxDelayMinutes" not in mapping:
        at.child("criticalPipeline").warn("is true but criticalPipelineMaxDelayMinutes is not set: never forced")
    if delay is not None and not critical:
        at.child("criticalPipelineMaxDelayMinutes").warn("has no effect unless criticalPipeline is true")
    logic = get_enum(at, mapping, "triggerLogic", ("OR", "AND"), "OR")
    return TriggerConditions(thresholds, min_interval, per_operation, critical, delay, logic)


__all__ = [
    "TriggerConditions", "ConditionResult", "ConditionCheck", "evaluate_conditions", "parse_trigger_conditions",
    "THRESHOLDS", "TRIGGER_CONDITION_FIELDS", "CONDITION_RECHECK",
]


# -- Floe's words for the gate's verdict (trigger status: metConditions / unmetConditions) ---------

NO_MATCHING_POLICY = "No matching policy"
OPERATION_DISABLED = "Operation disabled in policy"
NO_CONDITIONS = "No conditions configured"
CRITICAL_DEADLINE = "Critical pipeline deadline exceeded"
NO_HEALTH = "No health data available"

# Floe's format of each threshold check; the met form compares with ">=", the unmet with "<".
_FLOE_FORMATS = {
    "smallFilePercentageAbove": "Small file %: {m:.1f}% {op} {t:.1f}%",
    "smallFileCountAbove": "Small file count: {m:.0f} {op} {t:.0f}",
    "totalFileSizeAboveBytes": "Total size: {m:.0f} bytes {op} {t:.0f} bytes",
    "deleteFileCountAbove": "Delete file count: {m:.0f} {op} {t:.0f}",
    "deleteFileRatioAbove": "Delete file ratio: {m:.2f} {op} {t:.2f}",
    "snapshotCountAbove": "Snapshot count: {m:.0f} {op} {t:.0f}",
    "snapshotAgeAboveDays": "Snapshot age: {m:.0f} days {op} {t:.0f} days",
    "partitionCountAbove": "Partition count: {m:.0f} {op} {t:.0f}",
    "partitionSkewAbove": "Partition skew: {m:.2f}x {op} {t:.2f}x",
    "manifestSizeAboveBytes": "Manifest size: {m:.0f} bytes {op} {t:.0f} bytes",
    "statsStaleSnapshots": "Snapshots since statistics: {m:.0f} {op} {t:.0f}",
    "statsStaleRowsPercent": "Rows changed since statistics: {m:.1f}% {op} {t:.1f}%",
}


def floe_condition_text(check: ConditionCheck, met: bool) -> str:
    """One threshold check in Floe's words, e.g. ``Small file %: 45.0% >= 30.0%``."""
    template = _FLOE_FORMATS.get(check.name)
    if template is None or check.measured is None:
        measured = "unknown" if check.measured is None else f"{check.measured:g}"
        return f"{check.name}: {measured} {'>=' if met else '<'} {check.threshold:g}"
    return template.format(m=check.measured, t=check.threshold, op=">=" if met else "<")


def floe_condition_strings(result: ConditionResult | None, now: datetime) -> tuple[list[str], list[str]]:
    """The gate's verdict as Floe's trigger status lists it: (metConditions, unmetConditions)."""
    if result is None or not result.evaluated:
        return [NO_CONDITIONS], []
    if result.forced:
        return [CRITICAL_DEADLINE], []
    if result.blocked_code == "min_interval" and result.next_eligible is not None:
        minutes = int((result.next_eligible - as_utc(now)).total_seconds() // 60)
        return [], [f"Min interval: {max(0, minutes)} minutes remaining"]
    if result.blocked_code == "no_health":
        return [], [NO_HEALTH]
    if result.floe_met or result.floe_unmet:  # a kind's own condition says it in its words
        return list(result.floe_met), list(result.floe_unmet)
    met = [floe_condition_text(c, True) for c in result.met]
    unmet = [floe_condition_text(c, False) for c in result.unmet]
    return (met or ([] if unmet else [NO_CONDITIONS])), unmet
