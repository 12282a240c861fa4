"""Every event type of the outbox is emitted by the change it reports, in that change's transaction,
with the documented payload (app/core/event_payloads.py), tenant-scoped where it concerns one tenant."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from sqlmodel import Session, select

from app.billing import periods
from app.billing.invoices import load_view
from app.billing.types import LineKind
from app.core.db import unit_of_work
from app.core.errors import Unavailable
from app.core.event_payloads import PAYLOADS
from app.core.events import Event
from app.metrics.ingest import ingest_hour_list
from app.metrics.models import IngestHour
from app.review import releases
from tests.support.billing import add_hour, fill_month, issue_documents, store_policy
from tests.support.review import approved, seed

OCT1 = datetime(2026, 10, 1, tzinfo=UTC)


def events(session, type: str) -> list[Event]:
    rows = session.exec(select(Event).where(Event.type == type).order_by(Event.created_at, Event.id)).all()
    for row in rows:  # the stored payload is exactly the documented model (extra fields forbidden)
        PAYLOADS[type].model_validate(row.data)
    return list(rows)


def test_each_rating_run_emits_period_rated_with_its_totals_and_hash(session):
    v = store_policy(session)
    add_hour(session, hour=OCT1, version=v.id)
    periods.rate(session=session, period="2026-10", actor="fin")
    row = periods.rate(session=session, period="2026-10", actor="fin")  # re-rated: a second run, same inputs
    first, second = events(session, "period.rated")
    assert (first.data["revision"], second.data["revision"]) == (1, 2) == (1, row.revision)
    assert first.data["lines_sha256"] == second.data["lines_sha256"]  # same inputs, same lines
    assert first.tenant is None and first.key == "period.rated:2026-10:1"
    view = load_view(session=session, period=row)
    billed = {}
    for line in view.lines:
        if line.account != "platform":
            billed[line.account] = billed.get(line.account, Decimal(0)) + line.amount
    # The SPEC's worked example: search 0.78 reserved, vision 1.30 + 1.00 penalty, etl 0.13, search -1.00 credit.
    assert second.data["tenants"] == {t: str(a) for t, a in sorted(billed.items())}
    assert Decimal(second.data["total"]) == sum(billed.values())
    assert second.data["period"] == "2026-10" and second.data["rated_by"] == "fin" and second.data["hours_ok"] == 1
    add_hour(session, hour=OCT1 + timedelta(hours=1), version=v.id, breaches=())
    third = periods.rate(session=session, period="2026-10", actor="fin")
    assert events(session, "period.rated")[-1].data["lines_sha256"] != first.data["lines_sha256"]
    assert third.revision == 3


def test_a_correction_emits_correction_created_for_its_tenant(session):
    v = store_policy(session)
    fill_month(session, "2026-09", v.id)
    sept = periods.close(session=session, period="2026-09", actor="fin")
    assert events(session, "period.finalized") == []  # documents pending: the event follows the issuing step
    issue_documents(session, "2026-09")
    [finalized] = events(session, "period.finalized")
    assert finalized.data["period"] == "2026-09" and set(finalized.data["sha256"]) == {"csv", "focus", "pdf"}
    target = next(line for line in load_view(session=session, period=sept).lines
                  if line.kind == LineKind.USAGE_BUSY and line.account == "vision")
    fix = periods.correct(session=session, period="2026-10", line_id=target.line_id, amount="-12.345",
                          reason="double-counted node", actor="fin")
    [event] = events(session, "correction.created")
    assert event.tenant == "vision"
    assert event.data == {"period": "2026-10", "line_id": fix.line_id, "corrects": target.line_id,
                          "corrected_period": "2026-09", "account": "vision", "pool": target.pool, "amount": "-12.34",
                          "currency": "USD", "reason": "double-counted node", "created_by": "fin"}


def test_a_refused_correction_emits_nothing(fresh_engine):
    with unit_of_work(fresh_engine) as s:
        v = store_policy(s)
        fill_month(s, "2026-09", v.id)
        periods.close(session=s, period="2026-09", actor="fin")
    from app.core.errors import Invalid

    with pytest.raises(Invalid), unit_of_work(fresh_engine) as s:
        periods.correct(session=s, period="2026-10", line_id="x", amount="0", reason="", actor="fin")
    with Session(fresh_engine) as s:
        assert events(s, "correction.created") == []


def test_an_import_and_a_release_apply_emit_policy_applied(session):
    v1 = seed(session)
    [imported] = events(session, "policy.applied")
    assert imported.data["version"] == v1.id and imported.data["source"] == "bootstrap"
    assert imported.data["sha256"] == v1.sha256 and imported.data["release"] is None
    change = approved(session, v1)
    planned = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) + timedelta(hours=2)
    release = releases.create_release(session=session, actor="oscar", name="search v2", service="search-chat",
                                      planned_at=planned)
    releases.attach(session=session, release_id=release.id, change_id=change.id, actor="oscar")
    v2 = releases.apply_release(session=session, release_id=release.id, actor="oscar", effective_from=planned)
    applied = events(session, "policy.applied")[-1]
    assert applied.data["version"] == v2.id and applied.data["source"] == "change"
    assert applied.data["release"] == {"id": release.id, "name": "search v2", "service": "search-chat"}
    assert datetime.fromisoformat(applied.data["effective_from"]) == planned
    v3 = releases.rollback_release(session=session, release_id=release.id, actor="oscar")
    back = events(session, "policy.applied")[-1]
    assert back.data["version"] == v3.id and back.data["source"] == "rollback" and back.data["release"]["id"] == release.id


class DownSource:
    """A metrics source whose every read fails (Prometheus unreachable)."""

    def fetch(self, *, start, end, policy):
        raise Unavailable("prometheus:9090 did not answer: ConnectionError")


def test_a_gap_emits_one_event_per_hour_and_attempt(session):
    store_policy(session, effective_from=OCT1 - timedelta(days=1))
    hours = [OCT1 + timedelta(hours=h) for h in range(4)]
    now = OCT1 + timedelta(hours=5)
    ingest_hour_list(session=session, source=DownSource(), hours=hours, now=now, hours_per_fetch=1)
    first = events(session, "ingestion.gap")
    # Ingestion carries on past a failed read: hours 0-2 were each read and failed (attempt 1); after 3 failures in
    # a row the source is down and hour 3 is a gap not read at all (attempt 0).
    assert [(e.data["hour"], e.data["attempts"]) for e in first] == [
        ("2026-10-01T00:00:00Z", 1), ("2026-10-01T01:00:00Z", 1), ("2026-10-01T02:00:00Z", 1),
        ("2026-10-01T03:00:00Z", 0)]
    assert "did not answer" in first[0].data["error"] and first[0].tenant is None
    assert first[3].data["error"].startswith("not read (3 reads in a row failed)")
    assert first[0].data["next_retry_at"] == "2026-10-01T05:01:00Z"
    # Retried: a new attempt of each hour read, a new event each; the same attempt recorded again adds nothing.
    ingest_hour_list(session=session, source=DownSource(), hours=hours[:1], now=now + timedelta(minutes=1))
    after = events(session, "ingestion.gap")
    assert [(e.data["hour"], e.data["attempts"]) for e in after[4:]] == [("2026-10-01T00:00:00Z", 2)]
    assert session.get(IngestHour, ("default", OCT1)).attempts == 2
    assert session.get(IngestHour, ("default", OCT1 + timedelta(hours=3))).attempts == 0
