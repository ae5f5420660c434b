"""The gates as an ordered list (core/plan/gates.py) and the plan's stages (core/plan/plan_stages.py): each gate
and admission step owns its reason codes, the docs, the planner's docstring and explain's words are
checked against the list, and the plan keeps each operation's own verdict (what every gate let run)
beside what the admission did with it. Pure: ``now`` is injected."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from hypothesis import HealthCheck, given, settings

from floe_dagster.core.plan import planner
from floe_dagster.core.plan.admission import ADMISSION, ADMISSION_CODES
from floe_dagster.core.plan.gate_flow import check_order
from floe_dagster.core.plan.gates import GATE_CODES, GATES, gate_before, gate_named
from floe_dagster.core.plan.plan_stages import REASON_CODES, STAGES, gates_markdown
from floe_dagster.core.plan.planner import PlanInput, SchedulerSettings, plan
from floe_dagster.reports.explain import _quiet
from floe_dagster_tests.unit.test_planner import (
    EXP, NOW, RDF, A, B, code, metrics, plan_inputs, policies, policy,
)

DOC = Path(__file__).resolve().parents[2] / "docs" / "automation.md"


def test_every_code_has_one_owner_and_the_vocabulary_is_theirs_in_order():
    owners = [code for gate in GATES for code in gate.codes]
    assert len(owners) == len(set(owners))  # no two gates share a code
    steps = [code for step in ADMISSION for code in step.codes]
    assert len(steps) == len(set(steps))
    # in_flight is told by a gate (a run queued or running) and by admission (one operation per table).
    assert set(owners) & set(steps) == {"in_flight"}
    assert REASON_CODES == tuple(dict.fromkeys(GATE_CODES + ADMISSION_CODES))
    assert [stage.name for stage in STAGES] == ["gates", "shadow", "rank", "sla first", "live admission", "shadow pass"]
    assert len(REASON_CODES) == 25


def test_the_docs_gate_table_is_generated_from_the_list():
    doc = DOC.read_text()
    generated = re.search(r"<!-- gates: begin -->\n(.*)<!-- gates: end -->", doc, re.S)
    assert generated, "docs/automation.md lost its generated gate table"
    assert generated.group(1) == gates_markdown(), (
        "docs/automation.md's gate table differs from core/plan/gates.py and core/plan/admission.py: paste "
        "floe_dagster.core.plan.plan_stages.gates_markdown() in")
    for code in REASON_CODES:
        assert f"`{code}`" in generated.group(1)


def test_the_planner_docstring_names_every_gate_and_code_in_order():
    doc = planner.__doc__
    told = " ".join(doc[doc.index("Gates (core/plan/gates.py"):doc.index("Admitted decisions are grouped")].split())
    named = [word for word in re.findall(r"[a-z]+(?:_[a-z]+)+", told) if word in REASON_CODES]
    assert list(dict.fromkeys(named)) == list(REASON_CODES)
    # (a module's name, core/plan/fair_shares.py, is not a code)
    unknown = [word for word in re.findall(r"(?<![/\w])[a-z]+_[a-z_]+\b", told) if word not in REASON_CODES]
    assert unknown == [], "the docstring names a code no gate or step owns"
    positions = [told.index(f"{gate.name} (") for gate in GATES]
    assert positions == sorted(positions)
    positions = [told.index(f"{step.name} (") for step in ADMISSION]
    assert positions == sorted(positions)


def test_a_gate_list_in_which_a_gate_reads_what_no_gate_before_it_learns_is_refused():
    # The order of the list is its data flow: the quiet gate reads the due verdict the due gate learns.
    due, quiet = gate_named("due"), gate_named("quiet")
    assert check_order((due, quiet)) == (due, quiet)
    with pytest.raises(ValueError, match="gate step 'quiet' reads due, which no step before it learns"):
        check_order((quiet, due))
    with pytest.raises(ValueError, match="gate step 'due' names facts a gate does not learn: mood"):
        check_order((replace(due, learns=("mood",)),))


def test_explain_says_which_gate_decides_before_the_quiet_period():
    from floe_dagster.core.plan.planner import Decision

    decision = Decision(A, RDF, "p", "skip", ("not_due",), None, 0.0, {}, 0, None, None)
    schedule_policy = policies(policy(schedules={RDF: {"interval": "P1D", "quietFor": "PT10M"}}))
    state = _quiet(decision, schedule_policy.get("p"))
    assert state["evaluated"] is False
    assert state["detail"] == ("not checked yet: an earlier gate decided (the quiet period is checked after the "
                               f"{gate_before('quiet').name})")
    assert gate_before("quiet").name == "conditions"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan_inputs())
def test_each_skip_is_told_by_the_stage_that_held_it(data):
    """A decision no gate let run skips with a gate's code; one every gate let run is admitted, or held
    back with an admission step's code before the gates' reasons, keeping its own verdict."""
    result = plan(data)
    for decision in result.decisions:
        if not decision.passed_gates:
            assert decision.decision == "skip" and code(decision) in GATE_CODES, decision
            assert not decision.held_back
        elif decision.decision == "skip":
            assert decision.held_back and code(decision) in ADMISSION_CODES, decision
            # then the gates' reasons, the due rule's first (the trigger may be critical: forced)
            assert decision.trigger is not None, decision
            assert re.match(r"(shadow: )?(cron|interval|condition|backlog): ", decision.reasons[1]), decision
        else:
            assert not decision.held_back and decision.trigger is not None


def test_a_tables_due_operations_each_keep_their_own_verdict_while_one_is_admitted():
    data = PlanInput(now=NOW, catalog_tables=[A, B], loaded_tables=frozenset({A, B}),
                     policies=policies(policy(schedules={RDF: {"interval": "PT1H"}, EXP: {"interval": "PT1H"}})),
                     limits=SchedulerSettings(), metrics={A: metrics(A), B: metrics(B)})
    result = plan(data)
    by = {(d.table, d.operation): d for d in result.decisions}
    assert all(d.passed_gates for d in result.decisions)  # each operation's own verdict: it may run
    # What the planner admits is unchanged: one operation per table a tick.
    assert [by[(t, RDF)].decision for t in (A, B)] == ["run", "run"]
    for t in (A, B):
        held = by[(t, EXP)]
        assert held.held_back and held.reasons == (
            "in_flight: REWRITE_DATA_FILES of this table was admitted this tick (one operation per table at a time)",
            "interval: never run (interval PT1H)")
