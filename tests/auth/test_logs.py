"""No password or token in any log line, whatever the log level (SQL statements and their parameters included)."""

import logging

import pytest
from typer.testing import CliRunner

from tests.support.routes import make_user, page_csrf

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("fast_hashing")]
PASSWORD = "Sup3r-secret-passphrase"


@pytest.fixture
def debug_logs(caplog):
    """Everything at DEBUG, set before the database connection opens so SQL and parameters are logged too."""
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="sqlalchemy")  # SQLAlchemy pins its own logger at WARNING
    return caplog


async def test_secrets_never_logged(debug_logs, client, session):
    caplog = debug_logs
    make_user(session, "olga", "finance", password=PASSWORD)
    token = page_csrf((await client.get("/login")).text)
    wrong = "Wr0ng-secret-passphrase"
    await client.post("/login", data={"username": "olga", "password": wrong, "csrf_token": token})
    signed_in = await client.post("/login", data={"username": "olga", "password": PASSWORD, "csrf_token": token})
    assert signed_in.status_code == 303
    csrf = page_csrf((await client.get("/")).text)
    created = await client.post("/api/v1/tokens", json={"scopes": ["write"]}, headers={"X-CSRF-Token": csrf})
    assert created.status_code == 201
    raw = created.json()["token"]
    client.cookies.clear()
    bearer = {"Authorization": f"Bearer {raw}"}
    assert (await client.get("/api/v1/me", headers=bearer)).status_code == 200
    assert (await client.delete(f"/api/v1/tokens/{created.json()['id']}", headers=bearer)).status_code == 204
    assert (await client.get("/api/v1/me", headers=bearer)).status_code == 401

    text = caplog.text
    assert "login failed: user='olga'" in text and "login: user='olga'" in text  # the log is really captured
    assert "INSERT INTO api_token" in text  # SQL with parameters is captured too
    for secret in (PASSWORD, wrong, raw, raw[len("cbt_"):]):
        assert secret not in text


def test_cli_prints_the_token_once_but_never_logs_it(tmp_path, monkeypatch, caplog):
    from app.auth.cli import app as auth_cli
    from app.core import db, settings
    from tests.support.databases import migrated, new_sqlite_database

    url = migrated(new_sqlite_database(tmp_path))
    monkeypatch.setenv("CHARGEBACK_DATABASE_URL", url)
    monkeypatch.setenv("CLI_TEST_PASSWORD", PASSWORD)
    settings.get_settings.cache_clear()
    db.get_engine.cache_clear()
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="sqlalchemy")
    try:
        runner = CliRunner()
        made = runner.invoke(auth_cli, ["user", "create", "pat", "--role", "finance", "--password-env", "CLI_TEST_PASSWORD"])
        assert made.exit_code == 0, made.output
        assert PASSWORD not in made.output
        issued = runner.invoke(auth_cli, ["token", "create", "--user", "pat", "--scopes", "read", "--expires", "90d"])
        assert issued.exit_code == 0, issued.output
        raw = issued.stdout.strip().splitlines()[-1]
        assert raw.startswith("cbt_")
        listed = runner.invoke(auth_cli, ["token", "list"])
        assert "pat" in listed.output and raw not in listed.output
        bad = runner.invoke(auth_cli, ["token", "create", "--user", "pat", "--expires", "forever"])
        assert bad.exit_code == 2 and "--expires" in bad.output
        generated = runner.invoke(auth_cli, ["user", "create", "quinn", "--role", "tenant", "--tenant", "team-a"])
        one_time = generated.output.split("one-time password: ")[1].split()[0]
    finally:
        db.get_engine.cache_clear()
        settings.get_settings.cache_clear()
    assert "INSERT INTO app_user" in caplog.text
    for secret in (PASSWORD, raw, one_time):
        assert secret not in caplog.text
