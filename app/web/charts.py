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
