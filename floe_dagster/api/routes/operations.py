"""``/api/v1/operations``: recent maintenance runs, one by id, the running ones, their counts over a window,
one table's."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Path, Query
from fastapi.responses import JSONResponse

from floe_dagster.api import operation_models as M
from floe_dagster.api.auth import Principal
from floe_dagster.api.operation_reads import OperationReads, parse_window
from floe_dagster.api.routes.access import operation_reads, reader
from floe_dagster.api.routes.common import Page, check_page, error_responses, namespace_path, paging, table_path
from floe_dagster.api.table_names import table_name

router = APIRouter(tags=["operations"])


@router.get(
    "/api/v1/operations",
    summary="Recent maintenance runs, newest first, with their numbers",
    response_model=M.OperationsPage,
    responses=error_responses(400, 401, 403, 503),
)
def operations(
    table: str | None = Query(None, min_length=1, max_length=1300,
                              description="catalog.namespace.table or namespace.table"),
    triggerId: str | None = Query(None, min_length=1, max_length=100,
                                  description="The orchestrationId of a trigger"),
    status: str | None = Query(
        None, max_length=32,
        description="PENDING, RUNNING, SUCCEEDED, FAILED, CANCELLED, or Floe's record statuses SUCCESS, "
                    "PARTIAL_FAILURE (a failed run that maintained some of its tables), NO_POLICY and "
                    "NO_OPERATIONS (never a run here: such triggers are refused before any run); any case"),
    page: Page = Depends(paging()),
    who: Principal = Depends(reader),
    reads: OperationReads = Depends(operation_reads),
) -> JSONResponse:
    return JSONResponse(reads.operations(table, triggerId, status, page.limit, page.offset))


# The fixed paths come before /{id}, which would match them too.
@router.get(
    "/api/v1/operations/running",
    summary="The maintenance runs running now (Floe's RUNNING), newest first",
    response_model=M.OperationsPage,
    responses=error_responses(400, 401, 403, 503),
)
def running(
    page: Page = Depends(paging(50)),  # Floe's default 50
    who: Principal = Depends(reader),
    reads: OperationReads = Depends(operation_reads),
) -> JSONResponse:
    return JSONResponse(reads.operations(None, None, "RUNNING", page.limit, page.offset))


@router.get(
    "/api/v1/operations/stats",
    summary="Counts of the maintenance runs created in a window (Floe's StatsResponse)",
    response_model=M.OperationStats,
    responses=error_responses(400, 401, 403, 503),
)
def stats(
    window: str | None = Query("24h", max_length=32, description="24h, 7d, 30m, or hours (default 24h)"),
    who: Principal = Depends(reader),
    reads: OperationReads = Depends(operation_reads),
) -> JSONResponse:
    return JSONResponse(reads.stats(parse_window(window)))


@router.get(
    "/api/v1/operations/table/{catalog}/{namespace}/{table}",
    summary="One table's newest maintenance runs",
    response_model=M.TableOperations,
    responses=error_responses(400, 401, 403, 503),
    description="No runs (200) for a catalog not served here or a table never maintained, as in Floe.",
)
def table_operations(
    catalog: str = Path(min_length=1, max_length=255, description="The catalog name"),
    namespace: str = namespace_path,
    table: str = table_path,
    limit: int = Query(20, description="1..100"),
    who: Principal = Depends(reader),
    reads: OperationReads = Depends(operation_reads),
) -> JSONResponse:
    check_page(limit, 0)
    return JSONResponse(reads.table_operations(catalog, table_name(reads.settings, namespace, table), limit))


@router.get(
    "/api/v1/operations/{id}",
    summary="One maintenance run by its id (the Dagster run id)",
    response_model=M.OperationRun,
    responses=error_responses(400, 401, 403, 404, 503),
)
def operation(
    operation_id: str = Path(alias="id", min_length=1, max_length=64, description="A run id (a UUID)"),
    who: Principal = Depends(reader),
    reads: OperationReads = Depends(operation_reads),
) -> JSONResponse:
    return JSONResponse(reads.operation(operation_id))
