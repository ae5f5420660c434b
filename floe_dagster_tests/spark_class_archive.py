"""The suite's Java class archive for local Spark, made once by ``./dev test`` (set-up, not a test).

Each process of the suite that starts Spark in local mode (each pytest worker, and every Dagster run, CLI,
API server and daemon-launched run the tests start in a process of its own) starts a JVM that loads and
compiles the same ~20,000 classes of Spark, Scala and Hadoop: 11-13 s of a 2-core machine before its first
statement, and 6 s more for the first table it writes. Java's class-data sharing maps those classes from a
file written by one earlier JVM instead (JDK 13+: ``-XX:ArchiveClassesAtExit`` writes it,
``-XX:SharedArchiveFile`` reads it); with the JIT's first tier alone (``-XX:TieredStopAtLevel=1``, which
compiles quickly and is what short test statements need) a start and first write took 6.3 s against 14.8-23 s.

This script runs the statements the suite runs most (a table created, written in several commits, compacted,
its manifests rewritten, its snapshots expired, its orphans listed) in a JVM that writes the archive at its
exit. Only the classes on the JVM's own class path are archived (PySpark's jars): the Iceberg runtime,
which Spark loads from ``spark.jars`` through a class loader of its own, is loaded as before.

The archive is a test-suite matter only: ``./dev test`` hands it to the suite's Spark drivers through
``PYSPARK_SUBMIT_ARGS`` (which PySpark reads when it starts its JVM); floe-dagster itself never reads it.

Usage: ``python -m floe_dagster_tests.spark_class_archive ARCHIVE`` writes it (to ARCHIVE.part, then moved);
``... --submit-args ARCHIVE`` prints the PYSPARK_SUBMIT_ARGS that start a driver from it.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

# What the suite's JVMs are started with besides the archive: the JIT's first tier, and no word from the class
# sharing on stdout (a JVM whose class path does not match the archive, such as the Spark 4 subset's, says so
# there by default and runs without it: tests read the stdout of the CLIs they start).
JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -Xlog:cds=off -Xlog:cds+dynamic=off"


def submit_args(archive_option: str) -> str:
    """PYSPARK_SUBMIT_ARGS giving a local driver's JVM ``archive_option`` (the archive to write or to read) and
    :data:`JVM_OPTIONS`; PySpark splits it as a shell would."""
    return f"--conf \"spark.driver.extraJavaOptions={archive_option} {JVM_OPTIONS}\" pyspark-shell"


def make_archive(archive: Path) -> None:
    from floe_dagster.settings import load_settings
    from floe_dagster.spark.engine import IcebergSparkEngine
    from floe_dagster_tests.conftest import write_settings

    part = archive.with_name(archive.name + ".part")
    os.environ["PYSPARK_SUBMIT_ARGS"] = submit_args(f"-XX:ArchiveClassesAtExit={part}")
    root = Path(tempfile.mkdtemp(prefix="floe-class-archive-"))
    (root / "data").mkdir()
    settings = load_settings(write_settings(root, "[]"), environ={})
    engine = IcebergSparkEngine.from_settings(settings)
    try:
        with engine.unit_of_work() as spark:
            spark.sql("CREATE NAMESPACE IF NOT EXISTS demo.warm")
            spark.sql("CREATE TABLE demo.warm.events (id BIGINT, region STRING, ts TIMESTAMP) USING iceberg "
                      "PARTITIONED BY (region) TBLPROPERTIES ('format-version'='2')")
            for commit in range(3):
                spark.sql(f"INSERT INTO demo.warm.events VALUES ({commit}, 'eu', current_timestamp()), "
                          f"({commit + 10}, 'us', current_timestamp())")
            spark.sql("DELETE FROM demo.warm.events WHERE id = 1")
            for call in ("rewrite_data_files(table => 'warm.events', options => map('min-input-files', '2'))",
                         "rewrite_position_delete_files(table => 'warm.events')",
                         "rewrite_manifests(table => 'warm.events')",
                         "expire_snapshots(table => 'warm.events', retain_last => 1)",
                         "remove_orphan_files(table => 'warm.events', dry_run => true)"):
                spark.sql(f"CALL demo.system.{call}").collect()
            spark.sql("SELECT region, count(*) FROM demo.warm.events GROUP BY region").collect()
    finally:
        engine.stop()
    # The JVM writes the archive as it exits, which it does when its standard input closes (PySpark's gateway
    # watches it); wait for that before the archive is put in place, whole.
    from pyspark import SparkContext

    jvm = SparkContext._gateway.proc
    jvm.stdin.close()
    jvm.wait(timeout=300)
    if not part.is_file():
        sys.exit(f"the JVM wrote no class archive at {part}: the suite runs without one")
    part.replace(archive)


if __name__ == "__main__":
    if sys.argv[1] == "--submit-args":
        print(submit_args(f"-XX:SharedArchiveFile={sys.argv[2]}"))
    else:
        make_archive(Path(sys.argv[1]))
