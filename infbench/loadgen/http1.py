"""A lean HTTP/1.1 streaming client on raw asyncio, for the load generator's hot path.

Per socket read, the protocol only appends the bytes to one buffer and the read's arrival
stamp and end offset to two lists; no HTTP parsing, no task wake-up. The status line and
headers are parsed once; the body's framing (chunked or Content-Length) is decoded after
the stream ends, in one pass over the buffer, and each read's payload range is derived from
its wire range, so every byte keeps the arrival time of the read that brought it.
The result fills the same `RawResponse` that `client.stream_post` fills, with the same
error classes, so parsing and storage downstream do not change.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import socket
import ssl
import time
from collections.abc import Callable
from itertools import repeat
from urllib.parse import urlsplit

import numpy as np

from infbench.loadgen.client import _CMSG_SPACE, RawResponse, StampedSocket, _read_clock

_ERROR_BODY_LIMIT = 2000
_MAX_HEAD = 64 << 10  # a status line plus headers larger than this is not HTTP we can trust
_MAX_CHUNK_LINE = 4096


class ProtocolError(Exception):
    """The server's bytes are not valid HTTP/1.1."""


class Disconnected(Exception):
    """The connection closed before the response was complete."""


def _chunk_size(line: bytes) -> int:
    """The size on a chunk header line that int() alone did not take (extensions, junk)."""
    semi = line.find(b";")  # chunk extensions are allowed and ignored
    head = (line if semi < 0 else line[:semi]).strip(b" \t")
    if not head or head.strip(_HEX_DIGITS):
        raise ProtocolError(f"bad chunk size line {line[:40]!r}")
    return int(head, 16)


_HEX_DIGITS = b"0123456789abcdefABCDEF"
_HEX_SET = frozenset(_HEX_DIGITS)


def _split_chunked(buf: bytearray, pos: int, segs: list[int]) -> bytes | None:
    """The whole rest of a complete chunked body in one C-level split, or None.

    Works when no chunk's data contains CRLF and there are no extensions or trailers (the
    usual SSE stream): the body then splits on CRLF into size, data, size, data, ..., "0",
    "", "" and every size must equal its data's length. Anything else returns None and the
    chunk-by-chunk walk decides. Appends (wire offset, length) pairs to `segs` on success.
    """
    parts = bytes(buf[pos:]).split(b"\r\n")
    if len(parts) < 3 or len(parts) % 2 == 0 or parts[-3:] != [b"0", b"", b""]:
        return None
    sizes, datas = parts[0:-3:2], parts[1:-3:2]
    try:
        if list(map(int, sizes, repeat(16))) != list(map(len, datas)):
            return None
    except ValueError:
        return None
    if b"".join(sizes).translate(None, _HEX_DIGITS):  # int() also takes " a", "+a", "0xa"
        return None
    lens = np.fromiter(map(len, parts), np.int64, len(parts))
    starts = pos + np.concatenate(([0], np.cumsum(lens + 2)[:-1]))
    segs.extend(np.stack([starts[1:-3:2], lens[1:-3:2]], axis=1).ravel().tolist())
    return b"".join(datas)


def _decode_chunked(buf: bytearray, start: int, state: list[int], segs: list[int]) -> int:
    """Walk chunk headers from `state[0]`; return the wire end of the body, or -1 if incomplete.

    `segs` gets flat (wire offset, length) pairs of data. `state[0]` keeps where the walk
    stopped, so repeated calls on a growing buffer cost O(chunks) in all. This loop runs once
    per HTTP chunk (one per SSE event), so it does as little per iteration as it can (an
    array version that finds all candidate headers at once measured slower at SSE sizes).
    """
    pos = state[0] or start
    n = len(buf)
    find = buf.find
    append = segs.append
    hexset = _HEX_SET
    while True:
        i = find(b"\r\n", pos)
        if i < 0:
            if n - pos > _MAX_CHUNK_LINE:
                raise ProtocolError("chunk size line too long")
            state[0] = pos
            return -1
        if i > pos and buf[pos] in hexset and buf[i - 1] in hexset:
            try:
                size = int(buf[pos:i], 16)  # also takes "_" between digits: rare, harmless
            except ValueError:
                size = _chunk_size(bytes(buf[pos:i]))
        else:
            size = _chunk_size(bytes(buf[pos:i]))
        if size == 0:
            # Trailer fields end at an empty line; without trailers it follows at once.
            if buf[i + 2:i + 4] == b"\r\n":
                return i + 4
            j = find(b"\r\n\r\n", i + 2)
            if j < 0:
                state[0] = pos
                return -1
            return j + 4
        end = i + 2 + size
        if end + 2 > n:
            state[0] = pos
            return -1
        if buf[end] != 13 or buf[end + 1] != 10:
            raise ProtocolError("chunk data not followed by CRLF")
        append(i + 2)
        append(size)
        pos = state[0] = end + 2  # a later call resumes after this chunk, never re-adds it


class _Conn(asyncio.Protocol):
    """One keep-alive connection. Ownership: the pool owns idle ones; during a request the
    request's `_exchange` owns it and gives it back (or closes it) when the response ends."""

    def __init__(self, sock: socket.socket | None, clock: Callable[[], int]) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.close_exc: BaseException | None = None
        if isinstance(sock, StampedSocket):
            self._clock: Callable[[], int] = lambda: sock.rx_ns or clock()
        else:
            self._clock = clock
        self._reset()

    def _reset(self) -> None:
        self.buf = bytearray()
        self.stamps: list[int] = []
        self.ends: list[int] = []
        self.head_end = -1  # wire offset where the body starts, once headers are in
        self.status: int | None = None
        self.headers: dict[str, str] = {}
        self.headers_ns: int | None = None
        self.chunked = False
        self.length: int | None = None  # Content-Length; None with chunked or read-to-close
        self.body_end = -1  # wire offset where the body ends, once it has
        self.segs: list[int] = []
        self._walk = [0]
        self._joined: bytes | None = None  # the payload, when the one-split path decoded it
        self.keep_alive = True
        self.on_end: Callable[[], None] | None = None
        self.active = False

    # -- asyncio callbacks -----------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.close_exc is None:  # a protocol error that made us close comes first
            self.close_exc = exc
        if self.active and self.body_end < 0 and self.head_end >= 0 and self.length is None \
                and not self.chunked:
            self.body_end = len(self.buf)  # a body delimited by the connection closing
        self._finish()

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        self.stamps.append(self._clock())
        self.ends.append(len(buf))
        if self.body_end >= 0 or not self.active:
            return
        try:
            if self.head_end < 0:
                self._parse_head()
                if self.head_end < 0:
                    return
            if self.chunked:
                # Most SSE chunks end in "\n\n\r\n"; only a tail that could be the terminal
                # chunk or a trailer's end makes the walk run (from where it stopped).
                if buf.endswith(b"\r\n\r\n"):
                    if self._walk[0] == 0 and buf.endswith(b"\r\n0\r\n\r\n"):
                        self._joined = _split_chunked(buf, self.head_end, self.segs)
                        if self._joined is not None:
                            self.body_end = len(buf)
                    if self._joined is None:
                        end = _decode_chunked(buf, self.head_end, self._walk, self.segs)
                        if end >= 0:
                            self.body_end = end
            elif self.length is not None and len(buf) - self.head_end >= self.length:
                self.body_end = self.head_end + self.length
        except ProtocolError as exc:
            self.close_exc = exc
            self.keep_alive = False
            if self.transport is not None:
                self.transport.close()
        if self.body_end >= 0:
            self._finish()

    # -- parsing ---------------------------------------------------------------------------
    def _parse_head(self) -> None:
        i = self.buf.find(b"\r\n\r\n")
        if i < 0:
            if len(self.buf) > _MAX_HEAD:
                raise ProtocolError("response headers too large")
            return
        self.headers_ns = time.monotonic_ns()
        lines = bytes(self.buf[:i]).decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise ProtocolError(f"bad status line {lines[0][:60]!r}")
        status = int(parts[1])
        headers: dict[str, str] = {}
        for line in lines[1:]:
            k, sep, v = line.partition(":")
            if not sep:
                raise ProtocolError(f"bad header line {line[:60]!r}")
            k = k.strip().lower()
            v = v.strip()
            headers[k] = f"{headers[k]}, {v}" if k in headers else v
        if 100 <= status < 200 and status != 101:
            # An interim response (100 Continue): drop it, the real one follows.
            del self.buf[:i + 4]
            self.ends = [max(e - i - 4, 0) for e in self.ends]
            return self._parse_head()
        self.status = status
        self.headers = headers
        self.head_end = i + 4
        conn = headers.get("connection", "").lower()
        self.keep_alive = "close" not in conn and (parts[0] != "HTTP/1.0" or "keep-alive" in conn)
        if "chunked" in headers.get("transfer-encoding", "").lower():
            self.chunked = True
        elif "content-length" in headers:
            try:
                self.length = int(headers["content-length"])
            except ValueError:
                raise ProtocolError(f"bad Content-Length {headers['content-length'][:40]!r}") from None
        elif status in (204, 304):
            self.length = 0
        else:
            self.keep_alive = False  # the body runs until the server closes
        if self.length == 0:
            self.body_end = self.head_end

    def _finish(self) -> None:
        cb, self.on_end = self.on_end, None
        if cb is not None:
            cb()

    # -- the result ------------------------------------------------------------------------
    def complete(self) -> bool:
        return self.body_end >= 0

    def payload(self) -> tuple[bytes, list[int]]:
        """The decoded body and flat (t, before, after) payload ranges of each read.

        Runs once the stream has ended (or failed): what a truncated chunked body holds up to
        its last whole chunk counts as received; the partial chunk after it is dropped.
        """
        h = self.head_end
        if h < 0:
            return b"", []
        buf = self.buf
        wire_end = self.body_end if self.body_end >= 0 else len(buf)
        ends = np.asarray(self.ends, dtype=np.int64)
        stamps = np.asarray(self.stamps, dtype=np.int64)
        keep = ends > h
        first = int(np.argmax(keep)) if keep.any() else len(ends)
        ends, stamps = ends[first:], stamps[first:]
        if self.chunked:
            if self.body_end < 0:
                with contextlib.suppress(ProtocolError):  # keep the whole chunks before the bad one
                    _decode_chunked(buf, h, self._walk, self.segs)
            if not self.segs:
                return b"", []
            segs = np.asarray(self.segs, dtype=np.int64).reshape(-1, 2)
            if self._joined is not None:
                body = self._joined
            else:
                # The payload bytes are those inside data segments: a mask from the segment edges.
                edges = np.zeros(len(buf) + 1, np.int8)
                edges[segs[:, 0]] = 1  # a header always separates one segment's end from the next start
                edges[segs[:, 0] + segs[:, 1]] = -1
                wire = np.frombuffer(buf, np.uint8)
                body = wire[np.cumsum(edges[:-1], dtype=np.int8) > 0].tobytes()
                del wire
            pay_start = np.concatenate(([0], np.cumsum(segs[:, 1])))
            # A read ending inside (or after) a data segment covers the payload up to there.
            j = np.searchsorted(segs[:, 0], ends, side="right") - 1
            jc = np.maximum(j, 0)
            after = np.where(j < 0, 0, pay_start[jc] + np.clip(ends - segs[jc, 0], 0, segs[jc, 1]))
        else:
            body = bytes(buf[h:wire_end])
            after = np.minimum(ends, wire_end) - h
        before = np.concatenate(([0], after[:-1]))
        log = np.stack([stamps, before, after], axis=1).reshape(-1)
        return body, log.tolist()

    def recycle(self) -> None:
        self._reset()


class Http1Pool:
    """Keep-alive HTTP/1.1 connections per (scheme, host, port). Ownership: the runner creates
    one per run and closes it; idle connections live here, busy ones with their request."""

    def __init__(self, timeout_s: float, connect_timeout_s: float | None = None,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        if timeout_s <= 0:
            raise ValueError("timeout_s: must be > 0")
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s if connect_timeout_s is not None else min(10.0, timeout_s)
        self._ssl = ssl_context
        self._idle: dict[tuple[str, str, int], list[_Conn]] = {}
        self._all: set[_Conn] = set()

    async def _connect(self, scheme: str, host: str, port: int) -> _Conn:
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        last: OSError | None = None
        for family, type_, proto, _, addr in infos:
            sock: socket.socket = StampedSocket(family=family, type=type_, proto=proto)
            if not (_CMSG_SPACE and sock.enable()):  # type: ignore[attr-defined]
                sock.close()
                sock = socket.socket(family=family, type=type_, proto=proto)
            try:
                sock.setblocking(False)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                await loop.sock_connect(sock, addr)
            except OSError as exc:
                sock.close()
                last = exc
                continue
            ctx = None
            if scheme == "https":
                ctx = self._ssl or ssl.create_default_context()
            try:
                _, conn = await loop.create_connection(
                    lambda s=sock: _Conn(s, _read_clock(loop)), sock=sock, ssl=ctx,
                    server_hostname=host if ctx is not None else None)
            except BaseException:
                sock.close()
                raise
            self._all.add(conn)
            return conn
        raise last or OSError(f"no address for {host}")

    async def _take(self, scheme: str, host: str, port: int) -> _Conn:
        idle = self._idle.get((scheme, host, port))
        while idle:
            conn = idle.pop()
            # The server may have closed it (or sent stray bytes) while it sat idle.
            if not conn.closed and not conn.buf and conn.transport is not None \
                    and not conn.transport.is_closing():
                return conn
            self._all.discard(conn)
        async with asyncio.timeout(self.connect_timeout_s):
            return await self._connect(scheme, host, port)

    def _give_back(self, key: tuple[str, str, int], conn: _Conn) -> None:
        conn.active = False
        if conn.closed or not conn.keep_alive or not conn.complete() or len(conn.buf) != conn.body_end:
            self._drop(conn)
            return
        conn.recycle()
        self._idle.setdefault(key, []).append(conn)

    def _drop(self, conn: _Conn) -> None:
        conn.active = False
        self._all.discard(conn)
        if conn.transport is not None:
            conn.transport.close()

    async def close(self) -> None:
        for conn in list(self._all):
            self._drop(conn)
        self._idle.clear()
        await asyncio.sleep(0)

    async def request(
        self, method: str, url: str, body: bytes, headers: dict[str, str], raw: RawResponse,
        pace: Callable[[asyncio.Future[None]], None] | None = None,
    ) -> RawResponse:
        """Send one request and record the raw response into `raw`. Never raises for a
        per-request failure (see `client.stream_post` for the contract; this is its twin)."""
        monotonic_ns = time.monotonic_ns
        raw.send_ns = monotonic_ns()
        conn: _Conn | None = None
        try:
            parts = urlsplit(url)
            scheme = parts.scheme.lower()
            if scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(f"url: {url!r} is not an http(s) URL")
            host = parts.hostname
            port = parts.port or (443 if scheme == "https" else 80)
            key = (scheme, host, port)
            async with asyncio.timeout(self.timeout_s):
                try:
                    conn = await self._take(scheme, host, port)
                except TimeoutError:
                    raise
                except OSError as exc:
                    raise _ConnectError(exc) from exc
                await self._exchange(conn, method, parts, host, port, body, headers, raw, pace)
        except asyncio.CancelledError:
            _collect(conn, raw)
            if conn is not None:
                self._drop(conn)
            raw.error_class, raw.error_message = "cancelled", "run interrupted"
            raw.end_ns = monotonic_ns()
            raise
        except Exception as exc:
            got = _collect(conn, raw)
            if conn is not None:
                self._drop(conn)
            raw.error_class, raw.error_message = _classify(exc, got)
            raw.end_ns = monotonic_ns()
            return raw
        _collect(conn, raw)
        if raw.status is not None and raw.status != 200:
            text = b"".join(raw.reads)[:_ERROR_BODY_LIMIT].decode("utf-8", "replace")
            raw.error_class = f"http_{raw.status}"
            raw.error_message = text.replace("\n", " ")[:300]
        self._give_back(key, conn)  # type: ignore[arg-type]
        raw.end_ns = monotonic_ns()
        return raw

    async def _exchange(self, conn: _Conn, method: str, parts: object, host: str, port: int, body: bytes,
                        headers: dict[str, str], raw: RawResponse,
                        pace: Callable[[asyncio.Future[None]], None] | None) -> None:
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")  # type: ignore[attr-defined]
        default_port = 443 if parts.scheme == "https" else 80  # type: ignore[attr-defined]
        host_hdr = host if port == default_port else f"{host}:{port}"
        if ":" in host and not host.startswith("["):
            host_hdr = f"[{host}]" if port == default_port else f"[{host}]:{port}"
        lines = [f"{method} {path} HTTP/1.1", f"Host: {host_hdr}", f"Content-Length: {len(body)}"]
        if not any(k.lower() == "content-type" for k in headers) and body:
            lines.append("Content-Type: application/json")
        lines += [f"{k}: {v}" for k, v in headers.items()]
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        loop = asyncio.get_running_loop()
        ended: asyncio.Future[None] = loop.create_future()

        def on_end() -> None:
            if ended.done():
                return
            if pace is not None and conn.complete():
                pace(ended)
            else:
                ended.set_result(None)

        conn.active = True
        conn.on_end = on_end
        assert conn.transport is not None
        conn.transport.write(head + body if len(body) < 65536 else head)
        if len(body) >= 65536:
            conn.transport.write(body)
        try:
            await ended
        finally:
            conn.on_end = None
        if not conn.complete():
            if conn.close_exc is not None:
                raise conn.close_exc
            raise Disconnected("Server disconnected")


class _ConnectError(Exception):
    def __init__(self, os_error: OSError) -> None:
        super().__init__(str(os_error))
        self.os_error = os_error


def _classify(exc: BaseException, got_data: bool) -> tuple[str, str]:
    """Error classes as `client._classify` gives them for aiohttp's exceptions."""
    inner = exc.os_error if isinstance(exc, _ConnectError) else exc
    msg = f"{type(inner).__name__}: {inner}" if str(inner) else f"{type(inner).__name__}: no response in time"
    msg = msg.splitlines()[0][:300]
    if isinstance(exc, TimeoutError):
        return "timeout", msg
    if isinstance(exc, _ConnectError):
        os_err = exc.os_error
        if isinstance(os_err, ConnectionRefusedError) or getattr(os_err, "errno", None) == errno.ECONNREFUSED:
            return "connection_refused", msg
        return "connection_error", msg
    if isinstance(exc, Disconnected | ProtocolError | ConnectionResetError | BrokenPipeError):
        return ("truncated_sse" if got_data else "connection_reset"), msg
    if isinstance(exc, OSError):
        return ("truncated_sse" if got_data else "connection_reset"), msg
    return "connection_error", msg


def _collect(conn: _Conn | None, raw: RawResponse) -> bool:
    """Move what `conn` received into `raw`; True if any body bytes came."""
    if conn is None:
        return False
    body, log = conn.payload()
    if conn.status is not None:
        raw.status = conn.status
        raw.headers_ns = conn.headers_ns
        raw.server_request_id = conn.headers.get("x-request-id")
    if body:
        raw.read_ns.append(conn.stamps[-1] if conn.stamps else time.monotonic_ns())
        raw.reads.append(body)
        raw.recv_log.extend(log)
    return bool(body)

