"""One table's trigger status and health: ``/api/v1/tables/{namespace}/{table}/...``."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Depends, Query
from fastapi.responses import JSONResponse

from floe_dagster.api import models as M
from floe_dagster.api.auth import Principal
from floe_dagster.api.routes.access import api_service, reader
from floe_dagster.api.routes.common import error_responses, namespace_path, parse_at, table_path
from floe_dagster.api.service import ApiService

router = APIRouter(tags=["tables"])


@router.get(
    "/api/v1/tables/{namespace}/{table}/trigger-status",
    summary="Floe's trigger status for one table (floe-dagster explain --json)",
    response_model=M.TriggerStatusResponse,
    responses=error_responses(400, 401, 403, 404, 500, 503),
)
def trigger_status(
    namespace: str = namespace_path,
    table: str = table_path,
    at: str | None = Query(None, description="Evaluate at this RFC 3339 time (default now)",
                           json_schema_extra={"format": "date-time"}),
    who: Principal = Depends(reader),
    service: ApiService = Depends(api_service),
) -> JSONResponse:
    return JSONResponse(service.trigger_status(namespace, table, parse_at(at)))


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
    service: ApiService = Depends(api_service),
) -> JSONResponse:
    return JSONResponse(service.health(namespace, table, tier))


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
    service: ApiService = Depends(api_service),
) -> JSONResponse:
    return JSONResponse(service.health_history(namespace, table, limit))
