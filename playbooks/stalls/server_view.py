"""Numbers that need the server's side: TTFT split (client vs engine) and how the measured
decode step compares with the roofline of the same batch (uniform slowdown, not a stall)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import duckdb

from playbooks.engine_setup import EngineSetup
from playbooks.sql import fetch, fetch_one

# Counters only grow during a run: last minus first scrape is what this run added.
TTFT_SPLIT_SQL = """
WITH series AS (
  SELECT name, labels, max(value) - min(value) AS delta FROM metric_samples
  WHERE run_id = $run_id AND name IN ('vllm:time_to_first_token_seconds_sum',
        'vllm:time_to_first_token_seconds_count', 'vllm:request_queue_time_seconds_sum',
        'vllm:request_queue_time_seconds_count')
  GROUP BY name, labels
), m AS (SELECT name, sum(delta) AS delta FROM series GROUP BY name)
SELECT
  (SELECT avg((first_content_ns - send_ns) / 1e6) FROM requests
     WHERE run_id = $run_id AND error_class IS NULL AND first_content_ns IS NOT NULL) AS client_ttft_ms,
  (SELECT avg((headers_ns - send_ns) / 1e6) FROM requests
     WHERE run_id = $run_id AND error_class IS NULL AND headers_ns IS NOT NULL) AS to_headers_ms,
  (SELECT avg((first_content_ns - first_chunk_ns) / 1e6) FROM requests
     WHERE run_id = $run_id AND error_class IS NULL AND first_chunk_ns IS NOT NULL) AS first_chunk_to_content_ms,
  1e3 * (SELECT delta FROM m WHERE name = 'vllm:time_to_first_token_seconds_sum')
      / nullif((SELECT delta FROM m WHERE name = 'vllm:time_to_first_token_seconds_count'), 0)
      AS engine_ttft_ms,
  1e3 * (SELECT delta FROM m WHERE name = 'vllm:request_queue_time_seconds_sum')
      / nullif((SELECT delta FROM m WHERE name = 'vllm:request_queue_time_seconds_count'), 0)
      AS engine_queue_ms,
  (SELECT delta FROM m WHERE name = 'vllm:time_to_first_token_seconds_count') AS engine_requests,
  -- the load generator's own delay: a client that could not run on time stamps every
  -- chunk late, and that delay is outside the engine too
  (SELECT median(loop_lag_ms) FROM client_samples WHERE run_id = $run_id) AS client_loop_lag_p50_ms,
  (SELECT client_bound FROM runs WHERE run_id = $run_id) AS client_bound
"""

DECODE_STEP_SQL = """
WITH s AS (
  SELECT (end_s - start_s) * 1e3 AS ms, decode_seqs FROM engine_steps
  WHERE run_id = $run_id AND prefill_tokens = 0 AND decode_seqs > 0
), typical AS (SELECT median(ms) AS med FROM s)
SELECT median(ms) AS decode_step_ms, CAST(median(decode_seqs) AS INTEGER) AS decoders, count(*) AS steps,
       (SELECT CAST(median(prompt_tokens + output_tokens / 2) AS INTEGER) FROM requests
         WHERE run_id = $run_id AND error_class IS NULL) AS typical_context
FROM s, typical WHERE ms <= 3 * typical.med
"""

DECODE_CLIENT_SQL = """
SELECT (SELECT median(itl_ms) FROM itl WHERE run_id = $run_id AND NOT coalesced AND itl_ms IS NOT NULL)
         AS decode_step_ms,
       (SELECT CAST(median(in_flight) AS INTEGER) FROM client_samples
         WHERE run_id = $run_id AND in_flight > 0) AS decoders,
       (SELECT count(*) FROM itl WHERE run_id = $run_id) AS steps,
       (SELECT CAST(median(prompt_tokens + output_tokens / 2) AS INTEGER) FROM requests
         WHERE run_id = $run_id AND error_class IS NULL) AS typical_context
"""

SLOWDOWN_FINDING = 1.6   # measured decode step over roofline; real engines sit near 1.1-1.3


@dataclass
class TtftSplit:
    values: dict[str, Any]
    sql: str

    @property
    def available(self) -> bool:
        return self.values.get("engine_ttft_ms") is not None


@dataclass
class DecodeVsRoofline:
    measured_ms: float
    roofline_ms: float
    decoders: int
    context: int
    source: str     # engine_steps | client_itl
    sql: str

    @property
    def ratio(self) -> float:
        return self.measured_ms / self.roofline_ms if self.roofline_ms > 0 else float("nan")


def ttft_split(con: duckdb.DuckDBPyConnection, run_id: str) -> TtftSplit:
    sql, row = fetch_one(con, TTFT_SPLIT_SQL, run_id=run_id)
    cols = ["client_ttft_ms", "to_headers_ms", "first_chunk_to_content_ms", "engine_ttft_ms",
            "engine_queue_ms", "engine_requests", "client_loop_lag_p50_ms", "client_bound"]
    values = dict(zip(cols, row, strict=True))
    if values["engine_ttft_ms"] is not None and values["client_ttft_ms"] is not None:
        q = values["engine_queue_ms"]
        values["engine_prefill_and_first_token_ms"] = (
            values["engine_ttft_ms"] - q if q is not None else None)
        values["outside_engine_ms"] = values["client_ttft_ms"] - values["engine_ttft_ms"]
    return TtftSplit(values, sql)


def decode_vs_roofline(con: duckdb.DuckDBPyConnection, run_id: str, setup: EngineSetup,
                       has_steps: bool) -> DecodeVsRoofline | None:
    if not setup.model or not setup.gpu:
        return None
    from infbench.specs import get_gpu, get_model
    from infbench.specs.roofline import step_time

    sql, rows = fetch(con, DECODE_STEP_SQL if has_steps else DECODE_CLIENT_SQL, run_id=run_id)
    if not rows or any(v is None for v in rows[0]):
        return None
    measured, decoders, _, ctx = rows[0]
    if decoders <= 0:
        return None
    bd = step_time(get_model(str(setup.model)), get_gpu(str(setup.gpu)),
                   tp=setup.tensor_parallel_size, weight_format=setup.weight_format,
                   kv_format=setup.kv_format, decode_contexts=[max(int(ctx), 1)] * int(decoders))
    return DecodeVsRoofline(float(measured), bd.seconds * 1e3, int(decoders), int(ctx),
                            "engine_steps" if has_steps else "client_itl", sql)
