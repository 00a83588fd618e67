"""What a workload hands the runner: sessions of request specs.

A session is a generator: it yields a `RequestSpec`, the runner sends it and `send()`s back the
generated text (or None when the request failed), and the session yields its next turn or
stops. Single requests are one-turn sessions; conversations grow their history turn by turn.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

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


class Workload(Protocol):
    name: str
    needs_text: bool  # the runner must collect generated text (conversations)

    def sessions(self, rng: np.random.Generator) -> Iterator[Session]: ...

    def describe(self) -> dict[str, Any]: ...


def single(spec: RequestSpec) -> Session:
    yield spec
