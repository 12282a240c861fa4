"""Keyset pagination with opaque cursors."""

from datetime import UTC, datetime, timedelta

import pytest
from sqlmodel import select

from app.core.audit import AuditEntry
from app.core.errors import Invalid
from app.http.pagination import decode_cursor, encode_cursor, paginate

T0 = datetime(2026, 11, 1, tzinfo=UTC)


def _entries(session, n=7):
    # Pairs of entries share a timestamp: the cursor must use (at, id) to stay unique.
    for i in range(n):
        session.add(AuditEntry(at=T0 + timedelta(minutes=i // 2), actor="t", action="x", entity="e",
                               entity_id=str(i)))
    session.flush()


def test_pages_cover_every_row_once_in_order(session):
    _entries(session)
    keys = [AuditEntry.at, AuditEntry.id]
    seen, cursor, pages = [], None, 0
    while True:
        rows, cursor = paginate(session, select(AuditEntry), keys=keys, limit=3, cursor=cursor)
        seen += [r.entity_id for r in rows]
        pages += 1
        if cursor is None:
            break
    assert seen == [str(i) for i in range(7)]
    assert pages == 3


def test_descending_pages_newest_first(session):
    _entries(session)
    keys = [AuditEntry.at, AuditEntry.id]
    seen, cursor = [], None
    while True:
        rows, cursor = paginate(session, select(AuditEntry), keys=keys, limit=3, cursor=cursor, descending=True)
        seen += [r.entity_id for r in rows]
        if cursor is None:
            break
    assert seen == [str(i) for i in reversed(range(7))]


def test_exact_multiple_of_limit_has_no_empty_last_page(session):
    _entries(session, n=6)
    rows, cursor = paginate(session, select(AuditEntry), keys=[AuditEntry.id], limit=3, cursor=None)
    rows, cursor = paginate(session, select(AuditEntry), keys=[AuditEntry.id], limit=3, cursor=cursor)
    assert len(rows) == 3 and cursor is None


def test_rows_inserted_before_the_cursor_do_not_shift_pages(session):
    _entries(session, n=4)
    keys = [AuditEntry.at, AuditEntry.id]
    first, cursor = paginate(session, select(AuditEntry), keys=keys, limit=2, cursor=None)
    session.add(AuditEntry(at=T0 - timedelta(days=1), actor="t", action="x", entity="e", entity_id="early"))
    session.flush()
    second, _ = paginate(session, select(AuditEntry), keys=keys, limit=2, cursor=cursor)
    assert [r.entity_id for r in second] == ["2", "3"]


@pytest.mark.parametrize("cursor", ["not base64 !!", encode_cursor([1]), encode_cursor(["x", 1]), "W10", "e30"])
def test_bad_cursors_are_422_naming_the_parameter(cursor):
    with pytest.raises(Invalid) as err:
        decode_cursor(cursor, [datetime, int])
    assert err.value.errors[0].path == "query.cursor"


def test_cursor_round_trip_keeps_types():
    when = datetime(2026, 11, 30, 12, 30, tzinfo=UTC)
    assert decode_cursor(encode_cursor([when, 42, "a"]), [datetime, int, str]) == [when, 42, "a"]
