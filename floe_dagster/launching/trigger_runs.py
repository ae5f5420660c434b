"""A manual trigger's runs: what each one did, read from its events, and cancelling the ones still
queued. One reading for ``floe-dagster trigger``'s in-process runs and the HTTP API's queued ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from dagster import DagsterEvent, DagsterEventType, DagsterInstance, DagsterRunStatus

from floe_dagster.defs.names import table_for_asset_key

# The events an outcome is read from (a filter for the event log).
RESULT_EVENTS = frozenset({
    DagsterEventType.ASSET_MATERIALIZATION, DagsterEventType.STEP_FAILURE, DagsterEventType.RUN_FAILURE,
    DagsterEventType.RUN_CANCELED, DagsterEventType.ASSET_OBSERVATION,
})


@dataclass
class RunOutcome:
    # Each maintained table's materialization metadata (plain values), by qualified name (an asset
    # that names no table: its key path joined with '/').
    tables: dict[str, dict[str, object]] = field(default_factory=dict)
    # The first line of the first step failure (a dagster Failure's description, else its error),
    # else of the run's failure or cancellation; None when nothing failed.
    error: str | None = None
    # Tables whose commit lost a race with another writer (outcome ``conflict``), with the message.
    conflicts: dict[str, str] = field(default_factory=dict)


def _first_line(text: str | None) -> str | None:
    return text.strip().splitlines()[0] if text and text.strip() else None


def run_outcome(events: Iterable[DagsterEvent]) -> RunOutcome:
    """What a run did, from its events (any others are ignored)."""
    outcome = RunOutcome()
    step_error = run_error = None
    for event in events:
        if event.event_type == DagsterEventType.ASSET_MATERIALIZATION:
            materialization = event.event_specific_data.materialization
            try:
                name = table_for_asset_key(materialization.asset_key).qualified
            except ValueError:
                name = "/".join(materialization.asset_key.path)
            outcome.tables[name] = {key: getattr(entry, "value", entry)
                                    for key, entry in materialization.metadata.items()}
        elif event.event_type == DagsterEventType.ASSET_OBSERVATION:
            observation = event.event_specific_data.asset_observation
            values = {key: getattr(entry, "value", entry) for key, entry in observation.metadata.items()}
            if values.get("outcome") == "conflict":
                try:
                    name = table_for_asset_key(observation.asset_key).qualified
                except ValueError:
                    name = "/".join(observation.asset_key.path)
                outcome.conflicts[name] = str(values.get("conflict", ""))
        elif event.event_type == DagsterEventType.STEP_FAILURE and step_error is None:
            data = event.event_specific_data
            user = getattr(data, "user_failure_data", None)  # a dagster Failure: its description
            error = getattr(data, "error", None)
            step_error = _first_line(user.description if user is not None else None) or _first_line(
                error.message if error is not None else None)
        elif event.event_type in (DagsterEventType.RUN_FAILURE, DagsterEventType.RUN_CANCELED) and run_error is None:
            run_error = _first_line(event.message)
    outcome.error = step_error or run_error
    return outcome


def cancel_queued_run(instance: DagsterInstance, run_id: str, message: str) -> bool:
    """Cancel the run if it is still queued (as Dagster's queued-run coordinator does: canceling, then
    canceled); False when it is gone or already dequeued."""
    current = instance.get_run_by_id(run_id)
    if current is None or current.status != DagsterRunStatus.QUEUED:
        return False
    instance.report_run_canceling(current, message=message)
    instance.report_run_canceled(current, message=message)
    return True
