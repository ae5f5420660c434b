"""A Dagster component: floe-dagster's maintenance added to an existing ``dg`` project by a ``defs.yaml``.

    type: floe_dagster.component.FloeMaintenanceComponent
    attributes:
      catalog: {name: lake, properties: {type: sql, uri: "sqlite:///…", warehouse: "file:///…"}}
      policies: [policies]
      scheduler: {max-tables-per-poll: 20}

The attributes are floe.yaml's sections with floe.yaml's keys (or ``config: <a floe.yaml>``), read by
the same loader (:func:`floe_dagster.settings.settings_from_mapping`), and the definitions are the
code location's (:func:`floe_dagster.defs.build.build_definitions`): the table assets, the debt-score
sensor, the policies' schedules and the health checks. Relative paths are resolved against the
``defs.yaml``'s folder. Registered for ``dg list components`` / ``dg scaffold defs`` by the
``dagster_dg_cli.registry_modules`` entry point in pyproject.toml.
"""

from __future__ import annotations

import json
import logging
import os
import textwrap
from pathlib import Path
from typing import Annotated, Any, Mapping

from dagster import (
    Component,
    ComponentLoadContext,
    Definitions,
    Model,
    Resolvable,
    Resolver,
    Scaffolder,
    ScaffoldRequest,
    scaffold_with,
)
from pydantic import BaseModel, ConfigDict, Field

from floe_dagster.defs.build import build_definitions
from floe_dagster.errors import PolicyError, SettingsError
from floe_dagster.settings import Settings, load_settings, settings_from_mapping

log = logging.getLogger(__name__)

DEFS_FILES = ("defs.yaml", "defs.yml")
# The attributes besides `config` are floe.yaml's sections, each under its floe.yaml key (the field's
# alias where the key is not a Python name). Not `api` nor `shards`: the HTTP API and sharded code
# locations read a floe.yaml (use `config:` for those).
CONFIG_FIELD = "config"


def _describe(text: str) -> Resolver:
    """An attribute's description in the component's schema (``dg list components --json``, editors)."""
    return Resolver.default(description=text)


class FloeMaintenanceScaffoldParams(BaseModel):
    """``dg scaffold defs floe_dagster.component.FloeMaintenanceComponent <path> --catalog-name lake …``"""

    catalog_name: str = "lake"
    catalog_type: str = "sql"
    catalog_uri: str | None = None  # default: "{{ env.FLOE_CATALOG_URI }}"
    warehouse: str | None = None  # default: "{{ env.FLOE_WAREHOUSE }}"


class FloeMaintenanceScaffolder(Scaffolder[FloeMaintenanceScaffoldParams]):
    """A ``defs.yaml`` naming the catalog, the policy folder and the scheduler's main settings, and a
    ``policies/`` folder with one example policy, switched off."""

    @classmethod
    def get_scaffold_params(cls) -> type[FloeMaintenanceScaffoldParams]:
        return FloeMaintenanceScaffoldParams

    def scaffold(self, request: ScaffoldRequest[FloeMaintenanceScaffoldParams]) -> None:
        params = request.params
        folder = request.target_path
        folder.mkdir(parents=True, exist_ok=True)
        name = params.catalog_name
        uri = params.catalog_uri or "{{ env.FLOE_CATALOG_URI }}"
        warehouse = params.warehouse or "{{ env.FLOE_WAREHOUSE }}"
        q = json.dumps  # a JSON string is a YAML string: names and URLs stay as written
        (folder / "defs.yaml").write_text(textwrap.dedent(f"""\
            # floe-dagster's Iceberg table maintenance (floe-dagster's docs/component.md). The attributes
            # are floe.yaml's sections and keys; relative paths are read from this folder.
            type: {request.type_name}
            attributes:
              # The Iceberg catalog: its name is the first part of every table asset's key; the properties
              # are PyIceberg's (load_catalog), and Spark's catalog is derived from them.
              catalog:
                name: {q(name)}
                properties:
                  type: {q(params.catalog_type)}
                  uri: {q(uri)}
                  warehouse: {q(warehouse)}
              # Policy files or folders (YAML or JSON).
              policies: [policies]
              # The debt-score sensor (0 = unlimited).
              scheduler:
                enabled: true
                max-tables-per-poll: 0
                max-bytes-per-hour: 0
              # spark: {{master: "local[2]", conf: {{spark.executor.memory: 4g}}}}
              # maintenance: {{retention-days: 30}}
              # batching: {{max-tables: 20}}
            """))
        policies = folder / "policies"
        policies.mkdir(exist_ok=True)
        (policies / "maintenance.yaml").write_text(textwrap.dedent(f"""\
            # An example policy (floe-dagster's docs/policies.md): nightly compaction and daily snapshot
            # expiry for every table of the catalog. Switched off: set enabled to true, or write your own.
            - name: {q(name + "-maintenance")}
              tablePattern: {q(name + ".*.*")}  # catalog.namespace(s).table
              enabled: false
              rewriteDataFiles: {{strategy: BINPACK}}
              rewriteDataFilesSchedule: {{cronExpression: "0 3 * * *"}}
              expireSnapshots: {{retainLast: 10, maxSnapshotAge: P7D}}
              expireSnapshotsSchedule: {{interval: P1D}}
            """))


@scaffold_with(FloeMaintenanceScaffolder)
class FloeMaintenanceComponent(Component, Resolvable, Model):
    """Iceberg table maintenance by floe-dagster: one asset per table of the catalog (partitioned by
    maintenance operation), the debt-score sensor, a schedule per policy operation and the health
    checks. The attributes are floe.yaml's sections and keys, or ``config`` naming a floe.yaml."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    config: Annotated[str | None, _describe(
        "A floe.yaml to read instead of the sections below (relative to this folder).")] = None
    data_dir: Annotated[str | None, _describe(
        "Where floe-dagster keeps its table list cache (default: <project root>/.floe).")] = Field(
        default=None, alias="data-dir")
    catalog: Annotated[dict[str, Any] | None, _describe(
        "The Iceberg catalog: name, properties (PyIceberg's), spark-properties.")] = None
    policies: Annotated[list[str] | str | None, _describe(
        "Policy files or folders (YAML or JSON), relative to this folder.")] = None
    spark: Annotated[dict[str, Any] | None, _describe(
        "master or remote, conf, packages, jars, jars-cache, java-home.")] = None
    scheduler: Annotated[dict[str, Any] | None, _describe(
        "The debt-score sensor's settings (floe.yaml's scheduler keys).")] = None
    maintenance: Annotated[dict[str, Any] | None, _describe(
        "row-count-check-max-bytes, default-timeout-hours, retention-days.")] = None
    batching: Annotated[dict[str, Any] | None, _describe(
        "Tables per automated run: max-tables, max-bytes, group-by.")] = None
    health: Annotated[dict[str, Any] | None, _describe("checks, report-time-budget-s.")] = None
    debt: Annotated[dict[str, Any] | None, _describe("The debt score's weights.")] = None
    coordination: Annotated[dict[str, Any] | None, _describe(
        "url: the ledger's and the locks' database (default: beside the Dagster instance).")] = None

    def settings(self, folder: Path, project_root: Path, environ: Mapping[str, str] | None = None) -> Settings:
        """The settings these attributes stand for; SettingsError naming the defs.yaml and the field."""
        defs_file = next((folder / name for name in DEFS_FILES if (folder / name).exists()), folder)
        source = f"{defs_file} (attributes)"
        sections = {field.alias or attr: getattr(self, attr) for attr, field in type(self).model_fields.items()
                    if attr != CONFIG_FIELD and getattr(self, attr) is not None}
        if self.config is not None:
            if sections:
                raise SettingsError(f"{source}: config: cannot be combined with {', '.join(sections)}; "
                                    f"put those in {self.config} instead")
            config = Path(os.path.expandvars(os.path.expanduser(self.config)))
            config = config if config.is_absolute() else folder / config
            if not config.is_file():
                raise SettingsError(f"{source}: config: {config} is not a file")
            return load_settings(config, environ)
        if "catalog" not in sections:
            raise SettingsError(f"{source}: catalog: missing; name the catalog (name and properties, as in "
                                "floe.yaml's catalog section), or set config to a floe.yaml")
        # Not the embedded default's ./.floe of the working folder: dg's commands and code servers
        # may start in different folders.
        sections.setdefault("data-dir", str(project_root / ".floe"))
        return settings_from_mapping(sections, folder, source, environ)

    def build_defs(self, context: ComponentLoadContext) -> Definitions:
        settings = self.settings(context.path, context.project_root)
        keep_floe_state_beside_instance(context.project_root)
        try:
            return build_definitions(settings)
        except PolicyError as exc:  # the policy files' own messages, under the field that names them
            detail = exc.errors[0] if len(exc.errors) == 1 else "".join(f"\n  {e}" for e in exc.errors)
            raise SettingsError(f"{settings.source}: policies: {detail}") from None


def keep_floe_state_beside_instance(project_root: Path) -> Path:
    """Where the coordination database and the file locks live: ``$DAGSTER_HOME`` (the instance
    ``dg dev`` and ``dg launch`` use), as for the code location. Without it, Dagster's instance is a
    temporary folder that no floe process can find, so ``<project root>/.floe/dagster_home`` is set
    as DAGSTER_HOME for this process and the runs and sensor ticks it starts (an absolute path, so
    they agree whatever folder they start in)."""
    current = os.environ.get("DAGSTER_HOME")
    if current:
        return Path(current)
    home = project_root / ".floe" / "dagster_home"
    home.mkdir(parents=True, exist_ok=True)
    log.info("DAGSTER_HOME is not set: floe-dagster keeps its coordination database and locks in %s; "
             "set DAGSTER_HOME (e.g. in the project's .env) to keep Dagster's runs there too", home)
    os.environ["DAGSTER_HOME"] = str(home)
    return home
