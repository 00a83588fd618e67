"""The one door to torch.distributed: every collective is logged, timed and may be faulted.

Each call is entered in the rank's collective log as scheduled, started when handed to the
backend and completed when the backend returns, so the watchdog can see a collective that
never returns and a dump can say which one. The slow-link and mismatch faults act here, on
the real call, so what the other ranks see is what a real slow link or a mismatched
collective would make them see.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import torch
import torch.distributed as dist

from reference_engine.parallel.collective_log import CollectiveLog, caller_frames
from reference_engine.parallel.rank_faults import RankFaults


class CollectiveError(RuntimeError):
    """A collective failed (a peer went away, or the group is shutting down)."""


class Communicator:
    """Owns: the current step id (set by the issuing thread before each step's collectives)
    and whether this step's mismatch has fired."""

    def __init__(self, log: CollectiveLog, faults: RankFaults, rank: int) -> None:
        self.log = log
        self.faults = faults
        self.rank = rank
        self.step_id = 0
        self._mismatched_step: int | None = None

    def begin_step(self, step_id: int) -> None:
        self.step_id = step_id

    def all_reduce(self, tensor: torch.Tensor) -> torch.Tensor:
        """Sum `tensor` over the ranks in place; returns it."""
        if (self.faults.mismatch_at_step == self.step_id
                and self._mismatched_step != self.step_id):
            # The mismatch: this rank all-gathers where the others all-reduce. On gloo both
            # sides then wait for messages that never come (a size mismatch instead can make
            # gloo terminate the receiving process before anything is dumped).
            self._mismatched_step = self.step_id
            world = len(self.log.ranks)
            parts = [torch.empty_like(tensor) for _ in range(world)]
            # Logged as torch's recorder logs it: one output of shape [world, *input].
            stacked = SimpleNamespace(shape=(world, *tensor.shape), dtype=tensor.dtype)
            self._run("all_gather", [tensor], [stacked], lambda: dist.all_gather(parts, tensor))
            return tensor
        self._run("all_reduce", [tensor], [tensor], lambda: dist.all_reduce(tensor))
        return tensor

    def broadcast(self, tensor: torch.Tensor, src: int = 0) -> torch.Tensor:
        self._run("broadcast", [tensor], [tensor], lambda: dist.broadcast(tensor, src))
        return tensor

    def _run(self, op: str, inputs: list[Any], outputs: list[Any],
             call: Callable[[], object]) -> None:
        entry = self.log.scheduled(op, inputs, outputs, caller_frames(2))
        self.log.started(entry)
        t0 = time.perf_counter()
        try:
            call()
            if inputs and getattr(inputs[0], "is_cuda", False):
                # NCCL returns once the collective is enqueued on the stream; "completed"
                # (and the watchdog) must mean the transfer really finished.
                torch.cuda.synchronize(inputs[0].device)
        except Exception as exc:
            self.log.failed(entry)
            raise CollectiveError(f"rank {self.rank}: {entry['profiling_name']} (collective "
                                  f"seq id {entry['collective_seq_id']}) failed: "
                                  f"{str(exc).splitlines()[0] if str(exc) else exc!r}") from exc
        if self.faults.slow_factor > 1.0:
            # A link F times slower moves the same bytes in F times the time.
            time.sleep((self.faults.slow_factor - 1.0) * (time.perf_counter() - t0))
        self.log.completed(entry)
