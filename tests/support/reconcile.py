"""Reconciliation-test support: a hand-written field history with issue 24's trouble in it, and the old code's rollups.

Six hours from F (2026-11-25 00:00 UTC), scraped every 30 s, one pool `l40s` of two nodes of L40S GPUs:
- node-a (`Hostname`): GPU-a0 has no energy counter; vision-train/train-1 holds it until F+1h50m (60 W),
  search-prod/chat-1 from then on (300 W), each pod's power on its own series: hour 1's mean power is
  100 W (0.1 kWh), the max of the two series' means 300 W. GPU-a1 is free, 100 W, with a counter that
  restarts from zero at F+3h30m.
- node-b (`hostname`): GPU-b0 held by vision-train/train-2 all along, 200 W, counter with the pod's labels;
  its exporter is silent in hour 2 (an outage).
- hour 4: no DCGM series at all (an empty answer).
The other hours have one power series per GPU, so the ingestion of today and the fixed one store the same;
`as_spec_says` writes hour 1's energy as SPEC section 4 gives it, the old code's helpers put each defect back.
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

from sqlalchemy import delete, update
from sqlmodel import Session, select

from app.core.clusters import DEFAULT_CLUSTER
from app.core.timeutil import from_epoch
from app.metrics.ingest import replace_hour
from app.metrics.models import IngestHour, IngestStatus, PoolHourModel, UsageRollup
from app.metrics.types import HourRollup
from app.policy.document import PolicyDocument
from tests.support.prometheus import openmetrics

F = int(datetime(2026, 11, 25, tzinfo=UTC).timestamp())
HOUR = 3600
HOURS = 6
STEP = 30
L40S = "NVIDIA L40S"
POOL = "l40s"
UTIL, POWER, ENERGY = "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
HANDOVER = F + HOUR + 50 * 60  # train-1 -> chat-1 on GPU-a0
RESET = F + 3 * HOUR + 1800  # GPU-a1's counter restarts
OUTAGE_HOUR, EMPTY_HOUR = 2, 4
# kWh of the pool in hour 1: GPU-a0 by mean power (100 W), GPU-a1 and GPU-b0 by their counters (100 W, 200 W).
HOUR1_KWH = Decimal("0.4")
HOUR1_KWH_OLD = Decimal("0.6")  # GPU-a0 at the max of its two series' means (300 W)


def at(hour: int) -> datetime:
    return from_epoch(F + hour * HOUR)


def policy() -> PolicyDocument:
    return PolicyDocument.model_validate({
        "tenants": [
            {"name": "search", "department": "consumer", "namespaces": ["search-prod"], "class": "inference"},
            {"name": "vision", "department": "research", "namespaces": ["vision-train"], "class": "training"},
        ],
        "pools": [{"name": POOL, "nodes": ["node-a", "node-b"], "reserved_fraction": "0.30",
                   "reservations": {"search": 1}, "gpus_per_node": 2, "gpu_model": L40S}],
        "pricing": {"currency": "USD", "energy_price_per_kwh": "0.20", "pue": "1.25", "dark_time_multiplier": "0.6",
                    "gpu_models": {L40S: {"purchase_price": 10950, "depreciation_years": 3, "hosting_per_hour": "0.10",
                                          "default_power_watts": 350}}},
        "priorities": [
            {"name": "inference-core", "value": 1000000, "class": "inference", "preemptible": False},
            {"name": "training", "value": 10000, "class": "training", "preemptible": True},
            {"name": "preprocessing", "value": 1000, "class": "preprocessing", "preemptible": True},
        ],
        "eviction_order": ["preprocessing", "shrink-training-batch", "suspend-training"],
    })


def _gpu(host_label: str, host: str, uuid: str, gpu: str, pod: tuple[str, str] | None = None) -> dict:
    labels = {"gpu": gpu, "UUID": uuid, "device": f"nvidia{gpu}", "modelName": L40S, host_label: host,
              "DCGM_FI_DRIVER_VERSION": "550.54.15"}
    if pod:
        labels |= {"container": "main", "namespace": pod[0], "pod": pod[1]}
    return labels


def families() -> list:
    times = list(range(F - 600 + STEP, F + HOURS * HOUR + 300 + 1, STEP))
    index = {t: i for i, t in enumerate(times)}

    def hour_of(t: int) -> int:
        return (t - 1 - F) // HOUR

    def up(host: str):
        silent = {EMPTY_HOUR} | ({OUTAGE_HOUR} if host == "node-b" else set())
        return lambda t: hour_of(t) not in silent

    a0_train = _gpu("Hostname", "node-a", "GPU-a0", "0", ("vision-train", "train-1"))
    a0_chat = _gpu("Hostname", "node-a", "GPU-a0", "0", ("search-prod", "chat-1"))
    a1 = _gpu("Hostname", "node-a", "GPU-a1", "1")
    b0 = _gpu("hostname", "node-b", "GPU-b0", "0", ("vision-train", "train-2"))
    a, b = up("node-a"), up("node-b")

    def series(labels, when, value):
        return labels, [(t, value(t) if callable(value) else value) for t in times if when(t)]

    def a1_counter(t: int) -> float:  # +3e6 mJ (100 W x 30 s) a sample, restarting from zero at RESET
        return 1e9 + 3e6 * index[t] if t < RESET else 3e6 * (index[t] - index[RESET] + 1)

    return [
        (UTIL, "gauge", [series(a0_train, lambda t: a(t) and t <= HANDOVER, 80),
                         series(a0_chat, lambda t: a(t) and t > HANDOVER, 40),
                         series(a1, a, 0), series(b0, b, 90)]),
        (POWER, "gauge", [series(a0_train, lambda t: a(t) and t <= HANDOVER, 60),
                          series(a0_chat, lambda t: a(t) and t > HANDOVER, 300),
                          series(a1, a, 100), series(b0, b, 200)]),
        (ENERGY, "gauge", [series(a1, a, a1_counter), series(b0, b, lambda t: 5e9 + 6e6 * index[t])]),
    ]


def text() -> str:
    return openmetrics(families())


# ---- stored rollups: as SPEC says, and each defect put back the old code's way ----


def _model_row(session: Session, hour: int) -> PoolHourModel:
    return session.exec(select(PoolHourModel).where(PoolHourModel.hour == at(hour), PoolHourModel.pool == POOL,
                                                    PoolHourModel.cluster == DEFAULT_CLUSTER)).one()


def as_spec_says(session: Session) -> None:
    """Hour 1's energy as SPEC section 4's mean power gives it (what the fixed ingestion stores)."""
    _model_row(session, 1).measured_kwh = HOUR1_KWH
    session.flush()


def max_of_means(session: Session) -> None:
    """Old code: GPU-a0's hour-1 power as the max of its series' means."""
    _model_row(session, 1).measured_kwh = HOUR1_KWH_OLD
    session.flush()


def stopped_at_the_outage(session: Session) -> None:
    """Old `chargeback ingest`: the hours after the outage never attempted; hour 3 read while Prometheus was down."""
    for hour in range(OUTAGE_HOUR + 1, HOURS):
        replace_hour(session, HourRollup(hour=F + hour * HOUR), _version(session))
        session.execute(delete(IngestHour).where(IngestHour.hour == at(hour)))
    session.add(IngestHour(cluster=DEFAULT_CLUSTER, hour=at(3), status=IngestStatus.GAP, attempts=1,
                           last_error="Prometheus at http://prom did not answer: ConnectionError"))
    session.flush()


def empty_answer_as_ok(session: Session, hour: int = EMPTY_HOUR) -> None:
    """Old code: an answer with no series at all stored as an ok hour of zero use."""
    replace_hour(session, HourRollup(hour=F + hour * HOUR), _version(session))
    row = session.get(IngestHour, (DEFAULT_CLUSTER, at(hour))) or IngestHour(cluster=DEFAULT_CLUSTER, hour=at(hour),
                                                                             status=IngestStatus.OK)
    row.status, row.policy_version_id, row.last_error = IngestStatus.OK, _version(session), ""
    row.attempts = (row.attempts or 0) + 1
    session.add(row)
    session.flush()


def off_by_a_sample(session: Session, hour: int = 3, tenant: str = "vision") -> Decimal:
    """An engine that disagrees: one tenant's GPU-seconds one 30 s sample higher. Returns the stored value."""
    row = session.exec(select(UsageRollup).where(UsageRollup.hour == at(hour), UsageRollup.tenant == tenant)).first()
    session.execute(update(UsageRollup).where(UsageRollup.id == row.id).values(gpu_seconds=row.gpu_seconds + STEP))
    session.flush()
    return row.gpu_seconds + STEP


def _version(session: Session) -> int:
    return session.exec(select(IngestHour.policy_version_id).where(IngestHour.policy_version_id.is_not(None))).first()


def verdicts(checks) -> dict[int, str]:
    """Hour index from F -> verdict."""
    return {(c.hour - F) // HOUR: str(c.verdict) for c in checks}


