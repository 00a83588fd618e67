"""Per-rank collective watchdog, and the dump signal every rank listens to.

Like NCCL's watchdog and heartbeat monitor: a thread on every rank looks at the collective
the rank is inside; past `timeout_s` it logs one line naming the rank, the collective's
sequence id and op, writes the rank's dump and raises the dump signal in the rendezvous
store (the TCPStore the group was built on), so every other rank dumps too, including a
rank that is stuck outside any collective. A dump asked for over HTTP raises the same
signal. The watchdog does not abort the group: the hang stays in place for stack capture.

Store keys (counters via `add`, so reading never blocks): `DUMP_REQUESTS` (dumps asked
for), `TIMEOUTS` (watchdog trips on any rank), `dumped/<rank>` (the last request a rank
has written), `trip/<rank>` (JSON: the collective a rank timed out in).

Owns: `timeouts_here`, `timeouts_anywhere`, `trips` (rank -> its trip; written by the
watchdog thread, read by any thread under `_lock`).
"""

from __future__ import annotations

import datetime
import json
import logging
import threading
from collections.abc import Callable
from typing import Any

import torch.distributed as dist

from reference_engine.parallel.collective_log import CollectiveLog
from reference_engine.parallel.flight_recorder import build_dump, dump_path, torch_trace, write_dump

log = logging.getLogger("reference_engine.parallel")
DUMP_REQUESTS = "reference_engine/fr/dump_requests"
TIMEOUTS = "reference_engine/fr/timeouts"
STORE_TIMEOUT = datetime.timedelta(seconds=10)


def dumped_key(rank: int) -> str:
    return f"reference_engine/fr/dumped/{rank}"


def trip_key(rank: int) -> str:
    return f"reference_engine/fr/trip/{rank}"


def store_client(port: int) -> dist.TCPStore:
    """A client of the group's rendezvous store, for one thread's use."""
    return dist.TCPStore("127.0.0.1", port, is_master=False, wait_for_workers=False,
                         timeout=STORE_TIMEOUT)


class Watchdog:
    def __init__(self, rank: int, log_: CollectiveLog, timeout_s: float, store_port: int,
                 dump_dir: str | None, on_lost: Callable[[], None] | None = None) -> None:
        self.rank = rank
        self.world = len(log_.ranks)
        self.log = log_
        self.timeout_s = timeout_s
        self.dump_dir = dump_dir
        self._port = store_port
        self._on_lost = on_lost        # called when the store is gone (rank 0 died)
        self._poll_s = min(0.25, timeout_s / 8)
        self._lock = threading.Lock()
        self.timeouts_here = 0
        self.timeouts_anywhere = 0
        self.trips: dict[int, dict[str, Any]] = {}
        self._tripped_record: int | None = None
        self._dumped = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"collective-watchdog-{rank}",
                                        daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def status(self) -> dict[str, Any]:
        with self._lock:
            return {"timeouts_here": self.timeouts_here,
                    "timeouts_anywhere": self.timeouts_anywhere,
                    "trips": {r: dict(t) for r, t in sorted(self.trips.items())}}

    def dump_now(self) -> str | None:
        """Write this rank's dump; returns its path (None without a dump dir)."""
        if self.dump_dir is None:
            return None
        path = dump_path(self.dump_dir, self.rank)
        write_dump(build_dump(self.log, torch_trace()), path)
        return str(path)

    def _run(self) -> None:
        try:
            store = store_client(self._port)
        except Exception as exc:
            log.warning("rank %d watchdog: rendezvous store unreachable (%s)", self.rank, exc)
            return
        while not self._stop.wait(self._poll_s):
            try:
                self._check_in_flight(store)
                self._serve_dump_requests(store)
                seen = store.add(TIMEOUTS, 0)
                if seen > len(self.trips):
                    self._read_trips(store)
            except Exception as exc:  # the store died with rank 0: nothing left to watch for
                if self._stop.is_set():
                    return
                log.warning("rank %d watchdog: rendezvous store lost (%s)", self.rank,
                            str(exc).splitlines()[0] if str(exc) else exc)
                if self._on_lost is not None:
                    self._on_lost()
                return
            with self._lock:
                self.timeouts_anywhere = max(self.timeouts_anywhere, seen)

    def _check_in_flight(self, store: dist.TCPStore) -> None:
        current = self.log.in_flight()
        if current is None:
            return
        entry, age = current
        if age <= self.timeout_s or entry["record_id"] == self._tripped_record:
            return
        self._tripped_record = entry["record_id"]
        trip = {"rank": self.rank, "collective_seq_id": entry["collective_seq_id"],
                "profiling_name": entry["profiling_name"], "age_s": round(age, 3)}
        log.error("collective watchdog: rank %d timed out in %s (collective seq id %d) after "
                  "%.1f s (timeout %.1f s)", self.rank, entry["profiling_name"],
                  entry["collective_seq_id"], age, self.timeout_s)
        with self._lock:
            self.timeouts_here += 1
            self.timeouts_anywhere = max(self.timeouts_anywhere, self.timeouts_here)
            self.trips[self.rank] = trip
        store.set(trip_key(self.rank), json.dumps(trip))
        store.add(TIMEOUTS, 1)
        store.add(DUMP_REQUESTS, 1)  # every rank dumps, this one on its next poll

    def _read_trips(self, store: dist.TCPStore) -> None:
        for rank in range(self.world):
            key = trip_key(rank)
            if store.check([key]):
                trip = json.loads(store.get(key))
                with self._lock:
                    self.trips[rank] = trip

    def _serve_dump_requests(self, store: dist.TCPStore) -> None:
        wanted = store.add(DUMP_REQUESTS, 0)
        if wanted <= self._dumped:
            return
        try:
            path = self.dump_now()
        except Exception:
            log.exception("rank %d: writing the flight recorder dump failed", self.rank)
            path = None
        self._dumped = wanted
        if path is not None:
            log.info("rank %d: flight recorder dump written to %s", self.rank, path)
        store.set(dumped_key(self.rank), str(wanted))
