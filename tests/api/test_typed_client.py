"""The served OpenAPI document is the contract: a client generated from it accepts every real answer.

datamodel-code-generator turns `/api/v1/openapi.json` into pydantic models (unknown fields forbidden);
a seeded portal is then driven through every GET route and the main POSTs, and each answer is
validated against the generated model of that operation's 2xx response.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from pydantic import TypeAdapter, ValidationError

from app.auth import service
from app.billing import periods
from app.core.timeutil import floor_hour, utcnow
from app.notify.webhook_deliver import plan
from app.policy.parsing import parse_document
from app.policy.service import import_version
from tests.support.billing import add_hour, fill_month, store_policy
from tests.support.review import edited, set_p99, set_price
from tests.support.routes import make_user

pytestmark = pytest.mark.anyio
API = "/api/v1"
PEOPLE = {"olga": "operator", "rita": "reviewer", "fay": "finance", "vic": "viewer", "tim": "tenant", "ada": "admin"}


@dataclass
class Answer:
    """One real answer: the operation it came from (method and path template) and the response."""

    method: str
    template: str
    response: httpx.Response


class Portal:
    """A client that records every answer by operation, acting as one of PEOPLE."""

    def __init__(self, client: httpx.AsyncClient, headers: dict[str, dict[str, str]]):
        self.client, self.headers, self.answers = client, headers, []

    async def call(self, who: str, method: str, template: str, *, expect: int = 200, **kwargs) -> httpx.Response:
        path = template.format(**kwargs.pop("path", {}))
        response = await self.client.request(method, API + path, headers=self.headers[who], **kwargs)
        assert response.status_code == expect, (method, path, response.text)
        self.answers.append(Answer(method.lower(), API + template, response))
        return response


def _people(session) -> dict[str, dict[str, str]]:
    out = {}
    for name, role in PEOPLE.items():
        user = make_user(session, name, role, tenants=["vision"] if role == "tenant" else None)
        _, raw = service.create_token(session=session, user=user, scopes=["read", "write"],
                                      lifetime=timedelta(days=1), actor="test")
        out[name] = {"Authorization": f"Bearer {raw}"}
    session.commit()
    return out


async def drive(client: httpx.AsyncClient, session) -> list[Answer]:
    """Seed a rated month and a review history, and call every JSON route (GETs and the main writes)."""
    v1 = store_policy(session)
    fill_month(session, "2026-10", v1.id, gap=(5,))  # one gap: listed in the statement
    periods.rate(session=session, period="2026-10", actor="test")
    add_hour(session, hour=datetime(2026, 11, 1, tzinfo=UTC), version=v1.id)  # November: listed as open
    portal = Portal(client, _people(session))
    call = portal.call

    # billing and usage
    await call("fay", "POST", "/periods/{period}/rate", path={"period": "2026-10"})
    await call("fay", "GET", "/periods")
    await call("tim", "GET", "/periods")
    await call("fay", "GET", "/periods/{period}/invoices", path={"period": "2026-10"}, params={"limit": 2})
    invoice = (await call("fay", "GET", "/periods/{period}/invoices/{tenant}",
                          path={"period": "2026-10", "tenant": "vision"})).json()
    await call("fay", "GET", "/periods/{period}/invoices/{tenant}", path={"period": "2026-10", "tenant": "search"})
    await call("vic", "GET", "/periods/{period}/statement", path={"period": "2026-10"})
    await call("fay", "GET", "/periods/{period}/checklist", path={"period": "2026-10"})
    await call("vic", "GET", "/periods/{period}/report", path={"period": "2026-10"})
    for group_by in ("tenant", "pool", "class", "department"):
        await call("fay", "GET", "/usage", params={"start": "2026-10-01", "end": "2026-11-01", "group_by": group_by})
    for aggregate in ("tenant", "namespace"):
        await call("fay", "GET", "/allocation", params={"window": "2026-10", "aggregate": aggregate})
    await call("fay", "POST", "/periods/{period}/close", path={"period": "2026-10"},
               json={"accept_gaps": True, "reason": "typed client"})
    await call("fay", "POST", "/periods/{period}/corrections", expect=201, path={"period": "2026-11"},
               json={"line_id": invoice["lines"][0]["line_id"], "amount": "-0.10", "reason": "goodwill"})

    # directory
    await call("vic", "GET", "/tenants")
    await call("vic", "GET", "/tenants/{name}", path={"name": "vision"})
    await call("tim", "GET", "/departments")
    await call("fay", "PUT", "/tenants/{tenant}/contacts", path={"tenant": "vision"},
               json={"emails": ["ana@vision.example"]})
    await call("fay", "GET", "/tenants/{tenant}/contacts", path={"tenant": "vision"})
    await call("fay", "PUT", "/budgets/tenants/{tenant}", path={"tenant": "vision"}, json={"amount": "1000.00"})
    await call("fay", "PUT", "/budgets/departments/{department}", path={"department": "research"},
               json={"amount": "2000", "thresholds": [90]})
    await call("fay", "GET", "/budgets", params={"include_unbudgeted": "true"})
    await call("tim", "GET", "/budgets")
    await call("tim", "GET", "/budgets/tenants/{tenant}", path={"tenant": "vision"})
    await call("vic", "GET", "/budgets/departments/{department}", path={"department": "research"})
    audit = (await call("vic", "GET", "/audit", params={"limit": 5})).json()
    await call("vic", "GET", "/audit/{entry_id}", path={"entry_id": audit["items"][0]["id"]})

    # policy versions and validation
    await call("vic", "GET", "/policy/versions")
    await call("vic", "GET", "/policy/versions/active")
    await call("vic", "GET", "/policy/versions/{number}", path={"number": v1.id})
    await call("vic", "GET", "/policy/versions/{number}/artifacts", path={"number": v1.id})
    await call("vic", "GET", "/policy/versions/{number}/artifacts/diff", path={"number": v1.id})
    await call("olga", "POST", "/policy/validate", json={"document": edited(v1, set_p99(250))})

    # change requests
    change = (await call("olga", "POST", "/policy/changes", expect=201, json={
        "title": "tighter red line", "justification": "users complain", "document": edited(v1, set_p99(250))})).json()
    cid = {"change_id": change["id"]}
    await call("olga", "PATCH", "/policy/changes/{change_id}", path=cid, json={"title": "tighter red line (250 ms)"})
    await call("olga", "POST", "/policy/changes/{change_id}/fields", path=cid,
               json={"path": "sla[search-chat].p99_ms", "value": "250"})
    await call("rita", "POST", "/policy/changes/{change_id}/comments", expect=201, path=cid, json={"body": "ok"})
    await call("vic", "GET", "/policy/changes/{change_id}/preview", path=cid, params={"month": "2026-10"})
    await call("vic", "GET", "/policy/changes/{change_id}/artifacts", path=cid)
    await call("olga", "POST", "/policy/changes/{change_id}/rebase", path=cid)
    await call("olga", "POST", "/policy/changes/{change_id}/submit", path=cid)
    await call("rita", "POST", "/policy/changes/{change_id}/approve", path=cid, json={"comment": "fine"})
    await call("vic", "GET", "/policy/changes/{change_id}", path=cid)
    await call("vic", "GET", "/policy/changes")
    for decision in ("reject", "withdraw"):
        other = (await call("olga", "POST", "/policy/changes", expect=201, json={
            "title": f"cheaper power ({decision})", "justification": "new tariff",
            "document": edited(v1, set_price("0.18"))})).json()
        if decision == "reject":
            await call("vic", "GET", "/policy/changes/{change_id}/preview", path={"change_id": other["id"]},
                       params={"month": "2026-10"})
            await call("olga", "POST", "/policy/changes/{change_id}/submit", path={"change_id": other["id"]})
            await call("rita", "POST", "/policy/changes/{change_id}/reject", path={"change_id": other["id"]})
        else:
            await call("olga", "POST", "/policy/changes/{change_id}/withdraw", path={"change_id": other["id"]})

    # releases
    release = (await call("olga", "POST", "/policy/releases", expect=201, json={
        "name": "search v2", "service": "search-chat", "planned_at": "2026-12-20T09:00:00Z"})).json()
    rid = {"release_id": release["id"]}
    await call("olga", "PATCH", "/policy/releases/{release_id}", path=rid, json={"name": "search v2.1"})
    await call("olga", "POST", "/policy/releases/{release_id}/changes", expect=201, path=rid, json=cid)
    await call("olga", "DELETE", "/policy/releases/{release_id}/changes/{change_id}", path=rid | cid)
    await call("olga", "POST", "/policy/releases/{release_id}/changes", expect=201, path=rid, json=cid)
    await call("vic", "GET", "/policy/releases")
    await call("vic", "GET", "/policy/releases/{release_id}", path=rid)
    this_hour = floor_hour(utcnow()).isoformat()  # in effect at once, so it may be marked deployed
    await call("olga", "POST", "/policy/releases/{release_id}/apply", path=rid, json={"effective_from": this_hour})
    await call("olga", "POST", "/policy/releases/{release_id}/deploy", path=rid)
    await call("olga", "POST", "/policy/releases/{release_id}/rollback", path=rid, json={})
    await call("vic", "GET", "/audit", params={"action": "release.", "limit": 5})

    # rebase onto a newer version: one request merges cleanly, one conflicts with it
    drafts = [(await call("olga", "POST", "/policy/changes", expect=201, json={
        "title": title, "justification": "rebase", "document": edited(v1, edit)})).json()
        for title, edit in (("clean", set_price("0.19")), ("clash", set_p99(200)))]
    import_version(session=session, document=parse_document(edited(v1, set_p99(250))), actor="ops", source="change",
                   effective_from=floor_hour(utcnow()) + timedelta(hours=3))
    session.commit()
    for change in drafts:
        await call("olga", "POST", "/policy/changes/{change_id}/rebase", path={"change_id": change["id"]})

    # webhooks: a subscription, one planned delivery of a new event, redelivered
    hook = (await call("ada", "POST", "/webhooks", expect=201, json={
        "url": "https://erp.example/hooks", "event_types": ["correction.created"], "description": "ERP"})).json()
    wid = {"webhook_id": hook["id"]}
    await call("fay", "POST", "/periods/{period}/corrections", expect=201, path={"period": "2026-11"},
               json={"line_id": invoice["lines"][0]["line_id"], "amount": "0.10", "reason": "goodwill undone"})
    [delivery] = plan(session=session)
    await call("ada", "GET", "/webhooks")
    await call("ada", "PATCH", "/webhooks/{webhook_id}", path=wid, json={"description": "ERP (prod)"})
    await call("ada", "GET", "/webhooks/{webhook_id}", path=wid)
    await call("ada", "POST", "/webhooks/{webhook_id}/secret", path=wid)
    await call("ada", "POST", "/webhooks/{webhook_id}/deliveries/{delivery_id}/redeliver", expect=202,
               path={**wid, "delivery_id": delivery.id})
    await call("ada", "GET", "/webhooks/{webhook_id}/deliveries", path=wid)

    # the caller and their tokens
    await call("vic", "GET", "/me")
    await call("tim", "GET", "/me")
    await call("vic", "POST", "/tokens", expect=201, json={"label": "ci", "scopes": ["read"]})
    await call("vic", "GET", "/tokens")
    return portal.answers


def _response_schema(operation: dict) -> tuple[str, dict | None]:
    """(status, JSON schema) of an operation's success response; schema None when it has no JSON body."""
    status, response = next((s, r) for s, r in operation["responses"].items() if s.startswith("2"))
    return status, response.get("content", {}).get("application/json", {}).get("schema")


def _named(schema: dict) -> bool:
    """A schema that names its model (a $ref, or a list of one): not a free-form object."""
    return "$ref" in schema or "$ref" in schema.get("items", {})


def _generated_adapters(doc: dict, tmp_path: Path) -> dict[tuple[str, str], TypeAdapter]:
    """One validator per JSON operation, from models datamodel-code-generator writes from the served document.

    The component schemas become `$defs` of one JSON Schema whose required properties are the
    operations' success bodies, so each operation's type is read off the generated root model.
    """
    operations, properties = [], {}
    for path, methods in doc["paths"].items():
        for method, operation in methods.items():
            _, schema = _response_schema(operation)
            if path.startswith(API) and schema is not None:
                properties[f"op{len(operations)}"] = schema
                operations.append((method, path))
    wrapper = {"title": "Answers", "type": "object", "properties": properties, "required": list(properties),
               "$defs": doc["components"]["schemas"]}
    source = tmp_path / "answers.json"
    source.write_text(json.dumps(wrapper).replace("#/components/schemas/", "#/$defs/"))
    target = tmp_path / "generated_client.py"
    subprocess.run(
        [sys.executable, "-m", "datamodel_code_generator", "--input", str(source), "--input-file-type", "jsonschema",
         "--output", str(target), "--output-model-type", "pydantic_v2.BaseModel", "--extra-fields", "forbid",
         "--target-python-version", "3.11", "--field-constraints", "--use-annotated", "--disable-timestamp",
         "--type-mappings", "string+decimal=string"],  # decimals stay strings: a number in their place fails
        check=True, capture_output=True, text=True,
    )
    spec = importlib.util.spec_from_file_location("generated_client", target)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    module.Answers.model_rebuild()
    fields = module.Answers.model_fields
    return {operations[i]: TypeAdapter(fields[f"op{i}"].annotation) for i in range(len(operations))}


async def test_every_json_route_documents_a_named_success_body(client):
    doc = (await client.get(f"{API}/openapi.json")).json()
    for path, methods in doc["paths"].items():
        for method, operation in methods.items():
            if not path.startswith(API):
                continue
            status, schema = _response_schema(operation)
            content = operation["responses"][status].get("content", {})
            if status == "204" or (content and "application/json" not in content):
                continue  # no body, or a file (CSV, PDF, zip)
            assert schema is not None and _named(schema), (method, path, schema)


async def test_generated_client_accepts_every_real_answer(client, session, tmp_path):
    doc = (await client.get(f"{API}/openapi.json")).json()
    adapters = _generated_adapters(doc, tmp_path)
    answers = await drive(client, session)
    for answer in answers:
        adapter = adapters[(answer.method, answer.template)]
        adapter.validate_json(answer.response.content, strict=True)
    # The generated models are strict: an undocumented field or money as a number is refused.
    invoice = next(a for a in answers if a.template.endswith("/invoices/{tenant}"))
    adapter = adapters[("get", invoice.template)]
    for tampered in ({**invoice.response.json(), "discount": "0.00"}, {**invoice.response.json(), "total": 1.5}):
        with pytest.raises(ValidationError):
            adapter.validate_json(json.dumps(tampered), strict=True)
    called = {(a.method, a.template) for a in answers}
    untested = {op for op in adapters if op[0] == "get"} - called
    assert not untested, f"GET routes the typed client never read: {sorted(untested)}"
