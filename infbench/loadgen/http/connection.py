"""One keep-alive HTTP/1.1 connection reading a response into an `Exchange`.

Why not aiohttp on the hot path: its parser hands every HTTP chunk to Python three times
(begin, feed, end), and every SSE event is one HTTP chunk, so at 100k events/s those calls
alone take a quarter of a core. Here a socket read costs one kernel stamp and one C-level
`split` of the chunk framing, checked size by size (`_split_chunks`; anything unusual is
walked chunk by chunk); no task wakes until the body has ended.

Framing understood: `Transfer-Encoding: chunked`, `Content-Length` or the connection
closing; interim 1xx responses skipped; `Connection: close` honoured. The pool that owns
these connections is `http1.Pool`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

_MAX_HEAD = 64 << 10  # status line + headers
_MAX_LINE = 4 << 10  # a chunk-size or trailer line
_NO_BODY = {204, 304}


class ProtocolError(Exception):
    """The server's bytes are not valid HTTP/1.1 framing."""


class Exchange:
    """What one response delivered, filled in by the connection as reads arrive.

    Times are `time.monotonic_ns()` (kernel arrival stamps where the socket has them).
    `recv_log` holds flat (arrival ns, body bytes before, body bytes after) per read that
    brought body bytes; `parts` the decoded body, in pieces.
    Ownership: created by `Pool.send` for one request; the connection writes into it until
    the response ends or fails, then drops it, so a reused connection never logs into it.
    """

    __slots__ = ("status", "headers", "headers_ns", "parts", "recv_log", "body_bytes",
                 "last_ns", "error_class", "error_message", "ended", "on_end")

    def __init__(self) -> None:
        self.status: int | None = None
        self.headers: dict[str, str] = {}
        self.headers_ns: int | None = None
        self.parts: list[bytes] = []
        self.recv_log: list[int] = []
        self.body_bytes = 0
        self.last_ns = 0
        self.error_class: str | None = None
        self.error_message: str | None = None
        self.ended = False
        self.on_end: Callable[[], None] | None = None

    def body(self) -> bytes:
        return self.parts[0] if len(self.parts) == 1 else b"".join(self.parts)


# Body framing of the response being read.
_IDLE, _HEAD, _CHUNKED, _LENGTH, _UNTIL_CLOSE = range(5)


class Connection(asyncio.Protocol):
    """One TCP (or TLS) connection to the target.

    Ownership: idle connections belong to the pool; `Pool.send` takes one out, attaches an
    `Exchange`, and puts it back only when the response ended cleanly with the connection
    still reusable. Bytes that arrive while no exchange is attached (the server talking out
    of turn) make the connection unusable.
    """

    def __init__(self, stamp: Callable[[], int]) -> None:
        self._stamp = stamp
        self.transport: asyncio.Transport | None = None
        self.reusable = False
        self.ex: Exchange | None = None
        self._state = _IDLE
        self._head = b""
        self._left = 0  # chunked: payload bytes of the current chunk still to come; length: body bytes
        self._crlf = False  # chunked: the CRLF after a chunk's payload is still to come
        self._trailers = False  # chunked: the last chunk was seen, trailer lines follow
        self._carry = b""  # chunked: a size or trailer line cut by the read boundary
        self._close_after = False

    # -- asyncio callbacks -------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # a stream connection's is an asyncio.Transport; the callback's signature names the base class
        self.reusable = True

    def connection_lost(self, exc: BaseException | None) -> None:
        self.reusable = False
        ex = self.ex
        if ex is None:
            return
        if self._state == _UNTIL_CLOSE:
            self._finish()
            return
        what = f"{type(exc).__name__}: {exc}" if exc else "the server closed the connection"
        if self._state in (_IDLE, _HEAD) or not ex.body_bytes:
            where = "before the response" if ex.status is None else "before the body"
            self._fail("connection_reset", f"{what} {where}")
        else:
            self._fail("truncated_sse", f"{what} after {ex.body_bytes} body bytes")

    def data_received(self, data: bytes) -> None:
        t = self._stamp()
        ex = self.ex
        if ex is None:
            self.reusable = False
            return
        ex.last_ns = t
        if self._state == _CHUNKED and not (self._left or self._crlf or self._trailers or self._carry):
            # The most common read of a live stream: exactly one whole chunk (one event).
            j = data.find(b"\r\n")
            size = _HEX.get(data[:j]) if j > 0 else None
            before = ex.body_bytes
            if size and j + 4 + size == len(data) and data.endswith(b"\r\n"):
                ex.parts.append(data[j + 2 : -2])
                ex.body_bytes = before + size
                ex.recv_log += (t, before, before + size)
                return
            # Next most common: several whole chunks (the reader fell behind a little).
            end = _split_chunks(ex, data, 0)
            if end is not None:
                if ex.body_bytes > before:
                    ex.recv_log += (t, before, ex.body_bytes)
                if end < 0:  # that was the last chunk
                    if self._close_after:
                        self.reusable = False
                    self._finish()
                return
        try:
            self._received(ex, data, t)
        except ProtocolError as exc:
            self._fail("malformed_http", str(exc))
            self.reusable = False
            if self.transport is not None:
                self.transport.abort()

    # -- requests ------------------------------------------------------------------------
    def send(self, request: bytes, ex: Exchange) -> None:
        assert self.ex is None and self.transport is not None
        self.ex = ex
        self._state = _HEAD
        self._head = b""
        self._close_after = False
        self.transport.write(request)

    def detach(self) -> None:
        """Drop the exchange (cancelled or timed out mid-response): the connection is done."""
        if self.ex is not None:
            self.ex = None
            self.reusable = False
            if self.transport is not None:
                self.transport.abort()

    # -- parsing ---------------------------------------------------------------------------
    def _received(self, ex: Exchange, data: bytes, t: int) -> None:
        pos = 0
        while self._state == _HEAD:
            head = self._head + data if self._head else data
            end = head.find(b"\r\n\r\n")
            if end < 0:
                if len(head) > _MAX_HEAD:
                    raise ProtocolError(f"response head longer than {_MAX_HEAD} bytes")
                self._head = head
                return
            self._head = b""
            data, pos = head, end + 4
            if self._start_body(ex, head[:end], t):
                break
            data, pos = data[pos:], 0  # an interim 1xx response: the real one follows
        before = ex.body_bytes
        state = self._state
        if state == _CHUNKED:
            pos = self._chunked(ex, data, pos)
        elif state == _LENGTH:
            take = min(self._left, len(data) - pos)
            if take:
                ex.parts.append(data[pos : pos + take] if pos or take < len(data) else data)
                ex.body_bytes += take
                self._left -= take
                pos += take
            if not self._left:
                self._state = _IDLE
        elif state == _UNTIL_CLOSE and pos < len(data):
            ex.parts.append(data[pos:] if pos else data)
            ex.body_bytes += len(data) - pos
            pos = len(data)
        if ex.body_bytes > before:
            ex.recv_log.extend((t, before, ex.body_bytes))
        if self._state == _IDLE:
            if pos < len(data) or self._close_after:
                self.reusable = False  # bytes beyond the response, or the server said close
            self._finish()

    def _start_body(self, ex: Exchange, head: bytes, t: int) -> bool:
        """Parse status line and headers; False for an interim (1xx) response."""
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise ProtocolError(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
        status = int(parts[1])
        if 100 <= status < 200:
            return False
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep:
                raise ProtocolError(f"malformed header line: {line[:80]!r}")
            key = name.strip().lower()
            value = value.strip()
            headers[key] = f"{headers[key]}, {value}" if key in headers else value
        ex.status, ex.headers, ex.headers_ns = status, headers, t
        self._close_after = "close" in headers.get("connection", "").lower() or parts[0] == "HTTP/1.0"
        te = headers.get("transfer-encoding", "").lower()
        if status in _NO_BODY:
            self._state = _IDLE
        elif te:
            if te.rsplit(",", 1)[-1].strip() != "chunked":
                raise ProtocolError(f"unsupported transfer-encoding {te!r}")
            self._state, self._left, self._crlf, self._trailers, self._carry = _CHUNKED, 0, False, False, b""
        elif "content-length" in headers:
            try:
                self._left = int(headers["content-length"])
            except ValueError:
                raise ProtocolError(f"bad content-length {headers['content-length']!r}") from None
            if self._left < 0:
                raise ProtocolError(f"bad content-length {headers['content-length']!r}")
            self._state = _LENGTH if self._left else _IDLE
        else:
            self._state = _UNTIL_CLOSE
            self._close_after = True
        return True

    def _chunked(self, ex: Exchange, data: bytes, pos: int) -> int:
        """Take the chunks in `data[pos:]`; returns where the body ended (or len(data)).

        The usual read holds whole chunks: per chunk one `find`, one `int` and one append.
        """
        n = len(data)
        parts = ex.parts
        if not (self._left or self._crlf or self._trailers or self._carry):
            end = _split_chunks(ex, data, pos)
            if end is not None:
                if end < 0:  # the last chunk: the body is complete
                    self._state = _IDLE
                return n
            pos = self._whole_chunks(ex, data, pos)
        while pos < n:
            left = self._left
            if left:  # inside a chunk's payload
                end = pos + left
                if end > n:
                    parts.append(data[pos:] if pos else data)
                    ex.body_bytes += n - pos
                    self._left = end - n
                    return n
                parts.append(data[pos:end])
                ex.body_bytes += left
                self._left = 0
                if data[end : end + 2] == b"\r\n":
                    pos = end + 2
                    continue
                self._crlf = True
                pos = end
                continue
            j = data.find(b"\n", pos)
            if j < 0:
                self._carry += data[pos:]
                if len(self._carry) > _MAX_LINE:
                    raise ProtocolError("chunk-size line too long")
                return n
            line = data[pos:j]
            if self._carry:
                line, self._carry = self._carry + line, b""
            pos = j + 1
            if self._crlf:
                if line not in (b"\r", b""):
                    raise ProtocolError("chunk payload not followed by CRLF")
                self._crlf = False
                continue
            if self._trailers:
                if line in (b"\r", b""):
                    self._state = _IDLE
                    return pos
                continue  # a trailer field: not needed
            semi = line.find(b";")
            try:
                size = int(line[:semi] if semi >= 0 else line, 16)
            except ValueError:
                size = -1
            if size < 0:
                raise ProtocolError(f"bad chunk-size line {line[:40]!r}")
            if size == 0:
                self._trailers = True
            else:
                self._left = size
        return n

    @staticmethod
    def _whole_chunks(ex: Exchange, data: bytes, pos: int) -> int:
        """The hot loop: take chunks that lie whole in `data` from `pos` on; returns where it
        stopped (a chunk cut by the read's end, the last chunk, or anything unusual), from
        where the general state machine in `_chunked` goes on."""
        find = data.find
        append = ex.parts.append
        n = len(data)
        start = pos
        taken = 0
        while True:
            j = find(b"\r\n", pos)
            if j < 0:
                break
            try:
                size = int(data[pos:j], 16)
            except ValueError:  # chunk extensions, or not a size line: the general path decides
                break
            b = j + 2 + size
            if size <= 0 or b + 2 > n or data[b : b + 2] != b"\r\n":
                break
            append(data[j + 2 : b])
            taken += size
            pos = b + 2
        if pos != start:
            ex.body_bytes += taken
        return pos

    def _fail(self, error_class: str, message: str) -> None:
        ex = self.ex
        if ex is not None and ex.error_class is None:
            ex.error_class, ex.error_message = error_class, message[:300]
        self._finish()

    def _finish(self) -> None:
        ex, self.ex = self.ex, None
        self._state = _IDLE
        if ex is None:
            return
        ex.ended = True
        cb, ex.on_end = ex.on_end, None
        if cb is not None:
            cb()


_HEX: dict[bytes, int] = {}  # chunk-size line -> size, for the sizes a stream keeps repeating


def _split_chunks(ex: Exchange, data: bytes, pos: int) -> int | None:
    """The usual read in one go: whole chunks whose payloads hold no CRLF (SSE with LF line
    ends, JSON in between), split by one C-level `split` and checked size by size.

    Returns None when the read is not of that shape (the caller walks it chunk by chunk),
    -1 when it ended with the last chunk (and no trailers), else len(data).
    """
    seg = data[pos:] if pos else data
    if not seg.endswith(b"\r\n"):
        return None
    pieces = seg.split(b"\r\n")
    if len(pieces) % 2 == 0:
        return None
    heads, pays = pieces[0:-1:2], pieces[1:-1:2]
    lens = list(map(len, pays))
    sizes = list(map(_HEX.get, heads))
    if sizes != lens:
        for h in set(heads).difference(_HEX):
            try:
                size = int(h, 16)
            except ValueError:
                return None
            if len(_HEX) > 65536:
                _HEX.clear()
            _HEX[h] = size
        if list(map(_HEX.get, heads)) != lens:
            return None
    last = heads[-1] == b"0"
    if lens.count(0) != last:
        # Only the read's final chunk may be empty: "0" then an empty line, the last chunk
        # without trailers. Anything else (trailers, a stray empty chunk) goes the long way.
        return None
    if last:
        pays.pop()
    ex.parts.extend(pays)
    ex.body_bytes += sum(lens)
    return -1 if last else len(data)
