"""A new operator's first mistakes, each one clear line naming the setting or the command that fixes it, never a
traceback: `chargeback` as a real process, `serve` refusing to start, the readiness probe of a running portal."""

from __future__ import annotations

import os
import subprocess

import httpx
import pytest

from app.core.migrate import downgrade, head_revision
from tests.support.billing import CLI
from tests.support.databases import migrated, new_sqlite_database
from tests.support.server import running_portal


def chargeback(*args: str, **env: str) -> subprocess.CompletedProcess:
    """`chargeback ARGS` with these settings on top of a clean environment (no CHARGEBACK_* of the test run)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("CHARGEBACK_")}
    return subprocess.run([str(CLI), *args], env={**base, "COLUMNS": "200", **env}, capture_output=True, text=True,
                          timeout=120)


def one_line(result: subprocess.CompletedProcess, code: int = 2) -> str:
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr + result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.mark.parametrize("args", [("user", "list"), ("policy", "list"), ("rate", "--period", "2026-11"),
                                  ("worker", "--once")])
def test_a_database_never_migrated(tmp_path, args):
    url = new_sqlite_database(tmp_path)
    line = one_line(chargeback(*args, CHARGEBACK_DATABASE_URL=url))
    assert line == f"error: the database at {url} has no schema yet: run `chargeback db upgrade`"


def test_a_database_one_migration_behind(tmp_path):
    url = migrated(new_sqlite_database(tmp_path))
    downgrade(url, "-1")
    line = one_line(chargeback("user", "list", CHARGEBACK_DATABASE_URL=url))
    assert "is at schema revision" in line and f"this version needs {head_revision()}: run `chargeback db upgrade`" in line
    # and the fix the line names works
    assert chargeback("db", "upgrade", CHARGEBACK_DATABASE_URL=url).returncode == 0
    assert chargeback("user", "list", CHARGEBACK_DATABASE_URL=url).returncode == 0


def test_serve_refuses_to_start_on_a_database_never_migrated(tmp_path):
    url = new_sqlite_database(tmp_path)
    line = one_line(chargeback("serve", "--port", "0", CHARGEBACK_DATABASE_URL=url))
    assert line.endswith("has no schema yet: run `chargeback db upgrade`")


def test_an_unreachable_database_names_the_setting_without_the_password():
    result = chargeback("user", "list", CHARGEBACK_DATABASE_URL="postgresql://app:hunter2@127.0.0.1:9/chargeback")
    line = one_line(result)
    assert line.startswith("error: cannot reach the database at postgresql://app:***@127.0.0.1:9/chargeback: ")
    assert line.endswith("(check CHARGEBACK_DATABASE_URL)") and "hunter2" not in result.stderr


@pytest.mark.parametrize(("env", "expected"), [
    ({"CHARGEBACK_PROMETHEUS_URL": "127.0.0.1:19090"},
     "configuration error: CHARGEBACK_PROMETHEUS_URL: url must be an http:// or https:// URL (got '127.0.0.1:19090'), "
     "e.g. http://prometheus:9090 (the server's root, without /api/v1)"),
    ({"CHARGEBACK_ENVIRONMENT": "production"},
     "configuration error: CHARGEBACK_SECRET_KEY must be set to a random value outside development (the development "
     "default and sample placeholders are refused)"),
    ({"CHARGEBACK_SIMULATOR_GPUS": "many"},
     "configuration error: CHARGEBACK_SIMULATOR_GPUS: Input should be a valid integer, unable to parse string as an "
     "integer"),
    ({"CHARGEBACK_BILLING_TIMEZONE": "Mars/Olympus"}, None),
])
def test_malformed_settings_stop_every_command_with_the_variable_named(tmp_path, env, expected):
    url = migrated(new_sqlite_database(tmp_path))
    for args in (("serve", "--port", "0"), ("doctor",), ("user", "list")):
        line = one_line(chargeback(*args, CHARGEBACK_DATABASE_URL=url, **env))
        if expected is None:
            assert line.startswith(f"configuration error: {next(iter(env))}: "), line
        else:
            assert line == expected, args


def test_readiness_says_when_the_schema_is_not_this_versions(tmp_path):
    """/healthz is liveness; /readyz also checks the schema, and says which command fixes it (the web pods'
    readiness probe)."""
    url = migrated(new_sqlite_database(tmp_path))
    with running_portal(url, log_dir=tmp_path) as portal:
        ready = httpx.get(f"{portal.base}/readyz", timeout=30)
        assert ready.status_code == 200 and ready.json() == {"status": "ready", "schema_revision": head_revision()}
        downgrade(url, "-1")  # e.g. a rollback of the database under a running release
        refused = httpx.get(f"{portal.base}/readyz", timeout=30)
        assert refused.status_code == 503 and refused.headers["content-type"].startswith("application/problem+json")
        assert refused.json()["detail"].endswith(f"this version needs {head_revision()}: run `chargeback db upgrade`")
        assert httpx.get(f"{portal.base}/healthz", timeout=30).status_code == 200  # alive: not to be restarted


def test_a_worker_with_no_policy_says_why_its_hours_are_gaps_and_what_fixes_it(tmp_path):
    url = migrated(new_sqlite_database(tmp_path))  # the built-in simulator is the source; no policy imported
    result = chargeback("worker", "--once", "--backfill-hours", "2", CHARGEBACK_DATABASE_URL=url)
    assert result.returncode == 0 and "Traceback" not in result.stderr
    assert result.stdout.strip() == "ingested 0 hours, 2 gaps, 0 skipped"
    assert "gap " in result.stderr and ": no policy version was in effect (import one first: chargeback policy import " \
        "FILE --effective-from " in result.stderr
    again = chargeback("worker", "--once", "--backfill-hours", "2", CHARGEBACK_DATABASE_URL=url)
    assert again.returncode == 0 and "Traceback" not in again.stderr
