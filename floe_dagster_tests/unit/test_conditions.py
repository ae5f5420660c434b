"""Trigger conditions, in Floe's TriggerEvaluator order (mirrors SchedulerTriggerConditionsTest)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest

from floe_dagster.core.policies.conditions import CONDITION_RECHECK, TriggerConditions, evaluate_conditions
from floe_dagster.core.facts.measurements import TableMetrics
from floe_dagster.core.operations import Operation

NOW = datetime(2026, 6, 10, 12, tzinfo=timezone.utc)
NOW_MS = int(NOW.timestamp() * 1000)
MIB = 1024 * 1024
RDF, EXPIRE = Operation.REWRITE_DATA_FILES, Operation.EXPIRE_SNAPSHOTS


def metrics(**changes) -> TableMetrics:
    base = TableMetrics(
        qualified_name="demo.sales.orders", metadata_location=None, tier="full", collected_at_ms=NOW_MS,
        data_file_count=10, total_data_bytes=10 * 200 * MIB, data_file_sizes=(MIB,) * 4 + (200 * MIB,) * 6,
        delete_file_count=2, snapshot_count=50, oldest_snapshot_ms=NOW_MS - 3 * 86_400_000,
        newest_snapshot_ms=NOW_MS, manifest_count=4, manifest_total_bytes=4 * MIB, partition_count=2,
        max_files_per_partition=8,
    )
    return replace(base, **changes)


def summary_metrics(**changes) -> TableMetrics:
    return metrics(tier="summary", data_file_sizes=None, manifest_count=None, manifest_total_bytes=None,
                   partition_count=None, max_files_per_partition=None, **changes)


def conditions(**raw) -> TriggerConditions:
    return TriggerConditions.from_mapping(raw)


def evaluate(conds, m=None, last=None, op=RDF, **kw):
    return evaluate_conditions(conds, op, m, last, NOW, **kw)


def test_no_conditions_means_always():
    result = evaluate(None, None)
    assert result.passed and not result.forced and result.blocked_code is None


def test_no_thresholds_pass_without_health():
    assert evaluate(conditions(minIntervalMinutes=10), None, NOW - timedelta(hours=1)).passed


def test_measured_values_and_or_logic():
    # 4 of 10 files are under 100 MiB: 40 %
    conds = conditions(smallFilePercentageAbove=50, snapshotCountAbove=40)
    result = evaluate(conds, metrics())
    assert result.passed and result.logic == "OR"
    assert [(c.name, c.measured, c.threshold) for c in result.met] == [("snapshotCountAbove", 50, 40)]
    assert [(c.name, c.measured) for c in result.unmet] == [("smallFilePercentageAbove", 40.0)]


def test_and_logic_needs_every_threshold():
    conds = conditions(smallFilePercentageAbove=50, snapshotCountAbove=40, triggerLogic="and")
    result = evaluate(conds, metrics())
    assert not result.passed and result.blocked_code == "conditions_unmet"
    assert evaluate(conditions(smallFilePercentageAbove=40, snapshotCountAbove=40, triggerLogic="AND"),
                    metrics()).passed


def test_thresholds_compare_with_greater_or_equal():
    assert evaluate(conditions(snapshotCountAbove=50), metrics()).passed
    assert not evaluate(conditions(snapshotCountAbove=51), metrics()).passed


def test_unmet_conditions_skip_and_record_the_next_eligible_time():
    result = evaluate(conditions(deleteFileCountAbove=100), metrics())
    assert not result.passed and result.blocked_code == "conditions_unmet"
    assert result.next_eligible == NOW + CONDITION_RECHECK
    assert "deleteFileCountAbove 2 < 100" in result.detail


@pytest.mark.parametrize("name, threshold, passes", [
    ("smallFileCountAbove", 4, True),
    ("smallFileCountAbove", 5, False),
    ("totalFileSizeAboveBytes", 2000 * MIB, True),
    ("deleteFileCountAbove", 2, True),
    ("deleteFileRatioAbove", 0.2, True),
    ("deleteFileRatioAbove", 0.21, False),
    ("snapshotAgeAboveDays", 3, True),
    ("snapshotAgeAboveDays", 3.1, False),
    ("partitionCountAbove", 2, True),
    ("partitionSkewAbove", 1.6, True),  # 8 files / (10 / 2)
    ("partitionSkewAbove", 1.7, False),
    ("manifestSizeAboveBytes", 4 * MIB, True),
    ("manifestSizeAboveBytes", 4 * MIB + 1, False),
])
def test_every_threshold(name, threshold, passes):
    assert evaluate(conditions(**{name: threshold}), metrics()).passed is passes


def test_small_files_use_the_policy_small_file_size():
    conds = conditions(smallFileCountAbove=10)
    assert not evaluate(conds, metrics()).passed
    assert evaluate(conds, metrics(), small_file_size_bytes=256 * MIB).passed  # all 10 are small now


def test_min_interval_blocks_until_it_has_passed():
    conds = conditions(minIntervalMinutes=60, snapshotCountAbove=1)
    last = NOW - timedelta(minutes=30)
    result = evaluate(conds, metrics(), last)
    assert not result.passed and result.blocked_code == "min_interval"
    assert result.next_eligible == last + timedelta(minutes=60)
    assert evaluate(conds, metrics(), NOW - timedelta(minutes=60)).passed
    assert evaluate(conds, metrics(), None).passed  # never run: nothing to wait for


def test_per_operation_min_interval_overrides():
    conds = conditions(minIntervalMinutes=60, perOperationMinIntervalMinutes={"EXPIRE_SNAPSHOTS": 10})
    last = NOW - timedelta(minutes=30)
    assert evaluate(conds, None, last, op=RDF).blocked_code == "min_interval"
    assert evaluate(conds, None, last, op=EXPIRE).passed
    # the policy key and the procedure name are accepted too
    assert conditions(perOperationMinIntervalMinutes={"orphanCleanup": 5, "remove_orphan_files": 6})


def test_critical_pipeline_deadline_forces():
    conds = conditions(criticalPipeline=True, criticalPipelineMaxDelayMinutes=120, deleteFileCountAbove=100,
                       minIntervalMinutes=600)
    overdue = evaluate(conds, metrics(), NOW - timedelta(minutes=120))
    assert overdue.passed and overdue.forced  # bypasses the unmet condition and the min interval
    not_yet = evaluate(conds, metrics(), NOW - timedelta(minutes=119))
    assert not not_yet.passed and not not_yet.forced and not_yet.blocked_code == "min_interval"
    never_run = evaluate(conds, metrics(), None)
    assert not never_run.forced and never_run.blocked_code == "conditions_unmet"
    # without a delay, never forced
    assert not evaluate(conditions(criticalPipeline=True), None, NOW - timedelta(days=30)).forced


def test_thresholds_with_no_health_block():
    result = evaluate(conditions(snapshotCountAbove=1), None)
    assert not result.passed and result.blocked_code == "no_health" and result.next_eligible is not None


def test_full_tier_thresholds_with_summary_metrics_block_as_no_health():
    assert evaluate(conditions(smallFilePercentageAbove=1), summary_metrics()).blocked_code == "no_health"
    assert evaluate(conditions(partitionSkewAbove=1), summary_metrics()).blocked_code == "no_health"
    # summary-tier values are enough for these
    assert evaluate(conditions(snapshotCountAbove=1, deleteFileRatioAbove=0.1), summary_metrics()).passed


def test_snapshot_age_is_skipped_without_snapshots():
    result = evaluate(conditions(snapshotAgeAboveDays=1, snapshotCountAbove=0, triggerLogic="AND"),
                      metrics(oldest_snapshot_ms=None, snapshot_count=0))
    assert result.passed and result.skipped == ("snapshotAgeAboveDays",)


def test_toggle_off_ignores_everything():
    conds = conditions(snapshotCountAbove=10_000, minIntervalMinutes=600, criticalPipeline=True,
                       criticalPipelineMaxDelayMinutes=1)
    result = evaluate(conds, None, NOW - timedelta(minutes=5), enabled=False)
    assert result.passed and not result.forced and not result.evaluated


def test_result_to_json():
    data = evaluate(conditions(snapshotCountAbove=10), metrics()).to_json()
    assert data["passed"] and data["met"] == [{"name": "snapshotCountAbove", "measured": 50.0, "threshold": 10}]


@pytest.mark.parametrize("raw, message", [
    ({"triggerLogic": "XOR"}, "must be one of OR, AND"),
    ({"perOperationMinIntervalMinutes": {"VACUUM": 5}}, "unknown operation 'VACUUM'"),
    ({"perOperationMinIntervalMinutes": {"REWRITE_DATA_FILES": "soon"}}, "expected a number"),
    ({"smallFilePercentageAbove": 101}, "at most 100"),
    ({"snapshotCountAbove": -1}, "at least 0"),
    ({"snapshotCountAbov": 5}, "did you mean 'snapshotCountAbove'"),
    ({"criticalPipeline": "yes"}, "true or false"),
    ({"criticalPipelineMaxDelayMinutes": 0, "criticalPipeline": True}, "greater than 0"),
])
def test_bad_conditions(raw, message):
    with pytest.raises(ValueError, match=message):
        TriggerConditions.from_mapping(raw)
