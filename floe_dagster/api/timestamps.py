"""The API's times: now in UTC, and ISO 8601 text (a naive time is read as UTC)."""

from __future__ import annotations

from datetime import datetime, timezone

from floe_dagster.core.basics.localtime import naive_as_utc


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


def iso(moment: datetime | float | None) -> str | None:
    """ISO 8601 text of a time or an epoch timestamp in seconds; None stays None."""
    if moment is None:
        return None
    if isinstance(moment, (int, float)):
        moment = datetime.fromtimestamp(moment, timezone.utc)
    return naive_as_utc(moment).isoformat()
