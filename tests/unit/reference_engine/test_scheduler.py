"""Scheduler: token budget, max_num_seqs, chunked prefill, preemption, admission, prefix
cache accounting and stop conditions."""

from __future__ import annotations

import pytest

from reference_engine.block_pool import BlockPool
from reference_engine.request import SamplingParams, Sequence, SequenceStatus
from reference_engine.scheduler import AdmissionError, Scheduler, SchedulerOutput

BS = 4
EOS = 257


def make(num_blocks: int = 64, max_num_seqs: int = 8, budget: int = 16, max_model_len: int = 256,
         chunked: bool = True, caching: bool = True) -> Scheduler:
    return Scheduler(BlockPool(num_blocks, BS, caching), max_num_seqs, budget, max_model_len,
                     chunked, EOS)


def add(s: Scheduler, seq_id: int, prompt: list[int] | int, max_tokens: int = 4,
        ignore_eos: bool = False) -> Sequence:
    tokens = list(range(100, 100 + prompt)) if isinstance(prompt, int) else prompt
    seq = Sequence(seq_id, f"r{seq_id}", tokens,
                   SamplingParams(max_tokens=max_tokens, ignore_eos=ignore_eos), lambda o: None, 0.0)
    s.add(seq)
    return seq


def step(s: Scheduler, step_id: int = 0, token: int = 1) -> SchedulerOutput:
    out = s.schedule(step_id)
    s.check_invariants()
    s.update(out, {w.seq_id: token for w in out.batch.seqs if w.sample}, 0.0)
    s.check_invariants()
    return out


def run_to_completion(s: Scheduler, limit: int = 1000) -> int:
    steps = 0
    while s.has_work():
        steps += 1
        assert steps < limit, "scheduler made no progress"
        step(s, steps)
    return steps


def test_budget_and_max_num_seqs_are_respected() -> None:
    s = make(max_num_seqs=3, budget=10)
    for i in range(6):
        add(s, i, 7)
    for k in range(30):
        out = s.schedule(k)
        assert sum(n for _, n in out.scheduled) <= 10
        assert len(s.running) <= 3
        s.update(out, {w.seq_id: 1 for w in out.batch.seqs if w.sample}, 0.0)


def test_chunked_prefill_mixes_with_decodes_decodes_first() -> None:
    s = make(budget=16)
    short = add(s, 0, 3, max_tokens=10)
    step(s)  # short prefills and samples its first token
    long = add(s, 1, 40)
    out = step(s)
    # The decode is scheduled first; the long prompt gets the rest of the budget as a chunk.
    assert out.batch.seqs[0].seq_id == short.seq_id and out.batch.seqs[0].is_decode
    assert out.scheduled[1] == (long, 15)
    assert out.num_decode_seqs == 1 and out.num_prefill_tokens == 15
    assert not out.batch.seqs[1].sample  # mid-prompt chunk: nothing sampled
    step(s)
    out = step(s)
    assert long.num_computed_tokens == 40 and out.batch.seqs[-1].sample
    assert long.num_output_tokens == 1


def test_no_chunking_when_disabled() -> None:
    s = make(budget=64, chunked=False, max_model_len=64)
    add(s, 0, 3, max_tokens=30)
    step(s)
    big = add(s, 1, 62, max_tokens=2)
    out = step(s)
    # 1 decode + 62 prompt tokens <= 64: the whole prompt runs in one step, unsplit.
    assert (big, 62) in out.scheduled
    with pytest.raises(AdmissionError, match="chunked prefill is disabled"):
        make(budget=16, chunked=False, max_model_len=64).check_admissible(20, 1)


def test_unchunked_prompt_waits_for_a_step_with_room() -> None:
    s = make(budget=10, chunked=False, max_model_len=10, max_num_seqs=8)
    for i in range(3):
        add(s, i, 3, max_tokens=5)
    step(s)  # three 3-token prompts: 9 of 10
    big = add(s, 9, 8, max_tokens=1)
    out = step(s)  # 3 decodes leave 7 < 8: the prompt waits rather than being split
    assert all(seq is not big for seq, _ in out.scheduled)
    run_to_completion(s)
    assert big.finish_reason == "length"


def test_preemption_by_recompute_newest_first_and_output_survives() -> None:
    # 6 blocks of 4: three sequences with 4-token prompts start with one block each and
    # grow until the pool is dry.
    s = make(num_blocks=6, budget=16, max_num_seqs=3)
    seqs = [add(s, i, [10 + i] * 4, max_tokens=12) for i in range(3)]
    preempted: list[Sequence] = []
    for k in range(1, 40):
        out = step(s, k, token=k)
        preempted += out.preempted
        if preempted:
            break
    assert preempted[0] is seqs[2]  # the newest is the victim
    assert s.waiting[0] is seqs[2] and seqs[2].status is SequenceStatus.WAITING
    assert seqs[2].block_table == [] and seqs[2].num_computed_tokens == 0
    generated = seqs[2].output_token_ids
    assert generated  # it had output, which is recomputed along with the prompt
    assert s.num_preemptions == 1
    run_to_completion(s)
    assert seqs[2].output_token_ids[:len(generated)] == generated
    assert all(q.num_output_tokens == 12 for q in seqs)
    assert s.pool.num_used_blocks == 0


def test_preempting_a_sequence_with_a_prefix_hit_keeps_refcounts_right() -> None:
    s = make(num_blocks=7, budget=32, max_num_seqs=4)
    prefix = [5] * 8
    first = add(s, 0, prefix + [1], max_tokens=1)
    run_to_completion(s)
    assert first.finish_reason == "length"
    a = add(s, 1, prefix + [2], max_tokens=12)
    b = add(s, 2, prefix + [3], max_tokens=12)
    for k in range(1, 60):
        out = step(s, k)
        if b in out.preempted:
            break
    else:
        pytest.fail("expected a preemption")
    assert b.num_cached_tokens == 8 and a.num_cached_tokens == 8
    run_to_completion(s)
    assert a.num_output_tokens == b.num_output_tokens == 12
    assert s.pool.num_used_blocks == 0


def test_admission_fails_fast_naming_the_numbers() -> None:
    s = make(num_blocks=4, max_model_len=32)
    with pytest.raises(AdmissionError, match=r"30 tokens\) \+ max_tokens \(5\) = 35 exceeds max_model_len \(32\)"):
        s.check_admissible(30, 5)
    with pytest.raises(AdmissionError, match="needs 5 KV blocks .* the pool has 4"):
        s.check_admissible(10, 10)
    with pytest.raises(AdmissionError, match="at least one token"):
        s.check_admissible(0, 1)
    s.check_admissible(10, 6)  # 16 tokens = 4 blocks: fits exactly


def test_kv_reserved_at_admission_and_refunded_at_completion() -> None:
    s = make(num_blocks=16, budget=4)
    seq = add(s, 0, 10, max_tokens=3)
    step(s)  # only a 4-token chunk computed, but the whole prompt's KV is reserved
    assert len(seq.block_table) == 3 and s.pool.num_used_blocks == 3
    run_to_completion(s)
    assert seq.finish_reason == "length" and s.pool.num_used_blocks == 0


def test_prefix_cache_hits_match_the_arithmetic() -> None:
    s = make(num_blocks=64, budget=64)
    shared = list(range(1, 15))  # 14 tokens: 3 full blocks of 4
    prompts = [shared + [200 + i] * (i + 1) for i in range(5)]
    add(s, 0, prompts[0], max_tokens=2)
    run_to_completion(s)
    for i in range(1, 5):
        add(s, i, prompts[i], max_tokens=2)
    run_to_completion(s)
    assert s.prefix_cache_queries == sum(len(p) for p in prompts)
    assert s.prefix_cache_hits == 4 * 12  # full blocks of the shared prefix only


def test_fully_cached_prompt_recomputes_its_last_block() -> None:
    s = make(num_blocks=32, budget=64)
    prompt = list(range(1, 13))  # exactly 3 blocks
    add(s, 0, prompt, max_tokens=1)
    run_to_completion(s)
    again = add(s, 1, prompt, max_tokens=1)
    out = step(s)
    assert again.num_cached_tokens == 8
    assert out.scheduled == [(again, 4)] and out.batch.seqs[0].sample
    assert again.finish_reason == "length"


def test_eos_stops_unless_ignored() -> None:
    s = make()
    stop = add(s, 0, 3, max_tokens=5)
    keep = add(s, 1, 3, max_tokens=5, ignore_eos=True)
    step(s, token=EOS)
    assert stop.finish_reason == "stop" and stop.output_token_ids == [EOS]
    assert keep.status is SequenceStatus.RUNNING
    run_to_completion(s)
    assert keep.finish_reason == "length" and keep.num_output_tokens == 5
    assert keep.output_token_ids[0] == EOS  # EOS under ignore_eos is an ordinary token


def test_abort_frees_exactly_once() -> None:
    s = make()
    seq = add(s, 0, 9)
    step(s)
    assert s.pool.num_used_blocks == 3
    assert s.abort(seq) and not s.abort(seq)
    assert seq.finish_reason == "abort" and s.pool.num_used_blocks == 0
    s.check_invariants()
