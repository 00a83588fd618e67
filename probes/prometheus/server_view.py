"""The server's own latency percentiles for a run, from the histogram buckets a pull stored.

Whichever name the server used (vLLM before or after its renames, SGLang) is found through
`catalog.VARIANTS`; the window is the run itself (t_ns from 0 to the end of the pull). Each
quantile comes with the edges of the bucket it fell in, because a histogram knows no more:
a p99 "of 0.31 s" read from buckets (0.25, 0.5] means somewhere in that bucket (an upper
edge of null is +Inf: the quantile is then the highest finite edge, a lower bound).
"""

from __future__ import annotations

import math
from typing import Any

import duckdb

from probes.prometheus.catalog import VARIANTS
from probes.prometheus.histogram import window_histogram

MEANINGS = ("ttft", "itl", "e2e", "queue_time")
QUANTILES = (0.5, 0.9, 0.99)


def server_percentiles(con: duckdb.DuckDBPyConnection, run_id: str,
                       source: str = "prometheus") -> dict[str, Any]:
    """{meaning: {"name", "count", "p50_s", "p50_bucket_s": [lo, hi], ...}} for each latency
    histogram the run's stored samples hold; meanings without one are left out."""
    out: dict[str, Any] = {}
    for meaning in MEANINGS:
        for name in VARIANTS[meaning]:
            h = window_histogram(con, run_id, name, source=source, start_ns=0)
            if not h.count:
                continue
            row: dict[str, Any] = {"name": name, "count": h.count}
            for q in QUANTILES:
                key = f"p{round(q * 100)}"
                value, i = h.quantile(q), h.bucket_index(q)
                row[f"{key}_s"] = value
                if i is not None:
                    lower = h.bounds[i - 1] if i > 0 else 0.0
                    upper = h.bounds[i]  # null for +Inf: JSON has no infinity
                    row[f"{key}_bucket_s"] = [lower, upper if math.isfinite(upper) else None]
            out[meaning] = row
            break
    return out
