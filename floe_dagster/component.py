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
import typing
from dataclasses import MISSING, is_dataclass
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
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, create_model, model_validator

from floe_dagster.defs.build import build_definitions
from floe_dagster.errors import PolicyError, SettingsError
from floe_dagster.instance import default_dagster_home
from floe_dagster.settings import Settings, load_settings, settings_from_mapping
from floe_dagster.settings_schema import Key, keys_of

log = logging.getLogger(__name__)

DEFS_FILES = ("defs.yaml", "defs.yml")
CONFIG_FIELD = "config"


class SectionAttributes(BaseModel):
    """One floe.yaml section as a component attribute, typed so that ``dg`` and editors show its keys.

    The values are checked by floe.yaml's own reader (:func:`floe_dagster.settings.settings_from_mapping`),
    so a ``defs.yaml`` gets the messages a floe.yaml gets, every problem at once, with "did you mean"
    for a misspelt key: a section pydantic refuses is kept as written, for that reader to report."""

    model_config = ConfigDict(extra="forbid")
    _as_written: dict[str, Any] | None = PrivateAttr(default=None)

    @model_validator(mode="wrap")
    @classmethod
    def _leave_problems_to_floe(cls, value: Any, handler: Any) -> Any:
        try:
            return handler(value)
        except ValidationError:
            if not isinstance(value, Mapping):
                raise
            unchecked = cls.model_construct()
            unchecked._as_written = dict(value)
            return unchecked

    def as_written(self) -> dict[str, Any]:
        """The section with floe.yaml's keys, only those that were given."""
        if self._as_written is not None:
            return self._as_written
        return self.model_dump(by_alias=True, exclude_unset=True)


def _schema_type(key: Key) -> Any:
    """A key's type in the component's schema; null is always allowed (floe.yaml reads it as the default)."""
    if "schema" in key.rules:  # a key whose value is structured (floe.yaml's writers: a list of mappings)
        return key.rules["schema"] | None
    origin = typing.get_origin(key.kind)
    if origin is dict:
        return dict[str, str | int | float | bool] | None
    if origin is tuple:
        return list[str] | str | None
    return (key.kind if key.kind in (bool, int, float) else str) | None


def _schema_field(key: Key) -> Any:
    default = key.field.default if key.field.default is not MISSING else None
    # The minimum for the schema only (a constraint type would make Dagster refuse the model).
    minimum = {"minimum": key.rules.get("minimum", 0)} if key.kind in (int, float) else None
    return Field(default=list(default) if isinstance(default, tuple) else default, alias=key.name,
                 description=key.description, json_schema_extra=minimum)


def _section_model(section: Key) -> type[SectionAttributes]:
    keys = keys_of(section.kind, section)
    return create_model(f"{section.kind.__name__}Attributes", __base__=SectionAttributes,
                        __doc__=section.description, __module__=__name__,
                        **{key.field.name: (_schema_type(key), _schema_field(key)) for key in keys})


def _section_resolver(model: type[SectionAttributes], description: str) -> Resolver:
    """Templates (``{{ env.X }}``) rendered inside the section, as in any other attribute."""

    def resolve(context: Any, value: Any) -> SectionAttributes:
        written = value.as_written() if isinstance(value, SectionAttributes) else value
        return model.model_validate(context.resolve_value(written))

    return Resolver(resolve, model_field_type=model | None, description=description)


def _attribute(key: Key) -> tuple[Any, Any]:
    """A floe.yaml top-level key or section as a component attribute (unset: None, floe.yaml's default)."""
    if is_dataclass(key.kind):
        model = _section_model(key)
        return Annotated[model | None, _section_resolver(model, key.description)], Field(default=None, alias=key.name)
    return (Annotated[_schema_type(key), Resolver.default(description=key.description)],
            Field(default=None, alias=key.name))


# The attributes besides `config` are floe.yaml's keys and sections, derived from its declaration,
# each under its floe.yaml key. Not `api` nor `shards`: the HTTP API and sharded code locations read
# a floe.yaml (use `config:` for those).
FloeYamlAttributes = create_model(
    "FloeYamlAttributes", __base__=Model, __module__=__name__,
    **{key.field.name: _attribute(key) for key in keys_of(Settings) if key.rules.get("component", True)})


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
class FloeMaintenanceComponent(Component, Resolvable, FloeYamlAttributes):
    """Iceberg table maintenance by floe-dagster: one asset per table of the catalog (partitioned by
    maintenance operation), the debt-score sensor, a schedule per policy operation and the health
    checks. The attributes are floe.yaml's sections and keys, or ``config`` naming a floe.yaml."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    config: Annotated[str | None, Resolver.default(
        description="A floe.yaml to read instead of the sections below (relative to this folder).")] = None

    def settings(self, folder: Path, project_root: Path, environ: Mapping[str, str] | None = None) -> Settings:
        """The settings these attributes stand for; SettingsError naming the defs.yaml and the field."""
        defs_file = next((folder / name for name in DEFS_FILES if (folder / name).exists()), folder)
        source = f"{defs_file} (attributes)"
        sections = {field.alias or attr: _as_floe_yaml(getattr(self, attr))
                    for attr, field in type(self).model_fields.items()
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


def _as_floe_yaml(attribute: Any) -> Any:
    return attribute.as_written() if isinstance(attribute, SectionAttributes) else attribute


def keep_floe_state_beside_instance(project_root: Path) -> Path:
    """Where the coordination database and the file locks live: ``$DAGSTER_HOME`` (the instance
    ``dg dev`` and ``dg launch`` use), as for the code location. Without it, Dagster's instance is a
    temporary folder that no floe process can find, so ``<project root>/.floe/dagster_home`` is set
    as DAGSTER_HOME for this process and the runs and sensor ticks it starts (an absolute path, so
    they agree whatever folder they start in)."""
    current = os.environ.get("DAGSTER_HOME")
    if current:
        return Path(current)
    home = default_dagster_home(project_root)
    home.mkdir(parents=True, exist_ok=True)
    log.info("DAGSTER_HOME is not set: floe-dagster keeps its coordination database and locks in %s; "
             "set DAGSTER_HOME (e.g. in the project's .env) to keep Dagster's runs there too", home)
    os.environ["DAGSTER_HOME"] = str(home)
    return home
