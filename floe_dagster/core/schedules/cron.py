"""Cron expressions: Quartz → 5-field conversion, and cron slots in a time zone across DST.

**Conversion.** Dagster accepts only 5-field Unix cron strings; Floe's API took Quartz (6 or 7 fields,
seconds first, ``?`` in one day field, days of week numbered 1 = Sunday .. 7 = Saturday). We convert
explicitly and refuse what has no 5-field equivalent: non-zero seconds, a year, ``L``, ``W``, ``LW``
and ``#``. 5-field input is taken as Unix cron (``W`` refused: Dagster refuses it).

**Slots.** Cron fields are matched against wall-clock time in the schedule's zone (croniter on naive
local times, so DST never confuses it), then each matching wall-clock time becomes an instant the way
Dagster's own schedules do (checked against ``dagster._utils.schedules.cron_string_iterator``):

- a time in a spring-forward gap runs at the jump (``30 2 * * *`` in Europe/Berlin → 03:00);
- a time that happens twice at fall-back runs once, at the later one (the second 02:30);
- except when the hour field is ``*`` (hourly or finer): the real-time cadence is kept, so both
  occurrences of a repeated time run and the times of a skipped hour are skipped.

(One known difference: in zones with half-hour DST such as Australia/Lord_Howe, Dagster's hourly
schedules drift by 30 minutes across the change; we stay on the wall clock, as cron means.)

Each croniter call costs 100–180 µs, so slot look-ups are cached per (cron, zone, minute): the planner
asks the same question for thousands of tables per tick.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from functools import lru_cache

from croniter import croniter

from floe_dagster.core.basics.localtime import UTC, as_utc, floor_minute, local_naive, resolve, zone

_ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_DAY_NAMES = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
_MONTH_NAMES = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_NAME = re.compile(r"[A-Z]{3}")
_REFERENCE = datetime(2001, 1, 1)  # a Monday: a fixed start for the nominal gap between slots


class CronError(ValueError):
    """A cron expression we cannot turn into a Dagster schedule; the message says why."""


def to_cron_5field(expression: str) -> str:
    """The 5-field Unix form of a Unix or Quartz cron expression; raises CronError."""
    if not isinstance(expression, str) or not expression.strip():
        raise CronError("a cron expression must be non-empty text")
    text = " ".join(expression.split()).upper()
    if text.startswith("@"):
        if text.lower() not in _ALIASES:
            raise CronError(f"unknown cron alias {expression!r}; known: {', '.join(_ALIASES)}")
        return _checked(_ALIASES[text.lower()], expression)
    fields = text.split(" ")
    if len(fields) == 5:
        minute, hour, dom, month, dow = fields
        if "W" in _without_names(dom):
            raise CronError(f"{expression!r}: 'W' (nearest weekday) is not supported by Dagster schedules")
        dom, dow = ("*" if dom == "?" else dom), ("*" if dow == "?" else dow)
        return _checked(" ".join((minute, hour, dom, month, dow)), expression)
    if len(fields) not in (6, 7):
        raise CronError(f"{expression!r} has {len(fields)} fields; expected 5 (Unix: minute hour day-of-month "
                        "month day-of-week) or 6-7 (Quartz: seconds first, optional year last)")
    seconds, minute, hour, dom, month, dow = fields[:6]
    if seconds not in ("0", "00"):
        raise CronError(f"{expression!r}: the seconds field must be 0 (schedules have minute resolution), "
                        f"got {seconds!r}")
    if len(fields) == 7 and fields[6] != "*":
        raise CronError(f"{expression!r}: the year field must be '*' or absent, got {fields[6]!r}")
    for name, value in (("minute", minute), ("hour", hour), ("day-of-month", dom), ("month", month),
                        ("day-of-week", dow)):
        bare = _without_names(value)
        for feature, meaning in (("LW", "last weekday"), ("L", "last"), ("W", "nearest weekday"),
                                 ("#", "nth day of week")):
            if feature in bare:
                raise CronError(f"{expression!r}: Quartz '{feature}' ({meaning}) in the {name} field has no "
                                "5-field cron equivalent; list the days explicitly")
        if "?" in value and name not in ("day-of-month", "day-of-week"):
            raise CronError(f"{expression!r}: '?' is only allowed in the day-of-month or day-of-week field")
    if dom not in ("?", "*") and dow not in ("?", "*"):
        raise CronError(f"{expression!r}: Quartz needs '?' in day-of-month or day-of-week; both restrict days")
    dom = "*" if dom == "?" else dom
    dow = "*" if dow == "?" else _quartz_days_of_week(dow, expression)
    return _checked(" ".join((minute, hour, dom, month, dow)), expression)


def _without_names(value: str) -> str:
    """The field with month and day names removed, so 'JUL' or 'WED' are not read as L or W."""
    return _NAME.sub(lambda m: "" if m.group() in _DAY_NAMES + _MONTH_NAMES else m.group(), value)


def _quartz_days_of_week(field: str, expression: str) -> str:
    """Quartz numbers 1 = SUN .. 7 = SAT; Unix 0 = SUN .. 6 = SAT. Names stay as they are."""

    def convert(token: str) -> str:
        if token == "*" or token in _DAY_NAMES:
            return token
        if not token.isdigit():
            raise CronError(f"{expression!r}: {token!r} is not a day of week (1-7 or SUN-SAT)")
        number = int(token)
        if not 1 <= number <= 7:
            raise CronError(f"{expression!r}: Quartz days of week run 1 (SUN) to 7 (SAT), got {number}")
        return str(number - 1)

    items = []
    for item in field.split(","):
        base, _, step = item.partition("/")
        low, dash, high = base.partition("-")
        converted = convert(low) + (dash + convert(high) if dash else "")
        if step and "-" not in base and base != "*":
            converted += "-6"  # Quartz 'a/n': from a to the end of the week, every n days
        items.append(converted + ("/" + step if step else ""))
    return ",".join(items)


def _checked(cron5: str, original: str) -> str:
    if not croniter.is_valid(cron5):
        raise CronError(f"{original!r} is not a valid cron expression")
    expanded = croniter.expand(cron5)[0]
    if len(expanded) != 5:
        raise CronError(f"{original!r} does not resolve to 5 cron fields")
    days, months = expanded[2], expanded[3]
    if months == [2] and all(isinstance(d, int) and d >= 30 for d in days):
        raise CronError(f"{original!r} never fires (February has no day {days[0]})")
    try:
        croniter(cron5, _REFERENCE).get_next(datetime)
    except Exception as exc:  # croniter gives up on dates that never come (April 31)
        raise CronError(f"{original!r} never fires: {exc}") from None
    return cron5


@lru_cache(maxsize=1024)
def _hourly_or_finer(cron5: str) -> bool:
    """Whether the hour field is ``*``: then a repeated fall-back hour really runs twice."""
    return croniter.expand(cron5)[0][1] == ["*"]


def _instants(naive: datetime, cron5: str, tz_name: str) -> tuple[str, tuple[datetime, ...]]:
    kind, first, last = resolve(naive, tz_name)
    if kind == "gap":
        # Hourly or finer: the skipped hour's times are skipped (the next hour has its own slots);
        # coarser: the day's slot runs at the jump.
        return kind, (() if _hourly_or_finer(cron5) else (first,))
    if kind == "ambiguous":
        return kind, ((first, last) if _hourly_or_finer(cron5) else (last,))
    return kind, (first,)


def latest_slot(cron5: str, tz_name: str, now: datetime) -> datetime | None:
    """The latest cron slot at or before ``now`` (UTC), or None if there is none."""
    # Slots fall on whole minutes, so the answer for ``now`` is the answer for its minute.
    return _latest_slot(cron5, tz_name, floor_minute(as_utc(now)))


@lru_cache(maxsize=16384)
def _latest_slot(cron5: str, tz_name: str, now: datetime) -> datetime | None:
    tz = zone(tz_name)
    start = local_naive(now, tz) + timedelta(minutes=1)  # croniter's get_prev is strict
    iterator = croniter(cron5, start)
    best: datetime | None = None
    for _ in range(100_000):
        try:
            candidate = iterator.get_prev(datetime)
        except Exception:
            return best
        kind, instants = _instants(candidate, cron5, tz_name)
        for instant in instants:
            if instant <= now and (best is None or instant > best):
                best = instant
        # Outside a repeated hour, instants fall as wall-clock times fall, so the first fit is the
        # latest. Inside one, an earlier wall-clock time can still be a later instant (its second
        # occurrence): keep looking until a second occurrence fits or the hour is left behind.
        if best is not None and (kind != "ambiguous" or instants[-1] <= now):
            return best
    return best


def next_slot(cron5: str, tz_name: str, after: datetime) -> datetime | None:
    """The first cron slot strictly after ``after`` (UTC), or None if the cron never fires again."""
    return _next_slot(cron5, tz_name, floor_minute(as_utc(after)))


@lru_cache(maxsize=16384)
def _next_slot(cron5: str, tz_name: str, after: datetime) -> datetime | None:
    tz = zone(tz_name)
    reading = local_naive(after, tz)
    kind, first, last = resolve(reading, tz_name)
    if kind == "ambiguous":
        # In the first pass of a repeated hour, wall-clock times already passed will come again.
        reading -= last - first
    iterator = croniter(cron5, reading - timedelta(minutes=1))  # get_next is strict
    best: datetime | None = None
    for _ in range(100_000):
        try:
            candidate = iterator.get_next(datetime)
        except Exception:
            return best
        kind, instants = _instants(candidate, cron5, tz_name)
        for instant in instants:
            if instant > after and (best is None or instant < best):
                best = instant
        if best is not None and (kind != "ambiguous" or instants[0] > after):
            return best
    return best


@lru_cache(maxsize=1024)
def nominal_gap(cron5: str, samples: int = 64) -> timedelta:
    """The average time between consecutive slots, in wall-clock time (DST ignored): a cron rule's
    "interval" for throttling (``0 2 * * 1-5`` → 1.4 days, ``*/20 * * * *`` → 20 minutes)."""
    iterator = croniter(cron5, _REFERENCE)
    first = iterator.get_next(datetime)
    last = first
    for _ in range(samples):
        last = iterator.get_next(datetime)
    return (last - first) / samples


def slots_between(cron5: str, tz_name: str, start: datetime, end: datetime) -> list[datetime]:
    """Every slot in ``(start, end]`` (UTC), in order; for tests and explanations."""
    slots = []
    moment = as_utc(start)
    end = as_utc(end)
    while True:
        slot = next_slot(cron5, tz_name, moment)
        if slot is None or slot > end:
            return slots
        slots.append(slot)
        moment = slot


__all__ = ["CronError", "to_cron_5field", "latest_slot", "next_slot", "nominal_gap", "slots_between", "UTC"]
