"""Sharded code locations: one attribute per scope, for ``workspace.yaml``.

    load_from:
      - python_module: {module_name: floe_dagster.shards, attribute: shard_0_of_2, location_name: floe-0}
      - python_module: {module_name: floe_dagster.shards, attribute: shard_1_of_2, location_name: floe-1}

or, with named scopes from floe.yaml's ``shards`` list, ``attribute: <name>``. Each location holds
only its scope's tables, with its own scheduler lock and budgets; scopes never overlap.
"""

from __future__ import annotations

from functools import lru_cache

from dagster import Definitions

from floe_dagster.core.basics.scopes import scope_named
from floe_dagster.defs.build import build_definitions
from floe_dagster.instance import ensure_dagster_home
from floe_dagster.settings import load_settings


@lru_cache(maxsize=None)
def _definitions(name: str) -> Definitions:
    ensure_dagster_home()
    settings = load_settings()
    return build_definitions(settings, shard=scope_named(name, settings.shards))


def __getattr__(name: str) -> Definitions:
    if name.startswith("__"):
        raise AttributeError(name)
    try:
        return _definitions(name)
    except ValueError as exc:
        raise AttributeError(str(exc)) from None
