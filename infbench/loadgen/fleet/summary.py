"""The per-replica part of a fleet run's summary, computed from the store like the rest.

One row per replica and one for the fleet: requests sent and their share, failures,
throughput, the load each replica met (mean and p90 of `requests.replica_concurrency`) and
TTFT, TPOT and e2e percentiles over measured, successful requests. Latencies per replica
are what the clients saw: a replica that is slower only because it got more load shows a
higher concurrency beside them; `infbench diagnose replicas` compares at matched load.
"""

from __future__ import annotations

from typing import Any

import duckdb

from infbench.loadgen.fleet.replicas import Replica, RoutePolicy

# Per replica (GROUPING SETS adds the fleet row, replica NULL); the duration is the run's
# measured window, shared by every replica so throughputs add up.
_SQL = """
WITH r AS (
  SELECT q.replica, q.phase, q.error_class, q.replica_concurrency, q.output_tokens,
         l.ttft_ms, l.tpot_ms, l.e2e_ms
  FROM requests q JOIN request_latency l USING (run_id, request_idx)
  WHERE q.run_id = ?
), span AS (
  SELECT greatest((max(coalesce(last_choices_ns, end_ns)) - min(send_ns)) / 1e9, 1e-9) AS s
  FROM requests WHERE run_id = ? AND phase = 'measure'
)
SELECT replica, grouping(replica) AS whole_fleet, count(*) AS sent,
       count(*) FILTER (phase = 'measure' AND error_class IS NULL) AS completed,
       count(*) FILTER (error_class IS NOT NULL) AS failed,
       avg(replica_concurrency) AS mean_conc, quantile_cont(replica_concurrency, 0.9) AS p90_conc,
       count(*) FILTER (phase = 'measure' AND error_class IS NULL) / any_value(span.s) AS rps,
       sum(output_tokens) FILTER (phase = 'measure' AND error_class IS NULL) / any_value(span.s) AS tok_s,
       quantile_cont(ttft_ms, [0.5, 0.99]) FILTER (phase = 'measure' AND error_class IS NULL) AS ttft,
       quantile_cont(tpot_ms, [0.5, 0.99]) FILTER (phase = 'measure' AND error_class IS NULL) AS tpot,
       quantile_cont(e2e_ms, [0.5, 0.99]) FILTER (phase = 'measure' AND error_class IS NULL) AS e2e
FROM r, span
GROUP BY GROUPING SETS ((replica), ())
"""


def _pair(v: Any) -> tuple[float | None, float | None]:
    return (v[0], v[1]) if v else (None, None)


def fleet_summary(con: duckdb.DuckDBPyConnection, run_id: str, replicas: list[Replica],
                  route: RoutePolicy, scrapes: dict[str, dict[str, int]]) -> dict[str, Any]:
    """`summary["fleet"]`: the routing, one entry per replica (in the run's order) and the
    fleet's totals. Concurrency of the fleet row is each request's own replica's."""
    rows = con.execute(_SQL, [run_id, run_id]).fetchall()
    by: dict[str | None, dict[str, Any]] = {}
    fleet: dict[str, Any] = {"requests_sent": 0}
    for (name, whole, sent, completed, failed, mean_c, p90_c, rps, tok_s, ttft, tpot, e2e) in rows:
        t50, t99 = _pair(ttft)
        p50, p99 = _pair(tpot)
        e50, e99 = _pair(e2e)
        d = {"requests_sent": sent, "completed": completed, "failed": failed,
                    "mean_concurrency": mean_c, "p90_concurrency": p90_c,
                    "request_throughput": rps, "output_throughput": tok_s,
                    "median_ttft_ms": t50, "p99_ttft_ms": t99, "median_tpot_ms": p50,
                    "p99_tpot_ms": p99, "median_e2el_ms": e50, "p99_e2el_ms": e99}
        if whole:
            fleet = d
        else:
            by[name] = d
    total_sent = fleet["requests_sent"]
    out = []
    for r in replicas:
        d = by.get(r.name, {"requests_sent": 0, "completed": 0, "failed": 0})
        d = {"name": r.name, "url": r.url, **d,
             "share": (d["requests_sent"] / total_sent) if total_sent else None,
             "scrapes": scrapes.get(r.name, {})}
        out.append(d)
    return {"route": route.describe(replicas), "replicas": out, "fleet": fleet}
