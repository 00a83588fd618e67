"""The client hot path: send one streaming request, timestamp every socket read.

Nothing here parses JSON or splits SSE events while the stream is open: the connection
(`infbench.loadgen.http.pool`) stamps each socket read as it arrives and keeps the decoded body
in pieces until the stream ends, and `infbench.loadgen.sse.parser` turns body and stamps into
events after the request ends. The per-read cost is one kernel stamp, a walk over the chunk
framing and a few list appends; no task wakes up per read.
"""

from __future__ import annotations

import asyncio
import errno
import selectors
import socket
import struct
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from infbench.loadgen.http.pool import Exchange, Pool

_ERROR_BODY_LIMIT = 2000
T = TypeVar("T")


@dataclass(slots=True)
class RawResponse:
    """What the wire gave us for one request; times are `time.monotonic_ns()`.

    `reads` holds the decoded body (one piece from `stream_post`; any cut in tests) and
    `read_ns` when each piece was seen; `recv_log` gives, per socket read that brought body
    bytes, its arrival stamp and the body offsets before and after it. Bytes the log does not
    cover keep the `read_ns` time of their piece (see `retime`, `arrival_times`).
    """

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


class TimedSelector(selectors.DefaultSelector):
    """Remembers when `select()` last returned.

    Every read handed out by one `select()` was in the kernel by then; the loop then runs
    their callbacks one after another, so a clock read inside each callback would add the
    time spent on the reads before it (a millisecond or more when 64 streams' reads come
    together). Stamping reads with the select's return time removes that.
    """

    last_ns = 0

    def select(self, timeout: float | None = None) -> list[Any]:
        ready = super().select(timeout)
        self.last_ns = time.monotonic_ns()
        return ready


def timed_loop() -> asyncio.AbstractEventLoop:
    """An event loop whose socket reads can be stamped at select time."""
    return asyncio.SelectorEventLoop(TimedSelector())


def run_timed(coro: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run` on a `timed_loop()`."""
    with asyncio.Runner(loop_factory=timed_loop) as runner:
        return runner.run(coro)


def _read_clock(loop: asyncio.AbstractEventLoop) -> Callable[[], int]:
    selector = getattr(loop, "_selector", None)
    if isinstance(selector, TimedSelector):
        return lambda: selector.last_ns
    return time.monotonic_ns


# Linux: SO_TIMESTAMPNS (asm-generic value; the socket module does not export it) makes the
# kernel stamp each received packet, and recvmsg() hands back the stamp of the last one read.
_SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
_CMSG_SPACE = socket.CMSG_SPACE(16) if hasattr(socket, "CMSG_SPACE") else 0
_STAMP = struct.Struct("qq")  # struct timespec
_MAX_STAMP_AGE_NS = 10 * 10**9  # older than this: the wall clock was stepped; do not trust it


class StampedSocket(socket.socket):
    """A socket whose reads carry the kernel's arrival time of the data, on the monotonic clock.

    The stamp is taken when the packet reaches the socket's receive queue, so it does not
    depend on when the client process is scheduled or how busy its event loop is: a client
    that is late to read still records when the bytes arrived. One read gets one stamp, its
    newest packet's (the kernel also merges queued segments, keeping the newer stamp), so
    packets that arrived apart and were read together share the last one's time: the parser
    marks such events `coalesced` and ITL spreads the read's gap over them. The kernel stamps
    in CLOCK_REALTIME; the offset to CLOCK_MONOTONIC is read at each receive.
    """

    rx_ns = 0  # arrival of the last read's data (monotonic ns); 0 when the kernel gave none

    def enable(self) -> bool:
        try:
            self.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
        except OSError:
            return False
        return True

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        data, anc, _, _ = self.recvmsg(bufsize, _CMSG_SPACE, flags)
        self.rx_ns = _arrival(anc) if anc else 0
        return data

    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
        # asyncio's TLS transport reads this way
        view = memoryview(buffer)
        n, anc, _, _ = self.recvmsg_into([view[:nbytes] if nbytes else view], _CMSG_SPACE, flags)
        self.rx_ns = _arrival(anc) if anc else 0
        return n


def _arrival(anc: list[tuple[int, int, bytes]]) -> int:
    """The kernel's receive stamp in a read's ancillary data, on the monotonic clock; 0 if
    there is none (the kernel enables stamping lazily, so the first packets may have none).
    Runs once per socket read, so it is kept to a few operations."""
    level, kind, payload = anc[0]  # the only control message the socket asked for
    if kind != _SO_TIMESTAMPNS or level != socket.SOL_SOCKET or len(payload) < 16:
        return 0
    sec, nsec = _STAMP.unpack_from(payload)
    now = time.monotonic_ns()
    offset = _offset[0] if now - _offset[1] < _OFFSET_TTL_NS else _realtime_offset(now)
    rx = sec * 1_000_000_000 + nsec - offset
    return rx if now - _MAX_STAMP_AGE_NS < rx <= now else 0


_OFFSET_TTL_NS = 50_000_000
_offset = [0, -_OFFSET_TTL_NS]  # CLOCK_REALTIME - CLOCK_MONOTONIC, and when it was read


def _realtime_offset(now: int) -> int:
    """CLOCK_REALTIME minus CLOCK_MONOTONIC, re-read every 50 ms.

    Read as the tightest of a few back-to-back pairs: a pause between the two clock reads
    (an interrupt, another thread) would shift every stamp converted with it.
    """
    if now - _offset[1] < _OFFSET_TTL_NS:
        return _offset[0]
    best_gap, best = None, 0
    for _ in range(3):
        m1 = time.monotonic_ns()
        r = time.time_ns()
        m2 = time.monotonic_ns()
        if best_gap is None or m2 - m1 < best_gap:
            best_gap, best = m2 - m1, r - (m1 + m2) // 2
    _offset[0], _offset[1] = best, now
    return best


def stamped_socket(addr_info: Any) -> socket.socket:
    """A `StampedSocket` where the platform supports it, else a plain socket."""
    family, type_, proto, _, _ = addr_info
    sock = StampedSocket(family=family, type=type_, proto=proto)
    if _CMSG_SPACE and sock.enable():
        return sock
    sock.close()
    return socket.socket(family=family, type=type_, proto=proto)


def make_pool(url: str, timeout_s: float) -> Pool:
    """The run's connection pool; reads carry kernel arrival stamps where the OS gives them,
    else the time the event loop's `select()` returned (see `run_timed`)."""
    return Pool(url, timeout_s, connect_timeout_s=min(10.0, timeout_s), socket_factory=stamped_socket,
                clock=_read_clock(asyncio.get_running_loop()))


async def stream_post(
    pool: Pool,
    request: bytes,
    raw: RawResponse,
    pace: Callable[[asyncio.Future[None]], None] | None = None,
) -> RawResponse:
    """Send `request` (built by `pool.request_bytes`) and record the reply into `raw`.

    Never raises for a per-request failure: it lands in `raw.error_class`. Ownership: the
    caller creates `raw` and keeps it, so that when the task is cancelled (the run was
    interrupted) everything received so far is still in its hands. `pace` as in `Pool.send`.
    """
    raw.send_ns = time.monotonic_ns()
    ex = Exchange()
    try:
        await pool.send(request, ex, pace)
    except asyncio.CancelledError:
        _take(raw, ex)
        raw.error_class, raw.error_message = "cancelled", "run interrupted"
        raise
    except TimeoutError:
        _take(raw, ex)
        raw.error_class = "timeout"
        raw.error_message = (f"no complete response within {pool.timeout_s:g} s "
                             f"({ex.body_bytes} body bytes received)")
        return raw
    except OSError as exc:
        _take(raw, ex)
        refused = isinstance(exc, ConnectionRefusedError) or exc.errno == errno.ECONNREFUSED
        raw.error_class = "connection_refused" if refused else "connection_error"
        raw.error_message = (f"{type(exc).__name__}: {exc}".splitlines() or [""])[0][:300]
        return raw
    _take(raw, ex)
    return raw


def _take(raw: RawResponse, ex: Exchange) -> None:
    """Move what the exchange received into `raw`: the body whole, cut by `recv_log`."""
    raw.end_ns = time.monotonic_ns()
    raw.status = ex.status
    raw.headers_ns = ex.headers_ns
    raw.server_request_id = ex.headers.get("x-request-id") or ex.headers.get("request-id")
    if ex.parts:
        raw.reads = [ex.body()]
        raw.read_ns = [ex.last_ns or raw.end_ns]
        raw.recv_log = ex.recv_log
    if ex.error_class is not None:
        raw.error_class, raw.error_message = ex.error_class, ex.error_message
    elif ex.status is not None and ex.status != 200 and ex.ended:
        text = ex.body()[:_ERROR_BODY_LIMIT].decode("utf-8", "replace")
        raw.error_class = f"http_{ex.status}"
        raw.error_message = text.replace("\n", " ")[:300]


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


def arrival_times(raw: RawResponse, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """When the body byte at each of `offsets` (ascending) arrived, and which read brought it.

    The vectorised form of `retime` for the parser's fast path: a byte covered by a protocol
    stamp (`recv_log`) gets that stamp, any other byte the time the reading task saw its read;
    no byte is later than a byte after it. The second array numbers the pieces (stamped reads
    or task reads) in byte order, so bytes from the same read share a number; the third is
    how many pieces the body arrived in.
    """
    if not raw.reads:
        return np.empty(0, np.int64), np.empty(0, np.int64), 0
    lens = np.fromiter(map(len, raw.reads), np.int64, len(raw.reads))
    read_end = np.cumsum(lens)
    n = int(read_end[-1]) if len(read_end) else 0
    log = np.asarray(raw.recv_log, dtype=np.int64).reshape(-1, 3)
    if len(log) and log[0, 1] == 0 and log[-1, 2] == n and np.array_equal(log[1:, 1], log[:-1, 2]):
        # The usual case: stamps cover the body end to end, one piece per stamped read.
        i = np.searchsorted(log[:, 2], offsets, side="right")
        t = np.minimum.accumulate(log[::-1, 0])[::-1]
        return t[i], i, len(log)
    read_start = read_end - lens
    read_t = np.asarray(raw.read_ns, dtype=np.int64)
    log = log[log[:, 1] >= 0]
    seg_t = log[:, 0]
    seg_a = np.minimum(log[:, 1], n)
    seg_b = np.where(log[:, 2] < 0, n, np.minimum(log[:, 2], n))
    keep = seg_b > seg_a
    seg_t, seg_a, seg_b = seg_t[keep], seg_a[keep], seg_b[keep]
    # Times are looked up for the wanted offsets and for every piece start, so that the
    # "never later than a later byte" cap also sees pieces that complete no event.
    points = np.concatenate([offsets, seg_a, read_start])
    j = np.searchsorted(seg_b, points, side="right")
    jc = np.minimum(j, max(len(seg_b) - 1, 0))
    covered = (j < len(seg_b)) & (seg_a[jc] <= points) if len(seg_b) else np.zeros(len(points), bool)
    k = np.minimum(np.searchsorted(read_end, points, side="right"), len(read_end) - 1)
    t = np.where(covered, seg_t[jc] if len(seg_b) else 0, read_t[k])
    # An unstamped byte's piece starts at its read's start or where the stamp before it ended.
    prev_b = seg_b[np.maximum(j - 1, 0)] if len(seg_b) else np.zeros(len(points), np.int64)
    gap_start = np.maximum(read_start[k], np.where(j > 0, prev_b, 0))
    piece = np.where(covered, seg_a[jc] if len(seg_b) else 0, gap_start)
    order = np.argsort(points, kind="stable")
    capped = np.empty_like(t)
    capped[order] = np.minimum.accumulate(t[order][::-1])[::-1]
    m = len(offsets)
    ids = np.concatenate(([0], np.cumsum(np.diff(piece[:m]) != 0))) if m else np.empty(0, np.int64)
    # Pieces: the stamped reads, plus the task-side reads no stamp covers the start of.
    uncovered_reads = int(np.count_nonzero(~covered[m + len(seg_a):]))
    return capped[:m], ids, len(seg_a) + uncovered_reads
