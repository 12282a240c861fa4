"""Billing contacts API (/api/v1): the addresses a tenant's invoice and budget alerts are e-mailed to."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from app.api.schemas.mail import ContactsIn, ContactsOut
from app.auth.deps import Finance
from app.core.deps import SessionDep
from app.core.errors import NotFound
from app.notify.mail_contacts import contacts_of, replace_contacts, tenant_names

router = APIRouter(tags=["mail"])
TenantPath = Annotated[str, Path(max_length=200)]


@router.get("/tenants/{tenant}/contacts")
def get_contacts(tenant: TenantPath, session: SessionDep, user: Finance) -> ContactsOut:
    """A tenant's billing contacts (admin, finance); 404 for a tenant the policy in effect does not name."""
    if tenant not in tenant_names(session):
        raise NotFound(f"No tenant {tenant!r} in the policy in effect")
    return ContactsOut(tenant=tenant, emails=contacts_of(session=session, tenant=tenant))


@router.put("/tenants/{tenant}/contacts")
def put_contacts(tenant: TenantPath, body: ContactsIn, session: SessionDep, user: Finance) -> ContactsOut:
    """Replace a tenant's billing contacts; each bad address is a 422 error at `emails[i]`, nothing saved."""
    emails = replace_contacts(session=session, tenant=tenant, emails=body.emails, actor=user.name)
    return ContactsOut(tenant=tenant, emails=emails)
