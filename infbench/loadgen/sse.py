"""Turn a recorded stream (reads with timestamps) into SSE events and request facts.

Runs after the request ended, off the hot path. Per event it does only byte searches; JSON is
parsed for at most a handful of events per request (the first, for the response id; the last
few, for usage and finish reason; any that look like an error), unless the caller needs the
generated text (multi-turn conversations).

An event's time is when the read that completed it returned. Several events completed by the
same read get the same time; content events among them after the first are marked
`coalesced`, so a 0 ms ITL that only reflects read batching is never passed off as real.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# Keys whose non-empty string value means the event carries generated output.
_CONTENT_KEYS = (b'"text":', b'"content":', b'"reasoning_content":', b'"arguments":')
_VALID_FIELDS = (b"data:", b"event:", b"id:", b"retry:", b":")


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
    num_content: int = 0
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

    @property
    def output_tokens(self) -> tuple[int, str]:
        """Output token count and where it came from (`usage` or `counted`)."""
        if self.usage and isinstance(self.usage.get("completion_tokens"), int):
            return self.usage["completion_tokens"], "usage"
        return self.num_content, "counted"


class StreamParser:
    """Incremental: `feed()` reads in any slices (the runner yields to the loop between them)."""

    def __init__(self, need_text: bool = False) -> None:
        self.out = ParsedStream()
        self._need_text = need_text
        self._pending = b""
        self._read_idx = -1
        self._last_content_read = -2
        self._data_payloads: list[bytes] = []  # first and last few only
        self._tail: list[bytes] = []
        self._bad_structure: str | None = None

    def feed(self, t_ns: int, data: bytes) -> None:
        out = self.out
        self._read_idx += 1
        ridx = self._read_idx
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
        out = self.out
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
            elif not (payload.startswith(b"{") and payload.endswith(b"}")):
                if self._bad_structure is None:
                    self._bad_structure = f"event {seq} is not a JSON object: {payload[:60]!r}"
            else:
                content = has_content(payload)
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


def parse_reads(read_ns: list[int], reads: list[bytes], need_text: bool = False) -> ParsedStream:
    """Parse a whole recorded stream at once (tests and small streams)."""
    p = StreamParser(need_text)
    for t, data in zip(read_ns, reads, strict=True):
        p.feed(t, data)
    return p.finish(b"".join(reads))




def _content_hits(piece: bytes) -> np.ndarray:
    """Offsets of every content key whose value is a non-empty string (as `has_content`).

    One `split` per key present and array arithmetic, instead of a search per event.
    """
    arr = np.frombuffer(piece, dtype=np.uint8)
    last = len(arr) - 1
    found = []
    for key in _CONTENT_KEYS:
        if key not in piece:
            continue
        parts = piece.split(key)
        lens = np.fromiter(map(len, parts), np.int64, len(parts))[:-1] + len(key)
        after = np.cumsum(lens)  # just past each occurrence of the key
        j = after
        if key + b" " in piece:
            while True:  # JSON may put spaces between the colon and the value
                space = arr[np.minimum(j, last)] == 32
                if not space.any():
                    break
                j = j + space
        j = np.minimum(j, last - 1)  # a key at the very end has no value: arr[last] is a newline
        ok = (arr[j] == 34) & (arr[j + 1] != 34)
        found.append(after[ok])
    return np.concatenate(found) if found else np.empty(0, np.int64)
_DONE_EVENT = b"data: [DONE]"
# Events without output beyond this many in a piece are checked for an error in one scan.
_MAX_QUIET_EVENTS = 16
_OFFSETS = np.arange(64)


def _content_flags(piece: bytes, arr: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """`has_content` of each `data: {...}` event between `starts` and `ends`.

    A stream's events are nearly all alike, so the content key is looked for where the first
    event that has one keeps it (same offset from the event start), with a few array
    comparisons instead of scans of the whole piece. Events where it is not there, or whose
    value there is empty, are decided one by one by `has_content`; when that is more than a
    few, the whole-piece scan (`_content_hits`) is cheaper.
    """
    n = len(starts)
    flags = np.zeros(n, dtype=bool)
    for i in range(min(n, 4)):  # the template: the first event with output (role-only first deltas)
        ev = piece[starts[i] : ends[i]]
        for key in _CONTENT_KEYS:
            k = ev.find(key)
            j = k + len(key)
            if k < 0 or ev[j : j + 1] != b'"' or ev[j + 1 : j + 2] == b'"':
                continue
            # key, its value's opening quote and first character, at the same offset in each event
            pat = np.frombuffer(key + b'"', dtype=np.uint8)
            pos = np.minimum(starts + k, len(arr) - len(pat) - 1)
            win = arr[pos[:, None] + _OFFSETS[: len(pat) + 1]]
            flags = (win[:, :-1] == pat).all(axis=1) & (win[:, -1] != 34) & (starts + j + 1 < ends)
            break
        if flags.any():
            break
    rest = np.flatnonzero(~flags)
    if len(rest) > _MAX_QUIET_EVENTS:
        hits = _content_hits(piece)
        flags = np.zeros(n, dtype=bool)
        if len(hits):
            flags[np.searchsorted(ends, hits, side="right")] = True
        return flags
    for i in rest.tolist():
        flags[i] = has_content(piece[starts[i] + 6 : ends[i] - 2])
    return flags
# Bodies are parsed in pieces of about this size, cut at event boundaries, with a yield to
# the event loop between pieces (a 32K-token stream must not freeze the other streams).
FAST_PIECE_BYTES = 256 << 10

# Offsets of event-completing bytes -> (arrival ns, read number of each, reads in the body).
ArrivalFn = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray, int]]


@dataclass(slots=True)
class _Columns:
    seq: np.ndarray
    t_ns: np.ndarray
    read_idx: np.ndarray
    nbytes: np.ndarray
    content: np.ndarray


class FastParser:
    """Whole-body parsing for the common stream shape, in C-level passes instead of per event.

    Applies when every event is one `data: ` line holding a JSON object (or `[DONE]`), with
    `\\n\\n` terminators, no `\\r`, no error object. `feed()` returns False when a piece is not
    of that shape; the caller then parses the whole stream with `StreamParser`, which handles
    everything else (and classifies what is wrong). The result is identical either way.
    """

    def __init__(self, body: bytes, arrival: ArrivalFn) -> None:
        self.body = body
        self._arrival = arrival
        self._ends: list[np.ndarray] = []  # exclusive end offset of each event, terminator included
        self._nbytes: list[np.ndarray] = []
        self._content: list[np.ndarray] = []
        self._objects: list[bytes] = []  # first and last few JSON payloads
        self._tail: list[bytes] = []
        self._done = False
        self.pos = 0

    def pieces(self) -> int:
        return max(1, -(-len(self.body) // FAST_PIECE_BYTES))

    def feed(self) -> bool:
        """Parse the next piece; False if the stream needs the general parser.

        Whole-piece scans are what cost here (a few microseconds per 10 KB each), so there
        are few: one for CR, one for the newlines (whose positions give the events), one for
        the event boundaries; content is read at each event's own offsets.
        """
        body, start = self.body, self.pos
        stop = len(body)
        if stop - start > FAST_PIECE_BYTES:
            cut = body.rfind(b"\n\n", start, start + FAST_PIECE_BYTES)
            stop = cut + 2 if cut >= 0 else stop
        piece = body[start:stop]
        self.pos = stop
        if self._done or not piece.endswith(b"\n\n") or b"\r" in piece:
            return False  # (a final event without its terminator: the general parser says so)
        arr = np.frombuffer(piece, dtype=np.uint8)
        nl = np.flatnonzero(arr == 10)
        # Newlines may only come in pairs, the terminators: then every other one ends an event.
        # (Two pairs back to back, an empty event, fail the boundary count below.)
        if len(nl) % 2 or not (arr[nl[0::2] + 1] == 10).all():
            return False
        ends = nl[1::2] + 1
        n = len(ends)
        starts = np.concatenate(([0], ends[:-1]))
        # Every event is `data: {...}`, except a last `data: [DONE]` at the very end.
        done = piece.endswith(b"\n\ndata: [DONE]\n\n") or piece == b"data: [DONE]\n\n"
        if done and stop != len(body):
            return False
        n_obj = n - done
        if n_obj and not (piece.startswith(b"data: {")
                          and piece.count(b"}\n\ndata: {") == n_obj - 1
                          and piece[ends[n_obj - 1] - 3 : ends[n_obj - 1]] == b"}\n\n"):
            return False
        content = np.zeros(n, dtype=bool)
        if n_obj:
            content[:n_obj] = _content_flags(piece, arr, starts[:n_obj], ends[:n_obj])
            # In-stream errors are objects without output: the general parser reads them.
            quiet = np.flatnonzero(~content[:n_obj])
            if len(quiet) > _MAX_QUIET_EVENTS:
                if b'"error"' in piece:
                    return False
            elif any(b'"error"' in piece[starts[i] : ends[i]] for i in quiet.tolist()):
                return False
        self._done = done
        if n_obj:
            if not self._objects:
                self._objects.append(piece[starts[0] + 6 : ends[0] - 2])
            last = [piece[starts[i] + 6 : ends[i] - 2] for i in range(max(0, n_obj - 3), n_obj)]
            self._tail = [*self._tail, *last][-3:]
        self._ends.append(ends + start)
        self._nbytes.append(ends - starts - 2)
        self._content.append(content)
        return True

    @property
    def finished(self) -> bool:
        return self.pos >= len(self.body)

    def finish(self) -> ParsedStream:
        out = ParsedStream()
        ends = np.concatenate(self._ends) if self._ends else np.empty(0, np.int64)
        n = len(ends)
        t_ns, read_idx, num_reads = self._arrival(ends - 1)
        content = np.concatenate(self._content) if self._content else np.zeros(0, bool)
        c_idx = np.flatnonzero(content)
        coalesced = np.zeros(n, dtype=bool)
        if len(c_idx) > 1:
            coalesced[c_idx[1:]] = read_idx[c_idx[1:]] == read_idx[c_idx[:-1]]
        out.seq = np.arange(n, dtype=np.int32)
        out.t_ns = t_ns
        out.read_idx = read_idx
        out.nbytes = np.concatenate(self._nbytes) if self._nbytes else np.empty(0, np.int64)
        out.content = content
        out.coalesced = coalesced
        out.num_reads = num_reads
        out.num_content = len(c_idx)
        out.num_coalesced = int(np.count_nonzero(coalesced))
        out.done = self._done
        if n:
            out.first_chunk_ns, out.last_chunk_ns = int(t_ns[0]), int(t_ns[-1])
        if len(c_idx):
            out.first_content_ns, out.last_content_ns = int(t_ns[c_idx[0]]), int(t_ns[c_idx[-1]])
        out.response_bytes = len(self.body)
        try:
            self.body.decode("utf-8")
        except UnicodeDecodeError as exc:
            out.error_class, out.error_message = "invalid_utf8", f"invalid UTF-8 at byte {exc.start}"
        _facts(out, [*self._objects, *self._tail], None)
        if out.error_class is None and not out.done and out.finish_reason is None:
            out.error_class, out.error_message = "truncated_sse", "stream closed before [DONE]"
        return out
