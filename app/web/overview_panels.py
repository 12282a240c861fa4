"""The overview's dashboard panels: cost and utilisation this month vs last, GPU-hours by class per day
(idle included), dark-time share, and the live partials (ingestion health, SLA status) refreshed by htmx."""

from __future__ import annotations

import time
from datetime import date, datetime, timedelta
from datetime import time as clock
from zoneinfo import ZoneInfo

from fastapi import APIRouter, Request
from sqlmodel import Session
from starlette.responses import Response

from app.auth.deps import CurrentUser, Principal
from app.billing.fleet_cost import month_cost
from app.billing.loader import DocumentCache
from app.billing.period import periods_fingerprint
from app.core.deps import SessionDep
from app.http.templating import render
from app.metrics import usage_read
from app.metrics.breaches_read import services
from app.metrics.date_ranges import DateRange
from app.metrics.ingestion_health import ingestion_health, ingestion_version
from app.policy.service import active_document, highest_version_number
from app.web.charts import chart_json, class_colour
from app.web.date_range_picker import presets, resolve

router = APIRouter(include_in_schema=False)

# Colours by class, fixed so the same class has the same colour on every chart (Okabe-Ito).


def _month_bounds(day: date, tz: ZoneInfo) -> tuple[str, datetime, datetime]:
    first = day.replace(day=1)
    nxt = (first + timedelta(days=32)).replace(day=1)
    return (f"{first.year:04d}-{first.month:02d}", datetime.combine(first, clock(0), tz), datetime.combine(nxt, clock(0), tz))


def cost_comparison(*, session: Session, today: date, tz: ZoneInfo, now: datetime) -> dict:
    """Fleet cost and utilisation of this month (to date) and last month."""
    docs = DocumentCache(session)
    month, start, _ = _month_bounds(today, tz)
    last_month, last_start, last_end = _month_bounds(start.date() - timedelta(days=1), tz)
    this = month_cost(session=session, month=month, start=start, end=now, docs=docs)
    last = month_cost(session=session, month=last_month, start=last_start, end=last_end, docs=docs)
    return {"this": this, "last": last}


def daily_chart(usage: usage_read.DailyUsage) -> str:
    """Stacked GPU-hours per day and class, idle capacity on top (whole fleet only)."""
    labels = [d.isoformat() for d in usage.days]
    datasets = []
    for klass in usage_read.CLASSES:
        series = usage.by_class.get(klass)
        if series:
            datasets.append({"label": klass, "data": [series.get(d, 0) for d in usage.days],
                             "color": class_colour(klass)})
    if usage.idle is not None and any(usage.idle.values()):
        datasets.append({"label": "idle", "data": [usage.idle.get(d, 0) for d in usage.days], "color": class_colour("idle")})
    return chart_json({"labels": labels, "datasets": datasets})


# Rollups change only when an hour is ingested, a period is rated or a policy version is added: the
# aggregations are kept per (range, visible tenants, that data version) for at most CACHE_TTL_S, which also
# bounds how late a policy version that becomes effective later shows up. Per process; bounded in size.
CACHE_TTL_S = 30.0
CACHE_MAX = 64
_CACHE: dict[tuple, tuple[float, dict]] = {}


def data_version(session: Session) -> tuple:
    """A cheap fingerprint of everything the overview aggregates."""
    billing = periods_fingerprint(session=session)
    policy = highest_version_number(session=session)
    return (*ingestion_version(session), *billing, policy)


def _cached_aggregates(*, session: Session, user: Principal, period: DateRange, now: datetime, today: date) -> dict:
    tenants = user.visible_tenants()
    key = (period.start, period.end, period.tz.key, today, tenants, data_version(session))
    hit = _CACHE.get(key)
    if hit is not None and time.monotonic() - hit[0] < CACHE_TTL_S:
        return hit[1]
    value = _aggregates(session=session, user=user, period=period, now=now, today=today)
    if len(_CACHE) >= CACHE_MAX:
        _CACHE.clear()
    _CACHE[key] = (time.monotonic(), value)
    return value


def extras(*, session: Session, user: Principal, period: DateRange, now: datetime, today: date) -> dict:
    """Context the overview template needs for the dashboard panels."""
    context = dict(_cached_aggregates(session=session, user=user, period=period, now=now, today=today))
    context.update(health_context(session=session, period=period, now=now))  # lag depends on the clock
    context["now"] = now
    return context


def _aggregates(*, session: Session, user: Principal, period: DateRange, now: datetime, today: date) -> dict:
    tenants = user.visible_tenants()
    usage = usage_read.daily_usage(session=session, period=period, tenants=tenants)
    context = {
        "daily_json": daily_chart(usage),
        "daily_has_data": any(usage.by_class.values()),
        "dark": usage_read.dark_share(session=session, period=period, tenants=tenants),
        "cost": cost_comparison(session=session, today=today, tz=period.tz, now=now) if tenants is None else None,
        "range_presets_overview": [
            {"label": label, "href": f"/?start={s.isoformat()}&end={e.isoformat()}",
             "current": s == period.start and e == period.end}
            for label, s, e in presets(today)
        ],
    }
    context.update(sla_context(session=session, user=user, today=today, tz=period.tz, now=now))
    return context


def health_context(*, session: Session, period: DateRange, now: datetime) -> dict:
    health = ingestion_health(session=session, now=now, start=period.start_utc, end=period.end_utc)
    return {"health": health, "now": now, "tz": period.tz,
            "health_period": period}


def sla_context(*, session: Session, user: Principal, today: date, tz: ZoneInfo, now: datetime) -> dict:
    month = DateRange(start=today.replace(day=1), end=today, tz=tz)
    rows = services(session=session, period=month, doc=active_document(session=session), tenants=user.visible_tenants())
    return {"sla_status": rows, "sla_month": f"{today.year:04d}-{today.month:02d}", "now": now, "tz": tz}


@router.get("/overview/health")
def health_panel(request: Request, session: SessionDep, user: CurrentUser, start: date | None = None,
                 end: date | None = None) -> Response:
    """The ingestion-health panel alone (polled by the overview every 60 s)."""
    rc = resolve(start, end)
    return render(request, "_partials/overview_health.html",
                  health_context(session=session, period=rc.period, now=rc.now), block=None)


@router.get("/overview/sla")
def sla_panel(request: Request, session: SessionDep, user: CurrentUser) -> Response:
    """The SLA-status panel alone (polled by the overview every 60 s)."""
    rc = resolve(None, None)
    return render(request, "_partials/overview_sla.html",
                  sla_context(session=session, user=user, today=rc.today, tz=rc.period.tz, now=rc.now), block=None)
