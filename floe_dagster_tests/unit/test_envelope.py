"""The safety envelope's pure rules (core/policies/envelope.py): locations normalised and compared segment by
segment, attacks that try to climb out of a table's location, the declared-property denylist and the
floe.yaml setting that allows a key, the checks made when a policy is read (both formats), and the
verdict a run, ``plan`` and ``explain`` show. The same rules through the real stack (HTTP, validate,
Spark): integration/test_envelope.py."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings as hypothesis_settings, strategies as st

from floe_dagster.core.policies.envelope import (
    REFUSED_PROPERTIES,
    EnvelopeSettings,
    check_operation,
    joined,
    parse_location,
    property_refusal,
    relative_segments,
    single_table,
    storage_refusal,
)
from floe_dagster.core.operation_kinds.apply_table_properties import TablePropertiesConfig
from floe_dagster.core.operation_kinds.expire_snapshots import ExpireSnapshotsConfig
from floe_dagster.core.operation_kinds.orphan_cleanup import OrphanCleanupConfig
from floe_dagster.core.operation_kinds.rewrite_manifests import RewriteManifestsConfig
from floe_dagster.core.operations import Operation
from floe_dagster.core.basics.patterns import TablePattern
from floe_dagster.core.policies.policy import PolicyError, parse_policies_text, validate_policy_paths
from floe_dagster.core.facts.table_properties import COLUMN_FAMILIES, PROPERTIES
from floe_dagster.core.basics.tables import TableName
from floe_dagster.errors import SettingsError
from floe_dagster.settings import settings_from_mapping

ORPHAN, PROPS = Operation.ORPHAN_CLEANUP, Operation.APPLY_TABLE_PROPERTIES
TABLE = "file:/wh/sales/orders"  # as Spark's JDBC catalog spells a table location
ISSUE_KEYS = ("write.location-provider.impl", "write.data.path", "write.metadata.path", "encryption.key-id")


def orphan_verdict(location: str, table_location: str = TABLE):
    return check_operation("p", ORPHAN, OrphanCleanupConfig(location=location), table_location,
                           table="lake.sales.orders")


# -- normalising ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["file:/wh/t", "file:///wh/t", "file://localhost/wh/t", "/wh/t", "FILE:/wh/t/",
                                  "file:/wh//t", "file:/wh/./t", "file:/wh/x/../t", " file:/wh/t/ "])
def test_every_local_spelling_is_one_location(text):
    assert parse_location(text) == parse_location("file:/wh/t")


@pytest.mark.parametrize("text", ["s3://lake/wh/t", "s3a://lake/wh/t", "s3n://lake/wh/t", "S3A://LAKE/wh/t/"])
def test_s3a_and_s3n_are_s3_as_iceberg_compares_them_and_buckets_have_no_case(text):
    assert parse_location(text) == parse_location("s3://lake/wh/t")


@pytest.mark.parametrize("outside", [
    "s3://lake/wh/t2",  # a prefix sibling: never a match on raw text
    "s3://lake/wh",  # the parent
    "s3://other/wh/t",  # another bucket
    "gs://lake/wh/t",  # another scheme
    "s3://lake/WH/t",  # keys have case
    "s3:/lake/wh/t",  # no authority
    "file:/lake/wh/t",
])
def test_inside_is_segment_by_segment_on_the_same_store(outside):
    root = parse_location("s3://lake/wh/t")
    assert root.contains(parse_location("s3://lake/wh/t/data/x"))
    assert root.contains(parse_location("s3a://lake/wh/t"))
    assert not root.contains(parse_location(outside))


def test_hdfs_ports_are_authorities_of_their_own():
    assert not parse_location("hdfs://nn:8020/wh/t").contains(parse_location("hdfs://nn/wh/t/data"))


@pytest.mark.parametrize("text, segments", [("data", ("data",)), ("./data/", ("data",)), ("data//x/.", ("data", "x")),
                                            ("data/x/../y", ("data", "y")), (".", ()), ("a%20b", ("a%20b",))])
def test_relative_locations_are_folders_of_the_table(text, segments):
    assert relative_segments(text) == segments


@pytest.mark.parametrize("table, segments, spelled", [
    ("file:/wh/t", ("data",), "file:/wh/t/data"), ("file:///wh/t/", ("data", "x"), "file:///wh/t/data/x"),
    ("s3://b", ("data",), "s3://b/data"), ("s3://b/wh/t", (), "s3://b/wh/t"), ("file:///", ("x",), "file:///x"),
])
def test_the_location_a_run_uses_is_spelled_from_the_tables(table, segments, spelled):
    assert joined(table, segments) == spelled


# -- attacks ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("location, why", [
    ("file:/wh", "lies outside the location of table 'lake.sales.orders', 'file:/wh/sales/orders'"),  # warehouse root
    ("/wh/sales", "lies outside"),
    ("file:///wh/sales/orders2", "lies outside"),  # a prefix sibling
    ("file:/wh/sales/orders/../customers", "lies outside"),
    ("file:/wh/sales/orders/data/../../../hr/orders", "lies outside"),
    ("/../../wh/sales/orders", "climbs above the root"),
    ("../customers", "climbs above the table's location"),
    ("data/../../customers", "climbs above the table's location"),
    ("data/%2e%2e/%2E%2e/customers", "hides '..' as '%2e%2e'"),
    ("%2e%2e", "hides '..'"),
    ("data%2f..%2f..", "hides 'data/../..' as 'data%2f..%2f..'"),
    ("//wh/sales/orders", "starts with '//'"),
    ("s3://wh/sales/orders", "lies outside"),
    ("hdfs://nn/wh/sales/orders", "lies outside"),
    ("file://otherhost/wh/sales/orders", "lies outside"),
    ("data\\..\\..", "backslash"),
    ("data/\x00x", "control character"),
])
def test_a_location_outside_the_table_is_refused_naming_the_field_and_both_locations(location, why):
    verdict = orphan_verdict(location)
    assert not verdict.ok and verdict.status == "refused" and verdict.config is None
    (refusal,) = verdict.refusals
    assert refusal.field == "orphanCleanup.location"
    assert why in refusal.why, refusal.why
    message = verdict.message()
    assert message.startswith("policy 'p': ORPHAN_CLEANUP on table 'lake.sales.orders' refused by the safety "
                              "envelope before any engine call: orphanCleanup.location: ")
    if "lies outside" in why:
        assert repr(location) in message and "'file:/wh/sales/orders'" in message
        assert "delete every file under it that this table does not reference" in message


@pytest.mark.parametrize("location, used", [
    ("data", "file:/wh/sales/orders/data"),
    ("./data/", "file:/wh/sales/orders/data"),
    ("FILE:///wh/sales/orders/data/", "file:/wh/sales/orders/data"),
    ("/wh/sales/orders", "file:/wh/sales/orders"),
    ("file:/wh/sales/../sales/orders/metadata", "file:/wh/sales/orders/metadata"),
    ("file:/wh/sales/orders//data", "file:/wh/sales/orders/data"),
])
def test_a_location_inside_is_used_as_spelled_from_the_tables(location, used):
    verdict = orphan_verdict(location)
    assert verdict.ok and verdict.describe() == "ok"
    assert verdict.config == OrphanCleanupConfig(location=used)


_NAMES = st.sampled_from(["a", "b", "orders", "orders2", "x"])
_PARTS = st.lists(st.one_of(_NAMES, st.sampled_from(["..", ".", ""])), max_size=8)


def _normalised(start: list[str], parts: list[str], climb_out_refused: bool) -> list[str] | None:
    """The reference walk: None when a '..' climbs above where it may."""
    stack = list(start)
    for part in parts:
        if part == "..":
            if not stack or (climb_out_refused and len(stack) <= len(start)):
                return None
            stack.pop()
        elif part not in ("", "."):
            stack.append(part)
    return stack


@hypothesis_settings(max_examples=400, deadline=None)
@given(root=st.lists(_NAMES, min_size=1, max_size=3), parts=_PARTS)
def test_an_absolute_path_built_with_dots_is_inside_exactly_when_it_normalises_inside(root, parts):
    table = "file:/" + "/".join(root)
    verdict = orphan_verdict("file:/" + "/".join([*root, *parts]), table)
    walked = _normalised([], [*root, *parts], climb_out_refused=False)
    inside = walked is not None and walked[:len(root)] == root
    assert verdict.ok is inside
    if verdict.ok:  # and what the run then lists lies inside the table
        assert parse_location(table).contains(parse_location(verdict.config.location))


@hypothesis_settings(max_examples=400, deadline=None)
@given(root=st.lists(_NAMES, min_size=1, max_size=3), parts=_PARTS)
def test_a_relative_path_that_climbs_out_is_never_used(root, parts):
    table = "s3://lake/" + "/".join(root)
    verdict = orphan_verdict("./" + "/".join(parts), table)  # './': relative even when parts start empty
    assert verdict.ok is (_normalised(root, parts, climb_out_refused=True) is not None)
    if verdict.ok:
        assert parse_location(table).contains(parse_location(verdict.config.location))


def test_unknown_table_location_leaves_an_absolute_location_unchecked_and_a_run_refused():
    verdict = check_operation("p", ORPHAN, OrphanCleanupConfig(location="s3://b/t"), None)
    assert verdict.status == "unchecked" and not verdict.ok  # a run never goes ahead on it
    assert verdict.describe() == ("not checked yet: orphanCleanup.location is absolute and the table's location is "
                                  "not known yet")
    relative = check_operation("p", ORPHAN, OrphanCleanupConfig(location="data"), None)
    assert relative.ok  # inside whatever the table's location is


def test_the_staging_location_is_withheld_from_the_engine():
    config = RewriteManifestsConfig(spec_id=0, staging_location="file:/wh/hr/orders")
    verdict = check_operation("p", Operation.REWRITE_MANIFESTS, config, TABLE)
    assert verdict.ok and verdict.config == RewriteManifestsConfig(spec_id=0)


def test_an_operation_without_locations_is_ok_and_unchanged():
    config = ExpireSnapshotsConfig(retain_last=2)
    verdict = check_operation("p", Operation.EXPIRE_SNAPSHOTS, config, None)
    assert verdict.ok and verdict.config is config
    assert verdict.to_json() == {"status": "ok", "policy": "p", "operation": "EXPIRE_SNAPSHOTS", "refusals": [],
                                 "detail": "ok"}


# -- table properties -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("key", [*ISSUE_KEYS, *REFUSED_PROPERTIES, "encryption.data-key-length", "gc.enabled",
                                 "write.object-storage.enabled", "some.catalog.impl"])
def test_properties_that_reach_beyond_maintenance_are_refused_unless_allowed(key):
    why = property_refusal(key)
    assert why and why.startswith(f"'{key}' is refused by the safety envelope: it ")
    assert "envelope.allowed-table-properties" in why
    assert property_refusal(key, allowed=[key]) is None
    assert property_refusal(key, allowed=["write.data.path2"]) is not None  # named exactly


@pytest.mark.parametrize("key", ["write.metadata.delete-after-commit.enabled", "write.metadata.previous-versions-max",
                                 "write.target-file-size-bytes", "history.expire.max-snapshot-age-ms", "comment"])
def test_maintenance_properties_pass(key):
    assert property_refusal(key) is None


def test_a_refused_property_never_passes_the_run_check():
    config = TablePropertiesConfig((("write.data.path", "/elsewhere"), ("comment", "x")))
    verdict = check_operation("p", PROPS, config, None, table="lake.sales.orders")
    assert [r.field for r in verdict.refusals] == ["tableProperties.write.data.path"] and verdict.config is None
    assert check_operation("p", PROPS, config, None, allowed_properties=("write.data.path",)).ok


def test_the_setting_names_only_keys_the_envelope_refuses():
    allowed = settings_from_mapping(
        {"envelope": {"allowed-table-properties": ["write.data.path", "encryption.key-id"]}}, Path("."), "floe.yaml", {})
    assert allowed.envelope == EnvelopeSettings(("write.data.path", "encryption.key-id"))
    with pytest.raises(SettingsError, match="envelope.allowed-table-properties: 'write.data-path': not refused"):
        settings_from_mapping({"envelope": {"allowed-table-properties": ["write.data-path"]}}, Path("."), "x", {})


# -- when a policy is read ---------------------------------------------------------------------------------


API_POLICY = """
name: p
tablePattern: '{pattern}'
orphanCleanup: {{location: '{location}', retentionPeriodInDays: 1}}
"""
LOADER_POLICY = """
policies:
  - name: p
    pattern: '{pattern}'
    orphan-cleanup: {{location: '{location}', retention-period-days: 1}}
"""


@pytest.mark.parametrize("text, field", [(API_POLICY, "orphanCleanup.location"),
                                         (LOADER_POLICY, "orphan-cleanup.location")])
@pytest.mark.parametrize("pattern", ["lake.*.orders", "orders", "*", "/lake\\.hr\\..*/", "lake.hr.ord?rs", "hr.*"])
def test_an_absolute_location_with_a_pattern_of_several_tables_is_refused_in_both_formats(tmp_path, text, field,
                                                                                         pattern):
    (tmp_path / "p.yaml").write_text(textwrap.dedent(text.format(pattern=pattern, location="s3://lake/wh")))
    errors = validate_policy_paths([tmp_path / "p.yaml"]).errors
    assert len(errors) == 1 and f"policy 'p': {field}: 's3://lake/wh' is absolute, and " in errors[0], errors
    assert "write it relative to the table's location (e.g. 'data'" in errors[0]


@pytest.mark.parametrize("text", [API_POLICY, LOADER_POLICY])
@pytest.mark.parametrize("pattern, location", [("lake.hr.orders", "s3://lake/wh"), ("hr.orders", "/wh/hr/orders"),
                                               ("lake.*.orders", "data"), ("*", "data/../metadata")])
def test_a_relative_location_or_an_absolute_one_for_one_table_loads(tmp_path, text, pattern, location):
    (tmp_path / "p.yaml").write_text(textwrap.dedent(text.format(pattern=pattern, location=location)))
    assert validate_policy_paths([tmp_path / "p.yaml"]).errors == []


@pytest.mark.parametrize("location", ["../x", "data/../../x", "%2e%2e/x", "//wh/x", "data\\..\\x"])
def test_a_location_that_cannot_stay_inside_is_refused_whatever_the_pattern(location):
    with pytest.raises(PolicyError, match="orphanCleanup.location: "):
        parse_policies_text(API_POLICY.format(pattern="lake.hr.orders", location=location))


PROPERTY_POLICIES = {
    "api": ("name: p\ntablePattern: lake.hr.orders\ntableProperties: {{{key}: '{value}'}}\n", "tableProperties"),
    "loader": ("policies:\n  - name: p\n    pattern: lake.hr.orders\n    table-properties: {{{key}: '{value}'}}\n",
               "table-properties"),
}


@pytest.mark.parametrize("form", PROPERTY_POLICIES)
@pytest.mark.parametrize("key, value", [("write.location-provider.impl", "evil.Provider"),
                                        ("write.data.path", "s3://other/x"), ("write.metadata.path", "s3://other/m"),
                                        ("encryption.key-id", "k1")])
def test_the_issues_four_keys_are_refused_in_both_formats_and_allowed_by_the_setting(tmp_path, form, key, value):
    text, section = PROPERTY_POLICIES[form]
    (tmp_path / "p.yaml").write_text(text.format(key=key, value=value))
    errors = validate_policy_paths([tmp_path / "p.yaml"]).errors
    assert len(errors) == 1 and f"policy 'p': {section}.{key}: '{key}' is refused by the safety envelope" in errors[0]
    allowed = validate_policy_paths([tmp_path / "p.yaml"], allowed_properties=[key])
    assert allowed.errors == []
    config = allowed.policies.get("p").config(PROPS)
    assert config.properties == ((key, value),)


STORAGE_KEYS = [("py-io-impl", "evil.RecordingFileIO"), ("io-impl", "evil.JavaIO"),
                ("s3.endpoint", "http://127.0.0.1:1"), ("s3.proxy-uri", "http://proxy:3128"),
                ("s3.signer.uri", "http://signer"), ("s3.retry-strategy-impl", "evil.Retry"),
                ("client.region", "eu-west-9"), ("gcs.service.host", "http://gcs"), ("adls.account-host", "evil"),
                ("hdfs.host", "evil"), ("oss.endpoint", "http://oss"), ("header.Authorization", "x"),
                ("http-client.type", "apache"), ("pyarrow.use-large-types-on-read", "true")]


@pytest.mark.parametrize("form", PROPERTY_POLICIES)
@pytest.mark.parametrize("key, value", STORAGE_KEYS)
def test_a_key_that_steers_storage_is_refused_in_both_formats_whatever_floe_yaml_allows(tmp_path, form, key, value):
    """A policy can never make a table's FileIO load a class or reach another endpoint, proxy or signer."""
    text, section = PROPERTY_POLICIES[form]
    (tmp_path / "p.yaml").write_text(text.format(key=key, value=value))
    for allowed in ((), (key,)):
        errors = validate_policy_paths([tmp_path / "p.yaml"], allowed_properties=allowed).errors
        assert len(errors) == 1, errors
        assert f"policy 'p': {section}.{key}: '{key}' is refused by the safety envelope: it " in errors[0]
        assert "never a table property's, and no setting allows it" in errors[0]
    assert property_refusal(key, allowed=[key]) == storage_refusal(key) is not None  # the run's check too
    refused = f"no setting allows a key that steers a table's storage .*: '{re.escape(key)}'"
    with pytest.raises(SettingsError, match=refused):
        settings_from_mapping({"envelope": {"allowed-table-properties": [key]}}, Path("."), "floe.yaml", {})


@pytest.mark.parametrize("key", ["s3", "client", "write.s3.endpoint", "history.expire.max-snapshot-age-ms", "comment"])
def test_a_key_that_only_resembles_a_storage_key_steers_nothing(key):
    assert storage_refusal(key) is None
    assert not [name for name in (*PROPERTIES, *COLUMN_FAMILIES) if storage_refusal(name)]  # no Iceberg property


@pytest.mark.parametrize("pattern, catalog, table", [
    ("lake.hr.orders", "lake", TableName("lake", ("hr",), "orders")),
    ("hr.orders", "lake", TableName("lake", ("hr",), "orders")),
    ("lake.a.b.orders", "lake", TableName("lake", ("a", "b"), "orders")),
    ("other.hr.orders", "lake", None), ("orders", "lake", None), ("lake.hr.*", "lake", None),
    ("lake.h?.orders", "lake", None), ("/lake\\.hr\\.orders/", "lake", None), ("*", "lake", None),
])
def test_single_table(pattern, catalog, table):
    assert single_table(TablePattern.parse(pattern), catalog) == table
