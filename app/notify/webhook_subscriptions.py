"""Webhook subscriptions: created, changed, paused, rotated and deleted by admins; every change audited.

The API and the admin page call these with their own field-path prefix ("body." for JSON), so a bad
URL or an unknown event type is refused at the path of the field that holds it, and nothing is saved.
The secret is returned by `create_subscription` and `rotate_secret` only; the audit log never holds it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from urllib.parse import urlsplit

from sqlmodel import Session, select

from app.core.audit import record
from app.core.errors import FieldError, Invalid, NotFound
from app.core.events import EVENT_TYPES
from app.core.outbound import Refused, check_host
from app.core.safe_text import text_errors
from app.core.settings import Settings, get_settings
from app.core.timeutil import aware, utcnow
from app.notify.webhook_models import WebhookSubscription
from app.notify.webhook_sign import generate_secret

MAX_URL = 2000
MAX_DESCRIPTION = 200
ENTITY = "webhook"


def check_url(raw: str, *, settings: Settings) -> tuple[str | None, str | None]:
    """(the URL as stored, None) or (None, why a receiver cannot be called there: its form, or the outbound policy).

    The host is resolved and each of its addresses must be public or permitted by CHARGEBACK_WEBHOOK_ALLOW;
    a host name on that list is trusted whatever it resolves to, so saving it needs no lookup.
    """
    url = raw.strip()
    if not url:
        return None, "required"
    if len(url) > MAX_URL:
        return None, f"at most {MAX_URL} characters"
    if any(c.isspace() or ord(c) < 32 for c in url):
        return None, "a URL has no spaces or control characters"
    try:
        parts = urlsplit(url)
        parts.hostname  # noqa: B018  (raises for a bracketed host that is not an IPv6 address)
    except ValueError as exc:
        return None, f"not a URL: {exc}"
    plain_ok = settings.webhook_allow_http or settings.environment == "development"
    if parts.scheme not in ("https", "http") or (parts.scheme == "http" and not plain_ok):
        return None, ("must be an https:// URL" + ("" if plain_ok else
                      " (plain http only with CHARGEBACK_WEBHOOK_ALLOW_HTTP, on a trusted network)"))
    if not parts.hostname:
        return None, "the URL names no host"
    if parts.username is not None or parts.password is not None:
        return None, "no credentials in the URL: receivers authenticate the portal by the signature"
    if parts.fragment:
        return None, "a URL fragment (#...) is never sent to the receiver"
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None, "the port is not a number between 0 and 65535"
    try:  # the worker checks again at every delivery and connects to the address it checked
        check_host(parts.hostname, port, allow=settings.webhook_allow_list(), resolve_allowed=False)
    except Refused as exc:
        return None, str(exc)
    return url, None


def check_types(types: list[str], *, path: str) -> tuple[list[str], list[FieldError]]:
    """The event types, deduplicated and sorted, and an error at `path[i]` for each unknown one."""
    errors = [FieldError(f"{path}[{i}]", f"{t!r} is not an event type (one of {', '.join(EVENT_TYPES)})")
              for i, t in enumerate(types) if t not in EVENT_TYPES]
    if not types:
        errors.append(FieldError(path, "choose at least one event type"))
    return sorted(set(types) & set(EVENT_TYPES)), errors


@dataclass(frozen=True)
class Changes:
    """Fields to change (None: leave as is)."""

    url: str | None = None
    event_types: list[str] | None = None
    description: str | None = None
    active: bool | None = None


def _validated(changes: Changes, *, prefix: str, settings: Settings) -> Changes:
    errors: list[FieldError] = []
    url = types = None
    if changes.url is not None:
        url, problem = check_url(changes.url, settings=settings)
        if problem:
            errors.append(FieldError(f"{prefix}url", problem))
    if changes.event_types is not None:
        types, type_errors = check_types(changes.event_types, path=f"{prefix}event_types")
        errors += type_errors
    description = None if changes.description is None else changes.description.strip()
    if description is not None and len(description) > MAX_DESCRIPTION:
        errors.append(FieldError(f"{prefix}description", f"at most {MAX_DESCRIPTION} characters"))
    errors += text_errors({f"{prefix}description": changes.description})  # one line of human text
    if errors:
        raise Invalid("The webhook subscription was not saved", errors)
    return Changes(url=url, event_types=types, description=description, active=changes.active)


def snapshot(sub: WebhookSubscription) -> dict:
    """What the audit log keeps of a subscription (never its secret)."""
    return {"url": sub.url, "event_types": sub.types, "description": sub.description, "active": sub.active}


def list_subscriptions(*, session: Session) -> list[WebhookSubscription]:
    return list(session.exec(select(WebhookSubscription).order_by(WebhookSubscription.id)))


def get_subscription(*, session: Session, subscription_id: int) -> WebhookSubscription:
    sub = session.get(WebhookSubscription, subscription_id)
    if sub is None:
        raise NotFound(f"No webhook subscription {subscription_id}")
    return sub


def create_subscription(*, session: Session, actor: str, url: str, event_types: list[str], description: str = "",
                        active: bool = True, prefix: str = "",
                        settings: Settings | None = None) -> tuple[WebhookSubscription, str]:
    """A new subscription and its secret (shown to the caller once); flush, never commit."""
    checked = _validated(Changes(url=url, event_types=event_types, description=description), prefix=prefix,
                         settings=settings or get_settings())
    now = utcnow()
    secret = generate_secret()
    sub = WebhookSubscription(url=checked.url, event_types=" ".join(checked.event_types or []),
                              description=checked.description or "", secret=secret, active=active, created_at=now,
                              created_by=actor, updated_at=now)
    session.add(sub)
    session.flush()
    record(session=session, actor=actor, action="webhook.create", entity=ENTITY, entity_id=str(sub.id),
           after=snapshot(sub))
    return sub, secret


def update_subscription(*, session: Session, subscription_id: int, actor: str, changes: Changes, prefix: str = "",
                        settings: Settings | None = None) -> WebhookSubscription:
    """Change some fields; reactivating clears the reason the portal paused it."""
    sub = get_subscription(session=session, subscription_id=subscription_id)
    checked = _validated(changes, prefix=prefix, settings=settings or get_settings())
    before = snapshot(sub)
    if checked.url is not None:
        sub.url = checked.url
    if checked.event_types is not None:
        sub.event_types = " ".join(checked.event_types)
    if checked.description is not None:
        sub.description = checked.description
    if checked.active is not None:
        if checked.active and not sub.active:
            sub.disabled_reason = None
        sub.active = checked.active
    if snapshot(sub) != before:
        sub.updated_at = utcnow()
        session.add(sub)
        session.flush()
        record(session=session, actor=actor, action="webhook.update", entity=ENTITY, entity_id=str(sub.id),
               before=before, after=snapshot(sub))
    return sub


def rotate_secret(*, session: Session, subscription_id: int, actor: str,
                  settings: Settings | None = None) -> tuple[WebhookSubscription, str]:
    """A new secret; the old one keeps signing (a second signature) for the overlap, so receivers switch calmly."""
    settings = settings or get_settings()
    sub = get_subscription(session=session, subscription_id=subscription_id)
    now = utcnow()
    overlap = timedelta(hours=settings.webhook_secret_overlap_hours)
    sub.previous_secret, sub.previous_secret_until = (sub.secret, now + overlap) if overlap > timedelta(0) else (None, None)
    secret = generate_secret()
    sub.secret, sub.updated_at = secret, now
    session.add(sub)
    session.flush()
    record(session=session, actor=actor, action="webhook.rotate", entity=ENTITY, entity_id=str(sub.id),
           after={"previous_secret_until": sub.previous_secret_until})
    return sub, secret


def secrets_in_use(sub: WebhookSubscription, *, now: datetime) -> list[str]:
    """The secrets that sign a request now: the current one, and the previous one during its overlap."""
    out = [sub.secret]
    if sub.previous_secret and sub.previous_secret_until and aware(sub.previous_secret_until) > now:
        out.append(sub.previous_secret)
    return out


def delete_subscription(*, session: Session, subscription_id: int, actor: str) -> None:
    """Delete it with its deliveries and their attempts (the audit log keeps what it was)."""
    sub = get_subscription(session=session, subscription_id=subscription_id)
    before = snapshot(sub)
    session.delete(sub)
    session.flush()
    record(session=session, actor=actor, action="webhook.delete", entity=ENTITY, entity_id=str(subscription_id),
           before=before)
