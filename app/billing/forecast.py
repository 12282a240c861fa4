"""Month-end cost forecast from a tenant's hourly cost pattern. Pure: plain data in, a `Forecast` out, no I/O.

The month-end forecast is the month-to-date cost plus, for every hour of the month not yet known (the
hours to come, and past hours not ingested yet), the cost that hour typically has: learned from the
trailing `HISTORY_DAYS` of rated hours (this month's and the previous month's alike) by the hour's
weekday and hour of day in the billing time zone. Not a straight line: a tenant that trains at night
and idles at weekends is forecast to do so for the rest of the month.

The typical cost of an hour is a blend of two estimates, so that few observations do not make noise:
- the mean of the same (weekday, hour) slot, e.g. the last four Tuesdays at 14:00;
- the hour-of-day mean over every day (many more observations) plus the weekday's effect (that
  weekday's mean hourly cost minus the overall mean, shrunk towards 0 while few such days were seen).
The slot mean weighs n / (n + SLOT_PRIOR) for n observations of the slot. With short history the
estimates fall back in turn: no observation of the slot -> hour-of-day + weekday effect; no
observation of the hour of day -> the overall hourly mean + weekday effect; no history at all ->
nothing expected (the forecast is the month-to-date cost, and says so with `method="none"`).

The weekday's effect is added, not multiplied: a day's expected total is the same either way (24 x the
hourly mean, moved towards that weekday's), and adding keeps the forecast linear in the costs, so a
department's forecast is exactly the sum of its tenants' (tested as a property). The price is that one
hour of a cheap weekday can be expected slightly below zero where the tenant uses nothing anyway;
its day, and so the month, cannot.

Every input hour's cost is an exact Decimal (the same rating as invoices, per hour).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import ROUND_HALF_EVEN, Decimal, localcontext
from zoneinfo import ZoneInfo

from app.core.timeutil import SECONDS_PER_DAY, SECONDS_PER_HOUR

HISTORY_DAYS = 28  # four of each weekday
SLOT_PRIOR = Decimal(4)  # a (weekday, hour) mean of 4 observations weighs as much as the pattern estimate
WEEKDAY_PRIOR = Decimal(2)  # days of prior belief that a weekday costs like any other
PATTERN_DAYS = 7  # history below this (in hours observed / 24) is flagged as short
PRECISION = 50
EXACT = Decimal("1e-12")  # expected costs are kept to this before the one rounding of the month end
ZERO = Decimal(0)
ONE = Decimal(1)

# How the remaining hours were estimated, from the best to none
WEEKDAY_HOUR, HOUR_OF_DAY, FLAT, NONE = "weekday-hour", "hour-of-day", "flat", "none"


@dataclass(frozen=True)
class Forecast:
    """The month-end forecast of one tenant (or department) as of one instant."""

    actual: Decimal  # month-to-date cost, as given
    expected_remaining: Decimal  # sum of the expected cost of every hour of the month not known yet
    month_end: Decimal  # actual + expected_remaining, rounded once to `quantum`
    hours_known: int  # hours of the month observed before `as_of`
    hours_remaining: int  # hours of the month expected (to come, or not ingested yet)
    history_hours: int  # observed hours the pattern was learned from
    method: str  # WEEKDAY_HOUR | HOUR_OF_DAY | FLAT | NONE: the coarsest fallback any remaining hour needed
    expected: tuple[tuple[int, Decimal], ...] = ()  # (hour start, expected cost) of each remaining hour, in order

    @property
    def short_history(self) -> bool:
        """Learned from less than a week of hours: shown, but not trusted to raise alerts."""
        return self.history_hours < PATTERN_DAYS * 24


def _slot(hour: int, tz: ZoneInfo) -> tuple[int, int]:
    local = datetime.fromtimestamp(hour, UTC).astimezone(tz)
    return local.weekday(), local.hour


def month_hours(month_start: int, month_end: int) -> range:
    """Hour starts of [month_start, month_end) (epoch seconds on hour boundaries)."""
    return range(month_start, month_end, SECONDS_PER_HOUR)


def forecast_month(*, costs: Mapping[int, Decimal], observed: frozenset[int] | set[int], actual: Decimal,
                   month_start: int, month_end: int, as_of: int, tz: ZoneInfo, quantum: Decimal = Decimal("0.01"),
                   history_days: int = HISTORY_DAYS) -> Forecast:
    """The month-end forecast: `actual` plus the typical cost of each hour of the month not observed before `as_of`.

    `observed`: the hours (epoch starts) whose rollups were ingested; `costs`: the cost of such an hour (an
    observed hour missing from it cost nothing). Hours at or after `as_of` are ignored, observed or not, so a
    forecast never sees what it forecasts. `actual`: the month-to-date cost (allocation's one definition).
    """
    history_start = as_of - history_days * SECONDS_PER_DAY
    seen = sorted(h for h in observed if history_start <= h < as_of)
    known = {h for h in observed if month_start <= h < min(as_of, month_end)}
    with localcontext() as ctx:
        ctx.prec = PRECISION
        ctx.rounding = ROUND_HALF_EVEN
        profile = _Profile(seen, costs, tz)
        expected: list[tuple[int, Decimal]] = []
        worst = 0
        for hour in month_hours(month_start, month_end):
            if hour in known:
                continue
            value, level = profile.expect(hour)
            worst = max(worst, level)
            expected.append((hour, value.quantize(EXACT)))
        remaining = sum((v for _, v in expected), ZERO)
        method = (WEEKDAY_HOUR, HOUR_OF_DAY, FLAT, NONE)[worst] if expected else (WEEKDAY_HOUR if seen else NONE)
        return Forecast(
            actual=actual, expected_remaining=remaining, month_end=(actual + remaining).quantize(quantum),
            hours_known=len(known), hours_remaining=len(expected), history_hours=len(seen), method=method,
            expected=tuple(expected),
        )


class _Profile:
    """Means of the observed hours by (weekday, hour), by hour of day and by weekday (all linear in the costs)."""

    def __init__(self, hours: list[int], costs: Mapping[int, Decimal], tz: ZoneInfo):
        self.tz = tz
        slot_sum: dict[tuple[int, int], Decimal] = defaultdict(lambda: ZERO)
        slot_n: dict[tuple[int, int], int] = defaultdict(int)
        hod_sum: dict[int, Decimal] = defaultdict(lambda: ZERO)
        hod_n: dict[int, int] = defaultdict(int)
        day_sum: dict[int, Decimal] = defaultdict(lambda: ZERO)  # weekday -> cost
        day_n: dict[int, int] = defaultdict(int)  # weekday -> hours
        total = ZERO
        for hour in hours:
            cost = costs.get(hour, ZERO)
            weekday, hod = _slot(hour, tz)
            slot_sum[(weekday, hod)] += cost
            slot_n[(weekday, hod)] += 1
            hod_sum[hod] += cost
            hod_n[hod] += 1
            day_sum[weekday] += cost
            day_n[weekday] += 1
            total += cost
        self.n = len(hours)
        self.mean = total / self.n if self.n else ZERO
        self.slot = {k: (slot_sum[k] / n, n) for k, n in slot_n.items()}
        self.hod = {k: hod_sum[k] / n for k, n in hod_n.items()}
        # A weekday's effect: its hourly mean minus the overall one, shrunk towards 0 by WEEKDAY_PRIOR days.
        self.effect: dict[int, Decimal] = {}
        for weekday, n in day_n.items():
            days = Decimal(n) / 24
            self.effect[weekday] = days / (days + WEEKDAY_PRIOR) * (day_sum[weekday] / n - self.mean)

    def expect(self, hour: int) -> tuple[Decimal, int]:
        """(expected cost of `hour`, fallback level: 0 weekday-hour, 1 hour-of-day, 2 flat, 3 nothing known)."""
        if not self.n:
            return ZERO, 3
        weekday, hod = _slot(hour, self.tz)
        base = self.hod.get(hod)
        pattern = (self.mean if base is None else base) + self.effect.get(weekday, ZERO)
        slot = self.slot.get((weekday, hod))
        if slot is None:
            return pattern, 2 if base is None else 1
        mean, n = slot
        weight = Decimal(n) / (Decimal(n) + SLOT_PRIOR)
        return weight * mean + (ONE - weight) * pattern, 0


def straight_line(*, actual: Decimal, hours_known: int, month_hours_total: int,
                  quantum: Decimal = Decimal("0.01")) -> Decimal:
    """The naive baseline: the month-to-date cost per known hour, times the month's hours."""
    if not hours_known:
        return actual.quantize(quantum)
    with localcontext() as ctx:
        ctx.prec = PRECISION
        return (actual / hours_known * month_hours_total).quantize(quantum)


@dataclass(frozen=True)
class DayPoint:
    """One day of the month on the forecast chart (cumulative costs at the day's end)."""

    day: date
    actual: Decimal | None  # cost of the known hours up to this day's last known one; None: no hour of the day known
    forecast: Decimal | None  # month-to-date cost plus the expected hours up to the day's end; None before it starts


def daily_path(*, forecast: Forecast, costs: Mapping[int, Decimal], observed: frozenset[int] | set[int],
               month_start: int, month_end: int, as_of: int, tz: ZoneInfo) -> list[DayPoint]:
    """Cumulative actual and forecast cost per day of the month (billing time zone), for the chart.

    The forecast line starts at the last day known before the first hour to come, so the two lines meet; past
    hours not ingested yet are expected (in the forecast line), never drawn as zero in the actual one.
    """
    expected = dict(forecast.expected)
    first_future = next((h for h, _ in forecast.expected if h >= as_of), None)
    start_day = None if first_future is None else _local_date(first_future, tz)
    days: list[tuple[date, Decimal | None, Decimal]] = []  # (day, actual or None, expected so far)
    known_sum = expected_sum = ZERO
    current, day_known = None, False
    for hour in month_hours(month_start, month_end):
        day = _local_date(hour, tz)
        if day != current:
            if current is not None:
                days.append((current, known_sum if day_known else None, expected_sum))
            current, day_known = day, False
        if hour in expected:
            expected_sum += expected[hour]
        elif hour in observed and hour < as_of:
            known_sum += costs.get(hour, ZERO)
            day_known = True
    if current is not None:
        days.append((current, known_sum if day_known else None, expected_sum))
    points = []
    for i, (day, actual, expected_so_far) in enumerate(days):
        value = None
        if start_day is not None and day >= start_day:
            value = (forecast.actual + expected_so_far).quantize(EXACT)
        elif start_day is not None and i + 1 < len(days) and days[i + 1][0] == start_day:
            value = actual  # where the dashed line leaves the solid one
        points.append(DayPoint(day=day, actual=actual, forecast=value))
    return points


def _local_date(hour: int, tz: ZoneInfo) -> date:
    return datetime.fromtimestamp(hour, UTC).astimezone(tz).date()
