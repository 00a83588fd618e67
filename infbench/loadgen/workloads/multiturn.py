"""Multi-turn conversations: each turn resends the whole history plus a new user message."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from itertools import count
from typing import Any

import numpy as np

from infbench.loadgen.lengths import LengthDist
from infbench.loadgen.workloads.base import RequestSpec, Session
from infbench.loadgen.workloads.prompts import TokenModel, random_words


@dataclass
class MultiTurn:
    turns: int
    input_len: LengthDist  # tokens of each new user message
    output_len: LengthDist
    tokens: TokenModel
    name: str = "multiturn"
    needs_text: bool = True

    def sessions(self, rng: np.random.Generator) -> Iterator[Session]:
        if self.turns < 1:
            raise ValueError("turns: must be >= 1")
        for conv_id in count():
            yield self._conversation(rng, conv_id)

    def _conversation(self, rng: np.random.Generator, conv_id: int) -> Session:
        history: list[dict[str, str]] = []
        history_tokens = 0
        for turn in range(self.turns):
            n_in = int(self.input_len.sample(rng)[0])
            user = random_words(rng, self.tokens.words_for(n_in, with_overhead=turn == 0))
            history.append({"role": "user", "content": user})
            history_tokens += n_in
            n_out = int(self.output_len.sample(rng)[0])
            reply = yield RequestSpec(
                label=f"turn-{turn}", max_tokens=n_out, messages=list(history),
                target_input_tokens=history_tokens, conversation_id=conv_id, turn=turn)
            if reply is None:  # the turn failed: a real user would not continue this thread
                return
            history.append({"role": "assistant", "content": reply})
            history_tokens += n_out

    def describe(self) -> dict[str, Any]:
        return {"workload": self.name, "turns": self.turns,
                "input_tokens_per_turn": str(self.input_len), "output_tokens": str(self.output_len)}
