"""Settings: one ``floe.yaml`` (path from ``FLOE_CONFIG``, default ``./floe.yaml``) plus environment overrides.

Every command and the code location read settings through :func:`load_settings`, so the CLI, Dagit and
the sensors agree. Relative paths in the file are resolved against the file's folder.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml

from floe_dagster.core.batches import BatchSettings
from floe_dagster.core.debt import DebtWeights
from floe_dagster.core.patterns import TablePattern
from floe_dagster.core.planner import SchedulerSettings
from floe_dagster.core.validation import closest
from floe_dagster.errors import SettingsError

DEFAULT_CONFIG = "floe.yaml"
# The Iceberg release whose Spark runtime (for the installed PySpark's Spark line, see
# spark/runtime.py) and AWS bundle Spark loads; `spark.iceberg-version` selects another (1.10.x).
DEFAULT_ICEBERG_VERSION = "1.11.0"
DEFAULT_SQLITE_JDBC = "org.xerial:sqlite-jdbc:3.47.1.0"
DEFAULT_POSTGRES_JDBC = "org.postgresql:postgresql:42.7.4"


@dataclass(frozen=True)
class SparkSettings:
    master: str = "local[2]"
    remote: str | None = None  # Spark Connect URL; when set, master is not used
    conf: dict[str, str] = field(default_factory=dict)
    iceberg_version: str = DEFAULT_ICEBERG_VERSION
    # Extra Maven coordinates fetched once into jars_cache (the Iceberg runtime is added by
    # spark/runtime.py); jars are extra local jar paths.
    packages: tuple[str, ...] = ()
    jars: tuple[str, ...] = ()
    jars_cache: str = ""
    java_home: str | None = None


@dataclass(frozen=True)
class CatalogSettings:
    name: str = "demo"
    properties: dict[str, str] = field(default_factory=dict)
    # Extra spark.sql.catalog.<name>.* properties, for catalog types we cannot map ourselves.
    spark_properties: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class MaintenanceSettings:
    # After a rewrite, each new snapshot's rows are checked against its parent's from Iceberg's
    # snapshot summaries (exact, no Spark query); tables up to this many bytes are also counted with
    # Spark. 0: Spark counts only where the summaries are missing or disagree.
    row_count_check_max_bytes: int = 0
    default_timeout_hours: float = 1.0
    # After this many days, the debt-score sensor deletes floe's finished runs and their ledger and
    # outcome rows (once a day); 0 keeps them forever, as Dagster does.
    retention_days: int = 30


@dataclass(frozen=True)
class ApiSettings:
    """The HTTP API's keys (``floe-dagster serve``), from a file, an environment variable, or both.

    Each key is one entry ``name:role:sha256hex``: the key holder's name (letters, digits, ``_.@-``;
    it becomes the ``dagster/floe.actor`` of the runs the key triggers), the role ``VIEWER`` (read) or
    ``OPERATOR`` (read and trigger), and the SHA-256 of the key in hex (the key itself is never
    stored). In the file: one entry a line, blank lines and ``#`` comments ignored; in the variable:
    entries separated by newlines, commas or semicolons. The server reads them when it starts and
    re-reads the file when it changes. With neither set the API needs no key and only listens on
    the loopback interface (127.0.0.1, localhost, ::1).

    ``policy_directory`` (``policy-directory``) is the folder where ``POST``/``PUT``/``DELETE
    /api/v1/policies`` write one ``<name>.json`` file per policy; without it those calls answer 405.
    The policies are read from it too, whether or not ``policies`` lists it
    (:func:`floe_dagster.policies.policy_paths`).
    """

    keys_file: str | None = None  # absolute path (relative paths are resolved against floe.yaml's folder)
    keys_env: str | None = None  # the name of an environment variable holding entries
    policy_directory: str | None = None  # absolute path (resolved like keys_file); None: the API only reads

    @property
    def keys_configured(self) -> bool:
        return bool(self.keys_file or self.keys_env)


@dataclass(frozen=True)
class HealthSettings:
    # One `health` asset check per table asset (Dagit's Checks tab). At 5,000 tables they add about
    # 1.6 s to a code location load (benchmarks/bench_health_checks.py); observations stay either way.
    checks: bool = True
    # Seconds a debt-score sensor tick may spend recording health observations and check results
    # (the SQLite instance stores about 50 events a second; the rest follow on the next ticks).
    report_time_budget_s: float = 10.0


@dataclass(frozen=True)
class Settings:
    source: str  # the file the settings came from ("<defaults>" when there was none)
    data_dir: str  # where the embedded default keeps catalog, warehouse, caches, locks
    catalog: CatalogSettings
    spark: SparkSettings
    policies: tuple[str, ...]
    scheduler: SchedulerSettings
    maintenance: MaintenanceSettings
    debt: DebtWeights = field(default_factory=DebtWeights)  # the debt score's weights
    coordination_url: str | None = None
    api: ApiSettings = field(default_factory=ApiSettings)
    # Named table scopes for sharded code locations: (name, table pattern), in order.
    shards: tuple[tuple[str, str], ...] = ()
    health: HealthSettings = field(default_factory=HealthSettings)
    batching: BatchSettings = field(default_factory=BatchSettings)  # tables per automated run

    @property
    def table_cache_path(self) -> Path:
        return Path(self.data_dir) / "cache" / f"tables-{self.catalog.name}.json"


_TOP_KEYS = {"data-dir", "catalog", "spark", "policies", "scheduler", "maintenance", "debt", "coordination", "api",
             "shards", "health", "batching"}
_CATALOG_KEYS = {"name", "properties", "spark-properties"}
_SPARK_KEYS = {"master", "remote", "conf", "iceberg-version", "packages", "jars", "jars-cache", "java-home"}
_ICEBERG_VERSION = re.compile(r"^\d+\.\d+\.\d+$")
_MAINTENANCE_KEYS = {"row-count-check-max-bytes", "default-timeout-hours", "retention-days"}
_COORDINATION_KEYS = {"url"}
_HEALTH_KEYS = {"checks", "report-time-budget-s"}
_BATCHING_KEYS = {"max-tables", "max-bytes", "group-by"}
_API_KEYS = {"keys-file", "keys-env", "policy-directory"}
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _kebab(name: str) -> str:
    return name.replace("_", "-")


_SCHEDULER_FIELDS = {_kebab(f): f for f in SchedulerSettings.__dataclass_fields__}


def _unknown(source: str, section: str, key: str, allowed: set[str]) -> SettingsError:
    where = f"{section}.{key}" if section else key
    close = closest(key, sorted(allowed))
    hint = f" (did you mean '{close}'?)" if close else ""
    return SettingsError(f"{source}: {where}: unknown key{hint}; allowed: {', '.join(sorted(allowed))}")


def _coerce(source: str, where: str, value: Any, kind: type) -> Any:
    """Convert a file or environment value to the field's type, or say what is allowed."""
    if kind is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in ("true", "false", "1", "0", "yes", "no"):
            return value.strip().lower() in ("true", "1", "yes")
        raise SettingsError(f"{source}: {where}: expected true or false, got {value!r}")
    if kind in (int, float):
        if isinstance(value, bool):
            raise SettingsError(f"{source}: {where}: expected a number ≥ 0, got {value!r}")
        try:
            number = kind(value) if kind is float else int(str(value).strip())
        except (TypeError, ValueError):
            raise SettingsError(f"{source}: {where}: expected a {'whole ' if kind is int else ''}number ≥ 0, got {value!r}") from None
        if number < 0:
            raise SettingsError(f"{source}: {where}: expected a number ≥ 0, got {value!r}")
        return number
    return value


def _section(source: str, raw: Mapping[str, Any], name: str, allowed: set[str]) -> dict[str, Any]:
    """One section of the file as a mapping whose keys are all known (else a SettingsError naming it)."""
    section = _mapping(source, name, raw.get(name))
    for key in section:
        if key not in allowed:
            raise _unknown(source, name, str(key), allowed)
    return section


def _mapping(source: str, where: str, value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise SettingsError(f"{source}: {where}: expected a mapping, got {type(value).__name__}")
    return dict(value)


def _string_map(source: str, where: str, value: Any) -> dict[str, str]:
    result = {}
    for key, item in _mapping(source, where, value).items():
        if isinstance(item, (dict, list)):
            raise SettingsError(f"{source}: {where}.{key}: expected a string, got {type(item).__name__}")
        result[str(key)] = "true" if item is True else "false" if item is False else str(item)
    return result


def _string_list(source: str, where: str, value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise SettingsError(f"{source}: {where}: expected a list of strings")
    return tuple(value)


def _scheduler(source: str, raw: Mapping[str, Any], environ: Mapping[str, str]) -> SchedulerSettings:
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in _SCHEDULER_FIELDS:
            raise _unknown(source, "scheduler", str(key), set(_SCHEDULER_FIELDS))
        values[_SCHEDULER_FIELDS[key]] = (f"scheduler.{key}", value)
    for kebab, attr in _SCHEDULER_FIELDS.items():
        env_name = "FLOE_SCHEDULER_" + attr.upper()
        if env_name in environ:
            values[attr] = (f"environment {env_name}", environ[env_name])
    kinds = {name: type(f.default) for name, f in SchedulerSettings.__dataclass_fields__.items()}
    return SchedulerSettings(
        **{attr: _coerce(source, where, value, kinds[attr]) for attr, (where, value) in values.items()}
    )


def _text(source: str, where: str, value: Any, default: str | None = None) -> str | None:
    """A scalar setting as text (numbers are read as written); lists, mappings and true/false are refused."""
    if value is None or value == "":
        return default
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise SettingsError(f"{source}: {where}: expected text, got {type(value).__name__} {value!r}")
    return str(value)


def _resolve(base: Path, path: str, source: str = "<settings>", where: str = "path") -> str:
    if "\x00" in path:
        raise SettingsError(f"{source}: {where}: a path cannot contain a NUL character, got {path!r}")
    expanded = Path(os.path.expandvars(os.path.expanduser(path)))
    return str(expanded if expanded.is_absolute() else (base / expanded).resolve())


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


def settings_from_mapping(raw: Any, base: Path, source: str, environ: Mapping[str, str] | None = None) -> Settings:
    """Validate settings given as floe.yaml's mapping of sections (from the file, or from a Dagster
    component's ``defs.yaml``). Relative paths are resolved against ``base``; messages begin with
    ``source``, then name the key (``scheduler.max-tables-per-poll``)."""
    environ = os.environ if environ is None else environ
    if not isinstance(raw, Mapping):
        raise SettingsError(f"{source}: expected a mapping of sections ({', '.join(sorted(_TOP_KEYS))})")
    for key in raw:
        if key not in _TOP_KEYS:
            raise _unknown(source, "", str(key), _TOP_KEYS)

    data_dir = _resolve(base, environ.get("FLOE_DATA_DIR") or _text(source, "data-dir", raw.get("data-dir"), ".floe"),
                        source, "environment FLOE_DATA_DIR" if environ.get("FLOE_DATA_DIR") else "data-dir")

    catalog_raw = _section(source, raw, "catalog", _CATALOG_KEYS)
    catalog_name = _text(source, "catalog.name", catalog_raw.get("name"), "demo")
    properties = _string_map(source, "catalog.properties", catalog_raw.get("properties"))
    if "catalog" not in raw:
        # The embedded default: a SQLite-backed SQL catalog and a warehouse folder in the data dir.
        properties = embedded_catalog_properties(data_dir)
    catalog = CatalogSettings(
        name=catalog_name,
        properties=properties,
        spark_properties=_string_map(source, "catalog.spark-properties", catalog_raw.get("spark-properties")),
    )

    spark_raw = _section(source, raw, "spark", _SPARK_KEYS)
    packages = _string_list(source, "spark.packages", spark_raw.get("packages"))
    iceberg_version = _text(source, "spark.iceberg-version", spark_raw.get("iceberg-version"), DEFAULT_ICEBERG_VERSION)
    if not _ICEBERG_VERSION.match(iceberg_version):
        raise SettingsError(
            f"{source}: spark.iceberg-version must be an Iceberg release such as {DEFAULT_ICEBERG_VERSION!r} "
            f"or '1.10.2', got {iceberg_version!r}"
        )
    spark = SparkSettings(
        master=environ.get("FLOE_SPARK_MASTER") or _text(source, "spark.master", spark_raw.get("master"), "local[2]"),
        remote=environ.get("FLOE_SPARK_REMOTE") or _text(source, "spark.remote", spark_raw.get("remote")),
        conf=_string_map(source, "spark.conf", spark_raw.get("conf")),
        iceberg_version=iceberg_version,
        packages=packages,
        jars=tuple(_resolve(base, j, source, "spark.jars") for j in _string_list(source, "spark.jars", spark_raw.get("jars"))),
        jars_cache=_resolve(
            base,
            environ.get("FLOE_JARS_CACHE")
            or _text(source, "spark.jars-cache", spark_raw.get("jars-cache"),
                     str(Path.home() / ".cache" / "floe-dagster" / "jars")),
            source, "spark.jars-cache",
        ),
        java_home=environ.get("FLOE_JAVA_HOME") or _text(source, "spark.java-home", spark_raw.get("java-home")),
    )
    if spark.remote:
        _check_spark_connect(source, spark.remote, catalog)

    maintenance_raw = _section(source, raw, "maintenance", _MAINTENANCE_KEYS)
    maintenance = MaintenanceSettings(
        row_count_check_max_bytes=_coerce(
            source, "maintenance.row-count-check-max-bytes",
            maintenance_raw.get("row-count-check-max-bytes", MaintenanceSettings.row_count_check_max_bytes), int,
        ),
        default_timeout_hours=_coerce(
            source, "maintenance.default-timeout-hours",
            maintenance_raw.get("default-timeout-hours", MaintenanceSettings.default_timeout_hours), float,
        ),
        retention_days=_coerce(
            source, "maintenance.retention-days",
            maintenance_raw.get("retention-days", MaintenanceSettings.retention_days), int,
        ),
    )

    coordination_raw = _section(source, raw, "coordination", _COORDINATION_KEYS)

    api = _api(source, _section(source, raw, "api", _API_KEYS), base)

    health_raw = _section(source, raw, "health", _HEALTH_KEYS)
    health = HealthSettings(
        checks=_coerce(source, "health.checks", health_raw.get("checks", True), bool),
        report_time_budget_s=_coerce(source, "health.report-time-budget-s",
                                     health_raw.get("report-time-budget-s", HealthSettings.report_time_budget_s), float),
    )

    batching = _batching(source, _section(source, raw, "batching", _BATCHING_KEYS))

    policies_value = raw.get("policies", ["examples/policies"] if "catalog" not in raw else [])
    policies = tuple(_resolve(base, p, source, "policies") for p in _string_list(source, "policies", policies_value))
    if environ.get("FLOE_POLICIES"):
        policies = tuple(_resolve(Path.cwd(), p, source, "environment FLOE_POLICIES") for p in environ["FLOE_POLICIES"].split(os.pathsep) if p)

    shards = []
    shards_raw = raw.get("shards") or []
    if not isinstance(shards_raw, list):
        raise SettingsError(f"{source}: shards: expected a list of {{name: <identifier>, tables: <table pattern>}}")
    for index, entry in enumerate(shards_raw):
        if not isinstance(entry, Mapping) or set(entry) != {"name", "tables"}:
            raise SettingsError(f"{source}: shards[{index}]: expected {{name: <identifier>, tables: <table pattern>}}")
        name, pattern = str(entry["name"]), str(entry["tables"])
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) or name.startswith("shard_"):
            raise SettingsError(f"{source}: shards[{index}].name: {name!r} must be a Python identifier not starting with 'shard_'")
        try:
            TablePattern.parse(pattern)
        except ValueError as exc:
            raise SettingsError(f"{source}: shards[{index}].tables: {exc}") from None
        if name in dict(shards):
            raise SettingsError(f"{source}: shards[{index}].name: {name!r} is used twice")
        shards.append((name, pattern))

    return Settings(
        source=source,
        data_dir=data_dir,
        catalog=catalog,
        spark=spark,
        policies=policies,
        scheduler=_scheduler(source, _mapping(source, "scheduler", raw.get("scheduler")), environ),
        maintenance=maintenance,
        debt=_debt(source, _mapping(source, "debt", raw.get("debt"))),
        coordination_url=environ.get("FLOE_COORDINATION_URL") or _text(source, "coordination.url", coordination_raw.get("url")),
        api=api,
        shards=tuple(shards),
        health=health,
        batching=batching,
    )


def _api(source: str, raw: Mapping[str, Any], base: Path) -> ApiSettings:
    keys_file = raw.get("keys-file")
    if keys_file is not None and (not isinstance(keys_file, str) or not keys_file.strip()):
        raise SettingsError(f"{source}: api.keys-file: expected a file path, got {keys_file!r}")
    keys_env = raw.get("keys-env")
    if keys_env is not None and (not isinstance(keys_env, str) or not _ENV_NAME.fullmatch(keys_env)):
        raise SettingsError(
            f"{source}: api.keys-env: expected the name of an environment variable (letters, digits and _, "
            f"not starting with a digit), got {keys_env!r}"
        )
    directory = raw.get("policy-directory")
    if directory is not None and (not isinstance(directory, str) or not directory.strip()):
        raise SettingsError(f"{source}: api.policy-directory: expected a folder path, got {directory!r}")
    if directory is not None:
        directory = _resolve(base, directory, source, "api.policy-directory")
        if Path(directory).exists() and not Path(directory).is_dir():
            raise SettingsError(f"{source}: api.policy-directory: {directory} is not a folder")
    return ApiSettings(keys_file=_resolve(base, keys_file, source, "api.keys-file") if keys_file else None,
                       keys_env=keys_env, policy_directory=directory)


def _debt(source: str, raw: dict[str, Any]) -> DebtWeights:
    """The debt score's weights, checked now so a bad key fails at start-up rather than at a tick."""
    try:
        return DebtWeights.from_mapping(raw)
    except ValueError as exc:
        raise SettingsError(f"{source}: debt: {exc}") from None


def _batching(source: str, raw: Mapping[str, Any]) -> BatchSettings:
    default = BatchSettings()
    max_tables = _coerce(source, "batching.max-tables", raw.get("max-tables", default.max_tables), int)
    max_bytes = _coerce(source, "batching.max-bytes", raw.get("max-bytes", default.max_bytes), int)
    group_by = _string_list(source, "batching.group-by", raw["group-by"]) if "group-by" in raw else default.group_by
    try:
        return BatchSettings(max_tables=max_tables, max_bytes=max_bytes, group_by=group_by)
    except ValueError as exc:
        raise SettingsError(f"{source}: batching.{exc}") from None


def _check_spark_connect(source: str, remote: str, catalog: CatalogSettings) -> None:
    if not remote.startswith("sc://"):
        raise SettingsError(f"{source}: spark.remote: {remote!r} is not a Spark Connect URL (sc://host:port)")
    properties = catalog.properties
    if (properties.get("type") or "").lower() == "sql" and properties.get("uri", "").startswith("sqlite"):
        # Tried: after one run through a Connect server, PyIceberg commits fail with "database is
        # locked": the server's JdbcCatalog keeps SQLite's read lock and a client cannot close it.
        raise SettingsError(
            f"{source}: spark.remote (Spark Connect) cannot be used with a SQLite catalog: the Connect server's "
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
