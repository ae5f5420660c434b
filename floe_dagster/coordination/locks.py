"""Locks with DESIGN.md's names: the scheduler lock ``floe-scheduler:<scope>`` and the table lock
``floe-table:<catalog>.<namespace>.<table>``.

Without PostgreSQL they are file locks (``flock``) beside the Dagster instance; the operating system
frees them when the holder dies, so a killed run never leaves its table locked.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Iterator

from floe_dagster.core.tables import TableName
from floe_dagster.errors import LockHeld


def table_lock_name(table: TableName) -> str:
    return f"floe-table:{table.qualified}"


def scheduler_lock_name(scope: str) -> str:
    return f"floe-scheduler:{scope}"


def lock_dir() -> Path:
    """Beside the instance: ``$DAGSTER_HOME/floe-locks`` (DAGSTER_HOME is always set by our commands)."""
    home = os.environ.get("DAGSTER_HOME") or os.path.join(os.getcwd(), ".floe", "dagster_home")
    return Path(home) / "floe-locks"


def _lock_path(name: str) -> Path:
    # A readable prefix plus a hash: any table name (quotes, slashes, unicode) gives a safe file name.
    readable = re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:80]
    digest = hashlib.sha256(name.encode()).hexdigest()[:16]
    return lock_dir() / f"{readable}.{digest}.lock"


def advisory_key(name: str) -> int:
    """A signed 64-bit key for ``pg_try_advisory_lock``, stable across processes and machines."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)


@contextmanager
def wait_for_lock(name: str, timeout_s: float, coordination_url: str | None = None) -> Iterator[None]:
    """Hold the named lock for the block, waiting up to ``timeout_s`` for it (then LockHeld)."""
    deadline = time.monotonic() + timeout_s
    with ExitStack() as stack:
        while True:
            try:
                stack.enter_context(hold_lock(name, coordination_url))
                break
            except LockHeld:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.5)
        yield


@contextmanager
def hold_lock(name: str, coordination_url: str | None = None) -> Iterator[None]:
    """Hold the named lock for the block, or raise :class:`LockHeld` at once (never wait).

    With a PostgreSQL coordination database (``coordination.url``, or by default the instance's
    PostgreSQL storage): a session advisory lock on a dedicated connection, freed by the server when
    the holder dies; otherwise a file lock beside the instance."""
    if coordination_url is None:
        from floe_dagster.coordination.database import default_coordination_url

        coordination_url = default_coordination_url()
    if coordination_url and coordination_url.startswith(("postgresql", "postgres")):
        with _hold_advisory_lock(name, coordination_url):
            yield
        return
    with _hold_file_lock(name):
        yield


@contextmanager
def _hold_advisory_lock(name: str, url: str) -> Iterator[None]:
    from sqlalchemy import create_engine, text
    from sqlalchemy.pool import NullPool

    engine = create_engine(url, poolclass=NullPool)
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


@contextmanager
def _hold_file_lock(name: str) -> Iterator[None]:
    path = _lock_path(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "a+")
    try:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = path.read_text().strip() if path.exists() else ""
            raise LockHeld(f"lock {name} is held{f' by {holder}' if holder else ''}") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}")
        handle.flush()
        yield
    finally:
        handle.close()  # closing the descriptor releases the flock


def is_lock_free(name: str, coordination_url: str | None = None) -> bool:
    try:
        with hold_lock(name, coordination_url):
            return True
    except LockHeld:
        return False
