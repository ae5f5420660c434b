"""EXPIRE_ROWS (the policy's ``rowRetention``) without Spark: its config in both of Floe's policy formats and
every refused value with its message, the cut-off's truncation, the rendered DELETE (identifiers with
quotes, a column trying to break out of its identifier), the column check's messages, what the commits'
summaries say it deleted, its no-change rule and its explain add-on."""

from __future__ import annotations

import json
import logging
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import DateType, LongType, NestedField, StringType, StructType, TimestampType, TimestamptzType

from floe_dagster.core.operation_kinds.expire_rows import ExpireRowsConfig, delete_kind, deleted_numbers, truncate
from floe_dagster.core.operation_kinds.spec import ExplainView
from floe_dagster.core.operations import Operation
from floe_dagster.core.policies.policy import PolicyError, parse_policies_text
from floe_dagster.core.policies.policy_formats import to_loader_policy
from floe_dagster.core.runs.run_tags import PolicyFacts
from floe_dagster.core.basics.tables import TableName
from floe_dagster.errors import MaintenanceFailed
from floe_dagster.policies import ResolvedOperation
from floe_dagster.spark.operation_steps import build_procedure_call, step_of
from floe_dagster.spark.operation_steps.step import TableWork

ROWS = Operation.EXPIRE_ROWS
UTC = timezone.utc
NOW = datetime(2026, 11, 26, 13, 47, 12, 345678, tzinfo=UTC)
TABLE = TableName("lake", ("db",), "events")


def config(**fields) -> ExpireRowsConfig:
    return ExpireRowsConfig.from_mapping(fields)


# -- the config ---------------------------------------------------------------------------------------------


def test_both_policy_formats_give_the_same_config_and_the_loader_spelling_is_derived():
    api = parse_policies_text("""
        name: p
        tablePattern: "db.*"
        rowRetention: {column: event_ts, maxAge: p90d, granularity: month}
        rowRetentionSchedule: {interval: P1D}
    """).get("p")
    loader = parse_policies_text("""
        policies:
          - name: p
            pattern: "db.*"
            row-retention: {column: event_ts, max-age: P90D, granularity: MONTH}
            row-retention-schedule: {interval-days: 1}
    """).get("p")
    expected = ExpireRowsConfig(column="event_ts", max_age="P90D", granularity="MONTH")
    assert api.config(ROWS) == loader.config(ROWS) == expected
    assert api.enabled_operations() == loader.enabled_operations() == [ROWS]
    assert expected.to_json() == {"column": "event_ts", "maxAge": "P90D", "granularity": "MONTH"}
    # the way back (floe-dagster import-floe's direction): kebab keys, no other key
    assert to_loader_policy({"name": "p", "tablePattern": "db.*", "rowRetention": expected.to_json(),
                             "rowRetentionSchedule": {"interval": 1}})["row-retention"] == {
        "column": "event_ts", "max-age": "P90D", "granularity": "MONTH"}
    assert Operation.parse("rowRetention") is Operation.parse("row_retention") is Operation.parse("delete_from") is ROWS


@pytest.mark.parametrize(("raw", "message"), [
    ({}, "rowRetention.column: is required: rowRetention deletes the rows whose column is older than maxAge "
         "(e.g. {column: ts, maxAge: P90D})"),
    ({"column": "ts"}, "rowRetention.maxAge: is required"),
    ({"column": "", "maxAge": "P1D"}, "rowRetention.column: must not be empty"),
    ({"column": 7, "maxAge": "P1D"}, "rowRetention.column: expected text, got 7"),
    ({"column": "ts\n; DROP TABLE x", "maxAge": "P1D"},
     "rowRetention.column: 'ts\\n; DROP TABLE x' holds a control character, which no column name holds"),
    ({"column": "ts", "maxAge": "P1M"}, "rowRetention.maxAge: 'P1M' is not an ISO-8601 duration in days and time"),
    ({"column": "ts", "maxAge": "PT0S"},
     "rowRetention.maxAge: 'PT0S': must be longer than zero (a row's age is counted back from the run), such as P30D"),
    ({"column": "ts", "maxAge": 30}, "rowRetention.maxAge: expected text, got 30"),
    ({"column": "ts", "maxAge": "P1D", "granularity": "WEEK"},
     "rowRetention.granularity: must be one of HOUR, DAY, MONTH, YEAR, got 'WEEK'"),
    ({"column": "ts", "maxAge": "P1D", "maxAgeDays": 3},
     "rowRetention.maxAgeDays: unknown field; did you mean 'maxAge'?"),
])
def test_each_refused_value_is_named_with_its_field(raw, message):
    policy = {"name": "p", "tablePattern": "db.*", "rowRetention": raw}
    with pytest.raises(PolicyError) as caught:
        parse_policies_text(json.dumps(policy))
    assert any(message in error for error in caught.value.errors), caught.value.errors
    assert all(error.startswith("<text>: policy 'p': rowRetention") for error in caught.value.errors)


def test_the_loader_format_names_its_own_spelling_in_messages():
    with pytest.raises(PolicyError) as caught:
        parse_policies_text("policies:\n  - name: p\n    pattern: 'db.*'\n    row-retention: {column: ts, max-age: P1Y}\n")
    assert any("row-retention.max-age: 'P1Y' is not an ISO-8601 duration" in e for e in caught.value.errors), \
        caught.value.errors


# -- the cut-off -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("granularity", "cutoff"), [
    ("HOUR", datetime(2026, 11, 23, 13, tzinfo=UTC)),
    (None, datetime(2026, 11, 23, tzinfo=UTC)),  # DAY by default
    ("MONTH", datetime(2026, 11, 1, tzinfo=UTC)),
    ("YEAR", datetime(2026, 1, 1, tzinfo=UTC)),
])
def test_the_cutoff_is_now_minus_max_age_truncated_down_in_utc(granularity, cutoff):
    assert config(column="ts", maxAge="P3D", granularity=granularity).cutoff(NOW) == cutoff
    berlin = NOW.astimezone(ZoneInfo("Europe/Berlin"))  # the same instant in another zone: the same cut-off
    assert config(column="ts", maxAge="P3D", granularity=granularity).cutoff(berlin) == cutoff


def test_a_cutoff_never_deletes_a_row_younger_than_max_age_and_needs_a_zone():
    young = datetime(2026, 11, 23, 0, 0, 0, 1, tzinfo=UTC)  # 3 days old less a microsecond past midnight
    assert config(column="ts", maxAge="P3D").cutoff(NOW) <= young
    with pytest.raises(ValueError, match="time zone"):
        truncate(datetime(2026, 1, 1), "DAY")


# -- the statement -----------------------------------------------------------------------------------------


def test_the_statement_is_a_delete_with_a_typed_cutoff():
    call = build_procedure_call(ROWS, TABLE, config(column="ts", maxAge="P3D"), NOW)
    assert call.sql == "DELETE FROM `lake`.`db`.`events` WHERE `ts` < TIMESTAMP '2026-11-23 00:00:00.000000Z'"
    assert call.arguments == {"column": "ts", "column_type": "timestamptz", "max_age": "P3D", "granularity": "DAY",
                              "cutoff": "2026-11-23T00:00:00+00:00"}
    step = step_of(ROWS)
    hourly = config(column="d", maxAge="PT36H", granularity="HOUR")
    assert step.render_call(ROWS, TABLE, hourly, NOW, column_type="date").sql.endswith(
        "WHERE `d` < DATE '2026-11-25'")  # the cut-off's day: only whole days before it go
    assert step.render_call(ROWS, TABLE, hourly, NOW, column_type="timestamp").sql.endswith(
        "WHERE `d` < TIMESTAMP_NTZ '2026-11-25 01:00:00.000000'")  # UTC wall time


@pytest.mark.parametrize("column", [
    'event`s "ts"',
    "ts` < now() OR 1=1; DROP TABLE `lake`.`db`.`events`; --",
    "ts' OR '1'='1",
    "ts\\` OR true --",
])
def test_a_column_with_quotes_stays_one_identifier(column):
    """Whatever the column's name holds, it is one back-quoted identifier: every back quote doubled, so the
    statement is the DELETE of one comparison and nothing follows the cut-off."""
    table = TableName("lake", ("we`ird db",), "ev'ents")
    sql = build_procedure_call(ROWS, table, config(column=column, maxAge="P3D"), NOW).sql
    quoted = "`" + column.replace("`", "``") + "`"
    assert sql == (f"DELETE FROM `lake`.`we``ird db`.`ev'ents` WHERE {quoted} < "
                   "TIMESTAMP '2026-11-23 00:00:00.000000Z'")
    # outside the identifiers: only the statement's own words
    outside = sql.replace(quoted, "<column>").replace("`lake`.`we``ird db`.`ev'ents`", "<table>")
    assert outside == "DELETE FROM <table> WHERE <column> < TIMESTAMP '2026-11-23 00:00:00.000000Z'"


# -- the column check, before any engine call --------------------------------------------------------------


SCHEMA = Schema(NestedField(1, "id", LongType()), NestedField(2, "name", StringType()),
                NestedField(3, "ts", TimestamptzType()), NestedField(4, "local", TimestampType()),
                NestedField(5, "day", DateType()))


class _Table:
    def schema(self) -> Schema:
        return SCHEMA


def _work(column: str) -> TableWork:
    resolved = ResolvedOperation(PolicyFacts("retention"), config(column=column, maxAge="P1D"))
    return TableWork(ROWS, TABLE, resolved, None, "run", logging.getLogger("test"), before=_Table())


@pytest.mark.parametrize(("column", "kind"), [("ts", "timestamptz"), ("local", "timestamp"), ("day", "date")])
def test_the_columns_type_reaches_the_engine_call(column, kind):
    step = step_of(ROWS)
    step.check(_work(column))
    assert step.prepare(_work(column)).engine_inputs == {"column_type": kind}


def test_a_missing_column_and_a_column_of_another_type_are_refused_naming_policy_field_and_table():
    step = step_of(ROWS)
    with pytest.raises(MaintenanceFailed) as missing:
        step.check(_work("TS"))  # names are matched exactly, as the schema writes them
    assert str(missing.value) == ("policy 'retention': rowRetention.column names 'TS', which table 'lake.db.events' "
                                  "does not have as a top-level column (its columns: id, name, ts, local, day)")
    with pytest.raises(MaintenanceFailed) as typed:
        step.check(_work("name"))
    assert str(typed.value) == ("policy 'retention': rowRetention.column names 'name', a string column of table "
                                "'lake.db.events'; row retention needs a date, timestamp or timestamptz column")


# -- what it deleted, the no-change rule, explain --------------------------------------------------------


def test_the_summaries_say_what_each_kind_of_delete_did_and_the_no_change_rule_reads_them():
    metadata_only = {"operation": "delete", "deleted-data-files": "2", "deleted-records": "4",
                     "removed-files-size": "2000"}
    copy_on_write = {"operation": "overwrite", "deleted-data-files": "1", "added-data-files": "1",
                     "deleted-records": "10", "added-records": "7", "added-files-size": "700"}
    merge_on_read = {"operation": "overwrite", "added-delete-files": "1", "added-position-deletes": "3"}
    nothing: dict[str, str] = {}
    changed = ROWS.spec.changed
    for summary, rows, kind in ((metadata_only, 4, "metadata-only"), (copy_on_write, 3, "copy-on-write"),
                                (merge_on_read, 3, "merge-on-read"), (nothing, 0, "none")):
        numbers = deleted_numbers([summary])
        assert numbers["rows_deleted"] == rows and delete_kind(numbers) == kind
        assert changed(numbers) is (rows > 0)
    both = deleted_numbers([metadata_only, merge_on_read])  # two commits of one run: summed
    assert both["rows_deleted"] == 7 and both["data_files_deleted"] == 2 and both["delete_files_added"] == 1
    assert deleted_numbers([copy_on_write])["bytes_written"] == 700
    assert changed({"rows_deleted": 0, "data_files_deleted": 1}) is True  # a dropped file of no live row


def test_explain_shows_the_cutoff_a_run_would_use_now():
    explain = ROWS.spec.explain
    view = ExplainView(None, config(column="ts", maxAge="P3D", granularity="HOUR"), None, NOW, lambda: None)
    assert explain(view) == {"rowRetention": {
        "column": "ts", "granularity": "HOUR", "deletesRowsBefore": "2026-11-23T13:00:00+00:00", "timezone": "UTC",
        "zonelessDeletesRowsBefore": "2026-11-23T13:00:00",
        "zoneless": "a date or timestamp (without zone) column is read as wall-clock time in UTC"}}
    berlin = ExplainView(None, config(column="ts", maxAge="P3D", timezone="Europe/Berlin"), None, NOW, lambda: None)
    shown = explain(berlin)["rowRetention"]
    assert (shown["timezone"], shown["zonelessDeletesRowsBefore"], shown["deletesRowsBefore"]) == (
        "Europe/Berlin", "2026-11-23T00:00:00", "2026-11-23T00:00:00+00:00")
    from floe_dagster.reports.explain_text import format_explain_text

    status = {"shouldTrigger": False, "reasons": ["not due"], "nextEligibleTime": None, "debtScore": 0.0,
              "debtBreakdown": {}, "metConditions": [], "unmetConditions": [], **explain(berlin)}
    text_ = format_explain_text({"table": "t", "policyName": "p", "conditionBasedTriggeringEnabled": False,
                                 "operationStatuses": {"EXPIRE_ROWS": status}})
    assert ("    row retention on column 'ts': deletes rows before 2026-11-23T00:00:00+00:00 (timestamptz), or before "
            "2026-11-23T00:00:00 on the Europe/Berlin wall clock (a date or timestamp without zone)") in text_
    assert explain(ExplainView(None, None, None, NOW, lambda: None)) == {"rowRetention": None}


# -- the sharp edges (issue 34, deliverable 7) ---------------------------------------------------------------


def _errors(raw: dict) -> list[str]:
    with pytest.raises(PolicyError) as caught:
        parse_policies_text(json.dumps({"name": "p", "tablePattern": "db.*", "rowRetention": raw}))
    return caught.value.errors


def test_a_max_age_under_one_hour_needs_allow_short():
    assert _errors({"column": "ts", "maxAge": "PT59M"}) == [
        "<text>: policy 'p': rowRetention.maxAge: 'PT59M' is shorter than one hour: a run would delete every row "
        "older than that; set allowShort: true beside it if that is meant"]
    assert config(column="ts", maxAge="PT1M", allowShort=True).max_age == "PT1M"
    assert config(column="ts", maxAge="PT1H").max_age == "PT1H"  # the floor itself is allowed
    assert _errors({"column": "ts", "maxAge": "PT1M", "allowShort": "yes"})[0].startswith(
        "<text>: policy 'p': rowRetention.")
    loader = parse_policies_text("policies:\n  - name: p\n    pattern: 'db.*'\n"
                                 "    row-retention: {column: ts, max-age: PT10M, allow-short: true}\n").get("p")
    assert loader.config(ROWS) == ExpireRowsConfig(column="ts", max_age="PT10M", allow_short=True)
    with pytest.raises(PolicyError) as caught:
        parse_policies_text("policies:\n  - name: p\n    pattern: 'db.*'\n    row-retention: {column: ts, max-age: PT10M}\n")
    assert any("row-retention.max-age: 'PT10M' is shorter than one hour" in e for e in caught.value.errors)


def test_a_zoneless_columns_cutoff_is_the_wall_clock_of_the_policys_timezone():
    step = step_of(ROWS)
    tokyo = config(column="t", maxAge="P3D", granularity="HOUR", timezone="Asia/Tokyo")  # UTC+9
    # 2026-11-23 13:47 UTC is 22:47 in Tokyo: the zone-less cut-off is that wall clock, truncated on it.
    assert tokyo.wall_cutoff(NOW) == datetime(2026, 11, 23, 22, 0)
    call = step.render_call(ROWS, TABLE, tokyo, NOW, column_type="timestamp")
    assert call.sql.endswith("WHERE `t` < TIMESTAMP_NTZ '2026-11-23 22:00:00.000000'")
    assert (call.arguments["cutoff"], call.arguments["timezone"]) == ("2026-11-23T22:00:00", "Asia/Tokyo")
    # A timestamptz holds instants: the timezone changes nothing.
    assert step.render_call(ROWS, TABLE, tokyo, NOW).sql.endswith(
        "WHERE `t` < TIMESTAMP '2026-11-23 13:00:00.000000Z'")
    # A date is zone-less too: in Kiritimati (UTC+14) the cut-off's day is already the 24th.
    kiritimati = config(column="d", maxAge="P3D", timezone="Pacific/Kiritimati")
    assert step.render_call(ROWS, TABLE, kiritimati, NOW, column_type="date").sql.endswith("< DATE '2026-11-24'")
    # Default UTC: as before the timezone existed.
    assert step.render_call(ROWS, TABLE, config(column="t", maxAge="P3D"), NOW, column_type="timestamp").arguments[
        "timezone"] == "UTC"


@pytest.mark.parametrize("zone, change", [
    ("Europe/Berlin", datetime(2026, 3, 29, 1, 0, tzinfo=UTC)),  # 02:00 -> 03:00: an hour that never shows
    ("Europe/Berlin", datetime(2026, 10, 25, 1, 0, tzinfo=UTC)),  # 03:00 -> 02:00: an hour shown twice
    ("Australia/Lord_Howe", datetime(2026, 4, 4, 15, 0, tzinfo=UTC)),  # 02:00 -> 01:30: half an hour twice
    ("Australia/Lord_Howe", datetime(2026, 10, 3, 15, 30, tzinfo=UTC)),  # 02:00 -> 02:30
])
@pytest.mark.parametrize("granularity", ["HOUR", "DAY"])
def test_a_zoneless_cutoff_around_a_clock_change_never_goes_back_nor_deletes_a_younger_row(zone, change, granularity):
    """Minute by minute over a daylight-saving change: the wall-clock cut-off never moves back (a row kept once
    is not deleted by an earlier cut-off later), and no row written less than maxAge ago, read on the same wall
    clock, lies before it, also while the wall clock repeats or skips a stretch."""
    retention = config(column="t", maxAge="PT1H", granularity=granularity, timezone=zone)
    wall = ZoneInfo(zone)
    previous = None
    for minute in range(-180, 181):
        now = change + timedelta(minutes=minute)
        cutoff = retention.wall_cutoff(now)
        assert cutoff.tzinfo is None and (previous is None or cutoff >= previous), (now, previous, cutoff)
        younger = [(now - timedelta(minutes=m)).astimezone(wall).replace(tzinfo=None) for m in range(60)]
        assert min(younger) >= cutoff, (now, cutoff, min(younger))
        previous = cutoff
    # While Berlin's 02:00-03:00 shows twice, the second 02:30 (an hour later) cuts where the first did.
    if change.month == 10 and zone == "Europe/Berlin" and granularity == "HOUR":
        first, second = change + timedelta(minutes=30), change + timedelta(minutes=90)  # now; maxAge is PT1H
        assert retention.wall_cutoff(first) == datetime(2026, 10, 25, 2, 0) == retention.wall_cutoff(second)


def test_a_timezone_is_checked():
    assert _errors({"column": "ts", "maxAge": "P1D", "timezone": "Mars/Olympus"}) == [
        "<text>: policy 'p': rowRetention.timezone: 'Mars/Olympus' is not a time zone name (an IANA name such as "
        "UTC or Europe/Berlin)"]
    assert _errors({"column": "ts", "maxAge": "P1D", "timezone": "../../etc/passwd"})[0].endswith(
        "is not a time zone name (an IANA name such as UTC or Europe/Berlin)")
    assert config(column="ts", maxAge="P1D", timezone="Europe/Berlin").to_json()["timezone"] == "Europe/Berlin"


@pytest.mark.parametrize("column", ["a.b", "event time.utc", "we`ird.col", "a..b"])
def test_a_dotted_or_odd_column_is_one_top_level_identifier(column):
    sql = build_procedure_call(ROWS, TABLE, config(column=column, maxAge="P3D"), NOW).sql
    assert sql == ("DELETE FROM `lake`.`db`.`events` WHERE `" + column.replace("`", "``") + "` < "
                   "TIMESTAMP '2026-11-23 00:00:00.000000Z'")


DOTTED = Schema(NestedField(1, "a.b", TimestamptzType()), NestedField(2, "id", LongType()))
NESTED = Schema(NestedField(1, "a", StructType(NestedField(2, "b", TimestamptzType()))), NestedField(3, "id", LongType()))


def _work_on(schema: Schema, column: str) -> TableWork:
    table = type("Table", (), {"schema": lambda self: schema})()
    resolved = ResolvedOperation(PolicyFacts("retention"), config(column=column, maxAge="P1D"))
    return TableWork(ROWS, TABLE, resolved, None, "run", logging.getLogger("test"), before=table)


def test_a_dotted_name_is_the_top_level_column_of_that_name_never_a_nested_field():
    step = step_of(ROWS)
    assert step.prepare(_work_on(DOTTED, "a.b")).engine_inputs == {"column_type": "timestamptz"}
    with pytest.raises(MaintenanceFailed) as nested:
        step.check(_work_on(NESTED, "a.b"))
    assert str(nested.value) == (
        "policy 'retention': rowRetention.column names 'a.b', which table 'lake.db.events' does not have as a "
        "top-level column (its columns: a, id); 'a.b' is a field inside a struct, and row retention needs a "
        "top-level column")
