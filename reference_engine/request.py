"""A request's sampling parameters and the sequence the engine tracks for it."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class SamplingParams:
    """What the client asked for; validated once, before the request enters the engine."""

    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    ignore_eos: bool = False
    priority: int = 0  # scheduling_policy=priority admits lower values first (vLLM's field)
    # The request's `user` (OpenAI's end-user field): the tenant scheduling_policy=fair
    # shares the engine between (fair_share.py); None = no user given.
    tenant: str | None = None
    # The LoRA adapter the request's `model` names (lora.py); None = the base model.
    lora: str | None = None
    # vLLM's name: {"json": schema} constrains the output to the schema (structured_output.py)
    structured_outputs: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.max_tokens, int) or isinstance(self.max_tokens, bool):
            raise ValueError(f"max_tokens must be an integer, got {self.max_tokens!r}")
        if self.max_tokens <= 0:
            raise ValueError(f"max_tokens must be > 0, got {self.max_tokens}")
        if not float(self.temperature) >= 0.0:  # written so NaN fails too
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0.0 < float(self.top_p) <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")


class SequenceStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(slots=True)
class RequestOutput:
    """One delta of a request's output, handed to the request's `on_output` callback."""

    request_id: str
    new_token_ids: list[int]
    finished: bool
    finish_reason: str | None  # "stop" | "length" | "abort" | None
    num_prompt_tokens: int
    num_cached_tokens: int
    arrival_time: float
    first_scheduled_time: float | None
    first_token_time: float | None


OutputCallback = Callable[[RequestOutput], None]


class Sequence:
    """One request inside the engine: its tokens, progress and KV blocks.

    `token_ids` is the prompt followed by every generated token; `num_computed_tokens` of
    them have KV in `block_table`. After a preemption by recompute the count drops to 0 and
    the whole of `token_ids` (prompt and output so far) is prefilled again.
    Owned by the engine thread; the scheduler and block pool mutate it, nobody else.
    """

    __slots__ = (
        "seq_id", "request_id", "params", "on_output", "token_ids", "num_prompt_tokens",
        "num_computed_tokens", "block_table", "block_hashes", "num_registered_blocks", "status", "finish_reason",
        "arrival_time", "first_scheduled_time", "first_token_time", "num_cached_tokens",
        "num_preemptions", "aborted", "max_len", "num_new_tokens",
    )

    def __init__(
        self,
        seq_id: int,
        request_id: str,
        prompt_token_ids: list[int],
        params: SamplingParams,
        on_output: OutputCallback,
        arrival_time: float,
    ) -> None:
        self.seq_id = seq_id
        self.request_id = request_id
        self.params = params
        self.on_output = on_output
        self.token_ids: list[int] = list(prompt_token_ids)
        self.num_prompt_tokens = len(prompt_token_ids)
        # Length at which the sequence stops ("length"); the scheduler caps it at max_model_len.
        self.max_len = self.num_prompt_tokens + params.max_tokens
        self.num_computed_tokens = 0
        self.block_table: list[int] = []
        # Chained hashes of this sequence's full blocks, in order; they depend only on the
        # tokens, so they survive preemption and are reused when the sequence comes back.
        self.block_hashes: list[int] = []
        self.num_registered_blocks = 0  # leading blocks of block_table offered to the cache
        self.status = SequenceStatus.WAITING
        self.finish_reason: str | None = None
        self.arrival_time = arrival_time
        self.first_scheduled_time: float | None = None
        self.first_token_time: float | None = None
        self.num_cached_tokens = 0  # prompt tokens served by the prefix cache (first admission)
        self.num_preemptions = 0
        self.aborted = False  # set by abort_request (any thread) before the engine frees it
        self.num_new_tokens = 0  # tokens the last step appended (more than 1 with speculation)

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def output_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens:]

    @property
    def is_finished(self) -> bool:
        return self.status is SequenceStatus.FINISHED

    def __repr__(self) -> str:
        return (f"Sequence(id={self.seq_id}, request={self.request_id!r}, "
                f"status={self.status.value}, tokens={len(self.token_ids)}, "
                f"computed={self.num_computed_tokens}, blocks={len(self.block_table)})")
