"""Branches and tags through the real stack (issue 22, refs): the health collector measures what each ref
alone keeps against the files on disk (PyIceberg SQLite catalog), health, Dagit's observation and
explain show a stale branch with its reason, and an EXPIRE_SNAPSHOTS run (real Spark and Iceberg, a
real Dagster instance, the CLI's in-process run path) sets the policy's refRetention and removes the
old branch while the young branch, the tag and main stay, main's snapshot and rows unchanged."""

from __future__ import annotations

import os
import re
import time
from datetime import datetime, timezone

import pytest
from dagster import DagsterInstance
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

from floe_dagster.coordination.database import Coordination
from floe_dagster.core.facts.measurements import format_bytes
from floe_dagster.core.facts.expiry_defaults import MAX_SNAPSHOT_AGE_MS
from floe_dagster.core.facts.ref_retention_changes import GUARD_RULE, SET_AGES_PROPERTY
from floe_dagster.core.basics.tables import TableName
from floe_dagster.defs.health_reporting import report_health_events
from floe_dagster.defs.names import asset_key_for
from floe_dagster.demo import local_path
from floe_dagster.errors import CommitConflict
from floe_dagster.iceberg.catalog import load_table, open_catalog
from floe_dagster.iceberg.health_collector import HealthCollector
from floe_dagster.iceberg.ref_retention import apply_ref_retention
from floe_dagster.launching.manual import trigger_table
from floe_dagster.policies import load_policy_set
from floe_dagster.reports.explain import explain_table
from floe_dagster.reports.health_report import format_health_text, health_report
from floe_dagster.settings import load_settings
from floe_dagster_tests.conftest import write_settings
from floe_dagster_tests.integration._health_tables import data_files_on_disk, lakehouse, rows

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "region", StringType(), required=False),
    NestedField(3, "payload", StringType(), required=False),
)
DAY_MS = 86_400_000
POLICIES = """
- name: refs
  tablePattern: "demo.ns.*"
  expireSnapshots: {retainLast: 1, maxSnapshotAge: PT0S}
  expireSnapshotsSchedule: {interval: PT1H}
  refRetention:
    - {pattern: "scratch-*", maxAge: PT2S, type: branch}
    - {pattern: "audit-*", maxAge: P30D}
    - {pattern: "tmp-*", maxAge: PT1S, type: tag}
    - {pattern: "*", maxAge: P1D, type: tag}
    - {pattern: "*", maxAge: PT1S, type: branch}  # would match main too: main is never touched
"""


def new_files(table, before: set[str]) -> dict[str, int]:
    return {path: size for path, size in data_files_on_disk(table).items() if path not in before}


def test_the_collector_measures_what_each_ref_alone_keeps_against_the_files_on_disk(tmp_path):
    settings, catalog = lakehouse(tmp_path / "lake")
    catalog.create_namespace("ns")
    # Main keeps only its newest snapshot (1 ms, at least 1): a tag on an older snapshot pins it.
    table = catalog.create_table("ns.t", schema=SCHEMA, properties={MAX_SNAPSHOT_AGE_MS: "1"})
    table.append(rows(0, 10))
    first = table.current_snapshot().snapshot_id
    first_file = data_files_on_disk(table)
    table.manage_snapshots().create_tag(first, "v1").create_branch(first, "audit").commit()
    table.append(rows(100, 7), branch="audit")
    audit_file = new_files(table, set(first_file))
    before = set(data_files_on_disk(table))
    table.overwrite(rows(500, 3))  # main drops the first file: only the tag and the branch still need it
    table = catalog.load_table("ns.t")
    assert set(first_file) <= before and len(audit_file) == 1

    name = TableName.parse("ns.t", catalog.name)
    with HealthCollector(catalog, settings) as collector:
        summary = {ref.name: ref for ref in collector.collect([name], tier="summary").metrics[name].refs}
        full = {ref.name: ref for ref in collector.collect([name], tier="full").metrics[name].refs}
    refs = table.metadata.refs
    assert set(full) == {"audit", "v1"}  # main is not listed
    v1, audit = full["v1"], full["audit"]
    assert (v1.type, v1.snapshot_id, v1.pinned_snapshots) == ("tag", first, 1)
    assert (v1.pinned_files, v1.pinned_bytes) == (1, sum(first_file.values()))
    assert (audit.type, audit.snapshot_id, audit.pinned_snapshots) == ("branch", refs["audit"].snapshot_id, 1)
    # The branch's head lists its own file and the first one (main no longer has it): both counted.
    assert (audit.pinned_files, audit.pinned_bytes) == (2, sum(first_file.values()) + sum(audit_file.values()))
    assert audit.head_timestamp_ms == table.metadata.snapshot_by_id(refs["audit"].snapshot_id).timestamp_ms
    assert summary["audit"].pinned_snapshots == 1 and summary["audit"].pinned_bytes is None  # no manifests read


@pytest.fixture
def instance(dagster_home):
    with DagsterInstance.get() as instance:
        yield instance


@pytest.mark.spark
def test_expiry_removes_the_stale_branch_that_health_showed_and_keeps_the_rest(tmp_path, instance):
    settings = load_settings(write_settings(tmp_path, POLICIES), environ={})
    catalog = open_catalog(settings.catalog)
    catalog.create_namespace("ns")
    table = catalog.create_table("ns.t", schema=SCHEMA)
    table.append(rows(0, 10))
    first = table.current_snapshot().snapshot_id
    table.manage_snapshots().create_tag(first, "release-1").create_branch(first, "scratch-1").commit()
    before = set(data_files_on_disk(table))
    table.append(rows(100, 7), branch="scratch-1")
    scratch_file = new_files(table, before)
    time.sleep(2.2)  # scratch-1's head is now older than its rule's 2 s
    table.append(rows(10, 10))
    table.manage_snapshots().create_branch(table.current_snapshot().snapshot_id, "audit-2026").commit()
    before = set(data_files_on_disk(table))
    table.append(rows(200, 3), branch="audit-2026")
    audit_file = new_files(table, before)
    table.append(rows(20, 5))
    table = catalog.load_table("ns.t")
    main_before = table.current_snapshot().snapshot_id
    rows_before = table.scan().to_arrow().sort_by("id")
    name = TableName.parse("ns.t", "demo")

    # Health, before: the stale branch with its reason; the young branch and the tag are listed, not stale.
    now = datetime.now(timezone.utc)
    record = health_report(settings, Coordination(settings.coordination_url), name, now)
    (issue,) = [i for i in record["issues"] if i["type"] == "STALE_REF"]
    assert re.fullmatch(rf"branch 'scratch-1' is \d+s old \(policy max 2s\) and alone keeps 1 snapshot, "
                        rf"{re.escape(format_bytes(sum(scratch_file.values())))}", issue["message"]), issue["message"]
    assert issue["severity"] == "warning" and issue["ref"] == "scratch-1"
    listed = {ref["name"]: ref for ref in record["refs"]}
    assert set(listed) == {"scratch-1", "audit-2026", "release-1"}
    assert listed["audit-2026"]["stale"] is False and listed["audit-2026"]["max_age_ms"] == 30 * DAY_MS
    assert listed["audit-2026"]["pinned_bytes"] == sum(audit_file.values())
    assert listed["release-1"]["stale"] is False and listed["release-1"]["pinned_snapshots"] == 0
    assert "scratch-1" in format_health_text(record) and "STALE" in format_health_text(record)
    # ... in Dagit's health observation ...
    with HealthCollector(catalog, settings) as collector:
        snapshot = collector.collect([name], tier="full")
    assert report_health_events(instance, snapshot, load_policy_set(settings), now) == 1
    observed = instance.fetch_observations(asset_key_for(name), limit=1).records[0].asset_observation.metadata
    assert observed["stale_refs"].value == 1 and observed["ref_pinned_snapshots"].value == 2
    assert {ref["name"] for ref in observed["refs"].value if ref["stale"]} == {"scratch-1"}
    # ... and in explain, under the expiry
    refs_plan = explain_table(settings, Coordination(settings.coordination_url), "demo.ns.t", now,
                              instance)["operationStatuses"]["EXPIRE_SNAPSHOTS"]["refs"]
    assert refs_plan["rules"][0] == {"pattern": "scratch-*", "maxAge": "PT2S", "type": "branch"}
    assert [ref["name"] for ref in refs_plan["refs"] if ref["stale"]] == ["scratch-1"]

    metadata = expire(settings, instance, "t-refs")
    table = load_table(open_catalog(settings.catalog), name)
    refs = table.metadata.refs
    assert set(refs) == {"main", "audit-2026", "release-1"}
    assert refs["main"].snapshot_id == main_before and refs["main"].max_ref_age_ms is None
    assert refs["audit-2026"].max_ref_age_ms == 30 * DAY_MS and refs["release-1"].max_ref_age_ms == DAY_MS
    assert table.scan().to_arrow().sort_by("id").equals(rows_before)
    assert not any(os.path.exists(path) for path in scratch_file)  # the branch's own file is deleted
    assert all(os.path.exists(path) for path in audit_file)
    assert table.scan(snapshot_id=refs["audit-2026"].snapshot_id).to_arrow().num_rows == 10 + 10 + 3
    assert metadata["refs_removed"] == [{"name": "scratch-1", "type": "branch"}] and metadata["refs_removed_count"] == 1
    assert [(c["name"], c["max_ref_age_ms"], c["max_ref_age_ms_before"]) for c in metadata["ref_retention_set"]] == [
        ("audit-2026", 30 * DAY_MS, None), ("release-1", DAY_MS, None), ("scratch-1", 2000, None)]
    assert metadata["changed"] is True and metadata["deleted_data_files_count"] >= 1
    assert local_path(table.location()).exists()

    # A tag on main's head, older than its rule's 1 s: removing it deletes no file, and is still a change.
    table.manage_snapshots().create_tag(main_before, "tmp-1").commit()
    time.sleep(1.1)
    removed_only = expire(settings, instance, "t-refs-2")
    assert [c["name"] for c in removed_only["ref_retention_set"]] == ["tmp-1"]  # the others have their age already
    assert removed_only["refs_removed"] == [{"name": "tmp-1", "type": "tag"}]
    assert removed_only["deleted_data_files_count"] == 0 and removed_only["deleted_manifest_lists_count"] == 0
    assert removed_only["changed"] is True
    # Again: every ref has its rule's age and none is old enough, so nothing is set or removed: no change.
    again = expire(settings, instance, "t-refs-3")
    assert again["ref_retention_set"] == [] and again["refs_removed"] == [] and again["changed"] is False
    assert set(load_table(open_catalog(settings.catalog), name).metadata.refs) == {"main", "audit-2026", "release-1"}


AUDIT_RULE = """
- name: refs
  tablePattern: "demo.ns.*"
  expireSnapshots: {retainLast: 1}
  expireSnapshotsSchedule: {interval: PT1H}
  refRetention:
    - {pattern: "audit-*", maxAge: P30D}
"""
NO_RULE = """
- name: refs
  tablePattern: "demo.ns.*"
  expireSnapshots: {retainLast: 1}
  expireSnapshotsSchedule: {interval: PT1H}
"""


@pytest.mark.spark
def test_ages_floe_set_are_taken_back_when_the_rule_goes_and_the_owners_ages_stay(tmp_path, instance):
    """Rule present: the expiry run sets audit-1's age (and records it on the table). The rule removed from
    the policy file: the next expiry run takes it back, audit-1 survives with no age of its own, and the
    ages the owner set (audit-2's before floe, keep-1's with no rule) are what they were."""
    config = write_settings(tmp_path, AUDIT_RULE)
    settings = load_settings(config, environ={})
    catalog = open_catalog(settings.catalog)
    catalog.create_namespace("ns")
    table = catalog.create_table("ns.t", schema=SCHEMA)
    table.append(rows(0, 10))
    head = table.current_snapshot().snapshot_id
    (table.manage_snapshots().create_branch(head, "audit-1").create_tag(head, "audit-2", max_ref_age_ms=90 * DAY_MS)
     .create_tag(head, "keep-1", max_ref_age_ms=7 * DAY_MS).commit())
    name = TableName.parse("ns.t", "demo")

    first = expire(settings, instance, "t-rule")
    refs = load_table(open_catalog(settings.catalog), name).metadata.refs
    assert (refs["audit-1"].max_ref_age_ms, refs["audit-2"].max_ref_age_ms) == (30 * DAY_MS, 30 * DAY_MS)
    assert refs["keep-1"].max_ref_age_ms == 7 * DAY_MS
    assert [(c["name"], c["action"]) for c in first["ref_retention_set"]] == [("audit-1", "set"), ("audit-2", "set")]
    recorded = load_table(open_catalog(settings.catalog), name).properties[SET_AGES_PROPERTY]
    assert recorded == ('{"audit-1":{"before":null,"set":2592000000},'
                        '"audit-2":{"before":7776000000,"set":2592000000}}')

    (tmp_path / "policies" / "policies.yaml").write_text(NO_RULE)  # the rule is removed from the policy
    second = expire(settings, instance, "t-no-rule")
    after = load_table(open_catalog(settings.catalog), name)
    refs = after.metadata.refs
    assert set(refs) == {"main", "audit-1", "audit-2", "keep-1"}  # every ref survives, at its snapshot
    assert all(ref.snapshot_id == head for ref in refs.values())
    assert refs["audit-1"].max_ref_age_ms is None  # floe's age taken back: it had none
    assert refs["audit-2"].max_ref_age_ms == 90 * DAY_MS  # the owner's age from before floe's, put back
    assert refs["keep-1"].max_ref_age_ms == 7 * DAY_MS  # never floe's: untouched
    assert SET_AGES_PROPERTY not in after.properties  # nothing of floe's left
    assert [(c["name"], c["max_ref_age_ms"], c["action"], c["rule"]) for c in second["ref_retention_set"]] == [
        ("audit-1", None, "cleared", None), ("audit-2", 90 * DAY_MS, "cleared", None)]
    assert second["refs_removed"] == []
    # Once more: nothing of floe's left to take back.
    assert expire(settings, instance, "t-no-rule-2")["ref_retention_set"] == []
    assert load_table(open_catalog(settings.catalog), name).metadata.refs["audit-2"].max_ref_age_ms == 90 * DAY_MS


def expire(settings, instance, trigger_id: str) -> dict:
    summary = trigger_table(settings, "demo.ns.t", ["EXPIRE_SNAPSHOTS"], reason="refs test", actor="tester",
                            trigger_id=trigger_id, instance=instance)
    assert summary.succeeded, summary.lines()
    return summary.outcomes[0].metadata


def test_a_branch_a_writer_moves_meanwhile_is_never_moved_back(tmp_path):
    """The retention commit asserts each ref still points where it was read: a writer's commit to the
    branch in between makes it a conflict (retried later), and the branch keeps the writer's snapshot."""
    settings, catalog = lakehouse(tmp_path / "lake")
    catalog.create_namespace("ns")
    table = catalog.create_table("ns.t", schema=SCHEMA)
    table.append(rows(0, 10))
    table.manage_snapshots().create_branch(table.current_snapshot().snapshot_id, "audit-1").commit()
    ours = catalog.load_table("ns.t")  # what the expiry run read
    writer = catalog.load_table("ns.t")
    writer.append(rows(10, 5), branch="audit-1")
    moved = catalog.load_table("ns.t").metadata.refs["audit-1"].snapshot_id
    rules = load_policy_set(load_settings(write_settings(tmp_path / "p", POLICIES), environ={})).get("refs").ref_retention
    with pytest.raises(CommitConflict, match="audit-1 on 'demo.ns.t' lost a commit race"):
        apply_ref_retention(ours, TableName.parse("ns.t", "demo"), rules)
    after = catalog.load_table("ns.t").metadata.refs["audit-1"]
    assert after.snapshot_id == moved and after.max_ref_age_ms is None
    # Read again, the ref is set in place, at the writer's snapshot, keeping its own snapshot retention.
    catalog.load_table("ns.t").manage_snapshots().create_branch(moved, "audit-1", min_snapshots_to_keep=3,
                                                                max_snapshot_age_ms=DAY_MS).commit()
    applied = apply_ref_retention(catalog.load_table("ns.t"), TableName.parse("ns.t", "demo"), rules)
    assert [(c.name, c.snapshot_id, c.max_ref_age_ms) for c in applied.changes] == [("audit-1", moved, 30 * DAY_MS)]
    after = catalog.load_table("ns.t").metadata.refs["audit-1"]
    assert after.snapshot_id == moved and after.max_ref_age_ms == 30 * DAY_MS
    assert (after.min_snapshots_to_keep, after.max_snapshot_age_ms) == (3, DAY_MS)  # its own retention kept


def test_every_ref_set_is_asserted_unchanged_not_only_the_first(tmp_path):
    """Two refs set in one commit (with the record of floe's ages) and a writer that moves the second
    meanwhile: the whole commit fails, the second ref is not moved back and nothing is recorded."""
    settings, catalog = lakehouse(tmp_path / "lake")
    catalog.create_namespace("ns")
    table = catalog.create_table("ns.t", schema=SCHEMA)
    table.append(rows(0, 10))
    head = table.current_snapshot().snapshot_id
    table.manage_snapshots().create_branch(head, "audit-1").create_branch(head, "audit-2").commit()
    ours = catalog.load_table("ns.t")
    catalog.load_table("ns.t").append(rows(10, 5), branch="audit-2")
    moved = catalog.load_table("ns.t").metadata.refs["audit-2"].snapshot_id
    rules = load_policy_set(load_settings(write_settings(tmp_path / "p", POLICIES), environ={})).get("refs").ref_retention
    with pytest.raises(CommitConflict, match="audit-1, audit-2 on 'demo.ns.t' lost a commit race"):
        apply_ref_retention(ours, TableName.parse("ns.t", "demo"), rules)
    after = catalog.load_table("ns.t").metadata.refs
    assert after["audit-2"].snapshot_id == moved and after["audit-1"].max_ref_age_ms is None
    assert SET_AGES_PROPERTY not in catalog.load_table("ns.t").properties


WEEK_MS = 7 * DAY_MS


@pytest.mark.spark
def test_an_owners_ref_age_below_floes_minimum_never_removes_a_young_branch_or_tag(tmp_path, instance):
    """The owner sets ``history.expire.max-ref-age-ms=0``: Iceberg's expiry alone would remove every branch
    and tag but main (their heads are older than 0 ms). floe's run first gives each ref the property would
    decide floe's minimum (7 days) as its own age: the unpublished branch and the tag survive with their
    data; the ref whose owner set its own 1 ms age goes (the owner's decision on that one ref). A value
    Iceberg cannot read fails the expiry, removing nothing; a property at or above the minimum takes
    floe's ages back."""
    settings = load_settings(write_settings(tmp_path, NO_RULE), environ={})
    catalog = open_catalog(settings.catalog)
    catalog.create_namespace("ns")
    table = catalog.create_table("ns.t", schema=SCHEMA)
    table.append(rows(0, 10))
    head = table.current_snapshot().snapshot_id
    (table.manage_snapshots().create_branch(head, "wap").create_tag(head, "v1")
     .create_tag(head, "mine", max_ref_age_ms=1).commit())
    before = set(data_files_on_disk(table))
    table.append(rows(100, 7), branch="wap")  # the branch's unpublished data: main never had it
    wap_file = new_files(table, before)
    with table.transaction() as tx:
        tx.set_properties({"history.expire.max-ref-age-ms": "0"})
    time.sleep(0.05)
    name = TableName.parse("ns.t", "demo")
    now = datetime.now(timezone.utc)
    health_report(settings, Coordination(settings.coordination_url), name, now)
    status = explain_table(settings, Coordination(settings.coordination_url), "demo.ns.t", now,
                           instance)["operationStatuses"]["EXPIRE_SNAPSHOTS"]
    assert (status["expiryArguments"]["maxRefAgeMs"], status["expiryArguments"]["maxRefAgeFrom"]) == (
        WEEK_MS, "floe minimum")
    assert {ref["name"]: ref["stale"] for ref in status["refs"]["refs"]} == {"wap": False, "v1": False, "mine": True}

    first = expire(settings, instance, "t-guard")
    table = load_table(open_catalog(settings.catalog), name)
    refs = table.metadata.refs
    assert set(refs) == {"main", "wap", "v1"} and first["refs_removed"] == [{"name": "mine", "type": "tag"}]
    assert (refs["wap"].max_ref_age_ms, refs["v1"].max_ref_age_ms) == (WEEK_MS, WEEK_MS)
    assert [(c["name"], c["max_ref_age_ms"], c["rule"]) for c in first["ref_retention_set"]] == [
        ("v1", WEEK_MS, GUARD_RULE), ("wap", WEEK_MS, GUARD_RULE)]
    assert all(os.path.exists(path) for path in wap_file)
    assert table.scan(snapshot_id=refs["wap"].snapshot_id).to_arrow().num_rows == 17

    with table.transaction() as tx:
        tx.set_properties({"history.expire.max-ref-age-ms": "soon"})
    failed = trigger_table(settings, "demo.ns.t", ["EXPIRE_SNAPSHOTS"], reason="refs test", actor="tester",
                           trigger_id="t-garbage", instance=instance)
    assert not failed.succeeded and "soon" in " ".join(failed.lines())
    assert set(load_table(open_catalog(settings.catalog), name).metadata.refs) == {"main", "wap", "v1"}

    table = load_table(open_catalog(settings.catalog), name)
    with table.transaction() as tx:
        tx.set_properties({"history.expire.max-ref-age-ms": str(30 * DAY_MS)})
    last = expire(settings, instance, "t-honoured")
    after = load_table(open_catalog(settings.catalog), name)
    assert set(after.metadata.refs) == {"main", "wap", "v1"} and last["refs_removed"] == []
    assert (after.metadata.refs["wap"].max_ref_age_ms, after.metadata.refs["v1"].max_ref_age_ms) == (None, None)
    assert SET_AGES_PROPERTY not in after.properties
