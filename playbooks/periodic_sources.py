"""Which periodic source fits a set of engine-wide stalls: the clock they keep time with.

Work done every N steps keeps time in steps; timers (metrics/log flush) in seconds; garbage
collection in allocations, which follow tokens produced; CUDA graph capture happens when a
batch shape is seen for the first time. The source whose clock aligns the stalls tightest
ranks first; the jitter in each clock is the correlation that separates the top two.
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb
import numpy as np

from playbooks.periodicity import PeriodFit, first_seen, fit_period
from playbooks.sql import fetch_numpy

STEP_SHAPES_SQL = """
SELECT step_id, decode_seqs + (prefill_tokens > 0)::INTEGER AS batch
FROM engine_steps WHERE run_id = $run_id ORDER BY step_id
"""


@dataclass
class Source:
    name: str
    clock: str                # steps | seconds | output tokens | batch shape
    score: float              # 0..1
    fit: PeriodFit | None
    check: str                # what to look at to confirm it


@dataclass
class Periodicity:
    seconds: PeriodFit | None
    steps: PeriodFit | None
    tokens: PeriodFit | None
    sources: list[Source]
    shapes_sql: str | None


def _score(fit: PeriodFit | None) -> float:
    if fit is None:
        return 0.0
    # Strength first; a tighter clock (lower jitter) wins between equally strong fits.
    return fit.strength * (1.0 - min(fit.jitter, 0.25))


def rank_sources(con: duckdb.DuckDBPyConnection, run_id: str, times_s: np.ndarray,
                 step_ids: np.ndarray | None, tokens: np.ndarray) -> Periodicity:
    sec = fit_period(times_s)
    stp = fit_period(step_ids) if step_ids is not None else None
    tok = fit_period(tokens.astype(float))
    sources = [
        Source("work every N engine steps (scheduler housekeeping, periodic cache/stat sweeps)",
               "steps", _score(stp), stp,
               "the engine's per-step hooks: KV-cache/prefix-cache sweeps, stats every N steps"),
        Source("timer-driven host work (metrics/log flush, stats logger, health or autoscaler "
               "probes)", "seconds", _score(sec), sec,
               "engine log intervals (vLLM logs stats every few seconds), scrape intervals, "
               "cron-like threads; py-spy dump during a stall"),
        Source("garbage collection / allocation-driven pauses (keeps time with tokens produced)",
               "output tokens", _score(tok), tok,
               "run with gc.set_debug(gc.DEBUG_STATS) or gc.callbacks timing; try gc.freeze() "
               "after startup"),
    ]
    shapes_sql = None
    if step_ids is not None and len(step_ids):
        shapes_sql, cols = fetch_numpy(con, STEP_SHAPES_SQL, run_id=run_id)
        ids = np.asarray(cols["step_id"], dtype=np.int64)
        new = first_seen(np.asarray(cols["batch"], dtype=np.int64))
        pos = np.clip(np.searchsorted(ids, step_ids), 0, max(len(ids) - 1, 0))
        share = float(np.mean(new[pos])) if len(ids) else 0.0
        sources.append(Source("CUDA graph capture / compilation for a batch shape seen for the "
                              "first time", "batch shape", share, None,
                              "capture sizes (cudagraph_capture_sizes) and warm-up; stalls stop "
                              "once every batch size has been seen"))
    sources.sort(key=lambda s: -s.score)
    return Periodicity(sec, stp, tok, sources, shapes_sql)
