"""Link probes travel with the run they are linked to: export then import into another store
keeps the probe and every collectives row (verdict JSON and NULLs included); a probe linked to
another run, or to none, stays behind; importing a probe id the store holds is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from infbench.store import StoreError, create_run, finish_run, open_store
from infbench.store.transfer import export_run, import_run
from probes.links.nccl_tests import import_nccl_tests
from probes.links.storage import save_probe

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "nccl_tests"


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_link_probes_round_trip(tmp_path: Path, fmt: str) -> None:
    src = open_store(tmp_path / "a.duckdb")
    for rid in ("r1", "r2"):
        create_run(src, run_id=rid, config={}, target_url="u", model="m", endpoint="chat", t0_monotonic_ns=0)
        finish_run(src, rid, status="completed")
    linked, _ = import_nccl_tests(src, FIX / "sendrecv_nccl-tests-214.txt", run="r1")
    save_probe(src, source="infbench", backend="gloo", world_size=4, config={"ranks": 4}, run="r1",
               verdict={"bisect": {"status": "slow_rank", "rank": 2}},
               rows=[{"phase": "bisect", "op": "all_reduce", "bytes": 1 << 20, "ranks": 2, "group_ranks": "0,2",
                      "in_place": True, "repeat": 0, "step": 1, "time_us": 12.5}])
    import_nccl_tests(src, FIX / "all_gather_bf16_nccl-1435.txt", run="r2")   # another run's
    import_nccl_tests(src, FIX / "alltoall_old_error_nccl-tests-78.txt")      # no run
    files = export_run(src, "r1", tmp_path / "out", fmt)
    assert tmp_path / "out" / f"collectives.{fmt}" in files
    dst = open_store(tmp_path / "b.duckdb")
    assert import_run(dst, tmp_path / "out") == ["r1"]
    q = "SELECT * FROM collectives WHERE probe_id IN (SELECT probe_id FROM link_probes WHERE run_id = 'r1') " \
        "ORDER BY probe_id, phase, op, bytes, in_place, repeat"
    assert dst.execute(q).fetchall() == src.execute(q).fetchall()
    assert dst.execute("SELECT count(*) FROM collectives").fetchone() == (11,)
    p = "SELECT probe_id, run_id, source, world_size, config, verdict, notes FROM link_probes ORDER BY 1"
    assert dst.execute(p).fetchall() == src.execute(p + " LIMIT 0").fetchall() + [
        r for r in src.execute(p).fetchall() if r[1] == "r1"]
    assert linked.probe_id in {r[0] for r in dst.execute(p).fetchall()}
    # the same probe id again is refused (as a run or trace id would be)
    dst.execute("DELETE FROM runs WHERE run_id = 'r1'")
    with pytest.raises(StoreError, match="link probe .* already in this store"):
        import_run(dst, tmp_path / "out")
