"""The code location (``workspace.yaml`` loads this module): Definitions from ``floe.yaml``.

Importing it lists no catalog and starts no Spark, since every run process imports it again."""

from floe_dagster.defs.build import build_definitions
from floe_dagster.instance import ensure_dagster_home
from floe_dagster.settings import load_settings

ensure_dagster_home()
defs = build_definitions(load_settings())
