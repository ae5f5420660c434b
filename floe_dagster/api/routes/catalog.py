"""``GET /api/v1/catalog``: the active catalog (floe.yaml's ``catalog`` section), as Floe shows it."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse

from floe_dagster.api import models as M
from floe_dagster.api.auth import Principal
from floe_dagster.api.routes.access import api_service, reader
from floe_dagster.api.routes.common import error_responses
from floe_dagster.api.service import ApiService

router = APIRouter(tags=["catalog"])


@router.get(
    "/api/v1/catalog",
    summary="The active catalog, credentials masked",
    response_model=M.CatalogResponse,
    responses=error_responses(401, 403),
)
def active_catalog(who: Principal = Depends(reader), service: ApiService = Depends(api_service)) -> JSONResponse:
    return JSONResponse(service.catalog_reads.catalog())
