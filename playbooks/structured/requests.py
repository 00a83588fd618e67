"""What the client saw: each schema's first request against its later ones.

An engine compiles a schema the first time it meets it (vLLM: xgrammar, asynchronously; the
request waits in the scheduler) and serves later requests of the same schema from its cache.
So a compile shows on the client as a first request of a schema whose TTFT stands out from
the requests that found their schema compiled. Requests of the same schema sent while its
first was still waiting for its first token may have waited on the same compile ("joined"),
so they are counted apart from both. Works for any engine: it needs only the requests and
their labels (the structured workload labels each request with its schema).

Each replica of a fleet run compiles for itself, so a schema's first request is counted per
replica (the key `label@replica`).

Each first request is judged against the later requests nearest it in send time (its
neighbours), not only against the run's warm TTFTs: the first requests of a run's schemas
cluster in its opening seconds, so anything that slows a stretch of the run (a neighbour
process on a shared host, the client's own start-up work) slows several of them together and
would read as compiles against the whole run's warm requests.

The run's opening burst is set apart: the requests sent before the run's first token (a
closed loop's whole first wave) all wait for the first prefills together, so a first request
among them is slow whether or not it compiled. Neither its first requests nor its others
enter the comparison; the playbook says how many schemas it could not judge that way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import duckdb
import numpy as np

from playbooks.sql import fetch

# Each request of the run, its schema (label), TTFT, whether it was its schema's first
# request, sent while that first one was still waiting for its first token, or later, and
# whether it went out in the run's opening burst (before the run's first token).
REQUESTS_SQL = """
WITH r AS (
  SELECT request_idx, label, coalesce(replica, '') AS replica, send_ns, first_content_ns,
         (first_content_ns - send_ns) / 1e6 AS ttft_ms,
         send_ns < min(first_content_ns) OVER () AS opening_burst
  FROM requests
  WHERE run_id = $run_id AND error_class IS NULL AND first_content_ns IS NOT NULL
    AND label IS NOT NULL
), firsts AS (
  SELECT label, replica, arg_min(request_idx, send_ns) AS first_idx,
         arg_min(first_content_ns, send_ns) AS first_token_ns
  FROM r GROUP BY label, replica
)
SELECT r.label, r.replica, r.request_idx, r.send_ns, r.ttft_ms,
       CASE WHEN r.request_idx = f.first_idx THEN 'first'
            WHEN r.send_ns < f.first_token_ns THEN 'joined'
            ELSE 'later' END AS kind,
       r.opening_burst
FROM r JOIN firsts f USING (label, replica)
ORDER BY r.send_ns
"""


@dataclass
class SchemaRequests:
    """Per run: the requests split by kind (the opening burst left out), and each schema's
    first request."""

    sql: str
    ttft: dict[str, np.ndarray]                   # kind -> TTFTs (ms), outside the burst
    first_ttft: dict[str, float]                  # schema label -> its first request's TTFT
    joined_by_schema: dict[str, int] = field(default_factory=dict)
    cold_requests: list[int] = field(default_factory=list)  # request_idx of first and joined
    burst_schemas: list[str] = field(default_factory=list)  # first request in the opening burst
    burst_ttft: list[float] = field(default_factory=list)   # TTFT of every burst request
    label_of: dict[str, str] = field(default_factory=dict)  # key (label@replica) -> label
    first_send: dict[str, int] = field(default_factory=dict)    # key -> its first's send_ns
    later_send: np.ndarray = field(default_factory=lambda: np.zeros(0))  # aligned with ttft["later"]
    later_replica: list[str] = field(default_factory=list)      # aligned with ttft["later"]

    @property
    def schemas_seen(self) -> int:
        return len(self.first_ttft) + len(self.burst_schemas)

    @property
    def baseline_ms(self) -> float | None:
        """The median TTFT of requests that found their schema compiled."""
        later = self.ttft["later"]
        return float(np.median(later)) if later.size else None

    def warm_quantile(self, q: float) -> float | None:
        later = self.ttft["later"]
        return float(np.quantile(later, q)) if later.size else None

    def neighbours(self, key: str, k: int) -> np.ndarray:
        """TTFTs of the k later requests sent nearest in time to schema `key`'s first request,
        on its replica where that replica has k of them (each replica compiles for itself and
        may run at its own speed)."""
        later = self.ttft["later"]
        if not later.size:
            return later
        replica = key.rsplit("@", 1)[1] if key != self.label_of.get(key, key) else ""
        same = np.array([r == replica for r in self.later_replica], dtype=bool)
        pool = same if same.sum() >= min(k, later.size) else np.ones(later.size, dtype=bool)
        idx = np.flatnonzero(pool)
        dist = np.abs(self.later_send[idx] - self.first_send[key])
        return later[idx[np.argsort(dist, kind="stable")[:k]]]

    def extra_ms(self, k: int) -> dict[str, float]:
        """Each schema's first request: its TTFT above the median of its k nearest later
        requests (a stretch of the run slowed for another reason slows them too)."""
        if not self.ttft["later"].size:
            return {}
        return {label: t - float(np.median(self.neighbours(label, k)))
                for label, t in self.first_ttft.items()}


def load_requests(con: duckdb.DuckDBPyConnection, run_id: str) -> SchemaRequests:
    sql, rows = fetch(con, REQUESTS_SQL, run_id=run_id)
    kinds: dict[str, list[float]] = {"first": [], "joined": [], "later": []}
    first: dict[str, float] = {}
    joined: dict[str, int] = {}
    cold: list[int] = []
    burst: list[str] = []
    burst_ttft: list[float] = []
    label_of: dict[str, str] = {}
    first_send: dict[str, int] = {}
    later_send: list[int] = []
    later_replica: list[str] = []
    for schema, replica, idx, send, ttft, kind, in_burst in rows:
        label = f"{schema}@{replica}" if replica else schema
        label_of[label] = schema
        if kind != "later":
            cold.append(int(idx))
        if in_burst:
            burst_ttft.append(float(ttft))
            if kind == "first":
                burst.append(label)
            continue
        kinds[kind].append(float(ttft))
        if kind == "first":
            first[label] = float(ttft)
            first_send[label] = int(send)
        elif kind == "later":
            later_send.append(int(send))
            later_replica.append(str(replica))
        elif kind == "joined":
            joined[label] = joined.get(label, 0) + 1
    return SchemaRequests(sql, {k: np.asarray(v, dtype=float) for k, v in kinds.items()},
                          first, joined, cold, burst, burst_ttft, label_of, first_send,
                          np.asarray(later_send, dtype=np.int64), later_replica)


def schema_sizes(workload: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """label -> {fields, bytes, new} from the structured workload's description (the run's
    config), where the run generated its schemas (`--schemas K`); else empty."""
    listed = workload.get("schemas")
    if not isinstance(listed, dict):
        return {}
    return {s["label"]: s for s in listed.get("schemas", []) if isinstance(s, dict) and "label" in s}


def size_fit(extra: dict[str, float], sizes: dict[str, dict[str, Any]]) -> dict[str, float] | None:
    """Least squares of a cold schema's extra TTFT on its size in KiB, where the cold schemas
    have at least three distinct sizes: {base_ms, ms_per_kib, r}."""
    pts = [(sizes[label]["bytes"] / 1024.0, ms) for label, ms in extra.items() if label in sizes]
    if len({round(x, 3) for x, _ in pts}) < 3:
        return None
    x, y = np.array([p[0] for p in pts]), np.array([p[1] for p in pts])
    slope, base = np.polyfit(x, y, 1)
    r = float(np.corrcoef(x, y)[0, 1]) if np.std(y) > 0 else 0.0
    return {"base_ms": round(float(base), 2), "ms_per_kib": round(float(slope), 2),
            "r": round(r, 3), "schemas": len(pts)}
