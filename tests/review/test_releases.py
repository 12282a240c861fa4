"""Releases: the apply gate, deploy after apply only, rollback, artifacts, audit and effective times."""

from __future__ import annotations

import io
import json
import zipfile
from datetime import timedelta

import pytest
from sqlmodel import select

from app.core.audit import AuditEntry
from app.core.errors import Conflict, Invalid
from app.core.timeutil import floor_hour, utcnow
from app.policy.models import PolicyVersion
from app.policy.service import latest_version, load_document, version_at
from app.review import changes, releases
from app.review.models import ChangeState, PolicyArtifact, ReleaseState
from tests.support.review import approved, draft, seed, set_p99, set_price

# Changes go forward: every effective time is after the test starts.
PLANNED = floor_hour(utcnow()) + timedelta(hours=2)


def new_release(session, name="search v2"):
    return releases.create_release(session=session, actor="oscar", name=name, service="search-chat", planned_at=PLANNED)


def test_apply_makes_one_active_version_with_artifacts(session):
    v1 = seed(session)
    change = approved(session, v1)
    release = new_release(session)
    releases.attach(session=session, release_id=release.id, change_id=change.id, actor="oscar")
    effective = PLANNED
    v2 = releases.apply_release(session=session, release_id=release.id, actor="oscar", effective_from=effective)
    assert v2.source == "change" and v2.effective_from == effective and v2.id == latest_version(session=session).id
    assert load_document(v2).quotas[0].guaranteed_gpus == 6
    assert release.state == ReleaseState.APPLIED and release.previous_version_id == v1.id and release.applied_version_id == v2.id
    assert change.state == ChangeState.APPLIED and change.applied_version_id == v2.id
    artifact = session.get(PolicyArtifact, v2.id)
    files = json.loads(artifact.files)
    assert "prometheus/rules.yaml" in files and "mig/mig-parted-config.yaml" in files
    names = zipfile.ZipFile(io.BytesIO(artifact.bundle)).namelist()
    assert f"policy-v{v2.id}/prometheus/rules.yaml" in names
    actions = {e.action for e in session.exec(select(AuditEntry).where(AuditEntry.entity_id.in_([str(release.id), str(change.id), str(v2.id)])))}
    assert {"release.create", "release.attach", "release.apply", "change.apply", "policy.change"} <= actions


def test_price_change_mid_month_bills_later_hours_with_new_version(session):
    v1 = seed(session)
    change = approved(session, v1, edit=set_price("0.35"))
    release = new_release(session)
    releases.attach(session=session, release_id=release.id, change_id=change.id, actor="oscar")
    effective = PLANNED + timedelta(hours=5)
    v2 = releases.apply_release(session=session, release_id=release.id, actor="oscar", effective_from=effective)
    assert version_at(session=session, when=effective - timedelta(hours=1)).id == v1.id
    assert version_at(session=session, when=effective).id == v2.id
    assert version_at(session=session, when=effective + timedelta(hours=5)).id == v2.id
    assert str(load_document(version_at(session=session, when=effective)).pricing.energy_price_per_kwh) == "0.35"


def test_deploy_only_after_apply(session):
    v1 = seed(session)
    release = new_release(session)
    with pytest.raises(Conflict, match="apply policy first"):
        releases.deploy_release(session=session, release_id=release.id, actor="oscar")
    releases.attach(session=session, release_id=release.id, change_id=approved(session, v1).id, actor="oscar")
    releases.apply_release(session=session, release_id=release.id, actor="oscar", effective_from=floor_hour(utcnow()))
    releases.deploy_release(session=session, release_id=release.id, actor="oscar")
    assert release.state == ReleaseState.DEPLOYED and release.deployed_by == "oscar"
    with pytest.raises(Conflict):
        releases.deploy_release(session=session, release_id=release.id, actor="oscar")


def test_deploy_only_once_the_version_is_in_effect(session):
    """Applied from a later hour: the deployment would run against policy not in effect yet (409, nothing changes)."""
    v1 = seed(session)
    release = new_release(session)
    releases.attach(session=session, release_id=release.id, change_id=approved(session, v1).id, actor="oscar")
    releases.apply_release(session=session, release_id=release.id, actor="oscar", effective_from=PLANNED)
    with pytest.raises(Conflict, match="takes effect at") as err:
        releases.deploy_release(session=session, release_id=release.id, actor="oscar")
    assert err.value.status == 409 and release.state == ReleaseState.APPLIED
    assert releases.deploy_blocker(release, now=PLANNED - timedelta(seconds=1)) is not None
    assert releases.deploy_blocker(release, now=PLANNED) is None


def test_apply_refuses_empty_unapproved_or_stale(session):
    v1 = seed(session)
    empty = new_release(session, "empty")
    with pytest.raises(Conflict, match="no approved"):
        releases.apply_release(session=session, release_id=empty.id, actor="oscar", effective_from=PLANNED)
    session.refresh(empty)
    assert empty.state == ReleaseState.PLANNED  # a refused gate leaves nothing behind
    submitted = draft(session, v1)
    changes.submit(session=session, change_id=submitted.id, actor="olga")
    with pytest.raises(Conflict, match="only an approved"):
        releases.attach(session=session, release_id=empty.id, change_id=submitted.id, actor="oscar")
    # Two releases built on v1: the second must be rebased once the first is applied.
    first, second = new_release(session, "first"), new_release(session, "second")
    releases.attach(session=session, release_id=first.id, change_id=approved(session, v1).id, actor="oscar")
    stale = approved(session, v1, edit=set_p99(250))
    releases.attach(session=session, release_id=second.id, change_id=stale.id, actor="oscar")
    releases.apply_release(session=session, release_id=first.id, actor="oscar", effective_from=PLANNED)
    with pytest.raises(Conflict, match="rebase"):
        releases.apply_release(session=session, release_id=second.id, actor="oscar", effective_from=PLANNED)


def test_request_joins_one_release_only(session):
    v1 = seed(session)
    change = approved(session, v1)
    a, b = new_release(session, "a"), new_release(session, "b")
    releases.attach(session=session, release_id=a.id, change_id=change.id, actor="oscar")
    with pytest.raises(Conflict):
        releases.attach(session=session, release_id=b.id, change_id=change.id, actor="oscar")
    with pytest.raises(Conflict):
        changes.withdraw(session=session, change_id=change.id, actor="olga")
    releases.detach(session=session, release_id=a.id, change_id=change.id, actor="oscar")
    releases.attach(session=session, release_id=b.id, change_id=change.id, actor="oscar")


def test_release_with_two_requests_merges_them_into_one_version(session):
    v1 = seed(session)
    quota, latency = approved(session, v1), approved(session, v1, edit=set_p99(250))
    release = new_release(session)
    for c in (quota, latency):
        releases.attach(session=session, release_id=release.id, change_id=c.id, actor="oscar")
    v2 = releases.apply_release(session=session, release_id=release.id, actor="oscar", effective_from=PLANNED)
    doc = load_document(v2)
    assert doc.quotas[0].guaranteed_gpus == 6 and doc.sla[0].p99_ms == 250
    assert len(list(session.exec(select(PolicyVersion)))) == 2


def test_rollback_makes_a_new_version_equal_to_the_previous(session):
    v1 = seed(session)
    release = new_release(session)
    releases.attach(session=session, release_id=release.id, change_id=approved(session, v1).id, actor="oscar")
    v2 = releases.apply_release(session=session, release_id=release.id, actor="oscar", effective_from=floor_hour(utcnow()))
    releases.deploy_release(session=session, release_id=release.id, actor="oscar")
    v3 = releases.rollback_release(session=session, release_id=release.id, actor="oscar", effective_from=PLANNED + timedelta(hours=3))
    assert v3.id > v2.id and v3.source == "rollback" and v3.sha256 == v1.sha256
    assert release.state == ReleaseState.ROLLED_BACK and release.rollback_version_id == v3.id
    assert version_at(session=session, when=PLANNED + timedelta(hours=3)).id == v3.id
    assert session.get(PolicyArtifact, v3.id) is not None
    with pytest.raises(Conflict):
        releases.rollback_release(session=session, release_id=release.id, actor="oscar")


def test_rollback_refused_when_a_later_version_exists(session):
    v1 = seed(session)
    first = new_release(session, "first")
    releases.attach(session=session, release_id=first.id, change_id=approved(session, v1).id, actor="oscar")
    v2 = releases.apply_release(session=session, release_id=first.id, actor="oscar", effective_from=PLANNED)
    second = new_release(session, "second")
    releases.attach(session=session, release_id=second.id, change_id=approved(session, v2, edit=set_p99(250)).id, actor="oscar")
    releases.apply_release(session=session, release_id=second.id, actor="oscar", effective_from=PLANNED + timedelta(hours=1))
    with pytest.raises(Conflict, match="roll that back first"):
        releases.rollback_release(session=session, release_id=first.id, actor="oscar")


def test_planned_release_edit_and_delete(session):
    seed(session)
    release = new_release(session)
    releases.update_release(session=session, release_id=release.id, actor="oscar", name="search v3")
    assert release.name == "search v3"
    releases.delete_release(session=session, release_id=release.id, actor="oscar")
    assert releases.list_releases(session=session) == []


def test_stale_request_applies_after_a_clean_rebase(session):
    v1 = seed(session)
    first, second = new_release(session, "first"), new_release(session, "second")
    releases.attach(session=session, release_id=first.id, change_id=approved(session, v1).id, actor="oscar")
    latency = approved(session, v1, edit=set_p99(250))
    releases.attach(session=session, release_id=second.id, change_id=latency.id, actor="oscar")
    v2 = releases.apply_release(session=session, release_id=first.id, actor="oscar", effective_from=PLANNED)
    with pytest.raises(Conflict, match="rebase"):
        releases.apply_release(session=session, release_id=second.id, actor="oscar", effective_from=PLANNED)
    assert changes.rebase(session=session, change_id=latency.id, actor="olga")["rebased"]
    v3 = releases.apply_release(session=session, release_id=second.id, actor="oscar", effective_from=PLANNED + timedelta(hours=1))
    doc = load_document(v3)
    assert v3.id == v2.id + 1 and doc.quotas[0].guaranteed_gpus == 6 and doc.sla[0].p99_ms == 250


def test_effective_time_cannot_be_in_the_past(session):
    v1 = seed(session)
    release = new_release(session)
    releases.attach(session=session, release_id=release.id, change_id=approved(session, v1).id, actor="oscar")
    with pytest.raises(Invalid) as err:
        releases.apply_release(session=session, release_id=release.id, actor="oscar",
                               effective_from=floor_hour(utcnow()) - timedelta(hours=1))
    assert err.value.errors[0].path == "effective_from"
    session.refresh(release)
    assert release.state == ReleaseState.PLANNED
    # Nor inside an hour: usage is billed per hour, a version from hh:30 would govern only from the next hour.
    with pytest.raises(Invalid) as err:
        releases.apply_release(session=session, release_id=release.id, actor="oscar",
                               effective_from=floor_hour(utcnow()) + timedelta(hours=1, minutes=30))
    assert err.value.errors[0].path == "effective_from" and "whole hour" in err.value.errors[0].message
    session.refresh(release)
    assert release.state == ReleaseState.PLANNED
    # The current hour is still open: a change may take effect from its start.
    version = releases.apply_release(session=session, release_id=release.id, actor="oscar", effective_from=floor_hour(utcnow()))
    assert version_at(session=session, when=utcnow()).id == version.id


@pytest.mark.parametrize("char", ["\r", "\u2028", "\x85", "\x00"])
def test_a_release_name_with_a_control_character_is_refused_at_its_path(session, char):
    with pytest.raises(Invalid) as err:
        new_release(session, name=f"search{char}v2")
    assert [e.path for e in err.value.errors] == ["name"]
