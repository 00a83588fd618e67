"""Two GPUs side by side for one planned workload: the spec-sheet figures that differ, which
of them the workload's regime depends on, and the ratio the roofline expects.

The roofline (`throughput.roofline_report`, the same calculator as `infbench plan roofline`)
says for each part of the workload what bounds it on each GPU: a memory-bound decode step
moves with HBM bandwidth, a compute-bound prefill with the dense tensor peak of the weight
format's compute type, the KV pool (and so the concurrency) with HBM capacity after the
weights, and a tensor-parallel step's all-reduces with the link. L2 size, power limit and SM
count are listed but not in the roofline: where two GPUs differ only there, the roofline
expects them equal and says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from infbench.specs.formats import FormatSpec, get_format
from infbench.specs.gpus import DEFAULT_BANDWIDTH_FRACTION, DEFAULT_FLOPS_FRACTION, GIB, GpuSpec
from infbench.specs.memory import DEFAULT_MAX_NUM_BATCHED_TOKENS, DEFAULT_MAX_NUM_SEQS
from infbench.specs.models import ModelSpec
from infbench.specs.roofline import step_time
from infbench.specs.throughput import RooflineReport, roofline_report


@dataclass(frozen=True)
class SpecRow:
    figure: str
    a: float | None
    b: float | None
    unit: str
    moves: str            # what part of serving the figure moves
    in_roofline: bool     # whether the calculators use it
    governs: bool         # whether this workload's regime depends on it

    @property
    def ratio(self) -> float | None:
        """b over a; None where either GPU's documents give no figure."""
        return self.b / self.a if self.a and self.b is not None else None


@dataclass(frozen=True)
class RegimeRow:
    part: str             # "decode step", "prefill step", "TTFT", "KV capacity", ...
    bound: str            # memory | compute | capacity | the ceiling that binds
    depends_on: str       # the spec figure that sets it
    a: float
    b: float
    unit: str
    expected: float | None  # b's speed or capacity over a's (>1: b better); None: a has none


@dataclass(frozen=True)
class GpuComparison:
    model: str
    gpu_a: str
    gpu_b: str
    tp: int
    weight_format: str
    kv_format: str
    batch: int
    context: int
    prompt_tokens: int
    specs: tuple[SpecRow, ...]
    regimes: tuple[RegimeRow, ...]
    b_slower_anywhere: bool  # some part of the workload expected slower or smaller on b
    fits: tuple[bool, bool]  # whether one `context`-token sequence fits beside the weights


def _bound_figure(bound: str, compute: str) -> str:
    return "HBM bandwidth" if bound == "memory" else f"dense {compute.upper()} tensor peak"


def _specs(a: GpuSpec, b: GpuSpec, compute: str, governing: set[str], tp: int) -> tuple[SpecRow, ...]:
    def l2(g: GpuSpec) -> float | None:
        return g.l2_bytes / (1 << 20) if g.l2_bytes is not None else None

    rows = [
        ("HBM capacity", a.memory_bytes / GIB, b.memory_bytes / GIB, "GiB",
         "the KV pool left after the weights: how many sequences fit (max concurrency)", True),
        ("HBM bandwidth", a.memory_bandwidth / 1e12, b.memory_bandwidth / 1e12, "TB/s",
         "memory-bound steps: decode below the compute ridge", True),
        ("dense BF16 tensor peak", a.bf16_flops / 1e12, b.bf16_flops / 1e12, "TFLOP/s",
         "compute-bound steps with 16-bit weights: prefill, large-batch decode", True),
        ("dense FP8 tensor peak", a.fp8_flops / 1e12 if a.fp8_flops else None,
         b.fp8_flops / 1e12 if b.fp8_flops else None, "TFLOP/s",
         "compute-bound steps with FP8 weights (none: FP8 runs at the BF16 peak)", True),
        (f"GPU link ({a.interconnect} / {b.interconnect})", a.interconnect_bandwidth / 1e9,
         b.interconnect_bandwidth / 1e9, "GB/s",
         "tensor-parallel all-reduces, each step (tp > 1 only)", tp > 1),
        ("L2 cache", l2(a), l2(b), "MiB",
         "not in the roofline: small working sets (short contexts' KV, activations) kept on chip",
         False),
        ("max power (TDP)", a.power_w, b.power_w, "W",
         "not in the roofline: clocks under sustained load; a lower cap throttles sooner", False),
        ("SMs", float(a.sm_count), float(b.sm_count), "",
         "not in the roofline apart from the peaks above: small kernels' parallelism", False),
    ]
    out = []
    for figure, va, vb, unit, moves, used in rows:
        key = figure.split(" (")[0]
        out.append(SpecRow(figure, va, vb, unit, moves, used, key in governing))
    return tuple(out)


def compare_gpus(
    model: ModelSpec,
    gpu_a: GpuSpec,
    gpu_b: GpuSpec,
    tp: int = 1,
    weight_format: str | FormatSpec = "bf16",
    kv_format: str | FormatSpec = "bf16",
    batch: int = 32,
    context: int = 2048,
    prompt_tokens: int = 2048,
    chunk_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
    max_num_seqs: int = DEFAULT_MAX_NUM_SEQS,
    gpu_memory_utilization: float = 0.9,
    bandwidth_fraction: float = DEFAULT_BANDWIDTH_FRACTION,
    flops_fraction: float = DEFAULT_FLOPS_FRACTION,
) -> GpuComparison:
    """The same workload planned on two GPUs with the same fractions: the spec figures and
    the roofline's ratio for each part (b over a; above 1, b is faster or holds more)."""
    reports: list[RooflineReport] = [
        roofline_report(model, g, tp, weight_format, kv_format, batch, context, prompt_tokens,
                        chunk_tokens, max_num_seqs, gpu_memory_utilization, bandwidth_fraction,
                        flops_fraction)
        for g in (gpu_a, gpu_b)]
    ra, rb = reports
    compute = get_format(weight_format).compute
    link = " + GPU link (all-reduce)" if ra.decode.comm_s > 0 else ""
    regimes = [
        RegimeRow(f"decode step (batch {batch}, context {context})", ra.decode.bound,
                  _bound_figure(ra.decode.bound, compute) + link, ra.decode_tokens_per_s,
                  rb.decode_tokens_per_s, "tokens/s", rb.decode_tokens_per_s / ra.decode_tokens_per_s),
        RegimeRow(f"prefill step ({prompt_tokens}-token prompt)", ra.prefill.bound,
                  _bound_figure(ra.prefill.bound, compute), ra.prefill.seconds * 1e3,
                  rb.prefill.seconds * 1e3, "ms", ra.prefill.seconds / rb.prefill.seconds),
        RegimeRow(f"TTFT ({ra.ttft_chunks} chunk(s) of {chunk_tokens})", ra.prefill.bound,
                  _bound_figure(ra.prefill.bound, compute), ra.ttft_s * 1e3, rb.ttft_s * 1e3,
                  "ms", ra.ttft_s / rb.ttft_s),
        RegimeRow(f"KV capacity ({context}-token sequences)", "capacity", "HBM capacity",
                  float(ra.ceilings.kv_capacity), float(rb.ceilings.kv_capacity), "sequences",
                  rb.ceilings.kv_capacity / ra.ceilings.kv_capacity
                  if ra.ceilings.kv_capacity else None),
    ]
    limits = [r.ceilings.limit for r in reports]
    if min(limits) > 0:
        # each GPU at the concurrency it can hold: where capacity, not speed, decides
        at = [step_time(model, g, tp, weight_format, kv_format,
                        decode_contexts=[context] * n, bandwidth_fraction=bandwidth_fraction,
                        flops_fraction=flops_fraction) for g, n in zip((gpu_a, gpu_b), limits,
                                                                        strict=True)]
        tps = [n / s.seconds for n, s in zip(limits, at, strict=True)]
        regimes.append(RegimeRow(
            f"decode at each GPU's concurrency limit ({limits[0]} / {limits[1]})",
            f"{ra.ceilings.lowest} / {rb.ceilings.lowest}", "HBM capacity and bandwidth",
            tps[0], tps[1], "tokens/s", tps[1] / tps[0]))
    governing = {"HBM capacity", _bound_figure(ra.decode.bound, compute),
                 _bound_figure(ra.prefill.bound, compute)}
    if tp > 1:
        governing.add("GPU link")
    return GpuComparison(
        model=model.name, gpu_a=gpu_a.name, gpu_b=gpu_b.name, tp=tp,
        weight_format=ra.weight_format, kv_format=ra.kv_format, batch=batch, context=context,
        prompt_tokens=prompt_tokens, specs=_specs(gpu_a, gpu_b, compute, governing, tp),
        regimes=tuple(regimes),
        b_slower_anywhere=any(r.expected is not None and r.expected < 0.995 for r in regimes),
        fits=(ra.ceilings.kv_capacity > 0, rb.ceilings.kv_capacity > 0))
