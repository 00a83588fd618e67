"""The lean HTTP/1.1 client against real loopback servers whose bytes on the wire are scripted."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infbench.loadgen.client import RawResponse, arrival_times, retime
from infbench.loadgen.http1 import Http1Pool, _Conn

Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
CHUNKED_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


async def _read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    return head + await reader.readexactly(length)


async def _with_server(script: Script, client: Callable[[str, list[bytes]], Awaitable[None]]) -> int:
    """Run `client(url, requests_seen)` against a server running `script` per request;
    returns how many connections the server accepted."""
    accepted = 0
    seen: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal accepted
        accepted += 1
        try:
            while True:
                try:
                    seen.append(await _read_request(reader))
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                await script(reader, writer)
                if writer.is_closing():
                    return
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        await client(f"http://127.0.0.1:{port}", seen)
    finally:
        server.close()
    return accepted


async def _post(pool: Http1Pool, url: str, pace: Callable[[asyncio.Future[None]], None] | None = None) -> RawResponse:
    raw = RawResponse(send_ns=0)
    await pool.request("POST", url + "/v1/completions", b'{"stream": true}', {"Content-Type": "application/json"},
                       raw, pace=pace)
    return raw


def _pieces(raw: RawResponse) -> list[tuple[int, int, int]]:
    log = raw.recv_log
    return [(log[i], log[i + 1], log[i + 2]) for i in range(0, len(log), 3)]


def test_chunked_split_across_reads_with_extensions_and_trailers() -> None:
    async def script(_: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        # A chunk size line, a chunk's data and the terminal chunk each split across reads.
        for part in (CHUNKED_HEAD + b"5\r\nhel", b"lo\r\n6;name=val", b"ue\r\n world\r\n1", b"\r\n!\r\n0\r\n",
                     b"X-Trailer: t\r\n\r\n"):
            w.write(part)
            await w.drain()
            await asyncio.sleep(0.02)

    async def client(url: str, seen: list[bytes]) -> None:
        pool = Http1Pool(5.0)
        raw = await _post(pool, url)
        await pool.close()
        assert (raw.status, raw.error_class) == (200, None)
        assert b"".join(raw.reads) == b"hello world!"
        pieces = _pieces(raw)
        # Pieces tile the payload in order; each read's share of the data keeps its own stamp.
        assert pieces[0][1] == 0 and pieces[-1][2] == 12
        assert all(a[2] == b[1] for a, b in zip(pieces, pieces[1:], strict=False))
        ends = [p[2] for p in pieces]
        assert {3, 5, 11, 12} <= set(ends)
        stamps = [p[0] for p in pieces]
        assert stamps == sorted(stamps) and stamps[-1] - stamps[0] >= 40_000_000
        # "hel" came 20 ms before "lo": arrival times of byte 0 and byte 3 differ.
        t, _, _ = arrival_times(raw, np.array([0, 3, 11]))
        assert t[1] - t[0] >= 10_000_000
        read_ns, reads = retime(raw)
        assert b"".join(reads) == b"hello world!" and read_ns == sorted(read_ns)
        assert seen[0].startswith(b"POST /v1/completions HTTP/1.1\r\n")

    asyncio.run(_with_server(script, client))


def test_content_length_body_and_keep_alive_reuse() -> None:
    async def script(_: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\nX-Request-Id: r-1\r\n\r\nhello")
        await w.drain()
        await asyncio.sleep(0.02)
        w.write(b" world")
        await w.drain()

    async def client(url: str, seen: list[bytes]) -> None:
        pool = Http1Pool(5.0)
        for _ in range(3):
            raw = await _post(pool, url)
            assert (raw.status, raw.error_class, raw.server_request_id) == (200, None, "r-1")
            assert b"".join(raw.reads) == b"hello world"
            assert raw.headers_ns is not None and raw.send_ns <= raw.headers_ns <= raw.end_ns
        await pool.close()
        assert len(seen) == 3

    assert asyncio.run(_with_server(script, client)) == 1


def test_connection_close_response_is_not_reused() -> None:
    async def script(_: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
        await w.drain()
        w.close()

    async def client(url: str, _: list[bytes]) -> None:
        pool = Http1Pool(5.0)
        for _ in range(2):
            raw = await _post(pool, url)
            assert (raw.status, raw.error_class, b"".join(raw.reads)) == (200, None, b"ok")
        await pool.close()

    assert asyncio.run(_with_server(script, client)) == 2


def test_body_delimited_by_close() -> None:
    async def script(_: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        w.write(b"HTTP/1.1 200 OK\r\n\r\ndata: a\n\n")
        await w.drain()
        await asyncio.sleep(0.02)
        w.write(b"data: b\n\n")
        await w.drain()
        w.close()

    async def client(url: str, _: list[bytes]) -> None:
        pool = Http1Pool(5.0)
        raw = await _post(pool, url)
        await pool.close()
        assert (raw.status, raw.error_class, b"".join(raw.reads)) == (200, None, b"data: a\n\ndata: b\n\n")

    asyncio.run(_with_server(script, client))


def test_connection_refused() -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now

    async def go() -> RawResponse:
        pool = Http1Pool(5.0)
        raw = await _post(pool, f"http://127.0.0.1:{port}")
        await pool.close()
        return raw

    raw = asyncio.run(go())
    assert raw.error_class == "connection_refused" and raw.status is None
    assert "ConnectionRefusedError" in (raw.error_message or "")


@pytest.mark.parametrize(("sent", "expected"), [
    (CHUNKED_HEAD + b"9\r\ndata: x\n\n\r\n9\r\ndata:", "truncated_sse"),
    (b"", "connection_reset"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", "connection_reset"),
])
def test_server_closing_mid_stream(sent: bytes, expected: str) -> None:
    async def script(_: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        w.write(sent)
        await w.drain()
        w.close()

    async def client(url: str, _: list[bytes]) -> None:
        pool = Http1Pool(5.0)
        raw = await _post(pool, url)
        await pool.close()
        assert raw.error_class == expected, raw.error_message
        # What came whole before the cut is kept for the parser; the partial chunk is not.
        assert b"".join(raw.reads) == (b"data: x\n\n" if expected == "truncated_sse" else b"")

    asyncio.run(_with_server(script, client))


def test_malformed_chunk_size_is_a_truncated_stream() -> None:
    async def script(_: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        w.write(CHUNKED_HEAD + b"9\r\ndata: x\n\n\r\nzz\r\n\r\n")
        await w.drain()
        await asyncio.sleep(1)

    async def client(url: str, _: list[bytes]) -> None:
        pool = Http1Pool(5.0)
        raw = await _post(pool, url)
        await pool.close()
        assert raw.error_class == "truncated_sse" and "chunk size" in (raw.error_message or "")
        assert b"".join(raw.reads) == b"data: x\n\n"

    asyncio.run(_with_server(script, client))


def test_http_error_status_keeps_the_body_as_message() -> None:
    async def script(_: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        body = b'{"error": {"message": "engine\\nexploded"}}'
        w.write(b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        await w.drain()

    async def client(url: str, _: list[bytes]) -> None:
        pool = Http1Pool(5.0)
        raw = await _post(pool, url)
        assert (raw.status, raw.error_class) == (500, "http_500")
        assert "engine\\nexploded" in (raw.error_message or "")
        raw2 = await _post(pool, url)  # an error response does not spoil the connection
        assert raw2.error_class == "http_500"
        await pool.close()

    assert asyncio.run(_with_server(script, client)) == 1


def test_total_timeout() -> None:
    async def script(_: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        w.write(CHUNKED_HEAD + b"9\r\ndata: x\n\n\r\n")  # then silence
        await w.drain()
        await asyncio.sleep(2)

    async def client(url: str, _: list[bytes]) -> None:
        pool = Http1Pool(0.3)
        raw = await _post(pool, url)
        await pool.close()
        assert raw.error_class == "timeout"
        assert 0.25e9 <= raw.end_ns - raw.send_ns < 1.5e9
        assert b"".join(raw.reads) == b"data: x\n\n"  # what came before the timeout is kept

    asyncio.run(_with_server(script, client))


def test_pace_is_handed_the_wakeup_once_the_body_is_complete() -> None:
    async def script(_: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        w.write(CHUNKED_HEAD + b"9\r\ndata: x\n\n\r\n0\r\n\r\n")
        await w.drain()

    async def client(url: str, _: list[bytes]) -> None:
        pool = Http1Pool(5.0)
        handed: list[asyncio.Future[None]] = []

        def pace(fut: asyncio.Future[None]) -> None:
            handed.append(fut)
            asyncio.get_running_loop().call_later(0.05, fut.set_result, None)

        raw = await _post(pool, url, pace=pace)
        await pool.close()
        assert len(handed) == 1 and raw.error_class is None
        assert raw.end_ns - raw.recv_log[-3] >= 40_000_000  # the task woke when pace said so

    asyncio.run(_with_server(script, client))


def test_cancelled_request_keeps_what_arrived() -> None:
    async def script(_: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        w.write(CHUNKED_HEAD + b"9\r\ndata: x\n\n\r\n")
        await w.drain()
        await asyncio.sleep(2)

    async def client(url: str, _: list[bytes]) -> None:
        pool = Http1Pool(5.0)
        raw = RawResponse(send_ns=0)
        task = asyncio.create_task(pool.request("POST", url + "/x", b"{}", {}, raw))
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await pool.close()
        assert raw.error_class == "cancelled" and b"".join(raw.reads) == b"data: x\n\n"

    asyncio.run(_with_server(script, client))


def test_bad_url_is_a_per_request_error() -> None:
    async def go() -> RawResponse:
        raw = RawResponse(send_ns=0)
        await Http1Pool(1.0).request("POST", "ftp://127.0.0.1/x", b"", {}, raw)
        return raw

    raw = asyncio.run(go())
    assert raw.error_class == "connection_error" and "ftp://" in (raw.error_message or "")


@settings(max_examples=200, deadline=None)
@given(chunks=st.lists(st.binary(min_size=1, max_size=40), max_size=12),
       cuts=st.lists(st.integers(min_value=1, max_value=400), max_size=10),
       ext=st.booleans(), trailer=st.booleans(), upper=st.booleans())
def test_chunked_decoding_matches_the_payload_however_the_reads_fall(
        chunks: list[bytes], cuts: list[int], ext: bool, trailer: bool, upper: bool) -> None:
    """Feeding the wire bytes in arbitrary reads gives back the payload, read by read."""
    fmt = b"%X" if upper else b"%x"
    wire = CHUNKED_HEAD + b"".join(fmt % len(c) + (b";e=1" if ext else b"") + b"\r\n" + c + b"\r\n"
                                   for c in chunks)
    wire += b"0\r\n" + (b"T: v\r\n" if trailer else b"") + b"\r\n"
    bounds = sorted({c for c in cuts if c < len(wire)} | {len(wire)})
    clock = iter(range(1, 10**6))
    conn = _Conn(None, lambda: next(clock))
    conn.active = True
    prev = 0
    for b in bounds:
        assert not conn.complete()
        conn.data_received(wire[prev:b])
        prev = b
    assert conn.complete() and conn.body_end == len(wire)
    body, log = conn.payload()
    assert body == b"".join(chunks)
    pieces = [log[i:i + 3] for i in range(0, len(log), 3)]
    assert [p[0] for p in pieces] == sorted(p[0] for p in pieces)
    assert all(p[1] <= p[2] for p in pieces) and (not pieces or pieces[-1][2] == len(body))
    # A read's payload is exactly the data bytes among its wire bytes.
    data_pos = []
    off = len(CHUNKED_HEAD)
    for c in chunks:
        off = wire.index(b"\r\n", off) + 2
        data_pos.extend(range(off, off + len(c)))
        off += len(c) + 2
    wire_ends = [b for b in bounds if b > len(CHUNKED_HEAD)] if chunks else []  # no payload: no pieces
    assert [p[2] for p in pieces] == [sum(1 for d in data_pos if d < e) for e in wire_ends]


@pytest.mark.parametrize("data", [[b"a\r\nb", b"c"], [b"x\r\n0\r\n\r\n", b"y"], [b"\r\n"]])
def test_chunk_data_containing_crlf_or_a_fake_terminator(data: list[bytes]) -> None:
    """Data bytes are data, whatever they look like: the framing is followed from the start."""
    wire = CHUNKED_HEAD + b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in data) + b"0\r\n\r\n"
    conn = _Conn(None, lambda: 1)
    conn.active = True
    for i in range(len(wire)):  # one byte per read: every tail the end check can see
        conn.data_received(wire[i:i + 1])
        assert conn.complete() == (i == len(wire) - 1)
    assert conn.payload()[0] == b"".join(data)
