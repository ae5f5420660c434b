"""The compute budget (core/plan/compute_budget.py, the admission step ``budget_compute``): admitted on each
table's compute estimate learned from its history (shrunk toward the byte estimate's prior), checked
against what the finished runs recorded, split between fair shares, refused when malformed, untouched
by a table's properties. Pure, through the real planner, the clock injected."""

from __future__ import annotations

import json
from collections import Counter
from datetime import timedelta

import pytest

from floe_dagster.core.plan.compute_budget import ComputeBudget, InFlightAdmission, spent_in_window
from floe_dagster.core.plan.fair_shares import FairShareSettings
from floe_dagster.core.value.learned_ranking import DEFAULT_COMPUTE_S_PER_GIB, RankingSettings
from floe_dagster.core.plan.planner import Plan, PlanInput, SchedulerSettings, plan
from floe_dagster.core.policies.policy import parse_policies_text
from floe_dagster.core.runs.run_figures import SPARK, Benefit, Compute, TableShape
from floe_dagster.core.value.run_history import RecordedRun
from floe_dagster.errors import SettingsError
from floe_dagster.settings import load_settings
from floe_dagster_tests.unit.test_planner import NOW, RDF, code, metrics, policies, policy, table

GIB = 1024**3
SETTINGS = RankingSettings()
A, B = table("a"), table("b")
HR = table("h", "hr")


def rewrite(t, minutes_ago: float, cpu_s: float, rewritten: int = GIB, wall_s: float = 50.0) -> RecordedRun:
    """A finished rewrite of ``t`` that recorded this executor CPU for ``rewritten`` bytes."""
    finished = NOW - timedelta(minutes=minutes_ago)
    shape = TableShape(data_files=10, delete_files=0, live_bytes=GIB, manifests=1, snapshots=1)
    return RecordedRun(finished - timedelta(seconds=wall_s), finished, True, bytes_rewritten=rewritten,
                       compute=Compute(SPARK, wall_s=wall_s, executor_cpu_s=cpu_s), benefit=Benefit(shape, shape))


def history(t, cpu_per_gib: float, runs: int = 6) -> dict:
    """``runs`` rewrites of ``t`` a day apart, each 1 GiB for ``cpu_per_gib`` CPU seconds (outside the window)."""
    return {(t.qualified, RDF): [rewrite(t, 1440 * (d + 1), cpu_per_gib) for d in range(runs)]}


def tick(tables, hours: float | None, runs=None, in_flight=(), estimate=GIB, shares=None, policy_set=None,
         health=None, now=NOW) -> Plan:
    return plan(PlanInput(
        now=now, catalog_tables=list(tables), loaded_tables=frozenset(tables),
        policies=policy_set or policies(policy("p", "demo.*.*")),
        limits=SchedulerSettings(max_compute_hours_per_hour=hours),
        metrics={t: metrics(t) for t in tables} | (health or {}), estimate_bytes=lambda *_: estimate,
        recorded_runs=runs or {}, admissions_in_flight=tuple(in_flight),
        **({"fair_shares": shares} if shares else {})))


def decision(result: Plan, t):
    return next(d for d in result.decisions if d.table == t)


def test_a_budget_admits_one_of_two_tables_and_says_why_the_other_waits():
    runs = {**history(A, 1800), **history(B, 1800)}  # 0.5 compute hours per GiB each, both learned
    result = tick([A, B], hours=0.75, runs=runs)
    assert [d.table for d in result.admitted] == [A]
    waiting = decision(result, B)
    assert code(waiting) == "budget_compute"
    assert waiting.reasons[0].startswith("budget_compute: 0.5 of 0.75 compute hours used in the last hour (0 spent by "
                                         "0 finished run(s), 0 estimated for 0 in flight, 0.5 admitted this tick)")
    assert "this run needs 1800 compute s: 1.8e+03 s/GiB" in waiting.reasons[0]
    assert waiting.reasons[1].startswith("interval: ")  # why it was due is kept
    assert len(tick([A, B], hours=1.01, runs=runs).admitted) == 2
    assert len(tick([A, B], hours=None, runs=runs).admitted) == 2  # unset: no compute budget


def test_the_estimate_is_the_tables_own_history_shrunk_toward_the_prior_from_its_byte_estimate():
    fleet = history(table("other"), 100)
    own = {**fleet, **history(A, 1000, runs=5)}  # 5 runs against prior-runs 5: weight 1/2
    budget = ComputeBudget(1.0, own, (), NOW, RankingSettings(history_half_life_days=0))  # no decay
    learned = budget.estimate(A.qualified, RDF, 2 * GIB)
    assert (learned.table_rate, learned.prior_source, learned.weight) == (pytest.approx(1000), "fleet", 0.5)
    fleet_rate = (6 * 100 + 5 * 1000) / 11  # the fleet's compute per GiB, A's runs included
    assert learned.prior_rate == pytest.approx(fleet_rate)
    assert learned.seconds == pytest.approx(2 * (0.5 * 1000 + 0.5 * fleet_rate))
    fresh = budget.estimate(B.qualified, RDF, 2 * GIB)  # no history: the prior × its byte estimate
    assert (fresh.table_rate, fresh.weight, fresh.seconds) == (None, 0.0, pytest.approx(2 * fleet_rate))
    empty = ComputeBudget(1.0, {}, (), NOW, SETTINGS).estimate(B.qualified, RDF, GIB)  # no fleet either
    assert (empty.prior_source, empty.seconds) == ("default", DEFAULT_COMPUTE_S_PER_GIB)


def test_the_window_is_charged_what_finished_runs_recorded_not_their_estimates():
    runs = history(A, 100)  # estimates 100 s/GiB
    # Admitted and still running: its estimate (100 s for 1 GiB) counts.
    running = ComputeBudget(1.0, runs, [InFlightAdmission(A.qualified, RDF, GIB)], NOW, SETTINGS).window
    assert (running.recorded_s, running.in_flight_s) == (0, pytest.approx(100))
    # Finished 10 minutes ago having really spent 3,000 CPU s: the window holds the real figure, the
    # estimate is gone; a run that finished 61 minutes ago has left the window.
    done = {(A.qualified, RDF): [*runs[(A.qualified, RDF)], rewrite(A, 61, 500), rewrite(A, 10, 3000)]}
    window = ComputeBudget(1.0, done, (), NOW, SETTINGS).window
    assert (window.recorded_s, window.recorded_runs, window.in_flight_s) == (3000, 1, 0)
    # A failure recorded no figures: its row's duration is charged.
    failed = RecordedRun(NOW - timedelta(minutes=5), NOW - timedelta(minutes=1), False, "error")
    assert spent_in_window([failed], NOW) == (240, 1)


def test_an_under_estimate_is_corrected_on_the_next_tick_and_the_over_spend_is_visible():
    runs = history(A, 100)
    first = tick([A, B], hours=0.5, runs=runs)  # 100 s estimated each: both fit under 1,800 s
    assert len(first.admitted) == 2
    # A's run really took 2,000 CPU s: the next tick sees the window over-spent and admits nothing.
    later = NOW + timedelta(minutes=30)
    spent = {(A.qualified, RDF): [*runs[(A.qualified, RDF)], rewrite(A, -20, 2000)]}
    second = tick([A, B], hours=0.5, runs=spent, now=later)
    assert not second.admitted
    assert "over-spent" in decision(second, B).reasons[0] and code(decision(second, B)) == "budget_compute"
    assert any(note.startswith("compute budget: 0.556 of 0.5 compute hours used") for note in second.notes)
    # An hour after it finished, the window has drained.
    assert len(tick([A, B], hours=0.5, runs=spent, now=later + timedelta(hours=1)).admitted) == 2


def test_a_run_larger_than_the_whole_budget_is_admitted_alone_into_an_empty_window():
    result = tick([A, B], hours=0.01, runs=history(A, 1000))
    assert [d.table for d in result.admitted] == [A]  # 1,000 s against 36 s: alone, noted
    assert any("exceed the whole max-compute-hours-per-hour; admitted alone" in n for n in result.notes)
    assert code(decision(result, B)) == "budget_compute"


def test_with_fair_shares_the_compute_budget_is_split_between_shares_by_weight():
    sales = [table(f"s{i}") for i in range(4)]
    hr = [table(f"h{i}", "hr") for i in range(4)]
    # No history: 30 s each (the default prior × 1 GiB); 120 s hold four of the eight.
    equal = tick(sales + hr, hours=120 / 3600, shares=FairShareSettings(by="namespace"))
    assert Counter(d.table.namespace_str for d in equal.admitted) == {"sales": 2, "hr": 2}
    budget = tick(sales + hr, hours=120 / 3600, shares=FairShareSettings(by="namespace", weights={"sales": 3}))
    assert Counter(d.table.namespace_str for d in budget.admitted) == {"sales": 3, "hr": 1}
    waiting = decision(budget, hr[1])
    assert waiting.reasons[0] == ("budget_share: namespace 'hr' used its share, 30 of 120 compute seconds left of "
                                  "max-compute-hours-per-hour this tick; weight 1 of 4")


@pytest.mark.parametrize("value", ["0", "-1", "lots", ".nan", "[1]", "true"])
def test_a_zero_negative_or_malformed_setting_is_refused_naming_the_setting(tmp_path, value):
    path = tmp_path / "floe.yaml"
    path.write_text(f"scheduler:\n  max-compute-hours-per-hour: {value}\n")
    with pytest.raises(SettingsError, match=r"scheduler\.max-compute-hours-per-hour: expected compute hours per "
                                            r"hour, a number > 0"):
        load_settings(path, environ={})
    with pytest.raises(SettingsError, match="environment FLOE_SCHEDULER__MAX_COMPUTE_HOURS_PER_HOUR: expected"):
        load_settings(None, environ={"FLOE_SCHEDULER__MAX_COMPUTE_HOURS_PER_HOUR": "0"})
    with pytest.raises(ValueError, match="scheduler.max-compute-hours-per-hour"):
        SchedulerSettings(max_compute_hours_per_hour=-2)


def test_the_setting_reads_a_number_or_its_text(tmp_path):
    (written := tmp_path / "floe.yaml").write_text("scheduler:\n  max-compute-hours-per-hour: 1.5\n")
    assert load_settings(written, environ={}).scheduler.max_compute_hours_per_hour == 1.5
    assert load_settings(None, environ={"FLOE_SCHEDULER__MAX_COMPUTE_HOURS_PER_HOUR": "2"}
                         ).scheduler.max_compute_hours_per_hour == 2.0
    assert load_settings(None, environ={}).scheduler.max_compute_hours_per_hour is None


def test_a_table_property_or_owner_override_cannot_raise_or_bypass_the_compute_budget():
    # An owner allowed every override the policy can grant sets floe.* properties naming the budget (and
    # pauses nothing): the properties are ignored and the budget holds.
    raw = {"name": "p", "tablePattern": "demo.*.*", "rewriteDataFiles": {},
           "rewriteDataFilesSchedule": {"interval": "PT6H"},
           "ownerOverrides": {"allow": {"rewrite-data-files.target-file-size-bytes": {}}}}
    tries = {"floe.max-compute-hours-per-hour": "1000", "floe.scheduler.max-compute-hours-per-hour": "1000",
             "floe.rewrite-data-files.max-compute-hours-per-hour": "1000", "floe.compute-budget": "off",
             "max-compute-hours-per-hour": "1000"}
    health = {t: metrics(t, properties=tries) for t in (A, B)}
    result = tick([A, B], hours=0.75, runs={**history(A, 1800), **history(B, 1800)},
                  policy_set=parse_policies_text(json.dumps([raw])), health=health)
    assert [d.table for d in result.admitted] == [A]
    waiting = decision(result, B)
    assert code(waiting) == "budget_compute"
    assert waiting.owner_overrides is not None and not waiting.owner_overrides.applied
    assert {i.property for i in waiting.owner_overrides.ignored} >= {"floe.max-compute-hours-per-hour",
                                                                     "floe.scheduler.max-compute-hours-per-hour"}
