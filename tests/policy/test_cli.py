"""`chargeback policy ...` through typer's CliRunner against a migrated SQLite file."""

from __future__ import annotations

import json
from collections.abc import Iterator
from decimal import Decimal

import pytest
import yaml
from typer.testing import CliRunner

from app.cli import app
from app.core.db import get_engine
from app.core.settings import get_settings

runner = CliRunner()


@pytest.fixture
def cli_db(fresh_db_url, monkeypatch) -> Iterator[str]:
    """Point Settings at a fresh migrated SQLite file (the settings and engine are cached: reset them)."""
    monkeypatch.setenv("CHARGEBACK_DATABASE_URL", fresh_db_url)
    get_settings.cache_clear()
    get_engine.cache_clear()
    yield fresh_db_url
    get_engine().dispose()
    get_settings.cache_clear()
    get_engine.cache_clear()


def run(*args: str):
    return runner.invoke(app, ["policy", *args])


@pytest.fixture
def example_file(tmp_path, example_text):
    path = tmp_path / "policy.yaml"
    path.write_text(example_text)
    return path


@pytest.fixture
def bad_file(tmp_path, data):
    data["isolation"]["mig"]["gpu-a100-02"]["gpus"]["0-3"] = {"5g.40gb": 1}
    data["sla"][0]["tenant"] = "ghost"
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture
def changed_file(tmp_path, data):
    """The example with another reserved fraction: a different document."""
    data["pools"][0]["reserved_fraction"] = "0.35"
    path = tmp_path / "changed.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_import_prints_the_version_number_and_show_prints_it(cli_db, example_file, changed_file, example_doc):
    result = run("import", str(changed_file), "--effective-from", "2026-01-01T00:00:00Z", "--actor", "ops")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "1"
    result = run("import", str(example_file), "--effective-from", "2026-02-01T00:00:00Z")
    assert result.stdout.strip() == "2"

    shown = run("show", "--version", "2")
    assert shown.exit_code == 0, shown.output
    assert "class: inference" in shown.stdout and "reserved_fraction: 0.30" in shown.stdout
    as_json = run("show", "--version", "2", "--format", "json")
    assert json.loads(as_json.stdout) == example_doc.to_data()

    listing = run("list")
    lines = listing.stdout.strip().splitlines()
    assert [line.split("\t")[:4] for line in lines] == [
        ["1", "2026-01-01T00:00:00+00:00", "bootstrap", "ops"],
        ["2", "2026-02-01T00:00:00+00:00", "bootstrap", "cli"],
    ]


def test_show_defaults_to_the_active_version_and_round_trips(cli_db, example_file, tmp_path):
    assert run("import", str(example_file), "--effective-from", "2026-01-01T00:00:00Z").exit_code == 0
    shown = run("show")
    assert shown.exit_code == 0
    again = tmp_path / "again.yaml"
    again.write_text(shown.stdout)
    assert run("validate", str(again)).exit_code == 0
    # the same document again: nothing stored, the version it is printed, and why
    same = run("import", str(again))
    assert same.exit_code == 0 and same.stdout.strip() == "1"
    assert f"unchanged: {again} is version 1's document" in same.stderr
    assert run("list").stdout.strip().count("\n") == 0  # still one version


def test_import_refuses_an_effective_time_not_on_the_hour(cli_db, example_file):
    result = run("import", str(example_file), "--effective-from", "2026-12-03T05:30:00Z")
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "error: effective_from 2026-12-03T05:30:00Z is not on the hour" in result.stderr
    assert "effective_from: a policy version takes effect at a whole hour: use 2026-12-03T05:00:00Z or " \
           "2026-12-03T06:00:00Z" in result.stderr
    assert run("list").stdout.strip() == "no policy versions"


def test_import_of_an_invalid_file_prints_paths_and_exits_1(cli_db, bad_file):
    result = run("import", str(bad_file))
    assert result.exit_code == 1
    assert isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output
    assert "error: isolation.mig[\"gpu-a100-02\"].gpus[\"0-3\"]: 5g.40gb is not a profile of NVIDIA A100-SXM4-80GB" in result.stderr
    assert "error: sla[search-chat].tenant: unknown tenant 'ghost'" in result.stderr
    assert run("list").stdout.strip() == "no policy versions"


def test_import_refuses_backdating(cli_db, example_file, changed_file):
    assert run("import", str(example_file), "--effective-from", "2026-03-01T00:00:00Z").exit_code == 0
    result = run("import", str(changed_file), "--effective-from", "2026-02-01T00:00:00Z")
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit)
    assert "cannot be backdated" in result.stderr


def test_import_rejects_a_bad_time_and_a_missing_file(cli_db, example_file, tmp_path):
    result = run("import", str(example_file), "--effective-from", "yesterday")
    assert result.exit_code == 1 and "--effective-from" in result.stderr
    result = run("import", str(tmp_path / "nope.yaml"))
    assert result.exit_code == 1 and "cannot read" in result.stderr


def test_validate_prints_errors_and_warnings(cli_db, example_file, bad_file):
    good = run("validate", str(example_file))
    assert good.exit_code == 0
    assert "warning: isolation.inference.memory_reserve_factor: no measured peak memory" in good.stderr
    assert good.stdout.strip() == "0 error(s), 1 warning(s)"
    bad = run("validate", str(bad_file))
    assert bad.exit_code == 1
    assert bad.stdout.strip() == "2 error(s), 1 warning(s)"


def test_validate_checks_red_lines_with_the_bucket_source_it_is_given(tmp_path, data):
    # The `chargeback` command hands policy the Prometheus bucket lookup (policy does not import metrics).
    data["sla"][0]["p99_ms"] = 250
    path = tmp_path / "red.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    buckets = tuple(Decimal(b) for b in ("0.1", "0.3", "0.5"))
    result = runner.invoke(app, ["policy", "validate", str(path)], obj={"latency_buckets": lambda: lambda selector: buckets})
    assert result.exit_code == 0 and "warning: sla[search-chat].p99_ms: red line 250 ms is not a bucket boundary" in result.stderr


def test_validate_reports_yaml_syntax_errors(cli_db, tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("tenants: [a\npricing: {]\n")
    result = run("validate", str(path))
    assert result.exit_code == 1
    assert "error: (document): did not find expected ',' or ']' at line 2, column 8" in result.stderr


def test_show_without_versions_or_unknown_version(cli_db):
    result = run("show")
    assert result.exit_code == 1 and "no policy version" in result.stderr
    result = run("show", "--version", "7")
    assert result.exit_code == 1 and "policy version 7 does not exist" in result.stderr
