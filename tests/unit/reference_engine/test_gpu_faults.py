"""GPU faults of the reference engine (throttle, pcie, xid): behaviour and the dcgm-exporter
telemetry on /metrics change together, consistently."""

from __future__ import annotations

import time

import pytest

from probes.gpu import samples_from_exposition
from reference_engine.config import ConfigError, EngineConfig
from reference_engine.device import GpuFaultConfig, SimDevice, exposition
from reference_engine.engine import Engine, make_device
from reference_engine.executor import SeqWork, StepBatch
from reference_engine.faults import Faults, FaultSpecError, parse_fault
from reference_engine.request import SamplingParams
from reference_engine.sim_executor import SimExecutor

CFG = EngineConfig(num_gpu_blocks=4000, step_overhead_ms=0.5)


def _executor(*faults: str, cfg: EngineConfig = CFG) -> SimExecutor:
    f = Faults(faults)
    return SimExecutor(cfg, f.device_factor, f.collective_factor, make_device(cfg, f))


def _work(seq_id: int, tokens: int, start: int, outputs: int) -> SeqWork:
    return SeqWork(seq_id, [65] * tokens, start, [], True, SamplingParams(), outputs)


PREFILL = StepBatch(1, [_work(0, 4096, 0, 0)])
DECODE = StepBatch(1, [_work(i, 1, 900 + i, 5) for i in range(32)])


def _device_s(ex: SimExecutor, batch: StepBatch) -> float:
    ex.predict(batch)
    return ex.last_parts["device_s"]


@pytest.mark.parametrize("reason,clock", [("thermal", 1410), ("power", 1600), ("sw", 990)])
def test_throttle_slows_compute_bound_prefill_by_the_clock_ratio_and_decode_less(reason: str, clock: int) -> None:
    ok, slow = _executor(), _executor(f"throttle:reason={reason},sm_clock_mhz={clock}")
    ratio = 1980 / clock
    assert ok.predict(PREFILL) == pytest.approx(ok.predict(PREFILL))  # deterministic
    prefill_x = _device_s(slow, PREFILL) / _device_s(ok, PREFILL)
    decode_x = _device_s(slow, DECODE) / _device_s(ok, DECODE)
    assert ok.last_parts["breakdown"].bound == "memory"  # this decode batch is HBM-bound
    # prefill of 4096 tokens is compute-bound: the whole step stretches by the clock ratio
    assert prefill_x == pytest.approx(ratio, rel=0.02)
    # decode: only its kernel floor follows the clock; the HBM term does not
    assert 1.0 < decode_x < 1 + 0.5 * (ratio - 1)


def test_a_healthy_device_changes_no_step_time() -> None:
    bare = SimExecutor(CFG)
    dev = _executor()
    for batch in (PREFILL, DECODE):
        assert dev.predict(batch) == bare.predict(batch)


@pytest.mark.parametrize("gen,width", [(1, 1), (3, 8), (4, 16), (5, 4)])
def test_pcie_trained_low_adds_the_copies_at_the_slower_link(gen: int, width: int) -> None:
    ok, low = _executor(), _executor(f"pcie:gen={gen},width={width}")
    for batch in (PREFILL, DECODE):
        extra = _device_s(low, batch) - _device_s(ok, batch)
        nbytes = low.last_parts["pcie_bytes"]
        assert nbytes > 0
        full, now = 3.938e9 * 16, {1: 0.25e9, 3: 0.985e9, 4: 1.969e9, 5: 3.938e9}[gen] * width
        assert extra == pytest.approx(nbytes / now - nbytes / full)
    # a prefill moves more than a decode step of few sequences: more extra time
    assert low.last_parts["pcie_bytes"] < _pcie_bytes(low, PREFILL)


def _pcie_bytes(ex: SimExecutor, batch: StepBatch) -> int:
    ex.predict(batch)
    return ex.last_parts["pcie_bytes"]


def _telemetry(dev: SimDevice, now: float) -> list[dict]:
    return samples_from_exposition(exposition(dev, now), 0, instance="e", source="engine")


@pytest.mark.parametrize("reason,bits,names", [
    ("thermal", 0x20, "sw_thermal_slowdown"), ("power", 0x4, "sw_power_cap"),
    ("sw", 0x2, "applications_clocks_setting")])
def test_throttle_telemetry_under_load(reason: str, bits: int, names: str) -> None:
    dev = SimDevice("H100-SXM", 2, GpuFaultConfig(throttle_reason=reason, sm_clock_mhz=1300), 5,
                    hostname="node-7")
    t = dev.started
    for i in range(1, 25):  # 1.2 s of back-to-back 50 ms steps, 60% HBM-bound
        dev.observe_step(0.05, 0.03, 1e4, t + 0.05 * i)
    rows = _telemetry(dev, t + 1.21)
    assert [r["gpu"] for r in rows] == [0, 1] and rows[0]["uuid"] != rows[1]["uuid"]
    r = rows[0]
    assert r["sm_clock_mhz"] == 1300 and r["sm_clock_max_mhz"] == 1980
    assert r["clock_event_reasons"] == bits and r["clock_event_names"] == names
    assert r["util_gpu_pct"] == 100 and r["dram_active"] == pytest.approx(0.6, abs=0.01)
    assert r["hostname"] == "node-7" and r["model_name"] == "NVIDIA H100 80GB HBM3"
    if reason == "thermal":
        assert r["temperature_c"] >= 87
    else:
        assert r["temperature_c"] < 70
    if reason == "power":
        assert r["power_w"] == pytest.approx(r["power_limit_w"], rel=0.01)
    else:
        assert r["power_w"] < 0.9 * r["power_limit_w"]


def test_healthy_idle_and_busy_telemetry() -> None:
    dev = SimDevice("A100-80GB-SXM", 1, GpuFaultConfig(), 4)
    t = dev.started
    (idle,) = _telemetry(dev, t + 1.5)
    assert idle["clock_event_names"] == "gpu_idle" and idle["util_gpu_pct"] == 0
    assert idle["pcie_gen"] == idle["pcie_gen_max"] == 4 and idle["pcie_width"] == 16
    for i in range(1, 11):
        dev.observe_step(0.05, 0.05, 0, t + 1.5 + 0.1 * i)  # half busy
    (busy,) = _telemetry(dev, t + 2.6)
    assert busy["clock_event_reasons"] == 0 and busy["sm_clock_mhz"] == 1410
    assert busy["util_gpu_pct"] == pytest.approx(50, abs=6)
    assert busy["xid"] == 0 and busy["ecc_uncorrected"] == 0


def test_pcie_telemetry_current_below_max() -> None:
    dev = SimDevice("H100-SXM", 1, GpuFaultConfig(pcie_gen=3, pcie_width=8), 5)
    (r,) = _telemetry(dev, dev.started + 1)
    assert (r["pcie_gen"], r["pcie_gen_max"], r["pcie_width"], r["pcie_width_max"]) == (3, 5, 8, 16)


@pytest.mark.parametrize("code,at,lost,ecc", [(79, 3.0, True, (0, 0)), (48, 0.5, True, (0, 1)),
                                               (63, 2.0, False, (1, 0)), (92, 1.0, False, (1, 0))])
def test_xid_telemetry_and_loss(code: int, at: float, lost: bool, ecc: tuple[int, int]) -> None:
    dev = SimDevice("H100-SXM", 1, GpuFaultConfig(xid_code=code, xid_at_s=at), 5)
    t = dev.started
    (before,) = _telemetry(dev, t + at - 0.1)
    assert before["xid"] == 0 and not dev.lost(t + at - 0.1)
    (after,) = _telemetry(dev, t + at + 0.1)
    assert after["xid"] == code and dev.lost(t + at + 0.1) is lost
    assert (after["ecc_corrected"], after["ecc_uncorrected"]) == ecc


def test_fatal_xid_aborts_in_flight_and_later_requests() -> None:
    eng = Engine(CFG.replace(faults=("xid:code=79,at_s=0.3",)))
    outs: dict[str, list] = {"a": [], "b": []}
    eng.add_request("a", [65] * 8, SamplingParams(max_tokens=1000, ignore_eos=True), outs["a"].append)
    deadline = time.monotonic() + 5
    while time.monotonic() - eng.device.started < 0.3 and time.monotonic() < deadline:
        eng.step()
    assert outs["a"] and all(not o.finished for o in outs["a"])  # it was generating
    eng.step()  # the XID is due: the device is gone
    assert outs["a"][-1].finished and outs["a"][-1].finish_reason == "abort"
    eng.add_request("b", [65] * 8, SamplingParams(max_tokens=4), outs["b"].append)
    assert eng.step() is None
    assert [o.finish_reason for o in outs["b"]] == ["abort"]
    assert eng.stats().num_running == 0 and eng.stats().num_waiting == 0
    eng.check_invariants()


def test_recoverable_xid_keeps_serving() -> None:
    eng = Engine(CFG.replace(faults=("xid:code=63,at_s=0",)))
    out: list = []
    eng.add_request("a", [65] * 8, SamplingParams(max_tokens=3, ignore_eos=True), out.append)
    while not (out and out[-1].finished):
        eng.step()
    assert out[-1].finish_reason == "length"


def test_step_log_labels_throttle_and_pcie() -> None:
    eng = Engine(CFG.replace(faults=("throttle:reason=power,sm_clock_mhz=1500", "pcie:gen=4")))
    out: list = []
    eng.add_request("a", [65] * 8, SamplingParams(max_tokens=2, ignore_eos=True), out.append)
    rec = eng.step()
    assert rec is not None and rec["fault"].removesuffix("+host-late") == "throttle+pcie"


@pytest.mark.parametrize("spec,err", [
    ("throttle:reason=hot,sm_clock_mhz=1000", "reason must be one of thermal, power, sw"),
    ("throttle:reason=power", "sm_clock_mhz is required"),
    ("throttle:reason=power,sm_clock_mhz=0", "sm_clock_mhz must be > 0"),
    ("pcie:", "give gen, width or both"), ("pcie:gen=7", "gen must be 1..6"),
    ("pcie:width=12", "width must be one of 1, 2, 4, 8, 16"),
    ("xid:at_s=5", "code is required"), ("xid:code=0", "code must be >= 1"),
    ("xid:code=79,at_s=-1", "at_s must be >= 0")])
def test_bad_gpu_fault_specs(spec: str, err: str) -> None:
    with pytest.raises(FaultSpecError, match=err):
        parse_fault(spec)


def test_board_limits_are_checked_against_the_gpu() -> None:
    with pytest.raises(ConfigError, match=r"sm_clock_mhz must be in \(0, 1410\]"):
        Engine(CFG.replace(gpu="A100-80GB-SXM", faults=("throttle:reason=thermal,sm_clock_mhz=1700",)))
    with pytest.raises(ConfigError, match="gen 5 is above A100-80GB-SXM's Gen4"):
        Engine(CFG.replace(gpu="A100-80GB-SXM", faults=("pcie:gen=5",)))
    assert str(parse_fault("throttle:reason=sw,sm_clock_mhz=1200")) == "throttle:reason=sw,sm_clock_mhz=1200"
