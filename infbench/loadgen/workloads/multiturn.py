"""Multi-turn conversations: each turn resends the whole history plus a new user message.

`input_len` is the length of each new user message's own text; the chat template's tokens
around the messages come on top and are counted in each turn's recorded target.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from itertools import count
from typing import Any

import numpy as np

from infbench.loadgen.seeds import Streams
from infbench.loadgen.workloads.base import RequestSpec, Session
from infbench.loadgen.workloads.lengths import LengthDist
from infbench.loadgen.workloads.prompts import TokenModel


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
        # The target is the content planned so far: every user message of n_in tokens and every
        # reply of its max_tokens. The runner adds the target's template tokens and sizes the new
        # message against the real history (`loadgen.workloads.sizing`), so the text here is a first fit.
        history: list[dict[str, str]] = []
        content = 0
        for turn in range(self.turns):
            user = self.tokens.text_for(text, n_in[turn], with_overhead=False)
            history.append({"role": "user", "content": user})
            content += n_in[turn]
            reply = yield RequestSpec(
                label=f"turn-{turn}", max_tokens=n_out[turn], messages=list(history),
                target_input_tokens=content, conversation_id=conv_id, turn=turn, fill=(0, len(user)))
            if reply is None:  # the turn failed: a real user would not continue this thread
                return
            history.append({"role": "assistant", "content": reply})
            content += n_out[turn]

    def describe(self) -> dict[str, Any]:
        return {"workload": self.name, "turns": self.turns,
                "input_tokens_per_turn": str(self.input_len), "output_tokens": str(self.output_len)}
