"""What the ``policies`` router asks of the catalog: pattern validation (the tables a pattern matches
now), Floe's check of a policy's pattern before it is stored, and a table's location (the safety
envelope's check of a policy's absolute locations, core/policies/envelope.py)."""

from __future__ import annotations

import logging

from floe_dagster.api.regex_matching import regex_matches
from floe_dagster.core.basics.patterns import TablePattern
from floe_dagster.core.basics.tables import TableName
from floe_dagster.errors import ApiError, CatalogUnavailable
from floe_dagster.iceberg.catalog import list_tables, load_table, open_catalog
from floe_dagster.settings import Settings

log = logging.getLogger(__name__)


def _exact(parsed: TablePattern, text: str) -> bool:
    """A pattern naming one table (no wildcard, no regex): matching nothing is an error, not a warning."""
    return parsed.regex is None and "*" not in text and "?" not in text


class PolicyChecks:
    def __init__(self, settings: Settings):
        self.settings = settings

    def validate_pattern(self, pattern: str) -> dict[str, object]:
        text = pattern.strip()
        if not text:
            raise ApiError(400, "VALIDATION_FAILED", "Pattern is required", {"field": "pattern"})
        try:
            parsed = TablePattern.parse(text)
        except ValueError as exc:
            raise ApiError(400, "INVALID_PATTERN", f"Invalid pattern: {exc}", {"pattern": text}) from None
        matched = self._matching_tables(parsed, text)
        if matched:
            return {"valid": True, "message": f"Pattern matches {len(matched)} table(s)", "matchedTables": matched,
                    "matchCount": len(matched)}
        if _exact(parsed, text):
            return {"valid": False, "message": f"Table not found: {text}", "matchedTables": [], "matchCount": 0}
        return {"valid": True, "message": f"Warning: No tables currently match pattern '{text}'", "matchedTables": [],
                "matchCount": 0}

    def _matching_tables(self, parsed: TablePattern, text: str) -> list[str]:
        """The catalog's tables the pattern matches, listed now (CatalogUnavailable when it is down)."""
        tables = list_tables(open_catalog(self.settings.catalog))
        if parsed.regex is None:
            return [t.qualified for t in tables if parsed.matches(t)]
        return regex_matches(text, tables)

    def check_policy_tables(self, policy) -> None:
        """Floe's check before it stores a policy: the catalog must answer (400 when down), and an exact
        pattern must name a table that exists (400); a wildcard matching nothing is allowed, as in Floe."""
        text = policy.table_pattern.text
        try:
            matched = self._matching_tables(policy.table_pattern, text)
        except CatalogUnavailable:
            log.warning("policy '%s' refused: the catalog cannot be reached to check its pattern", policy.name)
            raise ApiError(400, "VALIDATION_FAILED", "Catalog unavailable - cannot validate table pattern",
                           {"error": "Catalog connection failed. Check catalog configuration."}) from None
        if not matched and _exact(policy.table_pattern, text):
            raise ApiError(400, "VALIDATION_FAILED", f"Table not found: {text}",
                           {"pattern": text, "suggestion": "Verify the table exists in the catalog"})

    def table_location(self, table: TableName) -> str:
        """A table's location from its metadata (UnknownTable, CatalogUnavailable): what a policy's absolute
        location is checked against before it is written (core/policies/envelope.py)."""
        return load_table(open_catalog(self.settings.catalog), table).location()
