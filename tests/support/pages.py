"""Page-test support: months of billing data on the rolled-back session (rated, with a MIG node; the overview's)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlmodel import Session

from app.billing import periods
from app.core.settings import get_settings
from app.core.timeutil import floor_hour, utcnow
from app.metrics.date_ranges import DateRange
from tests.support.billing import add_hour, policy_doc, store_policy

MIG_NODE = "gpu-a100-02"


def finished_hours() -> list[datetime]:
    """Three finished hours inside one billing month (the month of the last finished hour)."""
    last = floor_hour(utcnow()) - timedelta(hours=1)
    first_of_month = last.replace(day=1, hour=0)
    start = max(first_of_month, last - timedelta(hours=2))
    return [start + timedelta(hours=i) for i in range(3)]


def seeded_month(session: Session) -> dict:
    """search (inference), vision (training, pays penalties), etl; a MIG node; one month rated."""
    doc = policy_doc(
        quotas=[{"tenant": "vision", "pool": "mixed-a100", "guaranteed_gpus": 1, "borrowing_limit": 1, "lending_limit": 0}],
        isolation={"mig": {MIG_NODE: {"mode": "mixed", "gpus": {"0-3": {"3g.40gb": 2}}}}},
    )
    version = store_policy(session, doc, effective_from=datetime(2026, 1, 1, tzinfo=UTC))
    hours = finished_hours()
    for hour in hours:
        add_hour(session, hour=hour, version=version.id)
    month = hours[0].astimezone(get_settings().tz).strftime("%Y-%m")
    periods.rate(session=session, period=month, actor="test")
    session.commit()
    day = hours[0].astimezone(get_settings().tz).date()
    return {"hours": hours, "month": month, "query": f"start={day.isoformat()}&end={day.isoformat()}"
            if all(h.astimezone(get_settings().tz).date() == day for h in hours)
            else f"start={day.isoformat()}&end={(day + timedelta(days=1)).isoformat()}"}


# --- the overview dashboard's month ---------------------------------------------------------------


def this_month_hours(n: int = 3) -> list[datetime]:
    """Up to n hours of this month, ending with the current one (so the month's panels hold data in its first hour)."""
    last = floor_hour(utcnow())
    start = max(last.replace(day=1, hour=0), last - timedelta(hours=n - 1))
    return [start + timedelta(hours=i) for i in range(n) if start + timedelta(hours=i) <= last]


def overview_month(session: Session) -> dict:
    """This month's hours so far (up to 3) of the billing example, and a gap hour before them."""
    version = store_policy(session, effective_from=datetime(2026, 1, 1, tzinfo=UTC))
    hours = this_month_hours()
    for hour in hours:
        add_hour(session, hour=hour, version=version.id)
    gap = hours[0] - timedelta(hours=1)
    add_hour(session, hour=gap, version=version.id, status="gap")
    session.commit()
    return {"hours": hours, "gap": gap}


def date_range_over(hours: list[datetime]) -> DateRange:
    """The local dates from the day before the first hour to the day of the last."""
    tz = get_settings().tz
    return DateRange(start=hours[0].astimezone(tz).date() - timedelta(days=1), end=hours[-1].astimezone(tz).date(), tz=tz)
