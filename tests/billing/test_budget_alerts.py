"""budget.threshold events from the worker task: once per (budget, amount, threshold, month, basis), on both
databases, across rounds, restarts and two worker processes racing; then planned as e-mail.

The figures are the SPEC worked example's (tests/billing/test_budgets.py): vision costs 1.30 an hour, so as of
2026-10-20 00:00 it has spent 592.80 of October and will have spent 967.20 by its end.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal as D

from sqlmodel import Session, select

from app.billing import budgets
from app.billing.budget_alerts import budget_task, months_to_check
from app.cli import WORKER_TASKS
from app.core.db import unit_of_work
from app.core.events import Event
from app.metrics.worker import run_tasks
from app.notify.mail_models import MailSend
from tests.support.budgets import steady as every_hour_alike
from tests.support.clock import frozen

NOW = datetime(2026, 10, 20, tzinfo=UTC)


def steady(engine, months=("2026-09", "2026-10")) -> None:
    with unit_of_work(engine) as session:
        every_hour_alike(session, months)


def set_budget(engine, scope: str, name: str, amount: str, thresholds=None) -> None:
    with unit_of_work(engine) as session:
        budgets.set_budget(session=session, scope=scope, name=name, amount=amount, thresholds=thresholds, actor="fiona")


def recorded(engine) -> list[tuple]:
    """(who, month, threshold, basis, amount) of every budget.threshold event, in key order."""
    with Session(engine) as session:
        events = session.exec(select(Event).where(Event.type == "budget.threshold").order_by(Event.key)).all()
    return [(e.data["tenant"] or e.data["department"], e.data["month"], e.data["threshold_percent"], e.data["basis"],
             e.data["amount"]) for e in events]


def test_thresholds_crossed_by_cost_and_by_forecast_are_raised_once_each(fresh_engine):
    steady(fresh_engine)
    set_budget(fresh_engine, "tenant", "vision", "1000")
    set_budget(fresh_engine, "department", "research", "1800", [25, 50])
    set_budget(fresh_engine, "tenant", "search", "5000")  # 580.32 forecast: far below 50 %
    first = budget_task(fresh_engine, frozen(NOW))
    assert sorted((e.data["tenant"] or e.data["department"], e.data["threshold_percent"], e.data["basis"])
                  for e in first) == [("research", 25, "actual"), ("research", 25, "forecast"),
                                      ("research", 50, "forecast"), ("vision", 50, "actual"),
                                      ("vision", 50, "forecast"), ("vision", 80, "forecast")]
    [event] = [e for e in first if e.data["tenant"] == "vision" and e.data["basis"] == "actual"]
    assert event.tenant == "vision" and event.key == "budget.threshold:tenant:vision:2026-10:1000.00:50:actual"
    assert event.data == {"month": "2026-10", "threshold_percent": 50, "basis": "actual", "amount": "592.80",
                          "budget": "1000.00", "currency": "USD", "tenant": "vision", "department": "research",
                          "actual": "592.80", "forecast": "967.20", "as_of": "2026-10-20T00:00:00Z"}
    [department] = [e for e in first if e.data["tenant"] is None and e.data["basis"] == "forecast"
                    and e.data["threshold_percent"] == 50]
    assert department.tenant is None and department.data["department"] == "research"
    assert (department.data["amount"], department.data["budget"]) == ("967.20", "1800.00")
    assert budget_task(fresh_engine, frozen(NOW)) == []  # the same round again (a restart): nothing new
    assert budget_task(fresh_engine, frozen(NOW + timedelta(hours=5))) == []  # later, nothing crossed anew
    # a week on: 26 days x 24 x 1.30 = 811.20 so far reaches 80 % by cost too
    later = budget_task(fresh_engine, frozen(NOW + timedelta(days=7)))
    assert [(e.data["threshold_percent"], e.data["basis"], e.data["amount"]) for e in later] == [(80, "actual", "811.20")]
    assert len(recorded(fresh_engine)) == 7


def test_a_new_amount_arms_the_thresholds_again_and_a_short_history_raises_no_forecast(fresh_engine):
    steady(fresh_engine, months=("2026-10",))  # no September: 19 days of history, enough
    set_budget(fresh_engine, "tenant", "vision", "1000")
    assert {(e.data["threshold_percent"], e.data["basis"]) for e in budget_task(fresh_engine, frozen(NOW))} == {
        (50, "actual"), (50, "forecast"), (80, "forecast")}
    set_budget(fresh_engine, "tenant", "vision", "900")
    again = budget_task(fresh_engine, frozen(NOW))
    assert {(e.data["threshold_percent"], e.data["basis"], e.data["budget"]) for e in again} == {
        (50, "actual", "900.00"), (50, "forecast", "900.00"), (80, "forecast", "900.00"), (100, "forecast", "900.00")}
    # three days into October, three days of history: the cost so far counts, the forecast does not yet
    early = NOW.replace(day=4)
    set_budget(fresh_engine, "tenant", "etl", "5", [10, 50, 100])  # 72 h x 0.13 = 9.36 so far
    assert {(e.data["threshold_percent"], e.data["basis"]) for e in budget_task(fresh_engine, frozen(early))
            if e.data["tenant"] == "etl"} == {(10, "actual"), (50, "actual"), (100, "actual")}


def test_the_month_just_ended_is_looked_at_for_a_day_by_its_cost_only(fresh_engine):
    assert months_to_check(datetime(2026, 11, 1, 0, 30, tzinfo=UTC)) == [("2026-10", False), ("2026-11", True)]
    assert months_to_check(datetime(2026, 11, 2, 0, 30, tzinfo=UTC)) == [("2026-11", True)]
    steady(fresh_engine)
    set_budget(fresh_engine, "tenant", "vision", "960")
    events = budget_task(fresh_engine, frozen(datetime(2026, 11, 1, 0, 30, tzinfo=UTC)))
    october = sorted((e.data["threshold_percent"], e.data["basis"]) for e in events if e.data["month"] == "2026-10")
    assert october == [(50, "actual"), (80, "actual"), (100, "actual")]  # 967.20 over the whole month
    november = sorted((e.data["threshold_percent"], e.data["basis"]) for e in events if e.data["month"] == "2026-11")
    assert november == [(50, "forecast"), (80, "forecast")]  # 720 h x 1.30 = 936.00 forecast from October's pattern


def test_the_worker_round_raises_the_event_and_plans_its_mail(fresh_engine):
    """WORKER_TASKS runs the budget task before the mail task: the alert is planned in the same round."""
    steady(fresh_engine)
    set_budget(fresh_engine, "tenant", "vision", "1000", [50])
    set_budget(fresh_engine, "department", "research", "1000", [50])
    run_tasks(WORKER_TASKS, engine=fresh_engine, clock=frozen(NOW))
    with Session(fresh_engine) as session:
        sends = session.exec(select(MailSend).where(MailSend.kind == "budget").order_by(MailSend.audience)).all()
    # mail is disabled in the tests (no SMTP host): each planned message is recorded as skipped
    assert sorted((s.audience, s.period, s.status) for s in sends) == [
        ("", "2026-10", "skipped"), ("", "2026-10", "skipped"), ("vision", "2026-10", "skipped"),
        ("vision", "2026-10", "skipped")]


RACER = """
import sys, time
from datetime import datetime
from pathlib import Path
from app.billing.budget_alerts import budget_task
from app.core.db import make_engine
url, now, ready, go = sys.argv[1:5]
engine = make_engine(url)
Path(ready).touch()
deadline = time.monotonic() + 120
while not Path(go).exists():  # start together with the other worker
    if time.monotonic() > deadline:
        sys.exit("no start signal")
    time.sleep(0.005)  # state-free: polls for the start file
print(len(budget_task(engine, lambda: datetime.fromisoformat(now))))
"""


def test_two_worker_processes_racing_raise_each_event_once(fresh_engine, tmp_path):
    steady(fresh_engine)
    for tenant, amount in (("vision", "1000"), ("search", "600"), ("etl", "100")):
        set_budget(fresh_engine, "tenant", tenant, amount, [10, 20, 30, 40, 50, 60, 70, 80, 90, 100])
    set_budget(fresh_engine, "department", "research", "1000")
    url = fresh_engine.url.render_as_string(hide_password=False)
    env = {**os.environ, "CHARGEBACK_DATABASE_URL": url}
    go = tmp_path / "go"
    workers = [subprocess.Popen([sys.executable, "-c", RACER, url, NOW.isoformat(), str(tmp_path / f"ready{i}"), str(go)],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
    deadline = time.monotonic() + 120
    while not all((tmp_path / f"ready{i}").exists() for i in range(2)):
        if any(w.poll() is not None for w in workers) or time.monotonic() > deadline:
            raise AssertionError(f"workers did not start: {[w.communicate(timeout=60) for w in workers]}")
        time.sleep(0.01)  # state-free: polls for the workers' ready files
    go.touch()
    outputs = [w.communicate(timeout=300) for w in workers]
    assert [w.returncode for w in workers] == [0, 0], [err for _, err in outputs]
    counts = [int(out.strip()) for out, _ in outputs]
    found = recorded(fresh_engine)
    assert sum(counts) == len(found) == len(set(found))  # each event recorded by exactly one of them
    # by hand: vision 592.80 so far / 967.20 forecast of 1000; search 355.68 / 580.32 of 600; etl 59.28 / 96.72 of 100
    expected = set()
    for name, actual, forecast, amount in (("vision", "592.80", "967.20", 1000), ("search", "355.68", "580.32", 600),
                                           ("etl", "59.28", "96.72", 100)):
        for t in range(10, 101, 10):
            if D(actual) >= D(amount) * t / 100:
                expected.add((name, "2026-10", t, "actual", actual))
            if D(forecast) >= D(amount) * t / 100:
                expected.add((name, "2026-10", t, "forecast", forecast))
    expected |= {("research", "2026-10", 50, "actual", "592.80"), ("research", "2026-10", 50, "forecast", "967.20"),
                 ("research", "2026-10", 80, "forecast", "967.20")}
    assert set(found) == expected
    assert budget_task(fresh_engine, frozen(NOW)) == []  # and a third worker, later, adds nothing
