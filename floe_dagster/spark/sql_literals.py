"""Spark SQL literals and identifiers that nothing inside can break out of: every value floe puts into
a statement (identifiers, string values, timestamps) goes through these.
"""

from __future__ import annotations

from datetime import datetime, timezone

from floe_dagster.errors import ProcedureOptionError


def quote_identifier(part: str) -> str:
    """One identifier part in Spark SQL back quotes; a back quote inside is doubled."""
    if part == "" or "\x00" in part:
        raise ProcedureOptionError(f"identifier part {part!r} is empty or has a NUL character")
    return "`" + part.replace("`", "``") + "`"


def quote_literal(value: str) -> str:
    """A Spark SQL string literal. Spark reads backslash escapes by default, so both the quote and
    the backslash are escaped; nothing inside can end the literal."""
    if "\x00" in value:
        raise ProcedureOptionError("string values must not contain a NUL character")
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def timestamp_literal(moment: datetime) -> str:
    """A timestamp literal with an explicit UTC zone, whatever the session time zone is."""
    if moment.tzinfo is None:
        raise ProcedureOptionError("timestamps must carry a time zone")
    utc = moment.astimezone(timezone.utc)
    return "TIMESTAMP " + quote_literal(utc.strftime("%Y-%m-%d %H:%M:%S.%f") + "Z")
