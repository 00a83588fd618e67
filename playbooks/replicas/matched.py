"""Latency at matched load: is a replica slower than its peers, or only busier?

A replica that is sent more requests runs bigger batches and queues longer, so its raw
latency is higher even when its hardware is fine. The comparison is therefore made at the
same load: observations (requests, or engine steps) are put in load bins of about 10% width
(geometric, so 1, 2, 3 ... stay apart and 200 and 210 share one), only bins where both the
replica and its peers have observations are kept, and within them

    log(latency) = bin effect + beta . (load - bin mean) + delta . [replica]

is fitted by least squares (the bins absorb any shape of the latency-load curve, the slope
the load differences left inside a bin). `delta` is the replica's log-ratio to its peers at
equal load: exp(delta) - 1 is "slower by". Its standard error is cluster-robust, clusters
being (replica, second of the run): requests that share a second on one replica share its
batches and stalls, so they are not independent and an i.i.d. error would be too small.
With few clusters (a short run) the sandwich is itself noisy: intervals use Student's t with
clusters - 1 degrees of freedom (the usual small-G correction) instead of the normal.

"Busier" is the load itself: the replica's mean load over its peers'.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

BIN_WIDTH = 0.10          # relative width of a load bin
MIN_COMMON = 10           # fewest observations on each side in the common bins to compare


@dataclass(frozen=True)
class Comparison:
    """One replica against its pooled peers on one latency metric."""

    metric: str
    replica: str
    delta: float | None        # log-ratio at matched load (None: not comparable)
    se: float | None
    n_replica: int             # observations of the replica in the common bins
    n_peers: int
    bins: int                  # common bins used
    load_ratio: float | None   # the replica's mean load / its peers' (all observations)
    raw_ratio: float | None    # median latency / peers' median, unmatched
    coverage: float            # share of the replica's observations in common bins
    clusters: int = 0          # independent units behind the interval (replica-seconds)

    def quantile(self, z: float) -> float:
        """The normal quantile `z` as Student's t with clusters - 1 degrees of freedom
        (Fisher's expansion; within 1% of the exact t for df >= 3 at the levels used)."""
        df = max(self.clusters - 1, 1)
        return (z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
                + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * df**3))

    def ratio(self) -> float | None:
        return None if self.delta is None else float(np.exp(self.delta))

    def describe(self, z: float) -> str:
        """'x1.16 (1.01-1.34)': the ratio and its interval, or 'not comparable'."""
        lo_hi, ratio = self.interval(z), self.ratio()
        return f"x{ratio:.2f} ({lo_hi[0]:.2f}-{lo_hi[1]:.2f})" if lo_hi and ratio else "not comparable"

    def interval(self, z: float) -> tuple[float, float] | None:
        if self.delta is None or self.se is None:
            return None
        q = self.quantile(z)
        return float(np.exp(self.delta - q * self.se)), float(np.exp(self.delta + q * self.se))


def z_for(alpha: float, tests: int) -> float:
    """Two-sided normal quantile with Bonferroni over `tests` comparisons."""
    return NormalDist().inv_cdf(1.0 - alpha / (2.0 * max(1, tests)))


def load_bins(load: np.ndarray, width: float = BIN_WIDTH) -> np.ndarray:
    """Geometric bin index of each load (load <= 0 gets its own bin)."""
    x = np.asarray(load, dtype=np.float64)
    out = np.full(x.shape, -1, dtype=np.int64)
    pos = x > 0
    out[pos] = np.round(np.log(x[pos]) / np.log1p(width)).astype(np.int64)
    return out


def _group_sums(v: np.ndarray, inv: np.ndarray, groups: int) -> np.ndarray:
    """Per-group sums of v (n, or n x k) by bincount (np.add.at is ~10x slower)."""
    if v.ndim == 1:
        return np.bincount(inv, weights=v, minlength=groups)
    return np.column_stack([np.bincount(inv, weights=v[:, j], minlength=groups) for j in range(v.shape[1])])


def _demean(v: np.ndarray, inv: np.ndarray, counts: np.ndarray) -> np.ndarray:
    sums = _group_sums(v, inv, len(counts))
    return v - (sums / counts.reshape((-1,) + (1,) * (v.ndim - 1)))[inv]


def compare(metric: str, replica: str, y: np.ndarray, load: np.ndarray, is_rep: np.ndarray,
            cluster: np.ndarray, strata: np.ndarray | None = None,
            min_common: int = MIN_COMMON) -> Comparison:
    """`y` latencies (> 0), `load` the covariate(s) (n, or n x k: the first column is the load
    the bins and the load ratio use), `is_rep` which rows are the replica's, `cluster` an
    integer per row, `strata` extra integer bins (e.g. prefill or not) crossed with load's."""
    y = np.asarray(y, dtype=np.float64)
    X = np.asarray(load, dtype=np.float64)
    X = X.reshape(len(y), -1)
    rep = np.asarray(is_rep, dtype=bool)
    ok = np.isfinite(y) & (y > 0) & np.all(np.isfinite(X), axis=1)
    y, X, rep, cl = y[ok], X[ok], rep[ok], np.asarray(cluster)[ok]
    st = np.zeros(len(y), dtype=np.int64) if strata is None else np.asarray(strata)[ok]
    n_rep_all = int(rep.sum())
    load_ratio = raw_ratio = None
    if n_rep_all and (~rep).any():
        peer_load = float(X[~rep, 0].mean())
        load_ratio = float(X[rep, 0].mean()) / peer_load if peer_load > 0 else None
        raw_ratio = float(np.median(y[rep]) / np.median(y[~rep]))
    bins = load_bins(X[:, 0]) * 1_000_003 + st
    uniq, inv = np.unique(bins, return_inverse=True)
    has_rep = np.bincount(inv, weights=rep, minlength=len(uniq)) > 0
    has_peer = np.bincount(inv, weights=~rep, minlength=len(uniq)) > 0
    common = (has_rep & has_peer)[inv]
    n_r, n_p = int((rep & common).sum()), int((~rep & common).sum())
    coverage = n_r / n_rep_all if n_rep_all else 0.0
    none = Comparison(metric, replica, None, None, n_r, n_p, 0, load_ratio, raw_ratio, coverage)
    if n_r < min_common or n_p < min_common:
        return none
    ly, Xc, d, clc = np.log(y[common]), X[common], rep[common].astype(np.float64), cl[common]
    _, inv2, counts = np.unique(bins[common], return_inverse=True, return_counts=True)
    Z = np.column_stack([_demean(Xc, inv2, counts), _demean(d, inv2, counts)])
    ty = _demean(ly, inv2, counts)
    # Covariates with no spread left inside the bins carry nothing: drop them.
    keep = np.r_[np.std(Z[:, :-1], axis=0) > 1e-12, True]
    Z = Z[:, keep]
    ZtZ = Z.T @ Z
    if np.linalg.cond(ZtZ) > 1e12:
        return none
    coef = np.linalg.solve(ZtZ, Z.T @ ty)
    u = ty - Z @ coef
    # Cluster-robust (CR1) sandwich; residual degrees of freedom lose the bins' means.
    cu, cinv = np.unique(clc, return_inverse=True)
    g = len(cu)
    scores = _group_sums(Z * u[:, None], cinv, g)
    bread = np.linalg.inv(ZtZ)
    n, k = len(ty), Z.shape[1] + len(counts)
    scale = (g / max(g - 1, 1)) * ((n - 1) / max(n - k, 1))
    cov = scale * bread @ (scores.T @ scores) @ bread
    se = float(np.sqrt(max(cov[-1, -1], 0.0)))
    return Comparison(metric, replica, float(coef[-1]), se, n_r, n_p, len(counts), load_ratio,
                      raw_ratio, coverage, clusters=g)
