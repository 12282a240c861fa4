"""Fleet: occupancy heatmap per pool, per GPU of a pool, or per MIG instance of a GPU, over any past range;
pools and nodes with their MIG layouts; memory headroom against the inference reserve from stored peaks."""

from __future__ import annotations

from datetime import date
from urllib.parse import urlencode

from fastapi import APIRouter, Query, Request
from starlette.responses import Response

from app.auth.deps import Staff
from app.core.deps import SessionDep
from app.core.settings import get_settings
from app.http.templating import render, templates
from app.metrics.attribution import UNPOOLED
from app.metrics.cluster_hours import check_cluster
from app.metrics.live import LiveCache
from app.metrics.occupancy_read import HOURLY_MAX_DAYS, occupancy
from app.metrics.unit_read import pool_nodes, tenant_memory_peaks, unit_occupancy
from app.policy.service import active_document, data_version
from app.review.impact import capacity_impact
from app.web import heat
from app.web.date_range_picker import range_context, resolve
from app.web.doctor import doctor_href

router = APIRouter(include_in_schema=False)
# Per-unit aggregates of a long range scan every unit-hour of a pool: kept per (range, level, data version) for
# 30 s like the overview's, and concurrent requests for them wait for one computation instead of each running it.
UNIT_CACHE = LiveCache(ttl_s=30)
# A pool's GPUs are shown a page of nodes at a time: 32 nodes (256 GPUs of 8) x 30 days is ~7,700 cells, which
# a browser lays out at once, and each page scans only its nodes' unit-hours.
NODES_PER_PAGE = 32
# Fleet-wide capacity is not any one tenant's data: tenant members do not see this page (nav hides it too).


def _headers(buckets: list, hourly: bool) -> list[dict]:
    """Column headers: the day with its month (daily), the hour with the date at each midnight and the start (hourly)."""
    out = []
    for i, b in enumerate(buckets):
        if hourly:
            first = i == 0 or b.hour == 0
            out.append({"title": b.strftime("%Y-%m-%d %H:00"), "top": f"{b.hour:02d}h",
                        "bottom": b.strftime("%d %b") if first else ""})
        else:
            out.append({"title": b.strftime("%Y-%m-%d"), "top": b.strftime("%d"), "bottom": b.strftime("%b")})
    return out


def _link(rc, **params) -> str:
    query = {"start": rc.period.start.isoformat(), "end": rc.period.end.isoformat(), **params}
    return "/fleet?" + urlencode({k: v for k, v in query.items() if v})


def _pager(rc, pool: str, cluster: str | None, nodes: list[str], page: int) -> tuple[list[str], dict | None]:
    """The nodes of `page` (1-based, past the end shows the last page) and the pager's context (None: one page)."""
    pages = max(1, -(-len(nodes) // NODES_PER_PAGE))
    page = min(page, pages)
    shown = nodes[(page - 1) * NODES_PER_PAGE:page * NODES_PER_PAGE]
    if pages == 1:
        return shown, None
    link = lambda n: _link(rc, pool=pool, cluster=cluster, page=n if n > 1 else None)  # noqa: E731
    return shown, {"page": page, "pages": pages, "nodes": len(nodes), "first": shown[0], "last": shown[-1],
                   "prev": link(page - 1) if page > 1 else None, "next": link(page + 1) if page < pages else None}


def _heatmap(session, rc, level: str, pool: str | None, gpu: str | None, cluster: str | None, several: bool,
             page: int = 1) -> str:
    """The heatmap section's HTML (a long range of a large pool is ~15,000 cells: rendered once, then cached)."""
    def where(p: str) -> str:
        return f" · {', '.join(occ.clusters.get(p, []))}" if several and not cluster else ""

    pager = None
    if level == "fleet":
        occ = occupancy(session=session, period=rc.period, cluster=cluster)
        rows = [{"key": p, "label": p, "href": _link(rc, pool=p, cluster=cluster),
                 "note": f"{occ.gpus.get(p, '?')} GPUs" + (" · unpriced" if p == UNPOOLED else "") + where(p)}
                for p in occ.pools]
    else:
        nodes = None
        if level == "pool":
            nodes, pager = _pager(rc, pool, cluster, pool_nodes(session=session, period=rc.period, pool=pool,
                                                                cluster=cluster), page)
        occ = unit_occupancy(session=session, period=rc.period, pool=pool, gpu=gpu if level == "gpu" else None,
                             cluster=cluster, nodes=nodes)
        rows = [{"key": r.key, "label": r.label, "note": ", ".join(r.tenants) or "no holder",
                 "href": _link(rc, pool=pool, gpu=r.key, cluster=cluster) if level == "pool" else None} for r in occ.rows]
    context = {
        "level": level, "pool_name": pool, "gpu_uuid": gpu, "occ": occ, "rows": rows, "buckets": occ.buckets,
        "hourly": occ.hourly, "cells": occ.cells, "totals": occ.totals, "headers": _headers(occ.buckets, occ.hourly),
        "cell_style": heat.cell_style, "legend_gradient": heat.legend_gradient(), "legend_ticks": heat.LEGEND_TICKS,
        "fleet_href": _link(rc, cluster=cluster), "pool_href": _link(rc, pool=pool, cluster=cluster) if pool else None,
        "unpooled": UNPOOLED, "pager": pager,
    }
    return templates.env.get_template("fleet/_heatmap.html").render(context)


@router.get("/fleet")
def fleet(request: Request, session: SessionDep, user: Staff, start: date | None = None, end: date | None = None,
          pool: str | None = None, gpu: str | None = None, cluster: str | None = None,
          page: int = Query(1, ge=1, le=100_000)) -> Response:
    rc = resolve(start, end)
    cluster = check_cluster(cluster)
    names = get_settings().cluster_names()
    several = len(names) > 1
    level = "gpu" if pool and gpu else "pool" if pool else "fleet"
    version = data_version(session=session, at=rc.now)
    page = page if level == "pool" else 1
    key = ("heatmap", rc.period.start, rc.period.end, rc.period.tz.key, level, pool, gpu, cluster, page, version)
    heatmap_html = UNIT_CACHE.get(key, lambda: _heatmap(session, rc, level, pool, gpu, cluster, several, page))
    doc = active_document(session=session)
    pools = []
    if doc is not None:
        for p in doc.pools:
            if cluster is not None and p.cluster != cluster:
                continue
            nodes = [{"name": n, "mig": doc.isolation.mig.get(n)} for n in p.nodes]
            pools.append({"pool": p, "nodes": nodes, "gpus": len(p.nodes) * p.gpus_per_node,
                          "mig_nodes": sum(1 for n in nodes if n["mig"])})
    peaks = UNIT_CACHE.get(("peaks", rc.now.replace(minute=0, second=0, microsecond=0), version),
                           lambda: tenant_memory_peaks(session=session, until=rc.now))
    impact = capacity_impact(None, doc, measured_peaks=peaks) if doc is not None else None
    context = {
        "title": "Fleet",
        "level": level,
        "pool_name": pool,
        "hourly": (rc.period.end - rc.period.start).days + 1 <= HOURLY_MAX_DAYS,
        "heatmap_html": heatmap_html,
        "pools": pools,
        "mig_rows": impact["mig"] if impact else [],
        "memory_rows": impact["memory"] if impact else [],
        "reserve": doc.isolation.inference if doc else None,
        "cluster": cluster, "clusters": names if several else [], "doctor_href": doctor_href(user, cluster),
        "cluster_links": [{"name": c or "All", "href": _link(rc, cluster=c), "current": (c or None) == cluster}
                          for c in ["", *names]] if several else [],
        **range_context(request, rc, keep={"pool": pool or "", "gpu": gpu or "", "cluster": cluster or ""}),
    }
    return render(request, "fleet/index.html", context)
