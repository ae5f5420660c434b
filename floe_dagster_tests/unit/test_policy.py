"""Policies: loading, validation (every error, with file, policy and field), precedence, examples."""

from __future__ import annotations

import json
import textwrap
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from floe_dagster.core.basics.durations import parse_iso_duration
from floe_dagster.core.operation_kinds.expire_snapshots import ExpireSnapshotsConfig
from floe_dagster.core.operation_kinds.orphan_cleanup import OrphanCleanupConfig
from floe_dagster.core.operation_kinds.rewrite_data_files import RewriteDataFilesConfig
from floe_dagster.core.operation_kinds.rewrite_manifests import RewriteManifestsConfig
from floe_dagster.core.operation_kinds.rewrite_position_delete_files import RewritePositionDeleteFilesConfig
from floe_dagster.core.operations import Operation
from floe_dagster.core.policies.policy import (
    PolicyError,
    PolicySet,
    load_policies,
    parse_policies_text,
    validate_policy_paths,
)
from floe_dagster.core.schedules.schedule import schedule_due
from floe_dagster.core.basics.tables import TableName
from floe_dagster_tests.unit.test_planner import MINIMAL_CONFIGS

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "policies"
BROKEN = Path(__file__).parent / "data" / "broken_policies"
RDF, EXPIRE, ORPHAN, MANIFESTS, POSITION = (
    Operation.REWRITE_DATA_FILES, Operation.EXPIRE_SNAPSHOTS, Operation.ORPHAN_CLEANUP,
    Operation.REWRITE_MANIFESTS, Operation.REWRITE_POSITION_DELETE_FILES)


def table(text: str) -> TableName:
    return TableName.parse(text, "demo")


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return path


def policies(text: str) -> PolicySet:
    return parse_policies_text(textwrap.dedent(text))


def errors_of(text: str) -> list[str]:
    with pytest.raises(PolicyError) as caught:
        policies(text)
    return caught.value.errors


# -- loading ----------------------------------------------------------------------------------------


def test_load_one_policy_a_list_json_and_a_folder(tmp_path):
    write(tmp_path, "one.yaml", """
        name: single
        tablePattern: demo.sales.orders
        rewriteDataFiles: {}
        rewriteDataFilesSchedule: {interval: 1}
    """)
    write(tmp_path, "many.yml", """
        - name: first
          tablePattern: "demo.ops.*"
        - name: second
          tablePattern: "demo.sales.*"
    """)
    (tmp_path / "more.json").write_text(json.dumps({"name": "from-json", "tablePattern": "x.y"}))
    (tmp_path / "notes.txt").write_text("not a policy")
    (tmp_path / ".hidden.yaml").write_text("name: [")
    loaded = load_policies([tmp_path])
    assert sorted(p.name for p in loaded) == ["first", "from-json", "second", "single"]
    assert load_policies([tmp_path / "one.yaml"]).get("single").source == str(tmp_path / "one.yaml")


def test_defaults():
    policy = policies("name: p\ntablePattern: '*'\n").get("p")
    assert policy.enabled and policy.priority == 0 and policy.tags == {} and policy.description == ""
    assert policy.trigger_conditions is None and policy.health_thresholds.snapshot_count_warning == 100
    assert policy.configured_operations() == [] and policy.version


def test_operation_enabled_needs_config_and_an_enabled_schedule():
    loaded = policies("""
        name: p
        tablePattern: "*"
        rewriteDataFiles: {}
        rewriteDataFilesSchedule: {interval: 1}
        expireSnapshots: {}
        orphanCleanup: {}
        orphanCleanupSchedule: {interval: 1, enabled: false}
        rewriteManifestsSchedule: {interval: 1}
    """).get("p")
    assert loaded.configured_operations() == [RDF, EXPIRE, ORPHAN]
    assert loaded.enabled_operations() == [RDF]
    assert not loaded.is_operation_enabled(EXPIRE)  # no schedule
    assert not loaded.is_operation_enabled(ORPHAN)  # schedule disabled
    assert not loaded.is_operation_enabled(MANIFESTS)  # schedule but no config
    assert loaded.config(RDF) == RewriteDataFilesConfig() and loaded.config(MANIFESTS) is None
    assert loaded.config(RDF).to_json() == {}


def test_configs_are_normalized_camel_case_with_only_what_is_set():
    loaded = policies("""
        name: p
        tablePattern: "w.t"  # one table: an absolute orphan location is for one table only (core/policies/envelope.py)
        rewriteDataFiles:
          strategy: sort
          sortOrder: ["id DESC NULLS LAST", "at"]
          rewriteJobOrder: bytes_desc
          targetFileSizeBytes: 536870912
          filter: " region = 'eu' "
        expireSnapshots: {retainLast: 3, maxSnapshotAge: pt0s, streamResults: true}
        orphanCleanup: {retentionPeriodInDays: 1.5, prefixMismatchMode: ignore, equalSchemes: {s3a: s3},
                        dryRun: true, location: "file:/w/t"}
        rewriteManifests: {specId: 0, useCaching: false}
        rewritePositionDeleteFiles: {rewriteAll: true, minInputFiles: 2}
    """).get("p")
    assert loaded.config(RDF).to_json() == {"strategy": "SORT", "sortOrder": ["id DESC NULLS LAST", "at"],
                                            "rewriteJobOrder": "BYTES_DESC", "targetFileSizeBytes": 536870912,
                                            "filter": "region = 'eu'"}
    assert loaded.config(EXPIRE).to_json() == {"retainLast": 3, "maxSnapshotAge": "PT0S", "streamResults": True}
    assert loaded.config(ORPHAN).to_json() == {"retentionPeriodInDays": 1.5, "prefixMismatchMode": "IGNORE",
                                               "equalSchemes": {"s3a": "s3"}, "dryRun": True, "location": "file:/w/t"}
    assert loaded.config(MANIFESTS).to_json() == {"specId": 0, "useCaching": False}
    assert loaded.config(POSITION).to_json() == {"rewriteAll": True, "minInputFiles": 2}
    # The typed configs behind them: None is "unset" (the engine's fallbacks then apply).
    assert loaded.config(RDF) == RewriteDataFilesConfig(
        strategy="SORT", sort_order=("id DESC NULLS LAST", "at"), rewrite_job_order="BYTES_DESC",
        target_file_size_bytes=536870912, filter="region = 'eu'")
    assert loaded.config(EXPIRE) == ExpireSnapshotsConfig(retain_last=3, max_snapshot_age="PT0S", stream_results=True)
    assert loaded.config(ORPHAN) == OrphanCleanupConfig(
        retention_period_in_days=1.5, location="file:/w/t", prefix_mismatch_mode="IGNORE",
        equal_schemes=(("s3a", "s3"),), dry_run=True)
    assert loaded.config(MANIFESTS) == RewriteManifestsConfig(spec_id=0, use_caching=False)
    assert loaded.config(POSITION) == RewritePositionDeleteFilesConfig(rewrite_all=True, min_input_files=2)
    assert loaded.config(RDF).iceberg_options() == {"target-file-size-bytes": 536870912, "rewrite-job-order": "bytes-desc"}
    assert loaded.to_json()["orphanCleanup"] == loaded.config(ORPHAN).to_json()
    json.dumps(loaded.to_json())  # JSON-able throughout


def test_the_version_hashes_the_policy_as_written():
    """floe/policy-version: the hash of the policy file's definition, not of the parsed configs (the
    value below was computed before the configs were typed, and must not move)."""
    loaded = policies("""
        name: p
        tablePattern: '*'
        rewriteDataFiles: {strategy: sort, sortOrder: ['id DESC'], targetFileSizeBytes: 1000}
        expireSnapshots: {maxSnapshotAge: p1d}
        orphanCleanup: {equalSchemes: {s3a: s3}}
    """).get("p")
    assert loaded.version == "9a2d10c2fe38"


def test_a_config_parses_on_its_own():
    assert RewriteDataFilesConfig.from_mapping({"strategy": "zorder", "zOrderColumns": ["a"]}).z_order_columns == ("a",)
    assert ExpireSnapshotsConfig.from_mapping({}) == ExpireSnapshotsConfig()
    assert RewriteManifestsConfig.from_mapping({"sortBy": ["day"]}).sort_by == ("day",)
    with pytest.raises(ValueError, match=r"rewriteManifests config: sortBy: expected a list of text"):
        RewriteManifestsConfig.from_mapping({"sortBy": "x"})


def test_tags_become_run_tags_and_the_version_follows_the_definition():
    first = policies("name: p\ntablePattern: '*'\ntags: {team: sales, cost-center: '42'}\n").get("p")
    # On the run page, not in Dagit's runs list (core/runs/run_tags.py).
    assert first.run_tags() == {"dagster/floe.tag.team": "sales", "dagster/floe.tag.cost-center": "42"}
    second = policies("name: p\ntablePattern: '*'\ntags: {team: ops, cost-center: '42'}\n").get("p")
    assert first.version != second.version
    assert first.version == policies("name: p\ntablePattern: '*'\ntags: {cost-center: '42', team: sales}\n"
                                      ).get("p").version


def test_schedule_times_are_read_as_text_in_yaml():
    # YAML 1.1 would read an unquoted 02:30 as the number 150
    loaded = policies("""
        name: p
        tablePattern: "*"
        rewriteDataFiles: {}
        rewriteDataFilesSchedule: {interval: 1, windowStart: 02:30, windowEnd: 06:00}
    """).get("p")
    assert loaded.schedule(RDF).window_start.strftime("%H:%M") == "02:30"


def test_cron_rules_for_dagster_schedules():
    loaded = load_policies([EXAMPLES])
    rules = loaded.cron_rules()
    assert ("ops-maintenance", Operation.ORPHAN_CLEANUP, "0 */4 * * *", "Europe/Berlin") in rules
    assert all(op != EXPIRE or name != "sales-maintenance" for name, op, *_ in rules)  # after writes only
    assert ("sales-maintenance", MANIFESTS, "0/30 * * * *", "UTC") in rules
    assert all(name != "ops-metrics-zorder" for name, *_ in rules)  # disabled policy
    assert all(op != RDF or name != "sales-maintenance" for name, op, *_ in rules)  # an interval rule


# -- precedence ---------------------------------------------------------------------------------------

PRECEDENCE = """
- name: everything
  tablePattern: "*"
- name: sales-exact
  tablePattern: "demo.sales.orders"
- name: sales-any
  tablePattern: "demo.sales.*"
- name: urgent-wildcard
  tablePattern: "*.*"
  priority: 1
- name: off
  tablePattern: "demo.sales.orders"
  priority: 5
  enabled: false
- name: b-regex
  tablePattern: "/demo\\\\.eu\\\\..*/"
- name: a-glob
  tablePattern: "demo.eu.*"
  priority: 0
- name: nested
  tablePattern: "demo.eu.*.orders"
"""


def test_priority_beats_specificity():
    loaded = policies(PRECEDENCE)
    # urgent-wildcard: 1000 + 55 beats sales-exact: 111
    assert loaded.effective_policy(table("demo.sales.orders")).name == "urgent-wildcard"
    assert [p.name for p in loaded.matching(table("demo.sales.orders"))] == [
        "urgent-wildcard", "sales-exact", "sales-any", "everything"]
    # the disabled policy is listed only when asked, and never wins
    assert loaded.matching(table("demo.sales.orders"), include_disabled=True)[-1].name == "off"


def test_specificity_decides_between_equal_priorities():
    loaded = policies(PRECEDENCE.replace("priority: 1\n", "priority: 0\n"))
    assert loaded.effective_policy(table("demo.sales.orders")).name == "sales-exact"  # 111
    assert loaded.effective_policy(table("demo.sales.events")).name == "sales-any"  # 110
    assert loaded.effective_policy(table("other.x")).name == "everything"


def test_ties_are_broken_by_name():
    tied = policies("""
        - name: zebra
          tablePattern: "demo.sales.*"
        - name: alpha
          tablePattern: "demo.sales.*"
    """)
    assert tied.effective_policy(table("demo.sales.orders")).name == "alpha"


def test_nested_namespaces_and_regex_with_dots():
    loaded = policies(PRECEDENCE.replace("priority: 1\n", "priority: 0\n"))
    nested = table("demo.eu.sales.orders")
    names = [p.name for p in loaded.matching(nested)]
    # a-glob (demo.eu.*) names namespace eu exactly, so it does not reach demo.eu.sales.orders;
    # nested: 100 + 5 + 1 = 106; then three at 55 (regex, *, *.*), by name
    assert names == ["nested", "b-regex", "everything", "urgent-wildcard"]
    # a-glob: 100 + 10 + 0 = 110 beats the regex's 55 for a table directly in demo.eu
    assert loaded.effective_policy(table("demo.eu.orders")).name == "a-glob"
    assert [p.name for p in loaded.matching(table("demo.eu.orders"))][:2] == ["a-glob", "b-regex"]


def test_only_matching_tables_get_a_policy():
    loaded = policies("name: p\ntablePattern: 'demo.sales.*'\n")
    assert loaded.effective_policy(table("demo.sales.orders")).name == "p"
    assert loaded.effective_policy(table("demo.ops.audit_log")) is None


def test_policy_gates_use_its_thresholds_and_schedules():
    loaded = policies("""
        name: p
        tablePattern: "*"
        rewriteDataFiles: {}
        rewriteDataFilesSchedule: {interval: PT1H, windowStart: "01:00", windowEnd: "02:00"}
        triggerConditions: {smallFileCountAbove: 1}
        healthThresholds: {smallFileSizeBytes: 10}
    """).get("p")
    from floe_dagster.core.facts.measurements import TableMetrics

    now = datetime(2026, 6, 10, 12, tzinfo=timezone.utc)
    metrics = TableMetrics("demo.s.t", None, "full", 0, data_file_count=2, data_file_sizes=(5, 500))
    assert loaded.evaluate_conditions(RDF, metrics, None, now).passed  # 5 < 10 bytes is small
    due = schedule_due(loaded.schedule(RDF), None, now)
    assert due.blocked == "window_closed" and due.next_eligible == now.replace(hour=1) + timedelta(days=1)


# -- validation ---------------------------------------------------------------------------------------


def test_unknown_field_suggests_the_closest_name():
    errors = errors_of("name: p\ntablePatern: '*'\nrewriteDataFile: {}\n")
    assert "<text>: policy 'p': tablePatern: unknown field; did you mean 'tablePattern'?" in errors
    assert "<text>: policy 'p': rewriteDataFile: unknown field; did you mean 'rewriteDataFiles'?" in errors
    errors = errors_of("name: p\ntablePattern: '*'\nrewriteDataFiles: {stratgy: SORT}\n")
    assert errors == ["<text>: policy 'p': rewriteDataFiles.stratgy: unknown field; did you mean 'strategy'?"]


@pytest.mark.parametrize("config, message", [
    ("rewriteDataFiles: {strategy: binpak}", "rewriteDataFiles.strategy: must be one of BINPACK, SORT, ZORDER, got 'binpak'"),
    ("rewriteDataFiles: {strategy: ZORDER}", "rewriteDataFiles.zOrderColumns: strategy ZORDER needs a non-empty list"),
    ("rewriteDataFiles: {strategy: ZORDER, zOrderColumns: []}", "needs a non-empty list"),
    ("rewriteDataFiles: {zOrderColumns: ['a,b']}", "zOrderColumns[0]: 'a,b' is not a column name"),  # ignored, checked
    ("rewriteDataFiles: {strategy: SORT, sortOrder: ['id SIDEWAYS']}", "sortOrder[0]: 'id SIDEWAYS' is not"),
    ("rewriteDataFiles: {strategy: SORT, sortOrder: ['id) ; DROP TABLE x; --']}",
     "sortOrder[0]: 'id) ; DROP TABLE x; --' is not 'column [ASC|DESC] [NULLS FIRST|NULLS LAST]'"),
    ("rewriteDataFiles: {strategy: ZORDER, zOrderColumns: ['a,b']}", "zOrderColumns[0]: 'a,b' is not a column name"),
    ("rewriteDataFiles: {rewriteAll: 1}", "rewriteDataFiles.rewriteAll: expected true or false, got 1"),
    ("rewritePositionDeleteFiles: {rewriteAll: maybe}", "rewriteAll: expected true or false, got 'maybe'"),
    ("rewriteDataFiles: {targetFileSizeBytes: 0}", "targetFileSizeBytes: must be at least 1"),
    ("rewriteDataFiles: {partialProgressEnabled: 'yes'}", "partialProgressEnabled: expected true or false"),
    ("rewriteDataFiles: {rewriteJobOrder: SIZE}", "rewriteJobOrder: must be one of NONE, BYTES_ASC"),
    ("rewriteDataFiles: {filter: ''}", "filter: must not be empty"),
    ("expireSnapshots: {retainLast: 0}", "expireSnapshots.retainLast: must be at least 1"),
    ("expireSnapshots: {maxSnapshotAge: 7d}", "maxSnapshotAge: '7d' is not an ISO-8601 duration"),
    ("expireSnapshots: {expireSnapshotId: latest}", "expireSnapshotId: expected a whole number"),
    ("orphanCleanup: {retentionPeriodInDays: 0.5}", "retentionPeriodInDays: must be at least 1 day"),
    ("orphanCleanup: {prefixMismatchMode: NEVER}", "prefixMismatchMode: must be one of ERROR, IGNORE, DELETE"),
    ("orphanCleanup: {equalSchemes: {s3a: 1}}", "equalSchemes.s3a: expected text"),
    ("rewriteManifests: {stagingLocation: ''}", "stagingLocation: must not be empty"),
    ("rewriteManifests: {rewriteIf: {length: big}}", "rewriteManifests.rewriteIf.length: expected a whole number"),
    ("rewriteManifests: {rewriteIf: {content: INDEX}}", "rewriteIf.content: must be one of DATA, DELETES"),
    ("rewriteManifests: {rewriteIf: {lenght: 1}}", "rewriteIf.lenght: unknown field; did you mean 'length'?"),
    ("rewriteManifests: {rewriteIf: {partitionSummaries: [{containsNull: no}]}}",
     "rewriteIf.partitionSummaries[0].containsNull: expected true or false"),
    ("rewriteManifests: {sortBy: x}", "sortBy: expected a list of text"),
    ("rewriteManifests: {sortBy: []}", "sortBy: must not be empty (leave it out instead)"),
    ("rewriteManifests: {specId: -1}", "specId: must be at least 0"),
    ("rewritePositionDeleteFiles: {filter: x}", "rewritePositionDeleteFiles.filter: unknown field"),
    ("rewriteDataFiles: []", "rewriteDataFiles: expected a mapping"),
    ("tags: {team: 1}", "tags.team: expected text"),
    ("tags: {'bad key!': x}", "tag key 'bad key!'"),
    ("tags: {" + "k" * 55 + ": x}", "must be 1-54 letters"),  # dagster/floe.tag.<key>: 63 after the '/'
    ("priority: 1.5", "priority: expected a whole number"),
    ("enabled: 'no'", "enabled: expected true or false"),
    ("triggerConditions: {triggerLogic: MAYBE}", "triggerConditions.triggerLogic: must be one of OR, AND"),
    ("healthThresholds: {fileCountCritical: 5}", "healthThresholds.fileCountWarning: the warning threshold"),
    ("rewriteDataFilesSchedule: {cronExpression: '0 0 2 ? * 6#3'}", "rewriteDataFilesSchedule.cronExpression"),
])
def test_field_errors_name_the_field(config, message):
    errors = errors_of(f"name: p\ntablePattern: '*'\n{config}\n")
    assert any(message in e and e.startswith("<text>: policy 'p': ") for e in errors), errors


def test_an_empty_config_is_valid():
    """Every kind but row retention, whose column and age have no default (its own test refuses {})."""
    loaded = policies("name: p\ntablePattern: '*'\n" + "".join(
        f"{op.policy_key}: {json.dumps(MINIMAL_CONFIGS.get(op, {}) if op is Operation.EXPIRE_ROWS else {})}\n"
        f"{op.schedule_key}: {{interval: 1}}\n" for op in Operation)).get("p")
    assert loaded.enabled_operations() == list(Operation)


def test_duplicate_names_across_files(tmp_path):
    write(tmp_path, "a.yaml", "name: nightly\ntablePattern: 'a.b'\n")
    write(tmp_path, "b.yaml", "- name: other\n  tablePattern: 'a.b'\n- name: nightly\n  tablePattern: 'c.d'\n")
    result = validate_policy_paths([tmp_path])
    assert result.errors == [f"{tmp_path / 'b.yaml'}: policy 'nightly': name: duplicate policy name, already "
                             f"defined in {tmp_path / 'a.yaml'}"]
    assert result.policies is None
    with pytest.raises(PolicyError) as caught:
        load_policies([tmp_path])
    assert caught.value.errors == result.errors and str(caught.value) == result.errors[0]


def test_yaml_syntax_error_gives_file_and_line(tmp_path):
    path = write(tmp_path, "bad.yaml", "name: x\ntablePattern: '*'\n  rewriteDataFiles: {}\n")
    (error,) = validate_policy_paths([path]).errors
    assert error.startswith(f"{path}: line 3") and "invalid YAML" in error


def test_duplicate_yaml_keys_are_errors(tmp_path):
    path = write(tmp_path, "dup.yaml", "name: x\ntablePattern: '*'\nname: y\n")
    (error,) = validate_policy_paths([path]).errors
    assert "line 3" in error and "duplicate key 'name'" in error


def test_json_syntax_error_gives_file_and_line(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{"name": "x",\n "tablePattern": }')
    (error,) = validate_policy_paths([path]).errors
    assert error.startswith(f"{path}: line 2") and "invalid JSON" in error


def test_missing_path_and_empty_folder(tmp_path):
    result = validate_policy_paths([tmp_path / "nope", tmp_path])
    assert result.errors == [f"{tmp_path / 'nope'}: no such file or folder"]
    assert result.warnings == [f"{tmp_path}: no policy files (*.yaml, *.yml, *.json) in this folder"]


def test_warnings():
    result_text = textwrap.dedent("""
        - name: both
          tablePattern: "*"
          rewriteDataFiles: {}
          rewriteDataFilesSchedule: {interval: 1, cronExpression: "0 2 * * *"}
        - name: every-tick
          rewriteDataFiles: {}
          rewriteDataFilesSchedule: {}
        - name: unscheduled
          tablePattern: "*"
          expireSnapshots: {}
    """)
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "p.yaml"
        path.write_text(result_text)
        result = validate_policy_paths([path])
    assert not result.errors
    text = "\n".join(result.warnings)
    assert "policy 'both': rewriteDataFilesSchedule: both interval and cronExpression are set" in text
    assert "policy 'every-tick': tablePattern: not set: the policy matches every table" in text
    assert "policy 'every-tick': rewriteDataFilesSchedule: has neither cronExpression nor interval" in text
    assert "policy 'unscheduled': expireSnapshots: has no expireSnapshotsSchedule" in text


def test_the_broken_policy_set_lists_every_error_with_file_policy_and_field():
    result = validate_policy_paths([BROKEN])
    a, b, c, d = (str(BROKEN / name) for name in ("a.yaml", "b.json", "c.yaml", "d.yaml"))
    expected = [
        f"{a}: policy 'nightly': tablePatern: unknown field; did you mean 'tablePattern'?",
        f"{a}: policy 'nightly': rewriteDataFiles.strategy: must be one of BINPACK, SORT, ZORDER, got 'binpak'",
        f"{a}: policy 'nightly': rewriteDataFiles.targetFileSizeBytes: expected a whole number, got '512MB'",
        f"{a}: policy 'nightly': rewriteDataFilesSchedule.cronExpression: '0 0 2 15W * ?': Quartz 'W'",
        f"{a}: policy 'nightly': rewriteDataFilesSchedule.windowStart: expected a time HH:mm",
        f"{a}: policy 'nightly': rewriteDataFilesSchedule.timezone: unknown time zone 'Mars/Olympus'",
        f"{a}: policy 'nightly': expireSnapshots.retainLast: must be at least 1, got 0",
        f"{a}: policy 'nightly': expireSnapshots.maxSnapshotAge: '7 days' is not an ISO-8601 duration",
        f"{a}: policy 'nightly': expireSnapshotsSchedule.interval: must be at least 1 day, got 0",
        f"{a}: policy 'nightly': orphanCleanup.retentionPeriodInDays: must be at least 1 day, got 0.5",
        f"{a}: policy 'nightly': orphanCleanup.prefixMismatchMode: must be one of ERROR, IGNORE, DELETE, got 'MAYBE'",
        f"{a}: policy 'nightly': orphanCleanupSchedule.allowedDays: unknown day 'FUNDAY'",
        f"{a}: policy 'nightly': rewriteManifests.sortBy: must not be empty (leave it out instead)",
        f"{a}: policy 'nightly': triggerConditions.smallFilePercentageAbove: must be at most 100, got 120",
        f"{a}: policy 'nightly': triggerConditions.perOperationMinIntervalMinutes.COMPACT_EVERYTHING: unknown "
        "operation 'COMPACT_EVERYTHING'",
        f"{a}: policy 'nightly': triggerConditions.triggerLogic: must be one of OR, AND, got 'XOR'",
        f"{a}: policy 'nightly': healthThresholds.smallFilePercentWarnng: unknown field; did you mean "
        "'smallFilePercentWarning'?",
        f"{a}: policy 'nightly': healthThresholds.fileCountWarning: the warning threshold 60000 is above the "
        "critical one",
        f"{b}: policy 'nightly': name: duplicate policy name, already defined in {a}",
        f"{b}: policy 'nightly': expireSnapshots.expireSnapshotId: expected a whole number, got '42'",
        f"{b}: policy 'regex-typo': tablePattern: regex 'demo\\\\.(sales' does not compile",
        f"{b}: policy 'regex-typo': priority: expected a whole number, got 'high'",
        f"{c}: line 5, column 23: invalid YAML: mapping values are not allowed here",
        f"{d}: policy #1: name: is required",
        f"{d}: policy #1: rewriteDataFiles.zOrderColumns: strategy ZORDER needs a non-empty list of columns",
        f"{d}: policy #1: rewriteDataFilesSchedule.cronExpression: '30 0 2 * * ?': the seconds field must be 0",
    ]
    assert len(result.errors) == len(expected), "\n".join(result.errors)
    for line, prefix in zip(result.errors, expected):
        assert line.startswith(prefix), (line, prefix)
    assert result.policies is None
    with pytest.raises(PolicyError) as caught:
        load_policies([BROKEN])
    assert caught.value.errors == result.errors


def test_the_example_policies_validate_cleanly():
    result = validate_policy_paths([EXAMPLES])
    assert result.errors == [] and result.warnings == []
    loaded = result.policies
    sales = loaded.effective_policy(table("demo.sales.orders"))
    # every operation but row retention, which deletes rows: its example (retention.yaml) matches no demo table
    assert sales.name == "sales-maintenance" and sales.enabled_operations() == [
        op for op in Operation if op is not Operation.EXPIRE_ROWS]
    assert loaded.get("archive-retention").config(Operation.EXPIRE_ROWS).max_age == "P90D"
    assert sales.config(EXPIRE).retain_last and sales.config(EXPIRE).max_snapshot_age
    ops = loaded.effective_policy(table("demo.ops.audit_log"))
    assert ops.name == "ops-maintenance" and ops.config(ORPHAN) == OrphanCleanupConfig(retention_period_in_days=3)
    covered = {op for policy in loaded for op in policy.configured_operations()}
    assert covered == set(Operation)


def test_policy_sets_reloaded_each_tick_answer_by_their_own_precedence():
    """The sensor loads a new PolicySet every tick and sets with the same patterns share their matches;
    a change of priority (same names, same patterns) must still change the winner, and back."""
    def policy_set(broad_priority: int) -> PolicySet:
        return parse_policies_text(textwrap.dedent(f"""
            - name: broad
              tablePattern: "demo.*.*"
              priority: {broad_priority}
              rewriteDataFiles: {{}}
            - name: sales
              tablePattern: "demo.sales.*"
              rewriteDataFiles: {{}}
            """))
    orders, events = TableName("demo", ("sales",), "orders"), TableName("demo", ("web",), "events")
    assert policy_set(1).effective_policy(orders).name == "broad"
    assert policy_set(0).effective_policy(orders).name == "sales"
    again = policy_set(1)
    assert again.effective_policy(orders).name == "broad" and again.effective_policy(orders) is again.get("broad")
    assert policy_set(0).effective_policy(events).name == "broad"
    without_broad = parse_policies_text('- {name: sales, tablePattern: "demo.sales.*", rewriteDataFiles: {}}')
    assert without_broad.effective_policy(events) is None


def test_iso_durations():
    assert parse_iso_duration("P7D").days == 7
    assert parse_iso_duration("PT6H").total_seconds() == 6 * 3600
    assert parse_iso_duration("PT0S").total_seconds() == 0
    assert parse_iso_duration("P1DT12H").total_seconds() == 36 * 3600
    for bad in ("7 days", "P", "PT", "P1M", "P1Y", "P1W"):
        with pytest.raises(ValueError, match="ISO-8601"):
            parse_iso_duration(bad)
