"""The request's unit of work commits before the response starts; a refused COMMIT is an error, and
the Idempotency-Key retry then succeeds exactly once (PostgreSQL, a deferred constraint trigger)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from sqlalchemy import event, func, text
from sqlmodel import Session, select

from app.auth import service
from app.auth.models import ApiToken
from app.billing.models import BillingPeriod
from app.core import deps
from app.core.audit import AuditEntry
from app.core.db import unit_of_work
from app.core.timeutil import floor_hour
from app.main import create_app
from app.policy.models import PolicyVersion
from tests.support.billing import add_hour, record_gaps, store_policy
from tests.support.review import approved, edited, seed, set_quota
from tests.support.routes import page_csrf

BASE = "http://portal.test"
OCT1 = datetime(2026, 10, 1, tzinfo=UTC)
PASSWORD = "a long enough password"


@pytest.fixture
def portal(fresh_engine, monkeypatch):
    """The production request dependency (no override) on a database of the test's own."""
    monkeypatch.setattr(deps, "get_engine", lambda: fresh_engine)
    return create_app()


def _user(engine, name: str, role: str, *, password: str | None = None) -> str:
    """A committed user and a write-scoped API token for them; returns the raw token."""
    with unit_of_work(engine) as s:
        user = service.create_user(session=s, name=name, role=role, password=password, actor="test")
        _, raw = service.create_token(session=s, user=user, scopes="write", lifetime=timedelta(days=1), actor="test")
    return raw


def _call(app, steps):
    """Run `steps(client)` against `app` over ASGI; returns what it returns."""

    async def go():
        transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 50000))
        async with httpx.AsyncClient(transport=transport, base_url=BASE) as client:
            return await steps(client)

    return asyncio.run(go())


def _recording(app, events: list[str]):
    """The app, noting when each response starts among the request sessions' commits."""

    async def wrapped(scope, receive, send):
        async def send_noting(message):
            if message["type"] == "http.response.start":
                events.append("response")
            await send(message)

        await app(scope, receive, send_noting)

    return wrapped


def _commits(events: list[str]):
    def after_commit(_session):
        events.append("commit")

    return after_commit


async def _create_token(client, raw):
    return await client.post("/api/v1/tokens", json={"label": "ordered"}, headers={"Authorization": f"Bearer {raw}"})


async def _create_change(client, raw, document):
    body = {"title": "Ordered", "justification": "ordering test", "document": document}
    return await client.post("/api/v1/policy/changes", json=body, headers={"Authorization": f"Bearer {raw}"})


async def _login(client, name):
    csrf = page_csrf((await client.get("/login")).text)
    return await client.post("/login", data={"username": name, "password": PASSWORD, "csrf_token": csrf})


@pytest.mark.usefixtures("fast_hashing")
def test_writes_commit_before_the_response_starts(portal, fresh_engine):
    token = _user(fresh_engine, "ada", "admin", password=PASSWORD)
    with unit_of_work(fresh_engine) as s:
        document = edited(seed(s), set_quota(6))
    events: list[str] = []
    listener = _commits(events)
    event.listen(Session, "after_commit", listener)
    try:
        app = _recording(portal, events)
        for name, steps in [
            ("token (JSON)", lambda c: _create_token(c, token)),
            ("change request (JSON)", lambda c: _create_change(c, token, document)),
            ("sign-in (HTML form)", lambda c: _login(c, "ada")),
        ]:
            events.clear()
            response = _call(app, steps)
            assert response.status_code in (201, 303), (name, response.text)
            # The write's commit precedes the start of the answer that acknowledges it.
            assert "commit" in events and "response" in events, (name, events)
            assert events.index("commit") < events.index("response"), (name, events)
    finally:
        event.remove(Session, "after_commit", listener)


# ---- a refused COMMIT (PostgreSQL: a deferred constraint trigger fires at COMMIT) -----------------


def _refuse_commits_on(engine, table: str) -> None:
    with engine.begin() as conn:
        conn.execute(text(
            "CREATE OR REPLACE FUNCTION test_refuse_commit() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN RAISE EXCEPTION 'refused at commit by the test'; END $$"
        ))
        conn.execute(text(
            f"CREATE CONSTRAINT TRIGGER test_refuse_commit AFTER INSERT OR UPDATE ON {table} "
            "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION test_refuse_commit()"
        ))


def _allow_commits_on(engine, table: str) -> None:
    with engine.begin() as conn:
        conn.execute(text(f"DROP TRIGGER test_refuse_commit ON {table}"))


def _count(engine, stmt) -> int:
    with Session(engine) as s:
        return s.exec(stmt).one()


def _audit(engine, action: str) -> int:
    return _count(engine, select(func.count()).select_from(AuditEntry).where(AuditEntry.action == action))


def _refused_then_once(app, engine, *, table: str, send, state, action: str):
    """COMMIT refused -> error and no change; with the trigger gone the same key succeeds once, then replays."""
    before, audited = state(), _audit(engine, action)
    _refuse_commits_on(engine, table)
    refused = _call(app, send)
    assert refused.status_code == 503, refused.text
    assert refused.headers["content-type"].startswith("application/problem+json")
    assert refused.json()["title"] == "Not saved"
    assert state() == before and _audit(engine, action) == audited
    _allow_commits_on(engine, table)
    first = _call(app, send)
    assert first.status_code in (200, 201), first.text
    assert "idempotent-replayed" not in first.headers
    again = _call(app, send)
    assert again.status_code == first.status_code and again.headers["idempotent-replayed"] == "true"
    assert state() != before and _audit(engine, action) == audited + 1
    return first


# A COMMIT that fails needs a deferred constraint trigger, a PostgreSQL feature: these tests take the
# PostgreSQL parameter of fresh_engine only (selected, not skipped, by the `postgres` marker).
only_postgres = pytest.mark.parametrize("fresh_engine", ["postgres"], indirect=True)


@pytest.fixture
def pg_portal(portal, fresh_engine):
    assert fresh_engine.dialect.name == "postgresql"
    return portal


@only_postgres
def test_refused_commit_on_token_creation(pg_portal, fresh_engine):
    raw = _user(fresh_engine, "fred", "viewer")
    headers = {"Authorization": f"Bearer {raw}", "Idempotency-Key": "tok-1"}
    first = _refused_then_once(
        pg_portal, fresh_engine, table="api_token", action="token.create",
        send=lambda c: c.post("/api/v1/tokens", json={"label": "retry me"}, headers=headers),
        state=lambda: _count(fresh_engine, select(func.count()).select_from(ApiToken)),
    )
    assert first.json()["token"].startswith("cbt_")
    assert _count(fresh_engine, select(func.count()).select_from(ApiToken)) == 2


def _rated_october(portal, engine) -> dict[str, str]:
    """October rated from one hour, by a finance user; returns that user's bearer header."""
    raw = _user(engine, "fiona", "finance")
    with unit_of_work(engine) as s:
        add_hour(s, hour=OCT1, version=store_policy(s).id)
        record_gaps(s, "2026-10")
    bearer = {"Authorization": f"Bearer {raw}"}
    assert _call(portal, lambda c: c.post("/api/v1/periods/2026-10/rate", headers=bearer)).status_code == 200
    return bearer


@only_postgres
def test_refused_commit_on_period_close(pg_portal, fresh_engine):
    bearer = _rated_october(pg_portal, fresh_engine)

    def status():
        with Session(fresh_engine) as s:
            row = s.exec(select(BillingPeriod).where(BillingPeriod.month == "2026-10")).one()
            return row.status, row.csv_sha256

    first = _refused_then_once(
        pg_portal, fresh_engine, table="billing_period", action="billing.close",
        send=lambda c: c.post("/api/v1/periods/2026-10/close", json={"accept_gaps": True, "reason": "test month"},
                              headers={**bearer, "Idempotency-Key": "close-1"}),
        state=status,
    )
    assert first.json()["status"] == "finalized" and status()[0] == "finalized"


@only_postgres
def test_refused_commit_after_the_issued_documents_leaves_none(pg_portal, fresh_engine):
    """The close commits (finalized, documents pending); the issuing step's COMMIT is refused once its documents
    are written: none stay, no event, the period stays pending, and the next round stores them all, once."""
    from app.billing.issuing import issue_task
    from app.billing.models import IssuedDocument
    from app.core.events import Event

    bearer = _rated_october(pg_portal, fresh_engine)

    def state():
        with Session(fresh_engine) as s:
            row = s.exec(select(BillingPeriod).where(BillingPeriod.month == "2026-10")).one()
            events = s.exec(select(func.count()).select_from(Event).where(Event.type == "period.finalized")).one()
            return row.status, row.csv_sha256 is not None, s.exec(select(func.count()).select_from(IssuedDocument)).one(), events

    closed = _call(pg_portal, lambda c: c.post("/api/v1/periods/2026-10/close", headers=bearer,
                                               json={"accept_gaps": True, "reason": "test month"}))
    assert closed.status_code == 200 and closed.json()["documents"] == "pending"
    assert state() == ("finalized", False, 0, 0)
    _refuse_commits_on(fresh_engine, "issued_document")
    assert issue_task(fresh_engine) == []  # refused at COMMIT: logged, left pending
    assert state() == ("finalized", False, 0, 0) and _audit(fresh_engine, "billing.issue") == 0
    _allow_commits_on(fresh_engine, "issued_document")
    [done] = issue_task(fresh_engine)
    assert done.documents == 4 + 3  # CSV, FOCUS, PDF, report + the three tenants' invoices
    assert issue_task(fresh_engine) == []
    assert state() == ("finalized", True, 4 + 3, 1) and _audit(fresh_engine, "billing.issue") == 1


@only_postgres
def test_refused_commit_on_policy_apply(pg_portal, fresh_engine):
    raw = _user(fresh_engine, "otto", "operator")
    with unit_of_work(fresh_engine) as s:
        change = approved(s, seed(s))
        from app.review import releases

        release = releases.create_release(session=s, actor="otto", name="r1", service="svc",
                                          planned_at=datetime.now(UTC) + timedelta(days=1))
        releases.attach(session=s, release_id=release.id, change_id=change.id, actor="otto")
        release_id = release.id
    soon = (floor_hour(datetime.now(UTC)) + timedelta(hours=2)).isoformat()
    headers = {"Authorization": f"Bearer {raw}", "Idempotency-Key": "apply-1"}
    first = _refused_then_once(
        pg_portal, fresh_engine, table="policy_version", action="release.apply",
        send=lambda c: c.post(f"/api/v1/policy/releases/{release_id}/apply", json={"effective_from": soon},
                              headers=headers),
        state=lambda: _count(fresh_engine, select(func.count()).select_from(PolicyVersion)),
    )
    # One new version (its number skips the refused attempt's: PostgreSQL sequences do not roll back).
    assert first.json()["state"] == "applied"
    assert _count(fresh_engine, select(func.count()).select_from(PolicyVersion)) == 2


@only_postgres
def test_refused_commit_on_a_form_is_an_error_page(pg_portal, fresh_engine):
    from app.auth import sessions

    raw = _user(fresh_engine, "fiona", "finance")
    with unit_of_work(fresh_engine) as s:
        add_hour(s, hour=OCT1, version=store_policy(s).id)
        record_gaps(s, "2026-10")
        user = service.get_user_by_name(session=s, name="fiona")
        session_id = service.start_session(session=s, user=user)
    assert _call(pg_portal, lambda c: c.post("/api/v1/periods/2026-10/rate",
                                             headers={"Authorization": f"Bearer {raw}"})).status_code == 200
    cookies = {sessions.SESSION_COOKIE: sessions.sign_session_id(session_id), sessions.CSRF_COOKIE: "nonce"}
    form = {"csrf_token": sessions.csrf_token_for("nonce", session_id), "accept_gaps": "true", "reason": "test",
            "confirmed": "true"}

    async def close(client):
        client.cookies.update(cookies)
        return await client.post("/billing/2026-10/close", data=form)

    _refuse_commits_on(fresh_engine, "billing_period")
    refused = _call(pg_portal, close)
    assert refused.status_code == 503 and refused.headers["content-type"].startswith("text/html")
    assert "Not saved" in refused.text
    with Session(fresh_engine) as s:
        assert s.exec(select(BillingPeriod.status).where(BillingPeriod.month == "2026-10")).one() == "rated"
    _allow_commits_on(fresh_engine, "billing_period")
    assert _call(pg_portal, close).status_code == 303
