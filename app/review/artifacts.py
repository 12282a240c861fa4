"""Rendered artifacts (Kubernetes, Kueue, mig-parted, alert rules) file by file, with unified diffs.

A version's files are diffed against the previous version's policy rendered under the same version
number, and a change request's proposal is rendered under its base version's number and diffed
against that version's stored files: either way the diff shows what the policy change does to the
files, not the version stamp every file carries.
"""

from __future__ import annotations

import difflib

from sqlmodel import Session

from app.core.errors import FieldError, Invalid
from app.policy.render import CHECKSUMS_FILE, render_bundle
from app.policy.service import active_version, get_version, load_document, previous_version
from app.review.changes import current_version, validation
from app.review.models import ChangeRequest
from app.review.releases import artifacts_for


def file_diffs(old: dict[str, str], new: dict[str, str], *, old_label: str, new_label: str) -> list[dict]:
    """Per file (by name, the SHA256SUMS manifest last): status added | removed | changed | same, the unified diff
    and the new text."""
    rows = []
    for name in sorted(set(old) | set(new), key=lambda n: (n == CHECKSUMS_FILE, n)):
        before, after = old.get(name), new.get(name)
        status = "added" if before is None else "removed" if after is None else "same" if before == after else "changed"
        diff = "" if status == "same" else "".join(difflib.unified_diff(
            (before or "").splitlines(keepends=True), (after or "").splitlines(keepends=True),
            f"{old_label}/{name}", f"{new_label}/{name}",
        ))
        rows.append({"file": name, "status": status, "diff": diff, "text": after if after is not None else before})
    return rows


def version_artifacts(*, session: Session, number: int) -> dict:
    """Version `number`'s files and their diff against the version before it (None for the first)."""
    files, _ = artifacts_for(session=session, version_id=number)
    previous = previous_version(session=session, number=number)
    old = render_bundle(load_document(previous), number) if previous is not None else {}
    return {
        "version": number,
        "against": previous.id if previous is not None else None,
        "files": file_diffs(old, files, old_label=f"v{previous.id}" if previous else "none", new_label=f"v{number}"),
    }


def change_artifacts(*, session: Session, change: ChangeRequest) -> dict | None:
    """The request's proposal rendered, diffed against the files of the version it is based on; None while it does
    not validate (a document with errors is never rendered, as a release would refuse it).

    The base, not the active version: once applied, the active version is the request's own result and the diff
    would be empty. Document and base are fixed from approval on (a rebase moves both together), so the page
    shows after apply the diff the reviewer approved."""
    doc, findings = validation(change)
    if doc is None or any(e.severity == "error" for e in findings):
        return None
    base = get_version(session=session, number=change.base_version_id)
    active = active_version(session=session) or current_version(session=session)
    old, _ = artifacts_for(session=session, version_id=base.id)
    new = render_bundle(doc, base.id)
    return {
        "change": change.id,
        "against": base.id,
        "against_active": base.id == active.id,
        "files": file_diffs(old, new, old_label=f"v{base.id}", new_label=f"change-{change.id}"),
    }


def change_artifacts_or_422(*, session: Session, change: ChangeRequest) -> dict:
    """`change_artifacts`, or 422 naming `document` while the request has errors (the artifact page and API)."""
    shown = change_artifacts(session=session, change=change)
    if shown is None:
        raise Invalid(f"change request {change.id}'s document does not validate: nothing to render",
                      [FieldError("document", "fix its errors first")])
    return shown
