"""Cron: Quartz → 5-field conversion, slots in a time zone across DST, and the per-minute cache."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from floe_dagster.core.schedules import cron
from floe_dagster.core.schedules.cron import (
    CronError, latest_slot, next_slot, nominal_gap, slots_between, to_cron_5field,
)

UTC = timezone.utc


def utc(*args) -> datetime:
    return datetime(*args, tzinfo=UTC)


@pytest.mark.parametrize(
    "expression, expected",
    [
        ("0 2 * * *", "0 2 * * *"),  # Unix passes through
        ("*/15 * * * 1-5", "*/15 * * * 1-5"),
        ("@daily", "0 0 * * *"),
        ("@hourly", "0 * * * *"),
        ("0 0 2 * * ?", "0 2 * * *"),  # Quartz: seconds first, ? → *
        ("0 0 2 * * ? *", "0 2 * * *"),  # with a * year
        ("0 30 2 ? * MON-FRI", "30 2 * * MON-FRI"),  # names kept
        ("0 30 2 ? * 2-6", "30 2 * * 1-5"),  # Quartz 2-6 (MON-FRI) → Unix 1-5
        ("0 0 3 ? * 1", "0 3 * * 0"),  # 1 = Sunday → 0
        ("0 0 3 ? * 7", "0 3 * * 6"),  # 7 = Saturday → 6
        ("0 0 3 ? * 1,7", "0 3 * * 0,6"),
        ("0 0/15 * * * ?", "0/15 * * * *"),
        ("0 0 4 1 * ?", "0 4 1 * *"),
        ("0 0 2 ? JUL WED", "0 2 * JUL WED"),  # JUL and WED are names, not L and W
        ("00 5 1 ? * SUN", "5 1 * * SUN"),
    ],
)
def test_conversion_to_5_fields(expression, expected):
    assert to_cron_5field(expression) == expected


@pytest.mark.parametrize(
    "expression, message",
    [
        ("30 0 2 * * ?", "seconds field must be 0"),
        ("0 0 2 * * ? 2027", "year field"),
        ("0 0 2 L * ?", "'L'"),
        ("0 0 2 LW * ?", "'LW'"),
        ("0 0 2 15W * ?", "'W'"),
        ("0 0 2 ? * 6#3", "'#'"),
        ("0 0 2 ? * 5L", "'L'"),
        ("0 0 2 ? * 0", "run 1 \\(SUN\\) to 7"),
        ("0 0 2 ? * 8", "run 1 \\(SUN\\) to 7"),
        ("0 0 2 1 * MON", "needs '\\?'"),
        ("0 2 1W * *", "'W'"),
        ("0 2 * *", "has 4 fields"),
        ("0 0 0 0 2 * * ?", "has 8 fields"),
        ("61 2 * * *", "not a valid cron"),
        ("0 0 30 2 *", "never fires"),
        ("0 0 31 4 *", "never fires"),
        ("@sometimes", "unknown cron alias"),
        ("", "non-empty"),
    ],
)
def test_refused_expressions(expression, message):
    with pytest.raises(CronError, match=message):
        to_cron_5field(expression)


def test_spring_forward_runs_the_missing_time_at_the_jump():
    # Europe/Berlin, 2026-03-29: 02:00 CET jumps to 03:00 CEST (01:00 UTC).
    slots = slots_between("30 2 * * *", "Europe/Berlin", utc(2026, 3, 27, 12), utc(2026, 3, 30, 12))
    assert slots == [utc(2026, 3, 28, 1, 30), utc(2026, 3, 29, 1, 0), utc(2026, 3, 30, 0, 30)]
    assert slots[1].astimezone(cron.zone("Europe/Berlin")).strftime("%H:%M") == "03:00"


def test_fall_back_runs_the_repeated_time_once_at_the_second_occurrence():
    # Europe/Berlin, 2026-10-25: 03:00 CEST falls back to 02:00 CET (01:00 UTC); 02:30 happens at
    # 00:30 UTC and again at 01:30 UTC. One slot that day, the later one (as Dagster's schedules do).
    slots = slots_between("30 2 * * *", "Europe/Berlin", utc(2026, 10, 23, 12), utc(2026, 10, 26, 12))
    assert slots == [utc(2026, 10, 24, 0, 30), utc(2026, 10, 25, 1, 30), utc(2026, 10, 26, 1, 30)]
    assert latest_slot("30 2 * * *", "Europe/Berlin", utc(2026, 10, 25, 0, 45)) == utc(2026, 10, 24, 0, 30)
    assert latest_slot("30 2 * * *", "Europe/Berlin", utc(2026, 10, 25, 1, 30)) == utc(2026, 10, 25, 1, 30)


def test_hourly_crons_keep_real_time_cadence_across_dst():
    berlin = "Europe/Berlin"
    fall = slots_between("*/20 * * * *", berlin, utc(2026, 10, 24, 23, 50), utc(2026, 10, 25, 2, 5))
    assert fall == [utc(2026, 10, 25, h, m) for h in (0, 1) for m in (0, 20, 40)] + [utc(2026, 10, 25, 2, 0)]
    spring = slots_between("15 * * * *", berlin, utc(2026, 3, 28, 23, 0), utc(2026, 3, 29, 2, 0))
    # 02:15 does not exist that night: hourly slots go on each real hour, none at the jump
    assert spring == [utc(2026, 3, 28, 23, 15), utc(2026, 3, 29, 0, 15), utc(2026, 3, 29, 1, 15)]
    # latest slot while in the first pass of the repeated hour, and in the second
    assert latest_slot("*/20 * * * *", berlin, utc(2026, 10, 25, 0, 50)) == utc(2026, 10, 25, 0, 40)
    assert latest_slot("*/20 * * * *", berlin, utc(2026, 10, 25, 1, 10)) == utc(2026, 10, 25, 1, 0)


def test_slots_at_and_between():
    assert latest_slot("0 2 * * *", "UTC", utc(2026, 1, 5, 2, 0)) == utc(2026, 1, 5, 2, 0)  # at: included
    assert latest_slot("0 2 * * *", "UTC", utc(2026, 1, 5, 1, 59, 59)) == utc(2026, 1, 4, 2, 0)
    assert next_slot("0 2 * * *", "UTC", utc(2026, 1, 5, 2, 0)) == utc(2026, 1, 6, 2, 0)  # strictly after
    assert next_slot("0 2 * * *", "UTC", utc(2026, 1, 5, 1, 59, 30)) == utc(2026, 1, 5, 2, 0)
    # the zone decides the wall clock
    assert latest_slot("0 2 * * *", "America/New_York", utc(2026, 1, 5, 12)) == utc(2026, 1, 5, 7, 0)


def test_nominal_gap_is_the_average_time_between_slots():
    assert nominal_gap("*/20 * * * *") == timedelta(minutes=20)
    assert nominal_gap("0 2 * * *") == timedelta(days=1)
    assert timedelta(days=1.3) < nominal_gap("0 2 * * 1-5") < timedelta(days=1.5)


def test_slot_lookups_are_cached_per_minute():
    cron._latest_slot.cache_clear()
    now = utc(2026, 5, 5, 12, 0, 7)
    first = latest_slot("7 * * * *", "Europe/Paris", now)
    started = time.perf_counter()
    for second in range(10_000):  # thousands of tables in one tick
        assert latest_slot("7 * * * *", "Europe/Paris", now + timedelta(microseconds=second)) == first
    elapsed = time.perf_counter() - started
    info = cron._latest_slot.cache_info()
    assert info.misses == 1 and info.hits == 10_000
    assert elapsed < 0.5  # uncached it would be 10,000 croniter calls (1-2 s)


ZONES = ["Europe/Berlin", "America/New_York", "Australia/Sydney", "America/Santiago", "UTC", "Asia/Kolkata"]
CRONS = ["30 2 * * *", "0 3 * * *", "*/20 * * * *", "15 * * * *", "0 */2 * * *", "30 1,2 * * 0-5", "0 0 * * *",
         "45 23 * * *", "5 2 * * 0,2,4,6", "0 9 1-31/2 * 1"]
# Around the 2026 DST changes of those zones, and ordinary days.
MOMENTS = st.sampled_from([utc(2026, 3, 8), utc(2026, 3, 28), utc(2026, 4, 4), utc(2026, 10, 3), utc(2026, 10, 24),
                           utc(2026, 11, 1), utc(2026, 6, 15), utc(2026, 9, 5)])


def brute_force_slots(cron_expr: str, tz_name: str, start: datetime, end: datetime) -> list[datetime]:
    """Slots by scanning every minute, written without croniter iteration or the module's resolver:
    a minute is a slot when the zone's clock reads a matching time (the second reading only, at
    fall-back, unless the hour field is *), or when the clock jumps over a matching time (not for
    hourly crons)."""
    from croniter import croniter as _croniter

    fields = _croniter.expand(cron_expr)[0]
    minutes, hours, days, months, weekdays = (set(f) for f in fields)
    hourly = "*" in hours

    def matches(reading: datetime) -> bool:
        dow = (reading.weekday() + 1) % 7  # Unix: 0 = Sunday (7 too)
        dom_ok = "*" in days or reading.day in days
        dow_ok = "*" in weekdays or dow in weekdays or (dow == 0 and 7 in weekdays)
        # Unix cron: when both day fields are restricted, either may match
        day_ok = (dom_ok or dow_ok) if "*" not in days and "*" not in weekdays else (dom_ok and dow_ok)
        return (("*" in minutes or reading.minute in minutes) and ("*" in hours or reading.hour in hours)
                and ("*" in months or reading.month in months) and day_ok)

    tz = cron.zone(tz_name)
    slots = []
    moment = start.replace(second=0, microsecond=0)
    previous_reading = (moment - timedelta(minutes=1)).astimezone(tz).replace(tzinfo=None)
    while moment <= end:
        reading = moment.astimezone(tz).replace(tzinfo=None)
        step = reading - previous_reading
        if step == timedelta(minutes=1):
            later_reading_exists = (moment + timedelta(hours=1)).astimezone(tz).replace(tzinfo=None) == reading
            if matches(reading) and (hourly or not later_reading_exists):
                slots.append(moment)
        elif step > timedelta(minutes=1):  # spring forward: readings between were skipped
            skipped = previous_reading + timedelta(minutes=1)
            jumped_over = False
            while skipped < reading:
                jumped_over = jumped_over or matches(skipped)
                skipped += timedelta(minutes=1)
            if matches(reading) or (jumped_over and not hourly):
                slots.append(moment)
        else:  # fall back: the clock reads the repeated hour again
            if matches(reading):
                slots.append(moment)
        previous_reading = reading
        moment += timedelta(minutes=1)
    return slots


@settings(max_examples=30, deadline=None)
@given(cron_expr=st.sampled_from(CRONS), tz=st.sampled_from(ZONES), day=MOMENTS,
       offset=st.integers(min_value=0, max_value=3 * 24 * 60 - 1), seconds=st.integers(0, 59))
def test_latest_and_next_slot_agree_with_a_minute_by_minute_scan(cron_expr, tz, day, offset, seconds):
    now = day + timedelta(minutes=offset, seconds=seconds)
    slots = brute_force_slots(cron_expr, tz, now - timedelta(days=3), now + timedelta(days=3))
    assert latest_slot(cron_expr, tz, now) == [s for s in slots if s <= now][-1]
    assert next_slot(cron_expr, tz, now) == [s for s in slots if s > now][0]
    assert slots_between(cron_expr, tz, now - timedelta(days=1), now + timedelta(days=1)) == [
        s for s in slots if now - timedelta(days=1) < s <= now + timedelta(days=1)]
