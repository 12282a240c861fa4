"""Ingestion-test support: a real Prometheus holding the hand-written scenario, policy versions, stored-hour readers."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta

import pytest
from sqlmodel import Session, select

from app.core.clusters import DEFAULT_CLUSTER
from app.core.timeutil import from_epoch
from app.metrics.models import BreachMinuteRollup, BreachShare, IngestHour, PoolHourModel, PoolHourRollup, UsageRollup
from app.metrics.prometheus_source import PrometheusSource
from app.policy.service import import_version
from tests.support import scenario
from tests.support.policies import mixed_policy
from tests.support.prometheus import PrometheusServer

SCENARIO_HOURS = 3
HOUR = timedelta(hours=1)


@pytest.fixture(scope="session")
def scenario_prometheus(tmp_path_factory) -> Iterator[PrometheusServer]:
    """A real Prometheus backfilled with `scenario` (3 hours from scenario.H)."""
    server = PrometheusServer.backfilled(tmp_path_factory.mktemp("prom-scenario"), scenario.text(SCENARIO_HOURS))
    with server:
        yield server


def add_policy(session: Session, document=None, *, effective_epoch: int = scenario.H - 86400) -> int:
    """Store a policy version effective from `effective_epoch`; returns its id."""
    version = import_version(session=session, document=document or mixed_policy(), actor="test",
                             effective_from=from_epoch(effective_epoch))
    return version.id


def snapshot(session: Session, hour_epoch: int) -> dict:
    """Everything stored for one hour, in comparable plain values."""
    hour = from_epoch(hour_epoch)
    usage = {(u.pool, u.tenant, u.klass, u.dark): (u.gpu_seconds, round(u.activity_sum, 9), u.activity_samples, u.policy_version_id)
             for u in session.exec(select(UsageRollup).where(UsageRollup.hour == hour))}
    pools = {p.pool: (p.gpus, p.capacity_gpu_seconds, p.dark_minutes, p.policy_version_id)
             for p in session.exec(select(PoolHourRollup).where(PoolHourRollup.hour == hour))}
    models = {(m.pool, m.model): (m.gpus, m.measured_gpus, m.measured_kwh)
              for m in session.exec(select(PoolHourModel).where(PoolHourModel.hour == hour))}
    breaches = {}
    for b in session.exec(select(BreachMinuteRollup).where(BreachMinuteRollup.hour == hour)):
        shares = session.exec(select(BreachShare).where(BreachShare.breach_id == b.id).order_by(BreachShare.tenant)).all()
        breaches[(b.service, int(b.minute_end.timestamp()))] = (b.p99_ms, b.pool, tuple((s.tenant, s.gpu_seconds) for s in shares))
    return {"usage": usage, "pools": pools, "models": models, "breaches": breaches}


def status(session: Session, hour_epoch: int) -> IngestHour | None:
    session.expire_all()
    return session.get(IngestHour, (DEFAULT_CLUSTER, from_epoch(hour_epoch)))


class SlowSource(PrometheusSource):
    """A real PrometheusSource that takes a while per fetch, so that workers run at once overlap."""

    def fetch(self, **kwargs):
        time.sleep(0.3)
        return super().fetch(**kwargs)

