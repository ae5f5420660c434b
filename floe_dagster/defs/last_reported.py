"""What was last reported per table, kept in the instance's key-value store (the daemon cursors'
table), so the answer is the same whichever process (sensor, schedule, CLI) collected the health first:
the fingerprint of the events (defs/health_events.py) and the newest successful maintenance run they
were reported after.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Iterable, Mapping

from dagster import DagsterInstance

from floe_dagster.core.basics.tables import TableName

KV_PREFIX = "floe/health-reported/"  # + qualified name → fingerprint of what was last reported
KV_CHUNK = 500  # keys per read or write


@dataclass(frozen=True)
class Reported:
    """What was last reported for a table."""

    fingerprint: str | None = None
    run: datetime | None = None  # the newest successful maintenance run it was reported after

    def dump(self) -> str:
        return json.dumps({"fp": self.fingerprint, "run": self.run.isoformat() if self.run else None},
                          separators=(",", ":"))

    @classmethod
    def load(cls, text: str | None) -> "Reported":
        try:
            data = json.loads(text) if text else {}
            run = datetime.fromisoformat(data["run"]) if data.get("run") else None
            return cls(data.get("fp"), run)
        except (ValueError, TypeError, KeyError, AttributeError):
            return cls()


def _kv_key(table: TableName | str) -> str:
    return KV_PREFIX + (table if isinstance(table, str) else table.qualified)


def read_reported(instance: DagsterInstance, tables: Iterable[TableName]) -> dict[str, Reported]:
    keys = [_kv_key(t) for t in tables]
    found: dict[str, str] = {}
    for start in range(0, len(keys), KV_CHUNK):
        found.update(instance.run_storage.get_cursor_values(set(keys[start:start + KV_CHUNK])))
    return {key[len(KV_PREFIX):]: Reported.load(value) for key, value in found.items()}


def write_reported(instance: DagsterInstance, by_qualified: Mapping[str, Reported]) -> None:
    items = [(_kv_key(q), state.dump()) for q, state in by_qualified.items()]
    for start in range(0, len(items), KV_CHUNK):
        instance.run_storage.set_cursor_values(dict(items[start:start + KV_CHUNK]))


def remember_fingerprints(instance: DagsterInstance, fingerprints: Mapping[str, str]) -> None:
    """After a run evaluated the checks: keep each table's last run marker, update the fingerprint."""
    if not fingerprints:
        return
    before = read_reported(instance, list(fingerprints))
    write_reported(instance, {q: Reported(fp, before.get(q, Reported()).run) for q, fp in fingerprints.items()})


def forget_reported(instance: DagsterInstance, tables: Iterable[TableName]) -> None:
    """Make the next report record these tables again (e.g. after wiping their asset history)."""
    write_reported(instance, {t.qualified: Reported() for t in tables})
