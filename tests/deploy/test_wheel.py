"""The wheel works anywhere: installed into a fresh virtualenv, run from a directory that is not the checkout."""

from __future__ import annotations

import re
import subprocess
import zipfile
from datetime import UTC, datetime, timedelta

import httpx
import pytest
import yaml
from alembic.script import ScriptDirectory
from sqlalchemy import text

from app.core.db import make_engine
from app.core.migrate import alembic_config
from app.metrics.simulator import Simulator
from tests.support.databases import drop_postgres_database, new_postgres_database
from tests.support.deploy import ROOT
from tests.support.prometheus import PrometheusServer
from tests.support.server import running_portal

pytestmark = pytest.mark.deploy

BUNDLED = ("templates", "static", "migrations")
PASSWORD = "wheel-demo-password-1"
PAST = datetime(2026, 11, 2, tzinfo=UTC)  # a window of simulated history, backfilled into Prometheus


def _head() -> str:
    (head,) = ScriptDirectory.from_config(alembic_config("sqlite://")).get_heads()
    return head


def _version(url: str) -> str:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return conn.execute(text("select version_num from alembic_version")).scalar_one()
    finally:
        engine.dispose()


def _sign_in(client: httpx.Client, user: str, password: str) -> None:
    page = client.get("/login")
    token = re.search(r'name="csrf_token" value="([^"]+)"', page.text).group(1)
    answer = client.post("/login", data={"username": user, "password": password, "csrf_token": token, "next": "/"})
    assert answer.status_code == 303, answer.text


def test_wheel_carries_templates_static_migrations_and_alembic_ini(wheel):
    expected = {"app/_bundle/alembic.ini"}
    for folder in BUNDLED:
        expected |= {f"app/_bundle/{p.relative_to(ROOT).as_posix()}" for p in (ROOT / folder).rglob("*")
                     if p.is_file() and "__pycache__" not in p.parts}
    with zipfile.ZipFile(wheel) as archive:
        names = {n for n in archive.namelist() if n.startswith("app/_bundle/")}
    assert names == expected
    assert "app/_bundle/static/vendor/htmx-2.0.11.min.js" in names  # vendored assets too, not only our own


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_db_upgrade_from_another_directory(installed, tmp_path, backend):
    url = f"sqlite:///{tmp_path / 'db' / 'chargeback.db'}" if backend == "sqlite" else new_postgres_database()
    try:
        done = installed.run("db", "upgrade", cwd=tmp_path, database_url=url)
        assert "database at head" in done.stdout
        assert _version(url) == _head()
    finally:
        if backend == "postgres":
            drop_postgres_database(url)


def test_demo_serves_pages_static_files_and_a_pdf(installed, tmp_path):
    # The default database URL is relative (var/chargeback.db): it lands in the working directory.
    with running_portal("sqlite:///var/chargeback.db", command=(installed.chargeback, "demo", "--days", "1"),
                        cwd=tmp_path, env=installed.env(admin_password=PASSWORD), timeout_s=300) as portal:
        assert (tmp_path / "var" / "chargeback.db").is_file()
        with httpx.Client(base_url=portal.base, timeout=60) as client:
            _sign_in(client, "admin", PASSWORD)
            page = client.get("/")
            assert page.status_code == 200 and "/static/app.css" in page.text
            css = client.get("/static/app.css")
            assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
            assert css.text == (ROOT / "static" / "app.css").read_text()
            js = client.get("/static/vendor/htmx-2.0.11.min.js")
            assert js.status_code == 200 and len(js.content) == (ROOT / "static/vendor/htmx-2.0.11.min.js").stat().st_size
            periods = client.get("/api/v1/periods").json()["items"]
            rated = [p for p in periods if p.get("status") != "open"]
            assert rated, periods
            pdf = client.get(f"/api/v1/periods/{rated[0]['period']}/export", params={"format": "pdf"})
            assert pdf.status_code == 200 and pdf.content.startswith(b"%PDF-")
    (tmp_path / "export.pdf").write_bytes(pdf.content)
    words = subprocess.run(["pdftotext", str(tmp_path / "export.pdf"), "-"], check=True, capture_output=True, text=True)
    assert rated[0]["period"] in words.stdout


@pytest.mark.postgres  # makes its database itself: no fixture to mark it from
@pytest.mark.prometheus
def test_ingest_from_prometheus_worker_once_then_serve_on_postgres(installed, tmp_path):
    """What the compose stack's migrate, worker and app do: PostgreSQL, a real Prometheus, then serve."""
    url = new_postgres_database()
    sim = Simulator(seed=42, gpus=32)
    try:
        installed.run("db", "upgrade", cwd=tmp_path, database_url=url)
        policy = tmp_path / "policy.yaml"
        policy.write_text(yaml.safe_dump(sim.policy().model_dump(mode="json"), sort_keys=False))
        installed.run("policy", "import", str(policy), "--effective-from", (PAST - timedelta(days=1)).isoformat(),
                      cwd=tmp_path, database_url=url)
        (tmp_path / "prometheus").mkdir()
        with PrometheusServer.from_simulator(tmp_path / "prometheus", sim, PAST, PAST + timedelta(hours=2)) as prom:
            # Exit code 0: every hour ingested from Prometheus, none left as a gap.
            installed.run("ingest", "--start", PAST.isoformat(), "--end", (PAST + timedelta(hours=2)).isoformat(),
                          cwd=tmp_path, database_url=url, prometheus_url=prom.url)
        # The same command with that Prometheus gone leaves gaps (exit 2): the hours above came from it.
        gone = installed.run("ingest", "--start", (PAST + timedelta(hours=2)).isoformat(), "--end",
                             (PAST + timedelta(hours=3)).isoformat(), cwd=tmp_path, check=False, database_url=url,
                             prometheus_url=prom.url)
        assert gone.returncode == 2, gone.stdout + gone.stderr
        done = installed.run("worker", "--once", "--backfill-hours", "2", cwd=tmp_path, database_url=url,
                             ingest_delay_s="0")
        assert re.search(r"ingested [1-9]\d* hours, 0 gaps", done.stdout), done.stdout
        env = installed.env(environment="production", secret_key="a-test-only-secret-of-some-length")
        with running_portal(url, command=(installed.chargeback, "serve"), cwd=tmp_path, env=env) as portal:
            metrics = httpx.get(f"{portal.base}/metrics", timeout=30)
            assert metrics.status_code == 200 and "chargeback_ingestion_lag_seconds" in metrics.text
            docs = httpx.get(f"{portal.base}/api/v1/docs", timeout=30)
            assert docs.status_code == 200
            assert httpx.get(f"{portal.base}/login", timeout=30).status_code == 200
            assert httpx.get(f"{portal.base}/static/dashboard.js", timeout=30).status_code == 200
    finally:
        drop_postgres_database(url)
