"""What a run's traffic was, property by property, measured from its stored requests.

Six properties, each with the SQL that measured it (the evidence) and, where the store
lacks what would measure it, why and which data would tell:

- `input_lengths`: prompt tokens per request (the server's count, else the target's);
- `output_lengths`: tokens generated per request;
- `prefix_share`: the share of each prompt that is a prefix another request already sent:
  the server's `cached_tokens` where it reported them, else what the workload repeats by
  construction (a shared-prefix group after its first request; nothing for synthetic or
  structured prompts);
- `arrivals`: concurrency and burstiness: a closed loop's slots, or an open loop's send
  times (their inter-arrival CV², 1 for Poisson, above 1 bursty);
- `sampling`: the run's temperature (top_p and n are not recorded: infbench sends n = 1);
- `structured`: the share of requests constrained by a JSON schema.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import duckdb
import numpy as np

from infbench.store import get_run
from playbooks.sql import fetch_numpy, render

PROPERTIES = ("input_lengths", "output_lengths", "prefix_share", "arrivals", "sampling", "structured")
TITLES = {"input_lengths": "input length distribution", "output_lengths": "output length distribution",
          "prefix_share": "prefix-cache hit rate (shared prefix share)",
          "arrivals": "concurrency and arrival burstiness", "sampling": "sampling parameters",
          "structured": "structured-output share"}
# A cached_tokens column counts as measured when this share of requests reported it.
REPORTING = 0.9

_OK = "run_id = $run_id AND phase = 'measure' AND error_class IS NULL AND output_tokens > 0"
_STRUCTURED = ("(json_extract_string(runs.config, '$.workload.workload') = 'structured' OR "
               "(json_extract_string(runs.config, '$.workload.workload') = 'replay' AND contains(label, ':')))")

REQUESTS_SQL = f"""
SELECT request_idx, coalesce(prompt_tokens, target_input_tokens) AS input_tokens, output_tokens,
       cached_tokens, label,
       (coalesce(intended_send_ns, send_ns) - min(coalesce(intended_send_ns, send_ns)) OVER ()) / 1e9 AS at_s,
       {_STRUCTURED} AS structured,
       (first_content_ns - send_ns) / 1e6 AS ttft_ms,
       CASE WHEN output_tokens > 1 THEN (coalesce(last_choices_ns, last_content_ns) - first_content_ns)
            / 1e6 / (output_tokens - 1) END AS tpot_ms
FROM requests JOIN runs USING (run_id)
WHERE {_OK.replace('run_id =', 'requests.run_id =')}
ORDER BY request_idx
"""

SQL = {
    "input_lengths": f"""
SELECT count(*) AS requests, avg(coalesce(prompt_tokens, target_input_tokens)) AS mean,
       quantile_cont(coalesce(prompt_tokens, target_input_tokens), 0.5) AS p50,
       quantile_cont(coalesce(prompt_tokens, target_input_tokens), 0.9) AS p90
FROM requests WHERE {_OK}""",
    "output_lengths": f"""
SELECT count(*) AS requests, avg(output_tokens) AS mean, quantile_cont(output_tokens, 0.5) AS p50,
       quantile_cont(output_tokens, 0.9) AS p90, avg(max_tokens) AS mean_max_tokens
FROM requests WHERE {_OK}""",
    "prefix_share": f"""
SELECT count(*) AS requests, count(cached_tokens) AS reporting_cached,
       sum(cached_tokens) / sum(coalesce(prompt_tokens, target_input_tokens))
         FILTER (WHERE cached_tokens IS NOT NULL) AS cached_share,
       sum(coalesce(prompt_tokens, target_input_tokens)) AS prompt_tokens
FROM requests WHERE {_OK}""",
    "arrivals": f"""
WITH r AS (
  SELECT send_ns, coalesce(last_choices_ns, last_content_ns, end_ns) AS done_ns,
         coalesce(intended_send_ns, send_ns)
           - lag(coalesce(intended_send_ns, send_ns)) OVER (ORDER BY coalesce(intended_send_ns, send_ns)) AS gap_ns
  FROM requests WHERE {_OK})
SELECT json_extract_string(runs.config, '$.arrivals.kind') AS kind,
       CAST(json_extract(runs.config, '$.arrivals.concurrency') AS INTEGER) AS slots,
       sum(done_ns - send_ns) / (max(done_ns) - min(send_ns)) AS mean_in_flight,
       (count(*) - 1) / ((max(send_ns) - min(send_ns)) / 1e9) AS rate_per_s,
       var_samp(gap_ns) / (avg(gap_ns) * avg(gap_ns)) AS gap_cv2
FROM r, runs WHERE runs.run_id = $run_id GROUP BY runs.config""",
    "sampling": """
SELECT CAST(json_extract(config, '$.sampling.temperature') AS DOUBLE) AS temperature,
       CAST(json_extract(config, '$.sampling.ignore_eos') AS BOOLEAN) AS ignore_eos
FROM runs WHERE run_id = $run_id""",
    "structured": f"""
SELECT count(*) AS requests, avg(CASE WHEN {_STRUCTURED} THEN 1.0 ELSE 0.0 END) AS share
FROM requests JOIN runs USING (run_id) WHERE {_OK.replace('run_id =', 'requests.run_id =')}""",
}


@dataclass
class RunProfile:
    """One run's traffic: per-request rows (request order) and each property's figures."""

    run_id: str
    model: str | None
    endpoint: str | None
    url: str | None
    config: dict[str, Any]
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    shared_share: np.ndarray | None   # per request: shared prefix / prompt; None: not measured
    structured: np.ndarray            # per request: bool
    schema_labels: list[str | None]
    at_s: np.ndarray                  # send offsets (intended where scheduled)
    closed_slots: int | None          # a closed loop's concurrency; None: open loop
    temperature: float | None
    per_request: dict[str, np.ndarray] = field(default_factory=dict)  # ttft_ms, tpot_ms
    figures: dict[str, dict[str, Any]] = field(default_factory=dict)
    sql: dict[str, str] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)   # property -> what could not be measured

    @property
    def requests(self) -> int:
        return len(self.input_tokens)


def _implied_shared(config: dict[str, Any], labels: list[str], inputs: np.ndarray) -> np.ndarray | None:
    """Per request, the share of its prompt the workload repeats by construction; None where
    only the prompts' text (or the trace file) would tell."""
    wl = config.get("workload") or {}
    kind = wl.get("workload")
    if kind in ("synthetic", "structured"):
        return np.zeros(len(labels))
    if kind == "prefix":
        seen: set[str] = set()
        out = []
        for label, n in zip(labels, inputs.tolist(), strict=True):
            out.append(min(1.0, float(wl.get("prefix_tokens") or 0) / n) if label in seen else 0.0)
            seen.add(label)
        return np.asarray(out)
    return None


def profile(con: duckdb.DuckDBPyConnection, ref: str) -> RunProfile:
    """Measure a run's six properties; StoreError for an unknown run, ValueError for a run
    with no successful measured request."""
    run = get_run(con, ref)
    rid = run.run_id
    sql, cols = fetch_numpy(con, REQUESTS_SQL, run_id=rid)
    if not len(cols["request_idx"]):
        raise ValueError(f"run {rid}: no successful measured request to take its traffic from")
    inputs = np.asarray(cols["input_tokens"], dtype=float)
    outputs = np.asarray(cols["output_tokens"], dtype=float)
    labels = [str(x) if x is not None else "" for x in cols["label"].tolist()]
    structured = np.asarray(cols["structured"], dtype=bool)
    arrivals = run.config.get("arrivals") or {}
    closed = int(arrivals.get("concurrency") or 0) if arrivals.get("kind") == "closed" else None
    temperature = (run.config.get("sampling") or {}).get("temperature")
    prof = RunProfile(rid, run.model, run.endpoint, run.target_url, run.config, inputs, outputs, None,
                      structured, [lab.rsplit(":", 1)[-1] if s else None for lab, s in zip(labels, structured, strict=True)],
                      np.asarray(cols["at_s"], dtype=float), closed,
                      None if temperature is None else float(temperature))
    prof.sql["requests"] = sql
    for name in ("ttft_ms", "tpot_ms"):
        prof.per_request[name] = np.asarray(np.ma.filled(cols[name], np.nan), dtype=float)
    for name, text in SQL.items():
        prof.sql[name], prof.figures[name] = named_row(con, text, run_id=rid)
    cached = cols["cached_tokens"]
    mask = getattr(cached, "mask", None)
    reported = np.ones(len(inputs), bool) if mask is None else ~np.asarray(mask, dtype=bool)
    if reported.mean() >= REPORTING:
        values = np.where(reported, np.asarray(np.ma.filled(cached, 0), dtype=float), 0.0)
        prof.shared_share = np.clip(values / np.maximum(inputs, 1.0), 0.0, 1.0)
        prof.figures["prefix_share"]["source"] = "cached_tokens"
    else:
        prof.shared_share = _implied_shared(run.config, labels, inputs)
        prof.figures["prefix_share"]["source"] = "workload" if prof.shared_share is not None else None
        if prof.shared_share is None:
            prof.missing["prefix_share"] = (
                f"{reported.mean():.0%} of its requests carry cached_tokens and its workload "
                f"({(run.config.get('workload') or {}).get('workload')}) does not say what it repeats: the "
                "server's usage.prompt_tokens_details.cached_tokens (vLLM: --enable-prompt-tokens-details), "
                "its prefix-cache hit counters, or the prompts' text would tell")
    if prof.shared_share is not None:
        prof.figures["prefix_share"]["share"] = round(float(
            np.sum(prof.shared_share * inputs) / max(np.sum(inputs), 1.0)), 4)
    if temperature is None:
        prof.missing["sampling"] = ("its configuration records no temperature (an imported run): "
                                    "the requests' sampling fields would tell")
    if prof.endpoint is None:
        prof.endpoint = (run.config.get("target") or {}).get("endpoint")
    return prof


def named_row(con: duckdb.DuckDBPyConnection, sql: str, **params: Any) -> tuple[str, dict[str, Any]]:
    """(the rendered SQL, its first row by column name); an empty dict for no row."""
    text = render(sql, **params)
    cur = con.execute(text)
    row = cur.fetchone()
    names = [d[0] for d in cur.description or []]
    return text, {} if row is None else {k: _plain(v) for k, v in zip(names, row, strict=True)}


def _plain(v: Any) -> Any:
    if isinstance(v, float | int | str | bool) or v is None:
        return round(v, 4) if isinstance(v, float) else v
    return float(v)
