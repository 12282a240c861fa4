"""Change requests: the state machine, immutability, four eyes, rebase, validation and audit."""

from __future__ import annotations

import json

import pytest
from sqlmodel import select

from app.core.audit import AuditEntry
from app.core.errors import AppError, Conflict, Invalid
from app.review import changes, impact
from app.review.models import ChangeState
from tests.support.review import approved, draft, edited, seed, set_p99, set_price, set_quota


def audit(session, action: str, change_id: int) -> list[AuditEntry]:
    return list(session.exec(select(AuditEntry).where(AuditEntry.action == action, AuditEntry.entity_id == str(change_id))))


def test_create_starts_from_current_version(session):
    v1 = seed(session)
    change = changes.create_change(session=session, actor="olga", title="t", justification="why")
    assert change.state == ChangeState.DRAFT and change.base_version_id == v1.id
    assert "mixed-a100" in change.document
    assert changes.semantic_diff(session=session, change=change) == []


@pytest.mark.parametrize("title,justification,path", [("", "why", "title"), ("t", "  ", "justification")])
def test_title_and_justification_required(session, title, justification, path):
    seed(session)
    with pytest.raises(Invalid) as err:
        changes.create_change(session=session, actor="olga", title=title, justification=justification)
    assert [e.path for e in err.value.errors] == [path]


def test_full_workflow_and_audit(session):
    v1 = seed(session)
    change = draft(session, v1)
    assert [c.path for c in changes.semantic_diff(session=session, change=change)] == ["quotas[vision/mixed-a100].guaranteed_gpus"]
    changes.submit(session=session, change_id=change.id, actor="olga")
    assert change.state == ChangeState.SUBMITTED
    changes.add_comment(session=session, change_id=change.id, actor="vic", body="looks fine")
    changes.approve(session=session, change_id=change.id, actor="rita", comment="ok")
    assert change.state == ChangeState.APPROVED and change.approval_count == 1
    for action in ("change.create", "change.submit", "change.comment", "change.approve"):
        assert len(audit(session, action, change.id)) == 1, action
    entry = audit(session, "change.approve", change.id)[0]
    assert json.loads(entry.before)["state"] == "submitted" and json.loads(entry.after)["state"] == "approved"
    assert entry.actor == "rita"


def test_immutable_once_submitted(session):
    v1 = seed(session)
    change = draft(session, v1)
    changes.submit(session=session, change_id=change.id, actor="olga")
    with pytest.raises(Conflict):
        changes.update_change(session=session, change_id=change.id, actor="olga", document=edited(v1, set_quota(2)))
    with pytest.raises(Conflict):
        changes.submit(session=session, change_id=change.id, actor="olga")
    assert "guaranteed_gpus: 6" in change.document


def test_only_author_edits_and_submits(session):
    v1 = seed(session)
    change = draft(session, v1)
    for call in (changes.update_change, changes.submit, changes.withdraw):
        with pytest.raises(AppError) as err:
            call(session=session, change_id=change.id, actor="mallory")
        assert err.value.status == 403


def test_four_eyes_author_cannot_approve_or_reject(session):
    v1 = seed(session)
    change = draft(session, v1, author="ada")  # ada may well be an admin: still not her own reviewer
    changes.submit(session=session, change_id=change.id, actor="ada")
    for call in (changes.approve, changes.reject):
        with pytest.raises(AppError) as err:
            call(session=session, change_id=change.id, actor="ada")
        assert err.value.status == 403
    assert change.state == ChangeState.SUBMITTED and change.approval_count == 0


def test_required_approvals_counts_distinct_reviewers(session):
    v1 = seed(session)
    change = draft(session, v1)
    changes.submit(session=session, change_id=change.id, actor="olga")
    changes.approve(session=session, change_id=change.id, actor="rita", required=2)
    assert change.state == ChangeState.SUBMITTED and change.approval_count == 1
    with pytest.raises(Conflict):
        changes.approve(session=session, change_id=change.id, actor="rita", required=2)
    changes.approve(session=session, change_id=change.id, actor="ravi", required=2)
    assert change.state == ChangeState.APPROVED and change.approval_count == 2


def test_reject_and_withdraw_are_terminal(session):
    v1 = seed(session)
    rejected = draft(session, v1)
    changes.submit(session=session, change_id=rejected.id, actor="olga")
    changes.reject(session=session, change_id=rejected.id, actor="rita", comment="too many")
    assert rejected.state == ChangeState.REJECTED
    with pytest.raises(Conflict):
        changes.approve(session=session, change_id=rejected.id, actor="ravi")
    with pytest.raises(Conflict):
        changes.withdraw(session=session, change_id=rejected.id, actor="olga")
    withdrawn = draft(session, v1)
    changes.withdraw(session=session, change_id=withdrawn.id, actor="olga")
    assert withdrawn.state == ChangeState.WITHDRAWN
    with pytest.raises(Conflict):
        changes.submit(session=session, change_id=withdrawn.id, actor="olga")
    assert len(audit(session, "change.reject", rejected.id)) == 1
    assert len(audit(session, "change.withdraw", withdrawn.id)) == 1


def test_draft_is_approvable_only_after_submission(session):
    v1 = seed(session)
    change = draft(session, v1)
    with pytest.raises(Conflict):
        changes.approve(session=session, change_id=change.id, actor="rita")


def test_validation_errors_block_submission_with_paths(session):
    v1 = seed(session)
    change = draft(session, v1, edit=set_quota(99))
    with pytest.raises(Invalid) as err:
        changes.submit(session=session, change_id=change.id, actor="olga")
    assert "document.quotas[vision/mixed-a100].guaranteed_gpus" in [e.path for e in err.value.errors]
    assert change.state == ChangeState.DRAFT
    broken = changes.update_change(session=session, change_id=change.id, actor="olga", document="tenants: [")
    with pytest.raises(Invalid):
        changes.submit(session=session, change_id=broken.id, actor="olga")


def test_no_op_change_cannot_be_submitted(session):
    seed(session)
    change = changes.create_change(session=session, actor="olga", title="t", justification="why")
    with pytest.raises(Invalid):
        changes.submit(session=session, change_id=change.id, actor="olga")


def _advance(session, v1, edit):
    """Another request, approved and applied as a new version: v1 is no longer current."""
    from app.policy.parsing import parse_document
    from app.policy.service import import_version

    other = parse_document(edited(v1, edit))
    return import_version(session=session, document=other, actor="ops", source="change",
                          effective_from=v1.effective_from.replace(month=2))


def test_rebase_without_conflict_keeps_both_changes(session):
    v1 = seed(session)
    change = approved(session, v1)
    v2 = _advance(session, v1, set_p99(250))
    assert changes.is_stale(session=session, change=change)
    result = changes.rebase(session=session, change_id=change.id, actor="olga")
    assert result["rebased"] and result["conflicts"] == []
    assert change.base_version_id == v2.id and change.state == ChangeState.APPROVED
    assert "guaranteed_gpus: 6" in change.document and "p99_ms: 250" in change.document
    assert not changes.is_stale(session=session, change=change)
    assert len(audit(session, "change.rebase", change.id)) == 1


def test_rebase_with_conflict_reports_fields_and_changes_nothing(session):
    v1 = seed(session)
    change = approved(session, v1)
    _advance(session, v1, set_quota(2))
    before = change.document
    result = changes.rebase(session=session, change_id=change.id, actor="olga")
    assert not result["rebased"]
    assert [c["path"] for c in result["conflicts"]] == ["quotas[vision/mixed-a100].guaranteed_gpus"]
    conflict = result["conflicts"][0]
    assert (conflict["base"], conflict["ours"], conflict["theirs"]) == (4, 6, 2)
    assert change.base_version_id == v1.id and change.document == before
    assert audit(session, "change.rebase", change.id) == []


def test_preview_capacity_and_memory(session):
    v1 = seed(session)
    change = draft(session, v1, edit=set_quota(20))
    preview = impact.preview(session=session, change=change, measured_peaks={"search": 500_000})
    assert not preview["valid"]
    pool = preview["capacity"]["quotas"][0]
    assert (pool["pool"], pool["gpus"], pool["guaranteed_before"], pool["guaranteed"], pool["over"]) == ("mixed-a100", 16, 4, 20, True)
    mig = {row["gpus"]: row for row in preview["capacity"]["mig"]}
    assert mig["0-3"]["slices_used"] == 6 and mig["4-7"]["slices_used"] == 7 and mig["0-3"]["slices"] == 7
    memory = preview["capacity"]["memory"][0]
    # 30% of 16 A100-80GB = 4.8 GPUs x 81920 MiB = 393216 MiB reserved, below 1.2 x 500000
    assert memory["reserved_mib"] == 393216 and memory["required_mib"] == 600000 and memory["ok"] is False
    assert preview["price"] is None  # pricing untouched


def test_preview_price_change_without_rollups_names_the_month(session):
    v1 = seed(session)
    change = draft(session, v1, edit=set_price("0.30"))
    preview = impact.preview(session=session, change=change)
    assert preview["price"]["pool_hours"] == 0 and len(preview["price"]["month"]) == 7
    assert [c["path"] for c in preview["diff"]] == ["pricing.energy_price_per_kwh"]


def test_preview_price_change_rerates_last_month_tenant_by_tenant(session):
    """Energy 0.20 -> 0.40 per kWh: each A100 hour costs 1.40 instead of 1.30 (SPEC 5's worked example),
    so every tenant's charges for the stored hours scale by 14/13."""
    from datetime import UTC, datetime, timedelta
    from decimal import Decimal

    from tests.support.billing import add_hour

    v1 = seed(session)
    start = datetime(2026, 10, 7, 12, tzinfo=UTC)
    for i in range(3):
        add_hour(session, hour=start + timedelta(hours=i), version=v1.id, breaches=())
    change = draft(session, v1, edit=set_price("0.40"))
    price = impact.preview(session=session, change=change, month="2026-10")["price"]
    assert price["month"] == "2026-10" and price["pool_hours"] == 3 and price["currency"] == "USD"
    rows = {r["tenant"]: r for r in price["tenants"]}
    assert {"search", "vision", "etl"} <= set(rows)
    for tenant in ("search", "vision", "etl"):
        before, after = Decimal(rows[tenant]["before"]), Decimal(rows[tenant]["after"])
        assert before > 0
        assert abs(after - before * 14 / 13) <= Decimal("0.01"), (tenant, before, after)
        assert Decimal(rows[tenant]["delta"]) == after - before


@pytest.mark.parametrize("path,value,expect", [
    ("quotas[vision/mixed-a100].guaranteed_gpus", "6", "quotas[vision/mixed-a100].guaranteed_gpus"),
    ("priorities[training].value", "20000", "priorities[training].value"),
    ('isolation.mig["gpu-a100-02"].gpus', '{"0-6": {"1g.10gb": 7}}', 'isolation.mig["gpu-a100-02"].gpus'),
    ("sla[search-chat].penalty_per_breach_minute", "0.75", "sla[search-chat].penalty_per_breach_minute"),
    ('pricing.gpu_models["NVIDIA A100-SXM4-80GB"].purchase_price', "30000", 'pricing.gpu_models["NVIDIA A100-SXM4-80GB"].purchase_price'),
])
def test_structured_edit_sets_one_field_by_its_diff_path(session, path, value, expect):
    v1 = seed(session)
    change = changes.create_change(session=session, actor="olga", title="t", justification="why")
    changes.set_field(session=session, change_id=change.id, actor="olga", path=path, value=value)
    diff = changes.semantic_diff(session=session, change=change)
    assert [c.path for c in diff] == [expect] or (expect.startswith("isolation.mig") and diff[0].path.startswith(expect))
    assert change.base_version_id == v1.id


def test_structured_edit_refusals(session):
    seed(session)
    change = changes.create_change(session=session, actor="olga", title="t", justification="why")
    for path, value, field in [("quotas[nobody/x].guaranteed_gpus", "1", "path"), ("sla[", "1", "path"),
                               ("pricing.pue", "[unclosed", "value"), ("pricing.pue", "0.5", "pricing.pue")]:
        with pytest.raises(Invalid) as err:
            changes.set_field(session=session, change_id=change.id, actor="olga", path=path, value=value)
        assert err.value.errors[0].path == field, (path, err.value.errors)
    changes.set_field(session=session, change_id=change.id, actor="olga", path="pricing.pue", value="1.3")
    changes.update_change(session=session, change_id=change.id, actor="olga", title="t2")
    with pytest.raises(AppError) as err:
        changes.set_field(session=session, change_id=change.id, actor="rita", path="pricing.pue", value="1.4")
    assert err.value.status == 403


def test_states_are_enums_with_the_stored_values():
    from app.review.models import ReleaseState

    assert [s.value for s in ChangeState] == ["draft", "submitted", "approved", "rejected", "withdrawn", "applied"]
    assert [s.value for s in ReleaseState] == ["planned", "applied", "deployed", "rolled_back"]
    assert f"{ChangeState.DRAFT}" == "draft" and ChangeState("applied") == "applied"


@pytest.mark.parametrize("char", ["\r", "\n", "\x85", "\u2028", "\u2029", "\x1b", "\x00", "\x7f"])
def test_a_title_is_one_line_without_control_characters(session, char):
    seed(session)
    with pytest.raises(Invalid) as err:
        changes.create_change(session=session, actor="olga", title=f"six{char}GPUs", justification="why")
    assert [e.path for e in err.value.errors] == ["title"] and f"U+{ord(char):04X}" in err.value.errors[0].message


def test_prose_keeps_its_lines_and_refuses_other_control_characters(session):
    v1 = seed(session)
    change = changes.create_change(session=session, actor="olga", title="t", justification="why:\r\n\tQ4 demand")
    assert change.justification == "why:\r\n\tQ4 demand"
    for char in ("\x85", "\u2028", "\x1b", "\x00", "\r"):  # a CR only before LF
        with pytest.raises(Invalid) as err:
            changes.create_change(session=session, actor="olga", title="t", justification=f"why{char}=cmd")
        assert [e.path for e in err.value.errors] == ["justification"]
        with pytest.raises(Invalid) as err:
            changes.add_comment(session=session, change_id=change.id, actor="vic", body=f"ok{char}=cmd")
        assert [e.path for e in err.value.errors] == ["body"]
    submitted = draft(session, v1)
    changes.submit(session=session, change_id=submitted.id, actor="olga")
    with pytest.raises(Invalid) as err:
        changes.approve(session=session, change_id=submitted.id, actor="rita", comment="fine\u2028=cmd")
    assert [e.path for e in err.value.errors] == ["comment"] and submitted.state == ChangeState.SUBMITTED
    assert changes.add_comment(session=session, change_id=change.id, actor="vic", body="two\nlines").body == "two\nlines"
