"""An agent's proposals (core/plan/agent_proposals.py, coordination/agent_proposals.py) with an injected clock: what
refuses an approval (unknown, used, expired, another table, a changed table or policy), the tokens, and the store's
single use. Through the real MCP server and Spark: integration/test_api.py's ``test_mcp_*``."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from floe_dagster.coordination.agent_proposals import ProposalTable
from floe_dagster.coordination.database import Coordination
from floe_dagster.core.plan.agent_proposals import (
    TOKEN_PREFIX,
    Proposal,
    TableState,
    approval_refusal,
    new_token,
    stale_refusal,
    token_hash,
)

NOW = datetime(2026, 12, 2, 8, 0, tzinfo=timezone.utc)
STATE = TableState(41, "file:///wh/sales/orders/metadata/00004.metadata.json", "sales", "v1", ("EXPIRE_SNAPSHOTS",))


def proposal(**changes) -> Proposal:
    values = dict(id="p1", table="demo.sales.orders", state=STATE, proposed_by="agent", reason="why",
                  created_at=NOW, expires_at=NOW + timedelta(minutes=15))
    return Proposal(**{**values, **changes})


def test_an_approval_goes_on_only_for_a_known_unused_unexpired_proposal_of_that_table():
    assert approval_refusal(proposal(), "demo.sales.orders", NOW + timedelta(minutes=14, seconds=59), "ops-bot") is None
    assert "unknown or mistyped" in approval_refusal(None, "demo.sales.orders", NOW, "ops-bot")
    used = approval_refusal(proposal(used_at=NOW, used_by="ops-bot"), "demo.sales.orders", NOW, "ops-bot")
    assert "already used" in used and "ops-bot" in used
    expired = approval_refusal(proposal(), "demo.sales.orders", NOW + timedelta(minutes=15), "ops-bot")
    assert "expired at 2026-12-02T08:15:00+00:00" in expired
    other = approval_refusal(proposal(), "demo.sales.customers", NOW, "ops-bot")
    assert "is for demo.sales.orders, not demo.sales.customers" in other
    itself = approval_refusal(proposal(), "demo.sales.orders", NOW, "agent")
    assert "never by the key that proposed it" in itself


def test_a_changed_table_policy_or_operation_set_makes_the_proposal_stale():
    assert stale_refusal(proposal(), STATE) is None
    written = TableState(42, "file:///wh/sales/orders/metadata/00005.metadata.json", "sales", "v1",
                         ("EXPIRE_SNAPSHOTS",))
    assert "snapshot 41 then, 42 now" in stale_refusal(proposal(), written)
    assert "policy changed" in stale_refusal(proposal(), TableState(41, STATE.metadata_location, "sales", "v2",
                                                                     ("EXPIRE_SNAPSHOTS",)))
    fewer = stale_refusal(proposal(), TableState(41, STATE.metadata_location, "sales", "v1", ()))
    assert "operations that would run changed (EXPIRE_SNAPSHOTS then, none now)" in fewer


def test_tokens_are_random_long_and_kept_only_as_their_hash():
    tokens = {new_token() for _ in range(100)}
    assert len(tokens) == 100 and all(t.startswith(TOKEN_PREFIX) and len(t) >= len(TOKEN_PREFIX) + 43 for t in tokens)
    token = tokens.pop()
    assert token not in token_hash(token) and len(token_hash(token)) == 64


def test_the_store_keeps_the_hash_and_lets_one_approval_use_a_proposal(tmp_path):
    path = tmp_path / "c.db"
    store = ProposalTable(Coordination(f"sqlite:///{path}").engine)
    token = new_token()
    store.insert(proposal(), token_hash(token))
    found = store.by_token_hash(token_hash(token))
    assert found == proposal() and store.by_token_hash(token_hash(new_token())) is None
    assert store.use("p1", NOW, "ops-bot", "trigger-1") is True
    assert store.use("p1", NOW, "admin", "trigger-2") is False  # single use, whoever asks second
    used = store.by_token_hash(token_hash(token))
    assert (used.used_at, used.used_by, used.trigger_id) == (NOW, "ops-bot", "trigger-1")
    assert token.encode() not in path.read_bytes()  # never stored in clear


def test_the_store_forgets_proposals_a_week_after_they_expired(tmp_path):
    store = ProposalTable(Coordination(f"sqlite:///{tmp_path / 'c.db'}").engine)
    old, new = new_token(), new_token()
    store.insert(proposal(), token_hash(old))
    later = NOW + timedelta(days=8)
    store.insert(proposal(id="p2", created_at=later, expires_at=later + timedelta(minutes=15)), token_hash(new))
    assert store.by_token_hash(token_hash(old)) is None and store.by_token_hash(token_hash(new)).id == "p2"
