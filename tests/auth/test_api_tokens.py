"""Bearer tokens on /api: valid, expired, revoked, scoped; shown once; last use recorded; Idempotency-Key."""

from datetime import timedelta

import pytest
from sqlmodel import select

from app.auth import service, tokens
from app.auth.models import ApiToken
from app.core.timeutil import utcnow
from tests.support.routes import make_user

pytestmark = pytest.mark.anyio


def _token(session, user, scopes="read", lifetime=timedelta(days=1)):
    row, raw = service.create_token(session=session, user=user, scopes=scopes, lifetime=lifetime, actor="test")
    session.commit()
    return row, raw


def _bearer(raw):
    return {"Authorization": f"Bearer {raw}"}


async def test_valid_token_identifies_the_user_and_records_use(client, session):
    user = make_user(session, "fin", "finance")
    row, raw = _token(session, user)
    assert row.last_used_at is None
    me = await client.get("/api/v1/me", headers=_bearer(raw))
    assert me.status_code == 200
    assert me.json() == {"name": "fin", "roles": ["finance"], "tenants": None, "via": "token", "scopes": ["read"]}
    session.refresh(row)
    assert row.last_used_at is not None
    assert "set-cookie" not in me.headers


async def test_tenant_member_token_carries_its_tenants(client, session):
    user = make_user(session, "tm", "tenant", tenants=["team-b", "team-a"])
    _, raw = _token(session, user)
    assert (await client.get("/api/v1/me", headers=_bearer(raw))).json()["tenants"] == ["team-a", "team-b"]


@pytest.mark.parametrize(
    "header,error",
    [("Bearer cbt_not-a-real-token", "invalid_token"), ("Bearer ", "invalid_request"),
     ("Basic dXNlcjpwYXNz", "invalid_request"), ("Bearer nonsense", "invalid_token")],
)
async def test_bad_credentials_are_401_with_challenge(client, header, error):
    response = await client.get("/api/v1/me", headers={"Authorization": header})
    assert response.status_code == 401
    assert response.headers["content-type"].startswith("application/problem+json")
    assert response.headers["www-authenticate"] == f'Bearer realm="chargeback", error="{error}"'
    body = response.json()
    assert body["status"] == 401 and body["instance"] == "/api/v1/me"


async def test_no_credentials_is_401_problem_on_api(client):
    response = await client.get("/api/v1/tokens")
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == 'Bearer realm="chargeback"'


async def test_expired_token_refused(client, session):
    user = make_user(session, "fin", "finance")
    row, raw = _token(session, user)
    row.expires_at = utcnow() - timedelta(seconds=1)
    session.add(row)
    session.commit()
    response = await client.get("/api/v1/me", headers=_bearer(raw))
    assert response.status_code == 401
    assert "expired" in response.json()["detail"]


async def test_revoked_token_refused(client, session):
    user = make_user(session, "fin", "finance")
    row, raw = _token(session, user)
    assert (await client.get("/api/v1/me", headers=_bearer(raw))).status_code == 200
    service.revoke_token(session=session, token_id=row.id, actor="test")
    session.commit()
    assert (await client.get("/api/v1/me", headers=_bearer(raw))).status_code == 401


async def test_token_of_deactivated_user_refused(client, session):
    user = make_user(session, "fin", "finance")
    _, raw = _token(session, user)
    service.update_user(session=session, user_id=user.id, role="finance", tenants=[], active=False, actor="test")
    session.commit()
    assert (await client.get("/api/v1/me", headers=_bearer(raw))).status_code == 401


async def test_bearer_is_not_a_browser_login(client, session):
    user = make_user(session, "fin", "finance")
    _, raw = _token(session, user)
    assert (await client.get("/", headers=_bearer(raw))).status_code == 303


async def test_read_scope_cannot_change_anything(client, session):
    user = make_user(session, "fin", "finance")
    row, raw = _token(session, user, scopes="read")
    response = await client.post("/api/v1/tokens", json={"scopes": ["read"]}, headers=_bearer(raw))
    assert response.status_code == 403
    assert (await client.delete(f"/api/v1/tokens/{row.id}", headers=_bearer(raw))).status_code == 403


async def test_create_list_revoke_own_tokens(client, session):
    user = make_user(session, "fin", "finance")
    other = make_user(session, "ops", "operator")
    own_row, raw = _token(session, user, scopes="write")
    other_row, _ = _token(session, other)
    created = await client.post("/api/v1/tokens", json={"label": "erp", "scopes": ["read"], "expires": "30d"},
                                headers=_bearer(raw))
    assert created.status_code == 201
    body = created.json()
    new_raw = body["token"]
    assert new_raw.startswith(tokens.PREFIX) and body["scopes"] == ["read"] and body["label"] == "erp"
    stored = session.exec(select(ApiToken).where(ApiToken.id == body["id"])).one()
    assert stored.token_sha256 == tokens.digest(new_raw)
    assert new_raw not in str(stored.model_dump())
    listed = await client.get("/api/v1/tokens", headers=_bearer(new_raw))
    assert listed.status_code == 200
    assert [t["id"] for t in listed.json()["items"]] == [body["id"], own_row.id]  # newest first, not others'
    assert new_raw not in listed.text and raw not in listed.text and "sha256" not in listed.text
    # Someone else's token is not found; one's own is revoked (twice: harmless).
    assert (await client.delete(f"/api/v1/tokens/{other_row.id}", headers=_bearer(raw))).status_code == 404
    assert (await client.delete(f"/api/v1/tokens/{body['id']}", headers=_bearer(raw))).status_code == 204
    assert (await client.delete(f"/api/v1/tokens/{body['id']}", headers=_bearer(raw))).status_code == 204
    assert (await client.get("/api/v1/me", headers=_bearer(new_raw))).status_code == 401


async def test_token_list_pages_newest_first(client, session):
    user = make_user(session, "fin", "finance")
    made = [_token(session, user)[0].id for _ in range(5)]
    newest, raw = _token(session, user)
    ids, cursor = [], None
    while True:
        query = "?limit=2" + (f"&cursor={cursor}" if cursor else "")
        page = (await client.get(f"/api/v1/tokens{query}", headers=_bearer(raw))).json()
        assert len(page["items"]) <= 2
        ids += [t["id"] for t in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert ids == sorted([*made, newest.id], reverse=True)
    bad = await client.get("/api/v1/tokens?cursor=garbage!", headers=_bearer(raw))
    assert bad.status_code == 422 and bad.json()["errors"][0]["path"] == "query.cursor"
    too_many = await client.get("/api/v1/tokens?limit=501", headers=_bearer(raw))
    assert too_many.status_code == 422 and too_many.json()["errors"][0]["path"] == "query.limit"


async def test_bad_token_request_names_the_field(client, session):
    user = make_user(session, "fin", "finance")
    _, raw = _token(session, user, scopes="write")
    bad = await client.post("/api/v1/tokens", json={"expires": "forever"}, headers=_bearer(raw))
    assert bad.status_code == 422
    assert bad.json()["errors"][0]["path"] == "body.expires"
    bad_scope = await client.post("/api/v1/tokens", json={"scopes": ["root"]}, headers=_bearer(raw))
    assert bad_scope.status_code == 422
    wrong_type = await client.post("/api/v1/tokens", json={"scopes": "read"}, headers=_bearer(raw))
    assert wrong_type.status_code == 422
    assert wrong_type.json()["errors"][0]["path"] == "body.scopes"


async def test_idempotency_key_replays_without_the_secret(client, session):
    user = make_user(session, "fin", "finance")
    _, raw = _token(session, user, scopes="write")
    headers = {**_bearer(raw), "Idempotency-Key": "create-erp-token-1"}
    first = await client.post("/api/v1/tokens", json={"label": "erp"}, headers=headers)
    second = await client.post("/api/v1/tokens", json={"label": "erp"}, headers=headers)
    assert first.status_code == second.status_code == 201
    assert second.headers["idempotent-replayed"] == "true"
    assert second.json()["id"] == first.json()["id"]
    assert first.json()["token"] and second.json()["token"] is None
    assert len(session.exec(select(ApiToken).where(ApiToken.label == "erp")).all()) == 1
    conflict = await client.post("/api/v1/tokens", json={"label": "other"}, headers=headers)
    assert conflict.status_code == 422
    assert conflict.json()["errors"][0]["path"] == "header.Idempotency-Key"
    # Another key makes another token.
    third = await client.post("/api/v1/tokens", json={"label": "erp"}, headers={**headers, "Idempotency-Key": "k2"})
    assert third.json()["id"] != first.json()["id"]
