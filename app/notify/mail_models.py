"""Tables of the e-mailed statements: billing contacts per tenant, and one row per message to send.

Contacts are operational data (an address changes when someone leaves), so they live here and are
edited by admins and finance, not in the reviewed, versioned policy document.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from sqlalchemy import Column, Text, UniqueConstraint
from sqlmodel import Field, SQLModel

import app.core.models  # noqa: F401  (naming convention)


class TenantContact(SQLModel, table=True):
    """One billing contact of a tenant: the address its invoice and budget alerts are mailed to."""

    __tablename__ = "tenant_contact"

    tenant: str = Field(primary_key=True)
    email: str = Field(primary_key=True, max_length=254)
    created_at: datetime


class MailStatus(StrEnum):
    PENDING = "pending"  # not tried yet, or waiting for its document to be issued
    SENT = "sent"  # the SMTP server accepted it
    FAILED = "failed"  # the last attempt failed; retried at next_attempt_at (none: given up)
    SKIPPED = "skipped"  # not sent on purpose (mail disabled, no recipients); "retry now" sends it


class MailKind(StrEnum):
    INVOICE = "invoice"  # a tenant's issued invoice PDF, to the tenant's contacts
    REPORT = "report"  # the issued monthly report PDF, to finance
    BUDGET = "budget"  # a budget threshold crossed: to the tenant's contacts, a department's to finance


FINANCE = ""  # audience of a message to the finance recipients


class MailPlanned(SQLModel, table=True):
    """An event whose messages have been planned (its rows in mail_send exist, if it needed any)."""

    __tablename__ = "mail_planned"

    event_id: str = Field(primary_key=True, foreign_key="event.id", ondelete="CASCADE")
    planned_at: datetime


class MailSend(SQLModel, table=True):
    """One message of one event: to a tenant's contacts or to finance, tried until sent or given up."""

    __tablename__ = "mail_send"
    __table_args__ = (UniqueConstraint("event_id", "kind", "audience", name="uq_mail_send_event_kind_audience"),)

    id: int | None = Field(default=None, primary_key=True)
    event_id: str = Field(foreign_key="event.id", ondelete="CASCADE", index=True)
    kind: str
    audience: str = ""  # a tenant name (its contacts), or "" for the finance recipients
    period: str | None = None  # "YYYY-MM" for invoice and report messages
    message_id: str  # fixed when planned: a re-send after a crash carries the same Message-ID
    status: str = Field(default=MailStatus.PENDING, index=True)
    recipients: str = ""  # comma list of the addresses of the last attempt
    attempts: int = 0
    last_error: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    created_at: datetime
    first_attempt_at: datetime | None = None  # start of the day of retries
    next_attempt_at: datetime | None = Field(default=None, index=True)  # due from then (None: not scheduled)
    claimed_until: datetime | None = None  # a worker is sending it; another takes it only after this
    sent_at: datetime | None = None
