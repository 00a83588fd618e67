"""Prefill interference and head-of-line blocking, from the client timeline and step log.

A long prompt's prefill shares steps with the running decoders (chunked prefill) or runs
alone (no chunking). Either way decoders see longer ITL while it is prefilling, and short
requests that arrive meanwhile wait for it: head-of-line blocking, paid in TTFT.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import duckdb

from playbooks.engine_setup import EngineSetup
from playbooks.sql import fetch, fetch_one

# A prompt is long when it is several times the run's typical prompt and past the size at
# which a prefill chunk stops hiding behind the weight reads of a decode step (the roofline
# ridge is ~300 tokens on H100-class GPUs for dense models).
LONG_RATIO = 4.0
LONG_FLOOR_TOKENS = 512
ELEVATION_FINDING = 2.0   # decoders' ITL during long prefills vs otherwise
_SLACK_NS = 5_000_000     # the step that finishes a prefill also emits the decoders' tokens

_LONG_CTE = """
WITH r AS (
  SELECT request_idx, send_ns, first_content_ns, prompt_tokens, output_tokens
  FROM requests WHERE run_id = $run_id AND first_content_ns IS NOT NULL AND prompt_tokens IS NOT NULL
), cut AS (SELECT greatest($long_ratio * median(prompt_tokens), $long_floor) AS tokens FROM r),
long AS (SELECT r.* FROM r, cut WHERE r.prompt_tokens >= cut.tokens)
"""

LONG_PROMPTS_SQL = _LONG_CTE + """
SELECT request_idx, prompt_tokens, send_ns, first_content_ns,
       (first_content_ns - send_ns) / 1e6 AS prefill_window_ms, (SELECT tokens FROM cut) AS cut
FROM long ORDER BY prompt_tokens DESC, request_idx
"""

# Decoders' gaps that end while some other request's long prompt is prefilling, vs the rest.
ITL_DURING_SQL = _LONG_CTE + """
, g AS (
  SELECT request_idx, t_ns, itl_ms FROM itl
  WHERE run_id = $run_id AND itl_ms IS NOT NULL AND NOT coalesced
), tagged AS (
  SELECT g.itl_ms, EXISTS (SELECT 1 FROM long l WHERE l.request_idx <> g.request_idx
                           AND g.t_ns > l.send_ns AND g.t_ns <= l.first_content_ns + $slack_ns) AS during
  FROM g
)
SELECT during, count(*) AS gaps, median(itl_ms) AS median_ms, quantile_cont(itl_ms, 0.99) AS p99_ms,
       max(itl_ms) AS max_ms
FROM tagged GROUP BY during ORDER BY during
"""

# Short requests that arrived while a long prompt was prefilling, and the TTFT they paid
# over the TTFT of short requests that did not queue behind one.
HOL_SQL = _LONG_CTE + """
, shorts AS (
  SELECT r.request_idx, r.send_ns, (r.first_content_ns - r.send_ns) / 1e6 AS ttft_ms
  FROM r, cut WHERE r.prompt_tokens < cut.tokens
), behind AS (
  SELECT s.*, l.request_idx AS long_idx, l.prompt_tokens AS long_tokens
  FROM shorts s JOIN long l ON s.send_ns >= l.send_ns AND s.send_ns < l.first_content_ns
), base AS (
  SELECT median(ttft_ms) AS base_ttft_ms FROM shorts
  WHERE request_idx NOT IN (SELECT request_idx FROM behind)
)
SELECT long_idx, any_value(long_tokens) AS long_tokens, count(*) AS shorts_behind,
       max(ttft_ms) AS lockout_ms, any_value(base_ttft_ms) AS base_ttft_ms,
       avg(ttft_ms - base_ttft_ms) AS added_ttft_mean_ms, sum(ttft_ms - base_ttft_ms) AS added_ttft_total_ms
FROM behind, base GROUP BY long_idx ORDER BY added_ttft_total_ms DESC NULLS LAST
"""

# Step durations split by what the step carried; a line fit of duration against tokens per
# step over the steps that are not host pauses (long steps with no prefill are left out).
STEP_COST_SQL = """
WITH s AS (
  SELECT (end_s - start_s) * 1e3 AS ms, prefill_tokens, decode_seqs,
         prefill_tokens + decode_seqs AS tokens
  FROM engine_steps WHERE run_id = $run_id AND prefill_tokens + decode_seqs > 0
), pure AS (SELECT median(ms) AS med FROM s WHERE prefill_tokens = 0)
SELECT count(*) FILTER (WHERE prefill_tokens = 0) AS decode_steps,
       (SELECT med FROM pure) AS decode_step_ms,
       count(*) FILTER (WHERE prefill_tokens > 0 AND decode_seqs > 0) AS mixed_steps,
       median(ms) FILTER (WHERE prefill_tokens > 0 AND decode_seqs > 0) AS mixed_step_ms,
       max(ms) FILTER (WHERE prefill_tokens > 0) AS max_prefill_step_ms,
       max(tokens) AS max_tokens_per_step,
       median(decode_seqs) FILTER (WHERE prefill_tokens > 0) AS decoders_in_prefill_steps,
       regr_slope(ms, tokens) FILTER (WHERE prefill_tokens > 0 OR ms <= 3 * (SELECT med FROM pure))
         AS ms_per_token,
       regr_intercept(ms, tokens) FILTER (WHERE prefill_tokens > 0 OR ms <= 3 * (SELECT med FROM pure))
         AS fixed_ms
FROM s
"""


@dataclass
class PrefillResult:
    long_prompts: list[dict[str, Any]]
    long_sql: str
    itl_during: dict[str, Any] | None = None
    itl_outside: dict[str, Any] | None = None
    itl_sql: str | None = None
    hol: list[dict[str, Any]] = field(default_factory=list)
    hol_sql: str | None = None
    steps: dict[str, Any] | None = None
    steps_sql: str | None = None

    @property
    def elevation(self) -> float | None:
        if not self.itl_during or not self.itl_outside or not self.itl_outside["median_ms"]:
            return None
        return self.itl_during["median_ms"] / self.itl_outside["median_ms"]


def _dicts(cols: list[str], rows: list[tuple[Any, ...]]) -> list[dict[str, Any]]:
    return [dict(zip(cols, r, strict=True)) for r in rows]


def analyse(con: duckdb.DuckDBPyConnection, run_id: str, has_steps: bool) -> PrefillResult:
    params = {"run_id": run_id, "long_ratio": LONG_RATIO, "long_floor": LONG_FLOOR_TOKENS}
    sql, rows = fetch(con, LONG_PROMPTS_SQL, **params)
    res = PrefillResult(_dicts(["request_idx", "prompt_tokens", "send_ns", "first_content_ns",
                                "prefill_window_ms", "cut"], rows), sql)
    if has_steps:
        res.steps_sql, row = fetch_one(con, STEP_COST_SQL, run_id=run_id)
        res.steps = dict(zip(["decode_steps", "decode_step_ms", "mixed_steps", "mixed_step_ms",
                              "max_prefill_step_ms", "max_tokens_per_step",
                              "decoders_in_prefill_steps", "ms_per_token", "fixed_ms"], row,
                             strict=True))
    if not res.long_prompts:
        return res
    res.itl_sql, rows = fetch(con, ITL_DURING_SQL, slack_ns=_SLACK_NS, **params)
    for r in _dicts(["during", "gaps", "median_ms", "p99_ms", "max_ms"], rows):
        if r["during"]:
            res.itl_during = r
        else:
            res.itl_outside = r
    res.hol_sql, rows = fetch(con, HOL_SQL, **params)
    res.hol = _dicts(["long_idx", "long_tokens", "shorts_behind", "lockout_ms", "base_ttft_ms",
                      "added_ttft_mean_ms", "added_ttft_total_ms"], rows)
    return res


def measured_budget(steps: dict[str, Any], itl_target_ms: float) -> int | None:
    """Tokens per step that keep the step (hence decoders' ITL) under the target, from the
    run's own step costs (fixed + per-token line)."""
    slope, fixed = steps.get("ms_per_token"), steps.get("fixed_ms")
    if slope is None or fixed is None or slope <= 0:
        return None
    tokens = (itl_target_ms - max(fixed, 0.0)) / slope
    return int(tokens) if tokens >= 1 else None


def roofline_budget(setup: EngineSetup, itl_target_ms: float, decoders: int, decode_ctx: int,
                    prefill_ctx: int, overhead_ms: float) -> int | None:
    """The largest per-step token budget whose roofline step time (decoders plus one prefill
    chunk filling the rest) plus the engine's fixed overhead meets the ITL target."""
    from infbench.specs import get_gpu, get_model
    from infbench.specs.roofline import step_time

    model, gpu = get_model(str(setup.model)), get_gpu(str(setup.gpu))
    decoders = max(decoders, 0)

    def ms(budget: int) -> float:
        chunk = budget - decoders
        bd = step_time(model, gpu, tp=setup.tensor_parallel_size, weight_format=setup.weight_format,
                       kv_format=setup.kv_format,
                       prefill_chunks=[(chunk, prefill_ctx)] if chunk > 0 else [],
                       decode_contexts=[decode_ctx] * decoders)
        return bd.seconds * 1e3 + overhead_ms

    lo = decoders + 1
    if ms(lo) > itl_target_ms:
        return None
    hi = 1 << 20
    while lo < hi:  # largest budget with ms(budget) <= target (step time grows with tokens)
        mid = (lo + hi + 1) // 2
        if ms(mid) <= itl_target_ms:
            lo = mid
        else:
            hi = mid - 1
    return lo
