"""Races on real connections: two reviewers approving and two operators applying at once -> one new version.

And the audit log's database guard: on PostgreSQL an UPDATE or DELETE on audit_log is refused.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import timedelta

import pytest
from sqlalchemy import func, text
from sqlalchemy.exc import DBAPIError
from sqlmodel import select

from app.core.audit import AuditEntry, record
from app.core.db import unit_of_work
from app.core.errors import Conflict
from app.core.timeutil import floor_hour, utcnow
from app.policy.models import PolicyVersion
from app.review import changes, releases
from app.review.models import ChangeRequest, ChangeState
from tests.support.review import draft, seed, set_p99

EFFECTIVE = floor_hour(utcnow()) + timedelta(hours=2)


def race(engine, calls: list[Callable]) -> list:
    """Run each call in its own thread and transaction, started together; hold each transaction open a moment
    so that the others really meet its row locks. Returns each call's result or exception."""
    barrier = threading.Barrier(len(calls))
    out: list = [None] * len(calls)

    def run(i: int, call: Callable) -> None:
        try:
            with unit_of_work(engine) as session:
                barrier.wait()
                out[i] = call(session)
                time.sleep(0.2)
        except Exception as exc:
            out[i] = exc

    threads = [threading.Thread(target=run, args=(i, c)) for i, c in enumerate(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return out


def count(engine, model) -> int:
    with unit_of_work(engine) as session:
        return session.exec(select(func.count()).select_from(model)).one()


def test_two_reviewers_then_two_operators_make_exactly_one_version(pg_engine):
    with unit_of_work(pg_engine) as session:
        v1 = seed(session)
        change = draft(session, v1)
        changes.submit(session=session, change_id=change.id, actor="olga")
        release = releases.create_release(session=session, actor="oscar", name="r", service="search-chat", planned_at=EFFECTIVE)
    results = race(pg_engine, [
        lambda s: changes.approve(session=s, change_id=change.id, actor="rita").state,
        lambda s: changes.approve(session=s, change_id=change.id, actor="ravi").state,
    ])
    assert sorted(type(r).__name__ for r in results) == ["Conflict", "str"], results
    with unit_of_work(pg_engine) as session:
        row = session.get(ChangeRequest, change.id)
        assert row.state == ChangeState.APPROVED and row.approval_count == 1
        approvals = session.exec(select(AuditEntry).where(AuditEntry.action == "change.approve")).all()
        assert len(approvals) == 1
        releases.attach(session=session, release_id=release.id, change_id=change.id, actor="oscar")

    results = race(pg_engine, [
        lambda s: releases.apply_release(session=s, release_id=release.id, actor="oscar", effective_from=EFFECTIVE).id,
        lambda s: releases.apply_release(session=s, release_id=release.id, actor="otto", effective_from=EFFECTIVE).id,
    ])
    winners = [r for r in results if isinstance(r, int)]
    assert len(winners) == 1 and isinstance(next(r for r in results if not isinstance(r, int)), Conflict), results
    assert count(pg_engine, PolicyVersion) == 2


def test_two_releases_on_the_same_base_applied_at_once_make_one_version(pg_engine):
    with unit_of_work(pg_engine) as session:
        v1 = seed(session)
        ids = []
        for edit, name in ((None, "quota"), (set_p99(250), "latency")):
            change = draft(session, v1, **({"edit": edit} if edit else {}))
            changes.submit(session=session, change_id=change.id, actor="olga")
            changes.approve(session=session, change_id=change.id, actor="rita")
            release = releases.create_release(session=session, actor="oscar", name=name, service="s", planned_at=EFFECTIVE)
            releases.attach(session=session, release_id=release.id, change_id=change.id, actor="oscar")
            ids.append(release.id)
    results = race(pg_engine, [
        lambda s, rid=rid: releases.apply_release(session=s, release_id=rid, actor="oscar", effective_from=EFFECTIVE).id
        for rid in ids
    ])
    assert sorted(type(r).__name__ for r in results) == ["Conflict", "int"], results
    loser = next(r for r in results if isinstance(r, Conflict))
    assert "rebase" in loser.detail
    assert count(pg_engine, PolicyVersion) == 2


def test_audit_log_refuses_update_and_delete_on_postgres(pg_engine):
    with unit_of_work(pg_engine) as session:
        entry = record(session=session, actor="olga", action="test.entry", entity="test", entity_id="1", after={"x": 1})
        entry_id = entry.id
    for statement in ("UPDATE audit_log SET actor = 'mallory' WHERE id = :id", "DELETE FROM audit_log WHERE id = :id"):
        with pytest.raises(DBAPIError, match="append-only"):
            with unit_of_work(pg_engine) as session:
                session.execute(text(statement), {"id": entry_id})
    with pytest.raises(DBAPIError, match="append-only"):
        with unit_of_work(pg_engine) as session:
            session.execute(text("TRUNCATE audit_log"))
    with unit_of_work(pg_engine) as session:
        assert session.get(AuditEntry, entry_id).actor == "olga"
        # Appending still works.
        record(session=session, actor="olga", action="test.entry", entity="test", entity_id="2")
    assert count(pg_engine, AuditEntry) == 2


def test_two_approvals_at_once_both_count_when_two_are_required(pg_engine):
    with unit_of_work(pg_engine) as session:
        change = draft(session, seed(session))
        changes.submit(session=session, change_id=change.id, actor="olga")
    results = race(pg_engine, [
        lambda s, who=who: changes.approve(session=s, change_id=change.id, actor=who, required=2).approval_count
        for who in ("rita", "ravi")
    ])
    assert sorted(results) == [1, 2], results
    with unit_of_work(pg_engine) as session:
        row = session.get(ChangeRequest, change.id)
        assert row.state == ChangeState.APPROVED and row.approval_count == 2
