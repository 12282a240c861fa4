"""The data generation: one database counter that every change of derived data moves, for caches shared by nothing.

Several serve processes (uvicorn workers, replicas) keep their own in-memory caches of expensive
answers (the overview's aggregates, the fleet heatmap, allocation sums). They agree with each other
because each key holds the generation read from the database: a write in any process or worker
moves the counter, so the next request anywhere computes afresh.

Domains declare the tables derived answers are read from with `watch(...)`. A transaction that
writes one of them, through the unit of work or a bulk `insert`/`update`/`delete`, increments the
counter just before it commits, in the same transaction: the new value becomes visible exactly
when the data does (a reader never sees the new number with the old rows). Incrementing at commit,
not at the first write, holds the counter's row lock for the commit only, so ingestion workers do
not queue behind each other for the length of their transactions.
"""

from __future__ import annotations

from collections.abc import Hashable
from itertools import chain

from sqlalchemy import BigInteger, Column, event, update
from sqlalchemy.orm import ORMExecuteState
from sqlalchemy.orm import Session as OrmSession
from sqlmodel import Field, Session, SQLModel, select

import app.core.models  # noqa: F401  (naming convention)

_FLAG = "data_generation_changed"
_WATCHED: set[type] = set()


class DataGeneration(SQLModel, table=True):
    __tablename__ = "data_generation"

    id: int = Field(default=1, primary_key=True)  # the one row, created by the migration
    value: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))


def watch(*models: type) -> None:
    """Declare tables whose writes change derived answers (called by each domain's models module)."""
    _WATCHED.update(models)


def current(session: Session) -> int:
    """The generation as committed."""
    return session.exec(select(DataGeneration.value).where(DataGeneration.id == 1)).one()


def cache_key(session: Session) -> Hashable:
    """The generation for a cache key; within a transaction that wrote watched rows, a key equal to no other.

    Such a transaction reads its own uncommitted rows, which no other request may be answered from
    (it may still roll back), so its answers are never found in a cache.
    """
    value = current(session)  # autoflushes first: pending writes are noted before the check
    return object() if session.info.get(_FLAG) else value


@event.listens_for(OrmSession, "before_flush")
def _note_unit_of_work(session: OrmSession, _context, _instances) -> None:
    if any(type(obj) in _WATCHED for obj in chain(session.new, session.dirty, session.deleted)):
        session.info[_FLAG] = True


@event.listens_for(OrmSession, "do_orm_execute")
def _note_bulk_statement(state: ORMExecuteState) -> None:
    if (state.is_insert or state.is_update or state.is_delete) and state.bind_mapper is not None \
            and state.bind_mapper.class_ in _WATCHED:
        state.session.info[_FLAG] = True


@event.listens_for(OrmSession, "before_commit")
def _increment(session: OrmSession) -> None:
    if session.in_nested_transaction():  # a savepoint's release: the real commit comes later
        return
    session.flush()  # commit flushes after this hook: what it would write must count too
    if session.info.pop(_FLAG, False):
        session.execute(update(DataGeneration).where(DataGeneration.id == 1).values(value=DataGeneration.value + 1))


@event.listens_for(OrmSession, "after_transaction_end")
def _forget(session: OrmSession, transaction) -> None:
    if transaction.parent is None:  # rolled back (or committed): nothing is pending any more
        session.info.pop(_FLAG, None)
