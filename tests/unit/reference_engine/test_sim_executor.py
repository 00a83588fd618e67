"""Sim executor: pool size from the memory plan, step time from the roofline, synthetic
tokens that are valid, deterministic and seedable."""

from __future__ import annotations

import time

import pytest

from infbench.specs import get_gpu, get_model
from infbench.specs.memory import plan_memory
from infbench.specs.roofline import step_time
from reference_engine.config import ConfigError, EngineConfig
from reference_engine.engine import Engine
from reference_engine.executor import SeqWork, StepBatch
from reference_engine.request import SamplingParams
from reference_engine.sim_executor import EOS_ID, MAX_CATCH_UP_S, SimExecutor


def work(seq_id: int, tokens: int, start: int, outputs: int, sample: bool = True,
         params: SamplingParams | None = None) -> SeqWork:
    return SeqWork(seq_id, [65] * tokens, start, [], sample, params or SamplingParams(), outputs)


def test_pool_size_comes_from_the_memory_plan() -> None:
    cfg = EngineConfig(gpu="H100-SXM", model="meta-llama/Llama-3.1-8B", max_model_len=8192)
    plan = plan_memory(get_model(cfg.model), get_gpu(cfg.gpu), tp=1, gpu_memory_utilization=0.9,
                       max_model_len=8192, block_size=16, max_num_batched_tokens=cfg.token_budget,
                       max_num_seqs=cfg.max_num_seqs)
    ex = SimExecutor(cfg)
    assert ex.num_blocks == plan.num_blocks > 0
    report = ex.memory_report()
    assert report["weights"] == int(plan.weights_bytes)
    assert report["kv_pool"] == int(plan.num_blocks * plan.bytes_per_block)
    assert SimExecutor(cfg.replace(num_gpu_blocks=123)).num_blocks == 123


def test_a_model_that_does_not_fit_is_refused_naming_the_setting() -> None:
    with pytest.raises(ConfigError, match="max_model_len"):
        SimExecutor(EngineConfig(model="meta-llama/Llama-3.1-70B", gpu="H100-SXM"))


def test_step_time_is_the_roofline_of_the_batch_plus_overhead() -> None:
    ex = SimExecutor(EngineConfig(num_gpu_blocks=100, step_overhead_ms=0.7))
    batch = StepBatch(1, [work(0, 1, 99, 5), work(1, 1, 10, 2), work(2, 64, 128, 0, sample=False)])
    bd = step_time(ex.model, ex.gpu, tp=1, prefill_chunks=[(64, 128)], decode_contexts=[100, 11])
    # 32 layers x 12 kernels x the GPU spec's 2 us floor per kernel.
    assert ex.kernel_floor_s == pytest.approx(32 * 12 * 2e-6)
    # Half the shorter of the weight stream and the math is not hidden by the longer.
    exposed = 0.5 * min(bd.memory_s, bd.compute_s)
    assert ex.predict(batch) == pytest.approx(bd.seconds + exposed + ex.kernel_floor_s + 0.0007)
    assert ex.last_parts["exposed_overlap_s"] == pytest.approx(exposed) and exposed > 0


def test_tensor_parallel_steps_pay_a_floor_for_their_all_reduce_kernels_too() -> None:
    one = SimExecutor(EngineConfig(num_gpu_blocks=100))
    two = SimExecutor(EngineConfig(num_gpu_blocks=100, tensor_parallel_size=2))
    assert two.kernel_floor_s == pytest.approx(one.kernel_floor_s * 14 / 12)


@pytest.mark.parametrize("factor", [1.2, 1 / 1.2, 3.0])
def test_prefill_factor_scales_only_what_the_prefill_chunks_add(factor: float) -> None:
    # The calibration test's mispriced prefill: a prefill-only step scales whole, a mixed
    # step by its prefill's share (the step less its decodes alone), a decode step not at all.
    cfg = EngineConfig(gpu="H100-SXM", num_gpu_blocks=400, step_overhead_ms=0.3)
    right, wrong = SimExecutor(cfg), SimExecutor(cfg, prefill_factor=factor)
    prefill = StepBatch(1, [work(0, 1500, 500, 0)])
    roof = step_time(right.model, right.gpu, prefill_chunks=[(1500, 500)]).seconds
    assert wrong.predict(prefill) - right.predict(prefill) == pytest.approx((factor - 1) * roof)
    mixed = StepBatch(2, [work(1, 1, 900, 4), work(2, 1, 3000, 9), work(3, 700, 0, 0, sample=False)])
    alone = step_time(right.model, right.gpu, decode_contexts=[901, 3001]).seconds
    both = step_time(right.model, right.gpu, prefill_chunks=[(700, 0)],
                     decode_contexts=[901, 3001]).seconds
    assert wrong.predict(mixed) - right.predict(mixed) == pytest.approx((factor - 1) * (both - alone))
    decode = StepBatch(3, [work(1, 1, 901, 5), work(2, 1, 3001, 10)])
    assert wrong.predict(decode) == right.predict(decode)
    with pytest.raises(ConfigError, match="prefill_factor"):
        SimExecutor(cfg, prefill_factor=0.0)


def test_execute_waits_until_the_deadline_from_the_step_start(
        monkeypatch: pytest.MonkeyPatch) -> None:
    ex = SimExecutor(EngineConfig(num_gpu_blocks=100))
    batch = StepBatch(1, [work(i, 1, 300, 1) for i in range(16)], start_time=time.monotonic())
    ex.execute(batch)
    assert time.monotonic() >= batch.start_time + ex.predict(batch)
    # A step whose bookkeeping already used up its predicted time does not sleep at all.
    sleeps: list[float] = []
    monkeypatch.setattr(time, "sleep", sleeps.append)
    ex.execute(StepBatch(2, batch.seqs, start_time=time.monotonic() - 10.0))
    assert sleeps == []


class _LateClock:
    """A monotonic clock whose sleeps wake late by a scripted amount (a busy neighbour)."""

    def __init__(self, late_by_step: dict[int, float]) -> None:
        self.now = 1000.0
        self.late_by_step = late_by_step
        self.step = 0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        # sleep(0) only yields; give it a microsecond so the yield loop ends. The late wake
        # comes at the yield just before the deadline, so it is late by exactly its amount.
        self.now += seconds or 1e-6 + self.late_by_step.pop(self.step, 0.0)


def _chained_steps(ex: SimExecutor, clock: _LateClock, n: int) -> list[float]:
    """Run n steps back to back as the engine does (each starts where the last ended)."""
    seqs = [work(i, 1, 300, 1, sample=False) for i in range(16)]
    start, durations = clock.now, []
    for k in range(n):
        clock.step = k
        ex.execute(StepBatch(k, seqs, start_time=start))
        durations.append(clock.now - start)
        start = clock.now
    return durations


@pytest.mark.parametrize("late_s, step", [(0.0031, 2), (0.0117, 7), (0.00045, 11)])
def test_a_late_wake_is_made_up_by_the_next_steps(
        monkeypatch: pytest.MonkeyPatch, late_s: float, step: int) -> None:
    ex = SimExecutor(EngineConfig(num_gpu_blocks=100))
    clock = _LateClock({step: late_s})
    monkeypatch.setattr(time, "monotonic", clock.monotonic)
    monkeypatch.setattr(time, "sleep", clock.sleep)
    p = ex.predict(StepBatch(0, [work(i, 1, 300, 1, sample=False) for i in range(16)]))
    durations = _chained_steps(ex, clock, 20)
    assert durations[step] > p + late_s / 2  # the late step itself is long ...
    # ... but the device kept its clock: 20 steps last 20 predictions, late wake made up.
    assert sum(durations) == pytest.approx(20 * p, abs=1e-4)


def test_a_long_delay_is_kept_as_a_stall_beyond_the_catch_up_limit(
        monkeypatch: pytest.MonkeyPatch) -> None:
    ex = SimExecutor(EngineConfig(num_gpu_blocks=100))
    clock = _LateClock({4: 0.137})
    monkeypatch.setattr(time, "monotonic", clock.monotonic)
    monkeypatch.setattr(time, "sleep", clock.sleep)
    p = ex.predict(StepBatch(0, [work(i, 1, 300, 1, sample=False) for i in range(16)]))
    durations = _chained_steps(ex, clock, 30)
    late = durations[4] - p
    assert late > MAX_CATCH_UP_S
    # the device sat idle through the stall: nothing owed, no burst of short steps after it
    assert sum(durations) == pytest.approx(30 * p + late, abs=1e-4)
    assert min(durations[5:]) == pytest.approx(p, abs=1e-4)


def test_idle_time_owes_nothing_to_the_next_step(monkeypatch: pytest.MonkeyPatch) -> None:
    ex = SimExecutor(EngineConfig(num_gpu_blocks=100))
    clock = _LateClock({0: 0.009})
    monkeypatch.setattr(time, "monotonic", clock.monotonic)
    monkeypatch.setattr(time, "sleep", clock.sleep)
    seqs = [work(i, 1, 300, 1, sample=False) for i in range(16)]
    p = ex.predict(StepBatch(0, seqs))
    ex.execute(StepBatch(0, seqs, start_time=clock.now))
    ex.idle()  # the engine found nothing to run
    clock.step, start = 1, clock.now + 0.5
    clock.now = start
    ex.execute(StepBatch(1, seqs, start_time=start))
    assert clock.now - start == pytest.approx(p, abs=1e-5)


def test_tokens_are_printable_deterministic_and_seedable() -> None:
    a = SimExecutor(EngineConfig(num_gpu_blocks=100, step_overhead_ms=0.0))
    b = SimExecutor(EngineConfig(num_gpu_blocks=100, step_overhead_ms=0.0))
    sampled = SamplingParams(temperature=1.0)
    seeded = SamplingParams(temperature=1.0, seed=11)
    batch = StepBatch(1, [work(i, 1, 7 + i, 1, params=seeded if i % 2 else sampled)
                          for i in range(40)])
    out_a, out_b = a.execute(batch), b.execute(batch)
    assert out_a == out_b
    assert all(32 <= t <= 126 for t in out_a.values())
    # The same seed and position give the same token whatever the sequence.
    assert a._token(1, 11, 1.0, 50) == a._token(99, 11, 1.0, 50)
    assert len({a._token(1, None, 1.0, p) for p in range(200)}) > 50  # not a constant stream
    assert len(batch.seqs) == len(out_a)


def test_eos_probability() -> None:
    never = SimExecutor(EngineConfig(num_gpu_blocks=100))
    always = SimExecutor(EngineConfig(num_gpu_blocks=100, sim_eos_probability=1.0))
    assert all(never._token(1, None, 1.0, p) != EOS_ID for p in range(2000))
    assert all(always._token(1, None, 1.0, p) == EOS_ID for p in range(20))


def test_engine_on_sim_finishes_requests_by_max_tokens() -> None:
    eng = Engine(EngineConfig(num_gpu_blocks=64, step_overhead_ms=0.0))
    outs = []
    eng.add_request("a", list(range(20)), SamplingParams(max_tokens=5), outs.append)
    while eng.step() is not None:
        eng.check_invariants()
    assert len([t for o in outs for t in o.new_token_ids]) == 5
    assert outs[-1].finish_reason == "length"
    rec = eng.steps_since(0)
    assert rec[0]["prefill_tokens"] == 20 and rec[-1]["decode_seqs"] == 1


@pytest.mark.parametrize(("median", "sigma"), [(192, 0.7), (60, 0.3), (500, 1.0)])
def test_natural_answer_lengths_are_lognormal_with_the_configured_median(
        median: int, sigma: float) -> None:
    import numpy as np

    ex = SimExecutor(EngineConfig(num_gpu_blocks=100, sim_output_median=median,
                                  sim_output_sigma=sigma))
    lens = np.array([ex.natural_output_len(s, p) for s in range(40) for p in range(1, 101)])
    assert lens.min() >= 16
    assert np.median(lens) == pytest.approx(median, rel=0.08)
    above = lens[lens > 16]  # the floor censors the low tail; fit the spread above it
    assert np.std(np.log(above)) == pytest.approx(sigma, rel=0.2)
    # deterministic per (stream, prompt length); different prompt lengths differ
    assert ex.natural_output_len(7, 123) == ex.natural_output_len(7, 123)
    assert len({ex.natural_output_len(7, p) for p in range(1, 50)}) > 20


def test_eos_at_the_natural_length_unless_ignore_eos_or_disabled() -> None:
    ex = SimExecutor(EngineConfig(num_gpu_blocks=100))
    prompt = 37
    stream_seed = 5
    natural = ex.natural_output_len(ex.stream(1, stream_seed, 0.0), prompt)
    assert natural is not None
    tok = [ex._token(1, stream_seed, 0.0, prompt + n, n) for n in range(natural + 3)]
    assert EOS_ID not in tok[:natural] and tok[natural] == EOS_ID
    kept = [ex._token(1, stream_seed, 0.0, prompt + n, n, ignore_eos=True) for n in range(natural + 3)]
    assert EOS_ID not in kept
    off = SimExecutor(EngineConfig(num_gpu_blocks=100, sim_output_median=0))
    assert all(off._token(1, stream_seed, 0.0, prompt + n, n) != EOS_ID for n in range(3000))
