"""Red lines against bucket boundaries: only a boundary is judged; otherwise the finding names the nearest ones."""

from __future__ import annotations

from decimal import Decimal as D

from app.metrics.histograms import VLLM_E2E_LATENCY_S, boundaries
from app.policy.red_lines import nearest_boundaries, red_line_finding, resolvable

VLLM = boundaries(VLLM_E2E_LATENCY_S + ("+Inf",))


def test_only_a_boundary_is_resolvable_and_the_neighbours_are_named():
    assert resolvable(VLLM, D("0.3")) and resolvable(VLLM, 0.5) and resolvable(VLLM, "60")
    assert not resolvable(VLLM, D("0.25")) and not resolvable(VLLM, D("0.7")) and not resolvable(VLLM, 10000)
    assert nearest_boundaries(VLLM, D("0.25")) == (None, D("0.3"))
    assert nearest_boundaries(VLLM, D("0.7")) == (D("0.5"), D("0.8"))
    assert nearest_boundaries(VLLM, D("9000")) == (D("7680.0"), None)


def test_the_finding_names_the_bucket_and_the_nearest_boundaries():
    assert red_line_finding(VLLM, 300) is None and red_line_finding(VLLM, "1500") is None
    assert red_line_finding((), 250) is None  # unknown buckets: nothing to say
    under = red_line_finding(VLLM, 250)
    assert "red line 250 ms" in under and "(0, 300] ms are unresolved" in under and "nearest boundaries are 300 ms" in under
    inside = red_line_finding(VLLM, D("650.5"))
    assert "(500, 800] ms" in inside and "500 ms or 800 ms" in inside
    assert "above 7680000 ms (the +Inf bucket)" in red_line_finding(VLLM, 9_000_000)
