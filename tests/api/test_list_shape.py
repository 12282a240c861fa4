"""Every collection in the API is one shape: a page of `items` with `next_cursor`, asked for with `limit` and `cursor`.

The contract is read off the served OpenAPI document (no GET answers a bare array; every page declares
both fields and both parameters), then walked on real lists: page by page with `limit=1` gives the
whole list once, in order, and a cursor that is not one is a 422 naming `query.cursor`.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from app.auth import service
from tests.support.billing import add_hour, store_policy
from tests.support.routes import bearer, make_user

pytestmark = pytest.mark.anyio
API = "/api/v1"


def _resolve(doc: dict, schema: dict) -> dict:
    while "$ref" in schema:
        schema = doc["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    return schema


def _success_schema(operation: dict) -> dict | None:
    response = next(r for s, r in operation["responses"].items() if s.startswith("2"))
    return response.get("content", {}).get("application/json", {}).get("schema")


async def test_no_route_answers_a_bare_array_and_every_page_takes_limit_and_cursor(client):
    doc = (await client.get(f"{API}/openapi.json")).json()
    pages = []
    for path, methods in doc["paths"].items():
        operation = methods.get("get")
        schema = operation and _success_schema(operation)
        if not path.startswith(API) or not schema:
            continue
        body = _resolve(doc, schema)
        assert body.get("type") != "array", f"GET {path} answers a bare array"
        if "items" not in body.get("properties", {}) or path.endswith("/checklist"):
            continue  # a checklist's `items` are its fixed steps, not a collection
        pages.append(path)
        assert "next_cursor" in body["properties"], path
        params = {p["name"] for p in operation.get("parameters", []) if p["in"] == "query"}
        assert {"limit", "cursor"} <= params, (path, params)
    expected = {"/periods", "/periods/{period}/invoices", "/tenants", "/departments", "/audit", "/budgets",
                "/webhooks", "/webhooks/{webhook_id}/deliveries", "/policy/versions", "/policy/changes",
                "/policy/releases"}
    assert {API + p for p in expected} <= set(pages), sorted({API + p for p in expected} - set(pages))


async def _walk(client, path: str, headers: dict, key: str) -> list:
    """Every item of a list, fetched one per page."""
    seen, cursor = [], None
    for _ in range(50):
        params = {"limit": 1} | ({"cursor": cursor} if cursor else {})
        answer = await client.get(path, headers=headers, params=params)
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert len(body["items"]) <= 1
        seen += [item[key] for item in body["items"]]
        cursor = body["next_cursor"]
        if cursor is None:
            return seen
    raise AssertionError(f"{path}: more than 50 pages")


async def test_pages_of_one_give_the_whole_list_once_in_order(client, session):
    version = store_policy(session)
    for month in (9, 10, 11):
        add_hour(session, hour=datetime(2026, month, 2, tzinfo=UTC), version=version.id)
    session.commit()
    _, raw = service.create_token(session=session, user=make_user(session, "shape-op", "operator"),
                                  scopes=["read", "write"], lifetime=timedelta(days=1), actor="test")
    session.commit()
    staff = {"Authorization": f"Bearer {raw}"}
    for title in ("one", "two", "three"):
        made = await client.post(f"{API}/policy/changes", headers=staff, json={"title": title, "justification": "j"})
        assert made.status_code == 201, made.text
    for path, key in (("/tenants", "name"), ("/departments", "name"), ("/periods", "period"),
                      ("/policy/changes", "id"), ("/policy/versions", "version")):
        whole = (await client.get(API + path, headers=staff)).json()
        assert whole["next_cursor"] is None
        expected = [item[key] for item in whole["items"]]
        assert len(expected) >= (1 if path == "/policy/versions" else 3), (path, expected)
        assert await _walk(client, API + path, staff, key) == expected, path
    assert await _walk(client, f"{API}/periods", staff, "period") == ["2026-11", "2026-10", "2026-09"]
    assert await _walk(client, f"{API}/tenants", staff, "name") == ["etl", "search", "vision"]
    only = (await client.get(f"{API}/tenants", headers=staff, params={"department": "research"})).json()
    assert [t["name"] for t in only["items"]] == ["vision"]
    opened = (await client.get(f"{API}/periods", headers=staff, params={"status": "open"})).json()["items"]
    assert len(opened) == 3 and {p["status"] for p in opened} == {"open"}


@pytest.mark.parametrize("path", ["/tenants", "/periods", "/policy/changes", "/policy/releases", "/policy/versions",
                                  "/departments", "/budgets", "/audit"])
async def test_a_cursor_that_is_not_one_is_a_422_at_query_cursor(client, session, path):
    store_policy(session)
    session.commit()
    answer = await client.get(API + path, headers=bearer(session, "shape-fin", "admin"),
                              params={"cursor": "not-a-cursor"})
    assert answer.status_code == 422, answer.text
    assert [e["path"] for e in answer.json()["errors"]] == ["query.cursor"]
