"""Cost of the gate's resampling at 10k requests (100 gaps each): `python benchmarks/bench_gate_stats.py`.
Writes benchmarks/results/gate_stats.md with the machine description."""

from __future__ import annotations

import os
import platform
import time
from pathlib import Path

import numpy as np

from infbench.gate.stats import (
    Clustered,
    block_replicates,
    clustered_replicates,
    mean_replicates,
    quantile_replicates,
    rank_shift,
)


def best_of(fn, repeat: int = 3) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    rng = np.random.default_rng(0)
    n = 10_000
    x = rng.lognormal(0, 0.5, n)
    y = rng.lognormal(0.05, 0.5, n)
    gaps = Clustered(rng.lognormal(0, 0.3, n * 100), np.repeat(np.arange(n), 100), n)
    steps = rng.normal(6, 0.2, 20_000)
    rows = [
        ("p99 of 10k requests, 2000 replicates", best_of(lambda: quantile_replicates(x, 0.99, 2000, rng))),
        ("mean of 10k requests, 2000 replicates", best_of(lambda: mean_replicates(x, 2000, rng))),
        ("ITL p50, 10k requests x 100 gaps, 2000 replicates",
         best_of(lambda: clustered_replicates(gaps, 0.5, 2000, rng))),
        ("ITL mean, 10k requests x 100 gaps, 2000 replicates",
         best_of(lambda: clustered_replicates(gaps, None, 2000, rng))),
        ("step p50, 20k steps, 2000 block replicates", best_of(lambda: block_replicates(steps, 0.5, 2000, rng))),
        ("rank (Hodges-Lehmann + Mann-Whitney), 10k vs 10k", best_of(lambda: rank_shift(x, y, 0.95))),
    ]
    lines = ["# Gate statistics cost", "",
             f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
             f"Python {platform.python_version()}, numpy {np.__version__} (shared with other work; best of 3).", "",
             "| estimator | seconds |", "| --- | ---: |"]
    lines += [f"| {name} | {t:.3f} |" for name, t in rows]
    out = Path(__file__).parent / "results" / "gate_stats.md"
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
