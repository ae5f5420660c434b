"""Recoverable orphan deletion, the pure half (core/storage/quarantine.py): where a quarantined file goes and
comes back from (no table's folder ever nests in another's), when a run folder is purged (an injected
clock: the later of its promise and the rule in force), when a run quarantines (every run unless the
policy opts out), that an unknown file time is young, which locations are refused, and
``orphanCleanup.quarantine`` in both policy formats."""

from __future__ import annotations

import json
import textwrap
from datetime import datetime, timedelta, timezone

import pytest

from floe_dagster.core.operation_kinds.orphan_cleanup import OrphanCleanupConfig
from floe_dagster.core.operations import Operation
from floe_dagster.core.policies.policy import PolicyError, parse_policies_text
from floe_dagster.core.policies.policy_formats import to_loader_policy
from floe_dagster.core.storage.quarantine import (
    QuarantinePolicy,
    QuarantineRun,
    escape_component,
    is_old,
    listing_location_problem,
    parse_run_folder,
    placement_problem,
    quarantine_choice,
    quarantine_location_problem,
    quarantine_root,
    quarantine_roots,
    run_folder_name,
    select_run,
    store_location,
    table_folder,
)
from floe_dagster.core.basics.tables import TableName

T = TableName("demo", ("sales",), "orders")
NOW = datetime(2026, 11, 24, 10, 15, 0, tzinfo=timezone.utc)


def test_one_location_however_it_is_spelled():
    same = {store_location(text) for text in ("file:/wh/t", "file:///wh/t", "/wh/t", "/wh//t/", "/wh/x/../t")}
    assert same == {store_location("/wh/t")}
    assert store_location("file:/wh/t").uri == "file:/wh/t"  # as Iceberg's listing spells it
    assert store_location("s3a://bucket/wh/t") == store_location("s3://bucket/wh/t")  # Iceberg's equal schemes
    assert store_location("s3://bucket/wh/t").uri == "s3://bucket/wh/t"
    assert store_location("s3://other/wh/t") != store_location("s3://bucket/wh/t")
    for relative in ("wh/t", "", "file:wh/t"):
        with pytest.raises(ValueError, match="not an absolute location"):
            store_location(relative)


def test_inside_means_below_a_path_component_never_a_longer_name():
    table = store_location("file:/wh/sales/orders")
    assert table.contains(store_location("file:/wh/sales/orders/data/a.parquet"))
    assert not table.contains(store_location("file:/wh/sales/orders_archive/a.parquet"))
    assert not table.contains(store_location("file:/wh/sales/orders/../other/a.parquet"))
    assert table.relative(store_location("/wh/sales/orders/data/x=1/a.parquet")) == "data/x=1/a.parquet"
    assert table.relative(table) is None and table.relative(store_location("/elsewhere/a")) is None


def test_a_file_goes_to_its_run_folder_under_its_path_relative_to_the_table():
    root = quarantine_root("file:///wh/sales/orders", T)
    assert root.uri == "file:/wh/sales/orders/_floe_quarantine"
    folder = run_folder_name(NOW, "6f1c2a3b-0000-4000-8000-000000000001")
    assert folder == "20261124T101500Z_6f1c2a3b-0000-4000-8000-000000000001"
    original = store_location("file:/wh/sales/orders/data/day=1/a.parquet")
    relative = store_location("file:/wh/sales/orders").relative(original)
    assert root.child(folder, relative).uri == f"file:/wh/sales/orders/_floe_quarantine/{folder}/data/day=1/a.parquet"
    # A configured location: one folder per table, hidden too, whatever the names hold.
    hostile = TableName("lake", ("..", "a/b"), "name with space")
    configured = quarantine_root("s3://lake/wh/t", hostile, "s3://quarantine/floe/")
    assert configured.uri == "s3://quarantine/floe/_floe_quarantine/lake/%2E%2E.a%2Fb.name%20with%20space"
    assert [r.uri for r in quarantine_roots("s3://lake/wh/t", T, "s3://q/p")] == [
        "s3://q/p/_floe_quarantine/demo/sales.orders", "s3://lake/wh/t/_floe_quarantine"]
    assert escape_component(".") == "%2E" and escape_component("a.b") == "a.b"


def test_no_tables_quarantine_folder_holds_or_names_another_tables():
    """Table ``a.b``'s configured quarantine held ``a.b.x``'s in a subfolder (``…/a/b/x``): its purge
    and restore reached it. Each table now has one folder, two levels below the location."""
    names = [TableName("demo", ("a",), "b"), TableName("demo", ("a", "b"), "x"),
             TableName("demo", ("a", "b"), run_folder_name(NOW, "r")), TableName("demo", ("a.b",), "x"),
             TableName("demo", ("a",), "b.x"), TableName("demo", ("a%2Eb",), "x"), TableName("other", ("a",), "b")]
    roots = [quarantine_root("s3://lake/wh/t", name, "s3://q/p") for name in names]
    assert len(set(roots)) == len(names)  # a dot inside a name is not a namespace separator
    for one in roots:
        assert len(one.path.split("/")) == len(store_location("s3://q/p/_floe_quarantine").path.split("/")) + 2
        assert not any(one != other and (one.contains(other) or other.contains(one)) for other in roots)
    assert table_folder(names[1]) == "a.b.x" and table_folder(names[3]) == "a%2Eb.x"
    assert parse_run_folder(table_folder(names[2])) is None  # a table named like a run folder is no run folder


def test_run_folders_name_their_time_and_run_and_nothing_else_is_one():
    run = parse_run_folder(run_folder_name(NOW, "abc-123"))
    assert run == QuarantineRun("20261124T101500Z_abc-123", NOW, "abc-123")  # an older release's name
    promised = parse_run_folder(run_folder_name(NOW, "abc-123", timedelta(days=7)))
    assert promised == QuarantineRun("20261124T101500Z-20261201T101500Z_abc-123", NOW, "abc-123",
                                     NOW + timedelta(days=7))
    assert run_folder_name(NOW, "../../etc") == "20261124T101500Z_------etc"  # nothing but letters, digits, dashes
    for other in ("notes", "20261124T101500Z", "20261124T101500Z_", "2026-11-24_abc", "20261124T101500Z_a/b"):
        assert parse_run_folder(other) is None  # left alone by purge and restore


def test_the_grace_period_counts_from_the_run_folders_time():
    grace = timedelta(days=7)
    runs = [parse_run_folder(run_folder_name(NOW - timedelta(days=d), f"r{d}")) for d in (8, 7, 6)]
    assert [r.due(grace) for r in runs] == [NOW - timedelta(days=1), NOW, NOW + timedelta(days=1)]


def test_the_purge_date_is_the_later_of_the_runs_promise_and_the_rule_in_force():
    """A shrunk grace period (or another policy's) never brings a recorded promise forward; a longer one
    keeps the files longer. Before, the grace in force at purge time alone decided."""
    promised = parse_run_folder(run_folder_name(NOW, "r", timedelta(days=7)))
    assert promised.due(timedelta(hours=1)) == NOW + timedelta(days=7)  # shrunk: the promise holds
    assert promised.due(timedelta(days=30)) == NOW + timedelta(days=30)  # lengthened: the rule in force
    older = parse_run_folder(run_folder_name(NOW, "old"))  # no date in its name: its marker's, if any
    assert older.due(timedelta(hours=1), recorded=NOW + timedelta(days=7)) == NOW + timedelta(days=7)
    assert older.due(timedelta(hours=1)) == NOW + timedelta(hours=1)  # nothing recorded: the rule in force


def test_a_renamed_folder_never_brings_its_markers_promise_forward():
    """The name and the marker each record the run's time and purge date; a folder renamed to earlier
    dates (its time a year back, its promise passed) is still kept until the marker's promise, and the
    rule in force counts from the later time. Before, the name's dates alone decided: purged at once."""
    renamed = parse_run_folder(run_folder_name(NOW - timedelta(days=365), "r", timedelta(hours=1)))
    promise, grace = NOW + timedelta(days=7), timedelta(days=7)
    assert renamed.due(grace, recorded=promise, recorded_at=NOW) == promise
    assert renamed.due(timedelta(days=30), recorded=promise, recorded_at=NOW) == NOW + timedelta(days=30)
    assert renamed.due(grace) == NOW - timedelta(days=358)  # without the marker: the name is all there is
    honest = parse_run_folder(run_folder_name(NOW, "r", timedelta(days=7)))
    assert honest.due(grace, recorded=NOW - timedelta(days=1), recorded_at=NOW - timedelta(days=2)) == promise


def test_an_unknown_file_time_is_young():
    cutoff = NOW - timedelta(days=3)
    assert is_old(cutoff - timedelta(seconds=1), cutoff)
    assert not is_old(cutoff, cutoff) and not is_old(None, cutoff)  # unread: never old, so never removed


def test_every_cleanup_quarantines_unless_the_policy_opts_out():
    unset, on, off = QuarantinePolicy(), QuarantinePolicy(enabled=True), QuarantinePolicy(enabled=False)
    assert quarantine_choice(unset, dry_run=False).enabled and quarantine_choice(None, dry_run=False).enabled
    assert "quarantined by default" in quarantine_choice(None, False).reason
    assert "kept P7D" in quarantine_choice(None, False).reason
    assert "kept P3D" in quarantine_choice(QuarantinePolicy(grace_period="P3D"), False).reason
    assert quarantine_choice(on, dry_run=False).enabled
    off_choice = quarantine_choice(off, dry_run=False)  # the policy's explicit choice
    assert not off_choice.enabled and "opts out" in off_choice.reason
    assert not quarantine_choice(on, dry_run=True).enabled  # a dry run moves nothing


def test_the_policys_quarantine_options_are_checked_with_clear_messages():
    config = OrphanCleanupConfig.from_mapping({"quarantine": {"enabled": True, "gracePeriod": "p3d"}})
    assert config.quarantine == QuarantinePolicy(True, "P3D") and config.quarantine.grace == timedelta(days=3)
    assert config.to_json() == {"quarantine": {"enabled": True, "gracePeriod": "P3D"}}
    assert OrphanCleanupConfig.from_mapping({"quarantine": False}).quarantine == QuarantinePolicy(enabled=False)
    assert OrphanCleanupConfig.from_mapping({}).quarantine is None
    assert QuarantinePolicy().grace == timedelta(days=7)  # the default
    bad = {
        "quarantine: expected a mapping {enabled, gracePeriod} or true/false, got 'yes'": {"quarantine": "yes"},
        "quarantine.gracePeriod: 'seven days' is not an ISO-8601 duration": {"quarantine": {"gracePeriod": "seven days"}},
        "quarantine.gracePeriod: must be at least PT1H, got 'PT5M'": {"quarantine": {"gracePeriod": "PT5M"}},
        "quarantine.grace: unknown field; did you mean 'gracePeriod'?": {"quarantine": {"grace": "P1D"}},
        "quarantine.enabled: expected true or false": {"quarantine": {"enabled": "sometimes"}},
    }
    for message, raw in bad.items():
        with pytest.raises(ValueError) as raised:
            OrphanCleanupConfig.from_mapping(raw)
        assert message in str(raised.value), str(raised.value)


def test_both_policy_formats_write_the_quarantine():
    camel = parse_policies_text(json.dumps([{"name": "p", "tablePattern": "demo.*",
                                             "orphanCleanup": {"quarantine": {"enabled": True, "gracePeriod": "P3D"}}}]))
    kebab = parse_policies_text(textwrap.dedent("""\
        policies:
          - name: p
            pattern: "demo.*"
            orphan-cleanup: {quarantine: {enabled: true, grace-period: P3D}}
        """))
    assert camel.get("p").configs[Operation.ORPHAN_CLEANUP] == kebab.get("p").configs[Operation.ORPHAN_CLEANUP]
    assert to_loader_policy({"orphanCleanup": {"quarantine": {"enabled": True, "gracePeriod": "P3D"}}}) == {
        "orphan-cleanup": {"quarantine": {"enabled": True, "grace-period": "P3D"}}}
    with pytest.raises(PolicyError) as raised:
        parse_policies_text("policies:\n  - {name: p, pattern: 'demo.*', orphan-cleanup: {quarantine: "
                            "{grace-period: PT1M, gracePeriod: P1D}}}")
    assert any("orphan-cleanup.quarantine.grace-period: must be at least PT1H" in e for e in raised.value.errors)
    assert any("orphan-cleanup.quarantine.gracePeriod: unknown field" in e for e in raised.value.errors)


def test_no_listing_may_start_inside_a_quarantine():
    roots = quarantine_roots("file:/wh/t", T, None)
    assert listing_location_problem(None, roots) is None
    assert listing_location_problem("file:/wh/t", roots) is None  # the table: its quarantine stays hidden
    assert listing_location_problem("/wh/t/data", roots) is None
    for inside in ("file:/wh/t/_floe_quarantine", "file:///wh/t/_floe_quarantine/20261124T101500Z_r/data",
                   "/wh/t/data/../_floe_quarantine"):
        problem = listing_location_problem(inside, roots)
        assert problem and "lies inside the quarantine file:/wh/t/_floe_quarantine" in problem


def test_a_configured_quarantine_never_lies_inside_a_table():
    warehouse = "s3://lake/warehouse"
    assert quarantine_location_problem("s3://quarantine/floe", warehouse) is None
    assert quarantine_location_problem("s3://lake/quarantine", warehouse) is None  # same bucket, beside the tables
    for bad in ("s3://lake/warehouse/q", "s3a://lake/warehouse", "s3://lake", "s3://lake/warehouse/../warehouse/x"):
        assert "overlaps the catalog's warehouse" in quarantine_location_problem(bad, warehouse), bad
    assert "not an absolute location" in quarantine_location_problem("quarantine", warehouse)
    assert "root" in quarantine_location_problem("/", None)
    # At run time, against the table itself (a table may live outside the warehouse).
    assert placement_problem(quarantine_root("/t", T), "/t") is None
    assert placement_problem(store_location("s3://q/p/_floe_quarantine/demo/sales/orders"), "s3://lake/t") is None
    assert "overlaps the table's location" in placement_problem(store_location("s3://lake/t/q"), "s3://lake/t")
    assert "overlaps the table's location" in placement_problem(store_location("s3://lake"), "s3://lake/t")


def test_restore_names_a_run_by_id_folder_prefix_or_latest():
    runs = [parse_run_folder(run_folder_name(NOW - timedelta(days=d), f"{name}-0")) for d, name in
            ((3, "aaa1"), (1, "aaa2"), (2, "bbb"))]
    assert select_run(runs, "latest").run_id == "aaa2-0"
    assert select_run(runs, "bbb").run_id == "bbb-0"
    assert select_run(runs, "aaa1-0").run_id == "aaa1-0"
    assert select_run(runs, runs[0].name).run_id == "aaa1-0"
    with pytest.raises(LookupError, match="'aaa' matches 2 runs"):
        select_run(runs, "aaa")
    with pytest.raises(LookupError, match="no quarantined run 'zzz'; the quarantine holds: aaa1-0, bbb-0, aaa2-0"):
        select_run(runs, "zzz")
    with pytest.raises(LookupError, match="holds no run"):
        select_run([], "latest")


def test_a_path_is_cut_without_a_parse_only_when_it_is_clean():
    table = store_location("file:///wh/t")
    for spelled in ("file:/wh/t/data/a.parquet", "file:///wh/t/data/a.parquet", "/wh/t/data/a.parquet"):
        assert table.relative_text(spelled) == "data/a.parquet"
    # Anything else is parsed, so a path cannot leave the table by its spelling.
    assert table.relative_text("file:/wh/t/../u/a.parquet") is None
    assert table.relative_text("file:/wh/t/data/../../u/a.parquet") is None
    assert table.relative_text("file:/wh/t//data/./a.parquet") == "data/a.parquet"
    assert table.relative_text("file://host/wh/t/a.parquet") is None  # another authority
    assert table.relative_text("file:/wh/t_old/a.parquet") is None and table.relative_text("file:/wh/t") is None
    bucket = store_location("s3a://lake/wh/t")
    assert bucket.relative_text("s3://lake/wh/t/data/a") == "data/a"
    assert bucket.relative_text("s3a://lake/wh/t/data/a") == "data/a"  # parsed: s3a is s3
    assert bucket.relative_text("s3://other/wh/t/data/a") is None


def test_explain_shows_whether_a_tables_cleanups_quarantine():
    from floe_dagster.core.operation_kinds.orphan_cleanup import SPEC
    from floe_dagster.core.operation_kinds.spec import ExplainView

    def shown(raw):
        config = OrphanCleanupConfig.from_mapping(raw)
        return SPEC.explain(ExplainView(None, config, None, NOW, lambda: None))["quarantine"]

    assert shown({}) == {"enabled": True, "gracePeriod": "P7D", "explicit": False,
                         "reason": quarantine_choice(None, False).reason}
    off = shown({"quarantine": False})
    assert off["enabled"] is False and off["explicit"] is True and "opts out" in off["reason"]
    assert shown({"quarantine": {"gracePeriod": "P14D"}})["gracePeriod"] == "P14D"
    assert SPEC.explain(ExplainView(None, None, None, NOW, lambda: None))["quarantine"] is None
