"""``GET /metrics``: the Prometheus text exposition (format 0.0.4), no key needed, as Floe's.

Each application gets its own registry (:func:`floe_dagster.api.prometheus.metrics_registry`), built at
its first scrape and kept in ``app.state``; the collector reads its sources at every scrape. Left
out of the OpenAPI document, as Floe's.
"""

from __future__ import annotations

import threading

from fastapi import APIRouter, Request, Response
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest

from floe_dagster.api.prometheus import metrics_registry
from floe_dagster.api.services import ApiServices

router = APIRouter(tags=["service"])
_BUILDING = threading.Lock()


def registry_of(request: Request) -> CollectorRegistry:
    state = request.app.state
    with _BUILDING:
        if getattr(state, "metrics_registry", None) is None:
            service: ApiServices = state.service
            state.metrics_registry = metrics_registry(service.settings, service.instance, service.coordination)
        return state.metrics_registry


@router.get("/metrics", include_in_schema=False)
def metrics(request: Request) -> Response:
    return Response(generate_latest(registry_of(request)), media_type=CONTENT_TYPE_PLAIN_0_0_4)
