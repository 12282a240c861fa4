"""Delivering planned e-mail from the worker: claim a row, send it over SMTP, record the outcome.

A row is claimed (app/notify/outbox.py: PostgreSQL `FOR UPDATE SKIP LOCKED`, so two workers take
different rows; SQLite the write lock) in a short transaction of its own that counts the attempt and sets a lease
(`claimed_until`) from when the claim is taken. The SMTP conversation happens outside any transaction; a
second transaction marks the row sent or failed, dated when the server answered. A worker killed after the SMTP server accepted the message but before
that mark leaves the row claimed: once the lease has passed it is sent again, with the same
Message-ID (at least once; a receiving system may deduplicate by it, a person sees two copies).
Failures are retried with exponential backoff (1 minute doubling to 1 hour) for a day from the
first attempt, then left failed until someone presses "retry now".
"""

from __future__ import annotations

import logging
import smtplib
import ssl
from collections.abc import Callable
from datetime import datetime, timedelta
from email.message import EmailMessage

from sqlalchemy import update
from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from app.core.db import sqlite_write_lock, unit_of_work
from app.core.errors import Conflict, NotFound
from app.core.masking import configured_secrets, mask
from app.core.settings import Settings, get_settings
from app.core.timeutil import utcnow
from app.notify.mail_compose import compose
from app.notify.mail_models import MailSend, MailStatus
from app.notify.mail_plan import DISABLED, plan
from app.notify.outbox import Backoff, claim_first, due

log = logging.getLogger(__name__)
# 1 minute doubling to an hour, for a day from the first attempt.
BACKOFF = Backoff(delays=tuple(timedelta(minutes=m) for m in (1, 2, 4, 8, 16, 32, 60)), window=timedelta(days=1))
WAIT_FOR_DOCUMENT = timedelta(minutes=1)  # a row whose document is not issued yet looks again after this


def lease(settings: Settings) -> timedelta:
    """How long a claim holds: longer than any SMTP conversation (connect, TLS, auth, data) can take."""
    return timedelta(seconds=max(300.0, 4 * settings.smtp_timeout_s))


def next_attempt(*, attempts: int, first_attempt_at: datetime, now: datetime) -> datetime | None:
    """When to try again after `attempts` failures (None: the day of retries is over)."""
    return BACKOFF.next_attempt(failures=attempts, first_attempt_at=first_attempt_at, now=now)


def smtp_reason(exc: BaseException) -> str:
    """The SMTP server's reply (code and text) or the connection error, for the admin page."""
    if isinstance(exc, smtplib.SMTPRecipientsRefused):
        return "; ".join(f"{rcpt}: {code} {_text(msg)}" for rcpt, (code, msg) in sorted(exc.recipients.items()))
    if isinstance(exc, smtplib.SMTPSenderRefused):
        return f"sender {exc.sender} refused: {exc.smtp_code} {_text(exc.smtp_error)}"
    if isinstance(exc, smtplib.SMTPResponseException):
        return f"{exc.smtp_code} {_text(exc.smtp_error)}"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _text(value: bytes | str) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def send_smtp(*, settings: Settings, message: EmailMessage) -> dict[str, tuple[int, bytes]]:
    """Hand one message to the SMTP server; returns the recipients it refused (the others accepted)."""
    assert settings.smtp_host
    timeout = settings.smtp_timeout_s
    context = ssl.create_default_context(cafile=settings.smtp_ca_file)
    if settings.smtp_ssl:
        client: smtplib.SMTP = smtplib.SMTP_SSL(settings.smtp_host, settings.smtp_port, timeout=timeout, context=context)
    else:
        client = smtplib.SMTP(settings.smtp_host, settings.smtp_port, timeout=timeout)
    with client:
        if settings.smtp_starttls and not settings.smtp_ssl:
            client.starttls(context=context)
        if settings.smtp_username:
            client.login(settings.smtp_username, settings.smtp_password or "")
        return client.send_message(message)


def claim_next(*, engine: Engine, settings: Settings,
               clock: Callable[[], datetime] = utcnow) -> tuple[int, EmailMessage] | None:
    """Claim the next due row and build its message (committed); None when nothing is due."""
    while True:
        with unit_of_work(engine) as session:
            sqlite_write_lock(session)
            now = clock()  # once SQLite's lock is held: the lease runs from when the claim is taken
            row = claim_first(session, due(MailSend, now, statuses=(MailStatus.PENDING, MailStatus.FAILED)), MailSend)
            if row is None:
                return None
            try:
                outcome = compose(session=session, settings=settings, row=row, now=now)
            except Exception as exc:  # a message that cannot be built (a bad header): not retried, others go on
                log.exception("mail %s cannot be composed", row.id)
                row.status, row.last_error, row.next_attempt_at = MailStatus.FAILED, f"cannot compose: {exc}", None
                session.add(row)
                continue
            if outcome.wait is not None:  # not an attempt: look again once the document may exist
                row.next_attempt_at, row.last_error = now + WAIT_FOR_DOCUMENT, outcome.wait
                session.add(row)
                continue
            if outcome.skip is not None:
                row.status, row.last_error, row.next_attempt_at = MailStatus.SKIPPED, outcome.skip, None
                session.add(row)
                continue
            row.attempts += 1
            row.first_attempt_at = row.first_attempt_at or now
            row.claimed_until = now + lease(settings)
            row.recipients = ", ".join(outcome.recipients)
            session.add(row)
            assert row.id is not None and outcome.message is not None
            return row.id, outcome.message


def _mark(*, engine: Engine, row_id: int, now: datetime, error: str | None, note: str | None = None) -> MailSend:
    """Record the attempt's outcome at `now`, when the server answered: sent (with `note` on refused recipients),
    or failed with `error`."""
    with unit_of_work(engine) as session:
        sqlite_write_lock(session)
        row = session.get(MailSend, row_id)
        assert row is not None
        row.claimed_until = None
        if error is None:
            row.status, row.sent_at, row.next_attempt_at, row.last_error = MailStatus.SENT, now, None, note
        else:
            row.status, row.last_error = MailStatus.FAILED, error
            row.next_attempt_at = next_attempt(attempts=row.attempts, first_attempt_at=row.first_attempt_at or now,
                                               now=now)
        session.add(row)
        return row


def deliver_due(*, engine: Engine, settings: Settings, clock: Callable[[], datetime] = utcnow,
                limit: int = 200) -> list[MailSend]:
    """Send due rows one by one (at most `limit`); each outcome is committed before the next."""
    done = []
    secrets = configured_secrets(settings)  # a relay may repeat the AUTH line (base64 of the password) in its reply
    for _ in range(limit):
        claimed = claim_next(engine=engine, settings=settings, clock=clock)
        if claimed is None:
            break
        row_id, message = claimed
        error = note = None
        try:
            refused = send_smtp(settings=settings, message=message)
            if refused:  # the others got it: sent, with the refusals kept beside it
                note = mask("refused: " + "; ".join(f"{r}: {c} {_text(m)}" for r, (c, m) in sorted(refused.items())),
                            secrets)
        except (smtplib.SMTPException, OSError) as exc:
            error = mask(smtp_reason(exc), secrets)
            log.warning("mail %s not sent: %s", row_id, error)
        except Exception as exc:  # anything else: recorded and retried like a refusal, never left claimed
            error = mask(smtp_reason(exc), secrets)
            log.warning("mail %s not sent: %s", row_id, error)
        done.append(_mark(engine=engine, row_id=row_id, now=clock(), error=error, note=note))
    return done


def mail_task(engine: Engine, clock: Callable[[], datetime] = utcnow, *,
              settings: Settings | None = None) -> list[MailSend]:
    """The worker task: plan messages for new events, then send what is due (nothing when mail is disabled)."""
    settings = settings or get_settings()
    with unit_of_work(engine) as session:
        plan(session=session, settings=settings, clock=clock)
    if not settings.smtp_host:
        return []
    return deliver_due(engine=engine, settings=settings, clock=clock)


def recent_sends(*, session: Session, limit: int = 50) -> list[MailSend]:
    """The newest rows first, for the admin page."""
    return list(session.exec(select(MailSend).order_by(MailSend.id.desc()).limit(limit)))  # type: ignore[union-attr]


def retry_now(*, session: Session, send_id: int, now: datetime) -> MailSend:
    """Queue a row for the worker's next round, with a new day of retries (flush, never commit)."""
    row = session.get(MailSend, send_id)
    if row is None:
        raise NotFound(f"No e-mail send {send_id}")
    if row.status == MailStatus.SENT:
        raise Conflict(f"E-mail send {send_id} was sent at {row.sent_at:%Y-%m-%d %H:%M} UTC; it is not sent again")
    session.execute(update(MailSend).where(MailSend.id == send_id).values(
        status=MailStatus.PENDING, next_attempt_at=now, first_attempt_at=None,
        last_error=None if row.last_error == DISABLED else row.last_error))
    session.flush()
    session.refresh(row)
    return row
