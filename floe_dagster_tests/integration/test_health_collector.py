"""Health collection on real PyIceberg tables (SQLite catalog, file:// warehouse): every metric against
what is on disk, the on-disk cache, reads counted per tick, and the time budget."""

from __future__ import annotations

import json
import os
import time
from datetime import datetime, timezone

import pyarrow as pa
import pytest
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType

from floe_dagster.core.rewrites.estimates import estimate_rewrite_data_files
from floe_dagster.core.facts.measurements import TableMetrics
from floe_dagster.core.operation_kinds.expire_snapshots import ExpireSnapshotsConfig
from floe_dagster.core.operation_kinds.rewrite_data_files import RewriteDataFilesConfig
from floe_dagster.core.operations import Operation
from floe_dagster.errors import UnknownTable
from floe_dagster.iceberg.byte_estimates import estimate_operation_bytes
from floe_dagster.iceberg.health_collector import HealthCollector, forget_parsed_records
from floe_dagster.iceberg.metadata_reduction import partition_key
from floe_dagster_tests.integration._health_tables import (
    data_files_on_disk,
    files_in_partition,
    lakehouse,
    manifests_on_disk,
    metadata_json,
    name,
    rows,
)

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "region", StringType(), required=False),
    NestedField(3, "payload", StringType(), required=False),
)
BY_REGION = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "region"))
FIXED_NOW = datetime(2026, 11, 22, 12, 0, tzinfo=timezone.utc)


@pytest.fixture
def lake(tmp_path):
    settings, catalog = lakehouse(tmp_path / "lake")
    catalog.create_namespace("ns")
    return settings, catalog


def collector_for(settings, catalog, **kwargs) -> HealthCollector:
    return HealthCollector(catalog, settings, clock=lambda: FIXED_NOW, **kwargs)


def unpartitioned_table(catalog, identifier="ns.plain", appends=(10, 25, 40)):
    table = catalog.create_table(identifier, schema=SCHEMA, properties={"write.target-file-size-bytes": "1048576"})
    start = 0
    for count in appends:
        table.append(rows(start, count))
        start += count
    return catalog.load_table(identifier)


def snapshot_times(table) -> list[int]:
    return [s["timestamp-ms"] for s in metadata_json(table)["snapshots"]]


# -- every metric, exactly --------------------------------------------------------------------------------


def test_full_tier_metrics_match_the_files_on_disk(lake):
    settings, catalog = lake
    before_ms = int(time.time() * 1000)
    table = unpartitioned_table(catalog)
    after_ms = int(time.time() * 1000)
    files = data_files_on_disk(table)
    manifests = manifests_on_disk(table)
    assert len(files) == 3 and len(manifests) == 3  # three fast appends: a file and a manifest each

    m = collector_for(settings, catalog).metrics_for(name(catalog, "ns.plain"), tier="full")

    assert m.tier == "full" and m.qualified_name == "demo.ns.plain"
    assert m.metadata_location == table.metadata_location
    assert m.collected_at_ms == int(FIXED_NOW.timestamp() * 1000)
    assert m.data_file_count == 3
    assert sorted(m.data_file_sizes) == sorted(files.values())
    assert m.total_data_bytes == sum(files.values())
    assert m.min_file_bytes == min(files.values()) and m.max_file_bytes == max(files.values())
    assert m.avg_file_bytes == pytest.approx(sum(files.values()) / 3)
    assert m.record_count == 75
    assert (m.delete_file_count, m.position_delete_file_count, m.equality_delete_file_count) == (0, 0, 0)
    assert m.delete_file_ratio == 0.0
    times = snapshot_times(table)
    assert m.snapshot_count == 3
    assert (m.oldest_snapshot_ms, m.newest_snapshot_ms) == (min(times), max(times))
    assert before_ms - 1000 <= m.oldest_snapshot_ms <= m.newest_snapshot_ms <= after_ms + 1000
    assert m.current_snapshot_id == metadata_json(table)["current-snapshot-id"]
    assert m.manifest_count == 3
    assert m.manifest_total_bytes == sum(manifests.values())
    assert (m.partition_count, m.max_files_per_partition, m.partition_skew) == (1, 3, 1.0)
    assert m.properties["write.target-file-size-bytes"] == "1048576"
    middle = sorted(files.values())[1]
    assert m.small_file_count(middle) == 1 and m.large_file_count(middle) == 1
    assert TableMetrics.age_days(m.newest_snapshot_ms, m.newest_snapshot_ms + 2 * 86_400_000) == 2.0
    # The estimate inputs: one group (unpartitioned), the sizes in scan order, no deletes.
    ((key, sizes, deletes),) = m.data_file_groups
    assert key == "[]" and sorted(sizes) == sorted(files.values()) and deletes == ()
    assert m.position_delete_groups == ()
    # The JSON form round-trips.
    assert TableMetrics.from_json(json.loads(json.dumps(m.to_json()))) == m


def test_summary_tier_reads_only_the_metadata_file(lake):
    settings, catalog = lake
    table = unpartitioned_table(catalog)
    files = data_files_on_disk(table)
    collector = collector_for(settings, catalog)

    snapshot = collector.collect([name(catalog, "ns.plain")], tier="summary")

    assert snapshot.files_read == 1 and collector.read_log == [table.metadata_location]
    m = snapshot.metrics[name(catalog, "ns.plain")]
    assert m.tier == "summary"
    assert (m.data_file_count, m.total_data_bytes, m.record_count, m.delete_file_count) == (
        3, sum(files.values()), 75, 0,
    )
    times = snapshot_times(table)
    assert (m.snapshot_count, m.oldest_snapshot_ms, m.newest_snapshot_ms) == (3, min(times), max(times))
    # What only the manifests can tell is left unknown, not guessed.
    assert m.data_file_sizes is None and m.manifest_count is None and m.partition_count is None
    assert m.position_delete_file_count is None and m.data_file_groups is None
    assert m.small_file_count(10**9) is None


def test_partitions_and_skew(lake):
    settings, catalog = lake
    table = catalog.create_table("ns.parted", schema=SCHEMA, partition_spec=BY_REGION)
    table.append(_mixed(0))  # eu, us, apac: one file each
    for i in range(2):
        table.append(rows(100 + i * 10, 10, "eu"))
    table = catalog.load_table("ns.parted")
    files = data_files_on_disk(table)
    eu, us, apac = (files_in_partition(files, "region", r) for r in ("eu", "us", "apac"))
    assert (len(eu), len(us), len(apac)) == (3, 1, 1)

    m = collector_for(settings, catalog).metrics_for(name(catalog, "ns.parted"), tier="full")

    assert m.data_file_count == 5 and m.total_data_bytes == sum(files.values())
    assert m.partition_count == 3 and m.max_files_per_partition == 3
    assert m.partition_skew == pytest.approx(3 / (5 / 3))
    groups = {key: sizes for key, sizes, _ in m.data_file_groups}
    assert set(groups) == {'["eu"]', '["us"]', '["apac"]'}
    assert sorted(groups['["eu"]']) == sorted(eu.values())
    assert sorted(groups['["us"]']) == sorted(us.values())
    assert m.record_count == 5 * 3 + 20


def _mixed(start: int):
    return pa.concat_tables([rows(start, 5, "eu"), rows(start + 5, 5, "us"), rows(start + 10, 5, "apac")])


def test_partition_spec_evolution_groups_like_iceberg(lake):
    """Files of an older spec are their own partitions for the health count and their own groups,
    keyed by their spec (never the current spec's all-null partition); the estimate merges them into
    one group as Iceberg's rewrite planner does."""
    settings, catalog = lake
    table = catalog.create_table("ns.evolving", schema=SCHEMA)
    table.append(rows(0, 10, "eu"))
    table.append(rows(10, 10, "us"))
    with table.update_spec() as update:
        update.add_identity("region")
    table = catalog.load_table("ns.evolving")
    table.append(_mixed(100))  # eu, us, apac under the new spec
    table = catalog.load_table("ns.evolving")

    m = collector_for(settings, catalog).metrics_for(name(catalog, "ns.evolving"), tier="full")

    assert m.data_file_count == 5
    assert m.partition_count == 4  # the old spec's single partition and three new ones
    assert m.max_files_per_partition == 2
    groups = {key: len(sizes) for key, sizes, _ in m.data_file_groups}
    assert groups == {"0:[]": 2, '["eu"]': 1, '["us"]': 1, '["apac"]': 1}
    assert m.partition_spec_id == 1
    assert m.partition_specs == ((0, ()), (1, ((2, "region", "identity", "string"),)))
    from floe_dagster.core.rewrites.rewrite_rules import RewriteRules
    from floe_dagster.core.rewrites.estimates import plan_recorded_data_files, rewrite_groups

    assert {key: len(sizes) for key, sizes, _ in rewrite_groups(m.data_file_groups)} == {
        "other specs": 2, '["eu"]': 1, '["us"]': 1, '["apac"]': 1}
    # min-input-files 2: only the old spec's two files make a group Iceberg keeps
    estimate = plan_recorded_data_files(m, RewriteRules.sized(1 << 20, min_input_files=2))
    assert (estimate.files, estimate.groups) == (2, 1)


def test_empty_table(lake):
    settings, catalog = lake
    catalog.create_table("ns.empty", schema=SCHEMA)
    collector = collector_for(settings, catalog)
    m = collector.metrics_for(name(catalog, "ns.empty"), tier="full")
    assert (m.data_file_count, m.snapshot_count, m.manifest_count, m.partition_count) == (0, 0, 0, 0)
    assert m.oldest_snapshot_ms is None and m.current_snapshot_id is None and m.data_file_sizes == ()
    assert collector.files_read == 1  # the metadata file; there is no manifest list


# -- reads per tick and the cache --------------------------------------------------------------------------


def test_unchanged_table_is_not_read_again_and_a_changed_one_is(lake):
    settings, catalog = lake
    plain = unpartitioned_table(catalog)
    other = unpartitioned_table(catalog, "ns.other", appends=(5,))
    collector = collector_for(settings, catalog)
    a, b = name(catalog, "ns.plain"), name(catalog, "ns.other")

    first = collector.collect(tier="full")
    assert set(first.metrics) == {a, b} and first.missing == []
    # Per table: the metadata file, the manifest list, each manifest.
    assert first.files_read == (2 + 3) + (2 + 1)
    assert first.catalog_calls == 1  # one query for every table's metadata location

    second = collector.collect(tier="full")
    assert second.files_read == 0 and second.computed == [] and second.catalog_calls == 1
    assert second.metrics == first.metrics
    assert collector.collect(tier="summary").files_read == 0  # a full record serves the summary tier

    manifests_before = set(manifests_on_disk(plain))
    plain.append(rows(1000, 7))
    plain = catalog.load_table("ns.plain")
    third = collector.collect(tier="full")
    new_manifest = set(manifests_on_disk(plain)) - manifests_before
    assert len(new_manifest) == 1
    assert third.computed == [a]
    # Only what changed: the new metadata file, the new manifest list and the one new manifest.
    assert third.files_read == 3
    assert collector.read_log[0] == plain.metadata_location
    assert collector.read_log[1] == plain.metadata.current_snapshot().manifest_list
    assert {p.replace("file://", "") for p in collector.read_log[2:]} == new_manifest
    m = third.metrics[a]
    assert m.data_file_count == 4 and m.record_count == 82 and m.manifest_count == 4
    assert sorted(m.data_file_sizes) == sorted(data_files_on_disk(plain).values())
    assert third.metrics[b] == first.metrics[b]

    plain.append(rows(2000, 3))
    summary = collector.collect([a], tier="summary")
    assert summary.files_read == 1 and summary.metrics[a].data_file_count == 5


def test_summary_then_full_tier_read_the_metadata_file_once(lake):
    """What a sensor tick does: the summary tier for every table, then the full tier; a new or changed
    table's metadata file is read by the first and parsed again by neither."""
    settings, catalog = lake
    plain = unpartitioned_table(catalog)
    a = name(catalog, "ns.plain")
    collector = collector_for(settings, catalog)
    summary = collector.collect([a], tier="summary")
    assert collector.read_log == [plain.metadata_location]
    full = collector.collect([a], tier="full", time_budget_s=20)
    assert plain.metadata_location not in collector.read_log
    assert full.files_read == 1 + 3  # the manifest list and the three manifests
    assert full.metrics[a].data_file_count == summary.metrics[a].data_file_count == 3
    plain.append(rows(5000, 2))  # a new metadata file: read once more
    collector.collect([a], tier="summary")
    assert collector.read_log == [catalog.load_table("ns.plain").metadata_location]


def test_cache_survives_a_new_collector(lake):
    settings, catalog = lake
    unpartitioned_table(catalog)
    first = collector_for(settings, catalog).collect(tier="full")
    assert first.files_read == 5

    forget_parsed_records()  # as in a new process: only the file on disk is left
    fresh = HealthCollector(catalog, settings)
    again = fresh.collect(tier="full")
    assert again.files_read == 0 and again.computed == []
    assert again.metrics == first.metrics
    assert os.path.exists(os.path.join(settings.data_dir, "cache", "health", "health.sqlite3"))


def test_other_catalogs_cost_one_load_table_per_table(lake):
    """Without the SQL catalog's one-query listing, each tick costs one load_table per table, and an
    unchanged table nothing more."""
    settings, catalog = lake
    plain = unpartitioned_table(catalog)
    unpartitioned_table(catalog, "ns.other", appends=(5,))
    tables = [name(catalog, "ns.plain"), name(catalog, "ns.other")]
    sql_path = collector_for(settings, catalog).collect(tables, tier="full")
    collector = HealthCollector(catalog, settings.data_dir + "/other-cache", clock=lambda: FIXED_NOW,
                                use_location_listing=False)

    first = collector.collect(tables, tier="full")
    assert first.catalog_calls == 2
    assert first.files_read == (1 + 3) + (1 + 1)  # manifest lists and manifests; load_table read the metadata
    assert first.metrics == sql_path.metrics

    second = collector.collect(tables, tier="full")
    assert (second.catalog_calls, second.files_read, second.computed) == (2, 0, [])

    plain.append(rows(500, 5))
    third = collector.collect(tables, tier="full")
    assert third.computed == [tables[0]] and third.files_read == 2


def test_missing_and_dropped_tables(lake):
    settings, catalog = lake
    unpartitioned_table(catalog)
    ghost = name(catalog, "ns.ghost")
    collector = collector_for(settings, catalog)
    snapshot = collector.collect([ghost, name(catalog, "ns.plain")], tier="summary")
    assert snapshot.missing == [ghost] and snapshot.unknown == [ghost]
    assert "does not exist" in snapshot.errors[ghost]
    with pytest.raises(UnknownTable):
        collector.metrics_for(ghost)
    catalog.drop_table("ns.plain")
    assert collector.collect([name(catalog, "ns.plain")]).unknown == [name(catalog, "ns.plain")]


# -- the time budget ---------------------------------------------------------------------------------------


def test_time_budget_zero_collects_nothing_then_later_calls_catch_up(lake):
    settings, catalog = lake
    names = []
    for i in range(3):
        unpartitioned_table(catalog, f"ns.t{i}", appends=(5, 5))
        names.append(name(catalog, f"ns.t{i}"))
    collector = collector_for(settings, catalog)

    nothing = collector.collect(names, tier="full", time_budget_s=0)
    assert nothing.metrics == {} and nothing.missing == names and nothing.files_read == 0

    # A deterministic clock for the budget: one second per file read. Each table costs 4 reads
    # (metadata, manifest list, two manifests), so a 3.5 s budget admits exactly one table a call.
    collector._timer = lambda: float(collector.files_read)
    seen = []
    for expected_missing in (2, 1, 0):
        snapshot = collector.collect(names, tier="full", time_budget_s=3.5)
        assert len(snapshot.missing) == expected_missing and len(snapshot.computed) == 1
        assert snapshot.files_read == 4
        seen += snapshot.computed
    assert sorted(seen) == sorted(names)  # never-collected tables first: each was collected once
    assert collector.collect(names, tier="full", time_budget_s=0).missing == []  # cache hits are free


def test_a_huge_table_progresses_across_calls(lake):
    """The budget is also checked between manifests; what was read is kept, so a table with more
    manifests than one call can read is finished over several calls without reading anything twice."""
    settings, catalog = lake
    unpartitioned_table(catalog, "ns.big", appends=(3, 3, 3, 3, 3, 3))
    big = name(catalog, "ns.big")
    collector = collector_for(settings, catalog)
    collector._timer = lambda: float(collector.files_read)

    first = collector.collect([big], tier="full", time_budget_s=3.5)  # metadata, list, 2 manifests
    assert first.missing == [big] and first.files_read == 4
    # The collector remembers the metadata file it parsed: the list and 3 more manifests.
    second = collector.collect([big], tier="full", time_budget_s=3.5)
    assert second.missing == [big] and second.files_read == 4
    assert catalog.load_table("ns.big").metadata_location not in collector.read_log
    third = collector.collect([big], tier="full", time_budget_s=3.5)  # the list and the last manifest
    assert third.missing == [] and third.files_read == 2
    m = third.metrics[big]
    assert m.manifest_count == 6 and m.data_file_count == 6 and m.record_count == 18
    table = catalog.load_table("ns.big")
    assert m.manifest_total_bytes == sum(manifests_on_disk(table).values())


# -- estimates from collected health -----------------------------------------------------------------------


def test_rewrite_estimate_from_collected_metrics(lake):
    settings, catalog = lake
    table = catalog.create_table("ns.small", schema=SCHEMA, partition_spec=BY_REGION)
    for i in range(6):
        table.append(rows(i * 10, 10, "eu"))
    for i in range(2):
        table.append(rows(100 + i * 10, 10, "us"))
    table = catalog.load_table("ns.small")
    eu = files_in_partition(data_files_on_disk(table), "region", "eu")
    m = collector_for(settings, catalog).metrics_for(name(catalog, "ns.small"), tier="full")

    estimate = estimate_rewrite_data_files(m)  # defaults: 512 MiB target, 5 input files
    assert (estimate.bytes, estimate.files, estimate.groups, estimate.partitions) == (sum(eu.values()), 6, 1, 1)
    assert estimate_operation_bytes(name(catalog, "ns.small"), Operation.REWRITE_DATA_FILES, m, RewriteDataFilesConfig()) == sum(eu.values())
    everything = estimate_operation_bytes(name(catalog, "ns.small"), Operation.REWRITE_DATA_FILES, m, RewriteDataFilesConfig(rewrite_all=True))
    assert everything == m.total_data_bytes
    assert estimate_operation_bytes(name(catalog, "ns.small"), Operation.EXPIRE_SNAPSHOTS, m, ExpireSnapshotsConfig()) == 0
    summary = collector_for(settings, catalog).collect(tier="summary").metrics[name(catalog, "ns.small")]
    assert summary.tier == "full"  # the cached full record serves the summary tier
    assert partition_key(["eu"]) == '["eu"]'
