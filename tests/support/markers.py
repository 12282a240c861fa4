"""The fixtures that mark a test, named by defining module (tests/conftest.py applies them; tests/test_markers.py
checks that each still exists)."""

# Markers follow from the fixtures a test uses (named where they are defined: two modules may reuse a
# name), so `-m "not postgres"` / `-m "not prometheus"` deselect every such test.
MARKING_FIXTURES = {
    "postgres": {"tests.browser.conftest.portal", "tests.conftest.pg_engine",
                 "tests.api.test_schemathesis.seeded_database"},
    "prometheus": {"tests.support.ingest.scenario_prometheus", "tests.metrics.test_outage.prometheus",
                   "tests.billing.test_e2e_postgres.prometheus", "tests.metrics.test_simulator_truth.sim_prometheus",
                   "tests.metrics.test_live_exporter.live", "tests.billing.test_spec_oracle.sources"},
    "browser": {"tests.browser.conftest.browser", "tests.web.test_browser.portal"},
}

# The quick tier (`scripts/test.sh --quick`) leaves out these modules: each test in them starts real processes
# (chargeback, uvicorn, a worker), races several, or sends thousands of requests; 4-48 s a test on an idle
# 2-core box against well under 1 s for the rest. They still run in the full suite.
SLOW_MODULES = {
    "tests.http.test_hostile_input", "tests.billing.test_periods_transactions", "tests.billing.test_allocation_scoping",
    "tests.billing.test_periods_cli", "tests.notify.test_webhook_worker_kill", "tests.web.test_concurrency",
    "tests.metrics.test_doctor", "tests.metrics.test_real_installs", "tests.web.test_system", "tests.metrics.test_live",
    "tests.metrics.test_doctor_agrees_with_ingestion", "tests.api.test_typed_client", "tests.core.test_operator_mistakes",
    "tests.api.test_schemathesis", "tests.billing.test_forecast", "tests.billing.test_unpooled",
    "tests.metrics.test_secrets_never_shown", "tests.billing.test_pdf_unicode", "tests.notify.test_webhooks",
    "tests.web.test_doctor_page",
}
