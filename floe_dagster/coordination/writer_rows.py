"""The writer rows of the coordination database (``floe_writers``; core/schedules/writers.py): read them all, and
record what the sensor learned, for coordination/database.py's :class:`Coordination` and the code
location's load (``learned_writers``)."""

from __future__ import annotations

import json
from typing import Any, Iterable, Mapping

from sqlalchemy import Connection, Engine, Table, and_, select, update
from sqlalchemy.exc import IntegrityError

from floe_dagster.core.basics.localtime import naive_as_utc
from floe_dagster.core.schedules.writers import SOURCE_TABLE_NAME, Writer


def writer_rows(engine: Engine, writers: Table) -> dict[str, tuple[Writer, ...]]:
    """Every persisted writer, by table (one query)."""
    with engine.connect() as connection:
        return writer_rows_of(connection, writers)


def writer_rows_of(connection: Connection, writers: Table) -> dict[str, tuple[Writer, ...]]:
    """Every persisted writer, by table, read on a connection already open (one query)."""
    return writers_by_table(connection.execute(select(writers)).mappings())


def writers_by_table(rows: Iterable[Mapping[str, Any]]) -> dict[str, tuple[Writer, ...]]:
    """Writer rows (mappings of the table's columns), by table, each table's by asset key (the same order
    whatever order the database returned them in, and whatever its collation)."""
    found: dict[str, list[Writer]] = {}
    for row in sorted(rows, key=lambda row: (row["table_name"], row["asset_key"])):
        at = row["last_materialized_at"]
        found.setdefault(row["table_name"], []).append(Writer(
            tuple(json.loads(row["asset_key"])), row["source"], row["last_storage_id"], row["last_run_id"],
            naive_as_utc(at) if at is not None else None))
    return {table: tuple(found_rows) for table, found_rows in found.items()}


def record_writer_rows(engine: Engine, writers: Table, rows: dict[tuple[str, tuple[str, ...]], Writer]) -> None:
    """Insert or update writer rows; a row never goes back to an older materialization, and a learned source
    (table_name) is kept once seen."""
    with engine.begin() as connection:
        for (table_name, key), writer in rows.items():
            where = and_(writers.c.table_name == table_name, writers.c.asset_key == json.dumps(list(key)))
            old = connection.execute(select(writers.c.source, writers.c.last_storage_id).where(where)).first()
            values = dict(last_storage_id=writer.last_storage_id, last_run_id=writer.last_run_id,
                          last_materialized_at=naive_as_utc(writer.last_materialized_at)
                          if writer.last_materialized_at else None)
            if old is None:
                try:
                    with connection.begin_nested():
                        connection.execute(writers.insert().values(
                            table_name=table_name, asset_key=json.dumps(list(key)), source=writer.source, **values))
                except IntegrityError:  # another shard's sensor recorded it first: its row stands
                    pass
            elif (old.last_storage_id or 0) <= (writer.last_storage_id or 0):
                source = SOURCE_TABLE_NAME if SOURCE_TABLE_NAME in (old.source, writer.source) else writer.source
                connection.execute(update(writers).where(where).values(source=source, **values))


__all__ = ["record_writer_rows", "writer_rows", "writers_by_table"]
