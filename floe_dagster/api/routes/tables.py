"""Floe's ``/api/v1/tables``: the tables, the namespaces, the latest health of every table (api/catalog_reads.py,
from the cached table list and the recorded health), one table's details and existence, its trigger status,
health and health history.

The fixed paths (``namespaces``, ``health/latest``) are declared before ``/{namespace}/{table}``, which would
match them too: the first route that matches answers.
"""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Depends, Query
from fastapi.responses import JSONResponse, Response

from floe_dagster.api import catalog_models as C
from floe_dagster.api import models as M
from floe_dagster.api.auth import Principal
from floe_dagster.api.catalog_reads import CatalogReads
from floe_dagster.api.routes.access import catalog_reads, reader, table_reports
from floe_dagster.api.routes.common import Page, error_responses, namespace_path, paging, parse_at, table_path
from floe_dagster.api.table_names import table_name
from floe_dagster.api.table_reports import TableReports
from floe_dagster.api.trigger_status_models import TriggerStatusResponse

router = APIRouter(tags=["tables"])
_PAGE = "`limit` 1..100 (default 20), `offset` ≥ 0; Floe's 400 `Limit must be between 1 and 100` otherwise."


@router.get(
    "/api/v1/tables",
    summary="Every table (the cached table list the code location is built from)",
    response_model=C.TablesPage,
    responses=error_responses(400, 401, 403, 503),
    description=_PAGE,
)
def list_tables(
    page: Page = Depends(paging()),
    who: Principal = Depends(reader),
    reads: CatalogReads = Depends(catalog_reads),
) -> JSONResponse:
    return JSONResponse(reads.tables(page.limit, page.offset))


@router.get(
    "/api/v1/tables/namespaces",
    summary="The namespaces holding tables (dotted when nested)",
    response_model=C.NamespacesResponse,
    responses=error_responses(401, 403, 503),
)
def list_namespaces(who: Principal = Depends(reader), reads: CatalogReads = Depends(catalog_reads)) -> JSONResponse:
    return JSONResponse(reads.namespaces())


@router.get(
    "/api/v1/tables/namespaces/{namespace}",
    summary="The tables of one namespace (none for an unknown namespace, as in Floe)",
    response_model=C.NamespaceTablesPage,
    responses=error_responses(400, 401, 403, 503),
    description=_PAGE,
)
def list_namespace_tables(
    namespace: str = namespace_path,
    page: Page = Depends(paging()),
    who: Principal = Depends(reader),
    reads: CatalogReads = Depends(catalog_reads),
) -> JSONResponse:
    return JSONResponse(reads.tables_in(namespace, page.limit, page.offset))


@router.get(
    "/api/v1/tables/health/latest",
    summary="Each table's latest health report, newest first (recorded by the debt-score sensor)",
    response_model=C.LatestHealthResponse,
    responses=error_responses(400, 401, 403, 503),
    description="Served from the health observations the sensor records; tables never observed are left out.",
)
def latest_health(
    limit: int = Query(20, ge=1, le=1000, description="How many reports at most (Floe's default 20)"),
    who: Principal = Depends(reader),
    reads: CatalogReads = Depends(catalog_reads),
) -> JSONResponse:
    return JSONResponse(reads.latest_health(limit))


@router.get(
    "/api/v1/tables/{namespace}/{table}",
    summary="One table's details (Floe's TableDetailResponse)",
    response_model=C.TableDetail,
    responses=error_responses(400, 401, 403, 404, 503),
)
def table_detail(
    namespace: str = namespace_path,
    table: str = table_path,
    who: Principal = Depends(reader),
    reads: CatalogReads = Depends(catalog_reads),
) -> JSONResponse:
    return JSONResponse(reads.table(table_name(reads.settings, namespace, table)))


@router.head(
    "/api/v1/tables/{namespace}/{table}",
    summary="Whether the table exists: 200, or 404 (a HEAD answer has no body)",
    response_class=Response,
    responses={200: {"description": "The table exists"}, **error_responses(400, 401, 403, 404, 503)},
)
def table_exists(
    namespace: str = namespace_path,
    table: str = table_path,
    who: Principal = Depends(reader),
    reads: CatalogReads = Depends(catalog_reads),
) -> Response:
    reads.exists(table_name(reads.settings, namespace, table))
    return Response(status_code=200)


@router.get(
    "/api/v1/tables/{namespace}/{table}/trigger-status",
    summary="Floe's trigger status for one table (floe-dagster explain --json)",
    response_model=TriggerStatusResponse,
    responses=error_responses(400, 401, 403, 404, 500, 503),
)
def trigger_status(
    namespace: str = namespace_path,
    table: str = table_path,
    at: str | None = Query(None, description="Evaluate at this RFC 3339 time (default now)",
                           json_schema_extra={"format": "date-time"}),
    who: Principal = Depends(reader),
    reports: TableReports = Depends(table_reports),
) -> JSONResponse:
    return JSONResponse(reports.trigger_status(namespace, table, parse_at(at)))


@router.get(
    "/api/v1/tables/{namespace}/{table}/health",
    summary="One table's health: metrics, issues, status and debt score",
    response_model=M.HealthResponse,
    responses=error_responses(400, 401, 403, 404, 500, 503),
)
def table_health(
    namespace: str = namespace_path,
    table: str = table_path,
    tier: Literal["summary", "full"] = Query("full", description="summary: snapshot summary only; full: "
                                             "manifests too"),
    who: Principal = Depends(reader),
    reports: TableReports = Depends(table_reports),
) -> JSONResponse:
    return JSONResponse(reports.health(namespace, table, tier))


@router.get(
    "/api/v1/tables/{namespace}/{table}/health/history",
    summary="One table's health reports over time, newest first (Floe's shape)",
    response_model=M.HealthHistoryResponse,
    responses=error_responses(400, 401, 403, 404, 500, 503),
    description="Served from the health observations the debt-score sensor records whenever the table's "
                "health changes; no new assessment.",
)
def table_health_history(
    namespace: str = namespace_path,
    table: str = table_path,
    limit: int = Query(10, ge=1, le=1000, description="How many reports at most (Floe's default 10)"),
    who: Principal = Depends(reader),
    reports: TableReports = Depends(table_reports),
) -> JSONResponse:
    return JSONResponse(reports.health_history(namespace, table, limit))
