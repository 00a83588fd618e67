"""Vectorized resampling for gates: every statistic turns a matrix of resample counts into
bootstrap replicates, and says how much each request moves it (its influence).

A resample is described by how often it drew each request (`counts`, replicates x requests),
so one matrix can drive several statistics: in a paired comparison the baseline's and the
candidate's statistic come from the *same* counts, so what the two runs share (the workload's
length mix, the order of requests) cancels out of their ratio.

- Quantiles are read off the cumulated counts in sorted order (numpy's linear interpolation);
  means are a matrix product.
- ITL gaps belong to requests: a request is drawn with all its gaps (cluster bootstrap),
  quantiles through per-request histograms on a fine grid around the quantile.
- Rates (throughput, goodput) are steady rates. A closed loop's is a ratio estimator: its
  concurrency times tokens (or good requests) per second in flight of the drawn requests. An
  open loop's is what the drawn requests delivered inside the steady window, per second.
- Engine steps are a time series: a moving-block bootstrap of the steps themselves.

Requests are drawn independently, but requests in flight at the same time shared the
server's steps, so a slow step moves all of them together. `overlap_factor` measures how
much that inflates the variance (the influence values of overlapping requests, summed the
way a HAC/Conley estimator sums neighbours), and `widen` stretches the replicates by it.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Iterator

import numpy as np

DEFAULT_REPLICATES = 2000
_CHUNK_ELEMS = 4_000_000  # elements per chunk of a counts matrix: bounds memory at ~32 MB
_GRID_BINS = 128


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


def resample_counts(n: int, b: int, rng: np.random.Generator) -> Iterator[np.ndarray]:
    """Chunks of a (b x n) matrix: how often each of n units was drawn, for b resamples."""
    rows = max(1, _CHUNK_ELEMS // max(n, 1))
    for start in range(0, b, rows):
        r = min(rows, b - start)
        # int32 halves the memory traffic; r * n stays below _CHUNK_ELEMS, far under 2^31
        idx = rng.integers(0, n, size=(r, n), dtype=np.int32) + (np.arange(r, dtype=np.int32) * n)[:, None]
        yield np.bincount(idx.ravel(), minlength=r * n).reshape(r, n).astype(float)


class Statistic(ABC):
    """One run's statistic over n resampling units: its value, its replicates under a counts
    matrix (replicates x n), and each unit's influence on its log (for quantiles up to a
    positive factor, the density's, that two runs of one workload share)."""

    n: int
    # Variance (of the log) that a run of the same load drawn afresh adds beyond its requests,
    # when two runs do not share their requests (an open loop's arrival count)
    unpaired_log_var: float = 0.0

    def value(self) -> float:
        return float(self.replicates(np.ones((1, self.n)))[0])

    @abstractmethod
    def replicates(self, counts: np.ndarray) -> np.ndarray:
        """The statistic under each row of resampling counts (replicates x n)."""

    @abstractmethod
    def influence(self) -> np.ndarray:
        """Each unit's influence on the statistic's log."""

    def alone(self, b: int, rng: np.random.Generator) -> np.ndarray:
        """b replicates of this statistic resampled on its own (not paired with another)."""
        return np.concatenate([self.replicates(c) for c in resample_counts(self.n, b, rng)])


class Quantile(Statistic):
    """numpy's linear-interpolation quantile of per-request values."""

    def __init__(self, x: np.ndarray, q: float) -> None:
        self.x = np.asarray(x, dtype=float)
        self.order = np.argsort(self.x, kind="stable")
        self.xs = self.x[self.order]
        self.n, self.q = self.xs.size, q

    def value(self) -> float:
        return float(np.quantile(self.xs, self.q))

    def replicates(self, counts: np.ndarray) -> np.ndarray:
        cum = np.cumsum(counts[:, self.order], axis=1)
        h = (cum[:, -1] - 1.0) * self.q
        j = np.floor(h)
        # the 0-based j-th smallest drawn value sits at the first position whose count
        # reaches past j
        lo = np.minimum((cum <= j[:, None]).sum(axis=1), self.n - 1)
        hi = np.minimum((cum <= j[:, None] + 1.0).sum(axis=1), self.n - 1)
        return self.xs[lo] + (h - j) * (self.xs[hi] - self.xs[lo])

    def influence(self) -> np.ndarray:
        return self.q - (self.x <= self.value()).astype(float)

    def alone(self, b: int, rng: np.random.Generator) -> np.ndarray:
        # The order-statistic identity: the k-th smallest of n draws with replacement from
        # sorted data is xs[floor(n * U)] with U ~ Beta(k, n - k + 1); O(b) after the sort.
        n = self.n
        h = (n - 1) * self.q
        j = int(math.floor(h))
        frac = h - j
        u1 = rng.beta(j + 1, n - j, size=b)
        lo = self.xs[np.minimum((u1 * n).astype(np.int64), n - 1)]
        if frac == 0.0 or j + 1 >= n:
            return lo
        # the next order statistic: the minimum of the n - j - 1 uniforms left above U_(j+1)
        u2 = u1 + (1.0 - u1) * (1.0 - rng.random(b) ** (1.0 / (n - j - 1)))
        hi = self.xs[np.minimum((u2 * n).astype(np.int64), n - 1)]
        return lo + frac * (hi - lo)


class Mean(Statistic):
    def __init__(self, x: np.ndarray) -> None:
        self.x = np.asarray(x, dtype=float)
        self.n = self.x.size

    def value(self) -> float:
        return float(self.x.mean())

    def replicates(self, counts: np.ndarray) -> np.ndarray:
        return (counts @ self.x) / counts.sum(axis=1)

    def influence(self) -> np.ndarray:
        return self.x / self.x.mean() - 1.0 if self.x.mean() else self.x - self.x.mean()


class Rate(Statistic):
    """A steady rate (throughput, goodput) as a ratio estimator: `concurrency`, the mean
    number of requests in flight while the load was steady, times what a request in flight
    delivers per second (tokens, or good requests, over time in flight) among the drawn
    requests. The concurrency is the load's (the closed loop's slots, or the arrival rate
    times the time each request stays), so it is not redrawn: a slower server shows as more
    time in flight per token."""

    def __init__(self, num: np.ndarray, busy: np.ndarray, concurrency: float) -> None:
        self.num, self.busy = np.asarray(num, dtype=float), np.asarray(busy, dtype=float)
        self.n, self.concurrency = self.num.size, concurrency

    def replicates(self, counts: np.ndarray) -> np.ndarray:
        return self.concurrency * (counts @ self.num) / np.maximum(counts @ self.busy, 1e-300)

    def influence(self) -> np.ndarray:
        mn = self.num.mean()
        return (self.num / mn if mn else self.num) - self.busy / self.busy.mean()


class Sum(Statistic):
    """scale * the sum of per-request amounts: what an open loop delivered in its steady
    window (`scale` = 1 / the window's length)."""

    def __init__(self, x: np.ndarray, scale: float, unpaired_log_var: float = 0.0) -> None:
        self.x, self.n, self.scale = np.asarray(x, dtype=float), int(np.size(x)), scale
        self.unpaired_log_var = unpaired_log_var

    def replicates(self, counts: np.ndarray) -> np.ndarray:
        return self.scale * (counts @ self.x)

    def influence(self) -> np.ndarray:
        return self.x / self.x.mean() - 1.0 if self.x.mean() else self.x


class Clustered(Statistic):
    """Values grouped by request: `values[i]` belongs to request `owner[i]` (0..n-1); a drawn
    request brings all its values."""

    def __init__(self, values: np.ndarray, owner: np.ndarray, n: int, q: float | None) -> None:
        v = np.asarray(values, dtype=float)
        self.owner = np.asarray(owner, dtype=np.int64)
        self.n, self.q, self.values = n, q, v
        self.counts = np.bincount(self.owner, minlength=n).astype(float)
        if q is None:
            self.sums = np.bincount(self.owner, weights=v, minlength=n)
            return
        # Bin edges dense around the quantile (wide enough to hold the bootstrap spread many
        # times over), with two outer bins catching the rest of the data.
        half = 8.0 * math.sqrt(q * (1 - q) / max(n, 1)) + 1.0 / max(n, 1)
        levels = np.linspace(max(0.0, q - half), min(1.0, q + half), _GRID_BINS - 1)
        self.edges = np.unique(np.concatenate(([v.min()], np.quantile(v, levels), [v.max()])))
        nbins = max(self.edges.size - 1, 1)
        bins = np.clip(np.searchsorted(self.edges, v, side="right") - 1, 0, nbins - 1)
        self.hist = np.bincount(self.owner * nbins + bins, minlength=n * nbins).reshape(n, nbins).astype(float)

    def value(self) -> float:
        return point_estimate(self.values, self.q)

    def replicates(self, counts: np.ndarray) -> np.ndarray:
        if self.q is None:
            return (counts @ self.sums) / np.maximum(counts @ self.counts, 1.0)
        if self.edges.size < 2:
            return np.full(counts.shape[0], float(self.edges[0]))
        m = counts @ self.hist
        cum = np.cumsum(m, axis=1)
        target = self.q * cum[:, -1]
        nbins = m.shape[1]
        k = np.minimum((cum < target[:, None]).sum(axis=1), nbins - 1)
        rows = np.arange(m.shape[0])
        before = np.where(k > 0, cum[rows, np.maximum(k - 1, 0)], 0.0)
        frac = np.clip((target - before) / np.maximum(m[rows, k], 1e-12), 0.0, 1.0)
        return self.edges[k] + frac * (self.edges[k + 1] - self.edges[k])

    def influence(self) -> np.ndarray:
        per = self.counts.mean() or 1.0
        if self.q is None:
            total = self.sums.mean() or 1.0
            return self.sums / total - self.counts / per
        below = np.bincount(self.owner, weights=(self.values <= self.value()).astype(float), minlength=self.n)
        return (self.q * self.counts - below) / per


def replicates(stats: list[Statistic], b: int, rng: np.random.Generator) -> list[np.ndarray]:
    """b replicates of each statistic, all from the same resamples of their common units."""
    n = stats[0].n
    if any(s.n != n for s in stats):
        raise ValueError("statistics resampled together need the same units")
    parts: list[list[np.ndarray]] = [[] for _ in stats]
    for counts in resample_counts(n, b, rng):
        for part, s in zip(parts, stats, strict=True):
            part.append(s.replicates(counts))
    return [np.concatenate(p) for p in parts]


def overlap_factor(influence: np.ndarray, start: np.ndarray, end: np.ndarray) -> float:
    """How much sharing the server inflates the variance of a sum of per-request influences:
    (all products of requests in flight at the same time, each with itself included) over
    (each request with itself only). 1 when requests do not interact; about the number in
    flight when a slow step slows every request in flight alike. Never below 1: a negative
    estimate is noise, and narrowing an interval on noise is the wrong way to err."""
    e = np.asarray(influence, dtype=float)
    e = e - e.mean()
    own = float(e @ e)
    if e.size < 2 or own <= 0:
        return 1.0
    order = np.argsort(start, kind="stable")
    e, s, d = e[order], np.asarray(start, dtype=float)[order], np.asarray(end, dtype=float)[order]
    prefix = np.concatenate(([0.0], np.cumsum(e)))
    # requests sent after i (in send order) and before i ended overlap it
    upto = np.maximum(np.searchsorted(s, d, side="left"), np.arange(e.size) + 1)
    cross = float(e @ (prefix[upto] - prefix[np.arange(e.size) + 1]))
    return max(1.0, (own + 2.0 * cross) / own)


def widen(reps: np.ndarray, factor: float, log: bool) -> np.ndarray:
    """Stretch replicates about their median so that their variance grows by `factor`
    (on the log scale for statistics that are positive, so they stay positive)."""
    if factor <= 1.0:
        return reps
    k = math.sqrt(factor)
    if log and float(np.min(reps)) > 0:
        lr = np.log(reps)
        mid = float(np.median(lr))
        return np.exp(mid + k * (lr - mid))
    mid = float(np.median(reps))
    return mid + k * (reps - mid)


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


def percentile_interval(reps: np.ndarray, confidence: float) -> tuple[float, float]:
    a = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(reps, [a, 1.0 - a])
    return float(lo), float(hi)
