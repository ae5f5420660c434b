"""``floe-dagster import --from polaris|s3tables|amoro`` (issue 36, deliver 2): each source's documented
shapes and their edge values go through the command into policy files that load, and each table's
effective policy (the nearest level's, as the source's inheritance says) is what the source sets, never
more aggressive; a source with no retention gives none; bad input names the file and the field and
writes nothing. And the table's own ``history.expire.*`` properties, bounded (core/facts/expiry_defaults.py)."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from pathlib import Path

import pytest

from floe_dagster.cli import main
from floe_dagster.core.basics.durations import parse_iso_duration
from floe_dagster.core.facts.expiry_defaults import MAX_SNAPSHOT_AGE_MS, MIN_SNAPSHOTS_TO_KEEP, expiry_arguments
from floe_dagster.core.foreign.foreign_policies import SourceError
from floe_dagster.core.operations import Operation
from floe_dagster.core.policies.policy import load_policies
from floe_dagster.core.basics.tables import TableName
from floe_dagster.foreign_import import import_foreign

EXPIRE, ORPHANS, REWRITE, MANIFESTS = (Operation.EXPIRE_SNAPSHOTS, Operation.ORPHAN_CLEANUP,
                                       Operation.REWRITE_DATA_FILES, Operation.REWRITE_MANIFESTS)


def polaris(name, kind, content, *targets, **extra):
    return {"name": name, "policy-type": kind, "inheritable": True, "version": 0,
            "content": json.dumps(content) if isinstance(content, dict) else content, "targets": list(targets), **extra}


def imported(tmp_path: Path, source: str, document):
    """The source imported into a fresh folder; (the report, the loaded policy set, the folder)."""
    to = tmp_path / f"out-{source}"
    report, _ = import_foreign(source, document, f"{source}.json", "demo", to)
    assert not report.invalid, report.invalid
    return report, load_policies([to]), to


def effective(policies, table: str):
    return policies.effective_policy(TableName.parse(table, "demo"))


def config(policies, table: str, op: Operation) -> dict | None:
    found = effective(policies, table)
    configured = found.config(op) if found is not None else None
    return configured.to_json() if configured is not None else None


# -- Polaris --------------------------------------------------------------------------------------------------

POLARIS = {"policies": [
    # The documented examples: Polaris' docs (config map) and its JSON schema (top-level size).
    polaris("expiry", "system.snapshot-expiry", {"version": "2025-02-03", "enable": True, "config": {
        "min_snapshot_to_keep": 1, "max_snapshot_age_days": 2, "max_ref_age_days": 3, "key1": "value1"}},
        {"type": "catalog"}),
    polaris("compaction", "system.data-compaction", {"version": "2025-02-03", "enable": True, "config": {
        "target_file_size_bytes": 134217728, "compaction_strategy": "bin-pack",
        "max-concurrent-file-group-rewrites": 5, "my-key": "my-value"}}, {"type": "namespace", "path": ["sales"]}),
    polaris("sized", "system.data-compaction", {"enable": True, "target_file_size_bytes": 1048576},
            {"type": "namespace", "path": ["sales", "eu"]}),
    polaris("orphans", "system.orphan-file-removal", {"version": "2025-02-03", "enable": True,
                                                       "max_orphan_file_age_in_days": 30,
                                                       "config": {"prefix_mismatch_mode": "ignore"}},
            {"target": {"type": "namespace", "path": ["sales", "eu"]}}),
    polaris("manifests", "system.metadata-compaction", {"enable": True, "config": {"spec_id": 1}},
            {"type": "table-like", "path": ["ops", "audit"]}),
    # Edge values: disabled at a table (shadows the catalog's), zero, missing config, a custom type.
    polaris("keep-orders", "system.snapshot-expiry", {"enable": False}, {"type": "table-like", "path": ["sales", "orders"]}),
    polaris("zero-age", "system.snapshot-expiry", {"enable": True, "config": {"max_snapshot_age_days": "0"}},
            {"type": "table-like", "path": ["sales", "eu", "zero"]}),
    polaris("bare-expiry", "system.snapshot-expiry", {"enable": True}, {"type": "namespace", "path": ["ops"]}),
    polaris("masking", "custom.acme.data_masking", "{}", {"type": "namespace", "path": ["sales"]}),
]}


def test_polaris_round_trip_nearest_level_wins(tmp_path):
    report, policies, to = imported(tmp_path, "polaris", POLARIS)
    # The catalog's expiry everywhere its tables have no nearer one; its refRetention beside it.
    assert config(policies, "demo.misc.t", EXPIRE) == {"retainLast": 1, "maxSnapshotAge": "P2D"}
    assert [r.to_json() for r in effective(policies, "demo.misc.t").ref_retention] == [
        {"pattern": "*", "maxAge": "P3D", "type": "any"}]
    assert config(policies, "demo.misc.t", REWRITE) is None
    # sales: the namespace's compaction (every documented option) and the catalog's expiry, inherited.
    assert config(policies, "demo.sales.items", REWRITE) == {
        "strategy": "BINPACK", "targetFileSizeBytes": 134217728, "maxConcurrentFileGroupRewrites": 5}
    assert config(policies, "demo.sales.items", EXPIRE) == {"retainLast": 1, "maxSnapshotAge": "P2D"}
    # sales.eu (a nested namespace): its own size, and orphans; deeper namespaces inherit it.
    for table in ("demo.sales.eu.t", "demo.sales.eu.deep.t"):
        assert config(policies, table, REWRITE) == {"targetFileSizeBytes": 1048576}
        assert config(policies, table, ORPHANS) == {"retentionPeriodInDays": 30, "prefixMismatchMode": "IGNORE"}
    # A table that turns the expiry off has none, though its catalog has one.
    assert config(policies, "demo.sales.orders", EXPIRE) is None
    assert config(policies, "demo.sales.orders", REWRITE) is not None
    # Zero days: written disabled (commented out with the floor), so the table does not expire.
    assert config(policies, "demo.sales.eu.zero", EXPIRE) is None
    text = (to / "polaris.demo.sales.eu.zero.yaml").read_text()
    assert "# expireSnapshots:\n#   maxSnapshotAge: PT1H" in text and "max_snapshot_age_days is 0" in text
    # No config: the table's history.expire.* then floe's defaults decide; the metadata compaction's spec id.
    assert config(policies, "demo.ops.x", EXPIRE) == {}
    assert config(policies, "demo.ops.audit", MANIFESTS) == {"specId": 1}
    lost = "\n".join(report.lost)
    assert "config.my-key" in lost and "config.key1" in lost and "custom.acme.data_masking" in lost
    assert "turned off by the source (enable: false)" in lost


# -- S3 Tables ------------------------------------------------------------------------------------------------

def s3(kind, status="enabled", **values):
    return {kind: {"status": status, "settings": {kind: values}}}


S3TABLES = {
    "bucket": {"tableBucketARN": "arn:aws:s3tables:us-east-1:111122223333:bucket/lake",
               "configuration": s3("icebergUnreferencedFileRemoval", unreferencedDays=4, nonCurrentDays=10)},
    "tables": [
        {"namespace": "sales", "name": "orders", "configuration": {
            **s3("icebergCompaction", targetFileSizeMB=256, strategy="binpack"),
            **s3("icebergSnapshotManagement", minSnapshotsToKeep=3, maxSnapshotAgeHours=48)}},
        {"namespace": "sales", "name": "defaults", "configuration": {
            "icebergCompaction": {"status": "enabled"}, "icebergSnapshotManagement": {"status": "enabled"}}},
        {"namespace": "sales", "name": "off", "configuration": {
            **s3("icebergCompaction", "disabled"), **s3("icebergSnapshotManagement", "disabled")}},
        {"namespace": "ops", "name": "zorder", "configuration": s3("icebergCompaction", strategy="z-order")},
    ]}


def test_s3tables_round_trip(tmp_path):
    report, policies, to = imported(tmp_path, "s3tables", S3TABLES)
    orphans = {"retentionPeriodInDays": 4, "quarantine": {"enabled": True, "gracePeriod": "P10D"}}
    assert config(policies, "demo.any.table", ORPHANS) == orphans  # the bucket's: every table
    assert config(policies, "demo.any.table", EXPIRE) is None  # the file states no expiry for it
    assert config(policies, "demo.sales.orders", REWRITE) == {"strategy": "BINPACK", "targetFileSizeBytes": 256 * 2**20}
    assert config(policies, "demo.sales.orders", EXPIRE) == {"retainLast": 3, "maxSnapshotAge": "P2D"}
    assert config(policies, "demo.sales.orders", ORPHANS) == orphans  # inherited from the bucket
    # Enabled without settings: S3's documented defaults (512 MB, auto; 1 snapshot, 120 hours).
    assert config(policies, "demo.sales.defaults", REWRITE) == {"targetFileSizeBytes": 512 * 2**20}
    assert config(policies, "demo.sales.defaults", EXPIRE) == {"retainLast": 1, "maxSnapshotAge": "P5D"}
    assert config(policies, "demo.sales.off", REWRITE) is None and config(policies, "demo.sales.off", EXPIRE) is None
    assert config(policies, "demo.ops.zorder", REWRITE) is None  # z-order without columns: written disabled
    assert "zOrderColumns" in (to / "s3tables.demo.ops.zorder.yaml").read_text()
    assert any("strategy auto" in line for line in report.lost)


# -- Amoro ----------------------------------------------------------------------------------------------------

AMORO = {
    "defaults": {"table.self-optimizing.target-size": "268435456", "table.clean-orphan-file.enabled": "true"},
    "tables": {
        "sales.orders": {"table-expire.enabled": "true", "snapshot.keep.duration": "2d", "snapshot.keep.min-count": "4",
                         "self-optimizing.minor.trigger.interval": "7200000", "self-optimizing.quota": "0.2"},
        "sales.legacy": {"table-expire.enable": "true", "snapshot.base.keep.minutes": "1440",
                         "clean-orphan-file.enable": "false"},
        "sales.nogc": {"table-expire.enabled": "true", "gc.enabled": "false"},
        "sales.plain": {"write.format.default": "parquet"},
        "sales.optimizing-off": {"self-optimizing.enabled": "false", "data-expire.enabled": "true"},
    }}


def test_amoro_round_trip(tmp_path):
    report, policies, to = imported(tmp_path, "amoro", AMORO)
    # The catalog's defaults: orphan cleanup (its default 2880 minutes) and the target size.
    assert config(policies, "demo.sales.plain", ORPHANS) == {"retentionPeriodInDays": 2}
    assert config(policies, "demo.sales.plain", REWRITE) == {"targetFileSizeBytes": 268435456}
    assert config(policies, "demo.sales.plain", EXPIRE) is None  # Amoro's default expiry is never assumed
    assert config(policies, "demo.sales.orders", EXPIRE) == {"retainLast": 4, "maxSnapshotAge": "P2D"}
    assert effective(policies, "demo.sales.orders").schedule(REWRITE).to_json()["interval"] == "PT2H"
    assert config(policies, "demo.sales.legacy", EXPIRE) == {"retainLast": 1, "maxSnapshotAge": "P1D"}
    assert config(policies, "demo.sales.legacy", ORPHANS) is None  # the table's own false wins
    assert config(policies, "demo.sales.nogc", EXPIRE) is None and config(policies, "demo.sales.nogc", ORPHANS) is None
    assert config(policies, "demo.sales.optimizing-off", REWRITE) is None
    lost = "\n".join(report.lost)
    assert "self-optimizing.quota" in lost and "data-expire.enabled=true deletes rows" in lost


# -- never more aggressive; no retention from none ------------------------------------------------------------

AGGRESSIVE = {
    "polaris": {"policies": [
        polaris("wipe", "system.snapshot-expiry", {"enable": True, "config": {"min_snapshot_to_keep": 0,
                                                                             "max_snapshot_age_days": 0}},
                {"type": "catalog"}),
        polaris("purge", "system.orphan-file-removal", {"enable": True, "max_orphan_file_age_in_days": 0},
                {"type": "catalog"})]},
    "s3tables": {"bucket": {"configuration": s3("icebergUnreferencedFileRemoval", unreferencedDays=0,
                                                 nonCurrentDays=0)},
                 "tables": [{"namespace": "sales", "name": "orders",
                             "configuration": s3("icebergSnapshotManagement", minSnapshotsToKeep=1,
                                                 maxSnapshotAgeHours=0)}]},
    "amoro": {"tables": {"sales.orders": {"table-expire.enabled": "true", "snapshot.keep.duration": "1min",
                                          "snapshot.keep.min-count": "1", "clean-orphan-file.enabled": "true",
                                          "clean-orphan-file.min-existing-time-minutes": "0"}}},
}


@pytest.mark.parametrize("source", sorted(AGGRESSIVE))
def test_an_aggressive_source_comes_out_no_more_aggressive(tmp_path, source):
    report, policies, to = imported(tmp_path, source, AGGRESSIVE[source])
    for table in ("demo.sales.orders", "demo.other.t"):
        expiry, orphans = config(policies, table, EXPIRE), config(policies, table, ORPHANS)
        # Nothing that deletes is in effect: each is written disabled, for a person to decide.
        assert expiry is None and orphans is None, (table, expiry, orphans)
    texts = "\n".join(path.read_text() for path in to.iterdir())
    assert "Decide, then uncomment:" in " ".join(texts.replace("#", " ").split())
    values = re.findall(r"^\s*# *(max-snapshot-age-days|maxSnapshotAge|retention-period-days|retentionPeriodInDays)"
                        r": *(\S+)$", texts, re.MULTILINE)
    assert values, texts  # what a person would uncomment is at the floors, never below
    for key, value in values:
        if key == "max-snapshot-age-days":
            assert int(value) >= 1
        elif key == "maxSnapshotAge":
            assert parse_iso_duration(value) >= timedelta(hours=1)
        else:
            assert float(value) >= 1


NO_RETENTION = {
    "polaris": {"policies": [polaris("c", "system.data-compaction", {"enable": True}, {"type": "catalog"})]},
    "s3tables": {"tables": [{"namespace": "sales", "name": "orders", "configuration": s3("icebergCompaction")}]},
    "amoro": {"tables": {"sales.orders": {"self-optimizing.enabled": "true"}}},
}


@pytest.mark.parametrize("source", sorted(NO_RETENTION))
def test_a_source_with_no_retention_gives_none(tmp_path, source):
    _, policies, _ = imported(tmp_path, source, NO_RETENTION[source])
    assert config(policies, "demo.sales.orders", REWRITE) is not None
    assert all(p.config(EXPIRE) is None and p.config(ORPHANS) is None and not p.ref_retention for p in policies)


# -- bad input: the file and the field, nothing written --------------------------------------------------------

BAD = [
    ("polaris", "{\"policies\": [", "line 1 column 15: not valid JSON"),
    ("polaris", json.dumps({"policies": [polaris("x", "system.snapshot-retention", {"enable": True},
                                                 {"type": "catalog"})]}),
     "policies[0].policy-type: policy 'x': unknown Polaris policy type 'system.snapshot-retention'"),
    ("polaris", json.dumps({"policies": [polaris("../etc/x", "system.data-compaction", {"enable": True},
                                                 {"type": "catalog"})]}),
     "policies[0].name: '../etc/x' is not a Polaris policy name"),
    ("polaris", json.dumps({"policies": [polaris("p", "system.data-compaction", {"enable": True},
                                                 {"type": "table-like", "path": ["sa/les", "t"]})]}),
     "policies[0].targets[0].path[0]: 'sa/les' is not a name floe-dagster can import"),
    ("polaris", json.dumps({"policies": [polaris("p", "system.data-compaction", "{not json", {"type": "catalog"})]}),
     "policies[0].content: not JSON"),
    ("polaris", json.dumps({"policies": [polaris("p", "system.snapshot-expiry", {"enable": "yes"},
                                                 {"type": "catalog"})]}),
     "policies[0].content.enable: is required: true or false"),
    ("s3tables", json.dumps({"tables": [{"namespace": "sales", "name": "t", "configuration": s3("icebergFoo")}]}),
     "tables[0].configuration.icebergFoo: unknown maintenance type 'icebergFoo'"),
    ("s3tables", json.dumps({"tables": [{"namespace": "sales", "name": "t", "configuration": s3(
        "icebergSnapshotManagement", maxSnapshotAgeHours="soon")}]}),
     "tables[0].configuration.icebergSnapshotManagement.settings.icebergSnapshotManagement.maxSnapshotAgeHours: "
     "expected a whole number"),
    ("amoro", json.dumps({"tables": {"sales\\x.orders": {"table-expire.enabled": "true"}}}),
     "tables.sales\\x.orders (name part 1): 'sales\\\\x' is not a name floe-dagster can import"),
    ("amoro", json.dumps({"tables": {"sales.orders": {"table-expire.enabled": "true",
                                                      "snapshot.keep.duration": "a while"}}}),
     "tables.sales.orders.snapshot.keep.duration: 'a while' is not a duration Amoro reads"),
]


@pytest.mark.parametrize("source,text,expected", BAD)
def test_bad_input_names_the_file_and_field_and_writes_nothing(tmp_path, capsys, source, text, expected):
    path = tmp_path / f"{source}.json"
    path.write_text(text)
    to = tmp_path / "out"
    assert main(["import", "--from", source, str(path), "--to", str(to), "--catalog", "demo"]) == 1
    err = capsys.readouterr().err
    assert f"floe-dagster import: {path}: {expected}" in err, err
    assert "nothing was written" in err and not to.exists()


def test_every_problem_of_a_file_is_listed(tmp_path):
    document = {"policies": [polaris("a/b", "system.data-compaction", {"enable": True}, {"type": "catalog"}),
                             polaris("ok", "system.nope", {"enable": True}, {"type": "catalog"})]}
    with pytest.raises(SourceError) as raised:
        import_foreign("polaris", document, "f.json", "demo", tmp_path / "out")
    assert [e.split(":")[1].strip() for e in raised.value.errors] == ["policies[0].name", "policies[1].policy-type"]


# -- the table's own history.expire.* properties, bounded -----------------------------------------------------

@pytest.mark.parametrize("properties,keep,age,adjusted", [
    ({}, 5, timedelta(days=7), 0),  # floe's defaults
    ({MIN_SNAPSHOTS_TO_KEEP: "2", MAX_SNAPSHOT_AGE_MS: "172800000"}, 2, timedelta(days=2), 0),  # honoured
    ({MIN_SNAPSHOTS_TO_KEEP: "0", MAX_SNAPSHOT_AGE_MS: "0"}, 5, timedelta(hours=1), 2),  # never below the floors
    ({MIN_SNAPSHOTS_TO_KEEP: "many", MAX_SNAPSHOT_AGE_MS: "1e3"}, 5, timedelta(days=7), 2),  # unreadable: ignored
    ({MAX_SNAPSHOT_AGE_MS: "999999999999999999"}, 5, timedelta(days=36_500), 0),  # cut to the longest duration
])
def test_history_expire_properties_are_bounded(properties, keep, age, adjusted):
    chosen = expiry_arguments(None, None, properties)
    assert (chosen.retain_last, chosen.max_age, len(chosen.adjusted)) == (keep, age, adjusted), chosen


def test_the_policys_own_values_win_over_the_properties():
    chosen = expiry_arguments(1, "PT0S", {MIN_SNAPSHOTS_TO_KEEP: "9", MAX_SNAPSHOT_AGE_MS: "0"})
    assert (chosen.retain_last, chosen.max_age, chosen.retain_last_from, chosen.max_age_from) == (
        1, timedelta(0), "policy", "policy")


def test_the_spark_steps_expire_call_takes_the_bounded_properties():
    """What the run hands Iceberg: an owner's max-snapshot-age-ms=0 and min-snapshots-to-keep=0 give an hour
    and floe's 5 snapshots (unbounded, Iceberg would expire every snapshot but the newest)."""
    from datetime import datetime, timezone

    from floe_dagster.core.operation_kinds.expire_snapshots import ExpireSnapshotsConfig
    from floe_dagster.spark.operation_steps.expire_snapshots import STEP
    from floe_dagster.spark.procedures import CallArguments

    now = datetime(2026, 1, 2, tzinfo=timezone.utc)
    call = CallArguments(TableName.parse("sales.orders", "demo"), None)
    STEP.arguments(call, ExpireSnapshotsConfig(), now, {MAX_SNAPSHOT_AGE_MS: "0", MIN_SNAPSHOTS_TO_KEEP: "0"})
    assert call.decided["older_than"] == (now - timedelta(hours=1)).isoformat()
    assert dict(call.sql)["retain_last"] == "5"


def test_a_level_with_nothing_in_effect_writes_no_policy_but_says_why(tmp_path):
    document = {"policies": [polaris("masking", "custom.acme.data_masking", "{}", {"type": "namespace", "path": ["hr"]}),
                             polaris("off", "system.snapshot-expiry", {"enable": False}, {"type": "catalog"})]}
    report, count = import_foreign("polaris", document, "f.json", "demo", tmp_path / "out")
    assert count == 0 and not report.written and not (tmp_path / "out").exists()
    assert any("namespace hr: policy 'masking' (custom.acme.data_masking): not a maintenance policy" in line
               for line in report.lost), report.lost
