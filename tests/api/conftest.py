"""API route-test fixtures: the app on the per-test rolled-back session (shared with tests/auth)."""

from tests.auth.fixtures import anyio_backend, app, client, fast_hashing  # noqa: F401
