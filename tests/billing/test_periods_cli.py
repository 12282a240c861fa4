"""`chargeback rate | close | issue | export` as a real process: messages, exit codes, no tracebacks."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

from app.billing import periods
from app.core.db import unit_of_work
from tests.support.billing import add_hour, record_gaps, store_policy
from tests.support.billing import run_cli as run


def test_cli_rate_close_export(fresh_engine, tmp_path):
    url = fresh_engine.url.render_as_string(hide_password=False)
    with unit_of_work(fresh_engine) as s:
        v = store_policy(s)
        add_hour(s, hour=datetime(2026, 10, 1, tzinfo=UTC), version=v.id)
        record_gaps(s, "2026-10")

    rated = run(url, "rate", "--period", "2026-10")
    assert rated.returncode == 0, rated.stderr
    assert "vision" in rated.stdout and "2.30" in rated.stdout and "conservation: ok" in rated.stdout

    bad = run(url, "rate", "--period", "2026-13")
    assert bad.returncode == 2 and "YYYY-MM" in bad.stderr and "Traceback" not in bad.stderr + bad.stdout

    refused = run(url, "close", "--period", "2026-10")
    assert refused.returncode == 3 and "743 gap hour(s)" in refused.stderr and "--accept-gaps" in refused.stderr
    no_reason = run(url, "close", "--period", "2026-10", "--accept-gaps")
    assert no_reason.returncode == 2 and "reason" in no_reason.stderr

    closed = run(url, "close", "--period", "2026-10", "--accept-gaps", "--reason", "one test hour")
    assert closed.returncode == 0, closed.stderr
    assert "finalized" in closed.stdout and "sha256 focus" in closed.stdout
    # Issued right after finalizing, in a transaction of its own, a line per document (stderr is no terminal).
    assert "issued 7 documents of 2026-10" in closed.stdout
    assert "issued 1/7 csv" in closed.stderr and "issued 7/7 report_pdf" in closed.stderr
    assert "invoice_pdf vision" in closed.stderr
    again = run(url, "close", "--period", "2026-10", "--accept-gaps", "--reason", "again")
    assert again.returncode == 3 and "already finalized" in again.stderr

    with unit_of_work(fresh_engine) as s:
        row = periods.get_period(session=s, month="2026-10")
        stored = {"csv": row.csv_sha256, "focus": row.focus_sha256, "pdf": row.pdf_sha256}
    for fmt in ("csv", "focus", "pdf"):
        out = tmp_path / f"export.{fmt}"
        done = run(url, "export", "--period", "2026-10", "--format", fmt, "--out", str(out))
        assert done.returncode == 0, done.stderr
        assert hashlib.sha256(out.read_bytes()).hexdigest() == stored[fmt]
        assert "matches the finalized hash" in done.stderr
    wrong = run(url, "export", "--period", "2026-10", "--format", "xlsx", "--out", str(tmp_path / "x"))
    assert wrong.returncode == 2 and "format" in wrong.stderr
    missing = run(url, "export", "--period", "2026-08", "--format", "csv", "--out", str(tmp_path / "y"))
    assert missing.returncode == 4 and "not been rated" in missing.stderr


def test_cli_close_without_issuing_then_issue(fresh_engine, tmp_path):
    url = fresh_engine.url.render_as_string(hide_password=False)
    with unit_of_work(fresh_engine) as s:
        add_hour(s, hour=datetime(2026, 10, 1, tzinfo=UTC), version=store_policy(s).id)
        record_gaps(s, "2026-10")
    closed = run(url, "close", "--period", "2026-10", "--accept-gaps", "--reason", "one test hour", "--no-issue")
    assert closed.returncode == 0, closed.stderr
    assert "finalized" in closed.stdout and "documents pending" in closed.stdout and "sha256" not in closed.stdout
    pending = run(url, "export", "--period", "2026-10", "--format", "csv", "--out", str(tmp_path / "x.csv"))
    assert pending.returncode == 5 and "being issued" in pending.stderr and not (tmp_path / "x.csv").exists()
    assert "Traceback" not in pending.stderr
    verify = run(url, "verify", "--period", "2026-10")
    assert verify.returncode == 5 and "being issued" in verify.stderr

    issued = run(url, "issue")
    assert issued.returncode == 0, issued.stderr
    assert "issued 7 documents of 2026-10" in issued.stdout and "issued 3/7 pdf" in issued.stderr
    assert run(url, "verify", "--period", "2026-10").returncode == 0
    nothing = run(url, "issue")
    assert nothing.returncode == 0 and "no finalized month has documents pending" in nothing.stdout
