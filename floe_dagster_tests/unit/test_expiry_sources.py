"""Issue 36 item 2, what was left: the table's ``history.expire.max-ref-age-ms`` bounded like the other
``history.expire.*`` properties (an owner's value never makes floe's expiry remove a branch or tag younger
than floe's minimum), ``explain`` saying where each expiry argument came from, and the CLI's ``--json``
keeping a drifted property's name while masking its values."""

from __future__ import annotations

import io
import json
import sys
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

import pytest

from floe_dagster.core.facts.expiry_defaults import (
    FLOE_MINIMUM, MAX_REF_AGE_MS, MAX_SNAPSHOT_AGE_MS, MIN_REF_AGE, MIN_REF_AGE_MS, MIN_SNAPSHOTS_TO_KEEP,
    expiry_arguments, ref_age_default,
)
from floe_dagster.core.facts.measurements import RefFacts
from floe_dagster.core.operation_kinds.expire_snapshots import SPEC, ExpireSnapshotsConfig
from floe_dagster.core.operation_kinds.spec import ExplainView
from floe_dagster.core.facts.ref_retention_changes import (
    CLEARED, GUARD_RULE, SET, SetAge, recorded_ages, retention_changes,
)
from floe_dagster.core.facts.refs import RefRetentionRule, ref_issues, ref_report
from floe_dagster.core.basics.secrets import mask_json, mask_text, masked
from floe_dagster.core.facts.table_properties import PropertyDrift
from floe_dagster.reports.explain_text import expiry_lines

NOW = datetime(2026, 6, 10, 12, tzinfo=timezone.utc)
NOW_MS = int(NOW.timestamp() * 1000)
DAY_MS = 86_400_000
WEEK_MS = 7 * DAY_MS


# -- history.expire.max-ref-age-ms, bounded --------------------------------------------------------------


@pytest.mark.parametrize("value", ["0", "-1", "1", "-9223372036854775808", str(WEEK_MS - 1), "+3600000"])
def test_an_owners_ref_age_below_floes_minimum_is_raised_to_it(value):
    bounded = ref_age_default({MAX_REF_AGE_MS: value})
    assert MIN_REF_AGE == timedelta(days=7) and MIN_REF_AGE_MS == WEEK_MS
    assert (bounded.max_ref_age_ms, bounded.source, bounded.guard_ms) == (WEEK_MS, FLOE_MINIMUM, WEEK_MS)
    assert bounded.adjusted.startswith(f"table property {MAX_REF_AGE_MS}={int(value)} is under 7 days: each branch")


@pytest.mark.parametrize("value, millis", [(str(WEEK_MS), WEEK_MS), ("2592000000", 30 * DAY_MS),
                                           ("9223372036854775807", 2**63 - 1), ("+2592000000", 30 * DAY_MS)])
def test_an_owners_ref_age_at_or_above_the_minimum_is_iceberg_s_own(value, millis):
    honoured = ref_age_default({MAX_REF_AGE_MS: value})
    assert (honoured.max_ref_age_ms, honoured.source, honoured.guard_ms, honoured.adjusted) == (
        millis, MAX_REF_AGE_MS, None, "")


@pytest.mark.parametrize("value", ["abc", " 5", "5 ", "1e9", "", "P7D", "99999999999999999999", "9223372036854775808",
                                   "-9223372036854775809", "0x10", "1_000"])
def test_a_ref_age_iceberg_cannot_read_is_said_to_fail_its_expiry(value):
    """Iceberg reads the property with Long.parseLong when the expiry starts: it fails, removing nothing."""
    unread = ref_age_default({MAX_REF_AGE_MS: value})
    assert (unread.max_ref_age_ms, unread.source, unread.guard_ms) == (None, "default", None)
    assert "is not a whole number Iceberg can read (a Java long): its expire_snapshots fails" in unread.adjusted


@pytest.mark.parametrize("properties", [{MIN_SNAPSHOTS_TO_KEEP: " 5"}, {MIN_SNAPSHOTS_TO_KEEP: "2147483648"},
                                        {MAX_SNAPSHOT_AGE_MS: "1e3"}, {MAX_SNAPSHOT_AGE_MS: "3600000 "}])
def test_a_snapshot_property_iceberg_cannot_read_is_said_to_fail_its_expiry_too(properties):
    """Iceberg's RemoveSnapshots parses every history.expire.* property when it starts (Integer/Long.parseLong,
    no spaces), whatever floe passes: floe's arguments fall back to its defaults and say the expiry fails."""
    chosen = expiry_arguments(None, None, properties)
    (why,) = chosen.adjusted
    assert (chosen.retain_last, chosen.max_age) == (5, timedelta(days=7))
    assert why.endswith("its expire_snapshots fails on this table, removing nothing, until the owner corrects it")
    assert ("(a Java int)" in why) == (MIN_SNAPSHOTS_TO_KEEP in properties)


def test_no_property_is_iceberg_s_default_never():
    assert ref_age_default({}) == ref_age_default({MIN_SNAPSHOTS_TO_KEEP: "0"})
    assert (ref_age_default({}).max_ref_age_ms, ref_age_default({}).source) == (None, "default")


# -- the guard an expiry run sets ------------------------------------------------------------------------


REFS = {"main": ("branch", 1, None), "wap": ("branch", 2, None), "v1": ("tag", 3, None),
        "owned": ("tag", 4, DAY_MS), "audit-1": ("branch", 5, None)}
AUDIT = (RefRetentionRule("audit-*", timedelta(days=30)),)


def test_below_the_minimum_each_ref_the_property_decides_gets_the_minimum_as_its_own_age():
    changes = retention_changes(REFS, AUDIT, {}, WEEK_MS)
    assert [(c.name, c.max_ref_age_ms_before, c.max_ref_age_ms, c.rule, c.action) for c in changes] == [
        ("audit-1", None, 30 * DAY_MS, "audit-*", SET),  # the policy's rule wins: only it may go below
        ("v1", None, WEEK_MS, GUARD_RULE, SET), ("wap", None, WEEK_MS, GUARD_RULE, SET)]
    # main is never touched; "owned" keeps the age its owner set on that one ref
    record = recorded_ages(REFS, {}, changes)
    assert record["wap"] == SetAge(WEEK_MS, None) and "owned" not in record and "main" not in record


def test_the_guard_is_set_once_and_taken_back_when_the_property_no_longer_needs_it():
    after = {**REFS, "wap": ("branch", 2, WEEK_MS), "v1": ("tag", 3, WEEK_MS), "audit-1": ("branch", 5, WEEK_MS)}
    record = {"wap": SetAge(WEEK_MS, None), "v1": SetAge(WEEK_MS, None), "audit-1": SetAge(WEEK_MS, None)}
    assert retention_changes(after, (), record, WEEK_MS) == []  # already set: no commit
    cleared = retention_changes(after, (), record, None)  # the owner raised or removed the property
    assert [(c.name, c.max_ref_age_ms, c.action) for c in cleared] == [
        ("audit-1", None, CLEARED), ("v1", None, CLEARED), ("wap", None, CLEARED)]
    assert retention_changes(after, AUDIT, record, WEEK_MS)[0][4:6] == (30 * DAY_MS, "audit-*")  # a rule comes


def test_a_rule_floe_set_over_no_age_falls_to_the_guard_when_the_rule_goes():
    refs = {"audit-1": ("branch", 5, 30 * DAY_MS), "keep": ("tag", 6, 90 * DAY_MS)}
    record = {"audit-1": SetAge(30 * DAY_MS, None), "keep": SetAge(30 * DAY_MS, 90 * DAY_MS)}
    changes = retention_changes(refs, (), record, WEEK_MS)
    assert [(c.name, c.max_ref_age_ms, c.rule) for c in changes] == [("audit-1", WEEK_MS, GUARD_RULE)]
    assert recorded_ages(refs, record, changes)["audit-1"] == SetAge(WEEK_MS, None)


def fact(name: str, age_days: float, own: int | None = None) -> RefFacts:
    return RefFacts(name, "branch", 7, NOW_MS - int(age_days * DAY_MS), own, None, None, 2)


def test_health_and_explain_read_the_bounded_limit():
    properties = {MAX_REF_AGE_MS: "0"}
    report = {r["name"]: r for r in ref_report([fact("young", 1), fact("old", 8)], (), properties, NOW)}
    assert report["young"]["stale"] is False and report["young"]["max_age_ms"] == WEEK_MS
    assert report["old"]["stale"] is True
    assert report["old"]["max_age_from"] == f"floe's minimum (table property {MAX_REF_AGE_MS} is below it)"
    (issue,) = ref_issues([fact("young", 1), fact("old", 8)], (), properties, NOW)
    assert issue.message == (f"branch 'old' is 8 days old (floe's minimum 7 days, table {MAX_REF_AGE_MS} below it) "
                             "and alone keeps 2 snapshots")
    assert ref_issues([fact("old", 8)], (), {MAX_REF_AGE_MS: "garbage"}, NOW) == ()
    honoured = ref_report([fact("old", 8)], (), {MAX_REF_AGE_MS: str(30 * DAY_MS)}, NOW)[0]
    assert honoured["max_age_from"] == f"table property {MAX_REF_AGE_MS}" and honoured["stale"] is False


# -- explain: where each expiry argument came from -------------------------------------------------------


def view(config, properties, owner=None, metrics=True) -> ExplainView:
    health = SimpleNamespace(properties=properties, refs=None) if metrics else None
    return ExplainView(None, config, health, NOW, lambda: None, owner or {})


def test_explain_names_the_source_of_each_argument():
    shown = SPEC.explain(view(ExpireSnapshotsConfig(), {MAX_SNAPSHOT_AGE_MS: "0", MAX_REF_AGE_MS: "-5"}))
    arguments = shown["expiryArguments"]
    assert arguments["olderThan"] == (NOW - timedelta(hours=1)).isoformat()
    assert (arguments["olderThanFrom"], arguments["maxSnapshotAge"]) == (MAX_SNAPSHOT_AGE_MS, "PT1H")
    assert (arguments["retainLast"], arguments["retainLastFrom"]) == (5, "default")
    assert (arguments["maxRefAgeMs"], arguments["maxRefAgeFrom"]) == (WEEK_MS, FLOE_MINIMUM)
    assert len(arguments["adjusted"]) == 2 and arguments["tableProperties"] == "as the last health read them"
    assert shown["refs"] is None  # unchanged beside it

    policy = SPEC.explain(view(ExpireSnapshotsConfig(retain_last=2, max_snapshot_age="P3D"),
                               {MIN_SNAPSHOTS_TO_KEEP: "9", MAX_REF_AGE_MS: str(30 * DAY_MS)}))["expiryArguments"]
    assert (policy["retainLastFrom"], policy["maxSnapshotAgeFrom"], policy["olderThanFrom"]) == (
        "policy", "policy", "policy")
    assert (policy["maxRefAgeMs"], policy["maxRefAgeFrom"], policy["adjusted"]) == (30 * DAY_MS, MAX_REF_AGE_MS, [])


def test_an_owner_override_is_named_as_the_source_and_health_not_read_yet_is_said():
    owner = {"retain_last": ("floe.expire-snapshots.retain-last", 3)}
    arguments = SPEC.explain(view(ExpireSnapshotsConfig(retain_last=1), {}, owner))["expiryArguments"]
    assert (arguments["retainLast"], arguments["retainLastFrom"]) == (
        3, "owner override floe.expire-snapshots.retain-last")
    assert (arguments["maxSnapshotAge"], arguments["maxSnapshotAgeFrom"], arguments["maxRefAgeMs"]) == (
        "P7D", "default", None)
    unread = SPEC.explain(view(ExpireSnapshotsConfig(), {}, metrics=False))["expiryArguments"]
    assert unread["tableProperties"] == "not read yet (no health): a run reads the table's own"
    assert SPEC.explain(view(None, {}))["expiryArguments"] is None


def test_explain_text_has_one_line_of_sources_and_one_per_adjustment():
    arguments = SPEC.explain(view(ExpireSnapshotsConfig(), {MAX_REF_AGE_MS: "0"}))["expiryArguments"]
    lines = expiry_lines(arguments)
    assert lines[0] == (f"    expiry arguments: older_than {(NOW - timedelta(days=7)).isoformat()} (maxSnapshotAge "
                        "P7D from default), retain_last 5 (from default); a branch or tag with no age of its own nor "
                        f"refRetention rule is removed after {WEEK_MS} ms (from floe minimum); table properties as "
                        "the last health read them")
    assert lines[1].startswith(f"    expiry adjusted: table property {MAX_REF_AGE_MS}=0 is under 7 days")
    assert expiry_lines(None) == []


# -- the CLI's --json: a drifted property's name shown, its values masked --------------------------------


def test_a_drift_entry_keeps_its_name_as_json_and_masks_values_by_name_or_shape():
    drifts = [PropertyDrift("write.metadata.password-policy", "strict", "lax"),  # a secret-ish NAME: values masked
              PropertyDrift("write.format.default", "parquet", "orc"),
              PropertyDrift("write.object-storage.path", "s3://ak:hunter22@bucket/p", None)]  # a secret VALUE
    document = json.dumps({"propertyDrift": [d.to_json() for d in drifts]}, indent=2)
    shown = json.loads(mask_json(document))["propertyDrift"]
    assert [d["key"] for d in shown] == ["write.metadata.password-policy", "write.format.default",
                                         "write.object-storage.path"]
    assert (shown[0]["declared"], shown[0]["current"]) == ("***", "***")
    assert (shown[1]["declared"], shown[1]["current"]) == ("parquet", "orc")
    assert shown[2]["declared"] == "s3://ak:***@bucket/p"
    # Plain text (a log line, an error) keeps reading "key": … as a secret, as before.
    assert json.loads(mask_text(document))["propertyDrift"][1]["key"] == "***"
    # A name that carries a secret itself is still masked where it carries it.
    assert mask_json(json.dumps(masked({"key": "s3://u:pw12345@h", "declared": "a"}))) == (
        '{"key": "s3://u:***@h", "declared": "a"}')


def test_mask_json_still_masks_secret_fields_known_secrets_and_secrets_inside_strings():
    document = json.dumps({"password": "x", "error": 'refused: {"key": "AKIA123"} token=abc',
                           "note": "the lake's pass is verylongsecret"})
    shown = json.loads(mask_json(document, known=["verylongsecret"]))
    assert shown == {"password": "***", "error": 'refused: {"key": "***"} token=***', "note": "the lake's pass is ***"}


def test_print_json_under_the_clis_masked_output_shows_the_drifted_names(monkeypatch):
    from floe_dagster.redaction import masked_output, print_json

    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    with masked_output():
        print_json({"propertyDrift": [PropertyDrift("write.metadata.password-policy", "strict", "lax").to_json()],
                    "catalog_secret": "hunter22hunter22"})
        print('{"key": "printed as text stays masked"}')
    shown = out.getvalue()
    payload = json.loads(shown[:shown.rindex("}\n{") + 2])
    assert payload == {"propertyDrift": [{"key": "write.metadata.password-policy", "declared": "***",
                                          "current": "***"}], "catalog_secret": "***"}
    assert shown.endswith('{"key": "***"}\n')
