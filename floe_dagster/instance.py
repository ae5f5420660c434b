"""The Dagster instance every floe-dagster command shares with Dagit: ``$DAGSTER_HOME``, defaulting
to ``./.floe/dagster_home`` with the project's ``dagster.yaml`` placed there."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from dagster import DagsterInstance

DEFAULT_DAGSTER_HOME = Path(".floe") / "dagster_home"
PROJECT_ROOT = Path(__file__).resolve().parent.parent


def project_file(name: str) -> Path:
    """A file of the project (``dagster.yaml``, ``workspace.yaml``): the working folder's, else the
    checkout's this package was installed from."""
    for candidate in (Path.cwd() / name, PROJECT_ROOT / name):
        if candidate.exists():
            return candidate
    raise FileNotFoundError(f"{name} not found in {Path.cwd()} or {PROJECT_ROOT}")


def ensure_dagster_home() -> Path:
    """Set ``DAGSTER_HOME`` (default ``./.floe/dagster_home``) and put ``dagster.yaml`` there once."""
    home = Path(os.environ.get("DAGSTER_HOME") or DEFAULT_DAGSTER_HOME).resolve()
    home.mkdir(parents=True, exist_ok=True)
    os.environ["DAGSTER_HOME"] = str(home)
    target = home / "dagster.yaml"
    if not target.exists():
        shutil.copyfile(project_file("dagster.yaml"), target)
    return home


def get_instance() -> DagsterInstance:
    ensure_dagster_home()
    return DagsterInstance.get()
