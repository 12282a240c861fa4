"""The doctor as a page, against a real Prometheus scraping dcgm-exporter and vLLM fixtures: findings in readable
text (no Python dicts, JSON or backticks), each with a next step; with no Prometheus, what to do to have one to
check; a link to it from Fleet and Live fleet for the roles that may open it."""

from __future__ import annotations

import re

from app.auth.deps import Principal
from app.core.db import unit_of_work
from app.web.doctor import doctor_target
from tests.metrics.test_doctor import OCC, SLA, VLLM_TARGET, uuid
from tests.support.billing import policy_doc, store_policy
from tests.support.doctor import A100, RTX4090, Unit, dcgm_exposition, scrape_job, scraping, serving, vllm_exposition

HTML = {"accept": "text/html"}
ADMIN = Principal(name="ada", roles=frozenset({"admin"}), user_id=9)
# Python or JSON structures as a detail would print them: {'a': 1}, {"a": 1}, ['a'], ("a",)
STRUCTURE = re.compile(r"""\{['"]|['"]\}|\[['"]|['"]\]|\(['"]\w""")


def _findings(page: str) -> dict[str, str]:
    body = page[page.index('<table class="doctor">'):page.index("</table>")]
    rows = re.findall(r'<tr id="finding-([\w-]+)">(.*?)</tr>', body, re.S)
    return {code: row for code, row in rows}


def _text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def test_findings_read_as_text_each_with_a_next_step(api, fresh_engine, tmp_path):
    with unit_of_work(fresh_engine) as s:
        store_policy(s, policy_doc(sla=[{**SLA, "p99_ms": 250}]))
    api.as_(ADMIN)
    # A MIG GPU (profiles were a dict), a GeForce without PROF metrics (models were a dict), both spellings of
    # the host label (counts were a dict), an unclaimed namespace and a red line off the buckets.
    a100 = [Unit(0, uuid("p", 0), A100, "gpu-a100-01", "notebook-2", "scratch"),
            Unit(1, uuid("p", 1), A100, "gpu-a100-01", "chat-1", "search-prod", mig=("3g.40gb", "1")),
            Unit(1, uuid("p", 1), A100, "gpu-a100-01", mig=("3g.40gb", "2"))]
    rtx = [Unit(0, uuid("q", 0), RTX4090, "gpu-4090-01", "etl-2", "data-prep", host_label="Hostname")]
    with serving({"/a100": dcgm_exposition(a100), "/rtx": dcgm_exposition(rtx), "/vllm": vllm_exposition()}) as target:
        jobs = [scrape_job("a100", target, "/a100", honor_labels=False), scrape_job("rtx", target, "/rtx", honor_labels=False),
                scrape_job("vllm", target, "/vllm", honor_labels=False, labels=VLLM_TARGET)]
        with scraping(tmp_path, jobs, expect=OCC, series=5) as prom:
            api.app.dependency_overrides[doctor_target] = lambda: prom.url
            page = api.get("/admin/doctor", headers=HTML)
    assert page.status_code == 200, page.text
    findings = _findings(page.text)
    assert {"mig", "no-prof", "host-label", "unclaimed-namespaces", "red-line-unresolvable", "label-style"} <= set(findings)
    for code, row in findings.items():
        assert "`" not in row, (code, row)  # settings and commands as <code>, never backticks
        assert not STRUCTURE.search(_text(row)), (code, _text(row))
        step = re.search(r'<td class="text next-step"[^>]*>(.*?)</td>', row, re.S)
        assert step and _text(step.group(1)).strip() not in ("", "–", "-"), code
    assert "1 × 3g.40gb" in findings["mig"] or "2 × 3g.40gb" in findings["mig"]
    assert f"1 × {RTX4090}" in findings["no-prof"]
    assert re.search(r"\d × Hostname, \d × hostname|\d × hostname, \d × Hostname", findings["host-label"])
    # backticked names are code; the policy fix links to where it is made
    assert "<code>tenants[].namespaces</code>" in findings["unclaimed-namespaces"]
    assert 'href="/policy/changes/new"' in findings["unclaimed-namespaces"]
    assert 'href="/fleet/live"' in findings["mig"]
    # a detail that enumerates is a list
    assert '<ul class="finding-detail' in findings["red-line-unresolvable"]
    assert "chargeback doctor" in page.text and "--json" in page.text


def test_without_a_prometheus_the_page_says_what_to_do(api, fresh_engine):
    api.as_(ADMIN)
    api.app.dependency_overrides[doctor_target] = lambda: None
    page = api.get("/admin/doctor", headers=HTML)
    assert page.status_code == 200
    text = _text(page.text)
    assert "nothing to check" not in text
    steps = _text(page.text[page.text.index('id="doctor-next"'):])
    assert "CHARGEBACK_PROMETHEUS_URL=http://" in steps and "CHARGEBACK_CLUSTERS" in steps
    assert "chargeback doctor --url http://" in steps and 'href="/fleet/live"' in page.text


def test_fleet_pages_link_to_the_doctor_for_admins_only(api, fresh_engine):
    for path in ("/fleet", "/fleet/live"):
        api.as_(ADMIN)
        page = api.get(path, headers=HTML)
        assert page.status_code == 200, page.text
        assert re.search(r'<a href="/admin/doctor[^"]*" id="doctor-link">', page.text), path
        for role in ("operator", "viewer", "finance"):
            api.as_(Principal(name=role, roles=frozenset({role}), user_id=2))
            other = api.get(path, headers=HTML)
            assert other.status_code == 200 and "/admin/doctor" not in other.text, (path, role)
