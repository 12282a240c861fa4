"""Admin page: the `chargeback doctor` report for each configured cluster's Prometheus (same checks as the CLI)."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Depends, Request
from starlette.responses import Response

from app.auth.deps import Admin, Principal
from app.core.clusters import ClusterConfig
from app.core.deps import SessionDep
from app.core.errors import NotFound
from app.core.settings import get_settings
from app.core.timeutil import epoch, utcnow
from app.http.templating import render
from app.metrics.sources import prometheus_clusters
from app.policy.service import active_document

router = APIRouter(include_in_schema=False)


def doctor_target(cluster: str | None = None) -> ClusterConfig | str | None:
    """A configured cluster's Prometheus (the one named, else the first read from a URL); never a URL from the request
    (no server-side request forgery). None: every cluster is the simulator."""
    settings = get_settings()
    if cluster is not None:
        found = settings.cluster(cluster)
        if found is None or not found.url:
            raise NotFound(f"no cluster '{cluster}' read from Prometheus is configured")
        return found
    return next(iter(prometheus_clusters(settings)), None)


def doctor_href(principal: Principal | None, cluster: str | None = None) -> str | None:
    """The doctor's page for a link from another page: admins only (as the page itself), on `cluster` when that
    cluster is read from Prometheus (else the page's first such cluster, or its steps to configure one)."""
    if principal is None or "admin" not in principal.roles:
        return None
    config = get_settings().cluster(cluster) if cluster else None
    return f"/admin/doctor?cluster={quote(config.name)}" if config is not None and config.url else "/admin/doctor"


@router.get("/admin/doctor")
def doctor_page(request: Request, session: SessionDep, admin: Admin,
                target: Annotated[ClusterConfig | str | None, Depends(doctor_target)]) -> Response:
    from app.metrics import doctor
    from app.metrics.prometheus_api import PromReader

    report = None
    policy = active_document(session=session)
    if target:
        config = target if isinstance(target, ClusterConfig) else None
        reader = PromReader(config.url if config else target, timeout_s=get_settings().prometheus_timeout_s, access=config)
        scoped = policy.for_cluster(config.name) if config and policy else policy
        report = doctor.run(reader, at=epoch(utcnow()), policy=scoped)
        report.cluster = config.name if config else None
    order = {"error": 0, "warning": 1, "info": 2}
    findings = sorted(report.findings, key=lambda f: order[f.severity]) if report else []
    clusters = [c.name for c in prometheus_clusters(get_settings())]
    return render(request, "admin/doctor.html", {"title": "Doctor", "report": report, "findings": findings,
                                                 "clusters": clusters if len(clusters) > 1 else [],
                                                 "spans": doctor.spans, "detail_lines": doctor.detail_lines})
