"""Directory API: tenants and departments from the active policy, the audit log with filters and isolation."""

from __future__ import annotations

import pytest

from app.core.audit import AuditEntry, record
from tests.support.billing import store_policy
from tests.support.routes import bearer

pytestmark = pytest.mark.anyio


async def test_tenants_and_departments_for_staff(client, session):
    store_policy(session)
    session.commit()
    headers = bearer(session, "dir-fin", "finance")
    response = await client.get("/api/v1/tenants", headers=headers)
    assert response.status_code == 200
    assert response.json()["items"] == [
        {"name": "etl", "department": "data", "class": "preprocessing", "namespaces": ["data-prep"]},
        {"name": "search", "department": "consumer", "class": "inference", "namespaces": ["search-prod"]},
        {"name": "vision", "department": "research", "class": "training", "namespaces": ["vision-train"]},
    ]
    one = await client.get("/api/v1/tenants/vision", headers=headers)
    assert one.status_code == 200 and one.json()["department"] == "research"
    missing = await client.get("/api/v1/tenants/nobody", headers=headers)
    assert missing.status_code == 404
    assert missing.headers["content-type"].startswith("application/problem+json")
    departments = await client.get("/api/v1/departments", headers=headers)
    assert departments.json()["items"] == [
        {"name": "consumer", "tenants": ["search"]},
        {"name": "data", "tenants": ["etl"]},
        {"name": "research", "tenants": ["vision"]},
    ]


async def test_tenant_member_sees_only_its_tenants(client, session):
    store_policy(session)
    session.commit()
    headers = bearer(session, "dir-member", "tenant", ["vision"])
    listed = await client.get("/api/v1/tenants", headers=headers)
    assert [t["name"] for t in listed.json()["items"]] == ["vision"]
    assert (await client.get("/api/v1/tenants/vision", headers=headers)).status_code == 200
    other = await client.get("/api/v1/tenants/search", headers=headers)
    unknown = await client.get("/api/v1/tenants/nobody", headers=headers)
    assert other.status_code == unknown.status_code == 404
    assert (await client.get("/api/v1/departments", headers=headers)).json()["items"] == [
        {"name": "research", "tenants": ["vision"]}
    ]


async def test_no_policy_means_no_tenants(client, session):
    headers = bearer(session, "dir-empty", "viewer")
    assert (await client.get("/api/v1/tenants", headers=headers)).json() == {"items": [], "next_cursor": None}
    assert (await client.get("/api/v1/departments", headers=headers)).json() == {"items": [], "next_cursor": None}


def _seed_audit(session) -> dict[str, int]:
    ids = {}
    for i, (tenant, action) in enumerate([("vision", "invoice.view"), ("search", "invoice.view"),
                                           (None, "period.close"), ("vision", "period.correct")]):
        entry = record(session=session, actor=f"actor-{i % 2}", action=action, entity="period",
                       entity_id="2026-10", tenant=tenant, after={"n": i})
        ids[f"{tenant}:{action}"] = entry.id
    session.commit()
    return ids


async def test_audit_pages_and_filters(client, session):
    ids = _seed_audit(session)
    headers = bearer(session, "dir-audit", "finance")
    seen, cursor = [], None
    while True:
        params = {"limit": 2, "entity": "period"} | ({"cursor": cursor} if cursor else {})
        page = (await client.get("/api/v1/audit", params=params, headers=headers)).json()
        seen += [item["id"] for item in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == sorted(ids.values(), reverse=True)  # newest first, every page, no duplicates
    closes = (await client.get("/api/v1/audit", params={"action": "period."}, headers=headers)).json()["items"]
    assert [e["action"] for e in closes] == ["period.correct", "period.close"]
    by_actor = (await client.get("/api/v1/audit", params={"actor": "actor-1", "entity": "period"},
                                 headers=headers)).json()["items"]
    assert {e["id"] for e in by_actor} == {ids["search:invoice.view"], ids["vision:period.correct"]}
    future = (await client.get("/api/v1/audit", params={"since": "2999-01-01T00:00:00Z"}, headers=headers)).json()
    assert future["items"] == []
    one = await client.get(f"/api/v1/audit/{ids['None:period.close']}", headers=headers)
    assert one.status_code == 200 and one.json()["after"] == {"n": 2}
    bad = await client.get("/api/v1/audit", params={"cursor": "not-a-cursor"}, headers=headers)
    assert bad.status_code == 422 and bad.json()["errors"][0]["path"] == "query.cursor"
    nul = await client.get("/api/v1/audit", params={"actor": "a\x00b"}, headers=headers)
    assert nul.status_code == 422


async def test_audit_isolation_for_tenant_members(client, session):
    ids = _seed_audit(session)
    headers = bearer(session, "dir-vera", "tenant", ["vision"])
    items = (await client.get("/api/v1/audit", params={"limit": 500}, headers=headers)).json()["items"]
    assert {e["tenant"] for e in items} == {"vision"}
    assert {e["id"] for e in items} == {ids["vision:invoice.view"], ids["vision:period.correct"]}
    assert (await client.get(f"/api/v1/audit/{ids['vision:invoice.view']}", headers=headers)).status_code == 200
    for other in (ids["search:invoice.view"], ids["None:period.close"], 2_000_000_000):
        assert (await client.get(f"/api/v1/audit/{other}", headers=headers)).status_code == 404
    assert session.get(AuditEntry, ids["search:invoice.view"]) is not None  # it exists; it is only hidden
