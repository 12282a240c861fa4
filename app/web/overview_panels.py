"""The overview's dashboard panels: cost and utilisation this month vs last, GPU-hours by class per day
(idle included), dark-time share, and the live partials (ingestion health, SLA status) refreshed by htmx."""

from __future__ import annotations

from datetime import date, datetime, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

from fastapi import APIRouter, Request
from sqlmodel import Session
from starlette.responses import Response

from app.auth.deps import CurrentUser, Principal
from app.billing.fleet_cost import range_cost
from app.billing.loader import DocumentCache
from app.core.cache import TtlCache
from app.core.deps import SessionDep
from app.http.templating import render
from app.metrics import usage_read
from app.metrics.breaches_read import services
from app.metrics.date_ranges import DateRange
from app.metrics.ingestion_health import ingestion_health
from app.policy.service import active_document, data_version
from app.web.charts import chart_json, class_colour
from app.web.date_range_picker import presets, resolve

router = APIRouter(include_in_schema=False)

# Colours by class, fixed so the same class has the same colour on every chart (Okabe-Ito).


def range_label(window: DateRange) -> str:
    """"2026-10" for a whole calendar month, else "2026-10-02 – 2026-10-31"."""
    first = window.start.replace(day=1)
    if window.start == first and window.end == (first + timedelta(days=32)).replace(day=1) - timedelta(days=1):
        return f"{first.year:04d}-{first.month:02d}"
    return f"{window.start.isoformat()} – {window.end.isoformat()}"


def cost_comparison(*, session: Session, period: DateRange, now: datetime) -> dict:
    """Fleet cost and utilisation of the chosen range and of as many days just before it, each with its coverage,
    and the change in cost per ingested hour (None when the earlier days are not whole: no comparison against a
    partial baseline)."""
    docs = DocumentCache(session)
    days = (period.end - period.start).days + 1
    before = DateRange(start=period.start - timedelta(days=days), end=period.start - timedelta(days=1), tz=period.tz)
    this = range_cost(session=session, window=period, label=range_label(period), docs=docs)
    last = range_cost(session=session, window=before, label=range_label(before), docs=docs)
    this_cov = usage_read.hours_coverage(session=session, start=period.start_utc, end=period.end_utc, now=now)
    last_cov = usage_read.hours_coverage(session=session, start=before.start_utc, end=before.end_utc, now=now)
    return {"this": this, "last": last, "this_coverage": this_cov, "last_coverage": last_cov, "days": days,
            "change": hourly_cost_change(this.cost, this_cov, last.cost, last_cov)}


def hourly_cost_change(this_cost: Decimal | None, this_cov: usage_read.Coverage, last_cost: Decimal | None,
                       last_cov: usage_read.Coverage) -> Decimal | None:
    """Change of the fleet's cost per ingested hour against last month, as a fraction.

    None when there is nothing to compare or the baseline month is not whole (a month of 3 ingested hours is no
    baseline: "+35800%" against it says nothing). Per hour, so a month in progress compares fairly.
    """
    if this_cost is None or last_cost is None or not this_cov.ok or last_cov.partial or not last_cost:
        return None
    return (this_cost / this_cov.ok) / (last_cost / last_cov.ok) - 1


# A range this short is charted by hour: one or two bars per day say nothing.
HOURLY_DAYS = 2


def hourly_range(period: DateRange) -> bool:
    return (period.end - period.start).days + 1 <= HOURLY_DAYS


def daily_chart(usage: usage_read.DailyUsage, ingested: set) -> str:
    """Stacked GPU-hours per day (or hour, for a short range) and class, idle capacity on top (whole fleet only).

    A day (hour) with no ingested hour is null (drawn as a gap), never 0: nothing is known about it.
    """
    labels = [d.strftime("%m-%d %H:%M") if isinstance(d, datetime) else d.isoformat() for d in usage.days]

    def values(series: dict[date, Decimal]) -> list:
        return [series.get(d, 0) if d in ingested else None for d in usage.days]

    datasets = []
    for klass in usage_read.CLASSES:
        series = usage.by_class.get(klass)
        if series:
            datasets.append({"label": klass, "data": values(series), "color": class_colour(klass)})
    if usage.idle is not None and any(usage.idle.values()):
        datasets.append({"label": "idle", "data": values(usage.idle), "color": class_colour("idle")})
    return chart_json({"labels": labels, "datasets": datasets})


# The aggregations are kept per (range, visible tenants, data version) for at most CACHE_TTL_S: the data
# version is read from the database, so every serve process recomputes after a write anywhere. Bounded in size.
CACHE_TTL_S = 30.0
CACHE_MAX = 64
_CACHE: TtlCache[dict] = TtlCache(ttl_s=CACHE_TTL_S, max_entries=CACHE_MAX)


def _cached_aggregates(*, session: Session, user: Principal, period: DateRange, now: datetime, today: date) -> dict:
    tenants = user.visible_tenants()
    key = (period.start, period.end, period.tz.key, today, tenants, data_version(session=session, at=now))
    return _CACHE.get(key, lambda: _aggregates(session=session, user=user, period=period, now=now, today=today))


def extras(*, session: Session, user: Principal, period: DateRange, now: datetime, today: date) -> dict:
    """Context the overview template needs for the dashboard panels."""
    context = dict(_cached_aggregates(session=session, user=user, period=period, now=now, today=today))
    context.update(health_context(session=session, period=period, now=now))  # lag depends on the clock
    context["now"] = now
    return context


def _aggregates(*, session: Session, user: Principal, period: DateRange, now: datetime, today: date) -> dict:
    tenants = user.visible_tenants()
    hourly = hourly_range(period)
    usage = usage_read.daily_usage(session=session, period=period, tenants=tenants, hourly=hourly)
    context = {
        "daily_json": daily_chart(usage, usage_read.ingested_days(session=session, period=period, hourly=hourly)),
        "daily_hourly": hourly,
        "daily_has_data": any(usage.by_class.values()),
        "dark": usage_read.dark_share(session=session, period=period, tenants=tenants),
        "cost": cost_comparison(session=session, period=period, now=now) if tenants is None else None,
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
