"""Vectorized resampling statistics for gates: every estimator returns bootstrap replicates.

Replicates (an array of B draws of the statistic under resampling) compose simply: the
change between two independent runs is the element-wise ratio (or difference) of their
replicates, and its percentile interval is the confidence interval of the change.

- Per-request quantiles use the order-statistic identity: the k-th smallest of n draws with
  replacement from sorted data is `x[floor(n * U)]` with `U ~ Beta(k, n - k + 1)`, so a
  quantile's bootstrap distribution costs O(B) after one sort instead of O(B * n).
- Means resample request indices (chunked so memory stays bounded).
- Gaps inside one request (ITL) are not independent: they are resampled by whole request
  (cluster bootstrap), quantiles through per-request histograms on a fine local grid.
- Rates (throughput, goodput) come from batch means over time windows with a t-distribution,
  since a handful of windows is too few for a percentile bootstrap to be honest.
- Engine steps are autocorrelated in time: a moving-block bootstrap keeps that.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

DEFAULT_REPLICATES = 2000
_CHUNK_ELEMS = 4_000_000  # elements gathered per chunk: bounds memory at ~32 MB
_GRID_BINS = 256


def parse_statistic(stat: str) -> float | None:
    """`mean` -> None; `median`/`p50` -> 0.5; `p99.9` -> 0.999. Raises ValueError otherwise."""
    s = stat.strip().lower()
    if s == "mean":
        return None
    if s == "median":
        return 0.5
    if s.startswith("p"):
        try:
            q = float(s[1:]) / 100.0
        except ValueError:
            q = -1.0
        if 0.0 < q < 1.0:
            return q
    raise ValueError(f"statistic {stat!r} is not mean, median or pNN (e.g. p50, p99, p99.9)")


def point_estimate(x: np.ndarray, q: float | None) -> float:
    return float(np.mean(x)) if q is None else float(np.quantile(x, q))


def quantile_replicates(x: np.ndarray, q: float, b: int, rng: np.random.Generator) -> np.ndarray:
    """Bootstrap replicates of numpy's linear-interpolation quantile of i.i.d. samples `x`."""
    xs = np.sort(np.asarray(x, dtype=float))
    n = xs.size
    h = (n - 1) * q
    j = int(math.floor(h))
    frac = h - j
    # U_(j+1) is the (j+1)-th smallest of n uniforms; the next order statistic follows from
    # the minimum of the n-j-1 uniforms left above it.
    u1 = rng.beta(j + 1, n - j, size=b)
    lo = xs[np.minimum((u1 * n).astype(np.int64), n - 1)]
    if frac == 0.0 or j + 1 >= n:
        return lo
    m = n - j - 1
    u2 = u1 + (1.0 - u1) * (1.0 - rng.random(b) ** (1.0 / m))
    hi = xs[np.minimum((u2 * n).astype(np.int64), n - 1)]
    return lo + frac * (hi - lo)


def mean_replicates(x: np.ndarray, b: int, rng: np.random.Generator) -> np.ndarray:
    x = np.asarray(x, dtype=float)
    n = x.size
    out = np.empty(b)
    rows = max(1, _CHUNK_ELEMS // max(n, 1))
    for start in range(0, b, rows):
        stop = min(b, start + rows)
        idx = rng.integers(0, n, size=(stop - start, n), dtype=np.int32)
        out[start:stop] = x[idx].mean(axis=1)
    return out


def _cluster_counts(n: int, rows: int, rng: np.random.Generator) -> np.ndarray:
    """How often each of n clusters was drawn, for `rows` resamples (float32, rows x n)."""
    idx = rng.integers(0, n, size=(rows, n), dtype=np.int64)
    idx += (np.arange(rows, dtype=np.int64) * n)[:, None]
    return np.bincount(idx.ravel(), minlength=rows * n).reshape(rows, n).astype(np.float32)


@dataclass(frozen=True)
class Clustered:
    """Values grouped by request: `values[i]` belongs to request `owner[i]` (0..n_groups-1)."""

    values: np.ndarray
    owner: np.ndarray
    n_groups: int


def clustered_replicates(data: Clustered, q: float | None, b: int,
                         rng: np.random.Generator) -> np.ndarray:
    """Resample whole requests; the statistic is over all values of the drawn requests."""
    v = np.asarray(data.values, dtype=float)
    n = data.n_groups
    sums = np.bincount(data.owner, weights=v, minlength=n)
    counts = np.bincount(data.owner, minlength=n).astype(float)
    if q is None:
        out = np.empty(b)
        rows = max(1, _CHUNK_ELEMS // max(n, 1))
        for start in range(0, b, rows):
            stop = min(b, start + rows)
            w = _cluster_counts(n, stop - start, rng)
            out[start:stop] = (w @ sums) / np.maximum(w @ counts, 1.0)
        return out
    # A grid of bin edges dense around the quantile (wide enough to hold the bootstrap
    # spread many times over), with two outer bins catching the rest of the data.
    half = 8.0 * math.sqrt(q * (1 - q) / max(n, 1)) + 1.0 / max(n, 1)
    levels = np.linspace(max(0.0, q - half), min(1.0, q + half), _GRID_BINS - 1)
    edges = np.unique(np.concatenate(([v.min()], np.quantile(v, levels), [v.max()])))
    if edges.size < 2:
        return np.full(b, float(v[0]))
    nbins = edges.size - 1
    bins = np.clip(np.searchsorted(edges, v, side="right") - 1, 0, nbins - 1)
    hist = np.bincount(data.owner * nbins + bins, minlength=n * nbins).reshape(n, nbins)
    hist = hist.astype(np.float32)
    out = np.empty(b)
    rows = max(1, _CHUNK_ELEMS // max(n, nbins, 1))
    for start in range(0, b, rows):
        stop = min(b, start + rows)
        m = (_cluster_counts(n, stop - start, rng) @ hist).astype(float)
        cum = np.cumsum(m, axis=1)
        target = q * cum[:, -1]
        k = np.minimum((cum < target[:, None]).sum(axis=1), nbins - 1)
        rowsel = np.arange(stop - start)
        before = np.where(k > 0, cum[rowsel, np.maximum(k - 1, 0)], 0.0)
        inside = np.maximum(m[rowsel, k], 1e-12)
        frac = np.clip((target - before) / inside, 0.0, 1.0)
        out[start:stop] = edges[k] + frac * (edges[k + 1] - edges[k])
    return out


def block_replicates(x: np.ndarray, q: float | None, b: int,
                     rng: np.random.Generator) -> np.ndarray:
    """Moving-block bootstrap for a time series (engine steps): blocks of ~n^(1/3)."""
    x = np.asarray(x, dtype=float)
    n = x.size
    block = max(1, int(round(n ** (1 / 3))))
    nblocks = math.ceil(n / block)
    offsets = np.arange(block)
    out = np.empty(b)
    rows = max(1, _CHUNK_ELEMS // max(n, 1))
    for start in range(0, b, rows):
        stop = min(b, start + rows)
        starts = rng.integers(0, n - block + 1, size=(stop - start, nblocks))
        idx = (starts[:, :, None] + offsets).reshape(stop - start, -1)[:, :n]
        sample = x[idx]
        out[start:stop] = sample.mean(axis=1) if q is None else np.quantile(sample, q, axis=1)
    return out


def rate_replicates(window_rates: np.ndarray, b: int, rng: np.random.Generator) -> np.ndarray:
    """Batch means: the mean rate over K windows, drawn from its t-distribution (K-1 df)."""
    r = np.asarray(window_rates, dtype=float)
    k = r.size
    se = float(r.std(ddof=1)) / math.sqrt(k)
    return float(r.mean()) + se * rng.standard_t(k - 1, size=b)


def percentile_interval(reps: np.ndarray, confidence: float) -> tuple[float, float]:
    a = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(reps, [a, 1.0 - a])
    return float(lo), float(hi)


# --- rank methods ---------------------------------------------------------------------

def _count_diffs_le(xs: np.ndarray, y: np.ndarray, d: float) -> int:
    """#{(i, j): y_j - x_i <= d} for sorted xs."""
    return int((xs.size - np.searchsorted(xs, y - d, side="left")).sum())


def _kth_diff(xs: np.ndarray, y: np.ndarray, k: float) -> float:
    """The k-th smallest pairwise difference y_j - x_i (1-based, k may be fractional)."""
    lo, hi = float(y.min() - xs[-1]), float(y.max() - xs[0])
    for _ in range(64):
        mid = (lo + hi) / 2.0
        if _count_diffs_le(xs, y, mid) >= k:
            hi = mid
        else:
            lo = mid
    return hi


@dataclass(frozen=True)
class RankResult:
    shift: float  # Hodges-Lehmann estimate of candidate - baseline
    ci: tuple[float, float]
    p_value: float  # two-sided Mann-Whitney, normal approximation with tie correction


def rank_shift(baseline: np.ndarray, candidate: np.ndarray, confidence: float) -> RankResult:
    """Location shift of `candidate` over `baseline` with its distribution-free interval."""
    xs = np.sort(np.asarray(baseline, dtype=float))
    y = np.sort(np.asarray(candidate, dtype=float))
    n, m = xs.size, y.size
    nm = n * m
    z = NormalDist().inv_cdf(1.0 - (1.0 - confidence) / 2.0)
    half = z * math.sqrt(nm * (n + m + 1) / 12.0)
    k_lo = max(1.0, math.floor(nm / 2.0 - half))
    shift = _kth_diff(xs, y, (nm + 1) / 2.0)
    ci = (_kth_diff(xs, y, k_lo), _kth_diff(xs, y, nm - k_lo + 1))
    both = np.concatenate([xs, y])
    _, inverse, ties = np.unique(both, return_inverse=True, return_counts=True)
    rank_of = np.cumsum(ties) - (ties - 1) / 2.0
    u = float(rank_of[inverse[n:]].sum()) - m * (m + 1) / 2.0
    tie_term = float((ties**3 - ties).sum()) / ((n + m) * (n + m - 1))
    var = nm / 12.0 * ((n + m + 1) - tie_term)
    zu = (u - nm / 2.0) / math.sqrt(var) if var > 0 else 0.0
    p = 2.0 * (1.0 - NormalDist().cdf(abs(zu)))
    return RankResult(shift=shift, ci=ci, p_value=p)


def t_quantile(p: float, df: float) -> float:
    """Student-t quantile (Cornish-Fisher expansion; within 1e-3 for df >= 3)."""
    z = NormalDist().inv_cdf(p)
    g1 = (z**3 + z) / 4.0
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96.0
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384.0
    return z + g1 / df + g2 / df**2 + g3 / df**3
