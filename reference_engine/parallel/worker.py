"""A tensor-parallel worker process (ranks 1..N-1), started by rank 0.

Rank 0 starts `python -m reference_engine.parallel.worker --fd FD --parent PID` with one end
of a socket pair as FD (a fresh interpreter: nothing forked from a process running threads
and torch, and, unlike multiprocessing's spawn, no re-import of the caller's main script).
The first message on it is this rank's `WorkerSpec`.

Lifecycle: connect to rank 0's rendezvous store, say hello over the pipe, join the process
group, build this rank's shard, say ready; then, per step, take the `StepBatch` rank 0 sent
over the pipe, join the step's broadcast (rank 0's header: step id, token and sequence
counts, checked against the batch) and compute the shard's forward, all-reduces included.
It exits on "stop", when the pipe closes, when a collective fails (a peer died), and within
a fraction of a second of rank 0's process going away however it went (so a killed server
leaves no orphan ranks).
"""

from __future__ import annotations

import argparse
import datetime
import logging
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path

from reference_engine.executor import StepBatch

STEP_HEADER_LEN = 3
_ORPHAN_POLL_S = 0.2


@dataclass(frozen=True)
class WorkerSpec:
    rank: int
    world: int
    store_port: int
    backend: str
    model: str
    block_size: int
    num_blocks: int
    seed: int
    device: str
    dtype: str                  # torch dtype name, e.g. "float32"
    collective_timeout_s: float
    pg_timeout_s: float
    dump_dir: str | None
    faults: list[str] = field(default_factory=list)
    log_level: int = logging.INFO


def step_header(batch: StepBatch) -> list[int]:
    """What every rank must agree on before computing a step: id, tokens, sequences."""
    return [batch.step_id, sum(len(w.token_ids) for w in batch.seqs), len(batch.seqs)]


def _exit_when_orphaned(parent: int) -> None:
    # A killed parent cannot stop us: notice the re-parenting and go.
    while True:
        if os.getppid() != parent:
            os._exit(3)
        time.sleep(_ORPHAN_POLL_S)


def _hang_here(stop: threading.Event) -> None:
    """The hang fault: this rank took its step's work and enters no collective."""
    stop.wait()


def worker_main(spec: WorkerSpec, conn: Connection, parent_pid: int) -> None:
    logging.basicConfig(level=spec.log_level, stream=sys.stderr,
                        format="%(levelname)s: %(message)s")
    log = logging.getLogger("reference_engine.parallel")
    threading.Thread(target=_exit_when_orphaned, args=(parent_pid,), name="orphan-check",
                     daemon=True).start()
    import torch
    import torch.distributed as dist

    from reference_engine.faults import Faults
    from reference_engine.model import MODEL_PRESETS
    from reference_engine.parallel import stacks
    from reference_engine.parallel.collective_log import CollectiveLog
    from reference_engine.parallel.communicator import CollectiveError, Communicator
    from reference_engine.parallel.rank_faults import for_rank
    from reference_engine.parallel.shard_executor import ShardExecutor
    from reference_engine.parallel.watchdog import Watchdog

    torch.set_num_threads(1)  # N ranks share the host's cores; one thread each
    if spec.device.startswith("cuda"):
        torch.cuda.set_device(torch.device(spec.device))
    store = dist.TCPStore("127.0.0.1", spec.store_port, is_master=False,
                          wait_for_workers=False, timeout=datetime.timedelta(seconds=60))
    conn.send(("hello", os.getpid()))
    dist.init_process_group(spec.backend, store=store, rank=spec.rank, world_size=spec.world,
                            timeout=datetime.timedelta(seconds=spec.pg_timeout_s))
    faults = for_rank(Faults(spec.faults), spec.rank)
    clog = CollectiveLog(spec.backend, list(range(spec.world)), spec.collective_timeout_s)
    comm = Communicator(clog, faults, spec.rank)
    shard = ShardExecutor(MODEL_PRESETS[spec.model], spec.rank, spec.world, comm,
                          block_size=spec.block_size, num_blocks=spec.num_blocks,
                          seed=spec.seed, device=spec.device,
                          dtype=getattr(torch, spec.dtype))
    watchdog = Watchdog(spec.rank, clog, spec.collective_timeout_s, spec.store_port,
                        spec.dump_dir, on_lost=lambda: os._exit(3))
    watchdog.start()
    stacks.register(spec.dump_dir, spec.rank)
    conn.send(("ready", os.getpid()))
    stop = threading.Event()
    # On the rank's device: NCCL moves only device tensors.
    header = torch.zeros(STEP_HEADER_LEN, dtype=torch.int64, device=shard.device)
    try:
        while True:
            try:
                msg = conn.recv()
            except EOFError:
                return
            if msg[0] == "stop":
                return
            batch = msg[1]
            comm.begin_step(batch.step_id)
            if faults.hang_at_step is not None and batch.step_id >= faults.hang_at_step:
                log.warning("fault hang: rank %d stops entering collectives at step %d",
                            spec.rank, batch.step_id)
                _hang_here(stop)
            comm.broadcast(header.zero_(), 0)
            if header.tolist() != step_header(batch):
                raise CollectiveError(f"rank {spec.rank}: step header {header.tolist()} from "
                                      f"rank 0 does not match the batch {step_header(batch)}")
            shard.forward(batch)
    except CollectiveError as exc:
        log.error("%s; rank %d exits", exc, spec.rank)
        os._exit(1)
    finally:
        watchdog.stop()


def launch(fd: int, parent_pid: int) -> list[str]:
    """The command line rank 0 runs for one worker (its socket-pair end passed as `fd`)."""
    return [sys.executable, "-m", "reference_engine.parallel.worker", "--fd", str(fd),
            "--parent", str(parent_pid)]


def package_root() -> str:
    """The directory holding the reference_engine package, for the worker's sys.path."""
    return str(Path(__file__).resolve().parents[2])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m reference_engine.parallel.worker",
                                description="a tensor-parallel rank; started by the engine")
    p.add_argument("--fd", type=int, required=True, help="socket to rank 0")
    p.add_argument("--parent", type=int, required=True, help="rank 0's process id")
    args = p.parse_args(argv)
    if os.getppid() != args.parent:
        return 3  # rank 0 went away before we started
    conn = Connection(args.fd)
    spec = conn.recv()
    worker_main(spec, conn, args.parent)
    return 0


if __name__ == "__main__":
    sys.exit(main())
