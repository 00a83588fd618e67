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

Resolution. Every clock is read at step boundaries: a timer fires at the first step that
starts after it is due, so in seconds its events scatter by up to one step duration even
though it keeps perfect time; a garbage collector triggers inside the step whose tokens
cross its threshold, so in tokens it scatters by one step's tokens; a step counter's events
fall on whole steps. Jitter within a clock's resolution (the spread that quantisation alone
gives, see `resolution`) is no evidence against that clock. When the step duration and the
tokens per step hardly vary, every clock sits at its resolution and the run cannot tell
the sources apart: the ranking then says so (a tie) instead of crowning the luckiest.
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb
import numpy as np

from playbooks.sql import fetch_numpy
from playbooks.stalls.periodicity import PeriodFit, first_seen, fit_on_grid, fit_period

STEP_SHAPES_SQL = """
SELECT step_id, decode_seqs + (prefill_tokens > 0)::INTEGER AS batch,
       end_s - start_s AS duration_s
FROM engine_steps WHERE run_id = $run_id ORDER BY step_id
"""


@dataclass
class Source:
    name: str
    clock: str                # steps | seconds | output tokens | batch shape
    score: float              # 0..1
    fit: PeriodFit | None
    check: str                # what to look at to confirm it
    # The score at the low end of the jitter's sampling interval: the best this clock could
    # score on these few events. A clock ties with the leader when that reaches RANK_TIE of
    # the leader's score (`tied`).
    score_high: float = 0.0


@dataclass
class Periodicity:
    seconds: PeriodFit | None
    steps: PeriodFit | None
    tokens: PeriodFit | None
    grid_clock: str | None    # the clock whose fit set the common grid (None: no period)
    sources: list[Source]
    shapes_sql: str | None

    def tied(self) -> list[Source]:
        """The leader and every clock that, within its sampling error, scores as well."""
        ranked = [x for x in self.sources if x.score > 0]
        if not ranked:
            return []
        lead = ranked[0]
        return [lead] + [x for x in ranked[1:] if max(x.score, x.score_high) >= RANK_TIE * lead.score]

    @property
    def primary(self) -> PeriodFit | None:
        return {"seconds": self.seconds, "steps": self.steps,
                "output tokens": self.tokens}.get(self.grid_clock or "")


# Jitter (in periods) that costs a clock a factor e in score: a source's own clock keeps
# its period to well under 1%, a clock that only follows it drifts by a few %.
JITTER_SCALE = 0.02


def resolution(quanta: np.ndarray) -> float:
    """Standard deviation of the delay from a due time, uniform in time (or tokens), to the
    end of the quantum it falls in, for quanta of these sizes (step durations, tokens per
    step). A due time lands in a quantum with probability proportional to its size, so
    long steps weigh more: E[delay^k] = E[q^(k+1)] / ((k+1) E[q])."""
    q = np.asarray(quanta, dtype=float)
    q = q[np.isfinite(q) & (q > 0)]
    if not len(q):
        return 0.0
    m1 = float(np.mean(q))
    mean = float(np.mean(q ** 2)) / (2 * m1)
    second = float(np.mean(q ** 3)) / (3 * m1)
    return float(np.sqrt(max(second - mean * mean, 0.0)))


# Ranks and ties. Two clocks' scores differ by their jitters, and a jitter measured on n
# events is a sample standard deviation, uncertain by sigma / sqrt(2 (n - 1)). A runner-up
# ties with the leader unless even the low end of its jitter's 2-standard-error interval
# scores below RANK_TIE of the leader: a 1 ms difference in the spread of 8 events 0.6 s
# apart is noise, not evidence for one source over another (a steady run on a busy CI
# host ranked steps 1.00 over the true seconds clock 0.92 on such a difference).
RANK_TIE = 0.95
_TIE_SE = 2.0


def _score(fit: PeriodFit | None, floor: float = 0.0, optimistic: bool = False) -> float:
    """Share on the period (0 unless significant), discounted by the jitter beyond the
    clock's resolution `floor` (same unit as the period), so that between equally strong
    fits the tighter clock wins clearly (0.05% vs 0.8% of a period is 0.98 vs 0.67).
    `optimistic`: at the low end of the jitter's sampling interval (see RANK_TIE)."""
    if fit is None:
        return 0.0
    jitter = fit.jitter if np.isfinite(fit.jitter) else 1.0
    if optimistic and np.isfinite(fit.jitter):
        jitter *= max(1.0 - _TIE_SE / np.sqrt(2.0 * max(fit.hits - 1, 1)), 0.0)
    # A sample standard deviation of n events at the floor exceeds it by up to ~2 standard
    # errors (1 / sqrt(2 (n - 1)) each) by chance alone.
    allowed = floor / fit.period * (1 + np.sqrt(2.0 / max(fit.hits - 1, 1)))
    excess = float(np.sqrt(max(jitter * jitter - allowed * allowed, 0.0)))
    return fit.strength * float(np.exp(-excess / JITTER_SCALE))


def common_grid(clocks: dict[str, tuple[np.ndarray, float]], floors: dict[str, float] | None = None,
                observed: dict[str, float] | None = None
                ) -> tuple[str | None, dict[str, PeriodFit | None]]:
    """Fit each clock (name -> (event times, quantum), same events in the same order; NaN
    where a clock does not know an event), take the best-scoring fit's grid and refit the
    other clocks on it. Returns the grid's clock (None when no clock is significantly
    periodic: each clock keeps its own fit then) and the fits. `floors`: each clock's
    resolution (see `resolution`), 0 where unknown. `observed`: the scale of the error a
    clock's event times were read with (see `fit_period`), 0 where exact."""
    obs = observed or {}
    own = {name: fit_period(x, q, obs.get(name, 0.0)) for name, (x, q) in clocks.items()}
    fl = floors or {}
    best = max(own, key=lambda name: (_score(own[name], fl.get(name, 0.0)),
                                      _llr(own[name])))
    lead = own[best]
    if lead is None or not lead.significant:
        return None, own
    fits: dict[str, PeriodFit | None] = {}
    for name, (x, q) in clocks.items():
        fits[name] = lead if name == best else fit_on_grid(x, lead.grid, q)
    return best, fits


def rank_sources(con: duckdb.DuckDBPyConnection, run_id: str, times_s: np.ndarray,
                 step_ids: np.ndarray | None, tokens: np.ndarray,
                 tokens_per_step: float = 1.0, client_gaps_s: np.ndarray | None = None) -> Periodicity:
    """`times_s`, `step_ids` (-1 where unknown) and `tokens`: one entry per event.
    `tokens_per_step`: how many tokens one step delivers (the streams running), used where
    the step log does not say. `client_gaps_s`: the run's ordinary inter-token gaps, where
    the event times are the client's (no step log): a stall then shows from the last token
    before it, which came up to one step earlier, so the seconds clock's times carry an
    error of those gaps' `resolution` (the fit's displaced share; also the clock's floor)."""
    # The tokens clock moves a whole step's tokens at a time: events at step boundaries sit
    # on multiples of the batch whatever their cause, so a "period" of one step's tokens
    # fits any set of events exactly. The batch is that clock's quantum, as 1 is the steps'.
    clocks: dict[str, tuple[np.ndarray, float]] = {
        "seconds": (np.asarray(times_s, dtype=float), 0.0),
        "output tokens": (tokens.astype(float), max(float(tokens_per_step), 1.0))}
    floors = {"seconds": 0.0, "steps": 0.0, "output tokens": 0.0}
    shapes_sql, new_shape_share = None, 0.0
    if step_ids is not None:
        ids = np.asarray(step_ids, dtype=float)
        clocks["steps"] = (np.where(ids >= 0, ids, np.nan), 1.0)
        known = np.asarray(step_ids)[np.asarray(step_ids) >= 0]
        if len(known):
            shapes_sql, cols = fetch_numpy(con, STEP_SHAPES_SQL, run_id=run_id)
            all_ids = np.asarray(cols["step_id"], dtype=np.int64)
            batch = np.asarray(cols["batch"], dtype=float)
            # The events' own (stalled) steps are not the clocks' quanta.
            normal = ~np.isin(all_ids, known)
            floors = {"seconds": resolution(np.asarray(cols["duration_s"], dtype=float)[normal]),
                      "steps": resolution(np.ones(1)), "output tokens": resolution(batch[normal])}
            if normal.any():
                clocks["output tokens"] = (clocks["output tokens"][0],
                                           max(float(np.median(batch[normal])), 1.0))
            new = first_seen(batch.astype(np.int64))
            pos = np.clip(np.searchsorted(all_ids, known), 0, max(len(all_ids) - 1, 0))
            new_shape_share = float(np.mean(new[pos])) if len(all_ids) else 0.0
    observed: dict[str, float] = {}
    if step_ids is None and client_gaps_s is not None and len(client_gaps_s):
        observed["seconds"] = floors["seconds"] = resolution(client_gaps_s)
    grid_clock, fits = common_grid(clocks, floors, observed)
    sec, stp, tok = fits["seconds"], fits.get("steps"), fits["output tokens"]
    def scores(fit: PeriodFit | None, clock: str) -> tuple[float, float]:
        return _score(fit, floors[clock]), _score(fit, floors[clock], optimistic=True)

    (s_stp, h_stp), (s_sec, h_sec), (s_tok, h_tok) = (
        scores(stp, "steps"), scores(sec, "seconds"), scores(tok, "output tokens"))
    sources = [
        Source("work every N engine steps (scheduler housekeeping, periodic cache/stat sweeps)",
               "steps", s_stp, stp,
               "the engine's per-step hooks: KV-cache/prefix-cache sweeps, stats every N steps",
               h_stp),
        Source("timer-driven host work (metrics/log flush, stats logger, health or autoscaler "
               "probes)", "seconds", s_sec, sec,
               "engine log intervals (vLLM logs stats every few seconds), scrape intervals, "
               "cron-like threads; py-spy dump during a stall", h_sec),
        Source("garbage collection / allocation-driven pauses (keeps time with tokens produced)",
               "output tokens", s_tok, tok,
               "run with gc.set_debug(gc.DEBUG_STATS) or gc.callbacks timing; try gc.freeze() "
               "after startup", h_tok),
    ]
    if shapes_sql is not None:
        sources.append(Source("CUDA graph capture / compilation for a batch shape seen for the "
                              "first time", "batch shape", new_shape_share, None,
                              "capture sizes (cudagraph_capture_sizes) and warm-up; stalls stop "
                              "once every batch size has been seen", new_shape_share))
    sources.sort(key=lambda s: -s.score)
    return Periodicity(sec, stp, tok, grid_clock, sources, shapes_sql)


def _llr(fit: PeriodFit | None) -> float:
    return fit.llr if fit is not None else -np.inf
