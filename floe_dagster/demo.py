"""The embedded demo lakehouse: a SQLite catalog and a warehouse folder with real maintenance debt.

Idempotent: tables that exist are left alone. Six tables in two namespaces:
``sales.orders`` (hundreds of small files), ``sales.events`` (100+ snapshots and manifests),
``sales.customers`` (position delete files, written by Spark), ``ops.audit_log`` (orphan files older
and younger than the retention), ``ops.metrics`` (partitioned, skewed), ``ops.healthy``.
"""

from __future__ import annotations

import json
import logging
import os
import random
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.catalog import Catalog
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import DoubleType, LongType, NestedField, StringType, TimestamptzType

from floe_dagster.core.basics.tables import TableName
from floe_dagster.iceberg.catalog import open_catalog
from floe_dagster.settings import Settings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DemoSizes:
    small_files: int = 320
    snapshots: int = 110
    position_delete_commits: int = 6
    old_orphans: int = 4
    young_orphans: int = 2
    skewed_files: int = 30
    other_partition_files: int = 2


EVENT_SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "kind", StringType(), required=False),
    NestedField(3, "amount", DoubleType(), required=False),
    NestedField(4, "region", StringType(), required=False),
    NestedField(5, "at", TimestamptzType(), required=False),
)
ARROW_SCHEMA = pa.schema([
    pa.field("id", pa.int64()),
    pa.field("kind", pa.string()),
    pa.field("amount", pa.float64()),
    pa.field("region", pa.string()),
    pa.field("at", pa.timestamp("us", tz="UTC")),
])
REGIONS = ("eu", "us", "apac", "latam")
# The demo workspace's second code location: the pipelines that write the demo tables (demo_writers.py).
WRITERS_LOCATION = "demo-pipelines"


def rows(start: int, count: int, region: str | None = None) -> pa.Table:
    rng = random.Random(start)
    now = datetime.now(timezone.utc)
    return pa.table(
        {
            "id": list(range(start, start + count)),
            "kind": [rng.choice(("view", "click", "buy")) for _ in range(count)],
            "amount": [round(rng.random() * 100, 2) for _ in range(count)],
            "region": [region or REGIONS[(start + i) % len(REGIONS)] for i in range(count)],
            "at": [now - timedelta(minutes=i) for i in range(count)],
        },
        schema=ARROW_SCHEMA,
    )


def local_path(location: str) -> Path:
    """A ``file:`` location as a local path (PyIceberg writes ``file:///``, Spark ``file:/``)."""
    parsed = urlparse(location)
    if parsed.scheme not in ("", "file"):
        raise ValueError(f"the demo needs a local warehouse, got {location}")
    return Path(parsed.path)


def _write_files(table: Table, batches: list[pa.Table], prefix: str = "demo") -> list[str]:
    data_dir = local_path(table.location()) / "data"
    data_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for batch in batches:
        path = data_dir / f"{prefix}-{uuid.uuid4().hex}.parquet"
        pq.write_table(batch, path)
        paths.append(f"file://{path}")
    return paths


def _create(catalog: Catalog, name: str, partitioned: bool = False, properties: dict | None = None) -> Table:
    spec = PartitionSpec(PartitionField(4, 1000, IdentityTransform(), "region")) if partitioned else PartitionSpec()
    return catalog.create_table(name, schema=EVENT_SCHEMA, partition_spec=spec, properties=properties or {})


def build_demo_lakehouse(settings: Settings, sizes: DemoSizes = DemoSizes(), engine=None) -> list[str]:
    """Create whatever is missing; return one line per table saying what it has."""
    catalog = open_catalog(settings.catalog)
    for namespace in ("sales", "ops"):
        if (namespace,) not in {tuple(n) for n in catalog.list_namespaces()}:
            catalog.create_namespace(namespace)
    report = []

    if not catalog.table_exists("sales.orders"):
        table = _create(catalog, "sales.orders")
        table.add_files(_write_files(table, [rows(i * 10, 10) for i in range(sizes.small_files)]))
    report.append(f"sales.orders: {sizes.small_files} small data files (needs REWRITE_DATA_FILES)")

    if not catalog.table_exists("sales.events"):
        table = _create(catalog, "sales.events")
        for i in range(sizes.snapshots):
            table.append(rows(i * 5, 5))
    report.append(f"sales.events: {sizes.snapshots} snapshots and manifests (EXPIRE_SNAPSHOTS, REWRITE_MANIFESTS)")

    if not catalog.table_exists("ops.audit_log"):
        table = _create(catalog, "ops.audit_log")
        table.append(rows(0, 50))
        data_dir = local_path(table.location()) / "data"
        old = time.time() - 10 * 86400
        old_batches = [rows(1000 + i, 3) for i in range(sizes.old_orphans)]
        for path in _write_files(table, old_batches, "orphan-old"):
            os.utime(local_path(path), (old, old))
        _write_files(table, [rows(2000 + i, 3) for i in range(sizes.young_orphans)], "orphan-young")
        log.info("wrote orphan files into %s", data_dir)
    report.append(
        f"ops.audit_log: {sizes.old_orphans} orphan files 10 days old, {sizes.young_orphans} fresh ones "
        "(ORPHAN_CLEANUP)"
    )

    if not catalog.table_exists("ops.metrics"):
        table = _create(catalog, "ops.metrics", partitioned=True)
        batches = [rows(i * 7, 7, "eu") for i in range(sizes.skewed_files)]
        for region in REGIONS[1:]:
            batches += [rows(10_000 + i * 7, 7, region) for i in range(sizes.other_partition_files)]
        table.add_files(_write_files(table, batches))
    report.append(
        f"ops.metrics: partitioned by region, {sizes.skewed_files} files in 'eu' vs "
        f"{sizes.other_partition_files} elsewhere (skew)"
    )

    if not catalog.table_exists("ops.healthy"):
        table = _create(catalog, "ops.healthy")
        table.append(rows(0, 1000))
    report.append("ops.healthy: one file, one snapshot (nothing to do)")

    if not catalog.table_exists("sales.customers"):
        _build_position_deletes(settings, sizes, engine)
    report.append(f"sales.customers: {sizes.position_delete_commits} position delete files "
                  "(REWRITE_POSITION_DELETE_FILES)")
    return report


def _build_position_deletes(settings: Settings, sizes: DemoSizes, engine=None) -> None:
    """Spark writes the position deletes (PyIceberg cannot write merge-on-read deletes)."""
    from floe_dagster.spark.engine import IcebergSparkEngine
    from floe_dagster.spark.procedures import spark_table_reference

    engine = engine or IcebergSparkEngine.from_settings(settings)
    name = spark_table_reference(TableName(settings.catalog.name, ("sales",), "customers"))
    with engine.unit_of_work() as spark:
        spark.sql(
            f"CREATE TABLE {name} (id BIGINT, name STRING, tier STRING) USING iceberg "
            "TBLPROPERTIES ('format-version'='2', 'write.delete.mode'='merge-on-read', "
            "'write.update.mode'='merge-on-read', 'write.delete.granularity'='partition')"
        )
        spark.createDataFrame(
            [(i, f"customer-{i}", ("gold", "silver", "bronze")[i % 3]) for i in range(600)],
            "id BIGINT, name STRING, tier STRING",
        ).coalesce(1).writeTo(name).append()
        for i in range(sizes.position_delete_commits):
            spark.sql(f"DELETE FROM {name} WHERE id % 50 = {i}")


def write_workspace(home: Path) -> Path:
    """The demo's Dagit workspace, a file in DAGSTER_HOME that loads this package whatever folder Dagit starts
    in: floe's code location and the demo's pipelines that write its tables (floe_dagster/demo_writers.py)."""
    workspace = home / "workspace.yaml"
    folder = json.dumps(str(Path.cwd()))
    workspace.write_text(
        "load_from:\n"
        f"  - python_module:\n      module_name: floe_dagster.definitions\n      location_name: floe\n"
        f"      working_directory: {folder}\n"
        f"  - python_module:\n      module_name: floe_dagster.demo_writers\n"
        f"      location_name: {WRITERS_LOCATION}\n"
        f"      working_directory: {folder}\n"
    )
    return workspace
