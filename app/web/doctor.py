"""Admin page: the `chargeback doctor` report for the configured Prometheus (same checks as the CLI)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from starlette.responses import Response

from app.auth.deps import Admin
from app.core.deps import SessionDep
from app.core.settings import get_settings
from app.core.timeutil import epoch, utcnow
from app.http.templating import render
from app.policy.service import active_document

router = APIRouter(include_in_schema=False)


def doctor_target() -> str | None:
    """The Prometheus the portal ingests from; never a URL from the request (no server-side request forgery)."""
    return get_settings().prometheus_url


@router.get("/admin/doctor")
def doctor_page(request: Request, session: SessionDep, admin: Admin,
                target: Annotated[str | None, Depends(doctor_target)]) -> Response:
    from app.metrics import doctor
    from app.metrics.prometheus_api import PromReader

    report = None
    if target:
        reader = PromReader(target, timeout_s=get_settings().prometheus_timeout_s)
        report = doctor.run(reader, at=epoch(utcnow()), policy=active_document(session=session))
    order = {"error": 0, "warning": 1, "info": 2}
    findings = sorted(report.findings, key=lambda f: order[f.severity]) if report else []
    return render(request, "admin/doctor.html", {"title": "Doctor", "report": report, "findings": findings})
