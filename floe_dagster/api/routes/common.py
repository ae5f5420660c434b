"""What several routers share: the documented error responses, the table path parameters and the
``at`` time of a trigger status."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable

from fastapi import Path, Query

from floe_dagster.api import models as M
from floe_dagster.errors import ApiError
from floe_dagster.core.basics.localtime import naive_as_utc

_DESCRIPTIONS = {
    400: "The request is invalid (body, path or query)",
    401: "No valid API key in the X-API-Key header",
    403: "The API key's role does not allow this",
    404: "Unknown table, catalog or policy, or no policy applies",
    409: "The table is being maintained (details.runId is the run), or it is not an asset yet",
    500: "Internal error (for example invalid policy files)",
    503: "The catalog, the health metadata or the run queue cannot be reached",
}


MAX_LIMIT = 100
MAX_OFFSET = 10000  # our own bound (Floe has none): a page past it would read that many runs first


def check_page(limit: int, offset: int) -> None:
    """Floe's pagination check (its PaginationValidator), with its messages."""
    if not 1 <= limit <= MAX_LIMIT:
        raise ApiError(400, "VALIDATION_FAILED", f"Limit must be between 1 and {MAX_LIMIT}", {"field": "limit"})
    if offset < 0:
        raise ApiError(400, "VALIDATION_FAILED", "Offset must be non-negative", {"field": "offset"})
    if offset > MAX_OFFSET:
        raise ApiError(400, "VALIDATION_FAILED", f"Offset must be at most {MAX_OFFSET}", {"field": "offset"})


@dataclass(frozen=True)
class Page:
    limit: int
    offset: int


def paging(default_limit: int = 20) -> Callable[..., Page]:
    """A dependency reading ``limit`` and ``offset`` and checking them as Floe does (``check_page``)."""

    def dependency(limit: int = Query(default_limit, description=f"1..{MAX_LIMIT} (default {default_limit})"),
                   offset: int = Query(0, description=f"0..{MAX_OFFSET}")) -> Page:
        check_page(limit, offset)
        return Page(limit, offset)

    return dependency


def error_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI ``responses`` of these error statuses, all in the one error shape."""
    return {code: {"model": M.ErrorResponse, "description": _DESCRIPTIONS[code]} for code in codes}


_PART = r"[^.\s](?:[^.]*[^.\s])?"  # a name part: no dot, no blank at either end
namespace_path = Path(min_length=1, max_length=1024, pattern=rf"^{_PART}(\.{_PART})*$", examples=["sales"],
                      description="The namespace, dotted when nested (a.b)")
table_path = Path(min_length=1, max_length=255, pattern=rf"^{_PART}$", examples=["orders"],
                  description="The table name")

# RFC 3339 date-time (the OpenAPI "date-time" format); without an offset the time is read as UTC.
_EARLIEST_AT = datetime(1970, 1, 1, tzinfo=timezone.utc)
_LATEST_AT = datetime(9000, 1, 1, tzinfo=timezone.utc)
_DATE_TIME = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d{1,6})?([Zz]|[+-]\d{2}:\d{2})?")


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
