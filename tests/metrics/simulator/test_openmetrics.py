"""The OpenMetrics backfill: accepted by the real promtool, strict OpenMetrics where the format
allows, energy counter monotonic and equal to the integral of the reported power."""

from __future__ import annotations

import shutil
import subprocess
from collections import defaultdict
from datetime import timedelta

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from tests.support.simulator import DAY

H = timedelta(hours=1)
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"


@pytest.fixture(scope="module")
def two_hours(sim, tmp_path_factory):
    path = tmp_path_factory.mktemp("om") / "two-hours.om"
    written = sim.write_openmetrics(path, DAY + 2 * H, DAY + 4 * H)
    return path, written


def test_promtool_creates_blocks_from_two_hours(two_hours, tmp_path):
    path, written = two_hours
    text = path.read_text()
    assert text.endswith("# EOF\n")
    assert written == sum(1 for line in text.splitlines() if not line.startswith("#"))
    result = subprocess.run([PROMTOOL, "tsdb", "create-blocks-from", "openmetrics", str(path), str(tmp_path / "tsdb")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    blocks = [d for d in (tmp_path / "tsdb").iterdir() if (d / "meta.json").exists()]
    assert blocks
    # promtool lists each block with its sample count: together they hold every sample written.
    counts = [int(line.split()[4]) for line in result.stdout.splitlines()[1:] if line.strip()]
    assert sum(counts) == written


def test_families_other_than_histograms_parse_as_strict_openmetrics(sim, tmp_path):
    """prometheus_client's strict parser (its histogram check handles one point per series only)."""
    path = tmp_path / "strict.om"
    names = ["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
             "DCGM_FI_DEV_FB_USED", "vllm:request_success_total"]
    sim.write_openmetrics(path, DAY, DAY + timedelta(minutes=20), metrics=names)
    families = {f.name: f for f in text_string_to_metric_families(path.read_text())}
    assert set(families) == {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
                             "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_FB_USED", "vllm:request_success"}
    assert families["vllm:request_success"].type == "counter"


def test_unknown_family_is_refused(sim, tmp_path):
    with pytest.raises(ValueError, match="unknown metric families"):
        sim.write_openmetrics(tmp_path / "x.om", DAY, DAY + H, metrics=["DCGM_FI_NOPE"])


def test_energy_counter_is_monotonic_and_the_integral_of_power(two_hours):
    path, _ = two_hours
    energy: dict[str, dict[int, int]] = defaultdict(dict)
    power: dict[str, dict[int, float]] = defaultdict(dict)
    for line in path.read_text().splitlines():
        if line.startswith("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{") or line.startswith("DCGM_FI_DEV_POWER_USAGE{"):
            series, value, t = line.rsplit(" ", 2)
            uuid = series.split('UUID="', 1)[1].split('"', 1)[0]
            if series.startswith("DCGM_FI_DEV_TOTAL"):
                energy[uuid][int(t)] = int(value)
            else:
                power[uuid][int(t)] = float(value)
    assert len(energy) == 32
    for uuid, counter in energy.items():
        times = sorted(counter)
        assert all(counter[a] <= counter[b] for a, b in zip(times, times[1:]))
        for a, b in zip(times, times[1:]):
            # Power is constant over each 30 s step that ends at b: counter delta = W x s x 1000.
            assert counter[b] - counter[a] == round(power[uuid][b] * 1000) * (b - a)


def test_source_energy_matches_the_counter(sim, two_hours):
    path, _ = two_hours
    at = {}
    for line in path.read_text().splitlines():
        if line.startswith("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{"):
            series, value, t = line.rsplit(" ", 2)
            at[(series.split('UUID="', 1)[1].split('"', 1)[0], int(t))] = int(value)
    batch = sim.source().fetch(start=DAY + 2 * H, end=DAY + 4 * H, policy=sim.policy())
    start = int((DAY + 2 * H).timestamp())
    for gpu in batch.energy:
        for end, delta in gpu.energy_mj.items():
            assert delta == at[(gpu.uuid, end)] - at[(gpu.uuid, end - 3600)]
            assert gpu.power_w[end] == pytest.approx(delta / 3.6e6)
        assert set(gpu.energy_mj) == {start + 3600, start + 7200}


def test_block_files_hold_the_same_samples_one_block_each(sim, two_hours, tmp_path):
    path, written = two_hours
    files = sim.write_openmetrics_blocks(tmp_path / "blocks", DAY + 2 * H, DAY + 4 * H)
    assert sum(n for _, n in files) == written

    def samples(p):
        return sorted(line for line in p.read_text().splitlines() if not line.startswith("#"))

    assert sorted(x for p, _ in files for x in samples(p)) == samples(path)
    for p, _ in files:
        stamps = {int(line.rsplit(" ", 1)[1]) for line in samples(p)}
        assert len({t // 7200 for t in stamps}) == 1  # one promtool pass per file
        result = subprocess.run([PROMTOOL, "tsdb", "create-blocks-from", "openmetrics", str(p), str(tmp_path / "tsdb")],
                                capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr
