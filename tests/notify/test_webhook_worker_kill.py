"""No event is lost when the worker is killed mid-delivery: `chargeback worker` as a real process,
killed with SIGKILL while a receiver holds a request open, then restarted. Every event reaches the
receiver at least once (the interrupted one twice, with the same webhook-id), each request verified
by the standardwebhooks reference library. SQLite file and PostgreSQL."""

from __future__ import annotations

import os
import signal
import subprocess

from sqlmodel import Session, select
from standardwebhooks.webhooks import Webhook

from app.core.db import unit_of_work
from app.core.events import emit
from app.notify.webhook_models import WebhookAttempt, WebhookDelivery
from app.notify.webhook_subscriptions import create_subscription
from tests.support.billing import CLI
from tests.support.server import ROOT
from tests.support.webhooks import TEST_WEBHOOK_ALLOW, wait_for, webhook_receiver

EVENTS = 20


def _environment(url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHARGEBACK_")}
    return env | {"CHARGEBACK_DATABASE_URL": url, "CHARGEBACK_WEBHOOK_ALLOW": TEST_WEBHOOK_ALLOW,
                  "CHARGEBACK_WEBHOOK_DEADLINE_S": "2",
                  "CHARGEBACK_WEBHOOK_READ_TIMEOUT_S": "1.5", "CHARGEBACK_WEBHOOK_CONNECT_TIMEOUT_S": "1",
                  "CHARGEBACK_WEBHOOK_CONCURRENCY": "4"}


def _worker(env: dict[str, str], log_path) -> subprocess.Popen:
    with open(log_path, "a") as log:
        return subprocess.Popen([str(CLI), "worker", "--poll-seconds", "0.2", "--backfill-hours", "1"], cwd=ROOT,
                                env=env, stdout=log, stderr=subprocess.STDOUT)


def _alive(proc: subprocess.Popen, log_path) -> bool:
    if proc.poll() is not None:
        raise AssertionError("the worker exited:\n" + log_path.read_text()[-3000:])
    return True


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_a_worker_killed_mid_delivery_loses_no_event(fresh_engine, tmp_path):
    url = fresh_engine.url.render_as_string(hide_password=False)
    plan = {"/erp": ["sleep:0.2"] * 5 + ["hang", "200"]}
    with webhook_receiver(tmp_path / "rx", plan=plan) as rx:
        with unit_of_work(fresh_engine) as s:
            _, secret = create_subscription(session=s, actor="root", url=rx.url("/erp"),
                                            event_types=["correction.created"])
        with unit_of_work(fresh_engine) as s:
            ids = {emit(session=s, type="correction.created", tenant="vision",
                        payload={"line_id": f"2026-11/vision/p/correction/{n}", "amount": "-1.00"}).id
                   for n in range(EVENTS)}
        env = _environment(url)
        log_path = tmp_path / "worker.log"
        first = _worker(env, log_path)
        try:
            hung = wait_for(lambda: _alive(first, log_path) and [r for r in rx.requests() if r.behaviour == "hang"],
                            "a request held open")[0]
            first.kill()  # SIGKILL: no cleanup, the claim and the open attempt stay behind
            first.wait(timeout=20)
        finally:
            _stop(first)
        with Session(fresh_engine) as s:
            held = s.exec(select(WebhookDelivery).where(WebhookDelivery.event_id == hung.webhook_id)).one()
            assert held.claimed_until is not None and held.status != "delivered"
            open_attempts = s.exec(select(WebhookAttempt).where(WebhookAttempt.delivery_id == held.id)).all()
            assert [a.duration_ms for a in open_attempts] == [None]  # interrupted: no outcome recorded
        second = _worker(env, log_path)
        try:
            wait_for(lambda: _alive(second, log_path) and ids <= {r.webhook_id for r in rx.requests()},
                     "every event at the receiver", timeout_s=120)

            def all_delivered():
                with Session(fresh_engine) as s:
                    return {d.status for d in s.exec(select(WebhookDelivery))} == {"delivered"}

            wait_for(all_delivered, "every delivery marked delivered", timeout_s=60)
        finally:
            _stop(second)
        received = rx.requests()
    by_id: dict[str, int] = {}
    for request in received:
        Webhook(secret).verify(request.body, request.headers)
        by_id[request.webhook_id] = by_id.get(request.webhook_id, 0) + 1
    assert set(by_id) == ids  # deduplicated by webhook-id: each event exactly once
    assert by_id[hung.webhook_id] >= 2  # the interrupted delivery was sent again after the lease
    with Session(fresh_engine) as s:
        held = s.exec(select(WebhookDelivery).where(WebhookDelivery.event_id == hung.webhook_id)).one()
        assert held.attempts >= 2 and held.claimed_until is None
