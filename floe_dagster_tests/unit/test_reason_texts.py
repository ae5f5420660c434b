"""The texts users see of a plan, held equal to a recording (issue 35: decisions are made cheaply and
explained on demand, and what a user reads must not change with it): every decision's JSON (its reasons,
estimate, next eligible moment, SLA, scope, owner overrides: what ``plan``, ``explain`` and the API
show), explain's extras (the conditions, the quiet and writer verdicts, the backlog, held back or not),
the shadow summary, and for the admitted ones what the ledger, the run's tags and the materialization
metadata keep. Over a broad set of scenarios: 120 drawn as the planner's property strategy draws them (seeded)
and a lake of 32 tables under five policies (shadow, quiet, SLA, owner overrides, partition scoping,
after-write, critical pipelines) planned under eight sets of inputs (budgets, fair shares, batching, a
compute budget with learned ranking, a launcher's filter, backlogs, writers' runs, runs in flight).

To record again after a deliberate change of a text: ``FLOE_RECORD_TEXTS=1`` and run this module once."""

from __future__ import annotations

import json
import os
import random
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from floe_dagster.core.plan import gates
from floe_dagster.core.plan.batches import ONE_TABLE_PER_RUN, BatchSettings
from floe_dagster.core.rewrites.estimates import estimate_rewrite_data_files
from floe_dagster.core.plan.fair_shares import FAIR_SHARES_OFF, FairShareSettings
from floe_dagster.core.runs.history import OperationHistory
from floe_dagster.core.value.learned_ranking import RankingSettings
from floe_dagster.core.facts.measurements import TableMetrics
from floe_dagster.core.operations import ALL_OPERATIONS, Operation
from floe_dagster.core.rewrites.partition_scope import Backlog
from floe_dagster.core.plan.planner import Plan, PlanInput, SchedulerSettings, plan
from floe_dagster.core.runs.run_decision import RunDecision, shadow_summary
from floe_dagster.core.value.run_history import RecordedRun
from floe_dagster.core.runs.run_tags import PolicyFacts, batch_run_tags
from floe_dagster.core.basics.tables import TableName
from floe_dagster.core.schedules.writers import SOURCE_RULE, Writer, WriterRun
from floe_dagster_tests.unit.test_planner import (
    NOW, PROPERTY_POLICIES, PROPERTY_TABLES, metrics, ms, policies, policy,
)

RECORDING = Path(__file__).parent / "data" / "reason_texts.json"
RDF, EXP, ORPH = Operation.REWRITE_DATA_FILES, Operation.EXPIRE_SNAPSHOTS, Operation.ORPHAN_CLEANUP
MAN, RPDF = Operation.REWRITE_MANIFESTS, Operation.REWRITE_POSITION_DELETE_FILES
MB = 1024 * 1024
UTC = timezone.utc
TABLES = tuple(TableName("demo", (f"ns{i % 4}",), f"t{i:02d}") for i in range(32))
ALLOW = {"rewrite-data-files.target-file-size-bytes": {"min": 64 * MB, "max": 2**30}, "maintenance.enabled": {},
         "expire-snapshots.retain-last": {}}


def lake_policies() -> Any:
    sla = {"maxAge": "PT6H", "severity": "ERROR", "owner": "team-x"}
    quiet = {"quietFor": "PT10M", "maxQuietWait": "PT6H"}
    plain = policy("plain", "demo.ns0.*", {RDF: {"interval": "PT1H", "sla": sla, **quiet},
                                           EXP: {"cronExpression": "15 * * * *"}, ORPH: {"interval": "PT6H"}},
                   conditions={"snapshotCountAbove": 20, "smallFileCountAbove": 5, "minIntervalMinutes": 30,
                               "perOperationMinIntervalMinutes": {"ORPHAN_CLEANUP": 600}})
    plain["ownerOverrides"] = {"allow": ALLOW}
    shadow = {**policy("watch", "demo.ns1.*", {RDF: {"interval": "PT30M"}, EXP: {"interval": "PT1H", "sla": sla}}),
              "mode": "shadow"}
    scoped = policy("scoped", "demo.ns2.*", {RDF: {"interval": "PT2H", "maxWriterWait": "PT1H"},
                                             EXP: {"interval": "PT1H", "windowStart": "22:00", "windowEnd": "04:00"},
                                             RPDF: {"afterWrite": {}}, MAN: {"interval": "P1D",
                                                                             "allowedDays": ["SAT", "SUN"]}})
    scoped["rewriteDataFiles"] = {"maxBytesPerRun": 6 * MB, "minInputFiles": 2}
    critical = policy("critical", "demo.ns3.*", {RDF: {"cronExpression": "0 */2 * * *"}, MAN: {"interval": "PT4H"},
                                                 EXP: {"interval": "PT3H", "enforceWindowEnd": True,
                                                       "windowStart": "08:00", "windowEnd": "13:00"}},
                      priority=5, conditions={"snapshotCountAbove": 40, "criticalPipeline": True,
                                              "criticalPipelineMaxDelayMinutes": 240})
    critical["ownerOverrides"] = {"allow": ALLOW}
    return policies(plain, shadow, scoped, critical)


def lake_metrics(rng: random.Random) -> dict[TableName, TableMetrics]:
    found = {}
    for index, t in enumerate(TABLES):
        groups = tuple((f"[{19000 + p}]", tuple(rng.choice((MB // 2, MB, 3 * MB)) for _ in range(2 + p)), ())
                       for p in range(rng.randint(1, 5)))
        sizes = tuple(size for _, files, _ in groups for size in files)
        properties = {"gc.enabled": "false"} if index % 11 == 5 else {}
        if index % 8 == 3:
            properties["floe.maintenance.enabled"] = "false"
        found[t] = TableMetrics(
            qualified_name=t.qualified, metadata_location=f"file:///w/{t.name}/metadata/v1.json", tier="full",
            collected_at_ms=ms(NOW), data_file_count=len(sizes), total_data_bytes=sum(sizes), record_count=1000,
            data_file_sizes=sizes, data_file_groups=groups, partition_count=len(groups),
            partition_spec_id=0, snapshot_count=rng.randint(1, 80), newest_snapshot_ms=ms(NOW),
            current_snapshot_id=rng.randint(1, 5), delete_file_count=rng.choice((0, 0, 3)), properties=properties,
            newest_foreign_commit_ms=ms(NOW - timedelta(minutes=rng.choice((3, 30, 300)))),
            newest_foreign_commit_operation="append")
    return found


def lake_history(rng: random.Random) -> dict[tuple[str, Operation], OperationHistory]:
    found = {}
    for t in TABLES:
        for op in ALL_OPERATIONS:
            kind = rng.random()
            start = NOW - timedelta(minutes=rng.randint(1, 600))
            if kind < 0.3:
                continue
            if kind < 0.6:
                found[(t.qualified, op)] = OperationHistory(last_run_start=start, last_run_succeeded=True,
                                                            last_success_start=start, runs=5)
            elif kind < 0.75:
                found[(t.qualified, op)] = OperationHistory(
                    last_run_start=start, last_run_succeeded=False, last_success_start=start - timedelta(days=1),
                    last_failure_at=start, consecutive_failures=rng.randint(1, 5), runs=9, failures=4)
            elif kind < 0.85:
                found[(t.qualified, op)] = OperationHistory(
                    last_run_start=start, last_success_start=start - timedelta(hours=3), consecutive_conflicts=2,
                    last_conflict_at=NOW - timedelta(minutes=rng.randint(1, 20)), runs=4)
            else:
                found[(t.qualified, op)] = OperationHistory(
                    last_run_start=start, last_run_succeeded=True, last_success_start=start - timedelta(hours=8),
                    consecutive_zero_change=rng.randint(3, 8), last_snapshot_after=rng.randint(1, 5), runs=12)
    return found


def lake_inputs() -> list[PlanInput]:
    rng = random.Random(35)
    metrics, history = lake_metrics(rng), lake_history(rng)
    writer = ("etl", "ns2")
    writers = {t.qualified: (Writer(writer, SOURCE_RULE, 40 + i, f"w-{i}", NOW - timedelta(minutes=20 + i)),)
               for i, t in enumerate(TABLES) if t.namespace_str == "ns2"}
    runs = {(t.qualified, op): tuple(RecordedRun(NOW - timedelta(hours=h, minutes=9), NOW - timedelta(hours=h), True,
                                                 bytes_rewritten=20 * MB * h) for h in (1, 5, 30))
            for t in TABLES[::3] for op in (RDF, EXP)}
    base = PlanInput(
        now=NOW, catalog_tables=list(TABLES[:-2]), loaded_tables=frozenset(TABLES[1:]), policies=lake_policies(),
        limits=SchedulerSettings(), metrics=metrics, history=history,
        estimate_bytes=lambda t, op, m, config: (estimate_rewrite_data_files(m, config).bytes if op is RDF
                                                 else (m.total_data_bytes // 3 if m is not None else 0)),
        in_flight=frozenset({(TABLES[7].qualified, RDF), (TABLES[12].qualified, EXP)}),
        busy_tables=frozenset({TABLES[9].qualified}), last_attempts={(TABLES[2].qualified, RDF, "x"): 1},
        writers=writers, writer_runs={writer: (WriterRun("w-run", "STARTED", writer),)},
        backlogs={(t.qualified, RDF): Backlog(f"interval:{(NOW - timedelta(hours=3)).isoformat()}",
                                              NOW - timedelta(hours=3), partitions=2, bytes=4 * MB,
                                              continuation=False) for t in TABLES if t.namespace_str == "ns2"},
        recorded_runs=runs,
    )
    tight = SchedulerSettings(max_tables_per_poll=5, max_operations_per_poll=4, max_bytes_per_hour=12 * MB,
                              max_run_requests_per_tick=4, max_queued_runs=8)
    return [
        base,
        replace(base, limits=replace(tight, max_tables_per_poll=7, max_operations_per_poll=0,
                                     max_run_requests_per_tick=25, max_queued_runs=100),
                bytes_last_hour=5 * MB, queued_runs=2),
        replace(base, limits=tight, fair_shares=FairShareSettings(by="namespace", weights={"ns0": 3}),
                batching=BatchSettings(max_tables=3)),
        replace(base, limits=SchedulerSettings(max_compute_hours_per_hour=0.005), ranking=RankingSettings(
            learned=True, shadow=True)),
        replace(base, launcher_filter=lambda d: d.trigger == "cron", batching=BatchSettings(max_tables=4)),
        replace(base, backlogs={}, writer_runs={}, limits=SchedulerSettings(condition_based_triggering_enabled=False)),
        replace(base, now=NOW + timedelta(hours=13, minutes=7), shadow_bytes_last_hour=3 * MB),
        replace(base, history={key: OperationHistory(last_success_start=NOW - timedelta(hours=7), runs=3)
                               for key in history}),  # due, within the orphan cleanup's minimum interval
    ]


def _texts(data: PlanInput, result: Plan) -> dict[str, Any]:
    """What a user may read of one plan."""
    decisions = []
    for d in result.decisions:
        told = d.to_json()
        told.update(trigger=d.trigger, heldBack=d.held_back, conditions=d.conditions, batch=d.batch,
                    quiet=d.quiet.detail if d.quiet is not None else None,
                    writer=d.writer_hold.detail if d.writer_hold is not None else None,
                    backlog=d.backlog.slot if d.backlog is not None else None,
                    backoffUntil=str(d.backoff_until), throttledUntil=str(d.throttled_until),
                    maxRuntime=d.max_runtime_s, slot=d.slot, attempt=d.attempt)
        if d.decision == "run" and d.shadow:
            told["summary"] = shadow_summary("; ".join(d.reasons), data.now)
        decisions.append(told)
    facts = {t: PolicyFacts(d.policy, "v1", {}, 3600.0) for t, d in ((d.table, d) for d in result.decisions)}
    runs = []
    for batch in result.batches():
        admitted = [RunDecision.admitted(d) for d in batch]
        runs.append({"tags": batch_run_tags(admitted, facts, "sensor:all", admitted[0].item_key),
                     "metadata": [a.metadata() for a in admitted]})
    return {"decisions": decisions, "notes": result.notes, "counts": result.reason_counts(), "runs": runs}


def drawn_input(rng: random.Random) -> PlanInput:
    """One input like the planner's property strategy draws (test_planner.plan_inputs), drawn by a seeded
    ``random``: the same on every run, whatever else the session imported."""
    now = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=rng.randint(0, 365 * 86400))

    def moment(days: int = 20) -> datetime | None:
        return None if rng.random() < 0.3 else now + timedelta(seconds=rng.randint(-days * 86400, 3600))

    found = {t: metrics(t, tier="full" if full else "summary", snapshot_count=rng.randint(0, 700),
                        delete_file_count=rng.randint(0, 10), current_snapshot_id=rng.choice([None, 1, 2, 3]),
                        data_file_sizes=(1, 2, 10**9) if full else None,
                        properties={"gc.enabled": rng.choice(["true", "false"])})
             for t in PROPERTY_TABLES if rng.random() < 0.5 for full in (rng.random() < 0.5,)}
    history = {}
    for t in PROPERTY_TABLES:
        for op in ALL_OPERATIONS:
            if rng.random() < 0.5:
                failures = rng.randint(0, 12)
                history[(t.qualified, op)] = OperationHistory(
                    last_success_start=moment(), last_failure_at=moment(9) if failures else None,
                    consecutive_failures=failures, consecutive_zero_change=rng.randint(0, 8),
                    last_snapshot_after=rng.choice([None, 1, 2]), runs=failures + 3, failures=failures)
    sizes = {t: rng.randint(0, 1500) for t in PROPERTY_TABLES if rng.random() < 0.5}
    limits = SchedulerSettings(
        condition_based_triggering_enabled=rng.random() < 0.5, max_tables_per_poll=rng.randint(0, 3),
        max_operations_per_poll=rng.randint(0, 4), max_bytes_per_hour=rng.choice([0, 500, 2000]),
        failure_backoff_threshold=rng.randint(1, 4), failure_backoff_hours=rng.choice([0.5, 6]),
        zero_change_threshold=rng.randint(0, 6), max_run_requests_per_tick=rng.randint(1, 6),
        max_queued_runs=rng.randint(0, 10))
    return PlanInput(
        now=now, catalog_tables=rng.sample(PROPERTY_TABLES, rng.randint(0, 5)),
        loaded_tables=frozenset(rng.sample(PROPERTY_TABLES, rng.randint(0, 5))),
        policies=rng.choice(PROPERTY_POLICIES), limits=limits, metrics=found, history=history,
        in_flight=frozenset((rng.choice(PROPERTY_TABLES).qualified, rng.choice(ALL_OPERATIONS))
                            for _ in range(rng.randint(0, 4))),
        bytes_last_hour=rng.choice([0, 100, 600]), queued_runs=rng.randint(0, 8),
        estimate_bytes=lambda t, op, m, config: sizes.get(t, 0),
        fair_shares=rng.choice([FAIR_SHARES_OFF, FairShareSettings(by="namespace"),
                                FairShareSettings(by="namespace", weights={"hr": 3}),
                                FairShareSettings(by="tag:team", default_weight=0.5)]),
        batching=rng.choice([ONE_TABLE_PER_RUN, BatchSettings(max_tables=2)]))


def _all_texts() -> list[dict[str, Any]]:
    rng = random.Random(3512)
    inputs = [*lake_inputs(), *(drawn_input(rng) for _ in range(120))]
    return json.loads(json.dumps([_texts(data, plan(data)) for data in inputs], default=str))


def test_the_texts_users_read_are_those_recorded():
    told = _all_texts()
    if os.environ.get("FLOE_RECORD_TEXTS"):
        RECORDING.write_text(json.dumps(told, indent=None, separators=(",", ":")) + "\n")
    recorded = json.loads(RECORDING.read_text())
    assert len(told) == len(recorded)
    for index, (now, then) in enumerate(zip(told, recorded)):
        assert now == then, f"plan {index} tells other texts than recorded"
    # The scenarios reach what they are meant to: each gate and admission step, and the extras.
    codes = {c for plan_texts in told for c in plan_texts["counts"]}
    assert codes >= {"schedule_disabled", "owner_paused", "gc_disabled", "table_missing", "not_loaded", "not_due",
                     "window_closed", "day_not_allowed", "failure_backoff", "conflict_retry", "zero_change_throttle",
                     "conditions_unmet", "min_interval", "not_quiet", "in_flight", "budget_tables",
                     "budget_operations", "budget_bytes", "budget_compute", "tick_cap", "budget_share",
                     "out_of_scope"}, codes
    texts = json.dumps(told)
    for fragment in ("would run: ", "partition-scoped", "trigger\": \"sla", "continues slot", "writer_running",
                     "critical", "scoped_partitions", "floe/reason"):
        assert fragment in texts, fragment


def test_a_skipped_decisions_estimate_and_words_are_made_only_when_read(monkeypatch):
    # A tick makes 50,000 decisions and almost nobody reads a skipped one's text or estimate: the planner
    # estimates the work it admits (and what admission's steps read: the data-file rewrites it scopes), never
    # work a gate held, and tells a reason when it is read.
    asked: list[tuple[TableName, Operation]] = []
    told: list[tuple] = []
    tell = getattr(gates, "_backoff_detail", None)
    monkeypatch.setattr(gates, "_backoff_detail", lambda *values: told.append(values) or tell(*values),
                        raising=False)
    data = replace(lake_inputs()[0], estimate_bytes=lambda t, op, m, config: asked.append((t, op)) or 7)
    result = plan(data)
    rewrites = [d for d in result.decisions if d.operation.rewrites_data]
    passed = {(d.table, d.operation) for d in rewrites if d.passed_gates}
    admitted = {(d.table, d.operation) for d in rewrites if d.decision == "run"}
    assert admitted and admitted <= set(asked) <= passed and len(asked) == len(set(asked))
    assert told == []
    backing_off = [d for d in result.decisions if d.code == "failure_backoff"]
    assert backing_off and told == []
    first = backing_off[0]
    assert first.reasons[0].startswith("failure_backoff: ") and len(told) == 1
    skipped = next(d for d in rewrites if not d.passed_gates)
    assert skipped.estimated_bytes == 7 and (skipped.table, skipped.operation) == asked[-1]
    held = next((d for d in rewrites if d.held_back and (d.table, d.operation) not in asked[:-1]), None)
    assert held is not None  # held back by admission without being estimated: estimated once, when read
    count = len(asked)
    assert held.estimated_bytes == 7 and held.estimated_bytes == 7 and len(asked) == count + 1
