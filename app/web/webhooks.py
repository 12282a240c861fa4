"""Admin pages: webhook subscriptions (create, change, pause, rotate the secret, delete) and their deliveries,
each attempt shown, with "redeliver". The pages never send anything: the worker does."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Request
from starlette.responses import RedirectResponse, Response

from app.auth.deps import Admin
from app.core.deps import SessionDep
from app.core.errors import Conflict, Invalid
from app.core.events import EVENT_TYPES
from app.core.settings import get_settings
from app.core.timeutil import utcnow
from app.http.htmx import is_htmx
from app.http.pagination import IdPath
from app.http.templating import render
from app.notify import webhook_subscriptions as subs
from app.notify.webhook_deliver import redeliver
from app.notify.webhook_read import deliveries_of, delivery_counts

router = APIRouter(include_in_schema=False)
Url = Annotated[str, Form(max_length=subs.MAX_URL + 100)]
Description = Annotated[str, Form(max_length=subs.MAX_DESCRIPTION + 100)]
Types = Annotated[list[str], Form(max_length=50)]


def _errors(exc: Invalid) -> dict[str, list[str]]:
    """Field name -> messages (a path "event_types[2]" belongs to the event_types field)."""
    out: dict[str, list[str]] = {}
    for error in exc.errors:
        out.setdefault(error.path.split("[")[0], []).append(error.message)
    return out


def _list_page(request: Request, session, *, new_secret: str = "", created=None, message: str = "",
               errors: dict[str, list[str]] | None = None, typed: dict | None = None, status_code: int = 200) -> Response:
    context = {"title": "Webhooks", "subscriptions": subs.list_subscriptions(session=session),
               "counts": delivery_counts(session=session), "event_types": EVENT_TYPES, "new_secret": new_secret,
               "created": created, "message": message, "errors": errors or {}, "typed": typed or {},
               "settings": get_settings()}
    return render(request, "admin/webhooks.html", context, status_code=status_code)


def _detail_page(request: Request, session, webhook_id: int, *, new_secret: str = "", message: str = "",
                 errors: dict[str, list[str]] | None = None, typed: dict | None = None,
                 status_code: int = 200) -> Response:
    sub = subs.get_subscription(session=session, subscription_id=webhook_id)
    context = {"title": f"Webhook {sub.id}", "sub": sub, "event_types": EVENT_TYPES, "new_secret": new_secret,
               "deliveries": deliveries_of(session=session, subscription_id=webhook_id), "message": message,
               "errors": errors or {}, "typed": typed, "now": utcnow()}
    return render(request, "admin/webhook.html", context, status_code=status_code)


def _redirect(request: Request, to: str) -> Response:
    if is_htmx(request):
        return Response(status_code=204, headers={"HX-Redirect": to})
    return RedirectResponse(to, status_code=303)


@router.get("/admin/webhooks")
def webhooks_page(request: Request, session: SessionDep, user: Admin) -> Response:
    return _list_page(request, session)


@router.post("/admin/webhooks")
def webhook_create(request: Request, session: SessionDep, user: Admin, url: Url = "", description: Description = "",
                   event_types: Types = []) -> Response:  # noqa: B006  (FastAPI copies form defaults)
    """Create; the answer shows the secret once. A bad field comes back beside it, the input kept."""
    try:
        sub, secret = subs.create_subscription(session=session, actor=user.name, url=url, event_types=event_types,
                                               description=description)
    except Invalid as exc:
        typed = {"url": url, "description": description, "event_types": event_types}
        return _list_page(request, session, errors=_errors(exc), typed=typed, status_code=422)
    return _list_page(request, session, new_secret=secret, created=sub,
                      message=f"Webhook {sub.id} created: it receives events from now on.")


@router.get("/admin/webhooks/{webhook_id}")
def webhook_page(request: Request, session: SessionDep, user: Admin, webhook_id: IdPath) -> Response:
    return _detail_page(request, session, webhook_id)


@router.post("/admin/webhooks/{webhook_id}")
def webhook_update(request: Request, session: SessionDep, user: Admin, webhook_id: IdPath, url: Url = "",
                   description: Description = "", event_types: Types = [],  # noqa: B006
                   active: Annotated[str | None, Form(max_length=10)] = None) -> Response:
    changes = subs.Changes(url=url, description=description, event_types=event_types, active=active is not None)
    try:
        subs.update_subscription(session=session, subscription_id=webhook_id, actor=user.name, changes=changes)
    except Invalid as exc:
        typed = {"url": url, "description": description, "event_types": event_types, "active": active is not None}
        return _detail_page(request, session, webhook_id, errors=_errors(exc), typed=typed, status_code=422)
    return _redirect(request, f"/admin/webhooks/{webhook_id}")


@router.post("/admin/webhooks/{webhook_id}/secret")
def webhook_rotate(request: Request, session: SessionDep, user: Admin, webhook_id: IdPath) -> Response:
    """A new secret, shown once; the old one signs too during the overlap."""
    sub, secret = subs.rotate_secret(session=session, subscription_id=webhook_id, actor=user.name)
    until = f" until {sub.previous_secret_until:%Y-%m-%d %H:%M} UTC" if sub.previous_secret_until else ""
    return _detail_page(request, session, webhook_id, new_secret=secret,
                        message=f"New secret made; the previous one also signs{until}." if until else "New secret made.")


@router.post("/admin/webhooks/{webhook_id}/delete")
def webhook_delete(request: Request, session: SessionDep, user: Admin, webhook_id: IdPath) -> Response:
    subs.delete_subscription(session=session, subscription_id=webhook_id, actor=user.name)
    return _redirect(request, "/admin/webhooks")


@router.post("/admin/webhooks/{webhook_id}/deliveries/{delivery_id}/redeliver")
def webhook_redeliver(request: Request, session: SessionDep, user: Admin, webhook_id: IdPath,
                      delivery_id: IdPath) -> Response:
    """Queue the same event (same webhook-id) for the worker's next round."""
    try:
        redeliver(session=session, subscription_id=webhook_id, delivery_id=delivery_id, now=utcnow())
    except Conflict as exc:
        return _detail_page(request, session, webhook_id, message=exc.detail, status_code=409)
    return _redirect(request, f"/admin/webhooks/{webhook_id}")
