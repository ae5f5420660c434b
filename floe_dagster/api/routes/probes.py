"""``GET /health/live`` and ``GET /health/ready``: Floe's probes (SmallRye Health's shape), no key needed.

- live: the server answers: always ``200 {"status": "UP", "checks": []}``, as Floe's;
- ready: the Dagster instance and the catalog can be reached (``ApiService.service_health``, which
  ``/health`` also answers): 200 ``UP``, else 503 ``DOWN`` with the check that is down.

Left out of the OpenAPI document, as Floe leaves its health endpoints out of its own.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse

from floe_dagster.api.routes.access import api_service
from floe_dagster.api.service import ApiService

router = APIRouter(tags=["service"])


@router.get("/health/live", include_in_schema=False)
def live() -> JSONResponse:
    return JSONResponse({"status": "UP", "checks": []})


@router.get("/health/ready", include_in_schema=False)
def ready(service: ApiService = Depends(api_service)) -> JSONResponse:
    up, checks = service.service_health()
    return JSONResponse({"status": "UP" if up else "DOWN", "checks": checks}, status_code=200 if up else 503)
