"""Signed webhooks against a real HTTP receiver process, on SQLite and PostgreSQL.

Every request is checked with the `standardwebhooks` package (the Standard Webhooks reference
library, an implementation independent of ours) as the oracle. Retries follow the schedule after
500s, a receiver that hangs, drips or answers garbage is cut off at its deadline and retried while
another subscription gets its delivery, 410 pauses a subscription, redelivery sends the same event id.
"""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from sqlmodel import Session, select
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from app.billing import periods
from app.cli import WORKER_TASKS
from app.core.db import unit_of_work
from app.core.errors import Conflict, Invalid
from app.core.events import Event, emit
from app.core.settings import Settings
from app.core.timeutil import utcnow
from app.metrics.worker import run_tasks
from app.notify import webhook_deliver
from app.notify.webhook_deliver import backoff, deliver_due, plan, redeliver, webhook_task
from app.notify.webhook_models import WebhookAttempt, WebhookDelivery, WebhookSubscription
from app.notify.webhook_subscriptions import (
    Changes,
    create_subscription,
    rotate_secret,
    update_subscription,
)
from tests.support.billing import add_hour, store_policy
from tests.support.clock import frozen
from tests.support.server import free_port
from tests.support.smtp import self_signed
from tests.support.threads import at_once
from tests.support.webhooks import wait_for, webhook_receiver

FAST = Settings(webhook_connect_timeout_s=1, webhook_read_timeout_s=1, webhook_deadline_s=2, webhook_concurrency=4)


def subscribe(engine, url: str, types=("correction.created",), **kw) -> tuple[int, str]:
    with unit_of_work(engine) as s:
        sub, secret = create_subscription(session=s, actor="root", url=url, event_types=list(types), **kw)
        return sub.id, secret


def corrections(engine, n: int, *, tenant: str = "vision") -> list[str]:
    """`n` correction.created events (their ids), as periods.correct would record them."""
    ids = []
    with unit_of_work(engine) as s:
        for i in range(n):
            event = emit(session=s, type="correction.created", tenant=tenant, payload={
                "period": "2026-11", "line_id": f"2026-11/{tenant}/pool/correction/{i + 1}", "corrects": "x",
                "corrected_period": "2026-10", "account": tenant, "pool": "pool", "amount": "-1.00",
                "currency": "USD", "reason": "test", "created_by": "fin"})
            ids.append(event.id)
    return ids


def deliveries(engine) -> dict[int, WebhookDelivery]:
    with Session(engine) as s:
        return {d.id: d for d in s.exec(select(WebhookDelivery))}


def attempts(engine, delivery_id: int) -> list[WebhookAttempt]:
    with Session(engine) as s:
        return list(s.exec(select(WebhookAttempt).where(WebhookAttempt.delivery_id == delivery_id)
                           .order_by(WebhookAttempt.id)))


def test_a_rating_is_delivered_signed_as_the_reference_library_verifies(fresh_engine, tmp_path):
    with webhook_receiver(tmp_path / "rx") as rx:
        _, secret = subscribe(fresh_engine, rx.url("/finance"), types=("period.rated",))
        with unit_of_work(fresh_engine) as s:
            v = store_policy(s)
            add_hour(s, hour=utcnow().replace(day=1, hour=0, minute=0, second=0, microsecond=0), version=v.id)
        month = utcnow().strftime("%Y-%m")
        with unit_of_work(fresh_engine) as s:
            periods.rate(session=s, period=month, actor="fin")
        run_tasks([lambda engine, clock: webhook_task(engine, clock, settings=FAST)], engine=fresh_engine)
        [request] = rx.requests()
        assert secret.startswith("whsec_")
        payload = Webhook(secret).verify(request.body, request.headers)  # the oracle: raises on any mismatch
        with Session(fresh_engine) as s:
            event = s.exec(select(Event).where(Event.type == "period.rated")).one()
        assert request.webhook_id == event.id  # the stable id receivers deduplicate by
        assert payload["type"] == "period.rated" and payload["id"] == event.id and payload["data"] == event.data
        assert payload["data"]["period"] == month and payload["timestamp"].endswith("Z")
        assert request.header("content-type") == "application/json"
        # The signature covers id, timestamp and body: any change is refused by the oracle.
        with pytest.raises(WebhookVerificationError):
            Webhook(secret).verify(request.body.replace(month, "1999-01"), request.headers)
        with pytest.raises(WebhookVerificationError):
            Webhook(secret).verify(request.body, {**request.headers, "webhook-id": "evt_other"})
        with pytest.raises(WebhookVerificationError):
            Webhook("whsec_" + "A" * 43 + "=").verify(request.body, request.headers)
        [row] = deliveries(fresh_engine).values()
        assert (row.status, row.attempts, row.last_status_code) == ("delivered", 1, 200)
        [attempt] = attempts(fresh_engine, row.id)
        assert attempt.status_code == 200 and attempt.duration_ms is not None and '"received"' in attempt.response
        assert webhook_task in WORKER_TASKS


def test_a_rotated_secret_signs_twice_during_the_overlap(fresh_engine, tmp_path):
    with webhook_receiver(tmp_path / "rx") as rx:
        sub_id, old = subscribe(fresh_engine, rx.url("/erp"))
        with unit_of_work(fresh_engine) as s:
            _, new = rotate_secret(session=s, subscription_id=sub_id, actor="root", settings=FAST)
        assert new != old and new.startswith("whsec_")
        corrections(fresh_engine, 1)
        webhook_task(fresh_engine, settings=FAST)
        [request] = rx.requests()
        assert len(request.header("webhook-signature").split(" ")) == 2
        Webhook(new).verify(request.body, request.headers)
        Webhook(old).verify(request.body, request.headers)  # receivers not switched yet still verify
        with unit_of_work(fresh_engine) as s:  # the overlap over: only the new secret signs
            s.get(WebhookSubscription, sub_id).previous_secret_until = utcnow() - timedelta(seconds=1)
        corrections(fresh_engine, 1)
        webhook_task(fresh_engine, settings=FAST)
        second = rx.requests()[1]
        Webhook(new).verify(second.body, second.headers)
        with pytest.raises(WebhookVerificationError):
            Webhook(old).verify(second.body, second.headers)


def test_500s_are_retried_on_the_schedule_until_the_receiver_answers(fresh_engine, tmp_path):
    with webhook_receiver(tmp_path / "rx", plan={"/flaky": ["500", "503:600", "200"]}) as rx:
        subscribe(fresh_engine, rx.url("/flaky"))
        [event_id] = corrections(fresh_engine, 1)
        now = utcnow()
        webhook_task(fresh_engine, frozen(now), settings=FAST)
        took = utcnow() - now
        [row] = deliveries(fresh_engine).values()
        assert (row.status, row.last_status_code, row.last_error) == ("failed", 500, "HTTP 500")
        # Standard Webhooks: the second attempt 5 s after the first (with up to 10 % jitter).
        assert now + timedelta(seconds=5) <= row.next_attempt_at <= now + took + timedelta(seconds=5.5)
        webhook_task(fresh_engine, frozen(now + timedelta(seconds=4)), settings=FAST)  # not due yet: nothing sent
        assert len(rx.requests()) == 1
        at, began = row.next_attempt_at, utcnow()
        webhook_task(fresh_engine, frozen(at), settings=FAST)
        took = utcnow() - began
        row = deliveries(fresh_engine)[row.id]
        # 503 with Retry-After: 600 s postpones the 5-minute step to the receiver's 10 minutes.
        assert row.last_status_code == 503 and at + timedelta(seconds=600) <= row.next_attempt_at
        assert row.next_attempt_at <= at + took + timedelta(seconds=600)
        webhook_task(fresh_engine, frozen(row.next_attempt_at), settings=FAST)
        row = deliveries(fresh_engine)[row.id]
        assert (row.status, row.attempts, row.last_status_code, row.last_error) == ("delivered", 3, 200, None)
        log = attempts(fresh_engine, row.id)
        assert [a.status_code for a in log] == [500, 503, 200] and [a.number for a in log] == [1, 2, 3]
        assert all(a.duration_ms is not None and a.duration_ms < 2000 for a in log)
        assert {r.webhook_id for r in rx.requests()} == {event_id}  # every retry carries the same id


def test_a_hanging_receiver_is_cut_off_and_retried_while_another_subscription_gets_its_delivery(fresh_engine,
                                                                                               tmp_path):
    with webhook_receiver(tmp_path / "rx", plan={"/hang": ["hang", "200"]}) as rx:
        hang_id, _ = subscribe(fresh_engine, rx.url("/hang"))
        ok_id, secret = subscribe(fresh_engine, rx.url("/ok"))
        corrections(fresh_engine, 1)
        with unit_of_work(fresh_engine) as s:
            plan(session=s)
        by_sub = {d.subscription_id: d.id for d in deliveries(fresh_engine).values()}
        slow = Settings(webhook_connect_timeout_s=1, webhook_read_timeout_s=30, webhook_deadline_s=4,
                        webhook_concurrency=4)
        round_ = threading.Thread(target=deliver_due, kwargs={"engine": fresh_engine, "settings": slow})
        round_.start()
        try:
            # The other subscription is delivered while the hanging request is still open.
            wait_for(lambda: deliveries(fresh_engine)[by_sub[ok_id]].status == "delivered", "the healthy delivery")
            assert rx.requests("/hang") and attempts(fresh_engine, by_sub[hang_id])[0].duration_ms is None
        finally:
            round_.join(timeout=60)
        Webhook(secret).verify(rx.requests("/ok")[0].body, rx.requests("/ok")[0].headers)
        hung = deliveries(fresh_engine)[by_sub[hang_id]]
        [attempt] = attempts(fresh_engine, hung.id)
        assert hung.status == "failed" and "4 s deadline" in hung.last_error and attempt.status_code is None
        assert 3500 <= attempt.duration_ms < 8000  # cut at the deadline (30 s read timeout notwithstanding)
        webhook_task(fresh_engine, frozen(hung.next_attempt_at), settings=FAST)  # the retry is answered
        assert deliveries(fresh_engine)[hung.id].status == "delivered"
        assert rx.requests("/hang")[0].webhook_id == rx.requests("/hang")[1].webhook_id


@pytest.mark.parametrize("behaviour, reason", [("garbage", "not an HTTP answer"), ("drip", "2 s deadline")])
def test_a_receiver_answering_garbage_or_dripping_is_a_failure_with_its_reason(fresh_engine, tmp_path, behaviour,
                                                                               reason):
    with webhook_receiver(tmp_path / "rx", plan={"/bad": [behaviour]}) as rx:
        subscribe(fresh_engine, rx.url("/bad"))
        corrections(fresh_engine, 1)
        webhook_task(fresh_engine, settings=FAST)
        [row] = deliveries(fresh_engine).values()
        assert row.status == "failed" and reason in row.last_error and row.next_attempt_at is not None
        assert attempts(fresh_engine, row.id)[0].duration_ms < 5000


def test_a_receiver_that_is_down_is_retried_and_the_round_leaves_it_alone(fresh_engine):
    subscribe(fresh_engine, f"http://127.0.0.1:{free_port()}/nobody")
    corrections(fresh_engine, 3)
    webhook_task(fresh_engine, settings=Settings(webhook_connect_timeout_s=1, webhook_deadline_s=2,
                                                            webhook_concurrency=1))
    rows = list(deliveries(fresh_engine).values())
    tried = [r for r in rows if r.attempts]
    # One refused connection: the other deliveries to that receiver wait for the next round, not counted.
    # The reason is the same whether the port refused or dropped the connection: no port scanner.
    assert len(tried) == 1 and tried[0].last_error == "could not connect"
    assert {r.status for r in rows if not r.attempts} == {"pending"}


def test_an_https_receiver_with_a_private_ca(fresh_engine, tmp_path):
    cert, key = self_signed(tmp_path)
    with webhook_receiver(tmp_path / "rx", cert=(cert, key)) as rx:
        _, secret = subscribe(fresh_engine, rx.url("/erp"))
        assert rx.url("/erp").startswith("https://")
        corrections(fresh_engine, 1)
        webhook_task(fresh_engine, settings=FAST)  # the system's CAs do not know it
        [row] = deliveries(fresh_engine).values()
        assert row.status == "failed" and "CERTIFICATE_VERIFY_FAILED" in row.last_error
        webhook_task(fresh_engine, frozen(row.next_attempt_at), settings=FAST.model_copy(update={"webhook_ca_file": str(cert)}))
        assert deliveries(fresh_engine)[row.id].status == "delivered"
        [request] = [r for r in rx.requests() if r.body]
        Webhook(secret).verify(request.body, request.headers)


def test_410_gone_pauses_the_subscription(fresh_engine, tmp_path):
    with webhook_receiver(tmp_path / "rx", plan={"/gone": ["410"]}) as rx:
        sub_id, _ = subscribe(fresh_engine, rx.url("/gone"))
        corrections(fresh_engine, 1)
        webhook_task(fresh_engine, settings=FAST)
        with Session(fresh_engine) as s:
            sub = s.get(WebhookSubscription, sub_id)
            assert not sub.active and "410 Gone" in sub.disabled_reason
        [row] = deliveries(fresh_engine).values()
        assert row.status == "failed" and row.next_attempt_at is None
        corrections(fresh_engine, 1)  # a paused subscription gets no new deliveries
        webhook_task(fresh_engine, settings=FAST)
        assert len(rx.requests()) == 1 and len(deliveries(fresh_engine)) == 1
        with unit_of_work(fresh_engine) as s:
            update_subscription(session=s, subscription_id=sub_id, actor="root", changes=Changes(active=True))
        with Session(fresh_engine) as s:
            assert s.get(WebhookSubscription, sub_id).disabled_reason is None


def test_retries_follow_the_standard_webhooks_schedule_for_a_day():
    first = utcnow()
    schedule = backoff(Settings()).__class__(delays=webhook_deliver.SCHEDULE, window=timedelta(hours=24),
                                            repeat_last=False)
    at, times = first, []
    for failures in range(1, 20):
        at = schedule.next_attempt(failures=failures, first_attempt_at=first, now=at)
        if at is None:
            break
        times.append(at - first)
    # 5 s, 5 min, 30 min, 2 h, 5 h, 10 h after each other; the next (14 h) would pass the day.
    assert times == [timedelta(seconds=5), timedelta(minutes=5, seconds=5), timedelta(minutes=35, seconds=5),
                     timedelta(hours=2, minutes=35, seconds=5), timedelta(hours=7, minutes=35, seconds=5),
                     timedelta(hours=17, minutes=35, seconds=5)]
    jittered = backoff(Settings()).next_attempt(failures=3, first_attempt_at=first, now=first)
    assert first + timedelta(minutes=30) <= jittered <= first + timedelta(minutes=33)


def test_redeliver_sends_the_same_event_id_again(fresh_engine, tmp_path):
    with webhook_receiver(tmp_path / "rx") as rx:
        _, secret = subscribe(fresh_engine, rx.url("/erp"))
        [event_id] = corrections(fresh_engine, 1)
        webhook_task(fresh_engine, settings=FAST)
        [row] = deliveries(fresh_engine).values()
        assert row.status == "delivered"
        with unit_of_work(fresh_engine) as s:
            redeliver(session=s, subscription_id=row.subscription_id, delivery_id=row.id, now=utcnow())
        webhook_task(fresh_engine, settings=FAST)
        first, second = rx.requests()
        assert first.webhook_id == second.webhook_id == event_id
        assert first.header("webhook-timestamp") <= second.header("webhook-timestamp")
        Webhook(secret).verify(second.body, second.headers)
        row = deliveries(fresh_engine)[row.id]
        assert (row.status, row.attempts) == ("delivered", 2)
        with unit_of_work(fresh_engine) as s:  # a delivery being sent right now is not queued twice
            s.get(WebhookDelivery, row.id).claimed_until = utcnow() + timedelta(minutes=1)
        with pytest.raises(Conflict), unit_of_work(fresh_engine) as s:
            redeliver(session=s, subscription_id=row.subscription_id, delivery_id=row.id, now=utcnow())


def test_types_and_time_decide_who_gets_an_event(fresh_engine, tmp_path):
    with webhook_receiver(tmp_path / "rx") as rx:
        corrections(fresh_engine, 1)  # before any subscription: nobody gets it
        subscribe(fresh_engine, rx.url("/corrections"))
        subscribe(fresh_engine, rx.url("/gaps"), types=("ingestion.gap",))
        subscribe(fresh_engine, rx.url("/paused"), active=False)
        [wanted] = corrections(fresh_engine, 1)
        webhook_task(fresh_engine, settings=FAST)
        assert [(r.path, r.webhook_id) for r in rx.requests()] == [("/corrections", wanted)]
        webhook_task(fresh_engine, settings=FAST)  # planned once: nothing more
        assert len(rx.requests()) == 1


def test_two_workers_at_once_deliver_each_event_once(fresh_engine, tmp_path):
    with webhook_receiver(tmp_path / "rx") as rx:
        subscribe(fresh_engine, rx.url("/a"))
        subscribe(fresh_engine, rx.url("/b"))
        corrections(fresh_engine, 10)
        with unit_of_work(fresh_engine) as s:
            plan(session=s)
        assert at_once(lambda: deliver_due(engine=fresh_engine, settings=FAST)) == []
        sent = [(r.path, r.webhook_id) for r in rx.requests()]
        assert len(sent) == 20 and len(set(sent)) == 20
        assert {d.attempts for d in deliveries(fresh_engine).values()} == {1}


@pytest.mark.parametrize("url, problem", [
    ("ftp://erp.example/hook", "https://"), ("https://", "no host"), ("https://user:pw@erp.example/", "credentials"),
    ("https://erp.example/hook#x", "fragment"), ("https://erp.example:99999/", "port"), ("", "required"),
    ("https://erp.example/a b", "spaces"), ("https://[::1/", "not a URL"), ("https://[zz]/", "not a URL"),
])
def test_bad_urls_are_refused_at_their_path(session, url, problem):
    with pytest.raises(Invalid) as caught:
        create_subscription(session=session, actor="root", url=url, event_types=["period.rated"], prefix="body.")
    [error] = caught.value.errors
    assert error.path == "body.url" and problem in error.message


def test_plain_http_needs_the_setting_outside_development(session):
    production = Settings(environment="production", secret_key="a" * 40)
    with pytest.raises(Invalid) as caught:
        create_subscription(session=session, actor="root", url="http://erp.internal/hook", event_types=["period.rated"],
                            settings=production)
    assert "CHARGEBACK_WEBHOOK_ALLOW_HTTP" in caught.value.errors[0].message
    allowed = production.model_copy(update={"webhook_allow_http": True})
    sub, _ = create_subscription(session=session, actor="root", url="http://erp.internal/hook",
                                 event_types=["period.rated"], settings=allowed)
    assert sub.url == "http://erp.internal/hook"


def test_unknown_event_types_are_refused_at_their_index(session):
    with pytest.raises(Invalid) as caught:
        create_subscription(session=session, actor="root", url="https://erp.example/hook",
                            event_types=["period.rated", "period.exploded", "budget.threshold", "x"])
    assert [e.path for e in caught.value.errors] == ["event_types[1]", "event_types[3]"]
    with pytest.raises(Invalid) as caught:
        create_subscription(session=session, actor="root", url="https://erp.example/hook", event_types=[])
    assert caught.value.errors[0].path == "event_types"
    assert session.exec(select(WebhookSubscription)).all() == []
