"""Which periodic source fits a set of engine-wide stalls: the clock they keep time with.

Work done every N steps keeps time in steps; timers (metrics/log flush) in seconds; garbage
collection in allocations, which follow tokens produced; CUDA graph capture happens when a
batch shape is seen for the first time.

Each clock is fitted on its own (playbooks/periodicity.py); the clock with the best fit
sets the grid (which events are on the period, and how many periods lie between them), and
the other clocks are refitted on that same grid. So "every 2.5 s = every 379 steps" counts
the same periods in both units, and the clocks are ranked by how tightly the same events
keep time in each: the source's own clock has no drift, the others inherit the variation of
step times or of throughput.
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb
import numpy as np

from playbooks.sql import fetch_numpy
from playbooks.stalls.periodicity import PeriodFit, first_seen, fit_on_grid, fit_period

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
    grid_clock: str | None    # the clock whose fit set the common grid (None: no period)
    sources: list[Source]
    shapes_sql: str | None

    @property
    def primary(self) -> PeriodFit | None:
        return {"seconds": self.seconds, "steps": self.steps,
                "output tokens": self.tokens}.get(self.grid_clock or "")


# Jitter (in periods) that costs a clock a factor e in score: a source's own clock keeps
# its period to well under 1%, a clock that only follows it drifts by a few %.
JITTER_SCALE = 0.02


def _score(fit: PeriodFit | None) -> float:
    if fit is None:
        return 0.0
    # Share on the period (0 unless significant), discounted by the jitter, so that between
    # equally strong fits the tighter clock wins clearly (0.05% vs 0.8% is 0.98 vs 0.67).
    jitter = fit.jitter if np.isfinite(fit.jitter) else 1.0
    return fit.strength * float(np.exp(-jitter / JITTER_SCALE))


def common_grid(clocks: dict[str, tuple[np.ndarray, float]]) -> tuple[str | None, dict[str, PeriodFit | None]]:
    """Fit each clock (name -> (event times, quantum), same events in the same order; NaN
    where a clock does not know an event), take the best-scoring fit's grid and refit the
    other clocks on it. Returns the grid's clock (None when no clock is significantly
    periodic: each clock keeps its own fit then) and the fits."""
    own = {name: fit_period(x, q) for name, (x, q) in clocks.items()}
    best = max(own, key=lambda name: (_score(own[name]), (own[name].llr if own[name] else -np.inf)))
    lead = own[best]
    if lead is None or not lead.significant:
        return None, own
    fits: dict[str, PeriodFit | None] = {}
    for name, (x, q) in clocks.items():
        fits[name] = lead if name == best else fit_on_grid(x, lead.grid, q)
    return best, fits


def rank_sources(con: duckdb.DuckDBPyConnection, run_id: str, times_s: np.ndarray,
                 step_ids: np.ndarray | None, tokens: np.ndarray) -> Periodicity:
    """`times_s`, `step_ids` (-1 where unknown) and `tokens`: one entry per event."""
    clocks: dict[str, tuple[np.ndarray, float]] = {"seconds": (np.asarray(times_s, dtype=float), 0.0),
                                                   "output tokens": (tokens.astype(float), 1.0)}
    if step_ids is not None:
        ids = np.asarray(step_ids, dtype=float)
        clocks["steps"] = (np.where(ids >= 0, ids, np.nan), 1.0)
    grid_clock, fits = common_grid(clocks)
    sec, stp, tok = fits["seconds"], fits.get("steps"), fits["output tokens"]
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
    if step_ids is not None and np.any(np.asarray(step_ids) >= 0):
        known = np.asarray(step_ids)[np.asarray(step_ids) >= 0]
        shapes_sql, cols = fetch_numpy(con, STEP_SHAPES_SQL, run_id=run_id)
        ids = np.asarray(cols["step_id"], dtype=np.int64)
        new = first_seen(np.asarray(cols["batch"], dtype=np.int64))
        pos = np.clip(np.searchsorted(ids, known), 0, max(len(ids) - 1, 0))
        share = float(np.mean(new[pos])) if len(ids) else 0.0
        sources.append(Source("CUDA graph capture / compilation for a batch shape seen for the "
                              "first time", "batch shape", share, None,
                              "capture sizes (cudagraph_capture_sizes) and warm-up; stalls stop "
                              "once every batch size has been seen"))
    sources.sort(key=lambda s: -s.score)
    return Periodicity(sec, stp, tok, grid_clock, sources, shapes_sql)
