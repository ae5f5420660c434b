"""The values of a schedule as a policy writes them, read with a message naming the field: a wait
(``quietFor``, ``maxQuietWait``, ``maxWriterWait``), an ``interval`` and a time of day. core/schedules/schedule.py
reads the schedule; these are its readers of single values."""

from __future__ import annotations

from datetime import time, timedelta
from typing import Mapping

from floe_dagster.core.basics.durations import MAX_DURATION, parse_iso_duration
from floe_dagster.core.basics.validation import Location, describe


def parse_wait(at: Location, mapping: Mapping[str, object], key: str, example: str) -> timedelta | None:
    """An ISO-8601 duration of the quiet period: zero or longer (``maxQuietWait`` longer than zero)."""
    value = mapping.get(key)
    if value is None:
        return None
    here = at.child(key)
    if not isinstance(value, str):
        here.error(f"expected an ISO-8601 duration such as {example}, got {describe(value)}")
        return None
    if value.strip().startswith("-"):
        here.error(f"must not be negative, got {value!r}; write a duration such as {example}")
        return None
    try:
        wait = parse_iso_duration(value)
    except ValueError as exc:
        here.error(str(exc))
        return None
    if key.startswith("max") and wait <= timedelta(0):
        here.error(f"must be longer than zero, got {value!r} (zero would force every run at once)")
        return None
    return wait


def parse_interval(at: Location, mapping: Mapping[str, object]) -> timedelta | None:
    value = mapping.get("interval")
    if value is None:
        return None
    here = at.child("interval")
    if isinstance(value, bool):
        here.error(f"expected whole days or an ISO-8601 duration such as PT6H, got {describe(value)}")
        return None
    if isinstance(value, int):
        if value < 1:
            here.error(f"must be at least 1 day, got {value}")
            return None
        if value > MAX_DURATION.days:
            here.error(f"must be at most {MAX_DURATION.days} days, got {value}")
            return None
        return timedelta(days=value)
    if isinstance(value, str):
        try:
            interval = parse_iso_duration(value)
        except ValueError as exc:
            here.error(str(exc))
            return None
        if interval <= timedelta(0):
            here.error(f"must be longer than zero, got {value!r}")
            return None
        if interval < timedelta(minutes=1):
            here.warn(f"{value!r} is shorter than the scheduler's one-minute tick; it acts as one minute")
        return interval
    here.error(f"expected whole days or an ISO-8601 duration such as PT6H, got {describe(value)}")
    return None


def parse_time(at: Location, mapping: Mapping[str, object], key: str) -> time | None:
    value = mapping.get(key)
    if value is None:
        return None
    if isinstance(value, str):
        hours, sep, minutes = value.strip().partition(":")
        if sep and hours.isdigit() and minutes.isdigit() and len(minutes) == 2 and len(hours) <= 2:
            if int(hours) < 24 and int(minutes) < 60:
                return time(int(hours), int(minutes))
    # YAML 1.1 reads an unquoted 02:30 as the sexagesimal number 150.
    hint = " (quote it in YAML: \"02:30\")" if isinstance(value, int) and not isinstance(value, bool) else ""
    at.child(key).error(f"expected a time HH:mm from 00:00 to 23:59, got {describe(value)}{hint}")
    return None
