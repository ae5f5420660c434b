"""``floe-dagster import --from polaris|s3tables|amoro`` through the real stack (issue 36, deliver 2): one
policy of each source is imported into the lake's own policy folder (Amoro's read from the tables' own
properties with PyIceberg, through the catalog name), plans, and runs with real Spark; and a table's
``history.expire.*`` properties change what its expiry keeps, bounded: an owner's
``max-snapshot-age-ms=0`` never expires the last hour's snapshots.

Tables are tiny (PyIceberg, one file a snapshot); the snapshots the expiries judge are dated three days
back (the fixture gives PyIceberg's clocks, a snapshot's time and the metadata's, an older start). The
expiries run in one run of the maintenance job over the four tables, as Dagit launches it."""

from __future__ import annotations

import datetime
import json
import time
from contextlib import contextmanager, nullcontext
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pytest
import pyiceberg.table.metadata as pyiceberg_metadata
import pyiceberg.table.snapshots as pyiceberg_snapshots
import pyiceberg.table.update as pyiceberg_update

from floe_dagster.cli import main
from floe_dagster.core.basics.tables import TableName
from floe_dagster.demo import rows
from floe_dagster.iceberg.catalog import load_table, open_catalog
from floe_dagster.iceberg.table_cache import refresh_table_cache
from floe_dagster.defs.build import MAINTENANCE_JOB, build_definitions
from floe_dagster.defs.names import asset_key_for
from floe_dagster.settings import load_settings
from floe_dagster_tests.conftest import write_settings
from floe_dagster_tests.reliability._support import create_fragmented_table

pytestmark = pytest.mark.spark

DAY_MS = 86_400_000
POLARIS = {"policies": [
    {"name": "expire-pol", "policy-type": "system.snapshot-expiry", "content": "{\"enable\": true}",
     "targets": [{"type": "namespace", "path": ["pol"]}]},
    {"name": "compact-pol", "policy-type": "system.data-compaction",
     "content": "{\"version\": \"2025-02-03\", \"enable\": true, \"config\": {\"compaction_strategy\": \"bin-pack\"}}",
     "targets": [{"type": "table-like", "path": ["pol", "owned"]}]}]}
S3TABLES = {"tables": [{"namespace": "s3", "name": "t", "configuration": {
    "icebergCompaction": {"status": "enabled", "settings": {"icebergCompaction": {"targetFileSizeMB": 64,
                                                                                   "strategy": "binpack"}}},
    "icebergSnapshotManagement": {"status": "enabled", "settings": {"icebergSnapshotManagement": {
        "minSnapshotsToKeep": 2, "maxSnapshotAgeHours": 24}}}}}]}
AMORO_PROPERTIES = {"table-expire.enabled": "true", "snapshot.keep.duration": "1d", "snapshot.keep.min-count": "1",
                    "self-optimizing.target-size": "67108864"}
# pol.owned: the owner keeps two snapshots, any older than an hour expire; pol.wiped: an owner asks for
# every snapshot but one to expire at once (age 0), which floe-dagster bounds to the last hour.
OWNED = {"history.expire.min-snapshots-to-keep": "2", "history.expire.max-snapshot-age-ms": "3600000"}
WIPED = {"history.expire.min-snapshots-to-keep": "1", "history.expire.max-snapshot-age-ms": "0"}


def make_table(settings, name: str, snapshots: int, properties: dict, days_back: int) -> None:
    """A table of ``snapshots`` one-file snapshots, made ``days_back`` days ago (0: now), with its properties."""
    table = TableName.parse(name, "demo")
    with pyiceberg_clock(days_back) if days_back else nullcontext():
        created = create_fragmented_table(settings, table, files=1)
        for index in range(1, snapshots):
            created.append(pa.Table.from_pylist(rows(index * 10, 10), schema=created.schema().as_arrow()))
        with created.transaction() as transaction:
            transaction.set_properties(properties)


@contextmanager
def pyiceberg_clock(days_back: int):
    """PyIceberg's clocks (a snapshot's time, the metadata's update times) ``days_back`` days back, a minute
    further at each reading, so every time the table's metadata records is in order and in the past."""
    readings = iter(time.time() - days_back * DAY_MS / 1000 + minute * 60 for minute in range(1000))

    class Past(datetime.datetime):
        @classmethod
        def now(cls, tz=None):
            return datetime.datetime.fromtimestamp(next(readings), tz)

    patched = {(pyiceberg_snapshots, "time"): SimpleNamespace(time=lambda: next(readings)),
               (pyiceberg_update, "datetime"): Past,
               (pyiceberg_metadata, "datetime"): SimpleNamespace(**{**vars(datetime), "datetime": Past})}
    saved = {key: getattr(*key) for key in patched}
    try:
        for (module, name), value in patched.items():
            setattr(module, name, value)
        yield
    finally:
        for (module, name), value in saved.items():
            setattr(module, name, value)


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    root = tmp_path_factory.mktemp("foreign")
    settings = load_settings(write_settings(root, "[]\n"), environ={})
    make_table(settings, "pol.owned", 4, OWNED, days_back=3)
    make_table(settings, "pol.wiped", 4, WIPED, days_back=0)
    make_table(settings, "s3.t", 4, {}, days_back=3)
    make_table(settings, "am.t", 4, AMORO_PROPERTIES, days_back=3)
    refresh_table_cache(settings)
    return settings


def snapshot_count(settings, name: str) -> int:
    return len(load_table(open_catalog(settings.catalog), TableName.parse(name, "demo")).metadata.snapshots)


def imported(lake, capsys, source: str, argument: str) -> str:
    folder = Path(lake.data_dir).parent / "policies"
    assert main(["import", "--from", source, argument, "--to", str(folder)]) == 0
    return capsys.readouterr().out


def test_one_policy_of_each_source_imports_plans_and_runs(lake, instance, tmp_path, capsys):
    for source, document in (("polaris", POLARIS), ("s3tables", S3TABLES)):
        path = tmp_path / f"{source}.json"
        path.write_text(json.dumps(document))
        assert "wrote " in imported(lake, capsys, source, str(path))
    out = imported(lake, capsys, "amoro", "demo")  # the catalog's name: its tables' own properties
    assert "read catalog demo: 1 policy" in out and "amoro.demo.am.t.yaml" in out

    assert main(["plan", "--json"]) == 0
    decisions = {(d["table"], d["operation"]): d for d in json.loads(capsys.readouterr().out)["decisions"]}
    expected = {("demo.pol.owned", "REWRITE_DATA_FILES"): "polaris.demo.pol.owned",
                ("demo.pol.wiped", "EXPIRE_SNAPSHOTS"): "polaris.demo.pol",
                ("demo.s3.t", "EXPIRE_SNAPSHOTS"): "s3tables.demo.s3.t",
                ("demo.am.t", "EXPIRE_SNAPSHOTS"): "amoro.demo.am.t"}
    assert {key: decisions[key]["policy"] for key in expected} == expected

    # The imported expiries run: one run of the maintenance job over the four tables (as Dagit launches it),
    # with real Spark; each table's own policy decides its arguments.
    defs = build_definitions(lake)
    selection = [asset_key_for(TableName.parse(name, "demo")) for name in ("pol.owned", "pol.wiped", "s3.t", "am.t")]
    result = defs.resolve_job_def(MAINTENANCE_JOB).execute_in_process(
        instance=instance, partition_key="EXPIRE_SNAPSHOTS", asset_selection=selection, raise_on_error=False)
    assert result.success
    # The owner's history.expire.* decide where the policy (Polaris' bare expiry) sets nothing: two kept.
    assert snapshot_count(lake, "pol.owned") == 2
    # max-snapshot-age-ms=0 is bounded to an hour: the four young snapshots stay (unbounded: one).
    assert snapshot_count(lake, "pol.wiped") == 4
    # S3 Tables keeps 2 (minSnapshotsToKeep; all are older than 24 hours); Amoro 1 (min-count; older than 1d).
    assert snapshot_count(lake, "s3.t") == 2 and snapshot_count(lake, "am.t") == 1
    policies = {key: instance.get_latest_materialization_event(key).asset_materialization.metadata["policy"].value
                for key in selection}
    assert policies == dict(zip(selection, ("polaris.demo.pol.owned", "polaris.demo.pol", "s3tables.demo.s3.t",
                                            "amoro.demo.am.t")))
