"""The safety envelope's check of a table's own location (core/storage/table_location.py): the pure rule."""

from __future__ import annotations

import pytest

from floe_dagster.core.policies.envelope import TABLE_LOCATION, check_operation, own_location_check
from floe_dagster.core.operation_kinds.expire_snapshots import ExpireSnapshotsConfig
from floe_dagster.core.operation_kinds.orphan_cleanup import OrphanCleanupConfig
from floe_dagster.core.operations import Operation
from floe_dagster.core.policies.owner_overrides import KEYS
from floe_dagster.core.policies.policy import validate_policy_paths
from floe_dagster.core.storage import table_location
from floe_dagster.core.storage.table_location import KnownLocations, check_table_location, table_folders
from floe_dagster.core.basics.tables import TableName

T = TableName("lake", ("db",), "orders")
LAKE = KnownLocations(
    warehouse="s3://Bucket/wh",
    namespaces={"db": "s3://bucket/wh/db", "ops": "s3://bucket/elsewhere/ops"},
    tables={"lake.db.orders": ("s3://bucket/wh/db/orders",),
            "lake.db.customers": table_folders(None, "s3://bucket/wh/db/customers/metadata/00001-a.metadata.json"),
            "lake.db.events": ("s3://bucket/wh/db/events",)},
)


def refusals(location: str, known: KnownLocations = LAKE, nested=()) -> tuple[str, ...]:
    return check_table_location(T, location, known, nested).refusals


def test_a_table_at_its_own_folder_is_ok():
    assert refusals("s3://bucket/wh/db/orders") == ()
    assert refusals("s3://bucket/wh/db/orders/") == ()  # a trailing slash is the same folder


@pytest.mark.parametrize("location", ["s3://bucket/wh", "s3://bucket/wh/", "s3a://BUCKET/wh", "s3n://bucket//wh/.",
                                      "s3://bucket/", "s3://bucket/wh/db/../"])
def test_the_warehouse_root_or_above_is_refused_however_it_is_spelled(location):
    found = refusals(location)
    assert found and "warehouse root" in found[0]


def test_a_namespace_folder_is_refused_even_without_its_tables_known():
    found = refusals("s3://bucket/elsewhere/ops", KnownLocations(namespaces={"ops": "s3://bucket/elsewhere/ops"}))
    assert found == ("'s3://bucket/elsewhere/ops' is the location of namespace 'ops' (s3://bucket/elsewhere/ops): "
                     "listing it would remove the files of the namespace's tables",)


def test_another_tables_folder_is_refused():
    assert any("it is the location of table 'lake.db.events'" in r for r in refusals("s3://bucket/wh/db/events"))


def test_a_table_known_only_by_its_metadata_location_counts():
    """A SQL catalog lists metadata locations: the folder above ``metadata`` is the table's."""
    assert any("lake.db.customers" in r for r in refusals("s3://bucket/wh/db/customers"))


def test_a_table_that_moved_since_its_health_record_is_known_at_its_new_location():
    """known_locations merges a health record's location (maybe stale) with the catalog's current metadata
    location: the folder above that metadata folder is the table's now, and a table inside it is refused."""
    moved = KnownLocations(tables={"lake.db.events": table_folders(
        "s3://bucket/wh/db/events_old", "s3://bucket/wh/db/events/metadata/00002-b.metadata.json")})
    found = refusals("s3://bucket/wh/db/events/data", moved)
    assert found and "lies inside the location of table 'lake.db.events' (s3://bucket/wh/db/events)" in found[0]


@pytest.mark.parametrize("location, named", [
    ("s3://bucket/wh/db/customers/metadata", "it is the location of table 'lake.db.customers'"),  # its metadata
    ("s3a://BUCKET/wh/db/events/", "it is the location of table 'lake.db.events'"),
    ("s3://bucket/wh/db/orders/../events/data", "lies inside the location of table 'lake.db.events'"),
    ("s3://bucket//wh/./db/events/x", "lies inside the location of table 'lake.db.events'"),
])
def test_another_tables_folders_however_the_owner_spells_them(location, named):
    assert any(named in refusal for refusal in refusals(location))


def test_one_metadata_file_registered_under_two_names_refuses_both():
    twice = table_folders(None, "s3://bucket/wh/db/orders/metadata/00003-c.metadata.json")
    known = KnownLocations(tables={"lake.db.orders": twice, "lake.db.copy": twice})
    assert any("it is the location of table 'lake.db.copy'" in r for r in refusals("s3://bucket/wh/db/orders", known))


def test_a_sibling_whose_name_extends_another_is_not_inside_it():
    assert refusals("s3://bucket/wh/db/events2") == ()
    assert refusals("s3://bucket/wh/db/event") == ()


def test_a_table_inside_another_tables_folder_is_refused():
    found = refusals("s3://bucket/wh/db/events/data")
    assert found and "lies inside the location of table 'lake.db.events'" in found[0]


def test_a_container_that_holds_the_root_never_refuses_the_tables_under_it():
    """One owner pointing a table at the root refuses that table, never the fleet under it."""
    known = KnownLocations(warehouse="s3://bucket/wh", tables={**LAKE.tables, "lake.db.bad": ("s3://bucket/wh",)})
    assert refusals("s3://bucket/wh/db/orders", known) == ()


def test_two_tables_put_inside_another_never_make_it_look_like_a_container_of_many():
    """An owner of two tables puts them at ``<victim>/data`` and ``<victim>/x``: each would list the victim's
    data files. The tables under a folder never excuse it (their owners chose where they are): all refused."""
    known = KnownLocations(warehouse="s3://bucket/wh", namespaces={"db": "s3://bucket/wh/db"}, tables={
        "lake.db.victim": ("s3://bucket/wh/db/victim", "s3://bucket/wh/db/victim/metadata"),
        "lake.db.a": ("s3://bucket/wh/db/victim/data",), "lake.db.c": ("s3://bucket/wh/db/victim/x",)})
    for name, location in (("a", "s3://bucket/wh/db/victim/data"), ("c", "s3a://bucket/wh/db/victim/x/")):
        found = check_table_location(TableName("lake", ("db",), name), location, known).refusals
        assert found == ("it lies inside the location of table 'lake.db.victim' (s3://bucket/wh/db/victim): listing "
                         "it would remove the files that table has there; a policy may name nested tables in "
                         "orphanCleanup.nestedTables",)
    assert not check_table_location(TableName("lake", ("db",), "victim"), "s3://bucket/wh/db/victim", known).ok


def test_inside_a_quarantine_is_refused():
    found = refusals("s3://bucket/wh/db/events/_floe_quarantine/20261124T101500Z_r1/data", KnownLocations())
    assert found and "inside a quarantine" in found[0]
    configured = KnownLocations(quarantine_location="s3://q/floe")
    assert "overlaps floe's quarantine location" in refusals("s3a://q/floe/lake", configured)[0]


def test_nested_tables_opt_in_leaves_their_folders_out():
    known = KnownLocations(tables={"lake.db.orders": ("file:/wh/db/orders",),
                                   "lake.db.archive": ("file:/wh/db/orders/archive",)})
    refused = check_table_location(T, "/wh/db/orders", known)
    assert refused.refusals == ("it holds the location of table 'lake.db.archive' (file:/wh/db/orders/archive): "
                                "listing it would remove the files of that table; a policy may name nested tables in "
                                "orphanCleanup.nestedTables",)
    allowed = check_table_location(T, "file:///wh/db/orders", known, ["db.archive"])
    assert allowed.ok and allowed.excluded == ("file:/wh/db/orders/archive",)
    # Known only by its metadata location (a SQL catalog's listing): its whole folder is left out.
    listed = KnownLocations(tables={"lake.db.archive": table_folders(None, "/wh/db/orders/archive/metadata/1.json")})
    assert check_table_location(T, "/wh/db/orders", listed, ["lake.db.archive"]).excluded == (
        "file:/wh/db/orders/archive", "file:/wh/db/orders/archive/metadata")


def test_a_check_against_a_fleet_of_50000_tables_costs_look_ups_not_a_pass(monkeypatch):
    """The folders (the tables', the warehouse's and the namespaces') are parsed once into a sorted index; a
    check then parses nothing more, whatever the fleet's size."""
    known = KnownLocations(warehouse="s3://bucket/wh", namespaces={f"ns{n}": f"s3://bucket/wh/ns{n}" for n in range(50)},
                           quarantine_location="s3://bucket/q", tables={
        f"lake.ns{i % 50}.t{i}": (f"s3://bucket/wh/ns{i % 50}/t{i}",) for i in range(50_000)})
    known.index  # built once per run or plan
    parsed = []
    counting = table_location._lenient
    monkeypatch.setattr(table_location, "_lenient", lambda text: parsed.append(text) or counting(text))
    for i in range(1_000):
        assert check_table_location(TableName("lake", (f"ns{i % 50}",), f"t{i}"), f"s3://bucket/wh/ns{i % 50}/t{i}",
                                    known).ok
    assert parsed == []


def test_a_fleet_under_the_root_is_named_in_a_short_message():
    known = KnownLocations(tables={f"lake.db.t{i:03}": (f"s3://bucket/wh/db/t{i:03}",) for i in range(500)})
    (message,) = refusals("s3://bucket/wh", known)
    assert message.startswith("it holds the location of 500 other tables: 'lake.db.t000' (s3://bucket/wh/db/t000), ")
    assert message.count("lake.db.") == 3
    assert "and 497 more: listing it would remove the files of those tables" in message


def test_the_same_location_is_never_allowed_by_the_opt_in():
    known = KnownLocations(tables={"lake.db.twin": ("file:/wh/db/orders",)})
    assert not check_table_location(T, "/wh/db/orders", known, ["db.twin"]).ok


def test_an_unreadable_location_is_refused():
    assert "cannot be read" in refusals("s3://bucket/wh/db/%2e%2e/x")[0]


def test_local_spellings_compare_equal():
    known = KnownLocations(warehouse="file:///data/wh")
    assert refusals("file:/data/wh", known) and refusals("/data/wh/", known)
    assert refusals("file://localhost/data", known)
    assert refusals("file:/data/wh2", known) == ()


def test_the_verdict_names_the_field_and_only_kinds_that_list_or_delete_are_checked():
    config = OrphanCleanupConfig()
    own = own_location_check(T, Operation.ORPHAN_CLEANUP, config, "s3://bucket/wh", LAKE)
    verdict = check_operation("fleet", Operation.ORPHAN_CLEANUP, config, "s3://bucket/wh", table=T.qualified,
                              own_location=own)
    assert verdict.status == "refused" and verdict.refusals[0].field == TABLE_LOCATION
    assert "table location: 's3://bucket/wh' is the catalog's warehouse root" in verdict.message()
    assert own_location_check(T, Operation.EXPIRE_SNAPSHOTS, ExpireSnapshotsConfig(), "s3://bucket/wh", LAKE)
    assert own_location_check(T, Operation.REWRITE_DATA_FILES, None, "s3://bucket/wh", LAKE) is None


def test_nested_tables_is_validated_in_both_policy_formats():
    with pytest.raises(ValueError, match="name each nested table exactly"):
        OrphanCleanupConfig.from_mapping({"nestedTables": ["db.*"]})
    assert OrphanCleanupConfig.from_mapping({"nestedTables": ["db.archive"]}).nested_tables == ("db.archive",)
    assert ExpireSnapshotsConfig.from_mapping({"nestedTables": ["db.archive"]}).nested_tables == ("db.archive",)


def test_nested_tables_in_the_policy_loader_format_and_a_bad_one_named(tmp_path):
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text('policies:\n  - name: hive\n    pattern: "lake.db.orders"\n'
                    '    orphan-cleanup: {nested-tables: [db.archive]}\n')
    bad.write_text('policies:\n  - name: hive\n    pattern: "lake.db.orders"\n'
                   '    orphan-cleanup: {nested-tables: ["s3://b/wh/db/orders/archive"]}\n')
    loaded = validate_policy_paths([good])
    assert loaded.errors == []
    assert loaded.policies.get("hive").config(Operation.ORPHAN_CLEANUP).nested_tables == ("db.archive",)
    errors = validate_policy_paths([bad]).errors
    assert len(errors) == 1 and "bad.yaml" in str(errors[0]) and "nested-tables" in str(errors[0])
    assert "name each nested table exactly" in str(errors[0])


def test_no_table_owner_can_opt_their_table_in_as_nested():
    """nestedTables is the policy's alone: no floe.* table property sets it."""
    assert not [key for key in KEYS if "nested" in key]
