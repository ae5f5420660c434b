"""``POST /api/v1/maintenance/trigger``: queue a table's maintenance."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query
from fastapi.responses import JSONResponse

from floe_dagster.api import models as M
from floe_dagster.api.auth import Principal
from floe_dagster.api.routes.access import operator, trigger_service
from floe_dagster.api.routes.common import error_responses
from floe_dagster.api.trigger_service import TriggerService

router = APIRouter(tags=["maintenance"])


@router.post(
    "/api/v1/maintenance/trigger",
    summary="Trigger a table's maintenance (queued runs, one per operation)",
    response_model=M.TriggerResponse,
    responses={202: {"model": M.TriggerResponse, "description": "Queued (or still running after ?wait)"},
               **error_responses(400, 401, 403, 404, 409, 500, 503)},
    description=(
        "Queues one run per operation (the policy's configured ones, or `operations`) in Floe's order, "
        "tagged floe/trigger=manual with a shared dagster/floe.trigger-id (the orchestrationId) and "
        "dagster/floe.actor (the API key's name). 202 when queued; with ?wait=true 200 once the runs finished "
        "(a failed operation is reported in operationResults); dryRun=true says what would be queued. 409 when "
        "a queued or running run maintains the table, or its table lock is held."
    ),
)
def trigger(
    body: M.TriggerRequest,
    wait: bool = Query(False, description="Wait until the runs finished (the daemon executes them)"),
    timeout: int = Query(3600, ge=1, le=86400, description="Seconds to wait at most with wait=true"),
    who: Principal = Depends(operator),
    service: TriggerService = Depends(trigger_service),
) -> JSONResponse:
    status, payload, headers = service.trigger(body.model_dump(), who.name, wait, float(timeout))
    return JSONResponse(payload, status_code=status, headers=headers)
