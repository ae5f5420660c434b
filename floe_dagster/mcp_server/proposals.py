"""An agent's writes in two steps (docs/mcp.md): ``propose`` says exactly what would run and why, and hands back
a single-use token bound to it; ``approve``, with an OPERATOR or ADMIN key, runs it through the HTTP API's
trigger (api/trigger_service.py), tagged ``floe/trigger=agent`` and ``floe/approved-by``.

The rules are core/plan/agent_proposals.py's; the proposals are the coordination database's
(coordination/agent_proposals.py). The state checks and the single use happen under the trigger's table lock,
after its busy check and just before the runs are queued, so a refused approval (busy, stale, replayed) queues
nothing, and a token is spent only by the approval that queues its runs.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any, Callable

from floe_dagster.api.services import ApiServices
from floe_dagster.api.table_names import table_name
from floe_dagster.api.timestamps import iso, utc_now
from floe_dagster.coordination.agent_proposals import ProposalTable
from floe_dagster.core.plan.agent_proposals import (
    Proposal,
    TableState,
    approval_refusal,
    new_token,
    stale_refusal,
    token_hash,
)
from floe_dagster.core.runs.run_tags import Approval
from floe_dagster.errors import ApiError
from floe_dagster.iceberg.catalog import load_table, open_catalog
from floe_dagster.launching.manual import PreparedTrigger

AGENT_REASON = "proposed by an agent"
# What a proposal shows of each operation's trigger status (explain): the decision, its reasons, its estimate.
DECISION_FIELDS = ("operationType", "shouldTrigger", "trigger", "reasons", "waitsThisTick", "unmetConditions",
                   "metConditions", "debtScore", "nextEligibleTime", "lastRun", "backlog", "envelope")


class Proposals:
    """Propose and approve, over the HTTP API's services (the same catalog, instance, database and trigger)."""

    def __init__(self, services: ApiServices, clock: Callable[[], datetime] = utc_now):
        self.services = services
        self.store = ProposalTable(services.coordination.engine)
        self.expiry = timedelta(minutes=services.settings.api.proposal_expiry_minutes)
        self.clock = clock

    def _body(self, namespace: str, table: str, operations: list[str] | None, reason: str | None = None
              ) -> dict[str, object]:
        return {"catalog": self.services.settings.catalog.name, "namespace": namespace, "table": table,
                "operations": operations or [], "reason": reason}

    def _state(self, prepared: PreparedTrigger) -> TableState:
        """The table's state now, as a proposal binds it."""
        loaded = load_table(open_catalog(self.services.settings.catalog), prepared.table)
        snapshot = loaded.current_snapshot()
        return TableState(snapshot.snapshot_id if snapshot is not None else None, loaded.metadata_location,
                          prepared.policy.name, prepared.policy.version,
                          tuple(op.value for op in prepared.to_run))

    def propose(self, proposer: str, namespace: str, table: str, operations: list[str] | None,
                reason: str | None) -> dict[str, object]:
        """The decision now (what would run, why, its estimate) and a token that approves exactly it."""
        prepared = self.services.trigger.prepare(self._body(namespace, table, operations))
        if not prepared.to_run:
            why = "; ".join(prepared.skipped.values()) or f"policy '{prepared.policy.name}' configures no operation"
            raise ApiError(409, "NO_OPERATIONS", f"nothing to propose for {prepared.table.qualified}: {why}")
        state = self._state(prepared)
        now = self.clock()
        status = self.services.table_reports.trigger_status(namespace, table, now)["operationStatuses"]
        decision = [_decision_item(status[op]) for op in state.operations]
        proposal = Proposal(uuid.uuid4().hex, prepared.table.qualified, state, proposer,
                            (reason or AGENT_REASON)[:500], now, now + self.expiry)
        token = new_token()
        self.store.insert(proposal, token_hash(token))
        return {**_proposal_json(proposal), "decision": decision,
                "skipped": [{"operationType": op.value, "why": why} for op, why in prepared.skipped.items()],
                "approvalToken": token,
                "next": ("a person with an OPERATOR or ADMIN key approves it with the approve tool (the token and "
                         f"the table {prepared.table.qualified}) before {iso(proposal.expires_at)}; nothing runs "
                         "until then")}

    def approve(self, approver: str, token: str, namespace: str, table: str, wait_s: float) -> dict[str, object]:
        """Run the proposal the token names, once, if it still holds for the table as it is now."""
        asked = table_name(self.services.settings, namespace, table)
        proposal = self.store.by_token_hash(token_hash(token))
        refused = approval_refusal(proposal, asked.qualified, self.clock(), approver)
        if refused:
            raise ApiError(409, "PROPOSAL_REFUSED", refused)
        assert proposal is not None

        def confirm(prepared: PreparedTrigger, trigger_id: str) -> None:
            stale = stale_refusal(proposal, self._state(prepared))
            if stale:
                raise ApiError(409, "PROPOSAL_STALE", stale)
            if not self.store.use(proposal.id, self.clock(), approver, trigger_id):
                raise ApiError(409, "PROPOSAL_REFUSED", f"proposal {proposal.id} was already used: a token runs once")

        reason = f"agent proposal {proposal.id} by {proposal.proposed_by}, approved by {approver}: {proposal.reason}"
        approval = Approval(approver, proposal.proposed_by, proposal.id)
        body = self._body(namespace, table, list(proposal.operations), reason)
        _, answer, _ = self.services.trigger.trigger(body, approver, wait_s > 0, max(wait_s, 1.0), approval, confirm)
        return {"proposalId": proposal.id, "approvedBy": approver, "proposedBy": proposal.proposed_by, **answer}


def _decision_item(status: dict[str, Any]) -> dict[str, object]:
    item = {key: status.get(key) for key in DECISION_FIELDS}
    efficiency = status.get("efficiency") or {}
    item["estimate"] = efficiency.get("computeEstimate")
    return item


def _proposal_json(proposal: Proposal) -> dict[str, object]:
    state = proposal.state
    return {"proposalId": proposal.id, "table": proposal.table, "operations": list(state.operations),
            "policyName": state.policy_name, "policyVersion": state.policy_version,
            "snapshotId": state.snapshot_id, "metadataLocation": state.metadata_location,
            "proposedBy": proposal.proposed_by, "reason": proposal.reason,
            "createdAt": iso(proposal.created_at), "expiresAt": iso(proposal.expires_at)}
