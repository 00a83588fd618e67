"""What a worker and the coordinator say to each other, on a pipe or through Ray.

Every message is a small tuple whose first item names it. Rows travel as Arrow IPC streams
(one table per message, `encode`/`decode`): the worker turns its column buffers into Arrow
once, the coordinator hands the decoded table to the store writer without touching a row.

worker -> coordinator
    ("hello", worker, {"hostname", "pid", "boot_id", "node"})
    ("pong", worker, monotonic_ns)          answer to a clock ping (a pipe; Ray asks directly)
    ("ready", worker)                       connections open, waiting for the start
    ("batch", worker, table, ipc_bytes)     rows; request rows carry the run's request_idx
    ("progress", worker, {"sent", "done", "errors", "in_flight"})
    ("done", worker, outcome)               `RunOutcome` fields as a dict
    ("error", worker, text)                 the worker failed; nothing more will come
coordinator -> worker (a pipe; Ray calls the actor's methods of the same names)
    ("ping",)   ("go", t0_ns)   ("stop", reason)
"""

from __future__ import annotations

import os
import socket
from typing import Any

import pyarrow as pa

Message = tuple[Any, ...]

# Rows a worker has recorded are shipped at least this often (and when a buffer fills).
SHIP_INTERVAL_S = 0.5


def encode(batch: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as out:
        out.write_table(batch)
    return sink.getvalue().to_pybytes()


def decode(data: bytes) -> pa.Table:
    with pa.ipc.open_stream(pa.py_buffer(data)) as reader:
        return reader.read_all()


def boot_id() -> str | None:
    """This kernel boot's id: two processes with the same one read the same CLOCK_MONOTONIC."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as fh:
            return fh.read().strip()
    except OSError:
        return None


def host_info(node: str | None = None) -> dict[str, Any]:
    return {"hostname": socket.gethostname(), "pid": os.getpid(), "boot_id": boot_id(),
            "node": node or socket.gethostname()}
