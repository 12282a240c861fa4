"""The month-end forecast, a pure function: a worked example by hand, the fallbacks, and properties (hypothesis).

The properties: a cost pattern that repeats every day is forecast exactly (the truth is known: the same
values again); the forecast is linear (a department's forecast is the sum of its tenants'); it never
looks at hours at or after `as_of`; the month's hours are each known or expected, exactly once.
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal as D
from fractions import Fraction as F
from zoneinfo import ZoneInfo

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.billing.forecast import (
    EXACT,
    FLAT,
    HOUR_OF_DAY,
    NONE,
    WEEKDAY_HOUR,
    daily_path,
    forecast_month,
    straight_line,
)

UTC_TZ = ZoneInfo("UTC")
H, DAY = 3600, 86400
MON = int(datetime(2026, 9, 7, tzinfo=UTC).timestamp())  # a Monday, 00:00 UTC
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def hours(start: int, end: int) -> list[int]:
    return list(range(start, end, H))


def near(a: D, b: F, tolerance: D) -> bool:
    """`a` within `tolerance` of the exact fraction `b`."""
    return abs(D(a) - D(b.numerator) / D(b.denominator)) <= tolerance


def test_worked_example_two_weeks_with_a_busier_monday():
    """Two weeks of history: 2.00 at 10:00 on Mondays, 1.00 at 10:00 on other days, nothing at other hours.

    By hand (SLOT_PRIOR 4, WEEKDAY_PRIOR 2 days): the overall hourly mean is 16/336 = 1/21, hour 10's mean
    16/14 = 8/7. Monday: hourly mean 4/48 = 1/12, effect 2/(2+2) x (1/12 - 1/21) = 1/56; the slot's mean 2 over
    2 observations weighs 2/6: 1/3 x 2 + 2/3 x (8/7 + 1/56) = 2/3 + 2/3 x 65/56 = 2/3 + 65/84 = 121/84.
    Tuesday: hourly mean 2/48, effect 1/2 x (1/24 - 1/21) = -1/336; 1/3 x 1 + 2/3 x (8/7 - 1/336) = 1/3 + 383/504
    = 551/504. Monday 03:00 (nothing ever): 2/3 x (0 + 1/56) = 1/84; Tuesday 03:00: 2/3 x -1/336 = -1/504.
    """
    history = hours(MON, MON + 14 * DAY)
    costs = {h: (D(2) if (h - MON) // DAY % 7 == 0 else D(1)) for h in history if (h - MON) % DAY == 10 * H}
    as_of = MON + 14 * DAY  # the third Monday, 00:00
    f = forecast_month(costs=costs, observed=set(history), actual=D("5.00"), month_start=as_of,
                       month_end=as_of + 2 * DAY, as_of=as_of, tz=UTC_TZ)
    expected = dict(f.expected)
    assert near(expected[as_of + 10 * H], F(121, 84), EXACT)
    assert near(expected[as_of + DAY + 10 * H], F(551, 504), EXACT)
    assert near(expected[as_of + 3 * H], F(1, 84), EXACT)
    assert near(expected[as_of + DAY + 3 * H], F(-1, 504), EXACT)
    # the days: Monday 23 x 1/84 + 121/84 = 12/7, Tuesday 23 x -1/504 + 551/504 = 22/21 (never below zero)
    monday = F(1, 84) * 23 + F(121, 84)
    tuesday = F(-1, 504) * 23 + F(551, 504)
    assert (monday, tuesday) == (F(12, 7), F(22, 21))
    assert near(f.expected_remaining, monday + tuesday, D("1e-10"))
    assert f.month_end == D("7.76")  # 5.00 + 58/21
    assert (f.hours_known, f.hours_remaining, f.history_hours, f.method) == (0, 48, 336, WEEKDAY_HOUR)


def test_no_history_expects_nothing_and_says_so():
    f = forecast_month(costs={}, observed=set(), actual=D(0), month_start=MON, month_end=MON + 30 * DAY, as_of=MON,
                       tz=UTC_TZ)
    assert (f.expected_remaining, f.month_end, f.method, f.short_history) == (D(0), D("0.00"), NONE, True)


def test_short_history_falls_back_to_hour_of_day_then_to_the_mean():
    """Six hours of history (00:00-06:00 Monday): Tuesday's 03:00 has no slot but an hour-of-day mean; Tuesday's
    12:00 has neither, so the overall mean (plus Tuesday's effect, none: no Tuesday seen)."""
    seen = hours(MON, MON + 6 * H)
    costs = {h: D(3) for h in seen}
    as_of = MON + 6 * H
    f = forecast_month(costs=costs, observed=set(seen), actual=D(18), month_start=MON, month_end=MON + 2 * DAY,
                       as_of=as_of, tz=UTC_TZ)
    expected = dict(f.expected)
    assert expected[MON + 7 * H] == D(3).quantize(EXACT)  # Monday 07:00: no slot, no hour of day -> the mean
    assert expected[MON + DAY + 3 * H] == D(3).quantize(EXACT)  # Tuesday 03:00: the hour of day's mean
    assert f.method == FLAT and f.short_history and f.hours_known == 6 and f.hours_remaining == 42
    assert f.month_end == D(18 + 42 * 3)


def test_a_missing_slot_uses_the_hour_of_day_pattern():
    """A week of history without Sunday: Sunday's hours use the hour-of-day means (method hour-of-day)."""
    seen = hours(MON, MON + 6 * DAY)
    costs = {h: D((h - MON) // H % 24) for h in seen}  # cost = hour of day
    f = forecast_month(costs=costs, observed=set(seen), actual=D(0), month_start=MON + 6 * DAY,
                       month_end=MON + 7 * DAY, as_of=MON + 6 * DAY, tz=UTC_TZ)
    assert f.method == HOUR_OF_DAY
    assert [v for _, v in f.expected] == [D(h).quantize(EXACT) for h in range(24)]


def test_past_hours_not_ingested_are_expected_and_known_ones_are_not():
    """A gap at 02:00 of the month's first day is forecast (it will be ingested); hours seen are not."""
    history = hours(MON - 7 * DAY, MON)
    month = hours(MON, MON + 5 * H)
    observed = set(history) | set(month) - {MON + 2 * H}
    costs = {h: D(1) for h in observed}
    f = forecast_month(costs=costs, observed=observed, actual=D(4), month_start=MON, month_end=MON + DAY,
                       as_of=MON + 5 * H, tz=UTC_TZ)
    assert [h for h, _ in f.expected][:2] == [MON + 2 * H, MON + 5 * H]
    assert f.hours_known == 4 and f.hours_remaining == 20 and f.month_end == D(24)


def test_the_weekday_and_hour_follow_the_billing_time_zone():
    """Asia/Shanghai is UTC+8: a tenant busy at 09:00 local every day is busy at 01:00 UTC."""
    shanghai = ZoneInfo("Asia/Shanghai")
    seen = hours(MON, MON + 7 * DAY)
    costs = {h: D(5) for h in seen if datetime.fromtimestamp(h, UTC).astimezone(shanghai).hour == 9}
    f = forecast_month(costs=costs, observed=set(seen), actual=D(0), month_start=MON + 7 * DAY,
                       month_end=MON + 8 * DAY, as_of=MON + 7 * DAY, tz=shanghai)
    busy = [h for h, v in f.expected if v > D("0.5")]
    assert busy == [MON + 7 * DAY + H] and f.month_end == D(5)


def test_straight_line_baseline():
    assert straight_line(actual=D("100.00"), hours_known=240, month_hours_total=720) == D("300.00")
    assert straight_line(actual=D("7.00"), hours_known=0, month_hours_total=720) == D("7.00")


def test_daily_path_meets_the_actual_line_and_ends_at_the_forecast():
    seen = hours(MON - 14 * DAY, MON + 2 * DAY + 12 * H)
    costs = {h: D(1) for h in seen}
    as_of = MON + 2 * DAY + 12 * H  # the third day, noon
    f = forecast_month(costs=costs, observed=set(seen), actual=D(60), month_start=MON, month_end=MON + 5 * DAY,
                       as_of=as_of, tz=UTC_TZ)
    points = daily_path(forecast=f, costs=costs, observed=set(seen), month_start=MON, month_end=MON + 5 * DAY,
                        as_of=as_of, tz=UTC_TZ)
    assert [p.actual for p in points] == [D(24), D(48), D(60), None, None]
    assert [p.forecast for p in points] == [None, D(48), D(72), D(96), D(120)]  # leaves the actual line at day 2
    assert points[-1].forecast == f.month_end


# --- properties --------------------------------------------------------------------------------------------

cents = st.integers(0, 50_000).map(lambda n: D(n) / 100)


@st.composite
def months(draw):
    """(history hours, month start, month end, as of): whole days of history up to `as_of`, a month that starts
    within them (or at `as_of`) and ends after it, all on day boundaries, on any weekday."""
    history_days = draw(st.integers(1, 35))
    start = MON - draw(st.integers(0, 6)) * DAY
    as_of = start + history_days * DAY
    known_days = draw(st.integers(0, history_days))
    month_start = as_of - known_days * DAY
    month_end = month_start + draw(st.integers(known_days + 1, max(known_days + 1, 31))) * DAY
    return hours(start, as_of), month_start, month_end, as_of


@SETTINGS
@given(months(), st.lists(cents, min_size=24, max_size=24))
def test_a_pattern_that_repeats_every_day_is_forecast_exactly(month, daily):
    history, month_start, month_end, as_of = month
    observed = {h for h in history if h < as_of}
    costs = {h: daily[(h // H) % 24] for h in observed}
    actual = sum((costs[h] for h in observed if h >= month_start), D(0))
    f = forecast_month(costs=costs, observed=observed, actual=actual, month_start=month_start, month_end=month_end,
                       as_of=as_of, tz=UTC_TZ)
    truth = sum((daily[(h // H) % 24] for h in hours(month_start, month_end) if h not in observed), D(0))
    assert f.expected_remaining == truth
    assert f.month_end == (actual + truth).quantize(D("0.01"))


@SETTINGS
@given(months(), st.data())
def test_a_departments_forecast_is_the_sum_of_its_tenants(month, data):
    history, month_start, month_end, as_of = month
    observed = {h for h in history if h < as_of}
    ordered = sorted(observed)
    a = dict(zip(ordered, data.draw(st.lists(cents, min_size=len(ordered), max_size=len(ordered))), strict=True))
    b = dict(zip(ordered, data.draw(st.lists(cents, min_size=len(ordered), max_size=len(ordered))), strict=True))
    both = {h: a[h] + b[h] for h in ordered}
    common = dict(observed=observed, actual=D(0), month_start=month_start, month_end=month_end, as_of=as_of, tz=UTC_TZ)
    fa, fb, fab = (forecast_month(costs=c, **common) for c in (a, b, both))
    tolerance = EXACT * 2 * (fab.hours_remaining + 1)  # each expected hour is kept to EXACT
    assert abs(fab.expected_remaining - (fa.expected_remaining + fb.expected_remaining)) <= tolerance
    assert fab.hours_remaining == fa.hours_remaining == fb.hours_remaining


@SETTINGS
@given(months(), st.data())
def test_hours_from_as_of_on_are_never_looked_at_and_each_hour_is_counted_once(month, data):
    history, month_start, month_end, as_of = month
    everything = set(history) | set(hours(month_start, month_end))
    ordered = sorted(everything)
    values = data.draw(st.lists(cents, min_size=len(ordered), max_size=len(ordered)))
    costs = dict(zip(ordered, values, strict=True))
    future = {h: v * 7 + 1 for h, v in costs.items() if h >= as_of}  # what the future holds: anything
    common = dict(observed=everything, actual=D("12.34"), month_start=month_start, month_end=month_end, as_of=as_of,
                  tz=UTC_TZ)
    f = forecast_month(costs=costs, **common)
    assert forecast_month(costs={**costs, **future}, **common) == f
    assert f.hours_known + f.hours_remaining == (month_end - month_start) // H
    assert f.month_end >= D("12.34")  # costs are never negative, nor is what they imply
