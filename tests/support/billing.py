"""Fixture builders for billing tests: a policy version and hourly rollup rows, inserted by name.

These write the same tables ingestion writes (a real fixture, not a mock of rating).
"""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

from sqlalchemy import insert, select
from sqlmodel import Session

from app.core.clusters import DEFAULT_CLUSTER
from app.core.timeutil import aware, hours_between
from app.metrics.models import (
    BreachMinuteRollup,
    BreachShare,
    IngestHour,
    NamespaceUsage,
    PoolHourModel,
    PoolHourRollup,
    UsageRollup,
)
from app.policy.document import PolicyDocument
from app.policy.service import import_version
from tests.support.policies import SPEC_TENANTS

A100 = "NVIDIA A100-SXM4-80GB"
POOL = "mixed-a100"


def policy_doc(**changes) -> PolicyDocument:
    """SPEC section 3/5's example: one pool of 2 A100 nodes, search/vision/etl, one SLA (each GPU 1.30/h)."""
    data = {
        "tenants": [{**t, "namespaces": list(t["namespaces"])} for t in SPEC_TENANTS],
        "pools": [
            {"name": POOL, "nodes": ["gpu-a100-01", "gpu-a100-02"], "reserved_fraction": "0.30",
             "reservations": {"search": 1}},
        ],
        "pricing": {
            "currency": "USD",
            "gpu_models": {A100: {"purchase_price": 26280, "depreciation_years": 3, "hosting_per_hour": "0.20",
                                  "default_power_watts": 400}},
            "energy_price_per_kwh": "0.20",
            "pue": "1.25",
            "dark_time_multiplier": "0.6",
        },
        "sla": [
            {"service": "search-chat", "tenant": "search", "pool": POOL,
             "requests": 'vllm:request_success_total{namespace="search-prod"}',
             "latency_histogram": 'vllm:e2e_request_latency_seconds_bucket{namespace="search-prod"}',
             "p99_ms": 300, "penalty_per_breach_minute": "0.50"},
        ],
        "priorities": [
            {"name": "inference-core", "value": 1000000, "class": "inference", "preemptible": False},
            {"name": "training", "value": 10000, "class": "training", "preemptible": True},
            {"name": "preprocessing", "value": 1000, "class": "preprocessing", "preemptible": True},
        ],
    }
    data.update(changes)
    return PolicyDocument.model_validate(data)


def store_policy(session: Session, doc: PolicyDocument | None = None, *, effective_from: datetime | None = None):
    """Import a policy version through the real policy service."""
    return import_version(
        session=session, document=doc or policy_doc(), actor="test",
        effective_from=effective_from or datetime(2026, 1, 1, tzinfo=UTC),
    )


# the worked example's hour: (tenant, class, dark, GPU-seconds)
EXAMPLE_USAGE = [
    ("search", "inference", False, 1800),
    ("vision", "training", False, 2520),
    ("vision", "training", True, 1800),
    ("etl", "preprocessing", False, 360),
]


def add_hour(
    session: Session,
    *,
    hour: datetime,
    version: int,
    usage=EXAMPLE_USAGE,
    breaches=(("search-chat", "search", 2, (("vision", 60),)),),
    gpus: int = 2,
    model: str = A100,
    pool: str = POOL,
    status: str = "ok",
    cluster: str = DEFAULT_CLUSTER,
) -> None:
    """One ingested hour of one cluster: IngestHour, pool_hour, pool_hour_model, usage rows and breach minutes.

    `breaches`: (service, service tenant, minutes, ((co-located tenant, GPU-seconds), ...)).
    """
    session.merge(IngestHour(cluster=cluster, hour=hour, status=status, policy_version_id=version, attempts=1,
                             ingested_at=hour))
    if status != "ok":
        session.flush()
        return
    session.add(PoolHourRollup(hour=hour, cluster=cluster, pool=pool, gpus=gpus, capacity_gpu_seconds=Decimal(gpus * 3600),
                               dark_minutes=25, policy_version_id=version))
    session.add(PoolHourModel(hour=hour, cluster=cluster, pool=pool, model=model, gpus=gpus, measured_gpus=0,
                              measured_kwh=Decimal(0)))
    for tenant, klass, dark, seconds in usage:
        session.add(UsageRollup(hour=hour, cluster=cluster, pool=pool, tenant=tenant, klass=klass, dark=dark,
                                gpu_seconds=Decimal(seconds), activity_sum=0.5 * seconds / 30,
                                activity_samples=int(seconds // 30), policy_version_id=version))
    session.flush()
    for service, service_tenant, minutes, colocated in breaches:
        for m in range(minutes):
            b = BreachMinuteRollup(hour=hour, cluster=cluster, service=service, service_tenant=service_tenant, pool=pool,
                                   minute_end=hour + timedelta(minutes=m + 1), p99_ms=Decimal("412.5"))
            session.add(b)
            session.flush()
            for tenant, gs in colocated:
                session.add(BreachShare(breach_id=b.id, tenant=tenant, gpu_seconds=Decimal(gs)))
    session.flush()


def add_namespaces(session: Session, *, hour: datetime, parts, pool: str = POOL) -> None:
    """Namespace rows of one hour: (tenant, class, dark, namespace, GPU-seconds); each usage row's parts must add up to it."""
    for tenant, klass, dark, namespace, seconds in parts:
        session.add(NamespaceUsage(hour=hour, pool=pool, namespace=namespace, tenant=tenant, klass=klass, dark=dark,
                                   gpu_seconds=Decimal(seconds), activity_sum=0.5 * seconds / 30,
                                   activity_samples=int(seconds // 30)))
    session.flush()


def month_hours(month: str) -> list[datetime]:
    year, mon = map(int, month.split("-"))
    start = datetime(year, mon, 1, tzinfo=UTC)
    end = datetime(year + (mon == 12), mon % 12 + 1, 1, tzinfo=UTC)
    return hours_between(start, end)


def fill_month(session: Session, month: str, version: int, *, skip=(), gap=(), usage=EXAMPLE_USAGE,
               gpus: int = 2, pool: str = POOL, model: str = A100, breach_hours: int = 1) -> int:
    """Every hour of `month` ingested like the worked example, in bulk (breaches only in the first hour).

    `skip`: hour indexes never ingested; `gap`: hour indexes marked as gaps. Returns the hour count.
    """
    hours = month_hours(month)
    ingest, pools, models, rows = [], [], [], []
    for i, hour in enumerate(hours):
        if i in skip:
            continue
        ingest.append({"hour": hour, "status": "gap" if i in gap else "ok", "policy_version_id": version,
                       "attempts": 1, "last_error": "", "ingested_at": hour, "duration_s": 0.0})
        if i in gap or i < breach_hours:
            continue
        pools.append({"hour": hour, "pool": pool, "gpus": gpus, "capacity_gpu_seconds": Decimal(gpus * 3600),
                      "dark_minutes": 25, "policy_version_id": version})
        models.append({"hour": hour, "pool": pool, "model": model, "gpus": gpus, "measured_gpus": 0,
                       "measured_kwh": Decimal(0)})
        for tenant, klass, dark, seconds in usage:
            rows.append({"hour": hour, "pool": pool, "tenant": tenant, "klass": klass, "dark": dark,
                         "gpu_seconds": Decimal(seconds), "activity_sum": 0.5 * seconds / 30,
                         "activity_samples": int(seconds // 30), "policy_version_id": version})
    for table, values in ((IngestHour, ingest), (PoolHourRollup, pools), (PoolHourModel, models), (UsageRollup, rows)):
        if values:
            session.execute(insert(table), values)
    for i in range(min(breach_hours, len(hours))):
        if i not in skip and i not in gap:
            add_hour(session, hour=hours[i], version=version, usage=usage, gpus=gpus, pool=pool, model=model)
    session.flush()
    return len(hours)


def record_gaps(session: Session, month: str, *, cluster: str = DEFAULT_CLUSTER,
                reason: str = "http://prometheus:9090 did not answer: ConnectionError") -> int:
    """Every hour of `month` without an ingest row recorded as a gap of `cluster`, as ingesting those hours from a
    source that cannot answer records them: a month like that can be closed with accept_gaps, one with hours never
    attempted cannot (SPEC 4). Returns the number of hours recorded."""
    hours = month_hours(month)
    seen = {aware(h) for h in session.execute(select(IngestHour.hour).where(
        IngestHour.cluster == cluster, IngestHour.hour >= hours[0], IngestHour.hour <= hours[-1])).scalars()}
    gaps = [{"hour": h, "cluster": cluster, "status": "gap", "attempts": 1, "last_error": reason, "duration_s": 0.0}
            for h in hours if h not in seen]
    if gaps:
        session.execute(insert(IngestHour), gaps)
        session.flush()
    return len(gaps)


CLI = Path(sys.executable).with_name("chargeback")


def run_cli(url: str, *args: str) -> subprocess.CompletedProcess:
    """`chargeback ARGS` as a real process on the database at `url`."""
    env = {**os.environ, "CHARGEBACK_DATABASE_URL": url, "COLUMNS": "200"}
    return subprocess.run([str(CLI), *args], env=env, capture_output=True, text=True, timeout=120)


def issue_documents(target, month: str):
    """The issuing step after close, as the worker runs it: in the test's session, or (an engine) in a
    transaction of its own. Tests wait for documents by running it, never by sleeping."""
    from sqlalchemy.engine import Engine

    from app.billing import issuing

    if isinstance(target, Engine):
        return issuing.issue_period(engine=target, month=month)
    return issuing.issue(session=target, month=month)
