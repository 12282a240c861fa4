"""Request-scoped unit of work: the request commits when the handler returns, rolls back when it raises."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends
from sqlmodel import Session

from app.core.db import unit_of_work


def get_session() -> Iterator[Session]:
    with unit_of_work() as session:
        yield session


# "function" scope: commit before the response leaves. With the default ("request") FastAPI commits after
# sending it, so a client following a redirect (sign-in, post/redirect/get) could outrun the commit.
SessionDep = Annotated[Session, Depends(get_session, scope="function")]
