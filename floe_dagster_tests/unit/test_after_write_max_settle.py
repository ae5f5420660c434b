"""An after-write rule's ``maxSettle`` (issue 34, deliverable 5): a writer that never pauses for ``settle``
cannot starve its table. Pure: the planner with an injected clock, and the writer's materializations as a
list the lookup reads (the event log's part, scheduling/writer_facts.first_write_lookup)."""

from __future__ import annotations

from datetime import datetime, timedelta

from floe_dagster.core.schedules.after_write import DEFAULT_MAX_SETTLE, AfterWrite, after_write_due
from floe_dagster.core.operations import Operation
from floe_dagster.core.plan.planner import PlanInput, SchedulerSettings, plan
from floe_dagster.core.policies.policy import parse_policies_text
from floe_dagster.core.schedules.schedule import parse_schedule
from floe_dagster.core.basics.validation import standalone
from floe_dagster.core.schedules.writers import SOURCE_RULE, Writer
from floe_dagster_tests.unit.test_planner import NOW, RDF, A, code, decision, hist, metrics, policies, policy

WRITER = ("warehouse", "sales", "a")
START = NOW - timedelta(hours=3)  # the last success; the writer starts writing a minute later
EVERY = timedelta(minutes=2)


class Log:
    """A writer's materializations (its event log), and the lookups the planner made of it."""

    def __init__(self, times: list[datetime]):
        self.times = sorted(times)
        self.asked: list[tuple[tuple[str, ...], datetime | None]] = []

    def first_write_after(self, key, after):
        self.asked.append((key, after))
        return next((t for t in self.times if after is None or t > after), None)

    def newest(self, now: datetime) -> Writer | None:
        seen = [t for t in self.times if t <= now]
        return Writer(WRITER, SOURCE_RULE, len(seen), "writer-run", seen[-1]) if seen else None


def writes_every(step: timedelta, first: datetime, until: datetime) -> Log:
    times, at = [], first
    while at <= until:
        times.append(at)
        at += step
    return Log(times)


def tick(log: Log, now: datetime, schedule: dict | None = None, last_success: datetime = START):
    newest = log.newest(now)
    data = PlanInput(
        now=now, catalog_tables=[A], loaded_tables=frozenset({A}),
        policies=policies(policy(schedules={RDF: schedule or {"afterWrite": {}}})),
        limits=SchedulerSettings(), metrics={A: metrics(A)},
        history={(A.qualified, RDF): hist(last_success_start=last_success, last_run_succeeded=True)},
        writers={A.qualified: (newest,)} if newest else {}, first_write_after=log.first_write_after)
    return decision(plan(data), A, RDF)


def test_a_writer_every_two_minutes_for_two_hours_makes_the_work_due_at_the_first_hour_mark():
    first = START + timedelta(minutes=1)
    log = writes_every(EVERY, first, first + timedelta(hours=2))
    verdicts = {}
    for minute in range(1, 121):  # the sensor ticks every minute; nothing is maintained meanwhile
        now = START + timedelta(minutes=minute)
        verdicts[minute] = tick(log, now)
    due = [minute for minute, d in verdicts.items() if d.decision == "run"]
    assert due[0] == 61  # the first write (minute 1) is one hour old: forced although the writer never paused
    d = verdicts[61]
    assert d.trigger == "after_write" and d.slot == f"write:{log.newest(START + timedelta(minutes=61)).last_storage_id}"
    assert d.reasons[0].startswith(
        f"after_write: forced after maxSettle PT1H although the writer keeps writing (oldest unprocessed write at "
        f"{first.isoformat()}, 1h ago; newest: warehouse/sales/a materialized at ")
    assert d.reasons[0].endswith("(afterWrite ANY_UPDATED, settle PT5M, maxSettle PT1H)")
    settling = verdicts[30]
    assert code(settling) == "not_due" and "settling: warehouse/sales/a materialized at" in settling.reasons[0]
    # Before the last success is an hour old, the event log is never asked: no write since can be that old.
    assert all(after >= START for _, after in log.asked) and len(log.asked) == 120 - 60 + 1


def test_the_next_run_starts_the_clock_again():
    log = writes_every(EVERY, START - timedelta(hours=5), NOW + timedelta(hours=2))
    ran_at = NOW - timedelta(minutes=30)  # maintained half an hour ago; the writer kept writing
    assert code(tick(log, NOW, last_success=ran_at)) == "not_due"
    later = tick(log, ran_at + timedelta(hours=1, minutes=2), last_success=ran_at)
    assert later.decision == "run" and "forced after maxSettle PT1H" in later.reasons[0]


def test_settle_is_unchanged_when_the_writer_pauses():
    # Bursts: a write every 2 minutes for 20 minutes, then a 10-minute pause; settle (PT5M) fires in each pause.
    times = [START + timedelta(minutes=30 * burst + 2 * i) for burst in range(6) for i in range(10)]
    log = Log(times)
    pause = START + timedelta(minutes=18 + 6)  # 6 minutes after the first burst's last write
    d = tick(log, pause)
    assert d.decision == "run" and d.reasons[0].startswith("after_write: warehouse/sales/a materialized at")
    assert code(tick(log, START + timedelta(minutes=10))) == "not_due"  # mid-burst, within maxSettle
    # A first write after a long silence settles as before: the last success is old, but its write is new.
    quiet = Log([NOW - timedelta(minutes=1)])
    held = tick(quiet, NOW)
    assert code(held) == "not_due" and held.next_eligible == NOW + timedelta(minutes=4)
    assert "forced at " + (NOW + timedelta(minutes=59)).isoformat() + " by maxSettle" in held.reasons[0]


def test_a_longer_max_settle_and_the_writer_lookup_unknown():
    log = writes_every(EVERY, START + timedelta(minutes=1), NOW)
    three_hours = {"afterWrite": {"maxSettle": "PT3H"}}
    assert code(tick(log, NOW - timedelta(minutes=1), three_hours)) == "not_due"
    assert tick(log, NOW + timedelta(minutes=1), three_hours).decision == "run"
    # Without the event log (None, or a writer it does not know) nothing is forced: settle alone decides.
    rule = AfterWrite()
    newest = Writer(WRITER, SOURCE_RULE, 9, "r", NOW - timedelta(minutes=1))
    for lookup in (None, lambda key, after: None):
        verdict = after_write_due(rule, [newest], START, NOW, lookup)
        assert not verdict.due and verdict.next_eligible == NOW + timedelta(minutes=4)


def test_max_settle_is_read_in_both_formats_and_checked():
    at = standalone()
    assert parse_schedule(at, {"afterWrite": {}}).after_write == AfterWrite(max_settle=DEFAULT_MAX_SETTLE)
    assert parse_schedule(at, {"afterWrite": {"settle": "PT2H"}}).after_write.max_settle == timedelta(hours=2)
    assert parse_schedule(at, {"afterWrite": {"maxSettle": "pt30m"}}).after_write.to_json() == {
        "settle": "PT5M", "maxSettle": "PT30M", "dependency": "ANY_UPDATED"}
    assert not at.problems.errors
    loader = parse_policies_text("""
        policies:
          - name: p
            pattern: "db.*"
            rewrite-data-files: {}
            rewrite-data-files-schedule: {after-write: {settle: PT10M, max-settle: PT2H}}
    """).get("p")
    assert loader.schedule(Operation.REWRITE_DATA_FILES).after_write == AfterWrite(
        timedelta(minutes=10), max_settle=timedelta(hours=2))
    for raw, message in (
            ({"settle": "PT10M", "maxSettle": "PT5M"},
             "afterWrite.maxSettle: PT5M is shorter than settle PT10M: maxSettle forces the work once the oldest "
             "unprocessed write is that old, so it must be at least settle"),
            ({"maxSettle": "-PT1H"}, "afterWrite.maxSettle: expected a duration of zero or longer such as PT1H"),
            ({"maxSettle": 60}, "afterWrite.maxSettle: expected a duration of zero or longer such as PT1H, got 60")):
        at = standalone()
        parse_schedule(at, {"afterWrite": raw})
        assert any(e.startswith(message) for e in at.problems.errors), (raw, at.problems.errors)


def test_a_policy_file_names_the_policy_and_the_field():
    import pytest

    from floe_dagster.core.policies.policy import PolicyError

    with pytest.raises(PolicyError) as raised:
        parse_policies_text("""
            name: sales
            tablePattern: "db.*"
            rewriteDataFiles: {}
            rewriteDataFilesSchedule: {afterWrite: {settle: PT10M, maxSettle: PT1M}}
        """)
    assert "sales" in str(raised.value) and "afterWrite.maxSettle: PT1M is shorter than settle PT10M" in str(
        raised.value)


def test_an_after_write_only_schedule_is_not_warned_as_due_every_tick():
    text = """
        name: sales
        tablePattern: "db.*"
        rewriteDataFiles: {}
        rewriteDataFilesSchedule: {afterWrite: {}}
    """
    assert not [w for w in parse_policies_text(text).warnings if "due on every tick" in w]
    bare = parse_policies_text(text.replace("{afterWrite: {}}", "{}")).warnings
    assert any("due on every tick" in w for w in bare)


def test_with_all_updated_it_forces_only_once_every_writer_has_written():
    other = ("etl", "a")
    busy = writes_every(EVERY, START + timedelta(minutes=1), NOW)
    once = NOW - timedelta(minutes=30)
    writes = {WRITER: busy.times, other: [once]}

    def first_write_after(key, after):
        return next((t for t in writes[key] if after is None or t > after), None)

    rule = AfterWrite(dependency="ALL_UPDATED")
    newest = busy.newest(NOW)
    verdict = after_write_due(rule, [newest, Writer(other, SOURCE_RULE, 1, "r", once)], START, NOW, first_write_after)
    assert verdict.due and "forced after maxSettle PT1H" in verdict.detail  # the busy writer's first write, 3 h ago
    waiting = after_write_due(rule, [newest, Writer(other, SOURCE_RULE)], START, NOW, first_write_after)
    assert not waiting.due and waiting.detail.startswith("no new write by etl/a")
