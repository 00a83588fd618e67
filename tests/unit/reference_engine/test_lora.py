"""LoRA adapters in the engine: flags checked as vLLM checks them, the slot rule (a batch holds
at most max_loras distinct adapters; the others wait, skipped not blocking), the sim's price
(grows with distinct adapters and rank), and the step log's fields; a stateful test drives
random adapter traffic through the real scheduler."""

from __future__ import annotations

import json
from pathlib import Path

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from reference_engine.block_pool import BlockPool, InvariantError
from reference_engine.config import ConfigError, EngineConfig
from reference_engine.engine import Engine
from reference_engine.executor import SeqWork, StepBatch
from reference_engine.fair_share import fair_share_for
from reference_engine.lora import (
    LoraConfigError,
    LoraModules,
    batch_adapters,
    check_slots,
    metric_lines,
)
from reference_engine.request import SamplingParams, Sequence
from reference_engine.scheduler import Scheduler
from reference_engine.sim_executor import SimExecutor

BS = 4


def adapter_dir(root: Path, name: str, rank: int) -> str:
    d = root / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "adapter_config.json").write_text(json.dumps({"r": rank, "lora_alpha": 2 * rank,
                                                       "target_modules": ["q_proj", "v_proj"]}))
    return f"{name}={d}"


@pytest.mark.parametrize(("given", "names"), [
    ({"max_loras": 0, "enable_lora": True}, "max_loras must be a positive integer"),
    ({"max_lora_rank": -8, "enable_lora": True}, "max_lora_rank"),
    ({"lora_modules": ["a=/x"]}, "needs enable_lora"),
    ({"enable_lora": True, "executor": "torch"}, "sim executor only"),
    ({"sim_lora_launch_us": -1.0}, "sim_lora_launch_us"),
])
def test_bad_lora_settings_name_the_setting(given: dict[str, object], names: str) -> None:
    with pytest.raises(ConfigError, match=names):
        EngineConfig(**given)  # type: ignore[arg-type]


def test_defaults_are_vllms() -> None:
    c = EngineConfig()
    assert (c.enable_lora, c.max_loras, c.max_lora_rank, c.lora_modules) == (False, 1, 16, [])


def test_modules_read_their_rank_and_refuse_what_vllm_refuses(tmp_path: Path) -> None:
    mods = LoraModules.parse([adapter_dir(tmp_path, "sql", 8), adapter_dir(tmp_path, "chat", 16)],
                             2, 16, "base")
    assert [(a.name, a.rank, a.lora_id) for a in mods.adapters.values()] == [("sql", 8, 1), ("chat", 16, 2)]
    with pytest.raises(LoraConfigError, match="LoRA rank 32 is greater than max_lora_rank 16"):
        LoraModules.parse([adapter_dir(tmp_path, "big", 32)], 1, 16, "base")
    with pytest.raises(LoraConfigError, match="is not NAME=PATH"):
        LoraModules.parse(["sql"], 1, 16, "base")
    with pytest.raises(LoraConfigError, match="adapter_config.json cannot be read"):
        LoraModules.parse([f"gone={tmp_path / 'gone'}"], 1, 16, "base")
    with pytest.raises(LoraConfigError, match="already taken"):
        LoraModules.parse([adapter_dir(tmp_path, "base", 8)], 1, 16, "base")
    (tmp_path / "norank").mkdir()
    (tmp_path / "norank" / "adapter_config.json").write_text("{}")
    with pytest.raises(LoraConfigError, match="no positive integer rank"):
        LoraModules.parse([f"x={tmp_path / 'norank'}"], 1, 16, "base")


def _sched(max_loras: int | None, max_num_seqs: int = 8) -> Scheduler:
    return Scheduler(BlockPool(256, BS, True), max_num_seqs, 64, 256, True, 257, "fcfs",
                     max_loras=max_loras)


def _seq(i: int, lora: str | None, prompt: int = 6, out: int = 3) -> Sequence:
    return Sequence(i, f"r{i}", list(range(1000 + 10 * i, 1000 + 10 * i + prompt)),
                    SamplingParams(max_tokens=out, ignore_eos=True, lora=lora), lambda o: None, 0.0)


def _step(s: Scheduler, k: int) -> list[Sequence]:
    out = s.schedule(k)
    s.check_invariants()
    s.update(out, {w.seq_id: 1 for w in out.batch.seqs if w.sample}, 0.0)
    s.check_invariants()
    return [q for q, _ in out.scheduled]


@pytest.mark.parametrize("max_loras", [1, 2, 3])
def test_a_batch_holds_max_loras_adapters_and_the_others_wait_in_order(max_loras: int) -> None:
    s = _sched(max_loras)
    names = ["a", "b", "c", "d"]
    seqs = [_seq(i, names[i % 4]) for i in range(8)] + [_seq(8, None)]
    s.enqueue(seqs)
    first = _step(s, 1)
    assert batch_adapters(first) == set(names[:max_loras])
    assert seqs[8] in first  # the base model takes no slot: never held back by the rule
    waiting = [q.seq_id for q in s.waiting]
    assert waiting == sorted(waiting)  # skipped, not reordered
    assert all(q.params.lora not in names[:max_loras] for q in s.waiting)
    done: list[set[str]] = []
    for k in range(2, 60):
        batch = _step(s, k)
        assert len(batch_adapters(s.running)) <= max_loras
        done.append(batch_adapters(batch))
        if not s.has_work():
            break
    assert not s.has_work()  # every adapter got its turn
    assert set().union(*done) | set(names[:max_loras]) == set(names)


def test_without_lora_the_rule_is_off() -> None:
    s = _sched(None)
    s.enqueue([_seq(i, "abcd"[i % 4]) for i in range(8)])
    assert len(batch_adapters(_step(s, 1))) == 4


def test_invariant_catches_a_batch_over_the_limit() -> None:
    running = [_seq(0, "a"), _seq(1, "b"), _seq(2, None), _seq(3, "a")]
    check_slots(running, 2)
    with pytest.raises(InvariantError, match="max_loras 1"):
        check_slots(running, 1)


def _work(i: int, tokens: int, lora: str | None) -> SeqWork:
    return SeqWork(i, [65] * tokens, 100, [], True, SamplingParams(lora=lora), 5)


@pytest.mark.parametrize("launch_us", [0.0, 3.0, 10.0])
def test_sim_price_grows_with_distinct_adapters_and_rank(tmp_path: Path, launch_us: float) -> None:
    mods = [adapter_dir(tmp_path, f"l{i}", 8) for i in range(8)] + [adapter_dir(tmp_path, "wide", 64)]
    ex = SimExecutor(EngineConfig(num_gpu_blocks=100, enable_lora=True, max_loras=8, max_lora_rank=64,
                                  lora_modules=mods, sim_lora_launch_us=launch_us))
    base = ex.predict(StepBatch(1, [_work(i, 1, None) for i in range(16)]))
    one = ex.predict(StepBatch(1, [_work(i, 1, "l0") for i in range(16)]))
    eight = ex.predict(StepBatch(1, [_work(i, 1, f"l{i % 8}") for i in range(16)]))
    wide = ex.predict(StepBatch(1, [_work(i, 1, "wide") for i in range(16)]))
    assert base < one < eight  # same tokens, more adapters: more shrink/expand work
    assert ex.last_parts["lora_adapters"] == 1
    per_adapter = one - base
    assert eight - base == pytest.approx(8 * per_adapter, rel=0.02)  # decode: weights and launches
    assert wide - base > 4 * per_adapter if launch_us == 0.0 else wide - base > per_adapter
    expected_launch = ex.model.num_layers * launch_us * 1e-6
    assert per_adapter > expected_launch


def test_engine_step_log_records_adapters_waiting_and_cost(tmp_path: Path) -> None:
    mods = [adapter_dir(tmp_path, n, 8) for n in "abc"]
    eng = Engine(EngineConfig(enable_lora=True, max_loras=1, lora_modules=mods, num_gpu_blocks=400,
                              step_overhead_ms=0.0))
    for i, lora in enumerate(["a", "b", "c", "a", None]):
        eng.add_request(f"r{i}", list(range(10 + i, 30 + i)),
                        SamplingParams(max_tokens=4, ignore_eos=True, lora=lora), lambda o: None)
    first = eng.step()
    assert first is not None
    assert (first["lora_adapters"], first["lora_waiting"], first["max_loras"]) == (1, 2, 1)
    assert first["lora_ms"] > 0
    text = metric_lines(tuple(eng.scheduler.running), tuple(eng.scheduler.waiting), 1, 5.0)
    assert 'max_lora="1",running_lora_adapters="a",waiting_lora_adapters="b,c"} 5.0' in text
    records = [first]
    while (r := eng.step()) is not None:
        records.append(r)
        eng.check_invariants()
    assert {r["lora_adapters"] for r in records} == {1}
    assert records[-1]["lora_waiting"] == 0


class LoraMachine(RuleBasedStateMachine):
    """Random adapter traffic through the real scheduler: the slot rule holds after every step
    and aborts, and every request is served once the traffic stops (no adapter starves)."""

    @initialize(max_loras=st.integers(1, 3), adapters=st.integers(1, 5),
                policy=st.sampled_from(["fcfs", "priority", "fair"]), seqs=st.integers(2, 6))
    def setup(self, max_loras: int, adapters: int, policy: str, seqs: int) -> None:
        fair = fair_share_for(EngineConfig(scheduling_policy="fair")) if policy == "fair" else None
        self.sched = Scheduler(BlockPool(24, BS, True), seqs, 16, 64, True, 257, policy,
                               fair=fair, max_loras=max_loras)
        self.names = [f"l{i}" for i in range(adapters)] + [None]
        self.live: list[Sequence] = []
        self.next_id = 0
        self.k = 0

    @rule(data=st.data(), prompt=st.integers(1, 20), out=st.integers(1, 6))
    def add(self, data: st.DataObject, prompt: int, out: int) -> None:
        lora = data.draw(st.sampled_from(self.names))
        seq = Sequence(self.next_id, f"r{self.next_id}", list(range(prompt)),
                       SamplingParams(max_tokens=out, ignore_eos=True, lora=lora,
                                      priority=data.draw(st.integers(0, 2)),
                                      tenant=data.draw(st.sampled_from(["t1", "t2", None]))),
                       lambda o: None, 0.0)
        self.next_id += 1
        self.sched.enqueue([seq])
        self.live.append(seq)

    @rule()
    def step(self) -> None:
        self.k += 1
        out = self.sched.schedule(self.k)
        assert len(batch_adapters(q for q, _ in out.scheduled)) <= self.sched.max_loras  # type: ignore[operator]
        self.sched.update(out, {w.seq_id: 1 for w in out.batch.seqs if w.sample}, 0.0)
        self.live = [s for s in self.live if not s.is_finished]

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def abort(self, data: st.DataObject) -> None:
        s = data.draw(st.sampled_from(self.live))
        assert self.sched.abort(s)
        self.live.remove(s)

    @invariant()
    def slots(self) -> None:
        if hasattr(self, "sched"):
            self.sched.check_invariants()

    def teardown(self) -> None:
        if not hasattr(self, "sched"):
            return
        for _ in range(2000):
            if not self.sched.has_work():
                break
            self.step()
        assert not self.sched.has_work(), "a request was never served"


LoraMachine.TestCase.settings = settings(max_examples=80, stateful_step_count=40, deadline=None,
                                         suppress_health_check=[HealthCheck.too_slow])
TestLoraMachine = LoraMachine.TestCase
