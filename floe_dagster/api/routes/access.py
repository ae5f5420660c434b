"""What the routes need from the application: the key check (``reader``, ``operator``, ``policy_writer``,
``admin``), each router's service (api/services.py) and the ``KeyAdmin``.

``create_app`` puts the ``KeyStore`` (``app.state.keys``) and the ``ApiServices`` (``app.state.service``)
on the application, so the routers read them from the request and need no closure.
"""

from __future__ import annotations

import logging
from typing import Callable

from fastapi import Request, Security
from fastapi.security import APIKeyHeader

from floe_dagster.api.auth import HEADER, KeyStore, Permission, Principal
from floe_dagster.api.key_admin import KeyAdmin
from floe_dagster.api.catalog_reads import CatalogReads
from floe_dagster.api.operation_reads import OperationReads
from floe_dagster.api.policy_checks import PolicyChecks
from floe_dagster.api.services import ApiServices
from floe_dagster.api.table_reports import TableReports
from floe_dagster.api.trigger_service import TriggerService
from floe_dagster.errors import ApiError

log = logging.getLogger(__name__)

api_key = APIKeyHeader(name=HEADER, auto_error=False, scheme_name="ApiKey",
                       description="An API key; the server stores only its SHA-256")


def allowed(permission: Permission) -> Callable[..., Principal]:
    """A dependency giving the caller's ``Principal``: 503 when the configured keys cannot be read,
    401 without a valid key (whenever keys are required: api/auth.py, checked on every request), 403
    when the key's role lacks ``permission`` on this server."""

    def dependency(request: Request, key: str | None = Security(api_key)) -> Principal:
        keys: KeyStore = request.app.state.keys
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
            # Floe's words; which key, role and permission in the details.
            raise ApiError(403, "FORBIDDEN", "Insufficient permissions",
                           {"key": who.name, "role": who.role.value if who.role else None,
                            "needs": permission.value})
        return who

    return dependency


reader = allowed(Permission.READ)
operator = allowed(Permission.TRIGGER)
policy_writer = allowed(Permission.WRITE_POLICIES)  # ADMIN; OPERATOR with api.operator-may-write-policies
admin = allowed(Permission.MANAGE_KEYS)


# The services (async: a plain attribute read needs no worker thread).
async def api_services(request: Request) -> ApiServices:
    """All of them and what they share: the server probes and the metrics use it whole."""
    return request.app.state.service


async def trigger_service(request: Request) -> TriggerService:
    return request.app.state.service.trigger


async def operation_reads(request: Request) -> OperationReads:
    return request.app.state.service.operations


async def table_reports(request: Request) -> TableReports:
    return request.app.state.service.table_reports


async def catalog_reads(request: Request) -> CatalogReads:
    return request.app.state.service.catalog_reads


async def policy_checks(request: Request) -> PolicyChecks:
    return request.app.state.service.policy_checks


async def key_admin(request: Request) -> KeyAdmin:
    return request.app.state.key_admin
