"""The outbound URL policy end to end (issue 25): against a real receiver process standing in for an internal
service, on SQLite and PostgreSQL. Tests subscribe loopback receivers through the operator's allow-list
(CHARGEBACK_WEBHOOK_ALLOW, set in tests/conftest.py); here it is taken away to see what an attacker gets."""

from __future__ import annotations

import pytest
from sqlmodel import Session, select

from app.core.errors import Invalid
from app.core.outbound import AllowList
from app.core.settings import Settings
from app.notify.webhook_deliver import webhook_task
from app.notify.webhook_http import COULD_NOT_CONNECT, REFUSED, SNIPPET_BYTES, post
from app.notify.webhook_models import WebhookAttempt, WebhookDelivery
from app.notify.webhook_subscriptions import Changes, create_subscription, update_subscription
from tests.notify.test_webhooks import FAST, corrections, subscribe
from tests.support.clock import frozen
from tests.support.server import free_port
from tests.support.smtp import self_signed
from tests.support.webhooks import webhook_receiver

PRODUCTION = Settings(environment="production", secret_key="a" * 40, webhook_allow="")
INTERNAL = "internal-service: admin console, db=prod, token=hunter2 " * 40


def _rows(engine) -> tuple[list[WebhookDelivery], list[WebhookAttempt]]:
    with Session(engine) as s:
        return list(s.exec(select(WebhookDelivery))), list(s.exec(select(WebhookAttempt).order_by(WebhookAttempt.id)))


@pytest.mark.parametrize("url, kind", [
    ("https://127.0.0.1:9090/internal", "loopback"), ("https://169.254.169.254/latest/meta-data/", "metadata"),
    ("https://[::1]/", "loopback"), ("https://0x7f000001/", "non-canonical"), ("https://2130706433/", "non-canonical"),
    ("https://0177.0.0.1/", "non-canonical"), ("https://127.1/", "non-canonical"), ("https://10.0.0.1/", "private"),
    ("https://100.64.0.1/", "carrier-grade NAT"), ("https://[fd00:ec2::254]/", "metadata"),
    ("https://[::ffff:127.0.0.1]/", "loopback"), ("https://[fe80::1]/", "link-local"), ("https://0.0.0.0/", "unspecified"),
    ("https://localhost/", "loopback"),
])
def test_internal_addresses_are_refused_when_subscribing(session, url, kind):
    with pytest.raises(Invalid) as caught:
        create_subscription(session=session, actor="root", url=url, event_types=["period.rated"], prefix="body.",
                            settings=PRODUCTION)
    [error] = caught.value.errors
    assert error.path == "body.url" and kind in error.message
    # An address the operator may permit says how; a non-canonical spelling is refused whatever the list holds.
    assert ("CHARGEBACK_WEBHOOK_ALLOW" in error.message) == (kind != "non-canonical")


def test_changing_a_url_to_an_internal_one_is_refused_too(session):
    sub, _ = create_subscription(session=session, actor="root", url="https://1.1.1.1/hook", event_types=["period.rated"],
                                 settings=PRODUCTION)
    with pytest.raises(Invalid) as caught:
        update_subscription(session=session, subscription_id=sub.id, actor="root", prefix="body.",
                            changes=Changes(url="https://169.254.169.254/"), settings=PRODUCTION)
    assert caught.value.errors[0].path == "body.url" and sub.url == "https://1.1.1.1/hook"


def test_an_internal_service_is_never_called_without_the_allow_list(fresh_engine, tmp_path):
    """Subscribed while the operator permitted it; permission withdrawn: every delivery is refused before any
    connection, and nothing of the service's answer is kept."""
    with webhook_receiver(tmp_path / "rx", plan={"/internal": [f"say:200:{INTERNAL}"]}) as rx:
        subscribe(fresh_engine, rx.url("/internal"))
        corrections(fresh_engine, 2)
        webhook_task(fresh_engine, settings=FAST.model_copy(update={"webhook_allow": ""}))
        rows, tries = _rows(fresh_engine)
        assert rx.requests() == []
        assert tries and all(t.error.startswith(REFUSED) and "loopback" in t.error for t in tries)
        assert {(t.response, t.status_code) for t in tries} == {(None, None)}
        failed = [r for r in rows if r.attempts]
        assert failed and {r.status for r in failed} == {"failed"} and all(r.next_attempt_at for r in failed)
        # With the operator's permission back, the retry goes out, and only an excerpt of the answer is kept.
        webhook_task(fresh_engine, frozen(max(r.next_attempt_at for r in failed)), settings=FAST)
        rows, tries = _rows(fresh_engine)
        assert {r.status for r in rows} == {"delivered"} and len(rx.requests()) == 2
        kept = [t.response for t in tries if t.status_code == 200]
        assert kept and all(0 < len(r) <= SNIPPET_BYTES and INTERNAL.startswith(r) for r in kept)


def test_redirects_are_not_followed(fresh_engine, tmp_path):
    with webhook_receiver(tmp_path / "rx", plan={"/moved": ["redirect:http://127.0.0.1:1/metadata"]}) as rx:
        subscribe(fresh_engine, rx.url("/moved"))
        corrections(fresh_engine, 1)
        webhook_task(fresh_engine, settings=FAST)
        [row], [attempt] = _rows(fresh_engine)
        assert row.status == "failed" and attempt.status_code == 302 and len(rx.requests()) == 1


def test_a_closed_port_reads_as_could_not_connect_only():
    outcome = post(f"http://127.0.0.1:{free_port()}/x", b"{}", {}, connect_timeout_s=1, read_timeout_s=1,
                   deadline_s=2, allow=AllowList.parse("127.0.0.0/8"))
    assert outcome.status is None and outcome.error == COULD_NOT_CONNECT and outcome.response == ""


def test_the_connection_goes_to_the_address_checked(tmp_path):
    """One lookup per attempt, checked, and connected to: the name is never looked up again (no DNS rebinding),
    and the receiver sees the name in Host. `hooks.example` exists in no DNS: a second lookup would fail."""
    lookups = []

    def resolver(host, port):
        lookups.append(host)
        return ["127.0.0.1"] if len(lookups) == 1 else ["10.0.0.1"]  # what a rebinding name does next

    with webhook_receiver(tmp_path / "rx") as rx:
        outcome = post(f"http://hooks.example:{rx.port}/in", b"{}", {}, connect_timeout_s=2, read_timeout_s=2,
                       deadline_s=5, allow=AllowList.parse("127.0.0.1/32"), resolver=resolver)
        assert outcome.status == 200 and lookups == ["hooks.example"]
        [request] = rx.requests()
        assert request.header("host") == f"hooks.example:{rx.port}"
        # The next attempt looks the name up again and checks what it gets: the rebound address is refused.
        again = post(f"http://hooks.example:{rx.port}/in", b"{}", {}, connect_timeout_s=2, read_timeout_s=2,
                     deadline_s=5, allow=AllowList.parse("127.0.0.1/32"), resolver=resolver)
        assert again.status is None and again.error.startswith(REFUSED) and "private" in again.error
        assert len(rx.requests()) == 1


def test_https_to_a_pinned_address_keeps_the_name_for_sni_and_the_certificate(tmp_path):
    cert, key = self_signed(tmp_path)  # for localhost and 127.0.0.1
    with webhook_receiver(tmp_path / "rx", cert=(cert, key)) as rx:
        outcome = post(f"https://localhost:{rx.port}/in", b"{}", {}, connect_timeout_s=2, read_timeout_s=2,
                       deadline_s=5, allow=AllowList.parse("localhost"), ca_file=str(cert),
                       resolver=lambda host, port: ["127.0.0.1"])
        assert outcome.status == 200, outcome.error
        # A name the certificate does not carry, pinned to the same address, fails the certificate check.
        wrong = post(f"https://hooks.example:{rx.port}/in", b"{}", {}, connect_timeout_s=2, read_timeout_s=2,
                     deadline_s=5, allow=AllowList.parse("hooks.example"), ca_file=str(cert),
                     resolver=lambda host, port: ["127.0.0.1"])
        assert wrong.status is None and "CERTIFICATE_VERIFY_FAILED" in wrong.error


def test_a_receiver_repeating_a_configured_secret_has_it_masked(fresh_engine, tmp_path):
    with webhook_receiver(tmp_path / "rx", plan={"/echo": ["say:500:relay said smtp-pw-5 and oidc-cs-77"]}) as rx:
        _, secret = subscribe(fresh_engine, rx.url("/echo"))
        corrections(fresh_engine, 1)
        webhook_task(fresh_engine, settings=FAST.model_copy(update={"smtp_password": "smtp-pw-5",
                                                                    "oidc_client_secret": "oidc-cs-77"}))
        [row], [attempt] = _rows(fresh_engine)
        assert attempt.status_code == 500 and attempt.response == "relay said *** and ***" and rx.requests()
