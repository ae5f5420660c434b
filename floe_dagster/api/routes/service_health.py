"""``GET /health``: the server's liveness and readiness; the one route that needs no key."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse

from floe_dagster.api import models as M
from floe_dagster.api.routes.access import api_service
from floe_dagster.api.service import ApiService, iso, utc_now

router = APIRouter(tags=["service"])


@router.get(
    "/health",
    summary="Liveness and readiness (no key needed)",
    response_model=M.ServiceHealth,
    responses={503: {"model": M.ServiceHealth, "description": "The instance or the catalog is down"}},
)
def health(service: ApiService = Depends(api_service)) -> JSONResponse:
    up, checks = service.service_health()
    body = {"status": "UP" if up else "DOWN", "checks": checks, "timestamp": iso(utc_now())}
    return JSONResponse(body, status_code=200 if up else 503)
