"""How each error answers over HTTP: the application's exception handlers (``create_app`` registers
:data:`EXCEPTION_HANDLERS`). Every error has one shape, ``{error, code, details, timestamp}``.

An :class:`~floe_dagster.errors.ApiError` answers as it says; the other kinds of errors.py answer with
Floe's status and code (:data:`ANSWERS`): an unknown table 404, the catalog or the health metadata
down 503, invalid policy files 500, a manual trigger's refusal by its code, the policy directory's
refusals. Anything else is a 500 that names only the exception's type (the server log has the rest).
"""

from __future__ import annotations

import logging
from typing import Any, Callable

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from floe_dagster.api.timestamps import iso, utc_now
from floe_dagster.errors import (
    ApiError,
    CatalogUnavailable,
    HealthError,
    InvalidPolicyRequest,
    PolicyConflict,
    PolicyError,
    PolicyNotFound,
    PolicyNotManaged,
    PolicyStoreBusy,
    PolicyWritesDisabled,
    TableUnreadable,
    TriggerRefused,
    UnknownTable,
)

log = logging.getLogger(__name__)

# The HTTP status of each manual-trigger refusal (launching.manual.prepare_trigger).
REFUSAL_STATUS = {"NO_POLICY": 404, "POLICY_NOT_FOUND": 404, "POLICY_NOT_EFFECTIVE": 400,
                  "OPERATION_NOT_CONFIGURED": 404, "TABLE_NOT_LOADED": 409}


def error_body(status: int, code: str, message: str, details: dict[str, object] | None = None) -> dict[str, object]:
    return {"error": message, "code": code, "details": details or {}, "timestamp": iso(utc_now())}


def _unknown_table(exc: UnknownTable) -> ApiError:
    table = exc.table
    if table is None:
        return ApiError(404, "TABLE_NOT_FOUND", str(exc))
    # Floe's words (namespace and table, no catalog); ours stay in the details.
    short = f"{table.namespace_str}.{table.name}"
    return ApiError(404, "TABLE_NOT_FOUND", f"Table not found: {short}",
                    {"resourceType": "Table", "id": short, "table": table.qualified, "detail": str(exc)})


def _invalid_policy(exc: InvalidPolicyRequest) -> ApiError:
    problems = [{"location": ".".join(p for p in ("body", field) if p), "message": text}
                for field, text in exc.problems]
    return ApiError(400, "VALIDATION_FAILED", str(exc), {"errors": problems})


# What each kind of error answers; the most specific kind applies (Starlette follows the class's MRO).
ANSWERS: dict[type[Exception], Callable[[Any], ApiError]] = {
    UnknownTable: _unknown_table,
    CatalogUnavailable: lambda exc: ApiError(503, "CATALOG_UNAVAILABLE", str(exc)),
    TableUnreadable: lambda exc: ApiError(500, "TABLE_UNREADABLE", str(exc)),
    HealthError: lambda exc: ApiError(503, "HEALTH_UNAVAILABLE", str(exc)),
    PolicyError: lambda exc: ApiError(500, "POLICIES_INVALID", f"the policy files are invalid: {exc}"),
    TriggerRefused: lambda exc: ApiError(REFUSAL_STATUS.get(exc.code, 400), exc.code, str(exc), exc.details),
    PolicyNotFound: lambda exc: ApiError(404, "NOT_FOUND", str(exc), {"resourceType": "Policy", "id": exc.key}),
    InvalidPolicyRequest: _invalid_policy,
    PolicyNotManaged: lambda exc: ApiError(409, "POLICY_NOT_MANAGED", str(exc), {"source": exc.source}),
    PolicyConflict: lambda exc: ApiError(409, "CONFLICT", str(exc)),
    PolicyStoreBusy: lambda exc: ApiError(503, "POLICY_STORE_BUSY", str(exc)),
}


def api_error(request: Request, exc: ApiError) -> JSONResponse:
    if exc.status >= 500:
        log.error("%s %s: %s %s", request.method, request.url.path, exc.code, exc.message)
    return JSONResponse(error_body(exc.status, exc.code, exc.message, exc.details), status_code=exc.status)


def _answered(request: Request, exc: Exception) -> JSONResponse:
    answer = next(ANSWERS[kind] for kind in type(exc).__mro__ if kind in ANSWERS)
    return api_error(request, answer(exc))


def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
    problems = [
        {"location": ".".join(str(part) for part in error.get("loc", ())), "message": error.get("msg", "")}
        for error in exc.errors()
    ]
    summary = "; ".join(f"{p['location']}: {p['message']}" for p in problems[:5]) or "invalid request"
    return JSONResponse(error_body(400, "VALIDATION_FAILED", summary, {"errors": problems}), status_code=400)


def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    codes = {404: "NOT_FOUND", 405: "METHOD_NOT_ALLOWED", 400: "BAD_REQUEST"}
    code = codes.get(exc.status_code, f"HTTP_{exc.status_code}")
    return JSONResponse(error_body(exc.status_code, code, str(exc.detail)), status_code=exc.status_code,
                        headers=getattr(exc, "headers", None))


def _writes_disabled(request: Request, exc: PolicyWritesDisabled) -> JSONResponse:
    # A 405 in the error shape, with the Allow header a 405 needs.
    return _http(request, StarletteHTTPException(405, str(exc), headers={"Allow": "GET"}))


def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.exception("%s %s failed", request.method, request.url.path)
    return JSONResponse(error_body(500, "INTERNAL_ERROR", f"internal error ({type(exc).__name__}); see the "
                                   "server log"), status_code=500)


EXCEPTION_HANDLERS: dict[type[Exception], Callable[[Request, Any], JSONResponse]] = {
    ApiError: api_error,
    **{kind: _answered for kind in ANSWERS},
    PolicyWritesDisabled: _writes_disabled,
    RequestValidationError: _invalid,
    StarletteHTTPException: _http,
    Exception: _unexpected,
}
