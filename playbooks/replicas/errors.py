"""Replicas whose requests fail: a replica that errors drags the fleet as surely as a slow one
(its clients retry, or see failures), and a latency comparison over successful requests
alone would not see it. Failing: at least `MIN_ERRORS` failed requests and a failed share
at least `MIN_SHARE` and `PEER_FACTOR` times its peers' share."""

from __future__ import annotations

from dataclasses import dataclass

import duckdb

from playbooks.sql import fetch

MIN_ERRORS = 3
MIN_SHARE = 0.05
PEER_FACTOR = 3.0

ERRORS_SQL = """
SELECT replica, count(*) AS requests,
       count(*) FILTER (error_class IS NOT NULL AND error_class <> 'cancelled') AS failed,
       mode(error_class) FILTER (error_class IS NOT NULL AND error_class <> 'cancelled') AS top_error,
       min(send_ns) FILTER (error_class IS NOT NULL AND error_class <> 'cancelled') / 1e9 AS first_failure_s
FROM requests
WHERE run_id = $run_id AND replica IS NOT NULL
GROUP BY replica ORDER BY replica
"""


@dataclass(frozen=True)
class ReplicaErrors:
    replica: str
    requests: int
    failed: int
    top_error: str | None
    first_failure_s: float | None
    peers_share: float

    @property
    def share(self) -> float:
        return self.failed / self.requests if self.requests else 0.0


def failing_replicas(con: duckdb.DuckDBPyConnection, run_id: str) -> tuple[list[ReplicaErrors], str]:
    sql, rows = fetch(con, ERRORS_SQL, run_id=run_id)
    out = []
    for name, n, failed, top, first in rows:
        peers = [(pn, pf) for pname, pn, pf, *_ in rows if pname != name]
        peer_n = sum(p[0] for p in peers)
        peer_share = sum(p[1] for p in peers) / peer_n if peer_n else 0.0
        e = ReplicaErrors(str(name), int(n), int(failed), top, first, peer_share)
        if e.failed >= MIN_ERRORS and e.share >= max(MIN_SHARE, PEER_FACTOR * peer_share):
            out.append(e)
    return out, sql
