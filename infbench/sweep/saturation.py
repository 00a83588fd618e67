"""Has a sweep reached saturation, and where is its knee?

A knee is a claim about a curve that bends: past it, more load buys little throughput and
costs latency. A sweep whose points never saturate has no knee, however a curve-fitting rule
would place one (Kneedle always returns some point of three). So the knee is named only when
the sweep shows saturation, and only among the points up to it:

- throughput stopped rising: between two consecutive loads, the elasticity of throughput to
  load, d log(throughput) / d log(load), fell below `STALL_ELASTICITY`. A target that scales
  linearly has elasticity 1; for a step time t(B) = a + bB the elasticity at batch B is
  a / (a + bB), which is 0.3 at B = 2.3 a/b (2.3 times the roofline knee batch);
- the SLO broke: fewer than half of a point's requests met every objective (`--slo`);
- errors started: a point had failed requests.

The loads of a sweep are concurrencies (closed loop) or offered rates (open loop); for an open
loop, achieved against offered throughput has elasticity 1 until the target falls behind.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

STALL_ELASTICITY = 0.3
SLO_BROKEN_SHARE = 0.5


@dataclass(frozen=True)
class LoadPoint:
    idx: int
    load: float  # concurrency or offered rate
    throughput: float  # output tokens/s achieved
    # What the knee trades throughput against: p50 e2e, which includes the queueing that a
    # batch cap causes (TPOT stays flat while requests wait for a slot).
    latency_ms: float | None
    good_share: float | None  # share of requests meeting every SLO; None without --slo
    failed: int


@dataclass(frozen=True)
class Saturation:
    reached: bool
    reason: str
    at_idx: int | None  # the first point that showed it


def elasticity(lo: LoadPoint, hi: LoadPoint) -> float | None:
    if lo.load <= 0 or hi.load <= lo.load or lo.throughput <= 0 or hi.throughput <= 0:
        return None
    return math.log(hi.throughput / lo.throughput) / math.log(hi.load / lo.load)


def saturation(points: Sequence[LoadPoint]) -> Saturation:
    """The first sign of saturation along increasing load, or why none was seen."""
    pts = sorted(points, key=lambda p: p.load)
    if not pts:
        return Saturation(False, "no points", None)
    for i, p in enumerate(pts):
        if p.failed > 0:
            return Saturation(True, f"errors started at load {p.load:g} ({p.failed} failed)", p.idx)
        if p.good_share is not None and p.good_share < SLO_BROKEN_SHARE:
            return Saturation(True, f"the SLO broke at load {p.load:g} (only {p.good_share:.0%} of "
                                    "requests met it)", p.idx)
        if i == 0:
            continue
        e = elasticity(pts[i - 1], p)
        if e is not None and e < STALL_ELASTICITY:
            gain = p.throughput / pts[i - 1].throughput - 1
            return Saturation(True, f"throughput stopped rising: {gain:+.0%} from load "
                                    f"{pts[i - 1].load:g} to {p.load:g} (elasticity {e:.2f})", p.idx)
    if len(pts) < 2:
        return Saturation(False, "one point cannot show saturation", None)
    lo, hi = pts[-2], pts[-1]
    e = elasticity(lo, hi)
    rise = f"{hi.throughput / lo.throughput:.2g}x" if lo.throughput > 0 else "from zero"
    return Saturation(False, f"not saturated: throughput still rose {rise} from load {lo.load:g} to "
                             f"{hi.load:g} (elasticity {'-' if e is None else f'{e:.2f}'}); "
                             "raise the load to find the knee", None)


def kneedle(x: np.ndarray, y: np.ndarray) -> int | None:
    """Index of the knee of a rising-latency curve y(x); None with fewer than 3 points."""
    order = np.argsort(x)
    x, y = np.asarray(x, float)[order], np.asarray(y, float)[order]
    if x.size < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return None
    xn = (x - x.min()) / np.ptp(x)
    yn = (y - y.min()) / np.ptp(y)
    return int(order[int(np.argmax(xn - yn))])


def knee(points: Sequence[LoadPoint], sat: Saturation) -> int | None:
    """The knee's point idx, among the points up to saturation; None when not saturated."""
    if not sat.reached or sat.at_idx is None:
        return None
    pts = sorted(points, key=lambda p: p.load)
    upto = [p for p in pts[: 1 + next(i for i, p in enumerate(pts) if p.idx == sat.at_idx)]
            if p.latency_ms is not None]
    k = kneedle(np.array([p.throughput for p in upto]), np.array([p.latency_ms for p in upto]))
    if k is not None:
        return upto[k].idx
    # Too few points for a curve: the last load before saturation showed is the bend.
    before = [p for p in pts if p.load < next(q.load for q in pts if q.idx == sat.at_idx)]
    return before[-1].idx if before else None
