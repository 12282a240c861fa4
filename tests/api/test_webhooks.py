"""Webhook subscriptions API: CRUD by admins, the secret shown once, 422 with field paths, deliveries and redeliver."""

from __future__ import annotations

import json

from sqlmodel import select
from standardwebhooks.webhooks import Webhook

from app.auth.principal import Principal
from app.core.audit import AuditEntry
from app.core.events import emit
from app.core.timeutil import utcnow
from app.notify.webhook_deliver import plan
from app.notify.webhook_models import WebhookDelivery
from tests.support.routes import problem

ADMIN = Principal(name="ada", roles=frozenset({"admin"}), user_id=1)
HOOK = {"url": "https://erp.example.com/hooks/chargeback", "event_types": ["period.finalized", "correction.created"],
        "description": "ERP"}


def test_create_read_change_and_delete_a_webhook(session, session_api):
    api = session_api.as_(ADMIN)
    created = api.post("/api/v1/webhooks", json=HOOK)
    assert created.status_code == 201, created.text
    body = created.json()
    secret, hook_id = body["secret"], body["id"]
    assert secret.startswith("whsec_") and Webhook(secret)  # the reference library accepts it as a secret
    assert body["event_types"] == ["correction.created", "period.finalized"] and body["active"] is True
    listed = api.get("/api/v1/webhooks").json()["items"]
    assert [h["id"] for h in listed] == [hook_id] and "secret" not in listed[0]
    assert "secret" not in api.get(f"/api/v1/webhooks/{hook_id}").json()
    changed = api.request("PATCH", f"/api/v1/webhooks/{hook_id}", json={"active": False, "event_types": ["ingestion.gap"]})
    assert changed.status_code == 200 and changed.json()["active"] is False
    assert changed.json()["event_types"] == ["ingestion.gap"] and changed.json()["url"] == HOOK["url"]
    rotated = api.post(f"/api/v1/webhooks/{hook_id}/secret").json()
    assert rotated["secret"] != secret and rotated["previous_secret_until"] is not None
    assert api.request("DELETE", f"/api/v1/webhooks/{hook_id}").status_code == 204
    problem(api.get(f"/api/v1/webhooks/{hook_id}"), 404)
    actions = [e.action for e in session.exec(select(AuditEntry).where(AuditEntry.entity == "webhook"))]
    assert actions == ["webhook.create", "webhook.update", "webhook.rotate", "webhook.delete"]
    assert not any(secret in (e.after or "") + (e.before or "") for e in session.exec(select(AuditEntry)))


def test_bad_urls_and_unknown_event_types_are_422_with_paths(session, session_api):
    api = session_api.as_(ADMIN)
    body = problem(api.post("/api/v1/webhooks", json={**HOOK, "url": "ftp://erp.example.com/x"}), 422)
    assert [e["path"] for e in body["errors"]] == ["body.url"] and "https://" in body["errors"][0]["message"]
    body = problem(api.post("/api/v1/webhooks", json={**HOOK, "event_types": ["period.rated", "period.exploded"]}), 422)
    assert [e["path"] for e in body["errors"]] == ["body.event_types.1"]
    body = problem(api.post("/api/v1/webhooks", json={**HOOK, "event_types": []}), 422)
    assert [e["path"] for e in body["errors"]] == ["body.event_types"]
    hook_id = api.post("/api/v1/webhooks", json=HOOK).json()["id"]
    body = problem(api.request("PATCH", f"/api/v1/webhooks/{hook_id}", json={"url": "https://a:b@erp.example.com/"}),
                   422)
    assert body["errors"][0]["path"] == "body.url" and "credentials" in body["errors"][0]["message"]
    assert api.get(f"/api/v1/webhooks/{hook_id}").json()["url"] == HOOK["url"]  # nothing saved


def test_deliveries_are_listed_and_redelivered(session, session_api):
    api = session_api.as_(ADMIN)
    hook_id = api.post("/api/v1/webhooks", json=HOOK).json()["id"]
    event = emit(session=session, type="correction.created", tenant="vision", payload={"line_id": "x"})
    [row] = plan(session=session)
    [listed] = api.get(f"/api/v1/webhooks/{hook_id}/deliveries").json()["items"]
    assert listed["event_id"] == event.id and listed["status"] == "pending" and listed["tenant"] == "vision"
    assert listed["attempt_log"] == []
    again = api.post(f"/api/v1/webhooks/{hook_id}/deliveries/{row.id}/redeliver")
    assert again.status_code == 202 and again.json()["status"] == "pending"
    problem(api.post(f"/api/v1/webhooks/{hook_id + 1}/deliveries/{row.id}/redeliver"), 404)
    assert session.get(WebhookDelivery, row.id).round_attempts == 0


def test_only_admins_manage_webhooks(session, session_api):
    problem(session_api.get("/api/v1/webhooks"), 403)  # finance
    problem(session_api.post("/api/v1/webhooks", json=HOOK), 403)


def test_the_openapi_document_describes_what_receivers_get(session, session_api):
    """Each event type is an OpenAPI `webhooks` operation whose body schema a real delivered body satisfies."""
    from jsonschema import Draft202012Validator

    from app.billing import periods
    from app.core.events import EVENT_TYPES, Event
    from app.notify.webhook_deliver import body_of
    from tests.support.billing import add_hour, store_policy

    doc = session_api.get("/api/v1/openapi.json").json()
    assert sorted(doc["webhooks"]) == sorted(EVENT_TYPES)
    v = store_policy(session)
    add_hour(session, hour=utcnow().replace(day=1, hour=0, minute=0, second=0, microsecond=0), version=v.id)
    periods.rate(session=session, period=utcnow().strftime("%Y-%m"), actor="fin")

    for event in session.exec(select(Event)):
        ref = doc["webhooks"][event.type]["post"]["requestBody"]["content"]["application/json"]["schema"]["$ref"]
        validator = Draft202012Validator({"$ref": ref, "components": doc["components"]})
        body = json.loads(body_of(event))
        validator.validate(body)
        assert list(validator.iter_errors({**body, "data": {**body["data"], "surprise": 1}}))  # extra fields refused
    headers = {p["name"] for p in doc["webhooks"]["period.rated"]["post"]["parameters"]}
    assert headers == {"webhook-id", "webhook-timestamp", "webhook-signature"}


def test_an_internal_receiver_is_a_422_at_body_url_without_the_allow_list(session, session_api, monkeypatch):
    from app.core import settings as settings_module

    monkeypatch.setenv("CHARGEBACK_WEBHOOK_ALLOW", "")
    settings_module.get_settings.cache_clear()
    try:
        api = session_api.as_(ADMIN)
        for url in ("http://127.0.0.1:9090/internal", "https://169.254.169.254/latest/", "https://0x7f000001/"):
            body = problem(api.post("/api/v1/webhooks", json={**HOOK, "url": url}), 422)
            assert [e["path"] for e in body["errors"]] == ["body.url"], body
        assert "loopback" in problem(api.post("/api/v1/webhooks", json={**HOOK, "url": "https://[::1]/"}),
                                     422)["errors"][0]["message"]
        assert api.get("/api/v1/webhooks").json()["items"] == []
    finally:
        monkeypatch.undo()
        settings_module.get_settings.cache_clear()
