"""Change requests (SPEC section 7): draft -> submitted -> approved | rejected | withdrawn, then applied by a release.

Every transition is a conditional UPDATE (`WHERE state IN (...)`) whose rowcount decides who won, so two
reviewers or an author and a reviewer acting at once never both succeed. Services flush; the caller's
unit of work commits. Every state change is audited with before and after.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import ValidationError
from sqlalchemy import case, func, update
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, select

from app.core.audit import record
from app.core.errors import AppError, Conflict, FieldError, Invalid, NotFound
from app.core.safe_text import PROSE_BREAKS, text_errors
from app.core.settings import get_settings
from app.core.timeutil import utcnow
from app.policy.document import PolicyDocument
from app.policy.forms import EditResult, apply_edit, blocking
from app.policy.models import PolicyVersion
from app.policy.parsing import MAX_CHARS, check_document, load_value, pydantic_errors
from app.policy.paths import Key, parse_path, path_of
from app.policy.service import dump_yaml, get_version, latest_version, load_document
from app.review.models import ChangeApproval, ChangeComment, ChangeRequest, ChangeState

MAX_DOCUMENT_CHARS = MAX_CHARS  # the parser refuses longer documents too
MAX_TITLE_CHARS = 200
ENTITY = "change_request"


def forbidden(detail: str) -> AppError:
    return AppError(detail=detail, status=403, title="Forbidden")


def current_version(*, session: Session) -> PolicyVersion:
    """The version changes are made against: the one in effect, or already scheduled to take effect."""
    version = latest_version(session=session)
    if version is None:
        raise Conflict("no policy version exists yet: import one first (`chargeback policy import`)")
    return version


def get_change(*, session: Session, change_id: int) -> ChangeRequest:
    """Change request `change_id`, or NotFound."""
    change = session.get(ChangeRequest, change_id)
    if change is None:
        raise NotFound(f"change request {change_id} does not exist")
    return change


def list_changes(*, session: Session, state: str | None = None) -> list[ChangeRequest]:
    """Change requests, newest first, optionally in one state."""
    stmt = select(ChangeRequest).order_by(ChangeRequest.id.desc())
    if state:
        if state not in tuple(ChangeState):
            raise Invalid(f"unknown state {state!r}", [FieldError("state", f"one of {', '.join(tuple(ChangeState))}")])
        stmt = stmt.where(ChangeRequest.state == state)
    return list(session.exec(stmt))


def _awaiting(reviewer: str):
    """Submitted requests someone else wrote on which `reviewer` has not decided yet."""
    decided = select(ChangeApproval.change_id).where(ChangeApproval.reviewer == reviewer)
    return (ChangeRequest.state == ChangeState.SUBMITTED, ChangeRequest.author != reviewer,
            ChangeRequest.id.not_in(decided))


def awaiting_review(*, session: Session, reviewer: str) -> list[ChangeRequest]:
    """The requests `reviewer` may review now, oldest submission first (the reviewer's queue)."""
    stmt = select(ChangeRequest).where(*_awaiting(reviewer)).order_by(ChangeRequest.submitted_at, ChangeRequest.id)
    return list(session.exec(stmt))


def awaiting_review_count(*, session: Session, reviewer: str) -> int:
    """How many requests wait for `reviewer` (the navigation's badge)."""
    return session.exec(select(func.count()).select_from(ChangeRequest).where(*_awaiting(reviewer))).one()


def comments(*, session: Session, change_id: int) -> list[ChangeComment]:
    """The request's comments, oldest first."""
    stmt = select(ChangeComment).where(ChangeComment.change_id == change_id).order_by(ChangeComment.id)
    return list(session.exec(stmt))


def decisions(*, session: Session, change_id: int) -> list[ChangeApproval]:
    """The reviewers' approvals and rejections, oldest first."""
    stmt = select(ChangeApproval).where(ChangeApproval.change_id == change_id).order_by(ChangeApproval.id)
    return list(session.exec(stmt))


def snapshot(change: ChangeRequest) -> dict[str, Any]:
    """What the audit log keeps of a request: its state and the identity of its content."""
    import hashlib

    return {
        "state": change.state,
        "title": change.title,
        "base_version": change.base_version_id,
        "approvals": change.approval_count,
        "document_sha256": hashlib.sha256(change.document.encode()).hexdigest(),
    }


def storable(**fields: str | None) -> list[FieldError]:
    """Text PostgreSQL can store: no NUL characters (it refuses them; better a 422 naming the field than a 500)."""
    return [FieldError(name, "must not contain NUL characters") for name, value in fields.items() if value and "\x00" in value]


def prose(**fields: str | None) -> list[FieldError]:
    """Several lines of human text (a justification, a comment): line breaks and tabs, no other control or
    line-separator character (NUL, ESC, NEL, U+2028...)."""
    return text_errors(fields, allow=PROSE_BREAKS)


def _check_text(title: str | None, justification: str | None, document: str | None) -> list[FieldError]:
    errors = storable(document=document) + text_errors({"title": title}) + prose(justification=justification)
    if title is not None:
        if not title.strip():
            errors.append(FieldError("title", "required"))
        elif len(title) > MAX_TITLE_CHARS:
            errors.append(FieldError("title", f"at most {MAX_TITLE_CHARS} characters"))
    if justification is not None and not justification.strip():
        errors.append(FieldError("justification", "required: say why the policy should change"))
    if document is not None and len(document) > MAX_DOCUMENT_CHARS:
        errors.append(FieldError("document", f"at most {MAX_DOCUMENT_CHARS} characters"))
    return errors


def create_change(
    *, session: Session, actor: str, title: str, justification: str, document: str | None = None
) -> ChangeRequest:
    """A new draft against the current version; without `document` it starts as that version's YAML."""
    errors = _check_text(title, justification, document)
    if errors:
        raise Invalid("the change request is incomplete", errors)
    base = current_version(session=session)
    now = utcnow()
    change = ChangeRequest(
        title=title.strip(),
        justification=justification.strip(),
        author=actor,
        state=ChangeState.DRAFT,
        base_version_id=base.id,
        document=document if document is not None else dump_yaml(load_document(base)),
        created_at=now,
        updated_at=now,
    )
    session.add(change)
    session.flush()
    record(session=session, actor=actor, action="change.create", entity=ENTITY, entity_id=str(change.id),
           after=snapshot(change))
    return change


def _transition(
    session: Session, change: ChangeRequest, *, allowed: tuple[str, ...], verb: str, where: tuple = (), **values
) -> None:
    """Move the request with one conditional UPDATE; losing a race (or a wrong state) is a 409."""
    stmt = (
        update(ChangeRequest)
        .where(ChangeRequest.id == change.id, ChangeRequest.state.in_(allowed), *where)
        .values(updated_at=utcnow(), **values)
        .execution_options(synchronize_session=False)
    )
    won = session.execute(stmt).rowcount == 1
    session.refresh(change)
    if not won:
        raise Conflict(f"change request {change.id} is {change.state}: it cannot be {verb}")


def update_change(
    *,
    session: Session,
    change_id: int,
    actor: str,
    title: str | None = None,
    justification: str | None = None,
    document: str | None = None,
) -> ChangeRequest:
    """Edit a draft (author only); a submitted request is immutable (409)."""
    change = get_change(session=session, change_id=change_id)
    if actor != change.author:
        raise forbidden(f"only the author ({change.author}) may edit change request {change_id}")
    errors = _check_text(title, justification, document)
    if errors:
        raise Invalid("the change request is incomplete", errors)
    values: dict[str, Any] = {}
    if title is not None:
        values["title"] = title.strip()
    if justification is not None:
        values["justification"] = justification.strip()
    if document is not None:
        values["document"] = document
    before = snapshot(change)
    _transition(session, change, allowed=(ChangeState.DRAFT,), verb="edited (immutable once submitted)", **values)
    record(session=session, actor=actor, action="change.update", entity=ENTITY, entity_id=str(change.id),
           before=before, after=snapshot(change))
    return change


def common_paths(doc: PolicyDocument) -> list[str]:
    """Field paths of the common edits (quotas, tiers, SLA red lines and penalties, prices, MIG layouts)."""
    out = []
    for q in doc.quotas:
        out += [path_of("quotas", Key(f"{q.tenant}/{q.pool}"), f) for f in ("guaranteed_gpus", "borrowing_limit", "lending_limit")]
    out += [path_of("priorities", Key(p.name), "value") for p in doc.priorities]
    for sla in doc.sla:
        out += [path_of("sla", Key(sla.service), f) for f in ("p99_ms", "penalty_per_breach_minute")]
    for model in doc.pricing.gpu_models:
        out += [path_of("pricing", "gpu_models", model, f) for f in ("purchase_price", "hosting_per_hour")]
    out += ["pricing.energy_price_per_kwh", "pricing.dark_time_multiplier"]
    out += [path_of("isolation", "mig", node, "gpus") for node in doc.isolation.mig]
    out += [path_of("pools", Key(p.name), "reserved_fraction") for p in doc.pools]
    return out


def set_field(*, session: Session, change_id: int, actor: str, path: str, value: str) -> ChangeRequest:
    """The structured edit: set one field of a draft, addressed as the diff shows it, to a YAML value."""
    from app.policy.diff import denormalize, normalize  # the diff's own addressing: keyed lists by name

    change = get_change(session=session, change_id=change_id)
    doc, findings = validation(change)
    if doc is None:
        raise Invalid("the draft's document does not parse; fix it in the YAML editor first",
                      [FieldError("document." + e.path if e.path else "document", e.message) for e in findings])
    parts = parse_path(path)
    new = load_value(value, path="value")  # decimals stay exact, aliases bounded, huge integers refused
    tree = normalize(doc.to_data())
    node = tree
    for part in parts[:-1]:
        if not isinstance(node, dict) or part not in node:
            known = ", ".join(list(node)[:12]) if isinstance(node, dict) else ""
            raise Invalid("no such field", [FieldError("path", f"{part!r} does not exist" + (f" (there: {known})" if known else ""))])
        node = node[part]
    if not isinstance(node, dict):
        raise Invalid("no such field", [FieldError("path", f"{path} does not exist")])
    node[parts[-1]] = new  # a new key adds it (a GPU model's price, a node's MIG layout)
    data = denormalize(tree)
    try:
        edited = PolicyDocument.model_validate(data)
    except ValidationError as exc:
        raise Invalid("the value does not fit the field", pydantic_errors(exc, data)) from None
    return update_change(session=session, change_id=change_id, actor=actor, document=dump_yaml(edited))


def edit_fields(*, session: Session, change_id: int, actor: str, values: Mapping[str, str], removed: Iterable[str] = (),
                measured_peaks: Mapping[str, float] | None = None) -> EditResult:
    """A form's edit of a draft (fields by path, items removed): saved as the new draft document unless it has errors.

    Errors at the posted fields, their items or the sections they are in block the save (the form shows them
    next to the fields); problems elsewhere in the draft do not, as in the YAML editor.
    """
    change = get_change(session=session, change_id=change_id)
    if actor != change.author:
        raise forbidden(f"only the author ({change.author}) may edit change request {change_id}")
    if change.state != ChangeState.DRAFT:
        raise Conflict(f"change request {change.id} is {change.state}: it cannot be edited (immutable once submitted)")
    doc, findings = validation(change)
    if doc is None:
        raise Invalid("the draft's document does not parse; fix it in the YAML editor first",
                      [FieldError("document." + e.path if e.path else "document", e.message) for e in findings])
    removed = list(removed)
    result = apply_edit(doc, values, removed, measured_peak_mib=dict(measured_peaks) if measured_peaks is not None else None)
    if result.document is not None and not blocking(result.findings, [*values, *removed]):
        update_change(session=session, change_id=change_id, actor=actor, document=dump_yaml(result.document))
        result.saved = True
    return result


def validation(change: ChangeRequest, *, measured_peaks: Mapping[str, float] | None = None,
               latency_buckets=None) -> tuple[PolicyDocument | None, list[FieldError]]:
    """The request's document parsed and validated: (document or None, errors and warnings)."""
    return check_document(change.document, measured_peak_mib=dict(measured_peaks) if measured_peaks is not None else None,
                          latency_buckets=latency_buckets)


def submit(*, session: Session, change_id: int, actor: str, measured_peaks: Mapping[str, float] | None = None) -> ChangeRequest:
    """Send a draft for review (author only); validation errors block it (422 with field paths)."""
    change = get_change(session=session, change_id=change_id)
    if actor != change.author:
        raise forbidden(f"only the author ({change.author}) may submit change request {change_id}")
    if change.state != ChangeState.DRAFT:
        raise Conflict(f"change request {change.id} is {change.state}: only a draft can be submitted")
    errors = _check_text(change.title, change.justification, None)
    _, findings = validation(change, measured_peaks=measured_peaks)
    errors += [FieldError("document." + e.path if e.path else "document", e.message, e.severity) for e in findings if e.severity == "error"]
    if errors:
        raise Invalid("the change request cannot be submitted until its errors are fixed", errors)
    from app.policy.diff import diff

    doc, _ = validation(change)
    base = get_version(session=session, number=change.base_version_id)
    if not diff(load_document(base).to_data(), doc.to_data()):
        raise Invalid("the document does not change anything", [FieldError("document", "identical to the base version")])
    before = snapshot(change)
    _transition(session, change, allowed=(ChangeState.DRAFT,), verb="submitted",
                state=ChangeState.SUBMITTED, submitted_at=utcnow())
    record(session=session, actor=actor, action="change.submit", entity=ENTITY, entity_id=str(change.id),
           before=before, after=snapshot(change))
    return change


def check_decidable(change: ChangeRequest, actor: str, decision: str) -> None:
    """403 for the author, 409 unless submitted: asked before the confirm step, and again when deciding."""
    if actor == change.author:
        # Four eyes: whatever the author's roles (admin included), someone else must review.
        raise forbidden(f"{actor} wrote change request {change.id}: another reviewer must {decision} it")
    if change.state != ChangeState.SUBMITTED:
        raise Conflict(f"change request {change.id} is {change.state}: only a submitted request can be reviewed")


def _decide(session: Session, change: ChangeRequest, actor: str, decision: str, comment: str) -> None:
    check_decidable(change, actor, decision)
    taken = session.exec(
        select(ChangeApproval).where(ChangeApproval.change_id == change.id, ChangeApproval.reviewer == actor)
    ).first()
    if taken is not None:
        raise Conflict(f"{actor} already decided on change request {change.id} ({taken.decision})")
    try:
        with session.begin_nested():
            session.add(ChangeApproval(change_id=change.id, reviewer=actor, decision=decision,
                                       comment=comment.strip(), created_at=utcnow()))
    except IntegrityError:
        raise Conflict(f"{actor} already decided on change request {change.id}") from None


def approve(
    *, session: Session, change_id: int, actor: str, comment: str = "", required: int | None = None
) -> ChangeRequest:
    """Record a reviewer's approval (never the author's); the request is approved at the required count."""
    change = get_change(session=session, change_id=change_id)
    required = max(1, required if required is not None else get_settings().required_approvals)
    if prose(comment=comment):
        raise Invalid("the comment cannot be stored", prose(comment=comment))
    before = snapshot(change)
    _decide(session, change, actor, "approve", comment)
    # One statement counts the approval and, at the threshold, approves: concurrent approvals
    # serialise on the row lock, so none is lost and only one of them flips the state.
    now = utcnow()
    reached = ChangeRequest.approval_count + 1 >= required
    _transition(
        session, change, allowed=(ChangeState.SUBMITTED,), verb="approved",
        approval_count=ChangeRequest.approval_count + 1,
        state=case((reached, ChangeState.APPROVED), else_=ChangeRequest.state),
        decided_at=case((reached, now), else_=ChangeRequest.decided_at),
    )
    record(session=session, actor=actor, action="change.approve", entity=ENTITY, entity_id=str(change.id),
           before=before, after={**snapshot(change), "comment": comment.strip(), "required": required})
    return change


def reject(*, session: Session, change_id: int, actor: str, comment: str = "") -> ChangeRequest:
    """A reviewer (never the author) rejects a submitted request."""
    change = get_change(session=session, change_id=change_id)
    if prose(comment=comment):
        raise Invalid("the comment cannot be stored", prose(comment=comment))
    before = snapshot(change)
    _decide(session, change, actor, "reject", comment)
    _transition(session, change, allowed=(ChangeState.SUBMITTED,), verb="rejected",
                state=ChangeState.REJECTED, decided_at=utcnow())
    record(session=session, actor=actor, action="change.reject", entity=ENTITY, entity_id=str(change.id),
           before=before, after={**snapshot(change), "comment": comment.strip()})
    return change


WITHDRAWABLE = (ChangeState.DRAFT, ChangeState.SUBMITTED, ChangeState.APPROVED)


def check_withdrawable(*, session: Session, change: ChangeRequest, actor: str) -> None:
    """403 unless the author, 409 when attached to a release or past withdrawing (asked before the confirm step)."""
    from app.review.models import ReleaseChange

    if actor != change.author:
        raise forbidden(f"only the author ({change.author}) may withdraw change request {change.id}")
    if session.exec(select(ReleaseChange).where(ReleaseChange.change_id == change.id)).first() is not None:
        raise Conflict(f"change request {change.id} is attached to a release: detach it first")
    if change.state not in WITHDRAWABLE:
        raise Conflict(f"change request {change.id} is {change.state}: it cannot be withdrawn")


def withdraw(*, session: Session, change_id: int, actor: str) -> ChangeRequest:
    """The author takes back a request that has not been applied or attached to a release."""
    change = get_change(session=session, change_id=change_id)
    check_withdrawable(session=session, change=change, actor=actor)
    before = snapshot(change)
    _transition(session, change, allowed=WITHDRAWABLE, verb="withdrawn", state=ChangeState.WITHDRAWN)
    record(session=session, actor=actor, action="change.withdraw", entity=ENTITY, entity_id=str(change.id),
           before=before, after=snapshot(change))
    return change


def add_comment(*, session: Session, change_id: int, actor: str, body: str) -> ChangeComment:
    """Anyone who can read the request may comment on it, in any state."""
    change = get_change(session=session, change_id=change_id)
    if prose(body=body):
        raise Invalid("the comment cannot be stored", prose(body=body))
    if not body or not body.strip():
        raise Invalid("the comment is empty", [FieldError("body", "required")])
    if len(body) > 20_000:
        raise Invalid("the comment is too long", [FieldError("body", "at most 20000 characters")])
    comment = ChangeComment(change_id=change.id, author=actor, body=body.strip(), created_at=utcnow())
    session.add(comment)
    session.flush()
    record(session=session, actor=actor, action="change.comment", entity=ENTITY, entity_id=str(change.id),
           after={"comment_id": comment.id, "body": comment.body})
    return comment


def semantic_diff(*, session: Session, change: ChangeRequest) -> list:
    """Per-field changes from the base version to the request's document ([] while it does not parse)."""
    from app.policy.diff import diff

    doc, _ = validation(change)
    if doc is None:
        return []
    base = get_version(session=session, number=change.base_version_id)
    return diff(load_document(base).to_values(), doc.to_values())


def is_stale(*, session: Session, change: ChangeRequest) -> bool:
    """True when the request's base is no longer the current version: it must be rebased."""
    return change.base_version_id != current_version(session=session).id


def rebase(*, session: Session, change_id: int, actor: str) -> dict:
    """Three-way merge (base, request, current) onto the current version; conflicts are reported, not applied.

    A clean rebase keeps the request's state: its own field changes are exactly those reviewed.
    """
    from app.policy.diff import three_way_merge
    from app.policy.validation import validate

    change = get_change(session=session, change_id=change_id)
    if actor != change.author:
        raise forbidden(f"only the author ({change.author}) may rebase change request {change_id}")
    if change.state not in (ChangeState.DRAFT, ChangeState.SUBMITTED, ChangeState.APPROVED):
        raise Conflict(f"change request {change.id} is {change.state}: it cannot be rebased")
    current = current_version(session=session)
    if change.base_version_id == current.id:
        return {"rebased": False, "base_version": current.id, "conflicts": [], "detail": "already based on the current version"}
    doc, findings = validation(change)
    if doc is None:
        raise Invalid("the request's document does not parse; fix it before rebasing",
                      [FieldError("document." + e.path if e.path else "document", e.message) for e in findings])
    base_doc = load_document(get_version(session=session, number=change.base_version_id))
    result = three_way_merge(base_doc.to_data(), doc.to_data(), load_document(current).to_data())
    if result.conflicts:
        return {"rebased": False, "base_version": change.base_version_id, "onto": current.id,
                "conflicts": [c.as_dict() for c in result.conflicts]}
    try:
        merged = PolicyDocument.model_validate(result.merged)
    except ValueError as exc:
        raise Invalid("the merged document is not a valid policy", [FieldError("document", str(exc)[:500])]) from None
    errors = [e for e in validate(merged) if e.severity == "error"]
    if errors and change.state != ChangeState.DRAFT:
        raise Invalid("the merged document does not validate; withdraw and start again from the current version",
                      [FieldError("document." + e.path, e.message) for e in errors])
    before = snapshot(change)
    _transition(session, change, allowed=(change.state,), verb="rebased",
                where=(ChangeRequest.base_version_id == change.base_version_id,), base_version_id=current.id, document=dump_yaml(merged))
    record(session=session, actor=actor, action="change.rebase", entity=ENTITY, entity_id=str(change.id),
           before=before, after=snapshot(change))
    return {"rebased": True, "base_version": current.id, "conflicts": [],
            "errors": [e.as_dict() for e in errors]}
