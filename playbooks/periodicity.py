"""Is a set of event times periodic, with what period, and how tightly?

Events can be missed (a stall while no request was streaming leaves no client gap), so the
fit allows gaps that are whole multiples of the period. Strength compares the share of
intervals that land on a multiple with what random times would give.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

_ALIGN_TOL = 0.1    # an interval is "on the period" within 10% of one period
_CHANCE = 2 * _ALIGN_TOL  # share of random intervals that would align by luck
MIN_EVENTS = 4


@dataclass(frozen=True)
class PeriodFit:
    period: float        # in the unit of the input (seconds, steps, tokens)
    aligned: float       # share of intervals within 10% of a whole number of periods
    strength: float      # 0 (no better than chance) .. 1 (every interval aligned)
    jitter: float        # std of the aligned intervals' deviation, in periods
    intervals: int
    missed: int          # periods with no event (intervals spanning k>1 periods add k-1)


def _fit(d: np.ndarray, p0: float) -> tuple[float, np.ndarray, np.ndarray]:
    k = np.maximum(1.0, np.round(d / p0))
    p = float(np.sum(d * k) / np.sum(k * k))  # least squares for d = k * p
    k = np.maximum(1.0, np.round(d / p))
    return p, k, d / p - k


def fit_period(times: np.ndarray) -> PeriodFit | None:
    """Fit a period to event times (any unit); None when there are too few events."""
    t = np.sort(np.asarray(times, dtype=float))
    d = np.diff(t)
    d = d[d > 0]
    if len(d) < MIN_EVENTS - 1:
        return None
    base = float(np.median(d))
    best: tuple[float, float, np.ndarray, np.ndarray] | None = None
    # The median interval is one period unless most periods were missed; try its fractions
    # and keep the longest period that explains (nearly) as much as the best one.
    candidates = []
    for div in (1, 2, 3):
        p, k, r = _fit(d, base / div)
        candidates.append((p, float(np.mean(np.abs(r) <= _ALIGN_TOL)), k, r))
    top = max(c[1] for c in candidates)
    for c in candidates:
        if c[1] >= top - 0.05:
            best = c
            break
    assert best is not None
    p, aligned, k, r = best
    on = np.abs(r) <= _ALIGN_TOL
    jitter = float(np.std(r[on])) if on.any() else float("nan")
    strength = float(np.clip((aligned - _CHANCE) / (1 - _CHANCE), 0.0, 1.0))
    return PeriodFit(period=p, aligned=aligned, strength=strength, jitter=jitter,
                     intervals=len(d), missed=int(np.sum(k - 1)))


def first_seen(values: np.ndarray) -> np.ndarray:
    """True where a value appears for the first time in the sequence (new batch shapes)."""
    _, idx = np.unique(np.asarray(values), return_index=True)
    out = np.zeros(len(values), dtype=bool)
    out[idx] = True
    return out
