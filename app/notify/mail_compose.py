"""The message of one mail_send row: recipients, text, and the issued PDF exactly as stored at close."""

from __future__ import annotations

import email.utils
import json
from dataclasses import dataclass
from datetime import datetime
from email.message import EmailMessage

from sqlmodel import Session, select

from app.billing import issued
from app.billing.models import BillingPeriod, DocumentKind, IssuedDocument, PeriodStatus
from app.core.events import Event
from app.core.safe_text import printable
from app.core.settings import Settings
from app.notify.mail_contacts import contacts_of
from app.notify.mail_models import FINANCE, MailKind, MailSend


@dataclass(frozen=True)
class Outcome:
    """What a row can do now: `message` to send, or `wait` for its document, or `skip` with the reason."""

    message: EmailMessage | None = None
    recipients: tuple[str, ...] = ()
    wait: str | None = None
    skip: str | None = None


def recipients_for(*, session: Session, settings: Settings, audience: str) -> list[str]:
    """A tenant's billing contacts, or the finance recipients for FINANCE."""
    if audience == FINANCE:
        return settings.finance_addresses
    return contacts_of(session=session, tenant=audience)


def issued_pdf(*, session: Session, month: str, kind: str, tenant: str) -> bytes | None:
    """The bytes stored when the period was finalized (None while not issued yet), checked against the sealed
    manifest: a document not as issued raises DocumentTampered and is never mailed (a missing one is held back
    as not issued; downloads and `chargeback verify` report it)."""
    period = session.exec(select(BillingPeriod).where(BillingPeriod.month == month)).first()
    if period is None or period.status != PeriodStatus.FINALIZED or issued.is_pending(period):
        return None
    if session.get(IssuedDocument, (period.id, kind, tenant)) is None:
        return None
    doc = issued.checked_document(session=session, period=period, kind=kind, tenant=tenant)
    return doc.content if doc is not None else None


def _budget_text(data: dict) -> tuple[str, str]:
    who = f"Tenant {data['tenant']}" if data.get("tenant") else f"Department {data.get('department')}"
    basis = "forecast month-end cost" if data.get("basis") == "forecast" else "cost so far"
    currency = f" {data['currency']}" if data.get("currency") else ""
    subject = f"Budget alert {data.get('month')}: {who} at {data.get('threshold_percent')} %"
    body = (f"{who} has reached {data.get('threshold_percent')} % of its budget for {data.get('month')} "
            f"({basis}).\n\nAmount: {data.get('amount')}{currency}\nBudget: {data.get('budget')}{currency}\n")
    return subject, body


def _headers(message: EmailMessage, *, settings: Settings, row: MailSend, recipients: list[str], subject: str,
             now: datetime) -> None:
    message["From"] = settings.mail_from
    message["To"] = ", ".join(recipients)
    # Names in a subject come from the policy (refused there with control characters since issue 25), but an
    # event raised before keeps its payload: a U+2028 or NEL in a header fails the send for good.
    message["Subject"] = printable(subject)
    message["Date"] = email.utils.format_datetime(now)
    message["Message-ID"] = row.message_id
    message["Auto-Submitted"] = "auto-generated"  # RFC 3834: no out-of-office replies to the portal


def compose(*, session: Session, settings: Settings, row: MailSend, now: datetime) -> Outcome:
    """Build the row's message from what is stored now (contacts, issued document, event payload)."""
    attachment: tuple[bytes, str] | None = None
    if row.kind == MailKind.BUDGET:
        event = session.get(Event, row.event_id)
        subject, body = _budget_text(json.loads(event.payload) if event is not None else {})
    else:
        kind = DocumentKind.INVOICE_PDF if row.kind == MailKind.INVOICE else DocumentKind.REPORT_PDF
        content = issued_pdf(session=session, month=row.period or "", kind=kind, tenant=row.audience)
        if content is None:
            return Outcome(wait=f"the {kind.value} of {row.period} is not issued yet")
        if row.kind == MailKind.INVOICE:
            subject = f"Invoice {row.period}: {row.audience}"
            body = (f"The GPU chargeback invoice of {row.audience} for {row.period} is attached: the document "
                    f"issued when the month was finalized.\n")
            attachment = (content, f"invoice-{row.period}-{row.audience}.pdf")
        else:
            subject = f"Monthly GPU chargeback report {row.period}"
            body = f"The monthly report for {row.period}, as issued when the month was finalized, is attached.\n"
            attachment = (content, f"report-{row.period}.pdf")
    recipients = recipients_for(session=session, settings=settings, audience=row.audience)
    if not recipients:
        whose = "finance (CHARGEBACK_FINANCE_RECIPIENTS)" if row.audience == FINANCE else f"tenant {row.audience}"
        return Outcome(skip=f"no recipients: no address configured for {whose}")
    message = EmailMessage()
    _headers(message, settings=settings, row=row, recipients=recipients, subject=subject, now=now)
    message.set_content(body)
    if attachment is not None:
        message.add_attachment(attachment[0], maintype="application", subtype="pdf", filename=attachment[1])
    return Outcome(message=message, recipients=tuple(recipients))
