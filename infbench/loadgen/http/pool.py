"""The load generator's HTTP/1.1 client: a pool of keep-alive connections to one origin,
one request at a time each (the connection and its parser: `connection`).

What it speaks: requests given as bytes (`Pool.request_bytes`: POST with a body, or GET),
responses framed by `Transfer-Encoding: chunked`,
`Content-Length` or the connection closing, interim 1xx responses skipped, `Connection:
close` honoured, TLS for https. No redirects, proxies, compression (it sends no
`Accept-Encoding`, so servers answer in identity) or pipelining.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from infbench.loadgen.http.connection import _IDLE, Connection, Exchange, ProtocolError

__all__ = ["Connection", "Exchange", "Pool", "ProtocolError", "stamp_clock"]


def stamp_clock(sock: socket.socket, fallback: Callable[[], int]) -> Callable[[], int]:
    """The arrival time of the latest read: the kernel's stamp where the socket carries one."""
    if hasattr(sock, "rx_ns"):
        return lambda: sock.rx_ns or fallback()
    return fallback


class Pool:
    """Keep-alive connections to one origin; `send()` sends a request and records the reply.

    Ownership: the runner owns the pool and closes it; idle connections live in `_idle`
    (last used first out); a connection in use is referenced only by the `send()` using it.
    """

    def __init__(
        self,
        url: str,
        timeout_s: float,
        connect_timeout_s: float = 10.0,
        socket_factory: Callable[[Any], socket.socket] | None = None,
        clock: Callable[[], int] = time.monotonic_ns,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        u = urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"url: {url!r} is not an http(s) URL")
        self.host = u.hostname
        self.port = u.port or (443 if u.scheme == "https" else 80)
        default_port = self.port == (443 if u.scheme == "https" else 80)
        host = f"[{self.host}]" if ":" in self.host else self.host
        self.host_header = host if default_port else f"{host}:{self.port}"
        self.prefix = u.path.rstrip("/")
        self.ssl = (ssl_context or ssl.create_default_context()) if u.scheme == "https" else None
        self.timeout_s = timeout_s
        self.connect_timeout_s = min(connect_timeout_s, timeout_s)
        self._socket_factory = socket_factory
        self._clock = clock
        self._idle: list[Connection] = []
        self._addr: list[Any] | None = None
        self._closed = False
        # What the live watch reads (loadgen/telemetry/watch.py), kept per request, not per read: the
        # exchanges open now, and the last byte of any that has ended.
        self.live: set[Exchange] = set()
        self.last_read_ns = 0

    # -- connections -------------------------------------------------------------------
    async def _resolve(self) -> list[Any]:
        if self._addr is None:
            loop = asyncio.get_running_loop()
            infos = await loop.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)
            if not infos:
                raise OSError(f"cannot resolve {self.host}")
            self._addr = infos
        return self._addr

    async def _connect(self) -> Connection:
        loop = asyncio.get_running_loop()
        last: OSError | None = None
        for info in await self._resolve():
            sock = (self._socket_factory(info) if self._socket_factory
                    else socket.socket(info[0], info[1], info[2]))
            try:
                sock.setblocking(False)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                await loop.sock_connect(sock, info[4])
            except OSError as exc:
                sock.close()
                last = exc
                continue
            except BaseException:
                sock.close()
                raise
            clock = stamp_clock(sock, self._clock)
            _, conn = await loop.create_connection(
                lambda clock=clock: Connection(clock), sock=sock, ssl=self.ssl,
                server_hostname=self.host if self.ssl else None,
                ssl_handshake_timeout=self.connect_timeout_s if self.ssl else None)
            return conn
        assert last is not None
        raise last

    async def _acquire(self) -> Connection:
        idle = self._idle
        while idle:
            conn = idle.pop()
            if conn.reusable and conn.transport is not None and not conn.transport.is_closing():
                return conn
        return await asyncio.wait_for(self._connect(), self.connect_timeout_s)

    async def open(self, n: int, warm_request: bytes | None = None) -> int:
        """Open up to `n` connections ahead of the load; returns how many are ready.

        With `warm_request` (a cheap GET), each new connection makes one round trip, so the
        server has accepted and served every connection before the clock starts: a TCP
        handshake alone completes in the kernel before the server's accept loop has run.
        """
        async def one() -> Connection | None:
            try:
                conn = await self._acquire()
            except (OSError, TimeoutError):
                return None
            if warm_request is None:
                return conn
            ex = Exchange()
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            ex.on_end = lambda: None if done.done() else done.set_result(None)
            conn.send(warm_request, ex)
            try:
                async with asyncio.timeout(self.timeout_s):
                    await done
            except TimeoutError:
                conn.detach()
            return conn if conn.reusable and conn.ex is None else None

        conns = [c for c in await asyncio.gather(*(one() for _ in range(n))) if c is not None]
        self._idle.extend(conns)
        return len(conns)

    def check_invariants(self) -> None:
        """Idle connections are open, reusable and between requests; each is idle once."""
        assert len({id(c) for c in self._idle}) == len(self._idle), "a connection is idle twice"
        for c in self._idle:
            assert c.ex is None and c._state == _IDLE, "an idle connection is mid-response"
            assert c.transport is not None, "an idle connection was never connected"

    async def close(self) -> None:
        self._closed = True
        for conn in self._idle:
            if conn.transport is not None:
                conn.transport.close()
        self._idle.clear()

    # -- requests ------------------------------------------------------------------------
    def request_bytes(self, path: str, body: bytes, headers: dict[str, str], method: str = "POST") -> bytes:
        lines = [f"{method} {self.prefix}{path} HTTP/1.1", f"Host: {self.host_header}"]
        if body or method == "POST":
            lines.append(f"Content-Length: {len(body)}")
            if not any(k.lower() == "content-type" for k in headers):
                lines.append("Content-Type: application/json")
        lines += [f"{k}: {v}" for k, v in headers.items()]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body

    async def send(self, request: bytes, ex: Exchange,
                   pace: Callable[[asyncio.Future[None]], None] | None = None) -> None:
        """Send `request` (from `request_bytes`) and wait until its response has ended.

        Failures land in `ex.error_class`/`error_message`; a timeout raises TimeoutError and
        cancellation propagates, both with everything received so far left in `ex`.
        `pace(fut)`, when given, is handed the future that wakes this task once the body has
        ended, to resolve when it suits the caller (see `pacer.Pacer`).
        """
        loop = asyncio.get_running_loop()
        start = loop.time()
        conn = await self._acquire()
        done: asyncio.Future[None] = loop.create_future()

        def ended() -> None:
            if done.done():
                return
            if pace is not None and ex.error_class is None:
                pace(done)
            else:
                done.set_result(None)

        ex.on_end = ended
        conn.send(request, ex)
        self.live.add(ex)
        try:
            left = self.timeout_s - (loop.time() - start)
            async with asyncio.timeout(left):
                await done
        except BaseException:
            ex.on_end = None
            if conn.ex is ex:
                conn.detach()  # mid-response: the connection cannot be reused
            raise
        finally:
            self.live.discard(ex)
            if ex.body_bytes and ex.last_ns > self.last_read_ns:
                self.last_read_ns = ex.last_ns
            self._release(conn)

    def _release(self, conn: Connection) -> None:
        if conn.reusable and not self._closed and conn.ex is None:
            self._idle.append(conn)
        elif conn.transport is not None:
            with contextlib.suppress(Exception):
                conn.transport.close()
