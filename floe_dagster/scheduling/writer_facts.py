"""The writers of the tables (core/schedules/writers.py) as the Dagster instance tells them, read cheaply once per tick.

- :func:`learn_writers`: the debt-score sensor's incremental read of new materializations, after its cursor
  (a storage id) and never a scan: one summary query without payloads for every asset key, then the
  payload (its ``dagster/table_name``) only of the newest event of each key floe does not know yet. What it
  learns goes into the coordination database (``floe_writers``), which every process reads.
- :func:`writer_runs`: the user's runs queued or started that target a writer asset, from the run records
  the tick reads anyway (one query); a run's targets are its asset selection, else (a whole-job run) its
  planned materializations, read once per run and remembered while the run is active.
- :func:`first_write_lookup`: a writer's first materialization after a moment (an after-write rule's
  ``maxSettle``, core/schedules/after_write.py), asked only while a write settles on a table whose last success is older
  than ``maxSettle``: one indexed query per writer and last success, its answer kept from tick to tick.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Callable, Iterable, Mapping, Sequence

from dagster import AssetKey, AssetRecordsFilter, DagsterEventType, DagsterInstance

from floe_dagster.coordination.database import Coordination
from floe_dagster.coordination.runs import is_floe_run
from floe_dagster.core.basics.tables import TableName
from floe_dagster.core.schedules.writers import (
    AssetKeyPath,
    Materialization,
    Writer,
    WriterRule,
    WriterRun,
    known_writers,
    learned_rows,
    rule_index,
)

MATERIALIZATION = DagsterEventType.ASSET_MATERIALIZATION
# Events read per tick; the rest follow on the next ticks (the cursor moves to the last one read).
LEARN_BATCH = 5000
# Without a cursor (the sensor's first tick, or a reset in Dagit): the newest events only, never the history.
FIRST_LOOKBACK = 1000
# Storage ids read again below the cursor: on PostgreSQL an event with a lower id can commit after a reader saw a
# higher one (ids come from a sequence at insert), so a writer's write landing late is still read. Those events
# only update writers floe knows (no payload is read again).
OVERLAP = 100
TABLE_NAME = "dagster/table_name"
# A run's targets never change: read once while the run is active (run id -> asset keys).
_targets: dict[str, frozenset[AssetKeyPath]] = {}
# The first materializations the last tick of each (event log, scope) asked: (writer, moment) -> its time.
_first_writes: dict[tuple[object, str], dict[tuple[AssetKeyPath, datetime | None], datetime | None]] = {}


def learn_writers(instance: DagsterInstance, coordination: Coordination, tables: Sequence[TableName],
                  rules: Sequence[WriterRule], catalog: str, cursor: int | None) -> tuple[int | None, int]:
    """Read the materializations after ``cursor`` and record the writer rows they make; returns the new
    cursor (the last storage id read) and the number of rows recorded."""
    if cursor is None:
        summaries = list(instance.get_asset_event_summary_records(MATERIALIZATION, limit=FIRST_LOOKBACK))
    else:
        summaries = list(instance.get_asset_event_summary_records(
            MATERIALIZATION, after_storage_id=max(cursor - OVERLAP, 0), ascending=True, limit=LEARN_BATCH))
    if not summaries:
        return (cursor if cursor is not None else 0), 0
    seen = cursor if cursor is not None else -1
    named = {table.qualified.lower(): table for table in tables}
    own = {(table.catalog, *table.namespace, table.name) for table in tables}
    persisted = coordination.writer_rows()
    known = known_writers(rule_index(tables, rules), persisted, named)
    newest_unknown: dict[AssetKeyPath, int] = {}
    for summary in summaries:
        key = tuple(summary.asset_key.path)
        if key not in known and key not in own and summary.storage_id > seen:
            newest_unknown[key] = max(newest_unknown.get(key, 0), summary.storage_id)
    table_names = {storage_id: _table_name(instance, key, storage_id) for key, storage_id in newest_unknown.items()}
    events = [Materialization(tuple(s.asset_key.path), s.storage_id, s.run_id,
                              datetime.fromtimestamp(s.timestamp, timezone.utc), table_names.get(s.storage_id))
              for s in summaries if tuple(s.asset_key.path) in known or s.storage_id in table_names]
    stored = {(table, w.asset_key): w.last_storage_id or 0 for table, rows in persisted.items() for w in rows}
    rows = {pair: row for pair, row in learned_rows(events, known, named, catalog).items()
            if (row.last_storage_id or 0) > stored.get(pair, -1)}  # the overlap's events are stored already
    if rows:
        coordination.record_writers(rows)
    return max(seen, *(s.storage_id for s in summaries)), len(rows)


def _table_name(instance: DagsterInstance, key: AssetKeyPath, storage_id: int) -> str | None:
    """The ``dagster/table_name`` of one materialization (its payload, read by its storage id)."""
    records = instance.fetch_materializations(
        AssetRecordsFilter(asset_key=AssetKey(list(key)), storage_ids=[storage_id]), limit=1).records
    materialization = records[0].asset_materialization if records else None
    value = materialization.metadata.get(TABLE_NAME) if materialization is not None else None
    value = getattr(value, "value", value)
    return value if isinstance(value, str) else None


def first_write_lookup(instance: DagsterInstance, scope: str = "default"
                       ) -> Callable[[AssetKeyPath, datetime | None], datetime | None]:
    """The time of a writer's first materialization after a moment (None: its first ever), read from the event
    log (ascending, one record); None when it has none. The answer for a moment never changes, so what the
    previous tick of the same scope asked is kept (a sensor's instance is made anew each tick: kept by its event
    log's identity): the event log is read once per writer and last success, not on every tick while a write
    settles; a moment no longer asked (its table succeeded since) is dropped."""
    previous: dict[tuple[AssetKeyPath, datetime | None], datetime | None] = {}
    asked: dict[tuple[AssetKeyPath, datetime | None], datetime | None] = {}
    try:
        log = instance.get_ref().event_storage_data
    except Exception:  # an instance without a ref (an ephemeral one): nothing kept
        log = None
    if log is not None:
        previous = _first_writes.pop((log, scope), {})
        _first_writes[(log, scope)] = asked

    def first_write_after(key: AssetKeyPath, after: datetime | None) -> datetime | None:
        if (key, after) not in asked:
            asked[(key, after)] = previous[(key, after)] if (key, after) in previous else _first_write(
                instance, key, after)
        return asked[(key, after)]

    return first_write_after


def _first_write(instance: DagsterInstance, key: AssetKeyPath, after: datetime | None) -> datetime | None:
    records = instance.fetch_materializations(AssetRecordsFilter(
        asset_key=AssetKey(list(key)), after_timestamp=after.timestamp() if after else None),
        limit=1, ascending=True).records
    return datetime.fromtimestamp(records[0].timestamp, timezone.utc) if records else None


def writer_runs(instance: DagsterInstance, records: Iterable, writers: Mapping[str, Sequence[Writer]]
                ) -> dict[AssetKeyPath, tuple[WriterRun, ...]]:
    """The user's active runs (of ``records``: the instance's queued and started runs) that target a writer
    asset, by the asset key; floe's own runs are left out. No writer known: nothing is read."""
    keys = {writer.asset_key for rows in writers.values() for writer in rows}
    if not keys:
        return {}
    found: dict[AssetKeyPath, list[WriterRun]] = {}
    active = set()
    for record in records:
        run = record.dagster_run
        if is_floe_run(run.job_name, run.tags):
            continue
        active.add(run.run_id)
        for key in _run_targets(instance, run) & keys:
            found.setdefault(key, []).append(WriterRun(run.run_id, run.status.value, key))
    for run_id in [run_id for run_id in _targets if run_id not in active]:
        del _targets[run_id]
    return {key: tuple(runs) for key, runs in found.items()}


def _run_targets(instance: DagsterInstance, run) -> frozenset[AssetKeyPath]:
    if run.run_id not in _targets:
        selection = run.asset_selection
        if selection is None:  # a whole job: the materializations Dagster planned for it when it was created
            selection = instance.get_asset_keys_for_run(run.run_id,
                                                        of_type=DagsterEventType.ASSET_MATERIALIZATION_PLANNED)
        _targets[run.run_id] = frozenset(tuple(key.path) for key in selection)
    return _targets[run.run_id]
