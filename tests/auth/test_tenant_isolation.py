"""A member of one tenant never reads another tenant's data, by any route, HTML or JSON.

Routes are taken from the app's route table, so billing and usage routes added later are covered
without editing this file: every GET route with a `{tenant}` parameter must answer 404 for a
foreign tenant (the same answer as an unknown one), and no GET route may mention a foreign tenant.
A `{tenant}` route the authorization matrix closes to members (billing contacts: admins and finance)
must answer them 403 for their own tenant, a foreign one and an unknown one alike.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from urllib.parse import quote

import pytest
from sqlmodel import select

from app.billing import periods
from app.billing.models import ChargeLineRecord
from tests.auth.test_matrix import RULES
from tests.support.billing import add_hour, store_policy
from tests.support.routes import app_routes, make_user, sign_in

pytestmark = pytest.mark.anyio
OWN, FOREIGN = "search", ("vision", "etl")
MONTH = "2026-10"
# Query strings a route needs to return data for the seeded month (routes not listed need none).
QUERY = {
    "/": "start=2026-10-01&end=2026-10-31",
    "/api/v1/usage": "start=2026-10-01T00:00:00Z&end=2026-11-01T00:00:00Z&group_by=tenant",
    "/billing/{period}/{tenant}/days": "line={line}",  # the tenant's own first invoice line
}
DRILLABLE = ("reserved_fee", "inference_overage", "usage_busy", "usage_dark")  # lines with a per-day drill-down
LINES: dict[str, str] = {}  # tenant -> a line id of its invoice in the rated month (set by `rated_month`)
SKIP = {"/api/v1/openapi.json", "/api/v1/docs", "/login", "/metrics", "/healthz"}


@pytest.fixture
def rated_month(session):
    version = store_policy(session)
    add_hour(session, hour=datetime(2026, 10, 1, tzinfo=UTC), version=version.id)
    periods.rate(session=session, period=MONTH, actor="test")
    session.commit()
    for tenant in (OWN, *FOREIGN):
        LINES[tenant] = session.exec(select(ChargeLineRecord.line_id).where(ChargeLineRecord.account == tenant,
                                                                               ChargeLineRecord.kind.in_(DRILLABLE))
                                     .order_by(ChargeLineRecord.line_id)).first() or ""


def get_routes() -> list[str]:
    return sorted({path for method, path in app_routes() if method == "GET" and path not in SKIP})


def _url(path: str, tenant: str) -> str:
    filled = re.sub(r"\{(\w+)(:\w+)?\}", lambda m: {"tenant": tenant, "period": MONTH}.get(m.group(1), "1"), path)
    return filled + ("?" + QUERY[path].replace("{line}", quote(LINES.get(tenant, ""), safe="")) if path in QUERY else "")


def _mentions_foreign(text: str) -> list[str]:
    return [t for t in FOREIGN if re.search(rf"\b{t}\b", text)]


async def test_foreign_tenant_is_404_by_every_tenant_route(client, session, rated_month):
    tenant_routes = [p for p in get_routes() if "{tenant}" in p]
    assert tenant_routes, "expected invoice routes with a {tenant} parameter"
    staff = {role: make_user(session, f"staff-{role}", role) for role in ("viewer", "finance")}
    member = make_user(session, "member", "tenant", tenants=[OWN])
    failures = []
    for path in tenant_routes:
        allowed = RULES[("GET", path)]
        sign_in(client, session, staff["viewer" if "viewer" in allowed else "finance"])
        staff_view = await client.get(_url(path, FOREIGN[0]))
        if staff_view.status_code != 200:
            failures.append(f"{path}: staff should read {FOREIGN[0]}, got {staff_view.status_code}")
        sign_in(client, session, member)
        closed = "tenant" not in allowed  # then one answer for every tenant: nothing to tell them apart by
        own = await client.get(_url(path, OWN))
        if own.status_code != (403 if closed else 200):
            failures.append(f"{path}: member on its own tenant should get {403 if closed else 200}, got {own.status_code}")
        for foreign in (*FOREIGN, "no-such-tenant"):
            response = await client.get(_url(path, foreign))
            if response.status_code != (403 if closed else 404):
                failures.append(f"{path} as member for {foreign}: expected {403 if closed else 404}, "
                                f"got {response.status_code}")
    assert not failures, "\n".join(failures)


async def test_no_route_mentions_a_foreign_tenant(client, session, rated_month):
    member = make_user(session, "member", "tenant", tenants=[OWN])
    failures, readable = [], 0
    for path in get_routes():
        sign_in(client, session, member)
        response = await client.get(_url(path, OWN))
        if response.status_code == 200:
            readable += 1
            leaked = _mentions_foreign(response.text)
            if leaked:
                failures.append(f"{path}: mentions {', '.join(leaked)}")
        elif response.status_code not in (403, 404):
            failures.append(f"{path}: unexpected {response.status_code}")
    assert readable >= 3  # the overview, the invoice list and the own invoice at least
    assert not failures, "\n".join(failures)


async def test_same_routes_do_show_other_tenants_to_staff(client, session, rated_month):
    """The check above can fail: staff reading the same routes do see the other tenants."""
    sign_in(client, session, make_user(session, "staff", "viewer"))
    page = await client.get(_url("/", OWN))
    assert _mentions_foreign(page.text) == list(FOREIGN)
