"""Chart data for the dashboard pages: JSON for chart.js blocks and server-drawn sparklines."""

from __future__ import annotations

import json
from datetime import date
from decimal import Decimal

# One colour per workload class on every chart, whatever order the datasets come in (Okabe-Ito,
# colour-blind safe; idle a light grey). Non-class series (services, busy/dark) use app.js' palette.
CLASS_COLOURS = {
    "inference": "#0072B2",
    "training": "#009E73",
    "preprocessing": "#E69F00",
    "unallocated": "#CC79A7",
    "idle": "#BBBBBB",
    "platform": "#000000",
}
OTHER_COLOUR = CLASS_COLOURS["platform"]  # platform and any class not listed: "other"


def class_colour(klass: str) -> str:
    """The fixed chart colour of a workload class (platform/other for anything unknown)."""
    return CLASS_COLOURS.get(klass, OTHER_COLOUR)


def chart_json(data: dict) -> str:
    """JSON for a <script type="application/json"> block; Decimals become floats (drawing only)."""

    def default(value):
        if isinstance(value, Decimal):
            return float(value)
        if isinstance(value, date):
            return value.isoformat()
        raise TypeError(type(value).__name__)

    # "</" would end the script element early if a name contained it.
    return json.dumps(data, default=default, separators=(",", ":")).replace("</", "<\\/")


def sparkline(values: list[Decimal | None], *, width: int = 120, height: int = 28) -> str:
    """SVG path data for a small trend line (server-drawn: no script needed per row).

    A None value (a day with no ingested hour) breaks the line: a gap, never a drop to zero. A value alone
    between gaps is drawn as a dot (a zero-length segment with round caps).
    """
    known = [v for v in values if v is not None]
    if not known:
        return ""
    top = max(known) or Decimal(1)
    step = width / max(1, len(values) - 1)
    parts: list[str] = []
    pen_down = False
    for i, v in enumerate(values):
        if v is None:
            pen_down = False
            continue
        y = height - 2 - float(v / top) * (height - 4)
        parts.append(f"{'L' if pen_down else 'M'}{i * step:.1f},{y:.1f}")
        if not pen_down and (i + 1 >= len(values) or values[i + 1] is None):
            parts.append("h0")
        pen_down = True
    return " ".join(parts)
