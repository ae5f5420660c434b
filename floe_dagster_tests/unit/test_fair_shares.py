"""Fair shares (core/plan/fair_shares.py, docs/automation.md): when due work exceeds a budget, the
budget is split between namespaces (or policy-tag values) by weight; debt order holds within a
share; what a share does not need goes to the others in the same tick; a table that waits for its
share skips with ``budget_share``. Pure and fast, through the real planner, ``now`` injected."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest

from floe_dagster.core.plan.batches import ONE_TABLE_PER_RUN, BatchSettings
from floe_dagster.core.plan.fair_shares import (
    FAIR_SHARES_OFF,
    FairQueue,
    FairShareSettings,
    PastAdmission,
    decayed_usage,
)
from floe_dagster.core.plan.planner import Plan, PlanInput, SchedulerSettings, plan
from floe_dagster.errors import SettingsError
from floe_dagster.settings import load_settings
from floe_dagster_tests.unit.test_planner import EXP, NOW, RDF, code, metrics, policies, policy, table

SALES = tuple(table(f"s{i:02d}", "sales") for i in range(50))
HR = tuple(table(f"h{i:02d}", "hr") for i in range(50))
EVERY = policy("all", "demo.*.*")
BY_NAMESPACE = FairShareSettings(by="namespace")


def tick(tables, *, shares=BY_NAMESPACE, limits=SchedulerSettings(), policy_set=None, health=None,
         estimate=None, batching=ONE_TABLE_PER_RUN, bytes_last_hour=0, now=NOW, past=()) -> Plan:
    found = {t: metrics(t) for t in tables} | (health or {})
    return plan(PlanInput(
        now=now, catalog_tables=list(tables), loaded_tables=frozenset(tables),
        policies=policy_set or policies(EVERY), limits=limits, metrics=found, estimate_bytes=estimate,
        batching=batching, fair_shares=shares, bytes_last_hour=bytes_last_hour, past_admissions=tuple(past)))


def per_namespace(result: Plan) -> Counter[str]:
    return Counter(d.table.namespace_str for d in result.admitted)


def test_a_scarce_table_budget_is_split_between_namespaces_by_weight():
    limits = SchedulerSettings(max_tables_per_poll=10)
    equal = tick(SALES + HR, limits=limits)
    assert per_namespace(equal) == {"sales": 5, "hr": 5}
    weighted = tick(SALES + HR, limits=limits, shares=FairShareSettings(by="namespace", weights={"sales": 2}))
    assert per_namespace(weighted) == {"sales": 7, "hr": 3}
    waiting = [d for d in weighted.decisions if d.table == table("h03", "hr")][0]
    assert waiting.reasons[0] == ("budget_share: namespace 'hr' used its share, 3 of 10 tables this tick "
                                  "(max-tables-per-poll); weight 1 of 3")
    assert waiting.reasons[1].startswith("interval: ")  # why it was due is kept
    sales_waits = [d for d in weighted.decisions if d.table == table("s07", "sales")][0]
    assert sales_waits.reasons[0] == ("budget_share: namespace 'sales' used its share, 7 of 10 tables this tick "
                                      "(max-tables-per-poll); weight 2 of 3")
    # Off, the same tick goes in plain rank order (equal debt: by name, so hr first) with the plain code.
    off = tick(SALES + HR, limits=limits, shares=FAIR_SHARES_OFF)
    assert per_namespace(off) == {"hr": 10}
    assert code([d for d in off.decisions if d.table == SALES[0]][0]) == "budget_tables"


def test_what_a_share_does_not_need_goes_to_the_others_in_the_same_tick():
    # 50 due tables against 2 (at 10,000 tables: 5,000 against 5): the small share gets all it needs.
    result = tick(SALES + HR[:2], limits=SchedulerSettings(max_tables_per_poll=10))
    assert per_namespace(result) == {"sales": 8, "hr": 2}
    assert Counter(code(d) for d in result.decisions if d.decision == "skip") == {"budget_share": 42}


def test_debt_orders_work_within_a_share_and_between_equal_shares():
    # A few sales tables in debt (snapshots over the thresholds): they go first, highest debt first.
    health = {SALES[40]: metrics(SALES[40], snapshot_count=600), SALES[41]: metrics(SALES[41], snapshot_count=150),
              HR[49]: metrics(HR[49], snapshot_count=150)}
    result = tick(SALES + HR, limits=SchedulerSettings(max_tables_per_poll=6), health=health)
    ranked = [(d.rank, d.table.name, d.debt_score) for d in result.admitted]
    # s40 ranks first of all; then hr has used less; then equal usage: the higher-ranked next item
    assert ranked == [(1, "s40", 100), (2, "h49", 50), (3, "s41", 50), (4, "h00", 0), (5, "h01", 0), (6, "s00", 0)]
    for share in ("sales", "hr"):
        scores = [d.debt_score for d in result.admitted if d.table.namespace_str == share]
        assert scores == sorted(scores, reverse=True)


def test_a_single_share_keeps_the_plain_codes_and_order():
    limits = SchedulerSettings(max_tables_per_poll=3)
    fair, plain = tick(SALES, limits=limits), tick(SALES, limits=limits, shares=FAIR_SHARES_OFF)
    assert [(d.table, d.rank) for d in fair.admitted] == [(d.table, d.rank) for d in plain.admitted]
    assert [d.reasons for d in fair.decisions] == [d.reasons for d in plain.decisions]
    assert code(fair.decisions[-1]) == "budget_tables"


def test_the_operation_budget_is_split_and_one_operation_per_table_costs_nothing():
    both = policies(policy("all", "demo.*.*", {RDF: {"interval": "PT6H"}, EXP: {"interval": "PT6H"}}))
    result = tick(SALES[:10] + HR[:10], limits=SchedulerSettings(max_operations_per_poll=4), policy_set=both)
    assert per_namespace(result) == {"sales": 2, "hr": 2}
    assert {d.operation for d in result.admitted} == {RDF}
    codes = Counter(code(d) for d in result.decisions if d.decision == "skip")
    assert codes == {"in_flight": 4, "budget_share": 32}
    hr_waits = [d for d in result.decisions if d.table == HR[5] and d.operation == RDF][0]
    assert hr_waits.reasons[0] == ("budget_share: namespace 'hr' used its share, 2 of 4 operations this tick "
                                   "(max-operations-per-poll); weight 1 of 2")


def test_the_byte_budget_is_split_by_bytes_not_by_tables():
    # sales' tables are ten times larger: a bytes-only budget gives each share half the bytes.
    sizes = {t: 100 for t in SALES} | {t: 10 for t in HR}
    limits = SchedulerSettings(max_bytes_per_hour=1_000, max_run_requests_per_tick=100)
    result = tick(SALES + HR, limits=limits, estimate=lambda t, op, m, config: sizes[t], bytes_last_hour=0)
    rewritten = Counter()
    for d in result.admitted:
        rewritten[d.table.namespace_str] += d.estimated_bytes
    assert rewritten == {"sales": 500, "hr": 500}
    assert per_namespace(result) == {"sales": 5, "hr": 50}
    waits = [d for d in result.decisions if d.table == SALES[5]][0]
    assert waits.reasons[0] == ("budget_share: namespace 'sales' used its share, 500 of 1000 bytes left of "
                                "max-bytes-per-hour this tick; weight 1 of 2")


def test_the_tick_cap_is_split_in_seats_of_the_runs():
    # 4 runs of up to 5 tables: 20 seats, 10 a namespace; the runs are filled in the fair order.
    limits = SchedulerSettings(max_run_requests_per_tick=4)
    result = tick(SALES + HR, limits=limits, batching=BatchSettings(max_tables=5))
    assert [len(b) for b in result.batches()] == [5, 5, 5, 5]
    assert per_namespace(result) == {"sales": 10, "hr": 10}
    waits = [d for d in result.decisions if d.table == SALES[10]][0]
    assert waits.reasons[0] == ("budget_share: namespace 'sales' used its share, 10 tables of the 4 run requests "
                                "of this tick (the tick cap); weight 1 of 2")
    one_per_run = tick(SALES + HR[:3], limits=limits)
    assert per_namespace(one_per_run) == {"sales": 2, "hr": 2}


def test_shares_by_a_policy_tag():
    tagged = policies(
        {**policy("data", "demo.sales.*"), "tags": {"team": "data"}},
        {**policy("web", "demo.hr.h0*", priority=1), "tags": {"team": "web", "owner": "a@b.c"}},
        policy("rest", "demo.hr.*"),  # h10..h49: no team tag
    )
    shares = FairShareSettings(by="tag:team", weights={"data": 2})
    result = tick(SALES + HR, limits=SchedulerSettings(max_tables_per_poll=8), policy_set=tagged, shares=shares)
    teams = Counter(tagged.effective_policy(d.table).name for d in result.admitted)
    assert teams == {"data": 4, "web": 2, "rest": 2}  # weights 2, 1, 1
    untagged = [d for d in result.decisions if d.table == HR[20]][0]
    assert untagged.reasons[0] == ("budget_share: tables without a team tag used its share, 2 of 8 tables this "
                                   "tick (max-tables-per-poll); weight 1 of 4")
    web = [d for d in result.decisions if d.table == HR[5]][0]
    assert web.reasons[0].startswith("budget_share: team 'web' used its share, 2 of 8 tables")


def test_the_fair_queue_interleaves_by_weight_and_charges_only_what_was_admitted():
    queue = FairQueue({"a": [1, 3, 5, 7, 9], "b": [2, 4, 6, 8, 10]}, {"tables": 6}, {"a": 1, "b": 2}.__getitem__,
                      lambda item: item)
    order = []
    for share, item in queue:
        order.append(item)
        queue.charge(share, {"tables": 0 if item == 4 else 1})  # 4 was not admitted: it costs nothing
    assert order == [2, 1, 4, 6, 8, 3, 10, 5, 7, 9]  # equal usage: the heavier share first
    assert (queue.used("a", "tables"), queue.used("b", "tables"), queue.total_weight) == (5, 4, 3)


def ticks(count: int, every: timedelta, *, remember: bool = True) -> list[str]:
    """``count`` ticks ``every`` apart, one table a tick, weights sales 3 and hr 1; each tick's admission is
    remembered as the ledger would hold it (or not: every tick starts from zero, as before the fix)."""
    shares = FairShareSettings(by="namespace", weights={"sales": 3})
    limits = SchedulerSettings(max_tables_per_poll=1)
    past: list[PastAdmission] = []
    winners = []
    for number in range(count):
        now = NOW + number * every
        (admitted,) = tick(SALES[:20] + HR[:20], shares=shares, limits=limits, now=now,
                           past=past if remember else ()).admitted
        winners.append(admitted.table.namespace_str)
        past.append(PastAdmission(admitted.table.qualified, now))
    return winners


def test_usage_decays_over_an_hour_so_no_share_starves():
    """Room for one table a tick, weights 3:1: the light share is admitted on the second tick, and over 8
    ticks the shares get about 3:1. Starting each tick from zero, the heavier share won them all."""
    winners = ticks(8, timedelta(minutes=5))
    assert winners[:2] == ["sales", "hr"]
    assert Counter(winners) == {"sales": 6, "hr": 2}
    assert Counter(ticks(8, timedelta(minutes=5), remember=False)) == {"sales": 8}  # no memory: hr starves
    # Over four hours too (admissions an hour old weigh e^-1): about the weights' ratio, 35:13.
    four_hours = Counter(ticks(48, timedelta(minutes=5)))
    assert four_hours["sales"] + four_hours["hr"] == 48 and 2.5 <= four_hours["sales"] / four_hours["hr"] <= 3.5


def test_the_skipped_share_is_told_what_it_was_admitted_before():
    shares = FairShareSettings(by="namespace", weights={"sales": 3})
    past = [PastAdmission(HR[0].qualified, NOW - timedelta(minutes=5))]
    result = tick(SALES[:3] + HR[:3], shares=shares, limits=SchedulerSettings(max_tables_per_poll=1), past=past)
    assert [d.table.namespace_str for d in result.admitted] == ["sales"]
    waits = [d for d in result.decisions if d.table == HR[1]][0]
    assert waits.reasons[0] == ("budget_share: namespace 'hr' used its share, 0 of 1 tables this tick "
                                "(max-tables-per-poll), and 0.9 tables admitted in earlier ticks (decaying over an "
                                "hour); weight 1 of 4")


def test_decayed_usage_weighs_each_admission_by_its_age():
    past = [PastAdmission("demo.sales.a", NOW - timedelta(hours=1), rewritten_bytes=1000),
            PastAdmission("demo.sales.b", NOW, rewritten_bytes=10),
            PastAdmission("demo.sales.c", NOW + timedelta(minutes=1)),  # a clock step: counts whole
            PastAdmission("demo.hr.a", NOW - timedelta(hours=7)),  # past the horizon: forgotten
            PastAdmission("demo.gone.t", NOW)]  # a table no longer listed: no share
    usage = decayed_usage(past, NOW, lambda name: None if ".gone." in name else name.split(".")[1], 4)
    assert set(usage) == {"sales"}
    assert usage["sales"]["tables"] == pytest.approx(2 + 0.36788, abs=1e-4)
    assert usage["sales"]["bytes"] == pytest.approx(10 + 367.88, abs=0.01)
    assert usage["sales"]["runs"] == pytest.approx((2 + 0.36788) / 4, abs=1e-4)


@pytest.mark.parametrize("section, message", [
    ("{by: team}", "fair-shares.by: expected 'namespace' or 'tag:<policy tag name>' (e.g. tag:team), got 'team'"),
    ("{by: 'tag:'}", "fair-shares.by: expected 'namespace' or 'tag:<policy tag name>'"),
    ("{by: namespace, weights: {sales: 0}}", "fair-shares.weights.sales: expected a weight (a number > 0), got 0"),
    ("{by: namespace, weights: {sales: lots}}", "fair-shares.weights.sales: expected a weight (a number > 0), "
                                                "got 'lots'"),
    ("{by: namespace, weights: [sales]}", "fair-shares.weights: expected a mapping of share names to weights"),
    ("{by: namespace, default-weight: 0}", "fair-shares.default-weight: expected a number > 0, got 0"),
])
def test_bad_settings_name_the_file_and_key(tmp_path: Path, section: str, message: str):
    config = tmp_path / "floe.yaml"
    config.write_text(f"fair-shares: {section}\n")
    with pytest.raises(SettingsError) as raised:
        load_settings(config, environ={})
    assert f"{config}: {message}" in str(raised.value)


def test_settings_from_floe_yaml(tmp_path: Path):
    config = tmp_path / "floe.yaml"
    config.write_text("fair-shares: {by: 'tag:team', weights: {data: 2, web: 0.5}, default-weight: 1.5}\n")
    shares = load_settings(config, environ={}).fair_shares
    assert (shares.tag, shares.weight("data"), shares.weight("web"), shares.weight("other")) == ("team", 2, 0.5, 1.5)
    config.write_text("scheduler: {max-tables-per-poll: 3}\n")
    assert load_settings(config, environ={}).fair_shares == FAIR_SHARES_OFF and not FAIR_SHARES_OFF.enabled
