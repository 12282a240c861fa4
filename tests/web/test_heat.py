"""The heatmap's colour scale: continuous, and every cell label meets WCAG AA contrast on its background."""

from __future__ import annotations

from app.web import heat


def test_every_cell_label_meets_aa_contrast():
    for percent in range(0, 101):
        background = heat.colour(percent / 100)
        assert heat.contrast(background, heat.text_colour(background)) >= 4.5, percent


def test_the_scale_is_continuous_and_ordered():
    colours = [heat.colour(p / 100) for p in range(0, 101)]
    assert len(set(colours)) > 60  # not three or five steps: 60 % and 90 % look different
    assert heat.colour(0.6) != heat.colour(0.9)
    lum = [heat.luminance(c) for c in colours]
    assert all(a >= b for a, b in zip(lum, lum[1:]))  # darker as occupancy grows
    assert heat.colour(-1) == heat.colour(0) and heat.colour(2) == heat.colour(1)  # clamped
    # The old white-on-blue label (2.88:1) is gone: the mid-scale cells now carry black text.
    assert heat.text_colour(heat.colour(0.5)) == heat.DARK_TEXT
    assert heat.cell_style(0.95).endswith("color:#ffffff")
