"""The `simulator` typer app writes a backfill file."""

from __future__ import annotations

from typer.testing import CliRunner

from app.metrics.simulator.cli import app


def test_openmetrics_command_writes_a_file(tmp_path):
    out = tmp_path / "sim.om"
    result = CliRunner().invoke(app, ["openmetrics", str(out), "--start", "2026-11-28T00:00:00Z",
                                      "--end", "2026-11-28T01:00:00Z", "--metric", "DCGM_FI_DEV_GPU_UTIL"])
    assert result.exit_code == 0, result.output
    text = out.read_text()
    assert text.startswith("# HELP DCGM_FI_DEV_GPU_UTIL") and text.endswith("# EOF\n")
    assert "samples to" in result.output


def test_openmetrics_command_rejects_a_bad_window(tmp_path):
    result = CliRunner().invoke(app, ["openmetrics", str(tmp_path / "x.om"), "--start", "2026-11-28T02:00:00Z",
                                      "--end", "2026-11-28T01:00:00Z"])
    assert result.exit_code != 0


def test_openmetrics_command_can_split_by_block(tmp_path):
    out = tmp_path / "blocks"
    result = CliRunner().invoke(app, ["openmetrics", str(out), "--start", "2026-11-28T00:00:00Z",
                                      "--end", "2026-11-28T03:00:00Z", "--metric", "DCGM_FI_DEV_FB_USED", "--blocks"])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == ["1795816800.om", "1795824000.om", "1795831200.om"]
