"""The webhooks admin page: create (secret once, errors beside the field, input kept), change, rotate, redeliver."""

from __future__ import annotations

import pytest
from sqlmodel import select

from app.core.events import emit
from app.notify.webhook_deliver import plan
from app.notify.webhook_models import WebhookDelivery, WebhookSubscription
from tests.support.routes import make_user, sign_in

pytestmark = pytest.mark.anyio


async def test_an_admin_creates_a_webhook_and_sees_the_secret_once(client, session):
    token = sign_in(client, session, make_user(session, "root", "admin"))
    page = await client.get("/admin/webhooks")
    assert page.status_code == 200 and "New webhook" in page.text and 'href="/admin/webhooks"' in page.text
    bad = await client.post("/admin/webhooks", data={"url": "ftp://erp.example/x", "description": "ERP",
                                                     "event_types": ["period.rated", "period.exploded"],
                                                     "csrf_token": token})
    assert bad.status_code == 422
    assert 'aria-invalid="true"' in bad.text and "https://" in bad.text and "period.exploded" in bad.text
    assert 'value="ftp://erp.example/x"' in bad.text and 'value="ERP"' in bad.text  # the input kept
    assert session.exec(select(WebhookSubscription)).all() == []
    made = await client.post("/admin/webhooks", data={"url": "https://erp.example/hooks", "description": "ERP",
                                                      "event_types": ["period.finalized"], "csrf_token": token})
    assert made.status_code == 200 and "Copy the signing secret" in made.text
    [sub] = session.exec(select(WebhookSubscription)).all()
    assert f'value="{sub.secret}"' in made.text
    detail = await client.get(f"/admin/webhooks/{sub.id}")
    assert sub.secret not in detail.text and "https://erp.example/hooks" in detail.text
    rotated = await client.post(f"/admin/webhooks/{sub.id}/secret", data={"csrf_token": token})
    session.refresh(sub)
    assert rotated.status_code == 200 and f'value="{sub.secret}"' in rotated.text and sub.previous_secret


async def test_an_internal_receiver_is_a_form_error_without_the_allow_list(client, session, monkeypatch):
    from app.core import settings as settings_module

    token = sign_in(client, session, make_user(session, "root", "admin"))
    monkeypatch.setenv("CHARGEBACK_WEBHOOK_ALLOW", "")
    settings_module.get_settings.cache_clear()
    try:
        bad = await client.post("/admin/webhooks", data={"url": "https://169.254.169.254/latest/meta-data/",
                                                         "event_types": ["period.rated"], "csrf_token": token})
    finally:
        monkeypatch.undo()
        settings_module.get_settings.cache_clear()
    assert bad.status_code == 422 and 'aria-invalid="true"' in bad.text
    assert "cloud metadata address" in bad.text and 'value="https://169.254.169.254/latest/meta-data/"' in bad.text
    assert session.exec(select(WebhookSubscription)).all() == []


async def test_an_admin_pauses_a_webhook_and_redelivers_an_event(client, session):
    token = sign_in(client, session, make_user(session, "root", "admin"))
    await client.post("/admin/webhooks", data={"url": "https://erp.example/hooks", "event_types": ["ingestion.gap"],
                                               "csrf_token": token})
    [sub] = session.exec(select(WebhookSubscription)).all()
    event = emit(session=session, type="ingestion.gap", payload={"hour": "2026-11-01T00:00:00Z"})
    [row] = plan(session=session)
    page = await client.get(f"/admin/webhooks/{sub.id}")
    assert f'id="delivery-{row.id}"' in page.text and event.id in page.text and "none yet" in page.text
    sent = await client.post(f"/admin/webhooks/{sub.id}/deliveries/{row.id}/redeliver", data={"csrf_token": token})
    assert sent.status_code == 303
    session.refresh(row)
    assert session.get(WebhookDelivery, row.id).status == "pending"
    paused = await client.post(f"/admin/webhooks/{sub.id}", data={"url": sub.url, "event_types": ["ingestion.gap"],
                                                                  "csrf_token": token})  # "active" unticked
    assert paused.status_code == 303
    session.refresh(sub)
    assert sub.active is False
    refused = await client.post(f"/admin/webhooks/{sub.id}/deliveries/{row.id}/redeliver", data={"csrf_token": token})
    assert refused.status_code == 409 and "paused" in refused.text
    gone = await client.post(f"/admin/webhooks/{sub.id}/delete", data={"csrf_token": token})
    assert gone.status_code == 303 and session.exec(select(WebhookDelivery)).all() == []


async def test_finance_cannot_open_the_webhooks_page(client, session):
    sign_in(client, session, make_user(session, "fin", "finance"))
    assert (await client.get("/admin/webhooks")).status_code == 403
    page = await client.get("/admin/contacts")
    assert 'href="/admin/webhooks"' not in page.text


async def test_redeliver_from_the_page_reaches_the_receiver_again(committed_app, fresh_engine, tmp_path):
    """End to end: a webhook made on the page, an event delivered by the worker to a real receiver process,
    "Redeliver" pressed on the page, the worker's next round sends the same webhook-id again, verified."""
    from sqlmodel import Session
    from standardwebhooks.webhooks import Webhook

    from app.core.db import unit_of_work
    from app.notify.webhook_deliver import webhook_task
    from app.notify.webhook_models import WebhookDelivery
    from tests.support.routes import asgi_client
    from tests.support.webhooks import webhook_receiver

    with webhook_receiver(tmp_path / "rx") as rx:
        async with asgi_client(committed_app) as client:
            with Session(fresh_engine) as s:
                token = sign_in(client, s, make_user(s, "root", "admin"))
            made = await client.post("/admin/webhooks", data={"url": rx.url("/erp"), "event_types": ["ingestion.gap"],
                                                              "csrf_token": token})
            assert made.status_code == 200
            secret = made.text.split('id="new-secret" class="mono" readonly value="')[1].split('"')[0]
            with unit_of_work(fresh_engine) as s:
                event = emit(session=s, type="ingestion.gap", payload={"hour": "2026-11-01T00:00:00Z"})
            webhook_task(fresh_engine)
            with Session(fresh_engine) as s:
                row = s.exec(select(WebhookDelivery)).one()
            assert row.status == "delivered"
            page = await client.get(f"/admin/webhooks/{row.subscription_id}")
            assert "HTTP 200" in page.text and "received" in page.text  # the attempt and the start of its answer
            sent = await client.post(f"/admin/webhooks/{row.subscription_id}/deliveries/{row.id}/redeliver",
                                     data={"csrf_token": token})
            assert sent.status_code == 303
            assert len(rx.requests()) == 1  # the page queues; only the worker sends
            webhook_task(fresh_engine)
    first, second = rx.requests()
    assert first.webhook_id == second.webhook_id == event.id
    for request in (first, second):
        Webhook(secret).verify(request.body, request.headers)
