"""Continuous-batching scheduler: who runs in the next step, and with how many tokens.

Per step, in the order vLLM v1 uses:
1. running decodes (one token each), growing their KV by a block when one fills; when the
   pool is dry the newest running sequence is preempted by recompute (blocks freed, moved
   to the front of the waiting queue, prefilled again later — prompt and output so far);
2. running sequences with prefill left (chunked prefill continues), within the budget;
3. waiting sequences, first come first served, while there is token budget, a free seat
   (max_num_seqs) and KV for the whole prompt — KV is reserved at admission, so a
   sequence in prefill never waits for blocks, and refunded when it finishes. Nothing is
   admitted in a step that had to preempt.
Under policy `fair` (fair_share.py) steps 2 and 3 go tenant by tenant, the tenant charged
least for the work done so far (over its weight) first; every scheduled token is charged.
With LoRA (`max_loras` set, lora.py) the batch holds at most max_loras distinct adapters: a
waiting sequence whose adapter has no slot is skipped, and the next one is tried (vLLM v1's rule).
A request that could never fit is refused before it enters the queue (`check_admissible`).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from reference_engine.block_pool import BlockPool, InvariantError, KVCacheManager
from reference_engine.executor import SeqWork, StepBatch
from reference_engine.fair_share import FairShare
from reference_engine.lora import admits, batch_adapters, check_slots
from reference_engine.request import Sequence, SequenceStatus
from reference_engine.spec_decode import SpecDecoder


class AdmissionError(ValueError):
    """The request can never be served under this configuration."""


_RUNNING = SequenceStatus.RUNNING
_NO_DRAFTS: list[int] = []  # shared, never mutated: no allocation per decode without speculation


@dataclass
class SchedulerOutput:
    batch: StepBatch
    scheduled: list[tuple[Sequence, int]]   # (sequence, tokens computed this step)
    preempted: list[Sequence] = field(default_factory=list)
    num_prefill_tokens: int = 0
    num_decode_seqs: int = 0


class Scheduler:
    def __init__(
        self,
        pool: BlockPool,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        max_model_len: int,
        enable_chunked_prefill: bool = True,
        eos_token_id: int = -1,
        policy: str = "fcfs",
        spec: SpecDecoder | None = None,
        fair: FairShare | None = None,
        max_loras: int | None = None,
    ) -> None:
        self.pool = pool
        self.kv = KVCacheManager(pool)
        self.max_num_seqs = max_num_seqs
        self.token_budget = max_num_batched_tokens
        self.max_model_len = max_model_len
        self.chunked = enable_chunked_prefill
        self.eos_token_id = eos_token_id
        self.policy = policy
        self.spec = spec  # speculative decoding (spec_decode.py), or None
        if (policy == "fair") != (fair is not None):
            raise ValueError("the fair policy needs its FairShare (fair_share_for), and only it")
        self.fair = fair  # each tenant's charge under policy fair (fair_share.py), or None
        self.max_loras = max_loras  # distinct adapters a batch may hold (lora.py); None: LoRA off
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []  # in admission order: the tail is the newest
        self.num_preemptions = 0
        self.prefix_cache_queries = 0  # tokens looked up at admission
        self.prefix_cache_hits = 0     # of which served from the cache
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0

    # ---- admission --------------------------------------------------------------------------
    def check_admissible(self, num_prompt_tokens: int, max_tokens: int) -> None:
        total = num_prompt_tokens + max_tokens
        if num_prompt_tokens <= 0:
            raise AdmissionError("prompt must contain at least one token")
        if total > self.max_model_len:
            raise AdmissionError(
                f"prompt ({num_prompt_tokens} tokens) + max_tokens ({max_tokens}) = {total} "
                f"exceeds max_model_len ({self.max_model_len})")
        need = self.kv.blocks_needed(total)
        if need > self.pool.num_blocks:
            raise AdmissionError(
                f"prompt ({num_prompt_tokens} tokens) + max_tokens ({max_tokens}) needs {need} "
                f"KV blocks of {self.pool.block_size} tokens; the pool has {self.pool.num_blocks}")
        if not self.chunked and num_prompt_tokens > self.token_budget:
            raise AdmissionError(
                f"prompt ({num_prompt_tokens} tokens) exceeds max_num_batched_tokens "
                f"({self.token_budget}) and chunked prefill is disabled")

    def add(self, seq: Sequence) -> None:
        self.check_admissible(seq.num_prompt_tokens, seq.params.max_tokens)
        seq.max_len = min(seq.max_len, self.max_model_len)
        self.waiting.append(seq)

    def abort(self, seq: Sequence) -> bool:
        """Remove a live sequence and free its blocks (exactly once). False if not live."""
        if seq.status is SequenceStatus.WAITING and seq in self.waiting:
            self.waiting.remove(seq)
        elif seq.status is SequenceStatus.RUNNING and seq in self.running:
            self.running.remove(seq)
        else:
            return False
        self._finish(seq, "abort")
        return True

    def enqueue(self, seqs: list[Sequence]) -> None:
        """New sequences join the waiting queue: at the back (fcfs), or before every waiting
        sequence of a higher priority value (priority; ties keep arrival order)."""
        if self.policy != "priority":
            self.waiting.extend(seqs)
            return
        for seq in seqs:
            at = len(self.waiting)
            while at > 0 and self.waiting[at - 1].params.priority > seq.params.priority:
                at -= 1
            self.waiting.insert(at, seq)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    # ---- one step ---------------------------------------------------------------------------
    def schedule(self, step_id: int, start_time: float = 0.0) -> SchedulerOutput:
        # Owns: moves sequences between queues; blocks taken here are owned by the sequence
        # and released by _finish or _preempt. This runs every step over every running
        # sequence, so the per-sequence work is kept to a few attribute reads.
        budget = self.token_budget
        bs = self.pool.block_size
        scheduled: list[tuple[Sequence, int]] = []
        preempted: list[Sequence] = []
        works: list[SeqWork] = []
        decodes: list[Sequence] = []
        prefills: list[Sequence] = []
        for s in self.running:
            (decodes if len(s.token_ids) - s.num_computed_tokens == 1 else prefills).append(s)

        for seq in decodes:
            if budget == 0:
                break
            if seq.status is not _RUNNING:
                continue  # preempted earlier in this loop
            computed = seq.num_computed_tokens
            toks = seq.token_ids
            # Drafts need KV slots beyond the one token; with the pool too dry for them the
            # sequence decodes one token rather than preempting anyone.
            drafts = self.spec.propose(seq, budget) if self.spec is not None else _NO_DRAFTS
            if drafts and not self.kv.try_grow(seq, 1 + len(drafts)):
                drafts = _NO_DRAFTS
            if computed >= len(seq.block_table) * bs:  # its last block is full
                while not self.kv.try_grow(seq, 1):
                    victim = self._newest_unscheduled(scheduled)
                    self._preempt(victim)
                    preempted.append(victim)
                    if victim is seq:
                        break
                if seq.status is not _RUNNING:
                    continue
            scheduled.append((seq, 1 + len(drafts)))
            # The decode's work is built here: one pass over 256 sequences, not two.
            works.append(SeqWork(seq.seq_id, toks[-1:] + drafts if drafts else toks[-1:], computed,
                                 seq.block_table, True, seq.params,
                                 len(toks) - seq.num_prompt_tokens, toks, len(drafts)))
            budget -= 1 + len(drafts)
        num_decodes = len(scheduled)
        fair = self.fair
        if fair is not None:
            fair.charge_decodes(scheduled, num_decodes)
            budget = self._fill_fair(fair, prefills, scheduled, preempted, budget, start_time)

        for seq in prefills if fair is None else ():
            if budget == 0:
                break
            if seq.status is not _RUNNING:
                continue
            n = self._chunk(len(seq.token_ids) - seq.num_computed_tokens, budget)
            if n == 0:
                continue
            scheduled.append((seq, n))
            budget -= n

        loras = self._running_loras()
        skipped: list[Sequence] = []  # waiting for an adapter slot: they keep their places
        while (fair is None and not preempted and self.waiting and budget > 0
               and len(self.running) < self.max_num_seqs):
            seq = self.waiting[0]
            if not self._lora_admits(seq, loras):
                skipped.append(self.waiting.popleft())
                continue
            if not self.kv.try_admit(seq, None if self.chunked else budget):
                break  # head of line waits for blocks (or, unchunked, for a whole-prompt budget)
            self.waiting.popleft()
            self._count_admission(seq, start_time)
            n = self._chunk(len(seq.token_ids) - seq.num_computed_tokens, budget)
            self.running.append(seq)
            scheduled.append((seq, n))
            budget -= n
            if loras is not None and seq.params.lora is not None:
                loras.add(seq.params.lora)
        self.waiting.extendleft(reversed(skipped))

        for s, n in scheduled[num_decodes:]:  # victims are never among the scheduled
            c = s.num_computed_tokens
            toks = s.token_ids
            works.append(SeqWork(s.seq_id, toks[c:c + n], c, s.block_table, c + n == len(toks),
                                 s.params, len(toks) - s.num_prompt_tokens, toks))
        return SchedulerOutput(
            batch=StepBatch(step_id, works, start_time), scheduled=scheduled, preempted=preempted,
            num_prefill_tokens=self.token_budget - budget - sum(n for _, n in scheduled[:num_decodes]),
            num_decode_seqs=num_decodes)

    def update(self, out: SchedulerOutput, sampled: dict[int, int], now: float) -> list[Sequence]:
        """Apply a finished step: advance KV, append sampled tokens, finish sequences.

        Returns the sequences that produced a token this step (it is their last token; the
        finished ones have status FINISHED and their blocks already refunded).
        """
        produced: list[Sequence] = []
        any_finished = False
        eos = self.eos_token_id
        bs = self.pool.block_size
        caching = self.pool.enable_caching
        num_tokens = 0
        for i, (seq, n) in enumerate(out.scheduled):
            verified = sampled.get(seq.seq_id)
            if type(verified) is list:  # a verified draft: 1..n tokens (spec_decode.py)
                # scheduled[i] is works[i]: its token_ids are the last token and the drafts.
                finished = self._apply_verified(seq, out.batch.seqs[i].token_ids[1:], verified)
                produced.append(seq)
                num_tokens += seq.num_new_tokens
                any_finished = any_finished or finished
                continue
            computed = seq.num_computed_tokens = seq.num_computed_tokens + n
            if caching and computed // bs > seq.num_registered_blocks:
                self.kv.register_full_blocks(seq)
            toks = seq.token_ids
            if computed != len(toks):
                continue  # a prefill chunk that is not the last one
            tok = sampled[seq.seq_id]
            toks.append(tok)
            seq.num_new_tokens = 1
            produced.append(seq)
            num_tokens += 1
            if seq.first_token_time is None:
                seq.first_token_time = now
            if tok == eos and not seq.params.ignore_eos:
                self._finish(seq, "stop")
                any_finished = True
            elif len(toks) >= seq.max_len:  # max_tokens (or max_model_len) reached
                self._finish(seq, "length")
                any_finished = True
        self.generation_tokens_total += num_tokens
        if any_finished:
            self.running = [s for s in self.running if s.status is _RUNNING]
        return produced

    def _apply_verified(self, seq: Sequence, drafts: list[int], verified: list[int]) -> bool:
        # Appends the accepted drafts and the bonus token, stopping at EOS or the length
        # cap, then rolls back the KV slots of the rejected drafts: the table keeps the blocks
        # of the computed tokens only. True if the sequence finished.
        assert self.spec is not None
        toks = seq.token_ids
        start = len(toks)
        kept = self.spec.accept(drafts, verified)
        reason = None
        for tok in kept:
            toks.append(tok)
            if tok == self.eos_token_id and not seq.params.ignore_eos:
                reason = "stop"
            elif len(toks) >= seq.max_len:
                reason = "length"
            if reason:
                break
        seq.num_new_tokens = len(toks) - start
        seq.num_computed_tokens = len(toks) - 1
        if self.pool.enable_caching and seq.num_computed_tokens // self.pool.block_size > seq.num_registered_blocks:
            self.kv.register_full_blocks(seq)
        if reason:
            self._finish(seq, reason)
            return True
        self.kv.release_tail(seq, seq.num_computed_tokens)
        return False

    def _fill_fair(self, fair: FairShare, prefills: list[Sequence],
                   scheduled: list[tuple[Sequence, int]], preempted: list[Sequence],
                   budget: int, start_time: float) -> int:
        # Policy fair: the budget left by the decodes goes tenant by tenant, least charged
        # first, to its running prefills and then its waiting heads, charged as it goes.
        # A head that does not fit waits for blocks and stops admission, as fcfs's head of
        # line does (skipping it would let short prompts pass a long one forever).
        # Returns the budget left.
        running = fair.tenant_queues(s for s in prefills if s.status is _RUNNING)
        admitting = not preempted and bool(self.waiting) and len(self.running) < self.max_num_seqs
        waiting = fair.queues(self.waiting, self.running) if admitting else {}
        loras = self._running_loras()
        while budget > 0:
            found, tenant = fair.least_charged(running, waiting)
            if not found:
                break
            if running.get(tenant):
                seq = running[tenant].popleft()
                n = self._chunk(len(seq.token_ids) - seq.num_computed_tokens, budget)
                if n == 0:
                    continue
            else:
                seq = waiting[tenant][0]
                if not self._lora_admits(seq, loras):  # no adapter slot: it waits, the next goes
                    waiting[tenant].popleft()
                    continue
                if (len(self.running) >= self.max_num_seqs
                        or not self.kv.try_admit(seq, None if self.chunked else budget)):
                    waiting = {}
                    continue
                waiting[tenant].popleft()
                self.waiting.remove(seq)
                self._count_admission(seq, start_time)
                n = self._chunk(len(seq.token_ids) - seq.num_computed_tokens, budget)
                self.running.append(seq)
                if loras is not None and seq.params.lora is not None:
                    loras.add(seq.params.lora)
            fair.charge_prefill(seq, n, seq.num_computed_tokens)
            scheduled.append((seq, n))
            budget -= n
        return budget

    # ---- helpers ----------------------------------------------------------------------------
    def _running_loras(self) -> set[str] | None:
        # The adapters the running batch holds (lora.py); None when LoRA is off.
        return batch_adapters(self.running) if self.max_loras is not None else None

    def _lora_admits(self, seq: Sequence, loras: set[str] | None) -> bool:
        # False when seq's adapter would be one more than the batch's max_loras.
        return loras is None or self.max_loras is None or admits(seq.params.lora, loras, self.max_loras)

    def _chunk(self, remaining: int, budget: int) -> int:
        if remaining <= budget:
            return remaining
        return budget if self.chunked else 0

    def _newest_unscheduled(self, scheduled: list[tuple[Sequence, int]]) -> Sequence:
        taken = {s.seq_id for s, _ in scheduled}  # built only when preempting (rare)
        for seq in reversed(self.running):
            if seq.seq_id not in taken:
                return seq
        raise InvariantError("no sequence to preempt: the current one is always a candidate")

    def _preempt(self, seq: Sequence) -> None:
        # Frees the victim's blocks (recompute later); it goes to the front of the queue.
        self.running.remove(seq)
        self.kv.free(seq)
        seq.num_computed_tokens = 0
        seq.status = SequenceStatus.WAITING
        seq.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(seq)

    def _finish(self, seq: Sequence, reason: str) -> None:
        # Refunds every block the sequence owns; the caller removes it from its queue.
        self.kv.free(seq)
        seq.status = SequenceStatus.FINISHED
        seq.finish_reason = reason
        if self.spec is not None:
            self.spec.forget(seq)

    def _count_admission(self, seq: Sequence, now: float) -> None:
        seq.status = SequenceStatus.RUNNING
        self.prefix_cache_queries += len(seq.token_ids)
        self.prefix_cache_hits += seq.num_computed_tokens
        if seq.first_scheduled_time is None:
            seq.first_scheduled_time = now
            seq.num_cached_tokens = seq.num_computed_tokens
            self.prompt_tokens_total += seq.num_prompt_tokens

    # ---- checking ---------------------------------------------------------------------------
    def check_invariants(self) -> None:
        """Pool invariants plus: every reference is owned by exactly one live table slot."""
        self.pool.check_invariants()
        refs = [0] * self.pool.num_blocks
        ids = [s.seq_id for s in self.running] + [s.seq_id for s in self.waiting]
        if len(ids) != len(set(ids)):
            raise InvariantError("a sequence is queued twice")
        if len(self.running) > self.max_num_seqs:
            raise InvariantError(f"{len(self.running)} running > max_num_seqs {self.max_num_seqs}")
        for seq in self.running:
            if seq.status is not SequenceStatus.RUNNING:
                raise InvariantError(f"{seq} is in the running queue")
            if len(seq.block_table) * self.pool.block_size < len(seq.token_ids) - 1:
                raise InvariantError(f"{seq} has too few blocks for its tokens")
            if seq.num_computed_tokens > len(seq.token_ids):
                raise InvariantError(f"{seq} computed more tokens than it has")
            # No slot beyond the sequence's own tokens: a rejected draft's slot not rolled
            # back (or any block taken ahead) would sit there.
            if len(seq.block_table) > self.kv.blocks_needed(len(seq.token_ids)):
                raise InvariantError(f"{seq} holds blocks beyond its tokens (leaked slots)")
            for b in seq.block_table:
                refs[b] += 1
        for seq in self.waiting:
            if seq.block_table or seq.num_computed_tokens or seq.status is not SequenceStatus.WAITING:
                raise InvariantError(f"waiting {seq} holds KV")
        if self.spec is not None:
            self.spec.check_invariants(set(ids))
        if self.fair is not None:
            self.fair.check_invariants()
        if self.max_loras is not None:
            check_slots(self.running, self.max_loras)
        if refs != self.pool.ref_cnt:
            bad = next(b for b in range(len(refs)) if refs[b] != self.pool.ref_cnt[b])
            raise InvariantError(f"block {bad}: ref count {self.pool.ref_cnt[bad]} but "
                                 f"{refs[bad]} table slots hold it")
