"""Per-tenant accounting: what each tenant's requests cost the engine, priced on the roofline.

Each request that got its first token is priced with `infbench.specs.token_cost`, the prices
the bundled engine's fair-share policy charges with:
- prefill: the compute of its uncached prompt tokens after its cached ones;
- decode: its output tokens after the first (the first comes out of the prefill), each its
  share of a decode step's weight read plus the KV it reads. The share is 1/n for a step
  decoding n sequences; n(t) is the number of the run's requests decoding at time t (between
  first and last content), so a request's weight share is its decode tokens times the mean of
  1/n(t) over its own decode span. The client sees only its own requests: traffic from
  elsewhere on the same engine is not in n(t) (the shares are of this run's work).
A tenant is the request's `tenant` column (the body's `user`); requests without one are the
tenant None. A fleet run prices each replica's concurrency apart.

The functions return plain columns (numpy arrays, what the playbook reads); `tenant_table`
and `request_table` give the same as pandas DataFrames for the Python API, the SQL they read
in `.attrs["sql"]`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from infbench.specs import get_gpu, get_model
from infbench.specs.roofline import CostModel, cost_model
from infbench.specs.token_cost import (
    decode_layer_tokens,
    kv_seconds,
    prefill_seconds,
    step_weight_seconds,
)
from infbench.store import get_run
from playbooks.engine_setup import EngineSetup, engine_setup
from playbooks.sql import fetch, fetch_numpy

# Every request that reached the engine's output (a first token): its work is known. Phases
# are all kept (warm-up work is engine time too).
REQUESTS_SQL = """
SELECT request_idx, tenant, coalesce(replica, '') AS replica, send_ns, first_content_ns,
       coalesce(last_content_ns, first_content_ns) AS last_content_ns,
       coalesce(end_ns, last_content_ns, first_content_ns) AS end_ns,
       prompt_tokens, coalesce(cached_tokens, 0) AS cached_tokens,
       greatest(coalesce(output_tokens, 0), 1) AS output_tokens
FROM requests
WHERE run_id = $run_id AND first_content_ns IS NOT NULL AND prompt_tokens IS NOT NULL
ORDER BY send_ns, request_idx
"""
# Every request sent, by tenant: the share of requests (served or not).
SENT_SQL = """
SELECT tenant, count(*) AS sent,
       count(*) FILTER (WHERE first_content_ns IS NULL OR prompt_tokens IS NULL) AS unpriced
FROM requests WHERE run_id = $run_id GROUP BY tenant ORDER BY tenant NULLS FIRST
"""
# Requests still waiting for their first token define each tenant's backlog (contention.py);
# those that never got one wait until their stream ended.
BACKLOG_SQL = """
SELECT tenant, send_ns, coalesce(first_content_ns, end_ns, last_chunk_ns, send_ns) AS until_ns
FROM requests WHERE run_id = $run_id AND send_ns IS NOT NULL
ORDER BY send_ns
"""


@dataclass
class Priced:
    """The run's priced requests, one entry per request in send order."""

    tenant: list[str | None]
    request_idx: np.ndarray
    send_ns: np.ndarray
    first_ns: np.ndarray
    last_ns: np.ndarray
    prompt_tokens: np.ndarray
    cached_tokens: np.ndarray
    output_tokens: np.ndarray
    prefill_s: np.ndarray
    decode_s: np.ndarray
    mean_decode_batch: float
    sql: str

    @property
    def cost_s(self) -> np.ndarray:
        return self.prefill_s + self.decode_s

    @property
    def ttft_ms(self) -> np.ndarray:
        return (self.first_ns - self.send_ns) / 1e6

    @property
    def wait_ms(self) -> np.ndarray:
        """TTFT less the request's own prefill on the roofline: time spent behind others."""
        return np.maximum(self.ttft_ms - self.prefill_s * 1e3, 0.0)


def run_cost_model(model: str, gpu: str, tp: int = 1, weight_format: str = "bf16",
                   kv_format: str = "bf16") -> CostModel:
    """The roofline coefficients the prices come from; ValueError (SpecError) naming an
    unknown model or GPU."""
    return cost_model(get_model(model), get_gpu(gpu), tp, weight_format, kv_format)


def _inv_batch_integral(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray,
                                                                        np.ndarray, float]:
    """n(t) = spans covering t. Returns (event times, F at them, 1/n after them, mean n over
    the time n > 0), F(t) = integral of 1/n(t) where n > 0."""
    times = np.concatenate([starts, ends]).astype(np.float64)
    delta = np.concatenate([np.ones(starts.size), -np.ones(ends.size)])
    order = np.lexsort((delta, times))  # at one instant the ends go first
    times, delta = times[order], delta[order]
    n = np.cumsum(delta)
    inv = np.where(n > 0, 1.0 / np.maximum(n, 1.0), 0.0)
    dt = np.diff(times)
    f = np.concatenate([[0.0], np.cumsum(inv[:-1] * dt)])
    busy = float(np.sum(dt[n[:-1] > 0]))
    mean_n = float(np.sum(n[:-1] * dt) / busy) if busy > 0 else 1.0
    return times, f, inv, mean_n


def _integral_at(times: np.ndarray, f: np.ndarray, inv: np.ndarray, t: np.ndarray) -> np.ndarray:
    k = np.clip(np.searchsorted(times, t, side="right") - 1, 0, max(times.size - 1, 0))
    return f[k] + inv[k] * (t - times[k])


def price_requests(con: duckdb.DuckDBPyConnection, run_id: str, cm: CostModel) -> Priced:
    sql, cols = fetch_numpy(con, REQUESTS_SQL, run_id=run_id)
    tenant = [None if t is None else str(t) for t in cols["tenant"].tolist()]
    replica = np.asarray(cols["replica"].tolist(), dtype=object)
    send, first, last = (np.asarray(cols[k], dtype=np.float64)
                         for k in ("send_ns", "first_content_ns", "last_content_ns"))
    prompt, cached, out = (np.asarray(cols[k], dtype=np.int64)
                           for k in ("prompt_tokens", "cached_tokens", "output_tokens"))
    cached = np.minimum(cached, np.maximum(prompt - 1, 0))
    prefill = np.array([prefill_seconds(cm, int(p - c), int(c)) for p, c in zip(prompt, cached, strict=True)])
    steps = np.maximum(out - 1, 0)  # decode steps: the first token comes out of the prefill
    kv = np.array([kv_seconds(cm, decode_layer_tokens(cm.kv, int(p) + 1, int(n)))
                   for p, n in zip(prompt, steps, strict=True)])
    share = np.zeros(send.size)
    mean_batches = []
    for r in np.unique(replica) if replica.size else []:
        mask = replica == r
        times, f, inv, mean_n = _inv_batch_integral(first[mask], last[mask])
        mean_batches.append(mean_n)
        span = last[mask] - first[mask]
        integral = _integral_at(times, f, inv, last[mask]) - _integral_at(times, f, inv, first[mask])
        # mean of 1/n over the request's own decode span (a request alone: 1)
        share[mask] = np.where(span > 0, integral / np.where(span > 0, span, 1.0), 1.0)
    mean_batch = float(np.mean(mean_batches)) if mean_batches else 1.0
    weight_s = step_weight_seconds(cm, max(1, round(mean_batch)))
    decode = steps * share * weight_s + kv
    return Priced(tenant, np.asarray(cols["request_idx"], dtype=np.int64), send, first, last,
                  prompt, cached, out, prefill, decode, mean_batch, sql)


def tenant_rows(con: duckdb.DuckDBPyConnection, run_id: str, priced: Priced) -> tuple[str, list[dict[str, Any]]]:
    """(sql, rows): one row per tenant, the largest engine share first."""
    sql, sent_rows = fetch(con, SENT_SQL, run_id=run_id)
    sent = {(None if t is None else str(t)): (int(n), int(u)) for t, n, u in sent_rows}
    total_sent = sum(n for n, _ in sent.values()) or 1
    total_cost = float(priced.cost_s.sum()) or 1.0
    names = np.asarray([t if t is not None else "\0" for t in priced.tenant], dtype=object)
    rows: list[dict[str, Any]] = []
    for t, (n_sent, unpriced) in sent.items():
        m = names == (t if t is not None else "\0")
        cost = float(priced.cost_s[m].sum())
        ttft, wait = priced.ttft_ms[m], priced.wait_ms[m]
        rows.append({
            "tenant": t, "requests": n_sent, "priced": int(m.sum()), "unpriced": unpriced,
            "request_share": n_sent / total_sent,
            "prefill_tokens": int((priced.prompt_tokens[m] - priced.cached_tokens[m]).sum()),
            "cached_tokens": int(priced.cached_tokens[m].sum()),
            "output_tokens": int(priced.output_tokens[m].sum()),
            "prefill_s": float(priced.prefill_s[m].sum()), "decode_s": float(priced.decode_s[m].sum()),
            "cost_s": cost, "engine_share": cost / total_cost,
            "share_ratio": (cost / total_cost) / (n_sent / total_sent),
            "ttft_p50_ms": _q(ttft, 0.5), "ttft_p90_ms": _q(ttft, 0.9),
            "wait_p50_ms": _q(wait, 0.5), "wait_p90_ms": _q(wait, 0.9)})
    rows.sort(key=lambda r: -r["engine_share"])
    return sql, rows


def _q(a: np.ndarray, q: float) -> float | None:
    return float(np.quantile(a, q)) if a.size else None


def _frame(columns: dict[str, Any], sql: str) -> Any:
    df = pa.table(columns).to_pandas()  # pandas: `pip install infbench[analysis]`
    df.attrs["sql"] = sql
    return df


def resolve_pricing(con: duckdb.DuckDBPyConnection, run: str, model: str | None = None,
                    gpu: str | None = None, tp: int | None = None) -> tuple[str, CostModel, EngineSetup]:
    """(run_id, cost model, setup) of a run: its recorded engine setup, the given values on
    top. ValueError naming what is missing (a GPU, a model) or unknown."""
    r = get_run(con, run)
    setup = engine_setup(r.config, r.model, {"model": model, "gpu": gpu, "tensor_parallel_size": tp})
    if setup.gpu is None:
        raise ValueError("the run does not say which GPU served it: pass --gpu (e.g. H100-SXM)")
    if setup.model is None:
        raise ValueError("the run does not say which model it served: pass --model")
    cm = run_cost_model(str(setup.model), str(setup.gpu), setup.tensor_parallel_size,
                        setup.weight_format, setup.kv_format)
    return r.run_id, cm, setup


def request_table(con: duckdb.DuckDBPyConnection, run: str = "last", *, model: str | None = None,
                  gpu: str | None = None, tp: int | None = None) -> Any:
    """One row per priced request (pandas DataFrame): tenant, tokens, prefill_s, decode_s,
    cost_s, ttft_ms, wait_ms."""
    run_id, cm, _ = resolve_pricing(con, run, model, gpu, tp)
    p = price_requests(con, run_id, cm)
    return _frame({"request_idx": p.request_idx, "tenant": p.tenant,
                   "prompt_tokens": p.prompt_tokens, "cached_tokens": p.cached_tokens,
                   "output_tokens": p.output_tokens, "prefill_s": p.prefill_s,
                   "decode_s": p.decode_s, "cost_s": p.cost_s, "ttft_ms": p.ttft_ms,
                   "wait_ms": p.wait_ms}, p.sql)


def tenant_table(con: duckdb.DuckDBPyConnection, run: str = "last", *, model: str | None = None,
                 gpu: str | None = None, tp: int | None = None) -> Any:
    """One row per tenant (pandas DataFrame): requests and their share, prefill, cached and
    output tokens, their roofline cost (s) and share of the engine, TTFT and wait quantiles."""
    run_id, cm, _ = resolve_pricing(con, run, model, gpu, tp)
    p = price_requests(con, run_id, cm)
    sql, rows = tenant_rows(con, run_id, p)
    keys = list(rows[0]) if rows else ["tenant"]
    return _frame({k: [r[k] for r in rows] for k in keys}, p.sql + ";\n" + sql)
