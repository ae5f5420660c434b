"""When the ``sla_<operation>`` checks (defs/sla_checks.py) are reported: the debt-score sensor's tick hands
over its plan's decisions (each carries its contract's verdict, core/schedules/sla.py), and a check result is
recorded without a run only when Dagit's view would change or grow stale:

* the verdict changed (passed or breached), or the contract did (severity, owner, maxAge);
* the asset's latest materialization changed (Dagit shows a check result as the latest
  materialization's: another operation's run would hide it);
* or an hour passed since the last report (so the result's age in Dagit stays under an hour).

An unknown verdict (never succeeded, health not collected yet) is not reported. What was reported is
kept per scope in the instance's key-value store (``floe/sla/scope/<scope>``, one JSON record), which
``GET /metrics`` reads for ``floe_sla_breached`` (api/prometheus.py): a scrape never plans.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime, timedelta
from typing import Any, Iterable, Mapping

from dagster import DagsterInstance

from floe_dagster.core.plan.planner import Decision
from floe_dagster.core.schedules.sla import SINCE_UNKNOWN
from floe_dagster.defs.health_reporting import latest_materializations
from floe_dagster.defs.names import asset_key_for
from floe_dagster.defs.sla_checks import sla_evaluation

log = logging.getLogger(__name__)

KV_PREFIX = "floe/sla/scope/"  # + scope → {item: state}
KV_SCOPES = "floe/sla/scopes"  # the scopes that recorded one (JSON list)
REPORT_EVERY = timedelta(hours=1)
# What makes a new report: the verdict and the contract (the target is compared apart).
_COMPARED = ("passed", "severity", "owner", "maxAge")


def _item(decision: Decision) -> str:
    return f"{decision.table.qualified}|{decision.operation.value}"


def sla_state(decision: Decision, reported_at: datetime | None, target: int | None) -> dict[str, object]:
    """One contract's stored state (what metrics read): the verdict's JSON, where and when it was reported."""
    verdict = decision.sla
    assert verdict is not None
    return {**verdict.to_json(), "table": decision.table.qualified, "operation": decision.operation.value,
            "passed": verdict.passed, "reportedAt": reported_at.isoformat() if reported_at else None,
            "target": target}


def _needs_report(before: Mapping[str, Any] | None, now_state: Mapping[str, Any], now: datetime) -> bool:
    if before is None or before.get("reportedAt") is None:
        return True
    if any(before.get(key) != now_state.get(key) for key in (*_COMPARED, "target")):
        return True
    return now - datetime.fromisoformat(before["reportedAt"]) >= REPORT_EVERY


def report_sla_checks(instance: DagsterInstance, decisions: Iterable[Decision], loaded: Iterable[object],
                      scope: str, now: datetime) -> int:
    """Record the check results whose verdict changed (the module's rules); returns how many. Never fails the
    tick: a result that could not be recorded is tried again next tick."""
    assets = frozenset(loaded)
    contracts = [d for d in decisions if d.sla is not None and not d.shadow and d.table in assets]
    try:
        previous = read_sla_states(instance, [scope]).get(scope, {})
        if not contracts and not previous:  # no contract anywhere in this scope: nothing to write either
            return 0
        latest = latest_materializations(instance, sorted({d.table for d in contracts}, key=lambda t: t.qualified))
    except Exception:
        log.warning("SLA checks: the instance cannot be read this tick", exc_info=True)
        return 0
    states: dict[str, dict[str, object]] = {}
    reported = 0
    for decision in contracts:
        item, verdict = _item(decision), decision.sla
        target = latest.get(asset_key_for(decision.table))
        before = previous.get(item)
        state = sla_state(decision, None, target.storage_id if target is not None else None)
        if verdict.measured_from == SINCE_UNKNOWN or not _needs_report(before, state, now):
            state["reportedAt"] = before.get("reportedAt") if before else None
            states[item] = state
            continue
        try:
            instance.report_runless_asset_event(sla_evaluation(decision.table, decision.operation, verdict, target))
        except Exception:  # the event log is down: the state keeps the last report, the next tick tries again
            log.warning("SLA check of %s could not be recorded", item, exc_info=True)
            states[item] = {**state, "reportedAt": before.get("reportedAt") if before else None}
            continue
        reported += 1
        states[item] = {**state, "reportedAt": now.isoformat()}
    _write(instance, scope, states)
    return reported


def _write(instance: DagsterInstance, scope: str, states: Mapping[str, object]) -> None:
    try:
        scopes = _load(instance.run_storage.get_cursor_values({KV_SCOPES}).get(KV_SCOPES)) or []
        values = {KV_PREFIX + scope: json.dumps(states, separators=(",", ":"))}
        if scope not in scopes:
            values[KV_SCOPES] = json.dumps(sorted({*scopes, scope}))
        instance.run_storage.set_cursor_values(values)
    except Exception:  # the next tick writes again
        log.warning("SLA checks: the state could not be written", exc_info=True)


def _load(text: str | None) -> Any:
    try:
        return json.loads(text) if text else None
    except ValueError:
        return None


def read_sla_states(instance: DagsterInstance, scopes: Iterable[str] | None = None) -> dict[str, dict[str, Any]]:
    """Each scope's stored contracts (item → state); every scope that recorded one when ``scopes`` is None."""
    if scopes is None:
        scopes = _load(instance.run_storage.get_cursor_values({KV_SCOPES}).get(KV_SCOPES)) or []
    keys = {KV_PREFIX + scope for scope in scopes}
    stored = instance.run_storage.get_cursor_values(keys) if keys else {}
    found = {}
    for key, text in stored.items():
        value = _load(text)
        found[key[len(KV_PREFIX):]] = value if isinstance(value, dict) else {}
    return found


__all__ = ["report_sla_checks", "read_sla_states", "REPORT_EVERY", "KV_PREFIX"]
