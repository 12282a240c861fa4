"""Stored versions on SQLite and PostgreSQL: import, immutability, time look-ups, backdating refused."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from sqlmodel import func, select

from app.core.audit import AuditEntry
from app.core.errors import Conflict, Invalid, NotFound
from app.core.timeutil import floor_hour, utcnow
from app.policy.document import PolicyDocument
from app.policy.models import PolicyVersion
from app.policy.service import (
    active_version,
    canonical_json,
    document_sha256,
    get_version,
    import_if_changed,
    import_version,
    list_versions,
    load_document,
    version_at,
    versions_between,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
H = timedelta(hours=1)


def _count(session) -> int:
    return session.exec(select(func.count()).select_from(PolicyVersion)).one()


def test_import_stores_canonical_json_and_audits(session, example_doc):
    before = utcnow()
    version = import_version(session=session, document=example_doc, actor="alice", comment="seed")
    assert version.id is not None
    assert version.effective_from == floor_hour(before) or version.effective_from == floor_hour(utcnow())
    assert version.document == canonical_json(example_doc)
    assert json.loads(version.document)["tenants"][0]["class"] == "inference"
    assert list(json.loads(version.document)) == sorted(json.loads(version.document))
    assert version.sha256 == document_sha256(example_doc) and len(version.sha256) == 64
    assert (version.created_by, version.source, version.comment) == ("alice", "bootstrap", "seed")
    entry = session.exec(select(AuditEntry).where(AuditEntry.entity == "policy_version", AuditEntry.entity_id == str(version.id))).one()
    assert (entry.actor, entry.action) == ("alice", "policy.bootstrap")
    assert json.loads(entry.after)["sha256"] == version.sha256


def test_a_second_import_is_a_new_version_with_the_same_sha(session, example_doc):
    first = import_version(session=session, document=example_doc, actor="a", effective_from=T0)
    second = import_version(session=session, document=example_doc, actor="b", effective_from=T0 + H)
    assert second.id > first.id
    assert second.sha256 == first.sha256
    session.expire_all()
    assert get_version(session=session, number=first.id).created_by == "a"
    assert [v.id for v in list_versions(session=session)] == [first.id, second.id]


def test_import_if_changed_stores_nothing_for_the_latest_versions_document(session, example_doc):
    """A release or a rollback may repeat a document (import_version above); `policy import` of the same file may not."""
    first, stored = import_if_changed(session=session, document=example_doc, actor="a", effective_from=T0)
    again, again_stored = import_if_changed(session=session, document=example_doc, actor="b", effective_from=T0 + H)
    assert stored and not again_stored and again.id == first.id
    data = example_doc.to_data()
    data["pools"][0]["reserved_fraction"] = "0.35"
    changed = PolicyDocument.model_validate(data)
    assert document_sha256(changed) != first.sha256
    third, third_stored = import_if_changed(session=session, document=changed, actor="c", effective_from=T0 + H)
    assert third_stored and third.id > first.id
    assert session.exec(select(func.count()).select_from(AuditEntry).where(AuditEntry.actor == "b")).one() == 0


def test_versions_take_effect_on_the_hour(session, example_doc):
    with pytest.raises(Invalid) as refused:
        import_version(session=session, document=example_doc, actor="a", effective_from=T0 + timedelta(minutes=30))
    assert [(e.path, e.message) for e in refused.value.errors] == [
        ("effective_from", f"a policy version takes effect at a whole hour: use {T0:%Y-%m-%dT%H:%M:%SZ} or "
                           f"{T0 + H:%Y-%m-%dT%H:%M:%SZ}")]
    assert list_versions(session=session) == []
    assert import_version(session=session, document=example_doc, actor="a", effective_from=T0).effective_from == T0


def test_import_refuses_an_invalid_document_and_writes_nothing(session, example_doc):
    bad = example_doc.model_copy(update={"eviction_order": ["inference-core"]})
    with pytest.raises(Invalid) as info:
        import_version(session=session, document=bad, actor="a", effective_from=T0)
    assert [(e.path, e.message) for e in info.value.errors] == [
        ("eviction_order[0]", "'inference-core' is inference: inference is never evicted")
    ]
    assert _count(session) == 0


def test_import_revalidates_fields_that_skipped_pydantic(session, example_doc):
    pool = example_doc.pools[0].model_copy(update={"reserved_fraction": Decimal("1.5")})
    with pytest.raises(Invalid) as info:
        import_version(session=session, document=example_doc.model_copy(update={"pools": [pool]}), actor="a")
    assert [(e.path, e.message) for e in info.value.errors] == [("pools[mixed-a100].reserved_fraction", "Input should be less than or equal to 1")]
    assert _count(session) == 0


def test_backdating_is_a_conflict(session, example_doc):
    import_version(session=session, document=example_doc, actor="a", effective_from=T0 + 5 * H)
    with pytest.raises(Conflict, match="cannot be backdated"):
        import_version(session=session, document=example_doc, actor="a", effective_from=T0 + 4 * H)
    assert _count(session) == 1
    # The same effective time is not backdating: the later version wins the tie.
    import_version(session=session, document=example_doc, actor="a", effective_from=T0 + 5 * H)
    assert _count(session) == 2


def test_get_version_not_found(session):
    with pytest.raises(NotFound):
        get_version(session=session, number=987654)


def _priced(example_doc, price: int):
    model = "NVIDIA A100-SXM4-80GB"
    gpu = example_doc.pricing.gpu_models[model].model_copy(update={"purchase_price": Decimal(price)})
    return example_doc.model_copy(update={"pricing": example_doc.pricing.model_copy(update={"gpu_models": {model: gpu}})})


def test_version_at_across_effective_boundaries(session, example_doc):
    v1 = import_version(session=session, document=example_doc, actor="a", effective_from=T0)
    v2 = import_version(session=session, document=_priced(example_doc, 30000), actor="a", effective_from=T0 + 5 * H)
    v3 = import_version(session=session, document=_priced(example_doc, 31000), actor="a", effective_from=T0 + 5 * H)
    assert version_at(session=session, when=T0 - H) is None
    assert version_at(session=session, when=T0).id == v1.id
    assert version_at(session=session, when=T0 + 4 * H).id == v1.id
    assert version_at(session=session, when=T0 + 5 * H).id == v3.id  # tie on effective_from: highest number
    assert v2.id < v3.id
    assert active_version(session=session, at=T0 + 2 * H).id == v1.id
    assert active_version(session=session).id == v3.id
    doc = load_document(version_at(session=session, when=T0 + 6 * H))
    assert doc.pricing.gpu_models["NVIDIA A100-SXM4-80GB"].purchase_price == 31000
    assert load_document(v1) == example_doc


def test_versions_between_covers_the_range_in_segments(session, example_doc):
    v1 = import_version(session=session, document=example_doc, actor="a", effective_from=T0)
    import_version(session=session, document=_priced(example_doc, 30000), actor="a", effective_from=T0 + 5 * H)
    v3 = import_version(session=session, document=_priced(example_doc, 31000), actor="a", effective_from=T0 + 5 * H)
    v4 = import_version(session=session, document=example_doc, actor="a", effective_from=T0 + 7 * H)
    segments = versions_between(session=session, start=T0 - 2 * H, end=T0 + 9 * H)
    assert [(a, b, v.id) for a, b, v in segments] == [
        (T0, T0 + 5 * H, v1.id),
        (T0 + 5 * H, T0 + 7 * H, v3.id),
        (T0 + 7 * H, T0 + 9 * H, v4.id),
    ]
    inside = versions_between(session=session, start=T0 + 6 * H, end=T0 + 7 * H)
    assert [(a, b, v.id) for a, b, v in inside] == [(T0 + 6 * H, T0 + 7 * H, v3.id)]
    assert versions_between(session=session, start=T0 + 3 * H, end=T0 + 3 * H) == []
    assert versions_between(session=session, start=T0 - 3 * H, end=T0 - H) == []
