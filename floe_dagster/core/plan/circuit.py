"""The launch circuit after an outage ("Blast radius" in docs/security.md): when a run recorded an
outage (core/runs/outages.py's rule: a service could not be reached) and no run has succeeded since,
launches pause until ``resume_at``; then the circuit is half-open and one run probes.

The probe is the best-ranked due table other than the tables whose runs met the outage: if one of
them was in fact the cause (a failure the rule could not tell from an outage), probing it again would
keep the whole fleet paused. A table that tripped the circuit probes only when no other table is due.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Collection

from floe_dagster.core.plan.decisions import Decision

PROBE_SKIP_REASON = "circuit_open: probing with one run after an outage"
TRIPPED_SKIP_REASON = "circuit_open: its run met the outage; another due table probes first"


@dataclass(frozen=True)
class OutageCircuit:
    """An open or half-open circuit: launches resume at ``resume_at``; ``tripped_by`` are the tables
    (qualified names) whose runs recorded an outage since the last successful run."""

    resume_at: datetime
    tripped_by: frozenset[str] = frozenset()

    def is_open(self, now: datetime) -> bool:
        """Launches are paused (before ``resume_at``); after it the circuit is half-open."""
        return now < self.resume_at


def probe_decision(decisions: list[Decision], tripped_by: Collection[str]) -> Decision | None:
    """The half-open circuit's one probe: the best-ranked live run decision whose table did not trip
    the circuit, else the best-ranked one (None: nothing is due)."""
    runs = sorted((d for d in decisions if d.decision == "run" and not d.shadow), key=lambda d: d.rank or 0)
    return next((d for d in runs if d.table.qualified not in tripped_by), runs[0] if runs else None)


def only_the_probe(decisions: list[Decision], tripped_by: Collection[str]) -> list[Decision]:
    """The decisions with every run but the probe (:func:`probe_decision`) turned into a skip that says why."""
    probe = probe_decision(decisions, tripped_by)
    return [d if d.decision != "run" or d is probe else
            replace(d, decision="skip", rank=None, why=(
                TRIPPED_SKIP_REASON if d.table.qualified in tripped_by else PROBE_SKIP_REASON, *d.why))
            for d in decisions]


__all__ = ["OutageCircuit", "PROBE_SKIP_REASON", "TRIPPED_SKIP_REASON", "only_the_probe", "probe_decision"]
