"""Partition-scoped compaction of tables whose partitioning is not one plain spec, through the real stack
(issue 26, item 6): the debt-score sensor admits a capped rewrite, the run executes in Dagster with
real Spark, later ticks continue the backlog (trigger ``backlog``) until it is done.

* A table that started unpartitioned and later got ``identity(region)``, with small files in both
  specs: the review's table, where each run rewrote 3.3x its estimate because ``where region IN
  (...)`` took every file of the old spec. No where on region selects its partitions exactly, so
  the regions go first, whole, with ``min-file-size-bytes`` lowered for the run so that no old file
  is a candidate, then the old spec's files by their own where (``region NOT IN (...) OR region IS
  NULL``, bounded by ``max-files-to-rewrite`` sized by their largest files) until the old spec is
  empty. The cap is a quarter of the table.
* A table partitioned by ``region`` and ``bucket(4, id)``: the where names the regions (Iceberg's
  where cannot name a bucket), each region whole with all its buckets.

For every run: the bytes Iceberg rewrote (the procedure's ``rewritten_bytes_count`` and the new
snapshot's ``removed-files-size``) are at most the bytes the planner charged, which are at most the
cap; the remaining work shrinks run after run until the backlog is done, and the rows are unchanged
(count and checksums, with PyIceberg and with Spark)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from dagster import DagsterInstance

from floe_dagster.core.runs import run_tags as T
from floe_dagster.core.rewrites.estimates import estimate_rewrite_data_files
from floe_dagster.core.rewrites.rewrite_rules import RewriteRules
from floe_dagster.core.operation_kinds.rewrite_data_files import RewriteDataFilesConfig
from floe_dagster.core.operations import Operation
from floe_dagster.core.rewrites.partition_scope import RewriteScope, plan_scope
from floe_dagster.core.basics.tables import TableName
from floe_dagster.defs.build import build_definitions
from floe_dagster.iceberg.catalog import load_table, open_catalog
from floe_dagster.iceberg.health_collector import HealthCollector
from floe_dagster.iceberg.table_cache import refresh_table_cache
from floe_dagster.settings import load_settings
from floe_dagster.spark.engine import IcebergSparkEngine
from floe_dagster.spark.operation_steps import build_procedure_call
from floe_dagster.spark.procedures import spark_table_reference
from floe_dagster_tests.conftest import on_instance_store, write_settings
from floe_dagster_tests.integration.test_automation import evaluate_sensor, execute

pytestmark = pytest.mark.spark

REGIONS = ("eu", "us", "ap", "af")
ROWS = "id, element_at(array({regions}), CAST(id % {n} AS INT) + 1) AS region, (id % 997) / 4 AS amount"


def _facts(settings, table: TableName) -> tuple[int, int, float]:
    data = load_table(open_catalog(settings.catalog), table).scan().to_arrow()
    return data.num_rows, sum(data["id"].to_pylist()), round(sum(data["amount"].to_pylist()), 4)


def _files(settings, table: TableName) -> list[dict]:
    return load_table(open_catalog(settings.catalog), table).inspect.files().to_pylist()


def _lake(tmp_path, monkeypatch, table: TableName, build, cap_share: float):
    """A lakehouse with one table built by ``build(spark, name)`` and a policy capping each rewrite at
    ``cap_share`` of the table's bytes."""
    config = write_settings(tmp_path, f"- name: capped\n  tablePattern: \"{table.catalog}.{table.namespace[0]}.*\"\n"
                                      "  rewriteDataFiles: {minInputFiles: 2, maxBytesPerRun: CAP}\n"
                                      "  rewriteDataFilesSchedule: {interval: PT1H}\n",
                            "batching: {max-tables: 1}\n")
    settings = load_settings(config, environ={})
    open_catalog(settings.catalog).create_namespace(table.namespace[0])
    engine = IcebergSparkEngine.from_settings(settings)
    with engine.unit_of_work() as spark:
        build(spark, spark_table_reference(table))
    engine.stop()
    total = sum(f["file_size_in_bytes"] for f in _files(settings, table))
    cap = int(total * cap_share)
    policies = tmp_path / "policies" / "policies.yaml"
    policies.write_text(policies.read_text().replace("CAP", str(cap)))
    monkeypatch.setenv("FLOE_CONFIG", str(config))
    settings = load_settings(config, environ={})
    refresh_table_cache(settings)
    return settings, cap, total


def _run_backlog(settings, instance, table: TableName, cap: int, limit: int) -> list[dict]:
    """Sensor tick, run, until the sensor requests nothing more for the table: each run's metadata,
    with the new snapshot's summary."""
    defs = build_definitions(settings)
    runs = []
    paths = {f["file_path"] for f in _files(settings, table)}
    for _ in range(limit):
        requests = [r for r in evaluate_sensor(defs, instance).run_requests or []
                    if r.tags.get(T.TABLE) == table.qualified and r.partition_key == "REWRITE_DATA_FILES"]
        if not requests:
            return runs
        [request] = requests
        result = execute(defs, instance, request)
        assert result.success
        [materialization] = result.asset_materializations_for_node("iceberg_tables")
        meta = {k: getattr(v, "value", v) for k, v in materialization.metadata.items()}
        summary = load_table(open_catalog(settings.catalog), table).current_snapshot().summary
        meta["removed_files_size"] = int(summary.get("removed-files-size", 0))
        meta["trigger"] = request.tags[T.TRIGGER]
        files = _files(settings, table)  # what is left: files of older specs, then files at all
        meta["left"] = (sum(f["spec_id"] != max(g["spec_id"] for g in files) for f in files), len(files))
        after = {f["file_path"] for f in files}
        meta["removed"], meta["added"], paths = paths - after, after - paths, after
        runs.append(meta)
    raise AssertionError(f"the backlog did not drain in {limit} runs: "
                         f"{[(r['trigger'], r['bytes_rewritten'], r.get('backlog_bytes')) for r in runs]}")


def _assert_within_the_cap(runs: list[dict], cap: int) -> None:
    for meta in runs:
        rewritten = meta["bytes_rewritten"]
        assert 0 < rewritten == meta["removed_files_size"], meta
        assert rewritten <= meta["estimated_bytes"] <= cap, (rewritten, meta["estimated_bytes"], cap)


def _assert_the_bound(runs: list[dict], total: int, cap: int) -> None:
    """Issue 35, item 6: at most ceil(table / cap) + 2 runs, each run's charge within 25 % of what Iceberg
    rewrote (the snapshot summary's removed-files-size), and no run removes a file an earlier run of the
    backlog added."""
    assert len(runs) <= -(-total // cap) + 2, [(r["estimated_bytes"], r["removed_files_size"]) for r in runs]
    written: set[str] = set()
    for meta in runs:
        assert abs(meta["estimated_bytes"] - meta["removed_files_size"]) <= 0.25 * meta["removed_files_size"], meta
        assert not meta["removed"] & written, meta["procedure_call"]
        written |= meta["added"]


def _spark_facts(settings, table: TableName) -> tuple[int, int, float]:
    engine = IcebergSparkEngine.from_settings(settings)
    with engine.unit_of_work() as spark:
        row = spark.sql(f"SELECT count(*) AS n, sum(id) AS ids, round(sum(amount), 4) AS amounts "
                        f"FROM {spark_table_reference(table)}").collect()[0]
    engine.stop()
    return row["n"], row["ids"], float(row["amounts"])


EVOLVED = TableName("demo", ("evolved",), "events")


def _unpartitioned_then_by_region(spark, name: str) -> None:
    regions = ", ".join(f"'{r}'" for r in REGIONS)
    rows = ROWS.format(regions=regions, n=len(REGIONS))
    spark.sql(f"CREATE TABLE {name} (id BIGINT, region STRING, amount DOUBLE) USING iceberg")
    for batch in range(2):  # the old spec: files holding every region
        spark.sql(f"INSERT INTO {name} SELECT {rows} FROM range({batch * 1000}, "
                  f"{batch * 1000 + 8 * len(REGIONS)}, 1, 1)")
    spark.sql(f"ALTER TABLE {name} ADD PARTITION FIELD region")
    for batch in range(2):  # the new spec: small files in each region
        spark.sql(f"INSERT INTO {name} SELECT {rows} FROM range({10_000 + batch * 1000}, "
                  f"{10_000 + batch * 1000 + 8 * len(REGIONS)}, 1, 1)")


@on_instance_store("postgres")
def test_a_table_partitioned_after_the_fact_stays_within_the_cap_and_drains(tmp_path, instance_home, monkeypatch):
    settings, cap, total = _lake(tmp_path, monkeypatch, EVOLVED, _unpartitioned_then_by_region, 1 / 4)
    files = _files(settings, EVOLVED)
    assert min(f["file_size_in_bytes"] for f in files if f["spec_id"] == 0) > max(
        f["file_size_in_bytes"] for f in files if f["spec_id"] == 1)  # the shape the staging needs
    assert sorted({f["spec_id"] for f in files}) == [0, 1] and len(files) == 2 + 2 * len(REGIONS)
    before = _facts(settings, EVOLVED)
    with DagsterInstance.get() as instance:
        runs = _run_backlog(settings, instance, EVOLVED, cap, limit=16)
    assert len(runs) >= 2 and runs[0]["trigger"] == "interval" and {r["trigger"] for r in runs[1:]} == {"backlog"}
    _assert_within_the_cap(runs, cap)
    # The work left shrinks with every run: files of the old spec, then files at all. (Not the bytes:
    # an old file rewritten into the new spec becomes a small file in each region, to be compacted
    # again, so bytes left to rewrite stay while the old spec empties.) And the backlog ends.
    left = [(len([f for f in files if f["spec_id"] == 0]), len(files))] + [r["left"] for r in runs]
    assert all(later < earlier for earlier, later in zip(left, left[1:])), left
    assert left[-1][0] == 0 and runs[-1].get("backlog_bytes", 0) == 0
    # While files of the old spec are left, no where on region selects partitions exactly: first the regions,
    # whole, by where with min-file-size-bytes at the smallest old file (the where scans the old files too,
    # which are then no candidates); then the old spec's files by their own where (or, once they are all
    # that is left to rewrite, the table's own rewrite, which takes them alone).
    stages = []
    for (old_files, _), meta in zip(left, runs):
        call = meta["procedure_call"]
        if "NOT IN" in call:
            assert "where => '(`region` NOT IN (" in call and ") OR (`region` IS NULL)'" in call, call
            stages.append(2)
        elif "min-file-size-bytes" in call:
            assert old_files and "where => '`region`" in call, call
            stages.append(1)
        else:
            stages.append(2 if old_files else 3)
    assert stages == sorted(stages) and 1 in stages, stages
    _assert_the_bound(runs, total, cap)
    assert _facts(settings, EVOLVED) == before == _spark_facts(settings, EVOLVED)


BUCKETED = TableName("demo", ("bucketed",), "events")


def _by_region_and_bucket(spark, name: str) -> None:
    rows = ROWS.format(regions="'eu', 'us', 'ap', 'af'", n=4)
    spark.sql(f"CREATE TABLE {name} (id BIGINT, region STRING, amount DOUBLE) USING iceberg "
              "PARTITIONED BY (region, bucket(4, id))")
    for batch in range(3):  # three small files in each of the 16 (region, bucket) partitions
        spark.sql(f"INSERT INTO {name} SELECT {rows} FROM range({batch * 1000}, {batch * 1000 + 96}, 1, 1)")


@on_instance_store("sqlite")
def test_a_bucketed_table_is_scoped_by_its_other_fields_within_the_cap(tmp_path, instance_home, monkeypatch):
    settings, cap, total = _lake(tmp_path, monkeypatch, BUCKETED, _by_region_and_bucket, 0.3)
    before = _facts(settings, BUCKETED)
    with DagsterInstance.get() as instance:
        runs = _run_backlog(settings, instance, BUCKETED, cap, limit=8)
    _assert_within_the_cap(runs, cap)
    scoped = [r for r in runs if "backlog_bytes" in r]
    assert scoped and all("where => '`region` = " in r["procedure_call"] for r in scoped)
    backlogs = [r["backlog_bytes"] for r in scoped]
    assert backlogs == sorted(backlogs, reverse=True) and runs[-1].get("backlog_bytes", 0) == 0
    per_partition: dict = {}
    for f in _files(settings, BUCKETED):
        per_partition[str(f["partition"])] = per_partition.get(str(f["partition"]), 0) + 1
    assert set(per_partition.values()) == {1} and len(per_partition) == 16  # every partition compacted
    assert _facts(settings, BUCKETED) == before == _spark_facts(settings, BUCKETED)


# -- the bound, run by run (issue 35, item 6) -------------------------------------------------------------

LATE = TableName("demo", ("late",), "events")
LATE_REGIONS = tuple(f"r{i:02d}" for i in range(12))
DAYS = TableName("demo", ("days",), "events")
BASE = 1_767_225_600  # 2026-01-01T00:00:00Z


def _thirty_old_files_then_fifteen_by_region(spark, name: str) -> None:
    """30 small files of the unpartitioned spec (one commit, one file a task, every region in each),
    then identity(region) and 15 small files of the new spec (one commit, each task one region)."""
    regions = ", ".join(f"'{r}'" for r in LATE_REGIONS)
    spark.sql(f"CREATE TABLE {name} (id BIGINT, region STRING, amount DOUBLE) USING iceberg")
    spark.sql(f"INSERT INTO {name} SELECT id, element_at(array({regions}), CAST(id % 12 AS INT) + 1), "
              f"(id % 997) / 4 FROM range(0, 30 * 240, 1, 30)")
    spark.sql(f"ALTER TABLE {name} ADD PARTITION FIELD region")
    spark.sql(f"ALTER TABLE {name} SET TBLPROPERTIES ('write.distribution-mode' = 'none')")  # a file a task
    spark.sql(f"INSERT INTO {name} SELECT id, element_at(array({regions}), spark_partition_id() % 12 + 1), "
              f"(id % 997) / 4 FROM range(100000, 100000 + 15 * 240, 1, 15)")


def _twenty_four_old_files_then_days(spark, name: str) -> None:
    """bench.big's shape, small: 24 files of the unpartitioned spec (one a task, rows of all 12 days in
    each), then days(at) and 24 smaller files of the new spec (each task one day: two a day)."""
    spark.sql(f"CREATE TABLE {name} (id BIGINT, at TIMESTAMP, amount DOUBLE) USING iceberg")
    spark.sql(f"INSERT INTO {name} SELECT id, timestamp_seconds({BASE} + (id % 12) * 86400 + id % 86400), "
              f"(id % 997) / 4 FROM range(0, 24 * 480, 1, 24)")
    spark.sql(f"ALTER TABLE {name} ADD PARTITION FIELD days(at)")
    spark.sql(f"ALTER TABLE {name} SET TBLPROPERTIES ('write.distribution-mode' = 'none')")  # a file a task
    spark.sql(f"INSERT INTO {name} SELECT id, timestamp_seconds({BASE} + (spark_partition_id() % 12) * 86400 "
              f"+ id % 86400), (id % 997) / 4 FROM range(100000, 100000 + 24 * 60, 1, 24)")


def _scoped_runs(settings, table: TableName, cap: int, limit: int) -> list[dict]:
    """The planner's scope and the engine's CALL (core/rewrites/partition_scope.py, the rewrite step's
    where and options), run after run on real Spark as the automation continues a backlog (a backlog at
    the older specs' files stays there; a table whose rewrite fits runs whole) until the backlog is done:
    per run the charge, what Iceberg rewrote (the procedure's output and the snapshot's summary), and
    the files it removed with the snapshots that added them."""
    catalog, config = open_catalog(settings.catalog), RewriteDataFilesConfig(min_input_files=2)
    rules = RewriteRules.for_data_files(config, {})
    engine, runs, older_first = IcebergSparkEngine.from_settings(settings), [], False
    with engine.unit_of_work() as spark:
        for _ in range(limit):
            metrics = HealthCollector(catalog, settings).metrics_for(table, tier="full")
            chosen = plan_scope(metrics, rules, cap, older_first=older_first)
            scope, estimated = None, getattr(estimate_rewrite_data_files(metrics, config), "bytes", 0)
            if chosen is not None:
                scope = RewriteScope(chosen.partitions, chosen.fields or (), chosen.files, chosen.max_files,
                                     chosen.older_specs_excluding, chosen.min_file_size, chosen.min_input_files)
                estimated = chosen.bytes
            elif not estimated:
                break
            before = {f["file_path"]: f for f in _entries(spark, table)}
            call = build_procedure_call(Operation.REWRITE_DATA_FILES, table, config, datetime.now(timezone.utc),
                                        scope=scope)
            [out] = spark.sql(call.sql).collect()
            snapshot = load_table(catalog, table).current_snapshot()
            after = {f["file_path"] for f in _entries(spark, table)}
            runs.append({"estimated": estimated, "rewritten": out["rewritten_bytes_count"],
                         "removed_size": int(snapshot.summary.get("removed-files-size", 0)),
                         "snapshot": snapshot.snapshot_id, "stage": _stage(chosen), "sql": call.sql,
                         "removed_from": {before[p]["snapshot_id"] for p in set(before) - after}})
            if chosen is None or chosen.backlog_bytes == 0:
                break
            older_first = chosen.older_specs_alone
    engine.stop()
    return runs


def _stage(chosen) -> int:
    """1: the current spec's partitions; 2: the older specs' files alone; 3: the table whole."""
    return 3 if chosen is None else 2 if chosen.older_specs_alone else 1


def _entries(spark, table: TableName) -> list:
    return spark.sql(f"SELECT data_file.file_path AS file_path, snapshot_id FROM "
                     f"{spark_table_reference(table)}.entries WHERE status < 2").collect()


@pytest.mark.parametrize("table, build, cap_share, stages", [
    (LATE, _thirty_old_files_then_fifteen_by_region, 1 / 8, "NOT IN"),
    (DAYS, _twenty_four_old_files_then_days, 1 / 4, "min-input-files"),
], ids=["identity-region", "days-at"])
def test_a_capped_rewrite_of_a_table_partitioned_after_the_fact_drains_within_the_bound(
        tmp_path, monkeypatch, table, build, cap_share, stages):
    """Issue 35, item 6: the current spec's partitions first, whole, the old spec's files left out of the
    candidates by min-file-size-bytes; then the old spec's files alone (by their own where with an
    identity field; with days(at), by min-input-files above what any day holds), each run charged with
    them alone, never with what earlier runs wrote into the new spec's partitions. The backlog drains
    in at most ceil(table / cap) + 2 runs; each run's charge is within 25 % of what Iceberg rewrote
    (the procedure's count, the snapshot's removed-files-size) and at most the cap; no run takes a file
    an earlier run wrote (the snapshots that added the files each run removed); the old spec is empty."""
    settings, cap, total = _lake(tmp_path, monkeypatch, table, build, cap_share)
    runs = _scoped_runs(settings, table, cap, limit=12)
    assert len(runs) <= -(-total // cap) + 2, [(r["stage"], r["estimated"], r["rewritten"]) for r in runs]
    for run in runs:
        assert run["rewritten"] == run["removed_size"] > 0, run
        assert abs(run["estimated"] - run["rewritten"]) <= 0.25 * run["rewritten"], run
        assert run["estimated"] <= cap, run
    assert [r["stage"] for r in runs] == sorted(r["stage"] for r in runs) and 2 in [r["stage"] for r in runs]
    assert any(stages in r["sql"] for r in runs if r["stage"] == 2), [r["sql"] for r in runs]
    written = set()
    for run in runs:
        assert not run["removed_from"] & written, run  # nothing an earlier run wrote is taken again
        written.add(run["snapshot"])
    assert not _files_of_spec(settings, table, 0)


def _files_of_spec(settings, table: TableName, spec_id: int) -> list[dict]:
    return [f for f in _files(settings, table) if f["spec_id"] == spec_id]


@on_instance_store("postgres")
def test_a_table_partitioned_by_day_after_the_fact_drains_through_the_automation(tmp_path, instance_home, monkeypatch):
    """The days(at) table through the sensor and the job: the days first (min-file-size-bytes), then the
    old files alone (min-input-files), continued from the ledger's backlog though the days then hold
    files those runs wrote (compacting them would retake them): the bound, the charges within 25 % of the
    snapshots' removed-files-size, nothing retaken, the old spec empty, the rows unchanged."""
    settings, cap, total = _lake(tmp_path, monkeypatch, DAYS, _twenty_four_old_files_then_days, 1 / 4)
    before = _facts(settings, DAYS)
    with DagsterInstance.get() as instance:
        runs = _run_backlog(settings, instance, DAYS, cap, limit=10)
    _assert_within_the_cap(runs, cap)
    _assert_the_bound(runs, total, cap)
    calls = [r["procedure_call"] for r in runs]
    stages = [1 if "min-file-size-bytes" in c else 2 if "min-input-files" in c else 3 for c in calls]
    assert stages == sorted(stages) and stages.count(2) >= 2 and 3 not in stages, calls
    assert {r["trigger"] for r in runs[1:]} == {"backlog"} and runs[-1]["backlog_bytes"] == 0
    assert runs[-1]["left"][0] == 0 and _facts(settings, DAYS) == before
