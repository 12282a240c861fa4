"""The policy review API end to end on real users and bearer tokens: roles, four eyes, 422 paths, gate, audit."""

from __future__ import annotations

import io
import zipfile
from datetime import timedelta

import pytest

from app.auth import service
from app.core.db import unit_of_work
from app.core.timeutil import floor_hour, utcnow
from app.review.models import ChangeState
from tests.support.review import edited, set_p99, set_quota
from tests.support.routes import make_user

pytestmark = pytest.mark.anyio
API = "/api/v1/policy"
AUDIT = "/api/v1/audit"  # the one audit log; a request's or release's history is a filter of it
SOON = (floor_hour(utcnow()) + timedelta(hours=2)).isoformat()
PEOPLE = {"olga": "operator", "otto": "operator", "rita": "reviewer", "ravi": "reviewer", "ada": "admin",
          "vic": "viewer", "fay": "finance", "tim": "tenant"}


@pytest.fixture
def auth(fresh_engine) -> dict[str, dict[str, str]]:
    """Bearer headers for one user per role (real users, real tokens)."""
    out = {}
    with unit_of_work(fresh_engine) as session:
        for name, role in PEOPLE.items():
            user = make_user(session, name, role, tenants=["search"] if role == "tenant" else None)
            _, raw = service.create_token(session=session, user=user, scopes=["read", "write"],
                                          lifetime=timedelta(days=1), actor="test")
            out[name] = {"Authorization": f"Bearer {raw}"}
    return out


async def new_change(client, auth, v1, who="olga", edit=set_quota(6)) -> dict:
    response = await client.post(f"{API}/changes", headers=auth[who], json={
        "title": "vision to six GPUs", "justification": "Q4 model", "document": edited(v1, edit)})
    assert response.status_code == 201, response.text
    return response.json()


async def submitted(client, auth, v1, who="olga", edit=set_quota(6)) -> dict:
    change = await new_change(client, auth, v1, who, edit)
    response = await client.post(f"{API}/changes/{change['id']}/submit", headers=auth[who])
    assert response.status_code == 200, response.text
    return response.json()


async def test_four_eyes_on_every_review_route(client, auth, v1):
    # An admin may do everything except review her own request.
    change = await submitted(client, auth, v1, who="ada")
    for verb in ("approve", "reject"):
        response = await client.post(f"{API}/changes/{change['id']}/{verb}", headers=auth["ada"], json={"comment": "mine"})
        assert response.status_code == 403, response.text
        assert response.headers["content-type"].startswith("application/problem+json")
        assert "another reviewer" in response.json()["detail"]
    # An operator is not a reviewer at all, author or not.
    response = await client.post(f"{API}/changes/{change['id']}/approve", headers=auth["otto"])
    assert response.status_code == 403
    response = await client.post(f"{API}/changes/{change['id']}/approve", headers=auth["rita"], json={"comment": "ok"})
    assert response.status_code == 200 and response.json()["state"] == ChangeState.APPROVED
    detail = (await client.get(f"{API}/changes/{change['id']}", headers=auth["vic"])).json()
    assert [(d["reviewer"], d["decision"]) for d in detail["decisions"]] == [("rita", "approve")]


async def test_roles(client, auth, v1):
    change = await submitted(client, auth, v1)
    assert (await client.get(f"{API}/changes", headers=auth["vic"])).status_code == 200
    assert (await client.get(f"{API}/versions", headers=auth["fay"])).status_code == 200
    assert (await client.get(f"{API}/changes", headers=auth["tim"])).status_code == 403
    # A tenant member reads the audit log too, but only entries about its tenants: review entries concern none.
    assert (await client.get(AUDIT, headers=auth["tim"], params={"action": "change."})).json()["items"] == []
    body = {"title": "t", "justification": "j"}
    for who in ("vic", "rita", "fay"):
        assert (await client.post(f"{API}/changes", headers=auth[who], json=body)).status_code == 403
    assert (await client.post(f"{API}/releases", headers=auth["rita"], json={
        "name": "r", "service": "s", "planned_at": "2026-12-01T09:00:00Z"})).status_code == 403
    # Anyone who reads may comment.
    response = await client.post(f"{API}/changes/{change['id']}/comments", headers=auth["vic"], json={"body": "why six?"})
    assert response.status_code == 201
    assert (await client.get(f"{API}/changes", headers={})).status_code == 401


async def test_invalid_document_is_422_with_field_paths(client, auth, v1):
    change = await new_change(client, auth, v1, edit=set_quota(99))
    assert change["errors"][0]["path"] == "quotas[vision/mixed-a100].guaranteed_gpus"  # a draft may hold errors ...
    response = await client.post(f"{API}/changes/{change['id']}/submit", headers=auth["olga"])
    assert response.status_code == 422  # ... but cannot be submitted with them
    assert response.headers["content-type"].startswith("application/problem+json")
    assert "document.quotas[vision/mixed-a100].guaranteed_gpus" in [e["path"] for e in response.json()["errors"]]
    response = await client.post(f"{API}/validate", headers=auth["olga"], json={"document": "pricing: {energy_price_per_kwh: -1}"})
    assert response.status_code == 422
    assert "pricing.energy_price_per_kwh" in [e["path"] for e in response.json()["errors"]]
    response = await client.post(f"{API}/changes", headers=auth["olga"], json={"title": "", "justification": "x"})
    assert response.status_code == 422 and response.json()["errors"][0]["path"] == "title"


async def test_immutable_once_submitted_and_author_only(client, auth, v1):
    change = await new_change(client, auth, v1)
    response = await client.patch(f"{API}/changes/{change['id']}", headers=auth["otto"], json={"title": "mine now"})
    assert response.status_code == 403
    await client.post(f"{API}/changes/{change['id']}/submit", headers=auth["olga"])
    response = await client.patch(f"{API}/changes/{change['id']}", headers=auth["olga"], json={"document": edited(v1, set_quota(2))})
    assert response.status_code == 409


async def test_release_gate_artifacts_rollback_and_audit(client, auth, v1):
    change = await submitted(client, auth, v1)
    await client.post(f"{API}/changes/{change['id']}/approve", headers=auth["rita"])
    release = (await client.post(f"{API}/releases", headers=auth["otto"], json={
        "name": "search v2", "service": "search-chat", "planned_at": "2026-11-20T09:00:00Z"})).json()
    rid = release["id"]
    assert (await client.post(f"{API}/releases/{rid}/changes", headers=auth["otto"], json={"change_id": change["id"]})).status_code == 201
    response = await client.post(f"{API}/releases/{rid}/deploy", headers=auth["otto"])
    assert response.status_code == 409 and "apply policy first" in response.json()["detail"]
    past = await client.post(f"{API}/releases/{rid}/apply", headers=auth["otto"], json={"effective_from": "2026-01-15T10:00:00Z"})
    assert past.status_code == 422 and past.json()["errors"][0]["path"] == "effective_from"
    this_hour = floor_hour(utcnow()).isoformat()  # in effect at once: it may be marked deployed below
    response = await client.post(f"{API}/releases/{rid}/apply", headers=auth["otto"], json={"effective_from": this_hour})
    assert response.status_code == 200, response.text
    applied = response.json()
    version = applied["version"]["version"]
    assert applied["state"] == "applied" and applied["changes"][0]["state"] == "applied"
    assert (await client.post(f"{API}/releases/{rid}/apply", headers=auth["otto"], json={"effective_from": SOON})).status_code == 409
    response = await client.get(f"{API}/versions/{version}/artifacts.zip", headers=auth["vic"])
    assert response.status_code == 200 and response.headers["content-type"] == "application/zip"
    assert f"policy-v{version}/prometheus/rules.yaml" in zipfile.ZipFile(io.BytesIO(response.content)).namelist()
    shown = (await client.get(f"{API}/versions/{version}", headers=auth["vic"])).json()
    assert [c["path"] for c in shown["diff"]] == ["quotas[vision/mixed-a100].guaranteed_gpus"]
    assert (await client.post(f"{API}/releases/{rid}/deploy", headers=auth["otto"])).json()["state"] == "deployed"
    rolled = (await client.post(f"{API}/releases/{rid}/rollback", headers=auth["otto"], json={})).json()
    assert rolled["state"] == "rolled_back" and rolled["version"]["sha256"] == v1.sha256
    listed = (await client.get(f"{API}/versions", headers=auth["vic"])).json()["items"]
    assert [v["source"] for v in listed] == ["rollback", "change", "bootstrap"]

    # The audit log: filters and a cursor that walks every entry once.
    response = await client.get(AUDIT, headers=auth["vic"], params={"entity": "release", "entity_id": str(rid)})
    actions = [e["action"] for e in response.json()["items"]]
    assert actions == ["release.rollback", "release.deploy", "release.apply", "release.attach", "release.create"]
    assert response.json()["items"][0]["before"]["state"] == "deployed"
    seen, cursor = [], None
    while True:
        page = (await client.get(AUDIT, headers=auth["vic"], params={"limit": 3, "action": "change.", **({"cursor": cursor} if cursor else {})})).json()
        seen += [e["id"] for e in page["items"]]
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert len(seen) == len(set(seen)) == 4  # create, submit, approve, apply
    assert seen == sorted(seen, reverse=True)
    assert (await client.get(AUDIT, headers=auth["vic"], params={"cursor": "!!"})).status_code == 422


async def test_rebase_via_api(client, auth, v1, fresh_engine):
    from app.policy.parsing import parse_document
    from app.policy.service import import_version

    clean = await submitted(client, auth, v1)
    conflicting = await submitted(client, auth, v1, edit=set_p99(200))
    with unit_of_work(fresh_engine) as session:
        import_version(session=session, document=parse_document(edited(v1, set_p99(250))), actor="ops",
                       source="change", effective_from=v1.effective_from + timedelta(days=30))
    assert (await client.get(f"{API}/changes/{clean['id']}", headers=auth["vic"])).json()["stale"] is True
    response = await client.post(f"{API}/changes/{clean['id']}/rebase", headers=auth["olga"])
    assert response.status_code == 200 and response.json()["rebased"] is True
    result = (await client.post(f"{API}/changes/{conflicting['id']}/rebase", headers=auth["olga"])).json()
    assert result["rebased"] is False
    assert result["conflicts"] == [{"path": "sla[search-chat].p99_ms", "base": "300", "ours": "200", "theirs": "250"}]
    assert (await client.post(f"{API}/changes/{clean['id']}/rebase", headers=auth["rita"])).status_code == 403


async def test_hostile_input_is_a_4xx_never_a_500(client, auth, v1):
    change = await new_change(client, auth, v1, who="ada")
    cases = [
        ("get", f"{API}/changes/99999999999999999999", None, 422),
        ("get", f"{API}/versions/0", None, 422),
        ("get", f"{API}/changes/2147483647", None, 404),
        ("post", f"{API}/changes", {"title": "a\x00b", "justification": "j"}, 422),
        ("patch", f"{API}/changes/{change['id']}", {"justification": "\x00"}, 422),
        ("post", f"{API}/changes/{change['id']}/comments", {"body": "\x00"}, 422),
        ("post", f"{API}/releases", {"name": "\x00", "service": "s", "planned_at": "2026-12-01T09:00:00Z"}, 422),
        ("post", f"{API}/releases", {"name": "r", "service": "s", "planned_at": "tomorrow"}, 422),
        ("post", f"{API}/releases/1/changes", {"change_id": 10**20}, 422),
        ("get", f"{AUDIT}?actor=%00", None, 422),
        ("get", f"{AUDIT}?cursor=OTk5OTk5OTk5OTk5OTk5OTk5OTk5OTk5", None, 422),
        ("post", f"{API}/changes/{change['id']}/approve", {"comment": 5}, 422),
    ]
    for method, url, body, status in cases:
        response = await client.request(method, url, headers=auth["ada"], json=body)
        assert response.status_code == status, (method, url, response.text)
        assert response.headers["content-type"].startswith("application/problem+json")


async def test_structured_edit_via_api(client, auth, v1):
    change = (await client.post(f"{API}/changes", headers=auth["olga"], json={"title": "t", "justification": "j"})).json()
    response = await client.post(f"{API}/changes/{change['id']}/fields", headers=auth["olga"],
                                 json={"path": 'pricing.gpu_models["NVIDIA A100-SXM4-80GB"].hosting_per_hour', "value": "0.25"})
    assert response.status_code == 200
    assert [c["path"] for c in response.json()["diff"]] == ['pricing.gpu_models["NVIDIA A100-SXM4-80GB"].hosting_per_hour']
    response = await client.post(f"{API}/changes/{change['id']}/fields", headers=auth["olga"], json={"path": "nope[x]", "value": "1"})
    assert response.status_code == 422 and response.json()["errors"][0]["path"] == "path"
