"""Benchmark 16: lost commit races, the same table maintained by polling alone and by the after-write trigger
(issue 28's second "done when").

Two copies of one fragmented table (the same files), side by side in one process and one time window, so both
sides share the machine's load. One writer, a Dagster multi-asset run in a real instance (its two assets name
the tables with ``dagster/table_name``), writes both copies the same way: every ``--period`` seconds a burst of
``--commits`` PyIceberg commits ``--gap`` seconds apart, alternating a copy-on-write delete of one row (which
replaces the data file holding it) and an append of 5 rows, the same ids on both copies. Its assets
materialize when the burst ends, as a pipeline's asset does when its run ends. Each copy's compaction is
floe's real step (``IcebergSparkEngine.maintain``, REWRITE_DATA_FILES through Spark, one shared session):

* **polling**: every ``--poll`` seconds, compact when the table has 2 data files or more (floe's 60 s poll
  with a small-file condition, time scaled; 2 is both sides' ``min-input-files``);
* **after-write**: every second, floe's sensor code reads the writer's new materializations with its cursor
  (``learn_writers``) and the after-write rule (``core.schedules.after_write.after_write_due``, settle ``--settle``
  seconds) says when the compaction is due.

Counted per side: the writer's commits refused (``CommitFailedException``: a compaction committed between
the writer's read and its commit; or PyIceberg's ``ValidationException`` when a compaction replaced a file
its delete was replacing; the writer reloads and retries), the compactions refused (floe's
``CommitConflict``: the writer's delete replaced a file the rewrite was replacing), the compactions that
committed, and the data files left at the end.

    python benchmarks/bench_after_write_races.py [--duration 270] [--period 45] [--commits 8] [--gap 2]
                                                 [--poll 5] [--settle 2]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import embedded_settings, ensure_java, fragmented_table, machine, table, use_dagster_home  # noqa: E402

SIDES = ("polling", "after-write")
QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
FILES, ROWS_PER_FILE = 20, 10
POLICY = """
- name: bench
  tablePattern: "demo.bench.*"
  rewriteDataFiles: {}
  rewriteDataFilesSchedule: {afterWrite: {settle: PT0S}}
"""


def writer_job(catalog_settings, names: dict[str, str], args, counts: dict[str, Counter]):
    """The writer: one run is one burst on both copies; its assets materialize at the end of the burst."""
    from dagster import AssetSpec, Definitions, MaterializeResult, multi_asset
    from pyiceberg.exceptions import CommitFailedException, ValidationException
    from pyiceberg.expressions import EqualTo

    from floe_dagster.demo import rows
    from floe_dagster.iceberg.catalog import open_catalog

    specs = [AssetSpec(["bench", side.replace("-", "_")], metadata={"dagster/table_name": f"demo.{names[side]}"})
             for side in SIDES]

    def commit(side: str, change) -> None:
        for _ in range(50):
            try:
                change(open_catalog(catalog_settings).load_table(names[side]))
                return
            except (CommitFailedException, ValidationException):  # the catalog's check, or the delete's
                counts[side]["writer commits refused"] += 1
        raise RuntimeError(f"the writer lost 50 races in a row on {names[side]}")

    @multi_asset(specs=specs)
    def bench_writer(context):
        burst = int(context.run.tags.get("burst", "0"))
        for i in range(args.commits):
            victim = ((burst * args.commits + i) % (FILES * ROWS_PER_FILE // 2)) * 2
            for side in SIDES:
                if i % 2 == 0:
                    commit(side, lambda t: t.delete(EqualTo("id", victim)))
                else:
                    commit(side, lambda t: t.append(rows(1_000_000 + burst * 100 + i * 10, 5)))
                counts[side]["writer commits"] += 1
            time.sleep(args.gap)
        for spec in specs:
            yield MaterializeResult(asset_key=spec.key, metadata=dict(spec.metadata))

    return Definitions(assets=[bench_writer]).resolve_implicit_global_asset_job_def()


def compaction(engine, name, counts: Counter) -> None:
    from floe_dagster.core.operation_kinds.rewrite_data_files import RewriteDataFilesConfig
    from floe_dagster.core.operations import Operation
    from floe_dagster.errors import CommitConflict, FailedAfterCommit

    counts["compactions"] += 1
    started = time.monotonic()
    try:
        outcome = engine.maintain(name, Operation.REWRITE_DATA_FILES, RewriteDataFilesConfig(min_input_files=2),
                                  datetime.now(timezone.utc))
        counts["compactions committed"] += bool(outcome.new_snapshot_ids)
    except CommitConflict:
        counts["compactions refused"] += 1
    except FailedAfterCommit as exc:  # committed, then a read after it failed: counted, the loop goes on
        counts["compactions committed"] += 1
        counts["committed, then the row check failed"] += 1
        print(f"compaction of {name.qualified}: {exc}", flush=True)
    counts["compaction s (sum)"] += round(time.monotonic() - started)


def data_files(catalog_settings, identifier: str) -> int:
    from floe_dagster.iceberg.catalog import open_catalog

    return len(open_catalog(catalog_settings).load_table(identifier).inspect.files())


def polling(settings, engine, name, identifier, args, stop, counts) -> None:
    while not stop.wait(args.poll):
        if data_files(settings.catalog, identifier) >= 2:  # the rewrite's min-input-files
            compaction(engine, name, counts)


def after_write(settings, engine, name, args, stop, counts, instance) -> None:
    from floe_dagster.coordination.database import Coordination
    from floe_dagster.core.schedules.after_write import AfterWrite, after_write_due
    from floe_dagster.scheduling.writer_facts import learn_writers

    coordination, cursor, last_start = Coordination(settings.coordination_url), None, None
    rule = AfterWrite(settle=timedelta(seconds=args.settle))
    while not stop.wait(1.0):
        cursor, _ = learn_writers(instance, coordination, [name], (), "demo", cursor)
        now = datetime.now(timezone.utc)
        if after_write_due(rule, coordination.writer_rows().get(name.qualified, ()), last_start, now).due:
            last_start = now
            compaction(engine, name, counts)


def run(args) -> dict[str, Counter]:
    from dagster import DagsterInstance

    from floe_dagster.core.basics.tables import TableName
    from floe_dagster.iceberg.catalog import open_catalog
    from floe_dagster.spark.engine import IcebergSparkEngine

    root = Path(tempfile.mkdtemp(prefix="floe-bench-races-"))
    try:
        use_dagster_home(root)
        config, settings = embedded_settings(root, POLICY)
        os.environ["FLOE_CONFIG"] = str(config)
        catalog = open_catalog(settings.catalog)
        identifiers = {side: f"bench.{side.replace('-', '_')}" for side in SIDES}
        for identifier in identifiers.values():
            fragmented_table(catalog, identifier, FILES, ROWS_PER_FILE)
        names = {side: TableName.parse(identifiers[side], "demo") for side in SIDES}
        counts = {side: Counter() for side in SIDES}
        engine = IcebergSparkEngine.from_settings(settings)
        with engine.unit_of_work() as spark:
            spark.sql("SELECT 1").collect()  # the JVM and catalog start before the clock does
        with DagsterInstance.get() as instance:
            job, stop = writer_job(settings.catalog, identifiers, args, counts), threading.Event()
            loops = [threading.Thread(target=polling, args=(settings, engine, names["polling"],
                                                            identifiers["polling"], args, stop, counts["polling"])),
                     threading.Thread(target=after_write, args=(settings, engine, names["after-write"], args, stop,
                                                                counts["after-write"], instance))]
            for loop in loops:
                loop.start()
            started, burst = time.monotonic(), 0
            while time.monotonic() - started < args.duration:
                job.execute_in_process(instance=instance, tags={"burst": str(burst)}, run_config=QUIET)
                burst += 1
                time.sleep(max(0.0, started + burst * args.period - time.monotonic()))
            time.sleep(args.settle + 2)  # the last burst's after-write compaction may start
            stop.set()
            for loop in loops:
                loop.join()
        for side in SIDES:
            counts[side]["bursts"] = burst
            counts[side]["data files at the end"] = data_files(settings.catalog, identifiers[side])
        engine.stop()
        return counts
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=270.0, help="seconds of writing")
    parser.add_argument("--period", type=float, default=45.0, help="seconds from one burst's start to the next")
    parser.add_argument("--commits", type=int, default=8, help="commits per burst")
    parser.add_argument("--gap", type=float, default=2.0, help="seconds between a burst's commits")
    parser.add_argument("--poll", type=float, default=5.0, help="the polling side's interval, seconds")
    parser.add_argument("--settle", type=float, default=2.0, help="the after-write side's settle, seconds")
    args = parser.parse_args()
    print(machine(), flush=True)
    ensure_java()
    counts = run(args)
    keys = ["bursts", "writer commits", "writer commits refused", "compactions", "compactions committed",
            "compactions refused", "committed, then the row check failed", "compaction s (sum)",
            "data files at the end"]
    print(table([[key, counts["polling"][key], counts["after-write"][key]] for key in keys],
                ["", "polling", "after-write"]))
    lost = {side: counts[side]["writer commits refused"] + counts[side]["compactions refused"] for side in SIDES}
    print(f"commit races lost: polling {lost['polling']}, after-write {lost['after-write']}")
    print(machine())


if __name__ == "__main__":
    main()
