"""The array parser: a whole stream body in C-level passes instead of per event (`FastParser`).

The per-event parser (`infbench.loadgen.sse.parser.StreamParser`) handles every stream; this one
handles the common shape faster and gives the identical result
(tests/unit/loadgen/test_fast_parse.py).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from infbench.loadgen.sse.events import (
    _CHOICES,
    _CONTENT_KEYS,
    _USAGE,
    ParsedStream,
    _facts,
    _has_value,
    has_content,
)


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
            if k < 0:
                continue
            j = k + len(key)
            while ev[j : j + 1] == b" ":  # `"text": "..."` (Python's json.dumps) as well as `"text":"..."`
                j += 1
            if ev[j : j + 1] != b'"' or ev[j + 1 : j + 2] == b'"' or j + 2 - k > len(_OFFSETS):
                continue
            # key, the spaces after it, its value's opening quote and first character, at the same
            # offset in each event
            pat = np.frombuffer(ev[k : j + 1], dtype=np.uint8)
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
        self._events = 0  # events in the pieces parsed so far
        self._last_choices = -1  # event index of the last one carrying choices, usage
        self._usage = -1
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
        # One reverse search per key; the wanted events are the piece's last few as a rule.
        for key, opener, empty, attr in ((_CHOICES, b"[", b"]", "_last_choices"), (_USAGE, b"{", b"", "_usage")):
            off = _has_value(piece, key, opener, empty)
            if off >= 0:
                setattr(self, attr, self._events + int(np.searchsorted(ends, off, side="right")))
        self._events += n
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
            out.num_itl = int(np.count_nonzero(read_idx[c_idx] != read_idx[c_idx[0]]))
        if self._last_choices >= 0:
            out.last_choices_ns = int(t_ns[self._last_choices])
        if self._usage >= 0:
            out.usage_ns = int(t_ns[self._usage])
        if self._done:
            out.done_ns = int(t_ns[-1])
        out.response_bytes = len(self.body)
        try:
            self.body.decode("utf-8")
        except UnicodeDecodeError as exc:
            out.error_class, out.error_message = "invalid_utf8", f"invalid UTF-8 at byte {exc.start}"
        _facts(out, [*self._objects, *self._tail], None)
        if out.error_class is None and not out.done and out.finish_reason is None:
            out.error_class, out.error_message = "truncated_sse", "stream closed before [DONE]"
        return out
