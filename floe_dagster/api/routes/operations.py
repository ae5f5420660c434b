"""``GET /api/v1/operations``: recent maintenance runs."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query
from fastapi.responses import JSONResponse

from floe_dagster.api import models as M
from floe_dagster.api.auth import Principal
from floe_dagster.api.routes.access import api_service, reader
from floe_dagster.api.routes.common import error_responses
from floe_dagster.api.service import ApiService

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
    limit: int = Query(20, ge=1, le=100),
    offset: int = Query(0, ge=0, le=10000),
    who: Principal = Depends(reader),
    service: ApiService = Depends(api_service),
) -> JSONResponse:
    return JSONResponse(service.operations(table, triggerId, status, limit, offset))
