"""Is one group's link slower than another's? A paired comparison that a shared machine's
noise does not fool.

Two groups are measured in turn, repeat after repeat (the order flips every repeat), so a
burst of load from a neighbour lands on both sides of the same repeat. Each repeat gives one
ratio a/b; the verdict reads their median and a distribution-free confidence interval of that
median (order statistics of the ratios, ~90%: no assumption about the noise's shape, and a
burst that hits one repeat moves neither):

- `a_slower` when the median ratio is at least `threshold` and the whole interval is above
  sqrt(threshold);
- `b_slower` symmetrically;
- `same` when the median is within sqrt(threshold) either way and the whole interval within
  `threshold` either way;
- `unclear` otherwise: the caller measures more repeats (the interval narrows as they come),
  and if it stays unclear the probe says it cannot tell instead of guessing.

The band between sqrt(threshold) and threshold belongs to neither verdict on purpose: a
group 1.3x slower on a noisy 2-core box is not evidence of a link at a third of its rate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

CONFIDENCE = 0.90


def median_interval(x: np.ndarray, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Order-statistic interval for the median: [x_(k), x_(n-k+1)] with the largest k whose
    binomial tail P(B < k) stays within (1 - confidence) / 2; the full range when n is small."""
    x = np.sort(np.asarray(x, float))
    n = x.size
    tail, k = 0.0, 0
    while k < n // 2:
        p = math.comb(n, k) / 2 ** n
        if tail + p > (1 - confidence) / 2:
            break
        tail += p
        k += 1
    k = max(k, 1)
    return float(x[k - 1]), float(x[n - k])


@dataclass(frozen=True)
class Comparison:
    verdict: str            # a_slower | b_slower | same | unclear
    ratio: float            # median of per-repeat a/b
    low: float              # the median's confidence interval
    high: float
    ratios: tuple[float, ...]

    def as_dict(self) -> dict[str, object]:
        return {"verdict": self.verdict, "ratio": round(self.ratio, 4), "ci": [round(self.low, 4), round(self.high, 4)],
                "ratios": [round(r, 4) for r in self.ratios]}


def compare(a: np.ndarray, b: np.ndarray, threshold: float) -> Comparison:
    a, b = np.asarray(a, float), np.asarray(b, float)
    if a.shape != b.shape or a.size == 0:
        raise ValueError("compare needs the same number (>0) of repeats on both sides")
    if threshold <= 1.0:
        raise ValueError(f"threshold must be > 1, got {threshold}")
    r = a / np.maximum(b, 1e-12)
    m = float(np.median(r))
    lo, hi = median_interval(r)
    return Comparison(_verdict(m, lo, hi, threshold), m, lo, hi, tuple(float(x) for x in r))


LEVEL_Q = 0.25   # the quantile over repeats that stands for a pair's time (noise only adds)
BOOTSTRAP = 400


def compare_levels(times: np.ndarray, a: list[int], b: list[int], threshold: float) -> Comparison:
    """Rows `a` against rows `b` of `times[row, repeat]` (the pair matrix): each row's level is
    its 25th percentile over the repeats (a burst of load only ever adds time, so a pair's
    faster repeats are its truest), each side's level the median of its rows' levels. The
    interval (5-95%) comes from resampling whole repeats, which keeps what one repeat's load
    did to every pair together. Same verdict rule as `compare`. Deterministic (fixed seed): every
    rank computes it and must reach the same decision."""
    times = np.asarray(times, float)
    if not a or not b or times.shape[1] == 0:
        raise ValueError("compare_levels needs rows on both sides and at least one repeat")

    def ratio(cols: np.ndarray | np.integer) -> float:
        lv = np.quantile(times[:, cols], LEVEL_Q, axis=1)
        return float(np.median(lv[a]) / max(float(np.median(lv[b])), 1e-12))

    n = times.shape[1]
    m = ratio(np.arange(n))
    rng = np.random.default_rng(0)
    boots = np.array([ratio(rng.integers(0, n, n)) for _ in range(BOOTSTRAP)])
    lo, hi = float(np.quantile(boots, 0.05)), float(np.quantile(boots, 0.95))
    per_repeat = np.median(times[a], axis=0) / np.maximum(np.median(times[b], axis=0), 1e-12)
    return Comparison(_verdict(m, lo, hi, threshold), m, lo, hi, tuple(float(x) for x in per_repeat))


def _verdict(m: float, lo: float, hi: float, threshold: float) -> str:
    half = math.sqrt(threshold)
    if m >= threshold and lo > half:
        return "a_slower"
    if m <= 1 / threshold and hi < 1 / half:
        return "b_slower"
    if 1 / half <= m <= half and lo > 1 / threshold and hi < threshold:
        return "same"
    return "unclear"
