"""Malformed input is a 4xx with a field path, never a 500: NUL anywhere, huge ids and numbers, forged cursors, body size."""

from __future__ import annotations

import base64
import json
from datetime import timedelta

import pytest

from app.auth import service
from app.core.errors import Invalid
from app.http.pagination import decode_cursor, encode_cursor
from tests.support.review import draft, seed
from tests.support.routes import make_user, sign_in

pytestmark = pytest.mark.anyio


def _bearer(session, name: str, role: str, scopes: str = "read,write") -> dict[str, str]:
    user = make_user(session, name, role)
    _, raw = service.create_token(session=session, user=user, scopes=scopes, lifetime=timedelta(days=1), actor="test")
    session.commit()
    return {"Authorization": f"Bearer {raw}"}


def _cursor(value) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")


def _paths(response) -> list[str]:
    return [e["path"] for e in response.json().get("errors", [])]


async def test_nul_in_the_login_user_name_is_a_form_error(client):
    response = await client.post("/login", data={"username": "ad\x00min", "password": "x"})
    assert response.status_code == 422
    assert "text/html" in response.headers["content-type"]
    assert "NUL" in response.text


async def test_nul_in_a_json_field_is_422_with_its_path(client, session):
    headers = _bearer(session, "nul-admin", "admin")
    response = await client.post("/api/v1/tokens", json={"scopes": ["read"], "label": "a\x00b"}, headers=headers)
    assert response.status_code == 422
    assert response.headers["content-type"].startswith("application/problem+json")
    assert _paths(response) == ["body.label"]


async def test_nul_in_a_correction_reason_is_refused_before_authentication(client):
    response = await client.post("/api/v1/periods/2026-10/corrections",
                                 json={"line_id": "x", "amount": "1", "reason": "typo\x00"})
    assert response.status_code == 422 and _paths(response) == ["body.reason"]


async def test_nul_in_path_and_query(client, session):
    headers = _bearer(session, "nul-fin", "finance", scopes="read")
    by_path = await client.get("/api/v1/tenants/vi%00sion", headers=headers)
    by_query = await client.get("/api/v1/policy/changes", params={"state": "draft\x00"}, headers=headers)
    assert (by_path.status_code, _paths(by_path)) == (422, ["path"])
    assert (by_query.status_code, _paths(by_query)) == (422, ["query.state"])


async def test_an_escaped_backslash_before_u0000_is_literal_text(client, session):
    headers = _bearer(session, "lit-admin", "admin")
    response = await client.post("/api/v1/tokens", content=b'{"scopes": ["read"], "label": "C:\\\\u0000"}',
                                 headers={**headers, "Content-Type": "application/json"})
    assert response.status_code == 201, response.text
    assert response.json()["label"] == "C:\\u0000"


async def test_token_ids_beyond_the_column_are_422(client, session):
    headers = _bearer(session, "big-admin", "admin")
    response = await client.delete("/api/v1/tokens/99999999999", headers=headers)
    assert response.status_code == 422 and _paths(response) == ["path.token_id"]


@pytest.mark.parametrize("expires", ["9999999999d", "99999999999999999999999w", "0d", "367d"])
async def test_token_lifetimes_out_of_range_are_422(client, session, expires):
    headers = _bearer(session, f"exp-admin-{len(expires)}", "admin")
    response = await client.post("/api/v1/tokens", json={"scopes": ["read"], "expires": expires}, headers=headers)
    assert response.status_code == 422 and _paths(response) == ["body.expires"]


@pytest.mark.parametrize("cursor", [
    _cursor([2**63]), _cursor([-(2**63) - 1]), _cursor([[1]]), _cursor({"id": 1}), _cursor(["1"]), _cursor([1, 2]),
    _cursor([True]), "!!!", _cursor(["x\x00"]),
])
async def test_forged_cursors_are_422(client, session, cursor):
    headers = _bearer(session, "cur-admin", "admin")
    for path in ("/api/v1/audit", "/api/v1/tokens", "/api/v1/periods/2026-10/invoices"):
        response = await client.get(path, params={"cursor": cursor}, headers=headers)
        assert response.status_code in (404, 422), (path, response.status_code, response.text)
        if response.status_code == 422:
            assert _paths(response) == ["query.cursor"]


def test_the_cursor_decoder_round_trips_and_refuses_non_finite_decimals():
    from decimal import Decimal

    assert decode_cursor(encode_cursor([2**63 - 1, "x"]), [int, str]) == [2**63 - 1, "x"]
    for value in (["NaN"], ["Infinity"], [1.5]):
        with pytest.raises(Invalid):
            decode_cursor(_cursor(value), [Decimal])


async def test_a_5000_digit_field_value_is_422(client, session):
    version = seed(session)
    change = draft(session, version, author="olga")
    session.commit()
    headers = _bearer(session, "olga", "operator")
    response = await client.post(f"/api/v1/policy/changes/{change.id}/fields",
                                 json={"path": "quotas[vision].guaranteed_gpus", "value": "9" * 5000}, headers=headers)
    assert response.status_code == 422, response.text
    assert _paths(response) == ["value"]


@pytest.mark.parametrize("page", ["/policy/versions", "/policy/changes/{id}", "/policy/versions/{v2}"])
async def test_htmx_fragments_of_policy_pages_render(client, session, page):
    version = seed(session)
    change = draft(session, version, author="olga")
    session.commit()
    from app.policy.service import import_version, load_document

    v2 = import_version(session=session, document=load_document(version), actor="test",
                   effective_from=version.effective_from + timedelta(days=1))
    session.commit()
    sign_in(client, session, make_user(session, "rev", "reviewer"))
    response = await client.get(page.format(id=change.id, v2=v2.id), headers={"HX-Request": "true"})
    assert response.status_code == 200, response.text
    assert "<html" not in response.text  # the block, not the page


async def test_a_body_over_the_limit_is_413_before_authentication(client):
    response = await client.post("/api/v1/policy/validate", content=b"x" * (2 * 1024 * 1024 + 1),
                                 headers={"Content-Type": "application/json"})
    assert response.status_code == 413
    assert response.headers["content-type"].startswith("application/problem+json")
    assert _paths(response) == ["body"]


async def test_a_chunked_body_over_the_limit_is_413(client):
    async def chunks():
        for _ in range(40):
            yield b"y" * 65536  # 2.5 MiB without a Content-Length

    response = await client.post("/api/v1/policy/validate", content=chunks(), headers={"Content-Type": "application/json"})
    assert "content-length" not in response.request.headers
    assert response.status_code == 413


async def test_a_body_within_the_limit_reaches_the_route(client):
    response = await client.post("/api/v1/policy/validate", content=b"{" + b" " * (1024 * 1024) + b"}",
                                 headers={"Content-Type": "application/json"})
    assert response.status_code == 401  # parsed and passed on: authentication answers


async def test_the_body_limit_is_a_setting(client, monkeypatch):
    from app.core.settings import get_settings

    monkeypatch.setenv("CHARGEBACK_MAX_BODY_BYTES", "64")
    get_settings.cache_clear()
    try:
        small = await client.post("/api/v1/policy/validate", json={"document": "x" * 10})
        large = await client.post("/api/v1/policy/validate", json={"document": "x" * 100})
    finally:
        monkeypatch.delenv("CHARGEBACK_MAX_BODY_BYTES")
        get_settings.cache_clear()
    assert (small.status_code, large.status_code) == (401, 413)
    assert "64 bytes" in large.json()["detail"]


async def test_an_html_form_over_the_limit_gets_a_readable_page(client):
    response = await client.post("/login", data={"username": "ada", "password": "x" * (2 * 1024 * 1024)})
    assert response.status_code == 413
    assert "text/html" in response.headers["content-type"] and "Content too large" in response.text


async def test_an_alias_bomb_posted_for_validation_is_a_quick_422(client, session):
    import time

    from tests.support.policy_docs import laughs

    headers = _bearer(session, "bomb-viewer", "viewer")
    started = time.perf_counter()
    response = await client.post("/api/v1/policy/validate", json={"document": laughs(12)}, headers=headers)
    assert response.status_code == 422 and time.perf_counter() - started < 2
    assert response.json()["errors"][0]["path"] and "aliases" in response.json()["errors"][0]["message"]


async def test_deeply_nested_json_with_a_nul_is_still_a_4xx(client):
    body = b'{"document": ' + b"[" * 100_000 + b'"\\u0000"' + b"]" * 100_000 + b"}"
    response = await client.post("/api/v1/policy/validate", content=body, headers={"Content-Type": "application/json"})
    assert response.status_code == 400
