"""Engine: the threaded step loop, add/abort from other threads, outputs, step log, stats."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable

import pytest

from reference_engine.config import EngineConfig
from reference_engine.engine import AdmissionError, DuplicateRequestError, Engine
from reference_engine.request import RequestOutput, SamplingParams

STEP_RECORD_FIELDS = {"step_id", "start", "end", "prefill_tokens", "decode_seqs", "num_running",
                      "num_waiting", "preemptions", "kv_blocks_used", "kv_blocks_total", "fault"}


class Collector:
    def __init__(self) -> None:
        self.outputs: list[RequestOutput] = []
        self.done = threading.Event()

    def __call__(self, out: RequestOutput) -> None:
        self.outputs.append(out)
        if out.finished:
            self.done.set()

    @property
    def tokens(self) -> list[int]:
        return [t for o in self.outputs for t in o.new_token_ids]


def engine(fake_executor: type, **cfg: object) -> Engine:
    ex_args = {k: cfg.pop(k) for k in ("num_blocks", "step_s", "next_token") if k in cfg}
    config = EngineConfig(executor="sim", block_size=4, max_num_seqs=8,
                          max_num_batched_tokens=32, max_model_len=128, **cfg)  # type: ignore[arg-type]
    return Engine(config, executor=fake_executor(block_size=4, **ex_args))


def drain(eng: Engine, limit: int = 10_000) -> None:
    for _ in range(limit):
        if eng.step() is None and not eng.scheduler.has_work():
            return
        eng.check_invariants()
    raise AssertionError("engine did not drain")


def wait_for(cond: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.002)


def test_threaded_loop_serves_requests_to_completion(fake_executor: type) -> None:
    eng = engine(fake_executor)
    eng.start()
    try:
        collectors = [Collector() for _ in range(5)]
        for i, c in enumerate(collectors):
            eng.add_request(f"req-{i}", list(range(1, 10 + i)), SamplingParams(max_tokens=6), c)
        for c in collectors:
            assert c.done.wait(10)
        for c in collectors:
            assert len(c.tokens) == 6 and all(97 <= t < 123 for t in c.tokens)
            last = c.outputs[-1]
            assert last.finish_reason == "length" and sum(o.finished for o in c.outputs) == 1
            assert last.first_token_time is not None
            assert last.arrival_time <= last.first_scheduled_time <= last.first_token_time
        wait_for(lambda: eng.stats().num_running == 0)
        st = eng.stats()
        assert st.generation_tokens_total == 30 and st.prompt_tokens_total == sum(range(9, 14))
        assert st.num_requests_finished == 5 and st.kv_blocks_used == 0
    finally:
        eng.stop()


def test_eos_finishes_with_stop_unless_ignore_eos(fake_executor: type) -> None:
    eos_at_3 = lambda seq_id, pos: 257 if pos == 12 else 65  # noqa: E731
    eng = engine(fake_executor, next_token=eos_at_3)
    stop, keep = Collector(), Collector()
    eng.add_request("a", list(range(10)), SamplingParams(max_tokens=8), stop)
    eng.add_request("b", list(range(10)), SamplingParams(max_tokens=8, ignore_eos=True), keep)
    drain(eng)
    assert stop.tokens == [65, 65, 257] and stop.outputs[-1].finish_reason == "stop"
    assert len(keep.tokens) == 8 and keep.outputs[-1].finish_reason == "length"


def test_admission_error_at_add(fake_executor: type) -> None:
    eng = engine(fake_executor)
    with pytest.raises(AdmissionError, match="max_model_len"):
        eng.add_request("x", list(range(100)), SamplingParams(max_tokens=100), Collector())
    assert eng.stats().num_waiting == 0


def test_live_id_cannot_be_reused_but_a_finished_one_can_without_stale_output(
        fake_executor: type) -> None:
    eng = engine(fake_executor, next_token=lambda seq_id, pos: seq_id)
    old = Collector()
    eng.add_request("same", [1, 2, 3], SamplingParams(max_tokens=3), old)
    with pytest.raises(DuplicateRequestError, match="'same'"):
        eng.add_request("same", [1, 2, 3], SamplingParams(max_tokens=3), Collector())
    eng.step()
    eng.abort_request("same")  # the id is free again at once
    new = Collector()
    eng.add_request("same", [4, 5, 6], SamplingParams(max_tokens=3), new)
    drain(eng)
    assert old.outputs[-1].finish_reason == "abort" and len(old.tokens) == 1
    assert len(set(old.tokens)) == 1 and len(set(new.tokens)) == 1
    assert old.tokens[0] != new.tokens[0]  # tokens carry their sequence's id: none crossed over
    assert len(new.tokens) == 3 and new.outputs[-1].finish_reason == "length"
    newest = Collector()
    eng.add_request("same", [7], SamplingParams(max_tokens=1), newest)  # finished: reusable
    drain(eng)
    assert newest.outputs[-1].finished and len(new.outputs) == 3


def test_random_aborts_from_another_thread_return_every_block(fake_executor: type) -> None:
    eng = engine(fake_executor, num_blocks=40, step_s=0.0005)
    eng.start()
    rng = random.Random(7)
    collectors = {}
    try:
        for i in range(100):
            c = Collector()
            collectors[f"r{i}"] = c
            eng.add_request(f"r{i}", [rng.randrange(50) for _ in range(rng.randrange(1, 30))],
                            SamplingParams(max_tokens=rng.randrange(1, 40)), c)
            if rng.random() < 0.8:
                time.sleep(rng.random() * 0.003)
                eng.abort_request(f"r{i}")
                eng.abort_request(f"r{i}")  # idempotent
        for c in collectors.values():
            assert c.done.wait(20)
        wait_for(lambda: eng.stats().num_running + eng.stats().num_waiting == 0)
    finally:
        eng.stop()
    eng.check_invariants()
    assert eng.pool.num_used_blocks == 0
    for c in collectors.values():
        assert sum(o.finished for o in c.outputs) == 1  # exactly one final output each


def test_step_log_records_and_ring_buffer(fake_executor: type) -> None:
    eng = engine(fake_executor, step_log_size=5)
    eng.add_request("a", list(range(40)), SamplingParams(max_tokens=10), Collector())
    drain(eng)
    records = eng.steps_since(0)
    assert len(records) == 5  # bounded: only the newest survive
    assert [r["step_id"] for r in records] == list(range(eng.stats().num_steps - 4,
                                                           eng.stats().num_steps + 1))
    assert set(records[0]) >= STEP_RECORD_FIELDS
    assert all(r["start"] <= r["end"] for r in records)
    last_id = records[-1]["step_id"]
    assert eng.steps_since(last_id) == []
    assert [r["step_id"] for r in eng.steps_since(last_id - 2)] == [last_id - 1, last_id]


@pytest.mark.parametrize(("prompt", "max_tokens"), [(5, 3), (40, 9)])
def test_every_output_finds_its_step_already_in_the_log(fake_executor: type, prompt: int,
                                                        max_tokens: int) -> None:
    """A client that has seen tokens (here, at the moment they are handed over) finds the step
    that made them in the step log: the log is never behind what clients see (round R49: a
    profile test read the log right after a response and missed the step that ended it)."""
    eng = engine(fake_executor)
    running = [0]  # id of the step being run
    seen: list[tuple[int, bool]] = []  # per output: its tokens, whether its step was logged

    def check(out: RequestOutput) -> None:
        logged = eng.steps_since(running[0] - 1)
        seen.append((len(out.new_token_ids), [r["step_id"] for r in logged] == [running[0]]))

    eng.add_request("a", list(range(prompt)), SamplingParams(max_tokens=max_tokens, ignore_eos=True),
                    check)
    while True:
        running[0] = eng.stats().num_steps + 1
        if eng.step() is None:
            break
    assert sum(n for n, _ in seen) == max_tokens
    assert all(ok for _, ok in seen), seen


def test_step_record_describes_the_step(fake_executor: type) -> None:
    eng = engine(fake_executor)
    eng.add_request("a", list(range(3)), SamplingParams(max_tokens=5), Collector())
    eng.step()
    eng.add_request("b", list(range(50)), SamplingParams(max_tokens=5), Collector())
    rec = eng.step()
    assert rec is not None
    assert rec["decode_seqs"] == 1 and rec["prefill_tokens"] == 31  # budget 32 - 1 decode
    assert rec["num_running"] == 2 and rec["num_waiting"] == 0 and rec["preemptions"] == 0
    assert rec["kv_blocks_used"] == eng.pool.num_used_blocks and rec["fault"] is None


def test_failing_callback_cancels_only_its_request(fake_executor: type) -> None:
    eng = engine(fake_executor)

    def broken(out: RequestOutput) -> None:
        raise RuntimeError("consumer went away")

    ok = Collector()
    eng.add_request("bad", [1, 2], SamplingParams(max_tokens=5), broken)
    eng.add_request("good", [1, 2], SamplingParams(max_tokens=5), ok)
    drain(eng)
    assert ok.outputs[-1].finish_reason == "length"
    assert eng.pool.num_used_blocks == 0


def test_memory_report_has_the_components(fake_executor: type) -> None:
    report = engine(fake_executor).memory_report()
    assert {"weights", "kv_pool", "other", "retained", "total"} <= set(report)
    assert report["total"] == report["weights"] + report["kv_pool"] + report["other"]
