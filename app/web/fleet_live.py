"""The live fleet view: per node, GPU and MIG instance right now (refreshed by htmx every 15 s)."""

from __future__ import annotations

import time
from datetime import datetime

from fastapi import APIRouter, Request
from starlette.responses import HTMLResponse, Response

from app.auth.deps import Staff
from app.core.deps import SessionDep
from app.core.errors import AppError
from app.core.settings import get_settings
from app.http.htmx import is_htmx
from app.http.templating import render, templates
from app.metrics.labels import ExporterIdentity
from app.metrics.live import LiveCache, live_fleet
from app.metrics.sources import get_live_source
from app.policy.service import active_document, highest_version_number
from app.review.impact import capacity_impact

router = APIRouter(include_in_schema=False)
REFRESH_S = 15
CACHE = LiveCache()


def _live_html(fleet, doc, settings) -> str:
    """The live block for one reading: ~1,100 table rows for 1,024 GPUs, rendered once and cached with the reading."""
    memory = capacity_impact(None, doc, measured_peaks=fleet.memory_by_tenant)["memory"] if fleet and doc else []
    context = {"fleet": fleet, "error": None, "memory_rows": memory, "refresh_s": REFRESH_S, "policy": doc,
               "as_of": datetime.fromtimestamp(fleet.at, settings.tz).strftime("%Y-%m-%d %H:%M:%S %Z") if fleet else ""}
    return templates.env.get_template("fleet/_live.html").render(context)


@router.get("/fleet/live")
def fleet_live(request: Request, session: SessionDep, user: Staff) -> Response:
    settings = get_settings()
    doc = active_document(session=session)
    html = None
    if doc is not None:
        source = get_live_source(settings)
        exporter = ExporterIdentity.from_settings(settings)

        def read() -> str:
            return _live_html(live_fleet(source.read(policy=doc, at=time.time()), doc, exporter), doc, settings)

        try:
            html = CACHE.get((source.key, highest_version_number(session=session)), read)
        except AppError as exc:  # Prometheus unreachable, partial or malformed: say so, never a 500
            html = templates.env.get_template("fleet/_live.html").render(
                {"fleet": None, "error": exc.detail, "refresh_s": REFRESH_S, "policy": doc})
    if html is None:
        html = templates.env.get_template("fleet/_live.html").render(
            {"fleet": None, "error": None, "refresh_s": REFRESH_S, "policy": None})
    if is_htmx(request) and request.headers.get("HX-Target") == "live":
        return HTMLResponse(html)
    context = {"title": "Live fleet", "live_html": html,
               "source": "Prometheus" if settings.prometheus_url else "the built-in simulator"}
    return render(request, "fleet/live.html", context)
