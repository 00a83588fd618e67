from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reference_engine.config import EngineConfig
from reference_engine.executor import Executor, SeqWork, StepBatch
from reference_engine.model import MODEL_PRESETS, PagedKVCache
from reference_engine.request import SamplingParams
from reference_engine.tokenizer import EOS_ID
from reference_engine.torch_executor import TorchExecutor

GREEDY = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)


@dataclass
class _Seq:
    seq_id: int
    tokens: list[int]
    params: SamplingParams
    arrival_step: int
    max_new: int
    preempt_after_outputs: int | None = None  # recompute from scratch once this many exist
    computed: int = 0
    num_prompt: int = 0
    table: list[int] = field(default_factory=list)

    @property
    def outputs(self) -> list[int]:
        return self.tokens[self.num_prompt:]


def drive(executor: TorchExecutor, seqs: list[_Seq], rng: random.Random,
          max_chunk: int) -> dict[int, list[int]]:
    """A minimal scheduler: staggered arrivals, random chunk sizes, shuffled block ids.

    It frees and re-allocates blocks on preemption the way the block pool does, so a
    block a preempted sequence used is soon holding another sequence's K/V.
    """
    free = list(range(executor.num_blocks))
    rng.shuffle(free)
    for s in seqs:
        s.num_prompt = len(s.tokens)
    step = 0
    while any(len(s.outputs) < s.max_new for s in seqs):
        works = []
        for s in seqs:
            if s.arrival_step > step or len(s.outputs) >= s.max_new:
                continue
            remaining = len(s.tokens) - s.computed
            n = 1 if remaining == 1 else rng.randint(1, min(remaining, max_chunk))
            while len(s.table) * executor.block_size < s.computed + n:
                s.table.append(free.pop())
            works.append(SeqWork(s.seq_id, s.tokens[s.computed:s.computed + n], s.computed,
                                 list(s.table), s.computed + n == len(s.tokens), s.params,
                                 len(s.outputs)))
        sampled = executor.execute(StepBatch(step, works))
        for w in works:
            s = next(s for s in seqs if s.seq_id == w.seq_id)
            s.computed += len(w.token_ids)
            assert (s.seq_id in sampled) == w.sample
            if w.sample:
                s.tokens.append(sampled[s.seq_id])
                if len(s.outputs) == s.preempt_after_outputs:
                    free += s.table
                    rng.shuffle(free)
                    s.table, s.computed, s.preempt_after_outputs = [], 0, None
        step += 1
        assert step < 10_000
    return {s.seq_id: s.outputs for s in seqs}


def full_recompute_greedy(executor: TorchExecutor, prompt: list[int], max_new: int) -> list[int]:
    tokens = list(prompt)
    for _ in range(max_new):
        logits = executor.model.forward_full(tokens)[-1]
        tokens.append(int(torch.nonzero(logits == logits.max())[0, 0]))
    return tokens[len(prompt):]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    block_size=st.sampled_from([1, 3, 16]),
    prompt_lens=st.lists(st.integers(1, 40), min_size=1, max_size=5),
    max_chunk=st.integers(1, 24),
    dtype=st.sampled_from([torch.float32, torch.float64]),
    seed=st.integers(0, 2**16),
)
def test_paged_batched_greedy_output_is_identical_to_full_recompute(
    block_size: int, prompt_lens: list[int], max_chunk: int, dtype: torch.dtype, seed: int
) -> None:
    rng = random.Random(seed)
    executor = TorchExecutor(block_size=block_size, num_blocks=512, seed=seed % 7,
                             device="cpu", dtype=dtype)
    seqs = [
        _Seq(i, [rng.randrange(256) for _ in range(n)], GREEDY, arrival_step=rng.randint(0, 6),
             max_new=rng.randint(1, 8))
        for i, n in enumerate(prompt_lens)
    ]
    expected = {s.seq_id: full_recompute_greedy(executor, s.tokens, s.max_new) for s in seqs}
    assert drive(executor, seqs, rng, max_chunk) == expected


def test_long_prompt_over_many_blocks_matches_full_recompute() -> None:
    executor = TorchExecutor(block_size=16, num_blocks=64, device="cpu")
    rng = random.Random(1)
    prompt = [rng.randrange(256) for _ in range(300)]
    short = [rng.randrange(256) for _ in range(5)]
    seqs = [_Seq(0, list(prompt), GREEDY, 0, 12), _Seq(1, list(short), GREEDY, 2, 12)]
    got = drive(executor, seqs, rng, max_chunk=64)
    assert got[0] == full_recompute_greedy(executor, prompt, 12)
    assert got[1] == full_recompute_greedy(executor, short, 12)


def test_seeded_sampling_survives_batching_and_preemption_by_recompute() -> None:
    params = SamplingParams(temperature=0.8, top_p=0.9, seed=1234, max_tokens=12)
    prompt = list(b"The quick brown fox")

    alone = TorchExecutor(block_size=4, num_blocks=64, device="cpu")
    solo = drive(alone, [_Seq(0, list(prompt), params, 0, 12)], random.Random(0), 5)[0]

    crowded = TorchExecutor(block_size=4, num_blocks=64, device="cpu")
    rng = random.Random(9)
    seqs = [_Seq(0, list(prompt), params, 0, 12, preempt_after_outputs=5)] + [
        _Seq(i, [rng.randrange(256) for _ in range(rng.randint(1, 20))],
             SamplingParams(temperature=1.0, max_tokens=12), rng.randint(0, 4), 12)
        for i in range(1, 5)
    ]
    assert drive(crowded, seqs, rng, 7)[0] == solo


def test_same_seed_gives_the_same_model_and_a_different_seed_does_not() -> None:
    a, b, c = (TorchExecutor(num_blocks=4, seed=s, device="cpu") for s in (5, 5, 6))
    ids = list(b"weights")
    assert torch.equal(a.model.forward_full(ids), b.model.forward_full(ids))
    assert not torch.equal(a.model.forward_full(ids), c.model.forward_full(ids))


def test_a_step_with_nothing_to_sample_returns_nothing() -> None:
    executor = TorchExecutor(block_size=4, num_blocks=8, device="cpu")
    work = SeqWork(3, [1, 2, 3], 0, [5], False, GREEDY, 0)
    assert executor.execute(StepBatch(0, [work])) == {}
    assert executor.execute(StepBatch(1, [])) == {}


@pytest.mark.parametrize(
    ("work", "message"),
    [
        (SeqWork(7, [1, 2, 3, 4, 5], 0, [0], True, GREEDY, 0), "seq 7: block_table has 1 blocks"),
        (SeqWork(7, [1], 0, [99], True, GREEDY, 0), r"seq 7: block_table holds a block outside"),
        (SeqWork(7, [EOS_ID + 1], 0, [0], True, GREEDY, 0), "seq 7: token_ids outside"),
        (SeqWork(7, [], 0, [0], True, GREEDY, 0), "seq 7: token_ids must be non-empty"),
    ],
)
def test_malformed_work_is_rejected_naming_the_sequence(work: SeqWork, message: str) -> None:
    executor = TorchExecutor(block_size=4, num_blocks=8, device="cpu")
    with pytest.raises(ValueError, match=message):
        executor.execute(StepBatch(0, [work]))


def test_pool_size_comes_from_the_override_or_the_memory_budget() -> None:
    config = MODEL_PRESETS["tiny-llama"]
    per_block = PagedKVCache.bytes_per_block(config, 16, torch.float32)
    assert per_block == 2 * config.num_layers * 16 * config.num_kv_heads * config.head_dim * 4
    budgeted = TorchExecutor(block_size=16, kv_cache_bytes=10 * per_block + 1, device="cpu")
    assert budgeted.num_blocks == 10
    report = budgeted.memory_report()
    assert report["kv_pool"] == 10 * per_block
    assert report["weights"] == budgeted.model.weight_bytes() > 0
    assert set(report) >= {"weights", "kv_pool", "other"}
    with pytest.raises(ValueError, match="num_blocks must be positive"):
        TorchExecutor(kv_cache_bytes=per_block - 1, device="cpu")


def test_built_from_engine_config_it_satisfies_the_executor_protocol() -> None:
    config = EngineConfig(executor="torch", model="tiny-llama", device="cpu", block_size=8,
                          num_gpu_blocks=32, seed=3)
    executor = TorchExecutor.from_config(config)
    assert isinstance(executor, Executor)
    assert (executor.name, executor.num_blocks, executor.block_size) == ("torch", 32, 8)
    assert executor.eos_token_id == EOS_ID
    with pytest.raises(ValueError, match="model: the torch executor"):
        TorchExecutor.from_config(config.replace(model="meta-llama/Llama-3.1-8B"))


def test_engine_output_with_prefix_hits_and_preemption_matches_full_recompute() -> None:
    # The real scheduler and block pool: a small token budget forces chunked prefill mixed
    # with decodes, a shared prefix makes later prompts read K/V that another sequence
    # wrote, and a pool too small for everyone forces preemption by recompute.
    from reference_engine.engine import Engine
    from reference_engine.request import RequestOutput

    config = EngineConfig(executor="torch", model="tiny-llama", device="cpu", block_size=4,
                          num_gpu_blocks=24, max_num_seqs=6, max_num_batched_tokens=12,
                          max_model_len=64, enable_prefix_caching=True)
    engine = Engine(config)
    rng = random.Random(5)
    prefix = [rng.randrange(256) for _ in range(17)]
    prompts = {f"r{i}": prefix + [rng.randrange(256) for _ in range(rng.randint(1, 9))]
               for i in range(6)}
    outputs: dict[str, list[int]] = {rid: [] for rid in prompts}
    finished: set[str] = set()

    def collect(out: RequestOutput) -> None:
        outputs[out.request_id] += out.new_token_ids
        if out.finished:
            finished.add(out.request_id)

    params = SamplingParams(temperature=0.0, max_tokens=20, ignore_eos=True)
    for rid, prompt in prompts.items():
        engine.add_request(rid, prompt, params, collect)
    for _ in range(2000):
        if len(finished) == len(prompts):
            break
        engine.step()
        engine.check_invariants()
    stats = engine.stats()
    assert stats.prefix_cache_hits > 0 and stats.num_preemptions > 0
    executor = engine.executor
    assert isinstance(executor, TorchExecutor)
    for rid, prompt in prompts.items():
        assert outputs[rid] == full_recompute_greedy(executor, prompt, 20), rid
