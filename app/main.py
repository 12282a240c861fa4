"""The FastAPI application: routers from each domain, one error handler for business errors."""

from __future__ import annotations

from fastapi import Depends, FastAPI
from fastapi.staticfiles import StaticFiles

from app.api import allocation as api_allocation
from app.api import billing as api_billing
from app.api import budgets as api_budgets
from app.api import directory as api_directory
from app.api import mail as api_mail
from app.api import policy as api_policy
from app.api import review as api_review
from app.api import system as api_system
from app.api import usage as api_usage
from app.api import webhooks as api_webhooks
from app.auth import routes as auth_routes
from app.auth.sessions import CsrfCookieMiddleware, csrf_context
from app.core.resources import resource_path
from app.http import problems, templating
from app.http.limits import InputLimitsMiddleware
from app.notify.mail_contacts import tenant_names
from app.web import allocation as web_allocation
from app.web import billing as web_billing
from app.web import budgets as web_budgets
from app.web import doctor as web_doctor
from app.web import fleet as web_fleet
from app.web import fleet_live as web_fleet_live
from app.web import mail as web_mail
from app.web import overview as web_overview
from app.web import overview_panels as web_overview_panels
from app.web import policy as web_policy
from app.web import review as web_review
from app.web import sla as web_sla
from app.web import tenants as web_tenants
from app.web import webhooks as web_webhooks
from app.web.navigation import navigation_context, page_session

# Pages lend their session to the navigation (the review badge) while they render.
PAGES = [Depends(page_session, scope="function")]

DESCRIPTION = """Chargeback for a shared GPU cluster: usage, invoices and exports for finance integrations.

Authenticate with `Authorization: Bearer <token>` (create one under Admin → API tokens, or with
`chargeback token create`). Every error is RFC 9457 `application/problem+json`.
"""


def create_app() -> FastAPI:
    app = FastAPI(
        title="GPU chargeback portal",
        version="1",
        description=DESCRIPTION,
        openapi_url="/api/v1/openapi.json",
        docs_url=None,  # served by app.api.system from vendored Swagger UI (no CDN)
        redoc_url=None,
        swagger_ui_oauth2_redirect_url=None,
    )
    problems.install(app)
    app.state.tenant_names = tenant_names  # single sign-on refuses tenant groups naming other tenants
    problems.problem_openapi(app)
    templating.add_context_processor(csrf_context)
    templating.add_context_processor(navigation_context)
    app.add_middleware(CsrfCookieMiddleware)
    app.add_middleware(InputLimitsMiddleware)  # outside routing and CSRF: before authentication and parsing
    app.add_middleware(api_system.SecurityHeadersMiddleware)
    app.add_middleware(api_system.RequestMetricsMiddleware)
    app.mount("/static", StaticFiles(directory=resource_path("static")), name="static")
    app.include_router(api_system.router)
    app.include_router(api_billing.router, prefix="/api/v1")
    app.include_router(api_usage.router, prefix="/api/v1")
    app.include_router(api_allocation.router, prefix="/api/v1")
    app.include_router(api_policy.router, prefix="/api/v1")
    app.include_router(api_review.router, prefix="/api/v1")
    app.include_router(api_directory.router, prefix="/api/v1")
    app.include_router(api_mail.router, prefix="/api/v1")
    app.include_router(api_budgets.router, prefix="/api/v1")
    app.include_router(api_webhooks.router, prefix="/api/v1")
    api_webhooks.document_events(app)  # the signed requests receivers get: the OpenAPI `webhooks` section
    app.include_router(auth_routes.api, prefix="/api/v1")
    app.include_router(auth_routes.web, dependencies=PAGES)
    app.include_router(web_overview.router, dependencies=PAGES)
    app.include_router(web_policy.router, dependencies=PAGES)
    app.include_router(web_review.router, dependencies=PAGES)
    app.include_router(web_billing.report_router, dependencies=PAGES)  # before web_billing.router: see there
    app.include_router(web_billing.router, dependencies=PAGES)
    app.include_router(web_tenants.router, dependencies=PAGES)
    app.include_router(web_allocation.router, dependencies=PAGES)
    app.include_router(web_fleet.router, dependencies=PAGES)
    app.include_router(web_fleet_live.router, dependencies=PAGES)
    app.include_router(web_sla.router, dependencies=PAGES)
    app.include_router(web_overview_panels.router, dependencies=PAGES)
    app.include_router(web_doctor.router, dependencies=PAGES)
    app.include_router(web_mail.router, dependencies=PAGES)
    app.include_router(web_budgets.router, dependencies=PAGES)
    app.include_router(web_webhooks.router, dependencies=PAGES)
    return app


app = create_app()
