"""Schedules: parsing, windows and allowed days in a time zone, and the due rules (docs/automation.md)."""

from __future__ import annotations

from datetime import datetime, time, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from floe_dagster.core.schedules.cron import slots_between
from floe_dagster.core.schedules.schedule import Schedule, schedule_due

UTC = timezone.utc
BERLIN = ZoneInfo("Europe/Berlin")


def utc(*args) -> datetime:
    return datetime(*args, tzinfo=UTC)


def berlin(*args, fold: int = 0) -> datetime:
    return datetime(*args, tzinfo=BERLIN, fold=fold)


# -- parsing ------------------------------------------------------------------------------------


def test_parse_all_fields():
    schedule = Schedule.from_mapping({
        "cronExpression": "0 0 2 ? * MON-FRI", "windowStart": "01:00", "windowEnd": "05:30",
        "allowedDays": "monday, Fri", "timezone": "Europe/Berlin", "timeout": 2.5, "enforceWindowEnd": True,
        "priority": 7, "enabled": True,
    })
    assert schedule.cron_5field == "0 2 * * MON-FRI"
    assert schedule.cron_expression == "0 0 2 ? * MON-FRI"
    assert (schedule.window_start, schedule.window_end) == (time(1), time(5, 30))
    assert schedule.allowed_days == frozenset({0, 4})
    assert (schedule.timezone, schedule.timeout_hours, schedule.enforce_window_end, schedule.priority) == (
        "Europe/Berlin", 2.5, True, 7)
    assert schedule.kind == "cron"


def test_defaults():
    schedule = Schedule.from_mapping({})
    assert schedule.enabled and schedule.timezone == "UTC" and schedule.timeout_hours == 1.0
    assert schedule.priority == 0 and not schedule.enforce_window_end
    assert schedule.kind == "condition"  # neither cron nor interval


@pytest.mark.parametrize("value, expected", [
    (1, timedelta(days=1)), (7, timedelta(days=7)), ("PT6H", timedelta(hours=6)), ("P7D", timedelta(days=7)),
    ("PT30M", timedelta(minutes=30)), ("p1dt12h", timedelta(days=1, hours=12)),
])
def test_interval_in_days_or_iso(value, expected):
    schedule = Schedule.from_mapping({"interval": value})
    assert schedule.interval == expected and schedule.kind == "interval"


@pytest.mark.parametrize("raw, message", [
    ({"interval": 0}, "at least 1 day"),
    ({"interval": 1.5}, "whole days or an ISO-8601"),
    ({"interval": "P1W"}, "ISO-8601"),
    ({"interval": "PT0S"}, "longer than zero"),
    ({"windowStart": "24:00"}, "HH:mm"),
    ({"windowEnd": "2:3"}, "HH:mm"),
    ({"windowStart": 150}, "quote it"),
    ({"allowedDays": ["MONDAY", "Someday"]}, "unknown day 'Someday'"),
    ({"timezone": "Mars/Olympus"}, "unknown time zone"),
    ({"timeout": 0}, "greater than 0"),
    ({"enabled": "yes"}, "true or false"),
    ({"cronExpression": "0 0 2 L * ?"}, "'L'"),
    ({"cronExpresion": "0 2 * * *"}, "did you mean 'cronExpression'"),
])
def test_bad_fields(raw, message):
    with pytest.raises(ValueError, match=message):
        Schedule.from_mapping(raw)


def test_interval_wins_over_cron_with_a_warning():
    from floe_dagster.core.schedules.schedule import parse_schedule
    from floe_dagster.core.basics.validation import standalone

    at = standalone()
    schedule = parse_schedule(at, {"interval": "PT6H", "cronExpression": "0 2 * * *"})
    assert schedule.kind == "interval"
    assert not at.problems.errors
    assert any("interval wins" in w for w in at.problems.warnings)


# -- windows and days -----------------------------------------------------------------------------


def window(start=None, end=None, days=None, tz="UTC") -> Schedule:
    raw = {"timezone": tz}
    if start:
        raw["windowStart"] = start
    if end:
        raw["windowEnd"] = end
    if days:
        raw["allowedDays"] = days
    return Schedule.from_mapping(raw)


@pytest.mark.parametrize("start, end, clock, inside", [
    ("02:00", "06:00", "02:00", True),  # start inclusive
    ("02:00", "06:00", "05:59", True),
    ("02:00", "06:00", "06:00", False),  # end exclusive
    ("02:00", "06:00", "01:59", False),
    ("22:00", "02:00", "23:30", True),  # crossing midnight
    ("22:00", "02:00", "01:59", True),
    ("22:00", "02:00", "02:00", False),
    ("22:00", "02:00", "12:00", False),
    ("03:00", "03:00", "12:00", True),  # equal: always open
    ("20:00", None, "20:00", True),  # only a start: until midnight
    ("20:00", None, "19:59", False),
    (None, "04:00", "00:00", True),  # only an end: from midnight
    (None, "04:00", "04:00", False),
    (None, None, "12:34", True),
])
def test_window_membership(start, end, clock, inside):
    hours, minutes = map(int, clock.split(":"))
    assert window(start, end).in_window(utc(2026, 6, 10, hours, minutes)) is inside


def test_allowed_days_use_the_day_the_window_started():
    # Friday 22:00 until Saturday 02:00 belongs to Friday
    friday_only = window("22:00", "02:00", "FRIDAY")
    assert friday_only.is_open(utc(2026, 6, 12, 23))  # Friday
    assert friday_only.is_open(utc(2026, 6, 13, 1, 30))  # Saturday morning, Friday's window
    assert not friday_only.is_open(utc(2026, 6, 13, 22, 30))  # Saturday's window
    assert friday_only.closed_reason(utc(2026, 6, 13, 22, 30)) == "day_not_allowed"
    assert friday_only.closed_reason(utc(2026, 6, 12, 12)) == "window_closed"
    # Saturday's window starts at 22:00, Friday's early-morning hours belong to Thursday
    assert not window("22:00", "02:00", ["sat"]).is_open(utc(2026, 6, 12, 1))


def test_windows_read_the_schedule_time_zone():
    schedule = window("02:00", "04:00", tz="Europe/Berlin")
    assert schedule.is_open(utc(2026, 6, 10, 0, 30))  # 02:30 CEST
    assert not schedule.is_open(utc(2026, 6, 10, 2, 30))  # 04:30 CEST
    assert schedule.is_open(utc(2026, 1, 10, 1, 30))  # 02:30 CET


def test_next_open():
    schedule = window("02:00", "06:00", "MON,WED")
    assert schedule.next_open(utc(2026, 6, 15, 3)) == utc(2026, 6, 15, 3)  # open now (Monday)
    assert schedule.next_open(utc(2026, 6, 15, 7)) == utc(2026, 6, 17, 2)  # Monday evening → Wednesday
    assert schedule.next_open(utc(2026, 6, 16, 1, 59, 30)) == utc(2026, 6, 17, 2)  # Tuesday not allowed


def test_next_open_across_spring_forward_opens_at_the_jump():
    # Berlin 2026-03-29: 02:00 jumps to 03:00. A 02:15-04:00 window opens at the jump (03:00 CEST).
    schedule = window("02:15", "04:00", tz="Europe/Berlin")
    assert schedule.next_open(utc(2026, 3, 28, 23)) == utc(2026, 3, 29, 1, 0)
    # A window inside the missing hour does not open that day.
    gap_only = window("02:15", "02:45", tz="Europe/Berlin")
    assert gap_only.next_open(utc(2026, 3, 28, 23)) == berlin(2026, 3, 30, 2, 15).astimezone(UTC)


def test_next_open_across_fall_back_reopens_in_the_repeated_hour():
    # Berlin 2026-10-25: 03:00 CEST falls back to 02:00 CET. A 02:15-02:45 window opens twice.
    schedule = window("02:15", "02:45", tz="Europe/Berlin")
    first = berlin(2026, 10, 25, 2, 15, fold=0).astimezone(UTC)
    second = berlin(2026, 10, 25, 2, 15, fold=1).astimezone(UTC)
    assert (first, second) == (utc(2026, 10, 25, 0, 15), utc(2026, 10, 25, 1, 15))
    assert schedule.next_open(utc(2026, 10, 24, 20)) == first
    assert schedule.next_open(utc(2026, 10, 25, 0, 50)) == second
    # A window ending at 02:30 reopens when the clock falls back to 02:00.
    until_0230 = window(None, "02:30", tz="Europe/Berlin")
    assert until_0230.next_open(utc(2026, 10, 25, 0, 40)) == utc(2026, 10, 25, 1, 0)


def test_window_end_after():
    assert window("02:00", "06:00").window_end_after(utc(2026, 6, 10, 3)) == utc(2026, 6, 10, 6)
    assert window("22:00", "02:00").window_end_after(utc(2026, 6, 10, 23)) == utc(2026, 6, 11, 2)
    assert window("22:00", "02:00").window_end_after(utc(2026, 6, 11, 1)) == utc(2026, 6, 11, 2)
    assert window("20:00").window_end_after(utc(2026, 6, 10, 21)) == utc(2026, 6, 11, 0)
    assert window().window_end_after(utc(2026, 6, 10, 21)) is None
    assert window("02:00", "06:00").window_end_after(utc(2026, 6, 10, 7)) is None  # not open


# -- due ------------------------------------------------------------------------------------------


def test_cron_due_until_a_success_starts_at_or_after_the_slot():
    schedule = Schedule.from_mapping({"cronExpression": "0 2 * * *"})
    now = utc(2026, 6, 10, 9)
    due = schedule_due(schedule, None, now)  # never run: the latest slot is due
    assert (due.due, due.trigger, due.slot, due.next_eligible) == (True, "cron", utc(2026, 6, 10, 2), now)
    assert schedule_due(schedule, utc(2026, 6, 9, 2, 0), now).due  # yesterday's run
    assert schedule_due(schedule, utc(2026, 6, 10, 1, 59), now).due  # started before the slot
    done = schedule_due(schedule, utc(2026, 6, 10, 2, 0), now)  # started at the slot
    assert not done.due and done.blocked == "not_due" and done.next_eligible == utc(2026, 6, 11, 2)
    assert done.slot_key == "2026-06-10T02:00:00+00:00"


def test_missed_cron_slots_coalesce_into_the_latest():
    schedule = Schedule.from_mapping({"cronExpression": "0 * * * *"})
    due = schedule_due(schedule, utc(2026, 6, 10, 1, 0), utc(2026, 6, 10, 9, 30))  # 8 slots missed
    assert due.due and due.slot == utc(2026, 6, 10, 9)
    assert not schedule_due(schedule, utc(2026, 6, 10, 9, 31), utc(2026, 6, 10, 9, 45)).due


def test_interval_due():
    schedule = Schedule.from_mapping({"interval": "PT6H"})
    now = utc(2026, 6, 10, 12)
    first = schedule_due(schedule, None, now)
    assert first.due and first.trigger == "interval" and first.slot is None and first.slot_key == "interval:first"
    assert schedule_due(schedule, now - timedelta(hours=6), now).due  # exactly elapsed
    waiting = schedule_due(schedule, now - timedelta(hours=5), now)
    assert not waiting.due and waiting.next_eligible == now + timedelta(hours=1)


def test_condition_only_is_due_every_tick():
    schedule = Schedule.from_mapping({})
    now = utc(2026, 6, 10, 12)
    due = schedule_due(schedule, now - timedelta(minutes=1), now)
    assert due.due and due.trigger == "condition" and due.slot is None
    assert due.slot_key == f"condition:{(now - timedelta(minutes=1)).isoformat()}"


def test_a_disabled_schedule_is_skipped():
    schedule = Schedule.from_mapping({"interval": 1, "enabled": False})
    due = schedule_due(schedule, None, utc(2026, 6, 10))
    assert not due.due and due.blocked == "schedule_disabled" and due.next_eligible is None


def test_out_of_window_work_is_deferred_to_the_next_open_moment():
    schedule = Schedule.from_mapping({"cronExpression": "0 2 * * *", "windowStart": "01:00", "windowEnd": "05:00",
                                      "allowedDays": "MON,FRI"})
    sunday_noon = utc(2026, 6, 14, 12)
    due = schedule_due(schedule, None, sunday_noon)
    assert not due.due and due.rule_due and due.blocked == "window_closed"
    assert due.next_eligible == utc(2026, 6, 15, 1)  # Monday 01:00
    # Inside the window but on a day not allowed
    due = schedule_due(schedule, None, utc(2026, 6, 16, 3))  # Tuesday
    assert due.blocked == "day_not_allowed" and due.next_eligible == utc(2026, 6, 19, 1)
    # Not due and closed: the window is reported first (the gate order of docs/automation.md). The next slot (Tuesday
    # 02:00) waits, coalesced with Wednesday's and Thursday's, for Friday's window at 01:00.
    due = schedule_due(schedule, utc(2026, 6, 15, 2), utc(2026, 6, 15, 12))
    assert due.blocked == "window_closed" and not due.rule_due and due.next_eligible == utc(2026, 6, 19, 1)
    assert schedule_due(schedule, utc(2026, 6, 15, 2), utc(2026, 6, 19, 1)).slot == utc(2026, 6, 18, 2)


def test_interval_next_eligible_waits_for_the_window():
    schedule = Schedule.from_mapping({"interval": "PT1H", "windowStart": "22:00", "windowEnd": "23:00"})
    due = schedule_due(schedule, utc(2026, 6, 10, 22, 30), utc(2026, 6, 10, 22, 40))
    assert not due.due and due.next_eligible == utc(2026, 6, 11, 22)


def test_dst_cron_due_slots():
    schedule = Schedule.from_mapping({"cronExpression": "30 2 * * *", "timezone": "Europe/Berlin"})
    spring = schedule_due(schedule, utc(2026, 3, 28, 1, 30), utc(2026, 3, 29, 1, 0))
    assert spring.due and spring.slot == utc(2026, 3, 29, 1, 0)  # 03:00 CEST
    fall = schedule_due(schedule, utc(2026, 10, 24, 0, 30), utc(2026, 10, 25, 0, 45))  # first 02:30 passed
    assert not fall.due and fall.next_eligible == utc(2026, 10, 25, 1, 30)  # the second 02:30


def test_effective_interval_and_slot_gap():
    assert Schedule.from_mapping({"interval": 2}).effective_interval() == timedelta(days=2)
    assert Schedule.from_mapping({"cronExpression": "*/30 * * * *"}).effective_interval() == timedelta(minutes=30)
    assert Schedule.from_mapping({}).effective_interval() is None


# -- properties -----------------------------------------------------------------------------------

ZONES = ["Europe/Berlin", "America/New_York", "Australia/Sydney", "America/Santiago", "Australia/Lord_Howe", "UTC"]
# Days around the 2026 DST changes of those zones.
DST_DAYS = [utc(2026, 3, 8), utc(2026, 3, 29), utc(2026, 4, 5), utc(2026, 9, 6), utc(2026, 10, 4), utc(2026, 10, 25),
            utc(2026, 11, 1), utc(2026, 7, 1)]
TIMES = st.one_of(st.none(), st.sampled_from(["00:00", "00:30", "01:00", "01:45", "02:00", "02:15", "02:30", "03:00",
                                               "06:00", "12:00", "22:00", "23:30"]))
DAY_SETS = st.sets(st.sampled_from(["MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN"]), max_size=3)


def brute_force_open(start: str | None, end: str | None, days: set[str], tz: str, moment: datetime) -> bool:
    """Membership by arithmetic on minutes of the local day, independent of Schedule's code."""
    local = moment.astimezone(ZoneInfo(tz))
    minute = local.hour * 60 + local.minute + local.second / 60
    s = int(start[:2]) * 60 + int(start[3:]) if start else None
    e = int(end[:2]) * 60 + int(end[3:]) if end else None
    day = local.date()
    if s is None and e is None or s == e:
        inside = True
    elif s is not None and e is not None and s < e:
        inside = s <= minute < e
    elif s is not None and e is not None:  # crosses midnight
        inside = minute >= s or minute < e
        if minute < e:
            day = day - timedelta(days=1)
    elif s is not None:
        inside = minute >= s
    else:
        inside = minute < e
    names = ["MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN"]
    return inside and (not days or names[day.weekday()] in days)


@settings(max_examples=60, deadline=None)
@given(start=TIMES, end=TIMES, days=DAY_SETS, tz=st.sampled_from(ZONES), day=st.sampled_from(DST_DAYS),
       offset=st.integers(0, 2 * 24 * 3600))
def test_window_membership_across_dst_matches_brute_force(start, end, days, tz, day, offset):
    assume(not (start is None and end == "00:00"))
    schedule = window(start, end, ",".join(sorted(days)) or None, tz)
    for step in range(0, 6 * 3600, 600):  # a 6-hour stretch, every 10 minutes
        moment = day + timedelta(seconds=offset + step)
        assert schedule.is_open(moment) is brute_force_open(start, end, days, tz, moment), moment


@settings(max_examples=40, deadline=None)
@given(start=TIMES, end=TIMES, days=DAY_SETS, tz=st.sampled_from(ZONES), day=st.sampled_from(DST_DAYS),
       offset=st.integers(0, 2 * 24 * 3600))
def test_next_open_is_the_first_open_minute_never_before_now(start, end, days, tz, day, offset):
    assume(not (start is None and end == "00:00"))  # an empty window, refused by validation
    schedule = window(start, end, ",".join(sorted(days)) or None, tz)
    now = day + timedelta(seconds=offset)
    opened = schedule.next_open(now)
    assert opened >= now
    assert schedule.is_open(opened)
    if opened > now:  # closed until then: check by a minute-by-minute scan
        assume(opened - now < timedelta(days=3))
        moment = now.replace(second=0, microsecond=0) + timedelta(minutes=1)
        while moment < opened:
            assert not brute_force_open(start, end, days, tz, moment), moment
            moment += timedelta(minutes=1)


RULES = st.one_of(
    st.builds(lambda c: {"cronExpression": c}, st.sampled_from(["30 2 * * *", "*/20 * * * *", "0 */6 * * *"])),
    st.builds(lambda i: {"interval": i}, st.sampled_from(["PT1H", "PT6H", 1, "PT30M"])),
    st.just({}),
)


@settings(max_examples=80, deadline=None)
@given(rule=RULES, start=TIMES, end=TIMES, days=DAY_SETS, tz=st.sampled_from(ZONES), day=st.sampled_from(DST_DAYS),
       offset=st.integers(0, 2 * 24 * 3600), since=st.one_of(st.none(), st.integers(0, 3 * 24 * 3600)))
def test_next_eligible_is_never_before_now_and_is_eligible(rule, start, end, days, tz, day, offset, since):
    assume(not (start is None and end == "00:00"))
    raw = dict(rule, timezone=tz)
    if start:
        raw["windowStart"] = start
    if end:
        raw["windowEnd"] = end
    if days:
        raw["allowedDays"] = sorted(days)
    schedule = Schedule.from_mapping(raw)
    now = day + timedelta(seconds=offset)
    last = None if since is None else now - timedelta(seconds=since)
    due = schedule_due(schedule, last, now)
    assert due.next_eligible is not None and due.next_eligible >= now
    assert due.due == (due.next_eligible == now and due.blocked is None)
    later = schedule_due(schedule, last, due.next_eligible)  # at that moment it is due and open
    assert later.due, (due, later)


def _dst_changes() -> list[tuple[str, datetime]]:
    """(zone, instant) of each 2026 DST change of a few zones, found with the zone database."""
    from floe_dagster.core.basics.localtime import transitions_on

    changes = []
    for tz in ("Europe/Berlin", "America/New_York", "Australia/Sydney", "America/Santiago", "Australia/Lord_Howe"):
        day = datetime(2026, 1, 1).date()
        while day.year == 2026:
            changes.extend((tz, moment) for moment in transitions_on(day, tz))
            day += timedelta(days=1)
    return changes


DST_CHANGES = _dst_changes()


def test_the_zone_database_gives_two_changes_a_year():
    assert len(DST_CHANGES) == 10
    assert ("Europe/Berlin", utc(2026, 3, 29, 1)) in DST_CHANGES
    assert ("Europe/Berlin", utc(2026, 10, 25, 1)) in DST_CHANGES


@settings(max_examples=15, deadline=None)
@given(cron_expr=st.sampled_from(["30 2 * * *", "*/20 * * * *", "0 */2 * * *", "30 1,2 * * *", "0 3 * * *",
                                  "45 1 * * *", "0 0 * * *", "*/7 * * * *"]),
       change=st.sampled_from(DST_CHANGES))
def test_a_cron_slot_is_never_run_twice_across_a_dst_change(cron_expr, change):
    """Tick every minute from 5 hours before a DST change to 5 hours after; each due tick runs
    successfully at once. Every slot in the stretch is admitted exactly once, and nothing else."""
    tz, moment_of_change = change
    schedule = Schedule.from_mapping({"cronExpression": cron_expr, "timezone": tz})
    start = moment_of_change - timedelta(hours=5)
    end = moment_of_change + timedelta(hours=5)
    last_success = start  # the slot before the stretch already ran
    admitted = []
    moment = start
    while moment <= end:
        due = schedule_due(schedule, last_success, moment)
        if due.due:
            admitted.append(due.slot)
            last_success = moment  # a successful run started at this tick
        moment += timedelta(minutes=1)
    assert len(admitted) == len(set(admitted))
    assert admitted == slots_between(cron_expr, tz, start, end)
    if cron_expr in ("30 2 * * *", "0 3 * * *") and tz == "Europe/Berlin":
        assert len(admitted) == 1  # one slot that day, never two
