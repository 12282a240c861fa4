"""Policy JSON API (/api/v1/policy): the policy document's versions, their artifacts, and validation.

The review workflow (change requests, releases) is app/api/review.py under the same prefix; the audit
log is /api/v1/audit. Viewers, finance, operators and reviewers read; admins do everything.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import Response

from app.api.schemas.policy import Artifacts, Validation, VersionDiff, VersionDocument, VersionPublic
from app.auth.deps import Staff
from app.core.deps import SessionDep
from app.core.errors import FieldError, Invalid
from app.http.pagination import DEFAULT_LIMIT, CursorQuery, IdPath, LimitQuery, Page, page_of
from app.policy.models import PolicyVersion
from app.policy.parsing import check_document
from app.policy.service import (
    active_version,
    get_version,
    latest_version,
    list_versions,
    load_document,
    previous_version,
)
from app.review import changes, releases
from app.review.deps import BucketsDep, PeaksDep

router = APIRouter(prefix="/policy", tags=["policy"])

Id = IdPath


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DocumentIn(Body):
    document: str = Field(max_length=changes.MAX_DOCUMENT_CHARS)


# ---- rendering ----------------------------------------------------------------------------------


def version_out(version: PolicyVersion, *, active_id: int | None = None, document: bool = False) -> dict[str, Any]:
    out = {
        "version": version.id,
        "created_at": version.created_at,
        "created_by": version.created_by,
        "source": version.source,
        "effective_from": version.effective_from,
        "sha256": version.sha256,
        "comment": version.comment,
        "active": version.id == active_id,
    }
    if document:
        out["document"] = load_document(version).to_data()
    return out


# ---- versions -------------------------------------------------------------------------------------


@router.get("/versions", response_model=Page[VersionPublic], summary="Every policy version, newest first")
def versions(session: SessionDep, _: Staff, limit: LimitQuery = DEFAULT_LIMIT, cursor: CursorQuery = None) -> dict:
    active = active_version(session=session)
    found, next_cursor = page_of(list(reversed(list_versions(session=session))), key=lambda v: (v.number,),
                                 types=[int], limit=limit, cursor=cursor, descending=True)
    return {"items": [version_out(v, active_id=active.id if active else None) for v in found], "next_cursor": next_cursor}


@router.get("/versions/active", response_model=VersionDocument, summary="The version in effect now, with its document")
def active(session: SessionDep, _: Staff) -> dict:
    version = active_version(session=session) or latest_version(session=session)
    if version is None:
        from app.core.errors import NotFound

        raise NotFound("no policy version exists yet")
    return version_out(version, active_id=version.id, document=True)


@router.get("/versions/{number}", response_model=VersionDiff,
            summary="One version, its document and its diff against the previous version")
def version(number: Id, session: SessionDep, _: Staff) -> dict:
    from app.policy.diff import diff

    found = get_version(session=session, number=number)
    current = active_version(session=session)
    out = version_out(found, active_id=current.id if current else None, document=True)
    previous = previous_version(session=session, number=found.id)
    out["previous_version"] = previous.id if previous else None
    out["diff"] = [] if previous is None else [c.as_dict() for c in diff(load_document(previous).to_data(), out["document"])]
    return out


@router.get("/versions/{number}/artifacts", response_model=Artifacts,
            summary="The rendered artifacts of a version, file by file")
def artifacts(number: Id, session: SessionDep, _: Staff) -> dict:
    files, bundle = releases.artifacts_for(session=session, version_id=number)
    return {"version": number, "files": files, "bundle": f"/api/v1/policy/versions/{number}/artifacts.zip"}


@router.get("/versions/{number}/artifacts.zip", summary="The artifact bundle of a version (zip)",
            response_class=Response, responses={200: {"content": {"application/zip": {}}}})
def artifacts_zip(number: Id, session: SessionDep, _: Staff) -> Response:
    _, bundle = releases.artifacts_for(session=session, version_id=number)
    return Response(bundle, media_type="application/zip",
                    headers={"Content-Disposition": f'attachment; filename="policy-v{number}.zip"'})


@router.post("/validate", response_model=Validation,
             summary="Validate a policy document (YAML or JSON text); 422 lists every error by path")
def validate(body: DocumentIn, _: Staff, peaks: PeaksDep, buckets: BucketsDep) -> dict:
    doc, findings = check_document(body.document, measured_peak_mib=peaks, latency_buckets=buckets)
    errors = [e for e in findings if e.severity == "error"]
    if doc is None or errors:
        raise Invalid("the policy document is invalid", errors or [FieldError("document", "does not parse")])
    return {"valid": True, "warnings": [e.as_dict() for e in findings if e.severity != "error"]}
