"""One table's reports over HTTP, beside the ``tables`` router's catalog reads (api/catalog_reads.py):
its trigger status (explain), its health and its health history."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from dagster import DagsterInstance

from floe_dagster.api.table_names import table_name
from floe_dagster.api.timestamps import utc_now
from floe_dagster.coordination.database import Coordination
from floe_dagster.reports.explain import explain_table
from floe_dagster.reports.health_report import floe_health_json, health_history, health_report
from floe_dagster.settings import Settings


class TableReports:
    def __init__(self, settings: Settings, instance: DagsterInstance, coordination: Coordination):
        self.settings = settings
        self.instance = instance
        self.coordination = coordination

    def trigger_status(self, namespace: str, table: str, at: datetime | None) -> dict[str, Any]:
        name = table_name(self.settings, namespace, table)
        report = explain_table(self.settings, self.coordination, name.qualified, at or utc_now(), self.instance)
        return json.loads(json.dumps(report, default=str))  # exactly what `explain --json` prints

    def health(self, namespace: str, table: str, tier: str, now: datetime | None = None) -> dict[str, object]:
        name = table_name(self.settings, namespace, table)
        now = now or utc_now()
        report = health_report(self.settings, self.coordination, name, now, tier=tier)
        return json.loads(json.dumps(floe_health_json(report), default=str))  # Floe's shape, ours beside

    def health_history(self, namespace: str, table: str, limit: int) -> dict[str, object]:
        name = table_name(self.settings, namespace, table)
        history = health_history(self.settings, self.instance, name, limit)
        return json.loads(json.dumps(history, default=str))
