"""Review JSON API (/api/v1/policy): change requests and releases (SPEC section 7).

Operators propose and run releases, reviewers approve, admins do everything, viewers and finance read.
The services decide everything else (four eyes, states, conflicts); handlers only parse and render.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import Field
from starlette.responses import Response

from app.api.policy import Body, Id, version_out
from app.api.schemas.review import (
    ArtifactsDiff,
    ChangeDetail,
    ChangePublic,
    CommentPublic,
    Preview,
    Rebase,
    ReleasePublic,
    ReleaseVersion,
)
from app.auth.deps import IdempotencyDep, Operator, Reviewer, Staff
from app.core.deps import SessionDep
from app.core.timeutil import aware
from app.http.pagination import DEFAULT_LIMIT, MAX_ID, CursorQuery, LimitQuery, Page, page_of
from app.http.responses import json_response
from app.review import artifacts, changes, impact, releases
from app.review.deps import BucketsDep, PeaksDep
from app.review.models import ChangeRequest, Release

router = APIRouter(prefix="/policy", tags=["policy"])


class ChangeIn(Body):
    title: str
    justification: str
    document: str | None = None


class ChangeUpdate(Body):
    title: str | None = None
    justification: str | None = None
    document: str | None = None


class FieldIn(Body):
    path: str = Field(max_length=500, description='A field path as the diff shows it, e.g. sla[search-chat].p99_ms')
    value: str = Field(max_length=100_000, description="The new value, as YAML (6, 0.35, {3g.40gb: 2})")


class DecisionIn(Body):
    comment: str = ""


class CommentIn(Body):
    body: str


class ReleaseIn(Body):
    name: str
    service: str
    planned_at: datetime


class ReleaseUpdate(Body):
    name: str | None = None
    service: str | None = None
    planned_at: datetime | None = None


class AttachIn(Body):
    change_id: int = Field(ge=1, le=MAX_ID)


class ApplyIn(Body):
    effective_from: datetime


class RollbackIn(Body):
    effective_from: datetime | None = None


# ---- rendering ----------------------------------------------------------------------------------


def change_out(session, change: ChangeRequest, *, detail: bool = False, peaks=None, buckets=None) -> dict[str, Any]:
    out = {
        "id": change.id,
        "title": change.title,
        "justification": change.justification,
        "author": change.author,
        "state": change.state,
        "base_version": change.base_version_id,
        "approvals": change.approval_count,
        "created_at": change.created_at,
        "updated_at": change.updated_at,
        "submitted_at": change.submitted_at,
        "decided_at": change.decided_at,
        "applied_version": change.applied_version_id,
    }
    if detail:
        _, findings = changes.validation(change, measured_peaks=peaks, latency_buckets=buckets)
        out["document"] = change.document
        out["stale"] = changes.is_stale(session=session, change=change)
        out["errors"] = [e.as_dict() for e in findings if e.severity == "error"]
        out["warnings"] = [e.as_dict() for e in findings if e.severity != "error"]
        out["diff"] = [c.as_dict() for c in changes.semantic_diff(session=session, change=change)]
        out["comments"] = [
            {"id": c.id, "author": c.author, "body": c.body, "created_at": c.created_at}
            for c in changes.comments(session=session, change_id=change.id)
        ]
        out["decisions"] = [
            {"reviewer": d.reviewer, "decision": d.decision, "comment": d.comment, "created_at": d.created_at}
            for d in changes.decisions(session=session, change_id=change.id)
        ]
    return out


def release_out(session, release: Release) -> dict[str, Any]:
    return {
        "id": release.id,
        "name": release.name,
        "service": release.service,
        "planned_at": release.planned_at,
        "state": release.state,
        "created_by": release.created_by,
        "created_at": release.created_at,
        "effective_from": release.effective_from,
        "applied_by": release.applied_by,
        "applied_at": release.applied_at,
        "previous_version": release.previous_version_id,
        "applied_version": release.applied_version_id,
        "deployed_by": release.deployed_by,
        "deployed_at": release.deployed_at,
        "rollback_version": release.rollback_version_id,
        "changes": [change_out(session, c) for c in releases.attached(session=session, release_id=release.id)],
    }


# ---- change requests ------------------------------------------------------------------------------


@router.get("/changes", response_model=Page[ChangePublic], summary="Change requests, newest first")
def list_changes(
    session: SessionDep, _: Staff, state: str | None = None, limit: LimitQuery = DEFAULT_LIMIT, cursor: CursorQuery = None
) -> dict:
    found, next_cursor = page_of(changes.list_changes(session=session, state=state), key=lambda c: (c.id,),
                                 types=[int], limit=limit, cursor=cursor, descending=True)
    return {"items": [change_out(session, c) for c in found], "next_cursor": next_cursor}


@router.post("/changes", status_code=201, response_model=ChangeDetail,
             summary="Start a draft change request against the current version")
def create_change(body: ChangeIn, session: SessionDep, user: Operator, peaks: PeaksDep) -> dict:
    change = changes.create_change(session=session, actor=user.name, title=body.title,
                                   justification=body.justification, document=body.document)
    return change_out(session, change, detail=True, peaks=peaks)


@router.get("/changes/{change_id}", response_model=ChangeDetail,
            summary="A change request with its validation, diff, comments and decisions")
def show_change(change_id: Id, session: SessionDep, _: Staff, peaks: PeaksDep, buckets: BucketsDep) -> dict:
    return change_out(session, changes.get_change(session=session, change_id=change_id), detail=True, peaks=peaks,
                      buckets=buckets)


@router.get("/changes/{change_id}/preview", response_model=Preview, response_model_exclude_unset=True,
            summary="Validation, diff, capacity impact and invoice impact")
def preview_change(change_id: Id, session: SessionDep, _: Staff, peaks: PeaksDep, buckets: BucketsDep,
                   month: Annotated[str | None, Query(description="Billing month to re-rate and measure, YYYY-MM (default: the newest fully covered complete month)")] = None) -> dict:
    change = changes.get_change(session=session, change_id=change_id)
    return impact.preview(session=session, change=change, measured_peaks=peaks, month=month,
                                   latency_buckets=buckets)


def _diffs(shown: dict) -> dict:
    kept = {k: v for k, v in shown.items() if k != "against_active"}  # the page's label; `against` names the version
    return {**kept, "files": [{k: f[k] for k in ("file", "status", "diff")} for f in shown["files"]]}


@router.get("/changes/{change_id}/artifacts", response_model=ArtifactsDiff,
            summary="The request's rendered artifacts diffed against its base version's, as approved (422 while it has errors)")
def change_artifacts(change_id: Id, session: SessionDep, _: Staff) -> dict:
    change = changes.get_change(session=session, change_id=change_id)
    return _diffs(artifacts.change_artifacts_or_422(session=session, change=change))


@router.get("/versions/{number}/artifacts/diff", response_model=ArtifactsDiff,
            summary="A version's rendered artifacts diffed against the previous version's, file by file")
def version_artifacts_diff(number: Id, session: SessionDep, _: Staff) -> dict:
    return _diffs(artifacts.version_artifacts(session=session, number=number))


@router.patch("/changes/{change_id}", response_model=ChangeDetail,
              summary="Edit a draft (author only; 409 once submitted)")
def update_change(change_id: Id, body: ChangeUpdate, session: SessionDep, user: Operator, peaks: PeaksDep) -> dict:
    change = changes.update_change(session=session, change_id=change_id, actor=user.name, title=body.title,
                                   justification=body.justification, document=body.document)
    return change_out(session, change, detail=True, peaks=peaks)


@router.post("/changes/{change_id}/fields", response_model=ChangeDetail,
             summary="Structured edit of a draft: set one field by its path")
def set_change_field(change_id: Id, body: FieldIn, session: SessionDep, user: Operator, peaks: PeaksDep) -> dict:
    change = changes.set_field(session=session, change_id=change_id, actor=user.name, path=body.path, value=body.value)
    return change_out(session, change, detail=True, peaks=peaks)


@router.post("/changes/{change_id}/submit", response_model=ChangePublic,
             summary="Submit for review; 422 with field paths while the document has errors")
def submit_change(change_id: Id, session: SessionDep, user: Operator, peaks: PeaksDep) -> dict:
    return change_out(session, changes.submit(session=session, change_id=change_id, actor=user.name, measured_peaks=peaks))


@router.post("/changes/{change_id}/approve", response_model=ChangePublic,
             summary="Approve (a reviewer who is not the author)")
def approve_change(change_id: Id, session: SessionDep, user: Reviewer, body: DecisionIn | None = None) -> dict:
    comment = body.comment if body else ""
    return change_out(session, changes.approve(session=session, change_id=change_id, actor=user.name, comment=comment))


@router.post("/changes/{change_id}/reject", response_model=ChangePublic, summary="Reject (a reviewer who is not the author)")
def reject_change(change_id: Id, session: SessionDep, user: Reviewer, body: DecisionIn | None = None) -> dict:
    comment = body.comment if body else ""
    return change_out(session, changes.reject(session=session, change_id=change_id, actor=user.name, comment=comment))


@router.post("/changes/{change_id}/withdraw", response_model=ChangePublic, summary="Withdraw (author only)")
def withdraw_change(change_id: Id, session: SessionDep, user: Operator) -> dict:
    return change_out(session, changes.withdraw(session=session, change_id=change_id, actor=user.name))


@router.post("/changes/{change_id}/comments", status_code=201, response_model=CommentPublic,
             summary="Comment on a change request")
def comment_change(change_id: Id, body: CommentIn, session: SessionDep, user: Staff) -> dict:
    comment = changes.add_comment(session=session, change_id=change_id, actor=user.name, body=body.body)
    return {"id": comment.id, "author": comment.author, "body": comment.body, "created_at": comment.created_at}


@router.post("/changes/{change_id}/rebase", response_model=Rebase, response_model_exclude_unset=True,
             summary="Three-way merge onto the current version; conflicts listed field by field")
def rebase_change(change_id: Id, session: SessionDep, user: Operator) -> dict:
    return changes.rebase(session=session, change_id=change_id, actor=user.name)


# ---- releases -------------------------------------------------------------------------------------


@router.get("/releases", response_model=Page[ReleasePublic], summary="Releases, newest planned first")
def list_releases(
    session: SessionDep, _: Staff, state: str | None = None, limit: LimitQuery = DEFAULT_LIMIT, cursor: CursorQuery = None
) -> dict:
    found, next_cursor = page_of(releases.list_releases(session=session, state=state),
                                 key=lambda r: (aware(r.planned_at), r.id), types=[datetime, int], limit=limit,
                                 cursor=cursor, descending=True)
    return {"items": [release_out(session, r) for r in found], "next_cursor": next_cursor}


@router.post("/releases", status_code=201, response_model=ReleasePublic, summary="Plan a release")
def create_release(body: ReleaseIn, session: SessionDep, user: Operator) -> dict:
    release = releases.create_release(session=session, actor=user.name, name=body.name, service=body.service,
                                      planned_at=body.planned_at)
    return release_out(session, release)


@router.get("/releases/{release_id}", response_model=ReleasePublic, summary="One release and its change requests")
def show_release(release_id: Id, session: SessionDep, _: Staff) -> dict:
    return release_out(session, releases.get_release(session=session, release_id=release_id))


@router.patch("/releases/{release_id}", response_model=ReleasePublic, summary="Edit a planned release")
def update_release(release_id: Id, body: ReleaseUpdate, session: SessionDep, user: Operator) -> dict:
    release = releases.update_release(session=session, release_id=release_id, actor=user.name, name=body.name,
                                      service=body.service, planned_at=body.planned_at)
    return release_out(session, release)


@router.delete("/releases/{release_id}", status_code=204, summary="Delete a planned release")
def delete_release(release_id: Id, session: SessionDep, user: Operator) -> Response:
    releases.delete_release(session=session, release_id=release_id, actor=user.name)
    return Response(status_code=204)


@router.post("/releases/{release_id}/changes", status_code=201, response_model=ReleasePublic,
             summary="Attach an approved change request")
def attach_change(release_id: Id, body: AttachIn, session: SessionDep, user: Operator) -> dict:
    releases.attach(session=session, release_id=release_id, change_id=body.change_id, actor=user.name)
    return release_out(session, releases.get_release(session=session, release_id=release_id))


@router.delete("/releases/{release_id}/changes/{change_id}", response_model=ReleasePublic,
               summary="Detach a change request from a planned release")
def detach_change(release_id: Id, change_id: Id, session: SessionDep, user: Operator) -> dict:
    releases.detach(session=session, release_id=release_id, change_id=change_id, actor=user.name)
    return release_out(session, releases.get_release(session=session, release_id=release_id))


@router.post("/releases/{release_id}/apply", response_model=ReleaseVersion,
             summary="Apply policy: the release's requests become the active version")
def apply_release(release_id: Id, body: ApplyIn, session: SessionDep, user: Operator, idem: IdempotencyDep) -> Any:
    """With an `Idempotency-Key` header a retry gets the first answer again instead of a 409."""
    replayed = idem.replay()
    if replayed is not None:
        return replayed
    version = releases.apply_release(session=session, release_id=release_id, actor=user.name,
                                     effective_from=body.effective_from)
    release = releases.get_release(session=session, release_id=release_id)
    return idem.remember(json_response({**release_out(session, release), "version": version_out(version)}))


@router.post("/releases/{release_id}/deploy", response_model=ReleasePublic, summary="Mark deployed (only after apply)")
def deploy_release(release_id: Id, session: SessionDep, user: Operator) -> dict:
    return release_out(session, releases.deploy_release(session=session, release_id=release_id, actor=user.name))


@router.post("/releases/{release_id}/rollback", response_model=ReleaseVersion,
             summary="A new version equal to the one before the release")
def rollback_release(release_id: Id, session: SessionDep, user: Operator, body: RollbackIn | None = None) -> dict:
    version = releases.rollback_release(session=session, release_id=release_id, actor=user.name,
                                        effective_from=body.effective_from if body else None)
    release = releases.get_release(session=session, release_id=release_id)
    return {**release_out(session, release), "version": version_out(version)}
