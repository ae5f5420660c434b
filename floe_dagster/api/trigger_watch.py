"""A watcher thread per manual trigger of the HTTP API: it follows the trigger's runs and, as
``floe-dagster trigger`` does, cancels the ones still queued once one fails (best effort: the daemon
may dequeue the next run first, and a watcher does not survive a restart of the server)."""

from __future__ import annotations

import logging
import threading
import time
from typing import Sequence

from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

from floe_dagster.launching.trigger_runs import cancel_queued_run

log = logging.getLogger(__name__)

WATCH_POLL_S = 0.5
WATCH_GIVE_UP_S = 48 * 3600
_FINISHED = {DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED}


class TriggerWatch:
    """Follows one trigger's runs; after a failure, cancels the ones still queued."""

    def __init__(self, instance: DagsterInstance, trigger_id: str, run_ids: Sequence[str]):
        self.instance, self.trigger_id, self.run_ids = instance, trigger_id, list(run_ids)
        self.done = threading.Event()
        self.finished_at: float | None = None
        self.thread = threading.Thread(target=self._run, name=f"floe-trigger-{trigger_id}", daemon=True)

    def start(self) -> "TriggerWatch":
        self.thread.start()
        return self

    def _run(self) -> None:
        deadline = time.monotonic() + WATCH_GIVE_UP_S
        try:
            while time.monotonic() < deadline:
                runs = [r.dagster_run for r in self.instance.get_run_records(RunsFilter(run_ids=self.run_ids))]
                if any(run.status == DagsterRunStatus.FAILURE for run in runs):
                    message = f"floe-dagster: a previous operation of manual trigger {self.trigger_id} failed"
                    for run in runs:
                        if run.status == DagsterRunStatus.QUEUED and cancel_queued_run(self.instance, run.run_id,
                                                                                       message):
                            log.info("cancelled queued run %s (%s)", run.run_id, message)
                    runs = [r.dagster_run for r in self.instance.get_run_records(RunsFilter(run_ids=self.run_ids))]
                if runs and all(run.status in _FINISHED for run in runs):
                    return
                time.sleep(WATCH_POLL_S)
        except Exception:  # a watcher must never take the server down
            log.exception("watching trigger %s failed", self.trigger_id)
        finally:
            self.finished_at = time.monotonic()
            self.done.set()
