"""Structured output in the engine: compiles that hold only their own requests, the cache,
the per-step mask priced as blocking or overlapping, the step log and /metrics."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from infbench.promtext import parse_raw
from reference_engine.block_pool import InvariantError
from reference_engine.config import ConfigError, EngineConfig
from reference_engine.engine import Engine
from reference_engine.executor import SeqWork, StepBatch
from reference_engine.request import SamplingParams
from reference_engine.sim_executor import SimExecutor
from reference_engine.structured_output import compile_cost_s, schema_text

from .test_engine import Collector, wait_for


def schema(n: int, tag: str = "") -> dict[str, Any]:
    return {"type": "object", "properties": {
        f"{tag}field_{i}": {"type": "integer" if i % 2 else "string"} for i in range(n)}}


def make(fake_executor: type, **cfg: Any) -> Engine:
    config = EngineConfig(executor="sim", block_size=4, max_num_seqs=8, max_num_batched_tokens=64,
                          max_model_len=1024, **cfg)
    return Engine(config, executor=fake_executor(block_size=4, num_blocks=1024))


def add(eng: Engine, rid: str, js: Any, max_tokens: int = 900, prompt: int = 5) -> Collector:
    c = Collector()
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0,
                            structured_outputs=None if js is None else {"json": js})
    eng.add_request(rid, list(range(1, prompt + 1)), params, c)
    return c


def run_until(eng: Engine, collectors: list[Collector], timeout: float = 10.0) -> list[dict]:
    records: list[dict] = []
    deadline = time.monotonic() + timeout
    while not all(c.done.is_set() for c in collectors):
        assert time.monotonic() < deadline, "requests did not finish"
        rec = eng.step()
        if rec is None:
            time.sleep(0.001)  # only requests waiting on a compile
        else:
            records.append(rec)
        eng.check_invariants()
    return records


def text(c: Collector) -> str:
    return bytes(t for t in c.tokens if t < 256).decode()


def test_compile_cost_grows_with_the_schema_text() -> None:
    small, large = schema_text(schema(3)), schema_text(schema(60))
    assert compile_cost_s(small, 7.0, 90.0) < compile_cost_s(large, 7.0, 90.0)
    kib = len(large.encode()) / 1024
    assert compile_cost_s(large, 7.0, 90.0) == pytest.approx((7.0 + 90.0 * kib) / 1e3)


@pytest.mark.parametrize(("base_ms", "per_kib", "fields"), [(23.0, 0.0, 4), (3.0, 61.0, 38)])
def test_a_cold_schema_holds_only_its_own_requests_for_the_priced_compile(
        fake_executor: type, base_ms: float, per_kib: float, fields: int) -> None:
    eng = make(fake_executor, grammar_compile_base_ms=base_ms, grammar_compile_ms_per_kib=per_kib)
    js = schema(fields)
    cold = [add(eng, f"s{i}", js) for i in range(3)]
    plain = add(eng, "plain", None, max_tokens=6)
    records = run_until(eng, [*cold, plain])
    priced_ms = compile_cost_s(schema_text(js), base_ms, per_kib) * 1e3
    compiled = [r for r in records if r["grammar_compiles"]]
    # one compile for three requests of the same schema, at least its priced cost
    assert [r["grammar_compiles"] for r in compiled] == [1]
    assert compiled[0]["grammar_compile_ms"] >= priced_ms
    assert records[0]["grammar_cache_misses"] == 3 and records[0]["grammar_waiting"] == 3
    # the plain request stepped while the schema compiled; the cold ones did not
    waiting_steps = [r for r in records if r["grammar_waiting"]]
    assert waiting_steps and all(r["structured_seqs"] == 0 for r in waiting_steps)
    assert plain.outputs[0].first_token_time < min(c.outputs[0].first_token_time for c in cold)
    for c in cold:
        assert set(json.loads(text(c))) == set(js["properties"])
    assert eng.structured.compiles == 1 and eng.structured.misses == 3


def test_a_warm_schema_is_a_hit_and_the_cache_evicts_least_recently_used(
        fake_executor: type) -> None:
    eng = make(fake_executor, grammar_compile_base_ms=1.0, grammar_compile_ms_per_kib=0.0,
               grammar_cache_size=2)
    a, b, c = schema(2, "a"), schema(2, "b"), schema(2, "c")
    for rid, js in [("1", a), ("2", b), ("3", a), ("4", c), ("5", a), ("6", b)]:
        run_until(eng, [add(eng, rid, js, max_tokens=40)])
    s = eng.structured
    # a, b compile; a hits; c compiles and evicts b (a was used last); a hits; b compiles again
    assert (s.hits, s.misses, s.compiles, s.evictions) == (2, 4, 4, 2)
    eng.check_invariants()


def test_cache_size_zero_compiles_every_request_and_reordered_keys_miss(
        fake_executor: type) -> None:
    eng = make(fake_executor, grammar_compile_base_ms=1.0, grammar_cache_size=0)
    js = schema(3)
    for i in range(3):
        run_until(eng, [add(eng, f"r{i}", js, max_tokens=30)])
    assert (eng.structured.hits, eng.structured.compiles) == (0, 3)
    warm = make(fake_executor, grammar_compile_base_ms=1.0)
    reordered = {"properties": js["properties"], "type": "object"}
    for i, doc in enumerate([js, js, reordered]):
        run_until(warm, [add(warm, f"w{i}", doc, max_tokens=30)])
    assert (warm.structured.hits, warm.structured.compiles) == (1, 2)


def test_abort_while_waiting_for_the_compile_frees_it_once(fake_executor: type) -> None:
    eng = make(fake_executor, grammar_compile_base_ms=40.0)
    c = add(eng, "gone", schema(5))
    eng.step()
    assert eng.stats().num_waiting == 1
    eng.abort_request("gone")
    eng.step()
    assert c.done.is_set() and c.outputs[-1].finish_reason == "abort"
    assert eng.stats().num_waiting == 0 and eng.stats().num_requests_finished == 1
    wait_for(lambda: eng.structured.compiles == 1)
    eng.step()
    eng.check_invariants()
    assert not eng.scheduler.has_work()


@pytest.mark.parametrize(("overlap", "us_per_seq", "seqs"), [(True, 55.0, 3), (False, 35.0, 4)])
def test_the_step_log_names_the_mask_and_whether_it_blocked(
        fake_executor: type, overlap: bool, us_per_seq: float, seqs: int) -> None:
    eng = make(fake_executor, grammar_compile_base_ms=0.0, grammar_compile_ms_per_kib=0.0,
               grammar_mask_us_per_seq=us_per_seq, grammar_mask_overlap=overlap)
    cs = [add(eng, f"m{i}", schema(3), max_tokens=20, prompt=4 + i) for i in range(seqs)]
    records = run_until(eng, cs)
    full = [r for r in records if r["structured_seqs"] == seqs]
    assert full and all(r["grammar_mask_ms"] == pytest.approx(seqs * us_per_seq / 1e3)
                        for r in full)
    assert all(r["grammar_mask_blocking"] is (not overlap) for r in records)
    # the fake executor has no clock: the engine waits the mask out after the real step
    if not overlap:
        assert all(r["grammar_mask_exposed_ms"] == pytest.approx(r["grammar_mask_ms"])
                   for r in full)


def batch(mask_s: float, decodes: int = 16) -> StepBatch:
    params = SamplingParams(max_tokens=8)
    works = [SeqWork(i, [65], 500, [0], True, params, 3) for i in range(decodes)]
    return StepBatch(1, works, 0.0, grammar_mask_s=mask_s)


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_the_sim_prices_an_overlapped_mask_as_max_and_a_blocking_one_as_a_sum(
        async_scheduling: bool) -> None:
    cfg = dict(gpu="H100-SXM", max_num_seqs=64, step_overhead_ms=0.7,
               async_scheduling=async_scheduling)
    plain = SimExecutor(EngineConfig(**cfg)).predict(batch(0.0))
    for mask_ms in (0.3, 4.1, 27.0):
        over = SimExecutor(EngineConfig(**cfg, grammar_mask_overlap=True))
        block = SimExecutor(EngineConfig(**cfg, grammar_mask_overlap=False))
        t_over, t_block = over.predict(batch(mask_ms / 1e3)), block.predict(batch(mask_ms / 1e3))
        assert t_block == pytest.approx(plain + mask_ms / 1e3)
        assert block.last_parts["grammar_mask_exposed_s"] == pytest.approx(mask_ms / 1e3)
        device = over.last_parts["device_s"]
        host = 0.7e-3
        want = (max(device, host + mask_ms / 1e3) if async_scheduling
                else max(device, mask_ms / 1e3) + host)
        assert t_over == pytest.approx(want)
        assert over.last_parts["grammar_mask_exposed_s"] == pytest.approx(want - plain)
        # a small mask hides behind the forward; a large one shows, but less than blocking
        assert t_over <= t_block
        if mask_ms / 1e3 < device - host:
            assert t_over == pytest.approx(plain)


def test_metrics_expose_the_cache_and_compile_series(fake_executor: type) -> None:
    eng = make(fake_executor, grammar_compile_base_ms=2.0, grammar_cache_size=1)
    for rid, js in [("1", schema(2, "x")), ("2", schema(2, "y")), ("3", schema(2, "y"))]:
        run_until(eng, [add(eng, rid, js, max_tokens=25)])
    samples = {(n, labels): v for n, labels, v in parse_raw(eng.structured.metrics_lines("m"))}
    lab = 'model_name="m"'
    assert samples[("reference_engine_grammar_cache_hits_total", lab)] == 1
    assert samples[("reference_engine_grammar_cache_misses_total", lab)] == 2
    assert samples[("reference_engine_grammar_cache_evictions_total", lab)] == 1
    assert samples[("reference_engine_grammar_compile_seconds_count", lab)] == 2
    assert samples[("reference_engine_num_requests_waiting_for_grammar", lab)] == 0
    assert samples[("reference_engine_grammar_masked_tokens_total", lab)] > 0


def test_invariants_catch_an_overfull_cache_and_a_request_both_held_and_queued(
        fake_executor: type) -> None:
    eng = make(fake_executor, grammar_compile_base_ms=30.0, grammar_cache_size=1)
    add(eng, "held", schema(2))
    eng.step()
    held = next(iter(eng.structured._inflight.values()))[0]
    eng.scheduler.waiting.append(held)
    with pytest.raises(InvariantError, match="queued while waiting"):
        eng.check_invariants()
    eng.scheduler.waiting.remove(held)
    eng.structured._cache["x"] = ()
    eng.structured._cache["y"] = ()
    with pytest.raises(InvariantError, match="grammar_cache_size"):
        eng.check_invariants()


@pytest.mark.parametrize(("name", "value"), [
    ("grammar_cache_size", -1), ("grammar_compile_workers", 0),
    ("grammar_compile_ms_per_kib", -2.0), ("grammar_mask_us_per_seq", float("nan"))])
def test_bad_settings_are_refused_naming_the_field(name: str, value: Any) -> None:
    with pytest.raises(ConfigError, match=name):
        EngineConfig(**{name: value})


def test_a_compiled_request_rejoins_the_queue_at_its_arrival_not_behind_later_ones() -> None:
    from collections import deque
    from types import SimpleNamespace

    from reference_engine.request import Sequence
    from reference_engine.structured_output import requeue

    def seq(i: int, preempted: int = 0) -> Sequence:
        s = Sequence(i, f"r{i}", [1, 2], SamplingParams(), lambda o: None, 0.0)
        s.num_preemptions = preempted
        return s

    # a preempted sequence at the front keeps it; arrivals 7 and 9 came after the held 5
    sched = SimpleNamespace(policy="fcfs", waiting=deque([seq(2, preempted=1), seq(7), seq(9)]))
    requeue(sched, [seq(5), seq(11)])
    assert [s.seq_id for s in sched.waiting] == [2, 5, 7, 9, 11]


@pytest.mark.parametrize(("step_s", "us_per_seq", "hidden"), [(0.012, 90.0, True),
                                                               (0.0, 2500.0, False)])
def test_an_executor_without_a_clock_waits_out_only_the_mask_the_forward_did_not_cover(
        fake_executor: type, step_s: float, us_per_seq: float, hidden: bool) -> None:
    config = EngineConfig(executor="sim", block_size=4, max_num_seqs=8, max_num_batched_tokens=64,
                          max_model_len=1024, grammar_compile_base_ms=0.0,
                          grammar_compile_ms_per_kib=0.0, grammar_mask_us_per_seq=us_per_seq)
    eng = Engine(config, executor=fake_executor(block_size=4, num_blocks=1024, step_s=step_s))
    cs = [add(eng, f"o{i}", schema(2), max_tokens=12, prompt=5 + i) for i in range(3)]
    full = [r for r in run_until(eng, cs) if r["structured_seqs"] == 3]
    assert full and all(r["grammar_mask_blocking"] is False for r in full)
    if hidden:  # a 12 ms forward covers 0.27 ms of masks
        assert all(r["grammar_mask_exposed_ms"] == 0.0 for r in full)
    else:  # an instant forward covers nothing of 7.5 ms of masks: the step waits them out
        # exposed = 7.5 ms less the forward's own (tiny) time; the step lasts at least 7.5 ms
        assert all(0.0 < r["grammar_mask_exposed_ms"] <= 7.5 for r in full)
        assert all((r["end"] - r["start"]) * 1e3 >= 7.5 - 1e-6 for r in full)
