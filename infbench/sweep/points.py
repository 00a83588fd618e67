"""Which loads a sweep measures.

Listed: the given concurrencies (closed loop) or rates (open loop). Automatic: a closed-loop
ramp at concurrency 1, 2, 4, ... until the points show saturation (`saturation.py`: throughput
stopped rising, the SLO broke or errors started), so the saturated end is measured rather than
assumed; then, as guidellm does, open-loop rates spaced evenly between the synchronous and
the highest measured throughput.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MODES = ("concurrency", "rate", "auto")


@dataclass(frozen=True)
class Point:
    kind: str  # concurrency | rate
    value: float

    @property
    def label(self) -> str:
        return f"c={self.value:g}" if self.kind == "concurrency" else f"{self.value:.3g} req/s"


def parse_points(mode: str, text: str | None) -> list[Point]:
    """Listed points for `--mode concurrency|rate --points 1,2,4`; [] for auto."""
    if mode not in MODES:
        raise ValueError(f"mode: {mode!r} is not one of {', '.join(MODES)}")
    if mode == "auto":
        if text:
            raise ValueError("points: --mode auto chooses its own points; drop --points or pick a mode")
        return []
    if not text:
        raise ValueError(f"points: --mode {mode} needs --points, e.g. 1,2,4,8")
    out = []
    for item in text.split(","):
        try:
            v = float(item)
        except ValueError:
            raise ValueError(f"points: {item.strip()!r} is not a number") from None
        if v <= 0 or (mode == "concurrency" and not v.is_integer()):
            raise ValueError(f"points: {item.strip()!r} must be a positive "
                             f"{'integer' if mode == 'concurrency' else 'number'}")
        out.append(Point(mode, v))
    if len(out) < 2:
        raise ValueError("points: a sweep needs at least two points")
    return sorted(out, key=lambda p: p.value)


def fill_rates(sync_rps: float, saturated_rps: float, count: int) -> list[Point]:
    """`count` open-loop rates strictly between the two measured ends."""
    if count < 1:
        return []
    if not saturated_rps > sync_rps > 0:
        raise ValueError(f"the saturated end ({saturated_rps:.3g} req/s) is not above the synchronous "
                         f"end ({sync_rps:.3g} req/s): raise --max-concurrency")
    rates = np.linspace(sync_rps, saturated_rps, count + 2)[1:-1]
    return [Point("rate", float(r)) for r in rates]
