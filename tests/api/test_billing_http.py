"""Billing API over HTTP: invoice pages by cursor, ETag / If-None-Match, Idempotency-Key on close."""

from __future__ import annotations

import hashlib
from datetime import timedelta

import pytest

from app.auth import service
from app.billing import periods
from tests.support.billing import fill_month, store_policy
from tests.support.routes import bearer, make_user

pytestmark = pytest.mark.anyio
INVOICES = "/api/v1/periods/2026-10/invoices"


@pytest.fixture
def rated_month(session):
    """October 2026 ingested hour by hour like the worked example, and rated (draft)."""
    version = store_policy(session)
    fill_month(session, "2026-10", version.id)
    periods.rate(session=session, period="2026-10", actor="test")
    session.commit()


async def test_invoice_pages_cover_the_full_list(client, session, rated_month):
    headers = bearer(session, "bh-fin", "finance")
    full = (await client.get(INVOICES, headers=headers)).json()
    assert [i["tenant"] for i in full["invoices"]] == ["etl", "search", "vision"] and full["next_cursor"] is None
    first = (await client.get(INVOICES, params={"limit": 2}, headers=headers)).json()
    assert [i["tenant"] for i in first["invoices"]] == ["etl", "search"] and first["next_cursor"]
    second = (await client.get(INVOICES, params={"limit": 2, "cursor": first["next_cursor"]}, headers=headers)).json()
    assert second["invoices"] == full["invoices"][2:] and second["next_cursor"] is None
    assert first["invoices"] == full["invoices"][:2]
    assert first["departments"] == full["departments"]  # roll-ups are period-wide on every page
    assert sum(float(i["total"]) for i in full["invoices"]) != 0
    bad = await client.get(INVOICES, params={"cursor": "%%%"}, headers=headers)
    assert bad.status_code == 422 and bad.json()["errors"][0]["path"] == "query.cursor"
    assert (await client.get(INVOICES, params={"limit": 0}, headers=headers)).status_code == 422


async def test_member_pages_hold_only_its_tenant(client, session, rated_month):
    headers = bearer(session, "bh-vera", "tenant", ["vision"])
    body = (await client.get(INVOICES, params={"limit": 1}, headers=headers)).json()
    assert [i["tenant"] for i in body["invoices"]] == ["vision"] and body["next_cursor"] is None


async def test_etags_give_304(client, session, rated_month):
    headers = bearer(session, "bh-etag", "finance")
    for url in (INVOICES, INVOICES + "/vision", "/api/v1/periods/2026-10/export?format=csv"):
        first = await client.get(url, headers=headers)
        etag = first.headers["etag"]
        assert first.status_code == 200 and etag.startswith('"')
        again = await client.get(url, headers=headers | {"If-None-Match": etag})
        assert again.status_code == 304 and again.content == b"" and again.headers["etag"] == etag
        other = await client.get(url, headers=headers | {"If-None-Match": '"something-else"'})
        assert other.status_code == 200 and other.content == first.content
    export = await client.get("/api/v1/periods/2026-10/export?format=csv", headers=headers)
    assert export.headers["etag"] == '"' + hashlib.sha256(export.content).hexdigest() + '"'
    paged = await client.get(INVOICES, params={"limit": 1}, headers=headers)
    assert paged.headers["etag"] != (await client.get(INVOICES, headers=headers)).headers["etag"]


async def test_close_with_idempotency_key_replays(client, session, rated_month):
    user = make_user(session, "bh-close", "finance")
    _, raw = service.create_token(session=session, user=user, scopes="write", lifetime=timedelta(days=1), actor="t")
    session.commit()
    headers = {"Authorization": f"Bearer {raw}", "Idempotency-Key": "close-oct-1"}
    first = await client.post("/api/v1/periods/2026-10/close", json={}, headers=headers)
    assert first.status_code == 200, first.text
    assert first.json()["status"] == "finalized"
    retry = await client.post("/api/v1/periods/2026-10/close", json={}, headers=headers)
    assert retry.status_code == 200 and retry.json() == first.json()
    assert retry.headers["idempotent-replayed"] == "true"
    other_body = await client.post("/api/v1/periods/2026-10/close", json={"accept_gaps": True}, headers=headers)
    assert other_body.status_code == 422
    no_key = await client.post("/api/v1/periods/2026-10/close", json={}, headers={"Authorization": f"Bearer {raw}"})
    assert no_key.status_code == 409  # without a key a second close is a conflict, as before
