"""Route-test fixtures (shared with tests/web): the app on a rolled-back session, anyio, cheap hashing."""

from tests.auth.fixtures import anyio_backend, app, client, fast_hashing  # noqa: F401
