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
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from floe_dagster.core.tables import TableName


class LockHeld(RuntimeError):
    """Someone else holds the lock: not a failure of the work that wanted it."""


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


@contextmanager
def hold_lock(name: str) -> Iterator[None]:
    """Hold the named lock for the block, or raise :class:`LockHeld` at once (never wait)."""
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


def is_lock_free(name: str) -> bool:
    try:
        with hold_lock(name):
            return True
    except LockHeld:
        return False
