"""Hang captures travel with the run they are linked to: export then import keeps every
per-rank row (dumps, process groups, entries, stacks) and the diagnosis on the other side is
the same; a capture linked to another run, or to none, stays behind; importing a capture id
the store already holds is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from infbench.store import StoreError, create_run, finish_run, open_store
from infbench.store.hang_schema import HANG_TABLES
from infbench.store.transfer import export_run, import_run
from playbooks.hang import diagnose_hang
from probes.hang import capture_dumps, store_capture

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_hang_captures_round_trip(tmp_path: Path, fmt: str) -> None:
    src = open_store(tmp_path / "a.duckdb")
    for rid in ("r1", "r2"):
        create_run(src, run_id=rid, config={}, target_url="u", model="m", endpoint="chat",
                   t0_monotonic_ns=0)
        finish_run(src, rid, status="completed_with_errors")
    mine = capture_dumps(ROOT / "examples" / "hang" / "tp2_rank1_hang")  # dumps + py-spy stacks
    store_capture(src, mine, "r1")
    store_capture(src, capture_dumps(ROOT / "tests" / "fixtures" / "hang" / "healthy"), "r2")
    store_capture(src, capture_dumps(ROOT / "tests" / "fixtures" / "hang" / "mismatch-op"))
    export_run(src, "r1", tmp_path / "out", fmt)
    dst = open_store(tmp_path / "b.duckdb")
    assert import_run(dst, tmp_path / "out") == ["r1"]
    for table in HANG_TABLES:
        q = f"SELECT * FROM {table} WHERE capture_id = '{mine.capture_id}' ORDER BY ALL"
        assert dst.execute(q).fetchall() == src.execute(q).fetchall(), table
        assert dst.execute(f"SELECT count(DISTINCT capture_id) FROM {table}").fetchone() == (1,)
    assert dst.execute("SELECT count(*) FROM hang_stacks").fetchone()[0] > 10
    there, here = diagnose_hang(dst, mine.capture_id), diagnose_hang(src, mine.capture_id)
    assert there.to_dict()["findings"] == here.to_dict()["findings"]
    assert there.verdicts() == ["rank_behind"]
    dst.execute("DELETE FROM runs WHERE run_id = 'r1'")
    with pytest.raises(StoreError, match="hang capture .* already in this store"):
        import_run(dst, tmp_path / "out")
