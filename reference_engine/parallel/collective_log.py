"""Each rank's collective log: one entry per collective, with Flight Recorder's fields.

Field names, meanings and value formats are PyTorch's Flight Recorder's (FlightRecorder.hpp:
`record_id, pg_id, process_group (name, desc), collective_seq_id, p2p_seq_id, op_id,
profiling_name ("gloo:all_reduce"), time_created_ns, input_sizes, input_dtypes,
output_sizes, output_dtypes, state, time_discovered_started_ns, time_discovered_completed_ns,
retired, timeout_ms, is_p2p, frames, thread_id, thread_name` and `duration_ms`), so a dump
of it reads like one of torch's. Unlike torch's recorder on gloo (whose entries stay
"scheduled" with no discovered times in torch 2.13), this log moves every entry through
scheduled -> started -> completed as the call really proceeds, which is what says where a
hung rank stopped.

Owns: the entries (a ring buffer of the newest `capacity`) and the per-group counters. The
thread issuing collectives writes; the watchdog and dump threads read; one lock guards both.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import deque
from types import FrameType
from typing import Any

# torch's ScalarType names, as Flight Recorder writes them ("Float", not "torch.float32").
DTYPE_NAMES = {"torch.float32": "Float", "torch.float64": "Double", "torch.float16": "Half",
               "torch.bfloat16": "BFloat16", "torch.int64": "Long", "torch.int32": "Int",
               "torch.int8": "Char", "torch.uint8": "Byte", "torch.bool": "Bool"}
SCHEDULED, STARTED, COMPLETED = "scheduled", "started", "completed"
_FRAMES_KEPT = 12


def dtype_name(dtype: object) -> str:
    return DTYPE_NAMES.get(str(dtype), str(dtype).removeprefix("torch."))


def caller_frames(skip: int) -> list[dict[str, Any]]:
    """Python frames of the caller, innermost first, as Flight Recorder lists them."""
    frames: list[dict[str, Any]] = []
    frame: FrameType | None = sys._getframe(skip + 1)
    while frame is not None and len(frames) < _FRAMES_KEPT:
        frames.append({"name": frame.f_code.co_name, "filename": frame.f_code.co_filename,
                       "line": frame.f_lineno})
        frame = frame.f_back
    return frames


class CollectiveLog:
    def __init__(self, backend: str, ranks: list[int], timeout_s: float,
                 capacity: int = 2000, pg_name: str = "0", pg_desc: str = "default_pg") -> None:
        self.backend = backend
        self.ranks = list(ranks)
        self.timeout_ms = int(timeout_s * 1000)
        self.pg_name, self.pg_desc = pg_name, pg_desc
        self.started_ns = time.time_ns()
        self._entries: deque[dict[str, Any]] = deque(maxlen=capacity)
        self._lock = threading.Lock()
        self._next_record = 0
        self._seq = 0                     # collective_seq_id of the last enqueued collective
        self._last_started = -1
        self._last_completed = -1
        self._in_flight: dict[str, Any] | None = None

    # -- the issuing thread --------------------------------------------------------------
    def scheduled(self, op: str, inputs: list[Any], outputs: list[Any],
                  frames: list[dict[str, Any]]) -> dict[str, Any]:
        """Enqueue one collective (`op` like "all_reduce"); returns its entry."""
        thread = threading.current_thread()
        with self._lock:
            self._seq += 1
            entry = {
                "record_id": self._next_record, "pg_id": 0,
                "process_group": (self.pg_name, self.pg_desc),
                "collective_seq_id": self._seq, "p2p_seq_id": 0, "op_id": self._seq,
                "profiling_name": f"{self.backend}:{op}", "time_created_ns": time.time_ns(),
                "input_sizes": [list(t.shape) for t in inputs],
                "input_dtypes": [dtype_name(t.dtype) for t in inputs],
                "output_sizes": [list(t.shape) for t in outputs],
                "output_dtypes": [dtype_name(t.dtype) for t in outputs],
                "state": SCHEDULED, "time_discovered_started_ns": None,
                "time_discovered_completed_ns": None, "retired": False,
                "timeout_ms": self.timeout_ms, "is_p2p": False, "frames": frames,
                "thread_id": str(thread.ident), "thread_name": thread.name,
            }
            self._next_record += 1
            self._entries.append(entry)
            self._in_flight = entry
        return entry

    def started(self, entry: dict[str, Any]) -> None:
        with self._lock:
            entry["state"] = STARTED
            entry["time_discovered_started_ns"] = time.time_ns()
            self._last_started = entry["collective_seq_id"]

    def completed(self, entry: dict[str, Any]) -> None:
        with self._lock:
            now = time.time_ns()
            entry["state"] = COMPLETED
            entry["time_discovered_completed_ns"] = now
            entry["retired"] = True
            entry["duration_ms"] = (now - entry["time_discovered_started_ns"]) / 1e6
            self._last_completed = entry["collective_seq_id"]
            if self._in_flight is entry:
                self._in_flight = None

    def failed(self, entry: dict[str, Any]) -> None:
        """The call raised (a peer went away): it stays started, and is no longer waited on."""
        with self._lock:
            if self._in_flight is entry:
                self._in_flight = None

    # -- any thread ----------------------------------------------------------------------
    def in_flight(self) -> tuple[dict[str, Any], float] | None:
        """The collective this rank is inside, and seconds since it was issued."""
        with self._lock:
            entry = self._in_flight
            if entry is None:
                return None
            return dict(entry), (time.time_ns() - entry["time_created_ns"]) / 1e9

    def entries(self) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(e, frames=list(e["frames"])) for e in self._entries]

    def pg_status(self) -> dict[str, dict[str, int]]:
        with self._lock:
            return {"0": {"last_enqueued_collective": self._seq,
                          "last_started_collective": self._last_started,
                          "last_completed_collective": self._last_completed}}

    def pg_config(self) -> dict[str, dict[str, str]]:
        return {self.pg_name: {"name": self.pg_name, "desc": self.pg_desc,
                               "ranks": str(self.ranks)}}

    def check_invariants(self) -> None:
        with self._lock:
            assert self._last_completed <= self._last_started <= self._seq
            seqs = [e["collective_seq_id"] for e in self._entries]
            assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
            for e in self._entries:
                assert (e["state"] == COMPLETED) == (e["time_discovered_completed_ns"] is not None)
                assert e["collective_seq_id"] <= self._last_completed or e["state"] != COMPLETED
