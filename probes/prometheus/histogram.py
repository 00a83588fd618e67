"""Percentiles recomputed from stored histogram buckets, for any window of a run.

A Prometheus histogram is a set of cumulative counters `<name>_bucket{le=...}`. What it says
about a window is each counter's increase over it (resets handled as Prometheus's
`increase()` does: a drop means the counter restarted from zero), summed over the series
that share an `le` (replicas, GPUs...), and a quantile is read off by linear interpolation
inside the bucket where the rank falls, as PromQL's `histogram_quantile` does. The result
is only known to the bucket: `bucket_index` says which one, so two sources can be compared
"within one bucket" rather than on interpolated values.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

import duckdb
import numpy as np

from probes.prometheus.labels import parse_labels


@dataclass(frozen=True)
class WindowHistogram:
    """Observations per bucket over a window: `bounds` ascending (the last is +Inf),
    `cumulative[i]` observations <= bounds[i]."""

    name: str
    bounds: tuple[float, ...]
    cumulative: tuple[float, ...]

    @property
    def count(self) -> float:
        return self.cumulative[-1] if self.cumulative else 0.0

    def quantile(self, q: float) -> float | None:
        return histogram_quantile(q, self.bounds, self.cumulative)

    def bucket_index(self, q: float) -> int | None:
        """The bucket (index into `bounds`) holding the q-quantile's rank."""
        if not self.count:
            return None
        rank = q * self.count
        for i, c in enumerate(self.cumulative):
            if c >= rank and c > 0:
                return i
        return len(self.bounds) - 1


def histogram_quantile(q: float, bounds: tuple[float, ...] | list[float],
                       cumulative: tuple[float, ...] | list[float]) -> float | None:
    """PromQL's histogram_quantile over cumulative bucket counts (last bound +Inf).

    None for no observations; the highest finite bound when the rank is in the +Inf bucket;
    the lower edge of the first bucket is 0 when its upper bound is positive."""
    if not 0 <= q <= 1:
        raise ValueError(f"quantile: {q} is not in [0, 1]")
    if len(bounds) < 2 or not math.isinf(bounds[-1]):
        raise ValueError("histogram: needs at least one finite bound and +Inf")
    total = cumulative[-1]
    if total <= 0:
        return None
    rank = q * total
    i = bisect.bisect_left(list(cumulative), rank)
    if i >= len(bounds) - 1:
        return float(bounds[-2])
    upper = bounds[i]
    lower = bounds[i - 1] if i > 0 else (0.0 if upper > 0 else upper)
    below = cumulative[i - 1] if i > 0 else 0.0
    in_bucket = cumulative[i] - below
    if in_bucket <= 0:
        return float(upper)
    return float(lower + (upper - lower) * (rank - below) / in_bucket)


def _increase(times: np.ndarray, values: np.ndarray, start_ns: int | None,
              end_ns: int | None) -> float:
    """A counter's increase between the last sample at or before start and the last at or
    before end (the first sample when none precedes start), with resets."""
    lo = 0 if start_ns is None else max(int(np.searchsorted(times, start_ns, "right")) - 1, 0)
    hi = len(times) if end_ns is None else int(np.searchsorted(times, end_ns, "right"))
    v = values[lo:hi]
    if len(v) < 2:
        return 0.0
    d = np.diff(v)
    # A drop is a restart from zero: the new value is all increase since then.
    return float(np.where(d >= 0, d, v[1:]).sum())


def window_histogram(con: duckdb.DuckDBPyConnection, run_id: str, name: str, *,
                     source: str = "prometheus", start_ns: int | None = None,
                     end_ns: int | None = None,
                     match: dict[str, str] | None = None) -> WindowHistogram:
    """The histogram `name` (without `_bucket`) over [start_ns, end_ns] of the run's axis,
    from `metric_samples` of `source` ('prometheus' or the run's own 'metrics' scrapes),
    summed over every series whose labels include `match`."""
    rows = con.execute(
        "SELECT labels, t_ns, value FROM metric_samples WHERE run_id = ? AND source = ? "
        "AND name = ? ORDER BY labels, t_ns", [run_id, source, name + "_bucket"]).fetchall()
    by_series: dict[str, tuple[list[int], list[float]]] = {}
    for labels, t, v in rows:
        ts, vs = by_series.setdefault(labels, ([], []))
        ts.append(int(t))
        vs.append(float(v))
    per_le: dict[float, float] = {}
    for labels, (ts, vs) in by_series.items():
        lab = parse_labels(labels)
        if match and any(lab.get(k) != v for k, v in match.items()):
            continue
        le = float(lab.get("le", "nan"))
        if math.isnan(le):
            continue
        inc = _increase(np.asarray(ts, dtype=np.int64), np.asarray(vs), start_ns, end_ns)
        per_le[le] = per_le.get(le, 0.0) + inc
    bounds = tuple(sorted(per_le))
    # Increases of cumulative counters can be non-monotone across `le` when samples of
    # different buckets straddle a window edge; PromQL forces monotonicity the same way.
    cumulative = tuple(np.maximum.accumulate([per_le[b] for b in bounds]).tolist()) if bounds else ()
    return WindowHistogram(name, bounds, cumulative)
