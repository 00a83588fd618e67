"""GPU telemetry in the run report: gpu_samples on the run's time axis, read from the store."""

from __future__ import annotations

from pathlib import Path

import duckdb

from infbench.report.gpu_charts import gpu_charts
from infbench.report.html import build_html
from infbench.store import create_run, finish_run, get_run
from probes.gpu import insert_gpu_samples
from probes.gpu.nvml import NvmlSampler
from tests.support import nvml_standin as sim
from tests.support.stores import new_store

S = 1_000_000_000


def _store(tmp_path: Path) -> duckdb.DuckDBPyConnection:
    con = new_store(tmp_path / "s.duckdb")
    create_run(con, run_id="r", config={}, target_url="u", model="m", endpoint="chat", t0_monotonic_ns=0)
    finish_run(con, "r", status="completed", summary={"completed": 0})
    return con


def _replay(instance: str, states: list[list[sim.GpuState]], xid_at: int | None = None) -> list[dict]:
    """One sample per second; the GPUs' states change as `states` says (one list per second)."""
    fake = sim.FakeNvml(list(states[0]))
    rows = []
    with NvmlSampler(fake, instance=instance, hostname="h") as s:
        for sec, gpus in enumerate(states):
            for i, st in enumerate(gpus):
                fake.set_state(i, st)
            if xid_at == sec:
                fake.raise_xid(0, 79)
            rows += s.sample(sec * S)
    return rows


def test_clock_power_util_pcie_charts_with_reasons_and_xid(tmp_path: Path) -> None:
    con = _store(tmp_path)
    states = [[sim.healthy()]] * 3 + [[sim.thermal_throttle(1410)]] * 5
    insert_gpu_samples(con, "r", _replay("http://10.0.0.1:8000", states, xid_at=6))
    charts = {c.title: c for c in gpu_charts(con, "r")}
    assert set(charts) == {"GPU SM clock (gpu_samples)", "GPU power and temperature (gpu_samples)",
                           "GPU utilisation (gpu_samples)", "GPU PCIe link (gpu_samples)"}
    clock = charts["GPU SM clock (gpu_samples)"]
    (line,) = clock.series
    assert line.name == "GPU 0 SM clock"
    assert list(line.x) == [float(i) for i in range(8)]
    assert list(line.y) == [1980.0] * 3 + [1410.0] * 5
    assert "sw_thermal_slowdown 62%" in clock.note and "Board maximum 1980 MHz" in clock.note
    assert [(m.x, m.label) for m in clock.marks] == [(6.0, "XID 79 (GPU 0)")]
    spec = charts["GPU power and temperature (gpu_samples)"].spec("p")
    assert [a["unit"] for a in spec["y"]] == ["W", "°C"]
    html = build_html(con, get_run(con, "r"))
    assert "GPU SM clock (gpu_samples)" in html and "XID 79" in html


def test_fleet_one_line_per_replica_and_source_preference(tmp_path: Path) -> None:
    con = _store(tmp_path)
    a = _replay("http://127.0.0.1:8001", [[sim.healthy(), sim.healthy(uuid="GPU-x")]] * 4)
    b = _replay("http://127.0.0.1:8002", [[sim.pcie_trained_low(3, 8), sim.pcie_trained_low(3, 8)]] * 4)
    insert_gpu_samples(con, "r", a + b)
    # The same replica also seen through Prometheus: drawn once, from NVML.
    insert_gpu_samples(con, "r", [{**r, "source": "dcgm", "sm_clock_mhz": 1.0} for r in a])
    charts = {c.title: c for c in gpu_charts(con, "r")}
    names = [s.name for s in charts["GPU SM clock (gpu_samples)"].series]
    assert names == ["127.0.0.1:8001 GPU 0 SM clock", "127.0.0.1:8001 GPU 1 SM clock",
                     "127.0.0.1:8002 GPU 0 SM clock", "127.0.0.1:8002 GPU 1 SM clock"]
    assert all(set(s.y) == {1980.0} for s in charts["GPU SM clock (gpu_samples)"].series)
    gens = {s.name: set(s.y) for s in charts["GPU PCIe link (gpu_samples)"].series if "gen" in s.name}
    assert gens["127.0.0.1:8002 GPU 1 PCIe gen"] == {3.0} and gens["127.0.0.1:8001 GPU 0 PCIe gen"] == {5.0}
    assert "Gen5 x16" in charts["GPU PCIe link (gpu_samples)"].note


def test_no_samples_no_charts(tmp_path: Path) -> None:
    con = _store(tmp_path)
    assert gpu_charts(con, "r") == []
    assert "gpu_samples" not in build_html(con, get_run(con, "r"))
