"""A worker's clock against the coordinator's, from round trips.

The coordinator reads its monotonic clock (t1), asks the worker for its own (tw), reads again
(t2). tw was read somewhere inside [t1, t2], so offset = tw - (t1 + t2) / 2 is off by at most
(t2 - t1) / 2. Of many rounds the fastest bounds it best (a slow round met a busy scheduler
or network, not a different clock), so that one is kept: offset = its midpoint, uncertainty =
half its round trip. Cross-node times are good to the sum of both nodes' uncertainties;
per-request latencies are measured on one host and need no offset at all.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

ROUNDS = 64


@dataclass(frozen=True)
class ClockOffset:
    offset_ns: int  # worker's monotonic clock minus the coordinator's
    uncertainty_ns: int  # half the fastest round trip
    rtt_min_ns: int
    rounds: int
    shared: bool  # same host and kernel boot: one clock, the offset applied is 0

    @property
    def applied_ns(self) -> int:
        return 0 if self.shared else self.offset_ns

    def check_invariants(self) -> None:
        assert self.rounds >= 1 and self.rtt_min_ns >= 0
        assert self.uncertainty_ns * 2 in (self.rtt_min_ns, self.rtt_min_ns + 1)


def estimate(samples: list[tuple[int, int, int]], shared: bool) -> ClockOffset:
    """The offset from (t1, tw, t2) rounds: the fastest round's midpoint."""
    if not samples:
        raise ValueError("clock: no round trips")
    t1, tw, t2 = min(samples, key=lambda s: s[2] - s[0])
    rtt = t2 - t1
    if rtt < 0:
        raise ValueError("clock: a round trip ended before it began")
    est = ClockOffset(offset_ns=tw - (t1 + t2) // 2, uncertainty_ns=(rtt + 1) // 2, rtt_min_ns=rtt,
                      rounds=len(samples), shared=shared)
    est.check_invariants()
    return est


def measure(ask: Callable[[], int], shared: bool, rounds: int = ROUNDS) -> ClockOffset:
    """`ask()` returns the worker's monotonic_ns; it is timed `rounds` times."""
    samples = []
    for _ in range(rounds):
        t1 = time.monotonic_ns()
        tw = ask()
        t2 = time.monotonic_ns()
        samples.append((t1, tw, t2))
    return estimate(samples, shared)
