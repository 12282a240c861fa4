"""The live fleet view: per node, GPU and MIG instance right now (refreshed by htmx every 15 s)."""

from __future__ import annotations

import time
from datetime import datetime

from fastapi import APIRouter, Request
from starlette.responses import Response

from app.auth.deps import Staff
from app.core.deps import SessionDep
from app.core.errors import AppError
from app.core.settings import get_settings
from app.http.templating import render
from app.metrics.labels import ExporterIdentity
from app.metrics.live import LiveCache, live_fleet
from app.metrics.sources import get_live_source
from app.policy.service import active_document, highest_version_number
from app.review.impact import capacity_impact

router = APIRouter(include_in_schema=False)
REFRESH_S = 15
CACHE = LiveCache()


@router.get("/fleet/live")
def fleet_live(request: Request, session: SessionDep, user: Staff) -> Response:
    settings = get_settings()
    doc = active_document(session=session)
    fleet = error = None
    if doc is not None:
        source = get_live_source(settings)
        exporter = ExporterIdentity.from_settings(settings)
        try:
            fleet = CACHE.get((source.key, highest_version_number(session=session)),
                              lambda: live_fleet(source.read(policy=doc, at=time.time()), doc, exporter))
        except AppError as exc:  # Prometheus unreachable, partial or malformed: say so, never a 500
            error = exc.detail
    memory = capacity_impact(None, doc, measured_peaks=fleet.memory_by_tenant)["memory"] if fleet and doc else []
    context = {"title": "Live fleet", "fleet": fleet, "error": error, "memory_rows": memory, "refresh_s": REFRESH_S,
               "as_of": datetime.fromtimestamp(fleet.at, settings.tz).strftime("%Y-%m-%d %H:%M:%S %Z") if fleet else "",
               "policy": doc, "source": "Prometheus" if settings.prometheus_url else "the built-in simulator"}
    return render(request, "fleet/live.html", context, block="live" if request.headers.get("HX-Target") == "live" else "content")
