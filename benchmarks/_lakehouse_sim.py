"""Benchmark 15's simulated lakehouse: tables of mixed shapes, hourly planner ticks, one compute budget
per simulated hour spent in the static or the learned order (see bench_learned_ranking.py).

Two worlds start identical and see the same writes (each table's writes in an hour come from a
random stream of its own, seeded by (seed, table, hour)); they differ only in the order the budget is
spent in. The real pieces: the planner (``core/plan/planner.plan``: gates, health issues, the debt score
and its tie-breaks, Iceberg's file selection for the byte estimates), the learned ranking
(``core/value/learned_ranking.py``: the compute estimate both worlds admit on, and the efficiency factor
the learned world multiplies the debt score by) and the orders and admission of
``core/value/ranking_shadow.py``. The simulated pieces: the tables' files, their writers, and what a run
costs: the calibrated model for the files it really rewrites (Iceberg's rules, ``core/rewrites/estimates.py``),
times the table's hidden schema cost (the narrow or the wide schema's measured per-byte cost, times a
lognormal spread of σ 0.25) and a lognormal noise of σ 0.25 per run.
"""

from __future__ import annotations

import math
import random
import time
import zlib
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Iterator

from floe_dagster.core.plan.batches import BatchSettings
from floe_dagster.core.rewrites.estimates import (
    RewriteEstimate, estimate_rewrite_data_files, estimate_rewrite_position_delete_files, partition_group_indexes,
)
from floe_dagster.core.rewrites.rewrite_rules import RewriteRules
from floe_dagster.core.runs.history import OperationHistory
from floe_dagster.core.value.learned_ranking import (
    HistoryTotals, RankingSettings, LearningRun, efficiency_factor, estimate_compute, expected_files_removed,
)
from floe_dagster.core.facts.measurements import TableMetrics
from floe_dagster.core.operations import Operation
from floe_dagster.core.plan.planner import PlanInput, SchedulerSettings, plan
from floe_dagster.core.policies.policy import parse_policies_text
from floe_dagster.core.value.ranking_shadow import compare_rankings
from floe_dagster.core.basics.tables import TableName

MIB, GIB = 1024**2, 1024**3
TARGET, DELETE_TARGET = 128 * MIB, 64 * MIB
START = datetime(2026, 11, 2, tzinfo=timezone.utc)
DATA, DELETES = Operation.REWRITE_DATA_FILES, Operation.REWRITE_POSITION_DELETE_FILES
POLICIES = f"""
- name: lake
  tablePattern: "lake.*.*"
  rewriteDataFiles: {{targetFileSizeBytes: {TARGET}, removeDanglingDeletes: true}}
  rewriteDataFilesSchedule: {{interval: PT1H}}
  triggerConditions: {{smallFilePercentageAbove: 20, deleteFileCountAbove: 10, triggerLogic: OR}}
- name: merge-on-read
  tablePattern: "lake.*.t*_mor"
  rewriteDataFiles: {{targetFileSizeBytes: {TARGET}, removeDanglingDeletes: true}}
  rewriteDataFilesSchedule: {{interval: PT1H}}
  rewritePositionDeleteFiles: {{}}
  rewritePositionDeleteFilesSchedule: {{interval: PT1H}}
  triggerConditions: {{smallFilePercentageAbove: 20, deleteFileCountAbove: 10, triggerLogic: OR}}
"""
SHAPES = (("hot_small", 0.25), ("few_large", 0.15), ("mor", 0.15), ("many_parts", 0.20), ("cold", 0.25))
LIMITS = SchedulerSettings(max_run_requests_per_tick=10**6, max_queued_runs=10**9)
ONE_TABLE_UNCAPPED = BatchSettings(max_tables=1, max_bytes=0)  # every table rewritten whole, as execute() does
LEARNING = RankingSettings(learned=True, prior_runs=5, history_half_life_days=30)


def log_uniform(rng: random.Random, low: float, high: float) -> int:
    return int(math.exp(rng.uniform(math.log(low), math.log(high))))


@dataclass
class SimTable:
    name: TableName
    shape: str
    narrow: bool
    schema_cost: float  # hidden: multiplies the per-byte cost (the schema's; unknown to every estimate)
    files: dict[str, list[int]]  # data file sizes by partition key
    deletes: dict[str, list[int]] = field(default_factory=dict)  # position delete file sizes by partition key
    last_write_ms: int = 0
    commits: list[int] = field(default_factory=list)  # commit times (ms) of the last day: the snapshots kept
    version: int = 0
    touched: dict[tuple[Operation, str], int] = field(default_factory=dict)  # changes per (files or deletes, partition)
    plans: dict[tuple[Operation, str], tuple[int, list[list[int]]]] = field(default_factory=dict)
    estimates: dict[Operation, tuple[int, RewriteEstimate]] = field(default_factory=dict)

    def changed(self, op: Operation, key: str) -> None:
        self.touched[(op, key)] = self.touched.get((op, key), 0) + 1

    def copy(self) -> "SimTable":
        return SimTable(self.name, self.shape, self.narrow, self.schema_cost,
                        {k: list(v) for k, v in self.files.items()},
                        {k: list(v) for k, v in self.deletes.items()}, self.last_write_ms, list(self.commits),
                        self.version, dict(self.touched))

    def commit(self, at_ms: int) -> None:
        self.version += 1
        self.last_write_ms = at_ms
        self.commits = [c for c in self.commits if c > at_ms - 86_400_000] + [at_ms]

    def scan(self) -> tuple[int, int]:
        """Files and bytes a full scan opens (data and delete files)."""
        sizes = [s for group in (*self.files.values(), *self.deletes.values()) for s in group]
        return len(sizes), sum(sizes)


def make_fleet(n: int, seed: int) -> list[SimTable]:
    rng = random.Random(seed)
    start_ms = int(START.timestamp() * 1000)
    fleet = []
    for i in range(n):
        shape = rng.choices([s for s, _ in SHAPES], [w for _, w in SHAPES])[0]
        narrow = rng.random() < 0.4
        suffix = "_mor" if shape == "mor" else ""
        table = SimTable(TableName("lake", (f"ns{i % 20:02d}",), f"t{i:05d}{suffix}"), shape, narrow,
                         rng.lognormvariate(0, 0.25), {})
        if shape == "hot_small":
            for p in range(rng.choice((1, 1, 2, 3))):
                table.files[f"[{p}]" if p or rng.random() < 0.5 else "[]"] = [
                    log_uniform(rng, 30e3, 3e6) for _ in range(log_uniform(rng, 20, 800))]
        elif shape == "few_large":
            table.files["[]"] = [log_uniform(rng, 20 * MIB, 90 * MIB) for _ in range(rng.randint(20, 200))]
        elif shape == "mor":
            for p in range(rng.randint(10, 40)):
                table.files[f"[{p}]"] = [log_uniform(rng, 1 * MIB, 16 * MIB) for _ in range(rng.randint(5, 30))]
                table.deletes[f"[{p}]"] = [log_uniform(rng, 5e3, 50e3) for _ in range(rng.randint(0, 6))]
        elif shape == "many_parts":
            for p in range(rng.randint(100, 400)):
                table.files[f"[{p}]"] = [log_uniform(rng, 50e3, 5e6) for _ in range(rng.randint(1, 12))]
        else:
            for p in range(rng.choice((1, 1, 4))):
                table.files[f"[{p}]"] = [log_uniform(rng, 50e3, 8e6) for _ in range(log_uniform(rng, 10, 800))]
        age_days = rng.uniform(2, 60) if shape == "cold" else rng.uniform(0, 0.5)
        table.commit(start_ms - int(age_days * 86_400_000))
        fleet.append(table)
    return fleet


def write(table: SimTable, hour: int, seed: int, at_ms: int) -> None:
    """What the table's writers commit in this hour (the same in both worlds)."""
    rng = random.Random(f"{seed}|{table.name.name}|{hour}")
    shape = table.shape
    if shape == "hot_small":
        keys = list(table.files) or ["[]"]
        rate = 3 + zlib.crc32(f"{seed}|{table.name.name}".encode()) % 57  # files per hour, the table's own
        for _ in range(rng.randint(rate // 2, rate)):
            key = rng.choice(keys)
            table.files.setdefault(key, []).append(log_uniform(rng, 30e3, 3e6))
            table.changed(DATA, key)
    elif shape == "few_large" and rng.random() < 1 / 6:
        table.files["[]"].append(log_uniform(rng, 20 * MIB, 90 * MIB))
        table.changed(DATA, "[]")
    elif shape == "mor":
        newest = sorted(table.files, key=lambda k: int(k[1:-1]))[-10:]
        for _ in range(rng.randint(2, 12)):
            key = rng.choice(newest)
            table.deletes.setdefault(key, []).append(log_uniform(rng, 5e3, 50e3))
            table.changed(DELETES, key)
        table.files[newest[-1]].append(log_uniform(rng, 1 * MIB, 8 * MIB))
        table.changed(DATA, newest[-1])
    elif shape == "many_parts":
        newest = max((int(k[1:-1]) for k in table.files), default=0) + (1 if hour % 24 == 0 else 0)
        for _ in range(rng.randint(2, 10)):
            table.files.setdefault(f"[{newest}]", []).append(log_uniform(rng, 50e3, 5e6))
        table.changed(DATA, f"[{newest}]")
    else:
        return
    table.commit(at_ms)


def metrics_of(table: SimTable, now_ms: int) -> TableMetrics:
    groups = tuple((key, tuple(sizes), ()) for key, sizes in table.files.items() if sizes)
    sizes = tuple(s for _, group, _ in groups for s in group)
    delete_groups = tuple((key, tuple(s)) for key, s in table.deletes.items() if s)
    deletes = sum(len(s) for _, s in delete_groups)
    return TableMetrics(
        qualified_name=table.name.qualified, metadata_location=f"sim://{table.name.qualified}/v{table.version}",
        tier="full", collected_at_ms=now_ms, data_file_count=len(sizes), total_data_bytes=sum(sizes),
        record_count=sum(sizes) // 50, data_file_sizes=sizes, delete_file_count=deletes,
        position_delete_file_count=deletes, equality_delete_file_count=0, snapshot_count=len(table.commits) + 1,
        oldest_snapshot_ms=now_ms - 86_400_000, newest_snapshot_ms=table.last_write_ms, manifest_count=5,
        manifest_total_bytes=200_000, partition_count=len(groups),
        max_files_per_partition=max((len(g) for _, g, _ in groups), default=0), current_snapshot_id=table.version,
        properties={"write.target-file-size-bytes": str(TARGET)}, data_file_groups=groups,
        position_delete_groups=delete_groups)


class CostModel:
    """The calibrated executor-CPU model (the fit of ``_spark_costs.py``) applied to what a run really does."""

    def __init__(self, fit: dict[str, Any]):
        self.data = fit["rewrite_data_files"]["terms"]
        self.deletes = fit["rewrite_position_delete_files"]["terms"]

    def data_cost(self, table: SimTable, files: int, nbytes: int, partitions: int, delete_files: int) -> float:
        per_gib = self.data["gib_narrow" if table.narrow else "gib_wide"] * table.schema_cost
        return (self.data["intercept"] + self.data["files"] * files + per_gib * nbytes / GIB
                + self.data["partitions"] * partitions + self.data["delete_files"] * delete_files)

    def delete_cost(self, delete_files: int, partitions: int) -> float:
        return self.deletes["intercept"] + self.deletes["delete_files"] * delete_files + \
            self.deletes["partitions"] * partitions


def groups_of(table: "SimTable", op: Operation, key: str, rules: RewriteRules) -> list[list[int]]:
    """Iceberg's file groups of one partition (core/rewrites/estimates.partition_group_indexes), memoised until
    the partition changes: an hour's writes change a few partitions of a table, not all of them."""
    stamp = table.touched.get((op, key), 0)
    found = table.plans.get((op, key))
    if found is None or found[0] != stamp:
        sizes = (table.files if op is DATA else table.deletes)[key]
        found = table.plans[(op, key)] = (stamp, partition_group_indexes(sizes, None, rules))
    return found[1]


def estimate(table: "SimTable", op: Operation, rules: RewriteRules) -> RewriteEstimate:
    """What the rewrite would take: core/rewrites/estimates' plan, summed over the partitions (one spec, no
    file-scoped deletes, no max-files-to-rewrite: the same numbers, checked against it on the first tick)."""
    cached = table.estimates.get(op)
    if cached is not None and cached[0] == table.version:
        return cached[1]
    nbytes = files = groups = partitions = 0
    source = table.files if op is DATA else table.deletes
    for key, sizes in source.items():
        chosen = groups_of(table, op, key, rules)
        if chosen:
            partitions += 1
            groups += len(chosen)
            files += sum(len(g) for g in chosen)
            nbytes += sum(sizes[i] for g in chosen for i in g)
    found = RewriteEstimate(nbytes, files, groups, partitions)
    table.estimates[op] = (table.version, found)
    return found


def output_files(input_bytes: int, rules: RewriteRules) -> int:
    """The files a file group is written as (Iceberg's ``SizeBasedFileRewritePlanner.expectedOutputFiles``):
    a remainder of at least the minimum file size is a file of its own; a smaller one is spread over
    the others while they stay under 1.1 × the target, else it is a file of its own too."""
    target = rules.target_file_size_bytes
    if input_bytes < target:
        return 1
    with_remainder, without = -(-input_bytes // target), input_bytes // target
    if input_bytes % target > rules.min_file_size_bytes:
        return with_remainder
    write_max = target + (rules.max_file_size_bytes - target) * 0.5  # Iceberg's writeMaxFileSize()
    if input_bytes / without < min(1.1 * target, write_max):
        return without
    return with_remainder


def execute(table: SimTable, op: Operation, rules: RewriteRules, model: CostModel, noise: float,
            at: datetime) -> LearningRun:
    """The run's real effect on the table (Iceberg's file selection) and its figures."""
    scan_before = table.scan()
    removed = removed_deletes = rewritten = files_in = partitions = applied = 0
    source = table.files if op is DATA else table.deletes
    for key, sizes in source.items():
        groups = groups_of(table, op, key, rules)
        if not groups:
            continue
        taken = {i for group in groups for i in group}
        out: list[int] = []
        for group in groups:
            group_bytes = sum(sizes[i] for i in group)
            count = output_files(group_bytes, rules)
            out += [group_bytes // count] * count
            rewritten += group_bytes
        files_in += len(taken)
        partitions += 1
        if op is DATA:
            applied += len(table.deletes.get(key, ()))
            if len(taken) == len(sizes) and table.deletes.get(key):  # every data file rewritten: its deletes dangle
                removed_deletes += len(table.deletes[key])
                table.deletes[key] = []
                table.changed(DELETES, key)
            removed += len(taken) - len(out)
        else:
            removed_deletes += len(taken) - len(out)
        source[key] = [s for i, s in enumerate(sizes) if i not in taken] + out
        table.changed(op, key)
    cost = (model.data_cost(table, files_in, rewritten, partitions, applied) if op is DATA
            else model.delete_cost(files_in, partitions)) if files_in else model.data["intercept"]
    at_ms = int(at.timestamp() * 1000)
    if files_in:
        table.commit(at_ms)
    scan_after = table.scan()
    return LearningRun(at, cost * noise, rewritten, removed, removed_deletes, scan_before[0], scan_after[0],
                      scan_before[1], scan_after[1])


@dataclass(frozen=True)
class Variant:
    """How a world ranks: the static order, or the learned one with its settings."""

    label: str
    learned: bool
    settings: RankingSettings = LEARNING
    estimate_prior: bool = True  # the prior from the byte estimate (else the fleet's efficiency)


STATIC = Variant("static", False)
VARIANTS = (STATIC, Variant("learned", True),
            Variant("learned, byte-estimate prior only (history ignored)", True,
                    RankingSettings(learned=True, prior_runs=1e12, history_half_life_days=30)),
            Variant("learned, history only (fleet prior)", True, estimate_prior=False))


@dataclass
class World:
    variant: Variant
    tables: dict[TableName, SimTable]
    figures: dict[tuple[str, Operation], list[LearningRun]] = field(default_factory=dict)
    history: dict[tuple[str, Operation], OperationHistory] = field(default_factory=dict)
    metrics: dict[TableName, tuple[int, TableMetrics]] = field(default_factory=dict)
    totals: dict[str, float] = field(default_factory=dict)
    late: dict[str, float] = field(default_factory=dict)  # the same over the last third of the hours
    hourly: list[float] = field(default_factory=list)  # compute spent in each hour
    carried_s: float = 0.0
    shadow: list[tuple[int, int, int]] = field(default_factory=list)  # (admitted, only learned, only static)
    first_debt: dict[str, list[float]] = field(default_factory=dict)  # the first tick's debt scores by shape
    last_factor: dict[tuple[TableName, Operation], float] = field(default_factory=dict)  # the newest factor of each


class Simulation:
    def __init__(self, fit: dict[str, Any], fleet: list[SimTable], seed: int):
        self.model, self.fleet, self.seed = CostModel(fit), fleet, seed
        self.policies = parse_policies_text(POLICIES)
        self.rules: dict[tuple[TableName, Operation], RewriteRules] = {}

    def rules_for(self, name: TableName, op: Operation) -> RewriteRules:
        found = self.rules.get((name, op))
        if found is None:
            config = self.policies.effective_policy(name).config(op)
            properties = {"write.target-file-size-bytes": str(TARGET)}
            found = self.rules[(name, op)] = (RewriteRules.for_data_files(config, properties) if op is DATA
                                              else RewriteRules.for_position_deletes(config, properties))
        return found

    def world(self, variant: Variant) -> World:
        return World(variant, {t.name: t.copy() for t in self.fleet})

    def candidates(self, world: World, now: datetime) -> list:
        """The decisions that passed every gate this tick (the planner with unlimited budgets)."""
        now_ms = int(now.timestamp() * 1000)
        metrics = {}
        for name, table in world.tables.items():
            cached = world.metrics.get(name)
            if cached is None or cached[0] != table.version:
                cached = world.metrics[name] = (table.version, metrics_of(table, now_ms))
            metrics[name] = cached[1]

        def estimate_bytes(name: TableName, op: Operation, table_metrics, config) -> int:
            return estimate(world.tables[name], op, self.rules_for(name, op)).bytes

        result = plan(PlanInput(now=now, catalog_tables=list(world.tables), loaded_tables=frozenset(world.tables),
                                policies=self.policies, limits=LIMITS, metrics=metrics, history=world.history,
                                estimate_bytes=estimate_bytes, batching=ONE_TABLE_UNCAPPED))
        return [d for d in result.decisions if d.decision == "run" or (
            d.reasons and d.reasons[0].startswith("in_flight") and "admitted this tick" in d.reasons[0])]

    def check_estimates(self, world: World, sample: int = 60) -> None:
        """The summed per-partition plan is core/rewrites/estimates' own estimate of the table."""
        for table in list(world.tables.values())[:sample]:
            metrics = metrics_of(table, 0)
            config = self.policies.effective_policy(table.name)
            for op, real in ((DATA, estimate_rewrite_data_files), (DELETES, estimate_rewrite_position_delete_files)):
                assert estimate(table, op, self.rules_for(table.name, op)) == real(metrics, config.config(op)), table

    def tick(self, world: World, hour: int, budget: float | None, late: bool) -> None:
        now = START + timedelta(hours=hour)
        now_ms = int(now.timestamp() * 1000)
        for table in world.tables.values():
            write(table, hour, self.seed, now_ms - 1)
        due = self.candidates(world, now)
        settings = world.variant.settings
        fleet = {op: HistoryTotals() for op in (DATA, DELETES)}
        for (_, op), runs in world.figures.items():
            fleet[op] = fleet[op] + HistoryTotals.of(runs, now, settings.history_half_life_days)
        learned: dict[int, tuple[float, float, float]] = {}  # id(decision) → (compute estimate, factor, benefit)
        for decision in due:
            op = decision.operation
            own = HistoryTotals.of(world.figures.get((decision.table.qualified, op), ()), now,
                                   settings.history_half_life_days)
            rough = estimate(world.tables[decision.table], op, self.rules_for(decision.table, op))
            # As the planner's rank stage (core/plan/learned_plan.py): one file written per group.
            expected = expected_files_removed(rough.files, rough.bytes, rough.groups, 0)
            compute = estimate_compute(own, fleet[op], rough.bytes, settings)
            factor = efficiency_factor(own, fleet[op], compute, expected if world.variant.estimate_prior else None,
                                       settings)
            learned[id(decision)] = (compute.seconds, factor.factor, expected)
            if hour == 0:
                world.first_debt.setdefault(world.tables[decision.table].shape, []).append(decision.debt_score)
            world.last_factor[(decision.table, op)] = factor.factor
        comparison = compare_rankings(due, lambda d: learned[id(d)][1], lambda d: learned[id(d)][0],
                                      lambda d: learned[id(d)][2], budget, used_s=world.carried_s)
        admitted = comparison.learned_admitted if world.variant.learned else comparison.static_admitted
        world.shadow.append((len(admitted), len(comparison.only_learned), len(comparison.only_static)))
        spent = sum(self.run(world, decision, hour, now, late) for decision in admitted)
        world.hourly.append(spent)
        if budget is not None:
            world.carried_s = max(0.0, world.carried_s + spent - budget)

    def run(self, world: World, decision, hour: int, now: datetime, late: bool) -> float:
        table, op = world.tables[decision.table], decision.operation
        key = (decision.table.qualified, op)
        noise = random.Random(f"{self.seed}|{decision.table.name}|{hour}|{op.value}").lognormvariate(0, 0.25)
        figures = execute(table, op, self.rules_for(decision.table, op), self.model, noise, now + timedelta(minutes=30))
        world.figures.setdefault(key, []).append(figures)
        before = world.history.get(key, OperationHistory())
        zero = figures.data_files_removed + figures.delete_files_removed == 0
        world.history[key] = OperationHistory(
            last_run_start=now, last_run_succeeded=True, last_success_start=now, runs=before.runs + 1,
            consecutive_zero_change=before.consecutive_zero_change + 1 if zero else 0,
            last_snapshot_after=table.version)
        for into in (world.totals, *((world.late,) if late else ())):
            for name, value in (("runs", 1), ("compute_s", figures.compute_s),
                                ("data_files_removed", figures.data_files_removed),
                                ("delete_files_removed", figures.delete_files_removed),
                                ("scan_cost_saved", figures.scan_cost_saved or 0.0),
                                (f"runs_{table.shape}", 1), (f"compute_{table.shape}", figures.compute_s),
                                (f"removed_{table.shape}", figures.data_files_removed + figures.delete_files_removed)):
                into[name] = into.get(name, 0.0) + value
        return figures.compute_s


def run_simulation(fit: dict[str, Any], tables: int, days: int, budget_shares: list[float], seed: int,
                   ablation: bool = True, variants: list[int] | None = None) -> Iterator[list[World]]:
    """The worlds of each budget share, one list per share (the static world first); ``variants``: the
    indexes into VARIANTS to simulate (the static one is always first)."""
    fleet = make_fleet(tables, seed)
    sim = Simulation(fit, fleet, seed)
    counts = {s: sum(1 for t in fleet if t.shape == s) for s, _ in SHAPES}
    print(f"\nsimulated lakehouse: {tables} tables ({', '.join(f'{n} {s}' for s, n in counts.items())}), {days} days "
          f"of hourly ticks; target file size {TARGET // MIB} MiB", flush=True)
    t0 = time.perf_counter()
    demand = sim.world(Variant("unlimited", False))
    sim.check_estimates(demand)
    for hour in range(48):
        sim.tick(demand, hour, None, late=False)
    steady = sum(demand.hourly[24:]) / 24
    print(f"demand: with no budget every due item runs every hour: {demand.hourly[0]:,.0f} executor CPU s in the first "
          f"hour (the backlog), {steady:,.0f} s per hour on the second day ({time.perf_counter() - t0:.0f} s)",
          flush=True)
    for index, share in enumerate(budget_shares):
        budget = share * steady
        print(f"\n### compute budget {budget:,.0f} executor CPU s per simulated hour ({share:.0%} of the second day's "
              "hourly demand), the same for every ranking", flush=True)
        worlds = []
        chosen = [VARIANTS[0], *(VARIANTS[i] for i in variants if i)] if variants else (
            VARIANTS if (ablation and index == 0) else VARIANTS[:2])
        for variant in chosen:
            world = sim.world(variant)
            t0 = time.perf_counter()
            for hour in range(days * 24):
                sim.tick(world, hour, budget, late=hour >= days * 16)
            print(f"  {variant.label}: {days * 24} ticks in {time.perf_counter() - t0:.0f} s", flush=True)
            worlds.append(world)
        yield worlds
