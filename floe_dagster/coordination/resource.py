"""The coordination database as a Dagster resource (``floe_coordination``, beside the Spark engine
``floe_engine``): the table assets, the debt-score sensor and the schedules receive it as a
parameter; the CLI and the HTTP API build one with :meth:`CoordinationResource.from_settings`.

Opening the database checks its tables and columns, so it is opened once per process: Dagster makes
a copy of a resource for every tick and run, and the copies share what the first one opened. A
resource built from the settings again (a code location load or reload, the CLI, the API, a test
that dropped the tables) opens the database afresh: a cache of opened databases by URL alone, that
nothing ever refreshed, once hid that a test had dropped and recreated the tables under the same URL.

A URL with a password reaches the resource as ``EnvVar`` (floe_dagster/redaction.py's
``secret_variable``: ``FLOE_COORDINATION_URL`` when that holds it, else a variable floe-dagster sets in
its own process), so Dagit's resource page shows the variable's name, never the password.
"""

from __future__ import annotations

import threading

from dagster import ConfigurableResource, EnvVar

from floe_dagster.coordination.database import Coordination
from floe_dagster.coordination.locks import lock_backend_for, locks_of
from floe_dagster.instance import default_coordination_url
from floe_dagster.redaction import mask_text, secret_variable
from floe_dagster.settings import Settings

_opened: dict[tuple[str, str], Coordination] = {}
_opening = threading.Lock()


class CoordinationResource(ConfigurableResource):
    """The coordination database (the trigger ledger, run outcomes and history) and its locks."""

    # coordination.url in floe.yaml (an EnvVar when it holds a password); None: the Dagster instance's
    # PostgreSQL storage, else a SQLite file in DAGSTER_HOME.
    url: str | None = None
    # "advisory" (PostgreSQL advisory locks in the database) or "file" (flock files beside the
    # instance); from_settings derives it from the database's dialect.
    lock_backend: str

    @classmethod
    def from_settings(cls, settings: Settings) -> "CoordinationResource":
        url = settings.coordination_url
        if url and mask_text(url) != url:
            url = EnvVar(secret_variable("COORDINATION_URL", f"{settings.source}\0{settings.catalog.name}", url,
                                         preferred=("FLOE_COORDINATION_URL",)))
        resource = cls(url=url, lock_backend=lock_backend_for(settings.coordination_url or default_coordination_url()))
        resource.forget()
        return resource

    @property
    def coordination(self) -> Coordination:
        """The database, opened (and its tables checked) on first use in this process."""
        key = self._key()
        with _opening:
            if key not in _opened:
                _opened[key] = Coordination(key[0], locks_of(self.lock_backend, key[0]))
            return _opened[key]

    def forget(self) -> None:
        """Open the database afresh on next use (its tables checked again)."""
        with _opening:
            forgotten = _opened.pop(self._key(), None)
        if forgotten is not None:
            forgotten.engine.dispose()

    def _key(self) -> tuple[str, str]:
        # Dagster resolves an EnvVar when it initializes the resource; built directly (the CLI, the API) it
        # is still the variable.
        url = self.url.get_value() if isinstance(self.url, EnvVar) else self.url
        return url or default_coordination_url(), self.lock_backend
