"""The server's own liveness and readiness (not a table's health); the routes that need no key.

- ``GET /health``: liveness and readiness in one answer, with a timestamp;
- ``GET /health/live`` and ``GET /health/ready``: Floe's probes (SmallRye Health's shape). live: the
  server answers, always ``200 {"status": "UP", "checks": []}``, as Floe's; ready: the Dagster instance
  and the catalog can be reached (``ApiServices.readiness``, which ``/health`` also answers): 200 ``UP``,
  else 503 ``DOWN`` with the check that is down. Left out of the OpenAPI document, as Floe leaves its
  health endpoints out of its own.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse

from floe_dagster.api import models as M
from floe_dagster.api.routes.access import api_services
from floe_dagster.api.services import ApiServices
from floe_dagster.api.timestamps import iso, utc_now

router = APIRouter(tags=["service"])


@router.get(
    "/health",
    summary="Liveness and readiness (no key needed)",
    response_model=M.ServiceHealth,
    responses={503: {"model": M.ServiceHealth, "description": "The instance or the catalog is down"}},
)
def health(service: ApiServices = Depends(api_services)) -> JSONResponse:
    up, checks = service.readiness()
    body = {"status": "UP" if up else "DOWN", "checks": checks, "timestamp": iso(utc_now())}
    return JSONResponse(body, status_code=200 if up else 503)


@router.get("/health/live", include_in_schema=False)
def live() -> JSONResponse:
    return JSONResponse({"status": "UP", "checks": []})


@router.get("/health/ready", include_in_schema=False)
def ready(service: ApiServices = Depends(api_services)) -> JSONResponse:
    up, checks = service.readiness()
    return JSONResponse({"status": "UP" if up else "DOWN", "checks": checks}, status_code=200 if up else 503)
