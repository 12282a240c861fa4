"""Billing API: periods, invoices, platform statement, exports, rate, close, corrections (JSON, /api/v1).

Money is sent as decimal strings, never floats. A tenant member sees only its own tenants: any
other tenant is answered with the same 404 as an unknown one.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Query, Request
from pydantic import BaseModel, Field
from starlette.responses import Response

from app.api.schemas.billing import Correction, Invoice, InvoiceList, PeriodChecklist, PeriodSummary, Statement
from app.api.schemas.report import Report
from app.auth.deps import CurrentUser, Finance, IdempotencyDep, Staff
from app.billing import exports, issued, periods
from app.billing.checklist import checklist_payload
from app.billing.invoices import load_view, platform_statement, tenant_invoice
from app.billing.models import PeriodStatus
from app.billing.period import parse_period, rated_period, require_started
from app.billing.report import read_report
from app.billing.totals import department_rollup, tenant_totals
from app.core.deps import SessionDep
from app.core.errors import NotFound
from app.core.timeutil import utcnow
from app.http.pagination import DEFAULT_LIMIT, CursorQuery, LimitQuery, Page, page_of
from app.http.responses import conditional, download, json_response

router = APIRouter(tags=["billing"])


def to_json(value: Any) -> Any:
    """Decimals as strings (exact), datetimes as ISO 8601 UTC with Z."""
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%dT%H:%M:%SZ")
    if isinstance(value, dict):
        return {k: to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    return value


class CloseRequest(BaseModel):
    accept_gaps: bool = False
    accept_unpooled: bool = False  # close although GPUs on nodes no pool names went unpriced
    accept_unreconciled: bool = False  # close although hours do not reconcile with the source (or were not checked)
    reason: str | None = Field(default=None, max_length=2000)


class CorrectionRequest(BaseModel):
    line_id: str = Field(min_length=1)
    amount: Decimal
    reason: str = Field(min_length=1, max_length=2000)


@router.get("/periods", response_model=Page[PeriodSummary], response_model_exclude_unset=True)
def list_periods(
    session: SessionDep,
    user: CurrentUser,
    status: Annotated[PeriodStatus | None, Query(description="Only periods in this status")] = None,
    limit: LimitQuery = DEFAULT_LIMIT,
    cursor: CursorQuery = None,
) -> dict:
    """Billing periods, newest first (months with ingested hours but no rating show as open)."""
    found = periods.list_periods(session=session, staff=user.visible_tenants() is None)
    if status is not None:
        found = [p for p in found if p["status"] == status]
    items, next_cursor = page_of(found, key=lambda p: (p["period"],), types=[str], limit=limit, cursor=cursor,
                                 descending=True)
    return {"items": to_json(items), "next_cursor": next_cursor}


@router.get("/periods/{period}/invoices", responses={304: {"description": "Not modified"}})
def list_invoices(
    period: str,
    request: Request,
    session: SessionDep,
    user: CurrentUser,
    limit: LimitQuery = DEFAULT_LIMIT,
    cursor: CursorQuery = None,
) -> InvoiceList:
    """Invoice totals per tenant the caller may see (`items`, by tenant name, cursor-paged), with department roll-ups.

    `invoices` repeats `items` for clients written before lists were pages; it is deprecated and goes
    in a later release. Answers carry an ETag; a GET with a matching If-None-Match gets 304.
    """
    row = rated_period(session=session, month=period)
    invoices = tenant_totals(session=session, period=row, viewer=user)
    departments = department_rollup(invoices)  # roll-ups cover every visible tenant, whichever page is asked for
    items, next_cursor = page_of(invoices, key=lambda inv: (inv["tenant"],), types=[str], limit=limit, cursor=cursor)
    payload = {
        "period": row.month, "status": row.status, "currency": row.currency, "items": items, "invoices": items,
        "departments": departments, "next_cursor": next_cursor,
    }
    return conditional(request, to_json(payload))


@router.get("/periods/{period}/invoices/{tenant}", response_model=Invoice,
            responses={304: {"description": "Not modified"}})
def get_invoice(period: str, tenant: str, request: Request, session: SessionDep, user: CurrentUser) -> dict:
    """One tenant's invoice: lines, GPU-hours per pool and class, efficiency, penalties, credits, total (ETag, 304)."""
    row = rated_period(session=session, month=period)
    if not user.can_see_tenant(tenant):
        raise NotFound(f"No invoice for tenant {tenant!r} in {row.month}")
    return conditional(request, to_json(tenant_invoice(load_view(session=session, period=row), tenant)))


@router.get("/periods/{period}/statement", response_model=Statement)
def get_statement(period: str, session: SessionDep, _: Staff) -> dict:
    """The platform statement: balance lines, unallocated use, gaps, unattributed breaches, conservation."""
    row = rated_period(session=session, month=period)
    return to_json(platform_statement(load_view(session=session, period=row)))


@router.get("/periods/{period}/checklist", response_model=PeriodChecklist)
def get_checklist(period: str, session: SessionDep, _: Staff) -> dict:
    """The pre-close checklist: hours ingested, unpooled GPUs, rating, unattributed breaches, corrections; each item
    ok / needs attention / blocks close, with what to do (any started month, rated or not)."""
    p = parse_period(period)
    require_started(p)
    return checklist_payload(session=session, period=p, now=utcnow())


@router.get("/periods/{period}/export", response_class=Response,
            responses={200: {"content": {"text/csv": {}, "application/pdf": {}}}, 304: {"description": "Not modified"},
                       503: {"description": "Finalized, documents still being issued (Retry-After)"}})
def export(
    period: str,
    request: Request,
    session: SessionDep,
    _: Finance,
    format: Annotated[Literal["csv", "focus", "pdf"], Query(description="csv | focus (FOCUS 1.2) | pdf")] = "csv",
) -> Response:
    """The period as CSV, FOCUS 1.2 CSV or PDF. A finalized period's is the document issued after close, byte for
    byte; its SHA-256 is the ETag and X-Content-SHA256 (X-Document: issued | live | re-rendered). While the
    worker is still issuing it: 503 problem+json with Retry-After."""
    row = rated_period(session=session, month=period)
    served = issued.serve(session=session, period=row, kind=format)
    return download(request, served.content, media_type=exports.media_type(format),
                    filename=exports.filename(row.month, format), headers=served.headers())


@router.post("/periods/{period}/rate", response_model=PeriodSummary)
def rate(period: str, session: SessionDep, user: Finance) -> dict:
    """Rate the period as a draft (re-ratable; 409 once finalized; 422 naming unpriced GPU models)."""
    row = periods.rate(session=session, period=period, actor=user.name)
    return to_json(periods.period_summary(row))


@router.post("/periods/{period}/close", response_model=PeriodSummary)
def close(
    period: str,
    session: SessionDep,
    user: Finance,
    idempotency: IdempotencyDep,
    body: Annotated[CloseRequest | None, Body()] = None,
) -> dict:
    """Finalize the period (409 when incomplete without accept_gaps, with unpooled GPUs without accept_unpooled,
    with hours that do not reconcile with the source without accept_unreconciled, or already finalized). The answer says `documents: pending`: the worker issues the documents from the
    stored lines next, sets `hashes`, and only then sends `period.finalized`.

    With an `Idempotency-Key` header a retry gets the first answer again instead of a 409.
    """
    replayed = idempotency.replay()
    if replayed is not None:
        return replayed
    body = body or CloseRequest()
    row = periods.close(session=session, period=period, actor=user.name, accept_gaps=body.accept_gaps,
                         accept_unpooled=body.accept_unpooled, reason=body.reason,
                         accept_unreconciled=body.accept_unreconciled)
    return idempotency.remember(json_response(to_json(periods.period_summary(row))))


@router.post("/periods/{period}/corrections", status_code=201, response_model=Correction)
def correct(period: str, body: CorrectionRequest, session: SessionDep, user: Finance) -> dict:
    """Add to open period `period` a correction of a line of an earlier, finalized period."""
    line = periods.correct(
        session=session, period=period, line_id=body.line_id, amount=body.amount, reason=body.reason, actor=user.name
    )
    return to_json({"line_id": line.line_id, "corrects": line.corrects, "amount": line.amount, "reason": line.reason})


@router.get("/periods/{period}/report", response_model=Report)
def get_report(period: str, session: SessionDep, _: Staff) -> dict:
    """The monthly report for managers: cost and utilisation trend, top tenants, dark time, SLA, platform statement."""
    row = rated_period(session=session, month=period)
    return to_json(read_report(session=session, period=row))
