"""Speculative decoding in the reference engine: identity with plain greedy decoding, the
counters against what the steps did, KV slots of rejected drafts given back, the exposition."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from reference_engine import metrics_spec
from reference_engine.block_pool import BlockPool, InvariantError, KVCacheManager
from reference_engine.config import ConfigError, EngineConfig
from reference_engine.engine import Engine
from reference_engine.request import SamplingParams, Sequence
from reference_engine.scheduler import Scheduler
from reference_engine.spec_decode import SpecDecoder, SpeculativeConfig, earliest_match

BS = 4


def run_engine(config: EngineConfig, prompts: list[bytes], max_tokens: int,
               ignore_eos: bool = True) -> tuple[dict[int, list[int]], list[dict], Engine]:
    engine = Engine(config)
    outs: dict[int, list[int]] = {}
    for i, prompt in enumerate(prompts):
        outs[i] = []
        engine.add_request(f"r{i}", list(prompt), SamplingParams(
            max_tokens=max_tokens, temperature=0.0, ignore_eos=ignore_eos),
            lambda o, i=i: outs[i].extend(o.new_token_ids))
    steps = []
    while True:
        record = engine.step()
        engine.check_invariants()  # between steps: a leaked draft slot fails here
        if record is not None:
            steps.append(record)
        if not engine.scheduler.has_work():
            return outs, steps, engine


def repetitive(i: int, repeats: int) -> bytes:
    return (f"item {i}: copy this line; " * repeats).encode()


def sim_config(**kw) -> EngineConfig:
    return EngineConfig(executor="sim", step_overhead_ms=0.0, num_gpu_blocks=300,
                        max_model_len=1024, block_size=4, **kw)


@pytest.mark.parametrize("k,lo,hi,copy", [(3, 2, 3, 0.7), (5, 1, 4, 0.9)])
def test_sim_greedy_output_is_the_same_with_and_without_speculation(k, lo, hi, copy) -> None:
    prompts = [repetitive(i, 4 + i) for i in range(5)]
    spec = {"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_min": lo,
            "prompt_lookup_max": hi}
    plain, plain_steps, _ = run_engine(sim_config(sim_copy_probability=copy), prompts, 70)
    fast, fast_steps, engine = run_engine(
        sim_config(sim_copy_probability=copy, speculative_config=spec), prompts, 70)
    assert fast == plain
    c = engine.spec_counters()
    assert c is not None and c.num_accepted_tokens > 0  # speculation did something
    # ... and saved sequence-steps
    assert sum(s["decode_seqs"] for s in fast_steps) < sum(s["decode_seqs"] for s in plain_steps)
    assert len(c.accepted_per_pos) == k


def test_torch_greedy_output_is_the_same_with_and_without_speculation() -> None:
    prompts = [f"ab{i}cd ".encode() * (3 + i) for i in range(3)]
    base = dict(executor="torch", device="cpu", num_gpu_blocks=120, max_model_len=256,
                block_size=8, seed=11)
    spec = {"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 1,
            "prompt_lookup_max": 2}
    plain, _, _ = run_engine(EngineConfig(**base), prompts, 30)
    fast, _, engine = run_engine(EngineConfig(**base, speculative_config=spec), prompts, 30)
    assert fast == plain
    c = engine.spec_counters()
    assert c is not None and c.num_draft_tokens > 0 and c.num_accepted_tokens > 0


@pytest.mark.parametrize("ignore_eos", [True, False])
def test_counters_agree_with_the_tokens_the_steps_produced(ignore_eos: bool) -> None:
    # Every sequence gets its first token from prefill; each later step of a sequence gives
    # one token plus the drafts it accepted. So output tokens = sequences + decode
    # sequence-steps + accepted drafts, except where EOS cut a step's tokens short.
    spec = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3,
            "prompt_lookup_min": 3}
    prompts = [repetitive(i, 3) for i in range(7)]
    outs, steps, engine = run_engine(
        sim_config(sim_copy_probability=0.8, speculative_config=spec, sim_output_median=40,
                   sim_output_sigma=0.5), prompts, 90, ignore_eos=ignore_eos)
    c = engine.spec_counters()
    produced = sum(len(v) for v in outs.values())
    decode_seq_steps = sum(s["decode_seqs"] for s in steps)
    assert sum(s["spec_draft_tokens"] for s in steps) == c.num_draft_tokens
    assert sum(s["spec_accepted_tokens"] for s in steps) == c.num_accepted_tokens
    assert c.num_accepted_tokens > 0
    if ignore_eos:
        assert produced == len(prompts) + decode_seq_steps + c.num_accepted_tokens
    else:
        # EOS inside an accepted run drops the tokens after it: never more than counted.
        assert all(v[-1] == 257 for v in outs.values())
        assert produced <= len(prompts) + decode_seq_steps + c.num_accepted_tokens
    assert engine.stats().generation_tokens_total == produced


def test_rejected_draft_slots_not_given_back_fail_the_invariants(monkeypatch) -> None:
    monkeypatch.setattr(KVCacheManager, "release_tail", lambda self, seq, n: None)
    spec = {"method": "ngram", "num_speculative_tokens": 6, "prompt_lookup_min": 1,
            "prompt_lookup_max": 2}
    with pytest.raises(InvariantError, match="leaked slots"):
        run_engine(sim_config(sim_copy_probability=0.5, speculative_config=spec),
                   [repetitive(i, 3) for i in range(4)], 60)


def test_drafter_proposes_what_followed_the_earliest_longest_match() -> None:
    text = "".join(map(chr, [1, 2, 3, 9, 1, 2, 3, 7, 8, 5, 2, 3]))
    # suffix (2, 3) first occurred at index 1: the tokens after it are 9, 1, 2.
    assert [ord(c) for c in earliest_match(text, 2, 3, 3)] == [9, 1, 2]
    # with a 3-token minimum, (5, 2, 3) never occurred before: no draft
    assert earliest_match(text, 3, 3, 3) == ""
    # a match near the end proposes only the tokens there are
    assert [ord(c) for c in earliest_match(chr(4) + chr(6) + chr(4), 1, 1, 5)] == [6, 4]


@pytest.mark.parametrize("value,message", [
    ('{"method": "eagle", "num_speculative_tokens": 2}', "method must be one of"),
    ('{"method": "ngram"}', "num_speculative_tokens must be a positive integer"),
    ('{"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 4, '
     '"prompt_lookup_max": 2}', "prompt_lookup_min (4) > prompt_lookup_max (2)"),
    ('{"method": "ngram", "num_speculative_tokens": 2, "lookahead": 1}', "unknown key 'lookahead'"),
    ("[3]", "must be a JSON object"),
    ("{oops", "is not JSON"),
])
def test_bad_speculative_config_is_refused_naming_the_field(value: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        sim_config(speculative_config=value)
    assert message in str(info.value)


def test_lookup_bounds_default_as_vllm_does() -> None:
    assert SpeculativeConfig.parse({"method": "ngram", "num_speculative_tokens": 2}) \
        .prompt_lookup_min == 5
    one = SpeculativeConfig.parse({"method": "ngram", "num_speculative_tokens": 2,
                                   "prompt_lookup_max": 7})
    assert (one.prompt_lookup_min, one.prompt_lookup_max) == (7, 7)


def test_exposition_has_vllm_names_and_restarts_from_zero_with_the_engine() -> None:
    spec = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2,
            "prompt_lookup_max": 2}
    config = sim_config(sim_copy_probability=0.85, speculative_config=spec)
    _, _, engine = run_engine(config, [repetitive(1, 5)], 50)
    c = engine.spec_counters()
    text = metrics_spec.render(c, "m")
    assert f'vllm:spec_decode_num_drafts_total{{model_name="m"}} {c.num_drafts}\n' in text
    assert f'vllm:spec_decode_num_accepted_tokens_total{{model_name="m"}} {c.num_accepted_tokens}' in text
    for pos, n in enumerate(c.accepted_per_pos):
        assert (f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{model_name="m",'
                f'position="{pos}"}} {n}') in text
    assert c.num_accepted_tokens > 0
    assert Engine(config).spec_counters().num_accepted_tokens == 0  # a new process starts at 0
    assert metrics_spec.render(None, "m") == ""


def test_sim_prices_verification_as_a_chunk_and_a_draft_model_per_position() -> None:
    from reference_engine.executor import SeqWork, StepBatch
    from reference_engine.sim_executor import SimExecutor

    params = SamplingParams(temperature=0.0)
    table = list(range(40))

    def batch(drafts: int) -> StepBatch:
        return StepBatch(1, [SeqWork(i, [5] * (1 + drafts), 120, table, True, params, 10,
                                     None, drafts) for i in range(24)])

    ngram = SimExecutor(sim_config(speculative_config={
        "method": "ngram", "num_speculative_tokens": 4}))
    plain, verify = ngram.predict(batch(0)), ngram.predict(batch(4))
    assert verify > plain  # k+1 tokens per sequence cost more than one
    drafted = SimExecutor(sim_config(speculative_config={
        "method": "draft_model", "num_speculative_tokens": 4, "sim_draft_ms": 0.35}))
    assert drafted.predict(batch(4)) == pytest.approx(verify + 4 * 0.35e-3, rel=1e-9)
    assert drafted.predict(batch(0)) == pytest.approx(plain, rel=1e-9)


class SpecPoolMachine(RuleBasedStateMachine):
    """Random traffic with drafts through the real scheduler on a pool small enough to run
    dry; verification accepts a random prefix of each draft."""

    @initialize(chunked=st.booleans(), num_blocks=st.integers(5, 14),
                budget=st.sampled_from([4, 8, 32]), caching=st.booleans(), k=st.integers(1, 5))
    def setup(self, chunked: bool, num_blocks: int, budget: int, caching: bool, k: int) -> None:
        self.pool = BlockPool(num_blocks, BS, enable_caching=caching)
        self.sched = Scheduler(self.pool, max_num_seqs=4,
                               max_num_batched_tokens=budget if chunked else 64,
                               max_model_len=64, enable_chunked_prefill=chunked,
                               eos_token_id=257, spec=SpecDecoder(SpeculativeConfig("ngram", k, 1, 3, 0.0)))
        self.live: list[Sequence] = []
        self.next_id = 0
        self.step_id = 0

    @rule(prefix=st.sampled_from([[7] * 8, [1, 2, 3] * 4, [5, 6]]),
          suffix=st.lists(st.integers(0, 3), max_size=9), max_tokens=st.integers(1, 20))
    def add_request(self, prefix: list[int], suffix: list[int], max_tokens: int) -> None:
        s = Sequence(self.next_id, f"r{self.next_id}", prefix + suffix,
                     SamplingParams(max_tokens=max_tokens, temperature=0.0), lambda o: None, 0.0)
        self.next_id += 1
        try:
            self.sched.add(s)
        except ValueError:
            return
        self.live.append(s)

    @rule(tokens=st.lists(st.sampled_from([1, 2, 3, 7, 257]), min_size=1, max_size=8),
          accept=st.integers(0, 6))
    def step(self, tokens: list[int], accept: int) -> None:
        self.step_id += 1
        out = self.sched.schedule(self.step_id)
        assert sum(n for _, n in out.scheduled) <= self.sched.token_budget
        for w in out.batch.seqs:
            assert len(w.block_table) * BS >= w.start_pos + len(w.token_ids)
        sampled: dict[int, object] = {}
        for i, w in enumerate(out.batch.seqs):
            if not w.sample:
                continue
            if w.num_draft_tokens:
                drafts = w.token_ids[1:]
                a = min(accept, len(drafts))
                sampled[w.seq_id] = drafts[:a] + [tokens[(i + j) % len(tokens)]
                                                  for j in range(len(drafts) + 1 - a)]
                event("draft verified, some rejected" if a < len(drafts) else "all accepted")
            else:
                sampled[w.seq_id] = tokens[i % len(tokens)]
        self.sched.update(out, sampled, 0.0)
        if out.preempted:
            event("preemption")
        self.live = [s for s in self.live if not s.is_finished]

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def abort(self, data: st.DataObject) -> None:
        s = data.draw(st.sampled_from(self.live))
        assert self.sched.abort(s)
        self.live.remove(s)

    @invariant()
    def consistent(self) -> None:
        if hasattr(self, "sched"):
            self.sched.check_invariants()

    def teardown(self) -> None:
        if not hasattr(self, "sched"):
            return
        for s in list(self.live):
            assert self.sched.abort(s)
        self.sched.check_invariants()
        assert self.pool.num_used_blocks == 0


TestSpecPoolMachine = SpecPoolMachine.TestCase
TestSpecPoolMachine.settings = settings(max_examples=80, stateful_step_count=40, deadline=None,
                                        suppress_health_check=[HealthCheck.too_slow])
