"""The HTTP API's routes, one ``APIRouter`` a resource group; ``app.create_app`` includes them.

- ``maintenance``: ``POST /api/v1/maintenance/trigger``.
- ``tables``: the tables, namespaces and latest health; a table's details, existence, trigger status,
  health and health history.
- ``catalog``: ``GET /api/v1/catalog``.
- ``auth_keys``: the API keys (``/api/v1/auth/keys``, ADMIN) and ``/me``.
- ``policies``: Floe's policy CRUD over the API's policy directory, and pattern validation.
- ``operations``: recent maintenance runs, one by id, the running ones, stats, one table's.
- ``server_probes``: the server's ``GET /health``, ``GET /health/live`` and ``GET /health/ready`` (no key
  needed).
- ``metrics``: ``GET /metrics``, the Prometheus exposition (no key needed).
- ``access``: the key check (``reader``, ``operator``, ``admin``), each router's service (api/services.py)
  and the ``KeyAdmin``, from ``request.app.state``.
- ``common``: the documented error responses, the table path parameters and the ``at`` time.
"""

from __future__ import annotations

from floe_dagster.api.routes import (
    auth_keys,
    catalog,
    maintenance,
    metrics,
    operations,
    policies,
    server_probes,
    tables,
)

# In the order of the OpenAPI document's paths.
ROUTERS = (maintenance.router, tables.router, policies.router, operations.router, catalog.router, auth_keys.router,
           server_probes.router, metrics.router)
