"""The knobs engine versions moved, honoured by the reference engine with a modelled effect:
CUDA-graph capture sizes (padding, eager above the largest), graph mode, async scheduling,
stream interval, scheduling policy, and default sets as data files."""

from __future__ import annotations

from pathlib import Path

import pytest

from infbench.specs.gpus import exposed_overlap_s
from infbench.specs.roofline import step_time
from reference_engine.block_pool import BlockPool
from reference_engine.config import ConfigError, EngineConfig, default_set
from reference_engine.executor import SeqWork, StepBatch
from reference_engine.request import SamplingParams, Sequence
from reference_engine.scheduler import Scheduler
from reference_engine.sim_executor import LAUNCH_US, SimExecutor


def decode(n: int, context: int = 500) -> StepBatch:
    return StepBatch(1, [SeqWork(i, [1], context, [], True, SamplingParams(), 3) for i in range(n)])


def roofline(ex: SimExecutor, contexts: list[int]) -> float:
    """The batch's roofline plus the fixed per-kernel floor every step pays and the share of
    its compute the weight stream does not hide."""
    bd = step_time(ex.model, ex.gpu, decode_contexts=contexts)
    return bd.seconds + ex.kernel_floor_s + exposed_overlap_s(bd.memory_s, bd.compute_s)


def test_decode_batches_pad_to_the_next_captured_size() -> None:
    ex = SimExecutor(EngineConfig(num_gpu_blocks=100, step_overhead_ms=0.0,
                                  cudagraph_capture_sizes=[8, 64]))
    assert ex.predict(decode(10)) == pytest.approx(roofline(ex, [501] * 10 + [1] * 54))
    assert ex.predict(decode(8)) == pytest.approx(roofline(ex, [501] * 8))


def test_batches_above_the_largest_size_and_eager_mode_pay_the_launches() -> None:
    cfg = EngineConfig(num_gpu_blocks=100, step_overhead_ms=0.0, cudagraph_max_capture_size=16)
    ex = SimExecutor(cfg)
    eager = ex.model.num_layers * 12 * LAUNCH_US * 1e-6
    assert ex.predict(decode(16)) == pytest.approx(roofline(ex, [501] * 16))
    assert ex.predict(decode(17)) == pytest.approx(roofline(ex, [501] * 17) + eager)
    for off in (dict(enforce_eager=True), dict(cudagraph_mode="NONE")):
        e = SimExecutor(cfg.replace(**off))
        assert e.predict(decode(4)) == pytest.approx(roofline(e, [501] * 4) + eager)
    piece = SimExecutor(cfg.replace(cudagraph_mode="PIECEWISE"))
    assert piece.predict(decode(4)) == pytest.approx(roofline(ex, [501] * 4) + eager / 6)


def test_the_default_capture_cap_follows_max_num_seqs() -> None:
    assert EngineConfig(max_num_seqs=64).capture_sizes[-1] == 128
    assert EngineConfig(max_num_seqs=1024).capture_sizes[-1] == 512
    assert EngineConfig(enforce_eager=True).capture_sizes == ()


def test_async_scheduling_hides_the_host_overhead() -> None:
    cfg = EngineConfig(num_gpu_blocks=100, step_overhead_ms=2.0)
    sync, asyn = SimExecutor(cfg), SimExecutor(cfg.replace(async_scheduling=True))
    device = roofline(sync, [501] * 8)
    assert sync.predict(decode(8)) == pytest.approx(device + 0.002)
    assert asyn.predict(decode(8)) == pytest.approx(max(device, 0.002))


def test_priority_policy_admits_lower_values_first_and_keeps_arrival_order() -> None:
    def seq(i: int, priority: int) -> Sequence:
        return Sequence(i, f"r{i}", [1, 2, 3], SamplingParams(max_tokens=4, priority=priority), lambda o: None, 0.0)
    for policy, want in (("fcfs", [0, 1, 2, 3]), ("priority", [2, 1, 3, 0])):
        s = Scheduler(BlockPool(64, 16, False), 8, 64, 128, policy=policy)
        s.enqueue([seq(0, 5), seq(1, 1), seq(2, 0), seq(3, 1)])
        assert [q.seq_id for q in s.waiting] == want


def test_default_sets_are_data_and_flags_override_them(tmp_path: Path) -> None:
    one, two = default_set("ref-1"), default_set("ref-2")
    moved = {k for k in one.keys() | two.keys() if one.get(k) != two.get(k)}
    assert len(moved) >= 6
    cfg = EngineConfig.with_defaults("ref-2", max_num_seqs=64)
    assert cfg.async_scheduling is True and cfg.max_num_seqs == 64 and cfg.defaults == "ref-2"
    r = cfg.resolved()
    assert r["async_scheduling"] == {"value": True, "default": True}
    assert r["max_num_seqs"] == {"value": 64, "default": False}
    custom = tmp_path / "mine.toml"
    custom.write_text("[defaults]\nstream_interval = 4\n")
    assert EngineConfig.with_defaults(str(custom)).stream_interval == 4
    custom.write_text("[defaults]\nport = 1\n")
    default_set.cache_clear()
    with pytest.raises(ConfigError, match="'port' is not a setting"):
        EngineConfig.with_defaults(str(custom))
    with pytest.raises(ConfigError, match="neither a shipped default set"):
        EngineConfig.with_defaults("ref-9")


@pytest.mark.parametrize("bad, match", [
    (dict(cudagraph_mode="SOME"), "cudagraph_mode"), (dict(stream_interval=0), "stream_interval"),
    (dict(scheduling_policy="lifo"), "scheduling_policy"),
    (dict(cudagraph_capture_sizes=[0, 8]), "cudagraph_capture_sizes")])
def test_bad_knob_values_name_the_setting(bad: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        EngineConfig(**bad)


@pytest.mark.parametrize("interval, events", [(1, 10), (3, 4), (20, 2)])
def test_stream_interval_groups_tokens_per_event(interval: int, events: int) -> None:
    import asyncio
    import json

    from reference_engine.metrics import RequestMetrics
    from reference_engine.protocol import GenerationRequest
    from reference_engine.request import RequestOutput
    from reference_engine.streaming import Generation
    from reference_engine.tokenizer import ByteTokenizer

    class NoEngine:
        def abort_request(self, request_id: str) -> None:
            raise AssertionError("not aborted")

    async def go() -> list[bytes]:
        gen = Generation(mailbox=None, engine=NoEngine(), request_id="r",  # type: ignore[arg-type]
                         req=GenerationRequest(kind="completion", model="m", stream=True),
                         tokenizer=ByteTokenizer(), metrics=RequestMetrics(), created=0,
                         byte_budget=1 << 20, transport_buffered=None, on_overflow=None,
                         stream_interval=interval)
        for i in range(10):  # ten tokens "a".."j"; the last one finishes the request
            gen._deliver(RequestOutput("r", [97 + i], i == 9, "length" if i == 9 else None,
                                       3, 0, 0.0, 0.0, 0.0), float(i))
        return list(gen._pending)

    chunks = [c for c in asyncio.run(go()) if b'"text"' in c]
    assert len(chunks) == events  # the first token at once, then every `interval`, the rest at the end
    texts = [json.loads(c[len(b"data: "):])["choices"][0]["text"] for c in chunks]
    assert "".join(texts) == "abcdefghij" and texts[0] == "a"
