"""Floe's API-key management (``/api/v1/auth/keys``): create, list, get, update and revoke keys, and
``/me``. ADMIN only (``/me``: any key).

Keys created here live in the coordination database (coordination/api_keys.py), hashed with SHA-256;
the new key is shown once, in the create answer. floe.yaml's keys (its keys file and environment
variable) are listed too, with the ids ``file:<name>`` and ``env:<name>``, but they are changed in that
file, not over HTTP (409 KEY_NOT_MANAGED), as the API's policies leave the other policy files alone.

No change leaves the API without a working ADMIN key (enabled, not expired; floe.yaml's count): the
first key created on a server without keys must be an ADMIN one, and revoking, disabling or demoting
the last ADMIN is 409 ``LAST_ADMIN`` (checked in the same transaction as the change). An ADMIN key with
an expiry still lapses when its time comes: then only floe.yaml's keys file can add an ADMIN again.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timezone
from typing import Any

from floe_dagster.api.auth import (
    ANONYMOUS, FLOE_PERMISSIONS, ApiKey, KeyStore, Principal, Role, hash_key, new_key, role_permissions,
)
from floe_dagster.api.timestamps import iso
from floe_dagster.coordination.api_keys import ApiKeyTable, StoredKey
from floe_dagster.errors import ApiError, KeysError, LastAdminKey
from floe_dagster.settings import ApiSettings


def permissions_of(role: Role | None, settings: ApiSettings) -> list[str]:
    """Floe's permission names a role has on this server (anonymous: every one)."""
    return sorted(name for permission in role_permissions(role, settings) for name in FLOE_PERMISSIONS[permission])


def _stored_response(key: StoredKey, settings: ApiSettings) -> dict[str, object]:
    """Floe's ApiKeyResponse (no hash), and where the key lives."""
    role = Role(key.role)
    return {"id": key.id, "name": key.name, "role": role.value, "permissions": permissions_of(role, settings),
            "enabled": key.enabled, "createdAt": iso(key.created_at), "expiresAt": iso(key.expires_at),
            "lastUsedAt": iso(key.last_used_at), "createdBy": key.created_by, "source": "database"}


def _configured_response(source: str, key: ApiKey, settings: ApiSettings) -> dict[str, Any]:
    return {"id": f"{source}:{key.name}", "name": key.name, "role": key.role.value,
            "permissions": permissions_of(key.role, settings), "enabled": True, "createdAt": None, "expiresAt": None,
            "lastUsedAt": None, "createdBy": None, "source": source}


def _last_admin(exc: LastAdminKey, key_id: str | None) -> ApiError:
    return ApiError(409, "LAST_ADMIN", str(exc), {"id": key_id} if key_id else {})


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

    def _configured(self) -> dict[str, dict[str, object]]:
        return {entry["id"]: entry for entry in
                (_configured_response(source, key, self.keys.settings) for source, key in self.keys.configured_keys())}

    def _response(self, key: StoredKey) -> dict[str, object]:
        return _stored_response(key, self.keys.settings)

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
        now = datetime.now(timezone.utc)
        stored = StoredKey(id=str(uuid.uuid4()), name=name, role=(body.get("role") or Role.VIEWER.value),
                           key_hash=hash_key(key), enabled=True, created_at=now,
                           expires_at=expires, last_used_at=None,
                           created_by=None if who.anonymous else (who.key_id or who.name))
        if (not (stored.role == Role.ADMIN.value and stored.usable(now))
                and self.keys.configured_admins() == 0 and self.table.usable_admins(now) == 0):
            # The first key closes a server without keys: a VIEWER or OPERATOR one would lock everyone out
            # of key management.
            raise ApiError(409, "LAST_ADMIN", "the API has no working ADMIN key: the first key created must be an "
                           "ADMIN key without a past expiry (or add an ADMIN key to floe.yaml's api keys file)")
        try:
            self.table.insert(stored)
        except KeysError:
            raise _name_taken(name) from None
        return {"key": key, "apiKey": self._response(stored)}, f"/api/v1/auth/keys/{stored.id}"

    def list(self, enabled_only: bool) -> dict[str, object]:
        entries = [*self._configured().values(), *(self._response(k) for k in self.table.all())]
        if enabled_only:
            entries = [e for e in entries if e["enabled"]]
        return {"keys": entries, "total": len(entries)}

    def get(self, key_id: str) -> dict[str, object]:
        configured = self._configured().get(key_id)
        if configured is not None:
            return configured
        stored = self.table.by_id(key_id)
        if stored is None:
            raise _not_found(key_id)
        return self._response(stored)

    def update(self, key_id: str, body: dict[str, Any]) -> dict[str, Any]:
        """Floe's partial update: name, role, enabled; an absent or null field keeps its value."""
        stored = self._stored(key_id)
        changes: dict[str, object] = {}
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
                self.table.change_keeping_an_admin(key_id, datetime.now(timezone.utc), self.keys.configured_admins(),
                                                   **changes)
            except KeysError:
                raise _name_taken(name) from None
            except LastAdminKey as exc:
                raise _last_admin(exc, key_id) from None
        return self._response(self.table.by_id(key_id) or stored)

    def revoke(self, key_id: str, who: Principal) -> None:
        """Delete a key; Floe refuses to delete the caller's own key (400)."""
        if who.key_id == key_id:
            raise ApiError(400, "VALIDATION_FAILED", "Cannot delete your own API key", {"id": key_id})
        self._stored(key_id)
        try:
            deleted = self.table.delete_keeping_an_admin(key_id, datetime.now(timezone.utc),
                                                         self.keys.configured_admins())
        except LastAdminKey as exc:
            raise _last_admin(exc, key_id) from None
        if not deleted:
            raise _not_found(key_id)

    def me(self, who: Principal) -> dict[str, object]:
        """The caller's key (Floe's ApiKeyResponse); without keys, Floe's principal shape for anonymous."""
        if who.anonymous:
            return {"userId": ANONYMOUS, "username": ANONYMOUS, "roles": [r.value for r in Role],
                    "authMethod": "NONE", "permissions": permissions_of(None, self.keys.settings)}
        assert who.key_id is not None
        return self.get(who.key_id)
