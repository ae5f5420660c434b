"""Partition-scoped compaction of tables whose partitioning is not one plain spec, through the real stack
(issue 26, item 6): the debt-score sensor admits a capped rewrite, the run executes in Dagster with
real Spark, later ticks continue the backlog (trigger ``backlog``) until it is done.

* A table that started unpartitioned and later got ``identity(region)``, with small files in both
  specs: the review's table, where each run rewrote 3.3x its estimate because ``where region IN
  (...)`` took every file of the old spec. No where on region selects its partitions exactly, so
  runs take the old spec's files by their own where (``region NOT IN (...) OR region IS NULL``,
  bounded by ``max-files-to-rewrite`` sized by their largest files) until the old spec is empty,
  then scope by region. The cap is a quarter of the table (the review's eighth makes the same point in
  twice the runs: a run here takes two of the ten files).
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
from floe_dagster_tests.conftest import write_settings
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
        runs.append(meta)
    raise AssertionError(f"the backlog did not drain in {limit} runs: "
                         f"{[(r['trigger'], r['bytes_rewritten'], r.get('backlog_bytes')) for r in runs]}")


def _assert_within_the_cap(runs: list[dict], cap: int) -> None:
    for meta in runs:
        rewritten = meta["bytes_rewritten"]
        assert 0 < rewritten == meta["removed_files_size"], meta
        assert rewritten <= meta["estimated_bytes"] <= cap, (rewritten, meta["estimated_bytes"], cap)


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


def test_a_table_partitioned_after_the_fact_stays_within_the_cap_and_drains(tmp_path, instance_home, monkeypatch):
    settings, cap, total = _lake(tmp_path, monkeypatch, EVOLVED, _unpartitioned_then_by_region, 1 / 4)
    files = _files(settings, EVOLVED)
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
    # While files of the old spec are left, no where on region selects partitions exactly: the run takes
    # the old spec's files by their own where (a file count when they do not fit). Once the old spec is
    # empty, where scopes by region again (with a file count when no region fits).
    for (old_files, _), meta in zip(left, runs):
        if "backlog_bytes" not in meta:  # the last run: what is left fits, the table whole
            continue
        call = meta["procedure_call"]
        if old_files:
            assert "where => '(`region` NOT IN (" in call and ") OR (`region` IS NULL)'" in call, call
        else:
            assert "where => '`region`" in call and "NOT IN" not in call, call
    assert _facts(settings, EVOLVED) == before == _spark_facts(settings, EVOLVED)


BUCKETED = TableName("demo", ("bucketed",), "events")


def _by_region_and_bucket(spark, name: str) -> None:
    rows = ROWS.format(regions="'eu', 'us', 'ap', 'af'", n=4)
    spark.sql(f"CREATE TABLE {name} (id BIGINT, region STRING, amount DOUBLE) USING iceberg "
              "PARTITIONED BY (region, bucket(4, id))")
    for batch in range(3):  # three small files in each of the 16 (region, bucket) partitions
        spark.sql(f"INSERT INTO {name} SELECT {rows} FROM range({batch * 1000}, {batch * 1000 + 96}, 1, 1)")


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


def _scoped_runs(settings, table: TableName, cap: int, limit: int) -> list[dict]:
    """The planner's scope and the engine's CALL (core/rewrites/partition_scope.py, the rewrite step's where and
    max-files-to-rewrite), run after run on real Spark until the first run that is not over the older
    specs' files (the backlog's second phase, which the test above drains through Dagster): per run the
    charge, what Iceberg rewrote (the procedure's output and the snapshot's summary), and the files it
    removed with the snapshots that added them."""
    catalog, config = open_catalog(settings.catalog), RewriteDataFilesConfig(min_input_files=2)
    rules = RewriteRules.for_data_files(config, {})
    engine, runs = IcebergSparkEngine.from_settings(settings), []
    with engine.unit_of_work() as spark:
        for _ in range(limit):
            metrics = HealthCollector(catalog, settings).metrics_for(table, tier="full")
            chosen = plan_scope(metrics, rules, cap)
            if chosen is None:
                break
            before = {f["file_path"]: f for f in _entries(spark, table)}
            scope = RewriteScope(chosen.partitions, chosen.fields or (), chosen.files, chosen.max_files,
                                 chosen.older_specs_excluding)
            call = build_procedure_call(Operation.REWRITE_DATA_FILES, table, config, datetime.now(timezone.utc),
                                        scope=scope)
            [out] = spark.sql(call.sql).collect()
            snapshot = load_table(catalog, table).current_snapshot()
            after = {f["file_path"] for f in _entries(spark, table)}
            runs.append({"estimated": chosen.bytes, "rewritten": out["rewritten_bytes_count"],
                         "removed_size": int(snapshot.summary.get("removed-files-size", 0)),
                         "snapshot": snapshot.snapshot_id, "older": chosen.older_specs_excluding is not None,
                         "removed_from": {before[p]["snapshot_id"] for p in set(before) - after}})
            if chosen.older_specs_excluding is None:
                break
    engine.stop()
    return runs


def _entries(spark, table: TableName) -> list:
    return spark.sql(f"SELECT data_file.file_path AS file_path, snapshot_id FROM "
                     f"{spark_table_reference(table)}.entries WHERE status < 2").collect()


def test_a_capped_rewrite_of_a_table_partitioned_after_the_fact_takes_the_old_files_within_the_bound(
        tmp_path, monkeypatch):
    """Issue 35, item 6: under a cap of an eighth, the old spec's files go first, each run charged with
    them alone, never with what earlier runs wrote into the new spec's partitions (before, the count was
    sized by those outputs, two files a run, and Iceberg's hash order took them again: on a table like
    this one with three regions, 60 runs without draining, estimates up to 8x the bytes rewritten).
    Each run's charge is within 25 % of what Iceberg rewrote (the procedure's count, the snapshot's
    removed-files-size) and at most the cap, the old spec drains in ceil(old bytes / cap) + 1 runs, and
    no run takes a file an earlier run wrote. Then the new spec's partitions are scoped by region."""
    settings, cap, total = _lake(tmp_path, monkeypatch, LATE, _thirty_old_files_then_fifteen_by_region, 1 / 8)
    files = _files(settings, LATE)
    assert [sum(f["spec_id"] == s for f in files) for s in (0, 1)] == [30, 15]
    old_bytes = sum(f["file_size_in_bytes"] for f in files if f["spec_id"] == 0)
    runs = _scoped_runs(settings, LATE, cap, limit=12)
    for run in runs:
        assert run["rewritten"] == run["removed_size"] > 0, run
        assert abs(run["estimated"] - run["rewritten"]) <= 0.25 * run["rewritten"], run
        assert run["estimated"] <= cap, run
    older, after = runs[:-1], runs[-1]
    assert all(r["older"] for r in older) and not after["older"], runs
    assert len(older) <= -(-old_bytes // cap) + 1, (len(older), old_bytes, cap)
    written = set()
    for run in older:
        assert not run["removed_from"] & written, run  # nothing an earlier run wrote is taken again
        written.add(run["snapshot"])
    assert not _files_of_spec(settings, LATE, 0)


def _files_of_spec(settings, table: TableName, spec_id: int) -> list[dict]:
    return [f for f in _files(settings, table) if f["spec_id"] == spec_id]
