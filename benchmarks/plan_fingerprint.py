"""The planner's output hashed as users read it, tick after tick: the check that a change to the planner's speed
changed nothing it decides or says (issue 35, item 8).

Benchmark 1's input (``bench_planner.plan_input``) of ``--tables`` tables under its policies with 5 and with 8 kinds,
planned in a sequence of ticks: cold, the same again (warm), then later and later clocks (30 s, 10 min, 1 h, 6 h,
a day on), some with a few tables changed (new metrics records, a new success in their history, a run in flight).
Each tick's every decision is read field by field as ``explain``, the API, run tags and Dagit read it (its reasons'
words, its estimate, its conditions' JSON, its item key, every other field rendered), with the notes and the
plan's JSON, and hashed; the script prints one hash per tick. Run it on two trees (``FLOE_BENCH_TREE``, as
benchmark 1's ``--vs``) and compare the lines: a tick whose hash differs names what a change broke. Then a cold tick
of the same input under each of the planner's options the ticks above leave off (:func:`option_ticks`: fair shares,
a launcher's filter, the learned and the shadow ranking, budgets), with the policies as they are, with one of them
in shadow mode, and with SLA contracts.

    FLOE_BENCH_TREE=/tmp/base python benchmarks/plan_fingerprint.py > base.txt
    python benchmarks/plan_fingerprint.py > new.txt && diff base.txt new.txt
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import sys
from datetime import datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_planner import (  # noqa: E402
    PlanInput, forget_everything, parse_policies_text, plan, plan_input, policies_for,
)
from _common import PLANNER_NOW  # noqa: E402

# (label, the clock's offset from PLANNER_NOW, forget everything first, the share of tables changed).
TICKS = (
    ("cold", timedelta(0), True, 0.0),
    ("warm", timedelta(0), False, 0.0),
    ("warm +30s", timedelta(seconds=30), False, 0.0),
    ("warm +10min, 3% changed", timedelta(minutes=10), False, 0.03),
    ("warm +1h", timedelta(hours=1), False, 0.0),
    ("warm +1h 30s", timedelta(hours=1, seconds=30), False, 0.0),
    ("warm +6h, 3% changed", timedelta(hours=6), False, 0.03),
    ("warm +1d", timedelta(days=1), False, 0.0),
    ("warm +1d again", timedelta(days=1), False, 0.0),
    ("cold +1d", timedelta(days=1), True, 0.0),
)


def rendered(value: object, operation: object = None) -> object:
    """A value as a reader sees it: words for reasons, numbers for estimates, JSON for verdicts."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    text = getattr(value, "text", None)
    if isinstance(text, str) and value.__class__.__name__ == "Reason":
        return text
    if value.__class__.__name__ == "LazyEstimate":
        return value.value()  # type: ignore[attr-defined]
    if hasattr(value, "to_json"):
        try:
            return rendered(value.to_json())  # type: ignore[attr-defined]
        except TypeError:
            return rendered(value.to_json(operation))  # type: ignore[attr-defined]
    if isinstance(value, dict):
        return {str(k): rendered(v, operation) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (tuple, list, frozenset, set)):
        items = [rendered(v, operation) for v in value]
        return sorted(items, key=repr) if isinstance(value, (set, frozenset)) else items
    if dataclasses.is_dataclass(value):
        return {f.name: rendered(getattr(value, f.name), operation) for f in dataclasses.fields(value)}
    return repr(value)


def decision_record(d: object) -> dict[str, object]:
    op = d.operation  # type: ignore[attr-defined]
    record = {f.name: rendered(getattr(d, f.name), op) for f in dataclasses.fields(d)}  # type: ignore[arg-type]
    for name in ("reasons", "estimated_bytes", "conditions", "item_key", "held_back", "code"):
        record[name] = rendered(getattr(d, name, None), op)
    record["to_json"] = rendered(d.to_json())  # type: ignore[attr-defined]
    return record


def tick_hash(result: object) -> tuple[str, dict[str, int]]:
    digest = hashlib.sha256()
    for d in result.decisions:  # type: ignore[attr-defined]
        digest.update(json.dumps(decision_record(d), sort_keys=True, default=repr).encode())
    digest.update(json.dumps(result.notes).encode())  # type: ignore[attr-defined]
    digest.update(json.dumps(result.to_json(), sort_keys=True, default=repr).encode())  # type: ignore[attr-defined]
    return digest.hexdigest()[:16], result.reason_counts()  # type: ignore[attr-defined]


def changed(data: PlanInput, share: float, salt: int) -> PlanInput:
    """``share`` of the tables changed: a new metrics record (another metadata location), a new success in
    one operation's history, one run in flight."""
    tables = sorted(data.metrics, key=lambda t: t.qualified)
    step = max(1, int(1 / share)) if share else 0
    picked = tables[salt % step::step] if step else []
    metrics, history, in_flight = dict(data.metrics), dict(data.history), set(data.in_flight)
    for i, table in enumerate(picked):
        old = metrics[table]
        metrics[table] = dataclasses.replace(old, metadata_location=f"{old.metadata_location}.{salt}",
                                             snapshot_count=old.snapshot_count + 1)
        key = next((k for k in history if k[0] == table.qualified), None)
        if key is not None:
            history[key] = dataclasses.replace(history[key], last_success_start=data.now, last_run_start=data.now,
                                               last_run_succeeded=True, consecutive_failures=0)
            if i % 3 == 0:
                in_flight.add(key)
    return PlanInput(**{**data.__dict__, "metrics": metrics, "history": history, "in_flight": frozenset(in_flight)})


def option_ticks(policies: str) -> list[tuple[str, str, str, dict[str, object]]]:
    """(policies' label, their YAML, option's label, PlanInput fields): each option under benchmark 1's policies,
    under the same with the ``nightly`` policy in shadow mode, and with SLA contracts on every data-file rewrite."""
    from floe_dagster.core.operations import Operation
    from floe_dagster.core.plan.decisions import SchedulerSettings
    from floe_dagster.core.plan.fair_shares import FairShareSettings
    from floe_dagster.core.value.learned_ranking import RankingSettings

    def not_expiry(decision: object) -> bool:
        return decision.operation is not Operation.EXPIRE_SNAPSHOTS  # type: ignore[attr-defined]

    def not_seven(decision: object) -> bool:
        return not decision.table.name.endswith("7")  # type: ignore[attr-defined]

    options: dict[str, dict[str, object]] = {
        "fair shares": {"fair_shares": FairShareSettings(by="namespace", weights={"ns001": 3.0})},
        "launcher filter": {"launcher_filter": not_expiry},
        "launcher filter, fair shares": {"launcher_filter": not_seven,
                                         "fair_shares": FairShareSettings(by="namespace")},
        "learned ranking": {"ranking": RankingSettings(learned=True)},
        "shadow ranking": {"ranking": RankingSettings(shadow=True)},
        "budgets": {"limits": SchedulerSettings(max_operations_per_poll=40, max_tables_per_poll=30,
                                                max_bytes_per_hour=10**10, max_run_requests_per_tick=60)},
    }
    shadow = policies.replace("  priority: 5\n", "  priority: 5\n  mode: shadow\n", 1)
    with_sla = policies.replace("  rewriteDataFilesSchedule: {", "  rewriteDataFilesSchedule: {sla: {maxAge: PT1H}, ")
    assert shadow != policies and with_sla != policies, "benchmark 1's policies changed: update option_ticks"
    options["none"] = {}
    return [(label, text, name, changes) for label, text in (("policies", policies), ("a shadow policy", shadow),
                                                              ("SLA contracts", with_sla))
            for name, changes in options.items() if label != "policies" or name != "none"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tables", type=int, default=2000)
    parser.add_argument("--kinds", type=int, nargs="+", default=[5, 8])
    args = parser.parse_args()
    for kinds in args.kinds:
        policies = policies_for(kinds)
        data = plan_input(args.tables, PLANNER_NOW)
        for salt, (label, offset, cold, share) in enumerate(TICKS):
            if cold:
                data = forget_everything(data)
            if share:
                data = changed(data, share, salt)
            tick = PlanInput(**{**data.__dict__, "now": PLANNER_NOW + offset,
                                "policies": parse_policies_text(policies, "bench")})
            digest, counts = tick_hash(plan(tick))
            print(f"{args.tables} tables × {kinds} kinds, {label}: {digest} {json.dumps(counts)}", flush=True)
        for label, text, option, changes in option_ticks(policies):
            tick = PlanInput(**{**forget_everything(data).__dict__, "now": PLANNER_NOW,
                                "policies": parse_policies_text(text, "bench"), **changes})
            digest, counts = tick_hash(plan(tick))
            print(f"{args.tables} tables × {kinds} kinds, cold, {label}, {option}: {digest} {json.dumps(counts)}",
                  flush=True)


if __name__ == "__main__":
    main()
