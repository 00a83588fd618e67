"""The one small interface between the scheduler and whatever computes a step.

The scheduler decides *what* runs in a step (a `StepBatch`); an executor computes it and
returns one sampled token per sequence that asked for one. The sim and torch executors share
the same scheduler and block pool, so scheduling behaviour is identical under both.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from reference_engine.request import SamplingParams


@dataclass(slots=True)
class SeqWork:
    """One sequence's share of a step: a prefill chunk, or the single decode token."""

    seq_id: int
    token_ids: list[int]      # tokens computed this step (a prefill chunk, or the one decode token)
    start_pos: int            # position of token_ids[0] in the sequence
    block_table: list[int]    # physical blocks covering [0, start_pos + len(token_ids)); read-only
    sample: bool              # sample a next token after this work (decode, or last prefill chunk)
    params: SamplingParams
    num_output_tokens: int    # tokens generated so far (for seeded sampling streams)
    # The sequence's whole token list (prompt and output so far, read-only): what a model
    # that copies from its context (the sim's, sim_copy.py) looks at.
    context: list[int] | None = None
    # Speculative decoding: the last num_draft_tokens of token_ids are drafts to verify;
    # the executor then returns the target's greedy token after each of the work's tokens
    # (a list of num_draft_tokens + 1) instead of one sampled token.
    num_draft_tokens: int = 0

    @property
    def is_decode(self) -> bool:
        # A decode computes exactly the one token sampled last step; anything else is prefill
        # (including the recompute of a preempted sequence's prompt and output).
        return self.sample and len(self.token_ids) == 1 and self.num_output_tokens > 0


@dataclass
class StepBatch:
    step_id: int
    seqs: list[SeqWork]       # prefill chunks and decodes mixed in one step
    # Monotonic time the engine began this step (before scheduling). A timed executor sleeps
    # until start_time + predicted duration, so the engine's own bookkeeping is absorbed
    # inside the step instead of being added on top of it.
    start_time: float = field(default=0.0)
    # Seconds of grammar masks this step fills (structured_output.py); the sim prices it.
    grammar_mask_s: float = 0.0

    def without_context(self) -> StepBatch:
        """This batch with no work's `context`: what another process is sent (the context
        is a reference to the engine's live token lists; pickled, every step would copy
        every sequence's tokens)."""
        return dataclasses.replace(self, seqs=[dataclasses.replace(w, context=None)
                                               if w.context is not None else w for w in self.seqs])

    @property
    def num_prefill_tokens(self) -> int:
        # A verified draft is a decode that computes several tokens, not a prefill.
        return sum(len(w.token_ids) for w in self.seqs if not w.is_decode and not w.num_draft_tokens)

    @property
    def num_decode_seqs(self) -> int:
        return sum(1 for w in self.seqs if w.is_decode or w.num_draft_tokens)


class ExecutorClosed(RuntimeError):
    """The executor was shut down under a running step (engine stop): not a failure."""


@runtime_checkable
class Executor(Protocol):
    name: str
    num_blocks: int           # KV pool size decided by the executor's memory arithmetic
    block_size: int
    eos_token_id: int

    def execute(self, batch: StepBatch) -> dict[int, int]:
        """Compute the batch; return seq_id -> sampled token for every work with sample=True
        (a list of num_draft_tokens + 1 greedy tokens for a work that carries drafts)."""
        ...

    def memory_report(self) -> dict[str, int]:
        """Bytes by component: at least "weights", "kv_pool", "other"."""
        ...
