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
THRESHOLD_COLOUR = "#999999"  # a non-class series (dashboard.js' palette): a budget's alert thresholds


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


def budget_chart(points, *, klass: str, budget: Decimal | None, thresholds: list[int]) -> str:
    """This month's cumulative cost: actual (solid, the tenant's class colour), forecast to month end (dashed, the
    same colour), the budget (platform black) and each threshold below it (idle grey, dotted).

    `points`: billing.forecast.DayPoint per day. A day with no known hour is a gap in the actual line.
    """
    colour = class_colour(klass)
    labels = [p.day.isoformat() for p in points]
    datasets = [
        {"label": "cost so far", "data": [p.actual for p in points], "color": colour, "pointRadius": 2},
        {"label": "forecast", "data": [p.forecast for p in points], "color": colour, "borderDash": [6, 4],
         "pointRadius": 0},
    ]
    if budget is not None:
        datasets.append({"label": "budget", "data": [budget] * len(points), "color": CLASS_COLOURS["platform"],
                         "pointRadius": 0, "borderWidth": 2})
        for t in thresholds:
            if t != 100:
                datasets.append({"label": f"{t} % of budget", "data": [budget * t / 100] * len(points),
                                 "color": THRESHOLD_COLOUR, "borderDash": [4, 4], "pointRadius": 0, "borderWidth": 1.5})
    return chart_json({"labels": labels, "datasets": datasets})
