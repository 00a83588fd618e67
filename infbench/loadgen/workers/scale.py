"""How many workers a run has and where (`--workers N`, `--ray ADDRESS`): the coordinator's maker.

One process (`workers == 1`, no Ray) is the default and needs none of this: `execute_run`
drives the `Runner` itself. `--workers N` alone: N processes on this host. With `--ray`:
N actors per alive node of the cluster (default one), each asking for `ray_cpus` CPUs.
"""

from __future__ import annotations

from dataclasses import dataclass

from infbench.loadgen.run.types import RunSettings
from infbench.loadgen.workers.coordinator import Backend, Coordinator
from infbench.loadgen.workers.plan import make_plan
from infbench.loadgen.workloads.base import Workload
from infbench.store.writer import BatchWriter

# What cannot be combined with workers yet, said in `infbench run --help` and refused (exit 2).
REFUSED = ("--metrics-port (the live exposition is one process's) and a fleet (several --url or "
           "--targets: each worker would route on its own) need --workers 1 without --ray")


@dataclass(frozen=True)
class Scale:
    workers: int = 1  # processes on this host; with Ray, actors per node
    ray_address: str | None = None
    ray_nodes: tuple[str, ...] = ()  # node ids, from `ray_backend.connect`
    ray_cpus: float = 1.0

    @property
    def count(self) -> int:
        return self.workers * len(self.ray_nodes) if self.ray_address is not None else self.workers

    @property
    def active(self) -> bool:
        return self.ray_address is not None or self.workers > 1

    def validate(self, settings: RunSettings, workload: Workload) -> None:
        """ValueError (a usage error) when this run cannot be split this way."""
        if self.workers < 1:
            raise ValueError(f"workers: must be >= 1, not {self.workers}")
        if not self.ray_cpus > 0:
            raise ValueError(f"ray-cpus: must be > 0, not {self.ray_cpus}")
        if not self.active:
            return
        if settings.replicas or settings.metrics_bind is not None:
            raise ValueError(f"workers: {REFUSED}")
        make_plan(settings, workload, self.count)

    def coordinator(self, settings: RunSettings, workload: Workload, writer: BatchWriter,
                    t0_ns: int) -> Coordinator:
        if self.ray_address is None:
            from infbench.loadgen.workers.local import ProcessWorker

            backend = Backend(self.workers, ProcessWorker)
        else:
            from infbench.loadgen.workers.ray_backend import RayWorker

            placement = [node for node in self.ray_nodes for _ in range(self.workers)]
            cpus = self.ray_cpus
            backend = Backend(len(placement), lambda w, inbox, on_batch: RayWorker(
                w, placement[w], cpus, inbox, on_batch))
            backend.name = "ray"
        return Coordinator(settings, workload, writer, t0_ns, backend)
