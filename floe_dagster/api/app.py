"""The FastAPI application: Floe's endpoints on the Dagster instance.

Every endpoint but ``/health`` needs a valid key in ``X-API-Key`` when keys are configured (401
without one, 403 with a key whose role lacks the permission). Every error has one shape,
``{error, code, details, timestamp}``. Handlers are plain functions: FastAPI runs them in its thread
pool, which the blocking Dagster, PyIceberg and run-submission calls need.
"""

from __future__ import annotations

import logging
import re
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Callable, Literal

from fastapi import Depends, FastAPI, Path, Query, Request, Security
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import APIKeyHeader
from dagster import DagsterInstance
from starlette.exceptions import HTTPException as StarletteHTTPException

from floe_dagster.api import models as M
from floe_dagster.core.localtime import naive_as_utc
from floe_dagster.api.auth import HEADER, KeyStore, Permission, Principal
from floe_dagster.api.service import ApiError, ApiService, iso, utc_now
from floe_dagster.settings import Settings

log = logging.getLogger(__name__)

OPENAPI_PATH = "/api/v1/openapi.json"
# RFC 3339 date-time (the OpenAPI "date-time" format); without an offset the time is read as UTC.
_EARLIEST_AT = datetime(1970, 1, 1, tzinfo=timezone.utc)
_LATEST_AT = datetime(9000, 1, 1, tzinfo=timezone.utc)
_DATE_TIME = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d{1,6})?([Zz]|[+-]\d{2}:\d{2})?")

_DESCRIPTIONS = {
    400: "The request is invalid (body, path or query)",
    401: "No valid API key in the X-API-Key header",
    403: "The API key's role does not allow this",
    404: "Unknown table, catalog or policy, or no policy applies",
    409: "The table is being maintained (details.runId is the run), or it is not an asset yet",
    500: "Internal error (for example invalid policy files)",
    503: "The catalog, the health metadata or the run queue cannot be reached",
}


def _errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    return {code: {"model": M.ErrorResponse, "description": _DESCRIPTIONS[code]} for code in codes}


def error_body(status: int, code: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"error": message, "code": code, "details": details or {}, "timestamp": iso(utc_now())}


def _package_version() -> str:
    try:
        return version("floe-dagster")
    except PackageNotFoundError:  # pragma: no cover
        return "0"


def parse_at(text: str | None) -> datetime | None:
    if text is None:
        return None
    if not _DATE_TIME.fullmatch(text.strip()):
        raise ApiError(400, "VALIDATION_FAILED", f"at: expected an RFC 3339 date-time such as 2026-11-22T10:00:00Z, "
                       f"got {text!r}", {"field": "at"})
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError as exc:
        raise ApiError(400, "VALIDATION_FAILED", f"at: {exc}", {"field": "at"}) from None
    moment = naive_as_utc(moment)
    # The planner adds and subtracts intervals, back-offs and cron gaps: stay far from datetime's limits
    # (year 1 or 9999 raised OverflowError deep in the planner: a 500).
    if not _EARLIEST_AT <= moment <= _LATEST_AT:
        raise ApiError(400, "VALIDATION_FAILED", f"at: expected a time between {_EARLIEST_AT.date()} and "
                       f"{_LATEST_AT.date()}, got {text!r}", {"field": "at"})
    return moment


def create_app(settings: Settings, keys: KeyStore, instance: DagsterInstance) -> FastAPI:
    service = ApiService(settings, instance)
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
    app.state.service = service
    app.state.keys = keys
    api_key = APIKeyHeader(name=HEADER, auto_error=False, scheme_name="ApiKey",
                           description="An API key; the server stores only its SHA-256")

    def allowed(permission: Permission) -> Callable[..., Principal]:
        def dependency(key: str | None = Security(api_key)) -> Principal:
            if keys.configured:
                problem = keys.error()
                if problem:
                    log.error("API keys unusable: %s", problem)
                    raise ApiError(503, "AUTH_UNAVAILABLE", "the server's API keys cannot be read; see its log")
            who = keys.authenticate(key)
            if who is None:
                message = (f"a valid API key is required in the {HEADER} header" if not key
                           else "the API key is not valid")
                raise ApiError(401, "UNAUTHORIZED", message)
            if not who.can(permission):
                raise ApiError(403, "FORBIDDEN",
                               f"API key '{who.name}' has role {who.role.value if who.role else '-'}, "
                               f"which does not allow '{permission.value}'",
                               {"key": who.name, "role": who.role.value if who.role else None,
                                "needs": permission.value})
            return who

        return dependency

    reader = allowed(Permission.READ)
    operator = allowed(Permission.TRIGGER)

    @app.exception_handler(ApiError)
    def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        if exc.status >= 500:
            log.error("%s %s: %s %s", request.method, request.url.path, exc.code, exc.message)
        return JSONResponse(error_body(exc.status, exc.code, exc.message, exc.details), status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = [
            {"location": ".".join(str(part) for part in error.get("loc", ())), "message": error.get("msg", "")}
            for error in exc.errors()
        ]
        summary = "; ".join(f"{p['location']}: {p['message']}" for p in problems[:5]) or "invalid request"
        return JSONResponse(error_body(400, "VALIDATION_FAILED", summary, {"errors": problems}), status_code=400)

    @app.exception_handler(StarletteHTTPException)
    def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        codes = {404: "NOT_FOUND", 405: "METHOD_NOT_ALLOWED", 400: "BAD_REQUEST"}
        code = codes.get(exc.status_code, f"HTTP_{exc.status_code}")
        return JSONResponse(error_body(exc.status_code, code, str(exc.detail)), status_code=exc.status_code,
                            headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("%s %s failed", request.method, request.url.path)
        return JSONResponse(error_body(500, "INTERNAL_ERROR", f"internal error ({type(exc).__name__}); see the "
                                       "server log"), status_code=500)

    part = r"[^.\s](?:[^.]*[^.\s])?"  # a name part: no dot, no blank at either end
    namespace_path = Path(min_length=1, max_length=1024, pattern=rf"^{part}(\.{part})*$", examples=["sales"],
                          description="The namespace, dotted when nested (a.b)")
    table_path = Path(min_length=1, max_length=255, pattern=rf"^{part}$", examples=["orders"],
                      description="The table name")

    @app.post(
        "/api/v1/maintenance/trigger",
        tags=["maintenance"],
        summary="Trigger a table's maintenance (queued runs, one per operation)",
        response_model=M.TriggerResponse,
        responses={202: {"model": M.TriggerResponse, "description": "Queued (or still running after ?wait)"},
                   **_errors(400, 401, 403, 404, 409, 500, 503)},
        description=(
            "Queues one run per operation (the policy's configured ones, or `operations`) in Floe's order, "
            "tagged floe/trigger=manual with a shared floe/trigger-id (the orchestrationId) and floe/actor "
            "(the API key's name). 202 when queued; with ?wait=true 200 once the runs finished (a failed "
            "operation is reported in operationResults); dryRun=true says what would be queued. 409 when "
            "a queued or running run maintains the table, or its table lock is held."
        ),
    )
    def trigger(
        body: M.TriggerRequest,
        wait: bool = Query(False, description="Wait until the runs finished (the daemon executes them)"),
        timeout: int = Query(3600, ge=1, le=86400, description="Seconds to wait at most with wait=true"),
        who: Principal = Depends(operator),
    ) -> JSONResponse:
        status, payload, headers = service.trigger(body.model_dump(), who.name, wait, float(timeout))
        return JSONResponse(payload, status_code=status, headers=headers)

    @app.get(
        "/api/v1/tables/{namespace}/{table}/trigger-status",
        tags=["tables"],
        summary="Floe's trigger status for one table (floe-dagster explain --json)",
        response_model=M.TriggerStatusResponse,
        responses=_errors(400, 401, 403, 404, 500, 503),
    )
    def trigger_status(
        namespace: str = namespace_path,
        table: str = table_path,
        at: str | None = Query(None, description="Evaluate at this RFC 3339 time (default now)",
                               json_schema_extra={"format": "date-time"}),
        who: Principal = Depends(reader),
    ) -> JSONResponse:
        return JSONResponse(service.trigger_status(namespace, table, parse_at(at)))

    @app.get(
        "/api/v1/tables/{namespace}/{table}/health",
        tags=["tables"],
        summary="One table's health: metrics, issues, status and debt score",
        response_model=M.HealthResponse,
        responses=_errors(400, 401, 403, 404, 500, 503),
    )
    def table_health(
        namespace: str = namespace_path,
        table: str = table_path,
        tier: Literal["summary", "full"] = Query("full", description="summary: snapshot summary only; full: "
                                                 "manifests too"),
        who: Principal = Depends(reader),
    ) -> JSONResponse:
        return JSONResponse(service.health(namespace, table, tier))

    @app.post(
        "/api/v1/policies/validate-pattern",
        tags=["policies"],
        summary="Which tables a table pattern matches",
        response_model=M.ValidatePatternResponse,
        responses=_errors(400, 401, 403, 503),
    )
    def validate_pattern(body: M.ValidatePatternRequest, who: Principal = Depends(reader)) -> JSONResponse:
        return JSONResponse(service.validate_pattern(body.pattern))

    @app.get(
        "/api/v1/operations",
        tags=["operations"],
        summary="Recent maintenance runs, newest first, with their numbers",
        response_model=M.OperationsPage,
        responses=_errors(400, 401, 403, 503),
    )
    def operations(
        table: str | None = Query(None, min_length=1, max_length=1300,
                                  description="catalog.namespace.table or namespace.table"),
        triggerId: str | None = Query(None, min_length=1, max_length=100,
                                      description="The orchestrationId of a trigger"),
        status: Literal["PENDING", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED"] | None = Query(None),
        limit: int = Query(20, ge=1, le=100),
        offset: int = Query(0, ge=0, le=10000),
        who: Principal = Depends(reader),
    ) -> JSONResponse:
        return JSONResponse(service.operations(table, triggerId, status, limit, offset))

    @app.get(
        "/health",
        tags=["service"],
        summary="Liveness and readiness (no key needed)",
        response_model=M.ServiceHealth,
        responses={503: {"model": M.ServiceHealth, "description": "The instance or the catalog is down"}},
    )
    def health() -> JSONResponse:
        up, checks = service.service_health()
        body = {"status": "UP" if up else "DOWN", "checks": checks, "timestamp": iso(utc_now())}
        return JSONResponse(body, status_code=200 if up else 503)

    @app.get(OPENAPI_PATH, include_in_schema=False)
    def openapi_document(who: Principal = Depends(reader)) -> JSONResponse:
        return JSONResponse(app.openapi())

    generate = app.openapi

    def openapi() -> dict[str, Any]:
        """FastAPI's document without its 422 responses: invalid requests get 400 here, as in Floe."""
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

    app.openapi = openapi  # type: ignore[method-assign]
    return app
