"""Rank 0 of a tensor-parallel torch engine: spawns the other ranks and drives every step.

Rank 0 lives in the engine process: the scheduler decides a step, `execute` sends the
`StepBatch` to each worker over its pipe (the control plane, as vLLM's message queue is),
broadcasts the step header over the group (the first collective of every step, so a rank
that is not there shows in the collective log) and computes rank 0's shard; the row-parallel
all-reduces tie the ranks together inside the forward. Only rank 0 samples.

The group is torch.distributed on a TCPStore that rank 0 hosts on loopback (gloo on the CPU,
NCCL on CUDA). Each rank keeps a collective log and runs a watchdog (watchdog.py); rank 0
reports health, the ranks and their dumps to the server (debug_routes.py).

Owns: the worker processes and their pipes (engine thread sends; `shutdown` closes), the
process group of this process (created here, destroyed by `shutdown`), `_failure` (the
first failure seen, written by the engine thread, read by any).
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
import socket
import subprocess
import threading
import time
from multiprocessing.connection import Connection
from typing import Any

import torch
import torch.distributed as dist

from reference_engine.config import ConfigError, EngineConfig
from reference_engine.executor import ExecutorClosed, StepBatch
from reference_engine.faults import Faults
from reference_engine.model import MODEL_PRESETS
from reference_engine.parallel import stacks
from reference_engine.parallel.collective_log import CollectiveLog
from reference_engine.parallel.communicator import CollectiveError, Communicator
from reference_engine.parallel.flight_recorder import dump_path
from reference_engine.parallel.rank_faults import check_rank_faults, for_rank
from reference_engine.parallel.shard_executor import ShardExecutor
from reference_engine.parallel.sharding import ShardingError, check_shardable
from reference_engine.parallel.watchdog import (
    DUMP_REQUESTS,
    Watchdog,
    dumped_key,
    store_client,
)
from reference_engine.parallel.worker import WorkerSpec, launch, package_root, step_header
from reference_engine.tokenizer import EOS_ID
from reference_engine.torch_executor import CUDA_DTYPES, resolve_device

log = logging.getLogger("reference_engine.parallel")
STARTUP_TIMEOUT_S = 180.0      # spawning ranks imports torch in each; a busy host is slow
# gloo/NCCL's own timeout: long, so a hang stays a hang (the watchdog reports it much sooner)
# while stacks are taken, but a forgotten engine still fails eventually.
MIN_GROUP_TIMEOUT_S = 600.0
FR_BUFFER_ENV = "TORCH_FR_BUFFER_SIZE"
FR_BUFFER_SIZE = "2000"        # the size the Flight Recorder tutorial recommends


class TPExecutor:
    name = "torch"
    eos_token_id = EOS_ID

    def __init__(self, config: EngineConfig, faults: Faults) -> None:
        model_config = MODEL_PRESETS.get(config.model)
        if model_config is None:
            raise ConfigError(f"model: the torch executor runs a built-in random-weight model "
                              f"({', '.join(MODEL_PRESETS)}), got {config.model!r}")
        self.world = world = config.tensor_parallel_size
        try:
            check_shardable(model_config, world)
        except ShardingError as exc:
            raise ConfigError(str(exc)) from None
        check_rank_faults(faults, "torch", world)
        device = resolve_device(config.device)
        dtype = torch.float32
        if device.type == "cuda":
            if torch.cuda.device_count() < world:
                raise ConfigError(f"tensor_parallel_size {world} needs {world} GPUs, "
                                  f"{torch.cuda.device_count()} visible")
            dtype = CUDA_DTYPES.get(config.dtype, torch.float32)
            device = torch.device("cuda", 0)
        self.backend = "nccl" if device.type == "cuda" else "gloo"
        self.dump_dir = config.dump_dir
        self.block_size = config.block_size
        self._closing = threading.Event()
        self._failure: str | None = None
        self._lock = threading.Lock()
        self._dump_store: dist.TCPStore | None = None
        self.log = CollectiveLog(self.backend, list(range(world)), config.collective_timeout_s)
        self.comm = Communicator(self.log, for_rank(faults, 0), 0)
        self.faults = self.comm.faults
        self.shard = ShardExecutor(model_config, 0, world, self.comm,
                                   block_size=config.block_size, num_blocks=config.num_gpu_blocks,
                                   gpu_memory_utilization=config.gpu_memory_utilization,
                                   seed=config.seed, device=str(device), dtype=dtype)
        self.num_blocks = self.shard.num_blocks
        # torch's own recorder, where it records this backend, must be on before the group.
        os.environ.setdefault(FR_BUFFER_ENV, FR_BUFFER_SIZE)
        self._store = dist.TCPStore("127.0.0.1", 0, world, is_master=True,
                                    wait_for_workers=False,
                                    timeout=datetime.timedelta(seconds=60))
        pg_timeout = max(MIN_GROUP_TIMEOUT_S, 10 * config.collective_timeout_s)
        specs = [WorkerSpec(rank, world, self._store.port, self.backend, config.model,
                            config.block_size, self.num_blocks, config.seed,
                            f"cuda:{rank}" if device.type == "cuda" else "cpu",
                            str(dtype).removeprefix("torch."), config.collective_timeout_s,
                            pg_timeout, config.dump_dir, list(config.faults),
                            logging.getLogger().getEffectiveLevel())
                 for rank in range(1, world)]
        self._pipes: list[Connection] = []
        self._procs: list[subprocess.Popen[bytes]] = []
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            filter(None, [package_root(), os.environ.get("PYTHONPATH")]))}
        try:
            for spec in specs:
                ours, theirs = socket.socketpair()
                with theirs:
                    proc = subprocess.Popen(launch(theirs.fileno(), os.getpid()), env=env,
                                            pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL)
                conn = Connection(ours.detach())
                conn.send(spec)
                self._pipes.append(conn)
                self._procs.append(proc)
            self._await("hello")
            dist.init_process_group(self.backend, store=self._store, rank=0, world_size=world,
                                    timeout=datetime.timedelta(seconds=pg_timeout))
            self._await("ready")
        except BaseException:
            self._kill_workers()
            raise
        self.watchdog = Watchdog(0, self.log, config.collective_timeout_s, self._store.port,
                                 config.dump_dir)
        self.watchdog.start()
        stacks.register(config.dump_dir, 0)
        log.info("tensor parallel: %d ranks on %s (pids %s)", world, self.backend,
                 ", ".join(str(p["pid"]) for p in self.ranks()))

    # -- the Executor protocol (engine thread) -------------------------------------------
    def execute(self, batch: StepBatch) -> dict[int, int]:
        if self._closing.is_set():
            raise ExecutorClosed("the tensor-parallel group is shut down")
        try:
            sent = batch.without_context()
            for rank, conn in enumerate(self._pipes, start=1):
                try:
                    conn.send(("step", sent))
                except OSError as exc:
                    raise CollectiveError(f"rank {rank} is gone ({exc})") from exc
            self.comm.begin_step(batch.step_id)
            if self.faults.hang_at_step is not None and batch.step_id >= self.faults.hang_at_step:
                log.warning("fault hang: rank 0 stops entering collectives at step %d",
                            batch.step_id)
                self._closing.wait()
                raise ExecutorClosed("the tensor-parallel group is shut down")
            self.comm.broadcast(torch.tensor(step_header(batch), dtype=torch.int64,
                                             device=self.shard.device), 0)
            return self.shard.execute(batch)
        except ExecutorClosed:
            raise
        except Exception as exc:
            if self._closing.is_set():
                raise ExecutorClosed("the tensor-parallel group is shut down") from exc
            with self._lock:
                self._failure = self._failure or str(exc)
            raise

    def memory_report(self) -> dict[str, int]:
        """Rank 0's shard (each rank holds as much, but for the replicated parts)."""
        return self.shard.memory_report()

    # -- status (any thread) -------------------------------------------------------------
    def ranks(self) -> list[dict[str, Any]]:
        pids = [os.getpid(), *(p.pid for p in self._procs)]
        d = self.dump_dir
        return [{"rank": r, "pid": pid, "dump": str(dump_path(d, r)) if d else None,
                 "stacks": str(stacks.stacks_path(d, r)) if d else None}
                for r, pid in enumerate(pids)]

    def health(self) -> str | None:
        """None when healthy, else why not (one line)."""
        status = self.watchdog.status()
        if status["timeouts_anywhere"]:
            where = "; ".join(f"rank {r} timed out in {t['profiling_name']} (collective seq id "
                              f"{t['collective_seq_id']})" for r, t in status["trips"].items())
            return (f"collective watchdog: {status['timeouts_anywhere']} collective timeout(s)"
                    + (f": {where}" if where else ""))
        with self._lock:
            if self._failure:
                return self._failure
        for rank, proc in enumerate(self._procs, start=1):
            if not self._closing.is_set() and proc.poll() is not None:
                return f"rank {rank} (pid {proc.pid}) exited with code {proc.returncode}"
        return None

    def metrics(self) -> dict[str, float]:
        status = self.watchdog.status()
        last = self.log.pg_status()["0"]["last_completed_collective"]
        return {"collective_timeouts_total": float(status["timeouts_anywhere"]),
                "healthy": 0.0 if self.health() else 1.0,
                "rank0_last_completed_collective": float(last)}

    def request_dump(self, timeout_s: float = 20.0) -> list[dict[str, Any]]:
        """Ask every rank for its dump and wait for them; blocking (call off the event loop)."""
        if self.dump_dir is None:
            raise ValueError("no dump directory: start the engine with --dump-dir DIR")
        with self._lock:
            if self._dump_store is None:
                self._dump_store = store_client(self._store.port)
            store = self._dump_store
            wanted = store.add(DUMP_REQUESTS, 1)
            deadline = time.monotonic() + timeout_s
            done: set[int] = set()
            while len(done) < self.world and time.monotonic() < deadline:
                for rank in set(range(self.world)) - done:
                    key = dumped_key(rank)
                    if store.check([key]) and int(store.get(key)) >= wanted:
                        done.add(rank)
                time.sleep(0.05)
        return [{"rank": r["rank"], "path": r["dump"], "written": r["rank"] in done}
                for r in self.ranks()]

    def check_invariants(self) -> None:
        """One pipe and one process per worker rank; the collective log's own invariants."""
        assert len(self._pipes) == len(self._procs) == self.world - 1
        assert self.comm.faults is self.faults
        if not self._closing.is_set():
            assert dist.is_initialized() and dist.get_world_size() == self.world
        self.log.check_invariants()

    # -- lifecycle -----------------------------------------------------------------------
    def shutdown(self) -> None:
        """Stop every rank and leave the group; safe to call twice and with a rank hung."""
        if self._closing.is_set():
            return
        self._closing.set()
        for conn in self._pipes:
            with contextlib.suppress(OSError):
                conn.send(("stop",))
        self._kill_workers(grace_s=2.0)
        self.watchdog.stop()
        stacks.unregister(0)
        # Rank 0's thread may be inside a collective: with the peers gone it fails at once.
        deadline = time.monotonic() + 5.0
        while self.log.in_flight() is not None and time.monotonic() < deadline:
            time.sleep(0.02)
        if self.log.in_flight() is None and dist.is_initialized():
            dist.destroy_process_group()

    def _kill_workers(self, grace_s: float = 0.0) -> None:
        deadline = time.monotonic() + grace_s
        for proc in self._procs:
            _wait(proc, max(0.0, deadline - time.monotonic()))
        for proc in self._procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self._procs:
            if not _wait(proc, 3.0):
                proc.kill()
                proc.wait()
        for conn in self._pipes:
            conn.close()

    def _await(self, what: str) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        for rank, (conn, proc) in enumerate(zip(self._pipes, self._procs, strict=True), start=1):
            while not conn.poll(0.1):
                if proc.poll() is not None:
                    raise RuntimeError(f"tensor parallel: rank {rank} exited during start-up "
                                       f"(code {proc.returncode}); see its log above")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"tensor parallel: rank {rank} did not say {what!r} "
                                       f"within {STARTUP_TIMEOUT_S:.0f} s")
            tag, _ = conn.recv()
            if tag != what:
                raise RuntimeError(f"tensor parallel: rank {rank} said {tag!r}, expected {what!r}")


def _wait(proc: subprocess.Popen[bytes], timeout_s: float) -> bool:
    """Wait up to timeout_s for proc to exit; True if it has."""
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        return False
    return True
