"""Small real tables and configurations the integration modules share."""

from __future__ import annotations

import uuid
from pathlib import Path

import pyarrow.parquet as pq

from floe_dagster.api.auth import hash_key
from floe_dagster.demo import EVENT_SCHEMA, local_path, rows
from floe_dagster.settings import load_settings
from floe_dagster_tests.conftest import write_settings
from floe_dagster_tests.unit.test_api_http import VIEWER_KEY


def seeded_table(catalog, identifier: str, files: int, rows_per_file: int):
    """A new table of the demo's event schema holding ``files`` Parquet files of ``rows_per_file`` rows,
    added as they are (``add_files``): the smallest table a compaction changes. Returns the table and its
    data folder."""
    created = catalog.create_table(identifier, schema=EVENT_SCHEMA)
    folder = local_path(created.location()) / "data"
    folder.mkdir(parents=True)
    paths = []
    for i in range(files):
        path = folder / f"seed-{uuid.uuid4().hex}.parquet"
        pq.write_table(rows(i * rows_per_file, rows_per_file), path)
        paths.append(f"file://{path}")
    created.add_files(paths)
    return created, folder


def viewer_config(tmp_path: Path, policies: str, monkeypatch):
    """floe.yaml with ``policies`` and an API keys file holding VIEWER_KEY, set as FLOE_CONFIG: (its path,
    its settings)."""
    keys = tmp_path / "keys.txt"
    keys.write_text(f"viewer:VIEWER:{hash_key(VIEWER_KEY)}\n")
    config = write_settings(tmp_path, policies, f"api:\n  keys-file: {keys}\n")
    monkeypatch.setenv("FLOE_CONFIG", str(config))
    return config, load_settings(config, environ={})
