"""Bytes a rewriting operation would rewrite, for the planner's bytes-per-hour budget, memoised by
table state (metadata files are immutable)."""

from __future__ import annotations

import logging

from floe_dagster.core.rewrites.rewrite_rules import EstimateOptionError
from floe_dagster.core.facts.measurements import TableMetrics
from floe_dagster.core.operation_config import OperationConfig
from floe_dagster.core.operations import Operation
from floe_dagster.core.basics.tables import TableName

log = logging.getLogger(__name__)


def estimate_operation_bytes(
    table: TableName, op: Operation, metrics: TableMetrics | None, config: OperationConfig | None
) -> int:
    """Bytes a rewriting operation would rewrite, for the bytes-per-hour budget.

    Full tier: Iceberg's own file selection (``core/rewrites/estimates.py``, the kind's ``byte_estimate``) with the
    policy's options and the table's properties. Summary tier: the table's total bytes (data and delete
    files), an upper bound. No metrics: 0. Operations that rewrite no data: 0.
    """
    if metrics is None or not op.rewrites_data:
        return 0
    # Metadata files are immutable: the same table state and options give the same estimate, so a
    # sensor tick re-estimates only the tables that changed since the last one (the estimate was
    # ~35 % of a 10,000-table tick). The key also carries the numbers the estimate depends on.
    key = None
    if metrics.metadata_location is not None:
        key = (metrics.metadata_location, metrics.tier, metrics.current_snapshot_id, metrics.data_file_count,
               metrics.delete_file_count, metrics.total_data_bytes, op, _kept_repr(config),
               _kept_repr(metrics.properties, metrics, "_properties_repr"))
        cached = _ESTIMATES.get(key)
        if cached is not None:
            return cached
    estimated = _estimate_operation_bytes(table, op, metrics, config)
    if key is not None:
        if len(_ESTIMATES) >= _ESTIMATES_MAX:
            _ESTIMATES.clear()
        _ESTIMATES[key] = estimated
    return estimated


_ESTIMATES: dict[tuple, int] = {}


def _kept_repr(value: object, holder: object = None, name: str = "_repr") -> str:
    """``repr(value)``, kept in ``holder``'s (by default the value's own) ``__dict__`` under ``name``: the
    policies' configs and the metrics records are immutable, and a cold tick builds 20,000 keys from them
    (the configs are one per policy). Values without a ``__dict__`` (a plain dict held by nothing) are
    rendered each time."""
    holder = value if holder is None else holder
    kept = getattr(holder, "__dict__", None)
    if kept is None:
        return repr(value)
    found = kept.get(name)
    if found is None:
        found = kept[name] = repr(value)  # not a field: equality, hashing and asdict ignore it
    return found
_ESTIMATES_MAX = 200_000


def _estimate_operation_bytes(
    table: TableName, op: Operation, metrics: TableMetrics, config: OperationConfig | None
) -> int:
    try:  # a kind that rewrites data without an estimate of its own (None): the upper bound
        estimate = op.spec.byte_estimate(metrics, config)
    except EstimateOptionError as exc:
        log.warning("%s %s: cannot estimate bytes (%s); using the table's size", table.qualified, op.value, exc)
        return metrics.total_data_bytes
    return estimate.bytes if estimate is not None else metrics.total_data_bytes
