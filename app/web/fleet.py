"""Fleet: occupancy heatmap per pool over time, pools and nodes with their MIG layouts, memory headroom."""

from __future__ import annotations

from datetime import date

from fastapi import APIRouter, Request
from starlette.responses import Response

from app.auth.deps import Staff
from app.core.deps import SessionDep
from app.http.templating import render
from app.metrics.attribution import UNPOOLED
from app.metrics.occupancy_read import occupancy
from app.policy.service import active_document
from app.review.impact import capacity_impact
from app.web.date_range_picker import range_context, resolve

router = APIRouter(include_in_schema=False)
# Fleet-wide capacity is not any one tenant's data: tenant members do not see this page (nav hides it too).


def _level(value) -> int:
    """Heatmap shade 0..5 (0 = idle, 5 = full); the cell also carries the number, colour is never the only cue."""
    return min(5, int(float(value) * 5 + 0.999)) if value > 0 else 0


@router.get("/fleet")
def fleet(request: Request, session: SessionDep, user: Staff, start: date | None = None, end: date | None = None) -> Response:
    rc = resolve(start, end)
    occ = occupancy(session=session, period=rc.period)
    doc = active_document(session=session)
    pools = []
    if doc is not None:
        for pool in doc.pools:
            nodes = [{"name": n, "mig": doc.isolation.mig.get(n)} for n in pool.nodes]
            pools.append({"pool": pool, "nodes": nodes, "gpus": len(pool.nodes) * pool.gpus_per_node,
                          "mig_nodes": sum(1 for n in nodes if n["mig"])})
    impact = capacity_impact(None, doc, measured_peaks=None) if doc is not None else None
    labels = [b.strftime("%m-%d %H:00") if occ.hourly else b.strftime("%m-%d") for b in occ.buckets]
    context = {
        "title": "Fleet",
        "occ": occ,
        "labels": labels,
        "level": _level,
        "pools": pools,
        "unpooled": UNPOOLED,
        "mig_rows": impact["mig"] if impact else [],
        "memory_rows": impact["memory"] if impact else [],
        "reserve": doc.isolation.inference if doc else None,
        **range_context(request, rc),
    }
    return render(request, "fleet/index.html", context)
