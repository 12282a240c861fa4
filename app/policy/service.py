"""Stored policy versions: import (the audited bootstrap path), look-up by number and by time, rendering.

A version is immutable: a change always makes a new row. Billing and ingestion ask which version
was in effect for an hour with `version_at` / `versions_between` and read it with `load_document`.
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import datetime, timedelta
from decimal import Decimal

import yaml
from pydantic import ValidationError
from sqlalchemy import func
from sqlmodel import Session, select

from app.core import generation
from app.core.audit import record
from app.core.errors import Conflict, FieldError, Invalid, NotFound
from app.core.event_payloads import PolicyApplied, ReleaseRef
from app.core.events import emit
from app.core.timeutil import aware, floor_hour, utcnow
from app.policy.document import PolicyDocument
from app.policy.models import PolicyVersion
from app.policy.parsing import pydantic_errors
from app.policy.validation import validate


def canonical_json(doc: PolicyDocument) -> str:
    """The stored form: the document's own spelling, sorted keys, no whitespace."""
    return json.dumps(doc.to_data(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def document_sha256(doc: PolicyDocument) -> str:
    """The sha256 of the canonical JSON: equal documents hash equal."""
    return hashlib.sha256(canonical_json(doc).encode()).hexdigest()


def latest_version(*, session: Session) -> PolicyVersion | None:
    """The version with the latest effective_from (ties: the highest number)."""
    stmt = select(PolicyVersion).order_by(PolicyVersion.effective_from.desc(), PolicyVersion.id.desc()).limit(1)
    return session.exec(stmt).first()


def import_version(
    *,
    session: Session,
    document: PolicyDocument,
    actor: str,
    effective_from: datetime | None = None,
    source: str = "bootstrap",
    comment: str = "",
    release: ReleaseRef | None = None,
) -> PolicyVersion:
    """Store a valid document as a new immutable version (flushed, audited, a `policy.applied` event);
    refuse errors and backdating."""
    try:
        # Round-trip through the schema: a document assembled with model_copy skipped pydantic's checks.
        data = json.loads(canonical_json(document))
        document = PolicyDocument.model_validate(data)
    except ValidationError as exc:
        raise Invalid("the policy document is invalid", pydantic_errors(exc, data)) from None
    errors = [e for e in validate(document) if e.severity == "error"]
    if errors:
        raise Invalid("the policy document is invalid", errors)
    effective = floor_hour(utcnow()) if effective_from is None else on_the_hour(effective_from)
    latest = latest_version(session=session)
    if latest is not None and effective < aware(latest.effective_from):
        raise Conflict(
            f"effective_from {effective.isoformat()} is before version {latest.id}'s "
            f"{aware(latest.effective_from).isoformat()}: versions cannot be backdated"
        )
    canonical = canonical_json(document)
    version = PolicyVersion(
        created_at=utcnow(),
        created_by=actor,
        source=source,
        effective_from=effective,
        sha256=hashlib.sha256(canonical.encode()).hexdigest(),
        document=canonical,
        comment=comment,
    )
    session.add(version)
    session.flush()
    record(
        session=session,
        actor=actor,
        action=f"policy.{source}",
        entity="policy_version",
        entity_id=str(version.id),
        before=None if latest is None else {"version": latest.id, "sha256": latest.sha256},
        after={"version": version.id, "sha256": version.sha256, "effective_from": effective.isoformat(), "comment": comment},
    )
    emit(session=session, type="policy.applied", key=f"policy.applied:{version.id}", payload=PolicyApplied(
        version=version.id, sha256=version.sha256, effective_from=effective, source=source, created_by=actor,
        comment=comment, release=release))
    return version


def on_the_hour(when: datetime, *, field_path: str = "effective_from") -> datetime:
    """`when` if it is a whole hour, else Invalid naming the hours around it: usage is billed per hour, so a version
    takes effect at the start of one (a version from 05:30 would silently govern only from 06:00)."""
    when = aware(when)
    start = floor_hour(when)
    if when != start:
        before, after = (h.strftime("%Y-%m-%dT%H:%M:%SZ") for h in (start, start + timedelta(hours=1)))
        raise Invalid(f"{field_path} {when.strftime('%Y-%m-%dT%H:%M:%SZ')} is not on the hour",
                      [FieldError(field_path, f"a policy version takes effect at a whole hour: use {before} or {after}")])
    return when


def import_if_changed(*, session: Session, document: PolicyDocument, actor: str, effective_from: datetime | None = None,
                      comment: str = "") -> tuple[PolicyVersion, bool]:
    """What `chargeback policy import` does: a document identical to the latest version stores nothing and returns
    that version with False; any other is imported as a new version (True)."""
    latest = latest_version(session=session)
    if latest is not None and latest.sha256 == document_sha256(document):
        return latest, False
    return import_version(session=session, document=document, actor=actor, effective_from=effective_from,
                          comment=comment), True


def get_version(*, session: Session, number: int) -> PolicyVersion:
    """Version `number`, or NotFound."""
    version = session.get(PolicyVersion, number)
    if version is None:
        raise NotFound(f"policy version {number} does not exist")
    return version


def previous_version(*, session: Session, number: int) -> PolicyVersion | None:
    """The version numbered just below `number`, or None for the first."""
    stmt = select(PolicyVersion).where(PolicyVersion.id < number).order_by(PolicyVersion.id.desc()).limit(1)
    return session.exec(stmt).first()


def highest_version_number(*, session: Session) -> int | None:
    """The number of the newest version stored (a cheap change marker), None when there is none."""
    return session.exec(select(func.max(PolicyVersion.id))).one()


def data_version(*, session: Session, at: datetime | None = None) -> tuple:
    """What caches of derived answers key on: the data generation and the policy version in effect at `at` (now).

    Read from the database by every process, so two serve processes never answer from different data;
    the version in effect covers a version stored earlier that becomes effective while an answer is cached.
    """
    version = version_at(session=session, when=at or utcnow())
    return generation.cache_key(session), version.id if version else None


def list_versions(*, session: Session) -> list[PolicyVersion]:
    """Every version, oldest first."""
    return list(session.exec(select(PolicyVersion).order_by(PolicyVersion.id)))


def version_at(*, session: Session, when: datetime) -> PolicyVersion | None:
    """The version in effect for an hour starting at `when`: greatest effective_from <= when, ties -> highest id."""
    stmt = (
        select(PolicyVersion)
        .where(PolicyVersion.effective_from <= aware(when))
        .order_by(PolicyVersion.effective_from.desc(), PolicyVersion.id.desc())
        .limit(1)
    )
    return session.exec(stmt).first()


def active_version(*, session: Session, at: datetime | None = None) -> PolicyVersion | None:
    """The version in effect now (or at `at`); None before the first import."""
    return version_at(session=session, when=at or utcnow())


def versions_between(*, session: Session, start: datetime, end: datetime) -> list[tuple[datetime, datetime, PolicyVersion]]:
    """Segments [from, to) of [start, end) with the version in effect in each; time before any version is left out."""
    start, end = aware(start), aware(end)
    if end <= start:
        return []
    current = version_at(session=session, when=start)
    stmt = (
        select(PolicyVersion)
        .where(PolicyVersion.effective_from > start, PolicyVersion.effective_from < end)
        .order_by(PolicyVersion.effective_from, PolicyVersion.id)
    )
    # Several versions with one effective_from: the highest number wins, as in version_at.
    changes: dict[datetime, PolicyVersion] = {}
    for version in session.exec(stmt):
        changes[aware(version.effective_from)] = version
    segments: list[tuple[datetime, datetime, PolicyVersion]] = []
    seg_start = start
    for at, version in sorted(changes.items()):
        if current is not None:
            segments.append((seg_start, at, current))
        current, seg_start = version, at
    if current is not None:
        segments.append((seg_start, end, current))
    return segments


_DOCUMENTS: dict[tuple[int, str], PolicyDocument] = {}


def load_document(version: PolicyVersion) -> PolicyDocument:
    """The parsed document of a stored version (cached: versions never change)."""
    key = (version.id or 0, version.sha256)
    doc = _DOCUMENTS.get(key)
    if doc is None:
        doc = PolicyDocument.model_validate(json.loads(version.document))
        if version.id is not None:
            if len(_DOCUMENTS) > 256:
                _DOCUMENTS.clear()
            _DOCUMENTS[key] = doc
    return doc


class _Dumper(yaml.SafeDumper):
    pass


def active_document(*, session: Session, at: datetime | None = None) -> PolicyDocument | None:
    """The policy in effect now (or at `at`), or None when there is none or it cannot be read."""
    version = active_version(session=session, at=at)
    if version is None:
        return None
    try:
        return load_document(version)
    except ValueError:  # a stored document that no longer parses should not take the pages down
        return None


def _represent_decimal(dumper: yaml.SafeDumper, value: Decimal) -> yaml.Node:
    # Plain numbers, written exactly: "0.30" stays 0.30, 26280 stays an integer.
    text = format(value, "f")
    tag = "tag:yaml.org,2002:float" if "." in text else "tag:yaml.org,2002:int"
    return dumper.represent_scalar(tag, text)


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    # Quote times and other digit strings ("09:00") that YAML 1.1 readers would turn into numbers.
    style = "'" if _NUMBERISH.match(value) else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_NUMBERISH = re.compile(r"^[-+]?[0-9][0-9_:.]*$")
_Dumper.add_representer(Decimal, _represent_decimal)
_Dumper.add_representer(str, _represent_str)


def dump_yaml(doc: PolicyDocument) -> str:
    """A readable YAML rendering (numbers unquoted, key `class`) that parses back to the same document."""
    data = doc.model_dump(mode="python", by_alias=True, exclude_none=True)
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, allow_unicode=True, default_flow_style=False, width=120)


def dump_value(value) -> str:
    """One value as the YAML editor writes it, on one line (0.6 unquoted, '09:00' quoted, a mapping in braces)."""
    text = yaml.dump(value, Dumper=_Dumper, default_flow_style=True, allow_unicode=True, sort_keys=False, width=10**6)
    return text.strip().removesuffix("...").strip()


def dump_json(doc: PolicyDocument) -> str:
    """Indented JSON in the document's spelling (decimals as strings, exact)."""
    return json.dumps(doc.to_data(), indent=2, ensure_ascii=False)
