"""One collective or point-to-point call per op, with its buffers and the check of its result.

Buffers are sized as nccl-tests sizes them (`busbw.message_elements`): `nbytes` is the largest
per-rank buffer. Inputs hold rank + 1 (global rank), so every op's correct output is known
and a validation pass counts wrong elements as nccl-tests' `#wrong` does. Runs inside a rank
process (torch is imported there only).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from probes.links.busbw import message_elements

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32, "float": torch.float32, "float16": torch.float16, "half": torch.float16,
    "bfloat16": torch.bfloat16, "float64": torch.float64, "double": torch.float64,
}

# torch's call writes into its input for these (nccl-tests would report them as in-place).
IN_PLACE = {"all_reduce": True, "all_gather": False, "reduce_scatter": False, "alltoall": False,
            "broadcast": True, "sendrecv": False}


@dataclass
class Call:
    run: Callable[[], None]
    check: Callable[[], int]   # runs the op once on fresh inputs; elements that came out wrong
    count: int                 # elements of the largest buffer (nccl-tests' count)
    best: float = float("inf")  # fastest call so far (s): what the injected fault scales


def build(op: str, nbytes: int, members: tuple[int, ...], rank: int, group: Any,
          dtype: torch.dtype, device: torch.device) -> Call | None:
    """The call for `rank` among `members` (global ranks, sorted); None when the size is too
    small to split over the members."""
    n = len(members)
    esize = torch.empty((), dtype=dtype).element_size()
    count = message_elements(op if op != "sendrecv" else "all_reduce", nbytes, n, esize)
    if count <= 0:
        return None
    mine = float(rank + 1)
    vals = torch.tensor([m + 1.0 for m in members], dtype=dtype, device=device)

    def full(c: int, v: float) -> torch.Tensor:
        return torch.full((c,), v, dtype=dtype, device=device)

    def wrong(out: torch.Tensor, want: torch.Tensor) -> int:
        return int((out != want).sum().item())

    if op == "all_reduce":
        buf = full(count, mine)
        return Call(lambda: dist.all_reduce(buf, group=group),
                    lambda: (buf.fill_(mine), dist.all_reduce(buf, group=group),
                             wrong(buf, full(count, float(vals.sum().item()))))[-1], count)
    if op == "all_gather":
        out, inp = full(count, 0.0), full(count // n, mine)
        want = vals.repeat_interleave(count // n)
        return Call(lambda: dist.all_gather_into_tensor(out, inp, group=group),
                    lambda: (out.zero_(), dist.all_gather_into_tensor(out, inp, group=group), wrong(out, want))[-1],
                    count)
    if op == "reduce_scatter":
        inp, out = full(count, mine), full(count // n, 0.0)
        want = full(count // n, float(vals.sum().item()))
        return Call(lambda: dist.reduce_scatter_tensor(out, inp, group=group),
                    lambda: (out.zero_(), dist.reduce_scatter_tensor(out, inp, group=group), wrong(out, want))[-1],
                    count)
    if op == "alltoall":
        inp, out = full(count, mine), full(count, 0.0)
        want = vals.repeat_interleave(count // n)
        return Call(lambda: dist.all_to_all_single(out, inp, group=group),
                    lambda: (out.zero_(), dist.all_to_all_single(out, inp, group=group), wrong(out, want))[-1],
                    count)
    if op == "broadcast":
        root = members[0]
        buf = full(count, mine)

        def check_bcast() -> int:
            buf.fill_(mine)
            dist.broadcast(buf, src=root, group=group)
            return wrong(buf, full(count, root + 1.0))
        return Call(lambda: dist.broadcast(buf, src=root, group=group), check_bcast, count)
    if op == "sendrecv":
        # both directions at once, as nccl-tests' sendrecv_perf on 2 ranks: each rank sends
        # its buffer to the other and receives the other's
        peer = members[1] if rank == members[0] else members[0]
        send, recv = full(count, mine), full(count, 0.0)

        def exchange() -> None:
            reqs = [dist.isend(send, peer), dist.irecv(recv, peer)]
            for r in reqs:
                r.wait()

        def check() -> int:
            recv.zero_()
            exchange()
            return wrong(recv, full(count, peer + 1.0))

        return Call(exchange, check, count)
    raise ValueError(f"op {op!r} is not measured by the probe")
