"""Every view of a table's facts, pinned key by key and in order (issue 27's catalogue of table facts must
keep them exactly): the metrics record as cached, the health record (metrics, derived numbers, issues,
thresholds, debt, refs, declared properties), Dagit's health observation, Floe's health answer, a health
observation read back as Floe's report, and the health text. ``data/health_views.json`` holds what they
were before the catalogue; ``python -m floe_dagster_tests.unit.test_health_views`` writes it again (only
when a view is meant to change)."""

from __future__ import annotations

import json
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from floe_dagster.core.facts.health_assessment import HealthThresholds
from floe_dagster.core.policies.health_record import assess_table, health_record
from floe_dagster.core.facts.measurements import ColumnFacts, RefFacts, TableMetrics
from floe_dagster.core.policies.policy import parse_policies_text
from floe_dagster.core.basics.tables import TableName
from floe_dagster.defs.health_events import check_evaluation, observation_metadata
from floe_dagster.reports import health_report

GOLDEN = Path(__file__).parent / "data" / "health_views.json"
NOW = datetime(2026, 6, 10, 12, tzinfo=timezone.utc)
NOW_MS = int(NOW.timestamp() * 1000)
DAY_MS = 86_400_000
MIB = 1024 * 1024
TABLE = TableName("demo", ("sales",), "orders")

POLICY = """
- name: strict
  tablePattern: "demo.sales.*"
  rewriteDataFiles: {}
  expireSnapshots: {retainLast: 5}
  refRetention: [{pattern: "audit-*", maxAge: P30D, type: branch}]
  tableProperties: {write.metadata.delete-after-commit.enabled: true, write.delete.mode: merge-on-read}
  healthThresholds: {snapshotCountWarning: 20, snapshotCountCritical: 40}
"""


def _full() -> TableMetrics:
    sizes = (MIB,) * 30 + (300 * MIB,) * 60 + (2048 * MIB,) * 10
    return TableMetrics(
        qualified_name=TABLE.qualified, metadata_location="file:///w/orders/metadata/00041-a.metadata.json",
        tier="full", collected_at_ms=NOW_MS - 60_000, data_file_count=100, total_data_bytes=sum(sizes),
        record_count=123_456, data_file_sizes=sizes, delete_file_count=12, position_delete_file_count=10,
        equality_delete_file_count=2, snapshot_count=25, oldest_snapshot_ms=NOW_MS - 9 * DAY_MS,
        newest_snapshot_ms=NOW_MS - DAY_MS // 3, newest_foreign_commit_ms=NOW_MS - DAY_MS // 3,
        newest_foreign_commit_operation="append", manifest_count=7, manifest_total_bytes=3 * MIB + 17,
        partition_count=4, max_files_per_partition=55, current_snapshot_id=8812,
        statistics_snapshot_id=8800, statistics_snapshots_behind=3, statistics_rows_changed=1234,
        partition_statistics_snapshot_id=None, metadata_files_tracked=101, metadata_files_written=1500,
        properties={"write.delete.mode": "copy-on-write"}, location="file:///w/orders",
        columns=(ColumnFacts("id", "long", True, "the key"), ColumnFacts("v", "string", False)),
        data_file_groups=(('["a"]', (MIB, MIB), ((0, 2, 5, 100),)),), position_delete_groups=(('["a"]', (900,)),),
        refs=(RefFacts("audit-2025", "branch", 17, NOW_MS - 94 * DAY_MS, None, None, None, 12, 30, 1536 * MIB),
              RefFacts("v1", "tag", 18, NOW_MS - 3 * DAY_MS, None, None, None, 1, None, None)),
        partition_spec_id=1, partition_specs=((0, ()), (1, ((2, "v", "identity", "string"),))),
    )


def _summary() -> TableMetrics:
    return TableMetrics(
        qualified_name="demo.ops.audit_log", metadata_location="s3://b/audit/metadata/v3.metadata.json",
        tier="summary", collected_at_ms=NOW_MS, data_file_count=3, total_data_bytes=3000, record_count=30,
        delete_file_count=0, snapshot_count=3, oldest_snapshot_ms=NOW_MS - 40 * DAY_MS,
        newest_snapshot_ms=NOW_MS - 8 * DAY_MS, current_snapshot_id=3, metadata_files_tracked=3,
        metadata_files_written=3, properties={"write.metadata.delete-after-commit.enabled": "true"},
        location="s3://b/audit", columns=(), refs=(), partition_spec_id=0, partition_specs=((0, ()),),
    )


def _empty() -> TableMetrics:
    return TableMetrics(qualified_name="demo.ops.empty", metadata_location=None, tier="full", collected_at_ms=0,
                        data_file_sizes=(), manifest_count=0, manifest_total_bytes=0, partition_count=0,
                        max_files_per_partition=0)


# Every check at its lowest: each raises its issue (critical), in the order the checks are made.
EVERY_CHECK = HealthThresholds(**{name: 0 for name in HealthThresholds.__dataclass_fields__
                                  if name not in ("small_file_size_bytes", "large_file_size_bytes")})


def _metadata_values(metadata: dict[str, Any]) -> list[Any]:
    return [[key, type(value).__name__, getattr(value, "value", value)] for key, value in metadata.items()]


def views() -> dict[str, Any]:
    """Every view of the three tables, JSON-able, keys in the order each view writes them."""
    policies = parse_policies_text(POLICY)
    found: dict[str, Any] = {}
    tables = (("full", _full()), ("summary", _summary()), ("empty", _empty()), ("every_check", _full()))
    for name, metrics in tables:
        policy = policies.get("strict") if name == "full" else None
        thresholds = policy.health_thresholds if policy is not None else None
        thresholds = EVERY_CHECK if name == "every_check" else thresholds
        report = assess_table(metrics, thresholds, NOW, {}, policy)
        record = health_record(report, policy, {}, NOW)
        observed = observation_metadata(record)
        numbers = {key: getattr(value, "value", value) for key, value in observed.items()}
        found[name] = {
            "to_json": metrics.to_json(),
            "assessment": report.to_json(),
            "record": record,
            "observation": _metadata_values(observed),
            "check": _metadata_values(check_evaluation(TABLE, record).metadata),
            "floe": health_report.floe_health_json(record),
            "floe_observed": health_report._floe_report(
                metrics.qualified_name, record["assessed_at"], numbers.get("status"), numbers,
                numbers.get("issues") or [], numbers.get("thresholds") or {}),
            "text": health_report.format_health_text(record).splitlines(),
        }
    return json.loads(json.dumps(found, default=str))


def _ordered(value: Any) -> str:
    return json.dumps(value, indent=1, ensure_ascii=False)  # keeps the key order: it is what is pinned


def test_every_view_of_the_facts_is_as_before():
    golden = json.loads(GOLDEN.read_text(encoding="utf-8"))
    now = views()
    for table, table_views in golden.items():
        for view, expected in table_views.items():
            assert _ordered(now[table][view]) == _ordered(expected), f"{table}: {view}"
    assert now.keys() == golden.keys() and all(now[t].keys() == golden[t].keys() for t in golden)


if __name__ == "__main__":
    GOLDEN.write_text(_ordered(views()) + "\n", encoding="utf-8")
    sys.exit(0)
