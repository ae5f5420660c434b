"""Floe's API-key management (``/api/v1/auth/keys``): create, list, get, update and revoke keys, and
``/me``. ADMIN only (``/me``: any key).

Keys created here live in the coordination database (coordination/api_keys.py), hashed with SHA-256;
the new key is shown once, in the create answer. floe.yaml's keys (its keys file and environment
variable) are listed too, with the ids ``file:<name>`` and ``env:<name>``, but they are changed in that
file, not over HTTP (409 KEY_NOT_MANAGED), as the API's policies leave the other policy files alone.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timezone
from typing import Any

from floe_dagster.api.auth import ANONYMOUS, FLOE_PERMISSIONS, ApiKey, KeyStore, Principal, Role, hash_key, new_key
from floe_dagster.api.timestamps import iso
from floe_dagster.coordination.api_keys import ApiKeyTable, StoredKey
from floe_dagster.errors import ApiError, KeysError


def permissions_of(role: Role | None) -> list[str]:
    """Floe's permission names a role has (anonymous: every one)."""
    granted = role.permissions if role is not None else frozenset(FLOE_PERMISSIONS)
    return sorted(name for permission in granted for name in FLOE_PERMISSIONS[permission])


def _stored_response(key: StoredKey) -> dict[str, Any]:
    """Floe's ApiKeyResponse (no hash), and where the key lives."""
    role = Role(key.role)
    return {"id": key.id, "name": key.name, "role": role.value, "permissions": permissions_of(role),
            "enabled": key.enabled, "createdAt": iso(key.created_at), "expiresAt": iso(key.expires_at),
            "lastUsedAt": iso(key.last_used_at), "createdBy": key.created_by, "source": "database"}


def _configured_response(source: str, key: ApiKey) -> dict[str, Any]:
    return {"id": f"{source}:{key.name}", "name": key.name, "role": key.role.value,
            "permissions": permissions_of(key.role), "enabled": True, "createdAt": None, "expiresAt": None,
            "lastUsedAt": None, "createdBy": None, "source": source}


def _not_found(key_id: str) -> ApiError:
    return ApiError(404, "NOT_FOUND", f"API key not found: {key_id}", {"resourceType": "API key", "id": key_id})


def _name_taken(name: str) -> ApiError:
    return ApiError(409, "CONFLICT", f"API key with name '{name}' already exists")


class KeyAdmin:
    def __init__(self, keys: KeyStore):
        if keys.database is None:
            raise ValueError("key management needs the key store's database")
        self.keys = keys
        self.table: ApiKeyTable = keys.database

    def _configured(self) -> dict[str, dict[str, Any]]:
        return {entry["id"]: entry for entry in
                (_configured_response(source, key) for source, key in self.keys.configured_keys())}

    def _name_free(self, name: str) -> None:
        if self.table.by_name(name) is not None or any(e["name"] == name for e in self._configured().values()):
            raise _name_taken(name)

    def _stored(self, key_id: str) -> StoredKey:
        """A key of the database; a configured key is 409 (it is changed in floe.yaml's file), else 404."""
        stored = self.table.by_id(key_id)
        if stored is not None:
            return stored
        if key_id in self._configured():
            raise ApiError(409, "KEY_NOT_MANAGED", f"API key '{key_id}' comes from floe.yaml's api section (its keys "
                           "file or variable): change it there", {"id": key_id})
        raise _not_found(key_id)

    def create(self, body: dict[str, Any], who: Principal) -> tuple[dict[str, Any], str]:
        """Floe's CreateApiKeyResponse ``{key, apiKey}`` (the key shown this once) and its location."""
        name = body["name"].strip()
        self._name_free(name)
        expires = body.get("expiresAt")
        if expires is not None and expires.tzinfo is None:
            expires = expires.replace(tzinfo=timezone.utc)
        key = new_key()
        stored = StoredKey(id=str(uuid.uuid4()), name=name, role=(body.get("role") or Role.VIEWER.value),
                           key_hash=hash_key(key), enabled=True, created_at=datetime.now(timezone.utc),
                           expires_at=expires, last_used_at=None,
                           created_by=None if who.anonymous else (who.key_id or who.name))
        try:
            self.table.insert(stored)
        except KeysError:
            raise _name_taken(name) from None
        return {"key": key, "apiKey": _stored_response(stored)}, f"/api/v1/auth/keys/{stored.id}"

    def list(self, enabled_only: bool) -> dict[str, Any]:
        entries = [*self._configured().values(), *(_stored_response(k) for k in self.table.all())]
        if enabled_only:
            entries = [e for e in entries if e["enabled"]]
        return {"keys": entries, "total": len(entries)}

    def get(self, key_id: str) -> dict[str, Any]:
        configured = self._configured().get(key_id)
        if configured is not None:
            return configured
        stored = self.table.by_id(key_id)
        if stored is None:
            raise _not_found(key_id)
        return _stored_response(stored)

    def update(self, key_id: str, body: dict[str, Any]) -> dict[str, Any]:
        """Floe's partial update: name, role, enabled; an absent or null field keeps its value."""
        stored = self._stored(key_id)
        changes: dict[str, Any] = {}
        name = (body.get("name") or "").strip()
        if name and name != stored.name:
            self._name_free(name)
            changes["name"] = name
        if body.get("role") is not None:
            changes["role"] = body["role"]
        if body.get("enabled") is not None:
            changes["enabled"] = body["enabled"]
        if changes:
            try:
                self.table.change(key_id, **changes)
            except KeysError:
                raise _name_taken(name) from None
        return _stored_response(self.table.by_id(key_id) or stored)

    def revoke(self, key_id: str, who: Principal) -> None:
        """Delete a key; Floe refuses to delete the caller's own key (400)."""
        if who.key_id == key_id:
            raise ApiError(400, "VALIDATION_FAILED", "Cannot delete your own API key", {"id": key_id})
        self._stored(key_id)
        if not self.table.delete(key_id):
            raise _not_found(key_id)

    def me(self, who: Principal) -> dict[str, Any]:
        """The caller's key (Floe's ApiKeyResponse); without keys, Floe's principal shape for anonymous."""
        if who.anonymous:
            return {"userId": ANONYMOUS, "username": ANONYMOUS, "roles": [r.value for r in Role],
                    "authMethod": "NONE", "permissions": permissions_of(None)}
        assert who.key_id is not None
        return self.get(who.key_id)
