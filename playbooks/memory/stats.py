"""Least-squares slope with its confidence interval (numpy only), robust to the serial
correlation of samples taken in time order."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# Two-sided 95% Student t quantiles by degrees of freedom; above 30 the normal's 1.96
# (with a 1/df correction) is within 0.5% of t.
_T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
        9: 2.262, 10: 2.228, 12: 2.179, 15: 2.131, 20: 2.086, 25: 2.060, 30: 2.042}


def t95(df: int) -> float:
    if df < 1:
        return math.inf
    if df in _T95:
        return _T95[df]
    if df > 30:
        return 1.96 + 2.4 / df
    lower = max(k for k in _T95 if k < df)
    upper = min(k for k in _T95 if k > df)
    w = (df - lower) / (upper - lower)
    return _T95[lower] * (1 - w) + _T95[upper] * w


@dataclass(frozen=True)
class Fit:
    slope: float
    intercept: float
    lo: float      # 95% interval of the slope
    hi: float
    r2: float
    n: int

    @property
    def excludes_zero(self) -> bool:
        return self.lo > 0 or self.hi < 0


def _newey_west(xc: np.ndarray, resid: np.ndarray, sxx: float) -> float:
    """Newey-West standard error of the slope, Bartlett kernel, with Andrews' (1991) AR(1)
    plug-in lag: the fixed rule of thumb (4 (n/100)^(2/9)) covers far too little when the
    noise drifts over many samples, as a heap's does."""
    n = len(xc)
    u = xc * resid
    rho = 0.0
    if n > 3 and float((resid[:-1] ** 2).sum()) > 0:
        rho = float((resid[1:] * resid[:-1]).sum() / (resid[:-1] ** 2).sum())
    rho = min(max(rho, -0.97), 0.97)
    alpha = 4 * rho * rho / ((1 - rho) ** 2 * (1 + rho) ** 2)
    lag = min(n // 2, int(math.ceil(1.1447 * (alpha * n) ** (1 / 3))))
    s = float((u * u).sum())
    for k in range(1, min(lag, n - 1) + 1):
        s += 2 * (1 - k / (lag + 1)) * float((u[k:] * u[:-k]).sum())
    return math.sqrt(max(s, 0.0) * n / (n - 2)) / sxx


def ols(x: np.ndarray, y: np.ndarray) -> Fit | None:
    """y = a + b x; None with fewer than 3 points or no spread in x."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    n = len(x)
    if n < 3:
        return None
    xm, ym = x.mean(), y.mean()
    sxx = float(((x - xm) ** 2).sum())
    if sxx <= 0:
        return None
    b = float(((x - xm) * (y - ym)).sum() / sxx)
    a = float(ym - b * xm)
    resid = y - (a + b * x)
    sse = float((resid ** 2).sum())
    sst = float(((y - ym) ** 2).sum())
    se = math.sqrt(sse / (n - 2) / sxx) if n > 2 else math.inf
    # Memory samples taken in time order are autocorrelated (a heap grows in steps, a cache
    # fills over several scrapes): the i.i.d. error understates the slope's spread then. The
    # Newey-West (HAC) error allows for it; the larger of the two is used.
    se = max(se, _newey_west(x - xm, resid, sxx))
    half = t95(n - 2) * se
    return Fit(b, a, b - half, b + half, 1 - sse / sst if sst > 0 else 1.0, n)
