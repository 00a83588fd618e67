"""The column buffers a run fills (chunks, requests, scrapes, steps, memory, client health)
and when each goes to the store writer.

Ownership: one `RunRows` per runner, used on the run's event loop only; the writer it hands
batches to belongs to the caller.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from infbench.loadgen.http.client import RawResponse
from infbench.loadgen.run.client_health import HealthSample
from infbench.loadgen.run.stream_rows import request_row
from infbench.loadgen.sse.parser import ParsedStream
from infbench.loadgen.telemetry.memory_ledger import memory_row
from infbench.loadgen.workloads.base import RequestSpec
from infbench.store.writer import ArrayBuffer, BatchWriter, ColumnBuffer

CHUNK_BATCH_ROWS = 65536
REQUEST_BATCH_ROWS = 2048
_CLIENT_BATCH_ROWS = 256
_SCRAPE_BATCH_ROWS = 20000


class RunRows:
    def __init__(self, writer: BatchWriter) -> None:
        self.writer = writer
        self.chunks = ArrayBuffer("chunks")
        self.requests = ColumnBuffer("requests")
        self.metrics = ColumnBuffer("metric_samples")
        self.steps = ColumnBuffer("engine_steps")
        self.memory = ColumnBuffer("memory_samples")  # derived from each /metrics scrape
        self.client = ColumnBuffer("client_samples")

    def request(self, idx: int, spec: RequestSpec, intended_ns: int, raw: RawResponse,
                p: ParsedStream, *, t0_ns: int, warmup_s: float, error_class: str | None,
                error_message: str | None, replica: str | None, conc: int) -> dict[str, Any]:
        """One request's chunk rows and its request row (returned, as stored)."""
        n = len(p.seq)
        if n:
            self.chunks.extend({
                "request_idx": np.full(n, idx, dtype=np.int32), "seq": p.seq,
                "t_ns": np.asarray(p.t_ns, dtype=np.int64) - t0_ns,
                "read_idx": p.read_idx, "nbytes": p.nbytes, "content": p.content,
                "coalesced": p.coalesced})
        row = request_row(idx, spec, intended_ns, raw, p, t0=t0_ns, warmup_s=warmup_s,
                          error_class=error_class, error_message=error_message)
        row["replica"] = replica
        row["replica_concurrency"] = conc
        self.requests.append(row)
        if len(self.chunks) >= CHUNK_BATCH_ROWS:
            self.writer.put_buffer(self.chunks)
        if len(self.requests) >= REQUEST_BATCH_ROWS:
            self.writer.put_buffer(self.requests)
        return row

    def health(self, s: HealthSample, t0_ns: int, in_flight: int, done: int, errors: int) -> None:
        self.client.append({
            "t_ns": s.t_ns - t0_ns, "in_flight": in_flight, "completed": done, "errors": errors,
            "loop_lag_ms": s.loop_lag_ms, "schedule_lag_ms": s.schedule_lag_ms,
            "cpu_percent": s.cpu_percent, "rss_bytes": s.rss_bytes})
        if len(self.client) >= _CLIENT_BATCH_ROWS:
            self.writer.put_buffer(self.client)

    def scrape(self, cols: dict[str, list[Any]]) -> None:
        if cols["name"]:
            self.metrics.extend(cols)
            memory = memory_row(cols)
            if memory is not None:
                self.memory.append(memory)
        if len(self.metrics) >= _SCRAPE_BATCH_ROWS:
            self.writer.put_buffer(self.metrics)

    def engine_steps(self, cols: dict[str, list[Any]]) -> None:
        self.steps.extend(cols)
        if len(self.steps) >= _SCRAPE_BATCH_ROWS:
            self.writer.put_buffer(self.steps)

    def flush(self) -> None:
        """Everything buffered to the writer."""
        for buf in (self.chunks, self.requests, self.metrics, self.steps, self.client, self.memory):
            self.writer.put_buffer(buf)
