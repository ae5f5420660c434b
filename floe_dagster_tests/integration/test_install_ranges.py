"""floe-dagster installs from its declared ranges beside another Dagster 1.13 patch than the one
locked in requirements/spark3.5.lock: a fresh venv, a real resolution against PyPI (not editable),
``pip check``, and a code location built there from a user's floe.yaml with one Iceberg table.

One venv is shared by the tests below. It is resolved and installed by uv, as ./dev installs the locks:
pip's install took 211 s of a fresh machine's suite (downloads one at a time, and PySpark's sdist built),
uv's parallel downloads and its cache (the PySpark wheel it built for ./dev's set-up) a fraction of it.
The resolution is still a fresh one against PyPI from the declared ranges; pip checks the result."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name
from packaging.version import Version

from floe_dagster.spark.runtime import SCALA_FOR_SPARK_LINE

pytestmark = pytest.mark.network

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "requirements" / "spark3.5.lock"
# Dagster's packages floe-dagster depends on; each release of dagster 1.13.N comes with
# dagster-webserver 1.13.N and the integrations at 0.29.N, which pin that exact Dagster patch.
DAGSTER_PACKAGES = ("dagster", "dagster-webserver", "dagster-pyspark", "dagster-postgres")

# Run in the fresh venv from a user's project folder: make a table in the embedded catalog with
# PyIceberg, then load the code location the way Dagster does and report what it defines.
PROBE = """
import json
import dagster
import pyarrow as pa
import floe_dagster
from floe_dagster.iceberg.catalog import open_catalog
from floe_dagster.settings import load_settings

schema = pa.schema([pa.field("id", pa.int64(), nullable=False)])
catalog = open_catalog(load_settings().catalog)
catalog.create_namespace("sales")
catalog.create_table("sales.orders", schema=schema).append(pa.table({"id": [1, 2, 3]}, schema=schema))

import floe_dagster.definitions as location
repository = location.defs.get_repository_def()
print(json.dumps({
    "dagster": dagster.__version__,
    "floe_dagster": floe_dagster.__file__,
    "assets": sorted(key.to_user_string() for key in repository.asset_graph.get_all_asset_keys()),
    "jobs": sorted(repository.job_names),
    "schedules": sorted(s.name for s in repository.schedule_defs),
}))
"""


@dataclass
class Installed:
    python: Path
    dagster: Version  # the patch installed beside floe-dagster
    locked_dagster: Version
    locked_integration: Version  # dagster-pyspark's, whose major.minor is the integrations' line
    freeze: dict[str, Version]
    seconds: dict[str, float]


def locked_version(name: str) -> Version:
    match = re.search(rf"^{re.escape(name)}==(\S+)$", LOCK.read_text(), re.MULTILINE)
    assert match, f"{LOCK}: {name} is not pinned"
    return Version(match.group(1))


def clean_env() -> dict[str, str]:
    # The venv's own site-packages only: nothing of the checkout or the test venv on the path.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "FLOE_CONFIG")}
    return {**env, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def run(*args: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    command = [str(a) for a in args]
    done = subprocess.run(command, check=False, cwd=cwd, env=env or clean_env(), capture_output=True, text=True)
    assert done.returncode == 0, f"{' '.join(map(str, args))} failed:\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    return done.stdout


def uv() -> str:
    return run(ROOT / "requirements" / "find-uv").strip()


def pip(venv_python: Path, *args: str | Path) -> str:
    # The test venv's pip drives the fresh one (--python): no pip to install there, and the same
    # pip version, hence the same cache, as everywhere else.
    return run(sys.executable, "-m", "pip", "--python", venv_python, *args)


def released_patches(name: str, line: Version) -> set[int]:
    """The patch numbers of ``name``'s releases on the ``major.minor`` line, from the index."""
    listed = run(sys.executable, "-m", "pip", "index", "versions", name)
    versions = re.search(r"Available versions: (.*)", listed)
    assert versions, f"pip index versions {name} listed none:\n{listed}"
    return {
        v.micro for v in map(Version, versions.group(1).split(", ")) if (v.major, v.minor) == (line.major, line.minor)
    }


def another_dagster_patch(locked_dagster: Version, locked_integration: Version) -> Version:
    """The newest patch of the locked Dagster line, other than the locked one, that all of
    DAGSTER_PACKAGES are released for: a Dagster patch can reach PyPI before its dagster-pyspark and
    dagster-postgres (1.13.28 and 1.13.29 had none when this was written), and without them no
    resolver can install it beside floe-dagster."""
    lines = {"dagster-pyspark": locked_integration, "dagster-postgres": locked_integration}
    with ThreadPoolExecutor(len(DAGSTER_PACKAGES)) as pool:
        released = pool.map(lambda name: released_patches(name, lines.get(name, locked_dagster)), DAGSTER_PACKAGES)
        common = set.intersection(*released)
    others = sorted(common - {locked_dagster.micro})
    assert others, f"no Dagster patch besides the locked {locked_dagster} has all of {DAGSTER_PACKAGES} released"
    return Version(f"{locked_dagster.major}.{locked_dagster.minor}.{others[-1]}")


def project_source(target: Path) -> Path:
    """What pip builds floe-dagster from, copied: pip builds a folder in place (build/, egg-info),
    which must not happen in the checkout others work in."""
    shutil.copytree(ROOT / "floe_dagster", target / "floe_dagster", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, target / name)
    return target


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Installed:
    tmp = tmp_path_factory.mktemp("install-ranges")
    locked_dagster, locked_integration = locked_version("dagster"), locked_version("dagster-pyspark")
    seconds = {}
    started = time.monotonic()
    dagster = another_dagster_patch(locked_dagster, locked_integration)
    seconds["pick the patch"] = time.monotonic() - started

    started = time.monotonic()
    run(sys.executable, "-m", "venv", "--without-pip", tmp / "venv")
    python = tmp / "venv" / "bin" / "python"
    # A project that pins this Dagster adds floe-dagster. The pin goes in the same install, as in a
    # project's requirements: installing Dagster first and floe-dagster after does not hold it, since
    # pip takes the newest dagster-pyspark first, which pins its own Dagster patch, and moves Dagster.
    # Wheels only (nothing compiled) but PySpark's sdist, the only file PyPI has for it; no .pyc
    # written (uv's default) for the thousands of modules the probe never imports.
    run(
        uv(), "pip", "install", "--quiet", "--python", python, "--only-binary", ":all:", "--no-binary", "pyspark",
        "--no-binary", "floe-dagster",
        project_source(tmp / "src"), f"dagster=={dagster}",
        env={**clean_env(), "VIRTUAL_ENV": ""},
    )  # fmt: skip
    seconds["install"] = time.monotonic() - started

    listed = json.loads(pip(python, "list", "--format=json"))
    freeze = {canonicalize_name(p["name"]): Version(p["version"]) for p in listed}
    return Installed(python, dagster, locked_dagster, locked_integration, freeze, seconds)


def test_floe_dagster_installs_beside_another_dagster_patch(installed):
    assert installed.dagster != installed.locked_dagster
    line = installed.locked_integration
    integration = Version(f"{line.major}.{line.minor}.{installed.dagster.micro}")
    assert {name: installed.freeze[name] for name in DAGSTER_PACKAGES} == {
        "dagster": installed.dagster,
        "dagster-webserver": installed.dagster,
        "dagster-pyspark": integration,
        "dagster-postgres": integration,
    }
    assert installed.freeze["floe-dagster"] == Version("0.1.0")
    print(f"dagster {installed.dagster} beside the locked {installed.locked_dagster}: {installed.seconds}")


def test_pip_check_finds_every_requirement_met(installed):
    assert "No broken requirements found" in pip(installed.python, "check")


def test_the_resolved_pyspark_has_an_iceberg_runtime(installed):
    # A fresh resolution takes the newest PySpark the range allows: it must be a Spark line Iceberg
    # publishes a runtime for, or floe-dagster installs but cannot start Spark.
    pyspark = installed.freeze["pyspark"]
    assert f"{pyspark.major}.{pyspark.minor}" in SCALA_FOR_SPARK_LINE


def test_the_code_location_loads_in_a_users_project(installed, tmp_path):
    project = tmp_path / "project"
    (project / "policies").mkdir(parents=True)
    (project / "policies" / "nightly.yaml").write_text(
        textwrap.dedent(
            """\
            name: nightly-compaction
            tablePattern: "demo.sales.*"
            rewriteDataFiles: {}
            rewriteDataFilesSchedule: {cronExpression: "0 2 * * *"}
            """
        )
    )
    (project / "floe.yaml").write_text("policies: [policies]\n")
    # No dagster.yaml anywhere but in the installed package: its default instance is placed in
    # $DAGSTER_HOME, as `floe-dagster` does in a fresh folder.
    env = {**clean_env(), "DAGSTER_HOME": str(tmp_path / "dagster_home")}

    loaded = json.loads(run(installed.python, "-c", PROBE, cwd=project, env=env).splitlines()[-1])

    assert loaded["dagster"] == str(installed.dagster)
    placed = tmp_path / "dagster_home" / "dagster.yaml"
    assert placed.read_text() == (ROOT / "floe_dagster" / "dagster.yaml").read_text()
    assert Path(loaded["floe_dagster"]).is_relative_to(installed.python.parent.parent)  # not the checkout
    assert loaded["assets"] == ["demo/sales/orders"]
    assert "floe_maintenance" in loaded["jobs"]
    assert loaded["schedules"] == ["floe_nightly_compaction_rewrite_data_files"]
