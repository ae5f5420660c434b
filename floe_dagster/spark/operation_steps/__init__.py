"""The engine side of the operation registry: each kind's :class:`~.step.OperationStep`, one module per
kind (``STEP``), discovered as the kinds are (``core/operation_kinds/``): every module here except
``step`` (and names starting with ``_``) is a kind's step, and every kind must have one.
"""

from __future__ import annotations

from datetime import datetime
from typing import Mapping, Sequence

from floe_dagster.core.operation_config import OperationConfig
from floe_dagster.core.operation_kinds import discover
from floe_dagster.core.operations import ALL_OPERATIONS, Operation
from floe_dagster.core.rewrites.partition_scope import RewriteScope
from floe_dagster.core.basics.tables import TableName
from floe_dagster.spark.operation_steps.step import OperationStep
from floe_dagster.spark.procedures import ProcedureCall, ProcedureResult

def _discover() -> dict[str, OperationStep]:
    """Every step module's STEP, by its kind's name; a kind without a step, two steps of one kind, or a step
    of no kind, is an error."""
    steps: list[OperationStep] = discover(__path__, __name__, "step", "STEP", OperationStep)
    found = {step.kind: step for step in steps}
    kinds = {op.value for op in ALL_OPERATIONS}
    if len(found) < len(steps):
        raise TypeError(f"two operation steps share a kind: {sorted(step.kind for step in steps)}")
    if set(found) != kinds:
        raise TypeError(f"operation kinds without a step: {sorted(kinds - set(found))}; "
                        f"steps of no kind: {sorted(set(found) - kinds)}")
    return found


STEPS = _discover()


def step_of(op: Operation) -> OperationStep:
    """The step of an operation (an ``Operation``)."""
    return STEPS[op.value]


def build_procedure_call(
    op: Operation,
    table: TableName,
    config: OperationConfig,
    now: datetime,
    table_properties: Mapping[str, str] | None = None,
    file_io: str | None = None,
    *,
    scope: RewriteScope | None = None,
    iceberg_version: str | None = None,
    file_list_view: str | None = None,
    spark_line: str | None = None,
    snapshot_id: int | None = None,
) -> ProcedureCall:
    """The statement for one operation on one table, rendered from the policy's typed config by the
    kind's step (the core validated it when the policy was loaded: nothing is checked again here).
    ``file_io``: the catalog's FileIO class in Spark (``io-impl``), which decides how orphan cleanup lists
    files; ``iceberg_version``: the Iceberg Spark runtime's, which decides orphan cleanup's default
    streaming; ``spark_line``: the engine's Spark (``4.1``), which decides whether rewrite_manifests takes
    sort_by; ``file_list_view``: orphan cleanup compares that view's files instead of listing (capped
    runs); ``scope``: a partition-scoped rewrite's partitions; ``snapshot_id``: the snapshot
    compute_table_stats describes (None: the current one)."""
    expected = op.spec.config_type
    if not isinstance(config, expected):
        raise TypeError(f"{op.policy_key}: expected a {expected.__name__}, got {type(config).__name__}")
    return step_of(op).render_call(op, table, config, now, table_properties, file_io, scope=scope,
                                   iceberg_version=iceberg_version, file_list_view=file_list_view,
                                   spark_line=spark_line, snapshot_id=snapshot_id)


def summarize_result(op: Operation, rows: Sequence[Mapping[str, object]]) -> ProcedureResult:
    """Turn the procedure's output rows into numbers, and say whether the run changed anything."""
    return step_of(op).summarise(op, rows)


__all__ = ["STEPS", "step_of", "build_procedure_call", "summarize_result"]
