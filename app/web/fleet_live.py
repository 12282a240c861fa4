"""The live fleet view: per node, GPU and MIG instance right now (refreshed by htmx every 15 s)."""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from urllib.parse import quote

from fastapi import APIRouter, Request
from starlette.responses import HTMLResponse, Response

from app.auth.deps import Staff
from app.core.deps import SessionDep
from app.core.errors import AppError
from app.core.settings import get_settings
from app.core.timeutil import floor_hour, utcnow
from app.http.htmx import is_htmx
from app.http.templating import render, templates
from app.metrics.labels import ExporterIdentity
from app.metrics.live import LiveCache, live_fleet
from app.metrics.sources import cluster_config, get_live_source
from app.metrics.unit_read import RecentUnits, recent_units
from app.policy.service import active_document, data_version, highest_version_number
from app.review.impact import capacity_impact
from app.web import heat
from app.web.doctor import doctor_href

router = APIRouter(include_in_schema=False)
REFRESH_S = 15
CACHE = LiveCache()
# The per-unit charts change only when an hour is ingested (the data version): read once per 30 s at most.
HISTORY = LiveCache(ttl_s=30)


def _history(recent: RecentUnits | None, tz) -> dict:
    """Per unit (node, GPU UUID, GPU instance): its chart of the last hours (bars, title)."""
    if recent is None:
        return {}
    return {key: {**heat.hour_bars(values), "text": heat.hours_text(values, recent.hours, tz)}
            for key, values in recent.occupancy.items()}


def _live_html(fleet, doc, settings, poll: str, recent: RecentUnits | None = None) -> str:
    """The live block for one reading: ~1,100 table rows for 1,024 GPUs, rendered once and cached with the reading."""
    memory = capacity_impact(None, doc, measured_peaks=fleet.memory_by_tenant)["memory"] if fleet and doc else []
    context = {"fleet": fleet, "error": None, "memory_rows": memory, "refresh_s": REFRESH_S, "policy": doc, "poll": poll,
               "as_of": datetime.fromtimestamp(fleet.at, settings.tz).strftime("%Y-%m-%d %H:%M:%S %Z") if fleet else "",
               "history": _history(recent, settings.tz), "history_hours": len(recent.hours) if recent else 0,
               "history_end": (recent.hours[-1] + timedelta(hours=1)).astimezone(settings.tz).strftime("%H:00")
               if recent else ""}
    return templates.env.get_template("fleet/_live.html").render(context)


def _recent(session, cluster: str) -> RecentUnits:
    """The last hours of the cluster's units from the hourly rollups, kept per (cluster, hour, data version)."""
    end = floor_hour(utcnow())
    key = ("recent", cluster, end, data_version(session=session, at=end))
    return HISTORY.get(key, lambda: recent_units(session=session, cluster=cluster, end=end))


@router.get("/fleet/live")
def fleet_live(request: Request, session: SessionDep, user: Staff, cluster: str | None = None) -> Response:
    """One cluster's fleet now (`cluster`, default: the default or first cluster), against its own pools."""
    settings = get_settings()
    config = cluster_config(settings, cluster)
    names = settings.cluster_names()
    poll = "/fleet/live" + (f"?cluster={quote(config.name)}" if len(names) > 1 else "")
    active = active_document(session=session)
    doc = active.for_cluster(config.name) if active is not None else None
    html = None
    if doc is not None:
        source = get_live_source(settings, config.name)
        exporter = ExporterIdentity.from_settings(settings)

        def read() -> str:
            return _live_html(live_fleet(source.read(policy=doc, at=time.time()), doc, exporter), doc, settings, poll,
                              _recent(session, config.name))

        try:
            html = CACHE.get((config.name, source.key, highest_version_number(session=session)), read)
        except AppError as exc:  # Prometheus unreachable, partial or malformed: say so, never a 500
            html = templates.env.get_template("fleet/_live.html").render(
                {"fleet": None, "error": exc.detail, "refresh_s": REFRESH_S, "policy": doc, "poll": poll})
    if html is None:
        html = templates.env.get_template("fleet/_live.html").render(
            {"fleet": None, "error": None, "refresh_s": REFRESH_S, "policy": None, "poll": poll})
    if is_htmx(request) and request.headers.get("HX-Target") == "live":
        return HTMLResponse(html)
    context = {"title": "Live fleet", "live_html": html,
               "source": "the built-in simulator" if config.is_simulator else "Prometheus",
               "clusters": names if len(names) > 1 else [], "cluster": config.name,
               "doctor_href": doctor_href(user, config.name)}
    return render(request, "fleet/live.html", context)
