"""``floe-dagster explain`` for people: the trigger status report (reports/explain.py, the same one
``--json`` prints and the HTTP API answers) as lines of text, one block per operation."""

from __future__ import annotations

from typing import Any, Mapping


def format_explain_text(report: Mapping[str, Any]) -> str:
    lines = [f"{report['table']}: policy {report['policyName']}, condition-based triggering "
             f"{'on' if report['conditionBasedTriggeringEnabled'] else 'off'}"]
    for op, status in report["operationStatuses"].items():
        lines += _operation_lines(op, status)
    return "\n".join(lines)


def _operation_lines(op: str, status: Mapping[str, Any]) -> list[str]:
    lines = []
    shadow = status.get("shadowDecision")
    if shadow and shadow["wouldRun"]:
        lines.append(f"  {op}: SHADOW - {shadow['summary']}")
    else:
        lines.append(f"  {op}: {'TRIGGER' if status['shouldTrigger'] else 'wait'} - {'; '.join(status['reasons'])}"
                     + (" (shadow policy)" if shadow else ""))
    if status.get("waitsThisTick"):
        lines.append(f"    waits this tick: {status['waitsThisTick']}")
    if shadow and shadow["lastRecordedAt"]:
        lines.append(f"    last shadow decision recorded at {shadow['lastRecordedAt']} "
                     f"(slot {shadow['lastRecordedSlot']}): {shadow['lastRecordedReason']}")
    lines.append(f"    next eligible {status['nextEligibleTime']}, debt {status['debtScore']:.0f} "
                 f"{status['debtBreakdown']}")
    if status.get("envelope"):
        lines.append(f"    envelope: {status['envelope']['detail']}")
    if status.get("quiet"):
        lines.append(f"    quiet period {status['quiet']['quietFor']} (forced after "
                     f"{status['quiet']['maxQuietWait']}): {status['quiet']['detail']}")
    lines += _backlog_lines(status.get("backlog"))
    if status.get("cadence"):
        lines.append(f"    adaptive cadence: {status['cadence']['why']}")
    if status.get("efficiency"):
        efficiency = status["efficiency"]
        lines.append(f"    efficiency factor {efficiency['why']} (ranking {efficiency['ranking']}, compute from "
                     f"{efficiency['computeSource'] or 'no recorded run'})")
    conflicts = status.get("conflicts") or {}
    if conflicts.get("consecutiveConflicts"):
        writer = f" to {conflicts['writerOperation']} commits" if conflicts.get("writerOperation") else ""
        backoff = "each now counts as a failure: backoff" if conflicts.get("countsAsFailure") else "no backoff"
        lines.append(f"    lost {conflicts['consecutiveConflicts']} commit race(s) in a row{writer} ({backoff}); "
                     f"next attempt from {conflicts['retryAt']}")
    lines += [f"    met   {met}" for met in status["metConditions"]]
    lines += [f"    unmet {unmet}" for unmet in status["unmetConditions"]]
    return lines


def _backlog_lines(backlog: Mapping[str, Any] | None) -> list[str]:
    if backlog and backlog.get("files") is not None:
        return [f"    backlog {'' if backlog.get('exact', True) else 'at least '}{backlog['files']} orphan file(s) "
                f"left by run {backlog.get('runId')} (cap {backlog.get('cap')}); the next run deletes them first"]
    if backlog:
        return [f"    backlog {backlog['partitions']} partition(s), {backlog['bytes']} bytes"]
    return []
