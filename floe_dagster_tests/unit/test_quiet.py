"""The quiet period (issue 21, deliver 2): a schedule's ``quietFor`` and ``maxQuietWait``, the planner's
``not_quiet`` gate right after the trigger conditions, when the work first became due, forcing after
``maxQuietWait``, no health, and the newest commit of another writer as the health collector reads it.
Pure planner tests with an injected ``now`` (the helpers of test_planner.py)."""

from __future__ import annotations

import json
import sqlite3
import textwrap
from dataclasses import replace
from datetime import datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyiceberg.table.snapshots import Operation as SnapshotOperation
from pyiceberg.table.snapshots import Snapshot, Summary

from floe_dagster.core.basics.durations import format_wait
from floe_dagster.core.operations import ALL_OPERATIONS
from floe_dagster.core.plan.planner import PlanInput, SchedulerSettings, plan
from floe_dagster.core.policies.policy import validate_policy_paths
from floe_dagster.core.schedules.quiet import DEFAULT_MAX_QUIET_WAIT, QuietPeriod
from floe_dagster.core.schedules.schedule import parse_schedule
from floe_dagster.core.basics.validation import standalone
from floe_dagster.iceberg.metadata_reduction import newest_foreign_commit
from floe_dagster.iceberg.metrics_cache import RECORD_VERSION, MetricsCache
from floe_dagster_tests.unit.test_planner import (
    EXP,
    NOW,
    RDF,
    A,
    B,
    code,
    decision,
    hist,
    metrics,
    ms,
    policies,
    policy,
    run,
)

QUIET = {"quietFor": "PT10M", "maxQuietWait": "PT6H"}
INTERVAL_QUIET = {RDF: {"interval": "PT6H", **QUIET}}
# Due since NOW - 1h: the last success 7 hours ago, interval 6 hours.
DUE_SINCE = NOW - timedelta(hours=1)
SUCCEEDED = {(A.qualified, RDF): hist(last_success_start=NOW - timedelta(hours=7), last_run_succeeded=True)}


def written(at: datetime, operation: str = "overwrite", **changes):
    """A table whose newest commit by another writer was at ``at``."""
    return metrics(A, newest_foreign_commit_ms=ms(at), newest_foreign_commit_operation=operation, **changes)


def quiet_plan(schedules=None, *, now: datetime = NOW, health=..., history=None, **kwargs):
    health = {A: written(NOW - timedelta(minutes=5, seconds=50))} if health is ... else health
    return decision(run(policies(policy(schedules=schedules or INTERVAL_QUIET, **kwargs)), now=now, health=health,
                        history=SUCCEEDED if history is None else history), A)


# -- the gate ---------------------------------------------------------------------------------------


def test_a_recent_commit_by_another_writer_holds_the_run_until_quiet():
    d = quiet_plan()
    assert code(d) == "not_quiet"
    last = (NOW - timedelta(minutes=5, seconds=50)).isoformat()
    forced_at = DUE_SINCE + timedelta(hours=6)
    assert d.reasons == (
        f"not_quiet: quiet in 4m 10s: last commit by another writer (overwrite) at {last} (quietFor PT10M); "
        f"forced in 5h at {forced_at.isoformat()} (maxQuietWait PT6H, due since {DUE_SINCE.isoformat()})",)
    assert d.next_eligible == NOW + timedelta(minutes=4, seconds=10)
    assert d.trigger == "interval" and d.rank is None
    state = d.quiet.to_json()
    assert (state["quiet"], state["forced"], state["secondsUntilQuiet"], state["secondsUntilForced"]) == (
        False, False, 250.0, 5 * 3600.0)
    assert (state["lastForeignOperation"], state["quietFor"], state["maxQuietWait"]) == ("overwrite", "PT10M", "PT6H")


def test_once_quiet_the_run_is_admitted_and_says_so():
    later = NOW + timedelta(minutes=4, seconds=10)
    d = quiet_plan(now=later)
    assert d.decision == "run" and d.trigger == "interval" and d.next_eligible == later
    last = (NOW - timedelta(minutes=5, seconds=50)).isoformat()
    assert d.reasons[1] == f"quiet: last commit by another writer (overwrite) at {last}, 10m ago (quietFor PT10M)"
    assert d.quiet.to_json()["quiet"] is True
    one_second_earlier = quiet_plan(now=later - timedelta(seconds=1))
    assert code(one_second_earlier) == "not_quiet" and one_second_earlier.reasons[0].startswith("not_quiet: quiet in 1s:")


def test_a_table_never_quiet_is_forced_after_max_quiet_wait():
    forced_at = DUE_SINCE + timedelta(hours=6)
    for now, expected in ((forced_at - timedelta(seconds=1), "skip"), (forced_at, "run")):
        health = {A: written(now - timedelta(seconds=30), "delete")}  # a writer commits every minute
        d = quiet_plan(now=now, health=health)
        assert d.decision == expected, d.reasons
    assert d.reasons[1].startswith(f"forced after PT6H: never quiet; due since {DUE_SINCE.isoformat()}, "
                                   f"last commit by another writer (delete) at ")
    assert d.quiet.forced and d.quiet.to_json()["forced"] and not d.quiet.to_json()["quiet"]
    assert d.trigger == "interval"


def test_no_commit_by_another_writer_is_quiet():
    d = quiet_plan(health={A: metrics(A)})  # only floe's replace commits retained (or none)
    assert d.decision == "run"
    assert d.reasons[1] == "quiet: no commit by another writer among the table's snapshots (quietFor PT10M)"


def test_without_quiet_for_the_gate_is_not_there():
    d = quiet_plan({RDF: {"interval": "PT6H"}})
    assert d.decision == "run" and d.quiet is None and len(d.reasons) == 1


def test_the_quiet_period_is_per_operation_schedule():
    schedules = {RDF: {"interval": "PT6H", **QUIET}, EXP: {"interval": "PT6H"}}
    history = {**SUCCEEDED, (A.qualified, EXP): SUCCEEDED[(A.qualified, RDF)]}
    result = run(policies(policy(schedules=schedules)), health={A: written(NOW - timedelta(minutes=1))}, history=history)
    assert code(decision(result, A, RDF)) == "not_quiet"
    assert decision(result, A, EXP).decision == "run" and decision(result, A, EXP).quiet is None


def test_default_max_quiet_wait_is_a_day():
    d = quiet_plan({RDF: {"interval": "PT6H", "quietFor": "PT10M"}})
    assert code(d) == "not_quiet" and DEFAULT_MAX_QUIET_WAIT == timedelta(days=1)
    assert d.quiet.forced_at == DUE_SINCE + timedelta(days=1)
    assert "maxQuietWait P1D" in d.reasons[0]


# -- when the work first became due -------------------------------------------------------------------


def test_cron_is_due_since_its_slot():
    slot = NOW - timedelta(hours=2)  # 10:00 daily; last success yesterday
    history = {(A.qualified, RDF): hist(last_success_start=slot - timedelta(days=1), last_run_succeeded=True)}
    schedules = {RDF: {"cronExpression": "0 10 * * *", "quietFor": "PT10M", "maxQuietWait": "PT2H"}}
    health = {A: written(NOW - timedelta(minutes=1))}
    d = quiet_plan(schedules, history=history, health=health)
    assert d.decision == "run" and d.quiet.due_since == slot and d.reasons[1].startswith("forced after PT2H")
    held = quiet_plan(schedules, history=history, health=health, now=NOW - timedelta(seconds=1))
    assert code(held) == "not_quiet" and held.quiet.forced_at == NOW


def test_an_interval_rule_never_run_is_due_since_the_tables_oldest_snapshot():
    health = {A: written(NOW - timedelta(minutes=1), oldest_snapshot_ms=ms(NOW - timedelta(hours=5)))}
    d = quiet_plan(history={}, health=health)
    assert code(d) == "not_quiet" and d.quiet.due_since == NOW - timedelta(hours=5)
    assert d.quiet.forced_at == NOW + timedelta(hours=1)


def test_a_condition_only_rule_is_due_since_the_last_success():
    schedules = {RDF: dict(QUIET)}
    conditions = {"deleteFileCountAbove": 1}
    health = {A: written(NOW - timedelta(minutes=1), delete_file_count=3)}
    last = NOW - timedelta(hours=5)
    history = {(A.qualified, RDF): hist(last_success_start=last, last_run_succeeded=True)}
    d = quiet_plan(schedules, history=history, health=health, conditions=conditions)
    assert code(d) == "not_quiet" and d.trigger == "condition" and d.quiet.due_since == last
    assert d.quiet.forced_at == last + timedelta(hours=6)


# -- without health ---------------------------------------------------------------------------------


def test_without_health_the_table_counts_as_not_quiet_until_forced():
    d = quiet_plan(health={A: None})
    forced_at = DUE_SINCE + timedelta(hours=6)
    assert code(d) == "not_quiet" and d.next_eligible == forced_at
    assert d.reasons[0].startswith("not_quiet: quiet unknown: no health collected yet, so the last commit by "
                                   "another writer is unknown (quietFor PT10M); forced in 5h at ")
    assert d.quiet.to_json()["secondsUntilQuiet"] is None
    assert quiet_plan(health={A: None}, now=forced_at).decision == "run"


def test_without_health_and_never_run_the_wait_cannot_be_told_and_it_runs():
    d = quiet_plan(health={A: None}, history={})
    assert d.decision == "run"
    assert d.reasons[1].startswith("forced after PT6H: never quiet; no health collected yet")


# -- order and windows --------------------------------------------------------------------------------


def test_not_quiet_comes_after_the_conditions_and_before_in_flight():
    recent = {A: written(NOW - timedelta(minutes=1), delete_file_count=0)}
    unmet = quiet_plan(health=recent, conditions={"deleteFileCountAbove": 5})
    assert code(unmet) == "conditions_unmet" and unmet.quiet is None
    both = run(policies(policy(schedules=INTERVAL_QUIET)), health=recent, history=SUCCEEDED,
               in_flight=((A.qualified, RDF),))
    assert code(decision(both, A)) == "not_quiet"
    quiet = run(policies(policy(schedules=INTERVAL_QUIET)), health={A: written(NOW - timedelta(hours=1))},
                history=SUCCEEDED, in_flight=((A.qualified, RDF),))
    assert code(decision(quiet, A)) == "in_flight"


def test_the_critical_force_does_not_skip_the_quiet_period():
    conditions = {"deleteFileCountAbove": 50, "criticalPipeline": True, "criticalPipelineMaxDelayMinutes": 60}
    d = quiet_plan(conditions=conditions)
    assert code(d) == "not_quiet" and d.trigger == "critical"


def test_next_eligible_waits_for_the_window_when_quiet_comes_outside_it():
    schedules = {RDF: {"interval": "PT6H", "windowStart": "09:00", "windowEnd": "12:03", **QUIET}}
    d = quiet_plan(schedules)  # quiet at 12:04:10, the window closed at 12:03: next morning at 09:00
    assert code(d) == "not_quiet" and d.next_eligible == NOW + timedelta(hours=21)


# -- properties -------------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(-3 * 86400, 600), st.one_of(st.none(), st.integers(-3 * 86400, -1)),
       st.sampled_from(["PT1M", "PT10M", "PT2H"]), st.sampled_from(["PT30M", "PT6H", "P2D"]),
       st.sampled_from([{"interval": "PT6H"}, {"cronExpression": "*/30 * * * *"}, {}]), st.booleans())
def test_held_decisions_wait_for_the_earlier_of_quiet_and_forced(commit_s, success_s, quiet_for, max_wait, rule,
                                                                 has_health):
    health = metrics(A, newest_foreign_commit_ms=ms(NOW + timedelta(seconds=commit_s)),
                     newest_foreign_commit_operation="append", oldest_snapshot_ms=ms(NOW - timedelta(days=4)))
    history = {(A.qualified, RDF): hist(last_success_start=NOW + timedelta(seconds=success_s), last_run_succeeded=True)
               } if success_s is not None else {}
    schedules = {RDF: {**rule, "quietFor": quiet_for, "maxQuietWait": max_wait}}
    result = plan(PlanInput(now=NOW, catalog_tables=[A], loaded_tables=frozenset([A]),
                            policies=policies(policy(schedules=schedules)), limits=SchedulerSettings(),
                            metrics={A: health} if has_health else {}, history=history))
    (d,) = result.decisions
    if d.quiet is None:  # an earlier gate decided
        assert d.decision == "skip" and code(d) in ("not_due",)
        return
    verdict = d.quiet
    if d.decision == "skip":
        assert code(d) == "not_quiet" and d.next_eligible > NOW
        assert d.next_eligible == min(t for t in (verdict.quiet_at, verdict.forced_at) if t is not None)
    else:
        assert verdict.forced or (verdict.quiet_at is not None and verdict.quiet_at <= NOW)
        assert d.reasons[1].startswith("forced after" if verdict.forced else "quiet: ")
        if verdict.forced and verdict.forced_at is not None:
            assert verdict.forced_at <= NOW


# -- the newest commit of another writer, from the metadata ------------------------------------------------


def snapshot(snapshot_id: int, at_ms: int, operation: SnapshotOperation | None) -> Snapshot:
    summary = Summary(operation) if operation is not None else None
    return Snapshot(snapshot_id=snapshot_id, timestamp_ms=at_ms, manifest_list=f"m{snapshot_id}.avro", summary=summary)


def test_floes_replace_commits_are_not_another_writers():
    snapshots = [snapshot(1, 1000, SnapshotOperation.APPEND), snapshot(2, 3000, SnapshotOperation.OVERWRITE),
                 snapshot(3, 2000, SnapshotOperation.DELETE), snapshot(4, 4000, SnapshotOperation.REPLACE)]
    assert newest_foreign_commit(snapshots) == (3000, "overwrite")
    assert newest_foreign_commit(snapshots[3:]) == (None, None)
    assert newest_foreign_commit([]) == (None, None)
    assert newest_foreign_commit([*snapshots, snapshot(5, 3500, None)]) == (3500, "unknown")


def test_the_health_cache_collects_records_of_the_old_version_again(tmp_path):
    cache = MetricsCache(tmp_path / "health.sqlite3")
    record = written(NOW - timedelta(minutes=3), "append")
    cache.put(record)
    assert cache.record(A.qualified, "summary") == (record.metadata_location, record)
    assert cache.record(A.qualified, "summary")[1].newest_foreign_commit_operation == "append"
    cache.close()
    # A record cached before the field existed (version 1002) has no foreign commit: it is not used.
    db = sqlite3.connect(tmp_path / "health.sqlite3")
    old = {k: v for k, v in record.to_json().items() if not k.startswith("newest_foreign")}
    db.execute("UPDATE metrics SET version = ?, record = ?", (RECORD_VERSION - 1, json.dumps(old)))
    db.commit()
    db.close()
    cache = MetricsCache(tmp_path / "health.sqlite3")
    assert cache.record(A.qualified, "summary") is None and cache.index() == {}
    cache.close()


# -- the policy keys, in both formats ---------------------------------------------------------------------


def test_both_formats_read_the_quiet_period_the_same(tmp_path):
    camel = tmp_path / "camel.yaml"
    camel.write_text(textwrap.dedent("""
        - name: quiet
          tablePattern: "demo.sales.*"
          rewriteDataFiles: {}
          rewriteDataFilesSchedule: {interval: PT6H, quietFor: PT10M, maxQuietWait: PT6H}
    """))
    kebab = tmp_path / "kebab.yaml"
    kebab.write_text(textwrap.dedent("""
        policies:
          - name: quiet
            pattern: "demo.sales.*"
            rewrite-data-files: {}
            rewrite-data-files-schedule: {interval-hours: 6, quiet-for: PT10M, max-quiet-wait: PT6H}
    """))
    a, b = validate_policy_paths([camel]), validate_policy_paths([kebab])
    assert a.errors == b.errors == [] and a.warnings == b.warnings == []
    pa, pb = a.policies.get("quiet"), b.policies.get("quiet")
    assert pa.schedule(RDF).quiet == pb.schedule(RDF).quiet == QuietPeriod(timedelta(minutes=10), timedelta(hours=6))
    ja, jb = pa.to_json(), pb.to_json()
    assert ja.pop("source") != jb.pop("source") and ja == jb
    assert ja["rewriteDataFilesSchedule"]["quietFor"] == "PT10M" and ja["rewriteDataFilesSchedule"]["maxQuietWait"] == "PT6H"
    health = {A: written(NOW - timedelta(minutes=1))}
    assert [code(decision(run(p, health=health, history=SUCCEEDED), A)) for p in (a.policies, b.policies)] == [
        "not_quiet", "not_quiet"]


BAD = [
    ("quietFor: 10 minutes", "quiet-for: 10 minutes", "quietFor",
     "'10 minutes' is not an ISO-8601 duration in days and time, such as P7D, PT6H, PT30M or PT0S"),
    ("quietFor: 600", "quiet-for: 600", "quietFor", "expected an ISO-8601 duration such as PT10M, got 600"),
    ("quietFor: -PT10M", "quiet-for: -PT10M", "quietFor",
     "must not be negative, got '-PT10M'; write a duration such as PT10M"),
    ("quietFor: PT10M, maxQuietWait: -PT1H", "quiet-for: PT10M, max-quiet-wait: -PT1H", "maxQuietWait",
     "must not be negative, got '-PT1H'; write a duration such as PT6H"),
    ("quietFor: PT10M, maxQuietWait: PT0S", "quiet-for: PT10M, max-quiet-wait: PT0S", "maxQuietWait",
     "must be longer than zero, got 'PT0S' (zero would force every run at once)"),
    ("maxQuietWait: PT6H", "max-quiet-wait: PT6H", "maxQuietWait",
     "is set without quietFor: it limits how long a quiet period is waited for, so set quietFor (such as PT10M) "
     "too, or remove it"),
]


@pytest.mark.parametrize("camel, loader, key, message", BAD)
def test_bad_quiet_keys_name_the_file_policy_and_key_in_both_formats(tmp_path, camel, loader, key, message):
    (tmp_path / "camel.yaml").write_text(
        f"- name: nightly\n  tablePattern: '*'\n  rewriteDataFiles: {{}}\n"
        f"  rewriteDataFilesSchedule: {{interval: PT6H, {camel}}}\n")
    (tmp_path / "kebab.yaml").write_text(
        f"policies:\n  - name: nightly\n    pattern: '*'\n    rewrite-data-files: {{}}\n"
        f"    rewrite-data-files-schedule: {{interval-hours: 6, {loader}}}\n")
    errors = validate_policy_paths([tmp_path / "camel.yaml"]).errors
    assert errors == [f"{tmp_path / 'camel.yaml'}: policy 'nightly': rewriteDataFilesSchedule.{key}: {message}"]
    kebab_key = {"quietFor": "quiet-for", "maxQuietWait": "max-quiet-wait"}[key]
    kebab_message = message.replace("quietFor", "quiet-for")
    errors = validate_policy_paths([tmp_path / "kebab.yaml"]).errors
    assert errors == [f"{tmp_path / 'kebab.yaml'}: policy 'nightly': rewrite-data-files-schedule.{kebab_key}: "
                      f"{kebab_message}"]


def test_a_zero_quiet_period_is_a_warning():
    at = standalone()
    schedule = parse_schedule(at, {"interval": "PT6H", "quietFor": "PT0S"})
    assert at.problems.errors == [] and at.problems.warnings == [
        "quietFor: is zero: every table is quiet, so it has no effect; remove it"]
    assert schedule.quiet == QuietPeriod(timedelta(0), DEFAULT_MAX_QUIET_WAIT)


@pytest.mark.parametrize("seconds, text", [(250, "4m 10s"), (5 * 3600 + 50 * 60, "5h 50m"), (12, "12s"),
                                           (2 * 86400 + 3 * 3600 + 60, "2d 3h"), (3600 + 5, "1h"), (0, "0s"),
                                           (-5, "0s"), (86400 + 120, "1d")])
def test_waits_read_as_people_read_them(seconds, text):
    assert format_wait(timedelta(seconds=seconds)) == text


def test_every_operation_accepts_a_quiet_period():
    schedules = {op: {"interval": "PT6H", "quietFor": "PT5M"} for op in ALL_OPERATIONS}
    result = run(policies(policy(schedules=schedules)), (A, B), history={},
                 health={A: written(NOW - timedelta(minutes=1), oldest_snapshot_ms=ms(NOW - timedelta(hours=1))),
                         B: replace(metrics(B), newest_foreign_commit_ms=ms(NOW - timedelta(hours=1)),
                                    newest_foreign_commit_operation="append")})
    assert {code(d) for d in result.decisions if d.table == A} == {"not_quiet"}
    quiet = [d for d in result.decisions if d.table == B]
    assert all(d.quiet is not None and d.quiet.passed for d in quiet)  # each passed the gate
    assert [d.operation for d in quiet if d.decision == "run"] == [RDF]  # one operation per table a tick


def test_the_asset_description_says_the_rule_waits_for_quiet():
    from floe_dagster.defs.asset_policy import operation_rule

    quiet = policies(policy(schedules={RDF: {"interval": "PT6H", **QUIET}, EXP: {"interval": "PT6H"}}))
    p = quiet.get("p")
    assert operation_rule(p, RDF, {}) == ("every 6 hours (debt-score sensor), once quiet for 10 minutes "
                                          "(forced after 6 hours)")
    assert operation_rule(p, EXP, {}) == "every 6 hours (debt-score sensor)"
