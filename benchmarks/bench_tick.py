"""Benchmark 2: the sensor tick end to end (``tick.gather`` + ``plan``) on a real catalog.

A PyIceberg ``SqlCatalog`` on SQLite with N tiny tables (1,000 by default; each created with one
append, in 10 namespaces), a real Dagster instance in a temporary ``DAGSTER_HOME``, the default
SQLite coordination database, and a policy with interval rules and a trigger condition that needs
the full health tier. The lakehouse is built once and kept (``--lake``), since building it takes
about a minute and a half; every run starts with an empty health cache and a new instance.

Ticks measured, each ``gather`` + ``plan`` as the debt-score sensor runs them:

``cold``            first tick: empty health cache (summary tier for all, the full tier within the
                    tick's 20 s health budget; what is left fills in over the next ticks)
``cold, cont.``     the following ticks until the full tier is complete
``warm``            nothing changed, same process (the sensor's code server keeps running)
``warm, forgotten``  nothing changed, in-memory records forgotten (as a restarted code server would)
``10 changed``      10 tables got one append each since the last tick

For each: seconds in ``gather`` and in ``plan``, and the files the HealthCollector read, split into
metadata files, manifest lists and manifests (the collector's own log), and, as an independent check,
every file PyIceberg's FileIOs opened in this process during the tick. Target: a warm tick reads no file of an unchanged table.

    python benchmarks/bench_tick.py [--tables 1000] [--lake /tmp/floe-bench/lake-1000] [--rebuild]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import textwrap
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pyarrow as pa  # noqa: E402
from _common import ROOT, machine, peak_rss_mib, table  # noqa: E402

POLICY = """
- name: lake-default
  tablePattern: "lake.*.*"
  rewriteDataFiles: {strategy: BINPACK}
  rewriteDataFilesSchedule: {interval: PT1H}
  expireSnapshots: {retainLast: 5, maxSnapshotAge: P1D}
  expireSnapshotsSchedule: {interval: PT1H}
  orphanCleanup: {retentionPeriodInDays: 3}
  orphanCleanupSchedule: {interval: PT6H}
  rewriteManifests: {}
  rewriteManifestsSchedule: {interval: PT2H}
  rewritePositionDeleteFiles: {}
  rewritePositionDeleteFilesSchedule: {interval: PT1H}
  triggerConditions: {smallFilePercentageAbove: 20, snapshotCountAbove: 20, triggerLogic: OR}
  healthThresholds: {smallFileSizeBytes: 8388608}
"""


def build_lake(lake: Path, n_tables: int, namespaces: int = 10) -> None:
    """N tables with one append each, in ``namespaces`` namespaces (idempotent: resumes)."""
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType

    lake.mkdir(parents=True, exist_ok=True)
    catalog = SqlCatalog("lake", uri=f"sqlite:///{lake}/catalog.db", warehouse=f"file://{lake}/warehouse")
    schema = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "v", StringType(), required=False))
    existing = {tuple(n) for n in catalog.list_namespaces()}
    for i in range(namespaces):
        if (f"ns{i:02d}",) not in existing:
            catalog.create_namespace(f"ns{i:02d}")
    have = {(ns[0], t[-1]) for ns in catalog.list_namespaces() for t in catalog.list_tables(ns)}
    started = time.perf_counter()
    for i in range(n_tables):
        ns, name = f"ns{i % namespaces:02d}", f"t{i:05d}"
        if (ns, name) in have:
            continue
        with catalog.create_table_transaction(f"{ns}.{name}", schema=schema) as txn:
            txn.append(pa.table({"id": pa.array([i], pa.int64()), "v": [f"row-{i}"]}))
        if i and i % 200 == 0:
            print(f"  built {i} tables ({time.perf_counter() - started:.0f} s)", flush=True)
    (lake / f"complete-{n_tables}").write_text("ok")


def write_config(root: Path, lake: Path) -> Path:
    (root / "policies").mkdir(parents=True, exist_ok=True)
    (root / "policies" / "policy.yaml").write_text(textwrap.dedent(POLICY))
    config = root / "floe.yaml"
    config.write_text(textwrap.dedent(f"""\
        data-dir: {root / 'data'}
        policies: [{root / 'policies'}]
        catalog:
          name: lake
          properties:
            type: sql
            uri: "sqlite:///{lake}/catalog.db?timeout=60"
            warehouse: "file://{lake}/warehouse"
        """))
    return config


class Reads:
    """Installs a HealthCollector subclass (``gather`` imports it at call time) recording reads."""

    def __init__(self) -> None:
        import floe_dagster.iceberg.health_collector as health

        self.health = health
        self.original = health.HealthCollector
        self.log: list[str] = []
        self.collect_s: list[tuple[str, float, int]] = []
        outer = self

        class Recording(self.original):  # type: ignore[misc, valid-type]
            def collect(self, tables=None, *, tier="summary", time_budget_s=None):
                snapshot = super().collect(tables, tier=tier, time_budget_s=time_budget_s)
                outer.log.extend(self.read_log)
                outer.collect_s.append((tier, snapshot.elapsed_s, len(snapshot.missing)))
                return snapshot

        health.HealthCollector = Recording

    def reset(self) -> None:
        self.log, self.collect_s = [], []

    def split(self) -> tuple[int, int, int]:
        metadata = sum(1 for p in self.log if p.endswith(".metadata.json"))
        lists = sum(1 for p in self.log if os.path.basename(p).startswith("snap-"))
        return metadata, lists, len(self.log) - metadata - lists

    def restore(self) -> None:
        self.health.HealthCollector = self.original


class FileOpens:
    """An independent count: every file PyIceberg opens for reading in this process (its pyarrow and
    fsspec FileIOs), whoever opens it — the collector, the catalog, anything else in the tick."""

    def __init__(self) -> None:
        import pyiceberg.io.fsspec as fsspec_io
        import pyiceberg.io.pyarrow as pyarrow_io

        self.log: list[str] = []
        self.patched = []
        for cls in (pyarrow_io.PyArrowFile, fsspec_io.FsspecInputFile):
            original = cls.open
            outer = self

            def counting_open(file, *args, _original=original, **kwargs):
                outer.log.append(file.location)
                return _original(file, *args, **kwargs)

            cls.open = counting_open
            self.patched.append((cls, original))

    def reset(self) -> None:
        self.log = []

    def restore(self) -> None:
        for cls, original in self.patched:
            cls.open = original


def one_tick(settings, instance, reads: Reads, label: str, rows: list, opens: "FileOpens | None" = None) -> object:
    from floe_dagster.core.plan.planner import plan
    from floe_dagster.coordination.database import Coordination
    from floe_dagster.scheduling.inputs import gather

    reads.reset()
    if opens is not None:
        opens.reset()
    now = datetime.now(timezone.utc)
    t0 = time.perf_counter()
    inputs = gather(settings, instance, Coordination(settings.coordination_url), now, None)
    data, missing = inputs.plan_input, inputs.health_missing
    t1 = time.perf_counter()
    result = plan(data)
    t2 = time.perf_counter()
    metadata, lists, manifests = reads.split()
    opened = len(opens.log) if opens is not None else "?"
    tiers = ", ".join(f"{tier} {s:.2f} s" for tier, s, _ in reads.collect_s)
    print(f"  {label}: gather {t1 - t0:.2f} s ({tiers}), plan {t2 - t1:.2f} s; reads: {metadata} metadata, "
          f"{lists} manifest lists, {manifests} manifests; files PyIceberg opened in the tick (independent count): "
          f"{opened}; full tier missing {missing}", flush=True)
    rows.append((label, f"{t1 - t0:.2f}", f"{t2 - t1:.2f}", f"{t2 - t0:.2f}", f"{(t2 - t0) / 60:.3f}",
                 metadata, lists, manifests, opened, missing))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tables", type=int, default=1000)
    parser.add_argument("--lake", type=Path, default=None, help="where the lakehouse is built and kept")
    parser.add_argument("--rebuild", action="store_true")
    args = parser.parse_args()
    print(machine())
    lake = (args.lake or Path(tempfile.gettempdir()) / "floe-bench" / f"lake-{args.tables}").resolve()
    if args.rebuild and lake.exists():
        shutil.rmtree(lake)
    if not (lake / f"complete-{args.tables}").exists():
        started = time.perf_counter()
        print(f"building {args.tables} tables in {lake} (once)", flush=True)
        build_lake(lake, args.tables)
        print(f"  built in {time.perf_counter() - started:.0f} s", flush=True)

    root = Path(tempfile.mkdtemp(prefix="floe-bench-tick-"))
    home = root / "dagster_home"
    home.mkdir()
    shutil.copyfile(ROOT / "dagster.yaml", home / "dagster.yaml")
    os.environ["DAGSTER_HOME"] = str(home)
    from dagster import DagsterInstance

    from floe_dagster.iceberg.health_collector import forget_parsed_records
    from floe_dagster.settings import load_settings

    settings = load_settings(write_config(root, lake), environ={})
    reads = Reads()
    opens = FileOpens()
    rows: list = []
    try:
        with DagsterInstance.get() as instance:
            print(f"{args.tables} tables, catalog {lake / 'catalog.db'}", flush=True)
            one_tick(settings, instance, reads, "cold (first tick)", rows, opens)
            for i in range(1, 10):
                if not rows[-1][-1]:
                    break
                one_tick(settings, instance, reads, f"cold, tick {i + 1}", rows, opens)
            one_tick(settings, instance, reads, "warm (nothing changed)", rows, opens)
            one_tick(settings, instance, reads, "warm again", rows, opens)
            forget_parsed_records()
            one_tick(settings, instance, reads, "warm, in-memory records forgotten (as a restarted code server)", rows, opens)

            from floe_dagster.iceberg.catalog import open_catalog

            catalog = open_catalog(settings.catalog)
            for i in range(10):
                catalog.load_table(f"ns{i:02d}.t{i:05d}").append(
                    pa.table({"id": pa.array([10**6 + i], pa.int64()), "v": ["new"]}))
            one_tick(settings, instance, reads, "10 tables changed", rows, opens)
    finally:
        reads.restore()
        opens.restore()
    print()
    print(table(rows, ["tick", "gather s", "plan s", "total s", "÷ 60 s limit", "metadata files read",
                       "manifest lists read", "manifests read", "files opened (independent count)",
                       "full tier missing"]))
    warm = [r for r in rows if r[0].startswith("warm")]
    cold = rows[0]
    if warm:
        print(f"\nwarm ÷ cold tick time: {float(warm[0][3]) / float(cold[3]):.3f}; warm metadata reads: "
              f"{[r[5] for r in warm]} (target 0); files opened in warm ticks: {[r[8] for r in warm]}")
    print(f"peak RSS {peak_rss_mib():.0f} MiB")
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
