"""Billing contacts schemas: the addresses a tenant's invoice and budget alerts are e-mailed to."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field

from app.api.schemas import Out
from app.notify.mail_contacts import MAX_CONTACTS


class ContactsIn(BaseModel):
    emails: list[Annotated[str, Field(max_length=320)]] = Field(
        max_length=MAX_CONTACTS * 5, description=f"the whole list (replaces it); at most {MAX_CONTACTS} addresses")


class ContactsOut(Out):
    tenant: str
    emails: list[str] = Field(description="sorted")
