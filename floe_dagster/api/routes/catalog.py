"""``GET /api/v1/catalog``: the active catalog (floe.yaml's ``catalog`` section), as Floe shows it."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse

from floe_dagster.api import catalog_models as C
from floe_dagster.api.auth import Principal
from floe_dagster.api.catalog_reads import CatalogReads
from floe_dagster.api.routes.access import catalog_reads, reader
from floe_dagster.api.routes.common import error_responses

router = APIRouter(tags=["catalog"])


@router.get(
    "/api/v1/catalog",
    summary="The active catalog, credentials masked",
    response_model=C.CatalogResponse,
    responses=error_responses(401, 403),
)
def active_catalog(who: Principal = Depends(reader), reads: CatalogReads = Depends(catalog_reads)) -> JSONResponse:
    return JSONResponse(reads.catalog())
