"""Schemas of the API key endpoints (``/api/v1/auth/keys``, ADMIN); the HTTP API's other schemas are in
api/models.py."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

RoleName = Literal["ADMIN", "OPERATOR", "VIEWER"]


class ApiKeyRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"name": "ci-bot", "role": "OPERATOR"}, {"name": "dashboard", "expiresAt": "2027-01-01T00:00:00Z"}]})

    name: str = Field(min_length=1, max_length=255, pattern=r"\S", description="Unique among all keys")
    role: RoleName = Field("VIEWER", description="Floe's default VIEWER")
    expiresAt: datetime | None = Field(None, description="RFC 3339; without an offset, UTC; null: never expires")


class UpdateApiKeyRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"enabled": False}]})

    name: str | None = Field(None, min_length=1, max_length=255, pattern=r"\S")
    role: RoleName | None = None
    enabled: bool | None = None


class ApiKeyResponse(BaseModel):
    """Floe's ApiKeyResponse (never the key or its hash), and where the key lives: ``database`` (created
    over HTTP), or ``file`` / ``env`` (floe.yaml's api section: ids ``file:<name>``, ``env:<name>``)."""

    id: str
    name: str
    role: RoleName
    permissions: list[str]
    enabled: bool
    createdAt: str | None
    expiresAt: str | None
    lastUsedAt: str | None
    createdBy: str | None
    source: Literal["database", "file", "env"]


class CreateApiKeyResponse(BaseModel):
    key: str = Field(description="The new key, shown this once: only its SHA-256 is stored")
    apiKey: ApiKeyResponse


class ApiKeysPage(BaseModel):
    keys: list[ApiKeyResponse]
    total: int
