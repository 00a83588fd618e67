"""The probe beside a run: samples land on the run's time axis; without NVML one warning."""

from __future__ import annotations

import time
from pathlib import Path

from infbench.store import create_run
from probes.gpu.run_probe import start_if_asked, store_after_run
from tests.support import nvml_standin as sim
from tests.support.stores import new_store


def test_samples_on_the_run_axis(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    fake = sim.FakeNvml([sim.healthy(), sim.power_throttle(1500)])
    warnings: list[str] = []
    probe = start_if_asked(True, 0.05, "http://127.0.0.1:8000", warnings.append, nvml=fake)
    assert probe is not None and warnings == []
    time.sleep(0.1)
    t0 = time.monotonic_ns()  # the run starts after the probe, as in `infbench run`
    con = new_store(db)
    create_run(con, run_id="r1", config={}, target_url="u", model="m", endpoint="completions",
               t0_monotonic_ns=t0)
    con.close()
    time.sleep(0.3)
    t_stop = time.monotonic_ns()
    probe.stop()
    info = store_after_run(probe, db, "r1")
    assert info is not None and info["gpus"] == 2 and info["errors"] == []
    con = new_store(db)
    rows = con.execute("SELECT gpu, t_ns, instance, clock_event_names FROM gpu_samples "
                       "WHERE run_id = 'r1' ORDER BY gpu, t_ns").fetchall()
    assert len(rows) == info["samples"] >= 10
    ts = [t for g, t, _, _ in rows if g == 0]
    assert ts[0] < 0 < ts[-1] <= t_stop - t0  # samples before the run's t0 are kept, negative
    assert {r[2] for r in rows} == {"http://127.0.0.1:8000"}
    assert {r[3] for r in rows if r[0] == 1} == {"sw_power_cap"}
    assert fake.initialised == 0


def test_not_asked_or_not_available() -> None:
    warnings: list[str] = []
    assert start_if_asked(False, 1.0, None, warnings.append) is None and warnings == []
    fake = sim.FakeNvml([sim.healthy()], init_error=sim.NVML_ERROR_DRIVER_NOT_LOADED)
    assert start_if_asked(True, 1.0, None, warnings.append, nvml=fake) is None
    assert warnings == ["GPU probe off: the NVIDIA driver is not loaded"]
    assert store_after_run(None, "unused.duckdb", "r") is None
