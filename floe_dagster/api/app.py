"""The FastAPI application: Floe's endpoints on the Dagster instance.

The routes are in :mod:`floe_dagster.api.routes`, one ``APIRouter`` a resource group; this module
builds the application around them: its exception handlers (api/error_handlers.py: how each error
answers), its OpenAPI document and the route that serves it.

Every endpoint but ``/health``, ``/metrics`` and Floe's ``/api`` (Swagger UI) and ``/api/openapi`` needs a
valid key in ``X-API-Key`` whenever keys are required (api/auth.py; 401 without one, 403 with a key whose
role lacks the permission). Every error has one shape,
``{error, code, details, timestamp}``. Handlers are plain functions: FastAPI runs them in its thread
pool, which the blocking Dagster, PyIceberg and run-submission calls need. Every answer's secrets are
masked on the way out (api/answer_masking.py).
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Callable

import yaml
from dagster import DagsterInstance
from fastapi import Depends, FastAPI, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import JSONResponse, Response

from floe_dagster.api.answer_masking import masked_answers
from floe_dagster.api.auth import KeyStore, Principal
from floe_dagster.api.error_handlers import EXCEPTION_HANDLERS, error_body
from floe_dagster.api.key_admin import KeyAdmin
from floe_dagster.api.routes import ROUTERS
from floe_dagster.api.routes.access import reader
from floe_dagster.api.services import ApiServices
from floe_dagster.coordination.api_keys import ApiKeyTable
from floe_dagster.settings import Settings

OPENAPI_PATH = "/api/v1/openapi.json"
FLOE_OPENAPI_PATH, SWAGGER_PATH = "/api/openapi", "/api"  # Floe's (Quarkus) paths


def _package_version() -> str:
    try:
        return version("floe-dagster")
    except PackageNotFoundError:  # pragma: no cover
        return "0"


def openapi_document(request: Request, who: Principal = Depends(reader)) -> JSONResponse:
    return JSONResponse(request.app.openapi())


def floe_openapi_document(request: Request, format: str | None = None) -> Response:
    """Floe's ``/api/openapi`` (no key, as Floe's): YAML, or JSON with ``?format=json`` or ``Accept:
    application/json``, as Quarkus serves it."""
    document = request.app.openapi()
    if (format or "").lower() == "json" or "application/json" in request.headers.get("accept", ""):
        return JSONResponse(document)
    return Response(yaml.safe_dump(document, sort_keys=False, allow_unicode=True),
                    media_type="application/yaml;charset=UTF-8")


def swagger_page(request: Request) -> Response:
    """Floe's Swagger UI at ``/api`` (no key, as Floe's), on the document at ``/api/openapi``."""
    return get_swagger_ui_html(openapi_url=FLOE_OPENAPI_PATH + "?format=json", title=f"{request.app.title} API")


def _without_validation_errors(app: FastAPI) -> Callable[[], dict[str, object]]:
    """``app.openapi`` without its 422 responses: invalid requests get 400 here, as in Floe."""
    generate = app.openapi

    def openapi() -> dict[str, object]:
        if app.openapi_schema is None:
            document = generate()
            for operations in document.get("paths", {}).values():
                for operation in operations.values():
                    operation.get("responses", {}).pop("422", None)
            schemas = document.get("components", {}).get("schemas", {})
            for name in ("HTTPValidationError", "ValidationError"):
                schemas.pop(name, None)
            app.openapi_schema = document
        return app.openapi_schema

    return openapi


_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


def _is_json(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


async def _json_bodies_only(request: Request, call_next):
    """Floe's endpoints consume JSON only: a body sent as anything else (a form, text) is its 415, before
    the body is read (malformed JSON sent as JSON stays a 400 naming the body)."""
    has_body = request.headers.get("content-length", "0") not in ("", "0") or "transfer-encoding" in request.headers
    if (request.method in _BODY_METHODS and request.url.path.startswith("/api/") and has_body
            and not _is_json(request.headers.get("content-type", ""))):
        given = request.headers.get("content-type") or "none"
        return JSONResponse(error_body(415, "UNSUPPORTED_MEDIA_TYPE", f"Content-Type {given} is not supported: "
                                       "send the body as application/json"), status_code=415)
    return await call_next(request)


def create_app(settings: Settings, keys: KeyStore, instance: DagsterInstance) -> FastAPI:
    app = FastAPI(
        title="floe-dagster",
        version=_package_version(),
        description=(
            "Floe's maintenance API on a Dagster instance: trigger a table's maintenance (queued runs the "
            "daemon executes), trigger status and health per table, recent maintenance runs, pattern "
            "validation, tables, the catalog, API keys. Authenticate with the X-API-Key header (roles VIEWER: "
            "read, OPERATOR: read and trigger, ADMIN: everything, policies and API keys too). Nested "
            "namespaces are written dotted in paths and bodies."
        ),
        openapi_url=None, docs_url=None, redoc_url=None,
    )
    app.state.service = ApiServices(settings, instance)  # the routes read these from request.app.state
    if keys.database is None:  # the keys created over HTTP live in the coordination database
        keys.database = ApiKeyTable(app.state.service.coordination.engine)
    app.state.keys = keys
    app.state.key_admin = KeyAdmin(keys)
    for kind, handler in EXCEPTION_HANDLERS.items():
        app.add_exception_handler(kind, handler)
    app.middleware("http")(_json_bodies_only)
    # Outermost: every answer, the 415 above too; the OpenAPI document by text only (it names fields, holds none).
    app.middleware("http")(masked_answers(frozenset({OPENAPI_PATH, FLOE_OPENAPI_PATH})))
    for router in ROUTERS:
        app.include_router(router)
    app.add_api_route(OPENAPI_PATH, openapi_document, methods=["GET"], include_in_schema=False)
    app.add_api_route(FLOE_OPENAPI_PATH, floe_openapi_document, methods=["GET"], include_in_schema=False)
    app.add_api_route(SWAGGER_PATH, swagger_page, methods=["GET"], include_in_schema=False)
    app.openapi = _without_validation_errors(app)  # type: ignore[method-assign]
    return app
