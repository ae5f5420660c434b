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
(declared with its fact in core/facts/fact_catalogue.py, which names the derived number, the thresholds and the
issue type; made in the catalogue's check order, Floe's) compares with ≥, critical first. A value the
metrics lack (None: the summary tier reads no manifests) raises no issue for that check. Beyond Floe's
thresholds (fixed limits, so Floe's 26 fields keep their shape): ``TOO_MANY_METADATA_FILES`` counts the
metadata.json files written (the version in the current file's name), else those tracked (current +
metadata log): a warning from 1000 (ten times what Iceberg keeps by default), critical from 10000, raised
only while ``write.metadata.delete-after-commit.enabled`` is not true (with it, Iceberg deletes the files
beyond ``write.metadata.previous-versions-max`` itself, so the count stays bounded). A check an operation
kind's fact declares raises an issue of its own type (:class:`IssueName`). Status: ``critical`` if any
critical issue, else ``warning`` if any warning, else ``healthy``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from datetime import datetime
from enum import Enum
from operator import attrgetter
from typing import Any, Iterable, Mapping

from floe_dagster.core.facts.fact_catalogue import FactViews, views
from floe_dagster.core.basics.localtime import as_utc, epoch_ms
from floe_dagster.core.facts.measurements import TableMetrics
from floe_dagster.core.facts.table_facts import Check, Fact
from floe_dagster.core.basics.quick_records import kept_on, quick_init
from floe_dagster.core.basics.validation import (
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
    def from_mapping(cls, raw: Mapping[str, object] | None) -> "HealthThresholds":
        at = standalone()
        thresholds = parse_health_thresholds(at, raw)
        raise_if_errors(at, "health thresholds")
        return thresholds

    def to_json(self) -> dict[str, object]:
        return {CAMEL[name]: value for name, value in asdict(self).items()}


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
    # (core/runs/commit_conflicts.conflict_issues, from the history).
    COMMIT_CONFLICTS = "COMMIT_CONFLICTS"
    # A branch or tag older than its maximum age (core/facts/refs.ref_issues): it pins snapshots and files.
    STALE_REF = "STALE_REF"
    # metadata.json files pile up: many written and write.metadata.delete-after-commit.enabled not true.
    TOO_MANY_METADATA_FILES = "TOO_MANY_METADATA_FILES"


class IssueName(str):
    """The issue type of a check a fact declared beyond :class:`IssueType` (an operation kind's fact): a
    string with IssueType's ``value``."""

    @property
    def value(self) -> str:
        return str(self)


def issue_type(name: str) -> IssueType | IssueName:
    return IssueType.__members__.get(name) or IssueName(name)


# Issues that come from the maintenance history, not from the table's metadata: they are shown with
# the others but owe no debt (the planner's score is the table's, and a busy writer is not debt).
HISTORY_ISSUES = frozenset({IssueType.COMMIT_CONFLICTS})


@quick_init  # a tick makes tens of thousands
@dataclass(frozen=True)
class HealthIssue:
    type: IssueType | IssueName
    severity: Severity
    message: str
    measured: float | None = None
    threshold: float | None = None
    # More facts of an issue that is not a threshold check (COMMIT_CONFLICTS: operation, writer...).
    details: Mapping[str, object] | None = field(default=None, hash=False)

    def to_json(self) -> dict[str, object]:
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
    derived: Mapping[str, float | None]  # the derived numbers (ints and flags among them)
    metrics: TableMetrics
    thresholds: HealthThresholds

    def count(self, severity: Severity) -> int:
        return sum(1 for issue in self.issues if issue.severity is severity)

    def to_json(self) -> dict[str, object]:
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
class _Limit:
    """A fact's check under one policy's thresholds."""

    fact: Fact
    check: Check
    issue: IssueType | IssueName
    critical: float
    warning: float
    clocked: bool  # on a number made at the assessment's clock (checked at every assessment)
    # The lower of the two: a number below it raises nothing, whatever the check's ``unless`` says (most
    # numbers of most tables are below it, so the check ends at one comparison).
    floor: float
    # (severity, threshold, the message's words around the measured number), critical first: told once per
    # thresholds, not per issue (an enum's ``value`` is a Python-level read in this Python).
    levels: tuple[tuple[Severity, float, str, str], ...] = ()


def _limits(thresholds: HealthThresholds, facts: FactViews) -> tuple[_Limit, ...]:
    """Each check with its critical and warning thresholds, in check order: made once per thresholds and
    catalogue, and kept on the (frozen) thresholds, as every table of a policy is assessed with them."""
    memo = thresholds.__dict__.get("_limits")  # not a field: equality, hashing and asdict ignore it
    if memo is None or memo[0] is not facts:
        memo = thresholds.__dict__["_limits"] = (facts, tuple(
            _limit(fact, _threshold(fact, fact.check.critical, thresholds),
                   _threshold(fact, fact.check.warning, thresholds))
            for fact in facts.checks if fact.check is not None))
    return memo[1]


def _limit(fact: Fact, critical: float, warning: float) -> _Limit:
    check = fact.check
    levels = tuple((severity, threshold, f"{check.label}: ",
                    f" ≥ {severity.value.lower()} threshold {threshold:g}")
                   for severity, threshold in ((Severity.CRITICAL, critical), (Severity.WARNING, warning)))
    return _Limit(fact, check, issue_type(check.issue), critical, warning, fact.clocked, min(critical, warning),
                  levels)


# Each distinct thresholds' number (:func:`_thresholds_key`): the assessments kept on a metrics record are
# keyed by it, not by the 26-field thresholds, whose generated hash a cold tick would compute twice per table.
_THRESHOLDS_KEYS: dict[HealthThresholds, int] = {}


def _thresholds_key(thresholds: HealthThresholds) -> int:
    """A number for equal thresholds (a new policy set each tick makes new, equal ones), kept on the object."""
    return kept_on(thresholds, "_key", _THRESHOLDS_KEYS.setdefault, thresholds, len(_THRESHOLDS_KEYS))


def _threshold(fact: Fact, limit: str | float, thresholds: HealthThresholds) -> float:
    if not isinstance(limit, str):
        return limit
    if limit not in CAMEL:
        raise ValueError(f"table fact {fact.name!r}: its check's threshold {limit!r} is not a healthThresholds field "
                         f"(one of {', '.join(CAMEL)}), nor a number")
    return getattr(thresholds, limit)


def _static_numbers(metrics: TableMetrics, thresholds: HealthThresholds, facts: FactViews) -> dict[str, float | None]:
    """The derived numbers that do not depend on the clock, in the derived order (each fact's how, read from
    the catalogue once: every table of a cold tick comes here)."""
    plan = facts.memo.get("static numbers")
    if plan is None:
        plan = facts.memo["static numbers"] = tuple(
            (f.name, f.measure or attrgetter(f.name), f.measure is not None, f.digits)
            for f in facts.derived if not f.clocked)
    numbers = {}
    for name, get, computed, digits in plan:
        value = get(metrics, thresholds) if computed else get(metrics)
        numbers[name] = value if digits is None or value is None else round(value, digits)
    return numbers


def _ages(metrics: TableMetrics, now: datetime, facts: FactViews) -> dict[str, float | None]:
    """The derived numbers that depend on the clock: days since a stored time."""
    now_ms = epoch_ms(now)
    found = {}
    for fact in facts.clocked:
        age = TableMetrics.age_days(getattr(metrics, fact.age_of), now_ms)
        found[fact.name] = age if fact.digits is None or age is None else round(age, fact.digits)
    return found


def _static_assessment(metrics: TableMetrics, thresholds: HealthThresholds, facts: FactViews
                       ) -> tuple[dict[str, float | None], tuple[HealthIssue | None, ...]]:
    """What does not depend on the clock: the derived numbers other than ages, and the verdict of every
    check that does not read an age. Kept on the (immutable) metrics record per thresholds: the
    health collector keeps one record per metadata location, so an unchanged table is measured once,
    not on every tick."""
    memo = metrics.__dict__.setdefault("_assessments", {})  # not a field: equality and asdict ignore it
    key = (_thresholds_key(thresholds), facts.generation)
    found = memo.get(key)
    if found is not None:
        return found
    static = _static_numbers(metrics, thresholds, facts)
    verdicts = []
    for limit in _limits(thresholds, facts):
        measured = None if limit.clocked else static[limit.fact.name]
        verdicts.append(None if measured is None or measured < limit.floor else _issue(limit, measured, static))
    found = memo[key] = (static, tuple(verdicts))
    return found


def assess_health(metrics: TableMetrics, thresholds: HealthThresholds | None, now: datetime) -> HealthAssessment:
    """Floe's ``TableHealthAssessor``: the issues and the status of one table at ``now``."""
    thresholds = thresholds or HealthThresholds()
    facts = views()
    static, verdicts = _static_assessment(metrics, thresholds, facts)
    ages = _ages(metrics, now, facts)
    issues = _issues(metrics, thresholds, verdicts, static, ages, facts)
    order = facts.memo.get("derived order")
    if order is None:
        order = facts.memo["derived order"] = tuple((fact.name, fact.clocked) for fact in facts.derived)
    derived = {name: ages[name] if clocked else static[name] for name, clocked in order}
    return HealthAssessment(metrics.qualified_name, as_utc(now), metrics.tier, health_status(issues), issues,
                            derived, metrics, thresholds)


def health_issues(metrics: TableMetrics, thresholds: HealthThresholds | None, now: datetime) -> tuple[HealthIssue, ...]:
    """:func:`assess_health`'s issues alone (what the planner's debt score needs)."""
    thresholds = thresholds or HealthThresholds()
    facts = views()
    static, verdicts = _static_assessment(metrics, thresholds, facts)
    return _issues(metrics, thresholds, verdicts, static, _ages(metrics, now, facts), facts)


def _issues(metrics: TableMetrics, thresholds: HealthThresholds, verdicts: tuple[HealthIssue | None, ...],
            static: Mapping[str, float | None], ages: Mapping[str, float | None], facts: FactViews
            ) -> tuple[HealthIssue, ...]:
    """Floe's issues: the clock-independent ``verdicts`` (in check order) with the age checks made now."""
    if metrics.data_file_count == 0:
        return (HealthIssue(IssueType.TABLE_EMPTY, Severity.INFO, "the table has no data files", 0, None),)
    issues = []
    for limit, verdict in zip(_limits(thresholds, facts), verdicts):
        if limit.clocked:
            measured = ages[limit.fact.name]
            verdict = None if measured is None or measured < limit.floor else _issue(limit, measured, static)
        if verdict is not None:
            issues.append(verdict)
    return tuple(issues)


def _issue(limit: _Limit, measured: float | None, numbers: Mapping[str, float | None]) -> HealthIssue | None:
    """The check's issue for the ``measured`` number (``numbers``: the clock-independent ones), or None."""
    check = limit.check
    if measured is None or (check.unless is not None and check.unless(numbers)):
        return None
    for severity, threshold, before, after in limit.levels:
        if measured >= threshold:
            return HealthIssue(limit.issue, severity, f"{before}{measured:g}{after}", measured, threshold)
    return None


def health_status(issues: Iterable[HealthIssue]) -> str:
    severities = {issue.severity for issue in issues}
    if Severity.CRITICAL in severities:
        return CRITICAL
    if Severity.WARNING in severities:
        return WARNING
    return HEALTHY


def parse_health_thresholds(at: Location, raw: object) -> HealthThresholds:
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
    "HealthThresholds", "HealthIssue", "HealthAssessment", "IssueType", "IssueName", "Severity", "assess_health",
    "health_issues", "issue_type",
    "health_status",
    "parse_health_thresholds", "HEALTH_THRESHOLD_FIELDS", "DEFAULT_SMALL_FILE_SIZE_BYTES",
]
