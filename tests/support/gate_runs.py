"""Synthetic per-run samples for gate tests: lognormal latencies scaled by `scale`."""

from __future__ import annotations

from datetime import datetime

import numpy as np

from infbench.gate.samples import RunSamples
from infbench.gate.stats import Clustered
from infbench.store import RunRow


def synthetic_run(n: int, scale: float, seed: int) -> RunSamples:
    """`n` requests whose latencies (and ITL gaps, step times) are `scale` times a fixed
    distribution; output tokens per request fall as `scale` rises, so throughput does too."""
    rng = np.random.default_rng(seed)
    e2e = rng.lognormal(np.log(200 * scale), 0.2, n)
    send = np.sort(rng.uniform(0, n / 40, n))
    row = RunRow(f"r{seed}", datetime(2025, 1, 1), None, "completed", None, None, None, None, {}, {}, False, 0)
    per = {k: e2e.copy() for k in ("ttft", "ttft_intended", "tpot", "e2el", "e2el_intended")}
    gaps = rng.lognormal(np.log(6 * scale), 0.1, n * 10)
    return RunSamples(row, row.run_id, per, Clustered(gaps, np.repeat(np.arange(n), 10), n),
                      rng.normal(6 * scale, 0.1, n * 5), send, send + e2e / 1e3,
                      np.full(n, 32.0 / scale), np.full(n, 64.0), (0.0, float(send.max() + 1)))
