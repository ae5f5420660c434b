"""Health thresholds, issues (each at its warning and critical threshold) and the status."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest

from floe_dagster.core.facts.health_assessment import (
    HEALTH_THRESHOLD_FIELDS,
    HealthThresholds,
    IssueType,
    Severity,
    assess_health,
)
from floe_dagster.core.facts.measurements import TableMetrics

NOW = datetime(2026, 6, 10, 12, tzinfo=timezone.utc)
NOW_MS = int(NOW.timestamp() * 1000)
DAY_MS = 86_400_000
MIB = 1024 * 1024


def healthy(**changes) -> TableMetrics:
    """A full-tier table with no issue under the default thresholds."""
    base = TableMetrics(
        qualified_name="demo.sales.orders", metadata_location="file:///m.json", tier="full",
        collected_at_ms=NOW_MS, data_file_count=100, total_data_bytes=100 * 300 * MIB, record_count=10_000,
        data_file_sizes=(300 * MIB,) * 100, delete_file_count=0, position_delete_file_count=0,
        equality_delete_file_count=0, snapshot_count=10, oldest_snapshot_ms=NOW_MS - 2 * DAY_MS,
        newest_snapshot_ms=NOW_MS - DAY_MS // 2, manifest_count=5, manifest_total_bytes=MIB, partition_count=10,
        max_files_per_partition=10,
    )
    return replace(base, **changes)


def files(small: int, large: int, total: int = 100) -> dict:
    sizes = (MIB,) * small + (2048 * MIB,) * large + (300 * MIB,) * (total - small - large)
    return {"data_file_sizes": sizes, "data_file_count": total, "total_data_bytes": sum(sizes)}


def test_a_healthy_table_has_no_issue():
    report = assess_health(healthy(), None, NOW)
    assert report.issues == () and report.status == "healthy"


# (issue, metrics at the warning threshold, just below it, at the critical threshold)
CASES = [
    (IssueType.TOO_MANY_SMALL_FILES, files(20, 0), files(19, 0), files(50, 0)),
    (IssueType.TOO_MANY_LARGE_FILES, files(0, 20), files(0, 19), files(0, 50)),
    (IssueType.HIGH_FILE_COUNT, {"data_file_count": 10_000, "data_file_sizes": None},
     {"data_file_count": 9_999, "data_file_sizes": None}, {"data_file_count": 50_000, "data_file_sizes": None}),
    (IssueType.TOO_MANY_SNAPSHOTS, {"snapshot_count": 100}, {"snapshot_count": 99}, {"snapshot_count": 500}),
    (IssueType.OLD_SNAPSHOTS, {"oldest_snapshot_ms": NOW_MS - 7 * DAY_MS},
     {"oldest_snapshot_ms": NOW_MS - 7 * DAY_MS + 60_000}, {"oldest_snapshot_ms": NOW_MS - 30 * DAY_MS}),
    (IssueType.TOO_MANY_DELETE_FILES, {"delete_file_count": 100, "data_file_count": 10_000 - 1, "data_file_sizes": None},
     {"delete_file_count": 99, "data_file_count": 9_999, "data_file_sizes": None},
     {"delete_file_count": 500, "data_file_count": 9_999, "data_file_sizes": None}),
    (IssueType.HIGH_DELETE_FILE_RATIO, {"delete_file_count": 10}, {"delete_file_count": 9},
     {"delete_file_count": 25}),
    (IssueType.TOO_MANY_MANIFESTS, {"manifest_count": 100}, {"manifest_count": 99}, {"manifest_count": 500}),
    (IssueType.TOO_MANY_PARTITIONS, {"partition_count": 5_000, "max_files_per_partition": 1},
     {"partition_count": 4_999, "max_files_per_partition": 1},
     {"partition_count": 10_000, "max_files_per_partition": 1}),
    (IssueType.PARTITION_SKEW, {"max_files_per_partition": 30}, {"max_files_per_partition": 29},
     {"max_files_per_partition": 100}),
    (IssueType.LARGE_MANIFEST_LIST, {"manifest_total_bytes": 100 * MIB}, {"manifest_total_bytes": 100 * MIB - 1},
     {"manifest_total_bytes": 500 * MIB}),
    (IssueType.STALE_METADATA, {"newest_snapshot_ms": NOW_MS - 7 * DAY_MS},
     {"newest_snapshot_ms": NOW_MS - 7 * DAY_MS + 60_000}, {"newest_snapshot_ms": NOW_MS - 30 * DAY_MS}),
]


def _issues_of(report, issue_type):
    return [i for i in report.issues if i.type is issue_type]


@pytest.mark.parametrize("issue, at_warning, below, at_critical", CASES, ids=[c[0].value for c in CASES])
def test_each_issue_at_its_warning_and_critical_threshold(issue, at_warning, below, at_critical):
    oldest = {"oldest_snapshot_ms": NOW_MS - 40 * DAY_MS} if issue is IssueType.STALE_METADATA else {}

    def severity(changes):
        found = _issues_of(assess_health(healthy(**oldest, **changes), None, NOW), issue)
        assert len(found) <= 1
        return found[0].severity if found else None

    assert severity(below) is None
    assert severity(at_warning) is Severity.WARNING
    assert severity(at_critical) is Severity.CRITICAL


def test_issue_carries_measured_and_threshold():
    report = assess_health(healthy(snapshot_count=120), None, NOW)
    (issue,) = report.issues
    assert (issue.type, issue.severity, issue.measured, issue.threshold) == (
        IssueType.TOO_MANY_SNAPSHOTS, Severity.WARNING, 120, 100)
    assert report.status == "warning"


def test_empty_table_is_only_table_empty_info():
    report = assess_health(healthy(data_file_count=0, data_file_sizes=(), snapshot_count=900, total_data_bytes=0),
                           None, NOW)
    assert [(i.type, i.severity) for i in report.issues] == [(IssueType.TABLE_EMPTY, Severity.INFO)]
    assert report.status == "healthy"


def test_large_files_only_reported_when_there_are_some():
    thresholds = HealthThresholds(large_file_percent_warning=0, large_file_percent_critical=0)
    assert not _issues_of(assess_health(healthy(), thresholds, NOW), IssueType.TOO_MANY_LARGE_FILES)
    assert _issues_of(assess_health(healthy(**files(0, 1)), thresholds, NOW), IssueType.TOO_MANY_LARGE_FILES)


def test_summary_tier_values_that_are_missing_raise_no_issue():
    summary = healthy(tier="summary", data_file_sizes=None, manifest_count=None, manifest_total_bytes=None,
                      partition_count=None, max_files_per_partition=None, snapshot_count=600)
    report = assess_health(summary, HealthThresholds(small_file_percent_warning=0, small_file_percent_critical=0,
                                                     manifest_count_warning=0, manifest_count_critical=0), NOW)
    assert [i.type for i in report.issues] == [IssueType.TOO_MANY_SNAPSHOTS]
    assert report.status == "critical"
    assert report.derived["small_file_count"] is None


def test_policy_thresholds_change_what_is_small():
    metrics = healthy(**files(0, 0))  # 100 files of 300 MiB
    assert assess_health(metrics, None, NOW).status == "healthy"
    bigger_small = HealthThresholds(small_file_size_bytes=512 * MIB)
    report = assess_health(metrics, bigger_small, NOW)
    assert report.derived["small_file_percent"] == 100.0
    assert report.status == "critical"


def test_status_is_the_worst_severity():
    report = assess_health(healthy(snapshot_count=600, manifest_count=150), None, NOW)
    assert {i.severity for i in report.issues} == {Severity.CRITICAL, Severity.WARNING}
    assert report.status == "critical"


def test_to_json_has_metrics_derived_numbers_issues_and_status():
    report = assess_health(healthy(**files(30, 0), oldest_snapshot_ms=NOW_MS - 8 * DAY_MS), None, NOW)
    data = json.loads(json.dumps(report.to_json()))
    assert data["status"] == "warning"
    assert data["derived"]["small_file_count"] == 30 and data["derived"]["small_file_percent"] == 30.0
    assert data["derived"]["oldest_snapshot_age_days"] == 8.0
    assert {i["type"] for i in data["issues"]} == {"TOO_MANY_SMALL_FILES", "OLD_SNAPSHOTS"}
    assert data["issues"][0]["severity"] == "warning"
    assert data["metrics"]["data_file_count"] == 100 and "data_file_sizes" not in data["metrics"]
    assert data["thresholds"]["smallFileSizeBytes"] == 104857600


def test_threshold_defaults_and_names():
    defaults = HealthThresholds()
    assert (defaults.small_file_size_bytes, defaults.large_file_size_bytes) == (104857600, 1073741824)
    assert (defaults.delete_file_ratio_warning, defaults.delete_file_ratio_critical) == (0.10, 0.25)
    assert (defaults.stale_metadata_warning_days, defaults.stale_metadata_critical_days) == (7, 30)
    assert "manifestSizeWarningBytes" in HEALTH_THRESHOLD_FIELDS and "partitionSkewCritical" in HEALTH_THRESHOLD_FIELDS
    assert HealthThresholds.from_mapping({"snapshotCountWarning": 10}).snapshot_count_warning == 10


@pytest.mark.parametrize("raw, message", [
    ({"snapshotCountWarnng": 10}, "did you mean 'snapshotCountWarning'"),
    ({"snapshotCountWarning": 600}, "above the critical one"),
    ({"deleteFileRatioWarning": 0.3, "deleteFileRatioCritical": 0.2}, "above the critical one"),
    ({"smallFilePercentCritical": 150}, "at most 100"),
    ({"fileCountWarning": -1}, "at least 0"),
    ({"fileCountWarning": 1.5}, "whole number"),
    ({"smallFileSizeBytes": 2 * 1024 * MIB}, "below largeFileSizeBytes"),
])
def test_bad_thresholds(raw, message):
    with pytest.raises(ValueError, match=message):
        HealthThresholds.from_mapping(raw)


def test_age_measured_from_now():
    metrics = healthy(newest_snapshot_ms=NOW_MS - 10 * DAY_MS, oldest_snapshot_ms=NOW_MS - 10 * DAY_MS)
    assert assess_health(metrics, None, NOW).status == "warning"
    assert assess_health(metrics, None, NOW + timedelta(days=25)).status == "critical"
