"""The NVML sampler over the stand-in: every field in every state NVML reports, including
fields a GPU does not support and NVML errors, each stored NULL with its reason, no crash."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from probes.gpu import insert_gpu_samples
from probes.gpu.nvml import NvmlSampler, NvmlUnavailable
from tests.support import nvml_standin as sim
from tests.support.stores import new_store

GIB = 1 << 30


def _one(state: sim.GpuState, **kw: object) -> dict:
    with NvmlSampler(sim.FakeNvml([state], **kw), instance="host-a:8000", hostname="host-a") as s:
        (row,) = s.sample(1_234)
    return row


def test_healthy_every_field_with_units_converted() -> None:
    r = _one(sim.healthy())
    assert r["source"] == "nvml" and r["instance"] == "host-a:8000" and r["hostname"] == "host-a"
    assert r["gpu"] == 0 and r["t_ns"] == 1_234
    assert r["uuid"] == "GPU-5f1c2a7e-0000-4000-8000-000000000000"
    assert r["model_name"] == "NVIDIA H100 80GB HBM3"
    assert (r["sm_clock_mhz"], r["sm_clock_max_mhz"]) == (1980.0, 1980.0)
    assert (r["mem_clock_mhz"], r["mem_clock_max_mhz"]) == (2619.0, 2619.0)
    assert r["clock_event_reasons"] == 0 and r["clock_event_names"] == ""
    assert r["power_w"] == pytest.approx(512.345) and r["power_limit_w"] == 700.0  # mW -> W
    assert r["temperature_c"] == 62.0
    assert (r["util_gpu_pct"], r["util_mem_pct"]) == (97.0, 48.0)
    assert (r["mem_used_bytes"], r["mem_total_bytes"]) == (71 * GIB, 80 * GIB)
    assert (r["pcie_gen"], r["pcie_gen_max"], r["pcie_width"], r["pcie_width_max"]) == (5, 5, 16, 16)
    assert r["pcie_replays"] == 0
    assert (r["ecc_corrected"], r["ecc_uncorrected"]) == (0, 0)
    assert r["xid"] == 0  # registered for XID events, none seen
    assert (r["nvlink_active"], r["nvlink_links"]) == (18, 18)
    assert r["unavailable"] is None


@pytest.mark.parametrize("state,clock,mask,names", [
    (sim.thermal_throttle(1410), 1410.0, 0x20, "sw_thermal_slowdown"),
    (sim.thermal_throttle(1095, hw=True), 1095.0, 0x40, "hw_thermal_slowdown"),
    (sim.power_throttle(1530), 1530.0, 0x4, "sw_power_cap"),
    (sim.sw_throttle(1200), 1200.0, 0x2 | 0x8, "applications_clocks_setting,hw_slowdown"),
    (sim.idle(), 345.0, 0x1, "gpu_idle"),
])
def test_throttle_states(state: sim.GpuState, clock: float, mask: int, names: str) -> None:
    r = _one(state)
    assert r["sm_clock_mhz"] == clock and r["sm_clock_max_mhz"] == 1980.0
    assert r["clock_event_reasons"] == mask and r["clock_event_names"] == names


def test_power_throttle_draw_at_limit() -> None:
    r = _one(sim.power_throttle())
    assert r["power_w"] == pytest.approx(699.87) and r["power_limit_w"] == 700.0


def test_thermal_temperature() -> None:
    assert _one(sim.thermal_throttle(hw=True))["temperature_c"] == 93.0


@pytest.mark.parametrize("gen,width", [(3, 8), (4, 16), (1, 1)])
def test_pcie_trained_low(gen: int, width: int) -> None:
    r = _one(sim.pcie_trained_low(gen, width))
    assert (r["pcie_gen"], r["pcie_gen_max"], r["pcie_width"], r["pcie_width_max"]) == (gen, 5, width, 16)


def test_ecc_counts() -> None:
    r = _one(sim.ecc_errors(corrected=12, uncorrected=3))
    assert (r["ecc_corrected"], r["ecc_uncorrected"]) == (12, 3)


def test_pcie_replays_and_inactive_nvlinks() -> None:
    r = _one(sim.healthy(pcie_replays=41, nvlinks=(1, 1, 0, 1, 0, 0)))
    assert r["pcie_replays"] == 41
    assert (r["nvlink_active"], r["nvlink_links"]) == (3, 6)


def test_xid_events_last_code_per_gpu_and_kept_until_the_next() -> None:
    fake = sim.FakeNvml([sim.healthy(), sim.healthy(uuid="GPU-b")])
    with NvmlSampler(fake) as s:
        assert [r["xid"] for r in s.sample(0)] == [0, 0]
        fake.raise_xid(1, 48)
        fake.raise_xid(1, 79)  # two queued: the last one is the one a row keeps
        assert [r["xid"] for r in s.sample(1)] == [0, 79]
        assert [r["xid"] for r in s.sample(2)] == [0, 79]
        fake.raise_xid(0, 13)
        assert [r["xid"] for r in s.sample(3)] == [13, 79]
    assert fake.event_sets_open == 0 and fake.initialised == 0


def test_consumer_board_unsupported_fields_are_null_with_reason() -> None:
    r = _one(sim.consumer_board())
    assert r["ecc_corrected"] is None and r["ecc_uncorrected"] is None
    assert r["pcie_replays"] is None and r["xid"] is None
    assert r["nvlink_links"] is None and r["nvlink_active"] is None
    missing = json.loads(r["unavailable"])
    assert missing == {"ecc_corrected": "NOT_SUPPORTED", "ecc_uncorrected": "NOT_SUPPORTED",
                       "pcie_replays": "NOT_SUPPORTED", "xid": "NOT_SUPPORTED",
                       "nvlink_links": "NOT_SUPPORTED", "nvlink_active": "NOT_SUPPORTED"}
    # the supported fields are still read
    assert r["sm_clock_mhz"] == 2520.0 and r["power_limit_w"] == 450.0
    assert r["mem_total_bytes"] == 24 * GIB and r["model_name"] == "NVIDIA GeForce RTX 4090"


@pytest.mark.parametrize("fn,cols", [
    ("nvmlDeviceGetPowerUsage", ["power_w"]),
    ("nvmlDeviceGetTemperature", ["temperature_c"]),
    ("nvmlDeviceGetUtilizationRates", ["util_gpu_pct", "util_mem_pct"]),
    ("nvmlDeviceGetMemoryInfo", ["mem_used_bytes", "mem_total_bytes"]),
    ("nvmlDeviceGetCurrentClocksEventReasons", ["clock_event_reasons"]),
    ("nvmlDeviceGetMaxClockInfo", ["sm_clock_max_mhz", "mem_clock_max_mhz"]),
    ("nvmlDeviceGetCurrPcieLinkWidth", ["pcie_width"]),
    ("nvmlDeviceGetEnforcedPowerLimit", ["power_limit_w"]),
])
@pytest.mark.parametrize("code,name", [(3, "NOT_SUPPORTED"), (4, "NO_PERMISSION"), (999, "UNKNOWN")])
def test_each_field_error_is_null_with_its_name(fn: str, cols: list[str], code: int, name: str) -> None:
    r = _one(sim.healthy(errors={fn: code}))
    missing = json.loads(r["unavailable"])
    for col in cols:
        assert r[col] is None
        assert missing[col] == name
    assert set(missing) == set(cols)
    assert r["sm_clock_mhz"] == 1980.0 or "sm_clock_mhz" in cols


@pytest.mark.parametrize("mode", ["missing", "function_not_found"])
def test_old_throttle_reasons_name_is_the_fallback(mode: str) -> None:
    fake = sim.FakeNvml([sim.thermal_throttle()], event_reasons=mode)
    with NvmlSampler(fake) as s:
        (r,) = s.sample(0)
    assert r["clock_event_reasons"] == 0x20
    assert fake.calls["nvmlDeviceGetCurrentClocksThrottleReasons"] == 1


def test_gpu_lost_mid_run_no_crash_and_other_gpus_still_read() -> None:
    fake = sim.FakeNvml([sim.healthy(), sim.healthy(uuid="GPU-b")])
    with NvmlSampler(fake) as s:
        s.sample(0)
        fake.set_state(1, sim.lost())
        a, b = s.sample(1)
    assert a["sm_clock_mhz"] == 1980.0 and a["unavailable"] is None
    assert b["sm_clock_mhz"] is None and b["power_w"] is None and b["pcie_gen"] is None
    missing = json.loads(b["unavailable"])
    assert missing["sm_clock_mhz"] == "GPU_IS_LOST" and missing["nvlink_active"].startswith("GPU_IS_LOST")
    assert b["uuid"] == "GPU-b"  # read at open, while it was there


def test_a_throttle_that_starts_between_samples() -> None:
    fake = sim.FakeNvml([sim.healthy()])
    with NvmlSampler(fake) as s:
        before = s.sample(0)[0]
        fake.set_state(0, sim.power_throttle(1500))
        after = s.sample(10)[0]
    assert before["clock_event_names"] == "" and after["clock_event_names"] == "sw_power_cap"
    assert after["sm_clock_mhz"] / after["sm_clock_max_mhz"] == pytest.approx(1500 / 1980)


@pytest.mark.parametrize("code,text", [
    (12, "no NVIDIA driver here"), (9, "driver is not loaded"), (4, "no permission"),
    (999, "NVML init failed (UNKNOWN)")])
def test_init_errors_are_one_line(code: int, text: str) -> None:
    with pytest.raises(NvmlUnavailable) as err:
        NvmlSampler(sim.FakeNvml([sim.healthy()], init_error=code)).open()
    assert text in str(err.value) and "\n" not in str(err.value)
    assert str(err.value).startswith("GPU probe off: ")


def test_no_gpu_and_unopenable_handles() -> None:
    fake = sim.FakeNvml([])
    with pytest.raises(NvmlUnavailable, match="sees no GPU"):
        NvmlSampler(fake).open()
    assert fake.initialised == 0  # shut down again
    fake = sim.FakeNvml([sim.healthy(errors={"nvmlDeviceGetHandleByIndex": 15})])
    with pytest.raises(NvmlUnavailable, match="no GPU handle"):
        NvmlSampler(fake).open()
    assert fake.initialised == 0


def test_a_gpu_whose_handle_fails_is_skipped() -> None:
    fake = sim.FakeNvml([sim.healthy(errors={"nvmlDeviceGetHandleByIndex": 15}), sim.healthy()])
    with NvmlSampler(fake) as s:
        assert [r["gpu"] for r in s.sample(0)] == [1]


def test_rows_store_with_nulls(tmp_path: Path) -> None:
    fake = sim.FakeNvml([sim.consumer_board(), sim.thermal_throttle(1300)])
    with NvmlSampler(fake, instance="i") as s:
        rows = s.sample(5) + s.sample(6)
    con = new_store(tmp_path / "s.duckdb")
    assert insert_gpu_samples(con, "r", rows) == 4
    got = con.execute("SELECT gpu, count(*), count(ecc_corrected), max(sm_clock_mhz), "
                      "max(clock_event_names) FROM gpu_samples GROUP BY gpu ORDER BY gpu").fetchall()
    assert got == [(0, 2, 0, 2520.0, ""), (1, 2, 2, 1300.0, "sw_thermal_slowdown")]
