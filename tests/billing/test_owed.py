"""What a tenant owes so far: one figure (cost + SLA transfers of the same hours) that the fresh draft invoice, the
tenant page and the API all state, and that moves on when hours arrive after the draft was rated.

Every hour of September and of October up to the 20th is the SPEC section 5 example hour (vision 0.91 busy + 0.39
dark = 1.30 an hour); the first hour of each month also has 2 breach minutes of search-chat while vision ran
beside it (0.50 each: vision pays 1.00, search is credited 1.00).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal as D

from sqlalchemy import update

from app.billing import budgets, periods
from app.billing.owed import owed_so_far
from app.core.timeutil import utcnow
from app.metrics.models import IngestHour
from tests.support.billing import add_hour, fill_month, month_hours, store_policy

AS_OF = datetime(2026, 10, 20, tzinfo=UTC)
LATE = 100  # an October hour ingested only after the draft was rated


def _seed(session):
    version = store_policy(session, effective_from=datetime(2026, 8, 1, tzinfo=UTC))
    fill_month(session, "2026-09", version.id)
    fill_month(session, "2026-10", version.id, skip={LATE, *range(19 * 24, 31 * 24)})
    return version


def test_owed_is_the_cost_plus_the_transfers_and_the_fresh_draft_says_the_same(session):
    version = _seed(session)
    vision = owed_so_far(session=session, tenant="vision", as_of=AS_OF)
    assert (vision.cost, vision.sla_penalties, vision.sla_credits) == (D("1.30") * 455, D("1.00"), D(0))
    assert vision.total == D("592.50") and vision.draft_total is None
    search = owed_so_far(session=session, tenant="search", as_of=AS_OF)
    assert search.sla_credits == D("-1.00") and search.total == D("0.78") * 455 - 1
    status = budgets.status_of(session=session, scope="tenant", name="vision", now=AS_OF)
    assert vision.cost == status.forecast.actual  # the budget's figure is the cost part
    assert vision.forecast_total == status.forecast.month_end + D("1.00")

    periods.rate(session=session, period="2026-10", actor="fin")
    for tenant, owed in (("vision", vision), ("search", search)):
        fresh = owed_so_far(session=session, tenant=tenant, as_of=AS_OF)
        assert fresh.draft_total == fresh.total == owed.total and not fresh.draft_stale

    # an hour arrives after the rating: the figure has it, the draft does not yet, and says so
    add_hour(session, hour=month_hours("2026-10")[LATE], version=version.id, breaches=())
    session.execute(update(IngestHour).where(IngestHour.hour == month_hours("2026-10")[LATE])
                    .values(ingested_at=utcnow() + timedelta(seconds=1)))
    late = owed_so_far(session=session, tenant="vision", as_of=AS_OF)
    assert late.total == D("593.80") and late.draft_total == D("592.50") and late.draft_stale
