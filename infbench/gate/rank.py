"""Rank methods for `method = "rank"`: a location shift with a distribution-free interval.

- Two independent samples (runs whose requests do not pair): the Hodges-Lehmann shift, the
  median of all candidate - baseline differences, with the Mann-Whitney interval and p-value.
- Paired samples (the same requests in both runs): the Hodges-Lehmann estimate of the
  per-request differences, the median of their Walsh averages, with the Wilcoxon signed-rank
  interval and p-value.

Both assume a shift model (every request moves by the same amount, on the log scale for a
relative tolerance) and start from independent requests; `overlapping_shift` then widens the
interval for requests that shared the server. Order statistics are found by bisection on
counts, so nothing of size n^2 is ever built.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from infbench.gate.stats import overlap_factor


@dataclass(frozen=True)
class RankResult:
    shift: float  # Hodges-Lehmann estimate of candidate - baseline
    ci: tuple[float, float]
    p_value: float  # two-sided, normal approximation with tie correction


def _bisect(count_le: Callable[[float], float], lo: float, hi: float, k: float) -> float:
    """The smallest t with count_le(t) >= k, to 2^-42 of [lo, hi] (far below any tolerance)."""
    for _ in range(42):
        mid = (lo + hi) / 2.0
        if count_le(mid) >= k:
            hi = mid
        else:
            lo = mid
    return hi


def _order_stats(ks: list[int], count_le: Callable[[float], float], lo: float,
                 hi: float) -> list[float]:
    return [_bisect(count_le, lo, hi, k) for k in ks]


def _ranks_needed(total: int, half: float) -> list[int]:
    """The two middle ranks (numpy's median averages them) and the interval's ends."""
    k_lo = max(1, math.floor(total / 2.0 - half))
    return [math.floor((total + 1) / 2), math.ceil((total + 1) / 2), k_lo, total - k_lo + 1]


def _z(confidence: float) -> float:
    return NormalDist().inv_cdf(1.0 - (1.0 - confidence) / 2.0)


def _two_sided(z: float) -> float:
    return 2.0 * (1.0 - NormalDist().cdf(abs(z)))


def rank_shift(baseline: np.ndarray, candidate: np.ndarray, confidence: float) -> RankResult:
    """Location shift of `candidate` over `baseline` (independent samples)."""
    xs = np.sort(np.asarray(baseline, dtype=float))
    y = np.sort(np.asarray(candidate, dtype=float))
    n, m = xs.size, y.size
    nm = n * m

    def count_le(d: float) -> int:  # #{(i, j): y_j - x_i <= d}
        return int((xs.size - np.searchsorted(xs, y - d, side="left")).sum())

    half = _z(confidence) * math.sqrt(nm * (n + m + 1) / 12.0)
    a, b, lo, hi = _order_stats(_ranks_needed(nm, half), count_le, float(y[0] - xs[-1]), float(y[-1] - xs[0]))
    shift, ci = (a + b) / 2.0, (lo, hi)
    both = np.concatenate([xs, y])
    _, inverse, ties = np.unique(both, return_inverse=True, return_counts=True)
    rank_of = np.cumsum(ties) - (ties - 1) / 2.0
    u = float(rank_of[inverse[n:]].sum()) - m * (m + 1) / 2.0
    tie_term = float((ties**3 - ties).sum()) / ((n + m) * (n + m - 1))
    var = nm / 12.0 * ((n + m + 1) - tie_term)
    p = _two_sided((u - nm / 2.0) / math.sqrt(var)) if var > 0 else 1.0
    return RankResult(shift=shift, ci=ci, p_value=p)


def signed_rank_shift(differences: np.ndarray, confidence: float) -> RankResult:
    """Centre of paired differences (candidate - baseline per request)."""
    d = np.sort(np.asarray(differences, dtype=float))
    n = d.size
    total = n * (n + 1) // 2
    positions = np.arange(n)

    def count_le(t: float) -> int:  # #{i <= j: (d_i + d_j) / 2 <= t}
        upto = np.searchsorted(d, 2.0 * t - d, side="right")
        return int(np.maximum(upto - positions, 0).sum())

    half = _z(confidence) * math.sqrt(n * (n + 1) * (2 * n + 1) / 24.0)
    a, b, lo, hi = _order_stats(_ranks_needed(total, half), count_le, float(d[0]), float(d[-1]))
    shift, ci = (a + b) / 2.0, (lo, hi)
    nz = d[d != 0.0]
    k = nz.size
    if k == 0:
        return RankResult(shift=shift, ci=ci, p_value=1.0)
    _, inverse, ties = np.unique(np.abs(nz), return_inverse=True, return_counts=True)
    rank_of = np.cumsum(ties) - (ties - 1) / 2.0
    w_plus = float(rank_of[inverse][nz > 0].sum())
    var = k * (k + 1) * (2 * k + 1) / 24.0 - float((ties**3 - ties).sum()) / 48.0
    p = _two_sided((w_plus - k * (k + 1) / 4.0) / math.sqrt(var)) if var > 0 else 1.0
    return RankResult(shift=shift, ci=ci, p_value=p)


def _mid_ranks(v: np.ndarray, among: np.ndarray) -> np.ndarray:
    """Share of `among` below each value of `v` (ties count half): an empirical CDF."""
    s = np.sort(among)
    return (np.searchsorted(s, v, side="left") + np.searchsorted(s, v, side="right")) / (2.0 * s.size)


Times = tuple[np.ndarray, np.ndarray]  # when each request was in flight: (start, end)


def overlapping_shift(baseline: np.ndarray, candidate: np.ndarray, confidence: float, *,
                      paired: bool, base_times: Times, cand_times: Times) -> RankResult:
    """The rank shift (paired: signed-rank; else Mann-Whitney), its interval widened by the
    overlap of requests in flight together (see `stats.overlap_factor`): the rank statistics'
    own influence values are each request's rank, so they overlap the way the requests did."""
    x, y = np.asarray(baseline, dtype=float), np.asarray(candidate, dtype=float)
    if paired:
        d = y - x
        r = signed_rank_shift(d, confidence)
        infl = _mid_ranks(d, d)
        factor = max(overlap_factor(infl, *base_times), overlap_factor(infl, *cand_times))
    else:
        r = rank_shift(x, y, confidence)
        fx = overlap_factor(_mid_ranks(x, y), *base_times)
        fy = overlap_factor(_mid_ranks(y, x), *cand_times)
        factor = (fx / x.size + fy / y.size) / (1.0 / x.size + 1.0 / y.size)
    k = math.sqrt(factor)
    z = NormalDist().inv_cdf(1.0 - r.p_value / 2.0) if r.p_value > 0 else math.inf
    return RankResult(r.shift, (r.shift - k * (r.shift - r.ci[0]), r.shift + k * (r.ci[1] - r.shift)),
                      _two_sided(z / k))
