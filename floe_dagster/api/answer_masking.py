"""Every HTTP answer through the masking rule (core/secrets.py, with the secrets this process's
settings hold: floe_dagster/redaction.py), in one middleware: whatever an endpoint, an error handler or
a library puts in a body (an error message quoting the catalog's URI, a run's failure text), no secret
leaves the server.

JSON answers are parsed and every string in them masked as text (a field's name is not judged here:
the fields are the API's own, and ``key`` in a 403's details is a key's name; the settings shown as
fields, ``GET /api/v1/catalog``'s, are masked by key where they are read). Text answers (``/metrics``)
are masked whole. Other answers (the Swagger page, the OpenAPI document) hold no settings.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import Request
from fastapi.responses import Response

from floe_dagster.redaction import known_secrets
from floe_dagster.core.secrets import mask_text


def _masked_strings(value: Any, known: frozenset[str]) -> Any:
    if isinstance(value, str):
        return mask_text(value, known)
    if isinstance(value, list):
        return [_masked_strings(item, known) for item in value]
    if isinstance(value, dict):
        return {key: _masked_strings(item, known) for key, item in value.items()}
    return value


def masked_body(body: bytes, content_type: str) -> bytes:
    """The body with its secrets masked (unchanged bytes when it holds none)."""
    known = known_secrets()
    if content_type.startswith("text/"):
        text = body.decode("utf-8", errors="replace")
        shown = mask_text(text, known)
        return body if shown == text else shown.encode("utf-8")
    try:
        data = json.loads(body)
    except ValueError:  # not JSON after all: as text
        return masked_body(body, "text/plain")
    shown = _masked_strings(data, known)
    if shown == data:
        return body
    return json.dumps(shown, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode("utf-8")


def _masked_kind(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media.endswith("json") or media == "text/plain"


async def masked_answers(request: Request, call_next) -> Response:
    response = await call_next(request)
    content_type = response.headers.get("content-type", "")
    if not _masked_kind(content_type):
        return response
    body = b"".join([chunk async for chunk in response.body_iterator])
    headers = {name: value for name, value in response.headers.items() if name.lower() != "content-length"}
    return Response(masked_body(body, content_type), status_code=response.status_code, headers=headers,
                    background=response.background)
