"""Floe's ``/api/v1/auth/keys``: API keys created, listed, read, updated and revoked over HTTP (ADMIN
only: 403 ``Insufficient permissions`` otherwise), and ``/me`` (any key). The work is api/key_admin.py's."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Path, Query
from fastapi.responses import JSONResponse, Response

from floe_dagster.api import key_models as K
from floe_dagster.api import models as M
from floe_dagster.api.auth import Principal
from floe_dagster.api.key_admin import KeyAdmin
from floe_dagster.api.routes.access import admin, key_admin, reader
from floe_dagster.api.routes.common import error_responses

router = APIRouter(tags=["auth"])
COLLECTION = "/api/v1/auth/keys"
_KEY_ID = Path(alias="id", min_length=1, max_length=300, description="A key's id (file:<name> or env:<name> for "
               "floe.yaml's keys)")
_NOT_MANAGED = {409: {"model": M.ErrorResponse, "description": "The name is taken, or the key is floe.yaml's"}}


@router.post(
    COLLECTION,
    status_code=201,
    summary="Create an API key (the key is in this answer only)",
    response_model=K.CreateApiKeyResponse,
    responses={**error_responses(400, 401, 403), **_NOT_MANAGED},
)
def create_key(body: K.ApiKeyRequest, who: Principal = Depends(admin),
               keys: KeyAdmin = Depends(key_admin)) -> JSONResponse:
    created, location = keys.create(body.model_dump(), who)
    return JSONResponse(created, status_code=201, headers={"Location": location})


@router.get(
    COLLECTION,
    summary="Every API key: floe.yaml's and the ones created over HTTP",
    response_model=K.ApiKeysPage,
    responses=error_responses(401, 403),
)
def list_keys(enabled: str | None = Query(None, description="true: only enabled keys"),
              who: Principal = Depends(admin), keys: KeyAdmin = Depends(key_admin)) -> JSONResponse:
    return JSONResponse(keys.list(enabled == "true"))


# Before /{id}, which would match it too.
@router.get(
    COLLECTION + "/me",
    summary="The caller's own key (any role)",
    response_model=K.ApiKeyResponse,
    responses=error_responses(401),
)
def me(who: Principal = Depends(reader), keys: KeyAdmin = Depends(key_admin)) -> JSONResponse:
    return JSONResponse(keys.me(who))


@router.get(
    COLLECTION + "/{id}",
    summary="One API key",
    response_model=K.ApiKeyResponse,
    responses=error_responses(401, 403, 404),
)
def get_key(key_id: str = _KEY_ID, who: Principal = Depends(admin),
            keys: KeyAdmin = Depends(key_admin)) -> JSONResponse:
    return JSONResponse(keys.get(key_id))


@router.put(
    COLLECTION + "/{id}",
    summary="Rename, change the role of, enable or disable an API key (absent or null fields stay)",
    response_model=K.ApiKeyResponse,
    responses={**error_responses(400, 401, 403, 404), **_NOT_MANAGED},
)
def update_key(body: K.UpdateApiKeyRequest, key_id: str = _KEY_ID, who: Principal = Depends(admin),
               keys: KeyAdmin = Depends(key_admin)) -> JSONResponse:
    return JSONResponse(keys.update(key_id, body.model_dump()))


@router.delete(
    COLLECTION + "/{id}",
    status_code=204,
    summary="Revoke (delete) an API key; not the caller's own",
    responses={204: {"description": "Revoked"}, **error_responses(400, 401, 403, 404), **_NOT_MANAGED},
)
def revoke_key(key_id: str = _KEY_ID, who: Principal = Depends(admin),
               keys: KeyAdmin = Depends(key_admin)) -> Response:
    keys.revoke(key_id, who)
    return Response(status_code=204)
