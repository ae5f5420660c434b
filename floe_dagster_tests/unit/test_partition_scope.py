"""Partition-scoped rewrites (issue 21, item 3): which partitions a capped run takes (benefit per byte,
the cap, one oversized partition), how the planner scopes a decision and continues its backlog (same
slot, next attempt), and the where predicates the engine sends. Pure: ``now`` injected, no Spark."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest

from floe_dagster.core.rewrites.rewrite_rules import RewriteRules
from floe_dagster.core.runs.history import OperationHistory
from floe_dagster.core.facts.measurements import TableMetrics
from floe_dagster.core.operations import Operation
from floe_dagster.core.rewrites.partition_scope import (
    MAX_SCOPED_PARTITIONS,
    Backlog,
    PartitionField,
    PartitionSelection,
    RewriteScope,
    ScopeUnit,
    plan_scope,
    scope_units,
    select_units,
)
from floe_dagster.core.plan.planner import PlanInput, SchedulerSettings, plan
from floe_dagster.core.policies.policy import parse_policies_text
from floe_dagster.core.basics.tables import TableName
from floe_dagster.spark.partition_predicates import partition_predicate
from floe_dagster.spark.operation_steps import build_procedure_call
from floe_dagster.core.operation_kinds.rewrite_data_files import RewriteDataFilesConfig

UTC = timezone.utc
NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
RDF = Operation.REWRITE_DATA_FILES
T = TableName("demo", ("sales",), "big")
MB = 1024 * 1024


# -- selection -------------------------------------------------------------------------------------------


def _units(*specs: tuple) -> list[ScopeUnit]:
    return [ScopeUnit(key, bytes=b, files=f, delete_files=d, output_files=1) for key, b, f, d in specs]


def test_selection_prefers_benefit_per_byte_and_respects_the_cap():
    units = _units(
        ("[1]", 100, 2, 0),  # 1 file removed per 100 bytes
        ("[2]", 100, 11, 0),  # 10 per 100 bytes: second best
        ("[3]", 200, 6, 0),  # 5 per 200
        ("[4]", 50, 3, 4),  # 2 + 4 per 50: the best
    )
    assert [u.key for u in select_units(units, cap=160)] == ["[4]", "[2]"]


def test_selection_passes_over_a_unit_that_does_not_fit_for_smaller_ones():
    units = _units(("[big]", 300, 100, 0), ("[a]", 60, 3, 0), ("[b]", 60, 2, 0))
    assert [u.key for u in select_units(units, cap=130)] == ["[a]", "[b]"]


def test_selection_takes_at_most_the_term_bound():
    units = _units(*((f"[{i}]", 1, 2, 0) for i in range(MAX_SCOPED_PARTITIONS + 50)))
    assert len(select_units(units, cap=10**9)) == MAX_SCOPED_PARTITIONS
    assert len(select_units(units, cap=10**9, limit=3)) == 3


def test_a_unit_iceberg_would_not_rewrite_is_never_taken():
    idle = ScopeUnit("[1]", bytes=10, files=1, rewritten_files=0)  # one small file: its group is not kept
    assert not idle.useful and select_units([idle], cap=100) == []


def _metrics(groups, specs, current=0, **more) -> TableMetrics:
    total = sum(sum(sizes) for _, sizes, _ in groups)
    return TableMetrics(qualified_name=T.qualified, metadata_location="m", tier="full", collected_at_ms=0,
                        data_file_count=sum(len(s) for _, s, _ in groups), total_data_bytes=total,
                        record_count=100, data_file_groups=tuple(groups), partition_spec_id=current,
                        partition_specs=specs, current_snapshot_id=1, **more)


RULES = RewriteRules.sized(100 * MB, min_input_files=2)
REGION = (1, "region", "identity", "string")
AT_DAY = (2, "at", "day", "timestamptz")
ID_BUCKET = (3, "id", "bucket[4]", "long")


def test_partition_costs_follow_icebergs_planner_rules():
    rules = RewriteRules.sized(100 * MB, delete_file_threshold=2)  # small files: under 75 MB
    record = _metrics([
        ('["a"]', (MB,) * 6, ()),  # six small files: rewritten
        ('["b"]', (90 * MB, 90 * MB), ()),  # well sized: nothing taken
        ('["c"]', (MB, MB), ((0, 3, 0, 10), (1, 2, 0, 10))),  # 2 files (< min-input-files) but deletes
    ], ((0, (REGION,)),))
    fields, units, table = scope_units(record, rules)
    assert [f.source for f in fields] == ["region"]
    costs = {u.key: u for u in units if u.useful}
    assert set(costs) == {'["a"]', '["c"]'}
    assert (costs['["a"]'].bytes, costs['["a"]'].files, costs['["a"]'].benefit) == (6 * MB, 6, 5)
    assert costs['["c"]'].delete_files == 5 and costs['["c"]'].benefit == 1 + 5
    assert table.bytes == 8 * MB
    summary_only = TableMetrics(qualified_name=T.qualified, metadata_location="m", tier="summary",
                                collected_at_ms=0, data_file_count=1, total_data_bytes=1, record_count=1)
    assert plan_scope(summary_only, rules, cap=1) is None


def test_a_partition_added_to_an_unpartitioned_table_takes_the_old_specs_files_by_their_own_where():
    """The review's table: unpartitioned, then identity(region). Files of the old spec hold every
    region, so no where on region selects partitions exactly: no unit is exact. First the regions,
    whole, with min-file-size-bytes lowered to the smallest old file for the run (the where on region
    scans the old files too, which are then no candidates). Then the old spec's files, one rewrite
    group, which ``region NOT IN (the current spec's regions) OR region IS NULL`` selects exactly;
    the run takes them bounded by max-files-to-rewrite, charged as the largest of them, and what is
    left of them is the backlog."""
    old = ("0:[]", (3 * MB, 3 * MB, 2 * MB, 2 * MB), ())
    new = [(f'["{r}"]', (MB, MB, MB), ()) for r in ("eu", "us", "apac", "af")]
    record = _metrics([old, *new], ((0, ()), (1, (REGION,))), current=1)
    fields, units, table = scope_units(record, RULES)
    assert fields == () and units == []
    assert table.bytes == 22 * MB  # the old spec's four files are one group (Iceberg's), all taken
    cap = 7 * MB
    first = plan_scope(record, RULES, cap)
    assert len(first.partitions) == 2 and first.bytes == 6 * MB and first.min_file_size == 2 * MB
    assert (first.backlog_partitions, first.backlog_bytes) == (3, 16 * MB) and first.max_files is None
    call = build_procedure_call(RDF, T, RewriteDataFilesConfig(min_input_files=2), NOW, scope=RewriteScope(
        first.partitions, first.fields, first.files, first.max_files, first.older_specs_excluding,
        first.min_file_size, first.min_input_files))
    assert "'min-file-size-bytes', '2097152'" in call.sql and "where => '`region` IN (" in call.sql, call.sql
    assert call.arguments["scope"] == "where + min-file-size-bytes"
    # The regions compacted (one file each): the old spec's files by their own where.
    compacted = [(f'["{r}"]', (3 * MB,), ()) for r in ("eu", "us", "apac", "af")]
    record = _metrics([old, *compacted], ((0, ()), (1, (REGION,))), current=1)
    chosen = plan_scope(record, RULES, cap)
    assert chosen.partitions == () and chosen.max_files == 2 and chosen.bytes == 6 * MB <= cap
    assert chosen.older_specs_excluding == ('["af"]', '["apac"]', '["eu"]', '["us"]')
    assert (chosen.backlog_bytes, chosen.backlog_partitions) == (4 * MB, 1) and not chosen.oversized
    assert "files of older partition specs" in chosen.describe() and chosen.older_specs_alone
    call = build_procedure_call(RDF, T, RewriteDataFilesConfig(min_input_files=2), NOW, scope=RewriteScope(
        chosen.partitions, chosen.fields, chosen.files, chosen.max_files, chosen.older_specs_excluding))
    assert "'max-files-to-rewrite', '2'" in call.sql
    assert ("where => '(`region` NOT IN (\\'af\\', \\'apac\\', \\'eu\\', \\'us\\')) OR (`region` IS NULL)'"
            in call.sql), call.sql
    assert call.arguments["scope"] == "where + max-files-to-rewrite"
    # When the old spec's files fit, the table's own rewrite fits: no scope.
    assert plan_scope(record, RULES, 11 * MB) is None
    # Once the old spec's files are gone, the same table scopes by region again.
    chosen = plan_scope(_metrics(new, ((0, ()), (1, (REGION,))), current=1), RULES, cap)
    assert chosen.max_files is None and len(chosen.partitions) == 2 and chosen.bytes == 6 * MB
    assert chosen.older_specs_excluding is None and chosen.min_file_size is None


def test_a_file_an_earlier_run_wrote_does_not_size_the_next_runs_file_count():
    """The issue's observation: 90 old-spec files and 46 new of about 12 KB under a cap of 213 KB. The
    first run wrote its 200 KB into the current spec's partitions; the next run's file count was sized
    by that file (two files), and Iceberg took whichever group its hash order gave first. Now the count
    is sized by the old spec's own files, which the where keeps apart from what earlier runs wrote."""
    kb = 1024
    old = ("0:[]", (12 * kb,) * 74, ())
    new = [('["eu"]', (200 * kb,) + (12 * kb,) * 12, ()),  # the first run's output beside small files
           *((f'["{r}"]', (12 * kb,) * 11, ()) for r in ("us", "ap", "af"))]
    record = _metrics([old, *new], ((0, ()), (1, (REGION,))), current=1)
    chosen = plan_scope(record, RULES, cap=213 * kb)
    assert chosen.max_files == 17 and chosen.bytes == 17 * 12 * kb  # 17 files, not 2
    assert chosen.older_specs_excluding == ('["af"]', '["ap"]', '["eu"]', '["us"]')


def test_an_older_spec_with_a_field_on_the_column_gives_no_older_specs_where():
    """identity(region) then identity(region), identity(kind): a where on region would also weigh the
    old spec's region values, so the old specs' where is not used (the older spec refines region:
    units by region are exact anyway)."""
    kind = (4, "kind", "identity", "string")
    groups = [('0:["eu"]', (MB,) * 3, ()), ('["eu","a"]', (MB,) * 3, ()), ('["us","b"]', (MB,) * 3, ())]
    chosen = plan_scope(_metrics(groups, ((0, (REGION,)), (1, (REGION, kind))), current=1), RULES, cap=4 * MB)
    assert chosen.older_specs_excluding is None and chosen.partitions


def test_the_older_specs_where_is_written_exactly_or_not_at_all():
    region = PartitionField("region", "identity", "string")
    assert partition_predicate((region,), ['["us"]', '["eu"]'], older_specs=True) == \
        "(`region` NOT IN ('eu', 'us')) OR (`region` IS NULL)"
    day = PartitionField("d", "identity", "date")
    assert partition_predicate((day,), ["[19800]"], older_specs=True) == \
        "(`d` NOT IN (DATE '2024-03-18')) OR (`d` IS NULL)"
    assert partition_predicate((PartitionField("at", "day", "timestamptz"),), ["[1]"], older_specs=True) is None
    assert partition_predicate((region,), [], older_specs=True) is None
    assert partition_predicate((PartitionField("x", "identity", "double"),), ['["NaN"]'], older_specs=True) is None


def test_files_of_an_older_spec_are_never_the_current_null_partition():
    """identity(region) then identity(region), day(at): the old spec's files belong to the region
    their own partition says; the current (null, null) partition is a unit of its own."""
    old = [("0:[\"eu\"]", (MB, MB), ()), ("0:[null]", (MB, MB), ())]
    new = [('["eu",20000]', (MB, MB), ()), ('["us",20000]', (MB, MB, MB), ()), ("[null,null]", (MB, MB), ())]
    record = _metrics([*old, *new], ((0, (REGION,)), (1, (REGION, AT_DAY))), current=1)
    fields, units, _ = scope_units(record, RULES)
    assert [f.describe() for f in fields] == ["region"]
    by_key = {u.key: u for u in units}
    assert set(by_key) == {'["eu"]', '["us"]', "[null]"}
    # eu: the current partition's 2 files plus the old spec's 2 eu files (charged whole: the old
    # spec's files share one rewrite group with the null partition, which may pass only with them)
    assert by_key['["eu"]'].bytes == 4 * MB and by_key["[null]"].bytes == 4 * MB
    # null: 4 files into 1 (3 per 4 MB) beats us (2 per 3 MB) and eu (2 per 4 MB)
    chosen = plan_scope(record, RULES, cap=5 * MB)
    assert chosen.partitions == ("[null]",) and chosen.bytes == 4 * MB
    assert (chosen.backlog_partitions, chosen.backlog_bytes) == (2, 7 * MB)
    # selects the current null partition and the old spec's null files, both whole
    assert partition_predicate(chosen.fields, chosen.partitions) == "`region` IS NULL"


def test_a_finer_time_field_on_an_older_spec_still_scopes_by_the_coarser_one():
    """month(at) replaced by day(at): a month range selects exactly the old month files and the new
    day files inside it; the units are months. day(at) replaced by hour(at): days."""
    at_month = (2, "at", "month", "timestamptz")
    record = _metrics([("0:[600]", (MB, MB), ()), ('[18263]', (MB, MB), ()), ('[18294]', (MB, MB), ())],
                      ((0, (at_month,)), (1, (AT_DAY,))), current=1)
    fields, units, _ = scope_units(record, RULES)
    assert [f.describe() for f in fields] == ["month(at)"]
    assert {u.key: u.files for u in units} == {"[600]": 4, "[601]": 2}  # 2020-01: old files and 2020-01-01
    assert partition_predicate(fields, ["[600]"]) == (
        "`at` >= TIMESTAMP '2020-01-01 00:00:00.000000Z' AND `at` < TIMESTAMP '2020-02-01 00:00:00.000000Z'")
    day_then_hour = _metrics([("0:[18263]", (MB, MB), ()), ('[438312]', (MB, MB), ())],
                             ((0, (AT_DAY,)), (1, ((2, "at", "hour", "timestamptz"),))), current=1)
    fields, units, _ = scope_units(day_then_hour, RULES)
    assert [f.describe() for f in fields] == ["day(at)"]  # an hour cannot select a day file exactly; a day can
    assert [u.key for u in units] == ["[18263]"]


def test_a_bucket_field_scopes_by_the_other_fields_or_by_file_count():
    groups = [(f'["{r}",{b}]', (MB, MB), ()) for r in ("eu", "us") for b in range(4)]
    record = _metrics(groups, ((0, (REGION, ID_BUCKET)),))
    chosen = plan_scope(record, RULES, cap=9 * MB)
    assert [f.describe() for f in chosen.fields] == ["region"] and len(chosen.partitions) == 1
    assert chosen.bytes == 8 * MB and chosen.max_files is None  # one region: its four buckets
    assert partition_predicate(chosen.fields, chosen.partitions) in ("`region` = 'eu'", "`region` = 'us'")
    only_bucket = _metrics([(f"[{b}]", (MB, MB, MB), ()) for b in range(4)], ((0, (ID_BUCKET,)),))
    chosen = plan_scope(only_bucket, RULES, cap=5 * MB)
    assert chosen.partitions == () and chosen.max_files == 5 and chosen.bytes == 5 * MB


def test_when_no_unit_fits_the_best_one_runs_by_file_count_within_the_cap():
    record = _metrics([('["a"]', (10,) * 50, ()), ('["b"]', (150, 150), ())], ((0, (REGION,)),))
    rules = RewriteRules.sized(1000, min_input_files=2)
    chosen = plan_scope(record, rules, cap=100)
    assert chosen.partitions == ('["a"]',) and chosen.max_files == 10 and chosen.bytes == 100
    assert not chosen.oversized and chosen.backlog_bytes == 400 + 300
    # Not even two files fit: the smallest step (two files) runs alone, over the cap, and says so.
    chosen = plan_scope(record, rules, cap=15)
    assert chosen.oversized and chosen.max_files == 2 and chosen.bytes == 20
    assert "not even two files fit" in chosen.describe()


def test_backlog_is_open_until_a_run_succeeds_without_one():
    at = NOW - timedelta(hours=1)
    left = Backlog("slot", at, partitions=3, bytes=300, continuation=False)
    assert left.open_after(None)  # the scoped run has not succeeded yet: still open
    assert left.open_after(at + timedelta(minutes=1))  # it succeeded, bytes left: continue
    done = Backlog("slot", at, partitions=0, bytes=0, continuation=True)
    assert done.open_after(at - timedelta(minutes=5))  # the continuation failed: retry it
    assert not done.open_after(at + timedelta(minutes=1))  # the last continuation succeeded: done


# -- the planner -----------------------------------------------------------------------------------------


def _policy(options: dict | None = None, schedule: dict | None = None) -> str:
    return json.dumps([{"name": "p", "tablePattern": "demo.sales.*", "rewriteDataFiles": options or {},
                        "rewriteDataFilesSchedule": {"cronExpression": "0 0 * * *", **(schedule or {})}}])


def _record() -> TableMetrics:
    """Ten day partitions; partition i holds 2 + i small files of 1 MB (later ones gain more per byte)."""
    groups = tuple((f"[{19000 + i}]", (MB,) * (2 + i), ()) for i in range(10))
    total = sum(len(sizes) for _, sizes, _ in groups) * MB
    return TableMetrics(qualified_name=T.qualified, metadata_location="m", tier="full", collected_at_ms=0,
                        data_file_count=total // MB, total_data_bytes=total, record_count=1000,
                        partition_count=10, data_file_groups=groups, current_snapshot_id=1,
                        partition_spec_id=0, partition_specs=((0, (AT_DAY,)),))


def _plan(options: dict | None = None, *, history=None, backlogs=None, last_attempts=None, limits=None,
          now: datetime = NOW, schedule: dict | None = None, record: TableMetrics | None = None):
    record = record or _record()
    from floe_dagster.core.rewrites.estimates import estimate_rewrite_data_files

    data = PlanInput(
        now=now, catalog_tables=(T,), loaded_tables=frozenset({T}),
        policies=parse_policies_text(_policy(options, schedule)), limits=limits or SchedulerSettings(),
        metrics={T: record}, history=history or {}, last_attempts=last_attempts or {},
        backlogs=backlogs or {},
        estimate_bytes=lambda table, op, m, config: estimate_rewrite_data_files(m, config).bytes,
    )
    return [d for d in plan(data).decisions if d.operation is RDF][0]


def test_a_rewrite_over_the_policy_cap_is_scoped_to_the_best_partitions():
    decision = _plan({"maxBytesPerRun": 40 * MB, "minInputFiles": 2})
    assert decision.decision == "run"
    scope = decision.scope
    assert scope is not None and scope.bytes <= 40 * MB
    assert decision.estimated_bytes == scope.bytes
    # the partitions with the most files removed per byte are the largest ones here (11, 10, 9, ...)
    assert scope.partitions[0] == "[19009]"
    assert scope.backlog_bytes == 65 * MB - scope.bytes and scope.backlog_partitions == 10 - len(scope.partitions)
    assert any("partition-scoped" in r and "maxBytesPerRun" in r for r in decision.reasons)


def test_the_rest_of_the_hourly_budget_caps_the_run_too():
    limits = SchedulerSettings(max_bytes_per_hour=30 * MB)
    decision = _plan({"minInputFiles": 2}, limits=limits)
    assert decision.scope is not None and decision.scope.bytes <= 30 * MB
    assert "max-bytes-per-hour" in decision.reasons[-1]


def test_a_rewrite_that_fits_is_not_scoped():
    decision = _plan({"maxBytesPerRun": 100 * MB, "minInputFiles": 2})
    assert decision.decision == "run" and decision.scope is None and decision.estimated_bytes == 65 * MB


def test_a_table_whose_recorded_files_outweigh_its_total_bytes_is_still_scoped():
    # Admission bounds a rewrite by the larger of the table's total and its recorded files before it reads the
    # estimate: a record whose total understates its files (65 MB of files, 1 MB told) is scoped as before.
    understated = replace(_record(), total_data_bytes=MB)
    decision = _plan({"maxBytesPerRun": 40 * MB, "minInputFiles": 2}, record=understated)
    assert decision.scope is not None and decision.scope.bytes <= 40 * MB


def test_a_rewrite_that_cannot_exceed_its_run_is_admitted_without_reading_its_estimate():
    read = []
    record = _record()
    data = PlanInput(
        now=NOW, catalog_tables=(T,), loaded_tables=frozenset({T}),
        policies=parse_policies_text(_policy({"maxBytesPerRun": 100 * MB, "minInputFiles": 2})),
        limits=SchedulerSettings(max_run_requests_per_tick=0), metrics={T: record}, history={}, last_attempts={},
        estimate_bytes=lambda table, op, m, config: read.append(op) or 65 * MB,
    )
    decision = [d for d in plan(data).decisions if d.operation is RDF][0]
    assert decision.code == "tick_cap" and decision.scope is None
    assert read == []  # held back past the tick cap: scoping needed no estimate
    assert decision.estimated_bytes == 65 * MB and read == [RDF]  # made when a reader asks


def test_the_backlog_continues_in_the_same_slot_with_the_next_attempt_and_no_backoff():
    slot = "2026-11-23T00:00:00+00:00"
    admitted = NOW - timedelta(minutes=30)
    history = {(T.qualified, RDF): OperationHistory(last_success_start=admitted + timedelta(minutes=1),
                                                   last_run_start=admitted + timedelta(minutes=1))}
    backlogs = {(T.qualified, RDF): Backlog(slot, admitted, partitions=6, bytes=40 * MB, continuation=False)}
    decision = _plan({"maxBytesPerRun": 40 * MB, "minInputFiles": 2}, history=history, backlogs=backlogs,
                     last_attempts={(T.qualified, RDF, slot): 0})
    assert decision.decision == "run", decision.reasons
    assert (decision.trigger, decision.slot, decision.attempt) == ("backlog", slot, 1)
    assert decision.scope is not None
    # Without the backlog, the slot's successful run means: not due.
    done = _plan({"maxBytesPerRun": 40 * MB, "minInputFiles": 2}, history=history)
    assert done.decision == "skip" and done.reasons[0].startswith("not_due")


def test_a_finished_backlog_is_not_continued():
    slot = "2026-11-23T00:00:00+00:00"
    admitted = NOW - timedelta(minutes=30)
    history = {(T.qualified, RDF): OperationHistory(last_success_start=admitted + timedelta(minutes=1))}
    backlogs = {(T.qualified, RDF): Backlog(slot, admitted, partitions=0, bytes=0, continuation=True)}
    decision = _plan({"maxBytesPerRun": 40 * MB}, history=history, backlogs=backlogs)
    assert decision.decision == "skip" and decision.reasons[0].startswith("not_due")


def test_selection_round_trips_through_json():
    chosen = PartitionSelection(("[1]", '["a\'b"]'), 10, 3, 2, 20, 12, oversized=True)
    assert PartitionSelection.from_json(json.dumps(chosen.to_json())) == chosen
    assert PartitionSelection.from_json(None) is None
    older = PartitionSelection((), 10, 3, 1, 20, 12, fields=(PartitionField("region", "identity", "string"),),
                               max_files=3, older_specs_excluding=('["eu"]',))
    assert PartitionSelection.from_json(json.dumps(older.to_json())) == older
    assert "older_specs_excluding" not in chosen.to_json()  # a ledger row as before when unused


# -- where predicates ------------------------------------------------------------------------------------


@pytest.mark.parametrize("fields, keys, expected", [
    ([PartitionField("region", "identity", "string")], ['["eu"]', '["us"]'], "`region` IN ('eu', 'us')"),
    ([PartitionField("region", "identity", "string")], ["[\"it's\\\\\"]"], "`region` = 'it\\'s\\\\'"),
    ([PartitionField("n", "identity", "long")], ["[3]", "[null]"], "(`n` = 3) OR (`n` IS NULL)"),
    ([PartitionField("d", "identity", "date")], ["[19786]"], "`d` = DATE '2024-03-04'"),
    ([PartitionField("ts", "day", "timestamptz")], ["[19786]", "[19787]"],
     "`ts` >= TIMESTAMP '2024-03-04 00:00:00.000000Z' AND `ts` < TIMESTAMP '2024-03-06 00:00:00.000000Z'"),
    ([PartitionField("tn", "hour", "timestamp")], ["[474874]"],
     "`tn` >= TIMESTAMP_NTZ '2024-03-04 10:00:00.000000' AND `tn` < TIMESTAMP_NTZ '2024-03-04 11:00:00.000000'"),
    ([PartitionField("d", "month", "date")], ["[650]"], "`d` >= DATE '2024-03-01' AND `d` < DATE '2024-04-01'"),
    ([PartitionField("d", "month", "date")], ["[659]"], "`d` >= DATE '2024-12-01' AND `d` < DATE '2025-01-01'"),
    ([PartitionField("d", "year", "date")], ["[54]"], "`d` >= DATE '2024-01-01' AND `d` < DATE '2025-01-01'"),
    ([PartitionField("n", "truncate[10]", "int")], ["[20]"], "`n` >= 20 AND `n` < 30"),
    ([PartitionField("s", "truncate[2]", "string")], ['["ab"]', '["a"]'], "(`s` = 'a') OR (`s` LIKE 'ab%')"),
    ([PartitionField("a.b", "identity", "int")], ["[1]"], "`a`.`b` = 1"),
    ([PartitionField("r", "identity", "string"), PartitionField("d", "day", "date")],
     ['["eu",19786]', '["us",null]'],
     "(`r` = 'eu' AND `d` >= DATE '2024-03-04' AND `d` < DATE '2024-03-05') OR (`r` = 'us' AND `d` IS NULL)"),
])
def test_partition_predicates(fields, keys, expected):
    assert partition_predicate(fields, keys) == expected


@pytest.mark.parametrize("fields, keys", [
    ([PartitionField("id", "bucket[16]", "long")], ["[3]"]),  # Iceberg 1.11's where refuses system.bucket
    ([PartitionField("r", "identity", "string"), PartitionField("id", "bucket[4]", "long")], ['["eu",1]']),
    ([PartitionField("s", "truncate[2]", "string")], ['["a%"]']),  # LIKE would not become startsWith
    ([PartitionField("b", "identity", "binary")], ['["0x00"]']),
    ([PartitionField("f", "identity", "double")], ["[NaN]"]),
    ([PartitionField("x", "void", "int")], ["[null]"]),
    ([PartitionField("r", "identity", "string"), PartitionField("x", "void", "int")], ['["eu",null]']),
    ([PartitionField("d", "day", "date")], ["[-3]"]),  # Iceberg widens projections of times before 1970
    ([PartitionField("t", "hour", "date")], ["[3]"]),  # no hour of a date
    ([PartitionField("f", "identity", "double")], ["[-0.0]"]),
    ([PartitionField("n", "identity", "long")], ["[true]"]),
])
def test_inexpressible_partitions_give_no_predicate(fields, keys):
    assert partition_predicate(fields, keys) is None


def test_a_scoped_call_ands_the_policy_filter_and_escapes_values():
    config = RewriteDataFilesConfig(filter="amount > 0", min_input_files=2)
    scope = RewriteScope(("[\"x') OR (1=1\"]",), (PartitionField("region", "identity", "string"),), files=4)
    call = build_procedure_call(RDF, T, config, NOW, scope=scope)
    assert "where => '(amount > 0) AND (`region` = \\'x\\\\\\') OR (1=1\\')'" in call.sql
    assert call.arguments["scope"] == "where" and call.arguments["scoped_partitions"] == 1


def test_a_scope_the_where_cannot_express_bounds_the_files_instead():
    scope = RewriteScope(("[3]",), (PartitionField("id", "bucket[8]", "long"),), files=7)
    call = build_procedure_call(RDF, T, RewriteDataFilesConfig(), NOW, scope=scope)
    assert "'max-files-to-rewrite', '7'" in call.sql and "where" not in call.sql
    tighter = build_procedure_call(RDF, T, RewriteDataFilesConfig(max_files_to_rewrite=3), NOW, scope=scope)
    assert "'max-files-to-rewrite', '3'" in tighter.sql


def test_max_files_to_rewrite_reaches_iceberg_and_max_bytes_per_run_does_not():
    config = RewriteDataFilesConfig.from_mapping({"maxFilesToRewrite": 100, "maxBytesPerRun": 10**9})
    call = build_procedure_call(RDF, T, config, NOW)
    assert "'max-files-to-rewrite', '100'" in call.sql
    assert "bytes-per-run" not in call.sql and "BytesPerRun" not in call.sql
    with pytest.raises(ValueError, match="maxBytesPerRun"):
        RewriteDataFilesConfig.from_mapping({"maxBytesPerRun": 0})


def test_both_policy_formats_spell_the_new_keys(tmp_path):
    from floe_dagster.core.policies.policy import validate_policy_paths

    (tmp_path / "kebab.yaml").write_text(
        "policies:\n  - name: big\n    pattern: 'demo.sales.*'\n"
        "    rewrite-data-files: {max-bytes-per-run: 1000, max-files-to-rewrite: 50}\n"
        "    rewrite-data-files-schedule: {interval-hours: 1}\n")
    (tmp_path / "camel.yaml").write_text(
        "- name: big2\n  tablePattern: 'demo.other.*'\n"
        "  rewriteDataFiles: {maxBytesPerRun: 1000, maxFilesToRewrite: 50}\n"
        "  rewriteDataFilesSchedule: {interval: PT1H}\n")
    for name in ("kebab.yaml", "camel.yaml"):
        result = validate_policy_paths([str(tmp_path / name)])
        assert result.errors == [], result.errors
        [policy] = list(result.policies)
        config = policy.config(RDF)
        assert (config.max_bytes_per_run, config.max_files_to_rewrite) == (1000, 50)


def test_a_backlog_continuation_waits_for_quiet_and_is_forced_from_its_slot():
    slot = "2026-11-23T00:00:00+00:00"
    admitted = NOW - timedelta(minutes=30)
    history = {(T.qualified, RDF): OperationHistory(last_success_start=admitted + timedelta(minutes=1),
                                                   last_run_start=admitted + timedelta(minutes=1))}
    backlogs = {(T.qualified, RDF): Backlog(slot, admitted, partitions=6, bytes=40 * MB, continuation=False)}
    busy = replace(_record(), newest_foreign_commit_ms=int((NOW - timedelta(minutes=1)).timestamp() * 1000),
                   newest_foreign_commit_operation="overwrite")
    options = {"maxBytesPerRun": 40 * MB, "minInputFiles": 2}
    held = _plan(options, history=history, backlogs=backlogs, last_attempts={(T.qualified, RDF, slot): 0},
                 schedule={"quietFor": "PT10M", "maxQuietWait": "P2D"}, record=busy)
    assert held.decision == "skip" and held.reasons[0].startswith("not_quiet: quiet in 9m")
    # Due since its slot (a day and more ago): a shorter limit forces it.
    forced = _plan(options, history=history, backlogs=backlogs, last_attempts={(T.qualified, RDF, slot): 0},
                   schedule={"quietFor": "PT10M", "maxQuietWait": "PT12H"}, record=busy)
    assert forced.decision == "run" and forced.trigger == "backlog"
    assert any(r.startswith("forced after PT12H") for r in forced.reasons), forced.reasons


@pytest.mark.parametrize("key, expected", [
    ("2026-11-23T00:00:00+00:00", datetime(2026, 11, 23, tzinfo=UTC)),
    ("interval:2026-11-23T06:00:00+00:00", datetime(2026, 11, 23, 6, tzinfo=UTC)),
    ("condition:2026-11-22T12:00:00+00:00", datetime(2026, 11, 22, 12, tzinfo=UTC)),
    ("interval:first", None), ("cron:none", None), ("manual:abc", None),
])
def test_a_backlogs_slot_time_is_read_back_from_every_kind_of_slot_key(key, expected):
    from floe_dagster.core.plan.gate_chains import slot_time

    assert slot_time(key) == expected


def test_an_estimate_that_fits_but_depends_on_icebergs_scan_order_is_scoped_by_its_bound():
    """Seven 1 MB files in one partition with groups of at most 3 MB: bins of 3, 3 and 1 file in this
    order (the last alone, not rewritten: 6 MB estimated), but Iceberg's scan order decides the bins,
    so up to all 7 MB may go. With a 6.5 MB cap the estimate fits and the bound does not: scoped."""
    options = {"maxBytesPerRun": int(6.5 * MB), "minInputFiles": 2, "maxFileGroupSizeBytes": 3 * MB,
               "targetFileSizeBytes": 100 * MB}
    record = _metrics([('["a"]', (MB,) * 7, ()), ('["b"]', (90 * MB,), ())], ((0, (REGION,)),))
    decision = _plan(options, record=record)
    assert decision.decision == "run" and decision.scope is not None
    assert decision.scope.max_files == 6 and decision.estimated_bytes == 6 * MB
    # A table within one bin: the estimate is a bound whatever the order, so a fitting one runs whole.
    small = _metrics([('["a"]', (MB,) * 7, ())], ((0, (REGION,)),))
    whole = _plan({**options, "maxFileGroupSizeBytes": 100 * MB, "maxBytesPerRun": 7 * MB}, record=small)
    assert whole.decision == "run" and whole.scope is None and whole.estimated_bytes == 7 * MB


def test_a_scoped_call_can_limit_both_the_where_and_the_file_count():
    region = PartitionField("region", "identity", "string", 1)
    scope = RewriteScope(('["eu"]',), (region,), files=10, max_files=3)
    call = build_procedure_call(RDF, T, RewriteDataFilesConfig(min_input_files=2), NOW, scope=scope)
    assert "where => '`region` = \\'eu\\''" in call.sql and "'max-files-to-rewrite', '3'" in call.sql
    assert call.arguments["scope"] == "where + max-files-to-rewrite"
    tighter = build_procedure_call(RDF, T, RewriteDataFilesConfig(max_files_to_rewrite=2), NOW, scope=scope)
    assert "'max-files-to-rewrite', '2'" in tighter.sql  # the policy's own limit is smaller
    whole = build_procedure_call(RDF, T, RewriteDataFilesConfig(), NOW, scope=RewriteScope((), (), 4, 4))
    assert "where" not in whole.sql and whole.arguments["scope"] == "max-files-to-rewrite"


def test_a_recorded_scope_with_more_units_than_the_bound_is_bounded_by_its_files():
    """A ledger row written before the bound (or by hand): no where of unbounded length; its file
    count bounds the run instead."""
    region = PartitionField("region", "identity", "string", 1)
    keys = tuple(f'["r{i}"]' for i in range(MAX_SCOPED_PARTITIONS + 1))
    call = build_procedure_call(RDF, T, RewriteDataFilesConfig(), NOW, scope=RewriteScope(keys, (region,), 12))
    assert "where" not in call.sql and "'max-files-to-rewrite', '12'" in call.sql


def test_a_selection_keeps_its_fields_and_file_count_through_the_ledger():
    region = PartitionField("region", "identity", "string", 1)
    chosen = PartitionSelection(('["eu"]',), 10, 3, 2, 20, 12, fields=(region,), max_files=3, spec_id=1)
    assert PartitionSelection.from_json(json.dumps(chosen.to_json())) == chosen
    legacy = PartitionSelection.from_json({"partitions": ["[1]"], "bytes": 1, "files": 1, "backlog_partitions": 0,
                                           "backlog_bytes": 0, "cap": 1})
    assert legacy.fields is None and legacy.max_files is None  # the run uses the table's current spec
