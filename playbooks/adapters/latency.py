"""What the clients saw, by adapter: latency per adapter, and TTFT against the distinct
adapters that were in flight when a request was sent (what grows when adapters take turns)."""

from __future__ import annotations

from dataclasses import dataclass

import duckdb

from playbooks.sql import fetch

BY_ADAPTER_SQL = """
SELECT coalesce(adapter, 'base') AS adapter, count(*) AS requests,
       count(*) FILTER (WHERE error_class IS NULL) AS completed,
       quantile_cont(ttft_ms, 0.5) FILTER (WHERE error_class IS NULL) AS median_ttft_ms,
       quantile_cont(ttft_ms, 0.9) FILTER (WHERE error_class IS NULL) AS p90_ttft_ms,
       quantile_cont(tpot_ms, 0.5) FILTER (WHERE error_class IS NULL) AS median_tpot_ms
FROM request_latency
WHERE run_id = $run_id AND phase = 'measure'
GROUP BY 1 ORDER BY 1
"""

# For each completed request: the distinct adapters among the other requests in flight at the
# moment it was sent (sent before it, not yet ended), and its TTFT; then by that count.
IN_FLIGHT_SQL = """
WITH r AS (
  SELECT request_idx, adapter, send_ns, coalesce(end_ns, last_chunk_ns, send_ns) AS end_ns,
         error_class, (first_content_ns - send_ns) / 1e6 AS ttft_ms
  FROM requests
  WHERE run_id = $run_id AND phase = 'measure' AND send_ns IS NOT NULL
),
f AS (
  SELECT a.request_idx, a.ttft_ms, count(DISTINCT b.adapter) AS adapters_in_flight
  FROM r a LEFT JOIN r b
    ON b.request_idx <> a.request_idx AND b.send_ns <= a.send_ns AND b.end_ns > a.send_ns
  WHERE a.error_class IS NULL AND a.ttft_ms IS NOT NULL
  GROUP BY a.request_idx, a.ttft_ms
)
SELECT adapters_in_flight, count(*) AS requests, median(ttft_ms) AS median_ttft_ms
FROM f GROUP BY 1 ORDER BY 1
"""


@dataclass
class AdapterLatency:
    rows: list[tuple[str, int, int, float | None, float | None, float | None]]
    sql: str

    @property
    def adapters(self) -> list[str]:
        """Adapters the run asked for (the base model left out)."""
        return [r[0] for r in self.rows if r[0] != "base"]

    def values(self) -> dict[str, float | int | None]:
        out: dict[str, float | int | None] = {}
        for name, n, _, ttft, p90, tpot in self.rows:
            out[f"{name}_requests"] = n
            out[f"{name}_median_ttft_ms"] = None if ttft is None else round(ttft, 2)
            out[f"{name}_p90_ttft_ms"] = None if p90 is None else round(p90, 2)
            out[f"{name}_median_tpot_ms"] = None if tpot is None else round(tpot, 3)
        return out


@dataclass
class InFlight:
    rows: list[tuple[int, int, float]]  # (distinct adapters in flight, requests, median TTFT ms)
    sql: str

    def growth(self, min_requests: int) -> tuple[int, float, int, float] | None:
        """(fewest adapters, its median TTFT, most adapters, its median TTFT) over the counts
        that have at least `min_requests` requests; None with fewer than two such counts."""
        kept = [r for r in self.rows if r[1] >= min_requests]
        if len(kept) < 2:
            return None
        return kept[0][0], kept[0][2], kept[-1][0], kept[-1][2]

    def values(self) -> dict[str, float | int]:
        out: dict[str, float | int] = {}
        for k, n, ttft in self.rows:
            out[f"in_flight_{k}_requests"] = n
            out[f"in_flight_{k}_median_ttft_ms"] = round(ttft, 2)
        return out


def adapter_latency(con: duckdb.DuckDBPyConnection, run_id: str) -> AdapterLatency:
    sql, rows = fetch(con, BY_ADAPTER_SQL, run_id=run_id)
    return AdapterLatency([(str(r[0]), int(r[1]), int(r[2]), r[3], r[4], r[5]) for r in rows], sql)


def in_flight(con: duckdb.DuckDBPyConnection, run_id: str) -> InFlight:
    sql, rows = fetch(con, IN_FLIGHT_SQL, run_id=run_id)
    return InFlight([(int(r[0]), int(r[1]), float(r[2])) for r in rows], sql)
