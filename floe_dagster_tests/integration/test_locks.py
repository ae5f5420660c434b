"""Table and scheduler locks across real processes: a held lock refuses a second holder at once, and
a holder killed with SIGKILL frees its lock (file locks, and PostgreSQL advisory locks)."""

import os
import signal
import subprocess
import sys
import time

import pytest

from floe_dagster.coordination.locks import hold_lock, is_lock_free, table_lock_name
from floe_dagster.core.basics.tables import TableName
from floe_dagster.errors import LockHeld
from floe_dagster_tests.conftest import postgres_url

HOLDER = """
import sys, time
from floe_dagster.coordination.locks import hold_lock
with hold_lock(sys.argv[1], sys.argv[2] or None):
    print("held", flush=True)
    time.sleep(600)
"""


def start_holder(name, url):
    process = subprocess.Popen([sys.executable, "-c", HOLDER, name, url or ""], stdout=subprocess.PIPE, text=True,
                               env=os.environ.copy())
    assert process.stdout.readline().strip() == "held"
    return process


@pytest.mark.parametrize("backend", ["file", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_lock_is_exclusive_and_freed_when_the_holder_is_killed(backend, dagster_home):
    url = postgres_url("floe_coordination") if backend == "postgres" else None
    name = table_lock_name(TableName("demo", ("sales",), f"it's; `odd` {backend}"))
    holder = start_holder(name, url)
    try:
        with pytest.raises(LockHeld, match="floe-table:demo.sales"):
            with hold_lock(name, url):
                pass
        assert not is_lock_free(name, url)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    deadline = time.time() + 10
    while not is_lock_free(name, url) and time.time() < deadline:
        time.sleep(0.2)  # PostgreSQL notices the dead connection shortly after
    with hold_lock(name, url):
        pass
