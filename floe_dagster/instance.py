"""The Dagster instance every floe-dagster command shares with Dagit: ``$DAGSTER_HOME``, defaulting
to ``./.floe/dagster_home`` with the project's ``dagster.yaml`` placed there."""

from __future__ import annotations

import os
import shutil
from functools import lru_cache
from pathlib import Path

from dagster import DagsterInstance
from dagster._core.instance.ref import InstanceRef

from floe_dagster.redaction import remember

PROJECT_ROOT = Path(__file__).resolve().parent.parent
# The embedded instance's dagster.yaml ships inside the package (the checkout's ./dagster.yaml links
# to it), so a plain `pip install floe-dagster` finds it without a source checkout.
PACKAGED_DAGSTER_YAML = Path(__file__).resolve().parent / "dagster.yaml"


def project_file(name: str) -> Path:
    """A file of the project (``dagster.yaml``, ``workspace.yaml``): the working folder's, else the
    checkout's this package was installed from, else (``dagster.yaml``) the packaged default."""
    packaged = (PACKAGED_DAGSTER_YAML,) if name == "dagster.yaml" else ()
    for candidate in (Path.cwd() / name, PROJECT_ROOT / name, *packaged):
        if candidate.exists():
            return candidate
    raise FileNotFoundError(f"{name} not found in {Path.cwd()} or {PROJECT_ROOT}")


def default_dagster_home(project_root: Path | None = None) -> Path:
    """The instance's folder when DAGSTER_HOME is not set: ``.floe/dagster_home`` under the project
    (a dg project's root; for the commands, the working folder), as an absolute path."""
    return ((project_root or Path.cwd()) / ".floe" / "dagster_home").resolve()


def dagster_home() -> Path:
    """``$DAGSTER_HOME``, else the default, as an absolute path."""
    home = os.environ.get("DAGSTER_HOME")
    return Path(home).resolve() if home else default_dagster_home()


def ensure_dagster_home() -> Path:
    """Set ``DAGSTER_HOME`` (default ``./.floe/dagster_home``) and put ``dagster.yaml`` there once."""
    home = dagster_home()
    home.mkdir(parents=True, exist_ok=True)
    os.environ["DAGSTER_HOME"] = str(home)
    target = home / "dagster.yaml"
    if not target.exists():
        shutil.copyfile(project_file("dagster.yaml"), target)
    return home


def get_instance() -> DagsterInstance:
    ensure_dagster_home()
    return DagsterInstance.get()


def default_coordination_url() -> str:
    """The Dagster storage's PostgreSQL database when the instance uses dagster-postgres (so every
    deployment on that storage shares the ledger and the locks), else a SQLite file in DAGSTER_HOME."""
    home = dagster_home()
    home.mkdir(parents=True, exist_ok=True)
    return _instance_postgres_url(str(home)) or f"sqlite:///{home / 'floe-coordination.db'}"


@lru_cache(maxsize=8)
def _instance_postgres_url(home: str) -> str | None:
    if not (Path(home) / "dagster.yaml").exists():
        return None
    storage = InstanceRef.from_dir(home).run_storage_data
    if "postgres" not in storage.module_name:
        return None
    url = storage.rehydrate(as_type=object).postgres_url
    remember(url)  # its password is masked wherever it shows up
    return url
