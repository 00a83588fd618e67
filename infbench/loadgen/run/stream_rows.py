"""A finished stream into what the store keeps: parsing it, and its `requests` row.

Parsing runs off the hot path (the runner's recorder), in slices that yield to the event
loop, so a long stream never holds up the reads of the others and their stamps.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any

from infbench.loadgen.http.client import RawResponse, arrival_times, retime
from infbench.loadgen.sse.parser import FastParser, ParsedStream, StreamParser
from infbench.loadgen.workloads.base import RequestSpec

PARSE_SLICE = 4096  # reads parsed between yields to the event loop (per-event parser)
# Below this many body bytes (some 30 events) the per-event parser is cheaper than the array
# parser's fixed cost (both give the same result; tests/unit/loadgen/test_fast_parse.py).
FAST_MIN_BYTES = 4096


def fast_parser(raw: RawResponse, need_text: bool) -> FastParser | None:
    """The array parser for streams long enough to repay its fixed cost, else None."""
    if need_text or not raw.reads:
        return None
    body = raw.reads[0] if len(raw.reads) == 1 else b"".join(raw.reads)
    if len(body) < FAST_MIN_BYTES:
        return None
    return FastParser(body, functools.partial(arrival_times, raw))


def parse_now(raw: RawResponse, need_text: bool, try_fast: bool = True) -> ParsedStream:
    fast = fast_parser(raw, need_text) if try_fast else None
    if fast is not None:
        while fast.feed():
            if fast.finished:
                return fast.finish()
    read_ns, reads = retime(raw)
    parser = StreamParser(need_text)
    for t, data in zip(read_ns, reads, strict=True):
        parser.feed(t, data)
    return parser.finish(b"".join(reads))


async def parse_stream(raw: RawResponse, need_text: bool) -> ParsedStream:
    fast = fast_parser(raw, need_text)
    if fast is not None:
        while fast.feed():
            if fast.finished:
                return fast.finish()
            await asyncio.sleep(0)  # a 32K-token stream must not freeze the other streams' clocks
    read_ns, reads = retime(raw)
    if len(reads) <= PARSE_SLICE:
        return parse_now(raw, need_text, try_fast=False)
    parser = StreamParser(need_text)
    for i in range(0, len(reads), PARSE_SLICE):
        for t, data in zip(read_ns[i : i + PARSE_SLICE], reads[i : i + PARSE_SLICE], strict=True):
            parser.feed(t, data)
        await asyncio.sleep(0)
    return parser.finish(b"".join(reads))


def request_row(idx: int, spec: RequestSpec, intended_ns: int, raw: RawResponse, p: ParsedStream, *,
                t0: int, warmup_s: float, error_class: str | None, error_message: str | None) -> dict[str, Any]:
    """The request's `requests` row (times relative to the run's start `t0`)."""
    out_tokens, out_source = p.output_tokens
    usage = p.usage or {}
    details = usage.get("prompt_tokens_details") or {}
    prompt_tokens = usage.get("prompt_tokens")
    if not isinstance(prompt_tokens, int) or isinstance(prompt_tokens, bool):
        prompt_tokens = None

    def rel(t: int | None) -> int | None:
        return None if t is None or t == 0 else t - t0

    return {
        "request_idx": idx, "label": spec.label,
        "phase": "warmup" if intended_ns - t0 < warmup_s * 1e9 else "measure",
        "conversation_id": spec.conversation_id, "turn": spec.turn,
        "intended_send_ns": intended_ns - t0, "send_ns": rel(raw.send_ns),
        "headers_ns": rel(raw.headers_ns), "first_chunk_ns": rel(p.first_chunk_ns),
        "first_content_ns": rel(p.first_content_ns), "last_content_ns": rel(p.last_content_ns),
        "last_chunk_ns": rel(p.last_chunk_ns), "end_ns": rel(raw.end_ns),
        "last_choices_ns": rel(p.last_choices_ns), "usage_ns": rel(p.usage_ns), "done_ns": rel(p.done_ns),
        "status_code": raw.status, "error_class": error_class, "error_message": error_message,
        "target_input_tokens": spec.target_input_tokens,
        "prompt_tokens": prompt_tokens,
        "prompt_tokens_source": "usage" if prompt_tokens is not None else None,
        "max_tokens": spec.max_tokens,
        "output_tokens": out_tokens if raw.status == 200 else 0,
        "output_tokens_source": out_source if raw.status == 200 else None,
        "cached_tokens": details.get("cached_tokens") if isinstance(details, dict) else None,
        "num_chunks": len(p.seq), "num_content_chunks": p.num_content, "num_reads": p.num_reads,
        "coalesced_chunks": p.num_coalesced, "response_bytes": p.response_bytes,
        "finish_reason": p.finish_reason, "response_id": p.response_id,
        "server_request_id": raw.server_request_id,
        "tenant": spec.tenant, "adapter": spec.model,
    }
