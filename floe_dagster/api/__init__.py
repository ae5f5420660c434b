"""Floe's HTTP API on the Dagster instance (``floe-dagster serve``).

- ``auth``: API keys (stored as SHA-256 hashes), roles, and the loopback rule for a server without keys.
- ``models``: the request and response schemas (the OpenAPI document is generated from them), with a
  module of its own for some resources' (``trigger_status_models``, ``operation_models``, ``catalog_models``...).
- ``service``: what each endpoint does, independent of HTTP.
- ``routes``: the endpoints, one router per resource (``access``: the key check; ``common``: shared
  path parameters and error responses).
- ``app``: the FastAPI application (error shape, OpenAPI document, routers); ``server``:
  ``serve(settings, host, port)``.
"""
