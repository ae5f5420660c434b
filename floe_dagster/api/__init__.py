"""Floe's HTTP API on the Dagster instance (``floe-dagster serve``).

- ``auth``: API keys (stored as SHA-256 hashes), roles, and the loopback rule for a server without keys.
- ``models``: the request and response schemas (the OpenAPI document is generated from them).
- ``service``: what each endpoint does, independent of HTTP.
- ``app``: the FastAPI application; ``server``: ``serve(settings, host, port)``.
"""
