"""Wall-clock times in a time zone, resolved to instants across daylight-saving changes.

A local time can be normal (one instant), in a gap (spring forward: it never happens; we use the
instant the clock jumps, i.e. the first moment at or after it, the way Dagster runs a 02:30 schedule at
03:00) or ambiguous (fall back: it happens twice). Instants are returned in UTC: comparing two aware
datetimes of the *same* zone ignores ``fold`` (PEP 495), which would make the two 02:30s equal.
"""

from __future__ import annotations

import math
from datetime import date, datetime, time, timedelta, timezone, tzinfo
from functools import lru_cache
from zoneinfo import ZoneInfo

UTC = timezone.utc


def naive_as_utc(moment: datetime) -> datetime:
    """A time read back from storage or given by a user, in UTC: a naive one is taken as UTC (SQLite
    drops the zone of what was stored in UTC; a time typed without an offset means UTC)."""
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    return as_utc(moment)


def as_utc(moment: datetime) -> datetime:
    """An aware datetime in UTC; naive datetimes are refused, since the clock is always passed in."""
    if moment.tzinfo is UTC:  # already UTC (the common case: called several times per planner decision)
        return moment
    if moment.tzinfo is None or moment.tzinfo.utcoffset(moment) is None:
        raise ValueError(f"expected an aware datetime, got naive {moment.isoformat()}")
    return moment.astimezone(UTC)


_LAST_CLOCK: tuple[datetime | None, int] = (None, 0)  # the last clock asked and its milliseconds, as one tuple


def epoch_ms(now: datetime) -> int:
    """``now`` in milliseconds since the epoch, kept for the last clock asked: a tick asks with the same clock for
    every table (its health's ages, its debt's days since a write)."""
    global _LAST_CLOCK
    last, ms = _LAST_CLOCK
    if last is not now:
        ms = int(as_utc(now).timestamp() * 1000)
        _LAST_CLOCK = (now, ms)
    return ms


def floor_minute(moment: datetime) -> datetime:
    return moment.replace(second=0, microsecond=0)


@lru_cache(maxsize=512)
def zone(name: str) -> tzinfo:
    return ZoneInfo(name)


def local_naive(moment: datetime, tz: tzinfo) -> datetime:
    """The wall-clock reading of an instant, without zone."""
    return moment.astimezone(tz).replace(tzinfo=None, fold=0)


@lru_cache(maxsize=65536)
def resolve(naive: datetime, tz_name: str) -> tuple[str, datetime, datetime]:
    """``(kind, earliest, latest)`` for a wall-clock time: kind is ``normal``, ``gap`` or
    ``ambiguous``; earliest == latest except when ambiguous. For a gap both are the jump instant."""
    tz = zone(tz_name)
    naive = naive.replace(tzinfo=None, fold=0)
    u0 = naive.replace(tzinfo=tz, fold=0).astimezone(UTC)
    u1 = naive.replace(tzinfo=tz, fold=1).astimezone(UTC)
    if u0 == u1:
        return "normal", u0, u0
    if local_naive(u0, tz) == naive and local_naive(u1, tz) == naive:
        return "ambiguous", min(u0, u1), max(u0, u1)
    jump = _gap_end(naive, tz, min(u0, u1), max(u0, u1))
    return "gap", jump, jump


def _gap_end(naive: datetime, tz: tzinfo, low: datetime, high: datetime) -> datetime:
    """The first instant whose wall-clock reading is at or after ``naive`` (the clock's jump)."""
    # ``low`` reads before the gap and ``high`` after it; halve in whole seconds.
    lo, hi = math.floor(low.timestamp()), math.ceil(high.timestamp())
    while hi - lo > 1:
        middle = (lo + hi) // 2
        if local_naive(datetime.fromtimestamp(middle, UTC), tz) >= naive:
            hi = middle
        else:
            lo = middle
    return datetime.fromtimestamp(hi, UTC)


def earliest_instant(naive: datetime, tz_name: str) -> datetime:
    return resolve(naive, tz_name)[1]


def latest_instant(naive: datetime, tz_name: str) -> datetime:
    return resolve(naive, tz_name)[2]


def all_instants(naive: datetime, tz_name: str) -> tuple[datetime, ...]:
    kind, first, last = resolve(naive, tz_name)
    return (first, last) if kind == "ambiguous" else (first,)


@lru_cache(maxsize=8192)
def transitions_on(day: date, tz_name: str) -> tuple[datetime, ...]:
    """The instants (UTC) at which the zone's offset changes during a local day (at most one in
    practice). Found by comparing the offsets at the day's ends, then halving."""
    tz = zone(tz_name)
    start = earliest_instant(datetime.combine(day, time(0)), tz_name)
    end = earliest_instant(datetime.combine(day + timedelta(days=1), time(0)), tz_name)
    if start.astimezone(tz).utcoffset() == end.astimezone(tz).utcoffset():
        return ()
    before = start.astimezone(tz).utcoffset()
    lo, hi = math.floor(start.timestamp()), math.ceil(end.timestamp())
    while hi - lo > 1:
        middle = (lo + hi) // 2
        if datetime.fromtimestamp(middle, UTC).astimezone(tz).utcoffset() == before:
            lo = middle
        else:
            hi = middle
    return (datetime.fromtimestamp(hi, UTC),)
