"""Finished streams into rows: parse each recorded stream, append its request and chunk rows,
feed the live numbers (progress, `--metrics-port`, the sizer), off the send path.

The runner hands every finished stream to `submit` (or to `record_now` when the next turn of a
conversation needs the text at once); a background task (`run`) parses the backlog one slice
per pacer turn, so reads of other streams are not held up while many streams end together.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import Any

from infbench.loadgen.http.bodies import redact
from infbench.loadgen.http.client import RawResponse
from infbench.loadgen.run.buffers import RunRows
from infbench.loadgen.run.pacer import Pacer
from infbench.loadgen.run.stream_rows import parse_now, parse_stream
from infbench.loadgen.run.types import LiveStats
from infbench.loadgen.sse.parser import ParsedStream
from infbench.loadgen.telemetry.exposition import LiveExposition
from infbench.loadgen.workloads.base import RequestSpec
from infbench.loadgen.workloads.sizing import Sizer

# Finished streams waiting beyond this many (the client is saturated) get the recorder the
# next turn of every loop iteration until the backlog is short again, so memory stays bounded.
_BACKLOG_SOFT = 256
_RECORD_SLICE_NS = 1_000_000  # parsing per recorder turn: reads wait at most about this long

# (idx, spec, intended_ns, raw, replica name or None, the replica's concurrency at send)
Finished = tuple[int, RequestSpec, int, RawResponse, str | None, int]


class Recorder:
    """Owns: the backlog of finished streams (its only consumer during the run is `run`;
    `flush_all` drains what is left, also after an interruption, so nothing received is lost)
    and the run's row buffers (`rows`)."""

    def __init__(self, rows: RunRows, stats: LiveStats, sizer: Sizer, pacer: Pacer,
                 expo: LiveExposition | None, *, needs_text: bool, warmup_s: float,
                 api_key: str | None) -> None:
        self.rows = rows
        self.t0_ns = 0  # set by the runner when the run's clock starts
        self._stats, self._sizer, self._pacer, self._expo = stats, sizer, pacer, expo
        self._needs_text, self._warmup_s, self._api_key = needs_text, warmup_s, api_key
        self._backlog: deque[Finished] = deque()
        self._ready = asyncio.Event()

    def keep(self, item: Finished) -> None:
        """A stream cut short (cancelled): recorded by `flush_all`, not parsed now."""
        self._backlog.append(item)

    def submit(self, item: Finished) -> None:
        self._backlog.append(item)
        self._ready.set()

    async def record_now(self, item: Finished) -> ParsedStream:
        parsed = await parse_stream(item[3], self._needs_text)
        self._record(item, parsed)
        return parsed

    async def run(self) -> None:
        backlog = self._backlog
        while True:
            await self._ready.wait()
            self._ready.clear()
            while backlog:
                # At most a slice of work per loop iteration, so reads between are not held
                # up; a long backlog (a saturated client) goes to the front of the queue
                # instead of taking bigger slices, so memory stays bounded either way.
                await self._pacer.turn(first=len(backlog) >= _BACKLOG_SOFT)
                until = time.monotonic_ns() + _RECORD_SLICE_NS
                while backlog:
                    item = backlog[0]
                    parsed = await parse_stream(item[3], self._needs_text)  # cancelled: still queued
                    backlog.popleft()
                    self._record(item, parsed)
                    if time.monotonic_ns() >= until:
                        break

    def flush_all(self) -> None:
        while self._backlog:
            item = self._backlog.popleft()
            self._record(item, parse_now(item[3], self._needs_text))
        self.rows.flush()

    def _record(self, item: Finished, p: ParsedStream) -> None:
        idx, spec, intended_ns, raw, replica, conc = item
        error_class = raw.error_class or p.error_class
        row = self.rows.request(
            idx, spec, intended_ns, raw, p, t0_ns=self.t0_ns, warmup_s=self._warmup_s,
            error_class=error_class, error_message=redact(raw.error_message or p.error_message, self._api_key),
            replica=replica, conc=conc)
        self._sizer.observe(spec, row["prompt_tokens"])
        if self._expo is not None:
            self._expo.observe(p, raw.send_ns, raw.end_ns or None, error_class is None)
        st = self._stats
        st.recent_done_ns.append(raw.end_ns or time.monotonic_ns())
        if error_class is None:
            st.finished(raw.send_ns, p.first_chunk_ns, p.first_content_ns, p.mean_itl_ns(),
                        replica, conc)
        else:
            st.errors += 1
            st.errors_by_class[error_class] = st.errors_by_class.get(error_class, 0) + 1

    def scrape_rows(self, cols: dict[str, list[Any]]) -> None:
        self.rows.scrape(cols)

    def step_rows(self, cols: dict[str, list[Any]]) -> None:
        self.rows.engine_steps(cols)
