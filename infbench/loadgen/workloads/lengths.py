"""Token-length distributions for synthetic workloads: `512`, `uniform:128:1024`,
`normal:512:64` (mean, std), `lognormal:512:0.6` (median, sigma). Seeded by the caller, which
gives each length its own stream (`infbench.loadgen.seeds`)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

KINDS = ("fixed", "uniform", "normal", "lognormal")


@dataclass(frozen=True)
class LengthDist:
    kind: str
    a: float
    b: float = 0.0
    lo: int = 1
    hi: int = 1 << 20

    @classmethod
    def parse(cls, text: str, field: str) -> LengthDist:
        parts = text.strip().split(":")
        try:
            if len(parts) == 1:
                dist = cls("fixed", float(parts[0]))
            else:
                kind, *nums = parts
                if kind not in KINDS or len(nums) != (1 if kind == "fixed" else 2):
                    raise ValueError
                values = [float(x) for x in nums]
                dist = cls(kind, values[0], values[1] if len(values) > 1 else 0.0)
        except ValueError:
            raise ValueError(
                f"{field}: {text!r} is not a length (e.g. 512, uniform:128:1024, "
                "normal:512:64, lognormal:512:0.6)"
            ) from None
        if dist.a <= 0 or dist.b < 0 or (dist.kind == "uniform" and dist.b < dist.a):
            raise ValueError(f"{field}: {text!r} needs positive parameters (and lo <= hi)")
        return dist

    def sample(self, rng: np.random.Generator, n: int = 1) -> np.ndarray:
        if self.kind == "fixed":  # no draw, and no clip/floor work per request
            return np.full(n, min(max(int(np.floor(self.a)), self.lo), self.hi), dtype=np.int64)
        elif self.kind == "uniform":
            x = rng.uniform(self.a, self.b + 1, n)
        elif self.kind == "normal":
            x = rng.normal(self.a, self.b, n)
        else:
            x = self.a * np.exp(rng.normal(0.0, self.b, n))
        return np.clip(np.floor(x), self.lo, self.hi).astype(np.int64)

    def stream(self, rng: np.random.Generator, batch: int = 256) -> Iterator[int]:
        """One length per `next()`, drawn `batch` at a time: a NumPy call per request would
        cost more than the draw. The values depend only on `rng` and `batch`."""
        while True:
            yield from self.sample(rng, batch).tolist()

    def __str__(self) -> str:
        if self.kind == "fixed":
            return str(int(self.a))
        return f"{self.kind}:{self.a:g}:{self.b:g}"
