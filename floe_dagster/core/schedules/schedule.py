"""Operation schedules (``<operation>Schedule`` in a policy) and when work is due.

Fields (Floe's names):

- ``cronExpression``: 5-field Unix or 6/7-field Quartz (see :mod:`floe_dagster.core.schedules.cron`);
  ``cron_5field`` is the form handed to Dagster.
- ``interval``: whole days (an integer, Floe's API) or an ISO-8601 duration (``PT6H``, ``P7D``). When
  both are set the interval wins (as in Floe) and validation warns.
- ``windowStart`` / ``windowEnd`` (``HH:mm``): a run may start from the start (inclusive) until the
  end (exclusive). Crossing midnight is allowed; equal times mean always open; only a start means open
  from the start until midnight; only an end means open from midnight until the end.
- ``allowedDays``: a list or comma-separated text of day names (``MONDAY`` or ``MON``, any case);
  empty means every day. For a window that crosses midnight, the day is that of the window's start.
- ``timezone``: IANA name (default UTC); windows, days and cron are read on this zone's clock.
- ``timeout`` (hours, > 0, default 1), ``enforceWindowEnd`` (cut the run's maximum runtime to the
  window's end), ``priority`` (ranking among equally indebted work), ``enabled`` (default true).
- ``quietFor`` (ISO-8601 duration): run only once the table has had no commit from another writer for
  this long; ``maxQuietWait`` (ISO-8601 duration, default ``P1D``, needs ``quietFor``): run anyway this
  long after the work became due (:mod:`floe_dagster.core.schedules.quiet`). ``maxWriterWait``, ``afterWrite``: the
  writers' (core/schedules/writers.py, core/schedules/after_write.py).
- ``sla`` (``{maxAge, severity, owner}``): the operation's SLA contract (:mod:`floe_dagster.core.schedules.sla`).

Every datetime returned is aware and in UTC (comparisons inside one zone would ignore DST's ``fold``).
Whether work is due by a schedule (``Due``, ``schedule_due``) is core/schedules/schedule_due.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from functools import cached_property, lru_cache
from typing import Mapping

from floe_dagster.core.schedules import cron as cronlib
from floe_dagster.core.basics.durations import format_iso_duration
from floe_dagster.core.basics.localtime import (
    UTC,
    all_instants,
    as_utc,
    earliest_instant,
    floor_minute,
    transitions_on,
    zone,
)
from floe_dagster.core.schedules.after_write import AfterWrite, parse_after_write
from floe_dagster.core.schedules.quiet import DEFAULT_MAX_QUIET_WAIT, QuietPeriod
from floe_dagster.core.schedules.sla import SlaContract, parse_sla
from floe_dagster.core.schedules.writers import DEFAULT_MAX_WRITER_WAIT
from floe_dagster.core.schedules.schedule_values import parse_interval, parse_time, parse_wait
from floe_dagster.core.schedules.schedule_due import (  # Schedule.at and Schedule.due's answers
    TRIGGER_CONDITION,
    TRIGGER_CRON,
    TRIGGER_INTERVAL,
    Due,
    ScheduleAt,
    schedule_due,
)
from floe_dagster.core.basics.validation import (
    Location,
    check_mapping,
    check_unknown,
    describe,
    get_bool,
    get_int,
    get_number,
    raise_if_errors,
    standalone,
)

SCHEDULE_FIELDS = (
    "cronExpression", "interval", "windowStart", "windowEnd", "allowedDays", "timezone", "timeout",
    "enforceWindowEnd", "priority", "enabled", "quietFor", "maxQuietWait", "sla", "maxWriterWait", "afterWrite",
)
DEFAULT_TIMEOUT_HOURS = 1.0
DAY_NAMES = ("MONDAY", "TUESDAY", "WEDNESDAY", "THURSDAY", "FRIDAY", "SATURDAY", "SUNDAY")  # weekday() order


@dataclass(frozen=True)
class Schedule:
    enabled: bool = True
    cron_expression: str | None = None  # as written in the policy
    cron_5field: str | None = None  # what Dagster gets
    interval: timedelta | None = None
    window_start: time | None = None
    window_end: time | None = None
    allowed_days: frozenset[int] = frozenset()  # date.weekday() numbers; empty: every day
    timezone: str = "UTC"
    timeout_hours: float = DEFAULT_TIMEOUT_HOURS
    enforce_window_end: bool = False
    priority: int = 0
    quiet: QuietPeriod | None = None  # quietFor / maxQuietWait (core/schedules/quiet.py); None: no quiet period
    sla: SlaContract | None = None  # the operation's SLA contract (core/schedules/sla.py)
    max_writer_wait: timedelta = DEFAULT_MAX_WRITER_WAIT  # the writer_running gate's limit (core/schedules/writers.py)
    after_write: AfterWrite | None = None  # the after-write trigger (core/schedules/after_write.py); None: none

    # -- construction ---------------------------------------------------------------------------

    @classmethod
    def from_mapping(cls, raw: Mapping[str, object]) -> "Schedule":
        """Parse one schedule on its own; raises ValueError listing every problem."""
        at = standalone()
        schedule = parse_schedule(at, raw)
        raise_if_errors(at, "schedule")
        return schedule

    # -- what kind of rule ----------------------------------------------------------------------

    @property
    def kind(self) -> str:
        """``interval`` (wins over cron, as in Floe), ``cron``, or ``condition`` (neither: due every tick,
        gated by the trigger conditions)."""
        if self.interval is not None:
            return TRIGGER_INTERVAL
        if self.cron_5field is not None:
            return TRIGGER_CRON
        return TRIGGER_CONDITION

    @property
    def tzinfo(self):
        return zone(self.timezone)

    # -- windows and days -----------------------------------------------------------------------

    @property
    def has_window(self) -> bool:
        return self.window_start is not None or self.window_end is not None

    def _window(self, now: datetime) -> tuple[bool, date]:
        """(inside the window by the clock, the day the window belongs to)."""
        local = as_utc(now).astimezone(self.tzinfo)
        reading, today = local.time().replace(tzinfo=None), local.date()
        start, end = self.window_start, self.window_end
        if start is None and end is None:
            return True, today
        if start is not None and end is not None:
            if start == end:
                return True, today
            if start < end:
                return start <= reading < end, today
            if reading >= start:  # crosses midnight: the evening part belongs to today
                return True, today
            if reading < end:  # ... and the morning part to the day the window started
                return True, today - timedelta(days=1)
            return False, today
        if start is not None:
            return reading >= start, today
        return reading < end, today

    def in_window(self, now: datetime) -> bool:
        """Whether the clock is inside the window (days not considered)."""
        return self._window(now)[0]

    def day_allowed(self, now: datetime) -> bool:
        """Whether the day of the current (or, outside a window, today's) window is allowed."""
        return not self.allowed_days or self._window(now)[1].weekday() in self.allowed_days

    @cached_property
    def always_open(self) -> bool:
        """No window and no day restriction: open whatever the clock says."""
        return self.window_start is None and self.window_end is None and not self.allowed_days

    def is_open(self, now: datetime) -> bool:
        """Whether a run may start now: inside the window on an allowed day (``enabled`` aside)."""
        if self.always_open:
            return True
        inside, day = self._window(now)
        return inside and (not self.allowed_days or day.weekday() in self.allowed_days)

    def closed_reason(self, now: datetime) -> str | None:
        """``window_closed``, ``day_not_allowed`` or None when open."""
        if self.always_open:
            return None
        inside, day = self._window(now)
        if not inside:
            return "window_closed"
        if self.allowed_days and day.weekday() not in self.allowed_days:
            return "day_not_allowed"
        return None

    def next_open(self, now: datetime) -> datetime:
        """The first moment at or after ``now`` at which a run may start (``now`` itself when open)."""
        now = as_utc(now)
        if self.is_open(now):
            return now
        # Opening moments fall on whole minutes, so the answer for a closed ``now`` is the answer for
        # its (also closed) minute; cached because the planner asks for every closed table.
        found = _next_open(self._window_key(), floor_minute(now))
        if found is None:
            raise ValueError(f"the schedule never opens within {_SEARCH_DAYS} days: {self.describe_window()}")
        return found

    def window_end_after(self, now: datetime) -> datetime | None:
        """When the window that is open at ``now`` closes (for ``enforceWindowEnd``); None when it never
        closes by the clock (no end, or start == end) or when it is not open now."""
        now = as_utc(now)
        if not self.in_window(now) or self.window_end is None and self.window_start is None:
            return None
        if self.window_start is not None and self.window_start == self.window_end:
            return None
        tz_name = self.timezone
        today = now.astimezone(self.tzinfo).date()
        candidates: list[datetime] = []
        for offset in (0, 1, 2):
            day = today + timedelta(days=offset)
            closing = self.window_end if self.window_end is not None else time(0)  # only a start: midnight
            candidates.extend(all_instants(datetime.combine(day, closing), tz_name))
            candidates.extend(transitions_on(day, tz_name))
        for candidate in sorted(candidates):
            if candidate > now and not self.in_window(candidate):
                return candidate
        return None

    @cached_property
    def window_text(self) -> str:
        """:meth:`describe_window`, made once (the planner quotes it for every closed decision)."""
        return self.describe_window()

    def describe_window(self) -> str:
        parts = []
        if self.has_window:
            start = self.window_start.strftime("%H:%M") if self.window_start else "00:00"
            end = self.window_end.strftime("%H:%M") if self.window_end else "24:00"
            parts.append(f"{start}-{end}")
        if self.allowed_days:
            parts.append(",".join(DAY_NAMES[d][:3] for d in sorted(self.allowed_days)))
        return " ".join(parts + [self.timezone]) if parts else f"always open ({self.timezone})"

    def _window_key(self) -> tuple:
        return (self.window_start, self.window_end, self.allowed_days, self.timezone)

    # -- cron slots -----------------------------------------------------------------------------

    def latest_slot_at_or_before(self, now: datetime) -> datetime | None:
        if self.cron_5field is None:
            return None
        return cronlib.latest_slot(self.cron_5field, self.timezone, now)

    def next_slot_after(self, moment: datetime) -> datetime | None:
        if self.cron_5field is None:
            return None
        return cronlib.next_slot(self.cron_5field, self.timezone, moment)

    @property
    def slot_gap(self) -> timedelta | None:
        """The average time between consecutive cron slots; None without a cron."""
        return cronlib.nominal_gap(self.cron_5field) if self.cron_5field else None

    @cached_property
    def interval_text(self) -> str | None:
        """The interval as an ISO-8601 duration (``PT6H``), made once."""
        return format_iso_duration(self.interval) if self.interval is not None else None

    def effective_interval(self) -> timedelta | None:
        """The rule's period: the interval, else the cron's slot gap, else None (condition-only)."""
        if self.interval is not None:
            return self.interval
        return self.slot_gap

    # -- the schedule at one moment ---------------------------------------------------------------

    def at(self, now: datetime) -> ScheduleAt:
        """What the clock says about this schedule at ``now``, the same for every table it governs.
        A planner tick asks for the same ``now`` once per decision, so the last answer is kept on the
        (immutable) schedule: a tick computes the window, the cron slot and the next opening once per
        schedule instead of once per table."""
        kept = self.__dict__
        memo = kept.get("_at")
        if memo is not None and memo.now == now:
            return memo
        before = kept.get("_at_before")  # and the answer before it: a tick reads its kept verdicts at their clock
        if before is not None and before.now == now:
            kept["_at_before"], kept["_at"] = memo, before
            return before
        now = as_utc(now)
        closed = self.closed_reason(now)
        slot = self.latest_slot_at_or_before(now)
        if self.cron_5field is None:
            following = None
        else:  # the first slot after the latest one is the first after now
            following = self.next_slot_after(slot) if slot is not None else self.next_slot_after(now)
        memo = ScheduleAt(now, closed, self.next_open(now), slot,
                          slot.isoformat() if slot is not None else None, following)
        kept["_at_before"], kept["_at"] = kept.get("_at"), memo  # not fields: equality, hashing, to_json ignore them
        return memo

    # -- due ------------------------------------------------------------------------------------

    def due(self, last_success_start: datetime | None, now: datetime) -> Due:
        return schedule_due(self, last_success_start, now)

    def to_json(self) -> dict[str, object]:
        data: dict[str, object] = {"enabled": self.enabled}
        if self.cron_expression is not None:
            data["cronExpression"] = self.cron_expression
            data["cron5field"] = self.cron_5field
        if self.interval is not None:
            data["interval"] = format_iso_duration(self.interval)
        if self.window_start is not None:
            data["windowStart"] = self.window_start.strftime("%H:%M")
        if self.window_end is not None:
            data["windowEnd"] = self.window_end.strftime("%H:%M")
        if self.allowed_days:
            data["allowedDays"] = [DAY_NAMES[d] for d in sorted(self.allowed_days)]
        data.update(timezone=self.timezone, timeout=self.timeout_hours, enforceWindowEnd=self.enforce_window_end,
                    priority=self.priority, kind=self.kind)
        if self.quiet is not None:
            data.update(self.quiet.to_json())
        if self.sla is not None:
            data["sla"] = self.sla.to_json()
        data.update({"afterWrite": self.after_write.to_json()} if self.after_write is not None else {})
        if self.max_writer_wait != DEFAULT_MAX_WRITER_WAIT:
            data["maxWriterWait"] = format_iso_duration(self.max_writer_wait)
        return data


_SEARCH_DAYS = 16


@lru_cache(maxsize=16384)
def _next_open(window_key: tuple, now: datetime) -> datetime | None:
    """Earliest open moment ≥ ``now``. The window opens only when the clock reaches the window's start
    (midnight when it has none), when a DST jump lands inside it, or when the day changes at midnight;
    each of those, in both occurrences at fall-back, is a candidate."""
    start, end, days, tz_name = window_key
    probe = Schedule(window_start=start, window_end=end, allowed_days=days, timezone=tz_name)
    today = now.astimezone(zone(tz_name)).date()
    candidates: list[datetime] = []
    for offset in range(-1, _SEARCH_DAYS):
        day = today + timedelta(days=offset)
        candidates.extend(all_instants(datetime.combine(day, start or time(0)), tz_name))
        candidates.extend(all_instants(datetime.combine(day, time(0)), tz_name))
        candidates.extend(transitions_on(day, tz_name))
    for candidate in sorted(set(candidates)):
        if candidate >= now and probe.is_open(candidate):
            return candidate
    return None


# -- parsing --------------------------------------------------------------------------------------


def parse_schedule(at: Location, raw: object) -> Schedule:
    """A schedule from its policy mapping; problems go to ``at`` and defaults stand in."""
    mapping = check_mapping(at, raw)
    if mapping is None:
        return Schedule(enabled=False)
    check_unknown(at, mapping, SCHEDULE_FIELDS)
    enabled = get_bool(at, mapping, "enabled", True)

    cron_expression = cron5 = None
    if mapping.get("cronExpression") is not None:
        value = mapping["cronExpression"]
        if not isinstance(value, str):
            at.child("cronExpression").error(f"expected text, got {describe(value)}")
        else:
            try:
                cron5 = cronlib.to_cron_5field(value)
                cron_expression = value
            except cronlib.CronError as exc:
                at.child("cronExpression").error(str(exc))

    interval = parse_interval(at, mapping)
    if interval is not None and cron_expression is not None:
        at.warn("both interval and cronExpression are set; the interval wins and the cron is ignored")

    window_start = parse_time(at, mapping, "windowStart")
    window_end = parse_time(at, mapping, "windowEnd")
    if window_end == time(0) and window_start is None:
        at.child("windowEnd").error("00:00 without a windowStart leaves no time open (the window runs from "
                                    "midnight to its end); remove it for an always-open schedule")
    allowed_days = _parse_days(at, mapping)
    tz_name = "UTC"
    if mapping.get("timezone") is not None:
        value = mapping["timezone"]
        try:
            if not isinstance(value, str) or not value.strip():
                raise ValueError
            zone(value.strip())
            tz_name = value.strip()
        except Exception:
            at.child("timezone").error(f"unknown time zone {describe(value)}; use an IANA name such as "
                                       "Europe/Berlin or UTC")
    timeout = get_number(at, mapping, "timeout", DEFAULT_TIMEOUT_HOURS, above=0)
    enforce = get_bool(at, mapping, "enforceWindowEnd", False)
    if enforce and window_end is None and window_start is None:
        at.warn("enforceWindowEnd is true but there is no window; it has no effect")
    priority = get_int(at, mapping, "priority", 0)
    return Schedule(
        enabled=enabled, cron_expression=cron_expression, cron_5field=cron5, interval=interval,
        window_start=window_start, window_end=window_end, allowed_days=allowed_days, timezone=tz_name,
        timeout_hours=float(timeout), enforce_window_end=enforce, priority=priority,
        quiet=_parse_quiet(at, mapping),
        sla=parse_sla(at.child("sla"), mapping.get("sla"),
                      interval or (cronlib.nominal_gap(cron5) if cron5 else None)),
        max_writer_wait=parse_wait(at, mapping, "maxWriterWait", "PT6H") or DEFAULT_MAX_WRITER_WAIT,
        after_write=parse_after_write(at, mapping.get("afterWrite")),
    )


def _parse_quiet(at: Location, mapping: Mapping[str, object]) -> QuietPeriod | None:
    """``quietFor`` and ``maxQuietWait``; ``maxQuietWait`` alone is an error (there is nothing to wait for)."""
    quiet_for = parse_wait(at, mapping, "quietFor", "PT10M")
    max_wait = parse_wait(at, mapping, "maxQuietWait", "PT6H")
    if mapping.get("maxQuietWait") is not None and mapping.get("quietFor") is None:
        at.child("maxQuietWait").error("is set without quietFor: it limits how long a quiet period is waited for, "
                                       "so set quietFor (such as PT10M) too, or remove it")
    if quiet_for is None:
        return None
    if max_wait is None:
        max_wait = DEFAULT_MAX_QUIET_WAIT
    if quiet_for == timedelta(0):
        at.child("quietFor").warn("is zero: every table is quiet, so it has no effect; remove it")
    return QuietPeriod(quiet_for, max_wait)


def _parse_days(at: Location, mapping: Mapping[str, object]) -> frozenset[int]:
    value = mapping.get("allowedDays")
    if value is None:
        return frozenset()
    here = at.child("allowedDays")
    if isinstance(value, str):
        items = [item.strip() for item in value.split(",") if item.strip()]
    elif isinstance(value, (list, tuple)):
        items = list(value)
    else:
        here.error(f"expected a list of day names or comma-separated text, got {describe(value)}")
        return frozenset()
    days = set()
    for item in items:
        name = item.strip().upper() if isinstance(item, str) else None
        matches = [i for i, day in enumerate(DAY_NAMES) if name and (name == day or name == day[:3])]
        if not matches:
            here.error(f"unknown day {describe(item)}; use MONDAY..SUNDAY or MON..SUN")
        else:
            days.add(matches[0])
    return frozenset(days)


__all__ = [
    "Schedule", "ScheduleAt", "Due", "schedule_due", "parse_schedule", "SCHEDULE_FIELDS", "DAY_NAMES",
    "TRIGGER_CRON", "TRIGGER_INTERVAL", "TRIGGER_CONDITION", "UTC", "earliest_instant",
]
