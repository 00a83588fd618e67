"""How far apart a run's timelines may be when its load came from several nodes.

A run made by workers on several hosts (`infbench run --ray`) has each node's rows put on the
run's axis through that node's measured clock offset (`run_workers`). Latencies within a
request are measured on one host and need nothing; comparing times across requests that came
from different nodes (a stall seen by every stream at once, a fleet timeline) is good only to
the sum of the two nodes' uncertainties. A playbook that compares across requests says so.
"""

from __future__ import annotations

from typing import Any

import duckdb

from playbooks.sql import fetch_one

CLOCKS_SQL = """
SELECT count(*) AS workers,
       count(DISTINCT node) FILTER (WHERE NOT clock_shared) AS offset_nodes,
       max(clock_uncertainty_ns) FILTER (WHERE NOT clock_shared) / 1e6 AS max_uncertainty_ms
FROM run_workers WHERE run_id = $run_id
"""


def cross_node_clocks(con: duckdb.DuckDBPyConnection, run_id: str) -> tuple[dict[str, Any], str | None]:
    """(context for the diagnosis, a note when cross-node times carry an uncertainty)."""
    sql, (workers, offset_nodes, max_ms) = fetch_one(con, CLOCKS_SQL, run_id=run_id)
    ctx = {"workers": int(workers), "nodes_with_offsets": int(offset_nodes or 0),
           "max_clock_uncertainty_ms": max_ms, "sql": sql}
    if not offset_nodes:
        return ctx, None
    pair_ms = 2 * float(max_ms)
    return ctx, (f"The load came from {offset_nodes} node(s) on clocks of their own, aligned by measured "
                 f"offsets: times compared across requests from different nodes are good to "
                 f"±{pair_ms:.2f} ms (twice the largest uncertainty, run_workers), so a gap or "
                 "event shorter than that is not placed across nodes with confidence.")
