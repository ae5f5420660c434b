"""Benchmark 17: the quarantine's cost on an S3-compatible server (issue 34: every orphan cleanup now
quarantines by default). S3 has no rename: floe moves each orphan into the quarantine with a
CopyObject and a DeleteObject (iceberg/file_store.py, 16 threads), and deletes the run folder after
its grace period with one listing and batched DeleteObjects (pyarrow's ``delete_dir``). Plain deletion
is Iceberg's S3FileIO's batched DeleteObjects over the listed paths (``s3.delete.batch-size``, 250).

The server is s3proxy with its file-system backend (floe_dagster_tests/servers.py, the test suite's
S3 server), on this machine. Each pair puts ``--objects`` objects of ``--size`` bytes under
``data/`` and then times, each on a fresh copy of them:

* ``batched delete``: the objects deleted in DeleteObjects requests of 1,000 keys (pyarrow's
  ``delete_dir_contents`` on the prefix: one listing, then the batches); what delete mode costs;
* ``one by one``: a DeleteObject per object on 16 threads (for scale: a deleter that does not batch);
* ``quarantine move``: floe's ``FileStore.move_many`` into ``_floe_quarantine/<run>/``, what the run
  pays (each object copied, then deleted);
* ``quarantine purge``: floe's ``FileStore.delete_folder`` of that run folder, what a later run pays
  once the grace period is over.

    python benchmarks/bench_quarantine_s3.py [--objects 1000] [--size 4096] [--pairs 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ensure_java, machine, table  # noqa: E402

BUCKET = "bench"


def put_objects(filesystem, prefix: str, count: int, size: int) -> list[str]:
    body = b"x" * size
    keys = [f"{BUCKET}/{prefix}/data/part-{i:06d}.parquet" for i in range(count)]

    def put(key: str) -> None:
        with filesystem.open_output_stream(key) as stream:
            stream.write(body)

    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(put, keys))
    return keys


def timed(work) -> float:
    started = time.perf_counter()
    work()
    return time.perf_counter() - started


def one_pair(server, store, pair: int, count: int, size: int) -> dict[str, float]:
    """Each mode on its own fresh objects; the seconds of each."""
    filesystem = server.filesystem()
    seconds = {}
    keys = put_objects(filesystem, f"batched-{pair}", count, size)
    seconds["batched delete"] = timed(lambda: filesystem.delete_dir_contents(f"{BUCKET}/batched-{pair}/data"))
    keys = put_objects(filesystem, f"single-{pair}", count, size)
    with ThreadPoolExecutor(max_workers=16) as pool:
        seconds["one by one"] = timed(lambda: list(pool.map(filesystem.delete_file, keys)))
    keys = put_objects(filesystem, f"moved-{pair}", count, size)
    run = f"s3://{BUCKET}/moved-{pair}/_floe_quarantine/20261202T000000Z-20261209T000000Z_bench"
    pairs = [(f"s3://{key}", f"{run}/{key.split('/', 2)[2]}") for key in keys]
    outcomes: list = []
    seconds["quarantine move"] = timed(lambda: outcomes.extend(store.move_many(pairs)))
    if any(outcomes):
        raise SystemExit(f"a move failed: {next(o for o in outcomes if o)}")
    seconds["quarantine purge"] = timed(lambda: store.delete_folder(run))
    left = [i for i in filesystem.get_file_info(_selector(f"{BUCKET}/moved-{pair}")) if i.type.name == "File"]
    if left:
        raise SystemExit(f"{len(left)} object(s) left after the purge, e.g. {left[0].path}")
    return seconds


def _selector(path: str):
    from pyarrow import fs as pafs

    return pafs.FileSelector(path, allow_not_found=True, recursive=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for flag, default in (("--objects", 1000), ("--size", 4096), ("--pairs", 3)):
        parser.add_argument(flag, type=int, default=default)
    args = parser.parse_args()
    ensure_java()
    from floe_dagster.iceberg.file_store import FileStore
    from floe_dagster_tests.servers import run_s3proxy

    print(machine(), flush=True)
    with tempfile.TemporaryDirectory(prefix="floe-bench-s3-") as root, run_s3proxy(Path(root)) as server:
        server.filesystem().create_dir(BUCKET)
        store = FileStore({"s3.endpoint": server.endpoint, "s3.access-key-id": server.access_key_id,
                           "s3.secret-access-key": server.secret_access_key, "s3.region": server.region,
                           "s3.force-virtual-addressing": "false"})
        runs = []
        for pair in range(args.pairs):
            runs.append(one_pair(server, store, pair, args.objects, args.size))
            print(f"pair {pair + 1}: " + ", ".join(f"{k} {v:.3f} s" for k, v in runs[-1].items()), flush=True)
    median = {mode: statistics.median(r[mode] for r in runs) for mode in runs[0]}
    base = median["batched delete"]
    rows = [[mode, f"{s:.3f}", f"{min(r[mode] for r in runs):.3f}-{max(r[mode] for r in runs):.3f}",
             f"{1000 * s / args.objects:.2f}", f"{s / base:.1f}"] for mode, s in median.items()]
    print(f"\n{args.objects} objects of {args.size} bytes, {args.pairs} pair(s), medians:")
    print(table(rows, ["mode", "median s", "range s", "ms per object", "÷ batched delete"]))
    whole = median["quarantine move"] + median["quarantine purge"]
    print(f"\nquarantine (move now + purge later) ÷ batched delete: {whole / base:.1f}; "
          f"the move alone ÷ one by one: {median['quarantine move'] / median['one by one']:.2f}")


if __name__ == "__main__":
    main()
