"""Billing tables: periods, their stored lines, usage and unattributed breaches (SPEC section 6).

A period's lines are replaced whole by each rating run until it is finalized; from then on
nothing in this module's tables changes for that period (corrections land in a later period).
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from enum import StrEnum

from sqlalchemy import BigInteger, Column, LargeBinary, Numeric, Text, TypeDecorator, UniqueConstraint
from sqlmodel import Field, SQLModel

import app.core.models  # noqa: F401  (naming convention)
from app.core.generation import watch

MONEY = Numeric(18, 2)
QUANTITY = Numeric(20, 6)


class PeriodStatus(StrEnum):
    OPEN = "open"
    RATED = "rated"
    FINALIZED = "finalized"


class BillingPeriod(SQLModel, table=True):
    """One calendar month in the billing timezone; `month` is "YYYY-MM"."""

    __tablename__ = "billing_period"

    id: int | None = Field(default=None, primary_key=True)
    month: str = Field(unique=True, max_length=7)
    status: str = PeriodStatus.OPEN
    currency: str = "USD"
    starts_at: datetime  # UTC instant of the month's first hour in the billing timezone
    ends_at: datetime  # exclusive
    created_at: datetime
    revision: int = 0  # incremented by every rating run
    rated_at: datetime | None = None
    rated_by: str | None = None
    finalized_at: datetime | None = None
    finalized_by: str | None = None
    # Payment terms in force when it was finalized: its invoices are due this many days after their issue date
    # (None: finalized before migration 0032; its invoices name no due date)
    payment_terms_days: int | None = None
    accept_gaps_reason: str | None = None
    accept_unpooled_reason: str | None = None  # why GPUs on nodes no pool names were left unpriced
    accept_unreconciled_reason: str | None = None  # why hours the source does not confirm were billed as stored
    # GPUs on nodes no pool names, as seen by the last rating run: pool-hours, most GPUs in an hour, capacity
    unpooled_hours: int = 0
    unpooled_gpus: int = 0
    unpooled_gpu_hours: Decimal = Field(default=Decimal(0), sa_column=Column(QUANTITY, nullable=False, server_default="0"))
    hours_expected: int = 0
    hours_ok: int = 0
    # JSON lists of ISO hours, as seen by the last rating run (kept so a finalized statement never moves)
    gap_hours: str = Field(default="[]", sa_column=Column(Text, nullable=False))
    missing_hours: str = Field(default="[]", sa_column=Column(Text, nullable=False))
    csv_sha256: str | None = None
    focus_sha256: str | None = None
    pdf_sha256: str | None = None
    # Set by the issuing step: the canonical JSON of every issued document's SHA-256 and size, and its own
    # SHA-256, also recorded in the audit entry of the issue (app/billing/manifest.py)
    manifest: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    manifest_sha256: str | None = Field(default=None, max_length=64)


class LineSource(StrEnum):
    RATING = "rating"  # replaced by each rating run
    CORRECTION = "correction"  # added by finance, survives re-rating


class ChargeLineRecord(SQLModel, table=True):
    """A stored `ChargeLine`, with the stable id a later correction names."""

    __tablename__ = "charge_line"
    __table_args__ = (UniqueConstraint("period_id", "line_id", name="uq_charge_line_period_line"),)

    id: int | None = Field(default=None, primary_key=True)
    period_id: int = Field(foreign_key="billing_period.id", index=True, ondelete="CASCADE")
    revision: int
    line_id: str = Field(index=True)
    source: str = LineSource.RATING
    account: str = Field(index=True)
    department: str = ""
    pool: str
    kind: str
    klass: str = ""
    service: str = ""
    policy_version: int
    charge_start: datetime
    charge_end: datetime
    quantity: Decimal = Field(sa_column=Column(QUANTITY, nullable=False))
    unit: str
    amount: Decimal = Field(sa_column=Column(MONEY, nullable=False))
    corrects: str = ""
    reason: str = ""  # corrections: why
    created_by: str = ""


class TenantUsageRecord(SQLModel, table=True):
    __tablename__ = "tenant_usage"

    id: int | None = Field(default=None, primary_key=True)
    period_id: int = Field(foreign_key="billing_period.id", index=True, ondelete="CASCADE")
    tenant: str = Field(index=True)
    department: str = ""
    pool: str
    klass: str
    busy_gpu_hours: Decimal = Field(sa_column=Column(QUANTITY, nullable=False))
    dark_gpu_hours: Decimal = Field(sa_column=Column(QUANTITY, nullable=False))
    efficiency: float | None = None
    activity_samples: int = Field(default=0, sa_column=Column(BigInteger, nullable=False, server_default="0"))


class UnpooledUsageRecord(SQLModel, table=True):
    """GPU-hours a tenant used on nodes no pool names: shown on the statement, never priced."""

    __tablename__ = "unpooled_usage"

    id: int | None = Field(default=None, primary_key=True)
    period_id: int = Field(foreign_key="billing_period.id", index=True, ondelete="CASCADE")
    tenant: str
    klass: str
    gpu_hours: Decimal = Field(sa_column=Column(QUANTITY, nullable=False))


class UnattributedBreachRecord(SQLModel, table=True):
    __tablename__ = "unattributed_breach"

    id: int | None = Field(default=None, primary_key=True)
    period_id: int = Field(foreign_key="billing_period.id", index=True, ondelete="CASCADE")
    service: str
    pool: str
    minute_end: datetime
    penalty: Decimal = Field(sa_column=Column(MONEY, nullable=False))


class PoolCostRecord(SQLModel, table=True):
    """C per pool over the period (rounded), for the statement's conservation check."""

    __tablename__ = "pool_cost"

    period_id: int = Field(foreign_key="billing_period.id", primary_key=True, ondelete="CASCADE")
    pool: str = Field(primary_key=True)
    cost: Decimal = Field(sa_column=Column(MONEY, nullable=False))


class UnmeasuredCapacityRecord(SQLModel, table=True):
    """A pool's gap hours in the period and the capacity they left unmeasured (SPEC 5.8), as rated: never billed,
    absorbed by the platform, shown on the statement (`app/billing/unmeasured.py`)."""

    __tablename__ = "unmeasured_capacity"

    period_id: int = Field(foreign_key="billing_period.id", primary_key=True, ondelete="CASCADE")
    cluster: str = Field(primary_key=True)
    pool: str = Field(primary_key=True)
    gap_hours: int
    gpus: int  # GPUs last seen before the gap
    gpu_hours: Decimal = Field(sa_column=Column(QUANTITY, nullable=False))
    amount: Decimal = Field(sa_column=Column(MONEY, nullable=False))


class DocumentKind(StrEnum):
    CSV = "csv"
    FOCUS = "focus"
    PDF = "pdf"
    INVOICE_PDF = "invoice_pdf"  # one per tenant
    REPORT_PDF = "report_pdf"  # the managers' monthly report


class IssuedDocument(SQLModel, table=True):
    """A document exactly as issued when its period was finalized: served byte for byte from then on."""

    __tablename__ = "issued_document"

    period_id: int = Field(foreign_key="billing_period.id", primary_key=True, ondelete="CASCADE")
    kind: str = Field(primary_key=True)
    tenant: str = Field(default="", primary_key=True)  # "" for period-wide documents
    content: bytes = Field(sa_column=Column(LargeBinary, nullable=False))
    sha256: str = Field(max_length=64)
    created_at: datetime


# Rated figures feed cached answers (overview cost, allocation); issued documents are served as stored.
watch(BillingPeriod, ChargeLineRecord, TenantUsageRecord, UnpooledUsageRecord, UnattributedBreachRecord, PoolCostRecord,
      UnmeasuredCapacityRecord)


class ExactInt(TypeDecorator):
    """An integer of any size, exactly: NUMERIC on PostgreSQL; text on SQLite, whose integers stop at 64 bits
    (sums over it go through the exact functions `rating_sql` registers)."""

    impl = Numeric
    cache_ok = True

    def load_dialect_impl(self, dialect):
        return dialect.type_descriptor(Text() if dialect.name == "sqlite" else Numeric())

    def process_bind_param(self, value, dialect):
        return None if value is None else (str(value) if dialect.name == "sqlite" else int(value))

    def process_result_value(self, value, dialect):
        return None if value is None else int(value)


class RateKind(StrEnum):
    PRICED = "priced"
    UNPOOLED = "unpooled"  # GPUs on nodes no pool names: capacity counted, nothing priced
    EMPTY = "empty"  # no GPUs: not rated


class PoolHourRate(SQLModel, table=True):
    """One cluster's pool-hour as rating prices it, stored once when the hour is rated first
    (app/billing/hour_rates.py): what the month's lines are sums of (app/billing/rating_sql.py).

    Amounts are exact integers in rating's units (app/billing/rating.py): C = cost / den, the rate per
    micro-GPU-second rate / den (dark time: dark_rate / (den x the multiplier's power of ten)), GPU-seconds in
    1e-6 (idle, dark) or in 1e-6 / the pool's cover scale (unused reserve), amounts the products over den.
    Database triggers (migration 0024) delete the row whenever a rollup row of its pool-hour
    (`pool_hour`, `pool_hour_model`, `usage_rollup`) is written or deleted, so a stored rate is never
    older than its inputs: the next rating stores it again.
    """

    __tablename__ = "pool_hour_rate"

    hour: datetime = Field(primary_key=True)
    cluster: str = Field(primary_key=True)
    pool: str = Field(primary_key=True)
    kind: str
    policy_version_id: int = Field(foreign_key="policy_version.id")
    gpus: int
    capacity_gpu_seconds: Decimal = Field(sa_column=Column(QUANTITY, nullable=False))
    cost: int | None = Field(default=None, sa_column=Column(ExactInt))
    rate: int | None = Field(default=None, sa_column=Column(ExactInt))
    dark_rate: int | None = Field(default=None, sa_column=Column(ExactInt))
    idle: int | None = Field(default=None, sa_column=Column(ExactInt))
    idle_amount: int | None = Field(default=None, sa_column=Column(ExactInt))
    dark: int | None = Field(default=None, sa_column=Column(ExactInt))
    dark_amount: int | None = Field(default=None, sa_column=Column(ExactInt))
    unused: int | None = Field(default=None, sa_column=Column(ExactInt))
    unused_amount: int | None = Field(default=None, sa_column=Column(ExactInt))
    den: int | None = Field(default=None, sa_column=Column(ExactInt))  # migration 0028


class InferenceHourRate(SQLModel, table=True):
    """One inference tenant's use above its cover in a stored pool-hour (line 2), removed with its `PoolHourRate`."""

    __tablename__ = "inference_hour_rate"

    hour: datetime = Field(primary_key=True)
    cluster: str = Field(primary_key=True)
    pool: str = Field(primary_key=True)
    tenant: str = Field(primary_key=True)
    policy_version_id: int
    over: int = Field(sa_column=Column(ExactInt, nullable=False))  # micro-GPU-seconds / the pool's cover scale
    amount: int = Field(sa_column=Column(ExactInt, nullable=False))  # over x the hour's rate, over den x that scale
    den: int = Field(sa_column=Column(ExactInt, nullable=False))  # the hour's rate denominator (`PoolHourRate.den`)


class SlaKind(StrEnum):
    PENALTY = "penalty"
    CREDIT = "credit"
    UNATTRIBUTED = "unattributed"


class SlaHourRate(SQLModel, table=True):
    """A stored pool-hour's breach minutes as billed (line 4), removed with its `PoolHourRate`: per account, class
    and service the breach minutes (in 1e-20) and the penalty split to it (`penalty`: exactly amount / den), the
    minutes credited to each service's tenant (`credit`, quantity = minutes), and each minute nobody was co-located
    in (`unattributed`, amount = the penalty nobody pays, in 1e-20)."""

    __tablename__ = "sla_hour_rate"

    hour: datetime = Field(primary_key=True)
    cluster: str = Field(primary_key=True)
    pool: str = Field(primary_key=True)
    kind: str = Field(primary_key=True)  # penalty | credit | unattributed
    service: str = Field(primary_key=True)
    account: str = Field(primary_key=True)  # penalty: the account charged; credit: the service's tenant; else ""
    klass: str = Field(primary_key=True)  # penalty: the account's class; else ""
    minute_end: int = Field(default=0, primary_key=True, sa_type=BigInteger)  # unattributed: the minute (epoch); else 0
    policy_version_id: int
    quantity: int = Field(sa_column=Column(ExactInt, nullable=False))
    amount: int = Field(sa_column=Column(ExactInt, nullable=False))
    den: int = Field(sa_column=Column(ExactInt, nullable=False))  # penalty: amount's denominator; else 1
