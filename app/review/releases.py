"""Releases and the release gate (SPEC section 7, seed 004): policy first, then deploy; rollback.

`apply_release` turns the approved requests attached to a release into one new active version and
stores its rendered artifacts; only an applied release whose version is in effect may be marked
deployed (`deploy_blocker`). Two operators pressing "apply" at once: a conditional UPDATE on the
release state lets exactly one through, and on PostgreSQL an advisory lock serialises every writer
of policy versions so that two different releases cannot both build on the same current version.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import Any

from sqlalchemy import text, update
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, select

from app.core.audit import record
from app.core.db import is_postgres
from app.core.errors import Conflict, FieldError, Invalid, NotFound
from app.core.event_payloads import ReleaseRef
from app.core.safe_text import text_errors
from app.core.timeutil import aware, floor_hour, utcnow
from app.policy.document import PolicyDocument
from app.policy.models import PolicyVersion
from app.policy.service import get_version, import_version, latest_version, load_document
from app.review.changes import current_version, get_change, validation
from app.review.models import ChangeRequest, ChangeState, PolicyArtifact, Release, ReleaseChange, ReleaseState

ENTITY = "release"
# Any constant: every transaction that writes a policy version takes this transaction-level lock first.
POLICY_WRITE_LOCK = 0x504F4C4943


def _lock_policy_writes(session: Session) -> None:
    # SQLite needs nothing: the conditional UPDATE that starts each gate takes its database write lock.
    if is_postgres(session):
        session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": POLICY_WRITE_LOCK})


def snapshot(release: Release) -> dict[str, Any]:
    """What the audit log keeps of a release."""
    return {
        "state": release.state,
        "name": release.name,
        "service": release.service,
        "planned_at": release.planned_at,
        "effective_from": release.effective_from,
        "applied_version": release.applied_version_id,
        "previous_version": release.previous_version_id,
        "rollback_version": release.rollback_version_id,
    }


def get_release(*, session: Session, release_id: int) -> Release:
    """Release `release_id`, or NotFound."""
    release = session.get(Release, release_id)
    if release is None:
        raise NotFound(f"release {release_id} does not exist")
    return release


def list_releases(*, session: Session, state: str | None = None) -> list[Release]:
    """Releases by planned time, newest first."""
    stmt = select(Release).order_by(Release.planned_at.desc(), Release.id.desc())
    if state:
        if state not in tuple(ReleaseState):
            raise Invalid(f"unknown state {state!r}", [FieldError("state", f"one of {', '.join(tuple(ReleaseState))}")])
        stmt = stmt.where(Release.state == state)
    return list(session.exec(stmt))


def attached(*, session: Session, release_id: int) -> list[ChangeRequest]:
    """The change requests attached to a release, in the order it applies them."""
    stmt = (
        select(ChangeRequest)
        .join(ReleaseChange, ReleaseChange.change_id == ChangeRequest.id)
        .where(ReleaseChange.release_id == release_id)
        .order_by(ReleaseChange.position, ChangeRequest.id)
    )
    return list(session.exec(stmt))


def release_of_change(*, session: Session, change_id: int) -> int | None:
    """The release a change request is attached to, or None."""
    return session.exec(select(ReleaseChange.release_id).where(ReleaseChange.change_id == change_id)).first()


def attached_change_ids(*, session: Session) -> set[int]:
    """The change requests attached to any release."""
    return set(session.exec(select(ReleaseChange.change_id)))


def free_approved(*, session: Session) -> list[ChangeRequest]:
    """Approved change requests attached to no release (newest first): the ones a planned release can take."""
    taken = attached_change_ids(session=session)
    stmt = select(ChangeRequest).where(ChangeRequest.state == ChangeState.APPROVED).order_by(ChangeRequest.id.desc())
    return [c for c in session.exec(stmt) if c.id not in taken]


def _check_fields(name: str | None, service: str | None) -> None:
    errors = text_errors({"name": name, "service": service})  # one-line names: no control characters (NUL included)
    if name is not None and not name.strip():
        errors.append(FieldError("name", "required"))
    if service is not None and not service.strip():
        errors.append(FieldError("service", "required"))
    if errors:
        raise Invalid("the release is incomplete", errors)


def create_release(*, session: Session, actor: str, name: str, service: str, planned_at: datetime) -> Release:
    """Plan a release of a service or training configuration."""
    _check_fields(name, service)
    release = Release(name=name.strip(), service=service.strip(), planned_at=aware(planned_at),
                      state=ReleaseState.PLANNED, created_by=actor, created_at=utcnow())
    session.add(release)
    session.flush()
    record(session=session, actor=actor, action="release.create", entity=ENTITY, entity_id=str(release.id),
           after=snapshot(release))
    return release


def _transition(session: Session, release: Release, *, allowed: tuple[str, ...], verb: str, **values) -> None:
    """Move the release with one conditional UPDATE; a wrong state or a lost race is a 409."""
    stmt = (
        update(Release)
        .where(Release.id == release.id, Release.state.in_(allowed))
        .values(**values)
        .execution_options(synchronize_session=False)
    )
    won = session.execute(stmt).rowcount == 1
    session.refresh(release)
    if not won:
        raise Conflict(f"release {release.id} is {release.state}: it cannot be {verb}")


def update_release(
    *, session: Session, release_id: int, actor: str, name: str | None = None, service: str | None = None,
    planned_at: datetime | None = None,
) -> Release:
    """Change a planned release's name, service or planned time."""
    _check_fields(name, service)
    release = get_release(session=session, release_id=release_id)
    values: dict[str, Any] = {}
    if name is not None:
        values["name"] = name.strip()
    if service is not None:
        values["service"] = service.strip()
    if planned_at is not None:
        values["planned_at"] = aware(planned_at)
    if not values:
        raise Invalid("nothing to change", [FieldError("body", "give name, service or planned_at")])
    before = snapshot(release)
    _transition(session, release, allowed=(ReleaseState.PLANNED,), verb="edited", **values)
    record(session=session, actor=actor, action="release.update", entity=ENTITY, entity_id=str(release.id),
           before=before, after=snapshot(release))
    return release


def delete_release(*, session: Session, release_id: int, actor: str) -> None:
    """Cancel a planned release (its requests stay approved, free to join another)."""
    release = get_release(session=session, release_id=release_id)
    if release.state != ReleaseState.PLANNED:
        raise Conflict(f"release {release.id} is {release.state}: only a planned release can be deleted")
    before = snapshot(release)
    for link in session.exec(select(ReleaseChange).where(ReleaseChange.release_id == release.id)):
        session.delete(link)
    session.flush()
    session.delete(release)
    session.flush()
    record(session=session, actor=actor, action="release.delete", entity=ENTITY, entity_id=str(release_id), before=before)


def attach(*, session: Session, release_id: int, change_id: int, actor: str) -> ReleaseChange:
    """Attach an approved change request to a planned release (a request joins one release at most)."""
    release = get_release(session=session, release_id=release_id)
    change = get_change(session=session, change_id=change_id)
    if release.state != ReleaseState.PLANNED:
        raise Conflict(f"release {release.id} is {release.state}: requests attach only to a planned release")
    if change.state != ChangeState.APPROVED:
        raise Conflict(f"change request {change.id} is {change.state}: only an approved request can be attached")
    position = len(attached(session=session, release_id=release.id))
    link = ReleaseChange(release_id=release.id, change_id=change.id, position=position)
    try:
        with session.begin_nested():
            session.add(link)
    except IntegrityError:
        raise Conflict(f"change request {change.id} is already attached to a release") from None
    record(session=session, actor=actor, action="release.attach", entity=ENTITY, entity_id=str(release.id),
           after={"change_request": change.id, "position": position})
    return link


def detach(*, session: Session, release_id: int, change_id: int, actor: str) -> None:
    """Take a request off a planned release."""
    release = get_release(session=session, release_id=release_id)
    if release.state != ReleaseState.PLANNED:
        raise Conflict(f"release {release.id} is {release.state}: its requests are fixed")
    link = session.get(ReleaseChange, (release_id, change_id))
    if link is None:
        raise NotFound(f"change request {change_id} is not attached to release {release_id}")
    session.delete(link)
    session.flush()
    record(session=session, actor=actor, action="release.detach", entity=ENTITY, entity_id=str(release.id),
           before={"change_request": change_id})


def store_artifacts(*, session: Session, version: PolicyVersion) -> PolicyArtifact:
    """Render a version's artifact bundle and keep it with the version (idempotent)."""
    from app.policy.render import bundle_zip, render_bundle

    existing = session.get(PolicyArtifact, version.id)
    if existing is not None:
        return existing
    doc = load_document(version)
    files = render_bundle(doc, version.id)
    bundle = bundle_zip(doc, version.id)
    artifact = PolicyArtifact(version_id=version.id, created_at=utcnow(), files=json.dumps(files, sort_keys=True),
                              bundle=bundle, sha256=hashlib.sha256(bundle).hexdigest())
    session.add(artifact)
    session.flush()
    return artifact


def artifacts_for(*, session: Session, version_id: int) -> tuple[dict[str, str], bytes]:
    """(files, zip) of a version: the stored bundle, or one rendered now for a version that has none stored."""
    from app.policy.render import bundle_zip, render_bundle

    version = get_version(session=session, number=version_id)
    stored = session.get(PolicyArtifact, version.id)
    if stored is not None:
        return json.loads(stored.files), stored.bundle
    doc = load_document(version)
    return render_bundle(doc, version.id), bundle_zip(doc, version.id)


def _not_in_the_past(when: datetime) -> datetime:
    """Policy changes go forward: hours already ingested carry the version that was in effect for them."""
    when = aware(when)
    if when < floor_hour(utcnow()):
        raise Invalid(
            f"effective_from {when.isoformat()} is in the past",
            [FieldError("effective_from", f"must be {floor_hour(utcnow()).isoformat()} (this hour) or later")],
        )
    return when


def _combined_document(session: Session, changes: list[ChangeRequest], current: PolicyVersion) -> PolicyDocument:
    """One document from every request of the release: each is merged onto the others over the shared base."""
    from app.policy.diff import three_way_merge

    base = load_document(current).to_data()
    merged = base
    for change in changes:
        if change.state != ChangeState.APPROVED:
            raise Conflict(f"change request {change.id} is {change.state}: a release applies approved requests only")
        if change.base_version_id != current.id:
            raise Conflict(
                f"change request {change.id} is based on version {change.base_version_id} but version "
                f"{current.id} is current: rebase it before applying"
            )
        doc, findings = validation(change)
        if doc is None:
            raise Invalid(f"change request {change.id} no longer parses",
                          [FieldError("document." + e.path, e.message) for e in findings])
        result = three_way_merge(base, merged, doc.to_data())
        if result.conflicts:
            raise Conflict(
                f"change request {change.id} conflicts with an earlier request of this release at "
                + ", ".join(c.path for c in result.conflicts)
            )
        merged = result.merged
    return PolicyDocument.model_validate(merged)


def check_appliable(*, session: Session, release: Release, effective_from: datetime) -> list[ChangeRequest]:
    """409 (or 422 for a past hour) unless `apply_release` would go through now: planned, approved requests attached,
    each based on the current version and merging with the others. Asked before the confirm step; returns the requests."""
    if release.state != ReleaseState.PLANNED:
        raise Conflict(f"release {release.id} is {release.state}: it cannot be applied")
    _not_in_the_past(effective_from)
    changes = attached(session=session, release_id=release.id)
    if not changes:
        raise Conflict(f"release {release.id} has no approved change requests attached")
    _combined_document(session, changes, current_version(session=session))
    return changes


def apply_release(*, session: Session, release_id: int, actor: str, effective_from: datetime) -> PolicyVersion:
    """The release gate: the attached approved requests become the active version from `effective_from`."""
    _lock_policy_writes(session)
    # A savepoint: a refused gate leaves nothing behind, even inside a caller's larger transaction.
    with session.begin_nested():
        return _apply(session, release_id, actor, effective_from)


def _apply(session: Session, release_id: int, actor: str, effective_from: datetime) -> PolicyVersion:
    release = get_release(session=session, release_id=release_id)
    before = snapshot(release)
    effective = _not_in_the_past(effective_from)
    # Claim the release first: of two operators applying at once, only one gets past this line.
    _transition(session, release, allowed=(ReleaseState.PLANNED,), verb="applied",
                state=ReleaseState.APPLIED, applied_by=actor, applied_at=utcnow(), effective_from=effective)
    changes = attached(session=session, release_id=release.id)
    if not changes:
        raise Conflict(f"release {release.id} has no approved change requests attached")
    current = current_version(session=session)
    document = _combined_document(session, changes, current)
    ids = ", ".join(f"#{c.id}" for c in changes)
    version = import_version(session=session, document=document, actor=actor, effective_from=effective,
                             source="change", comment=f"release {release.name} ({release.service}): change requests {ids}",
                             release=ReleaseRef(id=release.id, name=release.name, service=release.service))
    for change in changes:
        won = session.execute(
            update(ChangeRequest)
            .where(ChangeRequest.id == change.id, ChangeRequest.state == ChangeState.APPROVED)
            .values(state=ChangeState.APPLIED, applied_version_id=version.id, updated_at=utcnow())
            .execution_options(synchronize_session=False)
        ).rowcount
        if won != 1:
            raise Conflict(f"change request {change.id} changed state while the release was being applied")
        session.refresh(change)
        record(session=session, actor=actor, action="change.apply", entity="change_request", entity_id=str(change.id),
               before={"state": ChangeState.APPROVED}, after={"state": change.state, "version": version.id})
    session.execute(
        update(Release).where(Release.id == release.id)
        .values(previous_version_id=current.id, applied_version_id=version.id)
        .execution_options(synchronize_session=False)
    )
    session.refresh(release)
    artifact = store_artifacts(session=session, version=version)
    record(session=session, actor=actor, action="release.apply", entity=ENTITY, entity_id=str(release.id),
           before=before, after={**snapshot(release), "artifacts_sha256": artifact.sha256})
    return version


def deploy_blocker(release: Release, *, now: datetime) -> str | None:
    """Why the release cannot be marked deployed at `now`, or None when it can (pure: the page and the service agree).

    Its policy must be applied (a version) and in effect: a deployment that runs before the version's
    effective_from would run against quotas, priorities and alert rules that do not apply yet.
    """
    if release.state == ReleaseState.PLANNED:
        return f"release {release.id} cannot be deployed before its policy is applied (apply policy first)"
    if release.state != ReleaseState.APPLIED:
        return f"release {release.id} is {release.state}: only an applied release can be marked deployed"
    if release.effective_from is not None and aware(release.effective_from) > now:
        return (f"version {release.applied_version_id} takes effect at {aware(release.effective_from).isoformat()}: "
                "mark the release deployed once it is in effect")
    return None


def deploy_release(*, session: Session, release_id: int, actor: str) -> Release:
    """Mark a release deployed; refused (409) until its policy has been applied and is in effect."""
    release = get_release(session=session, release_id=release_id)
    before = snapshot(release)
    blocker = deploy_blocker(release, now=utcnow())
    if blocker is not None:
        raise Conflict(blocker)
    _transition(session, release, allowed=(ReleaseState.APPLIED,), verb="deployed",
                state=ReleaseState.DEPLOYED, deployed_by=actor, deployed_at=utcnow())
    record(session=session, actor=actor, action="release.deploy", entity=ENTITY, entity_id=str(release.id),
           before=before, after=snapshot(release))
    return release


def _latest_or_conflict(session: Session, release: Release) -> PolicyVersion:
    """The latest version, which must be the release's own: a rollback never skips a later version (409)."""
    latest = latest_version(session=session)
    if latest is None or latest.id != release.applied_version_id:
        raise Conflict(
            f"version {latest.id if latest else None} came after release {release.id}'s version "
            f"{release.applied_version_id}: roll that back first"
        )
    return latest


def check_rollbackable(*, session: Session, release: Release) -> None:
    """409 unless the release is applied or deployed and its version is the latest (asked before the confirm step)."""
    if release.state not in (ReleaseState.APPLIED, ReleaseState.DEPLOYED):
        raise Conflict(f"release {release.id} is {release.state}: it cannot be rolled back")
    _latest_or_conflict(session, release)


def rollback_release(
    *, session: Session, release_id: int, actor: str, effective_from: datetime | None = None
) -> PolicyVersion:
    """A new version equal to the one before the release (source "rollback"), if nothing came after it."""
    _lock_policy_writes(session)
    with session.begin_nested():
        return _rollback(session, release_id, actor, effective_from)


def _rollback(session: Session, release_id: int, actor: str, effective_from: datetime | None) -> PolicyVersion:
    release = get_release(session=session, release_id=release_id)
    before = snapshot(release)
    _transition(session, release, allowed=(ReleaseState.APPLIED, ReleaseState.DEPLOYED), verb="rolled back",
                state=ReleaseState.ROLLED_BACK)
    latest = _latest_or_conflict(session, release)
    previous = get_version(session=session, number=release.previous_version_id)
    # Never earlier than the version it replaces (versions cannot be backdated).
    effective = max(_not_in_the_past(effective_from or floor_hour(utcnow())), aware(latest.effective_from))
    version = import_version(session=session, document=load_document(previous), actor=actor, effective_from=effective,
                             source="rollback", comment=f"rollback of release {release.name}: back to version {previous.id}",
                             release=ReleaseRef(id=release.id, name=release.name, service=release.service))
    session.execute(
        update(Release).where(Release.id == release.id).values(rollback_version_id=version.id)
        .execution_options(synchronize_session=False)
    )
    session.refresh(release)
    store_artifacts(session=session, version=version)
    record(session=session, actor=actor, action="release.rollback", entity=ENTITY, entity_id=str(release.id),
           before=before, after=snapshot(release))
    return version
