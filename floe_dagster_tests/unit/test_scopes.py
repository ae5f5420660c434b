"""Table scopes for sharded code locations: named scopes (first match wins) and hash shards."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from floe_dagster.core.basics.scopes import DEFAULT_SCOPE, scope_named
from floe_dagster.core.basics.tables import TableName

TABLES = [TableName("demo", (ns,), f"t{i}") for ns in ("sales", "ops", "hr") for i in range(20)]
SHARDS = (("sales", "demo.sales.*"), ("rest", "*"))


def test_named_scopes_never_overlap_and_cover_everything():
    sales, rest = scope_named("sales", SHARDS), scope_named("rest", SHARDS)
    assert {t.namespace for t in sales.select(TABLES)} == {("sales",)}
    assert not set(sales.select(TABLES)) & set(rest.select(TABLES))
    assert set(sales.select(TABLES)) | set(rest.select(TABLES)) == set(TABLES)


@given(st.integers(min_value=1, max_value=7))
def test_hash_shards_partition_the_tables(count):
    shards = [scope_named(f"shard_{i}_of_{count}", ()) for i in range(count)]
    owners = [[s.name for s in shards if s.contains(t)] for t in TABLES]
    assert all(len(o) == 1 for o in owners)


def test_hash_shards_spread_and_are_stable():
    first = scope_named("shard_0_of_2", ())
    assert 15 < len(first.select(TABLES)) < 45
    assert first.select(TABLES) == scope_named("shard_0_of_2", ()).select(TABLES)


def test_bad_scope_names():
    with pytest.raises(ValueError, match="no shard named 'nope'"):
        scope_named("nope", SHARDS)
    with pytest.raises(ValueError, match="0 ≤ i < n"):
        scope_named("shard_2_of_2", ())
    assert DEFAULT_SCOPE.select(TABLES) == TABLES
