"""KV block pool and prefix cache: ref counts, hashing rules, LRU eviction, invariants.

The stateful property test drives the real scheduler (admission, chunked prefill,
decode growth, preemption by recompute, aborts, prefix hits, fully cached prompts) and
checks every pool and ownership invariant after every operation.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from reference_engine import block_pool as bp
from reference_engine.block_pool import BlockPool, InvariantError, KVCacheManager, PoolError
from reference_engine.request import SamplingParams, Sequence
from reference_engine.scheduler import Scheduler

BS = 4


def seq(seq_id: int, tokens: list[int], max_tokens: int = 4) -> Sequence:
    return Sequence(seq_id, f"r{seq_id}", tokens, SamplingParams(max_tokens=max_tokens),
                    lambda out: None, 0.0)


def admit_and_compute(kv: KVCacheManager, s: Sequence) -> None:
    assert kv.try_admit(s)
    kv.mark_computed(s, len(s.token_ids) - s.num_computed_tokens)


def test_allocate_and_free_conserve_the_pool() -> None:
    pool = BlockPool(8, BS)
    a = pool.allocate(3)
    b = pool.allocate(5)
    assert pool.num_free_blocks == 0 and len(set(a + b)) == 8
    with pytest.raises(PoolError):
        pool.allocate(1)
    pool.free(a)
    pool.check_invariants()
    assert pool.num_free_blocks == 3 and pool.num_used_blocks == 5


def test_double_free_is_refused_without_corrupting_the_pool() -> None:
    pool = BlockPool(4, BS)
    blocks = pool.allocate(2)
    pool.free(blocks)
    with pytest.raises(PoolError, match="double free"):
        pool.free(blocks)
    pool.check_invariants()
    assert pool.num_free_blocks == 4


def test_check_invariants_catches_corruption() -> None:
    pool = BlockPool(4, BS)
    blocks = pool.allocate(1)
    pool.ref_cnt[blocks[0]] = 0  # leaked: no owner, not on a free list
    with pytest.raises(InvariantError, match="leaked"):
        pool.check_invariants()


def test_prefix_hit_full_blocks_only_and_last_token_computed() -> None:
    pool = BlockPool(16, BS)
    kv = KVCacheManager(pool)
    first = seq(0, list(range(10)))  # 2 full blocks + 2 tokens
    admit_and_compute(kv, first)
    # Same first 9 tokens: both full blocks hit; the partial third block never does.
    second = seq(1, list(range(9)) + [99])
    assert kv.try_admit(second)
    assert second.num_computed_tokens == 8
    assert second.block_table[:2] == first.block_table[:2]
    assert pool.ref_cnt[first.block_table[0]] == 2
    # A prompt that is exactly the two cached blocks: its last token must be computed, so
    # only the first block is served from the cache.
    third = seq(2, list(range(8)))
    assert kv.try_admit(third)
    assert third.num_computed_tokens == 4
    pool.check_invariants()


def test_hit_compares_stored_tokens_not_just_the_hash(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bp, "block_hash", lambda parent, tokens: 42)  # every block collides
    pool = BlockPool(8, BS)
    kv = KVCacheManager(pool)
    admit_and_compute(kv, seq(0, [1, 2, 3, 4, 5]))
    other = seq(1, [9, 9, 9, 9, 5])
    assert kv.try_admit(other)
    assert other.num_computed_tokens == 0  # same hash, different tokens: a miss


def test_freed_cached_blocks_stay_findable_until_evicted() -> None:
    pool = BlockPool(4, BS)
    kv = KVCacheManager(pool)
    first = seq(0, list(range(9)))
    admit_and_compute(kv, first)
    kv.free(first)
    assert pool.num_free_blocks == 4 and pool.num_cached_blocks == 2
    again = seq(1, list(range(9)))
    assert kv.try_admit(again) and again.num_computed_tokens == 8


def test_uncached_blocks_are_reused_before_cached_ones_and_leaves_evict_first() -> None:
    pool = BlockPool(5, BS)
    kv = KVCacheManager(pool)
    s = seq(0, list(range(13)))  # blocks: 3 full (cached) + 1 partial
    admit_and_compute(kv, s)
    root, mid, leaf = s.block_table[:3]
    kv.free(s)
    first = pool.allocate(2)  # the uncached partial block and the never-used block
    assert pool.num_cached_blocks == 3 and root not in first and leaf not in first
    (evicted,) = pool.allocate(1)
    assert evicted == leaf  # the leaf goes first; the shared root survives longest
    (evicted,) = pool.allocate(1)
    assert evicted == mid
    pool.check_invariants()


def test_cache_hit_is_not_evicted_by_its_own_admission() -> None:
    pool = BlockPool(3, BS)
    kv = KVCacheManager(pool)
    first = seq(0, list(range(8)))
    admit_and_compute(kv, first)
    kv.free(first)  # both blocks cached and evictable; one more free block
    again = seq(1, list(range(8)) + [50, 51])
    assert kv.try_admit(again)  # hit 2 blocks, needs 1 new: must not evict the hits
    assert again.num_computed_tokens == 8
    pool.check_invariants()


def test_disabled_caching_never_hits() -> None:
    pool = BlockPool(8, BS, enable_caching=False)
    kv = KVCacheManager(pool)
    admit_and_compute(kv, seq(0, list(range(9))))
    other = seq(1, list(range(9)))
    assert kv.try_admit(other) and other.num_computed_tokens == 0
    assert pool.num_cached_blocks == 0


# ---- stateful property test ------------------------------------------------------------
PREFIXES = [[7] * 8, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12], []]


class PoolMachine(RuleBasedStateMachine):
    """Random traffic through the real scheduler on a small pool (so it runs dry)."""

    @initialize(chunked=st.booleans(), num_blocks=st.integers(5, 14),
                budget=st.sampled_from([4, 8, 32]), caching=st.booleans())
    def setup(self, chunked: bool, num_blocks: int, budget: int, caching: bool) -> None:
        self.pool = BlockPool(num_blocks, BS, enable_caching=caching)
        self.sched = Scheduler(self.pool, max_num_seqs=4,
                               max_num_batched_tokens=budget if chunked else 64,
                               max_model_len=64, enable_chunked_prefill=chunked, eos_token_id=257)
        self.next_id = 0
        self.live: list[Sequence] = []
        self.prompts: list[list[int]] = []
        self.step_id = 0

    def _add(self, tokens: list[int], max_tokens: int) -> None:
        s = seq(self.next_id, tokens, max_tokens)
        self.next_id += 1
        try:
            self.sched.add(s)
        except ValueError:
            return  # never fits this pool: refused up front, nothing allocated
        self.live.append(s)
        self.prompts.append(tokens)

    @rule(prefix=st.sampled_from(PREFIXES), suffix=st.lists(st.integers(0, 3), max_size=9),
          max_tokens=st.integers(1, 20))
    def add_request(self, prefix: list[int], suffix: list[int], max_tokens: int) -> None:
        if prefix or suffix:
            self._add(prefix + suffix, max_tokens)

    @precondition(lambda self: self.prompts)
    @rule(data=st.data())
    def add_fully_cached_prompt(self, data: st.DataObject) -> None:
        # Resubmit an earlier prompt truncated to whole blocks: every block may be cached.
        prompt = data.draw(st.sampled_from(self.prompts))
        whole = len(prompt) // BS * BS
        if whole:
            self._add(prompt[:whole], 3)

    @rule(tokens=st.lists(st.integers(0, 300), min_size=1, max_size=8))
    def step(self, tokens: list[int]) -> None:
        self.step_id += 1
        out = self.sched.schedule(self.step_id)
        assert sum(n for _, n in out.scheduled) <= self.sched.token_budget
        for w in out.batch.seqs:  # the executor contract: tables cover the work
            assert len(w.block_table) * BS >= w.start_pos + len(w.token_ids)
        self.sched.check_invariants()
        sampled = {w.seq_id: tokens[i % len(tokens)] for i, w in enumerate(out.batch.seqs) if w.sample}
        self.sched.update(out, sampled, 0.0)
        # Coverage of the cases the issue names (see --hypothesis-show-statistics).
        if out.preempted:
            event("preemption")
        if any(v.num_cached_tokens for v in out.preempted):
            event("preempted a sequence that had a prefix hit")
        if any(0 < n < len(s.token_ids) - s.num_computed_tokens + n for s, n in out.scheduled):
            event("partial prefill chunk")
        if any(s.num_computed_tokens == len(s.token_ids) - BS and s.first_token_time is None
               and len(s.token_ids) % BS == 0 for s, _ in out.scheduled):
            event("fully cached prompt")
        self.live = [s for s in self.live if not s.is_finished]

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def abort(self, data: st.DataObject) -> None:
        s = data.draw(st.sampled_from(self.live))
        assert self.sched.abort(s)
        assert not self.sched.abort(s)  # a second abort is a no-op, never a double free
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
        assert self.sched.prefix_cache_hits <= self.sched.prefix_cache_queries


PoolMachine.TestCase.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
TestPoolMachine = PoolMachine.TestCase
