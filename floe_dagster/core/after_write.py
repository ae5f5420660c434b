"""The after-write trigger (a schedule's ``afterWrite: {settle, dependency}``, docs/beside-pipelines.md):
an operation is due once its table's writer asset has materialized a new version since the operation's
last successful start, and no further materialization came within ``settle`` (a debounce: a storm of
writes makes one run, whose slot is the newest write's storage id, ``write:<storage id>``).

- ``dependency``: with several writers, ``ANY_UPDATED`` (default: one new write is enough) or
  ``ALL_UPDATED`` (every writer has written since).
- With a cron or an interval rule in the same schedule, either makes the work due; with neither, only
  writes do (not every tick, as a condition-only schedule would be).
- The writers' materializations are the sensor's (core/writers.py: each writer's newest one read from
  the event log with its cursor), so the rule costs nothing per table.

Pure: no Dagster, Spark or PyIceberg.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from datetime import datetime, timedelta
from typing import Any, Sequence

from floe_dagster.core.durations import format_iso_duration, format_wait, parse_iso_duration
from floe_dagster.core.localtime import as_utc
from floe_dagster.core.validation import Location, check_mapping, check_unknown, describe
from floe_dagster.core.writers import Writer, key_text

TRIGGER_AFTER_WRITE = "after_write"
ANY_UPDATED, ALL_UPDATED = "ANY_UPDATED", "ALL_UPDATED"
FIELDS = ("settle", "dependency")
DEFAULT_SETTLE = timedelta(minutes=5)
SLOT_PREFIX = "write:"


@dataclass(frozen=True)
class AfterWrite:
    settle: timedelta = DEFAULT_SETTLE
    dependency: str = ANY_UPDATED

    def to_json(self) -> dict[str, str]:
        return {"settle": format_iso_duration(self.settle), "dependency": self.dependency}

    @cached_property  # frozen: every verdict of a tick names its rule
    def text(self) -> str:
        return f"afterWrite {self.dependency}, settle {format_iso_duration(self.settle)}"


def parse_after_write(at: Location, raw: Any) -> AfterWrite | None:
    """``afterWrite``: a mapping of ``settle`` (ISO-8601, zero or longer, default PT5M) and ``dependency``."""
    if raw is None:
        return None
    here = at.child("afterWrite")
    mapping = check_mapping(here, raw, "a mapping {settle: PT5M, dependency: ANY_UPDATED | ALL_UPDATED}")
    if mapping is None:
        return None
    check_unknown(here, mapping, FIELDS)
    settle = DEFAULT_SETTLE
    if mapping.get("settle") is not None:
        value = mapping["settle"]
        try:
            if not isinstance(value, str) or value.strip().startswith("-"):
                raise ValueError(f"expected a duration of zero or longer such as PT5M, got {describe(value)}")
            settle = parse_iso_duration(value)
        except ValueError as exc:
            here.child("settle").error(str(exc))
    dependency = mapping.get("dependency", ANY_UPDATED)
    if not isinstance(dependency, str) or dependency.strip().upper() not in (ANY_UPDATED, ALL_UPDATED):
        here.child("dependency").error(f"expected {ANY_UPDATED} or {ALL_UPDATED}, got {describe(dependency)}")
        dependency = ANY_UPDATED
    return AfterWrite(settle, dependency.strip().upper())


@dataclass(frozen=True)
class AfterWriteDue:
    """The after-write rule's verdict, shaped as the schedule's (core/schedule_due.Due): due now in the slot
    of the newest write, with that write (``upstream``) for the run's tags."""

    due: bool
    detail: str
    upstream: Writer | None  # the newest writer materialization since the last success
    slot: datetime | None  # when it became due: the newest write + settle
    next_eligible: datetime | None
    last_success_start: datetime | None
    blocked: str | None = None
    trigger: str = TRIGGER_AFTER_WRITE

    @property
    def slot_key(self) -> str:
        return f"{SLOT_PREFIX}{self.upstream.last_storage_id}" if self.upstream is not None else f"{SLOT_PREFIX}none"

    def to_json(self) -> dict[str, Any]:
        return {"due": self.due, "trigger": self.trigger, "slot_key": self.slot_key, "detail": self.detail,
                "next_eligible": self.next_eligible.isoformat() if self.next_eligible else None}


def after_write_due(rule: AfterWrite, writers: Sequence[Writer], last_success_start: datetime | None,
                    now: datetime) -> AfterWriteDue:
    """Whether the writers' new materializations make the work due now (the module's rules)."""
    now = as_utc(now)
    last = as_utc(last_success_start) if last_success_start is not None else None
    rule_text = rule.text
    if not writers:
        return AfterWriteDue(False, f"no writer of the table is known ({rule_text})", None, None, None, last,
                             "not_due")
    updated = [w for w in writers if w.last_materialized_at is not None
               and (last is None or w.last_materialized_at > last)]
    since = f"since the last success at {last.isoformat()}" if last else "(never succeeded)"
    waiting = [key_text(w.asset_key) for w in writers if w not in updated]
    if not updated or (rule.dependency == ALL_UPDATED and waiting):
        who = ", ".join(waiting)
        return AfterWriteDue(False, f"no new write by {who} {since} ({rule_text})", None, None, None, last, "not_due")
    newest = max(updated, key=lambda w: (w.last_materialized_at, w.last_storage_id or 0))
    settled_at = newest.last_materialized_at + rule.settle
    write = (f"{key_text(newest.asset_key)} materialized at {newest.last_materialized_at.isoformat()} (run "
             f"{newest.last_run_id}, storage id {newest.last_storage_id})")
    if now < settled_at:
        return AfterWriteDue(False, f"settling: {write}; due in {format_wait(settled_at - now)} unless it writes "
                                    f"again ({rule_text})", newest, settled_at, settled_at, last, "not_due")
    return AfterWriteDue(True, f"{write}, {len(updated)} of {len(writers)} writer(s) new {since} ({rule_text})",
                         newest, settled_at, now, last)


def combined_due(schedule_due: Any, rule: AfterWrite, writers: Sequence[Writer], now: datetime,
                 clock_only: bool) -> Any:
    """The schedule's own verdict (cron, interval) or the after-write one, whichever makes the work due; with
    neither rule (``clock_only`` false: a condition-only schedule), the after-write one alone. A closed window or
    a day not allowed holds both."""
    if schedule_due.due and clock_only:
        return schedule_due
    if schedule_due.blocked in ("window_closed", "day_not_allowed", "schedule_disabled"):
        return schedule_due
    verdict = after_write_due(rule, writers, schedule_due.last_success_start, now)
    if verdict.due or not clock_only:
        return verdict
    nexts = [t for t in (schedule_due.next_eligible, verdict.next_eligible) if t is not None]
    return AfterWriteDue(False, f"{schedule_due.detail}; {verdict.detail}", verdict.upstream, verdict.slot,
                         min(nexts) if nexts else None, schedule_due.last_success_start, "not_due")


__all__ = ["AfterWrite", "AfterWriteDue", "parse_after_write", "after_write_due", "combined_due",
           "TRIGGER_AFTER_WRITE", "ANY_UPDATED", "ALL_UPDATED"]
