"""The fleet's charts: the heatmap's colour scale (continuous, interpolated between ColorBrewer "Blues" stops, with
the cell text colour picked by the background's luminance so every label meets WCAG AA (4.5:1) whatever the
value), and the live view's per-unit bars of the last hours."""

from __future__ import annotations

# ColorBrewer Blues (9 classes), evenly spaced from 0 % to 100 % occupied.
STOPS = ("#f7fbff", "#deebf7", "#c6dbef", "#9ecae1", "#6baed6", "#4292c6", "#2171b5", "#08519c", "#08306b")
DARK_TEXT, LIGHT_TEXT = "#000000", "#ffffff"
LEGEND_TICKS = (0, 25, 50, 75, 100)


def _rgb(hex_colour: str) -> tuple[int, int, int]:
    h = hex_colour.lstrip("#")
    return int(h[0:2], 16), int(h[2:4], 16), int(h[4:6], 16)


def colour(fraction: float) -> str:
    """The background for an occupancy in [0, 1] (clamped), linearly interpolated between the stops."""
    x = min(1.0, max(0.0, float(fraction))) * (len(STOPS) - 1)
    i = min(int(x), len(STOPS) - 2)
    t = x - i
    a, b = _rgb(STOPS[i]), _rgb(STOPS[i + 1])
    return "#" + "".join(f"{round(p + (q - p) * t):02x}" for p, q in zip(a, b))


def luminance(hex_colour: str) -> float:
    """WCAG relative luminance."""
    def channel(c: int) -> float:
        s = c / 255
        return s / 12.92 if s <= 0.04045 else ((s + 0.055) / 1.055) ** 2.4
    r, g, b = (channel(c) for c in _rgb(hex_colour))
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(a: str, b: str) -> float:
    """WCAG contrast ratio of two colours."""
    la, lb = sorted((luminance(a), luminance(b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)


def text_colour(background: str) -> str:
    """Black or white, whichever contrasts more (one of them always reaches 4.58:1)."""
    return DARK_TEXT if contrast(background, DARK_TEXT) >= contrast(background, LIGHT_TEXT) else LIGHT_TEXT


def cell_style(fraction) -> str:
    """Inline style of a heatmap cell: its background and a text colour that meets AA on it."""
    bg = colour(float(fraction))
    return f"background:{bg};color:{text_colour(bg)}"


def legend_gradient() -> str:
    """A CSS linear-gradient showing the same scale as the cells."""
    steps = ", ".join(f"{colour(p / 100)} {p}%" for p in range(0, 101, 10))
    return f"linear-gradient(to right, {steps})"


# The live view's per-unit chart of the last hours: one bar per hour, drawn as two SVG paths per unit (the ingested
# hours' slots, then the occupied part of each) so that 1,000 GPUs x 12 hours stay two elements per table row.
BAR_W, BAR_GAP, BAR_H = 7, 1, 22


def hour_bars(values: list) -> dict[str, str]:
    """SVG path data for `values` (occupancy in [0, 1] per hour, None = not ingested): `slots` (every ingested hour,
    full height, so 0 % shows as an empty slot and a missing hour as none) and `bars` (each hour's occupied part)."""
    slots, bars = [], []
    for i, v in enumerate(values):
        if v is None:
            continue
        x = i * (BAR_W + BAR_GAP)
        slots.append(f"M{x},0h{BAR_W}v{BAR_H}h-{BAR_W}z")
        h = round(float(min(1, max(0, v))) * BAR_H, 1)
        if h > 0:
            bars.append(f"M{x},{BAR_H}v-{h}h{BAR_W}v{h}z")
    return {"slots": "".join(slots), "bars": "".join(bars), "width": len(values) * (BAR_W + BAR_GAP) - BAR_GAP,
            "height": BAR_H}


def hours_text(values: list, hours: list, tz) -> str:
    """The chart in words, hour by hour ("13:00 85 %, 14:00 not ingested, …"): its title and accessible name."""
    parts = []
    for v, h in zip(values, hours):
        at = h.astimezone(tz).strftime("%H:00")
        parts.append(f"{at} not ingested" if v is None else f"{at} {float(v) * 100:.0f} %")
    return ", ".join(parts)
