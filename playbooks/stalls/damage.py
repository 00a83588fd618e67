"""How much harm a group of stall events does, and the severity that follows from it.

Two measures that compose over groups (shares of the tail and wall time add up; p99 gains
multiply up to the whole rise), so that two sources that each fill the tail are each
credited with their part instead of neither being blamed:

- the ITL tail: the group's share of the gaps at or above p99 ITL, and how many times it
  raises p99 (`Tail.p99_gain`);
- the wall time: an engine-wide pause stops every stream at once, so the time it adds over
  a typical ITL is time the engine produced nothing: that share of the streaming span is
  the share of throughput lost. It counts even where p99 misses the pauses (pauses in
  fewer than 1% of the gaps leave p99 in the body of the distribution while costing
  throughput).

Severity rule, and why:

- critical: the group at least triples p99 ITL, or engine-wide pauses cost >= 5% of the
  wall time (the default regression gate fails a build for 5% less throughput: these pauses
  alone would fail it);
- warning: it raises p99 by half or more, or its pauses are >= 20x the typical ITL (a
  visible freeze even when p99 hides it), or engine-wide pauses cost >= 1% of the wall time
  (0.6 s a minute with every stream frozen; more than the run-to-run drift of up to 1%
  that the gate's calibration allows for);
- info otherwise. A healthy run has no stall events at all (the threshold is far above
  normal jitter), so no finding; a few short pauses in a long run hold little of the tail
  and cost well under 1% of the time.

Irregular pauses (no period fitted) are judged on how often they could recur, not on the
few that happened: the wall-time share is scaled by the 90% lower confidence bound of a
Poisson rate given their count over the count itself, and a freeze by size alone needs at
least two of them. One 157 ms pause in a 7.7 s run beside a busy neighbour (a healthy
bundled engine, CI) read as "1.9% of the wall time lost, 22x the ITL": a rate extrapolated
from one event. With one event the bound is 0.105 of it, with two 0.27, with ten 0.62. A
fitted period is itself the evidence that the pauses recur, so periodic groups keep the
point estimate.

Private stalls (one request stalls while others stream) cost the engine no throughput: only
the tail measures count for them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from playbooks.stalls.events import Events
from playbooks.stalls.tail import GapIndex, Tail

CRITICAL_GAIN, WARNING_GAIN = 3.0, 1.5
HUGE_PAUSE = 20.0                       # x the typical ITL
CRITICAL_LOST, WARNING_LOST = 0.05, 0.01  # share of the streaming span
RULE = (f"critical: p99 gain >= {CRITICAL_GAIN:g} or wall time lost >= {CRITICAL_LOST:.0%}; "
        f"warning: p99 gain >= {WARNING_GAIN:g}, pauses >= {HUGE_PAUSE:g}x the typical ITL or "
        f"wall time lost >= {WARNING_LOST:.0%}; else info")


@dataclass
class Damage:
    events: int
    tail: Tail
    lost_s: float          # sum over the events of (their gap - the typical ITL)
    span_s: float          # the streaming span: first to last gap end
    median_gap_ms: float

    @property
    def lost_share(self) -> float:
        return self.lost_s / self.span_s if self.span_s > 0 else 0.0

    @property
    def lost_per_minute_s(self) -> float:
        return 60.0 * self.lost_share


def damage(gaps: GapIndex, ev: Events, members: np.ndarray, typical_ms: float) -> Damage:
    """`members`: indices of the events in the group (may be empty)."""
    gap = ev.gap_ms[members]
    lost = float(np.clip(gap - typical_ms, 0.0, None).sum()) / 1e3
    return Damage(len(members), gaps.tail(members), lost, gaps.span_s,
                  float(np.median(gap)) if len(gap) else float("nan"))


def poisson_rate_low(n: int, confidence: float = 0.90) -> float:
    """The one-sided lower confidence bound of a Poisson mean after `n` events: the mu whose
    P(X >= n) is 1 - confidence (0 for n = 0), by bisection of the CDF."""
    if n <= 0:
        return 0.0

    def p_at_least(mu: float) -> float:
        term = total = math.exp(-mu)
        for k in range(1, n):
            term *= mu / k
            total += term
        return 1.0 - total

    lo, hi = 0.0, float(n)
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if p_at_least(mid) < 1.0 - confidence else (lo, mid)
    return (lo + hi) / 2


def severity(tail: Tail, magnitude: float, lost_share: float = 0.0,
             irregular_events: int | None = None) -> str:
    """`magnitude`: the group's median gap over the typical ITL; `lost_share`: wall time
    lost over the streaming span (0 for private stalls); `irregular_events`: the count of a
    group with no fitted period (its share and freeze are then judged on how often it could
    recur). The rule and its reasons are in the module docstring."""
    gain = tail.p99_gain
    if irregular_events is not None:
        lost_share *= min(1.0, poisson_rate_low(irregular_events) / max(irregular_events, 1))
        if irregular_events < 2:
            magnitude = 0.0
    if gain >= CRITICAL_GAIN or lost_share >= CRITICAL_LOST:
        return "critical"
    if gain >= WARNING_GAIN or magnitude >= HUGE_PAUSE or lost_share >= WARNING_LOST:
        return "warning"
    return "info"
