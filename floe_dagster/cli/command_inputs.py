"""What the ``floe-dagster`` commands share: their exit statuses, and how each reads what it works on (the
settings, the coordination database, the time it answers for)."""

from __future__ import annotations

import os
from pathlib import Path

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def read_settings(args):
    from floe_dagster.settings import load_settings

    if args.config:
        # The code location (Dagit, run workers, launched runs) reads the same file.
        os.environ["FLOE_CONFIG"] = str(Path(args.config).resolve())
    return load_settings(args.config)


def open_coordination(settings):
    """The coordination database, as the code location's resource opens it."""
    from floe_dagster.coordination.resource import CoordinationResource

    return CoordinationResource.from_settings(settings).coordination


def time_at(text: str | None):
    from datetime import datetime, timezone

    from floe_dagster.core.basics.localtime import naive_as_utc

    if not text:
        return datetime.now(timezone.utc)
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return naive_as_utc(moment)
