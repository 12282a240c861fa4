"""Smaller hardening: credentials die with deactivation and password resets, four eyes by identity,
escaped audit filters, per-address throttling, secrets, private SQLite files, no-store and rated_by."""

from __future__ import annotations

import os
import stat
from datetime import UTC, datetime, timedelta

import pytest
from sqlmodel import select
from typer.testing import CliRunner

from app.auth import service
from app.auth.models import ApiToken
from app.core.audit import readable_entries
from app.core.db import make_engine
from app.core.settings import DEV_SECRET, Settings
from tests.support.billing import add_hour, store_policy
from tests.support.routes import make_user, sign_in

PASSWORD = "a correct and long password"


def _live_tokens(session, user_id: int) -> int:
    return len(session.exec(select(ApiToken).where(ApiToken.user_id == user_id,
                                                   ApiToken.revoked_at.is_(None))).all())


@pytest.mark.parametrize("change", ["deactivate", "password"])
def test_tokens_die_with_deactivation_and_password_reset(session, change):
    user = make_user(session, "tess", "viewer", password=PASSWORD)
    _, raw = service.create_token(session=session, user=user, scopes="read", lifetime=timedelta(days=1), actor="t")
    assert service.principal_for_token(session=session, raw=raw) is not None
    if change == "deactivate":
        service.update_user(session=session, user_id=user.id, role="viewer", tenants=[], active=False, actor="t")
        service.update_user(session=session, user_id=user.id, role="viewer", tenants=[], active=True, actor="t")
    else:
        service.update_user(session=session, user_id=user.id, role="viewer", tenants=[], active=True,
                            password="a brand new long password", actor="t")
    assert _live_tokens(session, user.id) == 0
    assert service.principal_for_token(session=session, raw=raw) is None


def test_audit_action_prefix_is_not_a_pattern(session):
    make_user(session, "ann", "viewer")  # writes a user.create audit entry
    assert session.exec(readable_entries(tenants=None, action="user.")).first()
    for wildcard in ("%.", "_ser.", "u%."):
        assert session.exec(readable_entries(tenants=None, action=wildcard)).all() == [], wildcard


@pytest.mark.usefixtures("fast_hashing")
def test_failures_from_one_address_across_names_lock_that_address(session, monkeypatch):
    monkeypatch.setattr(service, "get_settings", lambda: Settings(login_failures_per_address=6))
    make_user(session, "real", "viewer", password=PASSWORD)
    for i in range(6):  # six names, one failure each: no pair is near its own limit
        assert service.authenticate(session=session, name=f"guess{i}", password="x" * 12, ip="10.9.9.9").user is None
    locked = service.authenticate(session=session, name="real", password=PASSWORD, ip="10.9.9.9")
    assert locked.user is None and locked.locked_until is not None
    assert service.authenticate(session=session, name="real", password=PASSWORD, ip="10.9.9.10").user is not None


@pytest.mark.parametrize("secret", [DEV_SECRET, "change-me-in-production", "changeme", "CHANGE_ME", "", "secret"])
def test_placeholder_secrets_fail_the_production_check(secret):
    with pytest.raises(ValueError, match="CHARGEBACK_SECRET_KEY"):
        Settings(environment="production", secret_key=secret)
    assert Settings(environment="production", secret_key=os.urandom(24).hex()).secret_key


def test_serve_refuses_the_development_secret_off_loopback(monkeypatch):
    from app.cli import app
    from app.core import settings

    monkeypatch.setattr(settings, "get_settings", lambda: Settings(secret_key=DEV_SECRET))
    result = CliRunner().invoke(app, ["serve", "--host", "0.0.0.0", "--port", "1"])
    assert result.exit_code == 2 and "refusing to serve on 0.0.0.0" in result.output


def test_sqlite_database_file_is_private(tmp_path):
    path = tmp_path / "fresh" / "chargeback.db"
    engine = make_engine(f"sqlite:///{path}")
    with engine.connect() as conn:
        conn.exec_driver_sql("CREATE TABLE t (x)")
    engine.dispose()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) & 0o077 == 0


# ---- over HTTP (the app on the per-test rolled-back session) ------------------------------------


@pytest.mark.anyio
async def test_admin_mints_tokens_only_for_themselves(client, session):
    admin = make_user(session, "ada", "admin")
    reviewer = make_user(session, "rita", "reviewer")
    csrf = sign_in(client, session, admin)
    page = await client.get("/admin/tokens")
    assert page.status_code == 200 and 'name="user"' not in page.text
    form = {"csrf_token": csrf, "scopes": "write", "expires": "7d", "label": "x"}
    refused = await client.post("/admin/tokens", data={**form, "user": "rita"})
    assert refused.status_code == 403
    assert _live_tokens(session, reviewer.id) == 0
    own = await client.post("/admin/tokens", data=form)
    assert own.status_code == 201 and _live_tokens(session, admin.id) == 1


@pytest.mark.anyio
async def test_billing_answers_are_not_stored_and_members_see_no_operator_names(client, session):
    finance = make_user(session, "fiona", "finance")
    member = make_user(session, "vera", "tenant", tenants=["vision"])
    add_hour(session, hour=datetime(2026, 10, 1, tzinfo=UTC), version=store_policy(session).id)
    session.commit()
    sign_in(client, session, finance)
    csrf = sign_in(client, session, finance)
    assert (await client.post("/billing/2026-10/rate", data={"csrf_token": csrf})).status_code == 303
    for path in ("/billing/2026-10", "/billing/2026-10/vision", "/billing/2026-10/vision/invoice.pdf",
                 "/api/v1/periods/2026-10/export?format=csv", "/api/v1/periods/2026-10/invoices/vision"):
        response = await client.get(path)
        assert response.status_code == 200, (path, response.text[:300])
        assert response.headers["cache-control"] == "no-store", path
    assert (await client.get("/api/v1/periods")).json()["items"][0]["rated_by"] == "fiona"
    sign_in(client, session, member)
    periods = (await client.get("/api/v1/periods")).json()["items"]
    assert periods[0]["period"] == "2026-10" and periods[0]["rated_by"] is None
    page = await client.get("/billing")
    assert page.status_code == 200 and "fiona" not in page.text


def test_serve_trusts_forwarded_headers_only_from_the_configured_proxies(monkeypatch, fresh_db_url):
    import uvicorn

    from app.cli import app
    from app.core.settings import get_settings

    monkeypatch.setenv("CHARGEBACK_DATABASE_URL", fresh_db_url)  # serve starts only on a migrated database
    get_settings.cache_clear()
    calls = []
    monkeypatch.setattr(uvicorn, "run", lambda *args, **kwargs: calls.append(kwargs))
    try:
        assert CliRunner().invoke(app, ["serve", "--proxy-headers"]).exit_code == 0
        assert CliRunner().invoke(app, ["serve", "--proxy-headers", "--forwarded-allow-ips", "10.0.0.5"]).exit_code == 0
    finally:
        get_settings.cache_clear()  # the next test reads its own settings
    assert [(c["proxy_headers"], c["forwarded_allow_ips"]) for c in calls] == [(True, "127.0.0.1,::1"),
                                                                                (True, "10.0.0.5")]


def test_password_hashing_runs_at_most_the_configured_number_at_once(monkeypatch):
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from argon2 import PasswordHasher

    from app.auth import passwords

    class Counting(PasswordHasher):
        """The real argon2 hasher, noting how many verifications overlap."""

        def __init__(self):
            super().__init__(time_cost=1, memory_cost=8192, parallelism=1)
            self.lock, self.now, self.most = threading.Lock(), 0, 0

        def verify(self, hash, password):
            with self.lock:
                self.now += 1
                self.most = max(self.most, self.now)
            try:
                return super().verify(hash, password)
            finally:
                with self.lock:
                    self.now -= 1

    hasher = Counting()
    stored = hasher.hash("a correct and long password")
    monkeypatch.setattr(passwords, "_hasher", hasher)
    monkeypatch.setattr(passwords, "_slots", None)  # made afresh from the settings below
    monkeypatch.setattr(passwords, "get_settings", lambda: Settings(password_hash_concurrency=2))
    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(lambda i: passwords.verify_password(stored, f"guess number {i}"), range(48)))
    assert results == [False] * 48
    assert 1 <= hasher.most <= 2


def test_demo_refuses_the_development_secret_off_loopback(monkeypatch):
    from app.cli import app
    from app.core import settings

    monkeypatch.setattr(settings, "get_settings", lambda: Settings(secret_key=DEV_SECRET))
    result = CliRunner().invoke(app, ["demo", "--host", "::", "--days", "1"])
    assert result.exit_code == 2 and "refusing to serve on ::" in result.output
