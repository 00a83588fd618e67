"""What a stream's SSE events are and carry, found by byte searches (no JSON parsing), and
the per-request facts both parsers produce (`ParsedStream`).

Shared by the per-event parser (`infbench.loadgen.sse.parser`) and the array parser
(`infbench.loadgen.sse.fast`), which must give identical results.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

_CONTENT_KEYS = (b'"text":', b'"content":', b'"reasoning_content":', b'"arguments":')
_VALID_FIELDS = (b"data:", b"event:", b"id:", b"retry:", b":")


def _has_value(payload: bytes, key: bytes, opener: bytes, empty: bytes) -> int:
    """Offset of the last `key` whose value opens with `opener` and is not `empty` right
    away, else -1 (searched from the end: in a stream's body the wanted event is near it).
    As in `has_content`, an unescaped `"key":` cannot occur inside a JSON string."""
    i = payload.rfind(key)
    while i >= 0:
        j = i + len(key)
        while payload[j : j + 1] == b" ":
            j += 1
        if payload[j : j + 1] == opener:
            j += 1
            while payload[j : j + 1] == b" ":
                j += 1
            if payload[j : j + 1] != empty:
                return i
        i = payload.rfind(key, 0, i)
    return -1


_CHOICES, _USAGE = b'"choices":', b'"usage":'


def carries_choices(payload: bytes) -> bool:
    """True when an event has a non-empty `choices` array (vLLM's `bench serve` ends a
    request's latency at the last such event; a usage event has `"choices": []`)."""
    return _has_value(payload, _CHOICES, b"[", b"]") >= 0


def carries_usage(payload: bytes) -> bool:
    """True when an event has a `usage` object (not `null`)."""
    return _has_value(payload, _USAGE, b"{", b"") >= 0


def has_content(payload: bytes) -> bool:
    """True when an event's JSON has a non-empty generated-text value, without parsing it.

    Inside JSON strings quotes are escaped, so a key pattern like `"text":` can only match a
    real key.
    """
    for key in _CONTENT_KEYS:
        i = payload.find(key)
        while i >= 0:
            j = i + len(key)
            while payload[j : j + 1] == b" ":
                j += 1
            if payload[j : j + 1] == b'"' and payload[j + 1 : j + 2] != b'"':
                return True
            i = payload.find(key, j)
    return False


@dataclass(slots=True)
class ParsedStream:
    """Per-event columns (lists from `StreamParser`, arrays from `FastParser`) and per-request
    facts of one stream."""

    seq: list[int] | np.ndarray = field(default_factory=list)
    t_ns: list[int] | np.ndarray = field(default_factory=list)
    read_idx: list[int] | np.ndarray = field(default_factory=list)
    nbytes: list[int] | np.ndarray = field(default_factory=list)
    content: list[bool] | np.ndarray = field(default_factory=list)
    coalesced: list[bool] | np.ndarray = field(default_factory=list)
    num_reads: int = 0
    response_bytes: int = 0
    done: bool = False
    first_chunk_ns: int | None = None
    first_content_ns: int | None = None
    last_content_ns: int | None = None
    last_chunk_ns: int | None = None
    last_choices_ns: int | None = None  # the last event with a non-empty `choices`: e2e ends here
    usage_ns: int | None = None  # the last event with a `usage` object
    done_ns: int | None = None  # `[DONE]`
    num_content: int = 0
    # Content events after the first content read: the ones with an ITL (see `mean_itl_ns`).
    num_itl: int = 0
    num_coalesced: int = 0
    response_id: str | None = None
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    error_class: str | None = None
    error_message: str | None = None
    text_parts: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(self.text_parts)

    def mean_itl_ns(self) -> float | None:
        """Mean ITL of this stream as the store's `itl` view defines it: each read's gap since
        the previous content read, spread over the content events it delivered. The spread
        values add up to the time from the first content read to the last one."""
        if not self.num_itl or self.first_content_ns is None or self.last_content_ns is None:
            return None
        return (self.last_content_ns - self.first_content_ns) / self.num_itl

    @property
    def output_tokens(self) -> tuple[int, str]:
        """Output token count and where it came from (`usage` or `counted`)."""
        if self.usage and isinstance(self.usage.get("completion_tokens"), int):
            return self.usage["completion_tokens"], "usage"
        return self.num_content, "counted"


def _facts(out: ParsedStream, payloads: list[bytes], bad_structure: str | None) -> None:
    """Response id, usage and finish reason from the first and last JSON events; an event
    that does not decode (or an earlier structural problem) makes the stream malformed."""
    for payload in payloads:
        try:
            obj = json.loads(payload)
        except ValueError as exc:
            if bad_structure is None:
                bad_structure = f"undecodable JSON event: {exc}"
            continue
        if not isinstance(obj, dict):
            continue
        if out.response_id is None and isinstance(obj.get("id"), str):
            out.response_id = obj["id"]
        if isinstance(obj.get("usage"), dict):
            out.usage = obj["usage"]
        for choice in obj.get("choices") or ():
            if isinstance(choice, dict) and choice.get("finish_reason"):
                out.finish_reason = choice["finish_reason"]
    if bad_structure is not None and out.error_class is None:
        out.error_class, out.error_message = "malformed_sse", bad_structure
