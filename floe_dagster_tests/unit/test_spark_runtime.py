"""The Iceberg Spark runtime is chosen from the installed PySpark's line and spark.iceberg-version."""

import os

import pytest

from floe_dagster.errors import SettingsError
from floe_dagster.settings import DEFAULT_ICEBERG_VERSION, load_settings
from floe_dagster.spark.jars import SPARK_CONNECT_SERVER_PACKAGE, jar_file_name
from floe_dagster.spark.runtime import (
    effective_iceberg_version,
    iceberg_spark_runtime,
    installed_spark_line,
    spark_connect_server_packages,
    spark_packages,
)


def settings_from(tmp_path, text: str):
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "floe.yaml"
    path.write_text(text)
    return load_settings(path, environ={})


@pytest.mark.parametrize("line, iceberg, expected", [
    ("3.5", "1.12.0", "org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.12.0"),
    ("4.1", "1.12.0", "org.apache.iceberg:iceberg-spark-runtime-4.1_2.13:1.12.0"),
    ("3.5", "1.11.0", "org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.11.0"),
    ("3.5", "1.10.2", "org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.10.2"),
    ("4.0", "1.11.0", "org.apache.iceberg:iceberg-spark-runtime-4.0_2.13:1.11.0"),
    ("4.0", "1.10.2", "org.apache.iceberg:iceberg-spark-runtime-4.0_2.13:1.10.2"),
    ("4.1", "1.11.0", "org.apache.iceberg:iceberg-spark-runtime-4.1_2.13:1.11.0"),
])
def test_runtime_for_each_supported_spark_line(line, iceberg, expected):
    assert iceberg_spark_runtime(iceberg, line) == expected


@pytest.mark.parametrize("line, iceberg, message", [
    ("4.1", "1.10.2", "has no Spark runtime for Spark 4.1"),
    # Iceberg 1.12 dropped Spark 4.0 (Maven Central's iceberg-spark-runtime-4.0_2.13 ends at 1.11.0).
    ("4.0", "1.12.0", r"1.12.0 has no Spark runtime for Spark 4.0 .*last one for it is 1.11.0; set "
                      r"spark.iceberg-version to 1.11.0 \(or leave it unset\), or install PySpark 4.1"),
    ("4.2", "1.11.0", "PySpark 4.2 is not supported"),
    ("3.4", "1.11.0", "PySpark 3.4 is not supported"),
    ("3.5", "1.9.2", "older than floe-dagster supports"),
])
def test_unsupported_combinations_say_what_to_change(line, iceberg, message):
    with pytest.raises(SettingsError, match=message):
        iceberg_spark_runtime(iceberg, line)


def test_default_is_iceberg_1_11_for_the_installed_pyspark(tmp_path):
    settings = settings_from(tmp_path, "{}\n")
    assert settings.spark.iceberg_version is None and DEFAULT_ICEBERG_VERSION == "1.11.0"
    packages = spark_packages(settings)
    assert packages[0] == iceberg_spark_runtime("1.11.0", installed_spark_line())
    assert packages[1].startswith("org.xerial:sqlite-jdbc:")  # the embedded catalog's driver


def test_unset_on_spark_4_0_is_its_last_runtime_not_a_missing_one(tmp_path, monkeypatch):
    """Were the default 1.12.0, PySpark 4.0 without spark.iceberg-version would still get Iceberg 1.11.0
    (1.12 has no 4.0 runtime), and its AWS bundle on S3; the other lines 1.12.0."""
    monkeypatch.setattr("floe_dagster.spark.runtime.DEFAULT_ICEBERG_VERSION", "1.12.0")
    settings = settings_from(tmp_path, "catalog: {name: lake, properties: {type: sql, uri: 'sqlite:////d/c.db', "
                                       "warehouse: 's3://b/wh', s3.endpoint: 'http://127.0.0.1:9000'}}\n")
    assert effective_iceberg_version(settings, "4.0") == "1.11.0"
    assert spark_packages(settings, "4.0")[:2] == ["org.apache.iceberg:iceberg-spark-runtime-4.0_2.13:1.11.0",
                                                   "org.apache.iceberg:iceberg-aws-bundle:1.11.0"]
    assert effective_iceberg_version(settings, "3.5") == effective_iceberg_version(settings, "4.1") == "1.12.0"
    assert spark_packages(settings, "3.5")[1] == "org.apache.iceberg:iceberg-aws-bundle:1.12.0"


# Each selectable release, per line CI runs, as Maven Central has them (maven-metadata.xml, read when 1.12.0 was
# added): 1.12.0 and 1.11.0 for Spark 3.5 and 4.1, 1.10.x for Spark 3.5 only.
SELECTABLE = [("3.5", "1.12.0"), ("3.5", "1.11.0"), ("3.5", "1.10.2"), ("4.1", "1.12.0"), ("4.1", "1.11.0"),
              ("4.0", "1.11.0"), ("4.0", "1.10.2")]


@pytest.mark.parametrize("line, iceberg", SELECTABLE)
@pytest.mark.parametrize("how", ["floe.yaml", "environment"])
def test_each_selectable_release_resolves_its_own_jar(tmp_path, line, iceberg, how):
    """spark.iceberg-version (or FLOE_SPARK__ICEBERG_VERSION) picks the runtime coordinate and so the one jar
    file the cache is asked for: setup fetches that jar alone, never every release's."""
    path = tmp_path / "floe.yaml"
    path.write_text(f"spark:\n  iceberg-version: {iceberg}\n" if how == "floe.yaml" else "{}\n")
    settings = load_settings(path, environ={"FLOE_SPARK__ICEBERG_VERSION": iceberg} if how == "environment" else {})
    packages = spark_packages(settings, line)
    runtimes = [p for p in packages if ":iceberg-" in p]
    scala = "2.12" if line == "3.5" else "2.13"
    assert runtimes == [f"org.apache.iceberg:iceberg-spark-runtime-{line}_{scala}:{iceberg}"]
    assert jar_file_name(runtimes[0]) == f"iceberg-spark-runtime-{line}_{scala}-{iceberg}.jar"


def test_a_runtime_listed_in_packages_must_match_the_installed_pyspark(tmp_path):
    settings = settings_from(
        tmp_path, "spark:\n  packages: [org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.10.2]\n")
    # Matching: kept as the runtime (how 1.10.x was pinned before spark.iceberg-version), not doubled.
    packages = spark_packages(settings, "3.5")
    assert [p for p in packages if "spark-runtime" in p] == ["org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.10.2"]
    with pytest.raises(SettingsError, match=r"spark.packages lists .*3.5_2.12.*installed PySpark is 4.1.*iceberg-spark-runtime-4.1_2.13:1.11.0"):
        spark_packages(settings, "4.1")


def test_bad_iceberg_version_names_the_file_and_key(tmp_path):
    with pytest.raises(SettingsError, match=r"floe.yaml: spark.iceberg-version: must be an Iceberg release.*'latest'"):
        settings_from(tmp_path, "spark:\n  iceberg-version: latest\n")


def test_a_runtime_listed_in_jars_replaces_floes_or_is_refused(tmp_path):
    jar = "/opt/jars/iceberg-spark-runtime-3.5_2.12-1.10.2.jar"
    settings = settings_from(tmp_path, f"spark:\n  jars: [{jar}]\n")
    # Matching: Spark gets that jar (spark.jars) and no second runtime from floe-dagster.
    assert not [p for p in spark_packages(settings, "3.5") if "spark-runtime" in p]
    with pytest.raises(SettingsError, match=r"spark.jars lists .*3.5_2.12-1.10.2.jar, built for Spark 3.5 .*PySpark is 4.1"):
        spark_packages(settings, "4.1")


def test_spark_connect_server_jar_only_where_pyspark_lacks_one():
    assert spark_connect_server_packages("3.5") == [SPARK_CONNECT_SERVER_PACKAGE]
    assert spark_connect_server_packages("4.0") == spark_connect_server_packages("4.1") == []


# The runtime a real environment gets, for each line CI runs. ./dev test-spark4 sets
# FLOE_TEST_SPARK_LINE=4.1 for .venv-spark4, so there this must be PySpark 4.1's runtime.
INSTALLED_LINE_RUNTIMES = {
    "3.5": ("org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.11.0",
            "org.apache.iceberg:iceberg-spark-runtime-4.1_2.13:1.11.0"),
    "4.1": ("org.apache.iceberg:iceberg-spark-runtime-4.1_2.13:1.11.0",
            "org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.11.0"),
}


@pytest.mark.spark4_smoke
def test_the_installed_pyspark_gets_its_own_lines_runtime_and_refuses_another(tmp_path):
    line = installed_spark_line()
    if os.environ.get("FLOE_TEST_SPARK_LINE"):
        assert line == os.environ["FLOE_TEST_SPARK_LINE"], "this environment does not run the PySpark it was made for"
    assert line in INSTALLED_LINE_RUNTIMES, f"PySpark {line} is a line no CI environment runs"
    own, other = INSTALLED_LINE_RUNTIMES[line]
    packages = spark_packages(settings_from(tmp_path / "default", "{}\n"))
    assert packages[0] == own and not [p for p in packages[1:] if "spark-runtime" in p]
    listed = settings_from(tmp_path / "listed", f"spark:\n  packages: [{other}]\n")
    with pytest.raises(SettingsError, match=rf"spark.packages lists {other}, built for Spark .* the installed PySpark is {line}"):
        spark_packages(listed)
