"""Benchmark 3: health collection for one table, by tier, against PyIceberg's ``inspect.files()``.

Tables of 100, 1,000 and 10,000 tiny data files (built once with ``add_files`` of tiny parquet
files, in commits of at most 1,000 files, so the 10,000-file table has 10 manifests; kept in
``--lake``). For each table, median of ``--repeat`` runs, each with an empty health cache:

``summary``          ``HealthCollector.collect([t], tier="summary")``: the metadata file only
``full``             ``tier="full"``: also the manifest list and every manifest
``full, cached``     the same call again on an unchanged table (cache hit: no file read)
``inspect.files()``  ``catalog.load_table(t).inspect.files()``: what a user would write with
                     PyIceberg (one Arrow row per file, with column statistics)

    python benchmarks/bench_health.py [--files 100 1000 10000] [--repeat 7] [--lake DIR] [--rebuild]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from _common import machine, peak_rss_mib, table  # noqa: E402

BATCH = 1000


def catalog_at(lake: Path):
    from pyiceberg.catalog.sql import SqlCatalog

    lake.mkdir(parents=True, exist_ok=True)
    return SqlCatalog("lake", uri=f"sqlite:///{lake}/catalog.db?timeout=60", warehouse=f"file://{lake}/warehouse")


def build_table(catalog, name: str, files: int) -> None:
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType

    if catalog.table_exists(("bench", name)):
        return
    if ("bench",) not in {tuple(n) for n in catalog.list_namespaces()}:
        catalog.create_namespace("bench")
    schema = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "v", StringType(), required=False))
    started = time.perf_counter()
    tbl = catalog.create_table(("bench", name), schema=schema)
    folder = Path(tbl.location().replace("file://", "")) / "data"
    folder.mkdir(parents=True, exist_ok=True)
    for start in range(0, files, BATCH):
        paths = []
        for i in range(start, min(files, start + BATCH)):
            path = folder / f"tiny-{i:05d}-{uuid.uuid4().hex[:8]}.parquet"
            pq.write_table(pa.table({"id": pa.array([i, i + 1], pa.int64()), "v": ["a", "b"]}), path)
            paths.append(f"file://{path}")
        tbl.add_files(paths)
    print(f"  built bench.{name} ({files} files) in {time.perf_counter() - started:.0f} s", flush=True)


def median_of(fn, repeat: int) -> float:
    found = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        found.append(time.perf_counter() - t0)
    return statistics.median(found)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, nargs="+", default=[100, 1000, 10000])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--lake", type=Path, default=Path(tempfile.gettempdir()) / "floe-bench" / "health-lake")
    parser.add_argument("--rebuild", action="store_true")
    args = parser.parse_args()
    print(machine())
    if args.rebuild and args.lake.exists():
        shutil.rmtree(args.lake)
    catalog = catalog_at(args.lake.resolve())
    for n in args.files:
        build_table(catalog, f"files_{n}", n)

    from floe_dagster.core.basics.tables import TableName
    from floe_dagster.iceberg.health_collector import HealthCollector, forget_parsed_records

    rows = []
    for n in args.files:
        name = TableName("lake", ("bench",), f"files_{n}")
        reads: dict[str, int] = {}

        def collect(tier: str, cache: Path | None = None, keep: bool = False) -> None:
            forget_parsed_records()
            folder = cache or Path(tempfile.mkdtemp(prefix="floe-bench-health-"))
            collector = HealthCollector(catalog, folder)
            snapshot = collector.collect([name], tier=tier)
            assert name in snapshot.metrics, snapshot.errors
            assert snapshot.metrics[name].data_file_count == n
            reads[tier if cache is None else f"{tier}-cached"] = snapshot.files_read
            collector.close()
            if not keep:
                shutil.rmtree(folder, ignore_errors=True)

        def inspect_files() -> None:
            files = catalog.load_table(name.identifier).inspect.files()
            assert files.num_rows == n

        summary_s = median_of(lambda: collect("summary"), args.repeat)
        full_s = median_of(lambda: collect("full"), args.repeat)
        warm_dir = Path(tempfile.mkdtemp(prefix="floe-bench-health-warm-"))
        collect("full", warm_dir, keep=True)
        cached_s = median_of(lambda: collect("full", warm_dir, keep=True), args.repeat)
        shutil.rmtree(warm_dir, ignore_errors=True)
        load_s = median_of(lambda: catalog.load_table(name.identifier), args.repeat)
        inspect_s = median_of(inspect_files, args.repeat)
        print(f"{n} files: summary {summary_s:.3f} s, full {full_s:.3f} s, full cached {cached_s:.3f} s, "
              f"load_table {load_s:.3f} s, inspect.files() {inspect_s:.3f} s; reads {reads}", flush=True)
        rows.append((f"{n:,}", f"{summary_s * 1000:.0f}", f"{full_s * 1000:.0f}", f"{cached_s * 1000:.0f}",
                     f"{inspect_s * 1000:.0f}", f"{full_s / summary_s:.1f}", f"{inspect_s / full_s:.1f}",
                     f"{inspect_s / summary_s:.0f}", f"{reads['summary']} / {reads['full']} / {reads['full-cached']}"))
    print()
    print(table(rows, ["data files", "summary ms", "full ms", "full, cached ms", "inspect.files() ms",
                       "full ÷ summary", "inspect ÷ full", "inspect ÷ summary", "files read (summary/full/cached)"]))
    print(f"peak RSS {peak_rss_mib():.0f} MiB")


if __name__ == "__main__":
    main()
