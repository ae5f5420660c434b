"""The HTTP API's services, one per router, built once per application (``create_app`` keeps them in
``app.state.service``; api/routes/access.py hands each router its own). What each endpoint does lives
in its router's service, independent of HTTP. A refusal is an :class:`~floe_dagster.errors.ApiError`
with Floe's status code and a machine-readable code; the other errors (an unknown table, the catalog
down, invalid policy files...) reach the application's exception handlers (api/error_handlers.py).

Each router's service:

- ``maintenance``: ``TriggerService`` (api/trigger_service.py), the manual trigger;
- ``tables``: ``CatalogReads`` (api/catalog_reads.py) and ``TableReports`` (api/table_reports.py);
- ``catalog``: ``CatalogReads``;
- ``policies``: ``PolicyChecks`` (api/policy_checks.py), beside the policy store (policy_store.py);
- ``operations``: ``OperationReads`` (api/operation_reads.py);
- ``auth_keys``: ``KeyAdmin`` (api/key_admin.py, ``app.state.key_admin``);
- ``server_probes``: :meth:`ApiServices.readiness`;
- ``metrics``: the settings, the instance and the coordination database shared here.
"""

from __future__ import annotations

import logging
import threading

from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

from floe_dagster.api.catalog_reads import CatalogReads
from floe_dagster.api.operation_reads import OperationReads
from floe_dagster.api.policy_checks import PolicyChecks
from floe_dagster.api.table_reports import TableReports
from floe_dagster.api.trigger_service import TriggerService
from floe_dagster.coordination.resource import CoordinationResource
from floe_dagster.iceberg.catalog import open_catalog
from floe_dagster.settings import Settings

log = logging.getLogger(__name__)


class ApiServices:
    """What one application's routers share (the settings, the instance, one coordination database),
    and each router's service."""

    def __init__(self, settings: Settings, instance: DagsterInstance):
        self.settings = settings
        self.instance = instance
        self.coordination = CoordinationResource.from_settings(settings).coordination
        # Set when the server stops (api/server.py): a waiting trigger answers at once.
        self.stopping = threading.Event()
        self.trigger = TriggerService(settings, instance, self.coordination, self.stopping)
        self.operations = OperationReads(settings, instance, self.coordination)
        self.table_reports = TableReports(settings, instance, self.coordination)
        self.policy_checks = PolicyChecks(settings)
        self.catalog_reads = CatalogReads(settings, instance)

    def readiness(self) -> tuple[bool, list[dict[str, str]]]:
        checks = []
        try:
            self.instance.get_runs_count(RunsFilter(statuses=[DagsterRunStatus.QUEUED]))
            checks.append({"name": "dagster-instance", "status": "UP"})
        except Exception:
            log.exception("health: the Dagster instance cannot be read")
            checks.append({"name": "dagster-instance", "status": "DOWN"})
        try:
            open_catalog(self.settings.catalog).list_namespaces()
            checks.append({"name": "catalog", "status": "UP"})
        except Exception:
            log.exception("health: the catalog cannot be reached")
            checks.append({"name": "catalog", "status": "DOWN"})
        return all(c["status"] == "UP" for c in checks), checks
