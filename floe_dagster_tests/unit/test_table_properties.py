"""Declared table properties (``tableProperties``, APPLY_TABLE_PROPERTIES): Iceberg's names only, values
checked, in both policy formats; the drift; the due rule (drift is the operation's condition) with an
injected clock; the metadata.json counts and their health issue; the statement's quoting."""

from __future__ import annotations

import textwrap
from dataclasses import replace
from datetime import timedelta

import pytest

from floe_dagster.core.facts.health_assessment import IssueType, Severity, assess_health
from floe_dagster.core.policies.health_record import declared_properties_view
from floe_dagster.core.runs.history import OperationHistory
from floe_dagster.core.operation_kinds.apply_table_properties import TablePropertiesConfig
from floe_dagster.core.operations import Operation
from floe_dagster.core.plan.planner import SchedulerSettings
from floe_dagster.core.policies.policy import parse_policies_text, validate_policy_paths
from floe_dagster.core.facts.table_properties import PROPERTIES, PropertyDrift, is_table_property, property_drift
from floe_dagster.core.basics.tables import TableName
from floe_dagster.iceberg.metadata_reduction import metadata_files_written
from floe_dagster.errors import ProcedureOptionError
from floe_dagster.spark.operation_steps import build_procedure_call
from floe_dagster.spark.operation_steps.apply_table_properties import set_properties_sql
from floe_dagster_tests.unit.test_planner import A, NOW, metrics, run

APPLY = Operation.APPLY_TABLE_PROPERTIES
DAC = "write.metadata.delete-after-commit.enabled"


def api_policy(properties: str, schedule: str = "{}", extra: str = "") -> str:
    return textwrap.dedent(f"""
        - name: props
          tablePattern: "demo.sales.*"
          tableProperties: {properties}
          tablePropertiesSchedule: {schedule}
        """) + textwrap.indent(textwrap.dedent(extra), "  ")


# -- names and values -----------------------------------------------------------------------------------


def test_an_unknown_property_is_refused_naming_file_policy_and_key_in_both_formats(tmp_path):
    api = tmp_path / "api.yaml"
    api.write_text(api_policy("{write.metadata.delete-after-commit: true, write.target-file-size-bytes: 1024}"))
    kebab = tmp_path / "kebab.yaml"
    kebab.write_text(textwrap.dedent("""
        policies:
          - name: loader-props
            pattern: "demo.*"
            table-properties:
              write.target-file-size-byte: 1024
            table-properties-schedule: {interval-hours: 1}
        """))
    result = validate_policy_paths([api, kebab])
    assert result.errors == [
        f"{api}: policy 'props': tableProperties.write.metadata.delete-after-commit: 'write.metadata.delete-after-commit' "
        "is not an Iceberg table property; did you mean 'write.metadata.delete-after-commit.enabled'? "
        "(docs/policies.md, \"Table properties\", lists the names and column families accepted)",
        f"{kebab}: policy 'loader-props': table-properties.write.target-file-size-byte: 'write.target-file-size-byte' "
        "is not an Iceberg table property; did you mean 'write.target-file-size-bytes'? "
        "(docs/policies.md, \"Table properties\", lists the names and column families accepted)",
    ]


def test_the_loader_format_keeps_property_names_as_written():
    policies = parse_policies_text(textwrap.dedent("""
        policies:
          - name: loader-props
            pattern: "demo.*"
            table-properties: {write.delete.mode: merge-on-read, write.metadata.previous-versions-max: 10}
            table-properties-schedule: {interval-hours: 1}
        """))
    policy = policies.get("loader-props")
    assert policy.config(APPLY) == TablePropertiesConfig(
        (("write.delete.mode", "merge-on-read"), ("write.metadata.previous-versions-max", "10")))
    assert policy.enabled_operations() == [APPLY]
    assert policy.to_json()["tableProperties"] == {"write.delete.mode": "merge-on-read",
                                                    "write.metadata.previous-versions-max": "10"}


@pytest.mark.parametrize("key, value, message", [
    ("format-version", 2, "'format-version' is reserved by Iceberg"),
    ("current-snapshot-id", 1, "'current-snapshot-id' is reserved by Iceberg"),
    (DAC, "yes", "expected true or false, got 'yes' (Iceberg reads anything but true as false)"),
    ("write.delete.mode", "mor", "expected one of copy-on-write, merge-on-read, got 'mor'"),
    ("write.merge.mode", True, "expected one of copy-on-write, merge-on-read, got true"),
    ("write.metadata.previous-versions-max", 0, "expected a whole number from 1 to 2147483647, got 0"),
    ("history.expire.min-snapshots-to-keep", "-3", "expected a whole number from 1 to 2147483647, got '-3'"),
    ("write.metadata.previous-versions-max", 2**31, "got 2147483648 (Iceberg reads it as a Java int)"),
    ("write.target-file-size-bytes", 1.5, "expected a whole number from 1 to 9223372036854775807, got 1.5"),
    ("history.expire.max-snapshot-age-ms", 2**63, "expected a whole number from 1 to 9223372036854775807"),
    ("write.target-file-size-bytes", True, "got true"),
    ("commit.retry.num-retries", "²", "expected a whole number from 0 to 2147483647, got '²'"),
    ("write.target-file-size-bytes", [1], "expected a value (text, a number or true/false), got a list"),
    ("write.metadata.metrics.column.", "full", "is not an Iceberg table property"),
    ("read.anything", "x", "is not an Iceberg table property"),
    ("comment", "a\x00b", "must not contain a NUL character"),
])
def test_bad_names_and_values_are_refused_with_the_key(tmp_path, key, value, message):
    import json
    path = tmp_path / "p.yaml"
    path.write_text(api_policy(json.dumps({key: value})))
    errors = validate_policy_paths([path]).errors
    assert len(errors) == 1 and errors[0].startswith(f"{path}: policy 'props': tableProperties.{key}: ")
    assert message in errors[0]


def test_values_are_kept_as_iceberg_stores_them_and_column_families_are_accepted():
    policy = parse_policies_text(api_policy(
        "{write.metadata.delete-after-commit.enabled: TRUE, write.delete.mode: Merge-On-Read, "
        "write.metadata.previous-versions-max: 20, write.metadata.metrics.column.id: full, "
        "write.parquet.bloom-filter-enabled.column.id: true, write.parquet.bloom-filter-fpp.column.id: 0.01, "
        "commit.retry.num-retries: 0, comment: nightly}")).get("props")
    assert dict(policy.config(APPLY).properties) == {
        DAC: "true", "write.delete.mode": "merge-on-read", "write.metadata.previous-versions-max": "20",
        "write.metadata.metrics.column.id": "full", "write.parquet.bloom-filter-enabled.column.id": "true",
        "write.parquet.bloom-filter-fpp.column.id": "0.01", "commit.retry.num-retries": "0", "comment": "nightly"}


def test_the_allow_list_is_icebergs():
    for name in ("write.metadata.delete-after-commit.enabled", "write.metadata.previous-versions-max",
                 "write.target-file-size-bytes", "history.expire.max-snapshot-age-ms",
                 "history.expire.min-snapshots-to-keep", "write.delete.mode", "write.update.mode", "write.merge.mode"):
        assert is_table_property(name)
    assert not is_table_property("format-version") and "uuid" not in PROPERTIES


@pytest.mark.parametrize("key", ["write.parquet.bloom-filter-adaptive-enabled",
                                 "write.parquet.row-group-size-track-uncompressed",
                                 "write.parquet.dict-encoding-enabled.column.id"])
def test_iceberg_1_12s_parquet_properties_are_known_and_read_as_booleans(tmp_path, key):
    """The TableProperties Iceberg 1.12 added (javap -constants on its runtime jar), the default release:
    a policy may declare them, and a value Iceberg would read as false is refused."""
    import json
    assert dict(parse_policies_text(api_policy(json.dumps({key: True}))).get("props").config(APPLY).properties) == {
        key: "true"}
    path = tmp_path / "p.yaml"
    path.write_text(api_policy(json.dumps({key: "yes"})))
    assert "expected true or false, got 'yes'" in validate_policy_paths([path]).errors[0]


def test_an_empty_declaration_is_a_warning_and_no_schedule_warning_for_a_condition_only_rule(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(api_policy("{}"))
    result = validate_policy_paths([path])
    assert result.errors == []
    assert result.warnings == [f"{path}: policy 'props': tableProperties: declares no properties: "
                               "APPLY_TABLE_PROPERTIES has nothing to apply"]


# -- drift ------------------------------------------------------------------------------------------------


def test_drift_lists_only_declared_keys_that_differ_as_iceberg_reads_them():
    declared = ((DAC, "true"), ("write.delete.mode", "merge-on-read"), ("write.metadata.previous-versions-max", "5"))
    current = {DAC: "TRUE", "write.delete.mode": "copy-on-write", "commit.retry.num-retries": "7"}
    assert property_drift(declared, current) == (
        PropertyDrift("write.delete.mode", "merge-on-read", "copy-on-write"),
        PropertyDrift("write.metadata.previous-versions-max", "5", None),
    )
    assert property_drift(declared, {DAC: "true", "write.delete.mode": "MERGE-ON-READ",
                                     "write.metadata.previous-versions-max": "5"}) == ()
    # a number is compared as written: Iceberg stores text
    assert property_drift((("write.target-file-size-bytes", "1024"),), {"write.target-file-size-bytes": "01024"})


def test_the_health_record_shows_declared_values_and_drift():
    policy = parse_policies_text(api_policy(f"{{{DAC}: true, write.delete.mode: merge-on-read}}")).get("props")
    view = declared_properties_view(policy, metrics(A, properties={"write.delete.mode": "merge-on-read"}))
    assert view == {"declared": {DAC: "true", "write.delete.mode": "merge-on-read"},
                    "drift": [{"key": DAC, "declared": "true", "current": None}]}
    assert declared_properties_view(None, metrics(A)) is None


# -- the due rule (injected clock: NOW) ---------------------------------------------------------------


def decision_of(policy_text: str, **kwargs):
    result = run(parse_policies_text(policy_text), **kwargs)
    return next(d for d in result.decisions if d.table == A and d.operation is APPLY)


def test_due_while_the_table_drifts_and_not_due_without_drift():
    text = api_policy(f"{{{DAC}: true}}")
    drifting = decision_of(text)
    assert drifting.decision == "run" and drifting.trigger == "condition"
    assert drifting.reasons[0].startswith("condition: ")
    assert drifting.condition_result.drift == (PropertyDrift(DAC, "true", None),)
    settled = decision_of(text, health={A: metrics(A, properties={DAC: "true"})})
    assert settled.decision == "skip"
    assert settled.reasons == ("no_drift: the table has the 1 declared table properties",)
    assert settled.next_eligible == NOW + timedelta(seconds=60)


def test_without_health_it_waits_and_the_thresholds_and_critical_force_do_not_apply():
    text = api_policy(f"{{{DAC}: true}}", extra="""
        triggerConditions: {snapshotCountAbove: 1000, criticalPipeline: true, criticalPipelineMaxDelayMinutes: 1}
        """)
    assert decision_of(text, health={A: None}).reasons[0].startswith("no_health: ")
    # the snapshot threshold is unmet, yet the drift makes it due
    assert decision_of(text).decision == "run"
    # a deadline long passed does not force a run without drift
    past = {(A.qualified, APPLY): OperationHistory(last_success_start=NOW - timedelta(days=2))}
    settled = decision_of(text, health={A: metrics(A, properties={DAC: "true"})}, history=past)
    assert settled.reasons[0].startswith("no_drift")


def test_the_usual_gates_hold_min_interval_window_backoff_in_flight():
    text = api_policy(f"{{{DAC}: true}}", extra="triggerConditions: {minIntervalMinutes: 30}\n")
    recent = {(A.qualified, APPLY): OperationHistory(last_success_start=NOW - timedelta(minutes=10))}
    assert decision_of(text, history=recent).reasons[0].startswith("min_interval: ")
    failed = {(A.qualified, APPLY): OperationHistory(consecutive_failures=1, last_failure_at=NOW - timedelta(minutes=1))}
    assert decision_of(text, history=failed).reasons[0].startswith("failure_backoff: ")
    assert decision_of(text, in_flight=((A.qualified, APPLY),)).reasons[0].startswith("in_flight: ")
    closed = api_policy(f"{{{DAC}: true}}", schedule='{windowStart: "01:00", windowEnd: "02:00"}')
    assert decision_of(closed).reasons[0].startswith("window_closed")
    # with condition-based triggering off, the drift still decides (it is the operation's own condition)
    off = SchedulerSettings(condition_based_triggering_enabled=False)
    assert decision_of(text, history=recent, limits=off).decision == "run"
    assert decision_of(text, health={A: metrics(A, properties={DAC: "true"})}, limits=off).reasons[0] \
        .startswith("no_drift")


def test_it_takes_no_byte_budget():
    result = run(parse_policies_text(api_policy(f"{{{DAC}: true}}")), limits=SchedulerSettings(max_bytes_per_hour=1),
                 bytes_last_hour=10**9, estimate=lambda *args: 10**12)
    assert [d.operation for d in result.admitted] == [APPLY] and result.admitted[0].estimated_bytes == 0


# -- metadata.json files ------------------------------------------------------------------------------


@pytest.mark.parametrize("location, written", [
    ("file:///w/t/metadata/00000-0b3c.metadata.json", 1),
    ("s3://b/t/metadata/01234-0b3c-44.metadata.json", 1235),
    ("file:/w/t/metadata/v7.metadata.json", 7),
    ("file:/w/t/metadata/00012-0b3c.gz.metadata.json", 13),
    ("file:/w/t/metadata/snapshot.json", None),
    (None, None),
])
def test_metadata_files_written_come_from_the_current_file_name(location, written):
    assert metadata_files_written(location) == written


def test_many_metadata_files_are_an_issue_only_without_delete_after_commit():
    def issue(**changes):
        found = [i for i in assess_health(metrics(A, **changes), None, NOW).issues
                 if i.type is IssueType.TOO_MANY_METADATA_FILES]
        return found[0] if found else None

    assert issue(metadata_files_tracked=101, metadata_files_written=999) is None
    warning = issue(metadata_files_tracked=101, metadata_files_written=1000)
    assert warning.severity is Severity.WARNING and warning.measured == 1000 and warning.threshold == 1000
    assert issue(metadata_files_tracked=101, metadata_files_written=12_000).severity is Severity.CRITICAL
    assert issue(metadata_files_tracked=2000, metadata_files_written=None).measured == 2000
    assert issue(metadata_files_written=5000, properties={DAC: "true"}) is None
    derived = assess_health(metrics(A, metadata_files_tracked=3, metadata_files_written=40), None, NOW).derived
    assert derived["metadata_file_count"] == 40 and derived["metadata_delete_after_commit"] is False


# -- the statement ----------------------------------------------------------------------------------------


def test_the_statement_sets_exactly_the_given_properties_with_safe_literals():
    table = TableName("demo", ("sales",), "o`rders")
    sql = set_properties_sql(table, {"comment": "it's a \\ test", DAC: "true"})
    assert sql == ("ALTER TABLE `demo`.`sales`.`o``rders` SET TBLPROPERTIES "
                   "('comment' = 'it\\'s a \\\\ test', 'write.metadata.delete-after-commit.enabled' = 'true')")
    with pytest.raises(ProcedureOptionError, match="tableProperties: no table properties to set"):
        set_properties_sql(table, {})
    config = replace(TablePropertiesConfig(), properties=((DAC, "true"),))
    assert config.to_json() == {DAC: "true"}
    call = build_procedure_call(APPLY, table, config, NOW)  # what the run sends when every key drifts
    assert call.sql == f"ALTER TABLE `demo`.`sales`.`o``rders` SET TBLPROPERTIES ('{DAC}' = 'true')"


def test_dagits_health_observation_plots_metadata_files_and_counts_the_drift():
    from floe_dagster.core.policies.health_record import health_record
    from floe_dagster.defs.health_events import observation_metadata

    policy = parse_policies_text(api_policy(f"{{{DAC}: true, write.delete.mode: merge-on-read}}")).get("props")
    table = metrics(A, metadata_files_tracked=101, metadata_files_written=1500,
                    properties={"write.delete.mode": "merge-on-read"})
    record = health_record(assess_health(table, policy.health_thresholds, NOW), policy, {}, NOW)
    observed = observation_metadata(record)
    assert observed["metadata_file_count"].value == 1500
    assert observed["property_drift"].value == 1
    assert observed["table_properties"].value["drift"] == [{"key": DAC, "declared": "true", "current": None}]
    assert [i["type"] for i in record["issues"]] == ["TOO_MANY_METADATA_FILES"]


def test_the_assets_description_says_it_runs_on_drift():
    from floe_dagster.defs.asset_policy import operation_rule

    policy = parse_policies_text(api_policy(f"{{{DAC}: true}}", extra="triggerConditions: {snapshotCountAbove: 5}\n"))
    assert operation_rule(policy.get("props"), APPLY, {}) == \
        "when the table drifts from the declared properties (debt-score sensor)"


def test_a_drifts_words_are_kept_per_name_and_values_and_mask_a_secret_every_time():
    """The drift gate's words are kept per (name, declared, current): the same drift tells the same words, a
    secret-named property's values stay masked when told again, another value is told anew."""
    from floe_dagster.core.basics.secrets import MASK
    from floe_dagster.core.facts.table_properties import PropertyDrift

    plain = PropertyDrift("write.metadata.previous-versions-max", "20", None)
    told = "write.metadata.previous-versions-max: declared '20', table has unset"
    assert plain.describe() == plain.describe() == told
    assert PropertyDrift("write.metadata.previous-versions-max", "20", "5").describe().endswith("table has '5'")
    secret = PropertyDrift("s3.secret-access-key", "hunter2", "other")
    for _ in range(2):
        told = secret.describe()
        assert "hunter2" not in told and "other" not in told and MASK in told
