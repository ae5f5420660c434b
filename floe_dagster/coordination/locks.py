"""Locks with the names docs/automation.md gives ("Locks"): the scheduler lock ``floe-scheduler:<scope>``
and the table lock ``floe-table:<catalog>.<namespace>.<table>``.

With a PostgreSQL coordination database they are session advisory locks; without, file locks
(``flock``) beside the Dagster instance. Either way the holder's death frees them, so a killed run
never leaves its table locked. The backend is chosen once, when the coordination database is
configured (:func:`lock_backend_for`: the coordination resource's ``lock_backend``), and each
coordination database holds its locks (``Coordination.locks``).
"""

from __future__ import annotations

import hashlib
import re
from contextlib import contextmanager
from pathlib import Path
from typing import ContextManager, Iterator

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from floe_dagster.core.basics.tables import TableName
from floe_dagster.errors import LockHeld
from floe_dagster.file_locks import hold_file_lock, wait_for_lock
from floe_dagster.instance import dagster_home, default_coordination_url


def table_lock_name(table: TableName) -> str:
    return f"floe-table:{table.qualified}"


def scheduler_lock_name(scope: str) -> str:
    return f"floe-scheduler:{scope}"


class Locks:
    """Named locks of one coordination database: ``hold`` takes a lock at once or raises
    :class:`LockHeld`; ``wait_for`` waits up to a timeout; ``is_free`` probes."""

    def hold(self, name: str) -> ContextManager[None]:
        raise NotImplementedError

    def wait_for(self, name: str, timeout_s: float) -> ContextManager[None]:
        """Hold the named lock for the block, waiting up to ``timeout_s`` for it (then LockHeld)."""
        return wait_for_lock(lambda: self.hold(name), timeout_s, poll_s=0.5)

    def is_free(self, name: str) -> bool:
        try:
            with self.hold(name):
                return True
        except LockHeld:
            return False


class AdvisoryLocks(Locks):
    """PostgreSQL session advisory locks on a dedicated connection each, freed by the server when the
    holder dies; shared by every deployment on the same coordination database."""

    def __init__(self, url: str):
        self.url = url

    @contextmanager
    def hold(self, name: str) -> Iterator[None]:
        engine = create_engine(self.url, poolclass=NullPool)
        connection = engine.connect()
        try:
            key = advisory_key(name)
            if not connection.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": key}).scalar():
                raise LockHeld(f"lock {name} is held by another process")
            connection.commit()
            try:
                yield
            finally:
                connection.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": key})
                connection.commit()
        finally:
            connection.close()
            engine.dispose()


class FileLocks(Locks):
    """``flock`` files in a folder beside the instance; the operating system frees them when the
    holder dies."""

    def __init__(self, folder: Path):
        self.folder = folder

    def path(self, name: str) -> Path:
        # A readable prefix plus a hash: any table name (quotes, slashes, unicode) gives a safe file name.
        readable = re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:80]
        digest = hashlib.sha256(name.encode()).hexdigest()[:16]
        return self.folder / f"{readable}.{digest}.lock"

    def hold(self, name: str) -> ContextManager[None]:
        return hold_file_lock(self.path(name), name)


def file_locks() -> FileLocks:
    """File locks beside the instance: ``$DAGSTER_HOME/floe-locks``."""
    return FileLocks(dagster_home() / "floe-locks")


ADVISORY, FILE = "advisory", "file"
LOCK_BACKENDS = (ADVISORY, FILE)


def lock_backend_for(coordination_url: str) -> str:
    """The lock backend that goes with a coordination database: advisory locks in PostgreSQL, else
    file locks beside the instance (a SQLite database cannot be shared across machines anyway)."""
    return ADVISORY if make_url(coordination_url).get_backend_name() == "postgresql" else FILE


def locks_of(backend: str, coordination_url: str) -> Locks:
    """The locks of one backend: advisory locks in the coordination database, or file locks."""
    if backend not in LOCK_BACKENDS:
        raise ValueError(f"lock backend: expected one of {', '.join(LOCK_BACKENDS)}, got {backend!r}")
    return AdvisoryLocks(coordination_url) if backend == ADVISORY else file_locks()


def locks_for(coordination_url: str | None) -> Locks:
    """The locks that go with a coordination database (default: the instance's)."""
    url = coordination_url or default_coordination_url()
    return locks_of(lock_backend_for(url), url)


def advisory_key(name: str) -> int:
    """A signed 64-bit key for ``pg_try_advisory_lock``, stable across processes and machines."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)


def hold_lock(name: str, coordination_url: str | None = None) -> ContextManager[None]:
    """Hold the named lock of this coordination database (default: the instance's) or raise LockHeld."""
    return locks_for(coordination_url).hold(name)


def is_lock_free(name: str, coordination_url: str | None = None) -> bool:
    return locks_for(coordination_url).is_free(name)
