"""What one replica does to the fleet's tail: the fleet p99 with and without its requests, and
its share of the requests above the fleet p99 against its share of all requests (a replica
with a third of the traffic and nine tenths of the slow requests is the tail). The same at
p90: a short run has few requests above its p99 (2 of 150), where one host hiccup on a
healthy replica decides the share; the p90 share rests on ten times as many."""

from __future__ import annotations

from dataclasses import dataclass

import duckdb

from playbooks.sql import fetch

METRICS = {"ttft": "ttft_ms", "tpot": "tpot_ms", "e2e": "e2e_ms"}

TAIL_SQL = """
WITH l AS (
  SELECT r.replica, x.{col} AS v
  FROM requests r JOIN request_latency x USING (run_id, request_idx)
  WHERE r.run_id = $run_id AND r.phase = 'measure' AND r.error_class IS NULL
    AND r.replica IS NOT NULL AND x.{col} IS NOT NULL
), p AS (SELECT quantile_cont(v, 0.99) AS p99, quantile_cont(v, 0.9) AS p90 FROM l)
SELECT any_value(p.p99) AS fleet_p99,
       (SELECT quantile_cont(v, 0.99) FROM l WHERE replica <> $replica) AS p99_without,
       count(*) FILTER (replica = $replica) / count(*) AS share_of_requests,
       count(*) FILTER (replica = $replica AND v > p.p99)
         / nullif(count(*) FILTER (v > p.p99), 0) AS share_above_p99,
       count(*) FILTER (v > p.p99) AS above_p99,
       any_value(p.p90) AS fleet_p90,
       (SELECT quantile_cont(v, 0.9) FROM l WHERE replica <> $replica) AS p90_without,
       count(*) FILTER (replica = $replica AND v > p.p90)
         / nullif(count(*) FILTER (v > p.p90), 0) AS share_above_p90
FROM l, p
"""


@dataclass(frozen=True)
class TailEffect:
    metric: str
    fleet_p99_ms: float | None
    p99_without_ms: float | None
    share_of_requests: float | None
    share_above_p99: float | None
    above_p99: int
    sql: str
    fleet_p90_ms: float | None = None
    p90_without_ms: float | None = None
    share_above_p90: float | None = None

    @property
    def p99_reduction(self) -> float | None:
        """How much lower the fleet p99 is without the replica (0.3 = 30% lower)."""
        if not self.fleet_p99_ms or self.p99_without_ms is None:
            return None
        return 1.0 - self.p99_without_ms / self.fleet_p99_ms


def tail_effect(con: duckdb.DuckDBPyConnection, run_id: str, replica: str, metric: str) -> TailEffect:
    sql, rows = fetch(con, TAIL_SQL.replace("{col}", METRICS[metric]), run_id=run_id, replica=replica)
    p99, without, share, above_share, above, p90, without90, above90 = rows[0] if rows else (None,) * 8
    return TailEffect(metric, p99, without, share, above_share, int(above or 0), sql, p90, without90,
                      above90)
