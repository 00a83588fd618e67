"""What the engine's batches were made of: distinct adapters per step against the max_loras
ceiling, and requests waiting for an adapter slot.

Two sources, the first found is read:
- the bundled engine's step log (`engine_steps.lora_adapters`, `lora_waiting`, `max_loras`);
- vLLM's `vllm:lora_requests_info` in the run's scrapes: a gauge per label set, set to the
  time of its last update, whose labels carry `max_lora` and the adapters of the running and
  of the waiting requests. At each scrape the label set updated last is the engine's state;
  a scrape is at the ceiling when `max_lora` adapters run, and blocked when, there, an
  adapter waits that is not running (its requests can only wait for a slot). vLLM 0.32 marks
  a request waiting only when its QUEUED event reaches the API server, which comes with the
  request's first output: a request held back by max_loras is not in `waiting_lora_adapters`
  (seen on its CPU build: chat requests queued for 8 s behind sql ones, the label said
  waiting="sql"). So the adapters the clients had sent and not had a first token from at the
  scrape count as waiting too (the run's own requests).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import duckdb

from playbooks.sql import fetch, fetch_one

STEPS_SQL = """
SELECT count(*) AS steps,
       count(*) FILTER (WHERE lora_adapters >= max_loras) AS at_ceiling,
       count(*) FILTER (WHERE lora_waiting > 0) AS blocked,
       avg(lora_adapters) AS mean_adapters, max(lora_adapters) AS max_adapters,
       avg(lora_waiting) FILTER (WHERE lora_waiting > 0) AS mean_waiting_when_blocked,
       max(max_loras) AS max_loras, sum(lora_ms) AS lora_ms,
       sum(end_s - start_s) * 1e3 AS step_ms
FROM engine_steps
WHERE run_id = $run_id AND max_loras IS NOT NULL AND (prefill_tokens > 0 OR decode_seqs > 0)
"""

# Each scrape's latest label set, with the adapters of the requests the clients had sent and
# not yet had a first token from at that moment (the requests that wait, as the client saw it).
INFO_SQL = """
WITH s AS (
  SELECT t_ns, labels,
         row_number() OVER (PARTITION BY t_ns, coalesce(replica, '') ORDER BY value DESC) AS latest
  FROM metric_samples
  WHERE run_id = $run_id AND source = 'metrics' AND name = 'vllm:lora_requests_info'
),
q AS (
  SELECT s.t_ns, list(DISTINCT r.adapter) FILTER (WHERE r.adapter IS NOT NULL) AS queued
  FROM s LEFT JOIN requests r
    ON r.run_id = $run_id AND r.send_ns <= s.t_ns
   AND coalesce(r.first_content_ns, r.end_ns, r.send_ns) > s.t_ns
  WHERE s.latest = 1
  GROUP BY s.t_ns
)
SELECT s.t_ns, s.labels, q.queued FROM s JOIN q USING (t_ns) WHERE s.latest = 1 ORDER BY s.t_ns
"""
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


@dataclass
class Composition:
    source: str          # "engine_steps" or "lora_requests_info"
    samples: int         # steps with work, or scrapes
    at_ceiling: int      # ... whose batch held max_loras adapters
    blocked: int         # ... with requests waiting for an adapter slot
    max_loras: int
    values: dict[str, float | int | None]
    sql: str

    @property
    def blocked_share(self) -> float:
        return self.blocked / self.samples if self.samples else 0.0


def _labels(text: str) -> dict[str, str]:
    return {k: v for k, v in _LABEL.findall(text)}


def _names(value: str) -> set[str]:
    return {a for a in value.split(",") if a}


def from_steps(con: duckdb.DuckDBPyConnection, run_id: str) -> Composition | None:
    sql, row = fetch_one(con, STEPS_SQL, run_id=run_id)
    if not row or not row[0]:
        return None
    steps, ceiling, blocked, mean_a, max_a, mean_w, max_loras, lora_ms, step_ms = row
    values: dict[str, float | int | None] = {
        "steps": int(steps), "steps_at_max_loras": int(ceiling), "steps_with_requests_waiting_for_a_slot":
        int(blocked), "mean_adapters_per_step": round(float(mean_a), 3), "max_adapters_per_step": int(max_a),
        "mean_waiting_for_a_slot": None if mean_w is None else round(float(mean_w), 2),
        "max_loras": int(max_loras),
        "lora_share_of_step_time": round(float(lora_ms) / float(step_ms), 4) if step_ms else None}
    return Composition("engine_steps", int(steps), int(ceiling), int(blocked), int(max_loras), values, sql)


def from_info(con: duckdb.DuckDBPyConnection, run_id: str) -> Composition | None:
    sql, rows = fetch(con, INFO_SQL, run_id=run_id)
    if not rows:
        return None
    ceiling = blocked = 0
    max_loras = 0
    waiting_alone: set[str] = set()
    for _, text, queued in rows:
        labels = _labels(str(text))
        try:
            cap = int(labels.get("max_lora", ""))
        except ValueError:
            continue
        max_loras = max(max_loras, cap)
        running = _names(labels.get("running_lora_adapters", ""))
        # vLLM's own waiting list, and the adapters the clients still waited on a first token for
        waiting = _names(labels.get("waiting_lora_adapters", "")) | set(queued or ())
        if len(running) >= cap:
            ceiling += 1
            if waiting - running:
                blocked += 1
                waiting_alone |= waiting - running
    if not max_loras:
        return None  # no series carried a readable max_lora
    values: dict[str, float | int | None] = {
        "scrapes": len(rows), "scrapes_at_max_lora": ceiling,
        "scrapes_with_adapters_waiting_for_a_slot": blocked, "max_lora": max_loras,
        "adapters_seen_waiting_for_a_slot": len(waiting_alone)}
    return Composition("lora_requests_info", len(rows), ceiling, blocked, max_loras, values, sql)


def composition(con: duckdb.DuckDBPyConnection, run_id: str) -> Composition | None:
    """The step log where the engine keeps one, else vLLM's lora info; None without either."""
    return from_steps(con, run_id) or from_info(con, run_id)
