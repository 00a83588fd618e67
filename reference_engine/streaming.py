"""One generation as the server sees it: engine outputs in, text and SSE bytes out.

The engine calls `on_output` from its own thread; the only thing done there is posting the
output, with the time it was produced, to the `OutputMailbox`, which hops to the event loop.
Everything else runs on the loop thread, so a `Generation`'s fields need no lock.

Two ways a generation ends early, both ending in exactly one `engine.abort_request`:
a stop string seen by the detokenizer (finish_reason "stop"), and the server giving up on
the client (disconnect, or the per-connection byte budget overflowing).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from reference_engine import protocol
from reference_engine.detokenizer import IncrementalDetokenizer
from reference_engine.metrics import RequestMetrics
from reference_engine.protocol import GenerationRequest
from reference_engine.request import RequestOutput
from reference_engine.tokenizer import ByteTokenizer

log = logging.getLogger("reference_engine.server")


class OutputMailbox:
    """Carries engine outputs from the engine thread to the event loop, one wake-up a burst.

    The engine emits one output per running sequence per step; a `call_soon_threadsafe` for
    each would write to the loop's self-pipe hundreds of times a step and make the two
    threads fight over the GIL. Outputs are appended to one list instead, and the loop is
    woken only when the list goes from empty to non-empty; it then delivers the whole burst
    in arrival order. Owns: the list (under `_lock`); the deliver callbacks own the rest.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._lock = threading.Lock()
        self._items: list[tuple[Callable[[RequestOutput, float], None], RequestOutput,
                                float]] = []

    def post(self, deliver: Callable[[RequestOutput, float], None], out: RequestOutput,
             ) -> None:
        """Engine thread: queue one output for `deliver(out, produced_time)` on the loop."""
        item = (deliver, out, time.monotonic())
        with self._lock:
            self._items.append(item)
            if len(self._items) > 1:
                return  # a drain is already scheduled and will take this one too
        # A closed loop means the server is shutting down and nobody is listening.
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        with self._lock:
            items, self._items = self._items, []
        for deliver, out, produced in items:
            try:
                deliver(out, produced)
            except Exception:
                # One broken request must not starve the others of their outputs.
                log.exception("delivering output of request %s failed", out.request_id)


class EngineLike(Protocol):
    """The two Engine methods a generation needs (for typing only)."""

    def abort_request(self, request_id: str) -> None: ...


class Generation:
    """Server-side state of one request, from admission to its last byte.

    Owns: the detokenizer, the queue of SSE bytes not yet handed to the transport, and the
    duty to abort the engine request once if the request ends before the engine says so.
    """

    def __init__(self, *, mailbox: OutputMailbox, engine: EngineLike,
                 request_id: str, req: GenerationRequest, tokenizer: ByteTokenizer,
                 metrics: RequestMetrics, created: int, byte_budget: int,
                 transport_buffered: Callable[[], int] | None,
                 on_overflow: Callable[[], None] | None, stream_interval: int = 1) -> None:
        self.request_id = request_id
        self.req = req
        self.created = created
        self._mailbox = mailbox
        self._engine = engine
        self._metrics = metrics
        self._detok = IncrementalDetokenizer(tokenizer, req.stop)
        self._byte_budget = byte_budget
        self._transport_buffered = transport_buffered
        self._on_overflow = on_overflow
        # Tokens per streamed event: text is held until this many tokens arrived since the
        # last event (the first token, and the end, go out at once), as vLLM's and SGLang's
        # stream_interval does.
        self._stream_interval = stream_interval
        self._held: list[str] = []
        self._held_tokens = 0
        self._events = 0
        self._wakeup = asyncio.Event()
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._last_token_time: float | None = None
        self._arrival_time: float | None = None
        self.text_parts: list[str] = []
        self.num_prompt_tokens = 0
        self.num_cached_tokens = 0
        self.num_output_tokens = 0
        self.finish_reason: str | None = None
        self.finished = False       # the response is complete (normally or by stop string)
        self.overflowed = False     # the client fell more than byte_budget behind
        self._closed = False        # no more output is wanted (finished or given up)

    # ---- engine thread -------------------------------------------------------------------

    def on_output(self, out: RequestOutput) -> None:
        self._mailbox.post(self._deliver, out)

    # ---- event loop ----------------------------------------------------------------------

    def _deliver(self, out: RequestOutput, produced: float) -> None:
        if self._closed:
            return  # output racing an abort we already issued
        self.num_prompt_tokens = out.num_prompt_tokens
        self.num_cached_tokens = out.num_cached_tokens
        self._arrival_time = out.arrival_time
        if out.new_token_ids:
            self._observe_token_times(out, produced)
            self.num_output_tokens += len(out.new_token_ids)
        text = self._detok.push(out.new_token_ids)
        if self._detok.stopped:
            # The engine knows nothing of stop strings: cut it off here.
            self._engine.abort_request(self.request_id)
            self._finish(text, "stop", produced)
        elif out.finished:
            if out.finish_reason == "abort":
                self._give_up(f"aborted by the engine after {self.num_output_tokens} tokens")
                return
            self._finish(text + self._detok.flush(), out.finish_reason, produced)
        else:
            self._held.append(text)
            self._held_tokens += len(out.new_token_ids)
            if self._events == 0 or self._held_tokens >= self._stream_interval:
                held = "".join(self._held)
                self._held, self._held_tokens = [], 0
                if held:
                    self._emit(held, None)
                    self._events += 1
        self._wakeup.set()

    def _observe_token_times(self, out: RequestOutput, produced: float) -> None:
        if self._last_token_time is None:
            first = out.first_token_time if out.first_token_time is not None else produced
            self._metrics.time_to_first_token.observe(first - out.arrival_time)
            if out.first_scheduled_time is not None:
                self._metrics.request_queue_time.observe(
                    out.first_scheduled_time - out.arrival_time)
        else:
            # One observation per output event, as vLLM does (the engine emits one token per
            # step per sequence, so this is per token here).
            self._metrics.inter_token_latency.observe(produced - self._last_token_time)
        self._last_token_time = produced

    def _finish(self, text: str, reason: str | None, produced: float) -> None:
        text = "".join(self._held) + text
        self._held, self._held_tokens = [], 0
        self.finish_reason = reason
        self.finished = True
        self._closed = True
        self._emit(text, reason)
        if self._arrival_time is not None:
            self._metrics.e2e_request_latency.observe(produced - self._arrival_time)
        self._metrics.request_success[reason or "stop"] += 1
        if self.req.stream and self.req.include_usage:
            self._queue(protocol.sse(protocol.usage_chunk(
                self.req, self.request_id, self.created, self.usage())))
        if self.req.stream:
            self._queue(protocol.SSE_DONE)

    def _emit(self, text: str, finish_reason: str | None) -> None:
        self.text_parts.append(text)
        if self.req.stream and (text or finish_reason):
            self._queue(protocol.sse(protocol.chunk(
                self.req, self.request_id, self.created, text, finish_reason)))

    def _queue(self, data: bytes) -> None:
        self._pending.append(data)
        self._pending_bytes += len(data)
        buffered = self._transport_buffered() if self._transport_buffered else 0
        if self._pending_bytes + buffered > self._byte_budget and not self.finished:
            self.overflowed = True
            self._give_up(f"client is not reading: {self._pending_bytes + buffered} bytes "
                          f"pending exceed the budget of {self._byte_budget}")
            if self._on_overflow is not None:
                self._on_overflow()

    def _give_up(self, why: str, level: int = logging.WARNING) -> None:
        if self._closed:
            return
        self._closed = True
        self._pending.clear()
        self._pending_bytes = 0
        self._engine.abort_request(self.request_id)
        self._metrics.request_success["abort"] += 1
        log.log(level, "request %s cancelled: %s", self.request_id, why)
        self._wakeup.set()

    def close(self, why: str) -> None:
        """The response is over for whatever reason; abort the engine request if it runs.

        A client leaving early is routine (vLLM logs it at INFO too), hence the level.
        """
        self._give_up(why, logging.INFO)

    @property
    def done(self) -> bool:
        return self._closed

    async def next_bytes(self) -> bytes:
        """Wait for SSE bytes to send; empty bytes once the generation is over."""
        while not self._pending and not self._closed:
            self._wakeup.clear()
            await self._wakeup.wait()
        data = b"".join(self._pending)
        self._pending.clear()
        self._pending_bytes = 0
        return data

    async def wait_done(self) -> None:
        while not self._closed:
            self._wakeup.clear()
            await self._wakeup.wait()

    def text(self) -> str:
        return "".join(self.text_parts)

    def usage(self) -> dict[str, Any]:
        return protocol.usage(self.num_prompt_tokens, self.num_output_tokens,
                              self.num_cached_tokens)
