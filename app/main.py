"""The FastAPI application: routers from each domain, one error handler for business errors."""

from __future__ import annotations

from fastapi import FastAPI

from app.core import problems

from app.api import billing as api_billing
from app.api import system as api_system
from app.api import usage as api_usage
from app.web import billing as web_billing
from app.web import overview as web_overview


def create_app() -> FastAPI:
    app = FastAPI(title="GPU chargeback portal", openapi_url="/api/v1/openapi.json", docs_url="/api/v1/docs")
    problems.install(app)
    app.include_router(api_system.router)
    app.include_router(api_billing.router, prefix="/api/v1")
    app.include_router(api_usage.router, prefix="/api/v1")
    app.include_router(web_overview.router)
    app.include_router(web_billing.router)
    return app


app = create_app()
