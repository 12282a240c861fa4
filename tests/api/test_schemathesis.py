"""Schemathesis against /api/v1/openapi.json on a seeded PostgreSQL database, as a finance token.

Every GET operation (and the side-effect-free POST /policy/validate) gets a bounded number of
generated requests: no 5xx, and every response must match the status, content type, headers and
schema the OpenAPI document promises.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from app.auth import service
from app.billing import periods
from app.core.audit import record
from app.core.db import make_engine, unit_of_work
from app.core.deps import get_session
from app.main import create_app
from tests.billing.builders import fill_month, store_policy
from tests.support.databases import drop_postgres_database, migrated, new_postgres_database

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_headers_conformance,
          response_schema_conformance]
TOKEN: dict[str, str] = {}


ENGINE: dict = {}
APP = create_app()


def _session():
    with unit_of_work(ENGINE["engine"]) as session:
        yield session


APP.dependency_overrides[get_session] = _session
# Loading the document needs no database; the module fixture below seeds one before any call.
schema = schemathesis.openapi.from_asgi("/api/v1/openapi.json", APP).include(
    func=lambda ctx: ctx.operation.method.upper() == "GET" or ctx.operation.path == "/api/v1/policy/validate"
)


@pytest.fixture(scope="module", autouse=True)
def seeded_database() -> Iterator[None]:
    """A fresh migrated PostgreSQL database holding a rated October 2026, audit entries and a finance token."""
    url = migrated(new_postgres_database("cbschema"))
    engine = make_engine(url)
    with unit_of_work(engine) as session:
        version = store_policy(session)
        fill_month(session, "2026-10", version.id)
        periods.rate(session=session, period="2026-10", actor="seed")
        record(session=session, actor="seed", action="invoice.view", entity="invoice", entity_id="vision",
               tenant="vision")
        user = service.create_user(session=session, name="fin-schema", role="finance", password=None, tenants=[],
                                   actor="seed")
        _, TOKEN["raw"] = service.create_token(session=session, user=user, scopes="read",
                                               lifetime=timedelta(days=1), actor="seed")
    ENGINE["engine"] = engine
    yield
    engine.dispose()
    drop_postgres_database(url)


@schema.parametrize()
@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_api_conforms_to_its_schema(case):
    case.call_and_validate(headers={"Authorization": f"Bearer {TOKEN['raw']}"}, checks=CHECKS)


@pytest.mark.parametrize(("path", "params", "query"), [
    ("/api/v1/periods/{period}/invoices", {"period": "2026-10"}, {"limit": 2}),
    ("/api/v1/periods/{period}/invoices/{tenant}", {"period": "2026-10", "tenant": "vision"}, None),
    ("/api/v1/periods/{period}/statement", {"period": "2026-10"}, None),
    ("/api/v1/tenants/{name}", {"name": "vision"}, None),
    ("/api/v1/audit", {}, {"limit": 1}),
])
def test_seeded_answers_conform(path, params, query):
    """Generated inputs mostly miss the seeded data; these cases hit it, so 200 bodies are checked too."""
    case = schema.make_case(operation=schema[path]["GET"], path_parameters=params or None, query=query)
    response = case.call_and_validate(headers={"Authorization": f"Bearer {TOKEN['raw']}"}, checks=CHECKS)
    assert response.status_code == 200, response.text
