"""Cross-node clock notes: only a run whose load came from nodes on clocks of their own gets
one, and it states the pair uncertainty from the stored offsets."""

from __future__ import annotations

from pathlib import Path

from playbooks.clocks import cross_node_clocks
from tests.support.stores import new_store

_INSERT = ("INSERT INTO run_workers (run_id, worker, backend, node, status, clock_shared, "
           "clock_uncertainty_ns) VALUES (?, ?, 'ray', ?, 'completed', ?, ?)")


def test_only_nodes_with_their_own_clocks_get_a_note(tmp_path: Path) -> None:
    con = new_store(tmp_path / "s.duckdb")
    ctx, note = cross_node_clocks(con, "one-process")
    assert note is None and ctx["workers"] == 0
    # One host: shared clock, however large the measured uncertainty.
    for w in range(2):
        con.execute(_INSERT, ["same-host", w, f"n{w}", True, 900_000])
    assert cross_node_clocks(con, "same-host")[1] is None
    # Two nodes with offsets (and a third worker on the second node): the worst pair is 2x0.8 ms.
    for w, node, unc in ((0, "a", 300_000), (1, "b", 800_000), (2, "b", 650_000)):
        con.execute(_INSERT, ["hosts", w, node, False, unc])
    ctx, note = cross_node_clocks(con, "hosts")
    assert ctx["nodes_with_offsets"] == 2 and ctx["max_clock_uncertainty_ms"] == 0.8
    assert note is not None and "2 node(s)" in note and "±1.60 ms" in note
    assert "run_workers" in ctx["sql"] and "'hosts'" in ctx["sql"]
