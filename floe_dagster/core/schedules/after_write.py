"""The after-write trigger (a schedule's ``afterWrite: {settle, dependency}``, docs/beside-pipelines.md):
an operation is due once its table's writer asset has materialized a new version since the operation's
last successful start, and no further materialization came within ``settle`` (a debounce: a storm of
writes makes one run, whose slot is the newest write's storage id, ``write:<storage id>``), or once the
oldest write since that start is older than ``maxSettle`` (default one hour, at least ``settle``): a
writer that never pauses for ``settle`` cannot starve its table.

- ``dependency``: with several writers, ``ANY_UPDATED`` (default: one new write is enough) or
  ``ALL_UPDATED`` (every writer has written since).
- With a cron or an interval rule in the same schedule, either makes the work due; with neither, only
  writes do (not every tick, as a condition-only schedule would be).
- The writers' materializations are the sensor's (core/schedules/writers.py: each writer's newest one read from
  the event log with its cursor), so the settle rule costs nothing per table. The oldest write since the
  last success comes from ``first_write_after`` (the event log, scheduling/writer_facts.py), asked only
  while a write is settling and the last success is older than ``maxSettle``; without it (None, or it does
  not know) nothing is forced, as before ``maxSettle``.

Pure: no Dagster, Spark or PyIceberg.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from floe_dagster.core.basics.durations import format_iso_duration, format_wait, parse_iso_duration
from floe_dagster.core.basics.localtime import as_utc
from floe_dagster.core.basics.validation import Location, check_mapping, check_unknown, describe
from floe_dagster.core.schedules.writers import AssetKeyPath, Writer, key_text

if TYPE_CHECKING:
    from floe_dagster.core.schedules.schedule_due import Due

TRIGGER_AFTER_WRITE = "after_write"
ANY_UPDATED, ALL_UPDATED = "ANY_UPDATED", "ALL_UPDATED"
FIELDS = ("settle", "maxSettle", "dependency")
DEFAULT_SETTLE = timedelta(minutes=5)
DEFAULT_MAX_SETTLE = timedelta(hours=1)
SLOT_PREFIX = "write:"
# The time of a writer's first materialization after a moment (None: its first ever), or None when unknown.
FirstWriteAfter = Callable[[AssetKeyPath, "datetime | None"], "datetime | None"]


@dataclass(frozen=True)
class AfterWrite:
    settle: timedelta = DEFAULT_SETTLE
    dependency: str = ANY_UPDATED
    max_settle: timedelta = DEFAULT_MAX_SETTLE

    def to_json(self) -> dict[str, str]:
        return {"settle": format_iso_duration(self.settle), "maxSettle": format_iso_duration(self.max_settle),
                "dependency": self.dependency}

    @cached_property  # frozen: every verdict of a tick names its rule
    def text(self) -> str:
        return (f"afterWrite {self.dependency}, settle {format_iso_duration(self.settle)}, maxSettle "
                f"{format_iso_duration(self.max_settle)}")


def _duration(here: Location, mapping: Mapping[str, object], key: str, default: timedelta, example: str) -> timedelta:
    """An ISO-8601 duration of zero or longer, or ``default`` (unset, or wrong: the error names the field)."""
    value = mapping.get(key)
    if value is None:
        return default
    try:
        if not isinstance(value, str) or value.strip().startswith("-"):
            raise ValueError(f"expected a duration of zero or longer such as {example}, got {describe(value)}")
        return parse_iso_duration(value)
    except ValueError as exc:
        here.child(key).error(str(exc))
        return default


def parse_after_write(at: Location, raw: object) -> AfterWrite | None:
    """``afterWrite``: a mapping of ``settle`` (ISO-8601, zero or longer, default PT5M), ``maxSettle``
    (ISO-8601, at least ``settle``, default PT1H) and ``dependency``."""
    if raw is None:
        return None
    here = at.child("afterWrite")
    mapping = check_mapping(here, raw, "a mapping {settle: PT5M, maxSettle: PT1H, dependency: ANY_UPDATED | "
                                       "ALL_UPDATED}")
    if mapping is None:
        return None
    check_unknown(here, mapping, FIELDS)
    settle = _duration(here, mapping, "settle", DEFAULT_SETTLE, "PT5M")
    max_settle = _duration(here, mapping, "maxSettle", max(DEFAULT_MAX_SETTLE, settle), "PT1H")
    if max_settle < settle:
        here.child("maxSettle").error(
            f"{format_iso_duration(max_settle)} is shorter than settle {format_iso_duration(settle)}: maxSettle "
            f"forces the work once the oldest unprocessed write is that old, so it must be at least settle")
    dependency = mapping.get("dependency", ANY_UPDATED)
    if not isinstance(dependency, str) or dependency.strip().upper() not in (ANY_UPDATED, ALL_UPDATED):
        here.child("dependency").error(f"expected {ANY_UPDATED} or {ALL_UPDATED}, got {describe(dependency)}")
        dependency = ANY_UPDATED
    return AfterWrite(settle, dependency.strip().upper(), max(max_settle, settle))


@dataclass(frozen=True)
class AfterWriteDue:
    """The after-write rule's verdict, shaped as the schedule's (core/schedules/schedule_due.Due): due now in the slot
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

    def to_json(self) -> dict[str, object]:
        return {"due": self.due, "trigger": self.trigger, "slot_key": self.slot_key, "detail": self.detail,
                "next_eligible": self.next_eligible.isoformat() if self.next_eligible else None}


def after_write_due(rule: AfterWrite, writers: Sequence[Writer], last_success_start: datetime | None,
                    now: datetime, first_write_after: FirstWriteAfter | None = None) -> AfterWriteDue:
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
    if now >= settled_at:
        return AfterWriteDue(True, f"{write}, {len(updated)} of {len(writers)} writer(s) new {since} ({rule_text})",
                             newest, settled_at, now, last)
    oldest = _oldest_unprocessed(rule, updated, last, now, first_write_after)
    if oldest is not None:
        forced_at = oldest + rule.max_settle
    else:  # not asked yet: no write since the last success can be maxSettle old before this
        forced_at = last + rule.max_settle if last is not None and now < last + rule.max_settle else None
    if oldest is not None and now >= forced_at:
        limit = format_iso_duration(rule.max_settle)
        return AfterWriteDue(True, f"forced after maxSettle {limit} although the writer keeps writing (oldest "
                                   f"unprocessed write at {oldest.isoformat()}, {format_wait(now - oldest)} ago; "
                                   f"newest: {write}) ({rule_text})", newest, forced_at, now, last)
    wake = min(settled_at, forced_at) if forced_at is not None else settled_at
    forced = f", forced at {forced_at.isoformat()} by maxSettle" if oldest is not None else ""
    return AfterWriteDue(False, f"settling: {write}; due in {format_wait(settled_at - now)} unless it writes "
                                f"again{forced} ({rule_text})", newest, settled_at, wake, last, "not_due")


def _oldest_unprocessed(rule: AfterWrite, updated: Sequence[Writer], last: datetime | None, now: datetime,
                        first_write_after: FirstWriteAfter | None) -> datetime | None:
    """The oldest write since the last success among ``updated``'s, when it can matter; None while the last
    success is younger than maxSettle (every write since is younger still: the event log is not asked), and
    when no lookup knows it."""
    if first_write_after is None or (last is not None and now < last + rule.max_settle):
        return None
    firsts = [first_write_after(w.asset_key, last) for w in updated]
    return min((as_utc(t) for t in firsts if t is not None), default=None)


def combined_due(schedule_due: Due, rule: AfterWrite, writers: Sequence[Writer], now: datetime,
                 clock_only: bool, first_write_after: FirstWriteAfter | None = None) -> Any:
    """The schedule's own verdict (cron, interval) or the after-write one, whichever makes the work due; with
    neither rule (``clock_only`` false: a condition-only schedule), the after-write one alone. A closed window or
    a day not allowed holds both."""
    if schedule_due.due and clock_only:
        return schedule_due
    if schedule_due.blocked in ("window_closed", "day_not_allowed", "schedule_disabled"):
        return schedule_due
    verdict = after_write_due(rule, writers, schedule_due.last_success_start, now, first_write_after)
    if verdict.due or not clock_only:
        return verdict
    nexts = [t for t in (schedule_due.next_eligible, verdict.next_eligible) if t is not None]
    return AfterWriteDue(False, f"{schedule_due.detail}; {verdict.detail}", verdict.upstream, verdict.slot,
                         min(nexts) if nexts else None, schedule_due.last_success_start, "not_due")


__all__ = ["AfterWrite", "AfterWriteDue", "parse_after_write", "after_write_due", "combined_due",
           "TRIGGER_AFTER_WRITE", "ANY_UPDATED", "ALL_UPDATED", "FirstWriteAfter", "DEFAULT_MAX_SETTLE"]
