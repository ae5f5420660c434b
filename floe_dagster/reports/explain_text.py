"""``floe-dagster explain`` for people: the trigger status report (reports/explain.py, the same one
``--json`` prints and the HTTP API answers) as lines of text, one block per operation."""

from __future__ import annotations

import json
from typing import Any, Mapping


def format_explain_text(report: Mapping[str, Any]) -> str:
    lines = [f"{report['table']}: policy {report['policyName']}, condition-based triggering "
             f"{'on' if report['conditionBasedTriggeringEnabled'] else 'off'}"]
    for writer in report.get("writers") or ():
        last = writer["lastMaterialization"]
        seen = f", last materialized {last['at']} (run {last['runId']})" if last else ""
        lines.append(f"  written by {writer['assetKey']} ({writer['source']}){seen}")
    if report.get("computeBudget"):
        lines.append(f"  compute budget: {report['computeBudget']['summary']}")
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
    if status.get("sla"):
        lines.append(sla_line(status["sla"]))
    if status.get("writerHold"):
        lines.append(f"    writer hold (maxWriterWait {status['writerHold']['maxWriterWait']}): "
                     f"{status['writerHold']['detail']}")
    lines += _backlog_lines(status.get("backlog"))
    lines += expiry_lines(status.get("expiryArguments"))
    if status.get("quarantine"):
        lines.append(f"    quarantine: {status['quarantine']['reason']}")
    owner = status.get("ownerOverrides") or {}
    lines += [f"    owner override {name}={value}" for name, value in owner.get("applied", {}).items()]
    lines += [f"    owner override ignored: {i['property']}={i['value']}: {i['reason']}"
              for i in owner.get("ignored", ())]
    if status.get("cadence"):
        lines.append(f"    adaptive cadence: {status['cadence']['why']}")
    if status.get("rowRetention"):
        rows = status["rowRetention"]
        lines.append(f"    row retention on column {rows['column']!r}: deletes rows before {rows['deletesRowsBefore']} "
                     f"(timestamptz), or before {rows['zonelessDeletesRowsBefore']} on the {rows['timezone']} wall "
                     f"clock (a date or timestamp without zone)")
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
    lines += _figures_lines(status.get("lastRun") or {})
    lines += [f"    met   {met}" for met in status["metConditions"]]
    lines += [f"    unmet {unmet}" for unmet in status["unmetConditions"]]
    return lines


def sla_line(sla: Mapping[str, object]) -> str:
    """The contract on one line; the owner quoted and escaped as JSON writes it (a policy refuses control
    characters in it, and this keeps any that come another way from starting a line of their own)."""
    owner = json.dumps(sla["owner"], ensure_ascii=False) if sla.get("owner") else "no owner named"
    state = "BREACHED" if sla["breached"] else "met"
    return f"    SLA maxAge {sla['maxAge']} ({sla['severity']}, owner {owner}): {state} - {sla['detail']}"


def expiry_lines(arguments: Mapping[str, Any] | None) -> list[str]:
    """A snapshot expiry's arguments, each with where it came from (core/operation_kinds/expire_snapshots.py)."""
    if not arguments:
        return []
    ref_age = arguments["maxRefAgeMs"]
    refs = "never" if ref_age is None else f"{ref_age} ms"
    lines = [f"    expiry arguments: older_than {arguments['olderThan']} (maxSnapshotAge {arguments['maxSnapshotAge']} "
             f"from {arguments['maxSnapshotAgeFrom']}), retain_last {arguments['retainLast']} (from "
             f"{arguments['retainLastFrom']}); a branch or tag with no age of its own nor refRetention rule is "
             f"removed after {refs} (from {arguments['maxRefAgeFrom']}); table properties "
             f"{arguments['tableProperties']}"]
    return lines + [f"    expiry adjusted: {why}" for why in arguments["adjusted"]]


def _backlog_lines(backlog: Mapping[str, Any] | None) -> list[str]:
    if backlog and backlog.get("files") is not None:
        return [f"    backlog {'' if backlog.get('exact', True) else 'at least '}{backlog['files']} orphan file(s) "
                f"left by run {backlog.get('runId')} (cap {backlog.get('cap')}); the next run deletes them first"]
    if backlog:
        return [f"    backlog {backlog['partitions']} partition(s), {backlog['bytes']} bytes"]
    return []


def _figures_lines(last: Mapping[str, Any]) -> list[str]:
    """The newest successful run's cost and benefit (core/runs/run_figures.py), when one is recorded."""
    compute, benefit = last.get("compute"), last.get("benefit")
    if not compute and not benefit:
        return []
    cost = "compute not recorded"
    if compute:
        cpu = compute.get("executor_cpu_s")
        cost = (f"{cpu:.2f} executor CPU s, {compute.get('task_s'):.2f} task s" if cpu is not None
                else f"executor CPU unknown ({compute.get('unavailable')})") + f", {compute.get('wall_s'):.2f} s wall"
    bought = (f"; {benefit['files_removed']} live file(s) and {benefit['bytes_reclaimed']} bytes fewer, "
              f"{benefit['files_deleted']} file(s) deleted" if benefit else "")
    return [f"    last run {last.get('figuresRunId')}: {cost}{bought}"]
