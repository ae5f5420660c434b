"""``POST /api/v1/policies/validate-pattern``: which tables a table pattern matches."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse

from floe_dagster.api import models as M
from floe_dagster.api.auth import Principal
from floe_dagster.api.routes.access import api_service, reader
from floe_dagster.api.routes.common import error_responses
from floe_dagster.api.service import ApiService

router = APIRouter(tags=["policies"])


@router.post(
    "/api/v1/policies/validate-pattern",
    summary="Which tables a table pattern matches",
    response_model=M.ValidatePatternResponse,
    responses=error_responses(400, 401, 403, 503),
)
def validate_pattern(body: M.ValidatePatternRequest, who: Principal = Depends(reader),
                     service: ApiService = Depends(api_service)) -> JSONResponse:
    return JSONResponse(service.validate_pattern(body.pattern))
