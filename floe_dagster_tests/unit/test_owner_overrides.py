"""Owner overrides (core/policies/owner_overrides.py): the keys derived from the operation registry, the policy's
``ownerOverrides`` in both formats, a table's ``floe.*`` properties applied within their bounds or ignored
with the reason, the pause through the planner's gate, and the safety envelope: no location key, ever.
Pure: ``now`` is injected."""

from __future__ import annotations

import re
import textwrap
from dataclasses import fields
from pathlib import Path

import pytest

from floe_dagster.core.operations import ALL_OPERATIONS, Operation
from floe_dagster.core.policies.owner_overrides import (
    KEYS, NEVER_OVERRIDABLE, PAUSE_PROPERTY, Bounds, OwnerOverridePolicy, describe_keys, owner_overrides,
)
from floe_dagster.core.plan.planner import PlanInput, SchedulerSettings, plan
from floe_dagster.core.policies.policy import PolicyError, parse_policies_text
from floe_dagster.core.storage.storage_keys import TABLE_STORAGE_IGNORED
from floe_dagster_tests.unit.test_planner import EXP, NOW, RDF, A, B, code, metrics, policies, policy

DOC = Path(__file__).resolve().parents[2] / "docs" / "policies.md"
TARGET = "rewrite-data-files.target-file-size-bytes"
ALLOW = {TARGET: {"min": 64 * 2**20, "max": 2**30}, "maintenance.enabled": {}, "expire-snapshots.retain-last": {}}
CONFIGURED = {RDF, EXP}


def allowed(**allow) -> OwnerOverridePolicy:
    return OwnerOverridePolicy({k: Bounds(v.get("min"), v.get("max")) for k, v in (allow or ALLOW).items()})


def verdict(properties: dict[str, str], allow: OwnerOverridePolicy | None = None, configured=CONFIGURED):
    return owner_overrides("p", allow or allowed(), configured, properties)


# -- the keys ----------------------------------------------------------------------------------------------


def test_the_keys_are_the_registrys_options_in_kebab_case_without_locations_or_free_text():
    assert KEYS[TARGET].operation is RDF and KEYS[TARGET].field == "target_file_size_bytes"
    assert KEYS["expire-snapshots.retain-last"].kind == "whole number"
    assert KEYS["orphan-cleanup.dry-run"].kind == "flag"
    for key in KEYS.values():
        assert key.field in {f.name for f in fields(key.operation.spec.config_type)}
        assert key.field not in key.operation.spec.location_fields() and "location" not in key.key
    # Every location field of the registry is refused by name, and no free-text option (a SQL filter) is offered.
    # So is every field that decides which live rows are deleted (row retention: the policy's alone).
    assert set(NEVER_OVERRIDABLE) == {"orphan-cleanup.location", "rewrite-manifests.staging-location",
                                      "row-retention.column", "row-retention.max-age", "row-retention.granularity",
                                      "row-retention.timezone", "row-retention.allow-short",
                                      "orphan-cleanup.prefix-mismatch-mode"}
    assert not [k for k in KEYS if k.startswith("row-retention.")]
    assert "rewrite-data-files.filter" not in KEYS
    # A kind whose config is not options (tableProperties: the envelope governs what a run sets) has none.
    assert not [k for k in KEYS.values() if not k.operation.spec.config_is_fields]
    assert {k.operation for k in KEYS.values()} <= set(ALL_OPERATIONS)


def test_the_docs_list_every_key():
    doc = DOC.read_text()
    generated = re.search(r"<!-- owner-keys: begin -->\n(.*)<!-- owner-keys: end -->", doc, re.S)
    assert generated, "docs/policies.md lost its generated table of owner override keys"
    assert generated.group(1) == describe_keys(), (
        "docs/policies.md's owner override keys differ from the registry: paste "
        "floe_dagster.core.policies.owner_overrides.describe_keys() in")


# -- the policy's allow list -------------------------------------------------------------------------------


API = """
- name: p
  tablePattern: "demo.*.*"
  rewriteDataFiles: {}
  ownerOverrides:
    allow:
      maintenance.enabled: {}
      rewrite-data-files.target-file-size-bytes: {min: 67108864, max: 1073741824}
"""
LOADER = """
policies:
  - name: p
    pattern: "demo.*.*"
    rewrite-data-files: {}
    owner-overrides:
      allow:
        maintenance.enabled: {}
        rewrite-data-files.target-file-size-bytes: {min: 67108864, max: 1073741824}
"""


def test_both_policy_formats_read_the_same_allow_list():
    api, loader = (parse_policies_text(text).get("p") for text in (API, LOADER))
    assert api.owner_overrides == loader.owner_overrides == OwnerOverridePolicy(
        {"maintenance.enabled": Bounds(), TARGET: Bounds(64 * 2**20, 2**30)})
    assert api.to_json()["ownerOverrides"] == {"allow": {"maintenance.enabled": {}, TARGET: {"min": 64 * 2**20,
                                                                                           "max": 2**30}}}


@pytest.mark.parametrize("text,field", [(API, "ownerOverrides"), (LOADER, "owner-overrides")])
def test_no_policy_may_allow_a_location_key(text, field):
    bad = text.replace("maintenance.enabled: {}", "orphan-cleanup.location: {}")
    with pytest.raises(PolicyError) as raised:
        parse_policies_text(bad)
    assert any(f"policy 'p': {field}.allow.orphan-cleanup.location: never overridable: it names a location" in e
               and "no policy may allow it" in e for e in raised.value.errors), raised.value.errors


def test_a_bad_allow_list_names_each_problem():
    bad = textwrap.dedent("""
        - name: p
          rewriteDataFiles: {}
          ownerOverrides:
            deny: {}
            allow:
              rewrite-data-files.target-file-size: {}
              rewrite-data-files.filter: {}
              rewrite-data-files.rewrite-all: {min: 1}
              rewrite-data-files.max-file-group-size-bytes: {min: 10, max: 1}
              rewrite-data-files.min-input-files: {min: 0}
    """)
    with pytest.raises(PolicyError) as raised:
        parse_policies_text(bad)
    errors = [e.split("ownerOverrides.", 1)[1] for e in raised.value.errors]
    assert errors == [
        "deny: unknown field; valid fields: allow",
        "allow.rewrite-data-files.target-file-size: is not a key owners may set; did you mean "
        "'rewrite-data-files.target-file-size-bytes'? (docs/policies.md, \"Owner overrides\", lists them)",
        "allow.rewrite-data-files.filter: is not a key owners may set; did you mean "
        "'rewrite-data-files.rewrite-all'? (docs/policies.md, \"Owner overrides\", lists them)",
        "allow.rewrite-data-files.rewrite-all.min: only a number has bounds (min, max): write {} to allow it",
        "allow.rewrite-data-files.max-file-group-size-bytes: min 10 is above max 1",
        "allow.rewrite-data-files.min-input-files.min: must be at least 1, got 0",
    ], raised.value.errors


# -- a table's properties ----------------------------------------------------------------------------------


def test_a_table_without_floe_properties_has_no_overrides():
    assert verdict({"write.format.default": "parquet"}) is None


def test_an_allowed_option_within_its_bounds_is_applied_to_the_config():
    found = verdict({f"floe.{TARGET}": "268435456", "floe.expire-snapshots.retain-last": " 7 "})
    assert not found.paused and not found.ignored
    assert found.applied == {RDF: {"target_file_size_bytes": 268435456}, EXP: {"retain_last": 7}}
    config = parse_policies_text(API).get("p").config(RDF)
    assert found.config(RDF, config).target_file_size_bytes == 268435456
    assert found.config(RDF, config).iceberg_options() == {"target-file-size-bytes": 268435456}
    assert found.config(Operation.ORPHAN_CLEANUP, None) is None  # an override never enables an operation
    assert found.to_json(RDF) == {"paused": False, "applied": {"rewriteDataFiles.targetFileSizeBytes": 268435456},
                                  "ignored": []}


@pytest.mark.parametrize("properties,reason", [
    ({f"floe.{TARGET}": "1024"}, "1024 is below the minimum 67108864 policy 'p' allows"),
    ({f"floe.{TARGET}": str(2**31)}, f"{2**31} is above the maximum 1073741824 policy 'p' allows"),
    ({f"floe.{TARGET}": "big"}, "expected a whole number, got 'big'"),
    ({"floe.expire-snapshots.retain-last": "0"}, "must be at least 1, got 0"),  # the option's own rule
    ({"floe.orphan-cleanup.dry-run": "false"}, "policy 'p' does not allow owners to set it (ownerOverrides.allow)"),
    ({"floe.rewrite-data-files.filter": "1=1"}, "not a key owners may set (floe.maintenance.enabled or "
                                                "floe.<operation>.<option>: docs/policies.md)"),
    ({"floe.orphan-cleanup.location": "s3://other-table/data"}, "never overridable: it names a location, and a run "
     "lists, writes and deletes only under its own table (the safety envelope)"),
    ({"floe.rewrite-manifests.staging-location": "/tmp/stage"}, "never overridable: it names a location, and a run "
     "lists, writes and deletes only under its own table (the safety envelope)"),
    ({PAUSE_PROPERTY: "nope"}, "expected true or false, got 'nope'"),
])
def test_an_override_outside_the_policy_is_ignored_with_its_reason(properties, reason):
    found = verdict(properties)
    assert not found.applied and not found.paused
    [(name, value)] = properties.items()
    assert [i.to_json() for i in found.ignored] == [{"property": name, "value": value, "reason": reason}]


def test_a_location_stays_refused_even_when_an_allow_list_names_it():
    """The policy parser refuses such an allow list; a list made another way is still never honoured."""
    found = verdict({"floe.orphan-cleanup.location": "s3://other-table/"},
                    allowed(**{"orphan-cleanup.location": {}}), configured={Operation.ORPHAN_CLEANUP})
    assert not found.applied and "safety envelope" in found.ignored[0].reason


@pytest.mark.parametrize("key,value", [("max-age", "PT1S"), ("column", "created_at"), ("granularity", "HOUR")])
def test_no_owner_property_can_decide_which_rows_are_deleted(key, value):
    """An attacker who can set a table property must not make floe delete live rows: row retention's fields
    are the policy's alone, even when an allow list names them (the policy parser refuses such a list)."""
    found = verdict({f"floe.row-retention.{key}": value}, allowed(**{f"row-retention.{key}": {}}),
                    configured={Operation.EXPIRE_ROWS})
    assert not found.applied
    assert found.ignored[0].reason.startswith("never overridable: it decides which live rows are deleted")
    policy_text = API.replace("maintenance.enabled: {}", f"row-retention.{key}: {{}}")
    with pytest.raises(PolicyError) as raised:
        parse_policies_text(policy_text)
    assert any(f"allow.row-retention.{key}: never overridable" in e for e in raised.value.errors), raised.value.errors


def test_no_owner_property_can_make_orphan_cleanup_delete_files_of_another_prefix():
    """prefixMismatchMode DELETE removes files whose scheme or authority differs from the table's: the
    policy's call alone, ignored on the table even when an allow list names it (which the parser refuses)."""
    found = verdict({"floe.orphan-cleanup.prefix-mismatch-mode": "DELETE"},
                    allowed(**{"orphan-cleanup.prefix-mismatch-mode": {}}), configured={Operation.ORPHAN_CLEANUP})
    assert not found.applied and found.config(Operation.ORPHAN_CLEANUP, None) is None
    assert found.ignored[0].reason.startswith("never overridable: DELETE removes files whose scheme or authority")
    policy_text = API.replace("maintenance.enabled: {}", "orphan-cleanup.prefix-mismatch-mode: {}")
    with pytest.raises(PolicyError) as raised:
        parse_policies_text(policy_text)
    assert any("allow.orphan-cleanup.prefix-mismatch-mode: never overridable: DELETE removes" in e
               for e in raised.value.errors), raised.value.errors


def test_a_table_property_that_would_steer_storage_is_shown_ignored_with_the_reason_and_no_secret():
    """py-io-impl, s3.endpoint… on the table never reach floe's FileIO (iceberg/table_io.py): plan and
    explain say so, even under a policy that allows owners nothing, and a secret's value stays masked."""
    found = owner_overrides("p", OwnerOverridePolicy(), CONFIGURED, {
        "py-io-impl": "evil.RecordingFileIO", "s3.endpoint": "http://127.0.0.1:1",
        "s3.secret-access-key": "owner-secret-value", "comment": "fine"})
    assert found is not None and not found.applied and not found.paused
    assert [i.to_json() for i in found.ignored] == [
        {"property": name, "value": value, "reason": TABLE_STORAGE_IGNORED}
        for name, value in (("py-io-impl", "evil.RecordingFileIO"), ("s3.endpoint", "http://127.0.0.1:1"),
                            ("s3.secret-access-key", "***"))]
    assert "ignored py-io-impl=evil.RecordingFileIO (a table property never steers floe's storage" in \
        found.describe(RDF)
    assert owner_overrides("p", OwnerOverridePolicy(), CONFIGURED, {"comment": "fine"}) is None


def test_an_override_of_an_operation_the_policy_does_not_configure_is_ignored():
    found = verdict({f"floe.{TARGET}": "268435456"}, configured={EXP})
    assert not found.applied
    assert found.ignored[0].reason == ("policy 'p' does not configure rewriteDataFiles: an override tunes an "
                                       "operation, it never enables one")


def test_the_pause_needs_the_policys_leave():
    assert verdict({PAUSE_PROPERTY: "FALSE"}).paused
    assert not verdict({PAUSE_PROPERTY: "true"}).paused
    refused = verdict({PAUSE_PROPERTY: "false"}, allowed(**{TARGET: {}}))
    assert not refused.paused and "does not allow owners" in refused.ignored[0].reason


# -- through the planner -----------------------------------------------------------------------------------


def _plan(properties_a: dict[str, str], allow: dict | None = None):
    raw = policy(schedules={RDF: {"interval": "PT1H"}, EXP: {"interval": "PT1H"}})
    raw["ownerOverrides"] = {"allow": allow if allow is not None else ALLOW}
    data = PlanInput(now=NOW, catalog_tables=[A, B], loaded_tables=frozenset({A, B}), policies=policies(raw),
                     limits=SchedulerSettings(), metrics={A: metrics(A, properties=properties_a), B: metrics(B)})
    return {(d.table, d.operation): d for d in plan(data).decisions}


def test_a_paused_table_skips_every_operation_with_owner_paused_and_others_run():
    by = _plan({PAUSE_PROPERTY: "false"})
    for op in (RDF, EXP):
        assert code(by[(A, op)]) == "owner_paused"
        assert by[(A, op)].reasons[0] == ("owner_paused: the table's owner paused its maintenance: property "
                                          "floe.maintenance.enabled=false (allowed by policy 'p')")
        assert by[(A, op)].to_json()["ownerOverrides"]["paused"] is True
    assert by[(B, RDF)].decision == "run" and "ownerOverrides" not in by[(B, RDF)].to_json()


def test_a_pause_the_policy_does_not_allow_is_shown_ignored_and_the_table_runs():
    by = _plan({PAUSE_PROPERTY: "false", f"floe.{TARGET}": "1"}, allow={})
    decision = by[(A, RDF)]
    assert decision.decision == "run"
    assert [i["property"] for i in decision.to_json()["ownerOverrides"]["ignored"]] == [PAUSE_PROPERTY,
                                                                                       f"floe.{TARGET}"]


@pytest.mark.parametrize("properties", [
    {}, {"write.format.default": "parquet"}, {PAUSE_PROPERTY: "false"}, {"floe.unknown": "1"},
    {"s3.endpoint": "http://elsewhere"}, {"py-io-impl": "x.Y"}, {"write.x": "1", "floe." + TARGET: "1"},
])
def test_a_table_sets_owner_keys_exactly_when_its_properties_give_a_verdict(properties):
    """The planner asks owner_overrides only of records whose properties hold a floe.* or storage key
    (kept on the record): the question answers as the verdict's presence would, whatever the policy."""
    from floe_dagster.core.policies.owner_overrides import sets_owner_keys

    for allow in (OwnerOverridePolicy(), allowed(**ALLOW)):
        assert sets_owner_keys(properties) == (owner_overrides("p", allow, CONFIGURED, properties) is not None)
