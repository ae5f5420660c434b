"""The API keys created over HTTP (``/api/v1/auth/keys``), in the coordination database so that every API
server on the same lakehouse shares them: ``floe_api_keys``, one row a key with its SHA-256 (never the key),
name, role, enabled flag, expiry and last use. The keys of floe.yaml's keys file and environment variable
stay there (api/auth.py reads both kinds).

``floe_api_auth`` remembers that keys were ever created here (its ``keys-required`` row, written with the
first key and never removed), so that revoking every key does not open the API again: a server that
has had keys keeps refusing callers without one.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

from sqlalchemy import Boolean, Column, DateTime, String, Table, func, select, text, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError, IntegrityError

from floe_dagster.coordination.schema import metadata
from floe_dagster.core.basics.localtime import naive_as_utc
from floe_dagster.errors import KeysError, LastAdminKey

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


api_auth = Table(
    "floe_api_auth",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("since", DateTime(timezone=True), nullable=False),
)
KEYS_REQUIRED = "keys-required"
ADMIN_ROLE = "ADMIN"


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
        for table in (api_keys, api_auth):
            try:
                table.create(engine, checkfirst=True)
            except DBAPIError:  # another process created it first
                pass
        self._had_keys = False
        if self.count() > 0:  # keys created before floe_api_auth existed
            with self.engine.begin() as connection:
                self._mark_keys_required(connection, datetime.now(timezone.utc))

    def ever_had_keys(self) -> bool:
        """Whether a key was ever created here (revoked since or not); once true, true for good."""
        if not self._had_keys:
            with self.engine.connect() as connection:
                found = connection.execute(select(api_auth.c.name).where(api_auth.c.name == KEYS_REQUIRED)).first()
            self._had_keys = found is not None
        return self._had_keys

    @staticmethod
    def _mark_keys_required(connection, now: datetime) -> None:
        if connection.execute(select(api_auth.c.name).where(api_auth.c.name == KEYS_REQUIRED)).first() is None:
            try:
                with connection.begin_nested():
                    connection.execute(api_auth.insert().values(name=KEYS_REQUIRED, since=naive_as_utc(now)))
            except IntegrityError:  # another server marked it first
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
                self._mark_keys_required(connection, key.created_at)
        except IntegrityError:  # a name taken meanwhile (the hash of a fresh random key never repeats)
            raise KeysError(f"API key with name '{key.name}' already exists") from None
        self._had_keys = True

    def usable_admins(self, now: datetime, without: str | None = None, connection=None) -> int:
        """The ADMIN keys that work at ``now`` (enabled, not expired), but for the key ``without``."""
        query = select(api_keys.c.id, api_keys.c.expires_at).where(
            api_keys.c.role == ADMIN_ROLE, api_keys.c.enabled.is_(True))
        if without is not None:
            query = query.where(api_keys.c.id != without)
        if connection is None:
            with self.engine.connect() as own:
                rows = own.execute(query).all()
        else:
            rows = connection.execute(query).all()
        return sum(1 for _, expires in rows if expires is None or now < naive_as_utc(expires))

    def change(self, key_id: str, **values) -> None:
        try:
            with self.engine.begin() as connection:
                connection.execute(update(api_keys).where(api_keys.c.id == key_id).values(**values))
        except IntegrityError:
            raise KeysError(f"API key with name '{values.get('name')}' already exists") from None

    def change_keeping_an_admin(self, key_id: str, now: datetime, elsewhere: int, **values) -> None:
        """``change``, refused (LastAdminKey, nothing changed) when afterwards no ADMIN key works at ``now``
        here and there are no ``elsewhere`` (floe.yaml's ADMIN keys)."""
        try:
            self._keeping_an_admin(update(api_keys).where(api_keys.c.id == key_id).values(**values), now, elsewhere)
        except IntegrityError:
            raise KeysError(f"API key with name '{values.get('name')}' already exists") from None

    def delete_keeping_an_admin(self, key_id: str, now: datetime, elsewhere: int) -> bool:
        return self._keeping_an_admin(api_keys.delete().where(api_keys.c.id == key_id), now, elsewhere) > 0

    def _keeping_an_admin(self, statement, now: datetime, elsewhere: int) -> int:
        """Run the write and count the working ADMIN keys after it in one transaction. On PostgreSQL the
        table is locked first: two ADMINs demoting each other at once must not both see the other
        still there (SQLite writes one transaction at a time anyway)."""
        with self.engine.begin() as connection:
            if connection.dialect.name == "postgresql":
                connection.execute(text(f"LOCK TABLE {api_keys.name} IN SHARE ROW EXCLUSIVE MODE"))
            changed = connection.execute(statement).rowcount
            if elsewhere == 0 and self.usable_admins(now, connection=connection) == 0:
                raise LastAdminKey("the change would leave no enabled ADMIN key: create or enable another "
                                   "ADMIN key first (or add one to floe.yaml's api keys file)")
            return changed

    def touch(self, key_id: str, now: datetime) -> None:
        self.change(key_id, last_used_at=naive_as_utc(now))

    def delete(self, key_id: str) -> bool:
        with self.engine.begin() as connection:
            return connection.execute(api_keys.delete().where(api_keys.c.id == key_id)).rowcount > 0
