"""HTTP kit fixtures: the app on a rolled-back session (shared with tests/auth), anyio, cheap hashing."""

from tests.auth.fixtures import anyio_backend, app, client, fast_hashing  # noqa: F401
