"""Batches (core/plan/batches.py): the planner groups its admitted decisions of one operation into runs
over several tables, in rank order, within the batch limits; the tick cap and max-queued-runs count
runs. Pure and fast, through the real planner."""

from __future__ import annotations

from dataclasses import replace

import pytest

from floe_dagster.core.plan.batches import ONE_TABLE_PER_RUN, BatchPacker, BatchSettings, batch_key
from floe_dagster.core.plan.planner import SchedulerSettings, plan
from floe_dagster_tests.unit.test_planner import EXP, NOW, RDF, metrics, policies, policy, sized, table

TABLES = tuple(table(f"t{i:02d}") for i in range(40))


def batched(settings: BatchSettings, *, tables=TABLES, limits=None, policy_set=None, queued_runs=0, estimate=None):
    from floe_dagster.core.plan.planner import PlanInput

    return plan(PlanInput(
        now=NOW, catalog_tables=list(tables), loaded_tables=frozenset(tables),
        policies=policy_set or policies(policy()), limits=limits or SchedulerSettings(),
        metrics={t: metrics(t) for t in tables}, queued_runs=queued_runs, estimate_bytes=estimate, batching=settings,
    ))


def test_forty_due_tables_in_two_runs_of_twenty_in_rank_order():
    result = batched(BatchSettings(max_tables=20))
    batches = result.batches()
    assert [len(b) for b in batches] == [20, 20]
    ranks = [[d.rank for d in b] for b in batches]
    assert ranks == [list(range(1, 21)), list(range(21, 41))]
    assert all(d.operation == RDF for b in batches for d in b)


def test_one_table_per_run_is_todays_shape():
    result = batched(ONE_TABLE_PER_RUN, limits=SchedulerSettings(max_run_requests_per_tick=25))
    assert len(result.admitted) == 25 and len(result.batches()) == 25
    assert result.reason_counts() == {"tick_cap": 15}


def test_the_tick_cap_counts_runs_not_tables():
    result = batched(BatchSettings(max_tables=20), limits=SchedulerSettings(max_run_requests_per_tick=1))
    assert len(result.admitted) == 20 and len(result.batches()) == 1
    skipped = [d for d in result.decisions if d.decision == "skip"]
    assert len(skipped) == 20 and skipped[0].reasons[0].startswith("tick_cap: at most 1 run requests this tick")


def test_max_queued_runs_counts_runs():
    limits = SchedulerSettings(max_queued_runs=10)
    result = batched(BatchSettings(max_tables=15), limits=limits, queued_runs=8)
    assert [len(b) for b in result.batches()] == [15, 15]  # room for two more runs
    assert result.reason_counts() == {"tick_cap": 10}


def test_batches_are_kept_to_the_byte_limit_and_an_oversized_table_goes_alone():
    sizes = {t: 400 for t in TABLES[:6]} | {TABLES[2]: 5_000}
    result = batched(BatchSettings(max_tables=20, max_bytes=1_000), tables=TABLES[:6], estimate=sized(sizes))
    groups = [[d.table.name for d in b] for b in result.batches()]
    # Ranked by name (equal debt): t02 is larger than the limit, so it opens a batch of its own.
    assert sorted(sum(groups, [])) == [t.name for t in TABLES[:6]]
    assert all(sum(sizes[table(n)] for n in g) <= 1_000 or len(g) == 1 for g in groups)
    assert ["t02"] in groups


def test_operations_never_share_a_run_and_rank_order_holds_across_batches():
    # One operation per table a tick, so tables alternate: t00 RDF, t01 EXP, t02 RDF, …
    raws = [policy(f"p{i}", t.qualified, {(RDF, EXP)[i % 2]: {"interval": "PT6H"}}) for i, t in enumerate(TABLES[:7])]
    result = batched(BatchSettings(max_tables=3), tables=TABLES[:7], policy_set=policies(*raws))
    batches = result.batches()
    for members in batches:
        assert len({d.operation for d in members}) == 1
        assert [d.rank for d in members] == sorted(d.rank for d in members)
    firsts = [members[0].rank for members in batches]
    assert firsts == sorted(firsts)
    assert [(members[0].operation, len(members)) for members in batches] == [(RDF, 3), (EXP, 3), (RDF, 1)]


def test_group_by_timeout_keeps_different_timeouts_apart():
    short = policy("short", "demo.sales.t0*", {RDF: {"interval": "PT6H", "timeout": 1}}, priority=1)
    long_ = policy("long", "demo.sales.t1*", {RDF: {"interval": "PT6H", "timeout": 4}}, priority=1)
    tables = TABLES[:20]
    apart = batched(BatchSettings(max_tables=20), tables=tables, policy_set=policies(short, long_))
    assert sorted(len(b) for b in apart.batches()) == [10, 10]
    for members in apart.batches():
        assert len({d.max_runtime_s for d in members}) == 1
    together = batched(BatchSettings(max_tables=20, group_by=()), tables=tables, policy_set=policies(short, long_))
    assert [len(b) for b in together.batches()] == [20]


def test_settings_refuse_what_cannot_work():
    with pytest.raises(ValueError, match="max-tables"):
        BatchSettings(max_tables=0)
    with pytest.raises(ValueError, match="group-by"):
        BatchSettings(group_by=("colour",))


def test_the_packer_opens_a_batch_only_when_the_open_one_is_full():
    packer = BatchPacker(BatchSettings(max_tables=2, max_bytes=100))
    kind = (RDF,)
    assert packer.opens_new(kind, 10)
    assert [packer.place(kind, 10), packer.place(kind, 10), packer.place(kind, 10)] == [1, 1, 2]
    assert packer.place((EXP,), 0) == 3 and packer.place(kind, 95) == 4  # 2 has 10 bytes: 105 > 100


def test_batch_keys():
    assert batch_key(["a|RDF|s|attempt-0"]) == "a|RDF|s|attempt-0"  # a batch of one keeps its run key
    key = batch_key(["b", "a"])
    assert key == batch_key(["a", "b"]) and key.startswith("batch:") and key != batch_key(["a", "c"])


def test_a_decision_outside_any_batch_is_a_batch_of_its_own():
    result = batched(BatchSettings(max_tables=20), tables=TABLES[:3])
    lone = [replace(d, batch=None) for d in result.admitted]
    assert [len(b) for b in result.batches(lone)] == [1, 1, 1]


def test_a_table_in_a_run_of_another_operation_waits_for_it():
    from floe_dagster.core.plan.planner import PlanInput

    both = policies(policy(schedules={RDF: {"interval": "PT6H"}, EXP: {"interval": "PT6H"}}))
    tables = TABLES[:2]
    result = plan(PlanInput(
        now=NOW, catalog_tables=list(tables), loaded_tables=frozenset(tables), policies=both,
        limits=SchedulerSettings(), metrics={t: metrics(t) for t in tables},
        in_flight=frozenset({(TABLES[0].qualified, RDF)}), busy_tables=frozenset({TABLES[0].qualified}),
    ))
    busy = [d for d in result.decisions if d.table == TABLES[0]]
    assert [(d.operation, d.decision, d.reasons[0].split(":")[0]) for d in busy] == [
        (RDF, "skip", "in_flight"), (EXP, "skip", "in_flight")]
    assert "one run per table at a time" in busy[1].reasons[0]
    # the other table's first operation runs (the second waits for it: one operation per table at a time)
    assert [(d.table, d.operation) for d in result.admitted] == [(TABLES[1], RDF)]


def test_past_the_tick_cap_an_open_batch_with_room_still_takes_its_kind():
    # One run allowed: RDF's batch opens first; each EXP candidate would open a second run and is held back, each RDF
    # one joins the open batch until it is full (3 tables), then the next RDF candidate is held back too.
    raws = [policy(f"p{i}", t.qualified, {(RDF, EXP)[i % 2]: {"interval": "PT6H"}}) for i, t in enumerate(TABLES[:7])]
    result = batched(BatchSettings(max_tables=3), tables=TABLES[:7], policy_set=policies(*raws),
                     limits=SchedulerSettings(max_run_requests_per_tick=1))
    assert [d.table.name for d in result.admitted] == ["t00", "t02", "t04"]
    held = {d.table.name: d.reasons[0] for d in result.decisions if d.decision == "skip"}
    assert sorted(held) == ["t01", "t03", "t05", "t06"]
    assert all(reason.startswith("tick_cap: at most 1 run requests this tick") for reason in held.values())
