"""What Dagit shows of a table and of a maintenance run, end to end: a real PyIceberg SQLite catalog
holding a table with required, documented and nested columns, the real debt-score sensor, a real
Spark maintenance run recorded in a real Dagster instance, the health collector, and Dagit's own
GraphQL served from the code location in its own process.

* the run's materialization and the health observation carry Dagster's standard table metadata:
  the table's row count (its real number of rows), its columns, its name and its location;
* the asset definition has the policy's owners, the ``floe/policy`` tag and a description naming
  the policy and the schedule Dagit lists;
* of the run's tags, Dagit's runs list shows the table, operation, trigger, policy and reason (and
  Dagster's partition), by the installed UI's rule (floe_dagster_tests/dagit_ui.py), while the
  run page gets every tag.
"""

from __future__ import annotations

import textwrap
from datetime import datetime, timezone
from decimal import Decimal

import pyarrow as pa
import pytest
from dagster import DagsterInstance, build_sensor_context
from pyiceberg.schema import Schema
from pyiceberg.types import (
    DecimalType,
    IntegerType,
    ListType,
    LongType,
    NestedField,
    StringType,
    StructType,
)

from floe_dagster.coordination.database import Coordination
from floe_dagster.core.runs import run_tags as T
from floe_dagster.core.basics.tables import TableName
from floe_dagster.defs.build import MAINTENANCE_JOB, build_definitions
from floe_dagster.defs.health_reporting import report_health_events
from floe_dagster.defs.names import asset_key_for
from floe_dagster.defs.sensors import SENSOR_NAME
from floe_dagster.iceberg.catalog import load_table, open_catalog, table_counts
from floe_dagster.iceberg.health_collector import HealthCollector
from floe_dagster.iceberg.table_cache import read_cached_tables, refresh_table_cache
from floe_dagster.policies import load_policy_set
from floe_dagster.settings import load_settings
from floe_dagster_tests.conftest import write_settings
from floe_dagster_tests.dagit_ui import runs_list_tags

pytestmark = pytest.mark.spark

POLICIES = """
- name: profiles-hourly
  description: Compaction and expiry of the customer profiles
  tablePattern: "demo.crm.*"
  tags: {owner: "ana@example.com, nobody", team: crm}
  rewriteDataFiles: {}
  rewriteDataFilesSchedule: {interval: PT1H}
  expireSnapshots: {retainLast: 2}
  expireSnapshotsSchedule: {cronExpression: "0 2 * * *", timezone: Europe/Berlin}
"""
PROFILES = TableName("demo", ("crm",), "profiles")
SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True, doc="the customer id"),
    NestedField(2, "name", StringType()),
    NestedField(3, "address", StructType(NestedField(4, "street", StringType()),
                                         NestedField(5, "zip", IntegerType(), required=True))),
    NestedField(6, "tags", ListType(7, StringType(), element_required=False)),
    NestedField(8, "balance", DecimalType(10, 2)),
)
ARROW = pa.schema([
    pa.field("id", pa.int64(), nullable=False),
    pa.field("name", pa.string()),
    pa.field("address", pa.struct([pa.field("street", pa.string()), pa.field("zip", pa.int32(), nullable=False)])),
    pa.field("tags", pa.list_(pa.string())),
    pa.field("balance", pa.decimal128(10, 2)),
])
FILES, ROWS_PER_FILE = 6, 7

CODE_LOCATION = """
from floe_dagster.defs.build import build_definitions
from floe_dagster.iceberg.table_cache import read_cached_tables
from floe_dagster.settings import load_settings

settings = load_settings()
defs = build_definitions(settings, read_cached_tables(settings))
"""

RUN_TAGS = """
query ($runId: String!) {
  runsFeedOrError(limit: 5, view: RUNS, filter: {runIds: [$runId]}) {
    ... on RunsFeedConnection { results { __typename id tags { key value } } }
    ... on PythonError { message }
  }
}
"""

ASSET = """
query ($assetKey: AssetKeyInput!) {
  assetNodeOrError(assetKey: $assetKey) {
    ... on AssetNode {
      description
      owners { ... on UserAssetOwner { email } ... on TeamAssetOwner { team } }
      tags { key value }
      metadataEntries { label ... on TextMetadataEntry { text } }
      assetMaterializations(limit: 1) {
        metadataEntries {
          __typename label
          ... on IntMetadataEntry { intValue }
          ... on TextMetadataEntry { text }
          ... on TableSchemaMetadataEntry { schema { columns { name type description constraints { nullable } } } }
        }
      }
    }
  }
}
"""


def rows(start: int) -> pa.Table:
    ids = list(range(start, start + ROWS_PER_FILE))
    return pa.table({
        "id": ids,
        "name": [f"customer {i}" for i in ids],
        "address": [{"street": f"{i} main st", "zip": 10000 + i} for i in ids],
        "tags": [["vip"] if i % 2 else [] for i in ids],
        "balance": [Decimal(f"{i}.25") for i in ids],
    }, schema=ARROW)


@pytest.fixture
def lake(tmp_path, dagster_home, monkeypatch):
    config = write_settings(tmp_path, POLICIES)
    monkeypatch.setenv("FLOE_CONFIG", str(config))
    settings = load_settings(config, environ={})
    catalog = open_catalog(settings.catalog)
    catalog.create_namespace("crm")
    table = catalog.create_table(PROFILES.identifier, schema=SCHEMA)
    for i in range(FILES):  # one small file per append: work for REWRITE_DATA_FILES
        table.append(rows(i * ROWS_PER_FILE))
    refresh_table_cache(settings)
    with DagsterInstance.get() as instance:
        yield settings, instance


def graphql(context, query: str, variables: dict) -> dict:
    from dagster_graphql.test.utils import execute_dagster_graphql

    result = execute_dagster_graphql(context.process_context.create_request_context(), query, variables)
    assert not result.errors, result.errors
    return result.data


def test_dagit_shows_the_tables_metadata_and_the_runs_tags(lake, tmp_path):
    from dagster_graphql.test.utils import define_out_of_process_context

    settings, instance = lake
    defs = build_definitions(settings, read_cached_tables(settings))

    # The sensor admits the compaction; the run executes it with the request's tags, as the daemon does.
    sensor = defs.resolve_sensor_def(SENSOR_NAME)
    with build_sensor_context(instance=instance, definitions=defs, resources=defs.resources) as context:
        requests = sensor.evaluate_tick(context).run_requests or []
    [request] = [r for r in requests if r.partition_key == "REWRITE_DATA_FILES"]
    result = defs.resolve_job_def(MAINTENANCE_JOB).execute_in_process(
        instance=instance, partition_key=request.partition_key, asset_selection=request.asset_selection,
        tags=request.tags)
    assert result.success

    table = load_table(open_catalog(settings.catalog), PROFILES)
    assert table_counts(table)["data_files"] == 1  # Spark compacted the six files
    real_rows = table.scan().to_arrow().num_rows
    assert real_rows == FILES * ROWS_PER_FILE

    # The materialization: Dagster's standard keys, with the table's own numbers.
    event = instance.get_latest_materialization_event(asset_key_for(PROFILES))
    metadata = event.asset_materialization.metadata
    assert metadata["dagster/row_count"].value == real_rows
    assert metadata["dagster/table_name"].value == "demo.crm.profiles"
    assert metadata["dagster/uri"].value == table.location()
    columns = metadata["dagster/column_schema"].value.columns
    assert [(c.name, c.type, c.constraints.nullable) for c in columns] == [
        ("id", "long", False), ("name", "string", True),
        ("address", "struct<street: optional string, zip: required int>", True),
        ("tags", "list<string>", True), ("balance", "decimal(10, 2)", True)]
    assert columns[0].description == "the customer id"

    # The definition: owners (the invalid one left out), the policy tag, the description.
    node = defs.get_repository_def().asset_graph.get(asset_key_for(PROFILES))
    assert sorted(node.owners) == ["ana@example.com", "team:crm"]
    assert node.tags["floe/policy"] == "profiles-hourly"
    assert node.metadata["dagster/table_name"] == "demo.crm.profiles"
    [cron_schedule] = [s.name for s in defs.get_repository_def().schedule_defs]
    assert node.description.startswith("Iceberg table `demo.crm.profiles`. Policy 'profiles-hourly': "
                                       "Compaction and expiry of the customer profiles.")
    assert "- REWRITE_DATA_FILES: every 1 hour (debt-score sensor)" in node.description
    assert (f"- EXPIRE_SNAPSHOTS: cron `0 2 * * *` Europe/Berlin (schedule {cron_schedule})"
            in node.description)

    # The health observation carries the same keys (the collector reads the metadata through PyIceberg).
    with HealthCollector(open_catalog(settings.catalog), settings) as collector:
        snapshot = collector.collect([PROFILES], tier="full")
    assert report_health_events(instance, snapshot, load_policy_set(settings), datetime.now(timezone.utc),
                                history=Coordination(settings.coordination_url).all_history()) == 1
    [observed] = instance.fetch_observations(asset_key_for(PROFILES), limit=1).records
    observation = observed.asset_observation.metadata
    assert observation["dagster/row_count"].value == real_rows
    assert observation["dagster/table_name"].value == "demo.crm.profiles"
    assert observation["dagster/uri"].value == table.location()
    assert observation["dagster/column_schema"].value == metadata["dagster/column_schema"].value

    # Dagit, through its GraphQL, from the code location in its own process.
    module = tmp_path / "code_location.py"
    module.write_text(textwrap.dedent(CODE_LOCATION))
    with define_out_of_process_context(str(module), "defs", instance) as context:
        [entry] = graphql(context, RUN_TAGS, {"runId": result.run_id})["runsFeedOrError"]["results"]
        tags = {tag["key"]: tag["value"] for tag in entry["tags"]}
        assert tags.items() >= dict(request.tags).items()  # the run page: every tag the launcher set
        shown = runs_list_tags(tags)
        assert shown == {
            T.TABLE: "demo.crm.profiles", T.OPERATION: "REWRITE_DATA_FILES", T.POLICY: "profiles-hourly",
            T.TRIGGER: "interval", T.REASON: tags[T.REASON], "dagster/partition": "REWRITE_DATA_FILES",
        }
        assert len(tags) >= 18, tags  # the rest (slot, attempt, run key, debt score, actor...) on the run page
        for key in (T.NAMESPACE, T.POLICY_VERSION, T.DEBT_SCORE, T.SLOT, T.ESTIMATED_BYTES, T.ACTOR, T.ATTEMPT,
                    T.BATCH_KEY, T.POLICY_TAG_PREFIX + "team", T.POLICY_TAG_PREFIX + "owner"):
            assert key in tags and key not in shown, key

        asset = graphql(context, ASSET, {"assetKey": {"path": list(asset_key_for(PROFILES).path)}})["assetNodeOrError"]
        assert asset["description"] == node.description
        assert asset["owners"] == [{"email": "ana@example.com"}, {"team": "crm"}]
        assert {"key": "floe/policy", "value": "profiles-hourly"} in asset["tags"]
        assert {"label": "dagster/table_name", "text": "demo.crm.profiles"} in asset["metadataEntries"]
        [materialization] = asset["assetMaterializations"]
        entries = {e["label"]: e for e in materialization["metadataEntries"]}
        assert entries["dagster/row_count"] == {"__typename": "IntMetadataEntry", "label": "dagster/row_count",
                                                "intValue": real_rows}
        assert entries["dagster/column_schema"]["__typename"] == "TableSchemaMetadataEntry"
        assert [c["name"] for c in entries["dagster/column_schema"]["schema"]["columns"]] == [
            "id", "name", "address", "tags", "balance"]
        assert entries["dagster/uri"]["text"] == table.location()
