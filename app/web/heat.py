"""The heatmap's colour scale: continuous (interpolated between ColorBrewer "Blues" stops), with the cell text
colour picked by the background's luminance so every label meets WCAG AA (4.5:1) whatever the value."""

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
