"""The suite's local Spark drivers really start from the Java class archive ``./dev test`` made
(floe_dagster_tests/spark_class_archive.py): a driver started the way a Dagster run or a CLI of the suite
starts one (a new process, PYSPARK_SUBMIT_ARGS inherited) loads Spark's classes from the archive."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark

DRIVER = """
from pyspark.sql import SparkSession
spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
print("rows", spark.range(3).count())
spark.stop()
"""


def test_a_new_driver_loads_sparks_classes_from_the_suites_archive(tmp_path):
    if not os.environ.get("FLOE_TEST_JARS_CACHE") or os.environ.get("FLOE_TEST_CLASS_ARCHIVE") == "0":
        pytest.skip("not run by ./dev test, or run with FLOE_TEST_CLASS_ARCHIVE=0: no class archive to check")
    submit_args = os.environ.get("PYSPARK_SUBMIT_ARGS", "")
    archive = re.search(r"-XX:SharedArchiveFile=(\S+)", submit_args)
    assert archive, f"./dev test made no class archive (see .venv/spark-class-archives/*.log): {submit_args!r}"
    assert Path(archive.group(1)).is_file()
    # The same options, and the JVM's class-loading log (which names where each class came from) in a file.
    loads = tmp_path / "class-load.log"
    logged = submit_args.replace("-XX:SharedArchiveFile=", f"-Xlog:class+load=info:file={loads} -XX:SharedArchiveFile=")
    result = subprocess.run([sys.executable, "-c", DRIVER], env={**os.environ, "PYSPARK_SUBMIT_ARGS": logged},
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines() == ["rows 3"]  # nothing from the class sharing on stdout
    log = loads.read_text()
    assert re.search(r"org\.apache\.spark\.SparkContext source: shared objects file \(top\)", log), \
        [line for line in log.splitlines() if "SparkContext " in line]
