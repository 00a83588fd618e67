"""The client hot path: send one streaming request, timestamp every socket read.

Nothing here parses JSON or splits SSE events while the stream is open: each read is kept as
raw bytes with the monotonic time it returned, and `infbench.loadgen.sse` turns those into
events after the request ends. That keeps the per-chunk cost to one `readany()`, one clock
read and two list appends, so the client's own overhead stays out of the measurement.
"""

from __future__ import annotations

import asyncio
import errno
import time
from dataclasses import dataclass, field

import aiohttp

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
    error_class: str | None = None
    error_message: str | None = None


def make_session(concurrency_hint: int, timeout_s: float) -> aiohttp.ClientSession:
    """One session for the whole run; the caller closes it."""
    connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300, enable_cleanup_closed=True)
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
        raw.error_class, raw.error_message = "cancelled", "run interrupted"
        raw.end_ns = monotonic_ns()
        raise
    except Exception as exc:
        raw.error_class, raw.error_message = _classify(exc, bool(reads))
    raw.end_ns = monotonic_ns()
    return raw
