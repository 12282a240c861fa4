"""Billing contacts per tenant: read and replaced as a whole list, each address checked."""

from __future__ import annotations

import re

from sqlalchemy import delete
from sqlmodel import Session, select

from app.core.audit import record
from app.core.errors import FieldError, Invalid, NotFound
from app.core.safe_text import control_problem
from app.core.timeutil import utcnow
from app.notify.mail_models import TenantContact
from app.policy.service import active_document

MAX_CONTACTS = 20
# An addr-spec as mail servers accept it in practice: no display name, no quoted or bracketed parts.
_LOCAL = re.compile(r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*")
_LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)")


def normalized_address(address: str) -> tuple[str | None, str | None]:
    """(the address as mail servers take it, None) or (None, why it is not a deliverable address).

    The domain is stored in its ASCII (IDNA) form, so sending never needs SMTPUTF8.
    """
    if len(address) > 254:
        return None, "at most 254 characters"
    local, at, domain = address.rpartition("@")
    if not at or not local:
        return None, "an address is name@domain"
    if len(local) > 64 or not _LOCAL.fullmatch(local):
        return None, "the part before @ has a character mail does not allow here"
    try:
        ascii_domain = domain.encode("idna").decode().lower()
    except UnicodeError:
        return None, "the domain is not a valid host name"
    labels = ascii_domain.split(".")
    if len(labels) < 2 or not all(_LABEL.fullmatch(label) for label in labels):
        return None, "the domain is not a valid host name (e.g. example.com)"
    return f"{local}@{ascii_domain}", None


def tenant_names(session: Session) -> set[str]:
    """Tenants of the policy in effect (contacts are kept only for these)."""
    doc = active_document(session=session)
    return {t.name for t in doc.tenants} if doc is not None else set()


def contacts_of(*, session: Session, tenant: str) -> list[str]:
    """A tenant's billing contacts, sorted."""
    rows = session.exec(select(TenantContact.email).where(TenantContact.tenant == tenant))
    return sorted(rows)


def all_contacts(*, session: Session) -> dict[str, list[str]]:
    """Every tenant of the policy in effect with its contacts (empty list: none)."""
    out: dict[str, list[str]] = {name: [] for name in sorted(tenant_names(session))}
    for row in session.exec(select(TenantContact).order_by(TenantContact.tenant, TenantContact.email)):
        out.setdefault(row.tenant, []).append(row.email)
    return out


def replace_contacts(*, session: Session, tenant: str, emails: list[str], actor: str,
                     path: str = "emails") -> list[str]:
    """Set a tenant's contacts to `emails` (flush, never commit); 422 with a path per bad address."""
    if tenant not in tenant_names(session):
        raise NotFound(f"No tenant {tenant!r} in the policy in effect")
    errors: list[FieldError] = []
    if len(emails) > MAX_CONTACTS:
        errors.append(FieldError(path, f"at most {MAX_CONTACTS} contacts per tenant"))
    cleaned: list[str] = []
    for i, raw in enumerate(emails):
        # Before the strip: str.strip() removes NEL and U+2028, which an address must not hold to begin with.
        address, problem = (None, control_problem(raw)) if control_problem(raw.strip(" ")) else normalized_address(raw.strip())
        if address is None:
            errors.append(FieldError(f"{path}[{i}]", f"{raw.strip()!r}: {problem}"))
        elif address.lower() in {a.lower() for a in cleaned}:
            errors.append(FieldError(f"{path}[{i}]", f"{raw.strip()!r} is listed twice"))
        else:
            cleaned.append(address)
    if errors:
        raise Invalid(f"The billing contacts of {tenant} were not saved", errors)
    before = contacts_of(session=session, tenant=tenant)
    session.execute(delete(TenantContact).where(TenantContact.tenant == tenant))
    now = utcnow()
    for address in cleaned:
        session.add(TenantContact(tenant=tenant, email=address, created_at=now))
    session.flush()
    after = sorted(cleaned)
    if after != before:
        record(session=session, actor=actor, action="tenant.contacts", entity="tenant", entity_id=tenant,
               before={"emails": before}, after={"emails": after}, tenant=tenant)
    return after
