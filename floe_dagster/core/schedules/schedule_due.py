"""When work is due by its schedule (docs/automation.md, "Due"): a schedule's clock-only facts at one
moment (:class:`ScheduleAt`, made by :meth:`Schedule.at <floe_dagster.core.schedules.schedule.Schedule.at>`) and
the verdict for one (table, operation) (:class:`Due`, :func:`schedule_due`). The schedule itself (its
fields, windows, days and cron slots) is core/schedules/schedule.py, which imports this module.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from floe_dagster.core.basics.localtime import as_utc
from floe_dagster.core.basics.quick_records import kept_property, quick_init

TRIGGER_CRON, TRIGGER_INTERVAL, TRIGGER_CONDITION = "cron", "interval", "condition"


class DueSchedule(Protocol):
    """What :func:`schedule_due` reads of a schedule (core/schedules/schedule.py's ``Schedule``, which imports this
    module, so the answer's shapes live here and the schedule's fields there)."""

    enabled: bool
    cron_5field: str | None
    interval: timedelta | None
    timezone: str

    @property
    def kind(self) -> str: ...

    @property
    def interval_text(self) -> str | None: ...

    @property
    def window_text(self) -> str: ...

    def at(self, now: datetime) -> ScheduleAt: ...

    def next_open(self, now: datetime) -> datetime: ...


@dataclass(frozen=True)
class ScheduleAt:
    """:meth:`Schedule.at`: a schedule's clock-only facts at one moment."""

    now: datetime
    closed_reason: str | None  # window_closed, day_not_allowed or None (open)
    next_open: datetime  # the first open moment at or after now
    slot: datetime | None  # cron: the latest slot at or before now
    slot_text: str | None
    next_slot: datetime | None  # cron: the first slot after ``slot`` (after now when there is none)

    @property
    def open_now(self) -> bool:
        return self.closed_reason is None


@quick_init  # a tick makes tens of thousands
@dataclass(frozen=True)
class Due:
    """Whether a (table, operation) may start now by its schedule, and when it next may.

    ``due`` is true only when the rule has made it due *and* the window and allowed days let it start;
    ``blocked`` then says which: ``schedule_disabled``, ``window_closed``, ``day_not_allowed`` or
    ``not_due``. ``next_eligible`` is the first moment ≥ now at which it is due and open (None only for
    a disabled schedule).
    """

    due: bool
    trigger: str  # cron, interval or condition: the rule that makes it due
    slot: datetime | None  # cron: latest slot ≤ now; interval: when it became due (None before any run)
    next_eligible: datetime | None
    rule_due: bool
    blocked: str | None
    # Its words: a text, or (tell, *args) told when read (:attr:`detail`): a tick makes 50,000 verdicts.
    told: str | tuple
    last_success_start: datetime | None = None

    @kept_property
    def detail(self) -> str:
        return _tell(self.told)

    @kept_property  # frozen: read twice per due decision (its slot, then its attempt number)
    def slot_key(self) -> str:
        """A stable text naming the piece of work, for run keys and the trigger ledger: one per cron
        slot, per interval period and per condition cycle (a success starts a new one)."""
        if self.trigger == TRIGGER_CRON:
            return self.slot.isoformat() if self.slot else "cron:none"
        if self.trigger == TRIGGER_INTERVAL:
            return "interval:" + (self.slot.isoformat() if self.slot else "first")
        last = self.last_success_start
        return "condition:" + (last.isoformat() if last else "first")

    def to_json(self) -> dict[str, object]:
        return {
            "due": self.due,
            "trigger": self.trigger,
            "slot": self.slot.isoformat() if self.slot else None,
            "slot_key": self.slot_key,
            "next_eligible": self.next_eligible.isoformat() if self.next_eligible else None,
            "blocked": self.blocked,
            "detail": self.detail,
        }


def _iso(moment: datetime | None) -> str:
    return moment.isoformat() if moment else "never"


def schedule_due(schedule: DueSchedule, last_success_start: datetime | None, now: datetime) -> Due:
    """Whether a schedule is due now (docs/automation.md, "Due").

    - cron: the slot is the latest cron time ≤ now; due while no *successful* run started at or after
      it (missed slots coalesce into that one);
    - interval: due when there is no success yet, or now ≥ last successful start + interval;
    - neither (condition-only): due on every tick, gated by the trigger conditions.

    Pass only successful runs' starts: a failed run does not use up its slot or interval (manual and
    backfill runs count). A closed window or a day not allowed defers due work to the next open
    moment.
    """
    now = as_utc(now)
    last = as_utc(last_success_start) if last_success_start is not None else None
    trigger = schedule.kind
    if not schedule.enabled:
        return Due(False, trigger, None, None, False, "schedule_disabled", "the schedule is disabled", last)

    clock = schedule.at(now)
    slot: datetime | None = None
    if trigger == TRIGGER_CRON:
        slot = clock.slot
        rule_due = slot is not None and (last is None or last < slot)
        due_at = now if rule_due else clock.next_slot
        told: tuple = (_cron_detail, schedule, clock, last, rule_due, due_at)
    elif trigger == TRIGGER_INTERVAL:
        slot = last + schedule.interval if last is not None else None
        rule_due = slot is None or now >= slot
        due_at = now if rule_due else slot
        told = (_interval_detail, schedule, last, rule_due, slot)
    else:
        rule_due, due_at = True, now
        told = ("condition-only schedule: due on every tick",)

    if due_at is None:  # a cron that never fires again
        return Due(False, trigger, slot, None, False, "not_due", told, last)
    if rule_due and clock.open_now:
        due = Due(True, trigger, slot, now, True, None, told, last)
        if trigger == TRIGGER_CRON:  # its slot key is the slot's text, made once per schedule and tick
            due.__dict__["slot_key"] = clock.slot_text
        return due
    next_eligible = clock.next_open if due_at <= now else schedule.next_open(due_at)
    # The gates' order (core/plan/gates.py, docs/automation.md): a closed window or day is reported before "not due".
    closed = clock.closed_reason
    blocked = closed or "not_due"
    if closed:
        told = (_closed_detail, closed, schedule, told, next_eligible)
    return Due(False, trigger, slot, next_eligible, rule_due, blocked, told, last)


def _tell(told: str | tuple) -> str:
    if told.__class__ is str:
        return told  # type: ignore[return-value]
    head = told[0]
    return head if head.__class__ is str else head(*told[1:])


def _cron_detail(schedule: DueSchedule, clock: ScheduleAt, last: datetime | None, rule_due: bool,
                 due_at: datetime | None) -> str:
    if rule_due:
        return f"cron slot {clock.slot_text} ({schedule.cron_5field} {schedule.timezone}) has not run " \
               f"(last success {_iso(last)})"
    return (f"cron slot {clock.slot_text} already ran (success started {_iso(last)}); next slot "
            f"{_iso(due_at)}" if clock.slot else f"no cron slot yet; next {_iso(due_at)}")


def _interval_detail(schedule: DueSchedule, last: datetime | None, rule_due: bool, slot: datetime | None) -> str:
    every = schedule.interval_text
    if last is None:
        return f"never run (interval {every})"
    return f"interval {every} since the last success at {last.isoformat()} " + (
        "has passed" if rule_due else f"ends at {slot.isoformat()}")  # type: ignore[union-attr]


def _closed_detail(closed: str, schedule: DueSchedule, told: tuple, next_eligible: datetime) -> str:
    return (f"{closed.replace('_', ' ')} ({schedule.window_text}); " + _tell(told)
            + f"; eligible {next_eligible.isoformat()}")
