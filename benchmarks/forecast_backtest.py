"""Backtest of the month-end cost forecast on simulator months: error by day of month, beside a straight line.

Run:  .venv/bin/python benchmarks/forecast_backtest.py [--seeds 1 2 3 --gpus 32 --months 2026-09 2026-10]
                                                     [--scenarios plain weekend growth]

For each seed, a temporary SQLite database is filled the way `chargeback demo` fills one: the
simulator's seed policy imported, then the simulator source ingested by the worker, from HISTORY_DAYS
before the first month to the end of the last. Then, for each month and each day d of it, the
portal's own forecast (`month_forecasts`, as of the end of day d: month-to-date cost from the
allocation estimate, the hourly pattern from the trailing weeks) is compared with the month's true
cost (the same allocation over the whole month), per tenant and per department; beside it the
straight line (month-to-date cost per known hour x the month's hours). It prints the mean and the
largest absolute percentage error per day of month over every (seed, month, tenant or department),
and whether the goal (within 5 % by day 10) is met. The figures go to benchmarks/RESULTS.md.

The simulator has a daily rhythm but no weekly one, and repeats itself every 28 days: its history is as
representative of the rest of a month as history can be. Two scenarios reshape the ingested usage
(`usage_rollup`, which rating reads) to see the forecast where that is not so:
  weekend  training and preprocessing use a quarter of their GPU-seconds on Saturdays and Sundays (UTC);
  growth   every tenant's use ramps linearly from half to all of it over the ingested span (+~0.8 % a day).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

GOAL_DAY, GOAL_PCT = 10, 5.0


def _month_bounds(month: str) -> tuple[datetime, datetime]:
    year, mon = map(int, month.split("-"))
    start = datetime(year, mon, 1, tzinfo=UTC)
    return start, datetime(year + (mon == 12), mon % 12 + 1, 1, tzinfo=UTC)


def fill(url: str, *, seed: int, gpus: int, start: datetime, end: datetime) -> float:
    """Migrate, import the simulator's policy and ingest [start, end) with the worker, as the demo does."""
    from app.core.db import get_engine, unit_of_work
    from app.core.migrate import upgrade
    from app.core.settings import get_settings
    from app.metrics.simulator import Simulator
    from app.metrics.worker import run_worker
    from app.policy.service import import_version

    settings = get_settings()
    upgrade(url)
    engine = get_engine()
    sim = Simulator(seed=seed, gpus=gpus, scrape_interval_s=30)
    with unit_of_work(engine) as session:
        import_version(session=session, document=sim.policy(), actor="backtest", effective_from=start,
                       comment="backtest: the simulator's seed policy")
    began = time.perf_counter()
    report = run_worker(engine=engine, source=sim.source(), settings=settings, once=True, backfill_start=start,
                        now=lambda: end + timedelta(seconds=settings.ingest_delay_s + 60))
    if report.gaps:
        raise SystemExit(f"seed {seed}: {len(report.gaps)} hours could not be ingested")
    return time.perf_counter() - began


def reshape(engine, scenario: str, *, start: datetime, end: datetime) -> None:
    """Rewrite the ingested usage for a scenario (SQLite: hours are stored as text that strftime/julianday read)."""
    from sqlalchemy import text

    if scenario == "plain":
        return
    if scenario == "weekend":
        sql = ("UPDATE usage_rollup SET gpu_seconds = round(gpu_seconds * 0.25, 6) "
               "WHERE klass IN ('training', 'preprocessing') AND strftime('%w', hour) IN ('0', '6')")
        params = {}
    elif scenario == "growth":
        sql = ("UPDATE usage_rollup SET gpu_seconds = round(gpu_seconds * "
               "(0.5 + 0.5 * (julianday(hour) - julianday(:start)) / :days), 6)")
        params = {"start": start.strftime("%Y-%m-%d %H:%M:%S"), "days": (end - start).days}
    else:
        raise SystemExit(f"unknown scenario {scenario!r}")
    with engine.begin() as conn:
        conn.execute(text(sql), params)


def backtest_month(session, month: str) -> list[dict]:
    """One row per (day, tenant or department): forecast, straight line and truth."""
    from app.billing.forecast import straight_line
    from app.billing.month_forecast import month_forecasts

    start, end = _month_bounds(month)
    truth = month_forecasts(session=session, month=month, as_of=end)
    rows = []
    days = (end - start).days
    hours = days * 24
    for day in range(1, days):  # as of the end of day d; the last day's end is the truth itself
        answer = month_forecasts(session=session, month=month, as_of=start + timedelta(days=day))
        for scope, forecasts, truths in (("tenant", answer.tenants, truth.tenants),
                                         ("department", answer.departments, truth.departments)):
            for name, f in forecasts.items():
                true = truths[name].actual
                if true <= 0:
                    continue
                line = straight_line(actual=f.actual, hours_known=f.hours_known, month_hours_total=hours)
                rows.append({"day": day, "scope": scope, "name": name, "true": true,
                             "pattern": abs(f.month_end - true) / true * 100,
                             "line": abs(line - true) / true * 100})
    return rows


def _with_database(url: str, work):
    """Run `work(url, engine)` with the app's settings and engine pointed at `url`."""
    from app.core.db import get_engine
    from app.core.settings import get_settings

    os.environ["CHARGEBACK_DATABASE_URL"] = url
    get_settings.cache_clear()
    get_engine.cache_clear()
    try:
        return work(url, get_engine())
    finally:
        get_engine().dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--gpus", type=int, default=32)
    parser.add_argument("--months", nargs="+", default=["2026-09", "2026-10"])
    parser.add_argument("--scope", choices=["all", "tenant", "department"], default="all")
    parser.add_argument("--scenarios", nargs="+", default=["plain"], choices=["plain", "weekend", "growth"])
    args = parser.parse_args()

    from app.billing.forecast import HISTORY_DAYS

    first, _ = _month_bounds(min(args.months))
    _, last = _month_bounds(max(args.months))
    start = first - timedelta(days=HISTORY_DAYS)
    rows: list[dict] = []
    began = time.perf_counter()
    load = os.getloadavg()
    for seed in args.seeds:
        with tempfile.TemporaryDirectory(prefix="forecast-backtest-") as tmp:
            ingested = Path(tmp) / "ingested.db"
            took = _with_database(f"sqlite:///{ingested}", lambda url, engine, seed=seed: fill(
                url, seed=seed, gpus=args.gpus, start=start, end=last))
            print(f"seed {seed}: ingested {start:%Y-%m-%d}..{last:%Y-%m-%d} ({args.gpus} GPUs) in {took:.0f} s",
                  flush=True)
            for scenario in args.scenarios:
                copy = Path(tmp) / f"{scenario}.db"
                shutil.copyfile(ingested, copy)

                def run(url, engine, scenario=scenario, seed=seed):
                    from sqlmodel import Session

                    reshape(engine, scenario, start=start, end=last)
                    with Session(engine) as session:
                        return [{**r, "seed": seed, "month": month, "scenario": scenario}
                                for month in args.months for r in backtest_month(session, month)]

                rows += _with_database(f"sqlite:///{copy}", run)
    if args.scope != "all":
        rows = [r for r in rows if r["scope"] == args.scope]
    print(f"\n{time.perf_counter() - began:.0f} s in all, load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} at the "
          f"start; seeds {' '.join(map(str, args.seeds))}, months {' '.join(args.months)}, {args.gpus} GPUs")
    for scenario in args.scenarios:
        report([r for r in rows if r["scenario"] == scenario], scenario)


def report(rows: list[dict], scenario: str) -> None:
    """The table of one scenario: mean and largest APE per day of month, pattern and straight line."""
    series = sorted({(r["seed"], r["month"], r["scope"], r["name"]) for r in rows})
    print(f"\n### {scenario}: {len(series)} month-series ({len({r['name'] for r in rows})} tenants and departments)\n")
    print("| day | pattern mean APE | pattern max APE | straight line mean APE | straight line max APE |")
    print("|----:|-----------------:|----------------:|-----------------------:|----------------------:|")
    by_day: dict[int, list[dict]] = {}
    for r in rows:
        by_day.setdefault(r["day"], []).append(r)
    for day, found in sorted(by_day.items()):
        pattern = [float(r["pattern"]) for r in found]
        line = [float(r["line"]) for r in found]
        mark = "**" if day == GOAL_DAY else ""
        print(f"| {mark}{day}{mark} | {statistics.mean(pattern):.2f} % | {max(pattern):.2f} % | "
              f"{statistics.mean(line):.2f} % | {max(line):.2f} % |")
    at_goal = by_day.get(GOAL_DAY, [])
    if not at_goal:
        return
    worst = max(at_goal, key=lambda r: r["pattern"])
    mean = statistics.mean(float(r["pattern"]) for r in at_goal)
    gap = float(worst["pattern"]) - GOAL_PCT
    verdict = "met" if gap <= 0 else f"missed by {gap:.2f} points"
    print(f"\n{scenario}, day {GOAL_DAY}: mean {mean:.2f} %, worst {float(worst['pattern']):.2f} % ({worst['scope']} "
          f"{worst['name']}, seed {worst['seed']}, {worst['month']}): goal {GOAL_PCT:.0f} % {verdict}; "
          f"{sum(1 for r in at_goal if r['pattern'] <= Decimal(str(GOAL_PCT)))} of {len(at_goal)} series within it")
    line_mean = statistics.mean(float(r["line"]) for r in at_goal)
    print(f"{scenario}, day {GOAL_DAY}: straight line mean error / pattern mean error = "
          f"{line_mean / mean if mean else float('inf'):.2f}x")

if __name__ == "__main__":
    main()
