"""The FastAPI application: Floe's endpoints on the Dagster instance.

The routes are in :mod:`floe_dagster.api.routes`, one ``APIRouter`` a resource group; this module
builds the application around them: its exception handlers (api/error_handlers.py: how each error
answers), its OpenAPI document and the route that serves it.

Every endpoint but ``/health`` needs a valid key in ``X-API-Key`` when keys are configured (401
without one, 403 with a key whose role lacks the permission). Every error has one shape,
``{error, code, details, timestamp}``. Handlers are plain functions: FastAPI runs them in its thread
pool, which the blocking Dagster, PyIceberg and run-submission calls need.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any, Callable

from dagster import DagsterInstance
from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse

from floe_dagster.api.auth import KeyStore, Principal
from floe_dagster.api.error_handlers import EXCEPTION_HANDLERS
from floe_dagster.api.routes import ROUTERS
from floe_dagster.api.routes.access import reader
from floe_dagster.api.service import ApiService
from floe_dagster.settings import Settings

OPENAPI_PATH = "/api/v1/openapi.json"


def _package_version() -> str:
    try:
        return version("floe-dagster")
    except PackageNotFoundError:  # pragma: no cover
        return "0"


def openapi_document(request: Request, who: Principal = Depends(reader)) -> JSONResponse:
    return JSONResponse(request.app.openapi())


def _without_validation_errors(app: FastAPI) -> Callable[[], dict[str, Any]]:
    """``app.openapi`` without its 422 responses: invalid requests get 400 here, as in Floe."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
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


def create_app(settings: Settings, keys: KeyStore, instance: DagsterInstance) -> FastAPI:
    app = FastAPI(
        title="floe-dagster",
        version=_package_version(),
        description=(
            "Floe's maintenance API on a Dagster instance: trigger a table's maintenance (queued runs the "
            "daemon executes), trigger status and health per table, recent maintenance runs, pattern "
            "validation. Authenticate with the X-API-Key header (roles VIEWER: read, OPERATOR: read and "
            "trigger). Nested namespaces are written dotted in paths and bodies."
        ),
        openapi_url=None, docs_url=None, redoc_url=None,
    )
    app.state.service = ApiService(settings, instance)  # the routes read both from request.app.state
    app.state.keys = keys
    for kind, handler in EXCEPTION_HANDLERS.items():
        app.add_exception_handler(kind, handler)
    for router in ROUTERS:
        app.include_router(router)
    app.add_api_route(OPENAPI_PATH, openapi_document, methods=["GET"], include_in_schema=False)
    app.openapi = _without_validation_errors(app)  # type: ignore[method-assign]
    return app
