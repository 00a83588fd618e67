"""All-reduce cost models (latency-bandwidth, "alpha-beta") and TP traffic per token.

Ring all-reduce is a reduce-scatter then an all-gather: 2(n-1) steps, each moving S/n
bytes, so T = 2(n-1)*alpha + 2(n-1)/n * S/B (nccl-tests doc/PERFORMANCE.md derives the
same 2(n-1)/n bus-bandwidth factor). A tree reduces up and broadcasts down a depth
log2(n) tree: T = 2*log2(n)*alpha + 2*S/B, the bandwidth term being that of NCCL's
pipelined double binary tree, where each rank receives and sends about S in each half
(this term is this model's assumption, not a measured NCCL figure).

A tensor-parallel transformer layer all-reduces the hidden state twice (after attention
and after the MLP), so each token sends 2 x layers all-reduces of hidden x bytes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from infbench.specs.errors import SpecError
from infbench.specs.gpus import DEFAULT_INTERCONNECT_FRACTION, GpuSpec
from infbench.specs.models import ModelSpec

DEFAULT_ALPHA_S = 2e-6
"""Per-step latency of one all-reduce hop. Small-message all_reduce on 8 NVLink GPUs takes
roughly 20-30 us in nccl-tests, i.e. ~2 us for each of the 2(n-1) = 14 ring steps."""

ACTIVATION_BYTES = 2  # the hidden state travels in bf16/fp16 whatever the weight format


def ring_time(size_bytes: float, n: int, alpha_s: float, bandwidth: float) -> float:
    if n <= 1:
        return 0.0
    return 2 * (n - 1) * alpha_s + 2 * (n - 1) / n * size_bytes / bandwidth


def tree_time(size_bytes: float, n: int, alpha_s: float, bandwidth: float) -> float:
    if n <= 1:
        return 0.0
    return 2 * math.ceil(math.log2(n)) * alpha_s + 2 * size_bytes / bandwidth


@dataclass(frozen=True)
class AllReduceReport:
    n: int
    size_bytes: float
    alpha_s: float
    bandwidth: float  # bytes/s per direction used as B (link figure x achievable fraction)
    ring_latency_s: float
    ring_bandwidth_s: float
    ring_s: float
    tree_latency_s: float
    tree_bandwidth_s: float
    tree_s: float
    faster: str
    ring_bandwidth_dominates_above: float  # bytes: 2(n-1)a = 2(n-1)/n S/B  =>  S = n a B
    tree_bandwidth_dominates_above: float  # bytes: 2 log2(n) a = 2 S/B  =>  S = log2(n) a B
    ring_beats_tree_above: float  # bytes where the two totals cross
    # TP traffic, when a model was given
    allreduces_per_token: int | None
    message_bytes_per_token: int | None  # hidden x 2 bytes, one all-reduce
    bytes_per_token: int | None  # all all-reduces of one token: 2 x layers x hidden x 2
    link_bytes_per_token_per_gpu: float | None  # what each rank sends for them (ring)


def allreduce_report(
    n: int,
    size_bytes: float,
    gpu: GpuSpec | None = None,
    bandwidth: float | None = None,
    alpha_s: float = DEFAULT_ALPHA_S,
    model: ModelSpec | None = None,
) -> AllReduceReport:
    if isinstance(n, bool) or not isinstance(n, int) or n < 2:
        raise SpecError(f"n (ranks) must be an integer >= 2, got {n!r}")
    if size_bytes < 0:
        raise SpecError(f"size must be >= 0 bytes, got {size_bytes!r}")
    if alpha_s < 0:
        raise SpecError(f"alpha must be >= 0 seconds, got {alpha_s!r}")
    if bandwidth is None:
        if gpu is None:
            raise SpecError("give a gpu or a bandwidth for the all-reduce model")
        bandwidth = gpu.interconnect_bandwidth_per_direction * DEFAULT_INTERCONNECT_FRACTION
    if bandwidth <= 0:
        raise SpecError(f"bandwidth must be > 0 bytes/s, got {bandwidth!r}")
    steps = math.ceil(math.log2(n))
    ring_lat = 2 * (n - 1) * alpha_s
    ring_bw = 2 * (n - 1) / n * size_bytes / bandwidth
    tree_lat = 2 * steps * alpha_s
    tree_bw = 2 * size_bytes / bandwidth
    per_token = msg = link = count = None
    if model is not None:
        count = 2 * model.num_layers
        msg = model.hidden_size * ACTIVATION_BYTES
        per_token = count * msg
        link = per_token * 2 * (n - 1) / n
    return AllReduceReport(
        n=n,
        size_bytes=size_bytes,
        alpha_s=alpha_s,
        bandwidth=bandwidth,
        ring_latency_s=ring_lat,
        ring_bandwidth_s=ring_bw,
        ring_s=ring_lat + ring_bw,
        tree_latency_s=tree_lat,
        tree_bandwidth_s=tree_bw,
        tree_s=tree_lat + tree_bw,
        faster="ring" if ring_lat + ring_bw <= tree_lat + tree_bw else "tree",
        ring_bandwidth_dominates_above=n * alpha_s * bandwidth,
        tree_bandwidth_dominates_above=steps * alpha_s * bandwidth,
        ring_beats_tree_above=n * alpha_s * bandwidth * ((n - 1) - steps),
        allreduces_per_token=count,
        message_bytes_per_token=msg,
        bytes_per_token=per_token,
        link_bytes_per_token_per_gpu=link,
    )
