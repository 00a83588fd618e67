"""The headline metrics of one run, and their spread by resampling its requests.

- `throughput`: output tokens/s over the run (first send to last end), the benchmark's
  headline;
- `tokens_per_s_per_request`: output tokens/s per request in flight (output tokens over the
  summed request durations: throughput divided by the mean concurrency, Little's law);
- `ttft_ms`, `tpot_ms`: means over the successful measured requests.

The spread is a bootstrap over the run's requests (the run's span kept), so a run with few
requests or a heavy tail carries a wide interval.
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb
import numpy as np

from playbooks.sql import fetch_numpy, render

METRICS = ("throughput", "tokens_per_s_per_request", "ttft_ms", "tpot_ms")
UNITS = {"throughput": "tok/s", "tokens_per_s_per_request": "tok/s", "ttft_ms": "ms", "tpot_ms": "ms"}
HIGHER_IS_BETTER = {"throughput": True, "tokens_per_s_per_request": True, "ttft_ms": False, "tpot_ms": False}
BOOTSTRAP = 400

METRICS_SQL = """
SELECT count(*) AS requests,
       sum(output_tokens) / ((max(end_ns) - min(send_ns)) / 1e9) AS throughput,
       sum(output_tokens) / (sum(coalesce(last_choices_ns, last_content_ns) - send_ns) / 1e9)
         AS tokens_per_s_per_request,
       avg((first_content_ns - send_ns) / 1e6) AS ttft_ms,
       avg(CASE WHEN output_tokens > 1 THEN (coalesce(last_choices_ns, last_content_ns)
                - first_content_ns) / 1e6 / (output_tokens - 1) END) AS tpot_ms
FROM requests
WHERE run_id = $run_id AND phase = 'measure' AND error_class IS NULL AND output_tokens > 0
"""

_ROWS_SQL = """
SELECT send_ns, end_ns, coalesce(last_choices_ns, last_content_ns) AS done_ns, first_content_ns,
       output_tokens
FROM requests
WHERE run_id = $run_id AND phase = 'measure' AND error_class IS NULL AND output_tokens > 0
"""


@dataclass
class RunMetrics:
    run_id: str
    requests: int
    value: dict[str, float]        # the metric over the run
    spread: dict[str, np.ndarray]  # resampled values (BOOTSTRAP, fewer for a long run)
    sql: str


def _compute(send: np.ndarray, end: np.ndarray, done: np.ndarray, first: np.ndarray,
             out: np.ndarray, span_s: float, in_flight: float | None = None) -> dict[str, np.ndarray]:
    """Each metric over the requests (last axis): one run, or a batch of resamples of it.
    A resample's throughput is its tokens per request-second times the run's mean in flight:
    the run's own sum over a fixed span would not move when every request has the same length."""
    decode = out > 1
    tpot = np.where(decode, (done - first) / 1e6 / np.maximum(out - 1, 1), 0.0)
    per_request = out.sum(axis=-1) / ((done - send).sum(axis=-1) / 1e9)
    return {
        "throughput": out.sum(axis=-1) / span_s if in_flight is None else per_request * in_flight,
        "tokens_per_s_per_request": per_request,
        "ttft_ms": ((first - send) / 1e6).mean(axis=-1),
        "tpot_ms": tpot.sum(axis=-1) / np.maximum(decode.sum(axis=-1), 1),
    }


def run_metrics(con: duckdb.DuckDBPyConnection, run_id: str, seed: int = 0) -> RunMetrics:
    """The run's metrics (by the same SQL a user can rerun) and their bootstrap spread."""
    _, cols = fetch_numpy(con, _ROWS_SQL, run_id=run_id)
    n = len(cols["send_ns"])
    if n == 0:
        raise ValueError(f"run {run_id}: no successful measured request to measure")
    send, end, done, first, out = (np.asarray(cols[k], dtype=float) for k in
                                   ("send_ns", "end_ns", "done_ns", "first_content_ns", "output_tokens"))
    span_s = max((end.max() - send.min()) / 1e9, 1e-9)
    value = {k: float(v) for k, v in _compute(send, end, done, first, out, span_s).items()}
    # Fewer resamples for a long production run: the (resamples x requests) arrays stay small.
    draws = max(50, min(BOOTSTRAP, 4_000_000 // n))
    idx = np.random.default_rng([seed, n]).integers(0, n, (draws, n))
    in_flight = float((done - send).sum() / 1e9 / span_s)
    spread = _compute(send[idx], end[idx], done[idx], first[idx], out[idx], span_s, in_flight)
    return RunMetrics(run_id, n, value, spread, render(METRICS_SQL, run_id=run_id))
