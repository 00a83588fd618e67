"""N real torch.distributed (gloo) ranks that step like a tensor-parallel engine, with a fault.

Each step: rank 0 broadcasts the step's batch size, then every rank runs `--layers`
all-reduces of [batch, hidden] (one per layer). At `--at-step`, rank `--fault-rank`:
- `hang`: stops entering collectives (waits on an Event that is never set), so the others
  block inside the next all-reduce;
- `mismatch-size` / `mismatch-op` / `mismatch-dtype`: issues that layer's collective with
  one more row / as an all-gather / in float16;
- `healthy`: no fault; every rank finishes its steps and idles.
PyTorch's own Flight Recorder records every collective (TORCH_FR_BUFFER_SIZE is set before
torch initialises). `--dump-after S` seconds after the fault step began (or after the last
step), a side thread writes the rank's dump to DUMP_DIR/rank_<R> with
`torch._C._distributed_c10d._dump_fr_trace` and touches DUMP_DIR/ready_<R>. The process then
stays as it is (hung or idle) until it is killed, so py-spy can read its stacks.

Usage: python gloo_ranks.py --rank R --world N --port P --scenario S --dump-dir D
"""

from __future__ import annotations

import argparse
import os
import threading
import time
from datetime import timedelta
from pathlib import Path

os.environ.setdefault("TORCH_FR_BUFFER_SIZE", "2000")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

SCENARIOS = ("healthy", "hang", "mismatch-size", "mismatch-op", "mismatch-dtype")


def _dump(rank: int, out: Path) -> None:
    from torch._C._distributed_c10d import _dump_fr_trace

    data = _dump_fr_trace(includeCollectives=True, includeStackTraces=True, onlyActive=False)
    tmp = out / f".rank_{rank}.tmp"
    tmp.write_bytes(data)
    tmp.rename(out / f"rank_{rank}")
    (out / f"ready_{rank}").touch()


def _dump_later(rank: int, out: Path, fault_at: threading.Event, delay_s: float) -> None:
    fault_at.wait()
    time.sleep(delay_s)
    _dump(rank, out)


def wait_for_work_that_never_comes() -> None:
    """Where a hung rank sits: a scheduler queue that never fills."""
    threading.Event().wait()


def layer_collective(x: torch.Tensor, rank: int, args: argparse.Namespace, faulty: bool) -> None:
    if not faulty:
        dist.all_reduce(x)
    elif args.scenario == "mismatch-size":
        dist.all_reduce(torch.ones(x.shape[0] + 1, x.shape[1]))
    elif args.scenario == "mismatch-op":
        dist.all_gather([torch.zeros_like(x) for _ in range(args.world)], x)
    elif args.scenario == "mismatch-dtype":
        dist.all_reduce(x.to(torch.float16))


def decode_step(step: int, rank: int, args: argparse.Namespace, fault_at: threading.Event) -> None:
    batch = torch.tensor([4 + step % 3])
    dist.broadcast(batch, src=0)
    x = torch.ones(int(batch.item()), args.hidden)
    for layer in range(args.layers):
        at_fault = step == args.at_step and layer == args.layers // 2 and args.scenario != "healthy"
        faulty = at_fault and rank == args.fault_rank
        if at_fault:
            fault_at.set()
        if faulty and args.scenario == "hang":
            wait_for_work_that_never_comes()
        layer_collective(x, rank, args, faulty)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--scenario", choices=SCENARIOS, default="hang")
    p.add_argument("--fault-rank", type=int, default=1)
    p.add_argument("--at-step", type=int, default=3)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=16)
    p.add_argument("--dump-after", type=float, default=1.5)
    p.add_argument("--dump-dir", type=Path, required=True)
    args = p.parse_args()
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.port}", rank=args.rank,
                            world_size=args.world, timeout=timedelta(seconds=120))
    fault_at = threading.Event()
    threading.Thread(target=_dump_later, args=(args.rank, args.dump_dir, fault_at, args.dump_after),
                     daemon=True, name="fr-dumper").start()
    try:
        for step in range(args.steps if args.scenario == "healthy" else args.at_step + 1):
            decode_step(step, args.rank, args, fault_at)
    except RuntimeError as exc:  # gloo may notice a mismatch itself: stay, like an engine would
        print(f"rank {args.rank}: {str(exc).splitlines()[0][:200]}", flush=True)
    fault_at.set()
    wait_for_work_that_never_comes()


if __name__ == "__main__":
    main()
