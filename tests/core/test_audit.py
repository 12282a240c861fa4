"""The one audit read side: filters, prefix matching taken literally, tenant visibility, the public form."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlmodel import select

from app.core.audit import AuditEntry, AuditPublic, readable_entries, record
from app.core.errors import Invalid
from app.core.timeutil import utcnow


def _ids(session, **filters) -> list[int]:
    stmt = readable_entries(tenants=filters.pop("tenants", None), **filters)
    return [e.id for e in session.exec(stmt.order_by(AuditEntry.id.desc()))]


def test_filters_visibility_and_a_literal_prefix(session):
    made = {}
    for key, action, entity_id, tenant in [("submit", "change.submit", "1", None), ("other", "changeXreq.x", "1", None),
                                           ("under", "change_req.x", "2", None), ("close", "period.close", "2026-10", "vision")]:
        made[key] = record(session=session, actor="ops", action=action, entity="e", entity_id=entity_id, tenant=tenant).id
    mine = set(made.values())
    assert [i for i in _ids(session, entity_id="1") if i in mine] == [made["other"], made["submit"]]
    # '_' and '%' in a prefix are literal characters, not LIKE wildcards (the policy endpoint's rule won).
    assert [i for i in _ids(session, action="change_req.") if i in mine] == [made["under"]]
    assert [i for i in _ids(session, action="change.") if i in mine] == [made["submit"]]
    assert [i for i in _ids(session, action="change.submit") if i in mine] == [made["submit"]]
    assert [i for i in _ids(session, tenants={"vision"}) if i in mine] == [made["close"]]
    assert [i for i in _ids(session, tenants=set()) if i in mine] == []
    assert [i for i in _ids(session, until=utcnow() - timedelta(days=1)) if i in mine] == []
    assert [i for i in _ids(session, since=utcnow() - timedelta(days=1), actor="ops") if i in mine] == sorted(mine, reverse=True)


def test_a_nul_in_a_filter_is_a_422_naming_the_field():
    with pytest.raises(Invalid) as caught:
        readable_entries(tenants=None, entity_id="a\x00")
    assert [e.path for e in caught.value.errors] == ["query.entity_id"]


def test_the_public_form_decodes_before_and_after(session):
    entry = record(session=session, actor="ops", action="x.y", entity="e", entity_id="1", before={"a": 1}, after=[2])
    shown = AuditPublic.of(session.exec(select(AuditEntry).where(AuditEntry.id == entry.id)).one())
    assert (shown.before, shown.after, shown.at.tzinfo is not None) == ({"a": 1}, [2], True)
