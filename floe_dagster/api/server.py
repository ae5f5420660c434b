"""``floe-dagster serve``: run the HTTP API with uvicorn.

Refuses to start (before binding) when no API keys are configured and the address is not loopback,
and when the configured keys cannot be read. Beyond loopback, every request needs a key, whatever
happens to the keys later (api/auth.py).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import Mapping

from floe_dagster.api.app import create_app
from floe_dagster.api.auth import KeyStore, check_bind
from floe_dagster.errors import SettingsError
from floe_dagster.instance import get_instance
from floe_dagster.redaction import install_log_masking
from floe_dagster.settings import Settings, load_settings

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 9091
# Seconds a stopping server gives requests in flight to finish (then it cancels them).
SHUTDOWN_GRACE_S = 10

log = logging.getLogger(__name__)


def build_app(settings: Settings, environ: Mapping[str, str] | None = None, host: str = DEFAULT_HOST):
    """The application for these settings, after the key and bind checks (raises ``KeysError`` or
    ``BindRefused``, both ``ValueError``s with a clear message)."""
    keys = KeyStore(settings.api, environ, host=host)
    app = create_app(settings, keys, get_instance())  # attaches the keys created over HTTP; binds nothing
    check_bind(host, keys.configured)
    return app, keys


def serve(settings: Settings, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT,
          environ: Mapping[str, str] | None = None) -> int:
    """Serve until interrupted; the checks run before anything listens."""
    import uvicorn

    install_log_masking()  # the server's log lines (uvicorn's too), masked
    app, keys = build_app(settings, environ, host)
    shown = f"[{host}]" if ":" in host else host
    print(f"floe-dagster API on http://{shown}:{port} ({keys.describe()}); "
          f"OpenAPI document at /api/v1/openapi.json and /api/openapi, Swagger UI at /api", flush=True)
    service = app.state.service

    class Server(uvicorn.Server):
        def handle_exit(self, sig, frame) -> None:
            service.stopping.set()  # ?wait=true triggers answer now, so the shutdown does not wait for them
            super().handle_exit(sig, frame)

    server = Server(uvicorn.Config(app, host=host, port=port, log_level="info", server_header=False,
                                   timeout_graceful_shutdown=SHUTDOWN_GRACE_S))
    server.run()  # when it cannot listen (e.g. the port is in use), uvicorn logs why and exits with 3
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m floe_dagster.api``: the same as ``floe-dagster serve``."""
    parser = argparse.ArgumentParser(prog="python -m floe_dagster.api", description="Floe's HTTP API")
    parser.add_argument("--config", help="settings file (default: $FLOE_CONFIG or ./floe.yaml)")
    parser.add_argument("--host", default=DEFAULT_HOST)
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    args = parser.parse_args(argv)
    try:
        if args.config:
            os.environ["FLOE_CONFIG"] = str(Path(args.config).resolve())
        return serve(load_settings(args.config), args.host, args.port)
    except (SettingsError, ValueError) as exc:
        print(f"floe-dagster: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
