"""The configuration linked to a run (`configs` / `config_values`, normalised keys) and the
facts of the run's load that the checks compare it with, each read by SQL kept for evidence."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import duckdb

from playbooks.sql import fetch, fetch_one

CONFIG_SQL = """
SELECT c.config_id, c.engine, c.version, c.source_kind, v.key, v.value, v.origin
FROM configs c JOIN config_values v USING (config_id)
WHERE c.config_id = (SELECT config_id FROM configs WHERE run_id = $run_id
                     ORDER BY created_at DESC, config_id DESC LIMIT 1)
"""

# The engine's own count of running and waiting requests over the run: its step log where it
# has one, else the vLLM-named gauges it exported.
QUEUE_SQL = """
WITH steps AS (
  SELECT num_running AS running, num_waiting AS waiting FROM engine_steps WHERE run_id = $run_id
), gauges AS (
  SELECT t_ns, max(value) FILTER (name = 'vllm:num_requests_running') AS running,
         max(value) FILTER (name = 'vllm:num_requests_waiting') AS waiting
  FROM metric_samples WHERE run_id = $run_id
   AND name IN ('vllm:num_requests_running', 'vllm:num_requests_waiting')
  GROUP BY t_ns
), src AS (
  SELECT 'engine_steps' AS source, running, waiting FROM steps
  UNION ALL
  SELECT 'metric_samples', running, waiting FROM gauges WHERE NOT EXISTS (SELECT 1 FROM steps)
)
SELECT any_value(source) AS source, count(*) AS samples, max(running) AS peak_running,
       max(waiting) AS peak_waiting,
       count(*) FILTER (waiting > 0) AS samples_waiting,
       count(*) FILTER (waiting > 0 AND running >= $max_num_seqs) AS samples_full_and_waiting
FROM src
"""

LOAD_SQL = """
SELECT count(*) AS requests,
       (SELECT max(in_flight) FROM client_samples WHERE run_id = $run_id) AS peak_in_flight,
       quantile_cont(coalesce(prompt_tokens, target_input_tokens), 0.5) AS p50_prompt,
       quantile_cont(coalesce(prompt_tokens, target_input_tokens), 0.9) AS p90_prompt,
       max(coalesce(prompt_tokens, target_input_tokens) + coalesce(max_tokens, 0)) AS longest,
       count(*) FILTER (coalesce(prompt_tokens, target_input_tokens) + coalesce(max_tokens, 0)
                        > $max_model_len) AS over_limit,
       count(*) FILTER (coalesce(prompt_tokens, target_input_tokens) + coalesce(max_tokens, 0)
                        > $max_model_len AND error_class IS NOT NULL) AS over_limit_failed,
       count(*) FILTER (error_class IS NOT NULL) AS failed
FROM requests WHERE run_id = $run_id
"""

TTFT_SQL = """
SELECT quantile_cont(ttft_ms, 0.5) AS p50, quantile_cont(ttft_ms, 0.99) AS p99
FROM request_latency WHERE run_id = $run_id AND ttft_ms IS NOT NULL
"""


@dataclass
class LinkedConfig:
    config_id: str
    engine: str
    version: str | None
    source_kind: str
    values: dict[str, Any]                    # key -> parsed value
    origin: dict[str, str]                    # key -> set | default | resolved
    sql: str

    def get(self, key: str) -> Any:
        return self.values.get(key)

    def number(self, key: str) -> float | None:
        v = self.values.get(key)
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


@dataclass
class RunLoad:
    workload: dict[str, Any]
    arrivals: dict[str, Any]
    facts: dict[str, Any] = field(default_factory=dict)
    sql: dict[str, str] = field(default_factory=dict)


def linked_config(con: duckdb.DuckDBPyConnection, run_id: str) -> LinkedConfig | None:
    sql, rows = fetch(con, CONFIG_SQL, run_id=run_id)
    if not rows:
        return None
    values, origin = {}, {}
    for _, _, _, _, key, value, org in rows:
        try:
            values[key] = json.loads(value) if value is not None else None
        except json.JSONDecodeError:
            values[key] = value
        origin[key] = org
    cid, engine, version, kind = rows[0][:4]
    return LinkedConfig(cid, engine, version, kind, values, origin, sql)


def run_load(con: duckdb.DuckDBPyConnection, run_id: str, cfg: LinkedConfig) -> RunLoad:
    row = con.execute("SELECT config FROM runs WHERE run_id = ?", [run_id]).fetchone()
    run_cfg = json.loads(row[0]) if row and row[0] else {}
    load = RunLoad(run_cfg.get("workload") or {}, run_cfg.get("arrivals") or {})
    big = 2**62
    mns = cfg.number("max_num_seqs")
    mml = cfg.number("max_model_len")
    sql, q = fetch_one(con, QUEUE_SQL, run_id=run_id, max_num_seqs=int(mns) if mns else big)
    load.sql["queue"] = sql
    load.facts.update(dict(zip(("queue_source", "queue_samples", "peak_running", "peak_waiting",
                                "samples_waiting", "samples_full_and_waiting"), q, strict=True)))
    sql, r = fetch_one(con, LOAD_SQL, run_id=run_id, max_model_len=int(mml) if mml else big)
    load.sql["load"] = sql
    load.facts.update(dict(zip(("requests", "peak_in_flight", "p50_prompt", "p90_prompt",
                                "longest_request", "over_max_model_len", "over_max_model_len_failed",
                                "failed"), r, strict=True)))
    sql, t = fetch_one(con, TTFT_SQL, run_id=run_id)
    load.sql["ttft"] = sql
    load.facts.update({"ttft_p50_ms": t[0], "ttft_p99_ms": t[1]})
    return load
