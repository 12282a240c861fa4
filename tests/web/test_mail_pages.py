"""The billing e-mail admin page: contacts per tenant (errors beside the field, input kept) and retry now."""

from __future__ import annotations

import pytest
from sqlmodel import select

from app.core.events import emit
from app.core.settings import Settings
from app.notify.mail_contacts import contacts_of
from app.notify.mail_models import MailSend
from app.notify.mail_plan import plan
from tests.support.billing import store_policy
from tests.support.routes import make_user, sign_in

pytestmark = pytest.mark.anyio


async def test_finance_edits_contacts_and_sees_errors_beside_the_field(client, session):
    store_policy(session)
    token = sign_in(client, session, make_user(session, "fin", "finance"))
    page = await client.get("/admin/contacts")
    assert page.status_code == 200 and "Billing contacts" in page.text and "vision" in page.text
    assert 'href="/admin/users"' not in page.text  # the admin-only tabs are not offered to finance
    saved = await client.post("/admin/contacts/vision", data={"emails": "ana@vision.example\nbo@vision.example",
                                                              "csrf_token": token})
    assert saved.status_code == 303
    assert contacts_of(session=session, tenant="vision") == ["ana@vision.example", "bo@vision.example"]
    bad = await client.post("/admin/contacts/vision", data={"emails": "ana@vision.example\nbroken@",
                                                            "csrf_token": token})
    assert bad.status_code == 422
    assert "emails" in bad.text and "broken@" in bad.text and 'aria-invalid="true"' in bad.text
    assert contacts_of(session=session, tenant="vision") == ["ana@vision.example", "bo@vision.example"]


async def test_a_textarea_s_crlf_lines_save_and_a_line_separator_is_refused_readably(client, session):
    store_policy(session)
    token = sign_in(client, session, make_user(session, "fin", "finance"))
    saved = await client.post("/admin/contacts/vision", data={"emails": "ana@vision.example\r\nbo@vision.example\r\n",
                                                              "csrf_token": token})
    assert saved.status_code == 303
    assert contacts_of(session=session, tenant="vision") == ["ana@vision.example", "bo@vision.example"]
    bad = await client.post("/admin/contacts/vision", data={"emails": "ana@vision.example\u2028cy@vision.example",
                                                            "csrf_token": token})
    assert bad.status_code == 422 and "U+2028" in bad.text and 'aria-invalid="true"' in bad.text
    assert contacts_of(session=session, tenant="vision") == ["ana@vision.example", "bo@vision.example"]


async def test_a_skipped_send_is_listed_and_retry_now_queues_it(client, session):
    store_policy(session)
    token = sign_in(client, session, make_user(session, "root", "admin"))
    emit(session=session, type="budget.threshold", tenant="vision", key="b:vision",
         payload={"tenant": "vision", "department": None, "month": "2026-11", "threshold_percent": 80,
                  "basis": "actual", "amount": "800.00", "budget": "1000.00"})
    [row] = plan(session=session, settings=Settings(smtp_host=None))
    page = await client.get("/admin/contacts")
    assert f'id="send-{row.id}"' in page.text and "skipped" in page.text and "CHARGEBACK_SMTP_HOST" in page.text
    retried = await client.post(f"/admin/mail/{row.id}/retry", data={"csrf_token": token})
    assert retried.status_code == 303
    again = session.exec(select(MailSend).where(MailSend.id == row.id)).one()
    session.refresh(again)
    assert again.status == "pending" and again.next_attempt_at is not None and again.attempts == 0
    assert (await client.post("/admin/mail/999999/retry", data={"csrf_token": token})).status_code == 404
