"""The API keys created over HTTP (``/api/v1/auth/keys``), in the coordination database so that every API
server on the same lakehouse shares them: ``floe_api_keys``, one row a key with its SHA-256 (never the key),
name, role, enabled flag, expiry and last use. The keys of floe.yaml's keys file and environment variable
stay there (api/auth.py reads both kinds).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Boolean, Column, DateTime, String, Table, func, select, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError, IntegrityError

from floe_dagster.coordination.database import metadata
from floe_dagster.core.localtime import naive_as_utc
from floe_dagster.errors import KeysError

api_keys = Table(
    "floe_api_keys",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("name", String(255), nullable=False, unique=True),
    Column("role", String(16), nullable=False),
    Column("key_hash", String(64), nullable=False, unique=True),  # SHA-256, lower-case hex
    Column("enabled", Boolean, nullable=False, default=True),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("expires_at", DateTime(timezone=True)),
    Column("last_used_at", DateTime(timezone=True)),
    Column("created_by", String(255)),
)


@dataclass(frozen=True)
class StoredKey:
    id: str
    name: str
    role: str
    key_hash: str
    enabled: bool
    created_at: datetime
    expires_at: datetime | None
    last_used_at: datetime | None
    created_by: str | None

    def __repr__(self) -> str:  # never print the hash in tracebacks
        return f"StoredKey(id={self.id!r}, name={self.name!r}, role={self.role})"

    def usable(self, now: datetime) -> bool:
        return self.enabled and (self.expires_at is None or now < self.expires_at)


def _stored(row) -> StoredKey:
    values = {k: (naive_as_utc(v) if isinstance(v, datetime) else v) for k, v in row.items()}
    return StoredKey(**values)


class ApiKeyTable:
    """The ``floe_api_keys`` table (created on first use, beside the ledger)."""

    def __init__(self, engine: Engine):
        self.engine = engine
        try:
            api_keys.create(engine, checkfirst=True)
        except DBAPIError:  # another process created it first
            pass

    def count(self) -> int:
        with self.engine.connect() as connection:
            return int(connection.execute(select(func.count()).select_from(api_keys)).scalar_one())

    def all(self) -> list[StoredKey]:
        with self.engine.connect() as connection:
            rows = connection.execute(select(api_keys).order_by(api_keys.c.created_at, api_keys.c.name)).mappings()
            return [_stored(row) for row in rows]

    def by_id(self, key_id: str) -> StoredKey | None:
        return self._one(api_keys.c.id == key_id)

    def by_name(self, name: str) -> StoredKey | None:
        return self._one(api_keys.c.name == name)

    def by_hash(self, key_hash: str) -> StoredKey | None:
        return self._one(api_keys.c.key_hash == key_hash)

    def _one(self, where) -> StoredKey | None:
        with self.engine.connect() as connection:
            row = connection.execute(select(api_keys).where(where)).mappings().first()
        return _stored(row) if row else None

    def insert(self, key: StoredKey) -> None:
        try:
            with self.engine.begin() as connection:
                connection.execute(api_keys.insert().values(
                    id=key.id, name=key.name, role=key.role, key_hash=key.key_hash, enabled=key.enabled,
                    created_at=naive_as_utc(key.created_at),
                    expires_at=naive_as_utc(key.expires_at) if key.expires_at else None,
                    last_used_at=None, created_by=key.created_by))
        except IntegrityError:  # a name taken meanwhile (the hash of a fresh random key never repeats)
            raise KeysError(f"API key with name '{key.name}' already exists") from None

    def change(self, key_id: str, **values) -> None:
        try:
            with self.engine.begin() as connection:
                connection.execute(update(api_keys).where(api_keys.c.id == key_id).values(**values))
        except IntegrityError:
            raise KeysError(f"API key with name '{values.get('name')}' already exists") from None

    def touch(self, key_id: str, now: datetime) -> None:
        self.change(key_id, last_used_at=naive_as_utc(now))

    def delete(self, key_id: str) -> bool:
        with self.engine.begin() as connection:
            return connection.execute(api_keys.delete().where(api_keys.c.id == key_id)).rowcount > 0
