"""Multi-turn conversations: each turn resends the whole history plus a new user message."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from itertools import count
from typing import Any

import numpy as np

from infbench.loadgen.lengths import LengthDist
from infbench.loadgen.seeds import Streams
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

    def sessions(self, streams: Streams) -> Iterator[Session]:
        if self.turns < 1:
            raise ValueError("turns: must be >= 1")
        ins = self.input_len.stream(streams.input_lengths())
        outs = self.output_len.stream(streams.output_lengths())
        for conv_id in count():
            # All of a conversation's lengths are drawn here, in conversation order: its turns
            # run later, interleaved with other conversations by the server's timing, and the
            # lengths must not follow that order.
            n_in = [next(ins) for _ in range(self.turns)]
            n_out = [next(outs) for _ in range(self.turns)]
            yield self._conversation(streams.conversation_text(conv_id), conv_id, n_in, n_out)

    def _conversation(self, text: np.random.Generator, conv_id: int, n_in: list[int],
                      n_out: list[int]) -> Session:
        history: list[dict[str, str]] = []
        history_tokens = 0
        for turn in range(self.turns):
            user = random_words(text, self.tokens.words_for(n_in[turn], with_overhead=turn == 0))
            history.append({"role": "user", "content": user})
            history_tokens += n_in[turn]
            reply = yield RequestSpec(
                label=f"turn-{turn}", max_tokens=n_out[turn], messages=list(history),
                target_input_tokens=history_tokens, conversation_id=conv_id, turn=turn)
            if reply is None:  # the turn failed: a real user would not continue this thread
                return
            history.append({"role": "assistant", "content": reply})
            history_tokens += n_out[turn]

    def describe(self) -> dict[str, Any]:
        return {"workload": self.name, "turns": self.turns,
                "input_tokens_per_turn": str(self.input_len), "output_tokens": str(self.output_len)}
