"""The hot-path HTTP/1.1 client: framing however the reads cut it, and connection reuse."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import ssl
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infbench.loadgen.http.client import stamped_socket
from infbench.loadgen.http.pool import Connection, Exchange, Pool


class FakeTransport:
    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.aborted = False
        self.closed = False

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def abort(self) -> None:
        self.aborted = True

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.aborted or self.closed


def _conn() -> tuple[Connection, Exchange, list[int]]:
    clock = [0]

    def stamp() -> int:
        clock[0] += 1
        return clock[0]

    conn = Connection(stamp)
    conn.connection_made(FakeTransport())  # type: ignore[arg-type]
    ex = Exchange()
    ends: list[int] = []
    ex.on_end = lambda: ends.append(clock[0])
    conn.send(b"POST / HTTP/1.1\r\n\r\n", ex)
    return conn, ex, ends


def _feed(conn: Connection, wire: bytes, cuts: list[int]) -> None:
    prev = 0
    for c in sorted({c for c in cuts if 0 < c < len(wire)}) + [len(wire)]:
        conn.data_received(wire[prev:c])
        prev = c


def _chunked(payloads: list[bytes], upper: bool, ext: bool, trailers: bool) -> bytes:
    out = b""
    for p in payloads:
        size = (b"%X" if upper else b"%x") % len(p)
        out += size + (b";name=v" if ext else b"") + b"\r\n" + p + b"\r\n"
    out += b"0\r\n" + (b"X-Trailer: 1\r\n" if trailers else b"") + b"\r\n"
    return out


HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\nx-request-id: r-1\r\n\r\n"
payload = st.one_of(
    st.builds(lambda n: b'data: {"text":"%s"}\n\n' % (b"t" * n), st.integers(0, 300)),
    st.binary(min_size=1, max_size=400),  # anything, CRLFs and "0\r\n\r\n" look-alikes included
)


@settings(max_examples=300, deadline=None)
@given(payloads=st.lists(payload, max_size=40), cuts=st.lists(st.integers(0, 20000), max_size=30),
       upper=st.booleans(), ext=st.booleans(), trailers=st.booleans(), interim=st.booleans())
def test_chunked_body_is_decoded_however_reads_cut_it(payloads: list[bytes], cuts: list[int], upper: bool,
                                                      ext: bool, trailers: bool, interim: bool) -> None:
    conn, ex, ends = _conn()
    wire = (b"HTTP/1.1 100 Continue\r\n\r\n" if interim else b"") + HEAD + _chunked(payloads, upper, ext, trailers)
    _feed(conn, wire, cuts)
    assert ends and len(ends) == 1, "the response ends exactly once, at its last byte"
    assert ex.error_class is None
    assert ex.status == 200 and ex.headers["x-request-id"] == "r-1"
    body = b"".join(payloads)
    assert ex.body() == body and ex.body_bytes == len(body)
    log = ex.recv_log
    spans = [(log[i], log[i + 1], log[i + 2]) for i in range(0, len(log), 3)]
    # The log covers the body end to end, read by read, each read after the one before.
    assert [a for _, a, _ in spans] == [0, *[b for _, _, b in spans[:-1]]][: len(spans)]
    assert (spans[-1][2] if spans else 0) == len(body)
    assert all(b > a for _, a, b in spans)
    assert [t for t, _, _ in spans] == sorted(t for t, _, _ in spans)
    assert conn.reusable


@settings(max_examples=100, deadline=None)
@given(body=st.binary(max_size=3000), cuts=st.lists(st.integers(0, 4000), max_size=10))
def test_content_length_and_until_close_bodies(body: bytes, cuts: list[int]) -> None:
    conn, ex, ends = _conn()
    _feed(conn, b"HTTP/1.1 429 Too Many\r\nContent-Length: %d\r\n\r\n" % len(body) + body, cuts)
    assert ends and ex.body() == body and ex.status == 429 and conn.reusable

    conn, ex, ends = _conn()
    _feed(conn, b"HTTP/1.0 200 OK\r\n\r\n" + body, cuts)
    assert not ends
    conn.connection_lost(None)
    assert ends and ex.error_class is None and ex.body() == body and not conn.reusable


def test_bytes_beyond_the_response_make_the_connection_unusable() -> None:
    conn, ex, ends = _conn()
    conn.data_received(HEAD + _chunked([b"data: x\n\n"], False, False, False) + b"HTTP/1.1 200 OK\r\n")
    assert ends and ex.body() == b"data: x\n\n" and not conn.reusable


def test_connection_close_header_is_honoured() -> None:
    conn, ex, ends = _conn()
    conn.data_received(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok")
    assert ends and ex.body() == b"ok" and not conn.reusable

    conn, ex, ends = _conn()  # chunked, the body's last read on the fast path
    conn.data_received(HEAD.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n"))
    conn.data_received(_chunked([b"data: x\n\n"], False, False, False))
    assert ends and ex.body() == b"data: x\n\n" and not conn.reusable


def test_cut_streams_and_bad_framing_are_classified() -> None:
    conn, ex, ends = _conn()
    conn.data_received(HEAD + b"20\r\ndata: partial")
    conn.connection_lost(ConnectionResetError("reset by peer"))
    assert ends and ex.error_class == "truncated_sse" and "13 body bytes" in (ex.error_message or "")
    assert ex.body() == b"data: partial"

    conn, ex, ends = _conn()
    conn.connection_lost(None)
    assert ex.error_class == "connection_reset" and "before the response" in (ex.error_message or "")

    for wire, what in [(HEAD + b"zz\r\n", "chunk-size"), (b"SPDY/3 200\r\n\r\n", "status line"),
                       (HEAD + b"3\r\nabcXY\r\n", "CRLF"), (b"HTTP/1.1 200 OK\r\nbroken\r\n\r\n", "header")]:
        conn, ex, ends = _conn()
        conn.data_received(wire)
        assert ends and ex.error_class == "malformed_http" and what in (ex.error_message or ""), wire
        assert not conn.reusable and conn.transport.aborted  # type: ignore[union-attr]


def test_unsolicited_bytes_retire_an_idle_connection() -> None:
    conn = Connection(lambda: 1)
    conn.connection_made(FakeTransport())  # type: ignore[arg-type]
    conn.data_received(b"HTTP/1.1 408 Request Timeout\r\n\r\n")
    assert not conn.reusable


# -- against real sockets ------------------------------------------------------------------
Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@contextlib.asynccontextmanager
async def _server(handler: Handler) -> AsyncIterator[tuple[str, list[int]]]:
    accepted: list[int] = []

    async def on_conn(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        accepted.append(1)
        try:
            await handler(r, w)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            w.close()

    srv = await asyncio.start_server(on_conn, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{srv.sockets[0].getsockname()[1]}", accepted
    finally:
        srv.close()


async def _read_request(r: asyncio.StreamReader) -> bytes:
    head = await r.readuntil(b"\r\n\r\n")
    length = next(int(ln.split(b":")[1]) for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length"))
    return head + await r.readexactly(length)


async def _post(pool: Pool, body: bytes = b"{}") -> Exchange:
    ex = Exchange()
    await pool.send(pool.request_bytes("/v1/completions", body, {"Authorization": "Bearer k"}), ex)
    return ex


def test_keep_alive_reuse_and_a_server_that_closes_idle_connections() -> None:
    seen: list[bytes] = []

    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        for _ in range(2):  # two requests per connection, then the server closes it
            seen.append(await _read_request(r))
            w.write(HEAD + _chunked([b"data: {}\n\n"] * 3, False, False, False))
            await w.drain()

    async def main() -> list[int]:
        async with _server(handler) as (url, accepted):
            pool = Pool(url + "/prefix/", timeout_s=5)
            for _ in range(5):
                ex = await _post(pool)
                assert ex.error_class is None and ex.body() == b"data: {}\n\n" * 3
                pool.check_invariants()
                await asyncio.sleep(0.02)  # the server's close reaches the idle connection
            await pool.close()
            return accepted

    assert len(asyncio.run(main())) == 3
    first = seen[0].decode()
    assert first.startswith("POST /prefix/v1/completions HTTP/1.1\r\n")
    assert "Host: 127.0.0.1:" in first and "Authorization: Bearer k" in first
    assert "Content-Length: 2\r\n" in first and first.endswith("\r\n\r\n{}")


def test_refused_timeout_and_reset() -> None:
    async def silent(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await _read_request(r)
        w.write(HEAD + b"9\r\ndata: x\n\n\r\n")
        await asyncio.sleep(5)

    async def reset(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await _read_request(r)
        w.transport.abort()

    async def main() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with _server(silent) as (url, _):
            pool = Pool(url, timeout_s=0.3)
            ex = Exchange()
            try:
                await pool.send(pool.request_bytes("/x", b"{}", {}), ex)
            except TimeoutError:
                out["timeout"] = ex
            assert not pool._idle  # a connection cut mid-response is never reused
            pool.check_invariants()
        async with _server(reset) as (url, _):
            out["reset"] = await _post(Pool(url, timeout_s=5))
        async with _server(reset) as (url, _):
            pass
        try:
            await _post(Pool(url, timeout_s=5))
        except ConnectionRefusedError:
            out["refused"] = True
        return out

    out = asyncio.run(main())
    assert out["timeout"].body() == b"data: x\n\n"
    assert out["reset"].error_class == "connection_reset"
    assert out["refused"] is True


def test_open_warms_each_connection_with_one_round_trip() -> None:
    served: list[bytes] = []

    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        while True:
            head = await r.readuntil(b"\r\n\r\n")
            served.append(head.split(b"\r\n", 1)[0])
            w.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\nnot found")
            await w.drain()

    async def main() -> tuple[int, int, list[int]]:
        async with _server(handler) as (url, accepted):
            pool = Pool(url, timeout_s=5)
            ready = await pool.open(8, pool.request_bytes("/v1/models", b"", {}, method="GET"))
            pool.check_invariants()
            idle = len(pool._idle)
            await pool.close()
            return ready, idle, accepted

    ready, idle, accepted = asyncio.run(main())
    assert ready == idle == len(accepted) == 8
    assert served == [b"GET /v1/models HTTP/1.1"] * 8  # answered (a 404 warms it as well)


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command for a test certificate")
def test_https_with_kernel_stamped_sockets(tmp_path: Any) -> None:
    key, cert = tmp_path / "k.pem", tmp_path / "c.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert, key)
    client_ctx = ssl.create_default_context(cafile=str(cert))
    events = [b'data: {"choices":[{"text":" t%d"}]}\n\n' % i for i in range(50)]

    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await _read_request(r)
        w.write(HEAD)
        for ev in events:
            w.write(_chunked([ev], False, False, False)[:-5])  # one chunk per write, no last chunk yet
            await w.drain()
        w.write(b"0\r\n\r\n")
        await w.drain()

    async def main() -> Exchange:
        srv = await asyncio.start_server(lambda r, w: handler(r, w), "127.0.0.1", 0, ssl=server_ctx)
        try:
            port = srv.sockets[0].getsockname()[1]
            pool = Pool(f"https://127.0.0.1:{port}", timeout_s=10, socket_factory=stamped_socket,
                        ssl_context=client_ctx)
            ex = await _post(pool)
            await pool.close()
            return ex
        finally:
            srv.close()

    ex = asyncio.run(main())
    assert ex.error_class is None and ex.status == 200 and ex.body() == b"".join(events)
    log = ex.recv_log
    assert log[1] == 0 and log[-1] == len(ex.body())
