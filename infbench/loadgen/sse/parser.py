"""Turn a recorded stream (reads with timestamps) into SSE events and request facts.

Runs after the request ended, off the hot path. Per event it does only byte searches; JSON is
parsed for at most a handful of events per request (the first, for the response id; the last
few, for usage and finish reason; any that look like an error), unless the caller needs the
generated text (multi-turn conversations).

An event's time is when the read that completed it returned. Several events completed by the
same read get the same time; content events among them after the first are marked
`coalesced` (the ITL statistics spread such a read's gap over its events, see the store's
`itl` view). Besides the content bounds, a stream records when its last event carrying
`choices` arrived (where e2e ends, as in vLLM's `bench serve`), its usage event and `[DONE]`:
a server may send the last two long after the last token.
"""

from __future__ import annotations

import json
from typing import Any

from infbench.loadgen.sse.events import (
    ParsedStream,
    _facts,
    carries_choices,
    carries_usage,
    has_content,
)
from infbench.loadgen.sse.fast import FAST_PIECE_BYTES, ArrivalFn, FastParser

__all__ = ["FAST_PIECE_BYTES", "ArrivalFn", "FastParser", "ParsedStream", "StreamParser", "carries_choices",
           "carries_usage", "has_content", "parse_reads"]

_VALID_FIELDS = (b"data:", b"event:", b"id:", b"retry:", b":")


class StreamParser:
    """Incremental: `feed()` reads in any slices (the runner yields to the loop between them)."""

    def __init__(self, need_text: bool = False) -> None:
        self.out = ParsedStream()
        self._need_text = need_text
        self._pending = b""
        self._read_idx = -1
        self._last_content_read = -2
        self._first_content_read = -2
        self._last_t = 0
        self._data_payloads: list[bytes] = []  # first and last few only
        self._tail: list[bytes] = []
        self._bad_structure: str | None = None

    def feed(self, t_ns: int, data: bytes) -> None:
        out = self.out
        self._read_idx += 1
        ridx = self._read_idx
        self._last_t = t_ns
        out.num_reads += 1
        out.response_bytes += len(data)
        if b"\r" in data or self._pending.endswith(b"\r"):
            data = (self._pending + data).replace(b"\r\n", b"\n")
            self._pending = b""
        buf = self._pending + data if self._pending else data
        parts = buf.split(b"\n\n")
        self._pending = parts.pop()
        for ev in parts:
            if not ev:
                continue
            self._event(ev, t_ns, ridx)

    def _event(self, ev: bytes, t_ns: int, ridx: int) -> None:
        # Any: this parser's ParsedStream holds lists (its columns are arrays only when
        # FastParser fills it), which the type of the field cannot say
        out: Any = self.out
        seq = len(out.seq)
        payload = b""
        if ev.startswith(b"data:") and b"\n" not in ev:
            payload = ev[5:].lstrip(b" ")
        else:  # several fields (event:, id:, multi-line data): the slow, general path
            data_lines = []
            for ln in ev.split(b"\n"):
                if ln.startswith(b"data:"):
                    data_lines.append(ln[5:].lstrip(b" "))
                elif not ln.startswith(_VALID_FIELDS) and self._bad_structure is None:
                    self._bad_structure = f"event {seq} is not an SSE field: {ln[:60]!r}"
            payload = b"\n".join(data_lines)
        content = False
        if payload:
            if payload == b"[DONE]":
                out.done = True
                out.done_ns = t_ns
            elif not (payload.startswith(b"{") and payload.endswith(b"}")):
                if self._bad_structure is None:
                    self._bad_structure = f"event {seq} is not a JSON object: {payload[:60]!r}"
            else:
                content = has_content(payload)
                if carries_choices(payload):
                    out.last_choices_ns = t_ns
                if carries_usage(payload):
                    out.usage_ns = t_ns
                if not self._data_payloads:
                    self._data_payloads.append(payload)
                self._tail.append(payload)
                if len(self._tail) > 3:
                    del self._tail[0]
                if not content and b'"error"' in payload:
                    self._maybe_error(payload)
                if content and self._need_text:
                    self._collect_text(payload)
        out.seq.append(seq)
        out.t_ns.append(t_ns)
        out.read_idx.append(ridx)
        out.nbytes.append(len(ev))
        out.content.append(content)
        if out.first_chunk_ns is None:
            out.first_chunk_ns = t_ns
        out.last_chunk_ns = t_ns
        if content:
            coalesced = ridx == self._last_content_read
            out.coalesced.append(coalesced)
            out.num_coalesced += coalesced
            self._last_content_read = ridx
            out.num_content += 1
            if out.first_content_ns is None:
                out.first_content_ns = t_ns
                self._first_content_read = ridx
            if ridx != self._first_content_read:
                out.num_itl += 1
            out.last_content_ns = t_ns
        else:
            out.coalesced.append(False)

    def _maybe_error(self, payload: bytes) -> None:
        try:
            obj = json.loads(payload)
        except ValueError:
            return
        err = obj.get("error") if isinstance(obj, dict) else None
        if err is None and isinstance(obj, dict) and obj.get("object") == "error":
            err = obj
        if err is not None and self.out.error_class is None:
            msg = err.get("message") if isinstance(err, dict) else str(err)
            self.out.error_class = "server_error"
            self.out.error_message = str(msg)[:300]

    def _collect_text(self, payload: bytes) -> None:
        try:
            obj = json.loads(payload)
        except ValueError:
            return
        for choice in obj.get("choices") or ():
            delta = choice.get("delta")
            piece = delta.get("content") if isinstance(delta, dict) else choice.get("text")
            if isinstance(piece, str):
                self.out.text_parts.append(piece)

    def finish(self, joined_body: bytes | None = None) -> ParsedStream:
        """Close the stream: classify structural problems, read id/usage/finish reason."""
        out = self.out
        if self._pending.strip():
            # Bytes after the last blank line: a final event without its terminator.
            if not out.done and self._pending.strip() == b"data: [DONE]":
                out.done = True
                out.done_ns = self._last_t
            elif self._bad_structure is None and out.error_class is None:
                out.error_class, out.error_message = "truncated_sse", "stream ended inside an event"
        if joined_body is not None:
            try:
                joined_body.decode("utf-8")
            except UnicodeDecodeError as exc:
                out.error_class = out.error_class or "invalid_utf8"
                out.error_message = out.error_message or f"invalid UTF-8 at byte {exc.start}"
        _facts(out, [*self._data_payloads, *self._tail], self._bad_structure)
        if out.error_class is None and not out.done and out.finish_reason is None:
            out.error_class, out.error_message = "truncated_sse", "stream closed before [DONE]"
        return out


def parse_reads(read_ns: list[int], reads: list[bytes], need_text: bool = False) -> ParsedStream:
    """Parse a whole recorded stream at once (tests and small streams)."""
    p = StreamParser(need_text)
    for t, data in zip(read_ns, reads, strict=True):
        p.feed(t, data)
    return p.finish(b"".join(reads))
