"""Chart data for the dashboard pages: JSON for chart.js blocks and server-drawn sparklines."""

from __future__ import annotations

import json
from datetime import date
from decimal import Decimal


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


def sparkline(values: list[Decimal], *, width: int = 120, height: int = 28) -> str:
    """SVG polyline points for a small trend line (server-drawn: no script needed per row)."""
    if not values:
        return ""
    top = max(values) or Decimal(1)
    step = width / max(1, len(values) - 1)
    points = []
    for i, v in enumerate(values):
        y = height - 2 - float(v / top) * (height - 4)
        points.append(f"{i * step:.1f},{y:.1f}")
    return " ".join(points)
