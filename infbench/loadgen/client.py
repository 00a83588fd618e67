"""The client hot path: send one streaming request, timestamp every socket read.

Nothing here parses JSON or splits SSE events while the stream is open: each read is kept as
raw bytes with the monotonic time it returned, and `infbench.loadgen.sse` turns those into
events after the request ends. That keeps the per-chunk cost to one `readany()`, one clock
read and two list appends, so the client's own overhead stays out of the measurement.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import time
from dataclasses import dataclass, field

import aiohttp
from aiohttp.client_proto import ResponseHandler

# Large reads: a busy stream or a long prompt echo must not be cut into 64 KiB pieces.
READ_BUFSIZE = 4 << 20
_ERROR_BODY_LIMIT = 2000


@dataclass(slots=True)
class RawResponse:
    """What the wire gave us for one request; times are `time.monotonic_ns()`."""

    send_ns: int
    headers_ns: int | None = None
    end_ns: int = 0
    status: int | None = None
    server_request_id: str | None = None
    read_ns: list[int] = field(default_factory=list)
    reads: list[bytes] = field(default_factory=list)
    recv_log: list[int] = field(default_factory=list)  # flat (t_ns, payload_before, payload_after)
    error_class: str | None = None
    error_message: str | None = None


class TimedResponseHandler(ResponseHandler):
    """Timestamps every socket read when it arrives, before any task runs.

    With many streams, one loop iteration can deliver dozens of reads; a task-side clock
    would stamp the last of them only after the others were processed. Here the time is taken
    in `data_received`, together with how many payload bytes the read produced, so each SSE
    event can be given the arrival time of the read that completed it.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop)
        self.recv_log: list[int] | None = None

    def data_received(self, data: bytes) -> None:
        log = self.recv_log
        if log is None or not data:
            super().data_received(data)
            return
        t = time.monotonic_ns()
        payload = self._payload
        before = payload.total_bytes if payload is not None else -1
        super().data_received(data)
        after = payload.total_bytes if payload is not None else -1
        log.extend((t, before, after))


def make_session(concurrency_hint: int, timeout_s: float) -> aiohttp.ClientSession:
    """One session for the whole run; the caller closes it."""
    connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300, enable_cleanup_closed=True)
    if hasattr(connector, "_factory"):
        # aiohttp builds each connection's protocol from this factory; ours only adds a clock.
        connector._factory = functools.partial(TimedResponseHandler, loop=asyncio.get_event_loop())
    return aiohttp.ClientSession(
        connector=connector,
        timeout=aiohttp.ClientTimeout(total=timeout_s, sock_connect=min(10.0, timeout_s)),
        read_bufsize=READ_BUFSIZE,
        auto_decompress=False,
        skip_auto_headers=("User-Agent",),
    )


def _classify(exc: BaseException, got_data: bool) -> tuple[str, str]:
    msg = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
    if isinstance(exc, asyncio.TimeoutError | aiohttp.ServerTimeoutError):
        return "timeout", msg or "timeout"
    if isinstance(exc, aiohttp.ClientConnectorError):
        os_err = exc.os_error
        if isinstance(os_err, ConnectionRefusedError) or getattr(os_err, "errno", None) == errno.ECONNREFUSED:
            return "connection_refused", msg
        return "connection_error", msg
    if isinstance(exc, aiohttp.ClientPayloadError | aiohttp.ServerDisconnectedError):
        return ("truncated_sse" if got_data else "connection_reset"), msg
    if isinstance(exc, ConnectionResetError | aiohttp.ClientOSError):
        return ("truncated_sse" if got_data else "connection_reset"), msg
    return "connection_error", msg


async def stream_post(
    session: aiohttp.ClientSession,
    url: str,
    body: bytes,
    headers: dict[str, str],
    raw: RawResponse,
) -> RawResponse:
    """POST `body` and record the raw stream into `raw`. Never raises for a per-request failure.

    Ownership: the caller creates `raw` and keeps it, so that when the task is cancelled
    (the run was interrupted) everything received so far is still in its hands.
    """
    monotonic_ns = time.monotonic_ns
    raw.send_ns = monotonic_ns()
    read_ns = raw.read_ns
    reads = raw.reads
    try:
        async with session.post(url, data=body, headers=headers) as resp:
            raw.headers_ns = monotonic_ns()
            raw.status = resp.status
            proto = resp.connection.protocol if resp.connection is not None else None
            if isinstance(proto, TimedResponseHandler):
                proto.recv_log = raw.recv_log
            raw.server_request_id = resp.headers.get("x-request-id")
            if resp.status != 200:
                text = (await resp.read())[:_ERROR_BODY_LIMIT].decode("utf-8", "replace")
                raw.error_class = f"http_{resp.status}"
                raw.error_message = text.replace("\n", " ")[:300]
            else:
                readany = resp.content.readany
                while True:
                    data = await readany()
                    if not data:
                        break
                    read_ns.append(monotonic_ns())
                    reads.append(data)
    except asyncio.CancelledError:
        _detach(raw)
        raw.error_class, raw.error_message = "cancelled", "run interrupted"
        raw.end_ns = monotonic_ns()
        raise
    except Exception as exc:
        raw.error_class, raw.error_message = _classify(exc, bool(reads))
    _detach(raw)
    raw.end_ns = monotonic_ns()
    return raw


def _detach(raw: RawResponse) -> None:
    # The connection goes back to the pool; its next request must not log into this one.
    raw.recv_log = list(raw.recv_log)


def retime(raw: RawResponse) -> tuple[list[int], list[bytes]]:
    """The body cut at socket-read boundaries stamped on arrival (`recv_log`).

    Bytes the log does not cover (those that came with the headers, before the log was
    attached) keep the time the reading task saw them, which is never earlier than arrival.
    """
    log = raw.recv_log
    if not log:
        return raw.read_ns, raw.reads
    body = b"".join(raw.reads)
    n = len(body)
    reads = []
    off = 0
    for t, d in zip(raw.read_ns, raw.reads, strict=True):
        reads.append((off, off + len(d), t))
        off += len(d)
    out_t: list[int] = []
    out_d: list[bytes] = []
    pos = 0
    ri = 0

    def gap(upto: int) -> None:
        nonlocal pos, ri
        while pos < upto and ri < len(reads):
            a, b, t = reads[ri]
            if b <= pos:
                ri += 1
                continue
            end = min(b, upto)
            out_t.append(t)
            out_d.append(body[pos:end])
            pos = end
        pos = max(pos, upto)

    for i in range(0, len(log), 3):
        t, a, b = log[i], log[i + 1], log[i + 2]
        if a < 0:
            continue
        b = n if b < 0 else min(b, n)
        if a > pos:
            gap(a)
        if b > pos:
            out_t.append(t)
            out_d.append(body[pos:b])
            pos = b
    if pos < n:
        gap(n)
    # Earlier bytes arrived no later than later ones: an unstamped segment's task-side time
    # is capped by the arrival stamp that follows it.
    for i in range(len(out_t) - 2, -1, -1):
        if out_t[i] > out_t[i + 1]:
            out_t[i] = out_t[i + 1]
    return out_t, out_d
