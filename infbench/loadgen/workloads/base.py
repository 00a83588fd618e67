"""What a workload hands the runner: sessions of request specs.

A session is a generator: it yields a `RequestSpec`, the runner sends it and `send()`s back the
generated text (or None when the request failed), and the session yields its next turn or
stops. Single requests are one-turn sessions; conversations grow their history turn by turn.

`sessions(streams)` draws each kind of randomness from its own stream (`loadgen.seeds`): the
lengths, choices and, for open loops, the arrival times of session k are the same for one seed
on any target; only the text depends on the target's calibration and on the per-run salt.
`target_input_tokens` is the prompt's length as the server counts it (BOS and, on the chat
endpoint, the template included), which the text is sized to; for conversations it is the
content planned so far, and the runner adds the template's tokens (`loadgen.workloads.sizing`).
The runner sends the sessions in the order they are yielded, so request k of two runs with
the same seed is the same request (multi-turn: turn t of conversation k).
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from infbench.loadgen.seeds import Streams
from infbench.loadgen.workloads.prompts import TokenModel

Session = Generator["RequestSpec", "str | None", None]


@dataclass(slots=True)
class RequestSpec:
    label: str
    max_tokens: int
    prompt: str | None = None  # a single user text
    messages: list[dict[str, str]] | None = None  # a conversation (multi-turn)
    target_input_tokens: int | None = None
    extra: dict[str, Any] | None = None  # extra body fields (response_format, ...)
    conversation_id: int | None = None
    turn: int | None = None
    at: float | None = None  # trace workloads: arrival offset in seconds
    # Where the words that may be resized are: a (start, end) span of `prompt`, or of the last
    # message's content. The rest (a shared prefix, an instruction, the history) is kept.
    fill: tuple[int, int] | None = None
    # Who sends it (`--tenants`: the body's `user`) and the model name it asks for (`--adapters`:
    # a LoRA adapter served under its own name); None: no tenant, the run's --model.
    tenant: str | None = None
    model: str | None = None


class Workload(Protocol):
    name: str
    needs_text: bool  # the runner must collect generated text (conversations)
    tokens: TokenModel  # the target's token model the text is sized with

    def sessions(self, streams: Streams) -> Iterator[Session]: ...

    def describe(self) -> dict[str, Any]: ...


def single(spec: RequestSpec) -> Session:
    yield spec
