"""pyproject.toml declares ranges (so floe-dagster installs beside other patch releases) and the lock
files pin one set inside them: every locked top-level dependency must satisfy its declared range."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from floe_dagster.spark.runtime import SCALA_FOR_SPARK_LINE

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = ROOT / "pyproject.toml"
PROJECT = tomllib.loads(PYPROJECT.read_text())["project"]
# Each lock and the PySpark line its environment runs (requirements/<env>.constraints.txt).
LOCKS = {"spark3.5.lock": "3.5", "spark4.1.lock": "4.1"}


def runtime_requirements() -> list[Requirement]:
    """What a user's install brings: the dependencies and every extra but the test one."""
    extras = PROJECT["optional-dependencies"]
    lines = PROJECT["dependencies"] + [line for name, group in extras.items() if name != "test" for line in group]
    return [Requirement(line) for line in lines]


def declared_requirements() -> list[Requirement]:
    """Everything the locks are resolved from: the dependencies and the test extra with its extras."""
    lines = PROJECT["dependencies"] + [line for group in PROJECT["optional-dependencies"].values() for line in group]
    own = canonicalize_name(PROJECT["name"])
    return [req for req in map(Requirement, lines) if canonicalize_name(req.name) != own]


def locked_versions(lock: Path) -> dict[str, Version]:
    """``name -> version`` of the lock's pins whose markers apply to this interpreter."""
    pins = {}
    for line in lock.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        req = Requirement(line)
        if req.marker is not None and not req.marker.evaluate():
            continue
        (spec,) = req.specifier
        assert spec.operator == "==", f"{lock.name}: {line!r} is not an exact pin"
        pins[canonicalize_name(req.name)] = Version(spec.version)
    return pins


def test_runtime_dependencies_are_ranges_not_pins():
    pinned = [str(req) for req in runtime_requirements() if any(s.operator in ("==", "===") for s in req.specifier)]
    assert pinned == [], f"{PYPROJECT}: pinned exactly (declare a range; the locks pin): {pinned}"


@pytest.mark.parametrize("lock_name", sorted(LOCKS))
def test_every_locked_top_level_dependency_satisfies_its_declared_range(lock_name):
    lock = ROOT / "requirements" / lock_name
    locked = locked_versions(lock)
    problems = []
    for req in declared_requirements():
        if req.marker is not None and not req.marker.evaluate():
            continue
        version = locked.get(canonicalize_name(req.name))
        if version is None:
            problems.append(f"{req.name} is not locked")
        elif not req.specifier.contains(version, prereleases=True):
            problems.append(f"{req.name}=={version} is outside {req}")
    assert problems == [], f"{lock}: regenerate it with requirements/lock: {problems}"


@pytest.mark.parametrize(("lock_name", "spark_line"), sorted(LOCKS.items()))
def test_each_lock_runs_its_pyspark_line(lock_name, spark_line):
    pyspark = locked_versions(ROOT / "requirements" / lock_name)["pyspark"]
    assert f"{pyspark.major}.{pyspark.minor}" == spark_line


def test_the_pyspark_range_admits_exactly_the_spark_lines_iceberg_has_a_runtime_for():
    # A PySpark outside SCALA_FOR_SPARK_LINE installs but finds no Iceberg Spark runtime on Maven
    # Central, so the declared range has to follow that table (both ways).
    ranges = [req.specifier for req in runtime_requirements() if canonicalize_name(req.name) == "pyspark"]
    candidates = [f"{major}.{minor}" for major in (3, 4, 5) for minor in range(6)]
    for specifier in ranges:
        admitted = [line for line in candidates if specifier.contains(f"{line}.0")]
        assert admitted == sorted(SCALA_FOR_SPARK_LINE), f"{PYPROJECT}: pyspark{specifier} admits {admitted}"
