"""Counter increases from raw values, with reset handling and no extrapolation. Pure functions.

Prometheus and VictoriaMetrics disagree on `increase`/`rate` (extrapolation to the window edges,
which samples a window holds, how far back they look); they agree on the raw values a
`last_over_time`/`max_over_time`/`min_over_time` over a window returns. So the portal asks for
those and does the counter arithmetic here: a value below its predecessor is a reset (the counter
restarted from zero, so the new value is all increase), and nothing is extrapolated.
"""

from __future__ import annotations


def hour_increase(*, before: float | None, lowest: float, highest: float, last: float, resets: int) -> float | None:
    """A counter's increase over one hour from its hourly extremes (`increase` without extrapolation).

    `before` is the last value of the previous hour (None when the series appeared this hour),
    `lowest`/`highest`/`last` the hour's min, max and last values, `resets` the drops between
    consecutive samples inside the hour. None when the extremes cannot tell the increase exactly
    (several resets, or a reset in the hour a series appeared): the caller falls back to another measure.
    """
    if before is None:
        return last - lowest if resets == 0 else None
    if resets == 0:
        # No drop inside the hour: either plain growth or a reset between the hours (last < before).
        return last - before if last >= before else last
    if resets == 1 and highest >= before:
        # Growth from `before` to the pre-reset peak, then from zero to `last`.
        return (highest - before) + last
    return None
