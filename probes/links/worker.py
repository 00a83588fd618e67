"""One rank of the link probe: joins the process group and runs the same plan as every rank.

Every rank runs the sweep, the pair matrix and the bisection in the same order, and every
measurement ends with a world all-gather of each rank's time, so all ranks hold the same
numbers and take the same bisection decisions without a coordinator (subgroups must be
created by every rank in the same order, which this gives for free). Rank 0 writes the
result file; any rank that fails writes its error for the launcher to print.

Timing follows nccl-tests: warm-up calls, a barrier on the group, then the timed calls; each
rank's mean time per call, and the slowest member's is the measurement (nccl-tests'
`-a 3`; its default `-a 1` averages the ranks instead).
"""

from __future__ import annotations

import json
import os
import socket
import time
import traceback
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from probes.links import ops
from probes.links.bisect import bisect_ranks
from probes.links.busbw import algbw_gbps, busbw_gbps
from probes.links.inject import SlowLink
from probes.links.pairwise import all_pairs, analyse_pairs

Members = tuple[int, ...]
ROBUST_Q = 0.2  # the quantile of per-call times a verdict measurement keeps (see Rank.measure)


class Rank:
    # Owns: this rank's process group handles and the rows measured so far.
    def __init__(self, rank: int, cfg: dict[str, Any]) -> None:
        self.rank, self.cfg, self.n = rank, cfg, int(cfg["ranks"])
        self.world: Members = tuple(range(self.n))
        self.cuda = cfg["backend"] == "nccl"
        self.device = torch.device(f"cuda:{rank % torch.cuda.device_count()}") if self.cuda else torch.device("cpu")
        self.dtype = ops.DTYPES[cfg["dtype"]]
        inj = cfg.get("inject")
        self.inject = SlowLink(inj["rank"], inj["factor"], inj.get("peer")) if inj else None
        self.groups: dict[Members, Any] = {}
        self.rows: list[dict[str, Any]] = []

    def check_invariants(self) -> None:
        assert all(len(m) >= 2 and list(m) == sorted(m) for m in self.groups), "groups are sorted, >= 2 ranks"

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def group(self, members: Members) -> Any:
        if members == self.world:
            return None  # the default group
        if members not in self.groups:
            self.groups[members] = dist.new_group(list(members))  # every rank, same order
        return self.groups[members]

    def measure(self, op: str, nbytes: int, members: Members, validate: bool,
                robust: bool = False) -> tuple[float, int, int | None]:
        """Time per call (us, the slowest member's mean), elements, wrong elements (summed).
        `robust` (the verdicts' measurements): each rank's 20th-percentile call instead of its
        mean. A shared host's noise only ever adds time to a call (descheduled ranks, a busy
        neighbour), so the fast calls are the ones closest to what the link can do, while a
        slow link (or the injected delay) is in every call and stays in the low quantile."""
        g = None if op == "sendrecv" else self.group(members)
        mine = np.zeros(4)  # time_us, count, wrong, is_member
        if self.rank in members:
            call = ops.build(op, nbytes, members, self.rank, g, self.dtype, self.device)
            if call is not None:
                for _ in range(int(self.cfg["warmup"])):
                    self._timed(call, members)
                if op != "sendrecv":
                    dist.barrier(group=g)
                self.sync()
                t0 = time.perf_counter()
                each = []
                iters = int(self.cfg["verdict_iters" if robust else "iters"])
                for _ in range(iters):
                    s = time.perf_counter()
                    self._timed(call, members)
                    if robust:
                        self.sync()
                        each.append(time.perf_counter() - s)
                self.sync()
                total = (time.perf_counter() - t0) / iters
                mine[0] = (float(np.quantile(each, ROBUST_Q)) if robust else total) * 1e6
                mine[1] = call.count
                mine[2] = call.check() if validate else -1
            mine[3] = 1
        out = torch.zeros(4 * self.n, dtype=torch.float64, device=self.device)
        dist.all_gather_into_tensor(out, torch.tensor(mine, dtype=torch.float64, device=self.device))
        a = out.cpu().numpy().reshape(self.n, 4)
        a = a[a[:, 3] == 1]
        wrong = None if (a[:, 2] < 0).any() else int(a[:, 2].sum())
        return float(a[:, 0].max()), int(a[:, 1].max()), wrong

    def _timed(self, call: ops.Call, members: Members) -> None:
        if self.inject is None or not self.inject.applies(self.rank, members):
            call.run()
            return
        s = time.perf_counter()
        call.run()
        self.sync()
        # the fastest this call has been: its transfer without the host's noise, so the fault
        # slows the link F times and does not multiply a descheduled call's delay as well
        call.best = min(call.best, time.perf_counter() - s)
        self.inject.delay(self.rank, members, call.best)

    def row(self, phase: str, op: str, nbytes: int, members: Members, repeat: int, t: float, count: int,
            wrong: int | None, step: int | None = None) -> None:
        k = len(members)
        pair = op == "sendrecv"
        self.rows.append({
            "phase": phase, "op": op, "bytes": nbytes, "count": count, "dtype": self.cfg["dtype"],
            "redop": "sum" if op in ("all_reduce", "reduce_scatter") else None,
            "root": members[0] if op == "broadcast" else None, "ranks": k,
            "group_ranks": ",".join(map(str, members)), "src_rank": members[0] if pair else None,
            "dst_rank": members[1] if pair else None, "in_place": ops.IN_PLACE[op], "repeat": repeat,
            "step": step, "iters": int(self.cfg["iters" if phase == "sweep" else "verdict_iters"]), "time_us": t,
            "algbw_gbps": algbw_gbps(nbytes, t), "busbw_gbps": busbw_gbps(op, k, nbytes, t),
            "wrong": wrong, "error": None})

    def sweep(self) -> None:
        for rep in range(int(self.cfg["repeats"])):
            for op in self.cfg["ops"]:
                for size in self.cfg["sizes"]:
                    t, count, wrong = self.measure(op, int(size), self.world, validate=True)
                    if count:
                        self.row("sweep", op, int(size), self.world, rep, t, count, wrong)

    def pairwise(self) -> dict[str, Any]:
        pairs = all_pairs(self.n)
        size = int(self.cfg["pair_size"])
        times: list[list[float]] = [[] for _ in pairs]
        rep = 0
        while True:
            for _ in range(int(self.cfg["verdict_repeats"])):
                order = list(enumerate(pairs))
                for k, p in (order if rep % 2 == 0 else order[::-1]):
                    t, count, wrong = self.measure("sendrecv", size, p, validate=rep == 0, robust=True)
                    times[k].append(t)
                    self.row("pairwise", "sendrecv", size, p, rep, t, count, wrong)
                rep += 1
            v = analyse_pairs(self.n, pairs, np.array(times), float(self.cfg["threshold"]))
            # settled only when no comparison is still unclear: a verdict read off a matrix
            # with undecided pairs could name a pair where more repeats would name its rank
            if not v.unsettled or rep >= int(self.cfg["max_repeats"]) or self.n < 3:
                return v.as_dict()

    def bisect(self) -> dict[str, Any]:
        size = int(self.cfg["bisect_size"])

        def measure(step: int, groups: list[Members], first: int, reps: int) -> list[list[float]]:
            out: list[list[float]] = [[] for _ in groups]
            for r in range(first, first + reps):
                order = list(enumerate(groups))
                for i, g in (order if r % 2 == 0 else order[::-1]):
                    t, count, _ = self.measure("all_reduce", size, g, validate=False, robust=True)
                    out[i].append(t)
                    self.row("bisect", "all_reduce", size, g, r, t, count, None, step=step)
            return out

        return bisect_ranks(self.n, measure, float(self.cfg["threshold"]), int(self.cfg["verdict_repeats"]),
                            int(self.cfg["max_repeats"])).as_dict()


def _run(rank: int, cfg: dict[str, Any], port: int) -> dict[str, Any]:
    torch.set_num_threads(1)  # N ranks share the host's cores; one thread each, as a GPU rank would
    backend = "nccl" if cfg["backend"] == "nccl" else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(rank % torch.cuda.device_count())
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=int(cfg["ranks"]), timeout=timedelta(seconds=float(cfg["timeout_s"])))
    try:
        me = Rank(rank, cfg)
        t0 = time.monotonic()
        me.sweep()
        pair = me.pairwise() if cfg["pairwise"] else None
        bis = me.bisect() if cfg["bisect"] else None
        me.check_invariants()
        return {"rows": me.rows, "pairwise": pair, "bisect": bis, "backend": backend,
                "torch": torch.__version__, "hostname": socket.gethostname(),
                "device": torch.cuda.get_device_name(me.device) if me.cuda else "cpu",
                "seconds": time.monotonic() - t0}
    finally:
        dist.destroy_process_group()


def _die_with_parent() -> None:
    """Linux: SIGKILL this rank when the launcher dies, however it dies (a killed CLI must not
    leave ranks waiting in a collective until their timeout)."""
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:  # the launcher was already gone before prctl took effect
        os._exit(1)


def main(rank: int, cfg: dict[str, Any], port: int, out_dir: str) -> None:
    """Entry point of a spawned rank process."""
    _die_with_parent()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    try:
        result = _run(rank, cfg, port)
    except BaseException as exc:  # the launcher prints this rank's error in one line
        Path(out_dir, f"error-{rank}.txt").write_text(
            f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}", encoding="utf-8")
        raise SystemExit(1) from None
    if rank == 0:
        tmp = Path(out_dir, "result.json.tmp")
        tmp.write_text(json.dumps(result), encoding="utf-8")
        tmp.rename(Path(out_dir, "result.json"))
