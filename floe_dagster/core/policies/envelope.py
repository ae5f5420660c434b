"""The safety envelope: what no policy can make a maintenance run do, whoever wrote the policy.

**Only its own table.** Every location an operation lists, deletes or writes under lies inside the
table's own location. Iceberg's ``remove_orphan_files`` deletes every file under its ``location`` that
*this* table does not reference, so a location outside the table (the warehouse root, another table's
folder) is a switch that deletes other tables' files. The policy fields that name a location are, in
both policy formats:

- ``orphanCleanup.location`` (``orphan-cleanup.location``): listed, then deleted under. Checked
  (:data:`LOCATION_FIELDS`).
- ``rewriteManifests.stagingLocation`` (``rewrite-manifests.staging-location``): where Floe's Java action
  stages manifests; the procedure has no such argument, so floe-dagster keeps it (the policy shows it,
  with a warning) and the envelope *withholds* it: the config a run hands the engine never carries it
  (:data:`WITHHELD_FIELDS`), so it cannot reach anywhere, and Floe's files that name a staging folder
  outside the table (Floe's own tests use ``/tmp/stage``) keep loading.

No other field names a location: ``rewriteIf.path`` is a manifest filter (compared, never written),
``filter`` a predicate, ``equalSchemes``/``equalAuthorities`` how listed paths compare. A checked
location is either

- *relative* (``data``, ``data/region=eu``, ``metadata/``): a folder of the table's location, whatever
  table the policy's pattern matches. ``..`` that climbs out of it is refused when the policy is read; or
- *absolute* (``s3://bucket/wh/db/t/data``, ``file:/wh/db/t``, ``/wh/db/t``): only in a policy whose
  ``tablePattern`` names one table (namespace and table, no wildcard or regex), since one folder lies
  inside at most one table's location. It is checked against that table's location where floe reads
  the catalog when a policy is written (the HTTP API, ``floe-dagster validate`` with a floe.yaml).

Before any engine call, a run checks the location it is about to use against the table's real location
(read from the table's metadata), and hands the engine the location *spelled from that one*
(:func:`check_operation`): the table location as the catalog wrote it, plus the folders inside it. What
Iceberg lists is then what was checked, whatever a scheme, ``..`` or an escape could have meant to
Hadoop's path parser.

Locations are compared after normalising (core/storage/locations.py's strict constructor,
``parse_location``): the scheme in
lower case, ``s3a`` and ``s3n`` as ``s3`` (Iceberg's own ``equal_schemes`` default, not the policy's
``equalSchemes``, which an attacker could write), ``file:/p``, ``file:///p``, ``file://localhost/p`` and a bare
``/p`` as one form, the authority (bucket, host) in lower case, empty and ``.`` segments dropped, ``..`` applied,
and then path segments compared one by one (``/t/orders2`` is not inside ``/t/orders``). A percent-encoded dot
segment or separator (``%2e%2e``, ``%2f``) and a backslash are refused rather than guessed at.

**Table properties floe may set** (``tableProperties``) exclude the keys that move data or metadata,
load classes, change encryption or garbage collection (:func:`property_refusal`), unless floe.yaml's
``envelope.allowed-table-properties`` names the key: a setting only the deployment's owner writes,
never the HTTP API. The keys that steer a table's FileIO (``py-io-impl``, ``io-impl``,
``s3.*``, ``client.*``…: core/storage/storage_keys.py) are refused whatever floe.yaml says (:func:`storage_refusal`).

**The table's own location**, written by its owner, is checked too before a kind that lists, deletes
or moves files (core/storage/table_location.py): never the warehouse root, a namespace's or another table's
location, never inside a quarantine. Its refusals name the field ``table location``.

A :class:`Verdict` names the policy, the operation, each refused field and why; ``plan``, ``explain``
and the HTTP trigger status show it per (table, operation). Pure: no Dagster, Spark or PyIceberg.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Mapping

from floe_dagster.core.storage.locations import is_relative, joined, parse_location, relative_segments
from floe_dagster.core.operation_config import OperationConfig, camel
from floe_dagster.core.operations import ALL_OPERATIONS, Operation
from floe_dagster.core.basics.patterns import TablePattern
from floe_dagster.core.storage.storage_keys import storage_key_why, storage_refusal
from floe_dagster.core.storage.table_location import KnownLocations, LocationCheck, check_table_location
from floe_dagster.core.basics.tables import TableName
from floe_dagster.core.basics.validation import Location, setting

TABLE_LOCATION = "table location"  # a Refusal's field for the table's own location (written by its owner)

# -- which policy fields name a location -------------------------------------------------------------------

# (operation → its config's fields that name a location a run uses), as each kind declares them
# (core/operation_kinds/: the spec's ``location_fields``, each with what a run does under it).
LOCATION_FIELDS: dict[Operation, tuple[str, ...]] = {
    op: tuple(op.spec.location_fields()) for op in ALL_OPERATIONS if op.spec.location_fields()}
# Locations a policy may keep (Floe's) that no procedure takes: never handed to an engine.
WITHHELD_FIELDS: dict[Operation, tuple[str, ...]] = {
    op: op.spec.withheld_fields() for op in ALL_OPERATIONS if op.spec.withheld_fields()}


def policy_field(op: Operation, name: str) -> str:
    """A config field as the policy writes it: ``staging_location`` of REWRITE_MANIFESTS is
    ``rewriteManifests.stagingLocation``."""
    return f"{op.policy_key}.{camel(name)}"


# -- table properties -----------------------------------------------------------------------------------------

# Iceberg 1.11's TableProperties whose change reaches beyond maintenance: where data or metadata is
# written, which classes readers and writers load, encryption, garbage collection, the metastore's locks.
REFUSED_PROPERTIES = {
    "write.data.path": "moves where every writer puts the table's data files",
    "write.metadata.path": "moves where the table's metadata is written",
    "write.object-storage.path": "moves where every writer puts the table's data files (object-storage layout)",
    "write.folder-storage.path": "moves where every writer puts the table's data files",
    "write.object-storage.enabled": "changes the paths of every new data file (hash-prefixed object-storage layout)",
    "write.object-storage.partitioned-paths": "changes the paths of every new data file (object-storage layout)",
    "gc.enabled": "switches garbage collection (snapshot expiry and orphan cleanup) of every engine",
    "engine.hive.enabled": "makes Hive load Iceberg's storage handler classes for the table",
    "engine.hive.lock-enabled": "changes how a Hive metastore locks the table's commits (off without atomic "
                                "alter support, concurrent commits can be lost)",
}
REFUSED_PREFIXES = {"encryption.": "changes the table's encryption"}
REFUSED_SUFFIXES = {".impl": "names a class every reader or writer of the table loads"}
ALLOW_SETTING = "envelope.allowed-table-properties"


def property_refusal(name: str, allowed: Iterable[str] = ()) -> str | None:
    """Why the envelope refuses a declared property (None: a policy may set it)."""
    storage = storage_refusal(name)
    if storage is not None:
        return storage
    why = _refused_why(name)
    if why is None or name in set(allowed):
        return None
    return (f"'{name}' is refused by the safety envelope: it {why}. Only floe.yaml's {ALLOW_SETTING} (written by "
            "the deployment's owner, never over HTTP) can allow it")


def _refused_why(name: str) -> str | None:
    return (REFUSED_PROPERTIES.get(name)
            or next((why for prefix, why in REFUSED_PREFIXES.items() if name.startswith(prefix)), None)
            or next((why for suffix, why in REFUSED_SUFFIXES.items() if name.endswith(suffix)), None))


def _allowable(names: tuple[str, ...]) -> str | None:
    """floe.yaml's check of ``allowed-table-properties``: each name one the envelope refuses."""
    never = [name for name in names if storage_key_why(name) is not None]
    if never:
        return ("no setting allows a key that steers a table's storage as a table property (only the catalog's "
                f"properties may set it): {', '.join(map(repr, never))}")
    pointless = [name for name in names if _refused_why(name) is None]
    if pointless:
        return (f"{', '.join(map(repr, pointless))}: not refused by the safety envelope, so there is nothing to allow "
                f"(it refuses {', '.join(REFUSED_PROPERTIES)}, encryption.*, *.impl)")
    return None


@dataclass(frozen=True)
class EnvelopeSettings:
    """The safety envelope: the table properties a policy may set although they reach beyond maintenance."""

    allowed_table_properties: tuple[str, ...] = setting(
        (), "table property keys policies may declare although the safety envelope refuses them (write.data.path, "
        "encryption.*, *.impl, gc.enabled…): each named exactly; never a key that steers storage (py-io-impl, s3.*…)",
        check=_allowable)


# -- the verdict ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Refusal:
    field: str  # as the policy writes it: orphanCleanup.location, tableProperties.write.data.path
    why: str


@dataclass(frozen=True)
class Verdict:
    """The envelope's verdict on one policy's operation for one table: ok, refused (each field and why),
    or not decided yet (``pending``: what it waits for, the table's location). ``config``: the config the
    run uses, its locations spelled from the table's (None when refused)."""

    policy: str | None
    operation: Operation
    table: str | None = None
    refusals: tuple[Refusal, ...] = ()
    pending: str = ""
    config: OperationConfig | None = field(default=None, compare=False, repr=False)

    @property
    def ok(self) -> bool:
        """Nothing refused and nothing left unchecked: a run may go ahead."""
        return not self.refusals and not self.pending

    @property
    def status(self) -> str:
        return "refused" if self.refusals else "unchecked" if self.pending else "ok"

    def describe(self) -> str:
        """``ok``, ``refused: orphanCleanup.location: …``, or ``not checked yet: …``."""
        if self.refusals:
            return "refused: " + "; ".join(f"{r.field}: {r.why}" for r in self.refusals)
        return f"not checked yet: {self.pending}" if self.pending else "ok"

    def message(self) -> str:
        """The run's failure: the policy, the operation, the table, each field and why."""
        on = f" on table '{self.table}'" if self.table else ""
        why = "; ".join(f"{r.field}: {r.why}" for r in self.refusals) or self.pending
        return (f"policy '{self.policy}': {self.operation.value}{on} refused by the safety envelope before any "
                f"engine call: {why}")

    def to_json(self) -> dict[str, object]:
        return {"status": self.status, "policy": self.policy, "operation": self.operation.value,
                "refusals": [{"field": r.field, "reason": r.why} for r in self.refusals],
                "detail": self.describe()}


# -- when a policy is read ------------------------------------------------------------------------------------


def names_one_table(pattern: TablePattern) -> bool:
    """Whether a pattern names one table: ``ns.table`` or ``catalog.ns.table``, no wildcard, no regex."""
    if pattern.regex is not None or pattern.namespace is None or pattern.table is None:
        return False
    parts = (pattern.catalog or "", *pattern.namespace, pattern.table)
    return not any(ch in part for part in parts for ch in "*?")


def single_table(pattern: TablePattern, catalog: str) -> TableName | None:
    """The one table of ``catalog`` a pattern names, or None (a wildcard, a regex, another catalog)."""
    if not names_one_table(pattern) or (pattern.catalog or catalog) != catalog:
        return None
    assert pattern.namespace is not None and pattern.table is not None
    return TableName(catalog, pattern.namespace, pattern.table)


def check_policy(at: Location, pattern: TablePattern, configs: Mapping[Operation, OperationConfig],
                 allowed_properties: Iterable[str] = ()) -> None:
    """What the envelope can decide from the policy alone, recorded at ``at`` (the policy's location):
    a location's form (relative, not climbing out; absolute only with a one-table pattern) and the
    declared properties it refuses."""
    for op, config in configs.items():
        for name, value in named_locations(op, config):
            _check_form(at.child(op.policy_key).child(camel(name)), value, pattern)
        for key, _ in config.properties_to_set():
            why = property_refusal(key, allowed_properties)
            if why:
                at.child(op.policy_key).child(key).error(why)


def _check_form(at: Location, value: str, pattern: TablePattern) -> None:
    try:
        if is_relative(value):
            relative_segments(value)
            return
        parse_location(value)
    except ValueError as exc:
        at.error(str(exc))
        return
    if not names_one_table(pattern):
        at.error(f"{value!r} is absolute, and tablePattern '{pattern.text}' may match several tables, while a "
                 "folder lies inside one table's location at most: write it relative to the table's location "
                 "(e.g. 'data' for <table location>/data)")


def named_locations(op: Operation, config: object) -> list[tuple[str, str]]:
    """(config field, value) of every location an operation's config gives."""
    return [(name, getattr(config, name)) for name in LOCATION_FIELDS.get(op, ())
            if getattr(config, name, None) is not None]


def absolute_location_fields(configs: Mapping[Operation, OperationConfig]) -> list[tuple[Operation, str, str]]:
    """(operation, config field, value) of every absolute location a policy gives: the ones that need the
    table's location from the catalog to be checked."""
    return [(op, name, value) for op, config in configs.items() for name, value in named_locations(op, config)
            if not is_relative(value)]


def catalog_refusals(pattern: TablePattern, configs: Mapping[Operation, OperationConfig], catalog: str,
                     table_location: Callable[[TableName], str | None]) -> tuple[Refusal, ...]:
    """A policy's absolute locations checked against the location of the one table its pattern names,
    as ``table_location`` reads it from the catalog (None: no such table). Where a policy is written with
    the catalog at hand: the HTTP API, ``floe-dagster validate``."""
    given = absolute_location_fields(configs)
    if not given:
        return ()
    table = single_table(pattern, catalog)
    location = table_location(table) if table is not None else None
    if table is None or location is None:
        why = (f"tablePattern '{pattern.text}' names no table of catalog '{catalog}'" if table is None
               else f"table '{table.qualified}' does not exist")
        return tuple(Refusal(policy_field(op, name), f"{value!r} is absolute and {why}, so it cannot be checked "
                             "against the table's location: write it relative to the table's location (e.g. 'data')")
                     for op, name, value in given)
    return tuple(refusal for op, config in configs.items()
                 for refusal in check_operation(None, op, config, location, table=table.qualified).refusals)


# -- at run time (and in plan, explain) ---------------------------------------------------------------------


def check_operation(policy: str | None, op: Operation, config: Any, table_location: str | None,
                    allowed_properties: Iterable[str] = (), table: str | None = None,
                    own_location: LocationCheck | None = None) -> Verdict:
    """The verdict on running ``op`` with ``config`` on a table at ``table_location`` (None: not known yet,
    then an absolute location stays unchecked); ``config`` in the verdict has every location spelled from
    the table's (:func:`joined`) and the withheld ones removed. ``own_location``: the check of the table's
    own location (core/storage/table_location.py), for a kind that lists, deletes or moves files."""
    refusals: list[Refusal] = [Refusal(TABLE_LOCATION, why) for why in (own_location.refusals if own_location else ())]
    resolved: dict[str, str] = {}
    pending = ""
    for name, value in named_locations(op, config):
        where = policy_field(op, name)
        if table_location is None:
            if not is_relative(value):
                pending = f"{where} is absolute and the table's location is not known yet"
            continue
        outcome = _inside(where, op.spec.location_fields()[name], value, table_location, table)
        if isinstance(outcome, Refusal):
            refusals.append(outcome)
        else:
            resolved[name] = outcome
    refusals += [Refusal(f"{op.policy_key}.{key}", why) for key, _ in config.properties_to_set()
                 if (why := property_refusal(key, allowed_properties))]
    withheld = {name: None for name in WITHHELD_FIELDS.get(op, ()) if getattr(config, name, None) is not None}
    changes = {**resolved, **withheld}
    usable = None if refusals else replace(config, **changes) if changes else config
    return Verdict(policy, op, table, tuple(refusals), "" if refusals else pending, usable)


def own_location_check(table: TableName, op: Operation, config: object, location: str | None,
                       known: KnownLocations | None) -> LocationCheck | None:
    """The check of a table's own location for a kind that lists, deletes or moves files (``needs_gc``),
    with the policy's ``nestedTables`` (None: another kind, or nothing known to check it against)."""
    if known is None or not op.needs_gc:
        return None
    return check_table_location(table, location, known, getattr(config, "nested_tables", None) or ())


def _inside(where: str, what_it_does: str, value: str, table_location: str, table: str | None) -> str | Refusal:
    """The location to use (spelled from the table's), or why not (``what_it_does`` under a location)."""
    try:
        root = parse_location(table_location)
    except ValueError as exc:
        return Refusal(where, f"the table's location cannot be read, so no location can be checked against it: {exc}")
    try:
        if is_relative(value):
            return joined(table_location, relative_segments(value))
        wanted = parse_location(value)
    except ValueError as exc:
        return Refusal(where, str(exc))
    if not root.contains(wanted):
        of = f"table '{table}'" if table else "the table"
        return Refusal(where, f"{value!r} lies outside the location of {of}, {table_location!r}: "
                              f"{what_it_does}. Every location an operation lists, deletes or writes under must "
                              "lie inside the table's own location")
    return joined(table_location, wanted.segments[len(root.segments):])


__all__ = [
    "LOCATION_FIELDS", "WITHHELD_FIELDS", "REFUSED_PROPERTIES", "REFUSED_PREFIXES",
    "REFUSED_SUFFIXES", "ALLOW_SETTING", "storage_refusal", "TABLE_LOCATION", "EnvelopeSettings", "Refusal",
    "Verdict", "policy_field",
    "is_relative", "parse_location", "relative_segments", "joined", "property_refusal", "names_one_table",
    "single_table", "check_policy", "named_locations", "absolute_location_fields", "catalog_refusals",
    "check_operation", "own_location_check",
]
