"""What the debt-score sensor's last tick decided, kept for ``GET /metrics``: a compact summary per
scope in the instance's key-value store (the daemon cursors' table), so a scrape reads it instead
of planning again.

One record per scope (``floe/tick-stats/scope/<scope>``) and the list of scopes that wrote one
(``floe/tick-stats/scopes``). A record holds the last tick's decisions by outcome and reason code,
the tables in backoff or throttled, and running totals (ticks, duplicates the ledger refused, the
trigger-condition evaluations Floe counts), which each tick adds to the previous record's.

:func:`summarize` is pure; :func:`record_tick` (the sensor, after each tick) and
:func:`read_tick_stats` (the metrics collector) are the two reads and writes.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from datetime import datetime
from typing import Any, Mapping

from dagster import DagsterInstance

from floe_dagster.scheduling.tick import TickResult

log = logging.getLogger(__name__)

KV_PREFIX = "floe/tick-stats/scope/"  # + scope name → the record (JSON)
KV_SCOPES = "floe/tick-stats/scopes"  # the scopes that recorded a tick (JSON list)
VERSION = 1
# Running totals: Floe's trigger-evaluation counters and the ledger's refusals.
TOTALS = ("ticks", "duplicates_refused", "evaluations", "conditions_met", "conditions_not_met",
          "blocked_by_interval", "forced_by_critical")
BACKOFF, THROTTLE = "failure_backoff", "zero_change_throttle"


def code_of(reason: str) -> str:
    """A reason's code: ``failure_backoff: 3 consecutive failure(s)…`` → ``failure_backoff``."""
    return reason.split(":", 1)[0].strip()


def summarize(result: TickResult, now: datetime, previous: Mapping[str, Any] | None = None) -> dict[str, object]:
    """The record after this tick: its decisions (or, for a tick that planned nothing, the previous
    record's, with the skip noted) and the previous totals plus this tick's. One pass over the plan."""
    previous = previous if previous and previous.get("version") == VERSION else {}
    old_totals = previous.get("totals") or {}
    totals = {name: int(old_totals.get(name, 0)) for name in TOTALS}
    by_operation = {op: Counter(counts) for op, counts in (old_totals.get("by_operation") or {}).items()}
    totals["ticks"] += 1
    skipped_tick = code_of(result.skipped_tick) if result.skipped_tick else None
    record: dict[str, object] = {"version": VERSION, "at": now.isoformat(), "seconds": round(result.seconds, 6),
                              "skipped_tick": skipped_tick}
    if result.plan is None:  # lock held, catalog down, scheduler off, circuit open: the last plan's decisions stay
        for name in ("planned_at", "admitted", "shadow", "skipped", "refused", "runs_requested", "tables_in_backoff",
                     "tables_throttled"):
            if name in previous:
                record[name] = previous[name]
    else:
        accepted = {d.item_key for d in result.admitted}
        recorded_shadow = {d.item_key for d in result.shadow}
        admitted: Counter[str] = Counter()
        shadow: Counter[str] = Counter()  # shadow decisions recorded this tick, by operation
        skipped: Counter[str] = Counter()
        refused = 0
        backoff: set[str] = set()
        throttled: set[str] = set()
        for decision in result.plan.decisions:
            verdict = decision.condition_result
            if verdict is not None and verdict.evaluated:  # Floe's recordTriggerEvaluation
                totals["evaluations"] += 1
                totals["conditions_met" if verdict.passed else "conditions_not_met"] += 1
                totals["blocked_by_interval"] += verdict.blocked_code == "min_interval"
                totals["forced_by_critical"] += verdict.forced
                by_operation.setdefault(decision.operation.value.lower(), Counter())[
                    "triggered" if verdict.passed else "skipped"] += 1
            if decision.decision != "run":
                code = decision.code or "unknown"  # the reason told only when read
                skipped[code] += 1
                if code == BACKOFF:
                    backoff.add(decision.table.qualified)
                elif code == THROTTLE:
                    throttled.add(decision.table.qualified)
            elif decision.shadow:  # recorded now, or already (the slot's row exists): never a run
                if decision.item_key in recorded_shadow:
                    shadow[decision.operation.value.lower()] += 1
            elif decision.item_key in accepted:
                admitted[decision.trigger or "unknown"] += 1
            else:  # offered to the ledger, which already had it: another launcher admitted it first
                refused += 1
        totals["duplicates_refused"] += refused
        record.update(planned_at=now.isoformat(), admitted=dict(admitted), shadow=dict(shadow),
                      skipped=dict(skipped), refused=refused,
                      runs_requested=len(result.batches), tables_in_backoff=len(backoff),
                      tables_throttled=len(throttled))
    totals["by_operation"] = {op: dict(counts) for op, counts in sorted(by_operation.items())}
    record["totals"] = totals
    return record


def record_tick(instance: DagsterInstance, scope: str, result: TickResult, now: datetime) -> None:
    """Add this tick to the scope's record (one read, one write). Never fails the tick."""
    key = KV_PREFIX + scope
    try:
        stored = instance.run_storage.get_cursor_values({key, KV_SCOPES})
        previous = _load(stored.get(key), key)
        scopes = _load(stored.get(KV_SCOPES), KV_SCOPES)
        scopes = sorted(set(scopes) if isinstance(scopes, list) else set())
        values = {key: json.dumps(summarize(result, now, previous if isinstance(previous, dict) else None),
                                  separators=(",", ":"))}
        if scope not in scopes:
            values[KV_SCOPES] = json.dumps(sorted({*scopes, scope}))
        instance.run_storage.set_cursor_values(values)
    except Exception:  # the instance's storage is down: the next tick records instead
        log.warning("the tick's stats could not be recorded", exc_info=True)


def read_tick_stats(instance: DagsterInstance) -> dict[str, dict[str, object]]:
    """Every scope's record, by scope (two reads of the key-value store)."""
    scopes = _load(instance.run_storage.get_cursor_values({KV_SCOPES}).get(KV_SCOPES), KV_SCOPES)
    if not isinstance(scopes, list) or not scopes:
        return {}
    stored = instance.run_storage.get_cursor_values({KV_PREFIX + str(scope) for scope in scopes})
    found = {}
    for scope in scopes:
        record = _load(stored.get(KV_PREFIX + str(scope)), KV_PREFIX + str(scope))
        if isinstance(record, dict) and record.get("version") == VERSION:
            found[str(scope)] = record
    return found


def _load(text: str | None, key: str) -> object:
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        log.warning("%s: not JSON, ignored", key)
        return None
