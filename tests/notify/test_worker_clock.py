"""The worker's clock is read when each task acts: a slow task before delivery in the same round (a
reconcile pass, a month's documents) shortens no lease, brings no retry forward, dates no attempt
before its event and lets no second worker send the same message again.

Minutes passing are the real clock moved on (tests/support/clock.MovedClock), handed to the worker
and used by the event outbox; webhooks go to a real receiver process, mail to a real SMTP server.
"""

from __future__ import annotations

import threading
from datetime import timedelta

from sqlmodel import Session, select

from app.core import events
from app.core.db import unit_of_work
from app.core.events import Event, emit
from app.core.settings import Settings
from app.core.timeutil import aware
from app.metrics.worker import run_worker
from app.notify.mail_deliver import mail_task
from app.notify.mail_models import MailSend
from app.notify.webhook_deliver import lease, webhook_task
from app.notify.webhook_models import WebhookAttempt, WebhookDelivery
from app.notify.webhook_subscriptions import create_subscription
from tests.support.clock import MovedClock
from tests.support.server import free_port
from tests.support.smtp import PASSWORD, USER, smtp_server
from tests.support.webhooks import wait_for, webhook_receiver

SLOW = timedelta(minutes=10)  # longer than either lease (webhooks 65 s here, mail 300 s)
HOOKS = Settings(webhook_connect_timeout_s=1, webhook_read_timeout_s=30, webhook_deadline_s=30, webhook_concurrency=2)
FINANCE = "finance@corp.example"


def worker_round(engine, clock, tasks) -> None:
    """One round of a worker with nothing to ingest, running `tasks` on `clock`."""
    run_worker(engine=engine, settings=Settings(), sources={}, once=True, now=clock, tasks=tasks)


def slow_then_event(clock: MovedClock, emit_events):
    """A task that takes SLOW, then records events (as issuing records period.finalized after its documents)."""
    def task(engine, _clock) -> None:
        clock.advance(SLOW)
        with unit_of_work(engine) as session:
            emit_events(session)
    return task


def correction(session) -> None:
    emit(session=session, type="correction.created", tenant="vision", payload={
        "period": "2026-11", "line_id": "2026-11/vision/pool/correction/1", "corrects": "x",
        "corrected_period": "2026-10", "account": "vision", "pool": "pool", "amount": "-1.00", "currency": "USD",
        "reason": "test", "created_by": "fin"})


def deliver(engine, clock) -> None:
    webhook_task(engine, clock, settings=HOOKS)


def subscribed(engine, rx) -> None:
    with unit_of_work(engine) as session:
        create_subscription(session=session, actor="root", url=rx.url("/erp"), event_types=["correction.created"])


def delivery(engine) -> tuple[WebhookDelivery, list[WebhookAttempt], Event]:
    with Session(engine) as session:
        [row] = session.exec(select(WebhookDelivery)).all()
        log = list(session.exec(select(WebhookAttempt).order_by(WebhookAttempt.id)))
        return row, log, session.get(Event, row.event_id)


def test_a_slow_task_before_delivery_dates_the_attempt_lease_and_retry_from_when_they_happen(fresh_engine, tmp_path,
                                                                                             monkeypatch):
    clock = MovedClock()
    monkeypatch.setattr(events, "utcnow", clock)  # events are recorded on the same clock as the worker's
    with webhook_receiver(tmp_path / "rx", plan={"/erp": ["until:answer:500", "200"]}) as rx:
        subscribed(fresh_engine, rx)
        worker = threading.Thread(target=worker_round,
                                  args=(fresh_engine, clock, [slow_then_event(clock, correction), deliver]))
        worker.start()
        try:
            wait_for(rx.requests, "the first attempt")  # in flight: the receiver holds its answer
            row, [attempt], event = delivery(fresh_engine)
            assert aware(attempt.started_at) >= aware(event.created_at)  # the log: not before the event existed
            assert aware(row.claimed_until) > clock()  # the lease holds while the request is out: not born expired
            assert aware(row.claimed_until) - aware(attempt.started_at) == lease(HOOKS)
            answered = clock()
        finally:
            (rx.directory / "answer").touch()
            worker.join(timeout=120)
        assert not worker.is_alive()
        row, _, _ = delivery(fresh_engine)
        assert (row.status, row.last_status_code, row.claimed_until) == ("failed", 500, None)
        # Standard Webhooks: the second attempt 5 s (up to 10 % jitter) after the first failed, not earlier.
        assert answered + timedelta(seconds=5) <= aware(row.next_attempt_at) <= clock() + timedelta(seconds=5.5)
        worker_round(fresh_engine, clock, [deliver])  # the next round, at once: the retry is not due
        assert len(rx.requests()) == 1
        clock.advance(aware(row.next_attempt_at) - clock())
        worker_round(fresh_engine, clock, [deliver])
        assert [r.behaviour for r in rx.requests()] == ["until:answer:500", "200"]
        row, log, event = delivery(fresh_engine)
        assert (row.status, row.attempts) == ("delivered", 2)
        assert aware(event.created_at) <= aware(log[0].started_at) < aware(log[1].started_at)
        assert aware(log[1].started_at) >= aware(log[0].started_at) + timedelta(seconds=5)


def test_two_workers_after_a_slow_task_send_each_webhook_once(fresh_engine, tmp_path, monkeypatch):
    clock = MovedClock()
    monkeypatch.setattr(events, "utcnow", clock)
    with webhook_receiver(tmp_path / "rx", plan={"/erp": ["until:answer:200", "200"]}) as rx:
        subscribed(fresh_engine, rx)
        first = threading.Thread(target=worker_round,
                                 args=(fresh_engine, clock, [slow_then_event(clock, correction), deliver]))
        first.start()
        try:
            wait_for(rx.requests, "the first worker's attempt")
            worker_round(fresh_engine, clock, [deliver])  # a second worker's round while that request is out
            assert len(rx.requests()) == 1  # the first worker's claim holds: nothing sent twice
        finally:
            (rx.directory / "answer").touch()
            first.join(timeout=120)
        assert not first.is_alive()
        row, log, _ = delivery(fresh_engine)
        assert (row.status, row.attempts, len(log), len(rx.requests())) == ("delivered", 1, 1, 1)


def budget_alerts(session) -> None:
    for n in range(2):
        emit(session=session, type="budget.threshold", key=f"clock:{n}",
             payload={"tenant": None, "department": "research", "month": "2026-11", "threshold_percent": 50 + n,
                      "basis": "actual", "amount": "500.00", "budget": "1000.00"})


def mail_settings(port: int) -> Settings:
    return Settings(smtp_host="127.0.0.1", smtp_port=port, smtp_starttls=False, smtp_username=USER,
                    smtp_password=PASSWORD, smtp_timeout_s=10, mail_from="Chargeback <billing@portal.example>",
                    finance_recipients=FINANCE)


def mails(engine) -> list[tuple[MailSend, Event]]:
    with Session(engine) as session:
        return [(row, session.get(Event, row.event_id)) for row in session.exec(select(MailSend).order_by(MailSend.id))]


def test_a_slow_task_before_mail_dates_each_send_and_retry_from_its_own_attempt(fresh_engine, tmp_path, monkeypatch):
    clock = MovedClock()
    monkeypatch.setattr(events, "utcnow", clock)
    down = mail_settings(free_port())  # nobody listens: every attempt fails at once
    worker_round(fresh_engine, clock, [slow_then_event(clock, budget_alerts),
                                       lambda engine, c: mail_task(engine, c, settings=down)])
    failed = clock()
    sends = mails(fresh_engine)
    assert len(sends) == 2
    for row, event in sends:
        assert (row.status, row.attempts, row.claimed_until) == ("failed", 1, None)
        assert aware(row.first_attempt_at) >= aware(event.created_at)
        # 1 minute after the failed attempt, not after the start of the round.
        assert aware(row.first_attempt_at) + timedelta(minutes=1) <= aware(row.next_attempt_at)
        assert aware(row.next_attempt_at) <= failed + timedelta(minutes=1)
    worker_round(fresh_engine, clock, [lambda engine, c: mail_task(engine, c, settings=down)])  # at once: not due
    assert [row.attempts for row, _ in mails(fresh_engine)] == [1, 1]

    clock.advance(timedelta(minutes=1))
    with smtp_server(tmp_path) as server:
        settings = mail_settings(server.port)
        worker_round(fresh_engine, clock, [lambda engine, c: mail_task(engine, c, settings=settings)])
        assert len(server.received()) == 2
    (a, _), (b, _) = mails(fresh_engine)
    assert (a.status, b.status) == ("sent", "sent")
    assert failed + timedelta(minutes=1) <= aware(a.sent_at) < aware(b.sent_at)  # each when it was sent
