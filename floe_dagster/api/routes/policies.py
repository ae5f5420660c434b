"""The policies, in Floe's shapes: list, get (by id or name), create, update, delete; and pattern
validation (``POST /api/v1/policies/validate-pattern``).

The files stay the source of truth (:mod:`floe_dagster.policy_store`): reads show every loaded policy,
writes go to ``api.policy-directory`` (one ``<name>.json`` each) and are seen by the sensor's next tick
and the CLI. Without that directory the writes answer 405; a policy from another file answers 409.
Reads need VIEWER, writes ADMIN (as in Floe; OPERATOR too with ``api.operator-may-write-policies``). The
store's refusals answer through the application's exception handlers (api/error_handlers.py).
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import APIRouter, Body, Depends, Path, Query
from fastapi.responses import JSONResponse, Response

from floe_dagster.api import models as M
from floe_dagster.api.auth import Principal
from floe_dagster.api.policy_models import PolicyPage, PolicyResponse, policy_response
from floe_dagster.api.policy_checks import PolicyChecks
from floe_dagster.api.routes.access import policy_checks, policy_writer, reader
from floe_dagster.api.routes.common import Page, error_responses, paging
from floe_dagster.policy_store import PolicyStore

log = logging.getLogger(__name__)
router = APIRouter(tags=["policies"])

COLLECTION = "/api/v1/policies"

_WRITE_ERRORS = {
    405: {"model": M.ErrorResponse, "description": "No api.policy-directory in floe.yaml: policies are read-only"},
    409: {"model": M.ErrorResponse, "description": "The name is taken, or the policy's file is not managed by the API"},
}
_BODY = Body(
    description="A policy in Floe's camelCase JSON, as a policy file holds it (name, description, tablePattern, "
                "enabled, mode (live or shadow), priority, tags, the operation configs and their <operation>Schedule, "
                "triggerConditions, healthThresholds). Unknown fields are refused; id, createdAt and updatedAt are "
                "ignored.",
    openapi_examples={"compaction": {"value": {
        "name": "sales-compaction", "tablePattern": "demo.sales.*", "priority": 10,
        "rewriteDataFiles": {"targetFileSizeBytes": 134217728},
        "rewriteDataFilesSchedule": {"interval": "P1D", "windowStart": "01:00", "windowEnd": "05:00"},
        "triggerConditions": {"smallFileCountAbove": 20}}}},
)

_POLICY_ID = Path(alias="id", min_length=1, max_length=1024, description="The policy's id (writes take ids only)")


def store(checks: PolicyChecks) -> PolicyStore:
    return PolicyStore(checks.settings, table_location=checks.table_location)


@router.get(
    COLLECTION,
    summary="The policies, highest priority first (Floe's list page)",
    response_model=PolicyPage,
    responses=error_responses(400, 401, 403, 500),
    description="Every loaded policy (the policy files and api.policy-directory), ordered by priority (highest "
                "first), then most recently changed, then name. `enabled=true` lists only enabled ones (any other "
                "value lists all, as in Floe). `limit` 1..100 (default 20), `offset` ≥ 0.",
)
def list_policies(
    enabled: str | None = Query(None, description="true: only enabled policies"),
    page: Page = Depends(paging()),
    who: Principal = Depends(reader),
    checks: PolicyChecks = Depends(policy_checks),
) -> JSONResponse:
    limit, offset = page.limit, page.offset
    stored = store(checks).all()
    if enabled == "true":
        stored = [entry for entry in stored if entry.policy.enabled]
    stored.sort(key=lambda e: e.name)
    stored.sort(key=lambda e: (-e.policy.priority, -(e.modified or 0.0)))
    page = stored[offset:offset + limit]
    return JSONResponse({"policies": [policy_response(entry) for entry in page], "total": len(stored),
                         "limit": limit, "offset": offset, "hasMore": offset + len(page) < len(stored)})


@router.get(
    COLLECTION + "/{id}",
    summary="One policy, by id or else by name",
    response_model=PolicyResponse,
    responses=error_responses(400, 401, 403, 404, 500),
    description="The path is looked up as a policy id first, then as a policy name (Floe has ids only).",
)
def get_policy(
    id_or_name: str = Path(alias="id", min_length=1, max_length=1024, description="A policy id, or else a name"),
    who: Principal = Depends(reader),
    checks: PolicyChecks = Depends(policy_checks),
) -> JSONResponse:
    return JSONResponse(policy_response(store(checks).find(id_or_name)))


@router.post(
    COLLECTION,
    status_code=201,
    summary="Create a policy (written to api.policy-directory as <name>.json)",
    response_model=PolicyResponse,
    responses={201: {"description": "Created; Location names it"},
               **error_responses(400, 401, 403, 500, 503), **_WRITE_ERRORS},
    description="Checked by the policy parser (400 naming the field; a tablePattern over 256 characters, a name "
                "with '/' or '\\\\' or a leading '.' are refused too) and against every other policy's name (409) "
                "before anything is written. The sensor's next tick and the CLI use it.",
)
def create_policy(
    body: dict[str, Any] = _BODY,
    who: Principal = Depends(policy_writer),
    checks: PolicyChecks = Depends(policy_checks),
) -> JSONResponse:
    created = store(checks).create(body, check=checks.check_policy_tables)
    log.info("policy '%s' created by %s in %s", created.name, who.name, created.file)
    return JSONResponse(policy_response(created), status_code=201,
                        headers={"Location": f"{COLLECTION}/{created.id}"})


@router.put(
    COLLECTION + "/{id}",
    summary="Update a policy (Floe's partial update: absent or null fields keep their value)",
    response_model=PolicyResponse,
    responses=error_responses(400, 401, 403, 404, 500, 503) | _WRITE_ERRORS,
    description="A field given replaces the stored one whole (an operation config or schedule too). A new name "
                "renames the file and changes the id. Only policies in api.policy-directory can be changed (409 "
                "for one from another file).",
)
def update_policy(
    policy_id: str = _POLICY_ID,
    body: dict[str, Any] = _BODY,
    who: Principal = Depends(policy_writer),
    checks: PolicyChecks = Depends(policy_checks),
) -> JSONResponse:
    updated = store(checks).update(policy_id, body, check=checks.check_policy_tables)
    log.info("policy '%s' (%s) updated by %s", updated.name, policy_id, who.name)
    return JSONResponse(policy_response(updated))


@router.delete(
    COLLECTION + "/{id}",
    status_code=204,
    summary="Delete a policy (its file in api.policy-directory)",
    responses={204: {"description": "Deleted"}, **error_responses(400, 401, 403, 404, 500, 503), **_WRITE_ERRORS},
)
def delete_policy(
    policy_id: str = _POLICY_ID,
    who: Principal = Depends(policy_writer),
    checks: PolicyChecks = Depends(policy_checks),
) -> Response:
    deleted = store(checks).delete(policy_id)
    log.info("policy '%s' (%s) deleted by %s from %s", deleted.name, policy_id, who.name, deleted.file)
    return Response(status_code=204)


@router.post(
    COLLECTION + "/validate-pattern",
    summary="Which tables a table pattern matches",
    response_model=M.ValidatePatternResponse,
    responses=error_responses(400, 401, 403, 503),
)
def validate_pattern(body: M.ValidatePatternRequest, who: Principal = Depends(reader),
                     checks: PolicyChecks = Depends(policy_checks)) -> JSONResponse:
    return JSONResponse(checks.validate_pattern(body.pattern))
