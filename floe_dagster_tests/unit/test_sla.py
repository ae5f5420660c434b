"""SLA contracts (core/schedules/sla.py): the evaluation with an injected clock, the policy key in both formats,
and the escalation: a breached contract passes the conditions and minimum intervals, ranks first among
admitted work, and still meets the budgets, backoff and one operation per table. Pure."""

from __future__ import annotations

from datetime import timedelta

import pytest

from floe_dagster.core.plan.planner import SchedulerSettings
from floe_dagster.core.policies.policy import PolicyError, parse_policies_text
from floe_dagster.core.schedules.sla import ERROR, WARN, SlaContract, evaluate_sla
from floe_dagster_tests.unit.test_planner import (
    EXP, NOW, RDF, A, B, C, admitted, code, decision, hist, metrics, ms, policies, policy, run,
)

DAY = timedelta(days=1)
# A condition that is never met by the helper's tables (10 data files), and a long minimum interval.
UNMET = {"deleteFileCountAbove": 1_000_000, "minIntervalMinutes": 7 * 24 * 60}


def sla(max_age: str = "P1D", severity: str = "ERROR", owner: str = "team-x") -> dict:
    return {"maxAge": max_age, "severity": severity, "owner": owner}


# -- evaluation ----------------------------------------------------------------------------------------


def test_breached_only_once_the_last_success_is_older_than_max_age():
    contract = SlaContract(DAY, ERROR, "team-x")
    exactly = evaluate_sla(contract, NOW - DAY, None, NOW)
    assert not exactly.breached and exactly.measured_from == "last_success"
    late = evaluate_sla(contract, NOW - DAY - timedelta(seconds=1), None, NOW)
    assert late.breached and late.breached_since == NOW - timedelta(seconds=1)
    assert late.detail.startswith("breached for 1s: last success ")
    assert late.to_json()["breachedSince"] == (NOW - timedelta(seconds=1)).isoformat()
    met = evaluate_sla(contract, NOW - timedelta(hours=2), None, NOW)
    assert met.to_json()["breachedSince"] is None and met.to_json()["dueBy"] == (NOW + timedelta(hours=22)).isoformat()


def test_never_succeeded_is_measured_from_the_tables_first_data():
    contract = SlaContract(DAY)
    assert evaluate_sla(contract, None, NOW - 2 * DAY, NOW).breached
    fresh = evaluate_sla(contract, None, NOW - timedelta(hours=1), NOW)
    assert not fresh.breached and fresh.measured_from == "first_data"
    unknown = evaluate_sla(contract, None, None, NOW)  # no health yet: unknown is not a breach
    assert not unknown.breached and unknown.measured_from == "unknown" and unknown.detail.startswith("unknown")
    empty = evaluate_sla(contract, None, None, NOW, has_data=False)
    assert not empty.breached and empty.measured_from == "no_data"


# -- the policy key --------------------------------------------------------------------------------------


def test_the_sla_sits_in_the_schedule_in_both_formats():
    api = policies(policy(schedules={EXP: {"interval": "PT6H", "sla": sla("P1D", "warn", "ana@example.com")}}))
    loader = parse_policies_text("""
policies:
  - name: p
    pattern: "demo.sales.*"
    expire-snapshots: {}
    expire-snapshots-schedule:
      interval-hours: 6
      sla: {max-age: P1D, severity: warn, owner: ana@example.com}
""")
    for found in (api, loader):
        contract = found.get("p").schedule(EXP).sla
        assert contract == SlaContract(DAY, WARN, "ana@example.com")
    assert api.get("p").schedule(EXP).to_json()["sla"] == {"maxAge": "P1D", "severity": "WARN",
                                                           "owner": "ana@example.com"}


@pytest.mark.parametrize("value, message", [
    ({"severity": "WARN"}, "expireSnapshotsSchedule.sla.maxAge: is required"),
    ({"maxAge": "P1W"}, "expireSnapshotsSchedule.sla.maxAge: 'P1W' is not an ISO-8601 duration"),
    ({"maxAge": "PT10S"}, "expireSnapshotsSchedule.sla.maxAge: must be at least PT1M"),
    ({"maxAge": "P1D", "severity": "CRITICAL"}, "expireSnapshotsSchedule.sla.severity: must be one of WARN, ERROR"),
    ({"maxAge": "P1D", "owner": "a\nb"}, "expireSnapshotsSchedule.sla.owner: must be one line of printable text"),
    ({"maxAge": "P1D", "owner": 7}, "expireSnapshotsSchedule.sla.owner: expected text"),
    ({"maxAge": "P1D", "owner": "x" * 201}, "expireSnapshotsSchedule.sla.owner: must be at most 200 characters"),
    ({"maxAge": "P1D", "escalate": True}, "expireSnapshotsSchedule.sla.escalate: unknown field"),
    ("P1D", "expireSnapshotsSchedule.sla: expected a mapping"),
])
def test_refused_values_are_named_by_policy_and_field(value, message):
    with pytest.raises(PolicyError) as raised:
        policies(policy(schedules={EXP: {"interval": "PT6H", "sla": value}}))
    assert any(line.startswith(f"<text>: policy 'p': {message}") for line in raised.value.errors), raised.value.errors


def test_a_max_age_shorter_than_the_schedule_warns():
    found = policies(policy(schedules={EXP: {"interval": "P7D", "sla": sla("P1D")}}))
    assert any("expireSnapshotsSchedule.sla.maxAge: is shorter than the schedule's period (P7D)" in w
               for w in found.warnings)


# -- escalation -----------------------------------------------------------------------------------------


def _conditional(op=RDF, contract=None, **extra):
    """A condition-only schedule (due every tick) gated by conditions no table meets and a long min interval."""
    schedule = {"sla": contract or sla()} if contract is not False else {}
    return policy(schedules={op: schedule}, conditions=UNMET, **extra)


def test_a_breach_passes_the_conditions_and_the_minimum_interval_with_trigger_sla():
    old = {(A.qualified, RDF): hist(last_success_start=NOW - 2 * DAY)}
    without = run(policies(_conditional(contract=False)), history=old)
    assert code(decision(without, A)) == "min_interval"
    result = run(policies(_conditional()), history=old)
    escalated = decision(result, A)
    assert escalated.decision == "run" and escalated.trigger == "sla"
    assert escalated.reasons[1].startswith("sla: breached for 1d: last success")
    assert escalated.condition_result is not None and escalated.condition_result.blocked_code == "min_interval"
    # Met: the gates decide as without a contract.
    met = run(policies(_conditional()), history={(A.qualified, RDF): hist(last_success_start=NOW - DAY / 2)})
    assert code(decision(met, A)) == "min_interval" and not decision(met, A).sla.breached


def test_a_never_run_table_is_breached_from_its_first_data():
    result = run(policies(_conditional()), health={A: metrics(A, oldest_snapshot_ms=ms(NOW - 3 * DAY))})
    assert decision(result, A).trigger == "sla"
    # Conditions no table meets, the first data fresh: the conditions hold it.
    fresh = run(policies(_conditional()), health={A: metrics(A, oldest_snapshot_ms=ms(NOW - DAY / 4))})
    assert code(decision(fresh, A)) == "conditions_unmet"


def test_escalated_work_ranks_first_before_debt_order():
    # B and C are due by their interval and owe debt; A only escalated by its breached SLA, with no debt.
    raw = policy(schedules={RDF: {"interval": "PT1H", "sla": sla("P1D")}})
    indebted = {t: metrics(t, snapshot_count=600) for t in (B, C)}
    history = {(A.qualified, RDF): hist(last_success_start=NOW - 2 * DAY),
               **{(t.qualified, RDF): hist(last_success_start=NOW - timedelta(hours=2)) for t in (B, C)}}
    result = run(policies(raw), (A, B, C), health=indebted, history=history)
    assert decision(result, B).debt_score > decision(result, A).debt_score
    assert admitted(result)[0] == ("a", "REWRITE_DATA_FILES", 1)
    assert decision(result, A).trigger == "sla" and decision(result, B).trigger == "interval"


def test_error_ranks_before_warn_and_the_longest_breached_first():
    raws = [policy("err", "demo.sales.c", {RDF: {"interval": "PT1H", "sla": sla("P1D", "ERROR")}}),
            policy("warn", "demo.sales.*", {RDF: {"interval": "PT1H", "sla": sla("P1D", "WARN")}})]
    history = {(A.qualified, RDF): hist(last_success_start=NOW - 2 * DAY),
               (B.qualified, RDF): hist(last_success_start=NOW - 5 * DAY),
               (C.qualified, RDF): hist(last_success_start=NOW - 2 * DAY)}
    result = run(policies(*raws), (A, B, C), history=history)
    assert [name for name, _, _ in admitted(result)] == ["c", "b", "a"]


def test_budgets_still_apply_to_escalated_work():
    history = {(t.qualified, RDF): hist(last_success_start=NOW - 2 * DAY) for t in (A, B)}
    result = run(policies(_conditional()), (A, B), history=history, limits=SchedulerSettings(max_tables_per_poll=1))
    assert admitted(result) == [("a", "REWRITE_DATA_FILES", 1)]
    assert code(decision(result, B)) == "budget_tables" and decision(result, B).trigger == "sla"
    # The byte budget: a rewrite larger than what is left of the hour waits, breach or not.
    bytes_full = run(policies(_conditional()), (A,), history=history, estimate=lambda *a: 600,
                     limits=SchedulerSettings(max_bytes_per_hour=1_000), bytes_last_hour=500)
    assert code(decision(bytes_full, A)) == "budget_bytes"


def test_backoff_the_schedule_and_one_operation_per_table_still_hold():
    failing = {(A.qualified, RDF): hist(last_success_start=NOW - 2 * DAY, consecutive_failures=3,
                                        last_failure_at=NOW - timedelta(minutes=1))}
    assert code(decision(run(policies(_conditional()), history=failing), A)) == "failure_backoff"
    disabled = policy(schedules={RDF: {"enabled": False, "sla": sla()}})
    old = {(A.qualified, RDF): hist(last_success_start=NOW - 2 * DAY)}
    assert code(decision(run(policies(disabled), history=old), A)) == "schedule_disabled"
    assert code(decision(run(policies(_conditional()), history=old, in_flight=((A.qualified, RDF),)), A)) \
        == "in_flight"
    # Two operations of one table, both breached: one a tick, the ERROR one first.
    both = policy(schedules={RDF: {"sla": sla("P1D", "WARN")}, EXP: {"sla": sla("P1D", "ERROR")}}, conditions=UNMET)
    old[(A.qualified, EXP)] = hist(last_success_start=NOW - 2 * DAY)
    result = run(policies(both), history=old)
    assert admitted(result) == [("a", "EXPIRE_SNAPSHOTS", 1)]
    assert code(decision(result, A, RDF)) == "in_flight"


def test_every_decision_carries_its_verdict_whichever_gate_stopped_it():
    raw = policy(schedules={RDF: {"cronExpression": "0 2 * * *", "sla": sla("PT12H")}})
    result = run(policies(raw), history={(A.qualified, RDF): hist(last_success_start=NOW - timedelta(hours=10))})
    d = decision(result, A)
    assert code(d) == "not_due" and d.sla is not None and not d.sla.breached


def test_a_shadow_policys_breach_escalates_in_its_own_pass():
    raw = {**_conditional(), "mode": "shadow"}
    result = run(policies(raw), history={(A.qualified, RDF): hist(last_success_start=NOW - 2 * DAY)})
    shadow = decision(result, A)
    assert shadow.shadow and shadow.trigger == "sla" and result.admitted == [] and result.shadowed == [shadow]
