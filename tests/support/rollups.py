"""Rollup rows and page readers for page tests, written straight into the tables the pages read."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta
from decimal import Decimal

from sqlmodel import Session

from app.core.clusters import DEFAULT_CLUSTER
from app.core.timeutil import floor_hour, utcnow
from app.metrics.models import IngestHour, PoolHourRollup, UsageRollup
from app.policy.models import PolicyVersion


def policy_version(session: Session) -> PolicyVersion:
    """A stored policy version for rollups to reference."""
    version = PolicyVersion(created_at=utcnow(), created_by="test", source="bootstrap",
                            effective_from=utcnow() - timedelta(days=400), sha256="0" * 64, document="{}")
    session.add(version)
    session.flush()
    return version


def usage(session: Session, version: PolicyVersion, *, hour: datetime, tenant: str, klass: str,
          gpu_seconds: str, pool: str = "a100", dark: bool = False) -> UsageRollup:
    row = UsageRollup(hour=hour, pool=pool, tenant=tenant, klass=klass, dark=dark,
                      gpu_seconds=Decimal(gpu_seconds), policy_version_id=version.id)
    session.add(row)
    return row


def pool_hour(session: Session, version: PolicyVersion, *, hour: datetime, pool: str, gpus: int) -> PoolHourRollup:
    """A pool's measured hour (its GPUs, fully available)."""
    row = PoolHourRollup(hour=hour, pool=pool, gpus=gpus, capacity_gpu_seconds=Decimal(gpus * 3600), dark_minutes=0,
                         policy_version_id=version.id)
    session.add(row)
    return row


def ingest_hour(session: Session, hour: datetime, status: str = "ok", duration_s: float = 0.5,
                cluster: str = DEFAULT_CLUSTER) -> IngestHour:
    row = IngestHour(cluster=cluster, hour=hour, status=status, attempts=1,
                     ingested_at=hour + timedelta(hours=1, minutes=2), duration_s=duration_s)
    session.add(row)
    return row


def recent_hours(n: int) -> list[datetime]:
    """The last n finished hours, oldest first."""
    last = floor_hour(utcnow()) - timedelta(hours=1)
    return [last - timedelta(hours=i) for i in reversed(range(n))]


def overview_chart(html: str) -> dict:
    """The overview's chart data (tenants x classes) as the page embeds it."""
    match = re.search(r'<script type="application/json" id="overview-data">(.*?)</script>', html, re.S)
    assert match, "no chart data on the page"
    return json.loads(match.group(1))


def overview_rollups(session: Session) -> list[datetime]:
    """Three recent hours of team-a (inference, dark training) and team-b (training), and a 45-day-old hour."""
    version = policy_version(session)
    hours = recent_hours(3)
    for hour in hours:
        usage(session, version, hour=hour, tenant="team-a", klass="inference", gpu_seconds="7200")
        usage(session, version, hour=hour, tenant="team-a", klass="training", gpu_seconds="1800", dark=True)
        usage(session, version, hour=hour, tenant="team-b", klass="training", gpu_seconds="3600")
        ingest_hour(session, hour)
    old = utcnow() - timedelta(days=45)
    usage(session, version, hour=old.replace(minute=0, second=0, microsecond=0), tenant="team-old",
          klass="training", gpu_seconds="36000")
    session.commit()
    return hours
