"""Floe's two policy formats (issue 15, policy compatibility): the API's camelCase and Floe's
PolicyLoader kebab-case YAML load to the same policies and the same decisions, with the same checks
and messages naming the keys as written; SORT or BINPACK with zOrderColumns is accepted, kept and
ignored, with a warning."""

from __future__ import annotations

import json
import logging
import textwrap
from datetime import timedelta
from pathlib import Path

import pytest

from floe_dagster.cli import main
from floe_dagster.core.runs.history import OperationHistory
from floe_dagster.core.operation_kinds.rewrite_data_files import RewriteDataFilesConfig
from floe_dagster.core.operations import Operation
from floe_dagster.core.policies.policy import (
    PolicyError,
    PolicySet,
    load_policies,
    parse_policies_text,
    validate_policy_paths,
)
from floe_dagster.core.policies.policy_formats import API_FORMAT, LOADER_FORMAT, kebab
from floe_dagster.policies import load_policy_set
from floe_dagster.settings import load_settings
from floe_dagster.spark.operation_steps import build_procedure_call
from floe_dagster_tests.conftest import write_settings
from floe_dagster_tests.unit.test_planner import NOW, metrics, run, table

RDF, EXPIRE, ORPHAN, MANIFESTS = (Operation.REWRITE_DATA_FILES, Operation.EXPIRE_SNAPSHOTS,
                                  Operation.ORPHAN_CLEANUP, Operation.REWRITE_MANIFESTS)
ZORDER_IGNORED = "ignored with strategy {} (Floe stores and ignores them too; only ZORDER uses them)"


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return path


def kebab_policies(body: str) -> PolicySet:
    return parse_policies_text("policies:\n" + textwrap.indent(textwrap.dedent(body), "  "))


def kebab_errors(body: str) -> list[str]:
    with pytest.raises(PolicyError) as caught:
        kebab_policies(body)
    return caught.value.errors


# The same two policies in both formats. The camelCase file writes what the kebab-case one translates
# to (intervals summed to ISO-8601, whole days as P<n>D), so even their versions agree.
CAMEL = """
- name: sales
  tablePattern: "demo.sales.*"
  priority: 10
  tags: {team: sales}
  rewriteDataFiles: {strategy: sort, sortOrder: ["id DESC"], targetFileSizeBytes: 1048576, rewriteJobOrder: bytes-asc}
  rewriteDataFilesSchedule: {interval: PT4H, timeout: 2, windowStart: "01:00", windowEnd: "23:00", priority: 3}
  expireSnapshots: {retainLast: 3, maxSnapshotAge: P7D, cleanExpiredMetadata: true}
  expireSnapshotsSchedule: {interval: P1DT2H}
  orphanCleanup: {retentionPeriodInDays: 5, prefixMismatchMode: IGNORE}
  orphanCleanupSchedule: {cronExpression: "0 2 * * *", enabled: false}
  rewriteManifests: {specId: 0}
  rewriteManifestsSchedule: {interval: PT30M}
  triggerConditions: {minIntervalMinutes: 60, perOperationMinIntervalMinutes: {EXPIRE_SNAPSHOTS: 360}}
  healthThresholds: {snapshotCountWarning: 50}
- name: b-only
  tablePattern: "demo.sales.b"
  priority: 20
  enabled: false
  expireSnapshots: {}
  expireSnapshotsSchedule: {interval: P1D}
"""
KEBAB = """
policies:
  - name: sales
    pattern: "demo.sales.*"
    priority: 10
    tags: {team: sales}
    rewrite-data-files:
      strategy: sort                       # upper-cased, as Floe's loader does
      sort-order: ["id DESC"]
      target-file-size-bytes: 1048576
      rewrite-job-order: bytes-asc         # Iceberg's spelling, as in Floe's loader test (BYTES_ASC too)
    rewrite-data-files-schedule: {interval-hours: 4, timeout-hours: 2, window-start: "01:00", window-end: "23:00",
                                  priority: 3}
    expire-snapshots: {retain-last: 3, max-snapshot-age-days: 7, clean-expired-metadata: true}
    expire-snapshots-schedule: {interval-days: 1, interval-hours: 2}
    orphan-cleanup: {retention-period-days: 5, prefix-mismatch-mode: IGNORE}
    orphan-cleanup-schedule: {cron-expression: "0 2 * * *", enabled: false}
    rewrite-manifests: {spec-id: 0}
    rewrite-manifests-schedule: {interval-minutes: 30}
    trigger-conditions: {min-interval-minutes: 60, per-operation-min-interval-minutes: {EXPIRE_SNAPSHOTS: 360}}
    health-thresholds: {snapshot-count-warning: 50}
    created-at: "2024-01-01T00:00:00Z"     # Floe's loader reads it; nothing here uses it
  - name: b-only
    pattern: "demo.sales.b"
    priority: 20
    enabled: false
    expire-snapshots: {}
    expire-snapshots-schedule: {interval-days: 1}
"""


def test_both_formats_load_the_same_policies_to_the_same_decisions(tmp_path):
    camel = validate_policy_paths([write(tmp_path, "camel.yaml", CAMEL)])
    loader = validate_policy_paths([write(tmp_path, "kebab.yaml", KEBAB)])
    assert camel.errors == loader.errors == [] and camel.warnings == loader.warnings == []
    assert [f.format for f in camel.files] == [API_FORMAT] and [f.format for f in loader.files] == [LOADER_FORMAT]
    for name in ("sales", "b-only"):
        a, b = camel.policies.get(name).to_json(), loader.policies.get(name).to_json()
        assert a.pop("source") != b.pop("source")
        assert a == b
    sales = loader.policies.get("sales")
    assert sales.schedule(EXPIRE).interval == timedelta(days=1, hours=2)
    assert sales.config(RDF).strategy == "SORT" and sales.config(RDF).rewrite_job_order == "BYTES_ASC"

    tables = (table("a"), table("b"), table("c"))
    history = {("demo.sales.b", EXPIRE): OperationHistory(last_success_start=NOW - timedelta(hours=2)),
               ("demo.sales.c", RDF): OperationHistory(last_success_start=NOW - timedelta(hours=1))}
    health = {table("c"): metrics(table("c"), snapshot_count=80)}
    plans = [run(loaded.policies, tables, history=history, health=health) for loaded in (camel, loader)]
    assert plans[0].to_json() == plans[1].to_json()
    decisions = {(d.table.name, d.operation, d.decision) for d in plans[1].decisions}
    assert ("a", RDF, "run") in decisions and ("c", RDF, "skip") in decisions  # not both trivially equal


def test_the_camel_case_version_is_unchanged_by_a_policies_list():
    bare = parse_policies_text("- {name: p, tablePattern: '*', rewriteDataFiles: {strategy: sort}}").get("p")
    listed = parse_policies_text("policies:\n  - {name: p, tablePattern: '*', rewriteDataFiles: {strategy: sort}}")
    assert listed.get("p").version == bare.version


@pytest.mark.parametrize("text", ["policies:\n", "policies: null\n", "policies: []\n", "---\npolicies:\n---\n"])
def test_an_empty_policies_list_holds_no_policies(tmp_path, text, capsys):
    path = write(tmp_path, "empty.yaml", text)
    result = validate_policy_paths([path])
    assert result.errors == [] and len(result.policies) == 0
    assert result.warnings == [f"{path}: holds no policies"]  # what an empty file gives
    assert main(["validate", str(path)]) == 0
    assert capsys.readouterr().out == f"ok: {path} (no policies)\n"


def test_policies_must_be_a_list(tmp_path):
    path = write(tmp_path, "p.yaml", "policies: {name: x, pattern: '*'}\n")
    assert validate_policy_paths([path]).errors == [f"{path}: policies: expected a list of policies, got a mapping"]


@pytest.mark.parametrize("schedule, interval", [
    ("interval-hours: 4", "PT4H"),
    ("interval-days: 1, interval-hours: 2", "P1DT2H"),
    ("interval-minutes: 90", "PT1H30M"),
    ("interval-hours: 24", "P1D"),
    ("interval-days: 2, interval-hours: 3, interval-minutes: 4", "P2DT3H4M"),
    ("interval-days: 0, interval-minutes: 5", "PT5M"),
])
def test_interval_parts_are_summed(schedule, interval):
    policy = kebab_policies(f"""
        - name: p
          pattern: "*"
          rewrite-data-files: {{}}
          rewrite-data-files-schedule: {{{schedule}}}
    """).get("p")
    assert policy.to_json()["rewriteDataFilesSchedule"]["interval"] == interval
    assert policy.schedule(RDF).kind == "interval" and policy.is_operation_enabled(RDF)


@pytest.mark.parametrize("body, message", [
    ("pattern: '*'\nrewrite-data-files: {target-file-size: 1}",
     "rewrite-data-files.target-file-size: unknown field; did you mean 'target-file-size-bytes'?"),
    ("pattern: '*'\nrewrite-data-files: {targetFileSizeBytes: 1}",
     "rewrite-data-files.targetFileSizeBytes: unknown field; did you mean 'target-file-size-bytes'?"),
    ("pattern: '*'\nexpire-snapshot: {}", "expire-snapshot: unknown field; did you mean 'expire-snapshots'?"),
    ("pattern: '*'\nid: abc", "id: unknown field"),
    ("table-pattern: '*'", "table-pattern: is written pattern in Floe's PolicyLoader format"),
    ("pattern: '*'\nexpire-snapshots: {max-snapshot-age: P7D}",
     "expire-snapshots.max-snapshot-age: is written max-snapshot-age-days (whole days)"),
    ("pattern: '*'\norphan-cleanup: {retention-period-in-days: 3}",
     "orphan-cleanup.retention-period-in-days: is written retention-period-days"),
    ("pattern: '*'\nrewrite-data-files-schedule: {interval: 1}",
     "rewrite-data-files-schedule.interval: is written interval-days, interval-hours or interval-minutes"),
    ("pattern: '*'\nrewrite-data-files-schedule: {timeout: 1}",
     "rewrite-data-files-schedule.timeout: is written timeout-hours"),
    ("pattern: '*'\nexpire-snapshots: {expire-snapshot-id: latest}",
     "expire-snapshots.expire-snapshot-id: expected a whole number, got 'latest'"),
    ("pattern: '*'\nrewrite-manifests: {sort-by: []}", "rewrite-manifests.sort-by: must not be empty"),
    ("pattern: '*'\nrewrite-manifests: {rewrite-if: {snapshotId: 1}}",
     "rewrite-manifests.rewrite-if.snapshotId: unknown field; did you mean 'snapshot-id'?"),
    ("pattern: '*'\ntrigger-conditions: {small-file-count: 1}",
     "trigger-conditions.small-file-count: unknown field; did you mean 'small-file-count-above'?"),
])
def test_unknown_kebab_keys_are_named_as_written(body, message):
    errors = kebab_errors("- name: p\n" + textwrap.indent(body, "  ") + "\n")
    assert f"<text>: policy 'p': {message}" in "\n".join(errors), errors


@pytest.mark.parametrize("camel, loader, path", [
    ("expireSnapshots: {retainLast: 0}", "expire-snapshots: {retain-last: 0}", "expire-snapshots.retain-last"),
    ("rewriteDataFiles: {strategy: SORT, sortOrder: ['id UP']}", "rewrite-data-files: {strategy: SORT, sort-order: ['id UP']}",
     "rewrite-data-files.sort-order[0]"),
    ("rewriteManifests: {rewriteIf: {partitionSummaries: [{lowerBound: 1}]}}",
     "rewrite-manifests: {rewrite-if: {partition-summaries: [{lower-bound: 1}]}}",
     "rewrite-manifests.rewrite-if.partition-summaries[0].lower-bound"),
    ("rewriteDataFiles: {strategy: SORT, sortOrder: ['id SIDEWAYS']}",
     "rewrite-data-files: {strategy: sort, sort-order: ['id SIDEWAYS']}", "rewrite-data-files.sort-order[0]"),
    ("rewriteDataFiles: {strategy: zorder}", "rewrite-data-files: {strategy: zorder}",
     "rewrite-data-files.z-order-columns"),
    ("rewriteDataFiles: {strategy: binpak}", "rewrite-data-files: {strategy: binpak}", "rewrite-data-files.strategy"),
    ("rewriteDataFiles: {targetFileSizeBytes: 512MB}", "rewrite-data-files: {target-file-size-bytes: 512MB}",
     "rewrite-data-files.target-file-size-bytes"),
    ("orphanCleanup: {retentionPeriodInDays: 0.5}", "orphan-cleanup: {retention-period-days: 0.5}",
     "orphan-cleanup.retention-period-days"),
    ("orphanCleanup: {maxFilesToDelete: 0}", "orphan-cleanup: {max-files-to-delete: 0}",
     "orphan-cleanup.max-files-to-delete"),
    ("orphanCleanup: {maxConcurrentDeletes: 0}", "orphan-cleanup: {max-concurrent-deletes: 0}",
     "orphan-cleanup.max-concurrent-deletes"),
    ("orphanCleanup: {streamResults: sometimes}", "orphan-cleanup: {stream-results: sometimes}",
     "orphan-cleanup.stream-results"),
    ("rewriteDataFilesSchedule: {cronExpression: '0 0 2 15W * ?'}",
     "rewrite-data-files-schedule: {cron-expression: '0 0 2 15W * ?'}", "rewrite-data-files-schedule.cron-expression"),
    ("rewriteDataFilesSchedule: {windowStart: '25:00'}", "rewrite-data-files-schedule: {window-start: '25:00'}",
     "rewrite-data-files-schedule.window-start"),
    ("rewriteDataFilesSchedule: {timeout: 0}", "rewrite-data-files-schedule: {timeout-hours: 0}",
     "rewrite-data-files-schedule.timeout-hours"),
    ("triggerConditions: {perOperationMinIntervalMinutes: {NOPE: 1}}",
     "trigger-conditions: {per-operation-min-interval-minutes: {NOPE: 1}}",
     "trigger-conditions.per-operation-min-interval-minutes.NOPE"),
    ("healthThresholds: {fileCountWarning: 60000}", "health-thresholds: {file-count-warning: 60000}",
     "health-thresholds.file-count-warning"),
    ("tags: {team: 1}", "tags: {team: 1}", "tags.team"),
    ("priority: high", "priority: high", "priority"),
])
def test_the_same_checks_and_messages_with_the_keys_as_written(camel, loader, path):
    with pytest.raises(PolicyError) as camel_caught:
        parse_policies_text(f"- name: p\n  tablePattern: '*'\n  {camel}\n")
    errors = kebab_errors(f"- name: p\n  pattern: '*'\n  {loader}\n")
    (camel_error,), (loader_error,) = camel_caught.value.errors, errors
    camel_path, _, message = camel_error.removeprefix("<text>: policy 'p': ").partition(": ")
    message = message.replace("fileCountCritical", "file-count-critical")  # fields named in a message too
    assert loader_error == f"<text>: policy 'p': {path}: {message}"


def test_floe_loader_keys_translate_and_warnings_name_them():
    result = kebab_policies("""
        - name: p
          expire-snapshots: {max-snapshot-age-days: 30}
          orphan-cleanup: {retention-period-days: 2}
          orphan-cleanup-schedule: {interval-hours: 4, timeout-hours: 3, enabled: true}
          rewrite-manifests-schedule: {cron-expression: "0 3 * * *"}
        - name: q
          pattern: "x.y"
          rewrite-data-files: {}
          rewrite-data-files-schedule: {window-start: "02:00", window-end: "06:00"}
    """)
    p = result.get("p")
    assert p.config(EXPIRE).max_snapshot_age == "P30D" and p.config(ORPHAN).retention_period_in_days == 2
    assert p.schedule(ORPHAN).timeout_hours == 3 and p.is_operation_enabled(ORPHAN)
    # A schedule without enabled runs (the API's default; Floe's loader would leave it off).
    assert result.get("q").is_operation_enabled(RDF)
    assert p.table_pattern.text == "*"
    errors = kebab_errors("""
        - name: p
          expire-snapshots: {max-snapshot-age-days: -1}
          rewrite-data-files-schedule: {interval-hours: 1.5}
    """)
    assert errors == [
        "<text>: policy 'p': expire-snapshots.max-snapshot-age-days: must be at least 0, got -1",
        "<text>: policy 'p': rewrite-data-files-schedule.interval-hours: expected a whole number, got 1.5",
    ]


def test_warnings_name_the_keys_as_written(tmp_path):
    path = write(tmp_path, "p.yaml", """
        policies:
          - name: p
            rewrite-data-files: {}
            expire-snapshots: {}
            rewrite-manifests-schedule: {interval-days: 1}
            orphan-cleanup: {}
            orphan-cleanup-schedule: {interval-days: 1, cron-expression: "0 2 * * *"}
    """)
    result = validate_policy_paths([path])
    assert result.errors == []
    prefix = f"{path}: policy 'p': "
    assert result.warnings == [prefix + line for line in (
        "pattern: not set: the policy matches every table",
        "rewrite-data-files: has no rewrite-data-files-schedule: it runs only when triggered by hand",
        "expire-snapshots: has no expire-snapshots-schedule: it runs only when triggered by hand",
        "orphan-cleanup-schedule: both interval and cron-expression are set; the interval wins and the cron is ignored",
        "rewrite-manifests-schedule: has no rewrite-manifests config, so it schedules nothing; add rewrite-manifests: "
        "{} to run the operation with defaults",
    )]


def test_a_file_mixing_the_formats_is_an_error(tmp_path):
    mixed = write(tmp_path, "mixed.yaml", """
        policies:
          - name: a
            pattern: "x.a"
            rewrite-data-files: {}
          - name: b
            tablePattern: "x.b"
            rewriteDataFiles: {}
    """)
    errors = validate_policy_paths([mixed]).errors
    assert errors == [f"{mixed}: mixes Floe's two policy formats: policy 'a' is in the PolicyLoader format "
                      "(kebab-case: 'pattern') and policy 'b' in the API format (camelCase: 'tablePattern'); "
                      "write each file in one format"]
    documents = write(tmp_path, "documents.yaml", "policies:\n  - {name: a, pattern: x.a}\n---\n"
                                                  "- {name: b, tablePattern: x.b}\n")
    assert "mixes Floe's two policy formats" in validate_policy_paths([documents]).errors[0]
    one = write(tmp_path, "one.yaml", "policies:\n  - {name: a, pattern: x.a, rewriteDataFiles: {}}\n")
    assert validate_policy_paths([one]).errors == [
        f"{one}: policy 'a': mixes kebab-case keys ('pattern', Floe's PolicyLoader format) with camelCase keys "
        "('rewriteDataFiles', Floe's API format); write it in one format",
        f"{one}: policy 'a': rewriteDataFiles: unknown field; did you mean 'rewrite-data-files'?",
    ]
    # Keys both formats spell the same are neither: such a policy goes with either.
    neutral = write(tmp_path, "neutral.yaml", "policies:\n  - {name: a, pattern: x.a}\n  - {name: b, priority: 1}\n")
    assert validate_policy_paths([neutral]).errors == []


def test_kebab_keys_need_the_policies_list():
    """Without Floe's ``policies:`` list a file is in the API format; kebab-case keys are then unknown."""
    with pytest.raises(PolicyError) as caught:
        parse_policies_text("- {name: p, tablePattern: '*', rewrite-data-files: {}}")
    assert caught.value.errors == ["<text>: policy 'p': rewrite-data-files: unknown field; did you mean "
                                   "'rewriteDataFiles'?"]


def test_a_json_file_in_the_loader_format(tmp_path):
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"policies": [{"name": "p", "pattern": "a.b", "rewrite-data-files": {},
                                              "rewrite-data-files-schedule": {"interval-days": 1}}]}))
    result = validate_policy_paths([path])
    assert result.errors == [] and result.policies.get("p").is_operation_enabled(RDF)


def test_every_api_field_has_a_kebab_spelling():
    assert kebab("zOrderColumns") == "z-order-columns"
    assert kebab("rewriteDataFilesSchedule") == "rewrite-data-files-schedule"
    loaded = kebab_policies("""
        - name: p
          pattern: "*"
          rewrite-position-delete-files: {rewrite-all: true, min-input-files: 2}
          rewrite-position-delete-files-schedule: {interval-days: 1, allowed-days: [MONDAY], timezone: Europe/Berlin,
                                                   window-start: "01:00", window-end: "02:00", enforce-window-end: true}
          orphan-cleanup: {equal-schemes: {s3a: s3}, dry-run: true}
          rewrite-manifests: {use-caching: false}
    """).get("p")
    assert loaded.config(Operation.REWRITE_POSITION_DELETE_FILES).to_json() == {"rewriteAll": True, "minInputFiles": 2}
    assert loaded.config(ORPHAN).to_json() == {"equalSchemes": {"s3a": "s3"}, "dryRun": True}
    assert loaded.schedule(Operation.REWRITE_POSITION_DELETE_FILES).enforce_window_end


# -- strategy SORT or BINPACK with zOrderColumns --------------------------------------------------------


@pytest.mark.parametrize("strategy", ["SORT", "BINPACK", None])
def test_zorder_columns_with_another_strategy_are_kept_ignored_and_warned(tmp_path, strategy, capsys):
    config = {"zOrderColumns": ["customer_id"], **({"strategy": strategy} if strategy else {})}
    path = tmp_path / "p.yaml"
    path.write_text(json.dumps({"name": "p", "tablePattern": "demo.sales.*", "rewriteDataFiles": config,
                                "rewriteDataFilesSchedule": {"interval": 1}}))
    result = validate_policy_paths([path])
    effective = strategy or "BINPACK"
    assert result.errors == []
    assert result.warnings == [
        f"{path}: policy 'p': rewriteDataFiles.zOrderColumns: " + ZORDER_IGNORED.format(effective)]
    policy_config = result.policies.get("p").config(RDF)
    assert policy_config.to_json()["zOrderColumns"] == ["customer_id"]  # stored, shown
    alone = RewriteDataFilesConfig(strategy=strategy)
    t = table("orders")
    assert (build_procedure_call(RDF, t, policy_config, NOW).sql == build_procedure_call(RDF, t, alone, NOW).sql)
    assert "zorder" not in build_procedure_call(RDF, t, policy_config, NOW).sql

    assert main(["validate", str(path)]) == 0
    out, err = capsys.readouterr()
    assert out == f"ok: {path} (Floe API format, camelCase: 1 policy)\n"
    assert err == f"warning: {result.warnings[0]}\n"


def test_a_sort_order_without_sort_is_kept_ignored_and_warned(tmp_path):
    """Floe's comprehensive example sends BINPACK with a sortOrder: kept, never rendered, warned."""
    path = write(tmp_path, "p.yaml", "name: p\ntablePattern: '*'\nrewriteDataFiles: {strategy: ZORDER, "
                                     "zOrderColumns: [a], sortOrder: [b]}\n")
    result = validate_policy_paths([path])
    assert f"{path}: policy 'p': rewriteDataFiles.sortOrder: ignored with strategy ZORDER (Floe stores and ignores " \
           "it too; only SORT uses it)" in result.warnings
    config = result.policies.get("p").config(RDF)
    assert config.sort_order == ("b",)
    sql = build_procedure_call(RDF, table("demo.s.t"), config, NOW).sql
    assert "zorder(a)" in sql and "'b'" not in sql


def test_the_zorder_warning_in_the_loader_format(tmp_path):
    """PolicyLoaderTest.loadPolicyWithAllRewriteDataFilesOptions: ``strategy: sort`` with ``z-order-columns``."""
    path = write(tmp_path, "p.yaml", """
        policies:
          - name: p
            pattern: "*"
            rewrite-data-files: {strategy: sort, z-order-columns: [col3]}
            rewrite-data-files-schedule: {interval-hours: 1}
    """)
    result = validate_policy_paths([path])
    assert result.warnings == [
        f"{path}: policy 'p': rewrite-data-files.z-order-columns: " + ZORDER_IGNORED.format("SORT")]
    config = result.policies.get("p").config(RDF)
    assert config.z_order_columns == ("col3",) and config.strategy == "SORT"


def test_floes_e2e_body_is_accepted(tmp_path):
    """tst/e2e/PolicyCrudE2ETest.shouldCreatePolicyWithAllRewriteDataFilesFields's body."""
    body = {
        "name": "all-rewrite-fields", "tablePattern": "prod.analytics.*", "enabled": True, "priority": 100,
        "rewriteDataFiles": {
            "strategy": "SORT", "sortOrder": ["date", "region"], "zOrderColumns": ["customer_id"],
            "targetFileSizeBytes": 536870912, "maxFileGroupSizeBytes": 107374182400,
            "maxConcurrentFileGroupRewrites": 5, "partialProgressEnabled": True, "partialProgressMaxCommits": 10,
            "partialProgressMaxFailedCommits": 2, "filter": "date > '2024-01-01'", "rewriteJobOrder": "FILES_DESC",
            "useStartingSequenceNumber": True, "removeDanglingDeletes": True, "outputSpecId": 1,
        },
        "rewriteDataFilesSchedule": {"enabled": True, "cronExpression": "0 0 2 * * ?"},
    }
    path = tmp_path / "e2e.json"
    path.write_text(json.dumps(body))
    result = validate_policy_paths([path])
    assert result.errors == []
    assert result.warnings == [f"{path}: policy 'all-rewrite-fields': rewriteDataFiles.zOrderColumns: "
                               + ZORDER_IGNORED.format("SORT")]
    config = result.policies.get("all-rewrite-fields").config(RDF)
    assert config.to_json() == {**body["rewriteDataFiles"], "filter": "date > '2024-01-01'"}
    sql = build_procedure_call(RDF, table("orders", "analytics", "prod"), config, NOW).sql
    assert "strategy => 'sort', sort_order => 'date, region'" in sql and "customer_id" not in sql
    assert "'rewrite-job-order', 'files-desc'" in sql and "'output-spec-id', '1'" in sql


def test_the_warnings_come_with_the_policies_and_are_logged_once_per_load(tmp_path, caplog):
    text = "name: p\ntablePattern: '*'\nrewriteDataFiles: {strategy: SORT, zOrderColumns: [a]}\n"
    settings = load_settings(write_settings(tmp_path, text), environ={})
    path = tmp_path / "policies" / "policies.yaml"
    expected = [f"{path}: policy 'p': rewriteDataFiles.zOrderColumns: " + ZORDER_IGNORED.format("SORT"),
                f"{path}: policy 'p': rewriteDataFiles: has no rewriteDataFilesSchedule: it runs only when triggered "
                "by hand"]
    assert list(load_policies([path]).warnings) == expected  # a pure value: the core logs nothing
    with caplog.at_level(logging.WARNING, logger="floe_dagster.policies"):
        load_policy_set(settings)
        load_policy_set(settings)  # unchanged files: read once, logged once
    records = [r for r in caplog.records if r.name == "floe_dagster.policies"]
    assert [(r.levelno, r.getMessage()) for r in records] == [
        (logging.WARNING, f"policy warning: {line}") for line in expected]


def test_validate_names_each_files_format(tmp_path, capsys):
    write(tmp_path, "a.yaml", CAMEL)
    write(tmp_path, "b.yaml", KEBAB.replace("name: ", "name: kebab-"))
    write(tmp_path, "c.yaml", "")
    assert main(["validate", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == [
        f"ok: {tmp_path / 'a.yaml'} (Floe API format, camelCase: 2 policies)",
        f"ok: {tmp_path / 'b.yaml'} (Floe PolicyLoader format, kebab-case: 2 policies)",
        f"ok: {tmp_path / 'c.yaml'} (no policies)",
    ]
    assert err == f"warning: {tmp_path / 'c.yaml'}: holds no policies\n"
    write(tmp_path, "d.yaml", "policies:\n  - {name: d, pattern: '*', rewrite-data-files: {stratgy: sort}}\n")
    assert main(["validate", str(tmp_path)]) == 2
    out, err = capsys.readouterr()
    assert out == (f"{tmp_path / 'd.yaml'}: policy 'd': rewrite-data-files.stratgy: unknown field; "
                   "did you mean 'strategy'?\n")
    assert err.endswith("1 error(s)\n")


def test_orphan_cleanup_at_scale_keys_in_both_formats():
    camel = parse_policies_text("- name: p\n  tablePattern: '*'\n  orphanCleanup: {streamResults: false, "
                                "maxConcurrentDeletes: 16, maxFilesToDelete: 100000}\n")
    loader = kebab_policies("- name: p\n  pattern: '*'\n  orphan-cleanup: {stream-results: false, "
                            "max-concurrent-deletes: 16, max-files-to-delete: 100000}\n")
    config = loader.get("p").config(ORPHAN)
    assert config == camel.get("p").config(ORPHAN)
    assert (config.stream_results, config.max_concurrent_deletes, config.max_files_to_delete) == (False, 16, 100_000)
    assert config.to_json() == {"streamResults": False, "maxConcurrentDeletes": 16, "maxFilesToDelete": 100_000}
