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
