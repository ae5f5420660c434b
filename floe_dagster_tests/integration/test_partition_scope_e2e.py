"""Partition-scoped compaction through the real stack (issue 21, item 3): a small table partitioned by
day(at) with many tiny files over eight days, a policy cap (maxBytesPerRun) of about a quarter of it.
The debt-score sensor admits a scoped run, later ticks continue the backlog (trigger ``backlog``, same
slot, next attempt) until it is done; every run rewrites at most ~1.1x the cap, every materialization
records estimated and actual bytes, rows are unchanged (count and checksum, with PyIceberg and with
Spark) and every partition ends compacted."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from dagster import DagsterInstance

from floe_dagster.core.runs import run_tags as T
from floe_dagster.core.basics.tables import TableName
from floe_dagster.defs.build import build_definitions
from floe_dagster.iceberg.catalog import load_table, open_catalog
from floe_dagster.iceberg.table_cache import refresh_table_cache
from floe_dagster.settings import load_settings
from floe_dagster.spark.engine import IcebergSparkEngine
from floe_dagster.spark.procedures import spark_table_reference
from floe_dagster_tests.conftest import on_instance_store, write_settings
from floe_dagster_tests.integration.test_automation import evaluate_sensor, execute

pytestmark = pytest.mark.spark

TABLE = TableName("demo", ("big",), "events")
DAYS, FILES_PER_DAY, ROWS_PER_FILE = 8, 4, 20
BASE = datetime(2026, 3, 1, 6, 0, tzinfo=timezone.utc)


def _pyiceberg_facts(settings) -> tuple[int, int, float]:
    data = load_table(open_catalog(settings.catalog), TABLE).scan().to_arrow()
    return data.num_rows, sum(data["id"].to_pylist()), round(sum(data["amount"].to_pylist()), 4)


def _files_per_partition(settings) -> dict:
    files = load_table(open_catalog(settings.catalog), TABLE).inspect.files().to_pylist()
    counts: dict = {}
    for f in files:
        key = str(f["partition"])
        counts[key] = counts.get(key, 0) + 1
    return counts


@pytest.fixture
def lake(tmp_path, instance_home, monkeypatch):
    config = write_settings(tmp_path, "- name: big\n  tablePattern: \"demo.big.*\"\n"
                                      "  rewriteDataFiles: {minInputFiles: 2, maxBytesPerRun: CAP}\n"
                                      "  rewriteDataFilesSchedule: {interval: PT1H}\n",
                            "batching: {max-tables: 1}\n")
    settings = load_settings(config, environ={})
    catalog = open_catalog(settings.catalog)
    catalog.create_namespace("big")
    engine = IcebergSparkEngine.from_settings(settings)
    with engine.unit_of_work() as spark:  # Spark writes the day transform (PyIceberg would need pyiceberg-core)
        name = spark_table_reference(TABLE)
        spark.sql(f"CREATE TABLE {name} (id BIGINT, kind STRING, amount DOUBLE, region STRING, at TIMESTAMP) "
                  "USING iceberg PARTITIONED BY (days(at))")
        for batch in range(FILES_PER_DAY):  # each insert: one small file in each of the eight days
            spark.sql(
                f"INSERT INTO {name} SELECT id, element_at(array('view', 'click', 'buy'), CAST(id % 3 AS INT) + 1), "
                f"(id % 997) / 4, IF(id % 2 = 1, 'eu', 'us'), "
                f"timestamp_seconds({int(BASE.timestamp())} + ((id % 10000) DIV 100) * 86400 + (id % 100) * 60) "
                f"FROM range({batch * 10_000}, {batch * 10_000 + DAYS * 100}, 1, 1) WHERE id % 100 < {ROWS_PER_FILE}")
    engine.stop()
    total = sum(f["file_size_in_bytes"] for f in load_table(catalog, TABLE).inspect.files().to_pylist())
    cap = int(total * 0.27)  # about a quarter: two of the eight day partitions
    policies = tmp_path / "policies" / "policies.yaml"
    policies.write_text(policies.read_text().replace("CAP", str(cap)))
    monkeypatch.setenv("FLOE_CONFIG", str(config))
    settings = load_settings(config, environ={})
    refresh_table_cache(settings)
    with DagsterInstance.get() as instance:
        yield settings, instance, cap, total


@on_instance_store("sqlite")
def test_backlog_runs_within_the_cap_until_done(lake):
    settings, instance, cap, total = lake
    before = _pyiceberg_facts(settings)
    assert set(_files_per_partition(settings).values()) == {FILES_PER_DAY}
    defs = build_definitions(settings)
    runs = []
    for _ in range(8):
        requests = [r for r in evaluate_sensor(defs, instance).run_requests or []
                    if r.tags.get(T.TABLE) == TABLE.qualified and r.partition_key == "REWRITE_DATA_FILES"]
        if not requests:
            break
        [request] = requests
        result = execute(defs, instance, request)
        assert result.success
        [materialization] = result.asset_materializations_for_node("iceberg_tables")
        meta = {k: getattr(v, "value", v) for k, v in materialization.metadata.items()}
        runs.append((request.tags[T.TRIGGER], request.tags[T.SLOT], request.tags[T.ATTEMPT], meta))
    assert 3 <= len(runs) <= 6, [(r[0], r[3].get("bytes_rewritten")) for r in runs]
    # The first run is the interval's, the others continue its backlog: same slot, attempts 1, 2, ...
    assert runs[0][0] == "interval" and {r[0] for r in runs[1:]} == {"backlog"}
    assert {r[1] for r in runs} == {runs[0][1]}
    assert [int(r[2]) for r in runs] == list(range(len(runs)))
    for trigger, slot, attempt, meta in runs:
        assert 0 < meta["bytes_rewritten"] <= 1.1 * cap, (meta["bytes_rewritten"], cap)
        assert meta["estimated_bytes"] <= cap
        assert meta["estimate_error_pct"] is not None and abs(meta["estimate_error_pct"]) < 10
        if "backlog_bytes" in meta:  # a scoped run (the last one may take the rest whole: it fits)
            assert "where =>" in meta["procedure_call"] and "`at` >= TIMESTAMP" in meta["procedure_call"]
    assert runs[0][3]["backlog_bytes"] > 0 and runs[-1][3].get("backlog_bytes", 0) == 0
    assert sum(r[3]["bytes_rewritten"] for r in runs) == total  # each partition rewritten once
    # Compacted: one file per day; rows unchanged, by PyIceberg and by Spark.
    assert set(_files_per_partition(settings).values()) == {1} and len(_files_per_partition(settings)) == DAYS
    assert _pyiceberg_facts(settings) == before
    engine = IcebergSparkEngine.from_settings(settings)
    with engine.unit_of_work() as spark:
        row = spark.sql(f"SELECT count(*) AS n, sum(id) AS ids, round(sum(amount), 4) AS amounts "
                        f"FROM {spark_table_reference(TABLE)}").collect()[0]
    engine.stop()
    assert (row["n"], row["ids"], float(row["amounts"])) == before
