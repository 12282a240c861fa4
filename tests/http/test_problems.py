"""One error handler: problem+json for /api, a readable page for browsers, a fragment for htmx; no internals on 500."""

import logging

import pytest
from fastapi import APIRouter, Query

from app.core.errors import Conflict, FieldError, Invalid
from app.http.problems import PROBLEM_JSON
from tests.support.routes import asgi_client

pytestmark = pytest.mark.anyio

probe = APIRouter()


@probe.get("/api/v1/_probe/items")
def items(limit: int = Query(50, ge=1, le=500)) -> dict:
    return {"limit": limit}


@probe.get("/api/v1/_probe/conflict")
def conflict() -> dict:
    raise Conflict("Period 2026-10 is already finalized")


@probe.get("/api/v1/_probe/invalid")
def invalid() -> dict:
    raise Invalid("Bad document", [FieldError("pricing.gpus.0.price", "must be positive")])


@probe.get("/api/v1/_probe/crash")
def crash() -> dict:
    raise RuntimeError("secret internals: password=hunter2")


@probe.get("/_probe/page-crash")
def page_crash() -> dict:
    raise RuntimeError("secret internals")


@probe.get("/_probe/page-invalid")
def page_invalid() -> dict:
    raise Invalid("The date range is not valid", [FieldError("query.start", "must be on or before the end date")])


@pytest.fixture
async def probe_client(app):
    app.include_router(probe)
    async with asgi_client(app) as c:
        yield c


async def test_app_error_is_problem_json(probe_client):
    response = await probe_client.get("/api/v1/_probe/conflict")
    assert response.status_code == 409
    assert response.headers["content-type"] == PROBLEM_JSON
    assert response.json() == {"type": "about:blank", "title": "Conflict", "status": 409,
                               "detail": "Period 2026-10 is already finalized", "instance": "/api/v1/_probe/conflict"}
    invalid = (await probe_client.get("/api/v1/_probe/invalid")).json()
    assert invalid["status"] == 422
    assert invalid["errors"] == [{"path": "pricing.gpus.0.price", "message": "must be positive", "severity": "error"}]


@pytest.mark.parametrize("query,message", [("limit=0", "greater than or equal to 1"), ("limit=abc", "valid integer"),
                                           ("limit=501", "less than or equal to 500")])
async def test_validation_error_names_the_field(probe_client, query, message):
    response = await probe_client.get(f"/api/v1/_probe/items?{query}")
    assert response.status_code == 422
    assert response.headers["content-type"] == PROBLEM_JSON
    body = response.json()
    assert body["errors"][0]["path"] == "query.limit"
    assert message in body["errors"][0]["message"]
    assert body["detail"].startswith("query.limit: ")


async def test_unknown_route_and_wrong_method(probe_client):
    missing = await probe_client.get("/api/v1/nothing-here")
    assert missing.status_code == 404 and missing.headers["content-type"] == PROBLEM_JSON
    assert missing.json()["detail"] == "Nothing is at /api/v1/nothing-here"
    wrong = await probe_client.delete("/api/v1/_probe/items")
    assert wrong.status_code == 405 and wrong.json()["title"] == "Method Not Allowed"


async def test_unexpected_error_is_500_without_internals_and_logged(probe_client, caplog):
    caplog.set_level(logging.ERROR, logger="app.errors")
    response = await probe_client.get("/api/v1/_probe/crash")
    assert response.status_code == 500
    assert response.headers["content-type"] == PROBLEM_JSON
    assert "internals" not in response.text and "RuntimeError" not in response.text
    assert response.json()["title"] == "Internal server error"
    assert "unhandled error on GET /api/v1/_probe/crash" in caplog.text
    assert "RuntimeError" in caplog.text  # the traceback is for operators
    page = await probe_client.get("/_probe/page-crash")
    assert page.status_code == 500 and page.headers["content-type"].startswith("text/html")
    assert "Something went wrong" in page.text and "internals" not in page.text


async def test_browser_gets_a_page_and_htmx_a_fragment(probe_client):
    page = await probe_client.get("/_probe/page-invalid")
    assert page.status_code == 422
    assert page.headers["content-type"].startswith("text/html")
    assert "<html" in page.text and "query.start" in page.text and "must be on or before" in page.text
    fragment = await probe_client.get("/_probe/page-invalid", headers={"HX-Request": "true"})
    assert fragment.status_code == 422
    assert "<html" not in fragment.text and 'role="alert"' in fragment.text and "query.start" in fragment.text
    assert fragment.headers["HX-Retarget"] == "#messages"
    missing = await probe_client.get("/no-such-page")
    assert missing.status_code == 404 and "<html" in missing.text and "Nothing is at /no-such-page" in missing.text


async def test_json_accept_outside_api_gets_problem_json(probe_client):
    response = await probe_client.get("/_probe/page-invalid", headers={"Accept": "application/json"})
    assert response.headers["content-type"] == PROBLEM_JSON
    assert response.json()["errors"][0]["path"] == "query.start"
