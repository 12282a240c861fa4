"""E-mail delivery cost: the worker's claim/mark bookkeeping against the SMTP conversation itself.

Run:  .venv/bin/python benchmarks/mail.py [--messages 200] [--skip-postgres]

N budget alerts are planned and delivered by `deliver_due` to a real SMTP server process (aiosmtpd,
AUTH over loopback), on SQLite and PostgreSQL; then the same N messages are sent with bare
`send_smtp` calls (one connection each, as the worker opens). Printed: messages per second, ms per
message, and the ratio of the worker's time to the bare sends (what claiming, composing and marking
each row in transactions of their own costs on top of SMTP).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sqlalchemy import update  # noqa: E402

from app.core.db import make_engine, unit_of_work  # noqa: E402
from app.core.events import emit  # noqa: E402
from app.core.settings import Settings  # noqa: E402
from app.notify.mail_contacts import replace_contacts  # noqa: E402
from app.notify.mail_deliver import claim_next, deliver_due, send_smtp  # noqa: E402
from app.notify.mail_models import MailSend  # noqa: E402
from app.notify.mail_plan import plan  # noqa: E402
from tests.support.billing import store_policy  # noqa: E402
from tests.support.databases import (  # noqa: E402
    drop_postgres_database,
    migrated,
    new_postgres_database,
    new_sqlite_database,
)
from tests.support.smtp import PASSWORD, USER, smtp_server  # noqa: E402

NOW = datetime(2026, 11, 2, 9, tzinfo=UTC)


def run(url: str, label: str, messages: int, workdir: Path) -> None:
    engine = make_engine(url)
    with unit_of_work(engine) as s:
        store_policy(s)
        replace_contacts(session=s, tenant="vision", emails=["ana@vision.example", "bo@vision.example"], actor="bench")
        for n in range(messages):
            emit(session=s, type="budget.threshold", tenant="vision", key=f"bench:{n}",
                 payload={"tenant": "vision", "department": None, "month": "2026-11", "threshold_percent": n,
                          "basis": "actual", "amount": "512.00", "budget": "1000.00"})
    (workdir / label).mkdir()
    with smtp_server(workdir / label) as server:
        settings = Settings(smtp_host="127.0.0.1", smtp_port=server.port, smtp_starttls=False, smtp_username=USER,
                            smtp_password=PASSWORD, mail_from="billing@portal.example")
        started = time.perf_counter()
        with unit_of_work(engine) as s:
            plan(session=s, settings=settings, now=NOW, limit=messages)
        planned = time.perf_counter() - started
        started = time.perf_counter()
        sent = deliver_due(engine=engine, settings=settings, now=NOW, limit=messages + 1)
        worker = time.perf_counter() - started
        assert len(sent) == messages and len(server.received()) == messages, (
            len(sent), len(server.received()), {r.last_error for r in sent})
        # The same messages again, SMTP only (rows re-claimed to get the composed messages, not timed).
        with unit_of_work(engine) as s:
            s.execute(update(MailSend).values(status="pending", next_attempt_at=NOW, claimed_until=None))
        composed = [claim_next(engine=engine, settings=settings, now=NOW) for _ in range(messages)]
        started = time.perf_counter()
        for _, message in composed:
            send_smtp(settings=settings, message=message)
        bare = time.perf_counter() - started
    engine.dispose()
    print(f"{label:10s} {messages} messages: plan {planned * 1000:.0f} ms; worker {worker:.2f} s "
          f"({messages / worker:.0f}/s, {worker / messages * 1000:.1f} ms each); bare SMTP {bare:.2f} s "
          f"({bare / messages * 1000:.1f} ms each); worker / bare = {worker / bare:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=200)
    parser.add_argument("--skip-postgres", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        run(migrated(new_sqlite_database(workdir)), "sqlite", args.messages, workdir)
        if not args.skip_postgres and os.environ.get("CHARGEBACK_TEST_PG_URL"):
            url = migrated(new_postgres_database("cbmailbench"))
            try:
                run(url, "postgresql", args.messages, workdir)
            finally:
                drop_postgres_database(url)


if __name__ == "__main__":
    main()
