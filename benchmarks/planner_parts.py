"""Benchmark 1, where a cold tick goes: benchmark 1's cold tick against the same tick with one of its inputs
given as an earlier tick left it, in one run, alternating.

Each variant makes the same plan as the cold tick (checked: the plans' fingerprints, as
``plan_fingerprint.py`` makes them, are compared), so the time it saves is what that part costs a cold tick:

- **health issues given**: each table's issues (``Policy.health_issues``: its derived numbers, the thresholds'
  verdicts, the stale refs) served from an earlier cold tick's, by policy and table;
- **policy matches given**: the policies' match memo kept (which policy governs each table);
- **byte estimates given**: the byte-estimate cache kept;
- **all three given**: what is left is the gates, the debt scores, the decisions and admission.

CPU seconds of ``plan()``, the median of ``--rounds`` (each round starts with another variant), each variant's
ratio to the cold tick of its own round.

    python benchmarks/planner_parts.py [--tables 10000] [--kinds 5|8] [--rounds 5]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import PLANNER_NOW, machine, table  # noqa: E402
from bench_planner import PlanInput, byte_estimates, forget_everything, parse_policies_text  # noqa: E402
from bench_planner import plan, plan_input, policies_for, policy_module  # noqa: E402
from plan_fingerprint import tick_hash  # noqa: E402

from floe_dagster.core.policies.policy import Policy  # noqa: E402

GIVEN = ("health issues", "policy matches", "byte estimates")
VARIANTS = {"cold": (), **{f"{part} given": (part,) for part in GIVEN}, "all three given": GIVEN}
_HEALTH_ISSUES = Policy.health_issues


def cold_tick(data: PlanInput, policies: str, given: tuple[str, ...], issues: dict) -> tuple[float, object]:
    """One cold tick (benchmark 1's :func:`forget_everything`) with the ``given`` parts kept from before."""
    matches, estimates = dict(policy_module._EFFECTIVE_BY_PATTERNS), dict(byte_estimates._ESTIMATES)
    data = forget_everything(data)
    if "policy matches" in given:
        policy_module._EFFECTIVE_BY_PATTERNS.update(matches)
    if "byte estimates" in given:
        byte_estimates._ESTIMATES.update(estimates)
    Policy.health_issues = _given_issues(issues) if "health issues" in given else _recorded_issues(issues)
    data = PlanInput(**{**data.__dict__, "policies": parse_policies_text(policies, "bench")})
    gc.collect()
    gc.disable()  # a collection of an earlier tick's garbage would land in whichever variant runs next
    try:
        started = time.process_time()
        result = plan(data)
        return time.process_time() - started, result
    finally:
        gc.enable()
        Policy.health_issues = _HEALTH_ISSUES


def _recorded_issues(issues: dict):
    def health_issues(policy, metrics, now):
        found = issues[(policy.name, metrics.qualified_name, now)] = _HEALTH_ISSUES(policy, metrics, now)
        return found
    return health_issues


def _given_issues(issues: dict):
    return lambda policy, metrics, now: issues[(policy.name, metrics.qualified_name, now)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tables", type=int, default=10_000)
    parser.add_argument("--kinds", type=int, choices=(5, 8), default=5)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(machine())
    data, policies, issues = plan_input(args.tables, PLANNER_NOW), policies_for(args.kinds), {}
    expected = tick_hash(cold_tick(data, policies, (), issues)[1])[0]  # records the issues, fills the caches
    seconds: dict[str, list[float]] = {name: [] for name in VARIANTS}
    names = list(VARIANTS)
    for round_ in range(args.rounds):
        for name in names[round_ % len(names):] + names[:round_ % len(names)]:  # each variant first in turn
            result = None  # the tick before's plan freed first
            spent, result = cold_tick(data, policies, VARIANTS[name], issues)
            seconds[name].append(spent)
    for name, given in VARIANTS.items():  # each variant's plan once more, fingerprinted
        if tick_hash(cold_tick(data, policies, given, issues)[1])[0] != expected:
            raise SystemExit(f"{name}: the plan differs from the cold tick's")
    cold = seconds["cold"]
    rows = []
    for name, spent in seconds.items():
        ratios = [mine / theirs for mine, theirs in zip(spent, cold)]
        rows.append((name, f"{statistics.median(spent):.3f}", f"{statistics.median(ratios):.2f}",
                     f"{min(ratios):.2f}–{max(ratios):.2f}", f"{1 - statistics.median(ratios):.0%}"))
    print(f"\n{args.tables:,} tables × {args.kinds} kinds, {args.rounds} rounds, every plan equal to the cold tick's")
    print(table(rows, ("tick", "CPU s (median)", "÷ cold (median)", "÷ cold (range)", "the part's share")))


if __name__ == "__main__":
    main()
