"""`infbench probe gpu` with the NVML stand-in (in-process), and without a driver or the
library (one line, exit 1)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import probes.gpu.run_probe as run_probe
from infbench.cli import app
from tests.support import nvml_standin as sim
from tests.support.cli import infbench
from tests.support.stores import new_store

runner = CliRunner()


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> sim.FakeNvml:
    f = sim.FakeNvml([sim.healthy(), sim.thermal_throttle(1350), sim.consumer_board()])
    monkeypatch.setattr(run_probe, "load_nvml", lambda: f)
    return f


def test_table_names_throttle_and_unsupported_fields(fake: sim.FakeNvml) -> None:
    res = runner.invoke(app, ["probe", "gpu", "--duration", "0.35", "--interval", "0.1"])
    assert res.exit_code == 0, res.output
    out = " ".join(res.output.split())
    assert "sw_thermal_slowdown 100%" in out
    assert "NOT_SUPPORTED" in out
    assert fake.initialised == 0 and fake.event_sets_open == 0  # closed again


def test_json_and_store(fake: sim.FakeNvml, tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    res = runner.invoke(app, ["probe", "gpu", "--duration", "0.45", "--interval", "0.1", "--json", "--db", str(db)])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    gpus = {g["gpu"]: g for g in doc["gpus"]}
    assert set(gpus) == {0, 1, 2}
    n = gpus[0]["samples"]
    assert 3 <= n <= 7  # 0.45 s at 0.1 s: about 5, on a busy 2-core host
    assert gpus[1]["sm_clock_mhz"]["max"] == 1350 and gpus[1]["clock_event_reasons"] == {"sw_thermal_slowdown": 1.0}
    assert gpus[2]["unavailable"]["ecc_corrected"] == "NOT_SUPPORTED"
    con = new_store(db)
    run = con.execute("SELECT endpoint, status FROM runs WHERE run_id = ?", [doc["run_id"]]).fetchone()
    assert run == ("gpu-probe", "completed")
    ts = [r[0] for r in con.execute("SELECT t_ns FROM gpu_samples WHERE run_id = ? AND gpu = 0 ORDER BY t_ns",
                                     [doc["run_id"]]).fetchall()]
    assert len(ts) == n and ts[0] >= 0 and ts[-1] < 0.6e9
    gaps = [b - a for a, b in zip(ts, ts[1:], strict=False)]
    assert all(0.05e9 < g < 0.3e9 for g in gaps)


def test_without_the_library_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
    res = runner.invoke(app, ["probe", "gpu", "--duration", "0.1"])
    assert res.exit_code == 1
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert lines == ["error: GPU probe off: nvidia-ml-py is not installed (pip install 'infbench[gpu]')"]


def test_real_binding_without_a_driver_subprocess() -> None:
    pytest.importorskip("pynvml")
    res = infbench("probe", "gpu", "--duration", "0.2")
    if res.returncode == 0:
        pytest.skip("an NVIDIA GPU is present: tests/device/gpu_probe_check.py covers it")
    assert res.returncode == 1
    assert res.stderr.strip().startswith("error: GPU probe off: ") and len(res.stderr.strip().splitlines()) == 1
    assert "Traceback" not in res.stderr


@pytest.mark.parametrize("args,msg", [(["--duration", "0"], "duration: must be > 0"),
                                      (["--interval", "-1"], "interval: must be > 0")])
def test_bad_input_exit_2(args: list[str], msg: str) -> None:
    res = runner.invoke(app, ["probe", "gpu", *args])
    assert res.exit_code == 2 and msg in res.output
