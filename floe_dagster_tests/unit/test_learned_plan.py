"""The learned ranking and the adaptive orphan cadence inside ``plan()`` (core/plan/learned_plan.py,
core/plan/plan_stages.py, the due gate with ORPHAN_CLEANUP's cadence hook), and the figures a run records
(core/runs/run_figures.py) as the ranking reads them (core/value/run_history.py). The clock is injected everywhere."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

from floe_dagster.core.runs.history import OperationHistory
from floe_dagster.core.value.learned_ranking import LEARNING_OFF, RankingSettings, LearningRun
from floe_dagster.core.plan.learned_plan import LearnedView
from floe_dagster.core.facts.measurements import TableMetrics
from floe_dagster.core.operations import Operation
from floe_dagster.core.plan.planner import PlanInput, SchedulerSettings, plan
from floe_dagster.core.policies.policy import parse_policies_text
from floe_dagster.core.runs.run_figures import (
    NO_SPARK,
    SPARK,
    SPARK_CONNECT,
    Benefit,
    Compute,
    TableShape,
    figures_from_json,
    figures_from_metadata,
    figures_json,
    outcome_columns,
)
from floe_dagster.core.value.run_history import RecordedRun, compute_seconds, compute_source, learning_run
from floe_dagster.core.basics.tables import TableName

NOW = datetime(2026, 11, 26, 12, 0, tzinfo=timezone.utc)
RDF, ORPHANS = Operation.REWRITE_DATA_FILES, Operation.ORPHAN_CLEANUP
GIB = 1024**3


def table(name: str) -> TableName:
    return TableName("demo", ("sales",), name)


def metrics(t: TableName) -> TableMetrics:
    return TableMetrics(qualified_name=t.qualified, metadata_location=f"file:///w/{t.name}/v1.json", tier="summary",
                        collected_at_ms=0, data_file_count=10, total_data_bytes=10_000, snapshot_count=3,
                        newest_snapshot_ms=int((NOW - timedelta(days=2)).timestamp() * 1000), current_snapshot_id=1)


def shape(files: int, live_bytes: int = 10 * GIB) -> TableShape:
    return TableShape(data_files=files, delete_files=0, live_bytes=live_bytes, manifests=1, snapshots=1)


def rewrite_run(days_ago: float, compute_s: float, files_removed: int) -> RecordedRun:
    """A successful rewrite that recorded this executor CPU (its wall seconds twice that: waiting counts
    there, never here) and this many files fewer."""
    finished = NOW - timedelta(days=days_ago)
    compute = Compute(SPARK, wall_s=2 * compute_s, executor_cpu_s=compute_s)
    return RecordedRun(finished - timedelta(seconds=compute_s), finished, True, bytes_rewritten=GIB,
                       compute=compute, benefit=Benefit(shape(files_removed + 10), shape(10)))


def rewrite_input(ranking: RankingSettings, runs, limit: int = 1) -> PlanInput:
    tables = [table("cheap"), table("costly")]
    policies = parse_policies_text(json.dumps([{"name": "p", "tablePattern": "demo.sales.*", "rewriteDataFiles": {},
                                                "rewriteDataFilesSchedule": {"interval": "PT1H"}}]))
    return PlanInput(now=NOW, catalog_tables=tables, loaded_tables=frozenset(tables), policies=policies,
                     limits=SchedulerSettings(max_tables_per_poll=limit), metrics={t: metrics(t) for t in tables},
                     ranking=ranking, recorded_runs=runs)


# "costly" sorts after "cheap" by name at the same debt: the static order admits "cheap" first; its runs
# bought 10 files per 100 s against "costly"'s 1,000 per 100 s.
HISTORY = {("demo.sales.cheap", RDF): [rewrite_run(d, 100, 10) for d in (1, 2, 3, 4, 5, 6)],
           ("demo.sales.costly", RDF): [rewrite_run(d, 100, 1000) for d in (1, 2, 3, 4, 5, 6)]}


def test_the_learned_setting_ranks_by_debt_times_the_factor():
    static = plan(rewrite_input(LEARNING_OFF, HISTORY))
    learned = plan(rewrite_input(RankingSettings(learned=True), HISTORY))
    assert [d.table.name for d in static.admitted] == ["cheap"]  # same debt: the name breaks the tie
    assert [d.table.name for d in learned.admitted] == ["costly"]
    factors = {d.table.name: d.efficiency.factor for d in learned.decisions}
    assert factors["costly"] > 1 > factors["cheap"]
    assert all(d.efficiency is None for d in static.decisions)  # off: nothing learned, nothing shown by the plan


def test_shadow_mode_compares_both_orders_and_changes_nothing():
    static = plan(rewrite_input(LEARNING_OFF, HISTORY))
    shadow = plan(rewrite_input(RankingSettings(shadow=True), HISTORY))
    assert [d.table.name for d in shadow.admitted] == [d.table.name for d in static.admitted] == ["cheap"]
    note = next(n for n in shadow.notes if n.startswith("ranking shadow"))
    assert "static admits 1, learned 1 (1 only by learned, 1 only by static)" in note, note
    assert not any(n.startswith("ranking shadow") for n in static.notes)


def test_the_factor_shrinks_toward_the_fleet_while_the_history_is_short():
    # The same per-run efficiency, 1 run against 20: the short history's factor stays nearer 1.
    def factor(runs: int) -> float:
        history = {("demo.sales.t", RDF): [rewrite_run(0.1 * i, 100, 1000) for i in range(runs)],
                   ("demo.sales.fleet", RDF): [rewrite_run(0.01 * i, 100, 100) for i in range(200)]}
        return LearnedView.of(history, NOW, RankingSettings(prior_runs=5)).factor("demo.sales.t", RDF).factor

    one, twenty = factor(1), factor(20)
    assert 1 < one < twenty
    # n/(n+k) of the table's own efficiency against the fleet's: 1 run of k=5 counts 1/6.
    view = LearnedView.of({("demo.sales.t", RDF): [rewrite_run(0, 100, 1000)],
                           ("demo.sales.fleet", RDF): [rewrite_run(0, 100, 100)] * 20},
                          NOW, RankingSettings(prior_runs=5))
    fleet = view.fleet[RDF].efficiency
    assert view.factor("demo.sales.t", RDF).factor == (1 / 6 * 10 + 5 / 6 * fleet) / fleet


def test_old_runs_fade_with_the_injected_clock():
    runs = {("demo.sales.t", RDF): [rewrite_run(60, 100, 1000)], ("demo.sales.f", RDF): [rewrite_run(0, 100, 10)]}
    settings = RankingSettings(history_half_life_days=30)
    view = LearnedView.of(runs, NOW, settings)
    assert abs(view.items[("demo.sales.t", RDF)].runs - 0.25) < 1e-9  # two half-lives
    later = LearnedView.of(runs, NOW + timedelta(days=30), settings)
    assert abs(later.items[("demo.sales.t", RDF)].runs - 0.125) < 1e-9


def test_a_run_as_a_compute_benefit_pair_plugs_in():
    pair = LearningRun.measured(NOW, 50.0, 400.0)
    assert pair.benefit == 400.0 and pair.compute_s == 50.0


def test_compute_is_the_recorded_executor_cpu_and_wall_seconds_only_without_an_executor_figure():
    assert compute_seconds(Compute(SPARK, wall_s=12.5, executor_cpu_s=3.0)) == (3.0, "executor_cpu")
    assert compute_seconds(Compute(SPARK, wall_s=12.5, unavailable="not measured")) is None
    assert compute_seconds(Compute(SPARK_CONNECT, wall_s=12.5, unavailable="connect")) == (12.5, "wall")
    assert compute_seconds(Compute(NO_SPARK, wall_s=0.5, executor_cpu_s=0.0)) == (0.5, "wall")
    cpu, wall = rewrite_run(1, 100, 10), RecordedRun(NOW, NOW, True, compute=Compute(SPARK_CONNECT, wall_s=4.0))
    assert (compute_source([cpu]), compute_source([wall]), compute_source([cpu, wall])) == ("executor_cpu", "wall",
                                                                                           "mixed")
    counted = learning_run(cpu)
    assert (counted.compute_s, counted.data_files_removed, counted.scan_files_before) == (100.0, 10, 20)


def test_failures_count_as_compute_without_benefit_but_not_the_ones_that_were_not_the_tables():
    failed = RecordedRun(NOW - timedelta(seconds=30), NOW, False, failure_kind=None)
    locked = RecordedRun(NOW - timedelta(seconds=30), NOW, False, failure_kind="lock_held")
    assert learning_run(failed) == LearningRun(NOW, 30.0, succeeded=False)
    assert learning_run(locked) is None
    assert learning_run(RecordedRun(NOW, NOW, True)) is None  # recorded before figures were


def test_orphans_found_are_measured_when_quarantined_and_estimated_otherwise():
    benefit = Benefit(shape(10, 10_000), shape(10, 10_000), files_deleted=4)  # 1,000 bytes a file
    metadata = {**Compute(SPARK, 1.0, 0.5).to_metadata(), **benefit.to_metadata(), "orphan_files_count": 4}
    _, quarantined = figures_from_metadata({**metadata, "quarantined_bytes": 123})
    assert (quarantined.orphan_bytes, quarantined.orphan_bytes_estimated) == (123, False)
    _, estimated = figures_from_metadata({**metadata, "orphan_backlog_files": 1})
    assert (estimated.orphan_bytes, estimated.orphan_bytes_estimated) == (5000, True)
    assert figures_from_json(figures_json(None, estimated))[1] == estimated  # the outcome row keeps them
    assert figures_from_metadata(metadata | {"orphan_files_count": None})[1].orphan_bytes is None


def test_orphan_bytes_reclaimed_are_the_listings_sizes_and_estimated_only_after_the_plain_call():
    benefit = Benefit(shape(10, 10_000), shape(10, 10_000), files_deleted=4)  # 1,000 bytes a file
    metadata = {**Compute(SPARK, 1.0, 0.5).to_metadata(), **benefit.to_metadata(), "orphan_files_count": 4}
    _, listed = figures_from_metadata({**metadata, "orphan_bytes_reclaimed": 4321})  # rounds: the listing's sizes
    assert (listed.orphan_bytes_reclaimed, listed.orphan_bytes_reclaimed_estimated) == (4321, False)
    _, plain = figures_from_metadata(metadata)  # the plain CALL: Iceberg names the files, not their sizes
    assert (plain.orphan_bytes_reclaimed, plain.orphan_bytes_reclaimed_estimated) == (4000, True)
    _, dry = figures_from_metadata({**metadata, "orphan_bytes_reclaimed": 0})  # a dry run removes nothing
    assert dry.orphan_bytes_reclaimed == 0 and dry.orphan_bytes == 4000  # what it found is still there
    assert figures_from_json(figures_json(None, listed))[1] == listed  # the outcome row keeps them
    assert listed.to_metadata()["floe/benefit/orphan_bytes_reclaimed"] == 4321
    assert outcome_columns(None, listed)["orphan_bytes_reclaimed"] == 4321
    assert "floe/benefit/orphan_bytes_reclaimed" not in benefit.to_metadata()  # not an orphan cleanup


# -- the adaptive orphan cadence in the due gate -------------------------------------------------------


def orphan_input(now: datetime, runs, last_success: datetime | None) -> PlanInput:
    t = table("events")
    policies = parse_policies_text(json.dumps([{
        "name": "p", "tablePattern": "demo.sales.*",
        "orphanCleanup": {"adaptive": {"targetBytes": "1GiB", "min": "P1D", "max": "P30D"}},
        "orphanCleanupSchedule": {"interval": "PT1H"}}]))
    history = {(t.qualified, ORPHANS): OperationHistory(last_success_start=last_success, runs=len(runs))}
    return PlanInput(now=now, catalog_tables=[t], loaded_tables=frozenset([t]), policies=policies,
                     limits=SchedulerSettings(), metrics={t: metrics(t)}, history=history,
                     recorded_runs={(t.qualified, ORPHANS): runs})


def cleanup(days_ago: float, orphan_bytes: int) -> RecordedRun:
    finished = NOW - timedelta(days=days_ago)
    return RecordedRun(finished - timedelta(minutes=1), finished, True,
                       benefit=Benefit(shape(10), shape(10), files_deleted=3, orphan_bytes=orphan_bytes))


def test_an_adaptive_cleanup_waits_for_the_orphan_rate_not_the_schedules_interval():
    # 0.25 GiB a day over the last two periods, a 1 GiB target: every 4 days from the last cleanup,
    # though the schedule's own interval (PT1H) passed long ago.
    runs = [cleanup(4, 0), cleanup(2, GIB // 2)]
    last = runs[-1].started_at
    decision = plan(orphan_input(NOW, runs, last)).decisions[0]
    assert decision.decision == "skip" and decision.reasons[0].startswith("not_due: adaptive cadence, expected next")
    assert decision.next_eligible == NOW + timedelta(days=2)
    assert decision.cadence.interval == timedelta(days=4) and "every 4 days" in decision.cadence.why
    later = plan(orphan_input(NOW + timedelta(days=2), runs, last)).decisions[0]
    assert later.decision == "run" and later.trigger == "interval", later.reasons


def test_an_adaptive_cleanup_never_run_is_due_at_once_and_a_quiet_table_waits_the_maximum():
    first = plan(orphan_input(NOW, [], None)).decisions[0]
    assert first.decision == "run" and "no orphan cleanup recorded yet" in first.cadence.why
    quiet = [cleanup(3, 0), cleanup(1, 0)]
    decision = plan(orphan_input(NOW, quiet, quiet[-1].started_at)).decisions[0]
    assert decision.decision == "skip" and decision.cadence.clamped == "max"
    assert decision.next_eligible == quiet[-1].finished_at + timedelta(days=30)


def test_without_adaptive_the_schedule_alone_decides():
    t = table("events")
    policies = parse_policies_text(json.dumps([{"name": "p", "tablePattern": "demo.sales.*", "orphanCleanup": {},
                                                "orphanCleanupSchedule": {"interval": "PT1H"}}]))
    data = orphan_input(NOW, [cleanup(1, GIB)], NOW - timedelta(hours=2))
    decision = plan(PlanInput(**{**data.__dict__, "policies": policies})).decisions[0]
    assert decision.decision == "run" and decision.cadence is None and t == decision.table


def test_a_table_never_run_gets_its_prior_from_its_byte_estimate():
    # Benchmark 14: with the fleet's prior alone, a table the static order never ran stays at ×1 forever.
    # Its byte estimate says what a run would buy: 200 tiny files in one group against 2 files of 100 MiB.
    def full(name: str, sizes: tuple[int, ...]) -> TableMetrics:
        return TableMetrics(qualified_name=f"demo.sales.{name}", metadata_location="file:///w/v1.json", tier="full",
                            collected_at_ms=0, data_file_count=len(sizes), total_data_bytes=sum(sizes),
                            data_file_groups=(("[]", sizes, ()),),
                            properties={"write.target-file-size-bytes": str(128 * 1024**2)})

    fleet = {("demo.sales.other", RDF): [rewrite_run(d, 100, 50) for d in (1, 2, 3)]}
    view = LearnedView.of(fleet, NOW, RankingSettings())
    tiny = view.factor("demo.sales.tiny", RDF, full("tiny", (100_000,) * 200))
    large = view.factor("demo.sales.large", RDF, full("large", (100 * 1024**2,) * 2))
    assert tiny.prior_source == "estimate" and tiny.runs == 0
    assert tiny.factor > 1 > large.factor, (tiny.why, large.why)  # large: nothing to rewrite, the minimum
    assert view.factor("demo.sales.tiny", RDF).factor == 1.0  # no estimate (summary tier): the fleet's prior


def test_the_factors_prior_reads_the_config_with_the_tables_owner_overrides_as_the_byte_estimate_does():
    # 20 files of 100 MiB: small under the default target (512 MiB), not under the owner's 64 MiB. The byte
    # estimate reads the owner's target; the factor's prior read the policy's alone and promised a rewrite.
    t = table("owned")
    sizes = (100 * 1024**2,) * 20
    full = TableMetrics(qualified_name=t.qualified, metadata_location="file:///w/v1.json", tier="full",
                        collected_at_ms=0, data_file_count=len(sizes), total_data_bytes=sum(sizes),
                        data_file_groups=(("[]", sizes, ()),), snapshot_count=3, current_snapshot_id=1,
                        newest_snapshot_ms=int((NOW - timedelta(days=2)).timestamp() * 1000),
                        properties={"floe.rewrite-data-files.target-file-size-bytes": str(64 * 1024**2)})
    policies = parse_policies_text(json.dumps([{
        "name": "p", "tablePattern": "demo.sales.*", "rewriteDataFiles": {},
        "rewriteDataFilesSchedule": {"interval": "PT1H"},
        "ownerOverrides": {"allow": {"rewrite-data-files.target-file-size-bytes": {}}}}]))
    fleet = {("demo.sales.other", RDF): [rewrite_run(d, 100, 50) for d in (1, 2, 3)]}
    data = PlanInput(now=NOW, catalog_tables=[t], loaded_tables=frozenset([t]), policies=policies,
                     limits=SchedulerSettings(), metrics={t: full}, ranking=RankingSettings(learned=True),
                     recorded_runs=fleet)
    decision = plan(data).decisions[0]
    assert decision.owner_overrides is not None and decision.owner_overrides.applied
    view = LearnedView.of(fleet, NOW, RankingSettings())
    policy_only = view.factor(t.qualified, RDF, full, policies.get("p").config(RDF))
    owned = view.factor(t.qualified, RDF, full, decision.owner_overrides.config(RDF, policies.get("p").config(RDF)))
    assert policy_only.prior_efficiency != owned.prior_efficiency  # the override changes what the estimate promises
    assert decision.efficiency.prior_efficiency == owned.prior_efficiency, decision.efficiency.why
