"""What Dagit shows about a table asset and a run, as pure mappings: Iceberg's schema to Dagster's
column schema and standard table metadata, a policy's tags to asset owners, a policy's name to an
asset tag value, a policy's schedules to the asset description, and which run tags the runs list
shows (by the installed UI's own rule)."""

from __future__ import annotations

import logging
import re

import pytest
from dagster import AssetOut, TableColumnConstraints
from dagster._core.definitions.metadata import TableMetadataSet
from dagster._utils.tags import is_valid_strict_tag_value
from pyiceberg.schema import Schema
from pyiceberg.table.snapshots import Operation as SnapshotOperation
from pyiceberg.table.snapshots import Snapshot, Summary
from pyiceberg.types import (
    DecimalType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StringType,
    StructType,
    TimestamptzType,
)

from floe_dagster.core.runs import run_tags as T
from floe_dagster.core.facts.measurements import ColumnFacts
from floe_dagster.core.operations import Operation
from floe_dagster.core.plan.planner import SchedulerSettings
from floe_dagster.core.policies.policy import parse_policies_text
from floe_dagster.core.runs.run_tags import Origin, PolicyFacts, batch_run_tags, run_tags
from floe_dagster.core.basics.tables import TableName
from floe_dagster.defs.asset_policy import (
    asset_policy_facts,
    owners_from_tags,
    policy_summary,
    policy_tag_value,
)
from floe_dagster.defs.table_metadata import (
    COLUMN_SCHEMA_KEY,
    ROW_COUNT_KEY,
    TABLE_NAME_KEY,
    URI_KEY,
    column_schema,
    definition_metadata,
    table_metadata,
)
from floe_dagster.iceberg.catalog import row_count, schema_columns
from floe_dagster_tests.dagit_ui import function_body, pinned_by_default, runs_list_tags, ui_source
from floe_dagster_tests.unit.test_tick_ledger_and_tags import decision

ORDERS = TableName("demo", ("sales",), "orders")
EVENTS = TableName("demo", ("sales",), "events")
RDF = Operation.REWRITE_DATA_FILES

# -- the column schema and the standard table metadata -----------------------------------------------------

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True, doc="the order id"),
    NestedField(2, "amount", DecimalType(10, 2)),
    NestedField(3, "address", StructType(NestedField(4, "street", StringType()),
                                         NestedField(5, "zip", IntegerType(), required=True))),
    NestedField(6, "tags", ListType(7, StringType(), element_required=False)),
    NestedField(8, "counts", MapType(9, StringType(), 10, LongType())),
    NestedField(11, "ordered_at", TimestamptzType(), doc=""),
)


def test_columns_are_the_schemas_with_types_as_iceberg_prints_them():
    assert schema_columns(SCHEMA) == (
        ColumnFacts("id", "long", True, "the order id"),
        ColumnFacts("amount", "decimal(10, 2)", False, None),
        # nested types without the field ids Iceberg prints inside them
        ColumnFacts("address", "struct<street: optional string, zip: required int>", False, None),
        ColumnFacts("tags", "list<string>", False, None),
        ColumnFacts("counts", "map<string, long>", False, None),
        ColumnFacts("ordered_at", "timestamptz", False, None),  # an empty doc is no description
    )


def test_column_schema_is_dagsters_table_schema():
    schema = column_schema(schema_columns(SCHEMA))
    assert [c.name for c in schema.columns] == ["id", "amount", "address", "tags", "counts", "ordered_at"]
    first = schema.columns[0]
    assert (first.type, first.description, first.constraints) == ("long", "the order id",
                                                                 TableColumnConstraints(nullable=False))
    assert schema.columns[1].constraints.nullable and schema.columns[1].description is None


def test_the_row_count_is_the_snapshot_summarys_total_never_a_guess():
    def snapshot(**totals) -> Snapshot:
        return Snapshot(snapshot_id=1, sequence_number=1, timestamp_ms=0, manifest_list="m.avro",
                        summary=Summary(SnapshotOperation.APPEND, **totals))

    assert row_count(snapshot(**{"total-records": "42"})) == 42
    assert row_count(snapshot()) is None  # a writer that left the total out: no row count
    assert row_count(None) == 0  # no snapshot: an empty table


def test_standard_table_metadata_uses_dagsters_keys():
    metadata = table_metadata("demo.sales.orders", "file:/lake/sales/orders", 400, schema_columns(SCHEMA))
    assert set(metadata) == {TABLE_NAME_KEY, ROW_COUNT_KEY, COLUMN_SCHEMA_KEY, URI_KEY}
    read_back = TableMetadataSet.extract(metadata)  # what Dagster itself reads from these keys
    assert read_back.table_name == "demo.sales.orders" and read_back.row_count == 400
    assert [c.name for c in read_back.column_schema.columns][:2] == ["id", "amount"]
    assert metadata["dagster/uri"] == "file:/lake/sales/orders"  # the key Dagit's Storage reads
    # What is not known is left out, never guessed.
    assert set(table_metadata("demo.sales.orders", None, None, None)) == {TABLE_NAME_KEY}
    assert definition_metadata("demo.sales.orders") == dict(TableMetadataSet(table_name="demo.sales.orders"))


# -- owners, the policy tag, the description ------------------------------------------------------------------


def policy(text: str):
    [only] = list(parse_policies_text(text))
    return only


def test_owners_come_from_the_owner_and_team_tags():
    good = policy("name: p\ntablePattern: '*'\ntags: {owner: 'ana@example.com, team:finops', team: data-eng}\n")
    owners, problems = owners_from_tags(good)
    assert owners == ("ana@example.com", "team:finops", "team:data-eng") and problems == []
    AssetOut(owners=list(owners))  # Dagster accepts them
    assert owners_from_tags(policy("name: p\ntablePattern: '*'\ntags: {team: 'team:ops'}\n"))[0] == ("team:ops",)
    assert owners_from_tags(policy("name: p\ntablePattern: '*'\ntags: {cost-center: '42'}\n")) == ((), [])


def test_an_owner_dagster_would_refuse_is_left_out_with_a_warning(caplog):
    bad = policy("name: sales\ntablePattern: '*'\ntags: {owner: 'ana@example.com, bob', team: ' '}\n")
    owners, problems = owners_from_tags(bad)
    assert owners == ("ana@example.com",)
    assert problems == [
        "policy 'sales' (<text>): tag owner='ana@example.com, bob': 'bob' is neither an email address nor "
        "team:<name>, so it does not name an owner of the policy's table assets in Dagit",
        "policy 'sales' (<text>): tag team=' ': it names no team, so it does not name an owner of the "
        "policy's table assets in Dagit",
    ]
    with caplog.at_level(logging.WARNING, logger="floe_dagster.defs.asset_policy"):
        facts = asset_policy_facts(bad, SchedulerSettings(), {})
    assert facts.owners == ("ana@example.com",) and [r.getMessage() for r in caplog.records] == problems


@pytest.mark.parametrize("name, value", [
    ("nightly", "nightly"),
    ("sales-eu.v2", "sales-eu.v2"),
    (None, "none"),
])
def test_a_policy_name_that_fits_is_its_own_tag_value(name, value):
    assert policy_tag_value(name) == value


def test_a_policy_name_that_does_not_fit_becomes_readable_and_unique():
    mapped = {name: policy_tag_value(name) for name in
              ("sales orders (EU)", "sales_orders_EU", "sales/orders EU", "none", "ventes été", "x" * 64, "日本")}
    assert mapped["sales_orders_EU"] == "sales_orders_EU"  # fits: unchanged
    assert re.fullmatch(r"sales_orders_EU-[0-9a-f]{8}", mapped["sales orders (EU)"])
    assert re.fullmatch(r"none-[0-9a-f]{8}", mapped["none"])  # not the value of "no policy"
    assert re.fullmatch(r"policy-[0-9a-f]{8}", mapped["日本"])
    assert re.fullmatch(r"ventes_ete-[0-9a-f]{8}", mapped["ventes été"])  # as Dagster names read it
    assert len(set(mapped.values())) == len(mapped)
    assert all(is_valid_strict_tag_value(v) for v in mapped.values())
    assert policy_tag_value("sales orders (EU)") == mapped["sales orders (EU)"]  # deterministic


POLICIES = """
- name: nightly
  description: Compaction and expiry for the sales tables
  tablePattern: "demo.sales.*"
  tags: {team: sales}
  rewriteDataFiles: {}
  rewriteDataFilesSchedule: {cronExpression: "0 2 * * *", windowStart: "01:00", windowEnd: "05:00",
                             timezone: Europe/Berlin}
  expireSnapshots: {retainLast: 3}
  expireSnapshotsSchedule: {interval: PT6H}
  orphanCleanup: {}
  orphanCleanupSchedule: {}
  rewriteManifests: {}
  rewritePositionDeleteFiles: {}
  rewritePositionDeleteFilesSchedule: {interval: P7D, enabled: false}
  triggerConditions: {smallFilePercentageAbove: 30, deleteFileCountAbove: 10, minIntervalMinutes: 60,
                      perOperationMinIntervalMinutes: {EXPIRE_SNAPSHOTS: 120}}
"""


def test_the_description_names_the_policy_and_when_each_operation_runs():
    nightly = policy(POLICIES)
    names = {("nightly", RDF): "floe_nightly_rewrite_data_files"}
    facts = asset_policy_facts(nightly, SchedulerSettings(), names)
    assert facts.tags == {"floe/policy": "nightly"} and facts.owners == ("team:sales",)
    assert facts.description("demo.sales.orders") == (
        "Iceberg table `demo.sales.orders`. Policy 'nightly': Compaction and expiry for the sales tables.\n\n"
        "- REWRITE_DATA_FILES: cron `0 2 * * *` Europe/Berlin (schedule floe_nightly_rewrite_data_files), "
        "window 01:00-05:00 Europe/Berlin\n"
        "- EXPIRE_SNAPSHOTS: every 6 hours (debt-score sensor)\n"
        "- ORPHAN_CLEANUP: when the trigger conditions are met (debt-score sensor)\n"
        "- REWRITE_MANIFESTS: no schedule, only when triggered\n"
        "- REWRITE_POSITION_DELETE_FILES: schedule disabled, only when triggered\n\n"
        "Trigger conditions (every operation): small files % ≥ 30 or delete files ≥ 10; min interval 60 min; "
        "EXPIRE_SNAPSHOTS min interval 120 min."
    )
    off = policy_summary(nightly, SchedulerSettings(enabled=False, condition_based_triggering_enabled=False), names)
    assert "Automatic maintenance is off (`scheduler.enabled: false`)" in off
    assert off.endswith("The policy's trigger conditions are ignored "
                        "(`scheduler.condition-based-triggering-enabled: false`).")


def test_conditions_critical_pipelines_and_every_tick_rules_are_described():
    gate = policy("""
name: gate
tablePattern: "*"
rewriteDataFiles: {}
rewriteDataFilesSchedule: {}
triggerConditions: {snapshotCountAbove: 50, deleteFileRatioAbove: 0.25, triggerLogic: AND, criticalPipeline: true,
                    criticalPipelineMaxDelayMinutes: 1440}
""")
    assert policy_summary(gate, SchedulerSettings(), {}).endswith(
        "- REWRITE_DATA_FILES: when the trigger conditions are met (debt-score sensor)\n\n"
        "Trigger conditions (every operation): delete files per data file ≥ 0.25 and snapshots ≥ 50; "
        "critical pipeline: forced 1 day after the last success.")
    bare = policy("name: bare\ntablePattern: '*'\nrewriteManifests: {}\nrewriteManifestsSchedule: {}\n")
    assert policy_summary(bare, SchedulerSettings(), {}).endswith(
        "- REWRITE_MANIFESTS: every tick (debt-score sensor)")


def test_a_table_without_a_policy_says_so():
    facts = asset_policy_facts(None, SchedulerSettings(), {})
    assert facts.tags == {"floe/policy": "none"} and facts.owners == ()
    assert facts.description("demo.raw.x") == ("Iceberg table `demo.raw.x`. No enabled policy matches it: "
                                               "floe-dagster neither schedules nor runs maintenance on it.")


# -- run tags: the runs list and the run page ---------------------------------------------------------------------


def test_the_runs_list_rule_is_the_installed_uis():
    """The port in floe_dagster_tests/dagit_ui.py, checked against dagster-webserver's own source."""
    pinning = ui_source("runs/useTagPinning.tsx")
    assert function_body(pinning, "isUnpinnedByDefaultSystemTag") == (
        "return ( (key.startsWith(DagsterTag.Namespace) && key !== DagsterTag.Partition && "
        "key !== DagsterTag.Backfill) || key === 'mode' );")
    tag_names = ui_source("runs/RunTag.tsx")
    for constant in ("Namespace = 'dagster/'", "Partition = 'dagster/partition'", "Backfill = 'dagster/backfill'"):
        assert constant in tag_names
    row = ui_source("runs/RunRowTags.tsx")
    assert "if (tag.pinned) {\n        tags.push(tag);" in row  # the row shows the pinned tags only
    # Open-source Dagit lists runs with that row (the redesigned list is off).
    assert "useRunsRedesignState = (): RunsRedesignState => 'disabled'" in ui_source(
        "shared/app/useRunsRedesignState.tsx")


def test_the_runs_list_shows_what_an_operator_scans_and_the_run_page_the_rest():
    facts = PolicyFacts("daily", "v1", {T.POLICY_TAG_PREFIX + "team": "sales"}, timeout_s=3600)
    one = run_tags(ORDERS, RDF, facts, Origin("interval", "interval due", "sensor:default"), decision())
    manual = run_tags(ORDERS, RDF, facts, Origin("manual", "compact now", "ana", "trigger-1"))
    batch = batch_run_tags([decision(), decision(table=EVENTS)], {ORDERS: facts, EVENTS: facts}, "sensor:default",
                           "batch:1")
    assert set(runs_list_tags(one)) == set(runs_list_tags(manual)) == {T.TABLE, T.OPERATION, T.POLICY, T.TRIGGER,
                                                                       T.REASON}
    assert set(runs_list_tags(batch)) == {T.TABLES, T.OPERATION, T.POLICY, T.TRIGGER, T.REASON}
    # Everything else is on the run page: under Dagster's namespace, which GraphQL returns.
    for tags in (one, manual, batch):
        for key in set(tags) - set(T.RUNS_LIST_KEYS):
            assert key.startswith("dagster/") and not pinned_by_default(key), key
    assert len(one) == 16 and len(runs_list_tags(one)) == 5


def test_runs_made_before_the_keys_moved_are_still_read():
    old = {"floe/table": "demo.sales.orders", "floe/trigger-id": "t-1", "floe/actor": "ana", "floe/run-key": "k"}
    assert T.tag_value(old, T.TRIGGER_ID) == "t-1" and T.tag_value(old, T.ACTOR) == "ana"
    assert T.tag_value(old, T.BATCH_KEY) == "k" and T.tag_value(old, T.SLOT) is None
    assert T.tag_value({**old, T.ACTOR: "bob"}, T.ACTOR) == "bob"  # the current key wins
    assert T.tag_value(old, T.TABLE) == "demo.sales.orders"
