"""Migration 0021: single-cluster rows become the default cluster's, keys hold the cluster, and back again."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sqlalchemy import inspect, text

from app.core.db import make_engine
from app.core.migrate import downgrade, upgrade

HOUR = datetime(2026, 10, 1, 5, tzinfo=UTC)
ROWS = {
    "ingest_hour": "INSERT INTO ingest_hour (hour, status, attempts, last_error, duration_s) VALUES (:h, 'ok', 1, '', 0)",
    "pool_hour": "INSERT INTO pool_hour (hour, pool, gpus, capacity_gpu_seconds, dark_minutes, policy_version_id) "
                 "VALUES (:h, 'unpooled', 2, 7200, 0, 1)",
    "pool_hour_model": "INSERT INTO pool_hour_model (hour, pool, model, gpus, measured_gpus, measured_kwh) "
                       "VALUES (:h, 'unpooled', 'A100', 2, 0, 0)",
    "usage_rollup": "INSERT INTO usage_rollup (hour, pool, tenant, klass, dark, gpu_seconds, activity_sum, activity_samples, "
                    "policy_version_id) VALUES (:h, 'unpooled', 'vision', 'training', false, 10, 0, 0, 1)",
    "namespace_usage": "INSERT INTO namespace_usage (hour, pool, namespace, tenant, klass, dark, gpu_seconds, activity_sum, "
                       "activity_samples) VALUES (:h, 'unpooled', 'ns', 'vision', 'training', false, 10, 0, 0)",
    "unit_hour": "INSERT INTO unit_hour (hour, node, gpu_uuid, gpu_instance, gpu_index, mig_profile, model, pool, "
                 "capacity_gpu_seconds, gpu_seconds, activity_sum, activity_samples, tenants, policy_version_id) "
                 "VALUES (:h, 'n1', 'GPU-1', '', '0', '', 'A100', 'unpooled', 3600, 10, 0, 0, 'vision', 1)",
    "sla_unresolved_hour": "INSERT INTO sla_unresolved_hour (hour, service, service_tenant, pool, minutes) "
                           "VALUES (:h, 'chat', 'search', 'p', 3)",
    "data_quality_finding": "INSERT INTO data_quality_finding (hour, pool, kind, unit, gpu_seconds_cut, detail) "
                            "VALUES (:h, 'p', 'over_capacity', 'n1/GPU-1', 1, '')",
    "breach_minute": "INSERT INTO breach_minute (id, hour, service, service_tenant, pool, minute_end, p99_ms) "
                     "VALUES (1, :h, 'chat', 'search', 'p', :h, 400)",
    "breach_share": "INSERT INTO breach_share (breach_id, tenant, gpu_seconds) VALUES (1, 'vision', 5)",
}


def _policy(conn) -> None:
    conn.execute(text("INSERT INTO policy_version (id, document, created_by, created_at, effective_from, source, sha256, "
                      "comment) VALUES (1, '{}', 't', :h, :h, 'bootstrap', 'x', '')"), {"h": HOUR})


def _counts(conn) -> dict[str, int]:
    return {t: conn.execute(text(f"SELECT count(*) FROM {t}")).scalar() for t in ROWS}


def test_single_cluster_rows_become_default_and_come_back(fresh_engine):
    stop = "0018"
    url = fresh_engine.url.render_as_string(hide_password=False)
    fresh_engine.dispose()
    downgrade(url, stop)
    engine = make_engine(url)
    with engine.begin() as conn:
        _policy(conn)
        for sql in ROWS.values():
            conn.execute(text(sql), {"h": HOUR})
    engine.dispose()

    upgrade(url)
    engine = make_engine(url)
    with engine.begin() as conn:
        assert _counts(conn) == dict.fromkeys(ROWS, 1)  # breach_share survived breach_minute's new column
        for table in ROWS:
            if table != "breach_share":
                assert conn.execute(text(f"SELECT cluster FROM {table}")).scalar() == "default"
        keys = inspect(conn).get_pk_constraint("pool_hour")["constrained_columns"]
        assert keys == ["hour", "cluster", "pool"]
        # Each cluster has an unpooled pool of its own: a second cluster's rows for the same hour fit the keys.
        for table, sql in ROWS.items():
            if table in ("breach_minute", "breach_share"):
                continue
            conn.execute(text(sql.replace(f"INSERT INTO {table} (", f"INSERT INTO {table} (cluster, ")
                              .replace("VALUES (", "VALUES ('east', ")), {"h": HOUR})
    # A downgrade would merge the clusters' rows: refused while another cluster's rows exist.
    engine.dispose()
    with pytest.raises(RuntimeError, match="clusters other than 'default'"):
        downgrade(url, stop)
    engine = make_engine(url)
    with engine.begin() as conn:
        for table in ROWS:
            if table != "breach_share":
                conn.execute(text(f"DELETE FROM {table} WHERE cluster <> 'default'"))
    engine.dispose()

    downgrade(url, stop)
    engine = make_engine(url)
    with engine.begin() as conn:
        assert _counts(conn) == dict.fromkeys(ROWS, 1)
        assert "cluster" not in {c["name"] for c in inspect(conn).get_columns("pool_hour")}
        assert inspect(conn).get_pk_constraint("ingest_hour")["constrained_columns"] == ["hour"]
    engine.dispose()
