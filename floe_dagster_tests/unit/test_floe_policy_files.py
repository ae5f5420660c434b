"""Floe's own policy files load unchanged (issue 23, part 2).

Checked in nssalian/floe @ 5f4ce1d (read, never copied: each fixture below is written here with the
same keys and shapes as the file it stands for, and values of its own):

- ``examples/policies/comprehensive-policy.json`` and ``minimal-policy.json``;
- ``floe-core/src/test/java/com/floe/core/policy/PolicyLoaderTest.java``: the YAML of each test (basic,
  rewrite-data-files, all rewrite-data-files options, expire-snapshots, orphan-cleanup,
  rewrite-manifests, multiple, from file, from directory (2 files), into store, full policy, empty and
  null ``policies``);
- the JSON examples of ``docs/policies.md`` (basic compaction, snapshot expiration with triggers,
  multi-operation with windows, critical pipeline);
- the request bodies of ``floe-server``'s e2e tests (``PolicyCrudE2ETest``, ``MaintenanceE2ETest``,
  ``PostgresE2ETest``, ``SignalBasedTriggeringE2ETest``) and of ``scripts/setup-demo-policies.sh`` and
  ``setup-advanced-policy.sh``. They all loaded before this change but three, reproduced here
  (``expireSnapshotId``; ``rewriteManifests`` with ``stagingLocation``, ``sortBy`` and ``rewriteIf``),
  and one body Floe's own test expects to be refused (no ``name``), refused here too.

Before: ``rewrite-manifests.staging-location`` and ``sort-by`` (PolicyLoaderTest's rewrite-manifests and
full policy), ``sortOrder`` with BINPACK, ``expireSnapshotId`` and ``rewriteIf`` were errors, and one
refused file stopped its whole policy set.

Since issue 26 (the safety envelope), Floe's own values for ``orphanCleanup.location`` are refused: the
comprehensive example and PolicyLoaderTest give an absolute location (``s3://lake/web/clicks``,
``s3://lake/web``) with a pattern matching several tables, which makes each table's orphan cleanup delete
the other tables' files under it. The fixtures below give a relative location (``data``) in the same key;
Floe's values are checked to be refused, naming the field, in
``test_floes_absolute_orphan_locations_for_a_pattern_are_refused``.
"""

from __future__ import annotations

import textwrap
from datetime import datetime, timezone
from pathlib import Path

import pytest

from floe_dagster.cli import main
from floe_dagster.core.operations import IGNORED
from floe_dagster.core.operations import Operation
from floe_dagster.core.policies.policy import validate_policy_paths
from floe_dagster.core.basics.tables import TableName
from floe_dagster.spark.operation_steps import build_procedure_call
from floe_dagster.spark.operation_steps.rewrite_manifests import supports_manifest_sort_by

NOW = datetime(2026, 3, 1, tzinfo=timezone.utc)
TABLE = TableName("lake", ("web",), "clicks")
MANIFESTS = Operation.REWRITE_MANIFESTS

# file name -> (what it stands for, its text)
FLOE_FILES = {
    "comprehensive-policy.json": ("examples/policies/comprehensive-policy.json", """
        {"name": "everything", "description": "each field once", "tablePattern": "lake.web.*", "priority": 7,
         "tags": {"env": "staging", "team": "web"},
         "rewriteDataFiles": {"strategy": "BINPACK", "sortOrder": ["day", "country"], "zOrderColumns": ["a", "b"],
           "targetFileSizeBytes": 67108864, "maxFileGroupSizeBytes": 1073741824, "maxConcurrentFileGroupRewrites": 2,
           "partialProgressEnabled": true, "partialProgressMaxCommits": 4, "partialProgressMaxFailedCommits": 1,
           "filter": "day >= '2025-06-01'", "rewriteJobOrder": "FILES_ASC", "useStartingSequenceNumber": false,
           "removeDanglingDeletes": true, "outputSpecId": 0},
         "rewriteDataFilesSchedule": {"cronExpression": "0 1 * * *", "interval": 2, "windowStart": "01:00",
           "windowEnd": "04:00", "allowedDays": "TUESDAY,THURSDAY", "timeout": 3, "priority": 4, "enabled": true},
         "expireSnapshots": {"retainLast": 8, "maxSnapshotAge": "P3D", "cleanExpiredMetadata": false,
           "expireSnapshotId": 4242},
         "expireSnapshotsSchedule": {"cronExpression": "0 4 * * *", "enabled": true},
         "orphanCleanup": {"retentionPeriodInDays": 4, "location": "data", "prefixMismatchMode": "ERROR",
           "equalSchemes": {"s3n": "s3"}, "equalAuthorities": {"lake.s3.example.com": "lake"}},
         "orphanCleanupSchedule": {"cronExpression": "0 5 * * *", "enabled": true},
         "rewriteManifests": {"specId": 0, "stagingLocation": "s3://lake/tmp", "sortBy": ["day"],
           "rewriteIf": {"path": "/m/one.avro", "length": 2048, "specId": 0, "content": "DATA", "sequenceNumber": 3,
             "minSequenceNumber": 1, "snapshotId": 77, "addedFilesCount": 2, "existingFilesCount": 9,
             "deletedFilesCount": 0, "addedRowsCount": 20, "existingRowsCount": 90, "deletedRowsCount": 0,
             "firstRowId": 5, "keyMetadata": "c0ffee",
             "partitionSummaries": [{"containsNull": true, "containsNan": false, "lowerBound": "01", "upperBound": "0f"}]}},
         "rewriteManifestsSchedule": {"cronExpression": "0 6 * * *", "enabled": true}}
    """),
    "minimal-policy.json": ("examples/policies/minimal-policy.json", """
        {"name": "small", "description": "compaction only", "enabled": true, "tablePattern": "lake.web.*",
         "priority": 3, "rewriteDataFiles": {"strategy": "BINPACK", "targetFileSizeBytes": 33554432}}
    """),
    "loader-basic.yaml": ("PolicyLoaderTest.loadBasicPolicy", """
        policies:
          - name: plain
            description: only the top level
            pattern: "lake.web.*"
            priority: 2
            enabled: true
    """),
    "loader-rewrite-data-files.yaml": ("PolicyLoaderTest.loadPolicyWithRewriteDataFiles", """
        policies:
          - name: compact
            pattern: "lake.*.*"
            rewrite-data-files: {strategy: binpack, target-file-size-bytes: 1048576,
                                 max-concurrent-file-group-rewrites: 2, partial-progress-enabled: true,
                                 partial-progress-max-commits: 3, rewrite-job-order: files-desc}
            rewrite-data-files-schedule: {interval-hours: 3, timeout-hours: 1, enabled: true}
    """),
    "loader-all-rewrite-options.yaml": ("PolicyLoaderTest.loadPolicyWithAllRewriteDataFilesOptions", """
        policies:
          - name: compact-all
            pattern: "lake.*.*"
            rewrite-data-files:
              strategy: sort
              sort-order: [day, country]
              z-order-columns: [user_id]
              target-file-size-bytes: 1048576
              max-file-group-size-bytes: 8388608
              max-concurrent-file-group-rewrites: 2
              partial-progress-enabled: true
              partial-progress-max-commits: 6
              partial-progress-max-failed-commits: 2
              filter: "day > '2025-06-01'"
              rewrite-job-order: bytes-desc
              use-starting-sequence-number: false
              remove-dangling-deletes: false
              output-spec-id: 0
    """),
    "loader-expire.yaml": ("PolicyLoaderTest.loadPolicyWithExpireSnapshots", """
        policies:
          - name: expire
            pattern: "*.*.*"
            expire-snapshots: {max-snapshot-age-days: 3, retain-last: 4}
            expire-snapshots-schedule: {interval-hours: 12, window-start: "03:00", window-end: "05:00"}
    """),
    "loader-orphans.yaml": ("PolicyLoaderTest.loadPolicyWithOrphanCleanup", """
        policies:
          - name: orphans
            pattern: "lake.*.*"
            orphan-cleanup: {retention-period-days: 4, location: "data", prefix-mismatch-mode: IGNORE}
            orphan-cleanup-schedule: {interval-days: 2}
    """),
    "loader-rewrite-manifests.yaml": ("PolicyLoaderTest.loadPolicyWithRewriteManifests", """
        policies:
          - name: manifests
            pattern: "lake.*.*"
            rewrite-manifests:
              spec-id: 0
              staging-location: /tmp/manifests
              sort-by: [day, country]
            rewrite-manifests-schedule: {interval-hours: 6}
    """),
    "loader-multiple.yaml": ("PolicyLoaderTest.loadMultiplePolicies, loadFromFile, loadIntoStore", """
        policies:
          - {name: everywhere, pattern: "*.*.*", priority: 0}
          - {name: lake-wide, pattern: "lake.*.*", priority: 5}
          - {name: web-only, pattern: "lake.web.*", priority: 9}
    """),
    "loader-directory-1.yaml": ("PolicyLoaderTest.loadFromDirectory (first file)", """
        policies:
          - {name: from-first, pattern: "lake.*.*"}
    """),
    "loader-directory-2.yml": ("PolicyLoaderTest.loadFromDirectory (second file, .yml)", """
        policies:
          - {name: from-second, pattern: "dev.*.*"}
    """),
    "loader-full.yaml": ("PolicyLoaderTest.loadFullPolicy", """
        policies:
          - name: full
            description: every section
            pattern: "lake.web.*"
            priority: 50
            enabled: true
            tags: {team: web, tier: gold}
            rewrite-data-files: {strategy: binpack, target-file-size-bytes: 1048576, max-file-group-size-bytes: 8388608,
                                 max-concurrent-file-group-rewrites: 2, partial-progress-enabled: true,
                                 partial-progress-max-commits: 5, partial-progress-max-failed-commits: 1,
                                 rewrite-job-order: files-asc, remove-dangling-deletes: false}
            rewrite-data-files-schedule: {interval-hours: 3, window-start: "01:00", window-end: "04:00",
                                          timeout-hours: 2, priority: 3, enabled: true}
            expire-snapshots: {max-snapshot-age-days: 5, retain-last: 3, clean-expired-metadata: false}
            expire-snapshots-schedule: {interval-hours: 8, enabled: true}
            orphan-cleanup: {retention-period-days: 4}
            orphan-cleanup-schedule: {interval-days: 3, enabled: true}
            rewrite-manifests: {spec-id: 0, staging-location: /tmp/stage}
            rewrite-manifests-schedule: {interval-hours: 6, enabled: true}
    """),
    "loader-empty.yaml": ("PolicyLoaderTest.emptyPoliciesFile", "policies: []\n"),
    "loader-null.yaml": ("PolicyLoaderTest.nullPoliciesFile", "policies:\n"),
    "docs-examples.json": ("docs/policies.md's four examples", """
        [{"name": "web-compaction", "tablePattern": "lake.web.*", "priority": 10,
          "rewriteDataFiles": {"strategy": "BINPACK", "targetFileSizeBytes": 67108864},
          "rewriteDataFilesSchedule": {"interval": "PT3H", "enabled": true}},
         {"name": "web-expire", "tablePattern": "lake.*.*", "priority": 5,
          "expireSnapshots": {"retainLast": 4, "maxSnapshotAge": "P2D"},
          "expireSnapshotsSchedule": {"cronExpression": "0 3 * * *", "enabled": true},
          "triggerConditions": {"snapshotCountAbove": 20, "minIntervalMinutes": 720}},
         {"name": "web-full", "tablePattern": "lake.web.clicks", "priority": 10,
          "rewriteDataFiles": {"strategy": "BINPACK", "targetFileSizeBytes": 67108864, "maxConcurrentFileGroupRewrites": 3},
          "rewriteDataFilesSchedule": {"interval": "PT4H", "windowStart": "08:00", "windowEnd": "18:00",
            "allowedDays": "MONDAY,WEDNESDAY", "enabled": true},
          "expireSnapshots": {"retainLast": 4, "maxSnapshotAge": "P2D"},
          "expireSnapshotsSchedule": {"cronExpression": "0 3 * * SAT", "enabled": true},
          "orphanCleanup": {"retentionPeriodInDays": 2},
          "orphanCleanupSchedule": {"interval": "P3D", "enabled": true}},
         {"name": "web-critical", "tablePattern": "lake.web.orders", "priority": 20,
          "rewriteDataFiles": {"strategy": "BINPACK"},
          "rewriteDataFilesSchedule": {"interval": "PT2H", "enabled": true},
          "triggerConditions": {"smallFilePercentageAbove": 25, "criticalPipeline": true,
            "criticalPipelineMaxDelayMinutes": 120}}]
    """),
    "e2e-expire-snapshot-id.json": ("PolicyCrudE2ETest: expireSnapshotId", """
        {"name": "expire-by-id", "tablePattern": "lake.web.*", "enabled": true, "priority": 5,
         "expireSnapshots": {"retainLast": 2, "maxSnapshotAge": "P1D", "cleanExpiredMetadata": false,
           "expireSnapshotId": 1234},
         "expireSnapshotsSchedule": {"enabled": true, "cronExpression": "0 0 4 * * ?"}}
    """),
    "e2e-manifest-filter.json": ("PolicyCrudE2ETest: rewriteManifests with a short rewriteIf", """
        {"name": "manifests-filtered", "tablePattern": "lake.web.*", "enabled": true, "priority": 6,
         "rewriteManifests": {"specId": 0, "stagingLocation": "/tmp/stage", "sortBy": ["day", "hour"],
           "rewriteIf": {"content": "DATA", "addedFilesCount": 3, "snapshotId": 55}},
         "rewriteManifestsSchedule": {"enabled": true, "cronExpression": "0 0 7 * * ?"}}
    """),
    "e2e-manifest-filter-all.json": ("PolicyCrudE2ETest: rewriteManifests with every rewriteIf field", """
        {"name": "manifests-every-filter", "tablePattern": "lake.web.*", "enabled": true, "priority": 7,
         "rewriteManifests": {"specId": 1, "stagingLocation": "/tmp/stage", "sortBy": ["day"],
           "rewriteIf": {"path": "/m/two.avro", "length": 512, "specId": 0, "content": "DATA", "sequenceNumber": 9,
             "minSequenceNumber": 2, "snapshotId": 66, "addedFilesCount": 1, "existingFilesCount": 2,
             "deletedFilesCount": 3, "addedRowsCount": 10, "existingRowsCount": 20, "deletedRowsCount": 30,
             "firstRowId": 2, "keyMetadata": "beef",
             "partitionSummaries": [{"containsNull": false, "containsNan": true, "lowerBound": "10", "upperBound": "20"}]}},
         "rewriteManifestsSchedule": {"enabled": true, "cronExpression": "0 0 8 * * ?"}}
    """),
}


def _write_all(folder: Path) -> Path:
    for name, (_, text) in FLOE_FILES.items():
        (folder / name).write_text(textwrap.dedent(text))
    return folder


def test_every_floe_policy_file_loads_unchanged_in_one_set(tmp_path, capsys):
    folder = _write_all(tmp_path)
    result = validate_policy_paths([folder])
    assert result.errors == []
    assert len(result.policies) == 21
    assert main(["validate", str(folder)]) == 0
    out, err = capsys.readouterr()
    assert out.count("ok: ") == len(FLOE_FILES)
    for name in FLOE_FILES:
        assert f"ok: {folder / name} (" in out


def _warnings(tmp_path: Path, name: str) -> list[str]:
    (tmp_path / name).write_text(textwrap.dedent(FLOE_FILES[name][1]))
    result = validate_policy_paths([tmp_path / name])
    assert result.errors == []
    return [line.split(": ", 2)[2] for line in result.warnings]


def test_the_loader_files_floe_refused_before_now_warn_and_keep_their_fields(tmp_path):
    warnings = _warnings(tmp_path, "loader-rewrite-manifests.yaml")
    assert warnings == [
        "rewrite-manifests.staging-location: " + IGNORED[MANIFESTS]["stagingLocation"],
        "rewrite-manifests.sort-by: " + IGNORED[MANIFESTS]["sortBy"],
    ]
    policy = validate_policy_paths([tmp_path / "loader-rewrite-manifests.yaml"]).policies.get("manifests")
    config = policy.config(MANIFESTS)
    assert (config.spec_id, config.sort_by, config.staging_location) == (0, ("day", "country"), "/tmp/manifests")
    assert "rewrite-manifests.staging-location: ignored" in " ".join(_warnings(tmp_path, "loader-full.yaml"))


def test_rewrite_if_names_what_is_ignored_and_passes_its_spec_id(tmp_path):
    warnings = _warnings(tmp_path, "e2e-manifest-filter.json")
    assert ("rewriteManifests.rewriteIf: ignored: content, addedFilesCount, snapshotId (the rewrite_manifests "
            "procedure takes no manifest filter; it rewrites every manifest of the spec)") in warnings
    every = _warnings(tmp_path, "e2e-manifest-filter-all.json")
    assert ("rewriteManifests.rewriteIf.specId: 0 differs from specId 1: specId 1 is used (Floe's Java action "
            "would have matched no manifest)") in every
    assert "rewriteManifests.rewriteIf: ignored: path, length, content, sequenceNumber" in " ".join(every)
    # Only a filter's specId: it is the procedure's spec_id.
    (tmp_path / "only-spec.yaml").write_text("name: s\ntablePattern: '*'\nrewriteManifests: {rewriteIf: {specId: 2}}\n")
    result = validate_policy_paths([tmp_path / "only-spec.yaml"])
    assert any(w.endswith("rewriteManifests.rewriteIf: the rewrite_manifests procedure takes no manifest filter: "
                          "specId 2 is passed as its spec_id") for w in result.warnings)
    sql = build_procedure_call(MANIFESTS, TABLE, result.policies.get("s").config(MANIFESTS), NOW).sql
    assert "spec_id => 2" in sql


def test_comprehensive_example_keeps_ignored_fields_and_warns(tmp_path):
    warnings = " | ".join(_warnings(tmp_path, "comprehensive-policy.json"))
    assert "rewriteDataFiles.sortOrder: ignored with strategy BINPACK" in warnings
    assert "expireSnapshots.expireSnapshotId: " + IGNORED[Operation.EXPIRE_SNAPSHOTS]["expireSnapshotId"] in warnings
    policy = validate_policy_paths([tmp_path / "comprehensive-policy.json"]).policies.get("everything")
    assert policy.config(Operation.EXPIRE_SNAPSHOTS).to_json()["expireSnapshotId"] == 4242
    assert policy.config(MANIFESTS).to_json()["rewriteIf"]["partitionSummaries"] == [
        {"containsNull": True, "containsNan": False, "lowerBound": "01", "upperBound": "0f"}]
    rdf = build_procedure_call(Operation.REWRITE_DATA_FILES, TABLE, policy.config(Operation.REWRITE_DATA_FILES), NOW)
    expire = build_procedure_call(Operation.EXPIRE_SNAPSHOTS, TABLE, policy.config(Operation.EXPIRE_SNAPSHOTS), NOW)
    assert "sort_order" not in rdf.sql and "4242" not in expire.sql


@pytest.mark.parametrize("name, old, new", [
    ("comprehensive-policy.json", '"location": "data"', '"location": "s3://lake/web/clicks"'),
    ("loader-orphans.yaml", 'location: "data"', 'location: "s3://lake/web"'),
])
def test_floes_absolute_orphan_locations_for_a_pattern_are_refused(tmp_path, name, old, new):
    """Floe's own values: an absolute orphan location for a pattern that matches several tables lies outside
    all of them but one (or all of them), and their orphan cleanups would delete each other's files."""
    text = textwrap.dedent(FLOE_FILES[name][1])
    assert old in text
    (tmp_path / name).write_text(text.replace(old, new))
    result = validate_policy_paths([tmp_path / name])
    field = "orphan-cleanup.location" if name.startswith("loader") else "orphanCleanup.location"
    assert len(result.errors) == 1 and f": {field}: " in result.errors[0], result.errors
    assert "is absolute, and " in result.errors[0] and "write it relative to the table's location" in result.errors[0]


def test_floes_nameless_body_is_still_refused(tmp_path):
    (tmp_path / "nameless.json").write_text('{"tablePattern": "lake.*.*", "enabled": true}')
    assert validate_policy_paths([tmp_path / "nameless.json"]).errors == [
        f"{tmp_path / 'nameless.json'}: policy #1: name: is required (non-empty text)"]


@pytest.mark.parametrize("spark_line, iceberg, passed", [
    ("4.1", "1.11.0", True), ("4.1", "1.12.0", True), ("4.1", None, True), ("4.2", "1.12.0", True),
    ("3.5", "1.12.0", True), ("3.5", None, False), ("3.5", "1.11.0", False), ("3.5", "1.10.2", False),
    ("4.0", "1.11.0", False), ("4.0", None, False), ("4.1", "1.10.1", False), (None, "1.12.0", False),
])
def test_sort_by_is_the_procedures_sort_by_where_the_runtime_has_it(tmp_path, spark_line, iceberg, passed):
    """RewriteManifestsProcedure (javap on the runtime jars): table, use_caching, spec_id on Spark 3.5 and 4.0
    in Iceberg 1.11; sort_by (array<string>) too on Spark 4.1 from 1.11 and on Spark 3.5 from 1.12 (Spark 4.0
    has no 1.12 runtime). None: floe-dagster's default release, 1.11.0."""
    assert supports_manifest_sort_by(iceberg, spark_line) is passed
    (tmp_path / "m.yaml").write_text(textwrap.dedent(FLOE_FILES["loader-rewrite-manifests.yaml"][1]))
    config = validate_policy_paths([tmp_path / "m.yaml"]).policies.get("manifests").config(MANIFESTS)
    call = build_procedure_call(MANIFESTS, TABLE, config, NOW, iceberg_version=iceberg, spark_line=spark_line)
    assert ("sort_by => array('day', 'country')" in call.sql) is passed
    assert "/tmp/manifests" not in call.sql
    if not passed:
        assert call.arguments["sort_by_ignored"].startswith("['day', 'country']: rewrite_manifests has no sort_by")
