"""Fixed and growing memory over a run, growth per finished request, and which suspects
that rate rules out.

Memory that grows with the number of finished requests is regressed on that count (the
engine's own counter and its RSS come from the same /metrics scrape, so every pair is
consistent): the slope is bytes retained per finished request, with its 95% interval.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import duckdb
import numpy as np

from playbooks.findings import Evidence, Finding
from playbooks.memory.stats import Fit, ols
from playbooks.sql import fetch, fetch_numpy

MIB = 1 << 20
# Growth is a finding when its interval excludes zero and it adds up over the run to more
# than this, or to more than this share of the process: allocator noise and caches that fill
# once (a ring buffer, a histogram) stay below both.
MATERIAL_BYTES = 16 * MIB
MATERIAL_SHARE = 0.02

LEDGER_SQL = """
SELECT t_ns, requests_finished_total AS finished, process_rss_bytes AS rss,
       allocator_allocated_bytes AS allocated, allocator_reserved_bytes AS reserved,
       kv_blocks_total, kv_blocks_used, preemptions_total, num_waiting, num_running, kv_usage
FROM memory_samples
WHERE run_id = $run_id
ORDER BY t_ns
"""

# Device memory (NVML / dcgm-exporter samples in gpu_samples, every GPU summed per sample)
# against the finished-request count of the latest /metrics scrape at or before it.
DEVICE_SQL = """
WITH dev AS (
  SELECT t_ns, sum(mem_used_bytes) AS used
  FROM gpu_samples
  WHERE run_id = $run_id AND mem_used_bytes IS NOT NULL
  GROUP BY t_ns
), m AS (
  SELECT t_ns, requests_finished_total FROM memory_samples
  WHERE run_id = $run_id AND requests_finished_total IS NOT NULL
)
SELECT dev.t_ns, m.requests_finished_total AS finished, dev.used
FROM dev ASOF JOIN m ON dev.t_ns >= m.t_ns
ORDER BY dev.t_ns
"""

COMPONENTS_SQL = """
SELECT regexp_extract(labels, 'component="([^"]*)"', 1) AS component,
       min(value) AS first_bytes, max(value) AS max_bytes, count(*) AS samples
FROM metric_samples
WHERE run_id = $run_id AND name = 'reference_engine_memory_bytes'
GROUP BY 1
ORDER BY 1
"""

# The largest decode batch seen so far, step by step: CUDA graphs are captured per batch
# size, so a graph pool could only grow when a new, larger batch first appears.
BATCH_SQL = """
SELECT (start_s * 1e9 - (SELECT t0_monotonic_ns FROM runs WHERE run_id = $run_id))::BIGINT AS t_ns,
       max(decode_seqs) OVER (ORDER BY step_id) AS max_batch_so_far
FROM engine_steps
WHERE run_id = $run_id
ORDER BY step_id
"""


@dataclass
class Series:
    name: str
    fit: Fit | None
    first: float
    last: float
    growth: float          # slope x finished requests over the run
    growing: bool


@dataclass
class Growth:
    sql: str
    samples: int
    finished: int          # requests finished over the sampled span
    series: list[Series] = field(default_factory=list)
    halves: tuple[Fit | None, Fit | None] = (None, None)
    ledger: dict[str, Any] = field(default_factory=dict)

    def get(self, name: str) -> Series | None:
        return next((s for s in self.series if s.name == name), None)


def load_ledger(con: duckdb.DuckDBPyConnection, run_id: str) -> tuple[str, dict[str, Any]]:
    return fetch_numpy(con, LEDGER_SQL, run_id=run_id)


def _series(name: str, x: np.ndarray, y: np.ndarray, share: float = MATERIAL_SHARE) -> Series | None:
    ok = ~(np.isnan(x) | np.isnan(y))
    x, y = x[ok], y[ok]
    if len(x) < 3:
        return None
    fit = ols(x, y)
    span = float(x.max() - x.min())
    growth = fit.slope * span if fit is not None else 0.0
    material = max(MATERIAL_BYTES, share * float(np.median(y)))
    growing = bool(fit is not None and fit.lo > 0 and growth >= material)
    return Series(name, fit, float(y[0]), float(y[-1]), growth, growing)


def floats(col: Any) -> np.ndarray:
    arr = np.ma.filled(np.ma.asarray(col, dtype=float), np.nan) if np.ma.isMaskedArray(col) \
        else np.asarray([np.nan if v is None else v for v in col], dtype=float)
    return arr


def analyse_growth(con: duckdb.DuckDBPyConnection, run_id: str) -> Growth | None:
    sql, cols = load_ledger(con, run_id)
    if not len(cols["t_ns"]):
        return None
    finished = floats(cols["finished"])
    g = Growth(sql, len(finished), int(np.nanmax(finished) - np.nanmin(finished))
               if np.isfinite(finished).any() else 0, ledger=cols)
    # The allocator's counters are exact (no heap noise): the fixed floor alone decides.
    for name, share in (("rss", MATERIAL_SHARE), ("reserved", 0.0), ("allocated", 0.0)):
        s = _series(name, finished, floats(cols[name]), share)
        if s is not None:
            g.series.append(s)
    try:
        _, dev = fetch_numpy(con, DEVICE_SQL, run_id=run_id)
    except duckdb.CatalogException:  # a store from before gpu_samples existed
        dev = {"finished": []}
    if len(dev["finished"]):
        # Device memory is mostly the preallocated pool and moves by whole allocations, not
        # by a heap's noise: the fixed floor alone decides.
        s = _series("device_used", floats(dev["finished"]), floats(dev["used"]), share=0.0)
        if s is not None:
            g.series.append(s)
    rss = floats(cols["rss"])
    ok = ~(np.isnan(finished) | np.isnan(rss))
    if ok.sum() >= 6:
        x, y = finished[ok], rss[ok]
        mid = (x.min() + x.max()) / 2
        g.halves = (ols(x[x <= mid], y[x <= mid]), ols(x[x >= mid], y[x >= mid]))
    return g


def components(con: duckdb.DuckDBPyConnection, run_id: str) -> tuple[str, list[tuple]]:
    return fetch(con, COMPONENTS_SQL, run_id=run_id)


def _mib(x: float) -> str:
    return f"{x / MIB:,.1f} MiB"


def _rate(f: Fit) -> str:
    return f"{f.slope:,.0f} B/request (95%: {f.lo:,.0f} to {f.hi:,.0f})"


def suspects(g: Growth, kv_total: np.ndarray, batch: tuple[str, list[tuple]] | None) -> list[dict[str, str]]:
    """What each classic cause of growth predicts, held against the measured rate."""
    rss = g.get("rss")
    out: list[dict[str, str]] = []
    pool = kv_total[~np.isnan(kv_total)]
    if len(pool):
        fixed = float(pool.min()) == float(pool.max())
        out.append({"suspect": "KV pool", "status": "ruled_out" if fixed else "fits",
                    "why": (f"the pool stayed at {int(pool[0]):,} blocks: it is allocated at start "
                            "and cannot grow" if fixed else "the pool's block count changed")})
    else:
        out.append({"suspect": "KV pool", "status": "untested", "why": "no KV block total in /metrics"})
    first, second = g.halves
    linear = (first is not None and second is not None and rss is not None and rss.fit is not None
              and second.slope > 0.5 * first.slope and second.slope < 2 * first.slope)
    out.append({"suspect": "per-request retained objects (a cache or list that keeps something of "
                "every finished request)",
                "status": "fits" if linear else "ruled_out" if first and second else "untested",
                "why": (f"growth is linear in finished requests: {first.slope:,.0f} B/request in the "
                        f"first half, {second.slope:,.0f} in the second" if first and second and linear
                        else f"the rate changed from {first.slope:,.0f} to {second.slope:,.0f} B/request "
                        "between the halves: not a constant amount per request" if first and second
                        else "too few samples to compare the halves")})
    alloc, reserved = g.get("allocated"), g.get("reserved")
    if alloc is not None and reserved is not None and reserved.fit and alloc.fit:
        gap = reserved.fit.slope - alloc.fit.slope
        frag = gap > 0.5 * reserved.fit.slope and reserved.growing
        out.append({"suspect": "allocator fragmentation", "status": "fits" if frag else "ruled_out",
                    "why": f"reserved grows {reserved.fit.slope:,.0f} B/request, allocated "
                           f"{alloc.fit.slope:,.0f}: " + ("the cache holds memory no tensor uses"
                                                          if frag else "live tensors account for it")})
    else:
        sat = first is not None and second is not None and second.slope < 0.33 * first.slope
        out.append({"suspect": "allocator fragmentation", "status": "fits" if sat else "ruled_out"
                    if linear else "untested",
                    "why": "growth levels off, as a fragmented heap does once its free lists settle"
                    if sat else "fragmentation levels off; this growth keeps the same rate per "
                    "request" if linear else "no allocator counters and no clear shape"})
    if batch is not None and batch[1]:
        out.append(_graph_pools(g, batch[1]))
    else:
        out.append({"suspect": "CUDA graph pools", "status": "untested",
                    "why": "no step log to tell when new batch sizes appeared"})
    return out


def _graph_pools(g: Growth, batch_rows: list[tuple]) -> dict[str, str]:
    """Graphs are captured once per batch size: a graph pool can only grow across a scrape
    interval in which a larger decode batch than any before appeared. Growth inside intervals
    without one cannot be theirs."""
    t_step = np.array([r[0] for r in batch_rows], dtype=float)
    max_b = np.array([r[1] or 0 for r in batch_rows], dtype=float)
    new_at = t_step[np.flatnonzero(np.diff(max_b, prepend=0.0) > 0)]
    t, rss = floats(g.ledger["t_ns"]), floats(g.ledger["rss"])
    ok = ~np.isnan(rss)
    t, rss = t[ok], rss[ok]
    if len(t) < 3:
        return {"suspect": "CUDA graph pools", "status": "untested", "why": "too few samples"}
    # Interval i is (t[i], t[i+1]]: did a new largest batch appear in it?
    with_new = np.zeros(len(t) - 1, dtype=bool)
    idx = np.searchsorted(t, new_at, side="left") - 1
    with_new[idx[(idx >= 0) & (idx < len(t) - 1)]] = True
    with_new[:1] |= bool((new_at <= t[0]).any())  # before the first scrape: in the first interval
    rise = np.diff(rss)
    quiet = float(rise[~with_new].sum())
    total = float(rss[-1] - rss[0])
    if total > 0 and quiet >= max(MATERIAL_BYTES, 0.5 * total):
        return {"suspect": "CUDA graph pools", "status": "ruled_out",
                "why": f"{_mib(quiet)} of the {_mib(total)} growth came in the "
                       f"{int((~with_new).sum())} scrape intervals with no new decode batch size "
                       f"(graphs are captured once per size; {len(new_at)} new sizes appeared)"}
    return {"suspect": "CUDA graph pools", "status": "fits",
            "why": f"the growth came with new, larger decode batches ({len(new_at)} appeared)"}


def growth_finding(g: Growth, sus: list[dict[str, str]], comp: tuple[str, list[tuple]],
                   batch_sql: str | None) -> Finding | None:
    rss = g.get("rss")
    if rss is None or not rss.growing or rss.fit is None:
        return None
    f = rss.fit
    fits = [s["suspect"] for s in sus if s["status"] == "fits"]
    ev = [Evidence("rss_vs_finished_requests",
                   {"slope_bytes_per_request": round(f.slope), "ci95_low": round(f.lo),
                    "ci95_high": round(f.hi), "r2": round(f.r2, 4), "samples": f.n,
                    "requests_finished": g.finished, "growth": _mib(rss.growth)}, g.sql,
                   "least squares of process_rss_bytes on requests_finished_total, one point per "
                   "/metrics scrape")]
    if g.halves[0] and g.halves[1]:
        ev.append(Evidence("rate_by_half", {"first_half": round(g.halves[0].slope),
                                            "second_half": round(g.halves[1].slope)}, g.sql,
                           "the same regression on each half of the finished-request range"))
    ev.append(Evidence("components", {(c[0] or "?"): ("fixed" if c[1] == c[2] else "changed") + f" at {_mib(c[2])}"
                                      for c in comp[1]} or {"components": "none exposed"}, comp[0],
                       "what the engine set aside at start (reference engine's memory_bytes gauge)"))
    ev.append(Evidence("suspects", {s["suspect"]: f"{s['status']}: {s['why']}" for s in sus},
                       batch_sql, "each suspect's prediction held against the measured rate"))
    return Finding(
        "memory_growth_per_request", "Memory grows with every finished request", 0.9,
        "critical" if rss.growth > 0.1 * max(rss.first, 1.0) else "warning",
        f"Process memory grew {_mib(rss.growth)} over {g.finished:,} finished requests: "
        f"{_rate(f)}. It fits: {', '.join(fits) or 'none of the listed suspects'}.",
        ev,
        ["Take two heap snapshots (tracemalloc, or `py-spy dump` / memray on the engine) some "
         "hundred requests apart and diff them by allocation site.",
         "Check what is kept per request after it finishes: output caches, request logs, "
         "metrics labels per request id, tokenizer caches.",
         f"Until fixed: restart before {_restart_hint(rss)}."])


def _restart_hint(rss: Series) -> str:
    f = rss.fit
    if f is None or f.slope <= 0:
        return "memory runs out"
    per_gib = (1 << 30) / f.slope
    return f"every ~{per_gib:,.0f} requests per GiB of headroom"
