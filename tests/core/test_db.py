"""Transactions behave the same on SQLite and PostgreSQL: a released savepoint is not a commit."""

from sqlmodel import Session, func, select

from app.core.audit import AuditEntry, record


def _count(engine) -> int:
    with Session(engine) as s:
        return s.exec(select(func.count()).select_from(AuditEntry)).one()


def test_released_savepoint_rolls_back_with_its_transaction(fresh_engine):
    connection = fresh_engine.connect()
    outer = connection.begin()
    session = Session(bind=connection, join_transaction_mode="create_savepoint")
    record(session=session, actor="t", action="a", entity="e", entity_id="1")
    session.commit()  # releases the savepoint only
    assert session.exec(select(func.count()).select_from(AuditEntry)).one() == 1
    session.close()
    outer.rollback()
    connection.close()
    assert _count(fresh_engine) == 0


def test_nested_savepoint_rollback_keeps_the_outer_work(fresh_engine):
    with Session(fresh_engine) as session:
        record(session=session, actor="t", action="kept", entity="e", entity_id="1")
        try:
            with session.begin_nested():
                record(session=session, actor="t", action="dropped", entity="e", entity_id="2")
                raise RuntimeError("boom")
        except RuntimeError:
            pass
        session.commit()
    with Session(fresh_engine) as session:
        assert [e.action for e in session.exec(select(AuditEntry)).all()] == ["kept"]
