"""An agent's maintenance proposal and what makes its approval refused (``floe-dagster mcp``, docs/mcp.md).

An agent proposes; a person approves by the proposal's token; only then does it run. The token is random
(:func:`new_token`, 256 bits), shown once to the proposer and stored only as its SHA-256, so neither the
database nor a log line holds it. A proposal is bound to what it was decided on: the table, its operations,
the table's current snapshot and metadata file, and the effective policy's version. :func:`approval_refusal`
says why an approval cannot go ahead (None: it can), in the order a person would want to hear it; the
single use itself is the store's (an update that only one approval can win).

Pure: no Dagster, Spark or PyIceberg.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

TOKEN_PREFIX = "floe_proposal_"
DEFAULT_EXPIRY = timedelta(minutes=15)


def new_token() -> str:
    """An unguessable token: 32 random bytes, URL-safe."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    """What the store keeps of a token (SHA-256 in hex): the token itself is never stored."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class TableState:
    """What a proposal is bound to: the table's state and the policy it was decided by."""

    snapshot_id: int | None  # None: the table has no snapshot yet
    metadata_location: str
    policy_name: str
    policy_version: str
    operations: tuple[str, ...]  # what would run now, in Floe's order

    def changes_from(self, other: "TableState") -> list[str]:
        """What differs between the proposal's state (``other``) and this one, in words."""
        changes = []
        if self.metadata_location != other.metadata_location or self.snapshot_id != other.snapshot_id:
            changes.append(f"the table changed since the proposal (snapshot {other.snapshot_id} then, "
                           f"{self.snapshot_id} now; metadata file {self.metadata_location})")
        if (self.policy_name, self.policy_version) != (other.policy_name, other.policy_version):
            changes.append(f"its policy changed since the proposal ('{other.policy_name}' version "
                           f"{other.policy_version} then, '{self.policy_name}' version {self.policy_version} now)")
        if self.operations != other.operations:
            changes.append(f"the operations that would run changed ({', '.join(other.operations)} then, "
                           f"{', '.join(self.operations) or 'none'} now)")
        return changes


@dataclass(frozen=True)
class Proposal:
    """A stored proposal (never its token: only the token's hash is kept)."""

    id: str
    table: str  # the qualified name
    state: TableState
    proposed_by: str  # the proposing key's name
    reason: str
    created_at: datetime
    expires_at: datetime
    used_at: datetime | None = None
    used_by: str | None = None
    trigger_id: str | None = None  # the runs' dagster/floe.trigger-id once approved

    @property
    def operations(self) -> tuple[str, ...]:
        return self.state.operations


def approval_refusal(proposal: Proposal | None, table: str, now: datetime, approver: str) -> str | None:
    """Why the proposal cannot be approved for ``table`` by the key named ``approver`` now, before the table is
    read again (None: it may go on to the state check, :func:`stale_refusal`)."""
    if proposal is None:
        return "no proposal has this token (it is unknown or mistyped; ask the agent to propose again)"
    if proposal.used_at is not None:
        return (f"proposal {proposal.id} was already used at {proposal.used_at.isoformat()} by "
                f"{proposal.used_by}: a token runs once; ask the agent to propose again")
    if now >= proposal.expires_at:
        return (f"proposal {proposal.id} expired at {proposal.expires_at.isoformat()}: ask the agent to "
                "propose again")
    if table != proposal.table:
        return (f"proposal {proposal.id} is for {proposal.table}, not {table}: a token approves only the "
                "table it was proposed for")
    if approver == proposal.proposed_by:
        # An agent holding an OPERATOR key would otherwise approve itself: the approval is a second key's, a person's.
        return (f"proposal {proposal.id} was proposed by key '{approver}': it is approved by another key (a "
                "person's), never by the key that proposed it")
    return None


def stale_refusal(proposal: Proposal, current: TableState) -> str | None:
    """Why the proposal no longer holds for the table as it is now (None: it does)."""
    changes = current.changes_from(proposal.state)
    if not changes:
        return None
    return (f"proposal {proposal.id} is stale: {'; '.join(changes)}. Nothing ran; ask the agent to "
            "propose again on the table as it is now")
