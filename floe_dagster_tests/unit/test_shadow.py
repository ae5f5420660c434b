"""Shadow policies (``mode: shadow``, docs/automation.md): the planner's second budget pass, the
ledger's shadow rows, a shadow row standing in for a success, and the policy key in both formats.
Pure where it can be (``now`` injected); the ledger tests use a real SQLite coordination database."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import replace
from datetime import timedelta

import pytest

from floe_dagster.coordination.database import Coordination
from floe_dagster.core.runs.history import OperationHistory, Outcome
from floe_dagster.core.plan.planner import Plan, SchedulerSettings
from floe_dagster.core.policies.policy import PolicyError, parse_policies_text
from floe_dagster.core.runs.run_decision import SHADOW_ATTEMPT, RunDecision, shadow_summary
from floe_dagster.scheduling.inputs import ledger_state
from floe_dagster_tests.unit.test_planner import (
    EXP,
    NOW,
    RDF,
    A,
    B,
    C,
    code,
    decision,
    metrics,
    policies,
    policy,
    run,
    sized,
)


def shadow(raw: dict) -> dict:
    return {**raw, "mode": "shadow"}


def live_view(result: Plan) -> list[tuple]:
    """What a decision is, whatever the mode: everything but the shadow flag, the attempt and the
    reason's shadow wording."""
    return [(d.table, d.operation, d.decision, d.trigger, d.slot, d.rank, d.batch, d.estimated_bytes,
             d.debt_score, d.next_eligible, d.scope,
             tuple(r.removeprefix("would run: ").replace(" (shadow policy 'p')", "") for r in d.reasons))
            for d in result.decisions]


# -- the policy key -------------------------------------------------------------------------------


def test_mode_is_live_by_default_and_shadow_in_both_formats():
    assert not policies(policy()).get("p").shadow
    assert policies(shadow(policy())).get("p").mode == "shadow"
    loader = parse_policies_text("policies:\n  - name: k\n    pattern: 'demo.sales.*'\n    mode: SHADOW\n"
                                 "    rewrite-data-files: {}\n    rewrite-data-files-schedule: {interval-hours: 6}\n")
    assert loader.get("k").shadow and loader.get("k").to_json()["mode"] == "shadow"


@pytest.mark.parametrize("value, shown", [("dry", "'dry'"), (1, "1"), (True, "true")])
def test_a_bad_mode_names_the_file_the_policy_and_the_field(value, shown):
    with pytest.raises(PolicyError) as raised:
        parse_policies_text(json.dumps([{**policy(), "mode": value}]), "team.yaml")
    assert raised.value.errors == [f"team.yaml: policy 'p': mode: must be one of LIVE, SHADOW, got {shown}"]


def test_switching_mode_keeps_the_policy_version():
    assert policies(policy()).get("p").version == policies(shadow(policy())).get("p").version


# -- the planner ------------------------------------------------------------------------------------


def test_a_shadow_decision_passes_every_gate_and_says_it_would_run():
    d = decision(run(policies(shadow(policy()))), A)
    assert (d.decision, d.shadow, d.attempt, d.rank) == ("run", True, SHADOW_ATTEMPT, 1)
    assert d.reasons[0] == "would run: interval: never run (interval PT6H) (shadow policy 'p')"
    assert d.item_key == "demo.sales.a|REWRITE_DATA_FILES|interval:first|shadow"
    assert run(policies(shadow(policy()))).admitted == []  # nothing to run
    # The gates still apply: in flight (a manual run), not due.
    assert code(decision(run(policies(shadow(policy())), in_flight=((A.qualified, RDF),)), A)) == "in_flight"
    recent = {(A.qualified, RDF): OperationHistory(last_success_start=NOW - timedelta(hours=1))}
    assert code(decision(run(policies(shadow(policy())), history=recent), A)) == "not_due"


def test_shadow_decisions_rank_after_live_work_and_never_take_its_budget():
    # a and b are live, c is shadow with the highest debt: it still ranks after them.
    set_ = policies(policy("live", "demo.sales.*"), shadow(policy("shadowed", "demo.sales.c", priority=5)))
    limits = SchedulerSettings(max_operations_per_poll=2, max_bytes_per_hour=100)
    result = run(set_, (A, B, C), limits=limits, estimate=sized({A: 50, B: 50, C: 90}),
                 health={C: metrics(C, snapshot_count=500)})
    assert [(d.table.name, d.rank, d.batch, d.shadow) for d in result.admitted + result.shadowed] == [
        ("a", 1, 1, False), ("b", 2, 2, False), ("c", 3, 3, True)]
    # The same live plan without the shadow policy: the shadow pass took nothing from it.
    alone = run(policies(policy("live", "demo.sales.*")), (A, B), limits=limits, estimate=sized({A: 50, B: 50}))
    assert [(d.table, d.rank) for d in alone.admitted] == [(d.table, d.rank) for d in result.admitted]


def test_the_shadow_pass_has_budgets_of_its_own():
    set_ = policies(shadow(policy()))
    limits = SchedulerSettings(max_operations_per_poll=1, max_bytes_per_hour=100)
    # Live work used the whole hour: the shadow pass does not see it.
    result = run(set_, (A, B), limits=limits, bytes_last_hour=100, queued_runs=1000, estimate=sized({A: 60, B: 30}))
    assert [d.table for d in result.shadowed] == [A]
    assert code(decision(result, B)) == "budget_operations"
    # Its own hour: the shadow rows of the last hour count against the shadow pass only.
    data = replace(_input(set_, (A,), limits, sized({A: 60})), shadow_bytes_last_hour=50)
    from floe_dagster.core.plan.planner import plan
    assert code(decision(plan(data), A)) == "budget_bytes"
    assert plan(replace(data, shadow_bytes_last_hour=0)).shadowed != []


def _input(set_, tables, limits, estimate):
    from floe_dagster.core.plan.planner import PlanInput
    return PlanInput(now=NOW, catalog_tables=list(tables), loaded_tables=frozenset(tables), policies=set_,
                     limits=limits, metrics={t: metrics(t) for t in tables}, estimate_bytes=estimate)


def test_switching_a_policy_to_live_changes_nothing_else():
    schedules = {RDF: {"interval": "PT6H"}, EXP: {"cronExpression": "0 3 * * *"}}
    health = {A: metrics(A, snapshot_count=300), C: metrics(C, data_file_count=900)}
    history = {(B.qualified, RDF): OperationHistory(last_success_start=NOW - timedelta(hours=7)),
               (C.qualified, EXP): OperationHistory(last_success_start=NOW - timedelta(hours=1))}
    limits = SchedulerSettings(max_operations_per_poll=4, max_bytes_per_hour=10_000)
    kwargs = dict(limits=limits, health=health, history=history, estimate=sized({A: 4000, B: 3000, C: 5000}))
    live = run(policies(policy(schedules=schedules)), (A, B, C), **kwargs)
    shadowed = run(policies(shadow(policy(schedules=schedules))), (A, B, C), **kwargs)
    assert live_view(shadowed) == live_view(live)
    assert [d.item_key for d in live.admitted] and shadowed.admitted == []
    assert all(d.shadow for d in shadowed.decisions) and not any(d.shadow for d in live.decisions)


def test_a_shadow_row_stands_in_for_a_success_for_shadow_decisions_only():
    recorded = {(A.qualified, RDF): OperationHistory(last_shadow_at=NOW - timedelta(hours=2))}
    d = decision(run(policies(shadow(policy())), history=recorded), A)
    assert code(d) == "not_due" and d.next_eligible == NOW + timedelta(hours=4)  # one interval after it
    later = decision(run(policies(shadow(policy())), history=recorded, now=NOW + timedelta(hours=4)), A)
    assert later.decision == "run" and later.shadow
    # Switched to live: a real run is still needed at once.
    assert decision(run(policies(policy()), history=recorded), A).decision == "run"


def test_a_shadow_cron_slot_is_used_up_by_its_row():
    cron = {RDF: {"cronExpression": "0 11 * * *"}}  # slot 11:00, now 12:00
    first = decision(run(policies(shadow(policy(schedules=cron)))), A)
    assert first.decision == "run" and first.trigger == "cron"
    recorded = {(A.qualified, RDF): OperationHistory(last_shadow_at=NOW)}
    assert code(decision(run(policies(shadow(policy(schedules=cron))), history=recorded), A)) == "not_due"


def test_shadow_summary_reads_as_plan_and_explain_print_it():
    assert shadow_summary("would run: interval: never run (shadow policy 'p')", NOW) == (
        "shadow: would run at 2026-11-23T12:00:00+00:00 because interval: never run (shadow policy 'p')")


# -- the ledger -------------------------------------------------------------------------------------


def _shadow_item(result: Plan) -> RunDecision:
    return RunDecision.admitted(result.shadowed[0])


def test_the_ledger_records_a_shadow_decision_once_per_slot_and_never_in_flight(tmp_path):
    coordination = Coordination(f"sqlite:///{tmp_path}/c.db")
    item = _shadow_item(run(policies(shadow(policy()))))
    assert coordination.admit([item], NOW) == [item]
    assert coordination.admit([item], NOW + timedelta(minutes=1)) == []  # once per (table, operation, slot)
    rows = coordination.ledger_rows()
    assert [(r.shadow, r.attempt, r.run_id, r.item_key) for r in rows] == [
        (True, SHADOW_ATTEMPT, None, "demo.sales.a|REWRITE_DATA_FILES|interval:first|shadow")]
    # Never in flight, never an attempt, never live bytes; the shadow pass's own hour of bytes.
    state = ledger_state([replace(rows[0], estimated_bytes=70)], NOW + timedelta(minutes=1), frozenset())
    assert (state.in_flight, dict(state.last_attempts), state.bytes_in_flight, state.shadow_bytes_last_hour) == (
        frozenset(), {}, 0, 70)
    # The history keeps its time, and a real outcome later keeps it too.
    assert coordination.all_history()[(A.qualified, RDF)].last_shadow_at == NOW
    coordination.record_outcome(Outcome("r1", A.qualified, RDF, NOW, NOW + timedelta(minutes=1), True))
    kept = coordination.all_history()[(A.qualified, RDF)]
    assert (kept.last_shadow_at, kept.last_success_start, kept.runs) == (NOW, NOW, 1)
    # Switched to live, the same slot's first attempt is admitted beside the shadow row.
    live = RunDecision.admitted(run(policies(policy())).admitted[0])
    assert live.item_key != item.item_key and coordination.admit([live], NOW) == [live]
    assert coordination.shadow_rows()[0] == 1
    assert coordination.shadow_counts_since(NOW - timedelta(hours=1)) == {"REWRITE_DATA_FILES": (1, NOW)}


def test_an_older_ledger_gets_the_shadow_columns(tmp_path):
    path = tmp_path / "old.db"
    Coordination(f"sqlite:///{path}")
    with sqlite3.connect(path) as db:  # as a version before shadow policies left it
        db.execute("ALTER TABLE floe_ledger DROP COLUMN shadow")
        db.execute("ALTER TABLE floe_history DROP COLUMN last_shadow_at")
        db.execute("INSERT INTO floe_ledger (table_name, operation, slot, attempt, run_key, trigger, reason, "
                   "debt_score, estimated_bytes, admitted_at, launcher) VALUES ('demo.sales.a', "
                   "'REWRITE_DATA_FILES', 's', 0, 'k', 'interval', 'r', 0, 0, '2026-11-23 11:00:00', '')")
    coordination = Coordination(f"sqlite:///{path}")
    assert [r.shadow for r in coordination.ledger_rows()] == [False]
    item = _shadow_item(run(policies(shadow(policy()))))
    assert coordination.admit([item], NOW) == [item]
    assert coordination.all_history()[(A.qualified, RDF)].last_shadow_at == NOW


# -- the tick's summary (GET /metrics) --------------------------------------------------------------


def test_the_tick_summary_counts_recorded_shadow_decisions_by_operation_never_as_admitted_or_refused():
    from floe_dagster.scheduling.tick import TickResult
    from floe_dagster.scheduling.tick_stats import summarize

    schedules = {RDF: {"interval": "PT6H"}, EXP: {"interval": "PT6H"}}
    result = run(policies(shadow(policy(schedules=schedules))), (A, B))
    recorded = [d for d in result.shadowed if d.table == A]  # B's rows were there already
    record = summarize(TickResult(result, admitted=[], shadow=recorded), NOW)
    # One operation per table a tick holds in the shadow pass too: A's expiry waits for the next tick.
    assert [d.operation for d in recorded] == [RDF]
    assert record["shadow"] == {"rewrite_data_files": 1}
    assert (record["admitted"], record["refused"], record["runs_requested"]) == ({}, 0, 0)


def test_the_assets_description_says_the_policy_is_in_shadow_mode():
    from floe_dagster.defs.asset_policy import policy_summary

    text = policy_summary(policies(shadow(policy())).get("p"), SchedulerSettings(), {})
    assert text.startswith("Policy 'p'. **Shadow mode**: what would run is recorded")
    assert "Shadow" not in policy_summary(policies(policy()).get("p"), SchedulerSettings(), {})
