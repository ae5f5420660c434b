"""Locks on files (``flock``): taken at once or :class:`~floe_dagster.errors.LockHeld`, or waited for up
to a timeout. The operating system frees a lock when its holder dies, so a killed process never leaves
one behind. The coordination database's file locks (coordination/locks.py) and the writers of the HTTP
API's policy directory (policy_store.py) both take theirs here.
"""

from __future__ import annotations

import fcntl
import os
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Callable, ContextManager, Iterator

from floe_dagster.errors import LockHeld


@contextmanager
def hold_file_lock(path: Path, name: str) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created with its folder) for the block, or raise
    LockHeld naming ``name`` and the holder's pid, which the holder writes into the file."""
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


@contextmanager
def wait_for_lock(hold: Callable[[], ContextManager[None]], timeout_s: float, poll_s: float) -> Iterator[None]:
    """Hold the lock ``hold()`` takes (at once or LockHeld) for the block, trying again every
    ``poll_s`` seconds for up to ``timeout_s`` (then the last LockHeld)."""
    deadline = time.monotonic() + timeout_s
    with ExitStack() as stack:
        while True:
            try:
                stack.enter_context(hold())
                break
            except LockHeld:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(poll_s)
        yield
