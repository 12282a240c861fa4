"""E-mailed statements against a real SMTP server process (aiosmtpd), on SQLite and PostgreSQL.

Close a period, run the worker's mail task, and read what the server received: one message per
tenant with contacts, its attachment the issued invoice's exact bytes, the report to finance; no
second copy on another run; a wrong password or a server that is down leaves the send failed with
the reason, retried later; a document not issued yet keeps its send pending without an attempt.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import delete, insert
from sqlmodel import Session, select

from app.billing import periods
from app.billing.budget_alerts import budget_task
from app.billing.hour_rates import hour_rates_task
from app.billing.issuing import issue_task
from app.billing.models import BillingPeriod, IssuedDocument
from app.cli import WORKER_TASKS
from app.core.db import unit_of_work
from app.core.events import emit
from app.core.settings import Settings
from app.metrics.reconcile.task import reconcile_task
from app.metrics.worker import run_tasks
from app.notify import mail_deliver
from app.notify.mail_contacts import replace_contacts
from app.notify.mail_deliver import claim_next, deliver_due, lease, mail_task, retry_now, send_smtp
from app.notify.mail_models import MailSend
from app.notify.mail_plan import DISABLED
from app.notify.webhook_deliver import webhook_task
from tests.support.billing import add_hour, record_gaps, store_policy
from tests.support.clock import frozen
from tests.support.server import free_port
from tests.support.smtp import PASSWORD, USER, self_signed, smtp_server
from tests.support.threads import at_once

OCT1 = datetime(2026, 10, 1, tzinfo=UTC)
NOW = datetime(2026, 11, 2, 9, tzinfo=UTC)
FINANCE = "finance@corp.example"
CONTACTS = {"search": ["ops@search.example"], "vision": ["ana@vision.example", "bo@vision.example"]}


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def mid(received) -> str:
    """The Message-ID as sent (a long one is folded onto a line of its own in transit)."""
    return str(received.message["Message-ID"]).strip()


def settings_for(port: int, **changes) -> Settings:
    values = dict(smtp_host="127.0.0.1", smtp_port=port, smtp_starttls=False, smtp_username=USER,
                  smtp_password=PASSWORD, smtp_timeout_s=10, mail_from="Chargeback <billing@portal.example>",
                  finance_recipients=FINANCE)
    return Settings(**{**values, **changes})


def close_october(engine, *, issue: bool = True) -> None:
    """October with the SPEC example's tenants, contacts for search and vision (etl has none), finalized and
    (unless `issue` is False) its documents issued by the worker's issuing step."""
    with unit_of_work(engine) as s:
        v = store_policy(s)
        add_hour(s, hour=OCT1, version=v.id)
        add_hour(s, hour=OCT1 + timedelta(hours=1), version=v.id, breaches=())
        for tenant, emails in CONTACTS.items():
            replace_contacts(session=s, tenant=tenant, emails=emails, actor="test")
    with unit_of_work(engine) as s:
        record_gaps(s, "2026-10")  # the month's other hours: gaps the source could not answer
        periods.close(session=s, period="2026-10", actor="fin", accept_gaps=True, reason="two test hours")
    if issue:
        assert issue_task(engine)


def sends(engine) -> dict[tuple[str, str], MailSend]:
    with Session(engine) as s:
        return {(r.kind, r.audience): r for r in s.exec(select(MailSend))}


def issued(engine) -> dict[tuple[str, str], bytes]:
    with Session(engine) as s:
        return {(d.kind, d.tenant): d.content for d in s.exec(select(IssuedDocument))}


def by_subject(server) -> dict[str, list]:
    out: dict[str, list] = {}
    for r in server.received():
        out.setdefault(str(r.message["Subject"]), []).append(r)
    return out


def test_a_closed_month_mails_each_invoice_and_the_report_once(fresh_engine, tmp_path):
    close_october(fresh_engine)
    docs = issued(fresh_engine)
    with smtp_server(tmp_path) as server:
        settings = settings_for(server.port)
        mail_task(fresh_engine, frozen(NOW), settings=settings)
        got = by_subject(server)
        assert sorted(got) == ["Invoice 2026-10: search", "Invoice 2026-10: vision",
                               "Monthly GPU chargeback report 2026-10"]
        rows = sends(fresh_engine)
        for tenant, emails in CONTACTS.items():
            [received] = got[f"Invoice 2026-10: {tenant}"]
            assert sorted(received.recipients) == emails
            attachment = received.attachments()[f"invoice-2026-10-{tenant}.pdf"]
            assert sha(attachment) == sha(docs[("invoice_pdf", tenant)])
            row = rows[("invoice", tenant)]
            assert mid(received) == row.message_id and row.message_id.startswith(f"<{row.event_id}.")
            assert (row.status, row.attempts, row.recipients) == ("sent", 1, ", ".join(emails))
        [report] = got["Monthly GPU chargeback report 2026-10"]
        assert report.recipients == [FINANCE]
        assert sha(report.attachments()["report-2026-10.pdf"]) == sha(docs[("report_pdf", "")])
        # etl has no contacts: recorded, not sent, and said why.
        etl = rows[("invoice", "etl")]
        assert etl.status == "skipped" and "no address configured for tenant etl" in etl.last_error

        # Again, and as a restarted worker would (the task the CLI hands the worker, a later clock): no copy.
        mail_task(fresh_engine, frozen(NOW + timedelta(minutes=5)), settings=settings)
        run_tasks([lambda engine, clock: mail_task(engine, clock, settings=settings)], engine=fresh_engine,
                  clock=frozen(NOW + timedelta(days=2)))
        assert len(server.received()) == 3
        assert mail_task in WORKER_TASKS


def test_mail_waits_for_the_issuing_step_and_then_attaches_what_it_stored(fresh_engine, tmp_path):
    close_october(fresh_engine, issue=False)
    with smtp_server(tmp_path) as server:
        settings = settings_for(server.port)
        mail_task(fresh_engine, frozen(NOW), settings=settings)  # finalized, documents pending: no event yet, no mail
        assert server.received() == [] and sends(fresh_engine) == {} and issued(fresh_engine) == {}
        # The worker's order: the issuing step before mail, so one round issues and mails.
        assert WORKER_TASKS == [hour_rates_task, budget_task, issue_task, mail_task, webhook_task, reconcile_task]
        run_tasks([issue_task, lambda engine, clock: mail_task(engine, clock, settings=settings)], engine=fresh_engine,
                  clock=frozen(NOW))
        docs = issued(fresh_engine)
        got = by_subject(server)
        assert len(server.received()) == 3
        [vision] = got["Invoice 2026-10: vision"]
        assert vision.attachments()["invoice-2026-10-vision.pdf"] == docs[("invoice_pdf", "vision")]


def test_a_wrong_password_fails_with_the_reply_and_is_retried(fresh_engine, tmp_path):
    close_october(fresh_engine)  # the close itself never depends on mail
    with smtp_server(tmp_path) as server:
        mail_task(fresh_engine, frozen(NOW), settings=settings_for(server.port, smtp_password="wrong"))
        rows = sends(fresh_engine)
        failed = rows[("invoice", "vision")]
        assert failed.status == "failed" and failed.attempts == 1
        assert failed.last_error.startswith("535") and "Authentication" in failed.last_error
        assert failed.next_attempt_at == NOW + timedelta(minutes=1)
        assert server.received() == []
        # Not due yet: nothing tried.
        mail_task(fresh_engine, frozen(NOW + timedelta(seconds=30)), settings=settings_for(server.port))
        assert sends(fresh_engine)[("invoice", "vision")].attempts == 1
        # The password fixed, the retry goes out.
        mail_task(fresh_engine, frozen(NOW + timedelta(minutes=1)), settings=settings_for(server.port))
        row = sends(fresh_engine)[("invoice", "vision")]
        assert (row.status, row.attempts, row.last_error) == ("sent", 2, None)
        assert len(server.received()) == 3


def test_server_down_leaves_sends_failed_and_retried_with_backoff(fresh_engine, tmp_path):
    close_october(fresh_engine)
    port = free_port()  # nothing listens here yet
    settings = settings_for(port)
    mail_task(fresh_engine, frozen(NOW), settings=settings)
    row = sends(fresh_engine)[("report", "")]
    assert row.status == "failed" and "ConnectionRefusedError" in row.last_error
    mail_task(fresh_engine, frozen(NOW + timedelta(minutes=1)), settings=settings)
    row = sends(fresh_engine)[("report", "")]
    assert row.attempts == 2 and row.next_attempt_at == NOW + timedelta(minutes=3)  # 1, then 2 minutes
    with smtp_server(tmp_path, port=port) as server:
        mail_task(fresh_engine, frozen(NOW + timedelta(minutes=3)), settings=settings)
        assert {r.status for r in sends(fresh_engine).values()} == {"sent", "skipped"}
        assert len(server.received()) == 3


def test_retries_stop_after_a_day_until_retry_now(fresh_engine):
    first = NOW
    assert mail_deliver.next_attempt(attempts=1, first_attempt_at=first, now=first) == first + timedelta(minutes=1)
    assert mail_deliver.next_attempt(attempts=9, first_attempt_at=first, now=first + timedelta(hours=5)) == (
        first + timedelta(hours=6))  # capped at an hour
    assert mail_deliver.next_attempt(attempts=30, first_attempt_at=first, now=first + timedelta(hours=23, minutes=30)) is None


def test_a_document_not_issued_yet_keeps_its_send_pending_without_an_attempt(fresh_engine, tmp_path):
    close_october(fresh_engine)
    with unit_of_work(fresh_engine) as s:  # as if invoices were issued by a later worker step
        period_id = s.exec(select(BillingPeriod.id).where(BillingPeriod.month == "2026-10")).one()
        vision = s.get(IssuedDocument, (period_id, "invoice_pdf", "vision"))
        kept = {"period_id": period_id, "kind": "invoice_pdf", "tenant": "vision", "content": vision.content,
                "sha256": vision.sha256, "created_at": vision.created_at}
        s.execute(delete(IssuedDocument).where(IssuedDocument.tenant == "vision"))
    with smtp_server(tmp_path) as server:
        settings = settings_for(server.port)
        mail_task(fresh_engine, frozen(NOW), settings=settings)
        row = sends(fresh_engine)[("invoice", "vision")]
        assert (row.status, row.attempts) == ("pending", 0) and "not issued yet" in row.last_error
        assert len(server.received()) == 2  # search's invoice and the report
        with unit_of_work(fresh_engine) as s:
            s.execute(insert(IssuedDocument), [kept])
        mail_task(fresh_engine, frozen(NOW + timedelta(minutes=1)), settings=settings)
        row = sends(fresh_engine)[("invoice", "vision")]
        assert (row.status, row.attempts) == ("sent", 1)
        [received] = by_subject(server)["Invoice 2026-10: vision"]
        assert sha(received.attachments()["invoice-2026-10-vision.pdf"]) == kept["sha256"]


def test_a_send_interrupted_after_smtp_accepted_it_is_resent_with_the_same_message_id(fresh_engine, tmp_path):
    close_october(fresh_engine)
    with smtp_server(tmp_path) as server:
        settings = settings_for(server.port)
        with unit_of_work(fresh_engine) as s:
            from app.notify.mail_plan import plan

            plan(session=s, settings=settings, clock=frozen(NOW))
        row_id, message = claim_next(engine=fresh_engine, settings=settings, clock=frozen(NOW))
        send_smtp(settings=settings, message=message)  # the worker dies here, before marking the row
        mail_task(fresh_engine, frozen(NOW + timedelta(minutes=1)), settings=settings)  # restarted: the claim still holds
        first = [r for r in server.received() if mid(r) == message["Message-ID"]]
        assert len(first) == 1 and len(server.received()) == 3
        mail_task(fresh_engine, frozen(NOW + lease(settings)), settings=settings)  # the lease over: sent again
        copies = [r for r in server.received() if mid(r) == message["Message-ID"]]
        assert len(copies) == 2 and len(server.received()) == 4
        with Session(fresh_engine) as s:
            assert s.get(MailSend, row_id).status == "sent"


def test_two_workers_at_once_send_each_message_once(fresh_engine, tmp_path):
    close_october(fresh_engine)
    with smtp_server(tmp_path) as server:
        settings = settings_for(server.port)
        with unit_of_work(fresh_engine) as s:
            for n in range(6):  # more messages, so both workers have something to take
                emit(session=s, type="budget.threshold", key=f"b{n}",
                     payload={"tenant": "vision", "department": None, "month": "2026-11", "threshold_percent": 50 + n,
                              "basis": "actual", "amount": "500.00", "budget": "1000.00"})
        mail_task(fresh_engine, frozen(NOW - timedelta(hours=1)), settings=settings_for(free_port()))  # plan only: all fail
        assert at_once(lambda: deliver_due(engine=fresh_engine, settings=settings, clock=frozen(NOW))) == []
        ids = [mid(r) for r in server.received()]
        assert len(ids) == 9 and len(set(ids)) == 9  # 2 invoices, the report, 6 alerts: each once


def test_budget_alerts_go_to_the_tenant_or_to_finance(fresh_engine, tmp_path):
    close_october(fresh_engine)
    with unit_of_work(fresh_engine) as s:
        emit(session=s, type="budget.threshold", tenant="vision", key="budget:vision:2026-11:80",
             payload={"tenant": "vision", "department": "research", "month": "2026-11", "threshold_percent": 80,
                      "basis": "forecast", "amount": "812.40", "budget": "1000.00"})
        emit(session=s, type="budget.threshold", key="budget:dept:research:2026-11:100",
             payload={"tenant": None, "department": "research", "month": "2026-11", "threshold_percent": 100,
                      "basis": "actual", "amount": "2050.00", "budget": "2000.00"})
    with smtp_server(tmp_path) as server:
        mail_task(fresh_engine, frozen(NOW), settings=settings_for(server.port))
        got = by_subject(server)
        [tenant] = got["Budget alert 2026-11: Tenant vision at 80 %"]
        assert sorted(tenant.recipients) == CONTACTS["vision"]
        body = tenant.message.get_body().get_content()
        assert "forecast month-end cost" in body and "812.40" in body and "1000.00" in body
        [department] = got["Budget alert 2026-11: Department research at 100 %"]
        assert department.recipients == [FINANCE] and "cost so far" in department.message.get_body().get_content()


def test_a_department_alert_raised_with_a_line_separator_in_its_name_is_still_sent(fresh_engine, tmp_path):
    """An event raised before the policy refused control characters keeps its department name: U+2028 or NEL
    in the subject made every attempt fail ("Header values may not contain linefeed"), never retried."""
    close_october(fresh_engine)
    with unit_of_work(fresh_engine) as s:
        for n, name in enumerate(("re\u2028search", "re\x85search")):
            emit(session=s, type="budget.threshold", key=f"budget:dept:odd{n}:2026-11:100",
                 payload={"tenant": None, "department": name, "month": "2026-11", "threshold_percent": 100,
                          "basis": "actual", "amount": "2050.00", "budget": "2000.00"})
    with smtp_server(tmp_path) as server:
        mail_task(fresh_engine, frozen(NOW), settings=settings_for(server.port))
        got = by_subject(server)
        assert got.keys() >= {"Budget alert 2026-11: Department reU+2028search at 100 %",
                              "Budget alert 2026-11: Department reU+0085search at 100 %"}
        for subject in got:
            assert not any(c in subject for c in "\u2028\x85\r\n")
    with Session(fresh_engine) as s:
        budget_sends = s.exec(select(MailSend).where(MailSend.kind == "budget")).all()
    assert len(budget_sends) == 2 and all(r.sent_at is not None and r.last_error is None for r in budget_sends)


def test_mail_disabled_records_skipped_and_retry_now_sends_it(fresh_engine, tmp_path):
    close_october(fresh_engine)
    assert mail_task(fresh_engine, frozen(NOW), settings=Settings(smtp_host=None, finance_recipients=FINANCE)) == []
    rows = sends(fresh_engine)
    assert {r.status for r in rows.values()} == {"skipped"} and rows[("report", "")].last_error == DISABLED
    with unit_of_work(fresh_engine) as s:
        retry_now(session=s, send_id=rows[("report", "")].id, now=NOW)
    with smtp_server(tmp_path) as server:
        mail_task(fresh_engine, frozen(NOW + timedelta(minutes=1)), settings=settings_for(server.port))
        assert list(by_subject(server)) == ["Monthly GPU chargeback report 2026-10"]
    assert sends(fresh_engine)[("report", "")].status == "sent"


def test_starttls_with_a_private_ca(fresh_engine, tmp_path):
    close_october(fresh_engine)
    cert, key = self_signed(tmp_path)
    with smtp_server(tmp_path, cert=(cert, key)) as server:
        # Without the CA the certificate is refused, and the reason says so.
        mail_task(fresh_engine, frozen(NOW), settings=settings_for(server.port, smtp_starttls=True))
        assert "CERTIFICATE_VERIFY_FAILED" in sends(fresh_engine)[("report", "")].last_error
        mail_task(fresh_engine, frozen(NOW + timedelta(minutes=1)),
                  settings=settings_for(server.port, smtp_starttls=True, smtp_ca_file=str(cert)))
        assert len(server.received()) == 3


def test_implicit_tls(fresh_engine, tmp_path):
    close_october(fresh_engine)
    cert, key = self_signed(tmp_path)
    with smtp_server(tmp_path, cert=(cert, key), implicit_tls=True) as server:
        mail_task(fresh_engine, frozen(NOW), settings=settings_for(server.port, smtp_ssl=True, smtp_ca_file=str(cert)))
        assert len(server.received()) == 3
        assert {r.status for r in sends(fresh_engine).values()} == {"sent", "skipped"}


@pytest.mark.parametrize("address, problem", [
    ("no-at-sign", "name@domain"), ("a b@example.com", "character"), ("a@localhost", "host name"),
    ("a@-bad-.example", "host name"), ("x" * 65 + "@example.com", "character"),
    ("a\u2028b@example.com", "U+2028"), ("ana@vision.example\x85", "U+0085"),
    ("ana@vision\u2028.example", "U+2028"), ("\tana@vision.example", "U+0009"),
])
def test_bad_addresses_are_refused_with_their_path(session, address, problem):
    from app.core.errors import Invalid

    store_policy(session)
    with pytest.raises(Invalid) as caught:
        replace_contacts(session=session, tenant="vision", emails=["ok@vision.example", address], actor="t")
    [error] = caught.value.errors
    assert error.path == "emails[1]" and problem in error.message


def test_an_international_domain_is_stored_in_its_ascii_form(session):
    store_policy(session)
    saved = replace_contacts(session=session, tenant="vision", emails=["Ana@Bücher.Example"], actor="t")
    assert saved == ["Ana@xn--bcher-kva.example"]  # sendable without SMTPUTF8
