"""The period page with a cluster read from Prometheus: the "Source reconciled" item blocks Finalize until the hours are
checked, and the close form takes the acceptance and its reason (issue 24). The page never asks the source itself."""

from __future__ import annotations

import re

import pytest

from app.core import settings as settings_module
from app.core.db import unit_of_work
from tests.support.billing import fill_month, store_policy
from tests.support.prometheus import free_port

HTML = {"accept": "text/html"}


@pytest.fixture
def prometheus_cluster(monkeypatch):
    monkeypatch.setenv("CHARGEBACK_PROMETHEUS_URL", f"http://127.0.0.1:{free_port()}")
    settings_module.get_settings.cache_clear()
    yield
    settings_module.get_settings.cache_clear()


def test_an_unchecked_month_needs_the_acceptance_and_shows_it_once_closed(api, fresh_engine, prometheus_cluster):
    with unit_of_work(fresh_engine) as s:
        v = store_policy(s)
        fill_month(s, "2026-10", v.id)
    api.post("/billing/2026-10/rate", headers=HTML, data={})
    checklist = api.get("/api/v1/periods/2026-10/checklist").json()
    assert checklist["needs"] == ["accept_unreconciled"] and checklist["items"][1]["key"] == "reconcile"
    page = api.get("/billing/2026-10", headers=HTML).text
    assert re.search(r'data-key="reconcile">\s*<span class="badge badge-error">blocks close</span>\s*'
                     r'<strong>Source reconciled</strong>: Of 744 hours checked against Prometheus', page)
    assert "744 not checked yet" in page and 'name="accept_unreconciled"' in page and 'name="accept_gaps"' not in page

    refused = api.post("/billing/2026-10/close", headers=HTML, data={"reason": "meter swap"})
    assert refused.status_code == 409 and 'id="accept_unreconciled-error"' in refused.text
    confirm = api.post("/billing/2026-10/close", headers=HTML, data={"accept_unreconciled": "true", "reason": "meter swap"})
    assert confirm.status_code == 200
    assert "You accept the hours that do not reconcile with the source,\n    because: <q>meter swap</q>" in confirm.text
    assert '<input type="hidden" name="accept_unreconciled" value="true">' in confirm.text
    closed = api.post("/billing/2026-10/close", headers=HTML,
                      data={"accept_unreconciled": "true", "reason": "meter swap", "confirmed": "true"})
    assert closed.status_code == 303
    page = api.get(closed.headers["location"], headers=HTML).text
    assert "Closed with hours that do not reconcile with the source accepted: meter swap" in page
    (summary,) = [p for p in api.get("/api/v1/periods").json()["items"] if p["period"] == "2026-10"]
    assert summary["accept_unreconciled_reason"] == "meter swap"
