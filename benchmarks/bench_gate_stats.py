"""Cost of the gate's statistics at 10k requests (100 ITL gaps each), paired and unpaired,
and of a whole default gate on two paired runs: `python benchmarks/bench_gate_stats.py`.
Writes benchmarks/results/gate_stats.md with the machine description."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from machine_info import describe

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from infbench.gate.rank import overlapping_shift  # noqa: E402
from infbench.gate.rules import load_rules  # noqa: E402
from infbench.gate.stats import (  # noqa: E402
    Clustered,
    Mean,
    Quantile,
    Rate,
    block_replicates,
    overlap_factor,
    replicates,
)
from infbench.gate.verdict import run_gate  # noqa: E402
from tests.support.gate_runs import Machine, make_workload, simulate  # noqa: E402

B = 2000


def best_of(fn: Callable[[], object], repeat: int = 3) -> float:
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
    y = x * rng.lognormal(0.02, 0.05, n)
    start = np.sort(rng.uniform(0, 600, n))
    end = start + rng.lognormal(0, 0.5, n)
    owner = np.repeat(np.arange(n), 100)
    gaps = rng.lognormal(0, 0.3, n * 100)
    steps = rng.normal(6, 0.2, 20_000)
    tok = rng.integers(16, 512, n).astype(float)
    w = make_workload(10_000, 1)
    base, cand = simulate(w, Machine(), 1), simulate(w, Machine(), 2)
    rules = load_rules(None)
    rows = [
        (f"p99 of 10k requests, {B} replicates, unpaired", best_of(lambda: Quantile(x, 0.99).alone(B, rng))),
        (f"p99 of 10k request pairs, {B} replicates", best_of(lambda: replicates([Quantile(x, 0.99), Quantile(y, 0.99)], B, rng))),
        (f"mean of 10k request pairs, {B} replicates", best_of(lambda: replicates([Mean(x), Mean(y)], B, rng))),
        (f"throughput of 10k request pairs, {B} replicates",
         best_of(lambda: replicates([Rate(tok, x, 16.0), Rate(tok, y, 16.0)], B, rng))),
        (f"ITL p50, 10k requests x 100 gaps, {B} replicates", best_of(lambda: Clustered(gaps, owner, n, 0.5).alone(B, rng))),
        (f"ITL mean, 10k requests x 100 gaps, {B} replicates", best_of(lambda: Clustered(gaps, owner, n, None).alone(B, rng))),
        ("overlap factor, 10k requests", best_of(lambda: overlap_factor(y - x, start, end))),
        (f"step p50, 20k steps, {B} block replicates", best_of(lambda: block_replicates(steps, 0.5, B, rng))),
        ("paired p50 (Hodges-Lehmann, signed rank), 10k pairs",
         best_of(lambda: overlapping_shift(np.log(x), np.log(y), 0.95, paired=True, base_times=(start, end),
                                           cand_times=(start, end)))),
        ("unpaired rank (Hodges-Lehmann, Mann-Whitney), 10k vs 10k",
         best_of(lambda: overlapping_shift(x, y, 0.95, paired=False, base_times=(start, end),
                                           cand_times=(start, end)))),
        ("whole default gate (4 rules), two paired runs of 10k requests", best_of(lambda: run_gate(base, cand, rules))),
    ]
    lines = ["# Gate statistics cost", "", f"Machine: {describe(f'numpy {np.__version__}')}.",
             "Shared with other work; best of 3.", "", "| what | seconds |", "| --- | ---: |"]
    lines += [f"| {name} | {t:.3f} |" for name, t in rows]
    out = Path(__file__).parent / "results" / "gate_stats.md"
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
