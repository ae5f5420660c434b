"""The README's "Supported versions" table is checked row by row against what the code accepts: the
Iceberg runtime chosen for each Spark line and Iceberg release it lists (and refused for the ones it
does not), pyproject.toml's ranges for Python, Dagster, PyIceberg and PySpark, the catalogs and
storage Spark is configured for, and, for its "Run by CI" column, the lock files and ./dev commands
that run those combinations."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from floe_dagster.core.storage.object_storage import S3_FILE_IO
from floe_dagster.errors import SettingsError
from floe_dagster.settings import (
    DEFAULT_ICEBERG_VERSION, DEFAULT_POSTGRES_JDBC, DEFAULT_SQLITE_JDBC, CatalogSettings, Settings,
)
from floe_dagster.spark.catalog_conf import spark_catalog_conf
from floe_dagster.spark.runtime import SCALA_FOR_SPARK_LINE, effective_iceberg_version, iceberg_spark_runtime

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
DEV = (ROOT / "dev").read_text()
SPARK_ROW = re.compile(r"^Spark (\d+\.\d+) \(PySpark (\d+\.\d+), Scala (\d+\.\d+)\)$")
# Iceberg release lines the table may list; each is checked both ways (listed: accepted, else refused).
ICEBERG_LINES = ("1.9", "1.10", "1.11", "1.12")


def release_line(version: str) -> str:
    return ".".join(version.split(".")[:2])


DEFAULT_ICEBERG_LINE = release_line(DEFAULT_ICEBERG_VERSION)


def supported_versions() -> dict[str, tuple[str, str]]:
    """``component -> (supported, run by CI)`` from the README's delimited table."""
    match = re.search(r"<!-- supported-versions: begin[^>]*-->\n(.*?)\n<!-- supported-versions: end -->", README, re.S)
    assert match, "README.md has no '<!-- supported-versions: begin/end -->' section"
    rows = {}
    for line in match.group(1).splitlines()[2:]:  # after the header and its |---| line
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        assert len(cells) == 3, f"README supported-versions row {line!r} must have 3 cells"
        rows[cells[0]] = (cells[1], cells[2])
    return rows


ROWS = supported_versions()
SPARK_ROWS = {SPARK_ROW.match(name): cells for name, cells in ROWS.items() if name.startswith("Spark")}


def requirement(name: str) -> Requirement:
    return next(r for r in map(Requirement, PROJECT["dependencies"]) if r.name == name)


def lines_of(specifier: SpecifierSet, candidates: list[str]) -> set[str]:
    """The ``major.minor`` lines among ``candidates`` whose every release (x.y.0 to x.y.99) the range admits."""
    return {c for c in candidates if f"{c}.0" in specifier and f"{c}.99" in specifier}


def listed_lines(text: str) -> set[str]:
    """``1.13.x`` or ``3.11`` (a list, comma-separated) as ``major.minor`` lines."""
    return {re.fullmatch(r"(\d+\.\d+)(\.x)?", part.strip()).group(1) for part in text.split(",")}


def neighbours(lines: set[str]) -> list[str]:
    """The listed lines and the minor versions around each, to check the range stops where the table does."""
    around = set(lines)
    for line in lines:
        major, minor = map(int, line.split("."))
        around |= {f"{major}.{minor + 1}", f"{major}.{max(minor - 1, 0)}", f"{major + 1}.0"}
    return sorted(around)


def locked(lock: str, package: str) -> Version:
    found = re.search(rf"^{re.escape(package)}==([^\s;]+)", (ROOT / "requirements" / lock).read_text(), re.M)
    assert found, f"requirements/{lock} does not pin {package}"
    return Version(found.group(1))


def test_every_row_is_known():
    assert set(ROWS) - {name for name in ROWS if name.startswith("Spark")} == {
        "Python", "Dagster", "PyIceberg", "Java", "Catalogs", "Storage"}
    assert all(SPARK_ROWS), f"Spark rows must read 'Spark X.Y (PySpark X.Y, Scala A.B)': {list(ROWS)}"


def test_python_is_what_pyproject_requires():
    supported, ci = ROWS["Python"]
    lines = listed_lines(supported)
    assert lines_of(SpecifierSet(PROJECT["requires-python"]), neighbours(lines)) == lines
    assert listed_lines(ci) <= lines


@pytest.mark.parametrize("component, package", [("Dagster", "dagster"), ("PyIceberg", "pyiceberg")])
def test_dagster_and_pyiceberg_ranges_are_pyprojects(component, package):
    supported, ci = ROWS[component]
    lines = listed_lines(supported)
    assert lines_of(requirement(package).specifier, neighbours(lines)) == lines, f"pyproject's {package} range"
    for lock in ("spark3.5.lock", "spark4.1.lock"):  # what CI installs
        assert f"{locked(lock, package).major}.{locked(lock, package).minor}" in listed_lines(ci.split(" (")[0])


def test_java_is_what_dev_picks_for_every_spark_line():
    assert ROWS["Java"] == ("17", "17")
    default = re.search(r"accepted=\$\{1:-([0-9|]+)\}", DEV)
    assert default and "17" in default.group(1).split("|"), "./dev's setup_java must accept Java 17"
    assert "setup_java 17; setup_spark4" in DEV, "the Spark 4 environment must run on Java 17"


def test_each_spark_line_gets_exactly_the_iceberg_releases_listed():
    assert {m.group(1) for m in SPARK_ROWS} == set(SCALA_FOR_SPARK_LINE), "every Spark line the code knows, no other"
    for row, (supported, _) in SPARK_ROWS.items():
        line, pyspark, scala = row.groups()
        assert pyspark == line and SCALA_FOR_SPARK_LINE[line] == scala, row.group(0)
        listed = re.fullmatch(r"Iceberg (.*)", supported).group(1).split(", ")
        defaults = [entry for entry in listed if entry.endswith(" (default)")]
        default = effective_iceberg_version(Settings(), line)  # spark.iceberg-version unset
        assert defaults == [f"{release_line(default)} (default)"], f"{row.group(0)}: the default is {default}"
        releases = {entry.removesuffix(" (default)").removesuffix(".x") for entry in listed}
        for iceberg in ICEBERG_LINES:
            version = default if iceberg == release_line(default) else f"{iceberg}.0"
            if iceberg in releases:
                assert iceberg_spark_runtime(version, line) == (
                    f"org.apache.iceberg:iceberg-spark-runtime-{line}_{scala}:{version}")
            else:
                with pytest.raises(SettingsError):
                    iceberg_spark_runtime(version, line)


# PySpark lines published on PyPI around the supported ones (3.6 never existed: 3.5 was followed by 4.0).
PUBLISHED_PYSPARK_LINES = ["3.3", "3.4", "3.5", "4.0", "4.1", "4.2", "4.3"]


def test_pyprojects_pyspark_range_is_the_listed_spark_lines():
    lines = {m.group(1) for m in SPARK_ROWS}
    assert lines_of(requirement("pyspark").specifier, PUBLISHED_PYSPARK_LINES) == lines


def test_the_ci_column_is_what_dev_test_runs():
    for row, (_, ci) in SPARK_ROWS.items():
        line = row.group(1)
        lock = ROOT / "requirements" / f"spark{line}.lock"
        if ci == "not run":
            assert not lock.exists(), f"{row.group(0)}: requirements/{lock.name} exists, so CI may run it"
            continue
        ran = re.fullmatch(r"Iceberg (\d+\.\d+): the (whole suite|Spark 4 smoke subset \(`./dev test-spark4`\))", ci)
        assert ran, f"{row.group(0)}: unexpected CI cell {ci!r}"
        assert ran.group(1) == DEFAULT_ICEBERG_LINE, "CI runs the default Iceberg release"
        pinned = locked(lock.name, "pyspark")
        assert f"{pinned.major}.{pinned.minor}" == line
        if ran.group(2) == "whole suite":
            assert f"setup_python() {{ setup_venv .venv requirements/{lock.name}; }}" in DEV
        else:
            assert f"setup_venv .venv-spark4 requirements/{lock.name}" in DEV
            assert "pytest -m spark4_smoke" in DEV and "./dev test-spark4" in DEV


def test_catalogs_and_storage_are_what_spark_is_configured_for():
    assert ROWS["Catalogs"][0] == "SQL (SQLite, PostgreSQL), REST"
    prefix = "spark.sql.catalog.lake"
    sqlite = spark_catalog_conf(CatalogSettings("lake", {"type": "sql", "uri": "sqlite:////d/catalog.db"}))
    postgres = spark_catalog_conf(CatalogSettings("lake", {"type": "sql", "uri": "postgresql+psycopg2://u:p@db/lake"}))
    rest = spark_catalog_conf(CatalogSettings("lake", {"type": "rest", "uri": "http://127.0.0.1:8181"}))
    assert (sqlite[0][f"{prefix}.type"], sqlite[1]) == ("jdbc", [DEFAULT_SQLITE_JDBC])
    assert (postgres[0][f"{prefix}.type"], postgres[1]) == ("jdbc", [DEFAULT_POSTGRES_JDBC])
    assert rest[0][f"{prefix}.type"] == "rest"

    assert ROWS["Storage"][0] == "local files, S3-compatible"
    local = spark_catalog_conf(CatalogSettings("lake", {"type": "sql", "uri": "sqlite:////d/c.db", "warehouse": "/d/wh"}))
    s3 = spark_catalog_conf(CatalogSettings("lake", {"type": "sql", "uri": "sqlite:////d/c.db", "warehouse": "s3://b/wh",
                                                     "s3.endpoint": "http://127.0.0.1:9000"}))
    assert f"{prefix}.io-impl" not in local[0] and s3[0][f"{prefix}.io-impl"] == S3_FILE_IO
