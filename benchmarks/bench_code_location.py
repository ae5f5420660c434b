"""Benchmark 6: loading the code location with 1,000 and 5,000 table assets.

The real ``floe_dagster.definitions`` module, with ``FLOE_CONFIG`` pointing at a floe.yaml whose
table cache holds N synthetic tables (``demo.nsNN.tNNNNN``) and two policies with 5 cron rules (5
schedules) and the sensor. Two layouts, 20 and 5 namespaces (asset groups): the load should not
depend on the number of namespaces. (Until issue 16 it did: with at most 10 namespaces each had a
job of its own, and every job over the multi-asset re-resolves it.)

Each size and layout is measured in a fresh process:

``import``       ``import floe_dagster.definitions`` (settings, policies, table cache, Definitions)
``resolve``      ``defs.get_repository_def()`` (the asset graph) and ``get_all_jobs()``
``snapshot``     ``RepositorySnap.from_def`` serialized (what the code server sends to Dagit and the
                 daemon), with its size
``validate``     ``dagster definitions validate -m floe_dagster.definitions`` end to end (CLI)

``--vs CHECKOUT`` measures each size on this checkout and then on another (the code before a change).
``--floor`` times ``dagster definitions validate`` of benchmarks/_dagster_floor.py too, Dagster alone with
definitions of floe's shape (as many table assets, partitions, kinds, tags, descriptions, checks, the job, the
schedules and the sensor) and no floe code, at each size and with one table: what Dagster costs whatever floe does.

    python benchmarks/bench_code_location.py [--tables 1000 5000] [--namespaces 20 5] [--no-cli] [--vs CHECKOUT]
                                              [--floor]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, TREE, TREE_VARIABLE, machine, make_code_location, run_timed, table  # noqa: E402


def measure_here() -> dict:
    """In this (fresh) process: FLOE_CONFIG and DAGSTER_HOME are set by the parent."""
    import resource

    t0 = time.perf_counter()
    import floe_dagster.definitions as location  # noqa: F401

    t1 = time.perf_counter()
    repo = location.defs.get_repository_def()
    jobs = repo.get_all_jobs()
    t2 = time.perf_counter()
    from dagster._core.remote_representation.external_data import RepositorySnap
    from dagster_shared.serdes import serialize_value

    snapshot = serialize_value(RepositorySnap.from_def(repo))
    t3 = time.perf_counter()
    return {
        "import_s": t1 - t0, "resolve_s": t2 - t1, "snapshot_s": t3 - t2, "snapshot_mb": len(snapshot) / 1e6,
        "assets": len(repo.asset_graph.get_all_asset_keys()), "jobs": len(jobs),
        "schedules": len(repo.schedule_defs), "sensors": len(repo.sensor_defs),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def measure_tree(tree: Path, n: int, namespaces: int, no_cli: bool) -> tuple[dict, float, float | None]:
    """One size and layout on the package of ``tree``: the in-process figures, the whole process's seconds, and
    ``dagster definitions validate``'s (None with ``no_cli``), in fresh processes."""
    dagster = str(Path(sys.executable).parent / "dagster")
    root = Path(tempfile.mkdtemp(prefix="floe-bench-location-"))
    try:
        config = make_code_location(root, n, namespaces)
        home = root / "dagster_home"
        home.mkdir()
        shutil.copyfile(ROOT / "dagster.yaml", home / "dagster.yaml")
        # PYTHONPATH: the CLI imports the definitions of ``tree``, not the package the virtualenv installed.
        env = {**os.environ, "FLOE_CONFIG": str(config), "DAGSTER_HOME": str(home), "PYTHONWARNINGS": "ignore",
               TREE_VARIABLE: str(tree), "PYTHONPATH": str(tree)}
        wall, out = run_timed([sys.executable, __file__, "--here"], env=env, cwd=str(root))
        found = json.loads(out.strip().splitlines()[-1])
        validate = None
        if not no_cli:
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            validate, _ = run_timed([dagster, "definitions", "validate", "-m", "floe_dagster.definitions"],
                                    env=env, cwd=str(root))
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            # Its CPU seconds too (the CLI and the processes it waited for): on a loaded machine the better measure.
            found["validate_cpu_s"] = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
        return found, wall, validate
    finally:
        shutil.rmtree(root, ignore_errors=True)


def measure_floor(n: int, namespaces: int) -> tuple[float, float]:
    """``dagster definitions validate`` of benchmarks/_dagster_floor.py with ``n`` tables: wall and CPU seconds."""
    root = Path(tempfile.mkdtemp(prefix="floe-bench-floor-"))
    try:
        home = root / "dagster_home"
        home.mkdir()
        shutil.copyfile(ROOT / "dagster.yaml", home / "dagster.yaml")
        env = {**os.environ, "DAGSTER_HOME": str(home), "PYTHONWARNINGS": "ignore",
               "FLOE_FLOOR_TABLES": str(n), "FLOE_FLOOR_NAMESPACES": str(namespaces)}
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        wall, _ = run_timed([str(Path(sys.executable).parent / "dagster"), "definitions", "validate", "-f",
                             str(Path(__file__).resolve().parent / "_dagster_floor.py")], env=env, cwd=str(root))
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    finally:
        shutil.rmtree(root, ignore_errors=True)


def print_floor(tables: list[int], namespaces: list[int]) -> None:
    """Dagster's own validate at each size and with one table (its fixed part), one after the other."""
    for groups in namespaces:
        for n in sorted({1, *tables}):
            wall, cpu = measure_floor(n, groups)
            print(f"floor (Dagster alone, floe's shape) {n:,} tables, {groups} namespaces: definitions validate "
                  f"{wall:.1f} s (CPU {cpu:.1f} s), load {os.getloadavg()[0]:.2f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tables", type=int, nargs="+", default=[1000, 5000])
    parser.add_argument("--namespaces", type=int, nargs="+", default=[20, 5])
    parser.add_argument("--no-cli", action="store_true")
    parser.add_argument("--vs", metavar="CHECKOUT", help="another checkout (the code before a change), measured "
                        "after this one for each size, with the ratios new ÷ old")
    parser.add_argument("--floor", action="store_true", help="Dagster's own validate of definitions of floe's "
                        "shape (benchmarks/_dagster_floor.py) at each size and with one table")
    parser.add_argument("--here", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.here:
        print(json.dumps(measure_here()))
        return
    print(machine())
    if args.floor:
        print_floor(args.tables, args.namespaces)
    rows = []
    trees = [("new", TREE), ("old", Path(args.vs).resolve())] if args.vs else [("", TREE)]
    for namespaces in args.namespaces:
        for n in args.tables:
            for label, tree in trees:
                found, wall, validate = measure_tree(tree, n, namespaces, args.no_cli)
                print(f"{label} {n} tables, {namespaces} namespaces: "
                      f"{json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in found.items()})}; "
                      f"process {wall:.1f} s; definitions validate "
                      f"{validate if validate is None else round(validate, 1)} s", flush=True)
                rows.append((f"{n:,}", namespaces, found["jobs"], found["schedules"], f"{found['import_s']:.1f}",
                             f"{found['resolve_s']:.1f}", f"{found['snapshot_s']:.1f}", f"{found['snapshot_mb']:.1f}",
                             f"{wall:.1f}", "-" if validate is None else f"{validate:.1f}",
                             f"{found['peak_rss_mb']:.0f}", label))
    if args.vs:
        for new, old in zip(rows[::2], rows[1::2]):
            ratios = [f"{float(a) / float(b):.2f}" if b not in ("-", "0.0") else "-" for a, b in
                      ((new[8], old[8]), (new[9], old[9]), (new[10], old[10]))]
            print(f"{new[0]} tables, {new[1]} namespaces, new ÷ old: whole process {ratios[0]}, "
                  f"definitions validate {ratios[1]}, peak RSS {ratios[2]}")
    print()
    print(table(rows, ["tables", "namespaces", "jobs", "schedules", "import s", "resolve s", "snapshot s",
                       "snapshot MB", "whole process s", "definitions validate s", "peak RSS MiB", "code"]))
    by = {(r[0], r[1]): float(r[8]) for r in rows}
    for namespaces in args.namespaces:
        small, big = f"{min(args.tables):,}", f"{max(args.tables):,}"
        if (small, namespaces) in by and (big, namespaces) in by and small != big:
            print(f"{namespaces} namespaces: {max(args.tables) // min(args.tables)}x the tables cost "
                  f"{by[(big, namespaces)] / by[(small, namespaces)]:.1f}x the load time")
    if len(args.namespaces) > 1:
        for n in args.tables:
            a, b = (f"{n:,}", args.namespaces[0]), (f"{n:,}", args.namespaces[-1])
            if a in by and b in by:
                print(f"{n:,} tables: {args.namespaces[-1]} namespaces ÷ {args.namespaces[0]} "
                      f"namespaces load time: {by[b] / by[a]:.2f}")


if __name__ == "__main__":
    main()
