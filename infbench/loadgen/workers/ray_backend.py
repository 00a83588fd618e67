"""Workers as Ray actors on a cluster's nodes (`infbench run --ray ADDRESS`, extra `dist`).

Each actor is pinned to its node (a hard node-affinity placement) with the CPUs asked for, and
runs the same worker as a local process (`worker.run_worker`) on a thread of its own; the
coordinator pulls its messages (`poll`), so shipped batches come back as the call's return
value, through Ray's object store. A killed actor or a lost node surfaces as a Ray error on
the next poll, reported as `("died", worker, reason)`. Its clock is measured through the
same calls (`now`): a Ray round trip is slower than a pipe, so the uncertainty is larger, and
stored as it is.

Ray is imported only here, and only when asked for: the load generator does not need it.
"""

from __future__ import annotations

import contextlib
import queue
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from infbench.loadgen.workers.clock import ClockOffset, measure
from infbench.loadgen.workers.protocol import Message, boot_id, host_info
from infbench.loadgen.workers.worker import Control, WorkerJob, run_worker

Inbox = Callable[[Message], None]
_POLL_S = 0.25
_CALL_TIMEOUT_S = 60.0


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ValueError("ray: --ray needs Ray on this host and every node "
                         "(pip install 'infbench[dist]')") from None
    return ray


class WorkerActor:
    """The actor's body (made a Ray actor class by `_actor_class`). Methods run on Ray's
    threads; the worker runs on its own. Owns: the outbox and the worker's `Control`."""

    def __init__(self, worker: int) -> None:
        self.worker = worker
        self._control = Control()
        self._outbox: queue.Queue[Message] = queue.Queue()
        self._thread: threading.Thread | None = None

    def info(self) -> dict[str, Any]:
        import ray
        return host_info(node=ray.get_runtime_context().get_node_id())

    def now(self) -> int:
        return time.monotonic_ns()

    def start(self, job: WorkerJob) -> None:
        self._thread = threading.Thread(target=run_worker, args=(job, self._outbox.put, self._control),
                                        name=f"infbench-worker-{self.worker}", daemon=True)
        self._thread.start()

    def poll(self, timeout_s: float) -> list[Message]:
        try:
            out = [self._outbox.get(timeout=timeout_s)]
        except queue.Empty:
            return []
        while True:
            try:
                out.append(self._outbox.get_nowait())
            except queue.Empty:
                return out

    def go(self, t0_ns: int) -> None:
        self._control.go(t0_ns)

    def stop(self, reason: str) -> None:
        self._control.stop(reason)


def _check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """A head that is not there is refused at once: `ray.init` would retry for minutes."""
    if "://" in address or address == "auto":
        return  # a Ray Client URL or the local cluster: Ray resolves it
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"ray: {address!r} is not HOST:PORT of a Ray head")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise ValueError(f"ray: nothing answers at {address} ({exc.strerror or exc})") from None


def connect(address: str) -> list[dict[str, Any]]:
    """Join the cluster at `address`; its alive nodes, in a stable order (ValueError if none)."""
    ray = _ray()
    _check_reachable(address)
    try:
        ray.init(address=address, log_to_driver=False, ignore_reinit_error=True,
                 include_dashboard=False, configure_logging=False)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise ValueError(f"ray: cannot connect to the cluster at {address}: {exc}") from None
    nodes = sorted((n for n in ray.nodes() if n.get("Alive")), key=lambda n: n["NodeID"])
    if not nodes:
        raise ValueError(f"ray: the cluster at {address} has no alive node")
    return nodes


def disconnect() -> None:
    ray = _ray()
    if ray.is_initialized():
        ray.shutdown()


class RayWorker:
    """A worker actor seen from the coordinator. Owns: the actor handle and its poller thread."""

    backend = "ray"

    def __init__(self, worker: int, node_id: str, cpus: float, inbox: Inbox,
                 on_batch: Callable[[Message], None]) -> None:
        ray = _ray()
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        self.worker = worker
        self.node_id = node_id
        self._ray = ray
        self._inbox = inbox
        self._on_batch = on_batch
        cls = ray.remote(WorkerActor)
        self._actor = cls.options(
            num_cpus=cpus, max_concurrency=8,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False)).remote(worker)
        self.info: dict[str, Any] = {}
        self._poller: threading.Thread | None = None
        self._closing = threading.Event()

    @property
    def pid(self) -> int | None:
        return self.info.get("pid")

    def actor_id(self) -> str:
        return self._actor._actor_id.hex()

    def clock(self, rounds: int) -> ClockOffset:
        ray = self._ray
        self.info = ray.get(self._actor.info.remote(), timeout=_CALL_TIMEOUT_S)
        self._inbox(("hello", self.worker, self.info))

        def ask() -> int:
            return int(ray.get(self._actor.now.remote(), timeout=_CALL_TIMEOUT_S))

        mine = boot_id()
        return measure(ask, shared=mine is not None and self.info.get("boot_id") == mine,
                       rounds=rounds)

    def start(self, job: WorkerJob) -> None:
        self._ray.get(self._actor.start.remote(job), timeout=_CALL_TIMEOUT_S)
        self._poller = threading.Thread(target=self._poll, name=f"infbench-coord-{self.worker}", daemon=True)
        self._poller.start()

    def _poll(self) -> None:
        ray = self._ray
        while not self._closing.is_set():
            try:
                msgs = ray.get(self._actor.poll.remote(_POLL_S), timeout=_CALL_TIMEOUT_S)
            except Exception as exc:  # RayActorError, a lost node, a timeout: the actor is gone
                self._inbox(("died", self.worker, f"Ray actor on node {self.node_id[:12]} lost: "
                             f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]))
                return
            for msg in msgs:
                if msg[0] == "batch":
                    self._on_batch(msg)
                else:
                    self._inbox(msg)
                if msg[0] in ("done", "error"):
                    return

    def go(self, t0_ns: int) -> None:
        self._actor.go.remote(t0_ns)

    def stop(self, reason: str) -> None:
        self._actor.stop.remote(reason)

    def kill(self) -> None:
        """End the actor now (tests: an actor lost mid-run)."""
        self._ray.kill(self._actor, no_restart=True)

    def close(self, timeout_s: float = 10.0) -> None:
        if self._poller is not None:
            self._poller.join(timeout_s)
        self._closing.set()
        with contextlib.suppress(Exception):  # already gone with its node
            self._ray.kill(self._actor, no_restart=True)
