"""GPU telemetry travels with its run: export then import into another store keeps every
gpu_samples row (NULLs and the `unavailable` reasons included), in Parquet and CSV."""

from __future__ import annotations

from pathlib import Path

import pytest

from infbench.store import create_run, finish_run, open_store
from infbench.store.transfer import export_run, import_run
from probes.gpu import insert_gpu_samples
from probes.gpu.nvml import NvmlSampler
from tests.support import nvml_standin as sim


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_gpu_samples_round_trip(tmp_path: Path, fmt: str) -> None:
    src = open_store(tmp_path / "a.duckdb")
    create_run(src, run_id="r1", config={}, target_url="u", model="m", endpoint="chat", t0_monotonic_ns=0)
    finish_run(src, "r1", status="completed")
    with NvmlSampler(sim.FakeNvml([sim.consumer_board(), sim.thermal_throttle(1350)]), instance="i") as s:
        rows = s.sample(0) + s.sample(10**9)
    insert_gpu_samples(src, "r1", rows)
    insert_gpu_samples(src, "other", rows[:1])  # another run's rows stay behind
    files = export_run(src, "r1", tmp_path / "out", fmt)
    assert tmp_path / "out" / f"gpu_samples.{fmt}" in files
    dst = open_store(tmp_path / "b.duckdb")
    assert import_run(dst, tmp_path / "out") == ["r1"]
    # CSV cannot tell an empty string from NULL: a GPU with no clock-event reason has mask 0
    # and names '' in the store, and names NULL after a CSV trip (the mask says the same).
    names = "coalesce(clock_event_names, '')" if fmt == "csv" else "clock_event_names"
    q = (f"SELECT * EXCLUDE (run_id, clock_event_names), {names} FROM gpu_samples "
         "WHERE run_id = 'r1' ORDER BY gpu, t_ns")
    assert dst.execute(q).fetchall() == src.execute(q).fetchall()
    assert dst.execute("SELECT count(*) FROM gpu_samples").fetchone() == (4,)
