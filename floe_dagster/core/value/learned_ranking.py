"""Learned ranking, the pure half: what a (table, operation)'s own history of runs says about

* **(a) the measured-efficiency factor** of its debt score: how much maintenance buys per compute
  second on this table, against the fleet; the learned score is ``debt score × factor``;
* **(b) the compute its next run will take**: the estimate a compute budget
  (``max-compute-hours-per-hour``) admits on, checked against the real figures afterwards.

**Figures.** One :class:`LearningRun` per finished run (filled later from the runs' recorded compute
and benefit): executor CPU seconds, bytes rewritten, files removed, and the *scan-cost proxy* before
and after: the files and bytes a full scan opens. A run's **benefit** is the proxy saved, in *file
opens*: files no longer opened, plus bytes no longer read at :data:`OPEN_COST_BYTES` a file (Spark's
``spark.sql.files.openCostInBytes``: what opening a file costs, in bytes it could have read
meanwhile). Without scan figures it is the data and delete files removed. Never below 0 (a run
that left a scan no cheaper bought nothing measurable). A failed run spent its compute and bought
nothing, so it counts as such; a run without a usable compute figure is left out.

**Weights.** A run weighs ``0.5 ** (age / half-life)`` (``ranking.history-half-life-days``; 0: no
decay), so a table is judged on what its writers do now; ``n``, the sum of the weights, is its
*effective* number of runs. Sums are ratios of weighted sums (one huge run does not swamp the rest).

**(b) Compute.** Per byte for rewrites: ``c_t`` = the table's compute ÷ bytes rewritten, shrunk toward
the prior ``c_0`` (the fleet's compute per byte for the operation, else :data:`DEFAULT_COMPUTE_S_PER_GIB`)
by credibility weighting: ``c = (n·c_t + k·c_0) / (n + k)`` with ``k`` = ``ranking.prior-runs``; the
estimate is ``c × the item's estimated bytes``. Without an estimated byte count (orphan cleanup,
expiry): per run instead (the table's mean compute per run, shrunk toward the fleet's).

**(a) Efficiency.** ``e_t`` = the table's benefit ÷ compute; the prior ``e_0`` = the item's expected
benefit (the byte estimate's files minus the files it would write) ÷ its compute estimate (b), else
the fleet's efficiency; ``e = (n·e_t + k·e_0) / (n + k)``; the factor is ``e ÷`` the fleet's efficiency,
within [:data:`FACTOR_MIN`, :data:`FACTOR_MAX`] so that no history can drop a critical table out of
sight or make a trivial one outrank everything. With no figures anywhere yet the factor is 1: the
static ranking.
"""

from __future__ import annotations

import math
from dataclasses import astuple, dataclass
from datetime import datetime
from typing import Iterable

from floe_dagster.core.basics.localtime import as_utc, naive_as_utc
from floe_dagster.core.basics.validation import setting

GIB = 1024**3
OPEN_COST_BYTES = 4 * 1024 * 1024  # spark.sql.files.openCostInBytes' default
# Priors for a fleet with no recorded run yet; the fleet's own figures replace them from its first
# recorded run on. Per GiB rewritten: the executor CPU seconds benchmark 15 measured for
# rewrite_data_files on a 2-core machine (29 s/GiB for a wide schema, 20 for a narrow one;
# benchmarks/README.md). Per run of an operation that rewrites nothing: not measured, a placeholder.
DEFAULT_COMPUTE_S_PER_GIB = 30.0
DEFAULT_COMPUTE_S_PER_RUN = 5.0
FACTOR_MIN, FACTOR_MAX = 0.05, 20.0


@dataclass(frozen=True)
class RankingSettings:
    """How due work is ranked: by debt score, or by debt score × the measured-efficiency factor (see Automation)."""

    learned: bool = setting(False, "rank by debt score × the measured-efficiency factor learned from each table's "
                            "runs")
    shadow: bool = setting(False, "compute the learned order beside the static one and note the comparison in each "
                           "plan, without changing what runs")
    prior_runs: float = setting(5, "k of the credibility weight n/(n+k): how many of a table's own runs weigh as "
                                "much as the prior")
    history_half_life_days: float = setting(30, "a run's weight halves every this many days (0: no decay)")

    def __post_init__(self) -> None:
        for name in ("prior_runs", "history_half_life_days"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ValueError(f"{name.replace('_', '-')}: expected a number ≥ 0, got {value!r}")


LEARNING_OFF = RankingSettings()


@dataclass(frozen=True)
class LearningRun:
    """One finished run of a (table, operation): its compute and what it bought."""

    finished_at: datetime
    compute_s: float  # executor CPU seconds of the table's work
    bytes_rewritten: int = 0
    data_files_removed: int = 0
    delete_files_removed: int = 0
    # The scan-cost proxy: files and bytes a full scan opens (data and delete files), before and after.
    scan_files_before: int | None = None
    scan_files_after: int | None = None
    scan_bytes_before: int | None = None
    scan_bytes_after: int | None = None
    succeeded: bool = True
    # A benefit measured elsewhere (file opens saved), used as is: see :meth:`measured`.
    measured_benefit: float | None = None

    @classmethod
    def measured(cls, finished_at: datetime, compute_s: float, benefit: float) -> "LearningRun":
        """A run as a (compute seconds, benefit) pair: the interface another source of figures plugs into."""
        return cls(finished_at, compute_s, measured_benefit=benefit)

    @property
    def scan_cost_saved(self) -> float | None:
        """File opens a full scan saves (bytes at OPEN_COST_BYTES a file); None without scan figures."""
        files = (self.scan_files_before, self.scan_files_after)
        if None in files:
            return None
        saved = float(files[0] - files[1])
        if self.scan_bytes_before is not None and self.scan_bytes_after is not None:
            saved += (self.scan_bytes_before - self.scan_bytes_after) / OPEN_COST_BYTES
        return saved

    @property
    def benefit(self) -> float:
        if not self.succeeded:
            return 0.0
        saved = self.measured_benefit if self.measured_benefit is not None else self.scan_cost_saved
        if saved is None:
            saved = float(self.data_files_removed + self.delete_files_removed)
        return max(0.0, saved)


@dataclass(frozen=True)
class HistoryTotals:
    """Decayed sums over runs (one table's, or the fleet's for one operation)."""

    runs: float = 0.0  # the effective number of runs, n
    compute_s: float = 0.0
    benefit: float = 0.0
    bytes_rewritten: float = 0.0
    rewrite_runs: float = 0.0  # the runs that rewrote bytes (compute per byte rests on them) ...
    rewrite_compute_s: float = 0.0  # ... and their compute

    @classmethod
    def of(cls, runs: Iterable[LearningRun], now: datetime, half_life_days: float) -> "HistoryTotals":
        now = as_utc(now)
        n = compute = benefit = rewritten = rewrite_runs = rewrite_compute = 0.0
        for run in runs:
            seconds = run.compute_s
            if not (isinstance(seconds, (int, float)) and math.isfinite(seconds) and seconds >= 0):
                continue  # not measured (a broken recorder): its benefit without its cost would skew every ratio
            age_days = max(0.0, (now - naive_as_utc(run.finished_at)).total_seconds() / 86400)
            w = 0.5 ** (age_days / half_life_days) if half_life_days > 0 else 1.0
            n += w
            compute += w * seconds
            benefit += w * run.benefit
            if run.bytes_rewritten > 0:
                rewritten += w * run.bytes_rewritten
                rewrite_runs += w
                rewrite_compute += w * seconds
        return cls(n, compute, benefit, rewritten, rewrite_runs, rewrite_compute)

    def __add__(self, other: "HistoryTotals") -> "HistoryTotals":
        return HistoryTotals(*(a + b for a, b in zip(astuple(self), astuple(other))))

    @property
    def efficiency(self) -> float | None:
        """Benefit per compute second (None: no compute recorded)."""
        return self.benefit / self.compute_s if self.compute_s > 0 else None

    @property
    def compute_per_byte(self) -> float | None:
        return self.rewrite_compute_s / self.bytes_rewritten if self.bytes_rewritten > 0 else None

    @property
    def compute_per_run(self) -> float | None:
        return self.compute_s / self.runs if self.runs > 0 else None


def fleet_totals(histories: Iterable[Iterable[LearningRun]], now: datetime, half_life_days: float) -> HistoryTotals:
    """The fleet's totals for one operation: every table's runs of it."""
    total = HistoryTotals()
    for runs in histories:
        total = total + HistoryTotals.of(runs, now, half_life_days)
    return total


def credibility(runs: float, prior_runs: float) -> float:
    """n / (n + k): how much a table's own figures count against the prior (0 without runs)."""
    return runs / (runs + prior_runs) if runs + prior_runs > 0 else 0.0


# -- (b) compute ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ComputeEstimate:
    """An item's estimated executor CPU seconds, and what they rest on."""

    seconds: float
    per: str  # "GiB" (a rewrite's estimated bytes) or "run"
    rate: float  # the shrunk rate: seconds per GiB or per run
    table_rate: float | None  # the table's own rate (None: no runs of the kind)
    prior_rate: float
    prior_source: str  # "fleet" or "default"
    runs: float
    weight: float
    why: str

    def to_json(self) -> dict[str, object]:
        return {"computeSeconds": round(self.seconds, 1), "per": self.per, "rate": round(self.rate, 3),
                "tableRate": round(self.table_rate, 3) if self.table_rate is not None else None,
                "priorRate": round(self.prior_rate, 3), "priorSource": self.prior_source,
                "runs": round(self.runs, 2), "weight": round(self.weight, 3), "why": self.why}


def estimate_compute(table: HistoryTotals, fleet: HistoryTotals, estimated_bytes: int,
                     settings: RankingSettings = LEARNING_OFF) -> ComputeEstimate:
    """The compute of the item's next run: per GiB of its estimated bytes, else per run (see the module)."""
    by_bytes = estimated_bytes > 0
    if by_bytes:
        own = table.compute_per_byte * GIB if table.compute_per_byte is not None else None
        fleet_rate = fleet.compute_per_byte * GIB if fleet.compute_per_byte is not None else None
        default, unit = DEFAULT_COMPUTE_S_PER_GIB, "GiB"
        n = table.rewrite_runs
    else:
        own, fleet_rate = table.compute_per_run, fleet.compute_per_run
        default, unit = DEFAULT_COMPUTE_S_PER_RUN, "run"
        n = table.runs
    prior, source = (fleet_rate, "fleet") if fleet_rate is not None else (default, "default")
    weight = credibility(n, settings.prior_runs) if own is not None else 0.0
    rate = weight * (own or 0.0) + (1 - weight) * prior
    seconds = rate * (estimated_bytes / GIB if by_bytes else 1.0)
    told_own = f"{own:.3g} s/{unit} over {n:.1f} run(s), weight {weight:.2f}" if own is not None else "no runs"
    why = (f"{seconds:.0f} compute s: {rate:.3g} s/{unit} ({told_own}; prior {prior:.3g} s/{unit}, "
           f"{'the fleet' if source == 'fleet' else 'the default'})"
           + (f" × {estimated_bytes / GIB:.3g} GiB estimated" if by_bytes else ""))
    return ComputeEstimate(seconds, unit, rate, own, prior, source, n, weight, why)


# -- (a) efficiency --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EfficiencyFactor:
    """The debt score's measured-efficiency factor of one item, and how it came about (``explain``)."""

    factor: float
    efficiency: float | None  # the shrunk benefit per compute second (None: nothing to learn from)
    table_efficiency: float | None
    prior_efficiency: float | None
    prior_source: str  # "estimate", "fleet" or "none"
    fleet_efficiency: float | None
    runs: float
    weight: float
    why: str

    def to_json(self) -> dict[str, object]:
        def per_hour(value: float | None) -> float | None:
            return round(value * 3600, 1) if value is not None else None

        return {"factor": round(self.factor, 3), "benefitPerComputeHour": per_hour(self.efficiency),
                "table": per_hour(self.table_efficiency), "prior": per_hour(self.prior_efficiency),
                "priorSource": self.prior_source, "fleet": per_hour(self.fleet_efficiency),
                "runs": round(self.runs, 2), "weight": round(self.weight, 3), "why": self.why}


NEUTRAL = "×1 (static ranking)"


def efficiency_factor(table: HistoryTotals, fleet: HistoryTotals, compute: ComputeEstimate | None = None,
                      expected_benefit: float | None = None,
                      settings: RankingSettings = LEARNING_OFF) -> EfficiencyFactor:
    """The factor of one item (see the module). ``compute`` and ``expected_benefit`` (the file opens
    its byte estimate says it saves: :func:`expected_files_removed`) make the prior; without them the
    prior is the fleet's efficiency."""
    reference = fleet.efficiency
    if not reference:  # no fleet figures yet, or a fleet whose runs bought nothing: nothing to compare with
        return EfficiencyFactor(1.0, None, table.efficiency, None, "none", reference, table.runs, 0.0,
                                f"{NEUTRAL}: no benefit per compute second recorded across the fleet yet")
    prior, source = reference, "fleet"
    if expected_benefit is not None and compute is not None and compute.seconds > 0:
        prior, source = max(0.0, expected_benefit) / compute.seconds, "estimate"
    own = table.efficiency
    weight = credibility(table.runs, settings.prior_runs) if own is not None else 0.0
    shrunk = weight * (own or 0.0) + (1 - weight) * prior
    factor = min(FACTOR_MAX, max(FACTOR_MIN, shrunk / reference))
    told_own = (f"{own * 3600:,.0f} file opens saved per compute hour over {table.runs:.1f} run(s), weight "
                f"{weight:.2f}" if own is not None else "no runs of its own")
    told_prior = (f"prior {prior * 3600:,.0f} ({expected_benefit:,.0f} expected for {compute.seconds:,.0f} compute s)"
                  if source == "estimate" and compute is not None else f"prior {prior * 3600:,.0f} (the fleet's)")
    clamp = " (clamped)" if factor != shrunk / reference else ""
    why = (f"×{factor:.3g}{clamp}: {told_own}; {told_prior} → {shrunk * 3600:,.0f} per compute hour against "
           f"the fleet's {reference * 3600:,.0f}")
    return EfficiencyFactor(factor, shrunk, own, prior, source, reference, table.runs, weight, why)


def expected_files_removed(files: int, total_bytes: int, groups: int, target_file_size_bytes: int) -> float:
    """The file opens a rewrite saves by its estimate: the files it takes minus the files it writes
    (at least one per group, the bytes at the target size)."""
    if files <= 0:
        return 0.0
    written = max(groups, math.ceil(total_bytes / target_file_size_bytes)) if target_file_size_bytes > 0 else groups
    return float(max(0, files - written))


__all__ = [
    "RankingSettings", "LEARNING_OFF", "LearningRun", "HistoryTotals", "fleet_totals", "credibility",
    "ComputeEstimate", "estimate_compute", "EfficiencyFactor", "efficiency_factor", "expected_files_removed",
    "OPEN_COST_BYTES", "DEFAULT_COMPUTE_S_PER_GIB", "DEFAULT_COMPUTE_S_PER_RUN", "FACTOR_MIN", "FACTOR_MAX",
]
