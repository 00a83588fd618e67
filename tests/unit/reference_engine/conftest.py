"""Shared fixtures for the engine core tests: an instant, scriptable executor."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from reference_engine.executor import StepBatch

EOS = 257


class FakeExecutor:
    """Implements the Executor protocol with no device: tokens come from `next_token`
    (default: 'a' + position % 26), optionally sleeping `step_s` per step."""

    name = "fake"
    eos_token_id = EOS

    def __init__(self, num_blocks: int = 64, block_size: int = 4, step_s: float = 0.0,
                 next_token: Callable[[int, int], int] | None = None) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.step_s = step_s
        self.next_token = next_token or (lambda seq_id, pos: 97 + pos % 26)
        self.batches: list[StepBatch] = []

    def execute(self, batch: StepBatch) -> dict[int, int]:
        self.batches.append(batch)
        if self.step_s:
            time.sleep(self.step_s)
        return {w.seq_id: self.next_token(w.seq_id, w.start_pos + len(w.token_ids))
                for w in batch.seqs if w.sample}

    def memory_report(self) -> dict[str, int]:
        return {"weights": 1000, "kv_pool": self.num_blocks * self.block_size * 10, "other": 7}


@pytest.fixture
def fake_executor() -> type[FakeExecutor]:
    return FakeExecutor
