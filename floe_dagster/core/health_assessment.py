"""Table health: thresholds (a policy's ``healthThresholds``), issues and the overall status.

Threshold fields (camelCase in policies; defaults are Floe's ``HealthThresholds.defaults()``):

======================================  ===================  =====================================
field                                   default              measured
======================================  ===================  =====================================
smallFileSizeBytes                      104857600 (100 MiB)  a data file below it is small
smallFilePercentWarning / ...Critical   20 / 50              small files × 100 / data files
largeFileSizeBytes                      1073741824 (1 GiB)   a data file above it is large
largeFilePercentWarning / ...Critical   20 / 50              large files × 100 / data files
fileCountWarning / ...Critical          10000 / 50000        data files
snapshotCountWarning / ...Critical      100 / 500            snapshots
snapshotAgeWarningDays / ...CriticalDays  7 / 30             age of the oldest snapshot
deleteFileCountWarning / ...Critical    100 / 500            delete files (position + equality)
deleteFileRatioWarning / ...Critical    0.10 / 0.25          delete files / data files
manifestCountWarning / ...Critical      100 / 500            manifests
manifestSizeWarningBytes / ...CriticalBytes  100 MiB / 500 MiB  total manifest bytes
partitionCountWarning / ...Critical     5000 / 10000         partitions
partitionSkewWarning / ...Critical      3 / 10               max / average data files per partition
staleMetadataWarningDays / ...CriticalDays  7 / 30           days since the newest snapshot
======================================  ===================  =====================================

Issues (Floe's): an empty table (no data files) gets only ``TABLE_EMPTY`` (INFO). Otherwise each check
compares with ≥, critical first. A value the metrics lack (None: the summary tier reads no manifests)
raises no issue for that check. Beyond Floe's thresholds (fixed limits, so Floe's 26 fields keep their
shape): ``TOO_MANY_METADATA_FILES`` counts the metadata.json files written (the version in the current
file's name), else those tracked (current + metadata log): a warning from 1000 (ten times what Iceberg
keeps by default), critical from 10000, raised only while ``write.metadata.delete-after-commit.enabled``
is not true (with it, Iceberg deletes the files beyond ``write.metadata.previous-versions-max`` itself,
so the count stays bounded). Status: ``critical`` if any critical issue, else ``warning`` if any
warning, else ``healthy``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from datetime import datetime
from enum import Enum
from functools import cached_property
from typing import Any, Mapping

from floe_dagster.core.localtime import as_utc
from floe_dagster.core.measurements import TableMetrics
from floe_dagster.core.table_properties import DELETE_AFTER_COMMIT
from floe_dagster.core.validation import (
    Location,
    check_mapping,
    check_unknown,
    get_int,
    get_number,
    raise_if_errors,
    standalone,
)

MIB = 1024 * 1024
DEFAULT_SMALL_FILE_SIZE_BYTES = 100 * MIB
DEFAULT_LARGE_FILE_SIZE_BYTES = 1024 * MIB


@dataclass(frozen=True)
class HealthThresholds:
    small_file_size_bytes: int = DEFAULT_SMALL_FILE_SIZE_BYTES
    small_file_percent_warning: float = 20
    small_file_percent_critical: float = 50
    large_file_size_bytes: int = DEFAULT_LARGE_FILE_SIZE_BYTES
    large_file_percent_warning: float = 20
    large_file_percent_critical: float = 50
    file_count_warning: int = 10_000
    file_count_critical: int = 50_000
    snapshot_count_warning: int = 100
    snapshot_count_critical: int = 500
    snapshot_age_warning_days: float = 7
    snapshot_age_critical_days: float = 30
    delete_file_count_warning: int = 100
    delete_file_count_critical: int = 500
    delete_file_ratio_warning: float = 0.10
    delete_file_ratio_critical: float = 0.25
    manifest_count_warning: int = 100
    manifest_count_critical: int = 500
    manifest_size_warning_bytes: int = 100 * MIB
    manifest_size_critical_bytes: int = 500 * MIB
    partition_count_warning: int = 5_000
    partition_count_critical: int = 10_000
    partition_skew_warning: float = 3
    partition_skew_critical: float = 10
    stale_metadata_warning_days: float = 7
    stale_metadata_critical_days: float = 30

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any] | None) -> "HealthThresholds":
        at = standalone()
        thresholds = parse_health_thresholds(at, raw)
        raise_if_errors(at, "health thresholds")
        return thresholds

    def to_json(self) -> dict[str, Any]:
        return {CAMEL[name]: value for name, value in asdict(self).items()}

    @cached_property  # frozen: read once per thresholds, not once per table and check
    def _limits(self) -> tuple[tuple["_Check", float, float], ...]:
        """Each check with its critical and warning thresholds."""
        return tuple((check, getattr(self, check.critical), getattr(self, check.warning)) for check in _CHECKS)


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


CAMEL = {f.name: _camel(f.name) for f in fields(HealthThresholds)}
HEALTH_THRESHOLD_FIELDS = tuple(CAMEL.values())
_BY_CAMEL = {camel: name for name, camel in CAMEL.items()}
_PERCENTS = {"small_file_percent_warning", "small_file_percent_critical", "large_file_percent_warning",
             "large_file_percent_critical"}
_WHOLE = {f.name for f in fields(HealthThresholds) if f.type in ("int", int)}


class Severity(str, Enum):
    INFO = "INFO"
    WARNING = "WARNING"
    CRITICAL = "CRITICAL"


class IssueType(str, Enum):
    TABLE_EMPTY = "TABLE_EMPTY"
    TOO_MANY_SMALL_FILES = "TOO_MANY_SMALL_FILES"
    TOO_MANY_LARGE_FILES = "TOO_MANY_LARGE_FILES"
    HIGH_FILE_COUNT = "HIGH_FILE_COUNT"
    TOO_MANY_SNAPSHOTS = "TOO_MANY_SNAPSHOTS"
    OLD_SNAPSHOTS = "OLD_SNAPSHOTS"
    TOO_MANY_DELETE_FILES = "TOO_MANY_DELETE_FILES"
    HIGH_DELETE_FILE_RATIO = "HIGH_DELETE_FILE_RATIO"
    TOO_MANY_MANIFESTS = "TOO_MANY_MANIFESTS"
    TOO_MANY_PARTITIONS = "TOO_MANY_PARTITIONS"
    PARTITION_SKEW = "PARTITION_SKEW"
    LARGE_MANIFEST_LIST = "LARGE_MANIFEST_LIST"
    STALE_METADATA = "STALE_METADATA"
    # Not a measurement: an operation lost CONFLICT_STREAK_ISSUE commit races in a row
    # (core/commit_conflicts.conflict_issues, from the history).
    COMMIT_CONFLICTS = "COMMIT_CONFLICTS"
    # A branch or tag older than its maximum age (core/refs.ref_issues): it pins snapshots and files.
    STALE_REF = "STALE_REF"
    # metadata.json files pile up: many written and write.metadata.delete-after-commit.enabled not true.
    TOO_MANY_METADATA_FILES = "TOO_MANY_METADATA_FILES"


# Issues that come from the maintenance history, not from the table's metadata: they are shown with
# the others but owe no debt (the planner's score is the table's, and a busy writer is not debt).
HISTORY_ISSUES = frozenset({IssueType.COMMIT_CONFLICTS})


@dataclass(frozen=True)
class HealthIssue:
    type: IssueType
    severity: Severity
    message: str
    measured: float | None = None
    threshold: float | None = None
    # More facts of an issue that is not a threshold check (COMMIT_CONFLICTS: operation, writer...).
    details: Mapping[str, Any] | None = field(default=None, hash=False)

    def to_json(self) -> dict[str, Any]:
        found = {"type": self.type.value, "severity": self.severity.value.lower(), "message": self.message,
                 "measured": self.measured, "threshold": self.threshold}
        if self.details:
            found.update(self.details)
        return found


HEALTHY, WARNING, CRITICAL = "healthy", "warning", "critical"


@dataclass(frozen=True)
class HealthAssessment:
    qualified_name: str
    assessed_at: datetime
    tier: str
    status: str  # healthy, warning or critical
    issues: tuple[HealthIssue, ...]
    derived: Mapping[str, Any]
    metrics: TableMetrics
    thresholds: HealthThresholds

    def count(self, severity: Severity) -> int:
        return sum(1 for issue in self.issues if issue.severity is severity)

    def to_json(self) -> dict[str, Any]:
        metrics = self.metrics.to_json()
        metrics.pop("data_file_sizes", None)  # thousands of numbers; the derived counts say enough
        return {
            "qualified_name": self.qualified_name,
            "assessed_at": self.assessed_at.isoformat(),
            "tier": self.tier,
            "status": self.status,
            "issues": [issue.to_json() for issue in self.issues],
            "metrics": metrics,
            "derived": dict(self.derived),
            "thresholds": self.thresholds.to_json(),
        }


@dataclass(frozen=True)
class _Check:
    issue: IssueType
    derived_key: str  # where the measured value sits in HealthAssessment.derived
    warning: str  # HealthThresholds attribute
    critical: str
    label: str


_CHECKS = (
    _Check(IssueType.TOO_MANY_SMALL_FILES, "small_file_percent", "small_file_percent_warning",
           "small_file_percent_critical", "small files (% of data files)"),
    _Check(IssueType.TOO_MANY_LARGE_FILES, "large_file_percent", "large_file_percent_warning",
           "large_file_percent_critical", "large files (% of data files)"),
    _Check(IssueType.HIGH_FILE_COUNT, "data_file_count", "file_count_warning", "file_count_critical", "data files"),
    _Check(IssueType.TOO_MANY_SNAPSHOTS, "snapshot_count", "snapshot_count_warning", "snapshot_count_critical",
           "snapshots"),
    _Check(IssueType.OLD_SNAPSHOTS, "oldest_snapshot_age_days", "snapshot_age_warning_days",
           "snapshot_age_critical_days", "oldest snapshot age (days)"),
    _Check(IssueType.TOO_MANY_DELETE_FILES, "delete_file_count", "delete_file_count_warning",
           "delete_file_count_critical", "delete files"),
    _Check(IssueType.HIGH_DELETE_FILE_RATIO, "delete_file_ratio", "delete_file_ratio_warning",
           "delete_file_ratio_critical", "delete files per data file"),
    _Check(IssueType.TOO_MANY_MANIFESTS, "manifest_count", "manifest_count_warning", "manifest_count_critical",
           "manifests"),
    _Check(IssueType.TOO_MANY_PARTITIONS, "partition_count", "partition_count_warning", "partition_count_critical",
           "partitions"),
    _Check(IssueType.PARTITION_SKEW, "partition_skew", "partition_skew_warning", "partition_skew_critical",
           "partition skew (max / average files per partition)"),
    _Check(IssueType.LARGE_MANIFEST_LIST, "manifest_total_bytes", "manifest_size_warning_bytes",
           "manifest_size_critical_bytes", "manifest bytes"),
    _Check(IssueType.STALE_METADATA, "newest_snapshot_age_days", "stale_metadata_warning_days",
           "stale_metadata_critical_days", "days since the newest snapshot"),
)
METADATA_FILES_WARNING, METADATA_FILES_CRITICAL = 1_000, 10_000


def _derived(static: Mapping[str, Any], ages: Mapping[str, Any]) -> dict[str, Any]:
    """Numbers computed from the raw metrics under one policy's thresholds (None where a tier lacks
    them), in the report's order: the clock-independent ones and the ages."""
    return {key: ages[key] if key in _AGE_KEYS else static[key] for key in _DERIVED_ORDER}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def _ages(metrics: TableMetrics, now: datetime) -> dict[str, float | None]:
    now_ms = int(as_utc(now).timestamp() * 1000)
    return {
        "oldest_snapshot_age_days": _round(TableMetrics.age_days(metrics.oldest_snapshot_ms, now_ms)),
        "newest_snapshot_age_days": _round(TableMetrics.age_days(metrics.newest_snapshot_ms, now_ms)),
    }


_DERIVED_ORDER = (
    "data_file_count", "total_data_bytes", "small_file_count", "small_file_percent", "large_file_count",
    "large_file_percent", "min_file_bytes", "max_file_bytes", "avg_file_bytes", "snapshot_count",
    "oldest_snapshot_age_days", "newest_snapshot_age_days", "delete_file_count", "delete_file_ratio",
    "manifest_count", "manifest_total_bytes", "partition_count", "partition_skew",
    "statistics_snapshots_behind", "statistics_rows_changed_percent",
    "metadata_file_count", "metadata_delete_after_commit",
)
_AGE_KEYS = frozenset({"oldest_snapshot_age_days", "newest_snapshot_age_days"})


def _static_assessment(metrics: TableMetrics, thresholds: HealthThresholds
                       ) -> tuple[dict[str, Any], tuple[HealthIssue | None, ...]]:
    """What does not depend on the clock: the derived numbers other than ages, and the verdict of every
    check that does not read an age. Kept on the (immutable) metrics record per thresholds: the
    health collector keeps one record per metadata location, so an unchanged table is measured once,
    not on every tick."""
    memo = metrics.__dict__.setdefault("_assessments", {})  # not a field: equality and asdict ignore it
    found = memo.get(thresholds)
    if found is not None:
        return found
    files = metrics.data_file_count
    small = metrics.small_file_count(thresholds.small_file_size_bytes)
    large = metrics.large_file_count(thresholds.large_file_size_bytes)

    def percent(count: int | None) -> float | None:
        if count is None:
            return None
        return round(count * 100.0 / files, 4) if files else 0.0

    derived = {
        "data_file_count": files,
        "total_data_bytes": metrics.total_data_bytes,
        "small_file_count": small,
        "small_file_percent": percent(small),
        "large_file_count": large,
        "large_file_percent": percent(large),
        "min_file_bytes": metrics.min_file_bytes,
        "max_file_bytes": metrics.max_file_bytes,
        "avg_file_bytes": metrics.avg_file_bytes,
        "snapshot_count": metrics.snapshot_count,
        "delete_file_count": metrics.delete_file_count,
        "delete_file_ratio": _round(metrics.delete_file_ratio),
        "manifest_count": metrics.manifest_count,
        "manifest_total_bytes": metrics.manifest_total_bytes,
        "partition_count": metrics.partition_count,
        "partition_skew": _round(metrics.partition_skew),
        # how stale the newest statistics file is (the trigger conditions statsStale*; None: no statistics)
        "statistics_snapshots_behind": metrics.statistics_snapshots_behind,
        "statistics_rows_changed_percent": _round(metrics.statistics_rows_changed_percent),
        "metadata_file_count": max((n for n in (metrics.metadata_files_written, metrics.metadata_files_tracked)
                                    if n is not None), default=None),
        "metadata_delete_after_commit": metrics.properties.get(DELETE_AFTER_COMMIT, "").strip().lower() == "true",
    }
    verdicts = tuple(None if check.derived_key in _AGE_KEYS else _issue(check, critical, warning, derived)
                     for check, critical, warning in thresholds._limits) + (_metadata_files_issue(derived),)
    found = memo[thresholds] = (derived, verdicts)
    return found


def assess_health(metrics: TableMetrics, thresholds: HealthThresholds | None, now: datetime) -> HealthAssessment:
    """Floe's ``TableHealthAssessor``: the issues and the status of one table at ``now``."""
    thresholds = thresholds or HealthThresholds()
    static, verdicts = _static_assessment(metrics, thresholds)
    ages = _ages(metrics, now)
    issues = _issues(metrics, thresholds, verdicts, ages)
    return HealthAssessment(metrics.qualified_name, as_utc(now), metrics.tier, health_status(issues), issues,
                        _derived(static, ages), metrics, thresholds)


def health_issues(metrics: TableMetrics, thresholds: HealthThresholds | None, now: datetime) -> tuple[HealthIssue, ...]:
    """:func:`assess_health`'s issues alone (what the planner's debt score needs)."""
    thresholds = thresholds or HealthThresholds()
    return _issues(metrics, thresholds, _static_assessment(metrics, thresholds)[1], _ages(metrics, now))


def _issues(metrics: TableMetrics, thresholds: HealthThresholds, verdicts: tuple[HealthIssue | None, ...],
            ages: Mapping[str, Any]) -> tuple[HealthIssue, ...]:
    """Floe's issues: the clock-independent ``verdicts`` (in check order) with the age checks made now."""
    if metrics.data_file_count == 0:
        return (HealthIssue(IssueType.TABLE_EMPTY, Severity.INFO, "the table has no data files", 0, None),)
    issues = []
    for (check, critical, warning), verdict in zip(thresholds._limits, verdicts):
        if check.derived_key in _AGE_KEYS:
            verdict = _issue(check, critical, warning, ages)
        if verdict is not None:
            issues.append(verdict)
    issues.extend(v for v in verdicts[len(thresholds._limits):] if v is not None)  # the fixed-limit checks
    return tuple(issues)


def _issue(check: _Check, critical: float, warning: float, derived: Mapping[str, Any]) -> HealthIssue | None:
    measured = derived.get(check.derived_key)
    if measured is None:
        return None
    if check.issue is IssueType.TOO_MANY_LARGE_FILES and not derived.get("large_file_count"):
        return None
    for severity, threshold in ((Severity.CRITICAL, critical), (Severity.WARNING, warning)):
        if measured >= threshold:
            return HealthIssue(check.issue, severity,
                               f"{check.label}: {measured:g} ≥ {severity.value.lower()} threshold {threshold:g}",
                               measured, threshold)
    return None


def _metadata_files_issue(derived: Mapping[str, Any]) -> HealthIssue | None:
    """TOO_MANY_METADATA_FILES: many metadata.json files, and Iceberg does not delete the old ones."""
    if derived.get("metadata_delete_after_commit"):
        return None
    check = _Check(IssueType.TOO_MANY_METADATA_FILES, "metadata_file_count", "", "",
                   "metadata.json files (write.metadata.delete-after-commit.enabled is not true)")
    return _issue(check, METADATA_FILES_CRITICAL, METADATA_FILES_WARNING, derived)


def health_status(issues: Any) -> str:
    severities = {issue.severity for issue in issues}
    if Severity.CRITICAL in severities:
        return CRITICAL
    if Severity.WARNING in severities:
        return WARNING
    return HEALTHY


def parse_health_thresholds(at: Location, raw: Any) -> HealthThresholds:
    mapping = check_mapping(at, raw)
    if mapping is None:
        return HealthThresholds()
    check_unknown(at, mapping, HEALTH_THRESHOLD_FIELDS)
    defaults = HealthThresholds()
    values: dict[str, Any] = {}
    for camel, name in _BY_CAMEL.items():
        default = getattr(defaults, name)
        if name in ("small_file_size_bytes", "large_file_size_bytes"):
            values[name] = get_int(at, mapping, camel, default, minimum=1)
        elif name in _WHOLE:
            values[name] = get_int(at, mapping, camel, default, minimum=0)
        else:
            values[name] = get_number(at, mapping, camel, default, minimum=0,
                                      maximum=100 if name in _PERCENTS else None)
    for name in values:
        if name.endswith("_warning") or "_warning_" in name:
            critical = name.replace("warning", "critical")
            if values[name] > values[critical]:
                at.child(CAMEL[name]).error(
                    f"the warning threshold {values[name]:g} is above the critical one "
                    f"({CAMEL[critical]} = {values[critical]:g})")
    if values["small_file_size_bytes"] >= values["large_file_size_bytes"]:
        at.child("smallFileSizeBytes").error("must be below largeFileSizeBytes")
    return HealthThresholds(**values)


__all__ = [
    "HealthThresholds", "HealthIssue", "HealthAssessment", "IssueType", "Severity", "assess_health", "health_issues",
    "health_status",
    "parse_health_thresholds", "HEALTH_THRESHOLD_FIELDS", "DEFAULT_SMALL_FILE_SIZE_BYTES",
]
