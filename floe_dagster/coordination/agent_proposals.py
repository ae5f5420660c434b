"""Agents' maintenance proposals (``floe-dagster mcp``, core/plan/agent_proposals.py), in the coordination database:
``floe_agent_proposals``, one row a proposal with its token's SHA-256 (never the token), what it is bound to
(the table, its operations, snapshot, metadata file and policy version), who proposed it, when it expires,
and once approved who approved it and its runs' trigger id.

Here and not in memory: every MCP server on the lakehouse shares them (an agent's stdio session proposes, a
person's HTTP session approves), they outlive a restart, and :meth:`ProposalTable.use` is a conditional update
that exactly one approval wins, whichever server it reaches.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import BigInteger, Column, DateTime, String, Table, Text, select, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError

from floe_dagster.coordination.schema import metadata
from floe_dagster.core.plan.agent_proposals import Proposal, TableState
from floe_dagster.core.basics.localtime import naive_as_utc

# Proposals are kept this long past their expiry (what was proposed and approved, for a person to read).
KEPT_AFTER_EXPIRY = timedelta(days=7)

agent_proposals = Table(
    "floe_agent_proposals",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("token_hash", String(64), nullable=False, unique=True),  # SHA-256, lower-case hex
    Column("table_name", Text, nullable=False),
    Column("operations", Text, nullable=False),  # comma-separated, in Floe's order
    Column("snapshot_id", BigInteger),
    Column("metadata_location", Text, nullable=False),
    Column("policy_name", String(255), nullable=False),
    Column("policy_version", String(128), nullable=False),
    Column("proposed_by", String(255), nullable=False),
    Column("reason", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("expires_at", DateTime(timezone=True), nullable=False),
    Column("used_at", DateTime(timezone=True)),
    Column("used_by", String(255)),
    Column("trigger_id", String(64)),
)


def _proposal(row) -> Proposal:
    state = TableState(row["snapshot_id"], row["metadata_location"], row["policy_name"], row["policy_version"],
                       tuple(op for op in row["operations"].split(",") if op))
    used_at = row["used_at"]
    return Proposal(row["id"], row["table_name"], state, row["proposed_by"], row["reason"],
                    naive_as_utc(row["created_at"]), naive_as_utc(row["expires_at"]),
                    naive_as_utc(used_at) if used_at else None, row["used_by"], row["trigger_id"])


class ProposalTable:
    """The ``floe_agent_proposals`` table (created on first use, beside the ledger)."""

    def __init__(self, engine: Engine):
        self.engine = engine
        try:
            agent_proposals.create(engine, checkfirst=True)
        except DBAPIError:  # another process created it first
            pass

    def insert(self, proposal: Proposal, token_hash: str) -> None:
        """Store a proposal under its token's hash; proposals expired a week ago go."""
        state = proposal.state
        with self.engine.begin() as connection:
            connection.execute(agent_proposals.delete().where(
                agent_proposals.c.expires_at < naive_as_utc(proposal.created_at - KEPT_AFTER_EXPIRY)))
            connection.execute(agent_proposals.insert().values(
                id=proposal.id, token_hash=token_hash, table_name=proposal.table,
                operations=",".join(state.operations), snapshot_id=state.snapshot_id,
                metadata_location=state.metadata_location, policy_name=state.policy_name,
                policy_version=state.policy_version, proposed_by=proposal.proposed_by, reason=proposal.reason,
                created_at=naive_as_utc(proposal.created_at), expires_at=naive_as_utc(proposal.expires_at)))

    def by_token_hash(self, token_hash: str) -> Proposal | None:
        with self.engine.connect() as connection:
            row = connection.execute(select(agent_proposals).where(
                agent_proposals.c.token_hash == token_hash)).mappings().first()
        return _proposal(row) if row else None

    def use(self, proposal_id: str, now: datetime, used_by: str, trigger_id: str) -> bool:
        """Mark the proposal used, once: True for the one approval that wins, False when it was used already."""
        with self.engine.begin() as connection:
            changed = connection.execute(
                update(agent_proposals)
                .where(agent_proposals.c.id == proposal_id, agent_proposals.c.used_at.is_(None))
                .values(used_at=naive_as_utc(now), used_by=used_by, trigger_id=trigger_id)).rowcount
        return changed == 1
