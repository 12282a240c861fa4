"""Admin page: billing contacts per tenant, and the e-mails sent (or not) with a "retry now" action."""

from __future__ import annotations

import re
from typing import Annotated

from fastapi import APIRouter, Form, Path, Request
from starlette.responses import RedirectResponse, Response

from app.auth.deps import Finance
from app.core.deps import SessionDep
from app.core.errors import Invalid
from app.core.settings import get_settings
from app.core.timeutil import utcnow
from app.http.htmx import is_htmx
from app.http.pagination import IdPath
from app.http.templating import render
from app.notify.mail_contacts import all_contacts, replace_contacts
from app.notify.mail_deliver import recent_sends, retry_now

router = APIRouter(include_in_schema=False)
Emails = Annotated[str, Form(max_length=20_000)]


def _page(request: Request, session, *, message: str = "", errors: dict[str, list[str]] | None = None,
          typed: dict[str, str] | None = None, status_code: int = 200) -> Response:
    settings = get_settings()
    context = {
        "title": "Billing e-mail", "contacts": all_contacts(session=session), "sends": recent_sends(session=session),
        "message": message, "errors": errors or {}, "typed": typed or {}, "now": utcnow(),
        "smtp_host": settings.smtp_host, "finance_recipients": settings.finance_addresses,
    }
    return render(request, "admin/contacts.html", context, status_code=status_code)


def _after_post(request: Request) -> Response:
    if is_htmx(request):
        return Response(status_code=204, headers={"HX-Redirect": "/admin/contacts"})
    return RedirectResponse("/admin/contacts", status_code=303)


@router.get("/admin/contacts")
def contacts_page(request: Request, session: SessionDep, user: Finance) -> Response:
    return _page(request, session)


@router.post("/admin/contacts/{tenant}")
def contacts_save(request: Request, session: SessionDep, user: Finance, tenant: Annotated[str, Path(max_length=200)],
                  emails: Emails = "") -> Response:
    """One address a line (commas also separate); a bad one comes back beside the field, the input kept."""
    addresses = [a for a in re.split(r"[,\r\n]", emails) if a.strip(" ")]  # a textarea sends CRLF
    try:
        replace_contacts(session=session, tenant=tenant, emails=addresses, actor=user.name)
    except Invalid as exc:
        return _page(request, session, errors={tenant: [e.message for e in exc.errors]}, typed={tenant: emails},
                     status_code=422)
    return _after_post(request)


@router.post("/admin/mail/{send_id}/retry")
def mail_retry(request: Request, session: SessionDep, user: Finance, send_id: IdPath) -> Response:
    """Queue one send for the worker's next round (the page never sends mail itself)."""
    retry_now(session=session, send_id=send_id, now=utcnow())
    return _after_post(request)
