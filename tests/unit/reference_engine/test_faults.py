"""Fault injection: spec parsing, and each fault's signature in the step log or memory report."""

from __future__ import annotations

import threading
import time

import pytest

from reference_engine.config import EngineConfig
from reference_engine.engine import Engine
from reference_engine.faults import FAULT_KINDS, HOST_LATE_S, Faults, FaultSpecError, parse_fault
from reference_engine.request import RequestOutput, SamplingParams
from reference_engine.sim_executor import SimExecutor


def engine(fake_executor: type, faults: list[str], step_s: float = 0.0) -> Engine:
    config = EngineConfig(block_size=4, max_num_seqs=8, max_num_batched_tokens=32,
                          max_model_len=128, faults=faults)
    return Engine(config, executor=fake_executor(block_size=4, step_s=step_s))


def labels(record: dict) -> set[str]:
    """The faults a step record names; `host-late` is left out: a busy host may add it to any
    step (reference_engine/faults.py), and these tests are about the injected ones."""
    return set((record["fault"] or "").split("+")) - {"", "host-late"}


def run_steps(eng: Engine, n: int) -> list[dict]:
    eng.add_request("long", [1, 2, 3], SamplingParams(max_tokens=100), lambda o: None)
    return [eng.step() for _ in range(n)]


def test_parse_valid_specs() -> None:
    spec = parse_fault("periodic-stall:every_steps=50,duration_ms=200")
    assert spec.kind == "periodic-stall" and spec.params == {"every_steps": 50, "duration_ms": 200.0}
    assert parse_fault("periodic-stall:every_s=5,duration_ms=300").params["every_s"] == 5.0
    assert parse_fault("slow-device:factor=1.5").params == {"factor": 1.5}
    assert parse_fault("memory-growth:bytes_per_request=1048576").params["bytes_per_request"] == 1 << 20
    assert parse_fault("hang:at_step=7").params == {"at_step": 7}
    assert str(parse_fault("hang:at_step=7")) == "hang:at_step=7"


@pytest.mark.parametrize(("spec", "message"), [
    ("explode:now=1", "fault kind 'explode' is unknown"),
    ("periodic-stall:every_steps=5", "field duration_ms is required"),
    ("periodic-stall:duration_ms=5", "exactly one of every_steps, every_s"),
    ("periodic-stall:every_steps=5,every_s=1,duration_ms=5", "exactly one of every_steps, every_s"),
    ("periodic-stall:every_steps=x,duration_ms=5", "field every_steps must be int, got 'x'"),
    ("periodic-stall:every_steps=0,duration_ms=5", "every_steps/every_s must be > 0"),
    ("slow-device:speed=2", "unknown field 'speed'"),
    ("slow-device:factor=0.5", "field factor must be >= 1"),
    ("slow-device:factor", "'factor' is not field=value"),
    ("memory-growth:bytes_per_request=-1", "field bytes_per_request must be >= 0"),
    ("hang:at_step=0", "field at_step must be >= 1"),
])
def test_bad_specs_name_the_field(spec: str, message: str) -> None:
    with pytest.raises(FaultSpecError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_fault(spec)


def test_a_fault_given_twice_is_refused() -> None:
    with pytest.raises(FaultSpecError, match="more than once"):
        Faults(["hang:at_step=1", "hang:at_step=2"])


def test_periodic_stall_every_steps_signature(fake_executor: type) -> None:
    eng = engine(fake_executor, ["periodic-stall:every_steps=4,duration_ms=30"])
    records = run_steps(eng, 12)
    stalled = [r["step_id"] for r in records if labels(r) == {"periodic-stall"}]
    assert stalled == [4, 8, 12]
    for r in records:
        if labels(r):
            assert r["end"] - r["start"] >= 0.030  # the stall is inside the step
    eng.check_invariants()


def test_periodic_stall_every_seconds_follows_the_clock() -> None:
    faults = Faults(["periodic-stall:every_s=5,duration_ms=300"])
    due = [faults.stall_seconds(i, t) for i, t in enumerate([100.0, 101.0, 105.0, 106.0, 110.5])]
    assert due == [0.0, 0.0, 0.3, 0.0, 0.3]


def test_slow_device_stretches_other_executors(fake_executor: type) -> None:
    eng = engine(fake_executor, ["slow-device:factor=3"], step_s=0.005)
    for r in run_steps(eng, 3):
        assert labels(r) == {"slow-device"}
        assert r["end"] - r["start"] >= 0.015


def test_slow_device_derates_bandwidth_in_the_sim_roofline() -> None:
    base = SimExecutor(EngineConfig(num_gpu_blocks=100))
    slow = SimExecutor(EngineConfig(num_gpu_blocks=100), device_factor=2.0)
    from reference_engine.executor import SeqWork, StepBatch
    batch = StepBatch(1, [SeqWork(i, [1], 500, [], True, SamplingParams(), 3) for i in range(32)])
    # The fixed parts (host overhead, the kernels' launch floor, the compute the weight stream
    # does not hide) move no bytes; decode of an 8B model is memory-bound: halving bandwidth
    # doubles the rest of the device time.
    b, s = base.predict(batch), slow.predict(batch)
    exposed = base.last_parts["exposed_overlap_s"]
    assert slow.last_parts["exposed_overlap_s"] == pytest.approx(exposed) and exposed > 0
    fixed = base.overhead_s + base.kernel_floor_s + exposed
    assert slow.kernel_floor_s == base.kernel_floor_s > 0
    assert s - fixed == pytest.approx(2 * (b - fixed))


def test_slow_collective_stretches_only_the_all_reduce() -> None:
    cfg = EngineConfig(num_gpu_blocks=100, tensor_parallel_size=2)
    base = SimExecutor(cfg)
    slow = SimExecutor(cfg, collective_factor=3.0)
    from infbench.specs.roofline import step_time
    from reference_engine.executor import SeqWork, StepBatch
    batch = StepBatch(1, [SeqWork(i, [1], 500, [], True, SamplingParams(), 3) for i in range(8)])
    comm = step_time(base.model, base.gpu, tp=2, decode_contexts=[501] * 8).comm_s
    assert comm > 0
    assert slow.predict(batch) - base.predict(batch) == pytest.approx(2 * comm)
    with pytest.raises(ValueError, match="tensor_parallel_size > 1"):
        SimExecutor(EngineConfig(num_gpu_blocks=100), collective_factor=2.0)


def test_memory_growth_retains_bytes_per_finished_request(fake_executor: type) -> None:
    eng = engine(fake_executor, ["memory-growth:bytes_per_request=65536"])
    before = eng.memory_report()
    for i in range(5):
        eng.add_request(f"r{i}", [1, 2], SamplingParams(max_tokens=2), lambda o: None)
    eng.add_request("cancelled", [1, 2], SamplingParams(max_tokens=50), lambda o: None)
    eng.step()
    eng.abort_request("cancelled")
    while eng.step() is not None:
        pass
    after = eng.memory_report()
    assert before["retained"] == 0
    assert after["retained"] == 6 * 65536  # aborted requests leak too
    assert after["total"] - before["total"] == 6 * 65536
    assert after["kv_pool"] == before["kv_pool"]  # the pool itself never grows


def test_hang_stops_the_step_loop_while_the_engine_still_answers(fake_executor: type) -> None:
    eng = engine(fake_executor, ["hang:at_step=5"], step_s=0.001)
    outputs: list[RequestOutput] = []
    eng.start()
    try:
        eng.add_request("r", [1, 2, 3], SamplingParams(max_tokens=50), outputs.append)
        deadline = time.monotonic() + 10
        while not eng.stats().hung:
            assert time.monotonic() < deadline
            time.sleep(0.005)
        seen = len(outputs)
        time.sleep(0.05)
        assert len(outputs) == seen == 4  # steps 1..4 produced a token each; then nothing
        assert [r["step_id"] for r in eng.steps_since(0)] == [1, 2, 3, 4]
        assert eng.is_alive and eng.stats().num_running == 1  # stats still answer
        eng.add_request("later", [1], SamplingParams(max_tokens=1), lambda o: None)
        assert eng.stats().num_waiting == 1
    finally:
        t = threading.Thread(target=eng.stop)
        t.start()
        t.join(5)
        assert not t.is_alive()


def test_every_example_the_help_prints_parses() -> None:
    import re

    from reference_engine.__main__ import build_parser
    from reference_engine.faults import FAULT_EXAMPLES

    shown = re.findall(r"--fault (\S+:\S+)", build_parser().format_help())
    assert shown == list(FAULT_EXAMPLES)
    assert {parse_fault(e).kind for e in shown} == set(FAULT_KINDS)


class _LateSleeps:
    """A module's `time` on a virtual clock: only sleeps advance it, at once, the first
    `late` sleeps `by_s` further, as a process the host descheduled wakes late. Exact
    lateness on any host, busy or not: the clock does not run while the host is away (a
    clock that also ran with the real one let a step descheduled between its start and its
    first sleep on a loaded host sleep not at all, so it was never late)."""

    def __init__(self, by_s: float, late: int = 1) -> None:
        self.by_s, self.late, self.now = by_s, late, time.monotonic()

    def monotonic(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        if self.late and s > 0:
            self.late -= 1
            s += self.by_s
        self.now += max(s, 1e-6)  # a yield (sleep(0)) takes a moment too


def test_a_sim_step_the_host_ran_late_is_labelled_host_late(monkeypatch: pytest.MonkeyPatch) -> None:
    import reference_engine.engine as engine_module
    import reference_engine.sim_executor as sim
    eng = Engine(EngineConfig(block_size=4, max_num_seqs=8, max_num_batched_tokens=32,
                              max_model_len=128, num_gpu_blocks=100))
    clock = _LateSleeps(HOST_LATE_S + 0.015)
    monkeypatch.setattr(sim, "time", clock)
    monkeypatch.setattr(engine_module, "time", clock)
    first, *rest = run_steps(eng, 4)
    assert first["fault"] == "host-late"
    assert first["end"] - first["start"] >= HOST_LATE_S + 0.015
    # the executor owed the host's lateness back over the next steps, not another label
    assert all(r["fault"] in (None, "host-late") for r in rest)


def test_an_injected_stall_the_host_overslept_carries_both_labels(
        fake_executor: type, monkeypatch: pytest.MonkeyPatch) -> None:
    import reference_engine.engine as engine_module
    eng = engine(fake_executor, ["periodic-stall:every_steps=2,duration_ms=10"])
    monkeypatch.setattr(engine_module, "time", _LateSleeps(0.030))
    records = run_steps(eng, 4)
    assert records[1]["fault"] == "periodic-stall+host-late"
    # a step that sleeps on time, and steps the fake executor never sleeps in, are not late
    assert [r["fault"] for r in (records[0], records[2], records[3])] == [None, None, "periodic-stall"]


def test_a_step_below_the_lateness_threshold_is_not_labelled(
        fake_executor: type, monkeypatch: pytest.MonkeyPatch) -> None:
    import reference_engine.engine as engine_module
    eng = engine(fake_executor, ["periodic-stall:every_steps=1,duration_ms=5"])
    monkeypatch.setattr(engine_module, "time", _LateSleeps(HOST_LATE_S / 4))
    first = run_steps(eng, 1)[0]
    assert first["fault"] == "periodic-stall"
