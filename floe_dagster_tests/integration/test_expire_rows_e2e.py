"""EXPIRE_ROWS (row retention) through the real stack: Dagster runs of the table's EXPIRE_ROWS partition on
real Spark with the Iceberg runtime and a real catalog, on tables of a few rows each.

- a table partitioned by ``days(ts)``, a DAY cut-off: a metadata-only delete (whole files dropped, no data or
  delete file written), the old rows gone and the others unchanged, then a rerun that changes nothing;
- an unpartitioned merge-on-read table whose column's name holds quotes and a back quote: a row-level
  delete with position delete files, the rows right;
- a policy whose column tries to break out of its identifier: refused before any Spark call, no snapshot;
- a top-level column named ``a.b`` holding zone-less timestamps, with the policy's ``timezone`` far from UTC:
  one identifier (never a struct's field), its cut-off the wall clock of that zone;
- the surfaces: ``explain`` and the HTTP trigger status before the run, and a shadow policy's tick that
  records the decision and runs nothing, shown by ``plan``.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
import requests
from dagster import DagsterInstance
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, TimestamptzType

from floe_dagster.api.app import create_app
from floe_dagster.api.auth import KeyStore, hash_key
from floe_dagster.cli import main as floe_cli
from floe_dagster.coordination.database import Coordination
from floe_dagster.coordination.resource import CoordinationResource
from floe_dagster.core.operations import ALL_OPERATIONS
from floe_dagster.core.basics.tables import TableName
from floe_dagster.defs.build import build_definitions
from floe_dagster.defs.names import asset_key_for
from floe_dagster.iceberg.catalog import load_table, open_catalog
from floe_dagster.iceberg.table_cache import refresh_table_cache
from floe_dagster.launching.manual import trigger_table
from floe_dagster.reports.explain import explain_table
from floe_dagster.settings import load_settings
from floe_dagster.spark.engine import IcebergSparkEngine
from floe_dagster_tests.conftest import write_settings
from floe_dagster_tests.integration._health_tables import table_dir
from floe_dagster_tests.integration.test_automation import evaluate_sensor
from floe_dagster_tests.unit.test_api_http import VIEWER_KEY, start_server

pytestmark = pytest.mark.spark

OP = "EXPIRE_ROWS"
ODD_COLUMN = 'event`s "ts"'  # a back quote, a quote and double quotes: one identifier all the same
INJECTION = "ts` < now() OR 1=1; DROP TABLE `demo`.`lake`.`typo`; --"
ZONE = "Pacific/Kiritimati"  # UTC+14: its wall clock is 14 hours ahead of UTC's
POLICIES = f"""
- name: retention-daily
  tablePattern: "demo.lake.daily"
  rowRetention: {{column: ts, maxAge: P3D}}
  rowRetentionSchedule: {{interval: P1D}}
- name: retention-mor
  tablePattern: "demo.lake.mor"
  rowRetention: {{column: '{ODD_COLUMN}', maxAge: PT36H, granularity: HOUR}}
  rowRetentionSchedule: {{interval: P1D}}
- name: retention-cow
  tablePattern: "demo.lake.cow"
  rowRetention: {{column: day, maxAge: P3D}}
  rowRetentionSchedule: {{interval: P1D}}
- name: retention-zoned
  tablePattern: "demo.lake.zoned"
  rowRetention: {{column: 'a.b', maxAge: P3D, granularity: HOUR, timezone: {ZONE}}}
  rowRetentionSchedule: {{interval: P1D}}
- name: retention-typo
  tablePattern: "demo.lake.typo"
  rowRetention: {{column: '{INJECTION}', maxAge: P1D}}
  rowRetentionSchedule: {{interval: P1D}}
"""
DAILY, MOR, COW, TYPO, ZONED = (TableName("demo", ("lake",), name) for name in ("daily", "mor", "cow", "typo", "zoned"))
NOW = datetime.now(timezone.utc)
# The zoned table's wall-clock cut-off (Kiritimati's now - 3 days, to the hour), and its rows' offsets from it:
# 1, 2 and 4 are older (4 only by Kiritimati's clock: read as UTC, 14 hours earlier, it would be kept), 3 and 5
# younger. Hours apart, so the run a few seconds later cuts at the same place or an hour on, alike.
WALL_CUTOFF = (NOW - timedelta(days=3)).astimezone(ZoneInfo(ZONE)).replace(minute=0, second=0, microsecond=0,
                                                                          tzinfo=None)
ZONED_ROWS = {1: -timedelta(hours=2), 2: -timedelta(days=1), 3: timedelta(hours=3), 4: -timedelta(hours=5),
              5: timedelta(days=3)}
AGES = {1: timedelta(days=10), 2: timedelta(days=10, hours=2), 3: timedelta(days=5), 4: timedelta(days=5, hours=1),
        5: timedelta(days=1), 6: timedelta(minutes=5)}  # id → age: 1-4 older than 3 days and its midnight, 5-6 not


def day_cutoff(at: datetime) -> datetime:
    """A P3D day-granular retention's cut-off at ``at``: the midnight (UTC) of three days before."""
    return (at - timedelta(days=3)).replace(hour=0, minute=0, second=0, microsecond=0)


def day_cutoffs_since_start() -> list[datetime]:
    """The cut-offs a run may use: the run reads the real clock, which may pass a UTC midnight after NOW was
    taken (CI once ran this module across one), so a run's cut-off is one of these two days."""
    return sorted({day_cutoff(NOW), day_cutoff(datetime.now(timezone.utc))})


def ts(age: timedelta) -> str:
    return f"TIMESTAMP '{(NOW - age).strftime('%Y-%m-%d %H:%M:%S')}Z'"


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    root = tmp_path_factory.mktemp("rows")
    keys = root / "keys.txt"
    keys.write_text(f"viewer:VIEWER:{hash_key(VIEWER_KEY)}\n")
    settings = load_settings(write_settings(root, POLICIES, f"api:\n  keys-file: {keys}\n"), environ={})
    open_catalog(settings.catalog).create_namespace("lake")
    values = ", ".join(f"({i}, {ts(age)})" for i, age in AGES.items())
    engine = IcebergSparkEngine.from_settings(settings)
    try:
        with engine.unit_of_work() as spark:
            spark.sql("CREATE TABLE demo.lake.daily (id BIGINT, ts TIMESTAMP) USING iceberg PARTITIONED BY (days(ts))")
            spark.sql(f"INSERT INTO demo.lake.daily VALUES {values}")  # one file a day: 4 days
            odd = "`" + ODD_COLUMN.replace("`", "``") + "`"
            spark.sql(f"CREATE TABLE demo.lake.mor (id BIGINT, {odd} TIMESTAMP) USING iceberg TBLPROPERTIES "
                      "('format-version'='2', 'write.delete.mode'='merge-on-read')")
            spark.sql(f"INSERT INTO demo.lake.mor SELECT /*+ COALESCE(1) */ * FROM VALUES {values}")  # one file
            days = ", ".join(f"({i}, DATE '{(NOW - age).date().isoformat()}')" for i, age in AGES.items())
            spark.sql("CREATE TABLE demo.lake.cow (id BIGINT, day DATE) USING iceberg")  # copy-on-write: the default
            spark.sql(f"INSERT INTO demo.lake.cow SELECT /*+ COALESCE(1) */ * FROM VALUES {days}")
            spark.sql("CREATE TABLE demo.lake.zoned (id BIGINT, `a.b` TIMESTAMP_NTZ) USING iceberg")
            walls = ", ".join(f"({i}, TIMESTAMP_NTZ '{WALL_CUTOFF + offset}')" for i, offset in ZONED_ROWS.items())
            spark.sql(f"INSERT INTO demo.lake.zoned VALUES {walls}")
            spark.sql("CREATE TABLE demo.lake.typo (id BIGINT, ts TIMESTAMP) USING iceberg")
            spark.sql(f"INSERT INTO demo.lake.typo VALUES {values}")
    finally:
        engine.release_catalog()
    refresh_table_cache(settings)
    return settings



def table(settings, name: TableName):
    return load_table(open_catalog(settings.catalog), name)


def ids(settings, name: TableName) -> list[int]:
    """The table's live rows, read with PyIceberg (position deletes applied)."""
    return sorted(table(settings, name).scan(selected_fields=("id",)).to_arrow().column("id").to_pylist())


def data_files_on_disk(settings, name: TableName) -> set[Path]:
    return set((table_dir(table(settings, name)) / "data").rglob("*.parquet"))


def expire_rows(settings, instance, name: TableName, attempt: str = ""):
    summary = trigger_table(settings, name.qualified, [OP], reason="test", actor="tester",
                            trigger_id=f"t-{name.name}{attempt}", instance=instance)
    return summary


def test_a_partition_aligned_cutoff_drops_whole_files_and_writes_none(lake, instance, capsys):
    # Before the run: explain and the HTTP trigger status show it due, with the cut-off it would use.
    coordination = Coordination(lake.coordination_url)
    cutoff = day_cutoff(NOW)
    status = explain_table(lake, coordination, DAILY.qualified, NOW, instance=instance)["operationStatuses"][OP]
    assert status["shouldTrigger"] is True and status["trigger"] == "interval"
    assert status["rowRetention"] == {
        "column": "ts", "granularity": "DAY", "deletesRowsBefore": cutoff.isoformat(), "timezone": "UTC",
        "zonelessDeletesRowsBefore": cutoff.replace(tzinfo=None).isoformat(),
        "zoneless": "a date or timestamp (without zone) column is read as wall-clock time in UTC"}
    server, thread, url = start_server(create_app(lake, KeyStore(lake.api), instance))
    try:
        answer = requests.get(f"{url}/api/v1/tables/lake/daily/trigger-status", params={"at": NOW.isoformat()},
                              headers={"X-API-Key": VIEWER_KEY}, timeout=60).json()
    finally:
        server.should_exit = True
        thread.join(20)
    assert list(answer["operationStatuses"]) == [op.value for op in ALL_OPERATIONS]  # every kind, in their order
    assert answer["operationStatuses"][OP]["shouldTrigger"] is True
    assert answer["operationStatuses"][OP]["rowRetention"]["deletesRowsBefore"] == cutoff.isoformat()
    assert floe_cli(["explain", DAILY.qualified, "--at", NOW.isoformat()]) == 0
    text = capsys.readouterr().out
    assert "  EXPIRE_ROWS: TRIGGER - interval: " in text
    assert (f"    row retention on column 'ts': deletes rows before {cutoff.isoformat()} (timestamptz), or before "
            f"{cutoff.replace(tzinfo=None).isoformat()} on the UTC wall clock (a date or timestamp without zone)") in text

    files_before, parent = data_files_on_disk(lake, DAILY), table(lake, DAILY).current_snapshot()
    summary = expire_rows(lake, instance, DAILY)
    assert summary.succeeded, summary.lines()
    assert ids(lake, DAILY) == [5, 6]  # the rows older than the cut-off are gone, the others unchanged

    after = table(lake, DAILY)
    deleted = after.current_snapshot()
    assert deleted.parent_snapshot_id == parent.snapshot_id and deleted.summary.operation.value == "delete"
    # One file a day: 2 days, or 3 when the test runs in the first two hours of a UTC day (id 2, 10 days and 2
    # hours old, then falls on the day before id 1's).
    old_days = len({(NOW - AGES[i]).date() for i in (1, 2, 3, 4)})
    assert deleted.summary["deleted-data-files"] == str(old_days) and deleted.summary["deleted-records"] == "4"
    for written in ("added-data-files", "added-delete-files", "added-records"):
        assert written not in deleted.summary.additional_properties
    assert data_files_on_disk(lake, DAILY) == files_before  # nothing written (the dropped files wait for expiry)

    meta = summary.outcomes[0].metadata
    assert meta["changed"] is True and meta["delete_kind"] == "metadata-only"
    assert (meta["rows_deleted"], meta["data_files_deleted"], meta["data_files_added"], meta["delete_files_added"]) \
        == (4, old_days, 0, 0)
    assert meta["records_before"] == 6 and meta["records_after"] == 2 and meta["row_check"] == "not-applicable"
    run_cutoffs = day_cutoffs_since_start()
    assert meta["new_snapshots"] == 1 and meta["cutoff"] in [c.isoformat() for c in run_cutoffs]
    assert meta["procedure_call"] in [("```sql\nDELETE FROM `demo`.`lake`.`daily` WHERE `ts` < "
                                       f"TIMESTAMP '{c.strftime('%Y-%m-%d %H:%M:%S')}.000000Z'\n```")
                                      for c in run_cutoffs]
    event = instance.get_latest_materialization_event(asset_key_for(DAILY))
    assert event.dagster_event.partition == OP
    assert event.asset_materialization.metadata["rows_deleted"].value == 4

    # Again: no row is older than the cut-off, so nothing is deleted and the run changed nothing.
    again = expire_rows(lake, instance, DAILY, "-again")
    assert again.succeeded, again.lines()
    assert again.outcomes[0].metadata["changed"] is False and again.outcomes[0].metadata["rows_deleted"] == 0
    assert ids(lake, DAILY) == [5, 6] and data_files_on_disk(lake, DAILY) == files_before


def test_a_cutoff_inside_a_file_is_a_row_level_delete_in_the_tables_write_mode(lake, instance):
    """merge-on-read: position delete files, no data file rewritten; the column's odd name is one identifier."""
    files_before = data_files_on_disk(lake, MOR)
    summary = expire_rows(lake, instance, MOR)
    assert summary.succeeded, summary.lines()
    assert ids(lake, MOR) == [5, 6]
    current = table(lake, MOR).current_snapshot().summary
    assert current["added-delete-files"] == "1" and current["added-position-deletes"] == "4"
    assert "deleted-data-files" not in current.additional_properties
    meta = summary.outcomes[0].metadata
    assert meta["delete_kind"] == "merge-on-read" and meta["rows_deleted"] == 4 and meta["changed"] is True
    assert (meta["data_files_deleted"], meta["data_files_added"], meta["delete_files_added"]) == (0, 0, 1)
    assert "WHERE `event``s \"ts\"` < TIMESTAMP '" in meta["procedure_call"]
    written = data_files_on_disk(lake, MOR) - files_before
    assert len(written) == 1 and "delete" in next(iter(written)).name  # the position delete file, no data file


def test_a_date_column_in_a_copy_on_write_table_rewrites_the_file_without_the_old_rows(lake, instance):
    """The table's default write mode: the one file is replaced by one without the old rows; the cut-off is
    a DATE literal (the column's own type), the day of now - 3 days."""
    summary = expire_rows(lake, instance, COW)
    assert summary.succeeded, summary.lines()
    assert ids(lake, COW) == [5, 6]
    meta = summary.outcomes[0].metadata
    assert meta["delete_kind"] == "copy-on-write" and meta["rows_deleted"] == 4
    assert (meta["data_files_deleted"], meta["data_files_added"], meta["delete_files_added"]) == (1, 1, 0)
    assert meta["bytes_rewritten"] == meta["bytes_written"] > 0
    assert any(meta["procedure_call"].endswith(f"WHERE `day` < DATE '{c.date().isoformat()}'\n```")
               for c in day_cutoffs_since_start()), meta["procedure_call"]


def test_a_column_the_table_lacks_is_refused_before_any_spark_call(lake, instance, monkeypatch):
    """The column tries to close its identifier and add a condition and a statement: it is no column of the
    table, so the run fails naming the policy, the field and the table, and Spark is never called."""
    def no_engine(*args, **kwargs):
        raise AssertionError("the engine was called")

    monkeypatch.setattr(IcebergSparkEngine, "maintain", no_engine)
    before = table(lake, TYPO)
    summary = expire_rows(lake, instance, TYPO)
    assert not summary.succeeded
    assert (f"policy 'retention-typo': rowRetention.column names {INJECTION!r}, which table 'demo.lake.typo' does "
            "not have as a top-level column (its columns: id, ts)") in summary.outcomes[0].message
    after = table(lake, TYPO)
    assert after.metadata_location == before.metadata_location and len(after.metadata.snapshots) == 1
    assert ids(lake, TYPO) == [1, 2, 3, 4, 5, 6]


def test_a_dotted_zoneless_column_is_cut_on_the_policys_wall_clock(lake, instance):
    """The column ``a.b`` is the table's top-level column of that name (one identifier), and its zone-less
    values are compared with the wall clock of Kiritimati (UTC+14), not UTC's."""
    assert str(table(lake, ZONED).schema().find_field("a.b").field_type) == "timestamp"  # zone-less, top-level
    summary = expire_rows(lake, instance, ZONED)
    assert summary.succeeded, summary.lines()
    assert ids(lake, ZONED) == [3, 5]  # 1, 2 and 4 are older than the cut-off on Kiritimati's clock
    meta = summary.outcomes[0].metadata
    assert meta["rows_deleted"] == 3
    assert "WHERE `a.b` < TIMESTAMP_NTZ '" in meta["procedure_call"]
    assert meta["cutoff"] in (WALL_CUTOFF.isoformat(), (WALL_CUTOFF + timedelta(hours=1)).isoformat())


SHADOW = """
- name: retention-onboarding
  tablePattern: "demo.lake.*"
  mode: shadow
  rowRetention: {column: ts, maxAge: P30D}
  rowRetentionSchedule: {interval: P1D}
"""


def test_a_shadow_row_retention_is_recorded_and_never_runs(tmp_path, dagster_home, monkeypatch, capsys):
    config = write_settings(tmp_path, SHADOW)
    monkeypatch.setenv("FLOE_CONFIG", str(config))
    settings = load_settings(config, environ={})
    catalog = open_catalog(settings.catalog)
    catalog.create_namespace("lake")
    schema = Schema(NestedField(1, "id", LongType()), NestedField(2, "ts", TimestamptzType()))
    created = catalog.create_table("lake.events", schema=schema)
    refresh_table_cache(settings)
    assert floe_cli(["plan"]) == 0  # what the tick will record
    assert re.search(r"shadow demo\.lake\.events EXPIRE_ROWS \[interval\] debt \d+: shadow: would run at ",
                     capsys.readouterr().out)
    with DagsterInstance.get() as instance:
        first = evaluate_sensor(build_definitions(settings), instance)
        assert not first.run_requests and "1 shadow decision(s) recorded (no run)" in first.skip_message
        coordination = CoordinationResource.from_settings(settings).coordination
        [row] = coordination.ledger_rows()
        assert row.shadow and row.operation.value == OP and row.run_id is None
        assert row.reason.endswith("(shadow policy 'retention-onboarding')")
        assert instance.get_runs() == []
    assert load_table(catalog, TableName("demo", ("lake",), "events")).metadata_location == created.metadata_location
    assert floe_cli(["plan"]) == 0  # the recorded decision stands in for a run: not due again before a day
    assert re.search(r"skip demo\.lake\.events EXPIRE_ROWS .*interval P1D since the last success",
                     capsys.readouterr().out)
