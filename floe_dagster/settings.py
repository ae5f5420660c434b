"""Settings: one ``floe.yaml`` (path from ``FLOE_CONFIG``, default ``./floe.yaml``) plus environment overrides.

Every command and the code location read settings through :func:`load_settings`, so the CLI, Dagit and
the sensors agree. Relative paths in the file are resolved against the file's folder.

floe.yaml is declared once, here: :class:`Settings`' fields are its top-level keys and sections (a
field whose type is a dataclass is a section), each section's fields are its keys (kebab-case in the
file), declared with :func:`~floe_dagster.core.basics.validation.setting` (default, description, rules). The
scheduler's, the safety envelope's, the batching's, the fair shares', the debt's and the ranking's sections are the
pure core's own dataclasses. The reader
below, the component's attributes (component.py) and the tables of docs/configuration.md are all
derived from these fields.
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass, is_dataclass, replace
from pathlib import Path
from typing import Any, Iterator, Mapping

import yaml

from floe_dagster.core.plan.batches import BatchSettings
from floe_dagster.core.facts.debt import DebtWeights
from floe_dagster.core.policies.envelope import EnvelopeSettings
from floe_dagster.core.plan.fair_shares import FairShareSettings
from floe_dagster.core.value.learned_ranking import RankingSettings
from floe_dagster.core.basics.patterns import TablePattern
from floe_dagster.core.plan.planner import SchedulerSettings
from floe_dagster.core.storage.quarantine import quarantine_location_problem
from floe_dagster.core.basics.validation import Location, Problems, setting
from floe_dagster.core.schedules.writers import WriterRule, read_writer_rules
from floe_dagster.errors import SettingsError
from floe_dagster.redaction import remember
from floe_dagster.settings_schema import (
    ENV_PREFIX, Key, Reading, key_name, keys_of, read_mapping, read_value, shown,
)

DEFAULT_CONFIG = "floe.yaml"
# The Iceberg release whose Spark runtime (for the installed PySpark's Spark line, see
# spark/runtime.py) and AWS bundle Spark loads when `spark.iceberg-version` is unset, on every Spark line
# it publishes a runtime for (a line it has none for gets its newest: runtime.effective_iceberg_version).
# `spark.iceberg-version` selects another (1.12.x, 1.10.x). Still 1.11.0, not 1.12.0: 1.12's S3 request
# signer posts to the REST spec's per-table `/sign` endpoint, which Nessie 0.99 does not serve (404), so a
# Spark write to a Nessie lake with signed S3 requests fails (integration/test_nessie_catalog.py;
# docs/operations.md, "Iceberg releases").
DEFAULT_ICEBERG_VERSION = "1.11.0"
DEFAULT_SQLITE_JDBC = "org.xerial:sqlite-jdbc:3.47.1.0"
DEFAULT_POSTGRES_JDBC = "org.postgresql:postgresql:42.7.4"
_ICEBERG_VERSION = re.compile(r"^\d+\.\d+\.\d+$")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def default_jars_cache() -> str:
    return str(Path.home() / ".cache" / "floe-dagster" / "jars")


def _iceberg_release(version: str) -> str | None:
    if _ICEBERG_VERSION.match(version):
        return None
    return f"must be an Iceberg release such as {DEFAULT_ICEBERG_VERSION!r} or '1.10.2', got {version!r}"


def _spark_connect_url(remote: str) -> str | None:
    return None if remote.startswith("sc://") else f"{remote!r} is not a Spark Connect URL (sc://host:port)"


def _environment_variable_name(name: str) -> str | None:
    if _ENV_NAME.fullmatch(name):
        return None
    return (f"expected the name of an environment variable (letters, digits and _, not starting with a digit), "
            f"got {name!r}")


def _existing_folder(path: str) -> str | None:
    return f"{path} is not a folder" if Path(path).exists() and not Path(path).is_dir() else None


@dataclass(frozen=True)
class CatalogSettings:
    """The Iceberg catalog."""

    name: str = setting("demo", "the catalog's name: the first part of every table asset's key, and Spark's "
                                "catalog name")
    properties: dict[str, str] = setting(
        default_factory=dict, description="PyIceberg's catalog properties (load_catalog); Spark's catalog is derived "
        "from them (default, without a catalog section: the embedded SQLite catalog under data-dir)")
    spark_properties: dict[str, str] = setting(
        default_factory=dict, description="extra spark.sql.catalog.<name>.* properties, for catalog types floe "
        "cannot map itself (glue, dynamodb…)")


@dataclass(frozen=True)
class SparkSettings:
    """Spark: where it runs and the jars it loads."""

    master: str = setting("local[2]", "local[N], spark://host:7077, yarn, k8s://…", env=("FLOE_SPARK_MASTER",))
    remote: str | None = setting(None, "a Spark Connect URL (sc://host:15002), used instead of master",
                                 env=("FLOE_SPARK_REMOTE",), check=_spark_connect_url)
    conf: dict[str, str] = setting(default_factory=dict, description="Spark configuration of every session")
    iceberg_version: str | None = setting(
        None, f"the Iceberg runtime for the installed PySpark's Spark line (default: {DEFAULT_ICEBERG_VERSION}; "
        "1.12.x selectable on Spark 3.5 and 4.1, 1.10.x on 3.5 and 4.0)", check=_iceberg_release)
    packages: tuple[str, ...] = setting(
        (), "extra Maven coordinates, fetched once into jars-cache with the Iceberg runtime (spark/runtime.py)")
    jars: tuple[str, ...] = setting((), "extra local jars", path=True)
    jars_cache: str = setting(default_factory=default_jars_cache, description="where the Maven jars are kept",
                              path=True, env=("FLOE_JARS_CACHE",))
    java_home: str | None = setting(None, "the Java Spark runs on (default: JAVA_HOME, else the one on PATH)",
                                    env=("FLOE_JAVA_HOME",))


@dataclass(frozen=True)
class MaintenanceSettings:
    """What a maintenance run checks and how long floe keeps its own records."""

    # After a rewrite, each new snapshot's rows are checked against its parent's from Iceberg's
    # snapshot summaries (exact, no Spark query); tables up to this many bytes are also counted with
    # Spark. 0: Spark counts only where the summaries are missing or disagree.
    row_count_check_max_bytes: int = setting(
        0, "tables up to this size are also row-counted with Spark after a rewrite")
    default_timeout_hours: float = setting(1.0, "dagster/max_runtime of a run whose schedule sets no timeout")
    # The debt-score sensor deletes them once a day; 0 keeps them forever, as Dagster does.
    retention_days: int = setting(
        30, "floe's finished runs, ledger and outcome rows older than this are deleted (0: never)")
    # Checked against the catalog's warehouse when the file is read (settings_from_mapping).
    quarantine_location: str | None = setting(
        None, "where orphan cleanup's quarantine lives (s3://bucket/prefix or an absolute folder; null: a "
        "_floe_quarantine folder inside each table's location); never inside the warehouse",
        expects="a URI or an absolute path", check=lambda value: quarantine_location_problem(value, None))
    # Dagster's concurrency pool of the maintenance step (its Spark work): a user's own Spark assets that
    # declare the same pool share one limit with it (`dagster instance concurrency set floe-spark 1`).
    pool: str = setting(
        "floe-spark", "the Dagster concurrency pool every maintenance run's step claims a slot of (no limit until "
        "one is set: `dagster instance concurrency set floe-spark 1`)", expects="a pool name")


@dataclass(frozen=True)
class CoordinationSettings:
    """Where the ledger, the history and the locks live."""

    url: str | None = setting(
        None, "a database URL (PostgreSQL shared by every deployment; default: the Dagster instance's PostgreSQL, "
        "else a SQLite file beside it)", env=("FLOE_COORDINATION_URL",))


@dataclass(frozen=True)
class ApiSettings:
    """The HTTP API's keys (``floe-dagster serve``), from a file, an environment variable, or both.

    Each key is one entry ``name:role:sha256hex``: the key holder's name (letters, digits, ``_.@-``; it becomes the
    ``dagster/floe.actor`` of the runs the key triggers), the role ``VIEWER`` (read), ``OPERATOR`` (read and
    trigger) or ``ADMIN`` (everything, API keys over HTTP too), and the SHA-256 of the key in hex (the key itself is
    never stored). In the file: one entry a line, blank lines and ``#`` comments ignored; in the variable: entries
    separated by newlines, commas or semicolons. The server reads them when it starts and re-reads the file when it
    changes. With neither set the API needs no key and only listens on the loopback interface (127.0.0.1, localhost,
    ::1).

    ``policy_directory`` (``policy-directory``) is the folder where ``POST``/``PUT``/``DELETE
    /api/v1/policies`` write one ``<name>.json`` file per policy; without it those calls answer 405.
    The policies are read from it too, whether or not ``policies`` lists it
    (:func:`floe_dagster.policies.policy_paths`). Writing policies needs ADMIN, as in Floe;
    ``operator_may_write_policies`` grants it to OPERATOR too.
    """

    keys_file: str | None = setting(None, "a file of API keys, one name:role:sha256hex a line", path=True,
                                    expects="a file path")
    keys_env: str | None = setting(None, "the name of an environment variable holding API keys",
                                   expects="the name of an environment variable", check=_environment_variable_name)
    policy_directory: str | None = setting(
        None, "folder where POST/PUT/DELETE /api/v1/policies write <name>.json (null: they answer 405); read with "
        "the other policies", path=True, expects="a folder path", check=_existing_folder)
    operator_may_write_policies: bool = setting(
        False, "let OPERATOR keys create, update and delete policies over HTTP too (by default ADMIN only, as in Floe)")
    proposal_expiry_minutes: int = setting(
        15, "minutes an agent's maintenance proposal (floe-dagster mcp) stays approvable", minimum=1)

    @property
    def keys_configured(self) -> bool:
        return bool(self.keys_file or self.keys_env)


@dataclass(frozen=True)
class HealthSettings:
    """The health checks and observations."""

    # At 5,000 tables the checks add about 1.6 s to a code location load
    # (benchmarks/bench_health_checks.py); observations stay either way.
    checks: bool = setting(True, "one `health` asset check per table asset (Dagit's Checks tab)")
    # The SQLite instance stores about 50 events a second; the rest follow on the next ticks.
    report_time_budget_s: float = setting(10.0, "seconds a sensor tick may spend recording health events")


def _read_shards(at: Location, value: Any) -> tuple[tuple[str, str], ...] | None:
    if not isinstance(value, list):
        at.error("expected a list of {name: <identifier>, tables: <table pattern>}")
        return None
    shards: dict[str, str] = {}
    for index, entry in enumerate(value):
        where = at.child(index)
        if not isinstance(entry, Mapping) or set(entry) != {"name", "tables"}:
            where.error("expected {name: <identifier>, tables: <table pattern>}")
            continue
        name, pattern = str(entry["name"]), str(entry["tables"])
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) or name.startswith("shard_"):
            where.child("name").error(f"{name!r} must be a Python identifier not starting with 'shard_'")
        elif name in shards:
            where.child("name").error(f"{name!r} is used twice")
        try:
            TablePattern.parse(pattern)
        except ValueError as exc:
            where.child("tables").error(str(exc))
        shards.setdefault(name, pattern)
    return tuple(shards.items())


@dataclass(frozen=True)
class Settings:
    """floe.yaml: its top-level keys and sections, in the order the docs show them."""

    source: str = setting("<defaults>", "", internal=True)  # the file the settings came from
    data_dir: str = setting(".floe", "embedded catalog, warehouse, caches and locks", path=True)
    catalog: CatalogSettings = setting(default_factory=CatalogSettings, description=CatalogSettings.__doc__)
    spark: SparkSettings = setting(default_factory=SparkSettings, description=SparkSettings.__doc__)
    # Relative paths from FLOE_POLICIES are the working folder's, as they always were.
    policies: tuple[str, ...] = setting((), "policy files or folders, YAML or JSON (default, without a catalog "
                                        "section: examples/policies)", path=True, env_paths_from_working_folder=True)
    scheduler: SchedulerSettings = setting(default_factory=SchedulerSettings, description="The debt-score "
                                           "sensor: Floe's keys, names and defaults; 0 = unlimited.",
                                           older_env_prefix=ENV_PREFIX + "SCHEDULER_")
    maintenance: MaintenanceSettings = setting(default_factory=MaintenanceSettings,
                                               description=MaintenanceSettings.__doc__)
    # Only floe.yaml (or the component's defs.yaml) sets it, the deployment owner's file: never the HTTP API.
    envelope: EnvelopeSettings = setting(default_factory=EnvelopeSettings, description=EnvelopeSettings.__doc__)
    batching: BatchSettings = setting(default_factory=BatchSettings,
                                      description="Automated runs over several tables of one operation.")
    fair_shares: FairShareSettings = setting(default_factory=FairShareSettings,
                                             description=FairShareSettings.__doc__)
    health: HealthSettings = setting(default_factory=HealthSettings, description=HealthSettings.__doc__)
    debt: DebtWeights = setting(default_factory=DebtWeights, description="The debt score's weights.")
    ranking: RankingSettings = setting(default_factory=RankingSettings, description=RankingSettings.__doc__)
    coordination: CoordinationSettings = setting(default_factory=CoordinationSettings,
                                                 description=CoordinationSettings.__doc__)
    refresh_tables: bool = setting(False, "list the catalog again whenever the code location loads, instead of "
                                   "reading the cached table list")
    # Not component attributes: the HTTP API and sharded code locations read a floe.yaml.
    shards: tuple[tuple[str, str], ...] = setting(
        (), "named table scopes for several code locations: [{name, tables}] (see Production)",
        reader=_read_shards, component=False)
    api: ApiSettings = setting(default_factory=ApiSettings, description="floe-dagster serve (see HTTP API).",
                               component=False)
    # Beside the user's pipelines (docs/beside-pipelines.md): tables matched to the assets that write them.
    writers: tuple[WriterRule, ...] = setting(
        (), "the assets that write the tables: [{tables: <table pattern>, asset: <asset key template>}] (see "
        "Beside your pipelines)", reader=read_writer_rules, schema=list[dict[str, str]])

    @property
    def coordination_url(self) -> str | None:
        return self.coordination.url

    @property
    def table_cache_path(self) -> Path:
        return Path(self.data_dir) / "cache" / f"tables-{self.catalog.name}.json"


def sections() -> dict[str, type]:
    """floe.yaml's sections, by name: the fields of Settings that are dataclasses."""
    return {key.name: key.kind for key in keys_of(Settings) if is_dataclass(key.kind)}


def top_level_keys() -> tuple[Key, ...]:
    return tuple(key for key in keys_of(Settings) if not is_dataclass(key.kind))


def all_keys() -> Iterator[Key]:
    """Every key of floe.yaml, sections' keys under their section, in the declaration's order."""
    for key in keys_of(Settings):
        yield from keys_of(key.kind, key) if is_dataclass(key.kind) else (key,)


def reference_markdown() -> str:
    """docs/configuration.md's key tables, one per section, from the declaration (a test keeps the
    doc equal to this)."""
    lines: list[str] = []
    for section in (None, *sections()):
        keys = [k for k in all_keys() if k.section == section]
        title = f"**`{section}`**: {_section_doc(section)}" if section else "**Top level**"
        lines += ["", title, "", "| key | default | environment | description |", "| --- | --- | --- | --- |"]
        lines += [f"| `{k.name}` | {shown(k.default)} | {', '.join(f'`{n}`' for n in k.env_names)} | "
                  f"{k.description} |" for k in keys]
    return "\n".join(lines[1:]) + "\n"


def _section_doc(section: str) -> str:
    return next(k.description for k in keys_of(Settings) if k.name == section).strip().splitlines()[0]


def _section(reading: Reading, section: Key, raw: object) -> Any:
    name, cls = section.name, section.kind
    keys = keys_of(cls, section)
    if cls is DebtWeights and isinstance(raw, Mapping):  # its weights were documented in both spellings
        raw = {key_name(str(k)): v for k, v in raw.items()}
    section = read_mapping(reading.at(name), raw, [k.name for k in keys])
    values = {key.field.name: read_value(reading, key, section) for key in keys}
    try:
        return cls(**values)
    except ValueError as exc:  # the core dataclass's own rule (BatchSettings': max-tables ≥ 1 …)
        reading.at().error(f"{name}.{exc}")
        return cls()


def _catalog_and_policies_defaults(raw: Mapping[str, object]) -> Mapping[str, Any]:
    """Without a catalog section: the embedded lakehouse's policies (its catalog: see below)."""
    return raw if "catalog" in raw else {"policies": ["examples/policies"], **raw}


def settings_from_mapping(raw: object, base: Path, source: str, environ: Mapping[str, str] | None = None) -> Settings:
    """Validate settings given as floe.yaml's mapping of sections (from the file, or from a Dagster
    component's ``defs.yaml``). Relative paths are resolved against ``base``; every problem is
    reported at once, one line each, beginning with ``source``, then the key
    (``scheduler.max-tables-per-poll``)."""
    reading = Reading(Problems(), source, base, os.environ if environ is None else environ)
    remember(raw)  # before any problem is reported: a message may quote a value
    if not isinstance(raw, Mapping):
        names = ", ".join(sorted(k.name for k in keys_of(Settings)))
        raise SettingsError(f"{source}: expected a mapping of sections ({names})")
    raw = _catalog_and_policies_defaults(raw)
    read_mapping(reading.at(), raw, [k.name for k in keys_of(Settings)])
    values = {key.field.name: _section(reading, key, raw.get(key.name)) if is_dataclass(key.kind)
              else read_value(reading, key, raw) for key in keys_of(Settings)}
    settings = Settings(source=source, **values)
    if "catalog" not in raw:  # the embedded default: a SQLite catalog and a warehouse in the data dir
        settings = replace(settings, catalog=replace(settings.catalog,
                                                     properties=embedded_catalog_properties(settings.data_dir)))
    if settings.spark.remote:
        _check_spark_connect(reading.at("spark", "remote"), settings.spark.remote, settings.catalog)
    if settings.maintenance.quarantine_location:
        problem = quarantine_location_problem(settings.maintenance.quarantine_location,
                                              settings.catalog.properties.get("warehouse"))
        if problem:
            reading.at("maintenance", "quarantine-location").error(problem)
    if reading.problems.errors:
        raise SettingsError(*reading.problems.errors)
    remember(asdict(settings))  # the environment's values too
    return settings


def load_settings(path: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None) -> Settings:
    """Read and validate the settings file; with no file, the embedded default under ``./.floe``."""
    environ = os.environ if environ is None else environ
    config_path = Path(path or environ.get("FLOE_CONFIG") or DEFAULT_CONFIG)
    if config_path.exists():
        source = str(config_path)
        try:
            raw = yaml.safe_load(config_path.read_text()) or {}
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            line = f" line {mark.line + 1}" if mark else ""
            raise SettingsError(f"{source}:{line}: not valid YAML: {getattr(exc, 'problem', exc)}") from None
        base = config_path.resolve().parent
    elif path or environ.get("FLOE_CONFIG"):
        raise SettingsError(f"{config_path}: settings file not found")
    else:
        source, raw, base = "<defaults>", {}, Path.cwd()
    return settings_from_mapping(raw, base, source, environ)


def _check_spark_connect(at: Location, remote: str, catalog: CatalogSettings) -> None:
    properties = catalog.properties
    if (properties.get("type") or "").lower() == "sql" and properties.get("uri", "").startswith("sqlite"):
        # Tried: after one run through a Connect server, PyIceberg commits fail with "database is
        # locked": the server's JdbcCatalog keeps SQLite's read lock and a client cannot close it.
        at.error(
            "Spark Connect cannot be used with a SQLite catalog: the Connect server's "
            "Iceberg catalog keeps a read lock on the SQLite file that a client cannot release, and every other "
            "writer then fails with 'database is locked'. Use a PostgreSQL SQL catalog or a REST catalog, or "
            "spark.master instead of spark.remote"
        )


def embedded_catalog_properties(data_dir: str) -> dict[str, str]:
    """The embedded default catalog: SQLite catalog file and warehouse folder under the data dir."""
    root = Path(data_dir).resolve()
    return {
        "type": "sql",
        # sqlite3 waits this many seconds for a lock a Spark run holds, instead of failing at once.
        "uri": f"sqlite:///{root / 'catalog.db'}?timeout=60",
        "warehouse": f"file://{root / 'warehouse'}",
    }
