"""The quarantine roots each table's orphan cleanup has used (``floe_quarantine_roots`` in the
coordination database): recorded before a run moves its first file into a root, so that after
``maintenance.quarantine-location`` changes (or the table moves) the old folders are still purged
when their promise is over, restorable, and listed by ``floe-dagster restore`` when no policy will
ever purge them. The table is made on first use, beside the others (coordination/schema.py)."""

from __future__ import annotations

from datetime import datetime, timezone

from sqlalchemy import Column, DateTime, MetaData, String, Table, and_, select, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError, IntegrityError

_metadata = MetaData()
quarantine_roots = Table(
    "floe_quarantine_roots",
    _metadata,
    Column("table_name", String(1024), primary_key=True),
    Column("root", String(2048), primary_key=True),  # the root's URI (core/storage/locations.StorageLocation.uri)
    Column("first_used_at", DateTime(timezone=True), nullable=False),
    Column("last_used_at", DateTime(timezone=True), nullable=False),  # when last recorded: a run records a root
    # only when the table's remembered roots lack it (iceberg/quarantine_store.py), so mostly its first use
)


class QuarantineRoots:
    """The remembered roots of every table, in one coordination database (its SQLAlchemy engine)."""

    def __init__(self, engine: Engine):
        self._engine, self._made = engine, False

    @property
    def engine(self) -> Engine:
        """The database, its table made on first use (a run that quarantines nothing never asks)."""
        if not self._made:
            try:
                _metadata.create_all(self._engine)
            except DBAPIError:  # another process made it at the same moment
                _metadata.create_all(self._engine)
            self._made = True
        return self._engine

    def remember(self, table_name: str, root: str, now: datetime | None = None) -> None:
        at = now or datetime.now(timezone.utc)
        where = and_(quarantine_roots.c.table_name == table_name, quarantine_roots.c.root == root)
        with self.engine.begin() as connection:
            if connection.execute(update(quarantine_roots).where(where).values(last_used_at=at)).rowcount:
                return
            try:
                with connection.begin_nested():
                    connection.execute(quarantine_roots.insert().values(
                        table_name=table_name, root=root, first_used_at=at, last_used_at=at))
            except IntegrityError:  # recorded meanwhile by another run: its row stands
                pass

    def roots_of(self, table_name: str) -> list[str]:
        with self.engine.connect() as connection:
            rows = connection.execute(select(quarantine_roots.c.root).where(
                quarantine_roots.c.table_name == table_name).order_by(quarantine_roots.c.first_used_at))
            return [row.root for row in rows]

    def all(self) -> dict[str, list[str]]:
        """Every table's remembered roots, by table name."""
        found: dict[str, list[str]] = {}
        with self.engine.connect() as connection:
            for row in connection.execute(select(quarantine_roots).order_by(quarantine_roots.c.table_name)):
                found.setdefault(row.table_name, []).append(row.root)
        return found


__all__ = ["QuarantineRoots", "quarantine_roots"]
