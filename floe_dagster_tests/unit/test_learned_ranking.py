"""Learned ranking, the pure half (core/value/learned_ranking.py): a run's benefit from the scan-cost proxy,
runs weighed by age (an injected clock), the measured-efficiency factor shrunk toward its prior when
a table's history is short, the compute estimate a compute budget admits on, and floe.yaml's
``ranking`` section."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from floe_dagster.core.value.learned_ranking import (
    DEFAULT_COMPUTE_S_PER_GIB,
    DEFAULT_COMPUTE_S_PER_RUN,
    FACTOR_MAX,
    FACTOR_MIN,
    OPEN_COST_BYTES,
    HistoryTotals,
    RankingSettings,
    LearningRun,
    credibility,
    efficiency_factor,
    estimate_compute,
    expected_files_removed,
    fleet_totals,
)
from floe_dagster.errors import SettingsError
from floe_dagster.settings import load_settings

GIB = 1024**3
NOW = datetime(2026, 11, 26, 12, 0, tzinfo=timezone.utc)
K5 = RankingSettings(prior_runs=5, history_half_life_days=0)  # no decay: the credibility arithmetic alone


def run(days_ago: float = 1, compute_s: float = 100, removed: int = 100, rewritten: int = GIB,
        **more) -> LearningRun:
    return LearningRun(NOW - timedelta(days=days_ago), compute_s, rewritten, data_files_removed=removed, **more)


def totals(*runs: LearningRun, settings: RankingSettings = K5) -> HistoryTotals:
    return HistoryTotals.of(runs, NOW, settings.history_half_life_days)


def test_a_runs_benefit_is_the_scan_cost_it_saved_in_file_opens():
    # 1,000 files → 10 and 64 MiB less to read (deleted rows): 990 + 16 file opens.
    scanned = run(scan_files_before=1000, scan_files_after=10, scan_bytes_before=GIB,
                  scan_bytes_after=GIB - 16 * OPEN_COST_BYTES)
    assert scanned.scan_cost_saved == 1006 and scanned.benefit == 1006
    assert run(removed=40, delete_files_removed=5).benefit == 45  # no scan figures: the files removed
    assert run(scan_files_before=10, scan_files_after=12).benefit == 0  # a scan no cheaper bought nothing
    assert run(removed=40, succeeded=False).benefit == 0  # a failed run spent compute and bought nothing


def test_runs_weigh_by_age_with_the_injected_clock():
    half = RankingSettings(history_half_life_days=10)
    both = totals(run(days_ago=0, removed=300), run(days_ago=10, removed=100), settings=half)
    assert both.runs == pytest.approx(1.5)
    assert both.benefit == pytest.approx(300 + 50) and both.compute_s == pytest.approx(150)
    # The same history read 10 days later: every run weighs half as much, the ratio stays.
    later = HistoryTotals.of([run(days_ago=0, removed=300), run(days_ago=10, removed=100)], NOW + timedelta(days=10),
                             10)
    assert later.runs == pytest.approx(0.75) and later.efficiency == pytest.approx(both.efficiency)
    future = HistoryTotals.of([run(days_ago=-1)], NOW, 10)  # a clock behind the runs: weight 1, never more
    assert future.runs == 1
    with pytest.raises(ValueError, match="aware"):
        HistoryTotals.of([run()], datetime(2026, 11, 26), 10)


def test_the_factor_is_the_shrunk_efficiency_against_the_fleets():
    fleet = totals(*[run(compute_s=100, removed=100) for _ in range(20)])  # 1 file per compute second
    own = totals(run(compute_s=100, removed=400), run(compute_s=100, removed=400))  # 4 per second, 2 runs
    factor = efficiency_factor(own, fleet, settings=K5)
    assert credibility(2, 5) == pytest.approx(2 / 7) == factor.weight
    assert factor.efficiency == pytest.approx(2 / 7 * 4 + 5 / 7 * 1)  # toward the fleet's prior
    assert factor.factor == pytest.approx(factor.efficiency / 1.0)
    assert factor.why.startswith("×1.86: 14,400 file opens saved per compute hour over 2.0 run(s), weight 0.29; "
                                 "prior 3,600 (the fleet's) → 6,686 per compute hour against the fleet's 3,600")
    # A long history is believed: 95 runs of its own against k = 5 weigh 95 %.
    long = totals(*[run(compute_s=100, removed=400) for _ in range(95)])
    assert efficiency_factor(long, fleet, settings=K5).factor == pytest.approx(0.95 * 4 + 0.05 * 1)
    assert efficiency_factor(long, fleet, settings=RankingSettings(prior_runs=0)).factor == pytest.approx(4)


def test_without_its_own_runs_the_prior_comes_from_the_byte_estimate():
    fleet = totals(*[run(compute_s=100, removed=100) for _ in range(20)])  # 100 s per GiB, 1 file per second
    none = HistoryTotals()
    compute = estimate_compute(none, fleet, GIB // 2, K5)  # 50 s at the fleet's 100 s/GiB
    assert compute.seconds == pytest.approx(50) and compute.prior_source == "fleet" and compute.weight == 0
    factor = efficiency_factor(none, fleet, compute, expected_benefit=200, settings=K5)
    assert factor.prior_source == "estimate" and factor.factor == pytest.approx(4)  # 200 files / 50 s vs 1
    assert "prior 14,400 (200 expected for 50 compute s)" in factor.why
    assert efficiency_factor(none, fleet, settings=K5).factor == 1  # no estimate: the fleet's own, ×1


def test_the_factor_is_neutral_without_fleet_figures_and_clamped():
    first_day = efficiency_factor(HistoryTotals(), HistoryTotals())
    assert first_day.factor == 1 and first_day.why.startswith("×1 (static ranking): no benefit per compute second")
    fleet = totals(*[run(compute_s=100, removed=100) for _ in range(20)])
    wasted = totals(*[run(compute_s=100, removed=0) for _ in range(200)])  # runs that never removed a file
    assert efficiency_factor(wasted, fleet, settings=K5).factor == FACTOR_MIN
    miracle = totals(*[run(compute_s=1, removed=10_000) for _ in range(200)])
    factor = efficiency_factor(miracle, fleet, settings=K5)
    assert factor.factor == FACTOR_MAX and "(clamped)" in factor.why


def test_the_compute_estimate_is_learned_from_the_tables_own_runs():
    nothing = HistoryTotals()
    day_one = estimate_compute(nothing, nothing, 2 * GIB)
    assert day_one.seconds == pytest.approx(2 * DEFAULT_COMPUTE_S_PER_GIB) and day_one.prior_source == "default"
    fleet = totals(*[run(compute_s=30, rewritten=GIB) for _ in range(10)])  # 30 s/GiB
    heavy = totals(*[run(compute_s=300, rewritten=GIB) for _ in range(5)])  # a table at 300 s/GiB, 5 runs
    estimate = estimate_compute(heavy, fleet, 2 * GIB, K5)
    assert estimate.weight == pytest.approx(0.5) and estimate.rate == pytest.approx(165)
    assert estimate.seconds == pytest.approx(330)
    assert estimate.why == ("330 compute s: 165 s/GiB (300 s/GiB over 5.0 run(s), weight 0.50; prior 30 s/GiB, "
                            "the fleet) × 2 GiB estimated")
    # Runs that rewrote nothing tell nothing about compute per byte.
    idle = totals(*[run(compute_s=50, rewritten=0, removed=0) for _ in range(5)])
    assert estimate_compute(idle, fleet, GIB, K5).seconds == pytest.approx(30)
    # Without estimated bytes (an orphan cleanup, an expiry): per run.
    per_run = estimate_compute(idle, HistoryTotals(), 0, K5)
    assert per_run.per == "run" and per_run.rate == pytest.approx(0.5 * 50 + 0.5 * DEFAULT_COMPUTE_S_PER_RUN)


def test_the_fleet_is_the_sum_of_its_tables():
    a, b = [run(compute_s=10)], [run(compute_s=30), run(compute_s=20)]
    fleet = fleet_totals([a, b], NOW, 0)
    assert fleet.runs == 3 and fleet.compute_s == 60 and fleet == totals(*a) + totals(*b)


def test_expected_files_removed_by_a_byte_estimate():
    assert expected_files_removed(1000, 3 * 512 * 1024**2, 1, 512 * 1024**2) == 997  # 1,000 files into 3
    assert expected_files_removed(100, 1024, 20, 512 * 1024**2) == 80  # one file per group at least
    assert expected_files_removed(0, 0, 0, 512 * 1024**2) == 0


def test_the_ranking_section_of_floe_yaml(tmp_path):
    config = tmp_path / "floe.yaml"
    config.write_text("ranking: {learned: true, prior-runs: 2.5, history-half-life-days: 0}\n")
    settings = load_settings(config, environ={"FLOE_RANKING__SHADOW": "true"})
    assert settings.ranking == RankingSettings(learned=True, shadow=True, prior_runs=2.5, history_half_life_days=0)
    config.write_text("data-dir: .floe\n")
    off = load_settings(config, environ={}).ranking
    assert (off.learned, off.shadow, off.prior_runs, off.history_half_life_days) == (False, False, 5, 30)
    config.write_text("ranking: {learned: maybe, prior-runs: -1, half-life: 3}\n")
    with pytest.raises(SettingsError) as raised:
        load_settings(config, environ={})
    keys = sorted(line.split(": ")[1] for line in raised.value.errors)
    assert keys == ["ranking.half-life", "ranking.learned", "ranking.prior-runs"], raised.value.errors
    with pytest.raises(ValueError, match="history-half-life-days: expected a number ≥ 0"):
        RankingSettings(history_half_life_days=float("nan"))


def test_figures_a_broken_recorder_wrote_cannot_skew_the_sums():
    broken = [run(compute_s=-50), run(compute_s=float("nan")), run(compute_s=100, rewritten=-5),
              run(compute_s=100, scan_files_before=3, scan_files_after=10**9)]
    sums = totals(*broken)
    # Runs without a usable compute figure are left out whole: their benefit alone would inflate efficiency.
    assert sums.runs == 2 and sums.compute_s == 200
    assert sums.bytes_rewritten == GIB and sums.rewrite_runs == 1  # the negative byte count is left out
    assert sums.benefit == 100  # the files one run removed; the one whose scan got dearer bought nothing
