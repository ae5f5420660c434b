"""The writers of a table: the user's Dagster assets that write it (docs/beside-pipelines.md).

A table's writers come from two sources, merged (:func:`writers_of`):

- **Rules** in floe.yaml, ``writers: [{tables: <table pattern>, asset: <asset key template>}]``: every
  table the pattern matches is written by the asset the template names. The template's parts are
  separated by ``/`` (as Dagit writes an asset key); its placeholders are ``{catalog}``, ``{namespace}``
  (the namespace dotted: ``eu.sales``), ``{namespace_path}`` (a part of its own: one key part per
  namespace level) and ``{table}``.
- **Learned**: an asset whose materializations carry Dagster's ``dagster/table_name`` metadata naming the
  table (case-insensitively, with or without the catalog). The debt-score sensor reads new
  materializations with a cursor over the event log and persists what it learns in the coordination
  database (``floe_writers``), with each writer's newest materialization (storage id, run id, time).
  floe's own table assets carry ``dagster/table_name`` too: they are never their own table's writer.

The writer-aware hold (:func:`writer_hold`, the gate ``writer_running``): a rewrite or an expiry waits
while a run that targets one of the table's writer assets is queued or started, and runs anyway once it
has waited the schedule's ``maxWriterWait`` past the moment it first became due (as ``maxQuietWait``).

Pure: no Dagster, Spark or PyIceberg. An asset key is a tuple of its parts.
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Iterable, Mapping, Sequence

from floe_dagster.core.basics.durations import format_iso_duration, format_wait
from floe_dagster.core.basics.localtime import as_utc
from floe_dagster.core.basics.patterns import TablePattern
from floe_dagster.core.basics.tables import TableName
from floe_dagster.core.basics.validation import Location, check_mapping, check_unknown, describe

AssetKeyPath = tuple[str, ...]
SOURCE_RULE = "rule"  # a floe.yaml rule names the asset
SOURCE_TABLE_NAME = "table_name"  # the asset's materializations carry dagster/table_name
PLACEHOLDERS = ("catalog", "namespace", "namespace_path", "table")
RULE_FIELDS = ("tables", "asset")
DEFAULT_MAX_WRITER_WAIT = timedelta(hours=6)
# How soon a held item is looked at again (the sensor's tick): a writer's run ends when it ends.
RECHECK = timedelta(minutes=1)


def key_text(key: AssetKeyPath) -> str:
    """An asset key as Dagit writes it: its parts joined by ``/``."""
    return "/".join(key)


# -- rules -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WriterRule:
    """One floe.yaml rule: the tables ``tables`` matches are written by the asset ``asset`` names."""

    tables: TablePattern
    asset: str  # the template as written: parts separated by "/"

    def asset_key(self, table: TableName) -> AssetKeyPath | None:
        """The writer's key for ``table``, or None when the pattern does not match it."""
        if not self.tables.matches(table):
            return None
        key: list[str] = []
        for part in self.asset.split("/"):
            if part == "{namespace_path}":
                key.extend(table.namespace)
            else:
                key.append(part.format(catalog=table.catalog, namespace=table.namespace_str, table=table.name,
                                       namespace_path=table.namespace_str))
        return tuple(key)

    def to_json(self) -> dict[str, str]:
        return {"tables": self.tables.text, "asset": self.asset}


def _template_problem(template: str) -> str | None:
    """What is wrong with an asset key template, or None."""
    parts = template.split("/")
    if any(not part.strip() for part in parts):
        return f"{template!r} has an empty part; write parts separated by '/', such as 'warehouse/{{table}}'"
    for part in parts:
        try:
            placeholders = [(name, spec, conv) for _, name, spec, conv in string.Formatter().parse(part)
                            if name is not None]
        except ValueError as exc:
            return f"{template!r}: {exc} (write a literal brace as '{{{{' or '}}}}')"
        for name, spec, conv in placeholders:
            if name not in PLACEHOLDERS:
                return f"{template!r} has the unknown placeholder {{{name}}}; use {', '.join(PLACEHOLDERS)}"
            if spec or conv:
                return f"{template!r}: a placeholder takes no format or conversion"
        fields = [name for name, _, _ in placeholders]
        if "namespace_path" in fields and part != "{namespace_path}":
            return f"{template!r}: {{namespace_path}} must be a part of its own (it expands to one part per level)"
    return None


def read_writer_rules(at: Location, value: object) -> tuple[WriterRule, ...] | None:
    """floe.yaml's ``writers``: a list of ``{tables, asset}``; every bad rule is reported, naming its field."""
    if not isinstance(value, list):
        at.error(f"expected a list of {{tables: <table pattern>, asset: <asset key template>}}, got {describe(value)}")
        return None
    rules: list[WriterRule] = []
    for index, entry in enumerate(value):
        here = at.child(index)
        mapping = check_mapping(here, entry, "{tables: <table pattern>, asset: <asset key template>}")
        if mapping is None:
            continue
        check_unknown(here, mapping, RULE_FIELDS)
        pattern = template = None
        for name in RULE_FIELDS:
            if not isinstance(mapping.get(name), str) or not mapping[name].strip():
                here.child(name).error(f"expected text, got {describe(mapping.get(name))}")
        try:
            if isinstance(mapping.get("tables"), str) and mapping["tables"].strip():
                pattern = TablePattern.parse(mapping["tables"])
        except ValueError as exc:
            here.child("tables").error(str(exc))
        if isinstance(mapping.get("asset"), str) and mapping["asset"].strip():
            template = mapping["asset"].strip()
            problem = _template_problem(template)
            if problem:
                here.child("asset").error(problem)
                template = None
        if pattern is not None and template is not None:
            rules.append(WriterRule(pattern, template))
    return tuple(rules)


def rule_index(tables: Iterable[TableName], rules: Sequence[WriterRule]) -> dict[AssetKeyPath, list[TableName]]:
    """Each asset key the rules name, with the tables it writes (one pass over the tables per rule)."""
    index: dict[AssetKeyPath, list[TableName]] = {}
    for table in tables:
        for rule in rules:
            key = rule.asset_key(table)
            if key is not None:
                index.setdefault(key, []).append(table)
    return index


# -- writers ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Writer:
    """One writer of a table: its asset key, where floe learned it, and its newest materialization
    that floe has read (None until the sensor saw one)."""

    asset_key: AssetKeyPath
    source: str  # SOURCE_RULE or SOURCE_TABLE_NAME
    last_storage_id: int | None = None
    last_run_id: str | None = None
    last_materialized_at: datetime | None = None

    def to_json(self) -> dict[str, object]:
        return {"assetKey": key_text(self.asset_key), "source": self.source,
                "lastMaterialization": None if self.last_storage_id is None else {
                    "storageId": self.last_storage_id, "runId": self.last_run_id,
                    "at": self.last_materialized_at.isoformat() if self.last_materialized_at else None}}


def writers_of(table: TableName, rules: Sequence[WriterRule],
               learned: Mapping[str, Sequence[Writer]]) -> tuple[Writer, ...]:
    """The table's writers: the rules' (in their order), then the learned ones; a learned row of a key a
    rule names gives that writer its newest materialization. A persisted row of a rule that is gone is
    dropped (the rules are floe.yaml's, and floe.yaml decides)."""
    rows = {writer.asset_key: writer for writer in learned.get(table.qualified, ())}
    found: dict[AssetKeyPath, Writer] = {}
    for rule in rules:
        key = rule.asset_key(table)
        if key is not None and key not in found:
            row = rows.get(key)
            found[key] = Writer(key, SOURCE_RULE, row.last_storage_id if row else None,
                                row.last_run_id if row else None, row.last_materialized_at if row else None)
    for key, row in rows.items():
        if key not in found and row.source == SOURCE_TABLE_NAME:
            found[key] = row
    return tuple(found.values())


def writers_by_table(tables: Iterable[TableName], rules: Sequence[WriterRule],
                     learned: Mapping[str, Sequence[Writer]]) -> dict[str, tuple[Writer, ...]]:
    """Every table that has a writer, by its qualified name (what the planner and the assets read)."""
    if not rules and not learned:
        return {}
    found = {}
    for table in tables:
        writers = writers_of(table, rules, learned)
        if writers:
            found[table.qualified] = writers
    return found


# -- learning from materializations --------------------------------------------------------------


@dataclass(frozen=True)
class Materialization:
    """One materialization in the event log, as floe reads it: ``table_name`` is its ``dagster/table_name``
    metadata (None: not read, or not set)."""

    asset_key: AssetKeyPath
    storage_id: int
    run_id: str
    at: datetime
    table_name: str | None = None


def table_named(name: str, catalog: str, known: Mapping[str, TableName]) -> TableName | None:
    """The known table a ``dagster/table_name`` value names (case-insensitive; ``ns.table`` in floe's
    catalog, or ``catalog.ns.table``); ``known`` is keyed by the lower-cased qualified name."""
    text = name.strip().lower()
    return known.get(text) or known.get(f"{catalog.lower()}.{text}")


def known_writers(rules_index: Mapping[AssetKeyPath, Sequence[TableName]],
                  learned: Mapping[str, Sequence[Writer]], tables: Mapping[str, TableName]
                  ) -> dict[AssetKeyPath, list[tuple[TableName, str]]]:
    """Each writer key floe knows already, with the tables it writes and how floe knows: a rule's, or a
    persisted learned row's (its events need no payload read to be matched)."""
    known: dict[AssetKeyPath, list[tuple[TableName, str]]] = {
        key: [(table, SOURCE_RULE) for table in written] for key, written in rules_index.items()}
    for qualified, rows in learned.items():
        table = tables.get(qualified.lower())
        for row in rows if table is not None else ():
            if row.source == SOURCE_TABLE_NAME:
                known.setdefault(row.asset_key, []).append((table, SOURCE_TABLE_NAME))
    return known


def learned_rows(events: Iterable[Materialization], known: Mapping[AssetKeyPath, Sequence[tuple[TableName, str]]],
                 named: Mapping[str, TableName], catalog: str) -> dict[tuple[str, AssetKeyPath], Writer]:
    """The writer rows new materializations make, by (table, asset key), newest per pair: each event of a key
    floe knows (:func:`known_writers`) updates its tables; an event whose ``dagster/table_name`` names a
    known table makes its asset a writer of it, unless the key is floe's own asset of that table."""
    rows: dict[tuple[str, AssetKeyPath], Writer] = {}
    for event in sorted(events, key=lambda e: e.storage_id):
        targets = list(known.get(event.asset_key, ()))
        if event.table_name:
            table = table_named(event.table_name, catalog, named)
            if table is not None and event.asset_key != (table.catalog, *table.namespace, table.name):
                targets.append((table, SOURCE_TABLE_NAME))
        for table, source in targets:
            pair = (table.qualified, event.asset_key)
            if pair in rows and rows[pair].source == SOURCE_TABLE_NAME:
                source = SOURCE_TABLE_NAME  # both a rule and its own metadata name it: kept when the rule goes
            rows[pair] = Writer(event.asset_key, source, event.storage_id, event.run_id, event.at)
    return rows


# -- the writer-aware hold -------------------------------------------------------------------------


@dataclass(frozen=True)
class WriterRun:
    """A run of the user's, queued or started, and one asset key it targets."""

    run_id: str
    status: str  # Dagster's run status: QUEUED, NOT_STARTED, STARTING, STARTED
    asset_key: AssetKeyPath


@dataclass(slots=True)  # not frozen: a tick makes one per rewrite and expiry of a written table (frozen's
class WriterHold:       # __init__ sets each field through object.__setattr__); never changed once made
    """The gate ``writer_running``'s verdict for one (table, operation) at ``now``; its words (``detail``) are
    made only when asked."""

    passed: bool
    forced: bool
    writers: tuple[Writer, ...]
    runs: tuple[WriterRun, ...]  # the writers' runs queued or started now
    max_wait: timedelta
    now: datetime
    due_since: datetime | None
    forced_at: datetime | None  # due_since + maxWriterWait

    @property
    def next_eligible(self) -> datetime:
        if self.passed:
            return self.now
        recheck = self.now + RECHECK
        return min(recheck, self.forced_at) if self.forced_at is not None else recheck

    @property
    def detail(self) -> str:
        limit = format_iso_duration(self.max_wait)
        if not self.runs:
            names = ", ".join(key_text(w.asset_key) for w in self.writers)
            return f"no run of its writer ({names}) is queued or started"
        running = ", ".join(f"{key_text(r.asset_key)} (run {r.run_id[:8]}, {r.status})" for r in self.runs)
        if self.forced_at is None:
            return f"forced after {limit}: its writer runs ({running}), and when the work became due cannot be told"
        since = self.due_since.isoformat() if self.due_since else ""
        if self.forced:
            return f"forced after {limit}: its writer runs ({running}); due since {since}"
        return (f"its writer runs: {running}; waits until it ends, forced in {format_wait(self.forced_at - self.now)} "
                f"at {self.forced_at.isoformat()} (maxWriterWait {limit}, due since {since})")

    def to_json(self) -> dict[str, object]:
        return {
            "maxWriterWait": format_iso_duration(self.max_wait),
            "held": not self.passed,
            "forced": self.forced,
            "runs": [{"runId": r.run_id, "status": r.status, "assetKey": key_text(r.asset_key)} for r in self.runs],
            "dueSince": self.due_since.isoformat() if self.due_since else None,
            "forcedAt": self.forced_at.isoformat() if self.forced_at else None,
            "secondsUntilForced": max(0.0, (self.forced_at - self.now).total_seconds()) if self.forced_at else None,
            "detail": self.detail,
        }


def writer_hold(writers: Sequence[Writer], running: Mapping[AssetKeyPath, Sequence[WriterRun]],
                since: datetime | None, max_wait: timedelta, now: datetime) -> WriterHold:
    """Whether a writer's run is queued or started now; held until it ends, or forced ``max_wait`` after
    ``since`` (when the work first became due: core/schedules/quiet.due_since). Not knowing since when, it
    never holds."""
    runs = tuple(run for writer in writers for run in running.get(writer.asset_key, ())) if running else ()
    forced_at = since + max_wait if since is not None else None
    if not runs:
        return WriterHold(True, False, writers, runs, max_wait, now, since, forced_at)
    now = as_utc(now)
    forced = forced_at is None or now >= forced_at
    return WriterHold(forced, forced, writers, runs, max_wait, now, since, forced_at)


__all__ = ["WriterRule", "Writer", "WriterRun", "WriterHold", "Materialization", "read_writer_rules", "rule_index",
           "writers_of", "writers_by_table", "known_writers", "learned_rows", "table_named", "writer_hold", "key_text",
           "DEFAULT_MAX_WRITER_WAIT", "SOURCE_RULE", "SOURCE_TABLE_NAME"]
