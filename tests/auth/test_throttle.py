"""Login throttling: 5 failures per user name and IP lock that pair for 15 minutes (no password check meanwhile)."""

from datetime import timedelta

import pytest
from sqlmodel import select

from app.auth import service
from app.auth.models import LoginAttempt
from app.core.timeutil import utcnow
from tests.support.routes import make_user

PASSWORD = "the right password"
pytestmark = pytest.mark.usefixtures("fast_hashing")


def _fail(session, name="dave", ip="10.0.0.1"):
    return service.authenticate(session=session, name=name, password="wrong password!", ip=ip)


def test_five_failures_lock_the_user_ip_pair(session):
    make_user(session, "dave", "viewer", password=PASSWORD)
    for attempt in range(4):
        result = _fail(session)
        assert result.user is None and result.locked_until is None, attempt
    fifth = _fail(session)
    assert fifth.user is None and fifth.locked_until is not None
    assert timedelta(minutes=14) < fifth.locked_until - utcnow() <= timedelta(minutes=15)
    # Even the right password is refused while locked, and the refusal is not checked or recorded.
    before = len(session.exec(select(LoginAttempt)).all())
    locked = service.authenticate(session=session, name="dave", password=PASSWORD, ip="10.0.0.1")
    assert locked.user is None and locked.locked_until == fifth.locked_until
    assert len(session.exec(select(LoginAttempt)).all()) == before
    # Another IP, or another user from this IP, is not locked.
    assert service.authenticate(session=session, name="dave", password=PASSWORD, ip="10.0.0.2").user is not None
    assert service.locked_until(session=session, name="erin", ip="10.0.0.1") is None


def test_lock_expires_after_fifteen_minutes(session):
    make_user(session, "dave", "viewer", password=PASSWORD)
    for _ in range(5):
        _fail(session)
    later = utcnow() + timedelta(minutes=15, seconds=1)
    assert service.locked_until(session=session, name="dave", ip="10.0.0.1", now=later) is None


def test_success_resets_the_count(session):
    make_user(session, "dave", "viewer", password=PASSWORD)
    for _ in range(4):
        _fail(session)
    assert service.authenticate(session=session, name="dave", password=PASSWORD, ip="10.0.0.1").user is not None
    for _ in range(4):
        assert _fail(session).locked_until is None


def test_unknown_user_and_inactive_user_fail_the_same_way(session):
    user = make_user(session, "frank", "viewer", password=PASSWORD)
    assert service.authenticate(session=session, name="nobody", password=PASSWORD, ip="10.0.0.1").user is None
    service.update_user(session=session, user_id=user.id, role="viewer", tenants=[], active=False, actor="test")
    assert service.authenticate(session=session, name="frank", password=PASSWORD, ip="10.0.0.1").user is None
