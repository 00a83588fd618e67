"""nccl-tests' bandwidth definitions, so a measured row and an imported row mean the same thing.

From nccl-tests `doc/PERFORMANCE.md` and its `src/*.cu`: `size` is the largest buffer one rank
holds (the all-gather output, the reduce-scatter input, the all-to-all send buffer, the
all-reduce or broadcast buffer), `algbw = size / time` in GB/s of 1e9 bytes, and
`busbw = algbw * factor(op, n)`, the factor that turns it into what each link carried, "so
that it reflects how optimally the hardware is used, independent of the algorithm":

| op | factor |
| --- | --- |
| all_reduce | 2(n-1)/n |
| all_gather, reduce_scatter, alltoall | (n-1)/n |
| broadcast, reduce, sendrecv | 1 |
"""

from __future__ import annotations

# Ops the probe measures, in the order it reports them.
PROBE_OPS: tuple[str, ...] = ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast")

# Accepted spellings -> the name stored (nccl-tests' binary names without `_perf`).
ALIASES: dict[str, str] = {
    "all_reduce": "all_reduce", "allreduce": "all_reduce",
    "all_gather": "all_gather", "allgather": "all_gather",
    "reduce_scatter": "reduce_scatter", "reducescatter": "reduce_scatter",
    "alltoall": "alltoall", "all_to_all": "alltoall", "all2all": "alltoall",
    "broadcast": "broadcast", "bcast": "broadcast",
    "reduce": "reduce", "gather": "gather", "scatter": "scatter",
    "sendrecv": "sendrecv", "hypercube": "hypercube",
}

# Ops whose per-rank buffer is split into n equal parts: the count must divide by n.
_SPLIT = {"all_gather", "reduce_scatter", "alltoall", "gather", "scatter"}


def canonical_op(name: str) -> str | None:
    return ALIASES.get(name.strip().lower().removesuffix("_perf"))


def bus_factor(op: str, n: int) -> float:
    """nccl-tests' busbw / algbw for `op` on `n` ranks."""
    if n < 1:
        raise ValueError(f"ranks must be >= 1, got {n}")
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "alltoall", "gather", "scatter"):
        return (n - 1) / n
    if op in ("broadcast", "reduce", "sendrecv", "hypercube"):
        return 1.0
    raise ValueError(f"no bus factor for op {op!r}")


def algbw_gbps(nbytes: int, time_us: float) -> float:
    return nbytes / (time_us * 1e-6) / 1e9 if time_us > 0 else 0.0


def busbw_gbps(op: str, n: int, nbytes: int, time_us: float) -> float:
    return algbw_gbps(nbytes, time_us) * bus_factor(op, n)


def message_elements(op: str, nbytes: int, n: int, elem_size: int) -> int:
    """Elements in the largest per-rank buffer for a size in bytes, rounded down as nccl-tests
    does so that ops splitting the buffer over n ranks get equal parts (0 if too small)."""
    count = nbytes // elem_size
    if op in _SPLIT:
        count -= count % n
    return count


def ranks_from_ratio(op: str, algbw: float, busbw: float) -> int | None:
    """The n that nccl-tests' factor gives for busbw/algbw (an imported table that lists no
    rank lines still says how many ranks it ran on), or None where the factor is 1 or the
    numbers are too small to tell (nccl-tests prints two decimals)."""
    if algbw < 1.0 or op not in ("all_reduce", "all_gather", "reduce_scatter", "alltoall"):
        return None
    f = busbw / algbw
    k = f / 2 if op == "all_reduce" else f  # (n-1)/n
    if not 0 < k < 1:
        return None
    n = round(1 / (1 - k))
    # accept only when n reproduces the printed ratio to the printed precision
    return n if n >= 2 and abs(bus_factor(op, n) - f) <= 0.02 * max(f, 0.05) + 0.01 / algbw else None
