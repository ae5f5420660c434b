"""Table statistics (COMPUTE_STATISTICS): the lag of the newest statistics file, the no-change rule, the
stale-statistics trigger conditions, the policy keys in both of Floe's formats and the procedures' SQL."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone

import pytest

from floe_dagster.core.policies.conditions import TriggerConditions, evaluate_conditions, floe_condition_strings
from floe_dagster.core.facts.measurements import TableMetrics
from floe_dagster.core.operation_kinds.compute_statistics import ComputeStatisticsConfig
from floe_dagster.core.operations import Operation
from floe_dagster.core.policies.policy import PolicyError, parse_policies_text, validate_policy_paths
from floe_dagster.core.facts.statistics import (
    NO_STATISTICS,
    LineageSnapshot,
    StatisticsLag,
    StatisticsState,
    rows_changed_percent,
    statistics_lag,
    statistics_work,
)
from floe_dagster.core.basics.tables import TableName
from floe_dagster.spark.operation_steps import build_procedure_call, summarize_result
from floe_dagster.spark.operation_steps.compute_statistics import partition_statistics_call, summarize_statistics
from floe_dagster_tests.unit.test_policy_formats import kebab_errors, kebab_policies

NOW = datetime(2026, 6, 10, 12, tzinfo=timezone.utc)
NOW_MS = int(NOW.timestamp() * 1000)
STATS = Operation.COMPUTE_STATISTICS
TABLE = TableName("lake", ("sales",), "orders")


# -- the lag -------------------------------------------------------------------------------------------


def lineage(*snapshots: tuple[int, str, int, int]) -> list[LineageSnapshot]:
    """Current snapshot first."""
    return [LineageSnapshot(*s) for s in snapshots]


def test_the_lag_counts_commits_and_changed_rows_since_the_newest_statistics_file():
    history = lineage((5, "append", 10, 0), (4, "replace", 40, 40), (3, "delete", 0, 5), (2, "append", 100, 0),
                      (1, "append", 100, 0))
    assert statistics_lag(history, [5]) == StatisticsLag(5, 0, 0)
    # a rewrite (replace) is a commit behind, but changes no rows
    assert statistics_lag(history, [2]) == StatisticsLag(2, 3, 15)
    # the newest file of the lineage wins; a file of a snapshot outside it (rolled back) describes none of it
    assert statistics_lag(history, [1, 3, 999]) == StatisticsLag(3, 2, 10)
    assert statistics_lag(history, [999]) == NO_STATISTICS
    assert statistics_lag([], []) == NO_STATISTICS


def test_merge_on_read_deletes_count_the_rows_their_delete_files_delete():
    """A merge-on-read DELETE or UPDATE writes delete files, no data file for the rows it removes: its
    summary's added-position-deletes (a row each) and added-equality-deletes count as changed rows."""
    history = [
        LineageSnapshot(4, "overwrite", rows_added=3, position_deletes_added=3),  # an UPDATE of 3 rows
        LineageSnapshot(3, "delete", equality_deletes_added=2),  # deletes by key from a streaming writer
        LineageSnapshot(2, "overwrite", position_deletes_added=5),  # DELETE ... WHERE: 5 rows
        LineageSnapshot(1, "replace", rows_added=40, rows_deleted=40, position_deletes_added=7),  # rewritten deletes
        LineageSnapshot(0, "append", rows_added=100),
    ]
    assert statistics_lag(history, [0]) == StatisticsLag(0, 4, 3 + 3 + 2 + 5)
    assert statistics_lag(history, [2]) == StatisticsLag(2, 2, 8)
    assert history[1].rows_changed == 2 and history[3].rows_changed == 0


def test_rows_changed_percent_is_of_the_rows_the_table_holds_now():
    assert rows_changed_percent(15, 200) == 7.5
    assert rows_changed_percent(0, 0) == 0.0 and rows_changed_percent(3, 0) == 100.0
    assert rows_changed_percent(None, 200) is None


# -- the no-change rule ----------------------------------------------------------------------------------


def state(**changes) -> StatisticsState:
    base = StatisticsState(current_snapshot_id=7, partitioned=True, statistics_snapshot_id=7,
                           statistics_columns=frozenset({"id", "k"}), partition_statistics_snapshot_id=7)
    return replace(base, **changes)


def test_statistics_already_current_for_the_snapshot_are_no_work():
    work = statistics_work(state(), None, True)
    assert work.nothing and work.reasons == ("statistics are already current for snapshot 7",)
    assert statistics_work(state(), ["id"], True).nothing


def test_what_is_missing_for_the_current_snapshot_is_computed():
    stale = statistics_work(state(statistics_snapshot_id=6, partition_statistics_snapshot_id=6), None, True)
    assert (stale.table_stats, stale.partition_stats) == (True, True)
    assert stale.reasons == ("no table statistics for the current snapshot 7",
                             "no partition statistics for the current snapshot 7")
    wider = statistics_work(state(), ["id", "amount"], True)
    assert (wider.table_stats, wider.partition_stats) == (True, False)
    assert wider.reasons == ("the current snapshot's statistics lack amount",)


def test_partition_statistics_only_on_partitioned_tables_and_when_wanted():
    unpartitioned = statistics_work(state(partitioned=False, partition_statistics_snapshot_id=None), None, True)
    assert unpartitioned.nothing
    assert not statistics_work(state(partition_statistics_snapshot_id=None), None, False).partition_stats
    assert statistics_work(state(partition_statistics_snapshot_id=None), None, True).partition_stats
    assert statistics_work(state(current_snapshot_id=None), None, True).nothing  # an empty table


# -- the stale-statistics trigger conditions ----------------------------------------------------------------


def metrics(**changes) -> TableMetrics:
    base = TableMetrics(qualified_name="lake.sales.orders", metadata_location=None, tier="summary",
                        collected_at_ms=NOW_MS, data_file_count=4, record_count=200, snapshot_count=6,
                        statistics_snapshot_id=2, statistics_snapshots_behind=3, statistics_rows_changed=15)
    return replace(base, **changes)


def gate(m: TableMetrics | None, **raw):
    return evaluate_conditions(TriggerConditions.from_mapping(raw), STATS, m, None, NOW)


def test_stale_after_n_snapshots():
    assert gate(metrics(), statsStaleSnapshots=3).passed
    result = gate(metrics(), statsStaleSnapshots=4)
    assert not result.passed and result.blocked_code == "conditions_unmet"
    assert result.detail == "conditions not met (OR): statsStaleSnapshots 3 < 4"
    assert not gate(metrics(statistics_snapshots_behind=0, statistics_rows_changed=0), statsStaleSnapshots=1).passed


def test_stale_after_a_percentage_of_rows():
    assert gate(metrics(), statsStaleRowsPercent=7.5).passed  # 15 of 200 rows
    assert not gate(metrics(), statsStaleRowsPercent=8).passed
    met, unmet = floe_condition_strings(gate(metrics(), statsStaleRowsPercent=8, statsStaleSnapshots=3), NOW)
    assert met == ["Snapshots since statistics: 3 >= 3"] and unmet == ["Rows changed since statistics: 7.5% < 8.0%"]


def test_no_statistics_at_all_with_data_is_stale_whatever_the_threshold():
    bare = metrics(statistics_snapshot_id=None, statistics_snapshots_behind=None, statistics_rows_changed=None)
    result = gate(bare, statsStaleSnapshots=100)
    assert result.passed
    assert result.detail == "conditions met (OR): statsStaleSnapshots: the table has data and no statistics"
    assert gate(bare, statsStaleRowsPercent=50, triggerLogic="AND", statsStaleSnapshots=100).passed
    empty = replace(bare, data_file_count=0, record_count=0, snapshot_count=0)
    assert not gate(empty, statsStaleSnapshots=1).passed and not gate(empty, statsStaleRowsPercent=1).passed


def test_the_staleness_is_in_the_health_record_and_needs_only_the_summary_tier():
    from floe_dagster.core.facts.health_assessment import assess_health

    derived = assess_health(metrics(), None, NOW).derived
    assert (derived["statistics_snapshots_behind"], derived["statistics_rows_changed_percent"]) == (3, 7.5)
    assert metrics().report_json()["statistics_snapshot_id"] == 2
    assert TableMetrics.from_json(metrics().to_json()) == metrics()
    assert gate(None, statsStaleSnapshots=1).blocked_code == "no_health"


# -- the policy keys, in both formats ------------------------------------------------------------------


def test_compute_statistics_in_both_policy_formats():
    camel = parse_policies_text("- name: p\n  tablePattern: '*'\n  computeStatistics: {columns: [id, k], "
                                "partitionStats: false}\n  computeStatisticsSchedule: {interval: PT6H}\n"
                                "  triggerConditions: {statsStaleSnapshots: 5, statsStaleRowsPercent: 10}\n")
    loader = kebab_policies("- name: p\n  pattern: '*'\n"
                            "  compute-statistics: {columns: [id, k], partition-stats: false}\n"
                            "  compute-statistics-schedule: {interval-hours: 6}\n"
                            "  trigger-conditions: {stats-stale-snapshots: 5, stats-stale-rows-percent: 10}\n")
    for policy in (camel.get("p"), loader.get("p")):
        assert policy.config(STATS) == ComputeStatisticsConfig(columns=("id", "k"), partition_stats=False)
        assert policy.enabled_operations() == [STATS]
        assert dict(policy.trigger_conditions.thresholds) == {"statsStaleSnapshots": 5, "statsStaleRowsPercent": 10}
    assert camel.get("p").config(STATS).to_json() == {"columns": ["id", "k"], "partitionStats": False}
    assert ComputeStatisticsConfig.from_mapping({}).wants_partition_stats
    assert Operation.parse("compute-statistics") is STATS and Operation.parse("compute_table_stats") is STATS
    assert STATS.order > Operation.REWRITE_POSITION_DELETE_FILES.order  # after Floe's five (and row retention)
    assert STATS.policy_key == "computeStatistics" and STATS.schedule_key == "computeStatisticsSchedule"
    assert not STATS.rewrites_data and not STATS.needs_gc


@pytest.mark.parametrize("config, message", [
    ("{columns: []}", "computeStatistics.columns: must name at least one column"),
    ("{columns: id}", "computeStatistics.columns: expected a list of text, got"),
    ("{columns: [id, id]}", "computeStatistics.columns[1]: 'id' is listed twice"),
    ("{columns: ['a,b']}", "computeStatistics.columns[0]: 'a,b' is not a column name"),
    ("{partitionStats: sometimes}", "computeStatistics.partitionStats: expected"),
    ("{ndv: true}", "computeStatistics.ndv: unknown field; valid fields: columns, partitionStats"),
])
def test_bad_statistics_options_are_named(config, message):
    with pytest.raises(PolicyError) as caught:
        parse_policies_text(f"- name: p\n  tablePattern: '*'\n  computeStatistics: {config}\n")
    assert any(message in error for error in caught.value.errors), caught.value.errors


def test_validate_names_the_file_policy_and_field(tmp_path):
    (tmp_path / "stats.yaml").write_text("name: nightly\ntablePattern: 'lake.*'\ncomputeStatistics: {columns: []}\n"
                                         "computeStatisticsSchedule: {interval: P1D}\n"
                                         "triggerConditions: {statsStaleRowsPercent: -1}\n")
    errors = validate_policy_paths([tmp_path]).errors
    assert len(errors) == 2, errors
    assert errors[0].startswith(f"{tmp_path / 'stats.yaml'}: policy 'nightly': computeStatistics.columns: ")
    assert "triggerConditions.statsStaleRowsPercent" in errors[1]
    loader = kebab_errors("- name: p\n  pattern: '*'\n  compute-statistics: {colums: [id]}\n")
    assert any("compute-statistics" in e and "colums" in e for e in loader), loader


# -- the procedures --------------------------------------------------------------------------------------


def test_compute_table_stats_sql_names_the_snapshot_and_quotes_the_columns():
    config = ComputeStatisticsConfig(columns=("id", "it's"))
    call = build_procedure_call(STATS, TABLE, config, NOW, snapshot_id=42)
    assert call.sql.startswith("CALL `lake`.`system`.compute_table_stats(table => ")
    assert call.sql.endswith(", snapshot_id => 42, columns => array('id', 'it\\'s'))")
    assert call.arguments == {"snapshot_id": 42, "columns": ["id", "it's"]}
    every = build_procedure_call(STATS, TABLE, ComputeStatisticsConfig(), NOW)
    assert "snapshot_id" not in every.sql and "columns" not in every.sql
    partitions = partition_statistics_call(TABLE, 42)
    assert partitions.sql.startswith("CALL `lake`.`system`.compute_partition_stats(table => ")
    assert partitions.sql.endswith(", snapshot_id => 42)")


def test_a_statistics_file_written_is_a_change():
    written = summarize_statistics([{"statistics_file": "file:/wh/t/metadata/1-a.stats"}],
                                   [{"partition_statistics_file": "file:/wh/t/metadata/partition-stats-1.parquet"}])
    assert written.changed and written.numbers == {"statistics_files_written": 1,
                                                   "partition_statistics_files_written": 1}
    nothing = summarize_statistics([], [])
    assert not nothing.changed and nothing.bytes_rewritten == 0
    assert summarize_result(STATS, [{"statistics_file": "x"}]).numbers["statistics_files_written"] == 1


# -- the planner: stale statistics admit the operation like any other condition ------------------------------


def test_the_planner_admits_compute_statistics_when_the_statistics_are_stale():
    from floe_dagster_tests.unit import test_planner as P

    stats_policy = P.policies(P.policy(schedules={STATS: {"interval": "PT6H"}},
                                       conditions={"statsStaleSnapshots": 3}))
    lagging = P.metrics(P.A, statistics_snapshot_id=90, statistics_snapshots_behind=3, statistics_rows_changed=40)
    admitted = P.decision(P.run(stats_policy, health={P.A: lagging}), P.A, STATS)
    assert admitted.decision == "run" and admitted.trigger == "interval"
    current = P.metrics(P.A, statistics_snapshot_id=100, statistics_snapshots_behind=0, statistics_rows_changed=0)
    skipped = P.decision(P.run(stats_policy, health={P.A: current}), P.A, STATS)
    assert P.code(skipped) == "conditions_unmet"
    assert skipped.reasons[0] == "conditions_unmet: conditions not met (OR): statsStaleSnapshots 0 < 3"
    never = P.metrics(P.A)  # data, and no statistics at all
    assert P.decision(P.run(stats_policy, health={P.A: never}), P.A, STATS).decision == "run"
