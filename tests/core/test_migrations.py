"""Migrations upgrade and downgrade cleanly on both backends."""

from sqlalchemy import inspect

from app.core.db import make_engine
from app.core.migrate import downgrade, upgrade


def test_upgrade_downgrade_roundtrip(fresh_engine):
    url = fresh_engine.url.render_as_string(hide_password=False)
    tables = set(inspect(fresh_engine).get_table_names())
    assert {"policy_version", "usage_rollup", "ingest_hour", "audit_log"} <= tables
    fresh_engine.dispose()
    downgrade(url, "base")
    eng = make_engine(url)
    assert set(inspect(eng).get_table_names()) <= {"alembic_version"}
    eng.dispose()
    upgrade(url)
    eng = make_engine(url)
    assert tables <= set(inspect(eng).get_table_names())
    eng.dispose()
