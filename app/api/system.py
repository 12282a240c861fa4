"""Probes and the portal's own Prometheus metrics: /healthz (liveness), /readyz (readiness), /metrics, and the request-metrics middleware."""

from __future__ import annotations

import logging
import os
import time

from fastapi import APIRouter
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector
from pydantic import BaseModel
from starlette.datastructures import MutableHeaders
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.core.db import ping
from app.core.deps import SessionDep
from app.core.errors import Unavailable
from app.core.migrate import current_revision, revision_problem
from app.core.timeutil import utcnow
from app.metrics.ingestion_health import ingestion_health
from app.policy.render_alerts import INGEST_GAP_METRIC, INGEST_LAG_METRIC

log = logging.getLogger("app.system")
router = APIRouter(tags=["system"])

# A registry of our own: no process/platform collectors from other libraries, no duplicates when tests
# build several apps in one process. Under `chargeback serve --workers N` (PROMETHEUS_MULTIPROC_DIR set
# before any worker starts) each process writes its values to files there and a scrape, answered by
# whichever worker, sums the counters of all; the ingestion gauges are the most recent one set.
MULTIPROCESS_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"
REGISTRY = CollectorRegistry()
REQUESTS = Counter(
    "chargeback_http_requests", "HTTP requests served", ["method", "route", "status"], registry=REGISTRY
)
LATENCY = Histogram(
    "chargeback_http_request_duration_seconds", "HTTP request latency", ["method", "route"], registry=REGISTRY,
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)


def _gauge(name: str, documentation: str) -> Gauge:
    """A gauge set from the database when scraped: across serve processes, the value set last counts."""
    return Gauge(name, documentation, registry=REGISTRY, multiprocess_mode="mostrecent")


# Names shared with the rendered alert rules (app/policy/render_alerts.py), which read these gauges.
INGEST_LAG = _gauge(INGEST_LAG_METRIC, "Seconds between now and the end of the newest ingested hour")
GAP_HOURS = _gauge(INGEST_GAP_METRIC, "Hours Prometheus could not answer, awaiting retry")
INGESTED_HOURS = _gauge("chargeback_ingested_hours", "Hours ingested successfully")
DQ_FINDINGS = _gauge("chargeback_data_quality_findings", "Unit-hours whose reported use exceeded capacity (cut, not billed)")
DQ_CUT = _gauge("chargeback_data_quality_cut_gpu_seconds",
                "GPU-seconds cut at ingestion because a unit reported more than its capacity")
LAST_DURATION = _gauge("chargeback_ingest_last_duration_seconds", "Duration of the most recent hour's ingestion")
# The same per cluster (the unlabelled gauges above are the fleet's: an hour counts when every cluster has it,
# and the lag is the most behind cluster's).
CLUSTER_LAG = Gauge("chargeback_cluster_ingestion_lag_seconds", "Seconds between now and the end of the cluster's "
                    "newest ingested hour", ["cluster"], registry=REGISTRY, multiprocess_mode="mostrecent")
CLUSTER_GAPS = Gauge("chargeback_cluster_ingestion_gap_hours", "The cluster's hours its Prometheus could not answer, "
                     "awaiting retry", ["cluster"], registry=REGISTRY, multiprocess_mode="mostrecent")
CLUSTER_HOURS = Gauge("chargeback_cluster_ingested_hours", "The cluster's hours ingested successfully", ["cluster"],
                      registry=REGISTRY, multiprocess_mode="mostrecent")


SWAGGER = "/static/vendor/swagger-ui-5.35.0"


@router.get("/api/v1/docs", include_in_schema=False)
def api_docs() -> Response:
    """The API docs page (Swagger UI served from our own static files, no CDN)."""
    from fastapi.openapi.docs import get_swagger_ui_html

    return get_swagger_ui_html(
        openapi_url="/api/v1/openapi.json", title="GPU chargeback portal – API",
        swagger_js_url=f"{SWAGGER}/swagger-ui-bundle.js", swagger_css_url=f"{SWAGGER}/swagger-ui.css",
        swagger_favicon_url="data:,", swagger_ui_parameters={"persistAuthorization": False},
    )


class Health(BaseModel):
    status: str


@router.get("/healthz", response_model=Health)
def healthz(session: SessionDep) -> Health:
    """Liveness and readiness: the database answers."""
    try:
        ping(session)
    except Exception as exc:  # any driver error means "not ready"; the reason goes to the log only
        log.warning("health check: database unavailable: %s", type(exc).__name__)
        raise Unavailable("The database does not answer") from None
    return Health(status="ok")


class Ready(BaseModel):
    status: str
    schema_revision: str


@router.get("/readyz", response_model=Ready)
def readyz(session: SessionDep) -> Ready:
    """Readiness: the database answers and its schema is the one this version needs (503 naming the command
    otherwise, e.g. while `chargeback db upgrade` has not run). /healthz is liveness."""
    try:
        current = current_revision(session.connection())
    except Exception as exc:  # any driver error means "not ready"; the reason goes to the log only
        log.warning("readiness check: database unavailable: %s", type(exc).__name__)
        raise Unavailable("The database does not answer") from None
    problem = revision_problem(current, "CHARGEBACK_DATABASE_URL")
    if problem is not None:
        raise Unavailable(problem[0].upper() + problem[1:])
    return Ready(status="ready", schema_revision=current)


@router.get("/metrics", response_class=Response, responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}})
def metrics(session: SessionDep) -> Response:
    """The portal's own metrics in Prometheus text format (ingestion state is read when scraped)."""
    health = ingestion_health(session=session, now=utcnow())
    # No ingested hour yet: report NaN rather than a misleading zero lag.
    INGEST_LAG.set(float("nan") if health.lag_seconds is None else health.lag_seconds)
    GAP_HOURS.set(health.gap_count)
    INGESTED_HOURS.set(health.ok_count)
    LAST_DURATION.set(float("nan") if health.last_duration_s is None else health.last_duration_s)
    DQ_FINDINGS.set(health.quality.count)
    DQ_CUT.set(float(health.quality.gpu_seconds_cut))
    for gauge in (CLUSTER_LAG, CLUSTER_GAPS, CLUSTER_HOURS):
        gauge.clear()  # a cluster no longer configured leaves no series behind
    for part in health.clusters or [health]:
        name = part.cluster or ""
        CLUSTER_LAG.labels(cluster=name).set(float("nan") if part.lag_seconds is None else part.lag_seconds)
        CLUSTER_GAPS.labels(cluster=name).set(part.gap_count)
        CLUSTER_HOURS.labels(cluster=name).set(part.ok_count)
    return Response(generate_latest(_exposed()), media_type=CONTENT_TYPE_LATEST)


def _exposed() -> CollectorRegistry:
    """Every serve process's values when several share the port, else this process's registry."""
    path = os.environ.get(MULTIPROCESS_DIR_ENV)
    if not path:
        return REGISTRY
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=path)
    return registry


def _route_template(scope: Scope) -> str:
    """The matched route's path template with its router prefix (e.g. /api/v1/tokens/{token_id})."""
    # FastAPI >= 0.16x keeps the prefixed path on an "effective route context"; scope["route"] lacks the prefix.
    from fastapi import routing

    finder = getattr(routing, "_get_scope_effective_route_context", None)
    context = finder(scope) if finder else None
    path = getattr(context, "path", None) or getattr(scope.get("route"), "path", None)
    if path:
        return path
    return "/static" if scope["path"].startswith("/static/") else "unmatched"


class RequestMetricsMiddleware:
    """Count and time every HTTP request by route template (not raw path: bounded label values)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            template = _route_template(scope)
            method = scope["method"]
            REQUESTS.labels(method, template, str(status)).inc()
            LATENCY.labels(method, template).observe(time.perf_counter() - start)


# Pages load scripts only from /static (no inline scripts anywhere); inline style attributes are allowed.
PAGE_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'self'; form-action 'self'; frame-ancestors 'none'"
)


NO_STORE_PREFIXES = ("/billing", "/api/v1/periods")


class SecurityHeadersMiddleware:
    """nosniff, no framing, same-origin referrers on every response; a strict CSP on pages; no-store on billing."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        # The Swagger UI page boots with an inline script; JSON needs no CSP.
        page = not scope["path"].startswith("/api/")
        # Invoices, statements and exports are money and names: no copy on shared disks or in proxies.
        billing = scope["path"].startswith(NO_STORE_PREFIXES)

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                headers.setdefault("X-Content-Type-Options", "nosniff")
                headers.setdefault("X-Frame-Options", "DENY")
                headers.setdefault("Referrer-Policy", "same-origin")
                if page:
                    headers.setdefault("Content-Security-Policy", PAGE_CSP)
                if billing:
                    headers["Cache-Control"] = "no-store"
            await send(message)

        await self.app(scope, receive, send_with_headers)
