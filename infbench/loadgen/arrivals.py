"""Arrival processes: when each new session (request or conversation) is due, in seconds from
the start of the run. Closed loop has no schedule: a slot sends as soon as it is free."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

OPEN_KINDS = ("constant", "poisson", "gamma")
KINDS = ("closed", *OPEN_KINDS, "trace")


@dataclass(frozen=True)
class Arrivals:
    kind: str  # closed | constant | poisson | gamma | trace
    rate: float = 0.0  # requests/s for open loop
    burstiness: float = 1.0  # gamma shape; 1 = Poisson, <1 burstier, >1 smoother
    concurrency: int = 0  # slots for closed loop; cap for open loop (0 = none)
    time_scale: float = 1.0  # trace: inter-arrival gaps are multiplied by this

    def validate(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"arrival: {self.kind!r} is not one of {', '.join(KINDS)}")
        if self.kind in OPEN_KINDS and self.rate <= 0:
            raise ValueError(f"rate: an open-loop arrival ({self.kind}) needs --rate > 0")
        if self.kind == "closed" and self.concurrency <= 0:
            raise ValueError("concurrency: a closed loop needs --concurrency >= 1")
        if self.burstiness <= 0:
            raise ValueError("burstiness: must be > 0")
        if self.time_scale <= 0:
            raise ValueError("time_scale: must be > 0")

    def offsets(self, rng: np.random.Generator) -> Iterator[float]:
        """Intended send offsets (s) for an open loop, unbounded; the runner stops taking."""
        t = 0.0
        k = 0
        while True:
            if self.kind == "constant":
                yield k / self.rate
                k += 1
                continue
            if self.kind == "poisson":
                gaps = rng.exponential(1.0 / self.rate, 1024)
            else:
                gaps = rng.gamma(self.burstiness, 1.0 / (self.rate * self.burstiness), 1024)
            for g in gaps:
                yield t
                t += float(g)
