"""The ledger's and the history's rows (coordination/schema.py) as the core's records: a :class:`LedgerRow`
and an :class:`OperationHistory`, read on an open connection, and the JSON column an after-write
admission keeps its upstream write in."""

from __future__ import annotations

import json
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.engine import Connection

from floe_dagster.coordination.schema import history, ledger
from floe_dagster.core.basics.localtime import naive_as_utc
from floe_dagster.core.operations import Operation
from floe_dagster.core.rewrites.partition_scope import PartitionSelection
from floe_dagster.core.runs.history import OperationHistory
from floe_dagster.core.runs.run_decision import LedgerRow
from floe_dagster.core.schedules.writers import Writer


def ledger_rows_where(connection: Connection, where) -> list[LedgerRow]:
    """The ledger rows that match ``where`` (None: every row), by id, read on an open connection."""
    query = select(ledger).order_by(ledger.c.id)
    if where is not None:
        query = query.where(where)
    return [ledger_row(row) for row in connection.execute(query).mappings().all()]


def history_rows(connection: Connection) -> dict[tuple[str, Operation], OperationHistory]:
    """Every (table, operation)'s history, read on an open connection (one query)."""
    rows = connection.execute(select(history)).mappings().all()
    return {(row["table_name"], Operation(row["operation"])): history_from_row(row) for row in rows}


def ledger_row(row) -> LedgerRow:
    return LedgerRow(
        id=row["id"], table_name=row["table_name"], operation=Operation(row["operation"]), slot=row["slot"],
        attempt=row["attempt"], item_key=row["run_key"], trigger=row["trigger"], reason=row["reason"],
        debt_score=float(row["debt_score"] or 0.0), estimated_bytes=int(row["estimated_bytes"] or 0),
        admitted_at=naive_as_utc(row["admitted_at"]), launcher=row["launcher"] or "", run_id=row["run_id"],
        batch_key=row["batch_key"] or row["run_key"],
        scope=PartitionSelection.from_json(row.get("scope")),
        shadow=bool(row.get("shadow")),
        upstream=upstream_from_json(row.get("upstream")),
    )


def upstream_json(writer: Writer | None) -> str | None:
    if writer is None:
        return None
    return json.dumps({"assetKey": list(writer.asset_key), "runId": writer.last_run_id,
                       "storageId": writer.last_storage_id})


def upstream_from_json(text: str | None) -> Writer | None:
    if not text:
        return None
    data = json.loads(text)
    return Writer(tuple(data["assetKey"]), "", data["storageId"], data["runId"])


def history_from_row(row) -> OperationHistory:
    # SQLite hands back naive datetimes: everything stored is UTC.
    return OperationHistory(**{
        k: (naive_as_utc(v) if isinstance(v, datetime) else v)
        for k, v in row.items() if k not in ("table_name", "operation")
    })

