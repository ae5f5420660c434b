"""Fixtures the integration modules share."""

from pathlib import Path

import pytest
from dagster import DagsterInstance


@pytest.fixture
def instance(dagster_home, lake, monkeypatch):
    """The Dagster instance beside the module's own ``lake`` fixture (its Settings), with FLOE_CONFIG on
    the lake's floe.yaml, as the sensor and the runs read it. A module whose instance is made another way
    defines its own ``instance``."""
    monkeypatch.setenv("FLOE_CONFIG", str(Path(lake.data_dir).parent / "floe.yaml"))
    with DagsterInstance.get() as instance:
        yield instance
