"""Billing contacts API: read and replace a tenant's addresses; bad ones refused with their path, nothing saved."""

from __future__ import annotations

from sqlmodel import select

from app.core.audit import AuditEntry
from tests.support.billing import store_policy
from tests.support.routes import problem


def test_contacts_are_replaced_as_a_list_and_audited(session, session_api):
    store_policy(session)
    assert session_api.get("/api/v1/tenants/vision/contacts").json() == {"tenant": "vision", "emails": []}
    saved = session_api.request("PUT", "/api/v1/tenants/vision/contacts",
                                json={"emails": [" bo@vision.example", "ana@vision.example"]})
    assert saved.status_code == 200, saved.text
    assert saved.json() == {"tenant": "vision", "emails": ["ana@vision.example", "bo@vision.example"]}
    assert session_api.get("/api/v1/tenants/vision/contacts").json()["emails"] == ["ana@vision.example",
                                                                                    "bo@vision.example"]
    entry = session.exec(select(AuditEntry).where(AuditEntry.action == "tenant.contacts")).one()
    assert (entry.entity_id, entry.tenant, entry.actor) == ("vision", "vision", "fiona")


def test_bad_addresses_are_422_with_paths_and_nothing_changes(session, session_api):
    store_policy(session)
    session_api.request("PUT", "/api/v1/tenants/vision/contacts", json={"emails": ["ana@vision.example"]})
    body = problem(session_api.request("PUT", "/api/v1/tenants/vision/contacts",
                                       json={"emails": ["ok@vision.example", "not-an-address", "OK@vision.example"]}),
                   422)
    assert [e["path"] for e in body["errors"]] == ["emails[1]", "emails[2]"]
    assert "twice" in body["errors"][1]["message"]
    assert session_api.get("/api/v1/tenants/vision/contacts").json()["emails"] == ["ana@vision.example"]
    assert problem(session_api.request("PUT", "/api/v1/tenants/vision/contacts", json={"emails": "x@y.example"}),
                   422)["errors"]


def test_an_unknown_tenant_is_404(session, session_api):
    store_policy(session)
    problem(session_api.get("/api/v1/tenants/nobody/contacts"), 404)
    problem(session_api.request("PUT", "/api/v1/tenants/nobody/contacts", json={"emails": []}), 404)
