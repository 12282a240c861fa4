"""Builders for change-review tests: a seeded policy version, documents edited by path, requests in any state."""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine
from sqlmodel import Session

from app.auth import service
from app.core.db import unit_of_work
from app.policy.document import PolicyDocument
from app.policy.models import PolicyVersion
from app.policy.parsing import parse_document
from app.policy.service import dump_yaml, import_version, load_document
from app.review import changes
from app.review.models import ChangeRequest
from tests.support.routes import committing_app, make_user

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "policy.yaml"
SEED_FROM = datetime(2026, 1, 1, tzinfo=UTC)
VALIDATE_URL = "/api/v1/policy/validate"


def example_document() -> PolicyDocument:
    return parse_document(EXAMPLE.read_text())


def seed(session: Session, *, effective_from: datetime = SEED_FROM) -> PolicyVersion:
    """The SPEC example imported as the first version (the bootstrap path)."""
    return import_version(session=session, document=example_document(), actor="bootstrap", effective_from=effective_from)


def edited(version: PolicyVersion, edit: Callable[[dict], None]) -> str:
    """YAML of `version`'s document after `edit` mutates its plain data."""
    data = copy.deepcopy(load_document(version).to_data())
    edit(data)
    return dump_yaml(PolicyDocument.model_validate(data))


def set_quota(gpus: int) -> Callable[[dict], None]:
    def edit(data: dict) -> None:
        data["quotas"][0]["guaranteed_gpus"] = gpus
    return edit


def set_price(price: str) -> Callable[[dict], None]:
    def edit(data: dict) -> None:
        data["pricing"]["energy_price_per_kwh"] = price
    return edit


def set_p99(ms: int) -> Callable[[dict], None]:
    def edit(data: dict) -> None:
        data["sla"][0]["p99_ms"] = ms
    return edit


def draft(session: Session, version: PolicyVersion, *, author: str = "olga", edit=set_quota(6), title: str = "More GPUs for vision") -> ChangeRequest:
    return changes.create_change(session=session, actor=author, title=title,
                                 justification="vision needs six GPUs for the Q4 model", document=edited(version, edit))


def approved(session: Session, version: PolicyVersion, *, author: str = "olga", reviewer: str = "rita", edit=set_quota(6)) -> ChangeRequest:
    change = draft(session, version, author=author, edit=edit)
    changes.submit(session=session, change_id=change.id, actor=author)
    changes.approve(session=session, change_id=change.id, actor=reviewer)
    return change


def client_for(engine: Engine) -> tuple[TestClient, dict[str, str]]:
    """The real app on `engine` (the first version seeded), and bearer headers of an operator."""
    with unit_of_work(engine) as session:
        seed(session)
        user = make_user(session, "olga", "operator")
        _, raw = service.create_token(session=session, user=user, scopes=["read", "write"], lifetime=timedelta(days=1), actor="test")
    return TestClient(committing_app(engine), raise_server_exceptions=False), {"Authorization": f"Bearer {raw}"}


def row(engine: Engine, model, ident):
    """A row as committed (read in a unit of work of its own)."""
    with unit_of_work(engine) as session:
        return session.get(model, ident)


async def post(client, url: str, token: str, **data):
    """A form POST with the page's CSRF token, as a browser sends it."""
    return await client.post(url, data={"csrf_token": token, **data})
