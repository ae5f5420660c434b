"""Every HTTP answer through the masking rule (core/basics/secrets.py, with the secrets this process's
settings hold: floe_dagster/redaction.py), in one middleware: whatever an endpoint, an error handler or
a library puts in a body (an error message quoting the catalog's URI, a run's failure text), no secret
leaves the server.

JSON answers are parsed and masked as a structure (core.basics.secrets.masked): every field at any depth whose
name is a secret key has its value masked (a table's or the catalog's ``s3.secret-access-key``, a
``password`` in a library's error details), a name/value entry naming a secret has its value masked (an
ignored table property), and every string is masked as text. The rule's own exceptions keep the API's
fields: ``key`` alone is a key's name (a 403's details, a drift entry) or, in the answer that creates an
API key, the new key, shown that once by design; ``assetKey`` is an identifier. One field is the API's
and named like a secret: ``apiKey`` at the top of an answer, a key's public record (id, name, role),
never the key; its fields are judged as any others. Text answers (``/metrics``) are masked whole. The
OpenAPI document describes fields and holds no value of any (``apiKey`` is a security scheme's type in
it): its strings are masked as text only. Other answers (the Swagger page) hold no settings.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import Request
from fastapi.responses import Response

from floe_dagster.redaction import known_secrets
from floe_dagster.core.basics.secrets import mask_text, masked

# The API's own top-level fields named like a secret that hold none (see the module's doc).
PUBLIC_FIELDS = frozenset({"apiKey"})


def _masked_strings(value: object, known: frozenset[str]) -> Any:
    if isinstance(value, str):
        return mask_text(value, known)
    if isinstance(value, list):
        return [_masked_strings(item, known) for item in value]
    if isinstance(value, dict):
        return {key: _masked_strings(item, known) for key, item in value.items()}
    return value


def masked_answer(data: object, known: frozenset[str] = frozenset()) -> Any:
    """A parsed JSON answer with its secrets masked by the rule (by key, by entry and as text)."""
    if isinstance(data, dict):
        return {key: masked(item, known, None if key in PUBLIC_FIELDS else key) for key, item in data.items()}
    return masked(data, known)


def masked_body(body: bytes, content_type: str, by_key: bool = True) -> bytes:
    """The body with its secrets masked (unchanged bytes when it holds none); ``by_key=False``: a JSON
    body's strings as text only (the OpenAPI document)."""
    known = known_secrets()
    if content_type.startswith("text/"):
        text = body.decode("utf-8", errors="replace")
        shown = mask_text(text, known)
        return body if shown == text else shown.encode("utf-8")
    try:
        data = json.loads(body)
    except ValueError:  # not JSON after all: as text
        return masked_body(body, "text/plain")
    shown = masked_answer(data, known) if by_key else _masked_strings(data, known)
    if shown == data:
        return body
    return json.dumps(shown, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode("utf-8")


def _masked_kind(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media.endswith("json") or media == "text/plain"


def masked_answers(schema_documents: frozenset[str]):
    """The middleware; ``schema_documents``: the paths serving the OpenAPI document (masked as text only)."""

    async def middleware(request: Request, call_next) -> Response:
        response = await call_next(request)
        content_type = response.headers.get("content-type", "")
        if not _masked_kind(content_type):
            return response
        body = b"".join([chunk async for chunk in response.body_iterator])
        headers = {name: value for name, value in response.headers.items() if name.lower() != "content-length"}
        shown = masked_body(body, content_type, by_key=request.url.path not in schema_documents)
        return Response(shown, status_code=response.status_code, headers=headers, background=response.background)

    return middleware
