"""The kv_ledger view: the KV pool page by page for every engine step."""

from __future__ import annotations

from pathlib import Path

from infbench.store import create_run, open_store
from infbench.store.writer import insert_batch, to_arrow


def test_blocks_free_delta_and_preemptions_so_far(tmp_path: Path) -> None:
    con = open_store(tmp_path / "s.duckdb")
    try:
        for run in ("a", "b"):
            create_run(con, run_id=run, config={}, target_url="http://127.0.0.1:1", model="m",
                       endpoint="completions", t0_monotonic_ns=0)
        used = [10, 40, 64, 64, 30]
        insert_batch(con, "a", "engine_steps", to_arrow("engine_steps", {
            "step_id": [1, 2, 3, 4, 5], "start_s": [0.0, 0.1, 0.2, 0.3, 0.4],
            "end_s": [0.1, 0.2, 0.3, 0.4, 0.5], "prefill_tokens": [160, 480, 0, 0, 0],
            "decode_seqs": [0, 1, 3, 3, 2], "num_running": [1, 3, 3, 2, 2],
            "num_waiting": [2, 0, 0, 1, 1], "preemptions": [0, 0, 0, 1, 0],
            "kv_blocks_used": used, "kv_blocks_total": [64] * 5}))
        insert_batch(con, "b", "engine_steps", to_arrow("engine_steps", {
            "step_id": [1], "start_s": [0.0], "end_s": [0.1], "kv_blocks_used": [5],
            "kv_blocks_total": [8], "preemptions": [2]}))
        rows = con.execute("SELECT step_id, kv_blocks_free, kv_blocks_delta, kv_usage, "
                           "preemptions_so_far FROM kv_ledger WHERE run_id = 'a' ORDER BY step_id"
                           ).fetchall()
        assert rows == [(1, 54, None, 10 / 64, 0), (2, 24, 30, 40 / 64, 0), (3, 0, 24, 1.0, 0),
                        (4, 0, 0, 1.0, 1), (5, 34, -34, 30 / 64, 1)]
        # Runs do not leak into each other's deltas or sums.
        assert con.execute("SELECT kv_blocks_delta, preemptions_so_far FROM kv_ledger "
                           "WHERE run_id = 'b'").fetchall() == [(None, 2)]
    finally:
        con.close()
