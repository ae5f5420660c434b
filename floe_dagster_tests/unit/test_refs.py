"""Branches and tags (issue 22, refs): refRetention rules and their matching, what a ref alone keeps on a
synthetic snapshot graph under Iceberg's expire rules, the staleness rule with an injected clock, which
refs an expiry run changes, and the ref facts in the health record, the planner's issues and both
policy formats."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest

from floe_dagster.core.facts.health_assessment import IssueType, Severity
from floe_dagster.core.policies.health_record import assess_table, health_record
from floe_dagster.core.facts.measurements import RefFacts, TableMetrics
from floe_dagster.core.policies.policy import PolicyError, parse_policies_text, validate_policy_paths
from floe_dagster.core.facts.expiry_defaults import MAX_SNAPSHOT_AGE_MS, MIN_SNAPSHOTS_TO_KEEP
from floe_dagster.core.facts.ref_pins import RefHead, SnapshotNode, pinned_file_bytes, pinned_snapshots
from floe_dagster.core.facts.ref_retention_changes import (
    CLEARED, SET, SetAge, format_set_ages, parse_set_ages, recorded_ages, retention_changes,
)
from floe_dagster.core.facts.refs import MAX_REF_AGE_MS, RefRetentionRule, ref_issues, ref_report, rule_for
from floe_dagster_tests.unit.test_health import healthy

NOW = datetime(2026, 6, 10, 12, tzinfo=timezone.utc)
NOW_MS = int(NOW.timestamp() * 1000)
DAY_MS = 86_400_000
GIB = 1024**3


def rules(*specs: tuple[str, timedelta, str]) -> tuple[RefRetentionRule, ...]:
    return tuple(RefRetentionRule(pattern, age, kind) for pattern, age, kind in specs)


# -- rules ------------------------------------------------------------------------------------------------


def test_the_first_matching_rule_wins_by_name_and_type_and_main_never_matches():
    listed = rules(("audit-*", timedelta(days=30), "branch"), ("*", timedelta(days=7), "tag"),
                   ("*", timedelta(days=90), "any"))
    assert rule_for(listed, "audit-2025", "branch").max_age == timedelta(days=30)
    assert rule_for(listed, "audit-2025", "tag").max_age == timedelta(days=7)  # the branch rule is not for tags
    assert rule_for(listed, "release-1", "branch").max_age == timedelta(days=90)
    assert rule_for(listed, "main", "branch") is None  # even "*" of type any
    assert rule_for(listed, "Audit-1", "branch").max_age == timedelta(days=90)  # globs are case-sensitive
    assert rule_for(rules(("audit-20??", timedelta(days=1), "any")), "audit-2025x", "branch") is None


def test_parsed_rules_and_every_problem_named():
    policy = parse_policies_text("""
- name: p
  tablePattern: "*"
  expireSnapshots: {}
  refRetention:
    - {pattern: "audit-*", maxAge: P30D, type: BRANCH}
    - {pattern: "*", maxAge: PT1S}
""").get("p")
    assert policy.ref_retention == rules(("audit-*", timedelta(days=30), "branch"), ("*", timedelta(seconds=1), "any"))
    assert policy.to_json()["refRetention"] == [{"pattern": "audit-*", "maxAge": "P30D", "type": "branch"},
                                                {"pattern": "*", "maxAge": "PT1S", "type": "any"}]
    with pytest.raises(PolicyError) as caught:
        parse_policies_text("""
- name: p
  tablePattern: "*"
  refRetention:
    - {pattern: main, maxAge: P1D}
    - {maxAge: P1D, type: branches}
    - {pattern: x, maxAge: PT0S, maxage: P1D}
    - {pattern: y, maxAge: 30}
""")
    assert caught.value.errors == [
        "<text>: policy 'p': refRetention[0].pattern: matches only main, which is never expired; name the other refs",
        "<text>: policy 'p': refRetention[1].pattern: is required: a glob over ref names, such as audit-*",
        "<text>: policy 'p': refRetention[1].type: expected one of branch, tag, any, got 'branches'",
        "<text>: policy 'p': refRetention[2].maxage: unknown field; did you mean 'maxAge'?",
        "<text>: policy 'p': refRetention[2].maxAge: must be at least one millisecond, got 'PT0S' (zero would "
        "remove every matching ref)",
        "<text>: policy 'p': refRetention[3].maxAge: expected an ISO-8601 duration such as P30D, got 30",
    ]


def test_the_kebab_format_reads_the_same_rules_and_names_keys_as_written(tmp_path):
    (tmp_path / "p.yaml").write_text("""
policies:
  - name: p
    pattern: "*"
    ref-retention: [{pattern: "audit-*", max-age: P30D, type: tag}]
  - name: q
    pattern: "x.*"
    expire-snapshots: {}
    ref-retention: [{pattern: "a", max-age: P0D}]
""")
    result = validate_policy_paths([tmp_path])
    assert result.errors == [f"{tmp_path / 'p.yaml'}: policy 'q': ref-retention[0].max-age: must be at least one "
                             "millisecond, got 'P0D' (zero would remove every matching ref)"]
    assert f"{tmp_path / 'p.yaml'}: policy 'p': ref-retention: is applied by expire-snapshots runs, which this " \
           "policy does not configure: stale refs are reported, never removed" in result.warnings
    (tmp_path / "p.yaml").write_text("policies:\n  - name: p\n    pattern: '*'\n"
                                     "    ref-retention: [{pattern: 'audit-*', max-age: P30D, type: tag}]\n")
    assert validate_policy_paths([tmp_path]).policies.get("p").ref_retention == rules(
        ("audit-*", timedelta(days=30), "tag"))


# -- what a ref alone keeps -------------------------------------------------------------------------------


def graph() -> dict[int, SnapshotNode]:
    """main: 1 ← 2 ← 3 ← 4 ← 5 (days 40, 20, 10, 3, 1 ago); branch audit forks at 2: 2 ← 21 ← 22
    (days 15, 12 ago); branch dev forks at 4: 4 ← 41 (hours ago)."""
    ago = {1: 40, 2: 20, 3: 10, 4: 3, 5: 1, 21: 15, 22: 12, 41: 0.1}
    parent = {1: None, 2: 1, 3: 2, 4: 3, 5: 4, 21: 2, 22: 21, 41: 4}
    return {s: SnapshotNode(parent[s], NOW_MS - int(ago[s] * DAY_MS)) for s in ago}


REFS = {
    "main": RefHead("branch", 5), "audit": RefHead("branch", 22), "dev": RefHead("branch", 41),
    "v1": RefHead("tag", 1), "v4": RefHead("tag", 4),
}


def test_pinned_snapshots_follow_icebergs_expire_rules_with_the_tables_defaults():
    # Default retention: 5 days, at least 1 snapshot. main keeps 5 and 4 (3 days); audit only its head (12
    # days old); dev its head and 4 (which main keeps too); v1 its snapshot; v4 nothing main does not keep.
    pinned = pinned_snapshots(graph(), REFS, NOW_MS, {})
    assert pinned == {"audit": {22}, "dev": {41}, "v1": {1}, "v4": set()}


def test_the_tables_properties_and_the_refs_own_retention_change_what_is_kept():
    properties = {MAX_SNAPSHOT_AGE_MS: str(30 * DAY_MS), MIN_SNAPSHOTS_TO_KEEP: "1"}
    # 30 days: main keeps 5, 4, 3, 2; audit 22 and 21 (2 is main's); v1 is 40 days old: pinned.
    assert pinned_snapshots(graph(), REFS, NOW_MS, properties)["audit"] == {22, 21}
    kept_long = {**REFS, "audit": RefHead("branch", 22, min_snapshots_to_keep=4)}
    # audit keeps 4 ancestors whatever their age: 22, 21, 2, 1; main (default: 5 days) keeps 5 and 4.
    assert pinned_snapshots(graph(), kept_long, NOW_MS, {})["audit"] == {22, 21, 2, 1}
    young_only = {**REFS, "audit": RefHead("branch", 22, max_snapshot_age_ms=13 * DAY_MS)}
    assert pinned_snapshots(graph(), young_only, NOW_MS, {})["audit"] == {22}
    main_keeps_all = {MIN_SNAPSHOTS_TO_KEEP: "100"}
    assert pinned_snapshots(graph(), REFS, NOW_MS, main_keeps_all) == {"audit": {22, 21}, "dev": {41}, "v1": set(),
                                                                      "v4": set()}


def test_a_ref_whose_snapshot_is_gone_pins_nothing():
    assert pinned_snapshots(graph(), {**REFS, "lost": RefHead("tag", 999)}, NOW_MS, {})["lost"] == set()


def test_pinned_bytes_count_each_file_once_and_not_the_files_main_still_has():
    data = {"content": 0, "files": [[0, 100, 10, 1, 7], [0, 200, 20, 1, 8], [0, 300, 30, 1, 9]]}
    rewritten = {"content": 0, "files": [[0, 200, 20, 1, 8]]}  # the same file under another manifest
    deletes = {"content": 1, "files": [[1, 0, 50, 5, 1, None], [2, 0, 60, 6, 1, None]]}
    assert pinned_file_bytes([data, rewritten, deletes], main_data_files={9}) == (4, 100 + 200 + 50 + 60)
    assert pinned_file_bytes([], main_data_files={9}) == (0, 0)


# -- staleness --------------------------------------------------------------------------------------------


def ref(name="audit-2025", kind="branch", age_ms=94 * DAY_MS, **changes) -> RefFacts:
    base = RefFacts(name, kind, 22, NOW_MS - age_ms, None, None, None, pinned_snapshots=12, pinned_files=40,
                    pinned_bytes=int(1.4 * GIB))
    return base._replace(**changes)


def test_a_ref_older_than_the_policys_max_age_is_stale_with_the_reason():
    (issue,) = ref_issues([ref()], rules(("audit-*", timedelta(days=30), "branch")), {}, NOW)
    assert issue.type is IssueType.STALE_REF and issue.severity is Severity.WARNING
    assert issue.message == "branch 'audit-2025' is 94 days old (policy max 30 days) and alone keeps 12 snapshots, 1.4 GiB"
    assert (issue.measured, issue.threshold) == (94, 30)
    assert issue.to_json()["ref"] == "audit-2025" and issue.to_json()["pinned_bytes"] == int(1.4 * GIB)


def test_the_limit_is_exclusive_as_in_iceberg_and_follows_the_injected_clock():
    rule = rules(("audit-*", timedelta(seconds=90), "any"))
    at_limit = ref(age_ms=90_000)
    assert ref_issues([at_limit], rule, {}, NOW) == ()  # Iceberg keeps a ref whose age equals its max-ref-age
    (issue,) = ref_issues([at_limit], rule, {}, NOW + timedelta(milliseconds=1))
    assert issue.message.startswith("branch 'audit-2025' is 1m 30s old (policy max 1m 30s)")


def test_without_a_rule_the_refs_own_then_the_tables_max_ref_age_apply():
    own = ref(name="scratch", max_ref_age_ms=7 * DAY_MS, pinned_bytes=None)
    (issue,) = ref_issues([own], rules(("audit-*", timedelta(days=1), "any")), {}, NOW)
    assert issue.message == "branch 'scratch' is 94 days old (its own max-ref-age 7 days) and alone keeps 12 snapshots"
    tag = ref(name="v1", kind="tag", pinned_snapshots=1, pinned_bytes=512)
    (issue,) = ref_issues([tag], (), {MAX_REF_AGE_MS: str(60 * DAY_MS)}, NOW)
    assert issue.message == ("tag 'v1' is 94 days old (table history.expire.max-ref-age-ms 60 days) and alone keeps "
                             "1 snapshot, 512 B")
    assert ref_issues([tag], (), {}, NOW) == ()  # no limit anywhere: listed, never an issue
    (listed,) = ref_report([tag], (), {}, NOW)
    assert listed["max_age_ms"] is None and listed["stale"] is False and listed["age_days"] == 94


def test_the_record_lists_refs_and_the_issue_owes_debt():
    policy = parse_policies_text("""
- name: p
  tablePattern: "*"
  expireSnapshots: {}
  refRetention: [{pattern: "audit-*", maxAge: P30D}]
""").get("p")
    metrics = replace(healthy(), refs=(ref(), ref(name="audit-young", age_ms=DAY_MS, pinned_snapshots=1)))
    report = assess_table(metrics, policy.health_thresholds, NOW, None, policy)
    assert [i.type for i in report.issues] == [IssueType.STALE_REF] and report.status == "warning"
    record = health_record(report, policy, None, NOW)
    assert [(r["name"], r["stale"], r["max_age_from"]) for r in record["refs"]] == [
        ("audit-2025", True, "policy refRetention 'audit-*' (P30D)"), ("audit-young", False, "policy refRetention 'audit-*' (P30D)")]
    assert record["debt"]["inputs"]["warning_issues"] == 1
    assert [i.type for i in policy.health_issues(metrics, NOW)] == [IssueType.STALE_REF]  # the planner's too
    assert assess_table(metrics, policy.health_thresholds, NOW, None).issues == ()  # no policy: no rule


def test_refs_survive_the_cache_round_trip_and_stay_out_of_the_metrics_section():
    metrics = replace(healthy(), refs=(ref(), ref(name="v1", kind="tag", pinned_files=None, pinned_bytes=None)))
    assert TableMetrics.from_json(metrics.to_json()) == metrics
    assert "refs" not in metrics.report_json()
    assert TableMetrics.from_json({**metrics.to_json(), "refs": None}).refs is None


# -- what an expiry run sets ------------------------------------------------------------------------------


def test_only_refs_whose_max_ref_age_differs_are_changed_and_never_main():
    listed = rules(("audit-*", timedelta(days=30), "branch"), ("*", timedelta(days=1), "any"))
    current = {"audit-a": ("branch", 1, None), "audit-b": ("branch", 2, 30 * DAY_MS), "v1": ("tag", 3, 5),
               "main": ("branch", 4, None)}
    changes = retention_changes(current, listed)
    assert [(c.name, c.snapshot_id, c.max_ref_age_ms_before, c.max_ref_age_ms, c.rule) for c in changes] == [
        ("audit-a", 1, None, 30 * DAY_MS, "audit-*"), ("v1", 3, 5, DAY_MS, "*")]
    assert retention_changes(current, ()) == []


def expiry_run(current, listed, record_text):
    """What one expiry run changes and the record it leaves (iceberg/ref_retention.py's arithmetic)."""
    set_ages = parse_set_ages(record_text)
    changes = retention_changes(current, listed, set_ages)
    return changes, format_set_ages(recorded_ages(current, set_ages, changes))


def test_ages_floe_set_are_taken_back_when_their_rule_goes_and_the_owners_are_never_touched():
    audit = rules(("audit-*", timedelta(days=30), "any"))
    # audit-a has no age, audit-b its owner's 90 days, owned-c (no rule) its owner's 7 days
    current = {"audit-a": ("branch", 1, None), "audit-b": ("tag", 2, 90 * DAY_MS), "owned-c": ("tag", 3, 7 * DAY_MS)}
    changes, record = expiry_run(current, audit, None)
    assert [(c.name, c.max_ref_age_ms, c.action) for c in changes] == [
        ("audit-a", 30 * DAY_MS, SET), ("audit-b", 30 * DAY_MS, SET)]
    assert parse_set_ages(record) == {"audit-a": SetAge(30 * DAY_MS, None), "audit-b": SetAge(30 * DAY_MS, 90 * DAY_MS)}

    # The rule narrows to 10 days: set again, each ref still remembering its age from before floe.
    current = {name: (kind, sid, 30 * DAY_MS if name != "owned-c" else age) for name, (kind, sid, age) in current.items()}
    ten = rules(("audit-*", timedelta(days=10), "any"))
    changes, record = expiry_run(current, ten, record)
    assert [(c.name, c.max_ref_age_ms_before, c.max_ref_age_ms) for c in changes] == [
        ("audit-a", 30 * DAY_MS, 10 * DAY_MS), ("audit-b", 30 * DAY_MS, 10 * DAY_MS)]
    assert parse_set_ages(record) == {"audit-a": SetAge(10 * DAY_MS, None), "audit-b": SetAge(10 * DAY_MS, 90 * DAY_MS)}

    # The rule goes: each ref gets back what it had before floe (no age; the owner's 90 days), owned-c untouched.
    current = {**current, "audit-a": ("branch", 1, 10 * DAY_MS), "audit-b": ("tag", 2, 10 * DAY_MS)}
    changes, record = expiry_run(current, (), record)
    assert [(c.name, c.snapshot_id, c.max_ref_age_ms_before, c.max_ref_age_ms, c.rule, c.action) for c in changes] == [
        ("audit-a", 1, 10 * DAY_MS, None, None, CLEARED), ("audit-b", 2, 10 * DAY_MS, 90 * DAY_MS, None, CLEARED)]
    assert record is None  # nothing of floe's left: the property is removed
    assert expiry_run({**current, "audit-a": ("branch", 1, None)}, (), record) == ([], None)


def test_an_age_the_owner_changed_after_floe_set_it_is_theirs():
    record = format_set_ages({"audit-a": SetAge(30 * DAY_MS, None), "gone": SetAge(DAY_MS, None)})
    current = {"audit-a": ("branch", 1, 45 * DAY_MS)}  # the owner set 45 days since; "gone" was removed
    changes, left = expiry_run(current, (), record)
    assert changes == [] and left is None  # no rule: nothing changed, and the record forgets both
    # With the rule still there, floe sets its age again and remembers the owner's 45 days for later.
    changes, left = expiry_run(current, rules(("audit-*", timedelta(days=30), "any")), record)
    assert [(c.name, c.max_ref_age_ms_before, c.max_ref_age_ms) for c in changes] == [("audit-a", 45 * DAY_MS, 30 * DAY_MS)]
    assert parse_set_ages(left) == {"audit-a": SetAge(30 * DAY_MS, 45 * DAY_MS)}


def test_a_record_that_does_not_parse_clears_nothing():
    current = {"audit-a": ("branch", 1, 30 * DAY_MS)}
    for text in ("{", "[]", '{"audit-a": 5}', '{"audit-a": {"set": "30"}}', '{"audit-a": {"set": true}}',
                 '{"audit-a": {"set": 2592000000, "before": "x"}}'):
        assert retention_changes(current, (), parse_set_ages(text)) == [], text
    # main is never changed, even when a record names it
    assert retention_changes({"main": ("branch", 1, 5)}, (), {"main": SetAge(5, None)}) == []
