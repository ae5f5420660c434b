"""The planner: from tables, policies, health, history and ``now``, the ordered, budgeted decisions
docs/automation.md describes. Pure: the launchers (schedules, the debt-score sensor), ``floe-dagster plan``,
``explain`` and the HTTP API all call :func:`plan` and differ only in what they do with the result.

A plan is made in stages (core/plan/plan_stages.py ``STAGES``): gates, shadow, rank, sla first, live
admission, shadow pass. Gates (core/plan/gates.py ``GATES``), in order, with the plan's turns between two of them
(core/plan/gate_chains.py ``TURNS``); a skipped decision's reasons start with the first gate that blocked it:
schedule (schedule_disabled); owner (owner_paused: the table's own property
floe.maintenance.enabled=false, as its policy allows: core/policies/owner_overrides.py); gc (gc_disabled);
catalog (table_missing); loaded (not_loaded); due (window_closed, day_not_allowed, not_due); the backlog
turn (holds nothing: a partition-scoped rewrite's open backlog continues in its slot, past the conditions);
backoff (failure_backoff);
conflicts (conflict_retry); zero change (zero_change_throttle); the sla turn (holds nothing: a breached SLA
contract, core/schedules/sla.py, escalates the work past the conditions and ranks it first, trigger sla);
conditions (conditions_unmet, min_interval, no_health, no_drift); quiet (not_quiet, core/schedules/quiet.py);
writer (writer_running: a run of the table's writer asset, core/schedules/writers.py); in flight (in_flight: a
run of the table is queued or running). Then admission (core/plan/admission.py ``ADMISSION``), in rank order:
launcher (out_of_scope: another launcher admits it); one operation per table (in_flight: another of
its operations was admitted earlier in the same tick); table budget (budget_tables); operation budget
(budget_operations); partition scoping (a rewrite larger than its run may take is scoped; it holds
nothing back); byte budget (budget_bytes); compute budget (budget_compute); tick cap (tick_cap); fair
shares (budget_share: a budget that stopped a decision while several shares wanted it, told as its share's:
core/plan/fair_shares.py).

Admitted decisions are grouped into batches (core/plan/batches.py): one run per batch. The table and
operation budgets and the byte budget count (table, operation) items; ``max-run-requests-per-tick``
and ``max-queued-runs`` count runs, so a new batch is what a tick cap stops. A decision every gate
let run and the admission held back keeps that verdict (:attr:`Decision.held_back`): each
operation's own verdict, which the trigger status answers with.

A shadow policy's decisions (``mode: shadow``) pass the same gates, reading a history in which their
newest recorded shadow decision stands in for a successful run; the ones that would run are ranked
in a budget pass of their own, after the live pass, with budgets of their own (their bytes are the
shadow rows' of the last hour, no run of theirs is ever queued), so they never take budget from live
work. They come out as ``run`` decisions with ``shadow`` set, ranked after every live one:
:attr:`Plan.admitted` is the live work, :attr:`Plan.shadowed` what would have run.
"""

from __future__ import annotations

import gc
from operator import attrgetter

from floe_dagster.core.plan.decisions import Decision, Plan, PlanInput, SchedulerSettings
from floe_dagster.core.plan.gates import backoff_delay
from floe_dagster.core.plan.plan_stages import run_stages

# The planner's records and helpers, where the launchers, reports and tests import them from.
__all__ = ["Decision", "Plan", "PlanInput", "SchedulerSettings", "backoff_delay", "plan"]


def plan(data: PlanInput) -> Plan:
    """The decisions for every (table, operation) the policies configure, admitted ones ranked."""
    # A tick allocates ~100,000 small acyclic objects (decisions, reasons, verdicts); with the cyclic
    # collector on, they trigger collections that rescan every live object of the process (the
    # health metrics of every table among them): about a quarter of a 10,000-table tick. Nothing here
    # makes reference cycles, so the collector waits until the tick is done.
    paused = gc.isenabled()
    if paused:
        gc.disable()
    try:
        return _plan(data)
    finally:
        if paused:
            gc.enable()


# The plan's order: the ranked decisions by rank, then the others by table and Floe's operation order (the
# order the stages keep them in: PlanState.decided).
_BY_RANK = attrgetter("rank", "table.qualified", "operation.order")


def _plan(data: PlanInput) -> Plan:
    state = run_stages(data)
    ranked = state.ranked  # the admitted
    ranked.sort(key=_BY_RANK)
    ranked += state.decided()
    return Plan(data.now, ranked, state.notes)
